"""Invariant 1 as a user checks it: sectionmark's executables equal the plain pipeline's, byte for byte.

The plain pipeline is what a user runs without sectionmark: ``aot.export`` with
its defaults (torch; its locations without the section names that the hooks add) or ``jax.jit(f).lower(...)`` (JAX), MLIR text with its
locations, and ``iree.compiler.compile_str`` with the same flags. Compared:
every executable binary in the .vmfb (whole ELF: code, relocations, debug
info, embedded source locations), dispatch and executable counts, outputs.
Also the same unmarked MLIR compiled with markers on and off.

GPU targets need no GPU to compile: the same comparisons for ``vulkan-spirv``
(SPIR-V), ``cuda`` (PTX) and ``rocm`` (HSACO), with sectionmark's default
architecture of each target and with another one a user would pick.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pytest

import sectionmark as sm
import sectionmark.compiler as smc
from sectionmark.compiler.targets import target_flags
from sectionmark.locations import strip_sectionmark_names
from nanogpt_builders import jax_gpt, torch_gpt
from tiny_profiles import TWO_DEVICES
from test_compiler import dump, executables, fused_source, run, vm_call_count


# (target, extra flags) -> the suffix of every executable's name in the .vmfb: the binary format
# that target must produce (so a target that silently built CPU code would fail).
GPU_TARGETS = {
    ("vulkan-spirv", ()): "_vulkan_spirv_fb.fb",  # --iree-vulkan-target=vp_android_baseline_2022
    ("vulkan-spirv", ("--iree-vulkan-target=ampere",)): "_vulkan_spirv_fb.fb",
    ("cuda", ()): "_cuda_nvptx_fb.fb",  # sm_80
    ("cuda", ("--iree-cuda-target=sm_89",)): "_cuda_nvptx_fb.fb",
    ("rocm", ()): "_rocm_hsaco_fb.fb",  # gfx942
    ("rocm", ("--iree-rocm-target=gfx90a",)): "_rocm_hsaco_fb.fb",
}
DEFAULT_GPU_TARGETS = [target for target, extra in GPU_TARGETS if not extra]


def gpu_target_id(target: tuple[str, tuple[str, ...]]) -> str:
    name, extra = target
    return "-".join([name, *(flag.split("=")[1] for flag in extra)])


def plain_compile(mlir_text: str, input_type: str, target: str = "llvm-cpu", extra_args: tuple[str, ...] = (),
                  device_flags: Optional[Sequence[str]] = None) -> bytes:
    """The user's own compile: iree.compiler with sectionmark's flags for ``target``, nothing else.

    ``device_flags``: the device flags instead of ``target``'s (several devices: one
    ``--iree-hal-target-device`` each, tests/helpers/parallel_gpt.py).
    """
    import iree.compiler

    devices = target_flags(target) if device_flags is None else device_flags
    flags = [*devices, f"--iree-input-type={input_type}", *extra_args]
    return iree.compiler.compile_str(mlir_text, extra_args=flags)


def assert_same_executables(ours: bytes, plain: bytes, tmp_path: Path, binary_suffix: str = "") -> None:
    """Same executables, byte for byte, and the same dispatches; ``binary_suffix``: the format they must have."""
    ours_exes, plain_exes = executables(ours), executables(plain)
    assert ours_exes and ours_exes.keys() == plain_exes.keys()
    if binary_suffix:
        assert any(name.endswith(binary_suffix) for name in ours_exes), sorted(ours_exes)
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


def test_two_device_module_matches_the_plain_multi_device_pipeline(tmp_path):
    """``sm.compile(devices=2)``: the executables of the plain pipeline with the same multi-device flags (the
    flags a user of iree-turbine spells: ``--iree-hal-target-device=local[0] --iree-hal-target-device=local[1]``),
    the same outputs; one executable per device in the module, both listed."""
    import iree.compiler

    source = tmp_path / "two.mlir"  # a file, as a user compiles one: its name is in the executables' debug info
    source.write_text(TWO_DEVICES)
    ours = sm.compile(source, devices=2, quiet=True)
    plain = iree.compiler.compile_file(str(source), extra_args=[*target_flags("llvm-cpu", 2), "--iree-input-type=auto"])
    assert target_flags("llvm-cpu", 2)[:2] == ("--iree-hal-target-device=local[0]", "--iree-hal-target-device=local[1]")
    assert_same_executables(ours.vmfb, plain, tmp_path)
    spelled = sm.compile(TWO_DEVICES, extra_args=["--iree-hal-target-device=local[1]"], quiet=True)  # by hand
    assert {b.device for b in spelled.section_map.command_buffers} == {0, 1}


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


@pytest.fixture(scope="module")
def torch_nanogpt():
    """The marked torch nanoGPT, its sectionmark export and the plain pipeline's MLIR text."""
    model, args = torch_gpt(True)
    return sm.torch.export(model, args=args), _torch_plain_text(model, args)


@pytest.mark.parametrize("target", list(GPU_TARGETS), ids=gpu_target_id)
def test_torch_gpu_executables_match_the_plain_pipeline(torch_nanogpt, target, tmp_path):
    exported, plain_text = torch_nanogpt
    name, extra = target
    ours = sm.compile(exported, target=name, extra_args=extra)
    plain = plain_compile(plain_text, "torch", name, extra)
    assert_same_executables(ours.vmfb, plain, tmp_path, GPU_TARGETS[target])


@pytest.mark.parametrize("target", DEFAULT_GPU_TARGETS)
def test_jax_gpu_executables_match_the_plain_jitted_lowering(target, tmp_path):
    jax = pytest.importorskip("jax")
    forward, tokens = jax_gpt()
    plain = plain_compile(jax.jit(forward).lower(tokens).as_text(debug_info=True), "stablehlo", target)
    ours = sm.compile(sm.jax.export(forward, tokens), target=target)
    assert_same_executables(ours.vmfb, plain, tmp_path, GPU_TARGETS[target, ()])


@pytest.mark.parametrize("target", DEFAULT_GPU_TARGETS)
def test_unmarked_model_gpu_executables_with_markers_on_and_off(target, tmp_path):
    model, args = torch_gpt(False)
    exported = sm.torch.export(model, args=args)
    on, off = sm.compile(exported, target=target), sm.compile(exported, target=target, markers=False)
    assert on.section_map is not None and off.section_map is None
    assert_same_executables(on.vmfb, off.vmfb, tmp_path, GPU_TARGETS[target, ()])
