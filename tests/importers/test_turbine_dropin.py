"""sectionmark as a drop-in for iree-turbine users.

Every style ``aot.export`` takes (nn.Module, ExportedProgram,
FxProgramsBuilder with two functions, CompiledModule class, aot.jittable),
exported with ``sm.torch.export``, with ``sm.torch.sections()`` around the
user's own ``aot.export`` and with plain ``aot.export`` alone: the same section
locations, and executables byte-identical to the plain turbine pipeline's
(the same program without sectionmark's location names). The export is turbine's
ExportOutput; the module is never printed unless asked for.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest
import torch
from iree.turbine import aot
from test_byte_identity import assert_same_executables, plain_compile
from test_torch_import import STACK_SECTIONS, Stack, Unmarked, assert_stack_paths, locations

import sectionmark as sm
from sectionmark.artifacts import read_section_map
from sectionmark.errors import SectionmarkError
from sectionmark.importers.exported import find_sections
from sectionmark.locations import strip_sectionmark_names
from sectionmark.section_path import LOC_PREFIX


@dataclass(frozen=True)
class Style:
    """One way to hand a program to ``aot.export``: what to pass, and the sections it must carry."""

    name: str
    build: Callable[[torch.nn.Module, torch.Tensor], tuple[Any, dict]]
    sections: frozenset


def _module(model, x):
    return model, dict(args=(x,))


def _exported_program(model, x):
    return torch.export.export(model, (x,)), {}


def _builder(model, x):
    builder = aot.FxProgramsBuilder(model)

    @builder.export_program(args=(x,))
    def prefill(module, x):
        return module(x)

    @builder.export_program(args=(x,))
    def decode(module, x):
        with sm.section("Decode step"):
            return module(x) * 2

    return builder, {}


def _compiled_module(model, x):
    class Net(aot.CompiledModule):
        main = torch.export.export(model, (x,))

    return Net, {}


DECODE = {("Decode step",)} | {("Decode step",) + path for path in STACK_SECTIONS}
STYLES = [
    Style("nn.Module", _module, frozenset(STACK_SECTIONS)),
    Style("ExportedProgram", _exported_program, frozenset(STACK_SECTIONS)),
    Style("FxProgramsBuilder", _builder, frozenset(STACK_SECTIONS | DECODE)),
    Style("CompiledModule", _compiled_module, frozenset(STACK_SECTIONS)),
]


def quiet_aot_export(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return aot.export(*args, **kwargs)


DECORATOR_NUMBER = re.compile(r"<decorator-gen-\d+>")


def same_code_locations(module, other) -> bool:
    """Whether the two modules' ops have the same locations: numbered per builder, ``decorator-gen`` frames aside."""
    def normalized(m):
        return [(name, DECORATOR_NUMBER.sub("<decorator-gen>", text)) for name, text in locations(m)]

    return normalized(module) == normalized(other)


@pytest.mark.parametrize("style", STYLES, ids=[style.name for style in STYLES])
def test_every_export_style_keeps_sections_and_the_plain_executables(style, tmp_path):
    model, x = Stack(), torch.randn(4)
    source, options = style.build(model, x)  # built anew for each export: turbine exports a builder once
    ours = sm.torch.export(source, **options)
    with sm.torch.sections():
        source, options = style.build(model, x)
        scoped = quiet_aot_export(source, **options)
    source, options = style.build(model, x)
    plain = quiet_aot_export(source, **options)  # no scope: the hooks installed themselves

    compiled, compiled_scoped, compiled_plain = sm.compile(ours), sm.compile(scoped), sm.compile(plain)
    assert set(ours.sections) == set(compiled_plain.section_map.sections) == style.sections
    assert same_code_locations(scoped.mlir_module, ours.mlir_module)
    assert same_code_locations(plain.mlir_module, ours.mlir_module)
    # What plain iree-turbine gives this model: its locations without sectionmark's names.
    unmarked_text = strip_sectionmark_names(plain.mlir_module.get_asm(enable_debug_info=True))
    assert LOC_PREFIX not in unmarked_text
    unmarked_vmfb = plain_compile(unmarked_text, "torch")
    assert (compiled.section_map.reached == compiled_scoped.section_map.reached == compiled_plain.section_map.reached
            == compiled.section_map.sections)
    for vmfb in (compiled.vmfb, compiled_scoped.vmfb, compiled_plain.vmfb):
        assert_same_executables(vmfb, unmarked_vmfb, tmp_path)


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "non-strict"])
def test_aot_export_of_a_marked_model_warns_of_nothing_an_unmarked_one_does_not(strict):
    def warnings_of(model) -> set[tuple[type, str]]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            aot.export(model, args=(torch.randn(4),), strict_export=strict)
        return {(warning.category, str(warning.message)) for warning in caught}

    assert warnings_of(Stack()) <= warnings_of(Unmarked())


OPTIONS = {
    "positional example args": ((torch.randn(3, 4),), {}),
    "names": ((), dict(args=(torch.randn(3, 4),), module_name="net", function_name="forward_fn")),
    "symbolic shapes": ((), dict(args=(torch.randn(3, 4),), dynamic_shapes={"x": {0: torch.export.Dim("n")}},
                                 import_symbolic_shape_expressions=True)),
    "argument device": ((), dict(args=(torch.randn(3, 4),), arg_device={0: aot.DeviceAffinity(1)})),
    "non-strict": ((), dict(args=(torch.randn(3, 4),), strict_export=False)),
}


@pytest.mark.parametrize("example_args, options", OPTIONS.values(), ids=list(OPTIONS))
def test_aot_export_arguments_give_the_module_aot_export_gives(example_args, options):
    model = Stack()
    ours = sm.torch.export(model, *example_args, **options)
    plain = quiet_aot_export(model, *example_args, **options)
    assert set(ours.sections) == STACK_SECTIONS
    assert ours.mlir_module.get_asm() == plain.mlir_module.get_asm()  # without locations: the same ops


def test_the_export_is_turbines_export_output_with_sections(tmp_path):
    model, x = Stack(), torch.randn(4)
    exported = sm.torch.export(model, args=(x,))
    assert isinstance(exported, aot.ExportOutput) and isinstance(exported, sm.SectionedExport)
    exported.verify()

    bytecode, text = exported.save_mlir(tmp_path / "m.mlirbc"), exported.save_mlir(tmp_path / "m.mlir")
    assert bytecode.read_bytes().startswith(b"ML\xefR")  # MLIR bytecode's magic number
    assert set(find_sections(text.read_text(encoding="utf-8"))) == set(exported.sections)  # text keeps locations
    from_file = sm.compile(bytecode)
    assert from_file.section_map.sections == sm.compile(exported).section_map.sections

    plain = quiet_aot_export(model, args=(x,))
    plain.compile(tmp_path / "plain.vmfb")
    assert exported.compile(tmp_path / "ours.vmfb") is None  # as turbine: writes, returns nothing
    ours = (tmp_path / "ours.vmfb").read_bytes()
    assert_same_executables(ours, (tmp_path / "plain.vmfb").read_bytes(), tmp_path)
    assert read_section_map(tmp_path / "ours.vmfb").sections == list(exported.sections)
    in_memory = exported.compile(None)
    assert bytes(in_memory.map_memory()) == ours
    with pytest.raises(SectionmarkError, match="one target at a time"):
        exported.compile(None, target_backends=("llvm-cpu", "vmvx"))


class Wide(torch.nn.Module):
    """Two 512x512 layers: 2 MiB of weights, a thousand times its MLIR without them."""

    def __init__(self):
        super().__init__()
        self.first, self.second = torch.nn.Linear(512, 512), torch.nn.Linear(512, 512)

    def forward(self, x):
        with sm.section("First"):
            x = torch.relu(self.first(x))
        with sm.section("Second"):
            return self.second(x)


WIDE_SECTIONS = (("First",), ("Second",))


@pytest.fixture
def printing_refused(monkeypatch):
    """Any print of an MLIR operation (text of the module, weights included) fails the test."""
    from iree.compiler import ir

    def refuse(*args, **kwargs):
        raise AssertionError("an MLIR operation was printed")

    for owner in (ir._OperationBase, ir.Operation, ir.OpView):
        for name in ("get_asm", "print", "__str__"):
            if name in vars(owner):
                monkeypatch.setattr(owner, name, refuse)


def test_export_sections_and_compile_never_print_the_module(printing_refused, tmp_path):
    model, x = Wide().eval(), torch.randn(2, 512)
    exported = sm.torch.export(model, args=(x,))
    assert exported.sections == WIDE_SECTIONS
    assert sm.compile(exported).section_map.reached == list(WIDE_SECTIONS)
    assert sm.compile(exported.save_mlir(tmp_path / "wide.mlirbc")).section_map.reached == list(WIDE_SECTIONS)
    with sm.torch.sections():
        output = quiet_aot_export(model, args=(x,))
    assert sm.compile(output).section_map.reached == list(WIDE_SECTIONS)
    with pytest.raises(AssertionError, match="printed"):
        exported.mlir  # text only on request


# --------------------------------------------------------------------------- aot.jittable


def test_jittable_functions_of_a_compiled_module_keep_their_sections(tmp_path):
    """Traced with turbine's procedural tracing, which calls the ``isinstance`` of the MLIR bindings that IREE 3.13
    dropped: the import hooks give it back (sectionmark.importers.torch.hooks)."""
    model, x = Stack(), torch.randn(4)

    class Net(aot.CompiledModule):
        params = aot.export_parameters(model)

        def main(self, x=aot.AbstractTensor(4)):
            return aot.jittable(model.forward)(x)

    ours = sm.torch.export(Net)
    with sm.torch.sections():
        scoped = quiet_aot_export(Net)
    plain = quiet_aot_export(Net)
    assert_stack_paths(ours.mlir_module)
    assert_stack_paths(scoped.mlir_module)
    plain_text = plain.mlir_module.get_asm(enable_debug_info=True)
    assert LOC_PREFIX not in plain_text
    compiled = sm.compile(scoped)
    assert compiled.section_map.reached == compiled.section_map.sections
    assert_same_executables(compiled.vmfb, plain_compile(plain_text, "torch"), tmp_path)
    result = sm.load(compiled).main(x.numpy()).to_host()
    np.testing.assert_allclose(result, model(x).detach().numpy(), rtol=1e-6, atol=1e-6)


# --------------------------------------------------------------------------- external parameters


@dataclass
class ExternalModel:
    """``Wide`` exported with its weights in .irpa files: what bench_scale does to a 1B model."""

    exported: Any
    compiled: Any
    x: np.ndarray
    expected: np.ndarray
    parameter_bytes: int


def _externalized(tmp_path, scopes: dict[str, str]) -> ExternalModel:
    """``scopes``: submodule name -> parameter scope; each submodule's weights in ``<name>.irpa``."""
    torch.manual_seed(0)
    model, x = Wide().eval(), torch.randn(2, 512)
    expected = model(x).detach().numpy()
    for name, scope in scopes.items():
        aot.externalize_module_parameters(getattr(model, name), external_scope=scope, prefix=name)
        aot.save_module_parameters(tmp_path / f"{name}.irpa", getattr(model, name), prefix=name)
    exported = sm.torch.export(model, args=(x,))
    parameter_bytes = sum(parameter.numel() * parameter.element_size() for parameter in model.parameters())
    return ExternalModel(exported, sm.compile(exported), x.numpy(), expected, parameter_bytes)


@pytest.fixture(scope="module")
def external(tmp_path_factory):
    directory = tmp_path_factory.mktemp("external")
    return directory, _externalized(directory, {"first": "model", "second": "model"})


def test_external_parameters_load_and_profile_with_sections(external, capsys):
    from invariants import assert_profile_invariants

    from sectionmark.cli import main

    directory, model = external
    text_bytes = model.exported.save_mlir(directory / "wide.mlir").stat().st_size
    assert text_bytes < 0.01 * model.parameter_bytes, f"{text_bytes} bytes of MLIR, {model.parameter_bytes} of weights"
    assert model.compiled.section_map.reached == list(WIDE_SECTIONS)
    files = [f"model={directory / 'first.irpa'}", f"model={directory / 'second.irpa'}"]  # one scope, two files

    result = sm.load(model.compiled, parameters=files).main(model.x).to_host()
    np.testing.assert_allclose(result, model.expected, rtol=1e-5, atol=1e-5)
    session = sm.profile(model.compiled, args=(model.x,), iterations=3, warmup=1, parameters=files, quiet=True)
    assert_profile_invariants(session)
    assert {row.path for row in session.sections if row.dispatched} >= set(WIDE_SECTIONS)

    vmfb = model.compiled.save(directory / "wide.vmfb")
    np.save(directory / "x.npy", model.x)
    flags = [flag for file in files for flag in ("--parameters", file)]
    assert main(["profile", str(vmfb), "--input", str(directory / "x.npy"), "-n", "2", "--warmup", "0", *flags]) == 0
    assert "First" in capsys.readouterr().out


def test_recording_of_a_model_with_external_parameters(external, tmp_path, capsys):
    """sm.record replays with the module's parameter files; a saved recording names them for the CLI."""
    from sectionmark.cli import main
    from sectionmark.workflows.replay_module import ResultArgument

    directory, model = external
    files = [f"model={directory / 'first.irpa'}", f"model={directory / 'second.irpa'}"]
    module = sm.load(model.compiled, parameters=files)
    with sm.record(module) as recording:
        first = module.main(model.x)
        second = module.main(first)  # stays on the device
    np.testing.assert_array_equal(recording.replay(), second.to_host())
    replay = recording.profile(iterations=2, warmup=0, quiet=True)
    assert recording.calls[1].arguments == (ResultArgument(0, 0),)
    assert replay.functions[0].calls_per_replay == 2 and replay.function("main").calls == 4
    assert {row.path for row in replay.function("main").sections if row.dispatched} >= set(WIDE_SECTIONS)
    saved = recording.save(tmp_path / "recording")
    assert main(["profile", str(saved), "-n", "1", "--warmup", "0"]) == 0
    assert "First" in capsys.readouterr().out


def test_unscoped_parameter_files_serve_the_modules_one_scope(external):
    """turbine's weights are in scope "model": files given without a scope are served there (IREE refused them)."""
    directory, model = external
    module = sm.load(model.compiled, parameters=[directory / "first.irpa", str(directory / "second.irpa")])
    np.testing.assert_allclose(module.main(model.x).to_host(), model.expected, rtol=1e-5, atol=1e-5)
    assert module.parameters == [("model", directory / "first.irpa"), ("model", directory / "second.irpa")]


def test_parameters_of_several_scopes(tmp_path):
    model = _externalized(tmp_path, {"first": "encoder", "second": "head"})
    files = [f"encoder={tmp_path / 'first.irpa'}", f"head={tmp_path / 'second.irpa'}"]
    result = sm.load(model.compiled, parameters=files).main(model.x).to_host()
    np.testing.assert_allclose(result, model.expected, rtol=1e-5, atol=1e-5)


def test_missing_or_wrong_parameters_are_one_clear_error(external, tmp_path, capsys):
    from sectionmark.cli import main

    directory, model = external
    with pytest.raises(SectionmarkError, match="reads external parameters: pass parameters="):
        sm.load(model.compiled)
    with pytest.raises(SectionmarkError, match="parameter file not found: .*nothing.irpa"):
        sm.load(model.compiled, parameters=tmp_path / "nothing.irpa")
    with pytest.raises(SectionmarkError, match="no parameter found in index with key 'second.weight'"):  # in scope model
        sm.load(model.compiled, parameters=str(directory / "first.irpa"))
    not_parameters = tmp_path / "weights.bin"
    not_parameters.write_bytes(b"\0" * 64)
    with pytest.raises(SectionmarkError, match="cannot read parameter file .*unsupported file format"):
        sm.load(model.compiled, parameters=f"model={not_parameters}")
    with pytest.raises(SectionmarkError, match="iree-benchmark-module failed on local-task: .*scopes like 'model'"):
        sm.profile(model.compiled, args=(model.x,), iterations=1, warmup=0,
                   parameters=f"other={directory / 'first.irpa'}", quiet=True)
    vmfb = model.compiled.save(tmp_path / "wide.vmfb")
    assert main(["profile", str(vmfb), "--parameters", str(tmp_path / "nothing.irpa")]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "parameter file not found" in error
