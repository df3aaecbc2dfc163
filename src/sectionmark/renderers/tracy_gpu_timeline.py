"""Tracy GPU-context tracks whose zones carry explicit begin/end timestamps.

For timings measured elsewhere: a device, or a profile being replayed
(`sectionmark.renderers.tracy_out`). Tracy does not check nesting in this
build, so a timeline keeps its own stack and only ever closes the innermost
open zone.
"""

from __future__ import annotations

import threading
import time
from typing import Optional

from sectionmark.tracy.binding import (
    GpuCalibrationData,
    GpuContextNameData,
    GpuNewContextData,
    GpuTimeData,
    GpuZoneBeginData,
    GpuZoneEndData,
    TracyClient,
    client,
    tracy_name,
)

__all__ = ["GpuTimeline"]

_GPU_CONTEXT_TYPE_CUSTOM = 7
_GPU_CONTEXT_CALIBRATED = 1
# A GpuTimeline re-anchors its clock until one calibration call took at most this long.
_ANCHOR_CALL_NS = 1_000
_ANCHOR_ATTEMPTS = 20


class GpuTimeline:
    """A named Tracy GPU-context track whose zones carry explicit timestamps.

    For timings measured elsewhere (a device, a profile being replayed):
    ``begin(name, start_ns)`` / ``end(end_ns)`` pairs nest as a stack, and all
    timestamps must be non-decreasing in emission order. ``origin_ns`` is the
    timeline clock's reading now; Tracy places zones relative to it, so with
    the default (``time.monotonic_ns()``) pass monotonic-clock timestamps.
    Calls from several threads are serialized, but the zones of one timeline
    still form a single stack: use one timeline per queue or stream.
    """

    def __init__(self, name: str, *, origin_ns: Optional[int] = None, tracy: Optional[TracyClient] = None):
        self._tracy = tracy if tracy is not None else client()
        self.context = self._tracy.new_gpu_context_id()
        self.name = name
        self._lock = threading.Lock()
        self._depth = 0
        self._query = 0
        self._last_ns = time.monotonic_ns() if origin_ns is None else int(origin_ns)
        self._tracy.gpu_new_context(
            GpuNewContextData(
                self._last_ns, 1.0, self.context, _GPU_CONTEXT_CALIBRATED, _GPU_CONTEXT_TYPE_CUSTOM
            )
        )
        encoded = tracy_name(name)
        self._tracy.gpu_context_name(GpuContextNameData(self.context, encoded, len(encoded)))
        if origin_ns is None:
            self._anchor_to_monotonic_clock()

    def _anchor_to_monotonic_clock(self) -> None:
        """Tie the track to the monotonic clock again, as precisely as a warm call allows.

        Tracy maps a context's times to its CPU clock by the (our time, its
        time) pair taken when the context is created: its time is read inside
        the C call, ours just before. The first such call in a process is slow
        (measured 5-15 µs), which shifted a process's first track by that much
        against the others. A calibration message re-takes the pair (with
        equal CPU and GPU deltas Tracy's rate stays exactly 1); the last one
        sent counts, so it is repeated until one call took at most
        ``_ANCHOR_CALL_NS``, which bounds the error of the anchor.
        """
        data = GpuCalibrationData(0, 0, self.context)
        for _ in range(_ANCHOR_ATTEMPTS):
            now = max(time.monotonic_ns(), self._last_ns + 1)
            data.gpuTime, data.cpuDelta = now, now - self._last_ns
            self._tracy.gpu_calibration(data)
            took = time.monotonic_ns() - now
            self._last_ns = now
            if took <= _ANCHOR_CALL_NS:
                break

    def _next_query(self) -> int:
        # Each query's time is sent right after its begin/end, so ids can be
        # reused immediately; cycling through all of them is just cautious.
        self._query = (self._query + 1) & 0xFFFF
        return self._query

    def _check_time(self, ns: int) -> int:
        ns = int(ns)
        if ns < self._last_ns:
            raise ValueError(
                f"GpuTimeline {self.name!r}: timestamp {ns} ns is earlier than the previous one "
                f"({self._last_ns} ns); emit zones in time order"
            )
        self._last_ns = ns
        return ns

    def begin(self, name: str, start_ns: int, color: Optional[int] = None, text: Optional[str] = None) -> None:
        """Open a zone at ``start_ns`` inside the zone open now (if any); ``color`` 0xRRGGBB, ``text`` shown under
        its name (Tracy's GPU zones have no zone text: it is their source location's function string).

        Tracy takes the zone's CPU-side begin ("CPU command setup", "delay to execution") from the moment of
        this call, and its CPU-side end from `end`'s.
        """
        address, _ = self._tracy.source_location(name, color, text)
        with self._lock:
            start_ns = self._check_time(start_ns)
            query = self._next_query()
            self._tracy.gpu_zone_begin(GpuZoneBeginData(address, query, self.context))
            self._tracy.gpu_time(GpuTimeData(start_ns, query, self.context))
            self._depth += 1

    def end(self, end_ns: int) -> None:
        """Close the innermost open zone at ``end_ns``."""
        with self._lock:
            if not self._depth:
                raise ValueError(f"GpuTimeline {self.name!r}: end() without an open zone")
            end_ns = self._check_time(end_ns)
            query = self._next_query()
            self._tracy.gpu_zone_end(GpuZoneEndData(query, self.context))
            self._tracy.gpu_time(GpuTimeData(end_ns, query, self.context))
            self._depth -= 1

    def zone(self, name: str, start_ns: int, end_ns: int, color: Optional[int] = None,
             text: Optional[str] = None) -> None:
        """A zone without children: ``begin`` then ``end``."""
        self.begin(name, start_ns, color, text)
        self.end(end_ns)
