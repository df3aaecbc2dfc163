"""`sectionmark profile --device cuda|hip|vulkan` on a machine without those devices.

The command lines are checked as built; the failures are the real tools'
(the tracing iree-benchmark-module under a real headless capture for CUDA and
HIP, the plain one with Vulkan's profiling families), turned into one line.
Where a machine has such a device or driver, its failure test is skipped
(tests/test_gpu.py runs there instead). Vulkan's refusal after a successful
run replaces only the Vulkan run, by a real CPU profile without host-execution
events, which is what the reader gets from Vulkan's device dispatch events.
"""

from __future__ import annotations

import ctypes.util
import subprocess
from pathlib import Path

import numpy as np
import pytest

import sectionmark.profiling.runner as runner
from sectionmark.cli import main
from sectionmark.errors import SectionmarkError
from sectionmark.profiling import profile

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

    common = {f"--module={vmfb}", "--function=main", f"--input=@{inputs[0]}", "--benchmark_min_time=7x"}
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


def test_vulkan_profile_without_host_execution_is_refused(modules, monkeypatch, tmp_path):
    real_run = subprocess.run
    seen = []

    def vulkan_run(command, **options):
        """Instead of Vulkan: a real local-task profile with the families Vulkan has that the reader reads."""
        seen.append(command)
        on_cpu = [a.replace("--device=vulkan", "--device=local-task") for a in command]
        on_cpu = [a.replace(runner.VULKAN_PROFILING_MODES, "queue-events,executable-metadata") for a in on_cpu]
        return real_run(on_cpu, **options)

    monkeypatch.setattr(runner.subprocess, "run", vulkan_run)
    kept = tmp_path / "vulkan.ireeprof"
    with pytest.raises(SectionmarkError, match="Vulkan driver profiles dispatches as device dispatch events") as error:
        profile(modules["llvm-cpu"], args=(X,), device="vulkan", iterations=2, warmup=0, quiet=True, keep_profile=kept)
    assert f"kept at {kept}" in str(error.value) and "\n" not in str(error.value)
    assert kept.stat().st_size > 0
    assert f"--device_profiling_mode={runner.VULKAN_PROFILING_MODES}" in seen[0]


def test_each_device_names_the_target_its_driver_runs():
    from sectionmark.compiler.targets import TARGET_FLAGS, target_for_device

    assert [target_for_device(device) for device in ("local-task", "vulkan", "vulkan://0", "cuda://1", "hip")] == [
        "llvm-cpu", "vulkan-spirv", "vulkan-spirv", "cuda", "rocm"]
    with pytest.raises(SectionmarkError, match="no compile target known for device 'metal'; use one of: local-task"):
        target_for_device("metal")
    assert set(TARGET_FLAGS) == {target_for_device(device) for device in ("local-sync", "cuda", "hip", "vulkan")}
