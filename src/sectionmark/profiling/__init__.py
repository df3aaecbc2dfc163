"""Per-section profiles: a run measured by IREE, joined with the section map.

``profile`` runs a compiled module under ``iree-benchmark-module``: on CPU
with IREE's HAL-native profiler (an ``.ireeprof``), on CUDA/HIP, where IREE
3.13 has no HAL-native profiler, under a Tracy capture of its GPU zones (a
``.tracy``). ``report`` does the join for a profile recorded earlier, of
either kind; both give the same `ProfileSession`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence, Union

from sectionmark.artifacts import module_file, module_file_and_map, read_section_map
from sectionmark.artifacts.scratch import scratch_folder
from sectionmark.errors import SectionmarkError
from sectionmark.outputs import check_output_path, copy_output
from sectionmark.parameters import Parameters, parameter_specs
from sectionmark.profiling.attribute import attribute, public_function
from sectionmark.profiling.run_variation import note_run_variation
from sectionmark.profiling.runs import combine_runs, representative_run
from sectionmark.profiling.runner import DEFAULT_TIMEOUT_S, device_driver, local_task_workers, run_profile
from sectionmark.profiling.session import ProfileSession
from sectionmark.readers.event_model import Profile
from sectionmark.profiling.streamed import keep_scratch_profile, streamed_session
from sectionmark.readers.ireeprof import read_profile
from sectionmark.section_map import INITIALIZER_FUNCTION, SectionMap

__all__ = ["profile", "report", "ProfileSession"]


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
) -> ProfileSession:
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
    `ProfileSession.profiler_cost`); False skips them, about halving the time a short profile takes.
    """
    if runs < 1:
        raise SectionmarkError(f"need runs >= 1 (got {runs})")
    specs = parameter_specs(parameters)
    if keep_profile is not None:
        module_files = [compiled_or_vmfb_path] if isinstance(compiled_or_vmfb_path, (str, Path)) else []
        protected = [*keep_profile_inputs, *module_files]
        check_output_path(keep_profile, protected)
    with scratch_folder() as directory:  # removed on any end, a signal included; one a kill -9 left, next time
        if section_map is None:
            vmfb, section_map = module_file_and_map(compiled_or_vmfb_path, directory)
        else:
            vmfb = module_file(compiled_or_vmfb_path, directory)
        # local-task ran here with IREE's topology, so its worker count is known; other drivers have none.
        run_workers = local_task_workers(workers) if device_driver(device) == "local-task" else None
        sessions, finished = [], []
        for index in range(runs):
            run = run_profile(
                vmfb, args, directory / f"run{index + 1}", function=function, device=device, iterations=iterations,
                warmup=warmup, quiet=quiet, timeout=timeout, parameters=specs,
                argument_types=section_map.argument_types(function), framework=section_map.framework,
                workers=workers, progress=f"run {index + 1} of {runs}" if runs > 1 else "", measure_cost=cost and index == 0,
            )
            if keep_profile is not None and index == 0:  # kept before it is read: a profile that fails to read too
                copy_output(run.profile_path, keep_profile, protected)
            # Read in windows (bounded memory); a profile read whole keeps its events only with one run.
            session = _session(run.profile_path, section_map, calls=run.calls, warmup=run.warmup, function=function,
                               workers=run_workers, device=device, keep_events=False)
            if runs > 1:
                session.attribution = None
            sessions.append(session)
            finished.append(run)
        if runs > 1:
            index = representative_run(sessions)
            shown = finished[index]
            if sessions[index].reread is None:  # read whole, its events let go: read again (the rows it shows)
                sessions[index] = _session(shown.profile_path, section_map, calls=shown.calls, warmup=shown.warmup,
                                           function=function, workers=run_workers, device=device)
        session = combine_runs(sessions)
        for other in sessions:
            if other is not session:  # its file goes with the scratch folder
                other.reread = None
        session.module = Path(compiled_or_vmfb_path).name if isinstance(compiled_or_vmfb_path, (str, Path)) else None
        session.profiler_cost = finished[0].cost  # measured before the first run
        note_run_variation(session)  # several runs: stored for this machine; one run: the variation measured here
        shown = finished[(session.shown_run or 1) - 1]
        if keep_profile is not None and (session.shown_run or 1) > 1:  # the figures shown are of that run
            copy_output(shown.profile_path, keep_profile, protected)
        if session.reread is not None:  # read in windows: its events come from the file when a view asks
            keep_scratch_profile(session, shown.profile_path, section_map, calls=shown.calls, warmup=shown.warmup,
                                 function=function)
        return session


def report(
    profile_path: Union[str, Path],
    section_map: Union[SectionMap, str, Path],
    *,
    calls: Optional[int] = None,
    warmup: int = 0,
    function: Optional[str] = None,
    workers: Optional[int] = None, device: Optional[str] = None,
) -> ProfileSession:
    """Per-section times of a recorded profile: .ireeprof, exported ireeperf-jsonl, or a .tracy capture.

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
    if not isinstance(section_map, SectionMap):
        section_map = read_section_map(section_map)
    if function is not None:
        _check_function(function, section_map)
    return _session(Path(profile_path), section_map, calls=calls, warmup=warmup, function=function, workers=workers,
                    device=device, keep_events=False)


def _check_function(function: str, section_map: SectionMap) -> None:
    """Refuse a ``function`` the map does not have: the table would be titled with it (a run names its own)."""
    known = {public_function(buffer.function) for buffer in section_map.command_buffers}
    known |= {signature.name for signature in section_map.functions}
    known.discard(INITIALIZER_FUNCTION)
    if public_function(function) not in known:
        raise SectionmarkError(f"the section map has no function {function!r} (it has: {', '.join(sorted(known))})")


def _read_events(path: Path, section_map: SectionMap, function: Optional[str]) -> Profile:
    """The dispatch events of a recorded profile or of a Tracy capture's GPU zones."""
    from sectionmark.readers.tracy_capture import is_capture, read_capture

    if is_capture(path):
        from sectionmark.readers.tracy_dispatch_zones import capture_profile
        from sectionmark.readers.tracy_live import is_live_capture, live_capture_profile

        capture = read_capture(path)
        if is_live_capture(capture):
            return live_capture_profile(capture, section_map, function=function)
        return capture_profile(capture, section_map, function=function)
    return read_profile(path)


def _session(
    path: Path, section_map: SectionMap, *, calls: Optional[int], warmup: int, function: Optional[str],
    workers: Optional[int] = None, device: Optional[str] = None, keep_events: bool = True,
) -> ProfileSession:
    """The session of a profile file. ``keep_events`` False: a long .ireeprof is read in windows, in bounded
    memory (`sectionmark.profiling.streamed`), its events read again from the file when a view asks for them."""
    if not keep_events:
        session = streamed_session(path, section_map, calls=calls, warmup=warmup, function=function,
                                   workers=workers, device=device)
        if session is not None:
            return session
    attribution = attribute(_read_events(path, section_map, function), section_map, calls=calls, warmup=warmup,
                            function=function)
    return ProfileSession.build(attribution, section_map, function=function, workers=workers, device=device)
