"""A host-timed .ireeprof bundle's events read in windows, in bounded memory: the one path from such a file to a
session (`sectionmark.readers.sources`).

`read_profile` returns every dispatch at once: 64 bytes per event, so a long
profile's table outgrows the machine (10M events: 640 MB). Here the events
come in two passes. The first (`DispatchStream.layout`) gathers the host
events' types from the mapped file and copies only the executions and queue
operations: with them the calls are numbered and each window's times bounded
before any dispatch is read. The second (`DispatchStream.windows`) decodes
the host events ``HOST_EVENTS_WINDOW`` at a time (in C when built, else with
numpy: the same results) and yields the dispatches of the submissions whose
execution event it read, sorted and checked as `checked_profile` checks them,
with its error lines. IREE writes a submission's dispatch events, then its
execution event, so a window holds whole submissions; dispatches whose
execution comes in a later window wait for it.

`FirstPass` makes the first pass: it copies the host events that are not dispatches (a call submits one or a few
among its dispatches), a window of the mapped file's host events at a time (in C when built), and checks what
must be checked before any window (a record layout this reader does not know is read through IREE's export
instead). Given to `open_bundle` as its chunk visitor, it makes the pass while the record walk has each part of
the file mapped: every page of a long profile is mapped in once, not once for the walk and again for this pass.
What it found counts when the walk's chunks are those it read (one device's bundle, well formed); else the
stream makes the pass after the walk.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import replace
from pathlib import Path
from typing import BinaryIO, Iterator, Optional

import numpy as np

from sectionmark.errors import SectionmarkError
from sectionmark.readers.arrays import first_true, strictly_increasing
from sectionmark.readers.bundle_events import (HOST_EVENTS_WINDOW, OpenBundle, decode_memory_events, fill_columns,
                                               raise_host_event_error, split_with_numpy)
from sectionmark.readers.bundle_records import (HOST_EVENT, MEMORY_EVENT, Chunks, RecordPositions, UnsupportedLayout,
                                                records_at, release_pages)
from sectionmark.readers.checks import (by_submission_and_start, check_links, check_times, check_unique, copy_rows,
                                        corrupt, exports_by_executable, in_dispatch_order, recorded_commands, rows_of,
                                        same_records, sort_order, sorted_by)
from sectionmark.readers.event_model import (ALLOCATION_DTYPE, DISPATCH_DTYPE, EVENT_DISPATCH, EVENT_EXECUTE,
                                             MAX_TIMESTAMP_NS, MEMORY_DTYPE, MEMORY_POOL_STATS, QUEUE_ALLOCA,
                                             QUEUE_OP_DTYPE, SUBMISSION_DTYPE, Profile, Provenance, native)

# ---------------------------------------------------------------- the first pass: executions and queue operations

_U32 = np.dtype("<u4")  # a record's length (its first field) or type (4 bytes in)
_SCANNED = ("host-execution-events", "memory-events")


class FirstPass:
    """The bundle's command-buffer executions and other queue operations, copied from its host events a window at
    a time (`scan`), with the checks of the whole read that must come before any window: every host event's
    (stream, event id) unique (IREE writes them increasing, which the pass confirms from the same cache lines; a
    file where they are not is checked whole), and every host and memory event of the known record length (a
    layout this reader does not know: `UnsupportedLayout`, raised by `tables`). A record failing another check
    is left to the windows, which name it."""

    def __init__(self) -> None:
        # Filled in place (not parts concatenated at the end): the parts of a long profile's walk, interleaved with
        # its other temporaries, left the heap in pieces that the read's later tables could not use.
        self._executions: Optional[Rows] = None
        self._operations: Optional[Rows] = None
        self._increasing, self._last = True, None
        self._host_lengths_known = self._memory_lengths_known = True
        self._visited: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {name: [] for name in _SCANNED}
        self._visiting = True  # off: what the walk shows cannot be read here (several devices, odd chunks)
        # The C pass's outputs (dispatch, execution, queue-operation rows), reused from window to window.
        self._scratch: tuple[np.ndarray, ...] = (np.zeros(0, DISPATCH_DTYPE),) * 3

    def visit(self, data: np.ndarray, chunks: dict[str, tuple[np.ndarray, np.ndarray]], sessions: int) -> None:
        """`bundle_records.ChunkVisitor`: scan the host events and memory event lengths of a window of the walk."""
        if not self._visiting:
            return
        host, memory = chunks["host-execution-events"], chunks["memory-events"]
        if sessions > 1 or (host[1] % HOST_EVENT.itemsize).any() or (memory[1] % MEMORY_EVENT.itemsize).any():
            self._visiting = False  # several devices' bundle (split, then read per device), or chunks RecordPositions
            return  # refuses: the pass after the walk gives what the file deserves
        for name in _SCANNED:
            self._visited[name].append(chunks[name])
        positions = RecordPositions(Chunks(*host, host[0][:0], host[0][:0]), HOST_EVENT.itemsize)
        for begin in range(0, len(positions), HOST_EVENTS_WINDOW):
            self.scan(data, positions[begin : begin + HOST_EVENTS_WINDOW])
        memory_positions = RecordPositions(Chunks(*memory, memory[0][:0], memory[0][:0]), MEMORY_EVENT.itemsize)
        for begin in range(0, len(memory_positions), HOST_EVENTS_WINDOW):
            self.check_memory_lengths(data, memory_positions[begin : begin + HOST_EVENTS_WINDOW])

    def covers(self, bundle: OpenBundle) -> bool:
        """Whether the visits read exactly the bundle's host and memory event chunks (the walk checked them all)."""
        if not self._visiting:
            return False
        for name in _SCANNED:
            visited, chunks = self._visited[name], bundle.chunks[name]
            starts = np.concatenate([part[0] for part in visited]) if visited else chunks.starts[:0]
            lengths = np.concatenate([part[1] for part in visited]) if visited else chunks.lengths[:0]
            if not (np.array_equal(starts, chunks.starts) and np.array_equal(lengths, chunks.lengths)):
                return False
        return True

    def scan_mapped(self, bundle: OpenBundle) -> None:
        """The pass after the walk: each window of the mapped host events scanned, the memory events between them
        checked with them, then its pages given back, from where the last window's ended (the pages between two
        windows too), and every page at the end: none of the file stays mapped. Checked after the pass, each
        memory event would map its page in once more, and keep it: the whole file in the RSS."""
        positions = bundle.host_event_positions()
        memory = PositionsInOrder(RecordPositions(bundle.chunks["memory-events"], MEMORY_EVENT.itemsize))
        released = 0
        for begin in range(0, len(positions), HOST_EVENTS_WINDOW):
            window = positions[begin : begin + HOST_EVENTS_WINDOW]
            self.scan(bundle.data, window)
            end = int(window[-1]) + HOST_EVENT.itemsize
            for part in memory.before(end):
                self.check_memory_lengths(bundle.data, part)
            release_pages(bundle.mapped, released, end)
            released = end
        for part in memory.before(bundle.data.size):  # those after the last host event
            self.check_memory_lengths(bundle.data, part)
        # All: the kernel maps a page's neighbours in with it, those of windows given back before too.
        release_pages(bundle.mapped, 0, bundle.data.size)

    def scan(self, data: np.ndarray, window: np.ndarray) -> None:
        """The host events at byte offsets ``window`` of ``data`` (in file order, after those scanned before)."""
        if not len(window):
            return
        if self._executions is None or self._operations is None:  # at most a host event per 152 bytes of the file
            self._executions = Rows(data.size // HOST_EVENT.itemsize + 1, SUBMISSION_DTYPE)
            self._operations = Rows(data.size // HOST_EVENT.itemsize + 1, QUEUE_OP_DTYPE)
        if native() is not None:
            found = np.empty(len(window), np.int64)
            count, window_increasing, bad_length = native().not_dispatches(data, window, found)
            self._append_split(data, window[found[:count]])
        else:
            kinds = records_at(data, window + HOST_EVENT.fields["type"][1], _U32)
            self._append_fields(records_at(data, window[kinds != EVENT_DISPATCH], HOST_EVENT))
            identities = _identities(data, window)
            window_increasing = strictly_increasing(identities["stream"], identities["event_id"])
            bad_length = first_true(records_at(data, window, _U32) != HOST_EVENT.itemsize)
        self._host_lengths_known &= bad_length < 0
        ends = _identities(data, window[[0, -1]])
        self._increasing &= window_increasing and (self._last is None or tuple(ends[0].tolist()) > self._last)
        self._last = tuple(ends[1].tolist())

    def _append_split(self, data: np.ndarray, others: np.ndarray) -> None:
        """The executions and queue operations at byte offsets ``others`` of ``data`` (none a dispatch) added, split
        and decoded by the windows' own C pass (`_split`: the rows the windows compare with these)."""
        if len(self._scratch[0]) < len(others):
            self._scratch = tuple(np.empty(len(others), dtype) for dtype in
                                  (DISPATCH_DTYPE, SUBMISSION_DTYPE, QUEUE_OP_DTYPE))
        dispatches, executions, operations = self._scratch
        empty = np.zeros(0, np.uint64)
        _, added_executions, added_operations, *_ = native().host_events(
            data, others, empty, empty.view(np.uint32), dispatches, executions, operations)
        self._executions.append(executions[:added_executions])
        self._operations.append(operations[:added_operations])

    def _append_fields(self, others: np.ndarray) -> None:
        """The executions and queue operations ``others`` (HOST_EVENT records, none a dispatch) added."""
        for table, rows, dtype in ((self._executions, others[others["type"] == EVENT_EXECUTE], SUBMISSION_DTYPE),
                                   (self._operations, others[others["type"] != EVENT_EXECUTE], QUEUE_OP_DTYPE)):
            part = np.zeros(len(rows), dtype)
            fill_columns(part, rows, np.arange(len(rows)))
            table.append(part)

    def check_memory_lengths(self, data: np.ndarray, positions: np.ndarray) -> None:
        """Whether the memory events at ``positions`` have the known record length (those outside the file are
        left to the windows' error line)."""
        positions = positions[(positions >= 0) & (positions <= data.size - MEMORY_EVENT.itemsize)]
        self._memory_lengths_known &= not (records_at(data, positions, _U32) != MEMORY_EVENT.itemsize).any()

    def tables(self, bundle: OpenBundle) -> tuple[np.ndarray, np.ndarray, Optional[np.ndarray]]:
        """The executions (SUBMISSION_DTYPE, by submission) and other queue operations (QUEUE_OP_DTYPE, by start),
        and each queue operation's row among them in file order (None: the same); `UnsupportedLayout` for a
        record of another length, the whole read's error line for identities that repeat."""
        if not self._host_lengths_known:  # `sources.open_source` reads it through the export
            raise UnsupportedLayout("record length differs from the known layout")
        if not self._memory_lengths_known:
            raise UnsupportedLayout("memory event record length differs from the known layout")
        if not self._increasing:  # written out of order: unique all the same? (the whole read's check and line)
            positions = bundle.host_event_positions()
            identities = np.concatenate([_identities(bundle.data, positions[begin : begin + HOST_EVENTS_WINDOW])
                                         for begin in range(0, len(positions), HOST_EVENTS_WINDOW)])
            check_unique(bundle.path, "a host execution event", identities["stream"], identities["event_id"])
        submissions = self._executions.rows() if self._executions else np.zeros(0, SUBMISSION_DTYPE)
        queue_ops = self._operations.rows() if self._operations else np.zeros(0, QUEUE_OP_DTYPE)
        order = sort_order(queue_ops, "start_ns", "submission")
        rows = None
        if order is not None:
            rows = np.empty(len(order), np.int32 if len(order) < 1 << 31 else np.int64)  # 4 bytes per operation
            rows[order] = np.arange(len(order))
            queue_ops = rows_of(queue_ops, order)
        return sorted_by(submissions, "submission"), queue_ops, rows


def executions_and_operations(bundle: OpenBundle, first_pass: Optional[FirstPass]) -> tuple[
        np.ndarray, np.ndarray, Optional[np.ndarray]]:
    """`FirstPass.tables` of the bundle: from ``first_pass`` when its visits of the walk read every host and
    memory event chunk, else from a pass over the mapped file now. No page of the file stays mapped after it
    (those the decoding of the functions and command buffers mapped in after the walk neither)."""
    if first_pass is None or not first_pass.covers(bundle):
        first_pass = FirstPass()
        first_pass.scan_mapped(bundle)
    else:
        release_pages(bundle.mapped, 0, bundle.data.size)
    return first_pass.tables(bundle)


class PositionsInOrder:
    """The offsets of records (`RecordPositions`, in file order) handed out in order up to a byte (``before``),
    looked up ``HOST_EVENTS_WINDOW`` at a time and each lookup used up before the next: a pass takes a few of
    them per window of host events (the memory events between them), and looking up a window's worth each time
    cost more than the rest of the pass."""

    def __init__(self, positions: RecordPositions):
        self._positions, self._looked_up, self._next = positions, np.zeros(0, np.int64), 0

    def remaining(self) -> bool:
        return bool(len(self._looked_up)) or self._next < len(self._positions)

    def before(self, end: int) -> Iterator[np.ndarray]:
        """The offsets not handed out yet that are below ``end``, in parts of at most ``HOST_EVENTS_WINDOW``."""
        while True:
            if not len(self._looked_up):
                if self._next >= len(self._positions):
                    return
                self._looked_up = self._positions[self._next : self._next + HOST_EVENTS_WINDOW]
                self._next += len(self._looked_up)
            inside = int(np.searchsorted(self._looked_up, end))
            if not inside:
                return
            part, self._looked_up = self._looked_up[:inside], self._looked_up[inside:]
            yield part


class Rows:
    """A table filled in order, at most ``capacity`` rows. It grows by doubling as rows come rather than reserving
    ``capacity`` at once: a bound taken from the file's size (every host event a submission) would reserve about
    half the file's size in address space, which a machine with strict overcommit, or a profile larger than its
    memory, refuses.

    The table lives in an anonymous mapping of its own, grown by ``mremap`` (`mmap.mmap.resize`): its pages move,
    not copied, and its unused tail is not touched. A table in the allocator's heap grew by a copy, old and new
    table resident at once, and left the old one as a hole the heap kept (10M events: 16 MB more at the peak)."""

    _FIRST = 1 << 12  # rows of the first table

    def __init__(self, capacity: int, dtype: np.dtype):
        self._capacity, self._dtype, self._count = capacity, np.dtype(dtype), 0
        self._mapping = anonymous_mapping(max(min(capacity, self._FIRST), 1) * self._dtype.itemsize)
        self._table: np.ndarray = np.frombuffer(self._mapping, self._dtype)

    def _room(self, added: int) -> np.ndarray:
        """The table's next ``added`` rows, the table grown first if they do not fit."""
        needed = self._count + added
        if needed > len(self._table):
            rows = max(needed, min(2 * len(self._table), self._capacity))
            del self._table  # the mapping's one view: a mapping with views cannot move (BufferError)
            self._mapping = grown_mapping(self._mapping, self._count * self._dtype.itemsize,
                                          rows * self._dtype.itemsize)
            self._table = np.frombuffer(self._mapping, self._dtype)
        return self._table[self._count : needed]

    def append(self, rows: np.ndarray) -> None:
        """``rows`` (of the table's dtype) added: copied as raw records, not field by field (2 to 8 times slower)."""
        copy_rows(self._room(len(rows)), rows)
        self._count += len(rows)

    def append_fields(self, rows: np.ndarray, chosen: np.ndarray) -> None:
        """The fields of the table's dtype of the ``chosen`` rows (a mask) of ``rows``: gathered field by field,
        not as a view of a few fields of whole rows (which copies slowly)."""
        count = int(np.count_nonzero(chosen))
        added = self._room(count)
        for name in self._dtype.names:
            added[name] = rows[name][chosen]
        self._count += count

    def rows(self) -> np.ndarray:
        """The rows added (a view of the mapping, which lives as long as it: no row may be added after)."""
        return self._table[: self._count]


def anonymous_mapping(size: int) -> mmap.mmap:
    """``size`` bytes of private anonymous memory (shared memory could not grow past its first size)."""
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


def grown_mapping(mapping: mmap.mmap, used: int, size: int) -> mmap.mmap:
    """``mapping`` grown to ``size`` bytes, its first ``used`` kept: moved by ``mremap``, or where the system has
    none (macOS) copied into a new mapping."""
    try:
        mapping.resize(size)
        return mapping
    except SystemError:  # CPython's "resizing not available--no mremap()"
        grown = anonymous_mapping(size)
        grown[:used] = mapping[:used]
        mapping.close()
        return grown


_IDENTITY = np.dtype([("stream", "<u8"), ("event_id", "<u8")])


def _identities(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The (stream, event id) of the host events at ``offsets`` of ``data`` (two fields gathered, not whole
    records)."""
    identities = np.empty(len(offsets), _IDENTITY)
    for name in _IDENTITY.names:
        identities[name] = records_at(data, offsets + HOST_EVENT.fields[name][1], np.dtype("<u8"))
    return identities


# ---------------------------------------------------------------- the second pass: dispatches in windows


class DispatchStream:
    """The events of a host-timed bundle in two passes: first its submissions and queue operations (`layout`:
    what numbers the calls and bounds each window's times), then its dispatches a window of whole submissions
    at a time (`windows`), then the rest (`profile`: the memory events, read with the dispatches' bytes).

    ``profile`` is the `Profile` `read_profile` would give, less its dispatches; every check of the whole read
    is made, and a file it refuses is refused here with the same error line.
    """

    def __init__(self, bundle: OpenBundle, file: BinaryIO, first_pass: Optional[FirstPass] = None):
        self._bundle, self._file, self._buffer = bundle, file, np.empty(0, np.uint8)
        self._first_pass = first_pass  # what the walk's visits found (`FirstPass`), used by `layout` once
        self.command_buffers, self._timed = recorded_commands(bundle.path, bundle.declared, bundle.commands)
        self._memory = np.zeros(0, MEMORY_DTYPE)  # read with the host events (`_MemoryLevels`)
        self._allocations = np.zeros(0, ALLOCATION_DTYPE)
        self._layout: Optional[Profile] = None
        # Per queue operation in file order: its row of the layout's (sorted) queue operations; None: the same.
        self._queue_op_rows: Optional[np.ndarray] = None

    @property
    def path(self) -> Path:
        return self._bundle.path

    def layout(self) -> Profile:
        """The profile without its dispatches and memory events: every submission and queue operation, from a
        first pass over the mapped host events that copies only the records that are not dispatches (a call
        submits one or a few; each window's pages are given back after it), made while the record walk mapped
        them when `open_bundle` was given the first pass as its visitor (`FirstPass`)."""
        if self._layout is None:
            bundle = self._bundle
            first_pass, self._first_pass = self._first_pass, None
            submissions, queue_ops, self._queue_op_rows = executions_and_operations(bundle, first_pass)
            self._layout = Profile(np.zeros(0, DISPATCH_DTYPE), submissions, bundle.keys, self.command_buffers,
                                   exports_by_executable(bundle.functions), queue_ops, np.zeros(0, MEMORY_DTYPE),
                                   allocations=np.zeros(0, ALLOCATION_DTYPE), provenance=Provenance("bundle"))
        return self._layout

    def profile(self) -> Profile:
        """The profile without its dispatches; its memory events are there once `windows` has ended."""
        return replace(self.layout(), memory=self._memory, allocations=self._allocations)

    def close(self) -> None:
        """Let the mapped file, the file and the read buffer go (when the windows end, or stop on an error)."""
        self._bundle.close()
        self._file.close()
        self._buffer = np.empty(0, np.uint8)

    def windows(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(dispatches, submissions) of successive whole submissions, in the order their executions were written
        (by submission within a window): the dispatches sorted by (submission, start) and checked against their
        submissions (SUBMISSION_DTYPE, sorted). The dispatches are rows of a buffer the next window is read into:
        copy what must outlive the step. The file is closed when they end, or stop."""
        try:
            yield from self._windows()
        finally:
            self.close()

    def _windows(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        bundle, layout = self._bundle, self.layout()
        positions = bundle.host_event_positions()
        total = len(positions)
        # A window's executions and queue operations, checked against the layout's as they are read (not kept).
        window_size = min(total, HOST_EVENTS_WINDOW)
        submissions, queue_ops = np.empty(window_size, SUBMISSION_DTYPE), np.empty(window_size, QUEUE_OP_DTYPE)
        done_queue_ops = 0
        pending, pending_in_order = np.zeros(0, DISPATCH_DTYPE), True  # in (submission, start) order
        layout_ids = layout.submissions["submission"]
        # Per submission of the layout: its execution read (executed_before: in an earlier window; executed_ranks:
        # up to this one).
        executed_before, executed_ranks = np.zeros(len(layout_ids), bool), np.zeros(len(layout_ids), bool)
        rows = np.empty(0, DISPATCH_DTYPE)  # reused: fresh memory costs a page fault per page touched
        memory = _MemoryLevels(self.path, RecordPositions(bundle.chunks["memory-events"], MEMORY_EVENT.itemsize))
        covered = memory.first_position(int(positions[0]) if total else bundle.data.size)  # read up to here
        for begin in range(0, total, HOST_EVENTS_WINDOW):
            window = positions[begin : begin + HOST_EVENTS_WINDOW]
            if len(rows) < len(pending) + len(window):
                rows = np.empty(len(pending) + len(window), DISPATCH_DTYPE)
            copy_rows(rows[: len(pending)], pending)
            # From where the last window's bytes ended: the memory events between host events come with them.
            end = int(window[-1]) + HOST_EVENT.itemsize
            data = self._read(covered, end)
            memory.take(data, covered)
            offsets, covered = window - covered, end
            (added, new_submissions, new_queue_ops), firsts, added_in_order = _split(
                bundle, data, offsets, [rows[len(pending):], submissions, queue_ops])
            if max(firsts) >= 0:
                raise_host_event_error(self.path, records_at(data, offsets[[first for first in firsts
                                                                            if first >= 0]], HOST_EVENT), firsts)
            self._check_unchanged(queue_ops[:new_queue_ops], done_queue_ops)
            executed = submissions[:new_submissions]
            done_queue_ops += new_queue_ops
            ids = executed["submission"]
            dispatches = rows[: len(pending) + added]
            # In order as a whole, known without a pass over every row: the pending rows were, the C pass put the
            # rows it added in order, and the two meet in order.
            in_order = pending_in_order and added_in_order and bool(
                in_dispatch_order(dispatches[max(len(pending) - 1, 0) : len(pending) + 1]).all())
            if not len(ids):
                pending = rows_of(dispatches, slice(None))
                pending_in_order = in_order or bool(in_dispatch_order(pending).all())
                continue
            # IREE writes a submission's execution when it ends: several in flight may end out of order.
            executed = executed if (ids[1:] > ids[:-1]).all() else sorted_by(executed, "submission")
            ran = np.searchsorted(layout_ids, executed["submission"])
            if ((ran >= len(layout_ids)).any() or executed_ranks[ran].any() or (ran[1:] == ran[:-1]).any()
                    or not same_records(rows_of(layout.submissions, ran), executed)):
                raise SectionmarkError(f"{self.path}: the profile changed while it was read")
            executed_ranks[ran] = True
            # Each run of dispatches of one submission (IREE writes them together) looked up once, not each event.
            dispatch_ids = dispatches["submission"]
            heads = np.flatnonzero(np.concatenate([[len(dispatch_ids) > 0], dispatch_ids[1:] != dispatch_ids[:-1]]))
            head_ids = dispatch_ids[heads]
            rank = np.minimum(np.searchsorted(layout_ids, head_ids), len(layout_ids) - 1)
            known = layout_ids[rank] == head_ids
            before = known & executed_before[rank]
            if before.any():
                raise corrupt(self.path, f"a dispatch of submission {int(head_ids[before][0])} is "
                              "recorded after its execution")
            done = known & executed_ranks[rank]
            executed_before[ran] = True
            waiting = int(np.argmin(done)) if not done.all() else len(done)  # the first run whose execution is not read
            if not done[waiting:].any():  # the usual case: only the last runs wait (slices, not copies)
                split = int(heads[waiting]) if waiting < len(heads) else len(dispatches)
                complete, pending = dispatches[:split], rows_of(dispatches, slice(split, None))
            else:
                done = np.repeat(done, np.diff(heads, append=len(dispatch_ids)))
                complete, pending = rows_of(dispatches, done), rows_of(dispatches, ~done)
            # A part of rows in order is in order.
            pending_in_order = in_order or bool(in_dispatch_order(pending).all())
            # The rows are a view of the reused buffer: valid until the next window is read.
            yield self._checked(complete, executed, in_order), executed
        if memory.remaining():  # memory events after the last host event
            memory.take(self._read(covered, memory.last_end()), covered)
        self._memory, self._allocations = memory.kept()
        # Every execution and queue operation read again was the layout's (checked window by window): the
        # layout's tables are those the windows read, sorted.
        check_times(self.path, pending, layout.submissions, layout.queue_ops, self._memory, host_events_plausible=True)
        if len(pending):
            raise corrupt(self.path, "profile has dispatches outside any queue submission (incomplete profile?)")
        if not executed_ranks.all() or done_queue_ops != len(layout.queue_ops):
            raise SectionmarkError(f"{self.path}: the profile changed while it was read")

    def _check_unchanged(self, queue_ops: np.ndarray, done: int) -> None:
        """The queue operations ``queue_ops``, read after ``done`` others, are the layout's (the file did not
        change between the passes)."""
        expected = self.layout().queue_ops
        rows = (slice(done, done + len(queue_ops)) if self._queue_op_rows is None
                else self._queue_op_rows[done : done + len(queue_ops)])
        if done + len(queue_ops) > len(expected) or not same_records(rows_of(expected, rows), queue_ops):
            raise SectionmarkError(f"{self.path}: the profile changed while it was read")

    def _read(self, start: int, end: int) -> np.ndarray:
        """Bytes ``[start, end)`` of the file, read into one reused buffer: read, not mapped, so that no page of
        the file stays in this process, nor costs a page fault to map in and a call to give back."""
        length = end - start
        if len(self._buffer) < length:
            self._buffer = np.empty(length, np.uint8)  # not zeroed: the read fills what is used
        data = self._buffer[:length]
        if os.preadv(self._file.fileno(), [data], start) != length:
            raise SectionmarkError(f"{self.path}: the profile changed while it was read (it is shorter)")
        return data

    def _checked(self, dispatches: np.ndarray, executed: np.ndarray, in_order: bool) -> np.ndarray:
        """The dispatches of the submissions ``executed``, sorted (``in_order``: known to be) and checked against
        them (`checked_profile`'s link checks, with its error lines)."""
        dispatches = by_submission_and_start(dispatches, in_order)
        check_links(self.path, dispatches, executed, self.command_buffers, self._timed)
        return dispatches


def _split(bundle: OpenBundle, data: np.ndarray, offsets: np.ndarray, outputs: list[np.ndarray]) -> tuple[
        list[int], tuple[int, int, int, int], bool]:
    """The host events at ``offsets`` of ``data`` into the starts of ``outputs`` (dispatch, submission and
    queue-operation tables): the rows added to each, the first event failing each check (layout, type, status,
    function; -1: none), and whether the dispatch rows are known to be in (submission, start) order (the C pass
    puts them in order as they come, but for rows far from it; numpy leaves them as written). In C when built.
    Times are checked as the whole read checks them (its error line); identities were checked by the first pass
    (`FirstPass`)."""
    if native() is not None:
        (*added, bad_length, bad_type, failed, unknown, plausible, in_order, _increasing) = native().host_events(
            data, offsets, bundle.known_codes, bundle.known_keys, *outputs)
        firsts = (bad_length, bad_type, failed, unknown)
        if plausible or max(firsts) >= 0:
            return added, firsts, in_order
    else:
        in_order = False
        added, firsts = split_with_numpy(data, offsets, bundle.known_codes, bundle.known_keys, outputs)
        if max(firsts) >= 0:
            return added, firsts, in_order
    check_times(bundle.path, *(table[:count] for table, count in zip(outputs, added)), np.zeros(0, MEMORY_DTYPE))
    return added, firsts, in_order


class _MemoryLevels:
    """The memory events device memory is computed from (`queue_time.device_memory`), decoded and checked
    (as `memory_events` does) from the bytes the host events are read with, keeping only those that change a
    pool's reserved bytes (the first of each pool too), and of the queue allocations their time and size: the
    others add nothing to a level's peak or time average (a long profile has eight memory events per call: two
    change the level, two are allocations)."""

    def __init__(self, path: Path, positions: RecordPositions):
        self._path, self._positions, self._in_order = path, positions, PositionsInOrder(positions)
        self._levels_kept = Rows(len(positions), MEMORY_DTYPE)
        self._allocations = Rows(len(positions), ALLOCATION_DTYPE)
        self._levels: dict[int, int] = {}  # pool -> its reserved bytes after the last event read
        self._last_event, self._last_time = (-1, -1), 0

    def first_position(self, host_start: int) -> int:
        """Where reading must start to cover the memory events too: before the first host event, or the first
        memory event if it comes earlier."""
        return min(host_start, int(self._positions[[0]][0])) if len(self._positions) else host_start

    def remaining(self) -> bool:
        return self._in_order.remaining()

    def last_end(self) -> int:
        return int(self._positions[[len(self._positions) - 1]][0]) + MEMORY_EVENT.itemsize

    def take(self, data: np.ndarray, start: int) -> None:
        """Decode the memory events lying wholly inside ``data``, the file's bytes from ``start`` on."""
        for inside in self._in_order.before(start + len(data) - MEMORY_EVENT.itemsize + 1):
            self._decode(data, inside - start)

    def _decode(self, data: np.ndarray, offsets: np.ndarray) -> None:
        rows = np.empty(len(offsets), MEMORY_DTYPE)
        devices, event_ids = np.empty(len(offsets), np.uint64), np.empty(len(offsets), np.uint64)
        bad_length, unknown, increasing = decode_memory_events(data, offsets, rows, devices, event_ids)
        times = rows["time_ns"]
        if bad_length >= 0:
            raise UnsupportedLayout("memory event record length differs from the known layout")
        if unknown >= 0:
            raise corrupt(self._path, f"unknown memory event type {records_at(data, offsets[[unknown]], MEMORY_EVENT)[0]['type']}")
        if not increasing or (int(devices[0]), int(event_ids[0])) <= self._last_event:
            check_unique(self._path, "a memory event", devices, event_ids)
            raise corrupt(self._path, "memory events out of order")
        if times[0] < self._last_time or (times[1:] < times[:-1]).any():
            raise corrupt(self._path, "memory events out of time order")
        if times[-1] >= MAX_TIMESTAMP_NS or times.min() < 0:
            raise corrupt(self._path, "a memory event's time is implausible")
        self._last_event, self._last_time = (int(devices[-1]), int(event_ids[-1])), int(times[-1])
        self._levels_kept.append(rows_of(rows, _level_changes(rows, self._levels)))
        self._allocations.append_fields(rows, rows["type"] == QUEUE_ALLOCA)

    def kept(self) -> tuple[np.ndarray, np.ndarray]:
        """(the memory events kept, the queue allocations)."""
        if self.remaining():
            raise corrupt(self._path, "memory events outside the file's records")
        return self._levels_kept.rows(), self._allocations.rows()


def _level_changes(events: np.ndarray, levels: dict[int, int]) -> np.ndarray:
    """Which of ``events`` (in time order) change their pool's reserved bytes from the pool's previous event (in
    ``levels``, updated: the pools' bytes after these events) or are a pool's first. In one C pass when built."""
    if native() is not None:
        changes = np.empty(len(events), bool)
        native().level_changes(np.ascontiguousarray(events), levels, changes)
        return changes
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
