"""Several ranks' profiles of one module, each read where it is, in parallel, and merged into one report.

A data-parallel launcher runs one process per rank, each recording its own
profile of the same module. ``report_ranks`` reads each file in a process of
its own (a `concurrent.futures.ProcessPoolExecutor`, one process per file up to
the machine's cores) through the one read path, `sectionmark.report`, so every
rank's figures are exactly those of its own report; each process sends back its
`ProfileSession` (plain data: per-section sums, never the events) and this
process merges them (`sectionmark.profiling.ranks.merge_ranks`). Each file is
read once. The processes are forks of this one: a fork server or a spawned
interpreter would run the caller's script again in every process (a script
without a ``__main__`` guard would start the whole report again), and a
reading process only runs the read path (numpy and sectionmark's own readers,
no threads of IREE's). Ranks of a run on several devices (each file a profile
of several devices: a host-timed .ireeprof, or a CUDA run's Tracy capture of a
module compiled for several) send back their `DeviceProfile` and are merged
device by device; how many devices a file records is what its read finds
(`sectionmark.readers.sources.open_device_sources`, the one place that decides
it), and ranks that recorded different devices are one error line. A file that
cannot be read stops the report with one line naming it; the reads still
running are let finish and nothing is written.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import FIRST_EXCEPTION, Future, ProcessPoolExecutor, wait
from dataclasses import fields
from pathlib import Path
from typing import Optional, Sequence, Union

from sectionmark.artifacts import read_section_map
from sectionmark.errors import SectionmarkError
from sectionmark.profiling.devices import DeviceProfile
from sectionmark.profiling.ranks import DeviceRankReport, RankReport, merge_profiles
from sectionmark.profiling.session import ProfileSession
from sectionmark.progress import progress
from sectionmark.section_map import SectionMap
from sectionmark.workflows.measure import report

__all__ = ["report_ranks"]


def report_ranks(
    profile_paths: Sequence[Union[str, Path]],
    section_map: Union[SectionMap, str, Path],
    *,
    calls: Optional[int] = None,
    warmup: int = 0,
    function: Optional[str] = None,
    workers: Optional[int] = None,
    processes: Optional[int] = None,
    quiet: bool = False,
) -> Union[RankReport, DeviceRankReport]:
    """Profiles of one module recorded by several processes (ranks), reported together.

    ``profile_paths``: one profile file per rank, in rank order (rank 0
    first); each is read as ``sectionmark.report(path, section_map, calls=,
    warmup=, function=, workers=)`` reads it. Returns a `RankReport`: per
    section, its busy time per call on each rank, their min / median / max and
    the slowest rank (the straggler); ``report.ranks[i].session`` is rank i's
    own profile. Ranks of a run on several devices give a `DeviceRankReport`:
    ``report.device(d)`` is device d's `RankReport` across the ranks (its
    ``ranks[i].session`` rank i's session of device d), ``report.ranks[i].profile``
    rank i's own `DeviceProfile`. ``processes``: files read at once (None: one
    per file, up to the machine's cores). ``quiet``: no progress line on the
    terminal.
    """
    paths = [Path(path) for path in profile_paths]
    if not paths:
        raise SectionmarkError("no rank profiles given")
    for path in paths:
        if not path.is_file():
            raise SectionmarkError(f"no such profile file: {path}")
    if not isinstance(section_map, SectionMap):
        section_map = read_section_map(section_map)  # read once, here; each reading process gets it with its file
    arguments = dict(section_map=section_map, calls=calls, warmup=warmup, function=function, workers=workers)
    count = min(len(paths), processes or len(os.sched_getaffinity(0)))
    if count <= 1:
        profiles = [read_rank(path, **arguments) for path in paths]
    else:
        profiles = _read_in_processes(paths, count, arguments, quiet)
    return merge_profiles([str(path) for path in paths], profiles)


def read_rank(path: Path, **arguments) -> Union[ProfileSession, DeviceProfile]:
    """One rank's profile, read as `sectionmark.report` reads a file: its session, or for a profile of several
    devices its `DeviceProfile` (the figures only, not the run that reads its events again for the views); a
    failure is one line naming the file."""
    try:
        result = report(path, **arguments)
        if isinstance(result, DeviceProfile):
            return DeviceProfile(**{field.name: getattr(result, field.name) for field in fields(DeviceProfile)})
        return result.session
    except SectionmarkError as error:
        message = str(error)
        raise SectionmarkError(message if str(path) in message else f"{path}: {message}") from None
    except OSError as error:
        raise SectionmarkError(f"cannot read {path}: {error.strerror or error}") from None


def _read_in_processes(paths: list[Path], count: int, arguments: dict,
                       quiet: bool) -> list[Union[ProfileSession, DeviceProfile]]:
    """Each file read in a process of its own, ``count`` at a time; the first failure (or an interrupt) raised
    once the reads running have ended, none started after it."""
    with progress(f"reading {len(paths)} rank profiles in {count} processes", quiet) as step:
        pool = ProcessPoolExecutor(count, mp_context=multiprocessing.get_context("fork"))
        try:
            futures: list[Future] = [pool.submit(read_rank, path, **arguments) for path in paths]
            pending = set(futures)
            while pending:
                done, pending = wait(pending, return_when=FIRST_EXCEPTION)
                failed = next((future for future in futures if future in done and future.exception()), None)
                if failed is not None:
                    raise failed.exception()
                step(f"{len(futures) - len(pending)} of {len(futures)} read")
            return [future.result() for future in futures]
        finally:  # on a failure or an interrupt, no file not yet started is read
            pool.shutdown(wait=True, cancel_futures=True)
