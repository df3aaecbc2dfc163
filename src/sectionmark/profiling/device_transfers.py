"""A device's transfer time per section: each command-buffer execution's time with no dispatch running, given to
the sections of that command buffer's copy commands.

local-task records the copies of a tensor to or from another device as copy
commands inside command buffers and does not time them one by one: what is
timed is each command-buffer execution and each dispatch in it. So an
execution's transfer time is its time (inside the calls' windows) with none of
its device's dispatches running: its copies and the barriers between them. The
section map knows every copy command of each command buffer and its sections
(``"op": "copy"`` commands with ``shares``), so that time goes:

* to the section of the buffer's copies, exactly, when they all belong to one;
* split among the sections of the buffer's copies when several sections' copies
  share one execution: by the bytes each copies where the map gives every copy's
  size (``binding_bytes``), else equally per copy command; such a section's
  transfer is marked as split (as fused dispatches split by cost are);
* to "(unmarked)" when the buffer copies nothing (its time between dispatches is
  barriers and scheduling, no section's transfer), as do the device's queue
  transfers outside command buffers (queue fills, copies, updates, reads, writes).

Executions of one device that overlap in time are cut so that each nanosecond
belongs to the one that started first, so the executions' transfer times add up
to the device's ``transfer`` (`DeviceTime`) exactly, as the sections' do.

Pure functions over numpy arrays (unit-tested on hand-built data in tests/profiling/test_devices.py);
`ExecutionGaps` sums a device's dispatch windows as its reader yields them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

import numpy as np

from sectionmark.profiling.queue_time import SubmissionFrontier, union_blocks
from sectionmark.readers.event_model import RecordedCommand
from sectionmark.section_map import COMMAND_OPS, CommandBuffer
from sectionmark.section_path import SectionPath


@dataclass
class SectionTransfers:
    """One device's transfer time by section (ns over the measured calls) and the sections whose time was split
    with other sections' copies of one execution (``split``), by bytes or equally (``by_bytes``)."""

    transfer_ns: dict[SectionPath, float]
    split: set[SectionPath]
    by_bytes: bool = True  # every split was by the copies' bytes (False: at least one split equally)


def copy_weights(buffer: CommandBuffer) -> tuple[dict[SectionPath, float], bool]:
    """Each section's part (adding up to 1) of a command buffer's copy commands, and whether by bytes (the map
    gives every copy's size) or equally per copy; no parts when it copies nothing. A copy in no section is
    "(unmarked)"'s (path ())."""
    copies = [command for command in buffer.commands if command.op == "copy"]
    by_bytes = bool(copies) and all(command.binding_bytes for command in copies)
    sizes = [float(sum(command.binding_bytes)) if by_bytes else 1.0 for command in copies]
    total = sum(sizes)
    if not copies or total <= 0:
        return {}, by_bytes
    parts: dict[SectionPath, float] = {}
    for command, size in zip(copies, sizes):
        shares = command.shares or []
        weight_sum = sum(share.weight for share in shares)
        for share in shares or [None]:
            path, weight = ((), 1.0) if share is None else (share.path, share.weight / weight_sum)
            parts[path] = parts.get(path, 0.0) + weight * size / total
    return parts, by_bytes


def execution_pieces(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each execution's own part ``[start, end)`` (by execution, empty where none): where executions overlap,
    the time belongs to the one that started first, so the parts are disjoint and their union is the
    executions' union."""
    starts, ends = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
    order = np.argsort(starts, kind="stable")
    sorted_ends = ends[order]
    reach_before = np.concatenate([[np.iinfo(np.int64).min], np.maximum.accumulate(sorted_ends)[:-1]])
    piece_starts, piece_ends = np.empty_like(starts), np.empty_like(ends)
    piece_starts[order] = np.maximum(starts[order], reach_before)
    piece_ends[order] = np.maximum(sorted_ends, piece_starts[order])
    return piece_starts, piece_ends


def clip_to_windows(starts: np.ndarray, ends: np.ndarray, window_starts: np.ndarray, window_ends: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(owner, start, end) of each non-empty intersection of intervals ``[start, end)`` with the windows
    (sorted, disjoint): ``owner`` is the interval's index. An interval across two windows gives two parts."""
    first = np.searchsorted(window_ends, starts, side="right")  # the first window ending after the start
    last = np.searchsorted(window_starts, ends, side="left")  # past the last window starting before the end
    counts = np.maximum(last - first, 0)
    owner = np.repeat(np.arange(len(starts)), counts)
    window = np.repeat(first, counts) + np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    part_starts = np.maximum(starts[owner], window_starts[window])
    part_ends = np.minimum(ends[owner], window_ends[window])
    keep = part_ends > part_starts
    return owner[keep], part_starts[keep], part_ends[keep]


def covered_length(starts: np.ndarray, ends: np.ndarray, times: np.ndarray) -> np.ndarray:
    """For each of ``times``: the length of the blocks ``[start, end)`` (disjoint, in order) before it (int64, exact);
    the blocks' length inside ``[a, b)`` is its value at b less its value at a."""
    before = np.concatenate([[0], np.cumsum(ends - starts)])  # the length of the first k blocks
    started = np.searchsorted(starts, times, side="right")  # the blocks starting at or before each time
    last = np.maximum(started - 1, 0)
    beyond = np.where(started > 0, np.maximum(ends[last] - times, 0), 0)  # of the last of them, what lies after it
    return before[started] - beyond


class ExecutionGaps:
    """Per execution (``executions``: a device's SUBMISSION_DTYPE rows), its time inside the calls' ``windows``
    with no dispatch of its device running (int64 ns): its own part (`execution_pieces`) in the windows less the
    dispatches' union there. The dispatches are added as the device's reader yields them (`EventSource.windows`:
    whole submissions at a time) and swept against every part they reach, whichever execution owns it (where
    executions overlap, one read in another window may own the time a dispatch ran): their union's blocks are
    swept whole, once no later dispatch can start inside them (`SubmissionFrontier`), the others carried on,
    so dispatches of several windows running at once are counted once."""

    def __init__(self, executions: np.ndarray, windows: tuple[np.ndarray, np.ndarray]):
        piece_starts, piece_ends = execution_pieces(executions["start_ns"], executions["end_ns"])
        owner, starts, ends = clip_to_windows(piece_starts, piece_ends, *windows)
        # By start: the parts are disjoint, so their ends are sorted too and a block's reach is two binary searches.
        order = np.argsort(starts, kind="stable")
        self._owner, self._starts, self._ends = owner[order], starts[order], ends[order]
        self._window = np.searchsorted(windows[0], self._starts, side="right") - 1  # each part's call window
        self._gaps = np.bincount(self._owner, weights=self._ends - self._starts, minlength=len(executions))
        self._covered = np.zeros(len(windows[0]))  # by call window: the dispatches' time in the parts
        self._frontiers = SubmissionFrontier(executions)
        self._carried = (np.zeros(0, np.int64), np.zeros(0, np.int64))  # union blocks a later dispatch may reach

    def add(self, dispatches: np.ndarray, executed: np.ndarray) -> None:
        """The dispatches of the submissions ``executed`` (one reader window)."""
        frontier = self._frontiers.after(executed)
        starts = np.concatenate([self._carried[0], dispatches["start_ns"].astype(np.int64)])
        ends = np.concatenate([self._carried[1], dispatches["end_ns"].astype(np.int64)])
        if not len(starts):
            return
        starts, ends = union_blocks(starts, ends)
        final = slice(None) if frontier is None else ends <= frontier
        self._sweep(starts[final], ends[final])
        self._carried = (starts[:0], ends[:0]) if frontier is None else (starts[~final], ends[~final])

    def _sweep(self, starts: np.ndarray, ends: np.ndarray) -> None:
        """Take the union blocks ``[start, end)`` (disjoint, in order) from the parts they reach."""
        if not len(starts):
            return
        rows = slice(int(np.searchsorted(self._ends, starts[0], side="right")),
                     int(np.searchsorted(self._starts, ends[-1], side="left")))
        if rows.start >= rows.stop:
            return
        covered = covered_length(starts, ends, self._ends[rows]) - covered_length(starts, ends, self._starts[rows])
        self._gaps -= np.bincount(self._owner[rows], weights=covered, minlength=len(self._gaps))
        windows = self._window[rows]  # a run of call windows, in order: added in place, not over every window
        reached = slice(int(windows[0]), int(windows[-1]) + 1)
        self._covered[reached] += np.bincount(windows - reached.start, weights=covered,
                                              minlength=reached.stop - reached.start)

    def gaps(self) -> np.ndarray:
        return np.rint(self._gaps).astype(np.int64)

    def dispatch_union(self) -> np.ndarray:
        """Per call window (int64 ns): the union of the dispatches added, inside the executions (where every
        dispatch runs), cut exactly at the windows' edges: a dispatch may reach past its own call's window
        where another device's next call began, which the windows are clipped at."""
        return np.rint(self._covered).astype(np.int64)


def static_buffers(runtime_ids: Iterable[int], matched: dict[int, int], recorded: dict[int, list[RecordedCommand]],
                   buffers: list[CommandBuffer]) -> dict[int, Optional[CommandBuffer]]:
    """The map's command buffer of each runtime one: the one attribution matched it to (its dispatches placed
    there), else the one of the device recording the same commands, if their copies' sections agree (a buffer
    that only copies has no dispatch to match it by); None where none or several disagreeing."""
    by_index = {buffer.index: buffer for buffer in buffers}
    by_signature: dict[tuple, list[CommandBuffer]] = {}
    for buffer in buffers:
        by_signature.setdefault(tuple((c.op, c.key if c.op == "dispatch" else None) for c in buffer.commands),
                                []).append(buffer)
    found: dict[int, Optional[CommandBuffer]] = {}
    for runtime_id in runtime_ids:
        if runtime_id in matched:
            found[runtime_id] = by_index.get(matched[runtime_id])
            continue
        signature = tuple((op, key if op == "dispatch" else None) for _index, op, key
                          in sorted(recorded.get(runtime_id, [])) if op in COMMAND_OPS)
        candidates = by_signature.get(signature, [])
        weights = {tuple(sorted(copy_weights(buffer)[0].items())) for buffer in candidates}
        found[runtime_id] = candidates[0] if len(weights) == 1 else None
    return found


def section_transfers(executions: np.ndarray, gaps: np.ndarray, buffers: dict[int, Optional[CommandBuffer]],
                      queue_transfer_ns: int) -> SectionTransfers:
    """Each execution's transfer time (``gaps``) given to its buffer's copy sections (`copy_weights`); the
    time of buffers that copy nothing (or that the map does not know) and ``queue_transfer_ns`` (the queue
    transfers outside command buffers) to "(unmarked)"."""
    # Each runtime buffer's gaps summed (int64: exact), in the order of its first execution.
    runtime_ids, firsts, runtime_of = np.unique(executions["command_buffer"], return_index=True, return_inverse=True)
    sums = np.zeros(len(runtime_ids), np.int64)
    np.add.at(sums, runtime_of.reshape(-1), np.asarray(gaps, np.int64))
    order = np.argsort(firsts, kind="stable")
    totals = dict(zip(runtime_ids[order].tolist(), sums[order].tolist()))
    result = SectionTransfers({}, set())
    unmarked = float(queue_transfer_ns)
    for runtime_id, gap in totals.items():
        buffer = buffers.get(runtime_id)
        parts, by_bytes = copy_weights(buffer) if buffer is not None else ({}, True)
        if not parts:
            unmarked += gap
            continue
        for path, part in parts.items():
            result.transfer_ns[path] = result.transfer_ns.get(path, 0.0) + part * gap
        if len(parts) > 1 and gap:
            result.split.update(parts)
            result.by_bytes = result.by_bytes and by_bytes
    if unmarked:
        result.transfer_ns[()] = result.transfer_ns.get((), 0.0) + unmarked
    return result
