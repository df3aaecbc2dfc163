"""The first pass of a host-timed bundle read in windows (`sectionmark.readers.ireeprof_stream`): its executions and
queue operations, which number the calls before any dispatch is read, and the checks that must come before any
window (a record layout this reader does not know is read through IREE's export instead).

`FirstPass` copies the host events that are not dispatches (a call submits one or a few among its dispatches),
a window of the mapped file's host events at a time (in C when built). Given to `open_bundle` as its chunk
visitor, it makes the pass while the record walk has each part of the file mapped: every page of a long profile
is mapped in once, not once for the walk and again for this pass. What it found counts when the walk's chunks
are those it read (one device's bundle, well formed); else the stream makes the pass after the walk.
"""

from __future__ import annotations

from typing import Iterator, Optional

import numpy as np

from sectionmark.readers.arrays import first_true, strictly_increasing
from sectionmark.readers.bundle_events import HOST_EVENTS_WINDOW, OpenBundle, fill_columns
from sectionmark.readers.bundle_records import (HOST_EVENT, MEMORY_EVENT, Chunks, RecordPositions, UnsupportedLayout,
                                                records_at, release_pages)
from sectionmark.readers.checks import check_unique, sort_order, sorted_by
from sectionmark.readers.event_model import EVENT_DISPATCH, EVENT_EXECUTE, QUEUE_OP_DTYPE, SUBMISSION_DTYPE, native

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
        if native() is not None:
            found = np.empty(len(window), np.int64)
            count, window_increasing, bad_length = native().not_dispatches(data, window, found)
            others = records_at(data, window[found[:count]], HOST_EVENT)
        else:
            kinds = records_at(data, window + HOST_EVENT.fields["type"][1], _U32)
            others = records_at(data, window[kinds != EVENT_DISPATCH], HOST_EVENT)
            identities = _identities(data, window)
            window_increasing = strictly_increasing(identities["stream"], identities["event_id"])
            bad_length = first_true(records_at(data, window, _U32) != HOST_EVENT.itemsize)
        self._host_lengths_known &= bad_length < 0
        ends = _identities(data, window[[0, -1]])
        self._increasing &= window_increasing and (self._last is None or tuple(ends[0].tolist()) > self._last)
        self._last = tuple(ends[1].tolist())
        if self._executions is None or self._operations is None:  # at most a host event per 152 bytes of the file
            self._executions = Rows(data.size // HOST_EVENT.itemsize + 1, SUBMISSION_DTYPE)
            self._operations = Rows(data.size // HOST_EVENT.itemsize + 1, QUEUE_OP_DTYPE)
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
            queue_ops = queue_ops[order]
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
    """A table filled in order, at most ``capacity`` rows: np.empty's rows never written cost no memory."""

    def __init__(self, capacity: int, dtype: np.dtype):
        self._table, self._count = np.empty(capacity, dtype), 0

    def append(self, rows: np.ndarray) -> None:
        """``rows`` (of the table's dtype) added: copied as raw records, not field by field (2 to 8 times slower)."""
        raw = np.dtype((np.void, self._table.dtype.itemsize))
        self._table[self._count : self._count + len(rows)].view(raw)[...] = rows.view(raw)
        self._count += len(rows)

    def append_fields(self, rows: np.ndarray, chosen: np.ndarray) -> None:
        """The fields of the table's dtype of the ``chosen`` rows (a mask) of ``rows``: gathered field by field,
        not as a view of a few fields of whole rows (which copies slowly)."""
        count = int(np.count_nonzero(chosen))
        added = self._table[self._count : self._count + count]
        for name in self._table.dtype.names:
            added[name] = rows[name][chosen]
        self._count += count

    def rows(self) -> np.ndarray:
        return self._table[: self._count]


_IDENTITY = np.dtype([("stream", "<u8"), ("event_id", "<u8")])


def _identities(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The (stream, event id) of the host events at ``offsets`` of ``data`` (two fields gathered, not whole
    records)."""
    identities = np.empty(len(offsets), _IDENTITY)
    for name in _IDENTITY.names:
        identities[name] = records_at(data, offsets + HOST_EVENT.fields[name][1], np.dtype("<u8"))
    return identities
