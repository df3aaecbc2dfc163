"""Run a compiled module under IREE's measurement for its device.

Python bindings cannot profile in-process in IREE 3.13, so we run
``iree-benchmark-module``:

* CPU (local-task, local-sync): with ``--device_profiling_mode`` (HAL-native
  profiling: host-execution events per dispatch and per queue operation, and
  memory events for the device memory of the calls) into an ``.ireeprof``;
* CUDA, HIP: IREE 3.13 has no HAL-native profiling there ("CUDA HAL-native
  profiling is not implemented"), so the tool of the *tracing* runtime runs
  under a headless Tracy capture, with the driver's GPU zones at dispatch
  verbosity (``--cuda_tracing=2``): each dispatch becomes a GPU zone in a
  ``.tracy`` (modules for these targets have no debug groups: the runtime
  crashes on them, see `sectionmark.compiler.targets`);
* Vulkan: HAL-native profiling with the families its driver records (queue
  events, device-timed dispatch events, executable metadata; no host-execution),
  read by `sectionmark.readers.device_events`.

Warmup is done by running ``warmup + iterations`` calls in the same
process and dropping the first ``warmup`` calls when the profile is reported:
the benchmark tool has no iteration-count warmup of its own, and a separate
warmup process would not warm this process's caches and thread pool.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
from rich.console import Console

from sectionmark.arguments import flatten_arguments
from sectionmark.artifacts.modules import read_section_map
from sectionmark.compiler.targets import device_driver
from sectionmark.errors import SectionmarkError, wrong_type
from sectionmark.parameters import tool_flags
from sectionmark.profiling.stats import ProfilerCost
from sectionmark.artifacts.tools import exit_description, find_tool, last_useful_line, run_tool
from sectionmark.section_map import SectionMap

PROFILING_MODES = "queue-events,host-execution,executable-metadata,memory-events"
# What IREE 3.13's Vulkan driver can record (it has no host-execution events).
VULKAN_PROFILING_MODES = "queue-events,dispatch-events,executable-metadata"
# Drivers measured through Tracy GPU zones, with their names in messages.
TRACED_DRIVERS = {"cuda": "CUDA", "hip": "HIP"}
DEVICE_NAMES = {**TRACED_DRIVERS, "vulkan": "Vulkan"}
# --cuda_tracing / --hip_tracing: 1 gives command buffer and debug group zones, 2 adds dispatch zones.
DISPATCH_TRACING_VERBOSITY = 2
# IREE's status line: "<source>:<line>: CODE; message; context; context".
_STATUS_LINE = re.compile(r"^\S+:\d+: ([A-Z_]+); (.*)$")
_DEVICE_CONTEXTS = ("; creating driver for device", "; creating device '")
# Measured with IREE 3.13: iree-benchmark-module --device=local-sync with any
# --device_profiling_mode crashes (SIGSEGV: a null begin_debug_group in the
# command buffer it records) on a module with debug groups, and without them
# it records no command-buffer metadata, so its dispatches cannot be attributed.
LOCAL_SYNC_UNSUPPORTED = (
    "--device local-sync cannot be profiled with IREE 3.13: its profiling crashes on the section debug groups "
    "(SIGSEGV) and, without them, records no command buffers to attribute dispatches to; use local-task "
    "(the default)"
)
DEFAULT_TIMEOUT_S = 3600.0
# Paired rounds that measure the profiler's cost (`measure_profiler_cost`): 5 give the median ratio an interval
# (the lowest and highest of the 5) that covers it 93.75% of the time, for any distribution of the ratios.
COST_ROUNDS = 5
# Each run of a round: one warmup call (the first call loads the executables and takes milliseconds; none when
# the profile has none) and at most 5 measured calls, whose median is the run's figure. More calls would not
# narrow the interval, which comes from the rounds, and would make the 10 runs cost a large model's profile many
# times over (the gpt2-small demo: 80 s with 20 calls a run against 7.5 s for the profile alone).
COST_WARMUP = 1
COST_CALLS = 5


@dataclass(frozen=True)
class ProfileRun:
    """Where a profiling run left its measurement, and how many calls it made."""

    profile_path: Path  # .ireeprof bundle, or .tracy capture on CUDA/HIP
    calls: int  # warmup + measured calls, in order
    warmup: int
    wall_s: float  # wall-clock time of the whole tool run
    # What the profiler itself costs, from paired rounds run before the profile (`measure_cost`); None when not
    # measured (measure_cost=False, or a Tracy capture on CUDA/HIP).
    cost: Optional[ProfilerCost] = None


# IREE's --task_topology_max_group_count default: the most workers its default topology creates.
MAX_DEFAULT_WORKERS = 64


def local_task_workers(limit: Optional[int] = None) -> int:
    """The worker count of local-task on this machine (the profile does not record it).

    iree-benchmark-module runs with ``--task_topology_mode=physical_cores``:
    one worker per physical core, each pinned to its core, at most
    ``--task_topology_max_group_count`` (64, or ``limit``: `benchmark_command`'s
    ``workers``). Physical cores are the distinct (package, core) pairs of the CPUs
    this process may run on (Linux sysfs); where sysfs does not say, every
    logical CPU counts as a core (``os.cpu_count``).
    """
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    cores = set()
    for cpu in cpus:
        topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            cores.add(((topology / "physical_package_id").read_text().strip(), (topology / "core_id").read_text().strip()))
        except OSError:
            cores.add(("cpu", str(cpu)))
    return max(1, min(len(cores), limit or MAX_DEFAULT_WORKERS))


def module_file_and_map(source: Any, directory: Path,
                        section_map: Optional[SectionMap] = None) -> tuple[Path, SectionMap]:
    """The .vmfb file IREE's tool runs and the map its profile is read with: a compiled program (``sm.compile``'s
    result) is written to ``directory`` and carries its map; a .vmfb path runs as it is, with the map it embeds or
    has beside it (`read_section_map`). ``section_map``: the map to use instead of either."""
    if hasattr(source, "vmfb"):
        path = directory / "module.vmfb"
        path.write_bytes(source.vmfb)
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source)
    else:
        raise wrong_type("sm.profile", source, "a compiled program (sm.compile) or a .vmfb path")
    if section_map is not None:
        return path, section_map
    if not hasattr(source, "section_map"):
        return path, read_section_map(path)
    if source.section_map is None:
        raise SectionmarkError("this module was compiled without markers; it has no section map to report")
    return path, source.section_map


def write_inputs(
    args: Sequence[Any], directory: Path, types: Optional[Sequence[str]] = None, framework: Optional[str] = None
) -> list[Path]:
    """Save each flat argument (`sectionmark.arguments.flatten_arguments`) as ``arg<i>.npy`` for ``--input=@file``."""
    paths = []
    for index, array in enumerate(flatten_arguments(args, types, framework=framework, host=True)):
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
    imported: Sequence[Path] = (),
    workers: Optional[int] = None,
    extra_devices: Sequence[str] = (),
) -> list[str]:
    """The iree-benchmark-module command line for ``device``; no measurement without a path.
    ``extra_devices``: the devices after the first of a module compiled for several (``--device`` each, in order:
    the profile records one session per device).

    CUDA/HIP: the tracing runtime's tool with dispatch zones on (the capture
    around it writes ``profile_path``); other devices: the plain tool with
    HAL-native profiling into ``profile_path``. ``parameters``: external
    parameter files as ``(scope, path)`` (`sectionmark.parameters.parameter_specs`).
    ``imported``: modules loaded before ``vmfb`` whose functions it calls (a
    replay driver imports the model's); ``function`` is ``vmfb``'s.
    ``workers``: local-task's most workers (``--task_topology_max_group_count``;
    None: IREE's default, one per physical core).
    """
    driver = device_driver(device)
    traced = driver in TRACED_DRIVERS
    command = [
        str(find_tool("iree-benchmark-module", tracing=traced)),
        f"--device={device}",
        *[f"--device={extra}" for extra in extra_devices],
        *tool_flags(parameters),
        *[f"--module={module}" for module in imported],
        f"--module={vmfb}",
        f"--function={function}",
        *[f"--input=@{path}" for path in inputs],
        # One call per repetition: the tool reports each call's time (benchmark_times_ns), so the profiler's
        # cost is a median over the measured calls, not a mean that the first call's loading dominates.
        "--benchmark_min_time=1x",
        f"--benchmark_repetitions={calls}",
        "--benchmark_format=json",
        *([f"--task_topology_max_group_count={workers}"] if workers is not None else []),
    ]
    if profile_path is None:
        return command
    if traced:
        return command + [f"--{driver}_tracing={DISPATCH_TRACING_VERBOSITY}"]
    modes = VULKAN_PROFILING_MODES if driver == "vulkan" else PROFILING_MODES
    return command + [f"--device_profiling_mode={modes}", f"--device_profiling_output={profile_path}"]


_NS_PER_UNIT = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def benchmark_times_ns(stdout: str) -> list[float]:
    """iree-benchmark-module's mean wall time per call (ns) of each run (repetition) it reports, in order, from
    its ``--benchmark_format=json`` output (of a `benchmark_command`: each call's time); one error line when it
    has none."""
    try:
        runs = json.loads(stdout)["benchmarks"]
        times = [float(run["real_time"]) * _NS_PER_UNIT[run["time_unit"]] for run in runs
                 if run.get("run_type", "iteration") == "iteration"]
    except (ValueError, KeyError, TypeError) as error:
        raise SectionmarkError(f"cannot read iree-benchmark-module's timings ({error})") from None
    if not times:
        raise SectionmarkError("cannot read iree-benchmark-module's timings (it reported no run)")
    return times


def median_call_ns(stdout: str, warmup: int = 0) -> float:
    """The median time of the calls after the first ``warmup`` in the output of a `benchmark_command` run."""
    times = benchmark_times_ns(stdout)
    return float(np.median(times[warmup:] or times))


def tool_failure(device: str, stderr: str, returncode: int = 1) -> str:
    """One line for a failed tool run; a GPU whose driver or device cannot be opened says so.

    A tool killed by a signal says so (``crashed with SIGSEGV``) with the last
    useful line of its output.

    IREE prints the failing status first (its message may go on over several
    lines with nested causes) and appends context such as "creating driver
    for device 'cuda'"; that context marks a device that could not be opened.
    """
    driver = device_driver(device)
    if driver in DEVICE_NAMES and any(context in stderr for context in _DEVICE_CONTEXTS):
        status = next(filter(None, (_STATUS_LINE.match(line.strip()) for line in stderr.splitlines())), None)
        if status is not None:
            message = min((status.group(2).split(context)[0] for context in _DEVICE_CONTEXTS), key=len)
            return f"no {DEVICE_NAMES[driver]} device: {message.rstrip(': ')} ({status.group(1)})"
    how = "failed" if 0 < returncode < 128 else exit_description(returncode)
    return f"iree-benchmark-module {how} on {device}: {last_useful_line(stderr)}"


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
    timeout: Optional[float] = DEFAULT_TIMEOUT_S,
    parameters: Sequence[tuple[str, Path]] = (),
    imported: Sequence[Path] = (),
    argument_types: Optional[Sequence[str]] = None,
    framework: Optional[str] = None,
    measure_cost: bool = False,
    workers: Optional[int] = None,
    progress: str = "",
    extra_devices: Sequence[str] = (),
) -> ProfileRun:
    """Run ``function`` ``warmup + iterations`` times measured; return the .ireeprof or .tracy.

    ``argument_types``, ``framework``: how ``args`` become the function's
    flat arguments (`sectionmark.arguments.flatten_arguments`). ``workers``:
    local-task's most workers (None: one per physical core; refused on other
    devices). ``progress``: said after the status line (``run 2 of 5``). ``extra_devices``: the devices after
    ``device`` of a module compiled for several (`benchmark_command`).

    ``timeout``: seconds the tool may run (None: no limit) before it is ended
    with one error line, so that a hung tool never hangs the caller.

    ``measure_cost``: first measure what the profiler itself costs (`measure_profiler_cost`: paired rounds of
    unprofiled and profiled runs), which matters when dispatches last a few hundred nanoseconds. Not on CUDA/HIP,
    whose traced tool runs under a capture.
    """
    if iterations < 1 or warmup < 0:
        raise SectionmarkError(f"need iterations >= 1 and warmup >= 0 (got {iterations}, {warmup})")
    if device_driver(device) == "local-sync":
        raise SectionmarkError(LOCAL_SYNC_UNSUPPORTED)
    check_workers(workers, device)
    vmfb = Path(vmfb)
    if not vmfb.is_file():
        raise SectionmarkError(f"module not found: {vmfb}")
    directory.mkdir(parents=True, exist_ok=True)
    traced = device_driver(device) in TRACED_DRIVERS
    profile_path = directory / ("run.tracy" if traced else "run.ireeprof")
    profile_path.unlink(missing_ok=True)
    calls = iterations + warmup
    inputs = write_inputs(args, directory, argument_types, framework)
    command = benchmark_command(vmfb, function, inputs, device=device, calls=calls, profile_path=profile_path,
                                parameters=parameters, imported=imported, workers=workers, extra_devices=extra_devices)
    console = Console(stderr=True, quiet=quiet or not sys.stderr.isatty())
    cost = None
    if measure_cost and not traced:
        round_warmup, cost_path = min(warmup, COST_WARMUP), directory / "cost.ireeprof"
        round_calls = round_warmup + min(iterations, COST_CALLS)
        commands = [benchmark_command(vmfb, function, inputs, device=device, calls=round_calls, profile_path=path,
                                      parameters=parameters, imported=imported, workers=workers)
                    for path in (cost_path, None)]
        with console.status(f"timing {vmfb.name}:{function} on {device} with and without the profiler "
                            f"({COST_ROUNDS} paired rounds of {round_calls} calls)"):
            cost = measure_profiler_cost(*commands, profile_path=cost_path, warmup=round_warmup, device=device,
                                         timeout=timeout)
    start = time.perf_counter()
    with console.status(f"profiling {vmfb.name}:{function} on {device} ({warmup} warmup + {iterations} calls)"
                        + (f", {progress}" if progress else "")):
        if traced:
            _run_captured(command, profile_path, device, timeout)
        else:
            _run_tool(command, device, timeout)
    wall_s = time.perf_counter() - start
    if not profile_path.is_file() or profile_path.stat().st_size == 0:
        raise SectionmarkError(f"iree-benchmark-module wrote no profile to {profile_path}")
    return ProfileRun(profile_path, calls, warmup, wall_s, cost)


def measure_profiler_cost(profiled: list[str], unprofiled: list[str], *, profile_path: Path, warmup: int,
                          device: str, timeout: Optional[float], rounds: int = COST_ROUNDS) -> ProfilerCost:
    """What the profiler costs a call: ``rounds`` rounds, each one run of ``unprofiled`` and one of ``profiled``
    (`benchmark_command` lines of the same calls; ``profiled`` writes ``profile_path``, removed after each
    round), first one,
    then the other, in turns (U P, P U, U P, ...): a machine that slows down or speeds up during the rounds moves
    both kinds alike. Each run's figure is its median measured call (`median_call_ns`); the cost is the median of
    the rounds' ratios, with its interval (`ProfilerCost.from_rounds`)."""
    medians: dict[bool, list[float]] = {True: [], False: []}
    for index in range(rounds):
        for with_profiler in ((False, True) if index % 2 == 0 else (True, False)):
            output = _run_tool(profiled if with_profiler else unprofiled, device, timeout)
            medians[with_profiler].append(median_call_ns(output, warmup))
        profile_path.unlink(missing_ok=True)
    return ProfilerCost.from_rounds(medians[True], medians[False])


def _run_tool(command: list[str], device: str, timeout: Optional[float]) -> str:
    """Run iree-benchmark-module; its standard output, or one error line (failure, timeout)."""
    try:
        result = run_tool(command, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SectionmarkError(
            f"iree-benchmark-module did not finish within {timeout:g} s on {device} and was ended "
            "(a longer run: raise the timeout, --timeout on the command line)"
        ) from None
    if result.returncode != 0:
        raise SectionmarkError(tool_failure(device, result.stderr, result.returncode))
    return result.stdout


def check_workers(workers: Optional[int], device: str) -> None:
    """``workers`` sets local-task's worker topology; other devices have none to set."""
    if workers is None:
        return
    if workers < 1:
        raise SectionmarkError(f"need workers >= 1 (got {workers})")
    if device_driver(device) != "local-task":
        raise SectionmarkError(f"workers sets local-task's worker threads; {device} has none (drop --workers)")


def _run_captured(command: list[str], capture_path: Path, device: str, timeout: Optional[float]) -> None:
    """Run the tracing tool under a headless Tracy capture written to ``capture_path``."""
    from sectionmark.tracy.capture import CapturedProgramFailed, capture_command

    with tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace") as output:
        try:
            capture_command(command, capture_path, timeout=timeout, save_timeout=600.0, stdout=output, stderr=output)
        except CapturedProgramFailed as failure:
            output.seek(0)
            raise SectionmarkError(tool_failure(device, output.read(), failure.returncode)) from None
