"""Where each call's time goes outside dispatches, and how much device memory it holds.

Dispatch events say how long kernels ran; the queue operations around them
(host execution events of the ``queue-events`` / ``host-execution`` families)
and the memory events (``memory-events``) say what else a call spent time and
memory on. Everything here is a pure function over numpy arrays, unit-tested
on hand-built data in tests/profiling/test_queue_time.py.

Call time. A call's window runs from the start of its first queue operation to
the end of its last (windows are clipped so that no two overlap). Each
nanosecond of a window goes to exactly one row, the first that applies:

1. ``dispatch``: a dispatch ran (union of the dispatch intervals);
2. ``command_buffer_gap``: inside a command-buffer execution, no dispatch
   running: barriers, scheduling between dispatches, and the fills, copies and
   updates recorded in the command buffer (local-task does not time those
   individually, so they cannot be told apart from scheduling);
3. ``transfer``: queue fill, copy, update, file read or write;
4. ``allocation``: queue alloca or dealloca;
5. ``other_queue``: queue barriers and host calls;
6. ``idle``: no queue operation running (waits between operations).

So the rows add up to the call time by construction. Command-buffer executions
take precedence over the other queue operations, so every dispatch lies in
time counted as command-buffer time, and the gap is that time minus dispatch time.

Memory. Pool events carry a snapshot of the pool's bytes in live
reservations after the event; the sum over pools is the device memory
allocated at that moment (a step function of time). Per call: its peak and
its time-weighted average over the call window.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

import numpy as np

from sectionmark.profiling.native import native_passes
from sectionmark.readers.arrays import distinct, percentiles
from sectionmark.readers.event_model import EVENT_EXECUTE, EVENT_NAMES, MEMORY_POOL_STATS, QUEUE_ALLOCA

QUEUE_SPAN_DTYPE = np.dtype(
    [("type", "<u4"), ("start_ns", "<i8"), ("end_ns", "<i8"), ("payload_bytes", "<u8"), ("call", "<i4")]
)

# Rows of the call-time breakdown, in precedence order (dispatch is computed separately: see module docstring),
# with the queue operations (host execution event names) each holds; any other operation is "other_queue".
QUEUE_ROWS = ("command_buffer", "transfer", "allocation", "other_queue")
COMMAND_BUFFER, TRANSFER, ALLOCATION, OTHER_QUEUE = range(len(QUEUE_ROWS))
_OPERATIONS_OF_ROW = {"command_buffer": ("execute",), "transfer": ("fill", "copy", "update", "read", "write"),
                      "allocation": ("alloca", "dealloca")}
_ROW_OF_NAME = {name: QUEUE_ROWS.index(row) for row, names in _OPERATIONS_OF_ROW.items() for name in names}
ROW_OF_EVENT_TYPE = np.array(
    [_ROW_OF_NAME.get(EVENT_NAMES.get(type_, ""), OTHER_QUEUE) for type_ in range(max(EVENT_NAMES) + 1)]
)
# Queue operations that finish a call's work (they belong to the call before them); the others prepare one.
_CLOSING_EVENTS = frozenset(type_ for type_, name in EVENT_NAMES.items() if name in ("dealloca", "read"))


@dataclass
class CallTime:
    """Time of the measured calls, summed over them (ns); the six ``rows`` add up to ``call_ns``."""

    call_ns: int  # the call windows (first queue operation's start to last one's end)
    dispatch_ns: int  # a dispatch ran (union of dispatch intervals)
    command_buffer_gap_ns: int  # in a command-buffer execution, no dispatch running
    transfer_ns: int  # queue fill / copy / update / read / write
    allocation_ns: int  # queue alloca / dealloca
    other_queue_ns: int  # queue barrier / host call
    idle_ns: int  # no queue operation running
    execute_ns: int  # summed command-buffer execution spans (overlaps the rows above)
    call_p50_ns: float  # per call: median call time
    call_p95_ns: float
    transfer_bytes: int = 0  # summed payload of the transfers (fill / copy / update / read / write)

    @property
    def rows(self) -> dict[str, int]:
        """The rows that add up to ``call_ns``, by name."""
        return {"dispatch": self.dispatch_ns, "command_buffer_gap": self.command_buffer_gap_ns,
                "transfer": self.transfer_ns, "allocation": self.allocation_ns,
                "other_queue": self.other_queue_ns, "idle": self.idle_ns}


@dataclass
class DeviceMemory:
    """Device memory in live pool reservations during the measured calls (bytes)."""

    peak_bytes: int  # highest over all measured calls
    mean_peak_bytes: float  # mean over calls of each call's peak
    average_bytes: float  # time-weighted average over all call windows
    allocated_bytes: int  # summed sizes of the queue allocations made in the measured calls
    allocations: int  # queue allocations made in the measured calls


def assign_calls(submissions: np.ndarray, types: np.ndarray, execute_submissions: np.ndarray,
                 execute_calls: np.ndarray) -> np.ndarray:
    """The call of each queue operation, from its place among the command-buffer executions.

    ``execute_submissions`` (sorted) and ``execute_calls``: the submission id and
    call of each execution. An operation that closes a call (dealloca, read)
    belongs to the execution before it, any other (alloca, update, ...) to the
    one after it; operations beyond the first or last execution go to that one.
    """
    if not len(execute_submissions):
        return np.zeros(len(submissions), np.int64)
    after = np.searchsorted(execute_submissions, submissions)  # index of the next execution
    closing = np.isin(types, list(_CLOSING_EVENTS))
    index = np.where(closing, after - 1, after)
    index = np.clip(index, 0, len(execute_submissions) - 1)
    return np.asarray(execute_calls, np.int64)[index]


def _reduce_at(ufunc: np.ufunc, out: np.ndarray, groups: np.ndarray, values: np.ndarray) -> None:
    """``ufunc.at(out, groups, values)`` for a minimum or maximum, through one stable sort and ``reduceat``:
    ``ufunc.at`` is many times slower on large arrays, and the groups (calls, windows) come nearly sorted."""
    if not len(groups):
        return
    order = np.argsort(groups, kind="stable")
    groups, values = groups[order], values[order]
    firsts = np.flatnonzero(np.concatenate([[True], groups[1:] != groups[:-1]]))
    targets = groups[firsts]
    out[targets] = ufunc(out[targets], ufunc.reduceat(values, firsts))


def call_windows(starts: np.ndarray, ends: np.ndarray, calls: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """``[start, end)`` of calls ``0 .. count-1``: their operations' extent, clipped not to overlap.

    Every call must have at least one operation. A window that would reach
    into the next call's start ends there; starts never go backwards.
    """
    window_starts = np.full(count, np.iinfo(np.int64).max, np.int64)
    window_ends = np.full(count, np.iinfo(np.int64).min, np.int64)
    _reduce_at(np.minimum, window_starts, calls, starts)
    _reduce_at(np.maximum, window_ends, calls, ends)
    window_starts = np.maximum.accumulate(window_starts)
    next_starts = np.concatenate([window_starts[1:], [np.iinfo(np.int64).max]])
    window_ends = np.maximum(np.minimum(window_ends, next_starts), window_starts)
    return window_starts, window_ends


def _window_of(times: np.ndarray, window_starts: np.ndarray, window_ends: np.ndarray) -> np.ndarray:
    """Index of the window holding each time, -1 where none does (windows sorted, disjoint)."""
    if len(times) > 4 * len(window_starts) and (times[1:] >= times[:-1]).all():
        # Sorted times (dispatches, memory events): count the window starts at or before each time by
        # marking where each window starts among the times: linear, not a binary search per time.
        marks = np.bincount(np.searchsorted(times, window_starts), minlength=len(times) + 1)
        window = np.cumsum(marks[:-1]) - 1
    else:
        window = np.searchsorted(window_starts, times, side="right") - 1
    inside = (window >= 0) & (times < window_ends[np.maximum(window, 0)])
    return np.where(inside, window, -1)


# Call windows taken per pass (`partition_time`, `memory_by_window`): the temporaries of one pass are in memory at
# once, not those of a whole long profile (10M dispatch events, 200k calls: 84 MB in one partition pass).
WINDOWS_PER_PASS = 8192


def partition_time(starts: np.ndarray, ends: np.ndarray, rows: np.ndarray, row_count: int,
                   window_starts: np.ndarray, window_ends: np.ndarray) -> np.ndarray:
    """``[window, row_count + 1]``: each window's time under the first active row; last column: none active.

    Intervals ``[start, end)`` of row ``rows[i]`` (0 takes precedence over 1 ...)
    cut time into elementary segments; a segment goes to the lowest row active
    in it, or to the last column when none is. Each window's columns add up to
    its length exactly. In C when built (one sweep over the intervals in start order), else numpy: the windows
    (sorted, disjoint) are taken ``WINDOWS_PER_PASS`` at a time, each pass with the intervals reaching into them:
    a segment inside a window is cut and covered only by those. The same numbers.
    """
    passes = native_passes()
    if passes is not None and len(window_starts):
        parts = np.empty((len(window_starts), row_count + 1), np.int64)
        if passes.partition_time(np.asarray(starts, np.int64), np.asarray(ends, np.int64),
                                 np.ascontiguousarray(rows, np.int64), np.argsort(starts, kind="stable"),
                                 np.ascontiguousarray(window_starts, np.int64),
                                 np.ascontiguousarray(window_ends, np.int64), parts):
            return parts
    if len(window_starts) <= WINDOWS_PER_PASS:
        return _partition(starts, ends, rows, row_count, window_starts, window_ends)
    parts = []
    # The intervals reaching into a pass's windows found by two binary searches among the starts, not a test of
    # every interval per pass: one ending after the first window's start starts after it less the longest length.
    order = np.argsort(starts, kind="stable")
    sorted_starts = starts[order]
    longest = max(int((ends - starts).max()), 0) if len(starts) else 0
    for begin in range(0, len(window_starts), WINDOWS_PER_PASS):
        chunk = slice(begin, begin + WINDOWS_PER_PASS)
        first, last = int(window_starts[chunk][0]), int(window_ends[chunk].max())
        candidates = np.sort(order[np.searchsorted(sorted_starts, first - longest, "right"):
                                   np.searchsorted(sorted_starts, last, "left")])
        reaching = candidates[(ends[candidates] > first) & (starts[candidates] < last)]  # in their order
        parts.append(_partition(starts[reaching], ends[reaching], rows[reaching], row_count, window_starts[chunk],
                                window_ends[chunk]))
    return np.concatenate(parts)


def _partition(starts: np.ndarray, ends: np.ndarray, rows: np.ndarray, row_count: int, window_starts: np.ndarray,
               window_ends: np.ndarray) -> np.ndarray:
    """`partition_time` in one pass."""
    windows = len(window_starts)
    boundaries = distinct(np.concatenate([starts, ends, window_starts, window_ends]))
    if len(boundaries) < 2:
        return np.zeros((windows, row_count + 1), np.int64)
    first, last = np.searchsorted(boundaries, starts), np.searchsorted(boundaries, ends)
    top = np.full(len(boundaries) - 1, row_count, np.int64)
    for row in reversed(range(row_count)):
        mine = rows == row
        change = (np.bincount(first[mine], minlength=len(boundaries))
                  - np.bincount(last[mine], minlength=len(boundaries)))
        top[np.cumsum(change)[:-1] > 0] = row
    window = _window_of(boundaries[:-1], window_starts, window_ends)
    inside = window >= 0
    lengths = np.diff(boundaries)
    sums = np.bincount(window[inside] * (row_count + 1) + top[inside], weights=lengths[inside],
                       minlength=windows * (row_count + 1))
    return np.rint(sums).astype(np.int64).reshape(windows, row_count + 1)


def union_blocks(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The disjoint covered blocks ``[start, end)`` of the union of intervals, in time order (non-empty input)."""
    if (starts[1:] > ends[:-1]).all() and (ends >= starts).all():
        return starts, ends  # in order, apart: each interval is a block of its own
    if not (starts[1:] >= starts[:-1]).all():
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    # A block begins where an interval starts after everything before it ended,
    # and ends at the running maximum just before the next block begins.
    first = np.flatnonzero(np.concatenate([[True], starts[1:] > reach[:-1]]))
    last = np.concatenate([first[1:] - 1, [len(starts) - 1]])
    return starts[first], reach[last]


def union_by_window(starts: np.ndarray, ends: np.ndarray, window_starts: np.ndarray,
                    window_ends: np.ndarray) -> np.ndarray:
    """Per window: the length of the union of intervals ``[start, end)`` inside it."""
    if not len(starts):
        return np.zeros(len(window_starts), np.int64)
    passes = native_passes()
    if passes is not None:  # one pass when the starts are sorted, as a profile's dispatches nearly always are
        sums = np.empty(len(window_starts), np.int64)
        if passes.union_by_window(np.asarray(starts, np.int64), np.asarray(ends, np.int64),
                                         np.asarray(window_starts, np.int64), np.asarray(window_ends, np.int64), sums):
            return sums
    block_starts, block_ends = union_blocks(starts, ends)
    # A block lies in one window (dispatches run inside their call); one reaching past it is clipped there.
    window = _window_of(block_starts, window_starts, window_ends)
    inside = window >= 0
    window = window[inside]
    lengths = np.minimum(block_ends[inside], window_ends[window]) - block_starts[inside]
    return np.rint(np.bincount(window, weights=lengths, minlength=len(window_starts))).astype(np.int64)


def memory_by_window(times: np.ndarray, pools: np.ndarray, reserved: np.ndarray, window_starts: np.ndarray,
                     window_ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per window: (peak, time-weighted average) of the bytes reserved over all pools.

    ``times`` sorted; ``reserved[i]``: pool ``pools[i]``'s live reservations
    after event i. A pool counts 0 before its first event.
    """
    windows = len(window_starts)
    if not len(times):
        return np.zeros(windows, np.int64), np.zeros(windows)
    if (pools == pools[0]).all():  # one pool, as usual: the total is its own figure
        level = reserved.astype(np.int64)
    else:
        by_pool = np.lexsort((np.arange(len(times)), pools))
        previous = np.zeros(len(times), np.int64)
        same_pool = pools[by_pool][1:] == pools[by_pool][:-1]
        previous[by_pool[1:][same_pool]] = reserved[by_pool[:-1][same_pool]].astype(np.int64)
        level = np.cumsum(reserved.astype(np.int64) - previous)  # all pools' total after each event
    # integral of the level from the first event to each event
    integral = np.concatenate([[0.0], np.cumsum(level[:-1] * np.diff(times).astype(np.float64))])
    if not windows:
        return np.zeros(0, np.int64), np.zeros(0)
    parts = [_levels_in(times, level, integral, window_starts[chunk], window_ends[chunk])
             for chunk in (slice(begin, begin + WINDOWS_PER_PASS) for begin in range(0, windows, WINDOWS_PER_PASS))]
    return np.concatenate([peak for peak, _average in parts]), np.concatenate([average for _peak, average in parts])


def _levels_in(times: np.ndarray, level: np.ndarray, integral: np.ndarray, window_starts: np.ndarray,
               window_ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`memory_by_window` for some of the windows (sorted, disjoint), given the level after each event and its
    integral up to each event; only the events inside them are gathered."""

    def at(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(level, integral) at times t."""
        index = np.searchsorted(times, t, side="right") - 1
        safe = np.maximum(index, 0)
        known = index >= 0
        value = np.where(known, level[safe], 0)
        area = np.where(known, integral[safe] + level[safe] * (t - times[safe]).astype(np.float64), 0.0)
        return value, area

    start_level, start_area = at(window_starts)
    _end_level, end_area = at(window_ends)
    lengths = (window_ends - window_starts).astype(np.float64)
    average = np.divide(end_area - start_area, lengths, out=start_level.astype(np.float64), where=lengths > 0)
    peak = start_level.copy()
    reach = slice(*np.searchsorted(times, [window_starts[0], window_ends.max()]))  # the events that can be inside
    window = _window_of(times[reach], window_starts, window_ends)
    inside = window >= 0
    _reduce_at(np.maximum, peak, window[inside], level[reach][inside])
    return peak, average


class SubmissionFrontier:
    """Where the dispatches still to come may start at the earliest as a reader yields whole submissions
    (`EventSource.windows`): a dispatch runs inside its submission's execution, so no later one starts before
    the earliest start of the submissions from the first not yet read on."""

    def __init__(self, submissions: np.ndarray):
        starts = submissions["start_ns"].astype(np.int64)
        self._later_starts = np.minimum.accumulate(starts[::-1])[::-1] if len(starts) else starts
        self._ids = np.ascontiguousarray(submissions["submission"])  # once, not per window
        self._yielded, self._first_left = np.zeros(len(self._ids), bool), 0  # submissions read; the first not yet

    def after(self, executed: np.ndarray) -> Optional[int]:
        """The frontier once the submissions ``executed`` are read too (None: every one is)."""
        self._yielded[np.searchsorted(self._ids, executed["submission"])] = True
        left = self._yielded[self._first_left:]
        self._first_left += len(left) if left.all() else int(np.argmin(left))
        return int(self._later_starts[self._first_left]) if self._first_left < len(self._later_starts) else None


@dataclass
class CallWindows:
    """The measured calls' windows (call_windows) and which queue spans are theirs."""

    starts: np.ndarray
    ends: np.ndarray
    # The measured calls' spans: all (a slice: the columns are used as they are, no copy of a long profile's
    # spans) or a mask.
    measured: Union[slice, np.ndarray]


def measured_windows(spans: np.ndarray, calls: int) -> Optional[CallWindows]:
    """The windows of the measured calls; None unless every call has a span."""
    call = spans["call"]
    mask = (call >= 0) & (call < calls)
    measured = slice(None) if mask.all() else mask
    if not len(spans) or not mask.any() or not np.bincount(call[measured], minlength=calls).all():
        return None
    return CallWindows(*call_windows(spans["start_ns"][measured], spans["end_ns"][measured], call[measured], calls),
                    measured)


def measured_call_starts(spans: np.ndarray, calls: int) -> Optional[np.ndarray]:
    """The start of each measured call's window (its first queue operation); None unless every call has one."""
    windows = measured_windows(spans, calls)
    return None if windows is None else windows.starts


def call_time_and_memory(windows: Optional[CallWindows], dispatch_union: Optional[np.ndarray], spans: np.ndarray,
                         memory: np.ndarray, allocations: Optional[np.ndarray] = None) -> tuple[Optional[CallTime],
                                                                                     Optional[DeviceMemory]]:
    """``call_time`` and ``device_memory`` of the measured calls, over their ``windows`` (`measured_windows`, found
    once by the caller). ``dispatch_union``: the union of the dispatch intervals inside each window
    (`union_by_window`, summed as the events are read); ``allocations``: the queue allocations where they are kept
    apart from ``memory`` (`Profile.allocations`)."""
    return _call_time(dispatch_union, spans, windows), _device_memory(memory, windows, allocations)


def call_time(dispatch_starts: np.ndarray, dispatch_ends: np.ndarray, spans: np.ndarray, calls: int) -> Optional[CallTime]:
    """The breakdown of the measured calls ``0 .. calls-1``; None without queue spans (e.g. a Tracy capture).

    ``spans``: QUEUE_SPAN_DTYPE, command-buffer executions and other queue
    operations of all calls (warmup calls have negative call numbers).
    """
    windows = measured_windows(spans, calls)
    union = None if windows is None else union_by_window(dispatch_starts, dispatch_ends, windows.starts, windows.ends)
    return _call_time(union, spans, windows)


def device_memory(memory: np.ndarray, spans: np.ndarray, calls: int) -> Optional[DeviceMemory]:
    """Device memory of the measured calls from memory events (MEMORY_DTYPE); None without pool figures."""
    return _device_memory(memory, measured_windows(spans, calls))


def _call_time(dispatch: Optional[np.ndarray], spans: np.ndarray, windows: Optional[CallWindows]) -> Optional[CallTime]:
    if windows is None:
        return None
    window_starts, window_ends, measured = windows.starts, windows.ends, windows.measured
    rows = ROW_OF_EVENT_TYPE[spans["type"]]
    parts = partition_time(spans["start_ns"], spans["end_ns"], rows, len(QUEUE_ROWS), window_starts, window_ends)
    per_call = window_ends - window_starts
    p50, p95 = percentiles(per_call, [50, 95])
    types = spans["type"][measured]
    transfers = ROW_OF_EVENT_TYPE[types] == TRANSFER
    executes = types == EVENT_EXECUTE
    return CallTime(
        call_ns=int(per_call.sum()),
        dispatch_ns=int(dispatch.sum()),
        command_buffer_gap_ns=int((parts[:, COMMAND_BUFFER] - dispatch).sum()),
        transfer_ns=int(parts[:, TRANSFER].sum()),
        allocation_ns=int(parts[:, ALLOCATION].sum()),
        other_queue_ns=int(parts[:, OTHER_QUEUE].sum()),
        idle_ns=int(parts[:, len(QUEUE_ROWS)].sum()),
        execute_ns=int((spans["end_ns"][measured][executes] - spans["start_ns"][measured][executes]).sum()),
        call_p50_ns=float(p50),
        call_p95_ns=float(p95),
        transfer_bytes=int(spans["payload_bytes"][measured][transfers].sum()),
    )


def _device_memory(memory: np.ndarray, windows: Optional[CallWindows],
                   allocations: Optional[np.ndarray] = None) -> Optional[DeviceMemory]:
    with_stats = (memory["flags"] & MEMORY_POOL_STATS) != 0
    if not with_stats.any() or windows is None:
        return None
    # Fields, not rows: gathering whole rows copies every field; most profiles have figures on every event.
    def stats(field: str) -> np.ndarray:
        return memory[field] if with_stats.all() else memory[field][with_stats]

    peak, average = memory_by_window(stats("time_ns"), stats("pool"), stats("pool_reserved"), windows.starts,
                                     windows.ends)
    lengths = (windows.ends - windows.starts).astype(np.float64)
    if allocations is None:
        allocations = memory[["time_ns", "length"]][memory["type"] == QUEUE_ALLOCA]
    made = _window_of(allocations["time_ns"], windows.starts, windows.ends) >= 0
    return DeviceMemory(
        peak_bytes=int(peak.max()),
        mean_peak_bytes=float(peak.mean()),
        average_bytes=float((average * lengths).sum() / lengths.sum()) if lengths.sum() else float(average.mean()),
        allocated_bytes=int(allocations["length"][made].sum()),
        allocations=int(made.sum()),
    )
