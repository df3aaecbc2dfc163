"""A device's transfer time per section: the time inside each command-buffer execution, with no dispatch running,
around its copy commands, given to the sections of that command buffer's copies.

Neither local-task nor CUDA times copy commands one by one: what is timed is
each command-buffer execution and each dispatch in it. An execution's time
(inside the calls' windows) with none of its device's dispatches running is
its gaps: the copies, fills and updates it records, and the launches and
barriers between dispatches. Which gap is a copy is told by the recording
order (`ExecutionGaps`): a gap is transfer when the buffer records a copy,
fill or update between the commands of the dispatches on either side of it
(or before the first / after the last), launch and barrier gaps otherwise
(``gaps`` in `DeviceTime`). The section map knows every copy command of each
command buffer and its sections (``"op": "copy"`` commands with ``shares``),
so an execution's transfer time goes:

* to the section of the buffer's copies, exactly, when they all belong to one;
* split among the sections of the buffer's copies when several sections' copies
  share one execution: by the bytes each copies where the map gives every copy's
  size (``binding_bytes``), else equally per copy command; such a section's
  transfer is marked as split (as fused dispatches split by cost are);
* to "(unmarked)" when the buffer copies nothing (only fills or updates), as do
  the device's queue transfers outside command buffers (queue fills, copies,
  updates, reads, writes).

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

TRANSFER_COMMANDS = ("fill", "copy", "update")  # the recorded commands that move bytes (COMMAND_OPS)


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


def rows_of(sorted_keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The row of each of ``values`` in ``sorted_keys`` (sorted, distinct), -1 where it is not there (int64)."""
    if not len(sorted_keys):
        return np.full(len(values), -1, np.int64)
    at = np.minimum(np.searchsorted(sorted_keys, values), len(sorted_keys) - 1)
    return np.where(sorted_keys[at] == values, at, -1).astype(np.int64)


class TransferCommands:
    """Where each execution's command buffer records transfer commands (`TRANSFER_COMMANDS`), from the source's
    recorded commands (``Profile.command_buffers``: runtime buffer id -> (index, op, key)), asked for many
    executions at once: each buffer with any gets a code (-1: none) and a run of one array holding, for each
    command index i (and one past its last command), how many transfer commands it records before i, so "a
    transfer between these indices" is two look-ups."""

    def __init__(self, executions: np.ndarray, recorded: dict[int, list[RecordedCommand]]):
        ids = sorted(runtime_id for runtime_id, commands in recorded.items()
                     if any(op in TRANSFER_COMMANDS for _index, op, _key in commands))
        runs = []
        for runtime_id in ids:
            commands = recorded[runtime_id]
            run = np.zeros(max(index for index, _op, _key in commands) + 2, np.int64)
            run[[index + 1 for index, op, _key in commands if op in TRANSFER_COMMANDS]] = 1
            runs.append(np.cumsum(run))
        self._last = np.array([len(run) - 1 for run in runs], np.int64)  # by code: its run's last place
        self._offsets = np.cumsum(self._last + 1) - (self._last + 1)  # by code: where its run begins
        self._before = np.concatenate(runs) if runs else np.zeros(0, np.int64)
        # By execution: its buffer's code, -1 where it records no transfer command.
        self.code = np.full(len(executions), -1, np.int64)
        if ids:
            self.code = rows_of(np.array(ids, np.uint64), executions["command_buffer"].astype(np.uint64))

    @property
    def any(self) -> bool:
        """Whether any buffer records a transfer command."""
        return bool(len(self._before))

    def between(self, code: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
        """Whether buffer ``code`` (>= 0) records a transfer command with index in ``[low, high)`` (by element)."""
        base, last = self._offsets[code], self._last[code]
        return self._before[base + np.clip(high, 0, last)] > self._before[base + np.clip(low, 0, last)]


class ExecutionGaps:
    """Per execution (``executions``: a device's SUBMISSION_DTYPE rows), its time inside the calls' ``windows``
    with no dispatch of its device running (int64 ns), and how much of it is transfer: its copies, fills and
    updates (``recorded``: the buffers' commands, `TransferCommands`) between its dispatches.

    Each execution's own part (`execution_pieces`) is cut at the windows' edges into parts (one per call window
    it reaches); a part's gap is its length less the dispatches' union there. The dispatches are added as the
    device's reader yields them (`EventSource.windows`: whole submissions at a time) and swept against every part
    they reach, whichever execution owns it (where executions overlap, one read in another window may own the
    time a dispatch ran): their union's blocks are swept whole, once no later dispatch can start inside them
    (`SubmissionFrontier`), the others carried on, so dispatches of several windows running at once are counted
    once.

    The transfer inside an execution: neither local-task nor CUDA times a copy command, so it is found from the
    recording order. The union blocks of each submission's own dispatches, with their least and greatest command
    index, leave gaps between them; a gap is a copy gap when the buffer records a transfer command between the
    neighbouring blocks' indices (before the first block's: from the execution's start; after the last one's:
    to its end); the other gaps are launch and barrier gaps. An execution with transfer commands and no dispatch
    is copies all through. A part's transfer is its own execution's copy gaps inside it, at most its gap: the two
    are equal where the device's executions do not overlap (CUDA's, local-task's in order); where they do, the
    copy gaps may hold another execution's dispatches, and min() takes the part's copy gaps as copies only up to
    its time with no dispatch running (the rest ran dispatches of the overlapping execution)."""

    def __init__(self, executions: np.ndarray, windows: tuple[np.ndarray, np.ndarray],
                 recorded: Optional[dict[int, list[RecordedCommand]]] = None):
        self._exec_starts = executions["start_ns"].astype(np.int64)
        self._exec_ends = executions["end_ns"].astype(np.int64)
        self._piece_starts, self._piece_ends = execution_pieces(self._exec_starts, self._exec_ends)
        owner, starts, ends = clip_to_windows(self._piece_starts, self._piece_ends, *windows)
        # By start: the parts are disjoint, so their ends are sorted too and a block's reach is two binary searches.
        order = np.argsort(starts, kind="stable")
        self._owner, self._starts, self._ends = owner[order], starts[order], ends[order]
        self._windows = windows
        self._window = np.searchsorted(windows[0], self._starts, side="right") - 1  # each part's call window
        self._part_gaps = self._ends - self._starts  # less the dispatches' time swept into each part (int64)
        self._covered = np.zeros(len(windows[0]))  # by call window: the dispatches' time in the parts
        self._frontiers = SubmissionFrontier(executions)
        self._carried = (np.zeros(0, np.int64), np.zeros(0, np.int64))  # union blocks a later dispatch may reach
        self._submissions = np.ascontiguousarray(executions["submission"])
        self._transfers = TransferCommands(executions, recorded or {})
        # Each part by (execution, call window), to find the part a copy gap's piece lies in.
        keys = self._owner * len(windows[0]) + self._window
        self._key_order = np.argsort(keys, kind="stable")
        self._sorted_keys = keys[self._key_order]
        self._copied: list[tuple[np.ndarray, np.ndarray]] = []  # (part, ns) of the copy gaps found so far

    def add(self, dispatches: np.ndarray, executed: np.ndarray) -> None:
        """The dispatches of the submissions ``executed`` (one reader window)."""
        added = dispatches["start_ns"].astype(np.int64), dispatches["end_ns"].astype(np.int64)
        self._add_copy_gaps(dispatches, executed, *added)
        frontier = self._frontiers.after(executed)
        starts, ends = (np.concatenate([carried, new]) for carried, new in zip(self._carried, added))
        if not len(starts):
            return
        starts, ends = union_blocks(starts, ends)
        final = slice(None) if frontier is None else ends <= frontier
        self._sweep(starts[final], ends[final])
        self._carried = (starts[:0], ends[:0]) if frontier is None else (starts[~final], ends[~final])

    def _rows(self, submissions: np.ndarray) -> np.ndarray:
        """The execution row of each submission id (-1 where it is no execution)."""
        return rows_of(self._submissions, submissions)

    def _add_copy_gaps(self, dispatches: np.ndarray, executed: np.ndarray, starts: np.ndarray,
                       ends: np.ndarray) -> None:
        """The copy gaps of the window's executions whose buffers record transfer commands (class docstring);
        ``starts`` and ``ends``: the dispatches' (int64)."""
        if not self._transfers.any or not len(executed):
            return
        copying = self._rows(executed["submission"])
        copying = copying[copying >= 0]
        copying = copying[self._transfers.code[copying] >= 0]
        if not len(copying):
            return
        submissions = dispatches["submission"]
        indices = dispatches["command_index"].astype(np.int64)
        same = submissions[1:] == submissions[:-1]
        if not ((submissions[1:] >= submissions[:-1]).all() and (~same | (starts[1:] >= starts[:-1])).all()):
            order = np.lexsort((starts, submissions))
            submissions, starts, ends, indices = submissions[order], starts[order], ends[order], indices[order]
            same = submissions[1:] == submissions[:-1]
        # Per submission (a run of its dispatches): its execution row, kept where its buffer records transfers.
        first = np.flatnonzero(np.concatenate([[True], ~same])) if len(submissions) else np.zeros(0, np.int64)
        counts, rows = np.diff(np.append(first, len(submissions))), self._rows(submissions[first])
        kept = rows >= 0
        kept[kept] = self._transfers.code[rows[kept]] >= 0
        if not kept.all():
            keep = np.repeat(kept, counts)
            starts, ends, indices, rows, counts = starts[keep], ends[keep], indices[keep], rows[kept], counts[kept]
        ran = rows_of(rows, copying) >= 0  # rows are sorted
        self._keep_copy_gaps(*(np.concatenate(column) for column in zip(
            self._whole(copying[~ran]), self._between_blocks(rows, counts, starts, ends, indices))))

    def _whole(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Executions with transfer commands and no dispatch: copies all through."""
        return rows, self._exec_starts[rows], self._exec_ends[rows]

    def _between_blocks(self, rows: np.ndarray, counts: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                        indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(execution, start, end) of the copy gaps around the union blocks of each execution's dispatches (runs
        of ``counts`` dispatches, execution ``rows``, each sorted by start): the executions are laid end to end,
        each shifted so that it starts 1 ns after the one before ends, so one union of them all never joins two
        executions' blocks."""
        if not len(starts):
            return rows, starts, ends
        group_first = np.cumsum(counts) - counts
        group_of = np.repeat(np.arange(len(counts)), counts)
        spans = np.maximum.reduceat(ends, group_first) - starts[group_first] + 1
        shift = (np.cumsum(spans) - spans - starts[group_first])[group_of]
        shifted = starts + shift
        block_starts, block_ends = union_blocks(shifted, ends + shift)
        if len(block_starts) == len(shifted):  # each dispatch a block of its own (one after another)
            first, least, greatest = np.arange(len(shifted)), indices, indices
        else:
            first = np.searchsorted(shifted, block_starts)  # each block's first dispatch
            least, greatest = np.minimum.reduceat(indices, first), np.maximum.reduceat(indices, first)
        block_starts, block_ends = block_starts - shift[first], block_ends - shift[first]
        group = group_of[first]
        row = rows[group]
        code = self._transfers.code[row]
        leading = np.concatenate([[True], group[1:] != group[:-1]])
        trailing = np.append(leading[1:], True)
        inner = ~trailing[:-1] & self._transfers.between(code[:-1], greatest[:-1] + 1, least[1:])
        before = leading & self._transfers.between(code, np.zeros_like(least), least)
        after = trailing & self._transfers.between(code, greatest + 1, np.full_like(greatest, np.iinfo(np.int64).max))
        return (np.concatenate([row[:-1][inner], row[before], row[after]]),
                np.concatenate([block_ends[:-1][inner], self._exec_starts[row[before]], block_ends[after]]),
                np.concatenate([block_starts[1:][inner], block_starts[before], self._exec_ends[row[after]]]))

    def _keep_copy_gaps(self, rows: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
        """The copy gaps cut to their executions' own parts: (part, ns) kept."""
        starts, ends = np.maximum(starts, self._piece_starts[rows]), np.minimum(ends, self._piece_ends[rows])
        inside = ends > starts
        rows, starts, ends = rows[inside], starts[inside], ends[inside]
        which, starts, ends = clip_to_windows(starts, ends, *self._windows)
        window = np.searchsorted(self._windows[0], starts, side="right") - 1
        at = np.searchsorted(self._sorted_keys, rows[which] * len(self._windows[0]) + window)
        self._copied.append((self._key_order[at], ends - starts))

    def _sweep(self, starts: np.ndarray, ends: np.ndarray) -> None:
        """Take the union blocks ``[start, end)`` (disjoint, in order) from the parts they reach."""
        if not len(starts):
            return
        rows = slice(int(np.searchsorted(self._ends, starts[0], side="right")),
                     int(np.searchsorted(self._starts, ends[-1], side="left")))
        if rows.start >= rows.stop:
            return
        covered = covered_length(starts, ends, self._ends[rows]) - covered_length(starts, ends, self._starts[rows])
        self._part_gaps[rows] -= covered
        windows = self._window[rows]  # a run of call windows, in order: added in place, not over every window
        reached = slice(int(windows[0]), int(windows[-1]) + 1)
        self._covered[reached] += np.bincount(windows - reached.start, weights=covered,
                                              minlength=reached.stop - reached.start)

    def _part_transfers(self) -> np.ndarray:
        """Each part's transfer: its execution's copy gaps in it, at most its gap (int64 ns)."""
        parts = np.concatenate([part for part, _ns in self._copied]) if self._copied else np.zeros(0, np.int64)
        ns = np.concatenate([ns for _part, ns in self._copied]) if self._copied else np.zeros(0, np.int64)
        copied = np.zeros(len(self._part_gaps), np.int64)
        np.add.at(copied, parts, ns)
        return np.minimum(copied, self._part_gaps)

    def gaps(self) -> np.ndarray:
        """Per execution: its time with no dispatch running in the calls' windows (int64 ns)."""
        return self._by(self._owner, self._part_gaps, len(self._submissions))

    def transfers(self) -> np.ndarray:
        """Per execution: the part of its gaps that is transfer (its copy gaps; int64 ns)."""
        return self._by(self._owner, self._part_transfers(), len(self._submissions))

    def transfer_by_window(self) -> np.ndarray:
        """Per call window: the executions' transfer in it (int64 ns); the rest of their gaps is launch and
        barrier gaps."""
        return self._by(self._window, self._part_transfers(), len(self._windows[0]))

    @staticmethod
    def _by(groups: np.ndarray, values: np.ndarray, count: int) -> np.ndarray:
        sums = np.zeros(count, np.int64)
        np.add.at(sums, groups, values)
        return sums

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


def section_transfers(executions: np.ndarray, transfers: np.ndarray, buffers: dict[int, Optional[CommandBuffer]],
                      queue_transfer_ns: int) -> SectionTransfers:
    """Each execution's transfer time (``transfers``: `ExecutionGaps.transfers`) given to its buffer's copy
    sections (`copy_weights`); the transfer time of buffers that copy nothing (their fills and updates) or that
    the map does not know, and ``queue_transfer_ns`` (the queue transfers outside command buffers), to
    "(unmarked)"."""
    # Each runtime buffer's transfers summed (int64: exact), in the order of its first execution.
    runtime_ids, firsts, runtime_of = np.unique(executions["command_buffer"], return_index=True, return_inverse=True)
    sums = np.zeros(len(runtime_ids), np.int64)
    np.add.at(sums, runtime_of.reshape(-1), np.asarray(transfers, np.int64))
    order = np.argsort(firsts, kind="stable")
    totals = dict(zip(runtime_ids[order].tolist(), sums[order].tolist()))
    result = SectionTransfers({}, set())
    unmarked = float(queue_transfer_ns)
    for runtime_id, transfer in totals.items():
        buffer = buffers.get(runtime_id)
        parts, by_bytes = copy_weights(buffer) if buffer is not None else ({}, True)
        if not parts:
            unmarked += transfer
            continue
        for path, part in parts.items():
            result.transfer_ns[path] = result.transfer_ns.get(path, 0.0) + part * transfer
        if len(parts) > 1 and transfer:
            result.split.update(parts)
            result.by_bytes = result.by_bytes and by_bytes
    if unmarked:
        result.transfer_ns[()] = result.transfer_ns.get((), 0.0) + unmarked
    return result
