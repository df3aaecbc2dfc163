"""A host-timed .ireeprof bundle's dispatches read a window of whole submissions at a time, in bounded memory.

`read_profile` returns every dispatch at once: 64 bytes per event, so a long
profile's table outgrows the machine (10M events: 640 MB). A reader that only
sums the events (`sectionmark.profiling.streamed`) reads them here instead:
the host events are decoded ``HOST_EVENTS_WINDOW`` at a time (in C), and each
window yields the dispatches of the submissions whose execution event it
read, sorted and checked as `checked_profile` checks them. IREE writes a
submission's dispatch events, then its execution event, so a window holds
whole submissions; dispatches whose execution comes in a later window wait
for it.

This is a fast path, not a second reader: wherever the file is not in the
order it relies on, or fails any check, the stream raises `NotStreamable` and
the caller reads the profile whole with `read_profile`, which gives the same
events or the precise error line. Each window is decoded and checked in C when
the extension is built, else with numpy (the same results, slower).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO, Iterator, Optional

import numpy as np

from sectionmark.artifacts.files import open_regular
from sectionmark.errors import SectionmarkError
from sectionmark.readers.arrays import strictly_increasing
from sectionmark.readers.bundle_events import (HOST_EVENTS_WINDOW, OpenBundle, decode_memory_events, open_bundle,
                                               split_with_numpy)
from sectionmark.readers.bundle_records import (BUNDLE_MAGIC, HOST_EVENT, MEMORY_EVENT, RecordPositions,
                                                UnsupportedLayout, records_at)
from sectionmark.readers.checks import (by_submission_and_start, check_links, check_times, exports_by_executable,
                                        recorded_commands, sorted_by)
from sectionmark.readers.event_model import (ALLOCATION_DTYPE, DISPATCH_DTYPE, MAX_TIMESTAMP_NS, MEMORY_DTYPE,
                                             MEMORY_POOL_STATS, QUEUE_ALLOCA, QUEUE_OP_DTYPE, SUBMISSION_DTYPE, Profile,
                                             Provenance, native)


class NotStreamable(Exception):
    """The profile cannot be read in windows here: read it whole (`read_profile`), which says why or reads it."""


class DispatchStream:
    """The dispatches of a host-timed bundle, a window at a time (`windows`), and everything else about it.

    ``profile`` (before the windows: its metadata; after: with every
    submission and queue operation) is the `Profile` `read_profile` would
    give, less its dispatches.
    """

    def __init__(self, bundle: OpenBundle, file: BinaryIO):
        self._bundle, self._file, self._buffer = bundle, file, np.empty(0, np.uint8)
        self.command_buffers, self._timed = recorded_commands(bundle.path, bundle.declared, bundle.commands)
        self._memory = np.zeros(0, MEMORY_DTYPE)  # read with the host events (`_MemoryLevels`)
        self._allocations = np.zeros(0, ALLOCATION_DTYPE)
        self._submissions = np.zeros(0, SUBMISSION_DTYPE)
        self._queue_ops = np.zeros(0, QUEUE_OP_DTYPE)
        self.fraction_read = 0.0  # of the host events, by the windows so far

    @property
    def path(self) -> Path:
        return self._bundle.path

    def profile(self) -> Profile:
        """The profile without its dispatches; its submissions and queue operations are all there once `windows`
        has ended."""
        queue_ops = sorted_by(self._queue_ops, "start_ns", "submission")
        return Profile(np.zeros(0, DISPATCH_DTYPE), self._submissions, self._bundle.keys, self.command_buffers,
                       exports_by_executable(self._bundle.functions), queue_ops, self._memory,
                       allocations=self._allocations, provenance=Provenance("bundle"))

    def windows(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(dispatches, submissions) of successive whole submissions, in submission order: the dispatches sorted by
        (submission, start) and checked against their submissions (SUBMISSION_DTYPE, sorted). The dispatches
        are rows of a buffer the next window is read into: copy what must outlive the step."""
        bundle = self._bundle
        positions = bundle.host_event_positions()
        total = len(positions)
        # Untouched rows of np.empty cost no memory: these grow only by the executions and queue operations read.
        submissions, queue_ops = np.empty(total, SUBMISSION_DTYPE), np.empty(total, QUEUE_OP_DTYPE)
        done_submissions = done_queue_ops = 0
        pending = np.zeros(0, DISPATCH_DTYPE)
        last_executed: Optional[int] = None  # the id of the last execution read
        previous_event: Optional[tuple[int, int]] = None  # (stream, event id) of the last host event read
        rows = np.empty(0, DISPATCH_DTYPE)  # reused: fresh memory costs a page fault per page touched
        memory = _MemoryLevels(RecordPositions(bundle.chunks["memory-events"], MEMORY_EVENT.itemsize))
        covered = memory.first_position(int(positions[0]) if total else bundle.data.size)  # read up to here
        for begin in range(0, total, HOST_EVENTS_WINDOW):
            window = positions[begin : begin + HOST_EVENTS_WINDOW]
            if len(rows) < len(pending) + len(window):
                rows = np.empty(len(pending) + len(window), DISPATCH_DTYPE)
            rows[: len(pending)] = pending
            # From where the last window's bytes ended: the memory events between host events come with them.
            end = int(window[-1]) + HOST_EVENT.itemsize
            data = self._read(covered, end)
            memory.take(data, covered)
            offsets, covered = window - covered, end
            (added, new_submissions, new_queue_ops), passed = _split(
                bundle, data, offsets, [rows[len(pending):], submissions[done_submissions:], queue_ops[done_queue_ops:]])
            first, last = records_at(data, offsets[[0, -1]], HOST_EVENT)
            if not passed or (
                    previous_event is not None and (int(first["stream"]), int(first["event_id"])) <= previous_event):
                raise NotStreamable("an event fails a check or repeats")
            previous_event = (int(last["stream"]), int(last["event_id"]))
            self.fraction_read = (begin + len(window)) / total
            executed = submissions[done_submissions : done_submissions + new_submissions]
            done_submissions += new_submissions
            done_queue_ops += new_queue_ops
            ids = executed["submission"]
            if len(ids) and ((ids[1:] <= ids[:-1]).any() or (last_executed is not None and ids[0] <= last_executed)):
                raise NotStreamable("executions out of submission order")
            dispatches = rows[: len(pending) + added]
            if not len(ids):
                pending = dispatches.copy()
                continue
            submission = dispatches["submission"]
            if last_executed is not None and len(submission) and submission.min() <= last_executed:
                raise NotStreamable("a dispatch event after its submission's execution event")
            last_executed = int(ids[-1])
            if (submission[1:] >= submission[:-1]).all():  # as IREE writes them: the complete ones first
                cut = int(np.searchsorted(submission, last_executed, side="right"))
                complete, pending = dispatches[:cut], dispatches[cut:].copy()
            else:
                done = submission <= last_executed
                complete, pending = dispatches[done], dispatches[~done]
            # The rows are a view of the reused buffer: valid until the next window is read.
            yield self._checked(complete, executed), executed
        if memory.remaining():  # memory events after the last host event
            memory.take(self._read(covered, memory.last_end()), covered)
        self._memory, self._allocations = memory.kept()
        bundle.close()
        self._file.close()
        self._buffer = np.empty(0, np.uint8)
        if len(pending):
            raise NotStreamable("dispatches of a submission that never executes")
        self._submissions, self._queue_ops = submissions[:done_submissions], queue_ops[:done_queue_ops]
        try:
            check_times(self.path, pending, self._submissions, self._queue_ops, self._memory, host_events_plausible=True)
        except SectionmarkError as problem:
            raise NotStreamable(str(problem)) from None

    def _read(self, start: int, end: int) -> np.ndarray:
        """Bytes ``[start, end)`` of the file, read into one reused buffer: read, not mapped, so that no page of
        the file stays in this process, nor costs a page fault to map in and a call to give back."""
        length = end - start
        if len(self._buffer) < length:
            self._buffer = np.empty(length, np.uint8)  # not zeroed: the read fills what is used
        data = self._buffer[:length]
        if os.preadv(self._file.fileno(), [data], start) != length:
            raise NotStreamable("the file is shorter than when it was opened")
        return data

    def _checked(self, dispatches: np.ndarray, executed: np.ndarray) -> np.ndarray:
        """The dispatches of the submissions ``executed``, sorted and checked against them (`checked_profile`'s
        link checks; any failure: read the profile whole, which names it)."""
        dispatches = by_submission_and_start(dispatches)
        try:
            check_links(self.path, dispatches, executed, self.command_buffers, self._timed)
        except SectionmarkError as problem:
            raise NotStreamable(str(problem)) from None
        return dispatches


def _split(bundle: OpenBundle, data: np.ndarray, offsets: np.ndarray, outputs: list[np.ndarray]) -> tuple[list[int],
                                                                                                        bool]:
    """The host events at ``offsets`` of ``data`` into the starts of ``outputs`` (dispatch, submission and
    queue-operation tables): the rows added to each, and whether every event passed its checks (layout, type,
    status, function, plausible times) with (stream, event id) strictly increasing. In C when built."""
    if native() is not None:
        (*added, bad_length, bad_type, failed, unknown, plausible, _sorted, increasing) = native().host_events(
            data, offsets, bundle.known_codes, bundle.known_keys, *outputs)
        return added, max(bad_length, bad_type, failed, unknown) < 0 and plausible and increasing
    added, failures = split_with_numpy(data, offsets, bundle.known_codes, bundle.known_keys, outputs)
    try:  # the times of the rows the window added, as the whole read checks them
        check_times(bundle.path, *(table[:count] for table, count in zip(outputs, added)), np.zeros(0, MEMORY_DTYPE))
    except SectionmarkError:
        return added, False
    events = records_at(data, offsets, HOST_EVENT)
    return added, max(failures) < 0 and strictly_increasing(events["stream"], events["event_id"])


class _MemoryLevels:
    """The memory events device memory is computed from (`queue_time.device_memory`), decoded and checked
    (as `memory_events` does) from the bytes the host events are read with, keeping only those that change a
    pool's reserved bytes (the first of each pool too), and of the queue allocations their time and size: the
    others add nothing to a level's peak or time average (a long profile has eight memory events per call: two
    change the level, two are allocations)."""

    def __init__(self, positions: RecordPositions):
        self._positions, self._next = positions, 0
        self._levels_kept = _Rows(len(positions), MEMORY_DTYPE)
        self._allocations = _Rows(len(positions), ALLOCATION_DTYPE)
        self._levels: dict[int, int] = {}  # pool -> its reserved bytes after the last event read
        self._last_event, self._last_time = (-1, -1), 0

    def first_position(self, host_start: int) -> int:
        """Where reading must start to cover the memory events too: before the first host event, or the first
        memory event if it comes earlier."""
        return min(host_start, int(self._positions[[0]][0])) if len(self._positions) else host_start

    def remaining(self) -> bool:
        return self._next < len(self._positions)

    def last_end(self) -> int:
        return int(self._positions[[len(self._positions) - 1]][0]) + MEMORY_EVENT.itemsize

    def take(self, data: np.ndarray, start: int) -> None:
        """Decode the memory events lying wholly inside ``data``, the file's bytes from ``start`` on."""
        while self.remaining():
            window = self._positions[self._next : self._next + HOST_EVENTS_WINDOW]
            inside = int(np.searchsorted(window, start + len(data) - MEMORY_EVENT.itemsize, side="right"))
            if not inside:
                return
            self._decode(data, window[:inside] - start)
            self._next += inside

    def _decode(self, data: np.ndarray, offsets: np.ndarray) -> None:
        rows = np.empty(len(offsets), MEMORY_DTYPE)
        devices, event_ids = np.empty(len(offsets), np.uint64), np.empty(len(offsets), np.uint64)
        bad_length, unknown, increasing = decode_memory_events(data, offsets, rows, devices, event_ids)
        times = rows["time_ns"]
        if (bad_length >= 0 or unknown >= 0 or not increasing or (int(devices[0]), int(event_ids[0])) <= self._last_event
                or times[0] < self._last_time or (times[1:] < times[:-1]).any() or times[-1] >= MAX_TIMESTAMP_NS):
            raise NotStreamable("memory events out of order or failing a check")
        self._last_event, self._last_time = (int(devices[-1]), int(event_ids[-1])), int(times[-1])
        for table, chosen in ((self._levels_kept, rows[_level_changes(rows, self._levels)]),
                              (self._allocations, rows[["time_ns", "length"]][rows["type"] == QUEUE_ALLOCA])):
            table.append(chosen)

    def kept(self) -> tuple[np.ndarray, np.ndarray]:
        """(the memory events kept, the queue allocations)."""
        if self.remaining():
            raise NotStreamable("memory events outside the file's records")
        return self._levels_kept.rows(), self._allocations.rows()


class _Rows:
    """A table filled in order, at most ``capacity`` rows: np.empty's rows never written cost no memory."""

    def __init__(self, capacity: int, dtype: np.dtype):
        self._table, self._count = np.empty(capacity, dtype), 0

    def append(self, rows: np.ndarray) -> None:
        self._table[self._count : self._count + len(rows)] = rows
        self._count += len(rows)

    def rows(self) -> np.ndarray:
        return self._table[: self._count]


def _level_changes(events: np.ndarray, levels: dict[int, int]) -> np.ndarray:
    """Which of ``events`` (in time order) change their pool's reserved bytes from the pool's previous event (in
    ``levels``, updated: the pools' bytes after these events) or are a pool's first."""
    with_stats = (events["flags"] & MEMORY_POOL_STATS) != 0
    pools, reserved = events["pool"], events["pool_reserved"]
    rows = np.flatnonzero(with_stats)
    by_pool = rows[np.lexsort((rows, pools[rows]))]  # each pool's events in time order
    pool, level = pools[by_pool], reserved[by_pool].astype(np.int64)
    first_of_pool = np.concatenate([[True], pool[1:] != pool[:-1]]) if len(by_pool) else np.zeros(0, bool)
    previous = np.concatenate([[0], level[:-1]]) if len(by_pool) else level
    known = np.array([levels.get(int(p), -1) for p in pool[first_of_pool].tolist()], np.int64)
    previous[first_of_pool] = known  # -1 for a pool not seen before: its first event is kept
    changes = np.zeros(len(events), bool)
    changes[by_pool[level != previous]] = True
    last_of_pool = np.concatenate([pool[1:] != pool[:-1], [True]]) if len(by_pool) else first_of_pool
    levels.update(zip(pool[last_of_pool].tolist(), level[last_of_pool].tolist()))
    return changes


def open_stream(path: Path) -> Optional[DispatchStream]:
    """The dispatch stream of a host-timed .ireeprof bundle; None for anything else (a device-timed profile, JSONL,
    a layout the bundle reader does not know): `read_profile` reads those whole."""
    file = open_regular(path, "profile")
    try:
        if file.read(4) == BUNDLE_MAGIC:
            bundle = open_bundle(path, file, os.fstat(file.fileno()).st_size)
            if not bundle.device_timed:
                return DispatchStream(bundle, file)  # it reads the events from the file, and closes it
    except (SectionmarkError, UnsupportedLayout, NotStreamable):
        pass  # a bad file: read_profile says what is wrong with it, in the order of its checks
    file.close()
    return None
