"""A device's waiting time per section: each stretch a device waits for another is given to the section it waits
to run.

A device waits (`DeviceTime.waiting`) where it runs nothing (no queue operation of
its own) while another device runs something, inside a call's window. Each such
stretch ends where the device starts its own work again; the section it waits to
run is that of its next command-buffer execution in the same call: the sections of
the first command of that buffer that belongs to any (its first dispatch, copy,
fill or update; barriers belong to none). A first command that is a fused dispatch
of several sections splits the wait by its shares, as its time is split, and is
marked. A wait with no execution of the device after it in the call (the device
has done its part and the others finish theirs) waits to run nothing: it goes to
"(unmarked)", as does a wait before a buffer the map does not know.

Every waiting nanosecond goes to one section, so a device's sections' waits add
up to its ``waiting`` exactly (the same elementary stretches of the same spans).
Pure functions over numpy arrays, unit-tested on hand-built data in tests/profiling/test_devices.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional

import numpy as np

from sectionmark.profiling.device_activity import DeviceActivity
from sectionmark.section_map import CommandBuffer
from sectionmark.section_path import SectionPath


@dataclass
class SectionWaits:
    """One device's waiting time by section (ns over the measured calls), and the sections whose wait was split
    with others' by the shares of the fused dispatch they wait to run (``split``)."""

    waiting_ns: dict[SectionPath, float]
    split: set[SectionPath]


def waiting_stretches(spans: list[np.ndarray], windows: tuple[np.ndarray, np.ndarray],
                      activity: Optional[DeviceActivity] = None) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per device (``spans``: each device's queue spans, QUEUE_SPAN_DTYPE), the (start, end, call) of each
    stretch inside the calls' ``windows`` (sorted, disjoint) where it runs nothing while another device runs
    something: elementary stretches cut at every span's and window's ends (``activity``: their sweep, when
    already made). One device's at a time: they grow with the calls."""
    activity = DeviceActivity(spans, windows) if activity is None else activity
    someone = np.flatnonzero((activity.call >= 0) & (activity.running > 0))  # segments where a device runs
    starts, ends, calls = activity.starts[someone], activity.ends[someone], activity.call[someone]
    for mine in activity.active:
        waiting = ~mine[someone]
        yield starts[waiting], ends[waiting], calls[waiting]


def awaited_shares(buffer: Optional[CommandBuffer]) -> dict[SectionPath, float]:
    """The sections a wait before an execution of ``buffer`` waits to run: the shares of its first command that
    belongs to a section (its parts adding up to 1); "(unmarked)" where none does or the buffer is not known."""
    for command in buffer.commands if buffer is not None else ():
        if command.op != "barrier" and command.shares:
            total = sum(share.weight for share in command.shares)
            shares: dict[SectionPath, float] = {}
            for share in command.shares:
                shares[share.path] = shares.get(share.path, 0.0) + share.weight / total
            return shares
    return {(): 1.0}


def section_waits(stretches: tuple[np.ndarray, np.ndarray, np.ndarray], execution_starts: np.ndarray,
                  execution_calls: np.ndarray, execution_buffers: np.ndarray,
                  buffers: dict[int, Optional[CommandBuffer]]) -> SectionWaits:
    """A device's waiting ``stretches`` (`waiting_stretches`) given to the section each waits to run: that of the
    device's next execution in the same call (``execution_*``: its executions' starts, measured calls and runtime
    command buffers; ``buffers``: the map's buffer of each runtime one), "(unmarked)" where none follows in the
    call."""
    starts, ends, calls = stretches
    order = np.argsort(execution_starts, kind="stable")
    following = np.searchsorted(execution_starts[order], ends, side="left")  # the first execution from the end on
    has_next = following < len(order)
    nexts = order[np.minimum(following, max(len(order) - 1, 0))] if len(order) else np.zeros(len(ends), np.int64)
    same_call = has_next & (execution_calls[nexts] == calls) if len(order) else has_next
    awaited = np.where(same_call, nexts, -1)
    # The waits before each buffer summed first (integer ns: exact), then given to its shares once per buffer, in
    # the order of their first wait; group 0: no execution after the wait in its call ("(unmarked)", as an
    # unknown buffer's).
    # Per runtime buffer, not per execution: a long profile's executions are a few buffers run call after call.
    runtime_ids, runtime_of = np.unique(execution_buffers, return_inverse=True)
    found = [buffers.get(runtime_id) for runtime_id in runtime_ids.tolist()]
    groups: dict[int, int] = {id(None): 0}  # id of a buffer -> its group
    group_of_runtime = np.array([groups.setdefault(id(buffer), len(groups)) for buffer in found], np.int64)
    group_of = np.append(group_of_runtime[runtime_of.reshape(-1)], 0)
    buffer_of = {groups[id(buffer)]: buffer for buffer in found}
    lengths = np.bincount(awaited + 1, weights=ends - starts, minlength=len(execution_starts) + 1)
    waited = np.flatnonzero(lengths)
    waited_groups = group_of[waited - 1]  # index 0 (none after) -> the last row: group 0
    sums = np.bincount(waited_groups, weights=lengths[waited], minlength=len(groups))
    firsts, first_rows = np.unique(waited_groups, return_index=True)
    result = SectionWaits({}, set())
    for group in firsts[np.argsort(first_rows)].tolist():
        shares = awaited_shares(buffer_of.get(group))
        for path, part in shares.items():
            result.waiting_ns[path] = result.waiting_ns.get(path, 0.0) + part * float(sums[group])
        if len(shares) > 1:
            result.split.update(shares)
    return result
