"""`sectionmark profile --device cuda|hip|vulkan` on a machine without those devices.

The command lines are checked as built; the failures are the real tools'
(the tracing iree-benchmark-module under a real headless capture for CUDA and
HIP, the plain one with Vulkan's profiling families), turned into one line.
Where a machine has such a device or driver, its failure test is skipped
(tests/gpu/test_gpu.py and tests/gpu/test_vulkan.py run there instead).
"""

from __future__ import annotations

import ctypes.util
from pathlib import Path

import numpy as np
import pytest

import sectionmark.workflows.runner as runner
from sectionmark.cli import main
from sectionmark.errors import SectionmarkError
from sectionmark.workflows.measure import profile

MLIR = """
func.func @main(%x: tensor<4096xf32>) -> tensor<4096xf32> {
  %s = math.sin %x : tensor<4096xf32> loc("sectionmark:Block/Attention"("t.py":1:0))
  %c = math.cos %s : tensor<4096xf32> loc("sectionmark:Block/MLP"("t.py":2:0))
  return %c : tensor<4096xf32>
}
"""
X = np.linspace(0, 1, 4096, dtype=np.float32)


def has_library(*names: str) -> bool:
    return any(ctypes.util.find_library(name) for name in names)


@pytest.fixture(scope="module")
def modules(tmp_path_factory) -> dict[str, Path]:
    """The tiny model compiled for each target (no device needed to compile)."""
    import sectionmark as sm

    folder = tmp_path_factory.mktemp("targets")
    return {target: sm.compile(MLIR, target=target).save(folder / f"{target}.vmfb")
            for target in ("llvm-cpu", "cuda", "rocm", "vulkan-spirv")}


def test_command_lines_per_device(tmp_path):
    vmfb, inputs, out = tmp_path / "m.vmfb", [tmp_path / "arg0.npy"], tmp_path / "run.out"

    def command(device: str) -> list[str]:
        return runner.benchmark_command(vmfb, "main", inputs, device=device, calls=7, profile_path=out)

    common = {f"--module={vmfb}", "--function=main", f"--input=@{inputs[0]}", "--benchmark_min_time=1x",
              "--benchmark_repetitions=7", "--benchmark_format=json"}
    for device, flag in [("cuda", "--cuda_tracing=2"), ("cuda://1", "--cuda_tracing=2"), ("hip", "--hip_tracing=2")]:
        line = command(device)
        assert Path(line[0]).parent.name == "_runtime_libs_tracy", device
        assert common | {f"--device={device}", flag} == set(line[1:]), device
    for device, modes in [("local-task", runner.PROFILING_MODES), ("vulkan", runner.VULKAN_PROFILING_MODES)]:
        line = command(device)
        assert Path(line[0]).parent.name == "_runtime_libs", device
        assert common | {f"--device={device}", f"--device_profiling_mode={modes}",
                         f"--device_profiling_output={out}"} == set(line[1:]), device
    assert "host-execution" not in runner.VULKAN_PROFILING_MODES


@pytest.mark.parametrize(
    "target, device, libraries, line",
    [
        ("cuda", "cuda", ("cuda",), "no CUDA device: CUDA driver library 'libcuda.so'/'nvcuda.dll' not available"),
        ("rocm", "hip", ("amdhip64",), "no HIP device: HIP runtime library"),
        ("vulkan-spirv", "vulkan", ("vulkan",), "no Vulkan device: Vulkan loader library not found"),
    ],
)
def test_missing_gpu_driver_is_one_line_from_the_tool(modules, target, device, libraries, line):
    if has_library(*libraries):
        pytest.skip(f"this machine has the {device} driver library")
    with pytest.raises(SectionmarkError) as error:
        profile(modules[target], args=(X,), device=device, iterations=2, warmup=0, quiet=True)
    message = str(error.value)
    assert message.startswith(line) and "\n" not in message, message


def test_cli_profile_on_cuda_without_a_gpu(modules, tmp_path, capsys):
    if has_library("cuda"):
        pytest.skip("this machine has the CUDA driver library")
    np.save(tmp_path / "x.npy", X)
    assert main(["profile", str(modules["cuda"]), "--input", str(tmp_path / "x.npy"), "--device", "cuda"]) == 1
    error = capsys.readouterr().err.strip()
    assert error.startswith("sectionmark: error: no CUDA device:") and "\n" not in error


def test_module_for_another_device_is_one_line(modules):
    with pytest.raises(SectionmarkError, match="iree-benchmark-module failed on local-task") as error:
        profile(modules["cuda"], args=(X,), device="local-task", iterations=1, warmup=0, quiet=True)
    assert "\n" not in str(error.value)


def test_each_device_names_the_target_its_driver_runs():
    from sectionmark.compiler.targets import TARGET_FLAGS, target_for_device

    assert [target_for_device(device) for device in ("local-task", "vulkan", "vulkan://0", "cuda://1", "hip")] == [
        "llvm-cpu", "vulkan-spirv", "vulkan-spirv", "cuda", "rocm"]
    with pytest.raises(SectionmarkError, match="no compile target known for device 'metal'; use one of: local-task"):
        target_for_device("metal")
    assert set(TARGET_FLAGS) == {target_for_device(device) for device in ("local-sync", "cuda", "hip", "vulkan")}
