"""Profiles: a run's events joined with the section map into per-section statistics, and where a run was measured.

``profile`` runs a compiled module under ``iree-benchmark-module``: on CPU
with IREE's HAL-native profiler (an ``.ireeprof``), on CUDA/HIP, where IREE
3.13 has no HAL-native profiler, under a Tracy capture of its GPU zones (a
``.tracy``). ``report`` does the join for a profile recorded earlier, of
either kind. Both read the profile in windows (`sectionmark.profiling.read`)
and return a `ProfileRun`: the `ProfileSession` (the figures) and the file a
view that draws every event reads them from.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, TypeVar, Union, overload

from sectionmark.artifacts import read_section_map
from sectionmark import serialization
from sectionmark.artifacts.files import read_regular
from sectionmark.artifacts.scratch import PREFIX, owned_folder, scratch_folder
from sectionmark.errors import SectionmarkError, SectionmarkTypeError
from sectionmark.outputs import check_output_path, copy_output, write_atomic
from sectionmark.parameters import Parameters, parameter_specs
from sectionmark.profiling.attribute import public_function
from sectionmark.profiling.device_run import DeviceRun
from sectionmark.profiling.devices import DeviceProfile, read_device_profile
from sectionmark.profiling.read import ProfileRun, ReadArguments, read_session
from sectionmark.profiling.runs import combine_runs
from sectionmark.profiling.session import ProfileSession
from sectionmark.profiling.stats import RunVariation
from sectionmark.readers.sources import open_device_sources, open_source
from sectionmark.section_map import INITIALIZER_FUNCTION, SectionMap
from sectionmark.workflows.runner import (DEFAULT_TIMEOUT_S, device_driver, local_task_workers, module_file_and_map,
                                          run_profile)

if TYPE_CHECKING:  # for type checkers only: the compiler is a later import, never needed to profile a file
    from sectionmark.compiler.pipeline import CompiledProgram

__all__ = ["profile", "report"]

PROFILE_FOLDER_PREFIX = PREFIX + "profile-"  # a run's kept profile (`ProfileRun.scratch`)
RUN_VARIATION_CACHE_VERSION = 1
_RUN_VARIATION_CACHE_LIMIT = 1 << 20  # bytes: a few entries per device and worker count, far under this


@overload
def profile(compiled_or_vmfb_path: "CompiledProgram", args: Sequence[Any] = ..., function: str = ..., device: str = ...,
            iterations: int = ..., warmup: int = ..., *, section_map: Optional[SectionMap] = ...,
            keep_profile: Optional[Union[str, Path]] = ..., keep_profile_inputs: Sequence[Union[str, Path]] = ...,
            quiet: bool = ..., timeout: Optional[float] = ..., parameters: Parameters = ..., runs: int = ...,
            workers: Optional[int] = ..., cost: bool = ...,
            devices: Optional[Sequence[str]] = ...) -> Union[ProfileRun, DeviceProfile]: ...
@overload
def profile(compiled_or_vmfb_path: Union[str, "os.PathLike[str]"], args: Sequence[Any] = ..., function: str = ...,
            device: str = ..., iterations: int = ..., warmup: int = ..., *, section_map: Optional[SectionMap] = ...,
            keep_profile: Optional[Union[str, Path]] = ..., keep_profile_inputs: Sequence[Union[str, Path]] = ...,
            quiet: bool = ..., timeout: Optional[float] = ..., parameters: Parameters = ..., runs: int = ...,
            workers: Optional[int] = ..., cost: bool = ...,
            devices: Optional[Sequence[str]] = ...) -> Union[ProfileRun, DeviceProfile]: ...
def profile(
    compiled_or_vmfb_path: Union[Any, str, Path],
    args: Sequence[Any] = (),
    function: str = "main",
    device: str = "local-task",
    iterations: int = 20,
    warmup: int = 3,
    *,
    section_map: Optional[SectionMap] = None,
    keep_profile: Optional[Union[str, Path]] = None,
    keep_profile_inputs: Sequence[Union[str, Path]] = (),
    quiet: bool = False,
    timeout: Optional[float] = DEFAULT_TIMEOUT_S,
    parameters: Parameters = None,
    runs: int = 1,
    workers: Optional[int] = None,
    cost: bool = True,
    devices: Optional[Sequence[str]] = None,
) -> Union[ProfileRun, DeviceProfile]:
    """Call ``function`` ``warmup + iterations`` times under the profiler; per-section times.

    ``compiled_or_vmfb_path``: a ``sectionmark.CompiledProgram`` or a
    saved .vmfb (its map is read from the module or its sidecar unless
    ``section_map`` is given). ``device``: an IREE device; ``local-task``
    uses HAL-native profiling (``local-sync`` is refused: IREE 3.13 cannot
    profile it, docs/cli.md), ``cuda`` / ``hip`` (also
    ``cuda://1`` ...) a Tracy capture of the GPU zones, ``vulkan`` Vulkan's
    HAL-native profiling: device-timed dispatch events (docs/gpu.md).
    ``keep_profile``: also copy the raw profile there (.ireeprof, or the
    .tracy capture on CUDA/HIP), atomically and never onto the module or one
    of ``keep_profile_inputs`` (checked before the run). ``timeout``: seconds
    the profiled tool may run (None: no limit).
    ``parameters``: external parameter file(s), ``path`` or ``scope=path`` as
    IREE's ``--parameters`` spells them (see `sectionmark.load`).
    ``runs``: fresh runs of the tool; with more than one, each section's busy
    time per call in every run, their median and its interval
    (`sectionmark.profiling.runs`; the other figures and ``keep_profile`` are
    those of the run of median total). ``workers``: local-task's most worker
    threads (None: one per physical core; fewer leave cores to the rest of a
    busy machine and vary less between runs, docs/cli.md#run-to-run-variation).
    ``cost``: first measure what the profiler itself costs a call (paired rounds of unprofiled and profiled runs,
    `ProfileSession.profiler_cost`); False skips them (10 short runs of the tool:
    0.23x the wall time on the gpt2-small demo, 0.6x on the small one, docs/benchmarks.md).
    The run returned keeps the profile its figures come from in a folder of its own until it is closed
    (`ProfileRun.close`, or its ``with`` block), for the outputs that draw every event.
    ``devices``: the IREE devices of a module compiled for several (``sm.compile(..., devices=N)``), in the
    order of its devices (``["local-task", "local-task"]``); the result is then a `DeviceProfile`: each device's
    session and the views across them (docs/multi-device.md). iree-benchmark-module records every device (one
    profiling session each); ``device``, ``runs`` and ``cost`` are those of one device only.
    """
    if devices is not None:
        return _profile_devices(compiled_or_vmfb_path, args, function, list(devices), iterations, warmup,
                                section_map=section_map, keep_profile=keep_profile,
                                keep_profile_inputs=keep_profile_inputs, quiet=quiet, timeout=timeout,
                                parameters=parameters, runs=runs, workers=workers)
    if runs < 1:
        raise SectionmarkError(f"need runs >= 1 (got {runs})")
    specs = parameter_specs(parameters)
    if keep_profile is not None:
        module_files = [compiled_or_vmfb_path] if isinstance(compiled_or_vmfb_path, (str, Path)) else []
        protected = [*keep_profile_inputs, *module_files]
        check_output_path(keep_profile, protected)
    with scratch_folder() as directory:  # removed on any end, a signal included; one a kill -9 left, next time
        vmfb, section_map = module_file_and_map(compiled_or_vmfb_path, directory, section_map)
        run_workers = workers_of_run(device, workers)
        sessions, finished = [], []
        for index in range(runs):
            run = run_profile(
                vmfb, args, directory / f"run{index + 1}", function=function, device=device, iterations=iterations,
                warmup=warmup, quiet=quiet, timeout=timeout, parameters=specs,
                argument_types=section_map.argument_types(function), framework=section_map.framework,
                workers=workers, progress=f"run {index + 1} of {runs}" if runs > 1 else "",
                measure_cost=cost and index == 0,
            )
            if keep_profile is not None and index == 0:  # kept before it is read: a profile that fails to read too
                copy_output(run.profile_path, keep_profile, protected)
            sessions.append(read_session(open_source(run.profile_path, section_map, function), section_map,
                                         calls=run.calls, warmup=run.warmup, function=function, workers=run_workers,
                                         device=device))
            finished.append(run)
        session = sessions[0] if runs == 1 else combine_runs(sessions)
        session.module = Path(compiled_or_vmfb_path).name if isinstance(compiled_or_vmfb_path, (str, Path)) else None
        session.profiler_cost = finished[0].cost  # measured before the first run
        note_run_variation(session)  # several runs: stored for this machine; one run: the variation measured here
        shown = finished[(session.shown_run or 1) - 1]
        if keep_profile is not None and (session.shown_run or 1) > 1:  # the figures shown are of that run
            copy_output(shown.profile_path, keep_profile, protected)
        return _kept_by_the_run(shown.profile_path, lambda path, kept: ProfileRun(
            session, path, section_map, ReadArguments(shown.calls, shown.warmup, function), scratch=kept))


def _profile_devices(compiled_or_vmfb_path: Union[Any, str, Path], args: Sequence[Any], function: str,
                     devices: list[str], iterations: int, warmup: int, *, section_map: Optional[SectionMap],
                     keep_profile: Optional[Union[str, Path]], keep_profile_inputs: Sequence[Union[str, Path]],
                     quiet: bool, timeout: Optional[float], parameters: Parameters, runs: int,
                     workers: Optional[int]) -> DeviceProfile:
    """`profile` on several devices: one run of iree-benchmark-module with a ``--device`` each, every device's
    events read and attributed by the one read path (`read_device_profile`)."""
    check_devices(devices)
    if runs != 1:
        raise SectionmarkError("runs > 1 of several devices is not supported yet: profile with runs=1")
    specs = parameter_specs(parameters)
    if keep_profile is not None:
        module_files = [compiled_or_vmfb_path] if isinstance(compiled_or_vmfb_path, (str, Path)) else []
        protected = [*keep_profile_inputs, *module_files]
        check_output_path(keep_profile, protected)
    with scratch_folder() as directory:
        vmfb, section_map = module_file_and_map(compiled_or_vmfb_path, directory, section_map)
        run = run_profile(vmfb, args, directory / "run1", function=function, device=devices[0],
                          extra_devices=devices[1:], iterations=iterations, warmup=warmup, quiet=quiet,
                          timeout=timeout, parameters=specs, argument_types=section_map.argument_types(function),
                          framework=section_map.framework, workers=workers)
        if keep_profile is not None:
            copy_output(run.profile_path, keep_profile, protected)
        result = read_device_profile(open_device_sources(run.profile_path, section_map, function), section_map,
                                     calls=run.calls, warmup=run.warmup, function=function,
                                     workers=workers_of_run(devices[0], workers),
                                     devices=devices)
        return _kept_by_the_run(run.profile_path, lambda path, kept: DeviceRun.of(
            result, path, section_map, ReadArguments(run.calls, run.warmup, function), scratch=kept))


def workers_of_run(device: str, workers: Optional[int]) -> Optional[int]:
    """The worker count of a run here on ``device`` (its first, for several devices), for the sections' CPU
    utilization: local-task ran with IREE's topology (at most ``workers``), so its count is known; other drivers
    have none (None)."""
    return local_task_workers(workers) if device_driver(device) == "local-task" else None


_Run = TypeVar("_Run")


def _kept_by_the_run(profile_path: Path, run_of: Callable[[Path, Path], _Run]) -> _Run:
    """The run ``run_of(kept profile, its folder)`` keeping the profile its figures come from (its events, for the
    views that draw them) in a folder of its own, which outlives the scratch folder until the run is closed;
    nothing is left behind if the run cannot be made."""
    kept = owned_folder(PROFILE_FOLDER_PREFIX)
    try:
        return run_of(Path(shutil.move(str(profile_path), kept / profile_path.name)), kept)
    except BaseException:
        shutil.rmtree(kept, ignore_errors=True)
        raise


# The drivers whose several devices one run profiles: local-task and vulkan (a HAL profile with a session per
# device, host-timed or device-timed: `sectionmark.readers.devices`) and cuda (a Tracy capture with a GPU context
# per device: `sectionmark.readers.tracy_devices`). IREE 3.13 cannot mix drivers in one process; several HIP
# devices were never run.
SEVERAL_DEVICE_DRIVERS = ("local-task", "cuda", "vulkan")


def check_devices(devices: Sequence[str]) -> None:
    """Several devices of one driver of `SEVERAL_DEVICE_DRIVERS`: one error line otherwise."""
    if len(devices) < 2:
        raise SectionmarkError(f"devices= names the devices of a module compiled for several (got {len(devices)}); "
                               "for one device use device=")
    drivers = sorted({device_driver(device) for device in devices})
    if len(drivers) > 1:
        raise SectionmarkError(f"several devices of one driver only (got {', '.join(drivers)}): IREE 3.13 cannot "
                               "move tensors between devices of different drivers")
    if drivers[0] not in SEVERAL_DEVICE_DRIVERS:
        raise SectionmarkError(f"several devices are profiled on {', '.join(SEVERAL_DEVICE_DRIVERS)} only "
                               f"(got {drivers[0]})")


def report(
    profile_path: Union[str, Path],
    section_map: Union[SectionMap, str, Path],
    *,
    calls: Optional[int] = None,
    warmup: int = 0,
    function: Optional[str] = None,
    workers: Optional[int] = None, device: Optional[str] = None,
) -> Union[ProfileRun, DeviceProfile]:
    """Per-section times of a recorded profile: .ireeprof, exported ireeperf-jsonl, or a .tracy capture.
    A .ireeprof of a process that drove several devices gives a `DeviceProfile` (docs/multi-device.md).

    ``section_map``: a SectionMap, a .vmfb (embedded map or sidecar) or a
    .sections.json. ``calls``: calls made during the profile (inferred from
    the repeating submissions when None); the first ``warmup`` are dropped.
    ``workers``: local-task's worker count during the recorded run, for the
    sections' CPU utilization (the profile does not record it; None: not shown).
    A Tracy capture (recognised by its name or its first bytes) is read for
    its GPU dispatch zones (a CUDA/HIP run, or a replay by `sectionmark tracy`),
    or, for a live capture of a program on local-task, its worker-thread
    dispatch zones (approximate times: `sectionmark.readers.tracy_live`).
    """
    if isinstance(profile_path, (list, tuple)):  # the command line's `report rank*.ireeprof`, spelled in Python
        raise SectionmarkTypeError("sectionmark.report reads one profile; several ranks' profiles of one module: "
                                   "sectionmark.report_ranks(paths, map)")
    if not isinstance(section_map, SectionMap):
        section_map = read_section_map(section_map)
    if function is not None:
        _check_function(function, section_map)
    path = Path(profile_path)
    sources = open_device_sources(path, section_map, function)
    if len(sources) > 1:  # one process drove several devices: each device's session, and the views across them
        result = read_device_profile(sources, section_map, calls=calls, warmup=warmup, function=function,
                                     workers=workers, devices=None if device is None else [device] * len(sources))
        return DeviceRun.of(result, path, section_map, ReadArguments(calls, warmup, function))
    session = read_session(sources[0], section_map, calls=calls, warmup=warmup, function=function, workers=workers,
                           device=device)
    return ProfileRun(session, path, section_map, ReadArguments(calls, warmup, function))


def _check_function(function: str, section_map: SectionMap) -> None:
    """Refuse a ``function`` the map does not have: the table would be titled with it (a run names its own)."""
    known = {public_function(buffer.function) for buffer in section_map.command_buffers}
    known |= {signature.name for signature in section_map.functions}
    known.discard(INITIALIZER_FUNCTION)
    if public_function(function) not in known:
        raise SectionmarkError(f"the section map has no function {function!r} (it has: {', '.join(sorted(known))})")


# ---------------------------------------------------------------------------- the machine's run-to-run variation
# How much one run's figures move between runs on this machine, measured by an earlier ``--runs K`` profile.
#
# A profile of one run cannot say how much its figures would move if the tool ran again: that takes several
# runs (`sectionmark.profiling.runs`), and profiling every time K-fold is too slow for a default. So every
# profile of K >= 2 runs leaves what it measured in the user's cache, per host, device and worker count: the
# coefficient of variation (CV) across its runs of the total busy time per call, the median and the worst of
# the sections' CVs, K, the module and when. A profile of one run on the same host, device and workers then
# says, under its table, how much such figures moved there (`RunVariation`, the session's
# ``run_variation``), naming the profile that measured it; with none cached it says that the variation was not
# measured, and how to measure it. Measured, never assumed: nothing is shown that no run on this machine
# measured.
#
# The cache (``$XDG_CACHE_HOME`` or ``~/.cache``, ``sectionmark/run-variation-HOST.json``) is an input like any
# other: read bounded and without blocking, checked as strictly as the profile JSON; one that cannot be read or
# does not check is ignored (and replaced by the next ``--runs`` profile); a cache that cannot be written costs
# the profile nothing.


def cache_path() -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", f"run-variation-{socket.gethostname()}")
    return root / "sectionmark" / f"{name}.json"


def _read_cache() -> dict[str, RunVariation]:
    """The cached variations by device and workers; {} when there is no cache or it does not check."""
    try:
        data = json.loads(read_regular(cache_path(), "run-variation cache", _RUN_VARIATION_CACHE_LIMIT))
        serialization.check_version(data, RUN_VARIATION_CACHE_VERSION, "run-variation cache", "it is measured again")
        entries = data.get("entries")
        if not isinstance(entries, list):
            return {}
        found = {}
        for index, entry in enumerate(entries):
            variation = serialization.from_json(RunVariation, entry, f"entries[{index}]")
            if variation.runs >= 2 and all(value >= 0 for value in (variation.total_cv, variation.median_section_cv,
                                                                     variation.worst_section_cv)):
                found[variation.key] = variation
        return found
    except (SectionmarkError, ValueError, RecursionError, OSError):
        return {}


def remember(session: ProfileSession) -> None:
    """Store what a profile of several runs measured (replacing the entry of its device and workers). A cache
    that cannot be written is left as it is: the profile does not depend on it."""
    variation = RunVariation.of(session)
    if variation is None:
        return
    entries = _read_cache()
    entries[variation.key] = variation
    document = {"version": RUN_VARIATION_CACHE_VERSION, "entries": [serialization.to_json(entry) for entry in entries.values()]}
    try:
        cache_path().parent.mkdir(parents=True, exist_ok=True)
        write_atomic(cache_path(), json.dumps(document, indent=1) + "\n")
    except (SectionmarkError, OSError):
        pass


def recall(session: ProfileSession) -> Optional[RunVariation]:
    """What an earlier profile of several runs measured on this host for the device and workers of ``session``
    (a profile of one run); None when none did."""
    if session.device is None or session.total_runs is not None:
        return None
    return _read_cache().get(RunVariation.key_for(session.device, session.workers))


def note_run_variation(session: ProfileSession) -> None:
    """After a profile: store its variation (several runs), or attach the one measured earlier (one run)."""
    if session.total_runs is not None:
        remember(session)
    else:
        session.run_variation = recall(session)
