"""PyTorch export: section paths reach exactly the ops produced inside them."""

import numpy as np
import pytest
import torch

import sectionmark as sm
from sectionmark.importers import torch as torch_importer
from sectionmark.locations import section_path

ODD_NAMES = ['quo"te', "back\\slash", "new\nline", "emoji 🤖", "n" * 1000]


class Stack(torch.nn.Module):
    """exp (unmarked) -> 4 x [Block i: sin, MLP: cos] -> tanh (unmarked)."""

    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(4))

    @sm.section("MLP")
    def mlp(self, x):
        return torch.cos(x)

    def forward(self, x):
        x = torch.exp(x)
        for i in range(4):
            with sm.section(f"Block {i}"):
                x = torch.sin(x * self.scale)
                x = self.mlp(x)
        return torch.tanh(x)


def op_paths(exported, op_name):
    """Section path of every op called ``op_name``, in program order."""
    paths = []

    def visit(operation):
        for region in operation.regions:
            for block in region.blocks:
                for op in block.operations:
                    if op.operation.name == op_name:
                        paths.append(section_path(str(op.location)))
                    visit(op.operation)

    visit(exported.module.operation)
    return paths


@pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])
def test_every_op_carries_exactly_its_path(strict):
    exported = sm.torch.export(Stack(), args=(torch.randn(4),), strict=strict)
    blocks = [(f"Block {i}",) for i in range(4)]
    assert op_paths(exported, "torch.aten.sin") == blocks
    assert op_paths(exported, "torch.aten.cos") == [block + ("MLP",) for block in blocks]
    assert op_paths(exported, "torch.aten.exp") == [None]
    assert op_paths(exported, "torch.aten.tanh") == [None]
    assert set(exported.sections) == set(blocks) | {block + ("MLP",) for block in blocks}


class OddNames(torch.nn.Module):
    def forward(self, x):
        for name in ODD_NAMES:
            with sm.section(name):
                x = torch.sin(x)
        with sm.section(ODD_NAMES[0]):
            with sm.section("a/b"):
                x = torch.cos(x)
        return x


def test_odd_names_survive_the_mlir_text_byte_exactly(tmp_path):
    exported = sm.torch.export(OddNames(), args=(torch.randn(3),))
    saved = exported.save_mlir(tmp_path / "odd.mlir")
    from sectionmark.exported import find_sections

    expected = [(name,) for name in ODD_NAMES] + [(ODD_NAMES[0], "a/b")]
    assert list(find_sections(saved.read_text(encoding="utf-8"))) == expected


class Modules(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(2)])
        self.head = torch.nn.Linear(4, 4)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        with sm.section("Head"):
            return self.head(x)


def test_auto_modules_names_unmarked_ops_and_explicit_sections_win():
    exported = sm.torch.export(Modules(), args=(torch.randn(2, 4),), auto_modules=True)
    assert set(exported.sections) == {("blocks.0",), ("blocks.1",), ("Head",)}
    plain = sm.torch.export(Modules(), args=(torch.randn(2, 4),))
    assert plain.sections == (("Head",),)


def test_importer_hook_is_scoped_and_plain_aot_export_is_untouched():
    from iree.compiler.extras.fx_importer import ContextCache
    from iree.turbine import aot

    before = ContextCache.get_node_location
    sm.torch.export(Stack(), args=(torch.randn(4),))
    assert ContextCache.get_node_location is before
    text = str(aot.export(Stack(), args=(torch.randn(4),), strict_export=True).mlir_module)
    assert "sectionmark" not in text
    with torch_importer.section_locations():
        assert ContextCache.get_node_location is not before
    assert ContextCache.get_node_location is before


def test_exported_mlir_compiles_for_llvm_cpu_and_runs():
    import iree.compiler

    model, x = Stack(), torch.randn(4)
    exported = sm.torch.export(model, args=(x,))
    vmfb = iree.compiler.compile_str(exported.mlir, target_backends=["llvm-cpu"], input_type="torch")
    result = sm.load(vmfb).main(x.numpy()).to_host()
    np.testing.assert_allclose(result, model(x).detach().numpy(), rtol=1e-5, atol=1e-6)
