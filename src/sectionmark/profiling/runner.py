"""Run a compiled module under IREE's HAL-native profiler.

Python bindings cannot profile in-process in IREE 3.13, so we run
``iree-benchmark-module`` with ``--device_profiling_mode`` and read the bundle
it writes. Warmup is done by running ``warmup + iterations`` calls in the same
process and dropping the first ``warmup`` calls when the profile is reported:
the benchmark tool has no iteration-count warmup of its own, and a separate
warmup process would not warm this process's caches and thread pool.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from rich.console import Console

from sectionmark.errors import SectionmarkError
from sectionmark.parameters import tool_flags
from sectionmark.profiling.tools import find_tool

PROFILING_MODES = "queue-events,host-execution,executable-metadata"


@dataclass(frozen=True)
class ProfileRun:
    """Where a profiling run left its bundle, and how many calls it made."""

    profile_path: Path
    calls: int  # warmup + measured calls, in order
    warmup: int
    wall_s: float  # wall-clock time of the whole tool run


def write_inputs(args: Sequence[Any], directory: Path) -> list[Path]:
    """Save each argument as ``arg<i>.npy`` for ``--input=@file``."""
    paths = []
    for index, value in enumerate(args):
        array = np.asarray(value.detach().cpu() if hasattr(value, "detach") else value)
        if array.dtype == object:
            raise SectionmarkError(f"argument {index} is not an array (got {type(value).__name__})")
        path = directory / f"arg{index}.npy"
        np.save(path, array)
        paths.append(path)
    return paths


def benchmark_command(
    vmfb: Path,
    function: str,
    inputs: Sequence[Path],
    *,
    device: str,
    calls: int,
    profile_path: Path | None,
    parameters: Sequence[tuple[str, Path]] = (),
) -> list[str]:
    """The iree-benchmark-module command line (without profiling if no path).

    ``parameters``: external parameter files as ``(scope, path)``
    (`sectionmark.parameters.parameter_specs`).
    """
    command = [
        str(find_tool("iree-benchmark-module")),
        f"--device={device}",
        *tool_flags(parameters),
        f"--module={vmfb}",
        f"--function={function}",
        *[f"--input=@{path}" for path in inputs],
        f"--benchmark_min_time={calls}x",
    ]
    if profile_path is not None:
        command += [f"--device_profiling_mode={PROFILING_MODES}", f"--device_profiling_output={profile_path}"]
    return command


def _failure_line(stderr: str) -> str:
    """The most telling line of a tool's error output (IREE prints the status last)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in reversed(lines):
        if any(word in line for word in ("INVALID_ARGUMENT", "NOT_FOUND", "UNIMPLEMENTED", "error", "Error", "FAILED")):
            return line
    return lines[-1] if lines else "no error message"


def run_profile(
    vmfb: Path,
    args: Sequence[Any],
    directory: Path,
    *,
    function: str = "main",
    device: str = "local-task",
    iterations: int = 20,
    warmup: int = 3,
    quiet: bool = False,
    parameters: Sequence[tuple[str, Path]] = (),
) -> ProfileRun:
    """Run ``function`` ``warmup + iterations`` times with profiling on; return the bundle."""
    if iterations < 1 or warmup < 0:
        raise SectionmarkError(f"need iterations >= 1 and warmup >= 0 (got {iterations}, {warmup})")
    vmfb = Path(vmfb)
    if not vmfb.is_file():
        raise SectionmarkError(f"module not found: {vmfb}")
    directory.mkdir(parents=True, exist_ok=True)
    profile_path = directory / "run.ireeprof"
    profile_path.unlink(missing_ok=True)
    calls = iterations + warmup
    command = benchmark_command(
        vmfb, function, write_inputs(args, directory), device=device, calls=calls, profile_path=profile_path,
        parameters=parameters,
    )
    console = Console(stderr=True, quiet=quiet or not sys.stderr.isatty())
    start = time.perf_counter()
    with console.status(f"profiling {vmfb.name}:{function} on {device} ({warmup} warmup + {iterations} calls)"):
        result = subprocess.run(command, capture_output=True, text=True)
    wall_s = time.perf_counter() - start
    if result.returncode != 0:
        raise SectionmarkError(f"iree-benchmark-module failed: {_failure_line(result.stderr)}")
    if not profile_path.is_file() or profile_path.stat().st_size == 0:
        raise SectionmarkError(f"iree-benchmark-module wrote no profile to {profile_path}")
    return ProfileRun(profile_path, calls, warmup, wall_s)
