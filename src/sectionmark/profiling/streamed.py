"""The per-section times of a long .ireeprof in bounded memory: its dispatches read, attributed and summed a
window at a time.

`attribute` + `ProfileSession.build` hold every dispatch event (64 bytes, plus
8 for its slot and call): a 10M-event profile needs gigabytes. Here the
events go through `readers.ireeprof_stream` a window of whole submissions at
a time; each window is attributed (`SlotMatcher`, the same C pass) and summed
(`event_sums`, per submission rather than per call: which call a submission
belongs to is known only once all of them are read), and only the sums stay.
What is kept grows with the submissions (a row of per-composition sums each),
not with the events. The session then comes from `ProfileSession.from_totals`
like any other; its timelines read the events again when a view asks
(`ProfileSession.events`).

The sums are those of the whole-table path, exactly for every integer figure
(busy time, counts, tiles, first starts and last ends, the dispatch union of
each call); wall time is the same sweep (`wall_parts`) over each window.
Three things make the windows independent, and are checked: submissions'
dispatches do not overlap in time (one submission's all end before the next
one's first starts), the warmup calls' events are among the first
``WARMUP_ROWS`` (their sums are taken back out of the totals), and the stream
itself (`NotStreamable`). When any of them fails, or anything raises an error,
the caller reads the profile whole, which gives the same session or the
precise error line.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from sectionmark.errors import SectionmarkError
from sectionmark.profiling.attribute import (Attribution, SlotMatcher, attribute, attributed_events,
                                             attribution_without_events, call_numbers, check_fingerprint)
from sectionmark.profiling.section_time import EventSums, TileSums, composition_walls, event_sums
from sectionmark.profiling.session import EventTotals, ProfileSession
from sectionmark.readers.ireeprof import read_profile
from sectionmark.readers.ireeprof_stream import DispatchStream, NotStreamable, open_stream
from sectionmark.section_map import SectionMap

# Dispatch rows kept from the start of a profile, from which the warmup calls' sums are taken back out of the
# totals (16 MB: a warmup of a few calls of a large model; a longer warmup reads the profile whole).
WARMUP_ROWS = 1 << 18


def streamed_session(path: Path, section_map: SectionMap, *, calls: Optional[int], warmup: int,
                     function: Optional[str], workers: Optional[int] = None,
                     device: Optional[str] = None) -> Optional[ProfileSession]:
    """The session of a host-timed .ireeprof read in windows; None where it must be read whole (`read_profile`:
    another format, an order or check the windows rely on fails, or any error, which the whole read names)."""
    stream = open_stream(path)
    if stream is None:
        return None
    identity = _identity(path)
    try:
        attribution, totals = _streamed_totals(stream, section_map, calls, warmup, function)
        del stream  # its tables of submissions and queue operations: the attribution has what it needs of them
        session = ProfileSession.from_totals(attribution, totals, section_map, function, workers, device)
    except (NotStreamable, SectionmarkError):
        return None
    session.reread = _rereader(path, identity, section_map, calls, warmup, function)
    return session


def keep_scratch_profile(session: ProfileSession, path: Path, section_map: SectionMap, *, calls: Optional[int],
                         warmup: int, function: Optional[str]) -> None:
    """Move a windowed session's profile out of a scratch folder about to go (`sectionmark.profiling.profile`'s)
    into a folder of its own, which goes with the session (or at exit), and read the events from there."""
    folder = Path(tempfile.mkdtemp(prefix="sectionmark-profile-"))
    weakref.finalize(session, shutil.rmtree, folder, ignore_errors=True)
    kept = Path(shutil.move(str(path), folder / path.name))
    session.reread = _rereader(kept, _identity(kept), section_map, calls, warmup, function)


def _identity(path: Path) -> tuple[int, int, int]:
    status = os.stat(path)
    return status.st_ino, status.st_size, status.st_mtime_ns


def _rereader(path: Path, identity: tuple[int, int, int], section_map: SectionMap, calls: Optional[int],
              warmup: int, function: Optional[str]) -> Callable[[], Attribution]:
    """The events of the profile read whole, when a view needs them (the file must not have changed)."""
    def reread() -> Attribution:
        try:
            unchanged = _identity(path) == identity
        except OSError:
            unchanged = False
        if not unchanged:
            raise SectionmarkError(f"{path}: the profile changed or went away since it was read; read it again "
                                   "to draw its timeline")
        return attribute(read_profile(path), section_map, calls=calls, warmup=warmup, function=function)
    return reread


@dataclass
class _Sums:
    """Running sums over the windows read so far: totals per composition and slot, rows per submission."""

    compositions: int
    slots: int
    busy: np.ndarray = field(init=False)
    count: np.ndarray = field(init=False)
    slot_busy: np.ndarray = field(init=False)
    slot_count: np.ndarray = field(init=False)
    cpu: np.ndarray = field(init=False)
    tiles: np.ndarray = field(init=False)
    wall: np.ndarray = field(init=False)
    total_ns: int = 0
    total_tile_ns: int = 0
    total_tiles: int = 0
    disjoint: bool = True  # every window's events disjoint (then wall parts are durations)
    by_submission: "_SubmissionRows" = field(init=False)

    def __post_init__(self) -> None:
        self.by_submission = _SubmissionRows(self.compositions)
        self.busy, self.count = np.zeros(self.compositions), np.zeros(self.compositions, np.int64)
        self.slot_busy, self.slot_count = np.zeros(self.slots), np.zeros(self.slots, np.int64)
        self.cpu, self.tiles, self.wall = (np.zeros(self.compositions) for _ in range(3))

    def add(self, sums: EventSums, wall: np.ndarray, sign: int = 1) -> None:
        """Add (``sign`` 1) or take back out (-1) the totals of one set of events."""
        self.busy += sign * sums.busy
        self.count += sign * sums.count
        self.slot_busy += sign * sums.slot_busy
        self.slot_count += sign * sums.slot_count
        self.wall += sign * wall
        self.total_ns += sign * sums.total_ns
        if sums.tiles is not None:
            self.cpu += sign * sums.tiles.cpu
            self.tiles += sign * sums.tiles.tiles
            self.total_tile_ns += sign * sums.tiles.total_ns
            self.total_tiles += sign * sums.tiles.total_tiles


def _window_sums(matcher: SlotMatcher, dispatches: np.ndarray, slots: np.ndarray, rows: np.ndarray,
                 count: int) -> tuple[EventSums, np.ndarray, np.ndarray]:
    """(event sums per row of ``count``, wall per composition, dispatch union per row) of events with their
    ``slots`` and ``rows`` (a submission's rank in the window)."""
    window = Attribution(events=dispatches, event_slots=slots, event_calls=rows, slots=matcher.slots,
                         compositions=matcher.compositions, calls=count, warmup=0, calls_known=True, keys=[],
                         buffer_matches={})
    sums = event_sums(window)
    if sums.disjoint:  # each submission's union is its busy time
        union = np.rint(sums.busy_by_call.sum(axis=1)).astype(np.int64)
    else:
        union = _union_by_row(dispatches["start_ns"].astype(np.int64), dispatches["end_ns"].astype(np.int64), rows,
                              count)
    return sums, composition_walls(window, sums), union


def _union_by_row(starts: np.ndarray, ends: np.ndarray, rows: np.ndarray, count: int) -> np.ndarray:
    """The length of the union of each row's intervals, for intervals in (row, start) order whose rows do not
    overlap in time (checked by the caller): each interval adds what it reaches past all before it."""
    reached = np.maximum.accumulate(ends)
    before = np.concatenate([[np.iinfo(np.int64).min], reached[:-1]])
    added = np.maximum(ends - np.maximum(starts, before), 0)
    return np.bincount(rows, weights=added, minlength=count).astype(np.int64)


def _streamed_totals(stream: DispatchStream, section_map: SectionMap, calls: Optional[int], warmup: int,
                     function: Optional[str]) -> tuple[Attribution, EventTotals]:
    metadata = stream.profile()  # before the windows: no submission yet
    check_fingerprint(metadata, section_map)
    matcher = SlotMatcher(section_map, function, metadata.keys)
    sums, first_rows = _read_windows(stream, matcher)
    profile = stream.profile()
    call_of_submission, measured_calls, exact = call_numbers(profile, calls, warmup)
    warmup_submissions = int(np.count_nonzero(call_of_submission < 0))
    if warmup_submissions:
        first_rows.take_out(sums, matcher, warmup_submissions)
    del first_rows
    busy, first, last, union = sums.by_submission.tables()
    del sums.by_submission  # the tables go once folded into calls (`del busy, first, last` below)
    _check_submissions_apart(first, last)
    measured = slice(warmup_submissions, None)  # calls follow the submissions: the warmup ones come first
    groups = np.flatnonzero(np.concatenate([[True], np.diff(call_of_submission[measured]) != 0]))
    tiles = (TileSums(sums.cpu, sums.tiles, sums.total_tile_ns, sums.total_tiles) if sums.total_tiles else None)
    totals = EventSums(
        busy_by_call=np.add.reduceat(busy[measured], groups), busy=sums.busy, count=sums.count,
        slot_busy=sums.slot_busy, slot_count=sums.slot_count, total_ns=sums.total_ns, disjoint=sums.disjoint,
        tiles=tiles, first_start=np.minimum.reduceat(first[measured], groups),
        last_end=np.maximum.reduceat(last[measured], groups))
    del busy, first, last
    union_by_call = np.add.reduceat(union[measured], groups)

    def dispatch_union(window_starts: np.ndarray, window_ends: np.ndarray) -> np.ndarray:
        return union_by_call  # dispatches lie in their execution, inside their call's window

    wall = sums.busy.copy() if sums.disjoint else sums.wall
    attribution = attribution_without_events(profile, matcher, call_of_submission, measured_calls, exact, warmup)
    return attribution, EventTotals(totals, wall, int(union_by_call.sum()), dispatch_union, events_kept=False)


class _SubmissionRows:
    """Per submission, in order: its busy time, first start and last end per composition, and its dispatches'
    union. Kept in tables that double when full, not as a list of each window's small arrays: those, long-lived
    among the windows' temporaries, leave the allocator's heap in holes it cannot give back (13 MB at 10M events);
    large tables are mapped apart, and rows of np.empty never written cost nothing."""

    def __init__(self, compositions: int):
        self._tables = [np.empty((1024, compositions)), np.empty((1024, compositions), np.int64),
                        np.empty((1024, compositions), np.int64), np.empty(1024, np.int64)]
        self._count = 0

    def reserve(self, capacity: int) -> None:
        """Room for ``capacity`` rows (grown early, from an estimate, a copy of a long profile's rows is not made)."""
        if capacity <= len(self._tables[0]):
            return
        for index, table in enumerate(self._tables):
            grown = np.empty((capacity, *table.shape[1:]), table.dtype)
            grown[: self._count] = table[: self._count]
            self._tables[index] = grown

    def append(self, busy: np.ndarray, first: np.ndarray, last: np.ndarray, union: np.ndarray) -> None:
        count = len(union)
        if self._count + count > len(self._tables[0]):
            self.reserve(max(2 * len(self._tables[0]), self._count + count))
        for table, part in zip(self._tables, (busy, first, last, union)):
            table[self._count : self._count + count] = part
        self._count += count

    def tables(self) -> list[np.ndarray]:
        """(busy, first, last, union) of every submission so far."""
        return [table[: self._count] for table in self._tables]


class _FirstRows:
    """The dispatch rows of the first windows (up to ``WARMUP_ROWS``), from which the warmup calls' sums are taken
    back out of the totals once the calls are known."""

    def __init__(self) -> None:
        self._parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (dispatches, slots, submission ranks)
        self._rows = 0
        self._keeping = True
        self.submissions = 0  # the submissions the rows kept cover, from the first

    def add(self, dispatches: np.ndarray, slots: np.ndarray, ranks: np.ndarray, submissions: int) -> None:
        """One window: its dispatches with their slots and submission ranks, and its submissions (some may run
        no dispatch)."""
        self._keeping = self._keeping and self._rows + len(dispatches) <= WARMUP_ROWS
        if self._keeping:
            if len(dispatches):
                self._parts.append((dispatches.copy(), slots, ranks))  # the stream reuses its rows
                self._rows += len(dispatches)
            self.submissions += submissions

    def take_out(self, sums: _Sums, matcher: SlotMatcher, warmup_submissions: int) -> None:
        """Subtract the sums of the first ``warmup_submissions`` submissions' events (exact: sums of whole
        numbers) from ``sums``."""
        if self.submissions < warmup_submissions:
            raise NotStreamable("the warmup calls reach past the rows kept")
        if not self._parts:  # the warmup calls ran no dispatch
            return
        dispatches, slots, ranks = (np.concatenate([part[index] for part in self._parts]) for index in range(3))
        early = ranks < warmup_submissions
        window, wall, _union = _window_sums(matcher, dispatches[early], slots[early],
                                            np.zeros(int(early.sum()), np.int32), 1)
        sums.add(window, wall, sign=-1)


def _read_windows(stream: DispatchStream, matcher: SlotMatcher) -> tuple[_Sums, _FirstRows]:
    """Every window of ``stream`` attributed and summed: the totals, and the first rows (for the warmup)."""
    compositions = len(matcher.compositions)
    sums, first_rows = _Sums(compositions, len(matcher.slots)), _FirstRows()
    read = 0
    for dispatches, executed in stream.windows():
        count = len(executed)
        if len(dispatches):
            runtime_ids, bases, flat = matcher.lookup(dispatches, stream.command_buffers)
            (slots, rows), failures = attributed_events(dispatches, runtime_ids, bases, flat, matcher.slot_keys,
                                                        executed["submission"], np.arange(count), 0)
            if max(failures.unplaced, failures.wrong_key, failures.orphan) >= 0:
                raise NotStreamable("a dispatch the section map does not place")
            window, wall, union = _window_sums(matcher, dispatches, slots, rows, count)
            sums.add(window, wall)
            sums.disjoint &= window.disjoint
            sums.by_submission.append(window.busy_by_call, window.first_start, window.last_end, union)
            first_rows.add(dispatches, slots, rows + read, count)
        else:
            high, low = np.iinfo(np.int64).max, np.iinfo(np.int64).min
            sums.by_submission.append(np.zeros((count, compositions)), np.full((count, compositions), high),
                                      np.full((count, compositions), low), np.zeros(count, np.int64))
            first_rows.add(dispatches, np.zeros(0, np.int32), np.zeros(0, np.int32), count)
        read += count
        # The submissions to come, from the share of the host events read: one early growth, not a late copy.
        sums.by_submission.reserve(int(read / max(stream.fraction_read, 1e-9) * 1.1) + 1024)
    return sums, first_rows


def _check_submissions_apart(first: np.ndarray, last: np.ndarray) -> None:
    """Each submission's dispatches end before the next submission's begin (then per-submission sums add up)."""
    starts, ends = first.min(axis=1), last.max(axis=1)
    ran = starts <= ends
    starts, ends = starts[ran], ends[ran]
    if len(starts) > 1 and (starts[1:] < ends[:-1]).any():
        raise NotStreamable("submissions' dispatches overlap in time")
