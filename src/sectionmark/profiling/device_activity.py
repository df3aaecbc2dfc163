"""Which devices run something when, in the calls' windows: one sweep over every device's queue spans, shared by the
time split (`sectionmark.profiling.devices.split_device_time`: any device's busy time, each device's overlap with
the others) and the waits (`sectionmark.profiling.device_waits.waiting_stretches`).

The windows are cut at every span's and window's ends into elementary segments;
each device is active in a segment when one of its spans covers it. Every figure
drawn from the segments is an exact integer sum of their lengths, as a sweep of
the same spans per question would give, but the spans are sorted and swept once
for all questions, not once per device and question.
"""

from __future__ import annotations

import numpy as np


class DeviceActivity:
    """The calls' ``windows`` (starts, ends: sorted, disjoint) cut at every end of ``spans`` (each device's queue
    spans, QUEUE_SPAN_DTYPE): per elementary segment, its start, end, window (``call``, -1 outside any), and
    which devices run something in it (``active``, one mask per device)."""

    def __init__(self, spans: list[np.ndarray], windows: tuple[np.ndarray, np.ndarray]):
        window_starts, window_ends = (np.asarray(edges, np.int64) for edges in windows)
        self.window_count = len(window_starts)
        every = np.concatenate([part[name].astype(np.int64) for part in spans for name in ("start_ns", "end_ns")]
                               + [window_starts, window_ends])
        # The distinct times in order, and each time's index among them (its rank), from one sort: no search.
        order = np.argsort(every, kind="stable")  # timsort: the spans come as a few sorted runs
        ordered = every[order]
        new = np.concatenate([[True], ordered[1:] != ordered[:-1]]) if len(ordered) else np.zeros(0, bool)
        boundaries = ordered[new]
        rank = np.empty(len(every), np.int64)
        rank[order] = np.cumsum(new) - 1
        self.starts, self.ends = boundaries[:-1], boundaries[1:]
        self.active: list[np.ndarray] = []
        first = 0
        for part in spans:
            starts, ends = rank[first : first + len(part)], rank[first + len(part) : first + 2 * len(part)]
            first += 2 * len(part)
            change = np.bincount(starts, minlength=len(boundaries)) - np.bincount(ends, minlength=len(boundaries))
            self.active.append(np.cumsum(change)[:-1] > 0)
        call = np.searchsorted(window_starts, self.starts, side="right") - 1
        inside = (call >= 0) & (self.starts < window_ends[np.maximum(call, 0)]) if len(call) else call >= 0
        self.call = np.where(inside, call, -1)
        self.running = np.sum(self.active, axis=0, dtype=np.int32) if spans else np.zeros(len(self.starts), np.int32)

    def by_window(self, chosen: np.ndarray) -> np.ndarray:
        """Per window (int64 ns): the length of the ``chosen`` segments (a mask) inside it."""
        chosen = chosen & (self.call >= 0)
        return np.rint(np.bincount(self.call[chosen], weights=(self.ends - self.starts)[chosen],
                                   minlength=self.window_count)).astype(np.int64)

    def anyone(self) -> np.ndarray:
        """Per window: the time some device ran something (the union of every device's spans)."""
        return self.by_window(self.running > 0)

    def overlap(self, device: int) -> np.ndarray:
        """Per window: the time the ``device``-th device ran something while another device did too."""
        return self.by_window(self.active[device] & (self.running > 1))
