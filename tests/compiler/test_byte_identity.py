"""Invariant 1 as a user checks it: sectionmark's executables equal the plain pipeline's, byte for byte.

The plain pipeline is what a user runs without sectionmark: ``aot.export`` with
its defaults (torch; its locations without the section names that the hooks add) or ``jax.jit(f).lower(...)`` (JAX), MLIR text with its
locations, and ``iree.compiler.compile_str`` with the same flags. Compared:
every executable binary in the .vmfb (whole ELF: code, relocations, debug
info, embedded source locations), dispatch and executable counts, outputs.
Also the same unmarked MLIR compiled with markers on and off.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import sectionmark as sm
import sectionmark.compiler as smc
from sectionmark.compiler.targets import target_flags
from sectionmark.locations import strip_sectionmark_names
from nanogpt_builders import jax_gpt, torch_gpt
from test_compiler import dump, executables, fused_source, run, vm_call_count


def plain_compile(mlir_text: str, input_type: str) -> bytes:
    """The user's own compile: iree.compiler with sectionmark's flags for llvm-cpu, nothing else."""
    import iree.compiler

    return iree.compiler.compile_str(mlir_text, extra_args=[*target_flags("llvm-cpu"), f"--iree-input-type={input_type}"])


def assert_same_executables(ours: bytes, plain: bytes, tmp_path: Path) -> None:
    ours_exes, plain_exes = executables(ours), executables(plain)
    assert ours_exes and ours_exes.keys() == plain_exes.keys()
    for name in plain_exes:
        assert ours_exes[name] == plain_exes[name], f"{name} differs ({len(ours_exes[name])} vs {len(plain_exes[name])} bytes)"
    ours_asm, plain_asm = dump(ours, tmp_path, "disassembly"), dump(plain, tmp_path, "disassembly")
    for call in ("hal.command_buffer.dispatch", "hal.executable.create"):
        assert vm_call_count(ours_asm, call) == vm_call_count(plain_asm, call) > 0, call


def _torch_plain_text(model, args, **options) -> str:
    """What plain iree-turbine gives the model: ``aot.export``'s locations without sectionmark's names.

    (``aot.export`` of a marked model keeps its sections now: the hooks install themselves.)
    """
    from iree.turbine import aot

    text = aot.export(model, args=args, **options).mlir_module.get_asm(enable_debug_info=True)
    return strip_sectionmark_names(text)


def _cnn():
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, channels: int):
            super().__init__()
            self.conv, self.bn = nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels)

        def forward(self, x):
            with sm.section("Conv"):
                y = self.conv(x)
            with sm.section("BatchNorm"):
                y = self.bn(y)
            with sm.section("ReLU"):
                y = torch.relu(y)
            return x + y

    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList(Block(8) for _ in range(2))

        def forward(self, x):
            for index, block in enumerate(self.blocks):
                with sm.section(f"Block {index}"):
                    x = block(x)
            return x.mean((2, 3))

    torch.manual_seed(0)
    model = CNN().eval()
    return model, (torch.randn(1, 8, 16, 16),)


@pytest.mark.parametrize("build", [lambda: torch_gpt(True), _cnn], ids=["nanogpt", "cnn"])
def test_torch_model_matches_the_plain_turbine_pipeline(build, tmp_path):
    model, args = build()
    ours = sm.compile(sm.torch.export(model, args=args))
    plain = plain_compile(_torch_plain_text(model, args), "torch")
    assert_same_executables(ours.vmfb, plain, tmp_path)
    host_args = [arg.numpy() for arg in args]
    np.testing.assert_array_equal(run(ours.vmfb, "main", *host_args)[0], run(plain, "main", *host_args)[0])


def test_non_strict_export_matches_the_plain_non_strict_pipeline(tmp_path):
    model, args = torch_gpt(True)
    ours = sm.compile(sm.torch.export(model, args=args, strict_export=False))
    plain = plain_compile(_torch_plain_text(model, args, strict_export=False), "torch")
    assert_same_executables(ours.vmfb, plain, tmp_path)


def test_unmarked_model_compiles_identically_with_markers_on_and_off(tmp_path):
    model, args = torch_gpt(False)
    exported = sm.torch.export(model, args=args)
    on, off = sm.compile(exported), sm.compile(exported, markers=False)
    assert on.section_map is not None and off.section_map is None
    assert_same_executables(on.vmfb, off.vmfb, tmp_path)


def test_fused_three_section_mlir_matches_plain_iree_compile(tmp_path):
    import iree.compiler

    # One path for both: IREE names an unnamed module after its source file, and ops
    # without a location of their own get the file's, which the executables embed.
    source = tmp_path / "fused.mlir"
    source.write_text(fused_source(True))
    marked = smc.compile(source).vmfb
    source.write_text(fused_source(False))
    plain = iree.compiler.compile_file(str(source), extra_args=list(target_flags("llvm-cpu")))
    assert_same_executables(marked, plain, tmp_path)  # sections vs none
    assert_same_executables(smc.compile(source).vmfb, plain, tmp_path)  # markers on, no sections
    assert_same_executables(smc.compile(source, markers=False).vmfb, plain, tmp_path)


def test_jax_export_matches_the_plain_jitted_lowering(tmp_path):
    jax = pytest.importorskip("jax")
    forward, tokens = jax_gpt()
    plain = plain_compile(jax.jit(forward).lower(tokens).as_text(debug_info=True), "stablehlo")
    ours = sm.compile(sm.jax.export(forward, tokens))
    assert_same_executables(ours.vmfb, plain, tmp_path)
    np.testing.assert_array_equal(run(ours.vmfb, "main", tokens)[0], run(plain, "main", tokens)[0])
