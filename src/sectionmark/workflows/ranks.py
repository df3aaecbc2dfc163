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
no threads of IREE's). A profile of several devices in one process is refused
before its events are read (its devices' sessions are not merged across ranks
yet). A file that cannot be read stops the report with
one line naming it; the reads still running are let finish and nothing is
written.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import FIRST_EXCEPTION, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Optional, Sequence, Union

from sectionmark.artifacts import read_section_map
from sectionmark.errors import SectionmarkError
from sectionmark.profiling.ranks import RankProfile, RankReport, merge_ranks
from sectionmark.profiling.session import ProfileSession
from sectionmark.progress import progress
from sectionmark.readers.sources import recorded_devices
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
) -> RankReport:
    """Profiles of one module recorded by several processes (ranks), reported together.

    ``profile_paths``: one profile file per rank, in rank order (rank 0
    first); each is read as ``sectionmark.report(path, section_map, calls=,
    warmup=, function=, workers=)`` reads it. Returns a `RankReport`: per
    section, its busy time per call on each rank, their min / median / max and
    the slowest rank (the straggler); ``report.ranks[i].session`` is rank i's
    own profile. ``processes``: files read at once (None: one per file, up to
    the machine's cores). ``quiet``: no progress line on the terminal.
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
        sessions = [read_rank(path, **arguments) for path in paths]
    else:
        sessions = _read_in_processes(paths, count, arguments, quiet)
    return merge_ranks([RankProfile(str(path), session) for path, session in zip(paths, sessions)])


def read_rank(path: Path, **arguments) -> ProfileSession:
    """One rank's session, read as `sectionmark.report` reads a file; a failure is one line naming the file.
    A profile of several devices is refused before its events are read: ranks' per-device sessions are not
    merged yet."""
    try:
        devices = recorded_devices(path)
        if len(devices) > 1:
            raise SectionmarkError(
                f"{path}: a profile of {len(devices)} devices ({', '.join(map(str, devices))}); ranks of runs on "
                f"several devices are not merged yet: report it alone (sectionmark report {path} --map MAP)")
        return report(path, **arguments).session
    except SectionmarkError as error:
        message = str(error)
        raise SectionmarkError(message if str(path) in message else f"{path}: {message}") from None
    except OSError as error:
        raise SectionmarkError(f"cannot read {path}: {error.strerror or error}") from None


def _read_in_processes(paths: list[Path], count: int, arguments: dict, quiet: bool) -> list[ProfileSession]:
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
