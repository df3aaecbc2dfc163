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
from typing import Optional

import numpy as np

from sectionmark.readers.arrays import distinct
from sectionmark.section_map import CommandBuffer
from sectionmark.section_path import SectionPath


@dataclass
class SectionWaits:
    """One device's waiting time by section (ns over the measured calls), and the sections whose wait was split
    with others' by the shares of the fused dispatch they wait to run (``split``)."""

    waiting_ns: dict[SectionPath, float]
    split: set[SectionPath]


def waiting_stretches(spans: list[np.ndarray], windows: tuple[np.ndarray, np.ndarray]
                      ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per device (``spans``: each device's queue spans, QUEUE_SPAN_DTYPE), the (start, end, call) of each
    stretch inside the calls' ``windows`` (sorted, disjoint) where it runs nothing while another device runs
    something: elementary stretches cut at every span's and window's ends."""
    window_starts, window_ends = windows
    every = np.concatenate([part[name].astype(np.int64) for part in spans for name in ("start_ns", "end_ns")]
                           + [window_starts.astype(np.int64), window_ends.astype(np.int64)])
    boundaries = distinct(every)
    if len(boundaries) < 2:
        return [(np.zeros(0, np.int64),) * 3 for _part in spans]
    active = []
    for part in spans:
        change = (np.bincount(np.searchsorted(boundaries, part["start_ns"]), minlength=len(boundaries))
                  - np.bincount(np.searchsorted(boundaries, part["end_ns"]), minlength=len(boundaries)))
        active.append(np.cumsum(change)[:-1] > 0)
    starts, ends = boundaries[:-1], boundaries[1:]
    call = np.searchsorted(window_starts, starts, side="right") - 1
    inside = (call >= 0) & (starts < window_ends[np.maximum(call, 0)])
    anyone = np.logical_or.reduce(active)
    stretches = []
    for mine in active:
        waiting = inside & anyone & ~mine
        stretches.append((starts[waiting], ends[waiting], call[waiting]))
    return stretches


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
                  execution_calls: np.ndarray, execution_buffers: list[Optional[CommandBuffer]]) -> SectionWaits:
    """A device's waiting ``stretches`` (`waiting_stretches`) given to the section each waits to run: that of the
    device's next execution in the same call (``execution_*``: its executions' starts, measured calls and map
    buffers), "(unmarked)" where none follows in the call."""
    starts, ends, calls = stretches
    order = np.argsort(execution_starts, kind="stable")
    following = np.searchsorted(execution_starts[order], ends, side="left")  # the first execution from the end on
    has_next = following < len(order)
    nexts = order[np.minimum(following, max(len(order) - 1, 0))] if len(order) else np.zeros(len(ends), np.int64)
    same_call = has_next & (execution_calls[nexts] == calls) if len(order) else has_next
    awaited = np.where(same_call, nexts, -1)
    lengths = np.bincount(awaited + 1, weights=ends - starts, minlength=len(execution_starts) + 1)
    result = SectionWaits({}, set())
    for index in np.flatnonzero(lengths).tolist():
        shares = awaited_shares(execution_buffers[index - 1]) if index else {(): 1.0}
        for path, part in shares.items():
            result.waiting_ns[path] = result.waiting_ns.get(path, 0.0) + part * float(lengths[index])
        if len(shares) > 1:
            result.split.update(shares)
    return result
