"""Device-timed dispatch events (a GPU's HAL-native profile, e.g. Vulkan): device ticks onto IREE's host clock.

IREE 3.13's Vulkan driver records no host-execution events: each dispatch is
a ``dispatch_event`` with start and end *ticks* of the device clock, its
submission, command buffer and command index (the same join to the section
map as a host event), and the session has clock-correlation samples (a device
tick, the driver's host CPU timestamp and two reads of IREE's host clock
around them). Both IREE profile readers decode those into the tables below
and hand them here, so the bundle and JSONL readers map ticks identically:

* durations: ticks scaled by the fit from the first to the last sample's driver
  host CPU timestamps, rounded half up to the ns, exactly as ``iree-profile``
  computes each event's ``duration_ns`` (``iree_profile_model_clock_fit_scale_ticks_to_ns``);
* starts: the tick mapped onto IREE's host clock (``iree_host_time_ns``, the
  clock of the queue events) by the fit through the midpoints of the first
  and last samples' host brackets, as ``iree-profile`` maps ticks to that
  domain; a dispatch ends at its start plus its duration, so busy time is
  ``iree-profile``'s to the ns.

The device does not timestamp command-buffer executions: each execution
(queue ``execute`` event) spans its dispatches, from the first start to the
last end; one without dispatch events is an empty span at its submission time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sectionmark.readers.arrays import first_true
from sectionmark.readers.checks import check_unique, corrupt
from sectionmark.readers.event_model import DISPATCH_DTYPE, MAX_TIMESTAMP_NS, SUBMISSION_DTYPE

# One device-timed dispatch as both readers decode it (the bundle's record, the JSONL row), ticks raw.
# (_ireeprof.c's device_dispatch_events writes these rows: keep the two in step.)
DEVICE_DISPATCH_DTYPE = np.dtype(
    [("event_id", "<u8"), ("submission", "<u8"), ("command_buffer", "<u8"), ("start_tick", "<u8"), ("end_tick", "<u8"),
     ("device", "<u4"), ("queue", "<u4"), ("flags", "<u4"), ("command_index", "<u4"), ("key", "<u4")]
)
# One clock-correlation sample (iree_hal_profile_clock_correlation_record_t), in the order the profile has them.
CLOCK_SAMPLE_DTYPE = np.dtype(
    [("device", "<u4"), ("flags", "<u4"), ("device_tick", "<u8"), ("host_cpu_ns", "<u8"),
     ("host_time_begin_ns", "<i8"), ("host_time_end_ns", "<i8")]
)
# A queue ``execute`` event: the submission of a command buffer, on IREE's host clock.
EXECUTE_DTYPE = np.dtype([("submission", "<u8"), ("command_buffer", "<u8"), ("host_time_ns", "<i8")])

DISPATCH_IN_COMMAND_BUFFER = 1  # iree_hal_profile_dispatch_event_flags_t: recorded in a command buffer
_TICK = 1 << 0  # clock sample flags: device tick, driver host CPU timestamp, IREE host time bracket
_HOST_CPU = 1 << 1
_HOST_BRACKET = 1 << 3
_SAMPLE_NEEDS = _TICK | _HOST_CPU | _HOST_BRACKET


@dataclass(frozen=True)
class ClockFit:
    """A line from device ticks to ns through two samples: ``first_ns + (tick - first_tick) * time_span / tick_span``."""

    first_tick: int
    first_ns: int
    tick_span: int
    time_span_ns: int

    def scale(self, ticks: np.ndarray) -> np.ndarray:
        """``ticks * time_span / tick_span`` rounded half up (int64), in exact integer arithmetic as IREE's 128-bit one."""
        ticks = ticks.astype(np.int64)
        if self.time_span_ns == self.tick_span:
            return ticks
        half = self.tick_span // 2
        if not len(ticks) or int(ticks.max()) <= (np.iinfo(np.int64).max - half) // self.time_span_ns:
            return (ticks * self.time_span_ns + half) // self.tick_span
        # products beyond 64 bits: Python integers (exact), only for long runs on clocks that are not in ns
        return np.array([(tick * self.time_span_ns + half) // self.tick_span for tick in ticks.tolist()], np.int64)

    def map(self, ticks: np.ndarray) -> np.ndarray:
        """Ticks as ns on the fitted clock (ticks before the first sample map backwards, as IREE's)."""
        delta = ticks.astype(np.int64) - self.first_tick
        scaled = self.scale(np.abs(delta))
        return self.first_ns + np.where(delta >= 0, scaled, -scaled)


@dataclass(frozen=True)
class DeviceClock:
    """One device's two fits: to the driver's CPU timestamps (durations) and to IREE's host clock (positions)."""

    durations: ClockFit
    host: ClockFit


def device_clocks(path: Path, samples: np.ndarray) -> dict[int, DeviceClock]:
    """Each device's fits from its first and last clock samples (``CLOCK_SAMPLE_DTYPE``, in profile order)."""
    clocks: dict[int, DeviceClock] = {}
    for device in np.unique(samples["device"]).tolist():
        mine = samples[samples["device"] == device]
        first, last = mine[0], mine[-1]
        if len(mine) < 2 or (mine["flags"] & _SAMPLE_NEEDS != _SAMPLE_NEEDS).any():
            continue  # not a usable fit: dispatches of this device are refused below
        tick_span = int(last["device_tick"]) - int(first["device_tick"])
        cpu_span = int(last["host_cpu_ns"]) - int(first["host_cpu_ns"])
        first_ns, last_ns = (int(sample["host_time_begin_ns"]) + (int(sample["host_time_end_ns"])
                                                                    - int(sample["host_time_begin_ns"])) // 2
                             for sample in (first, last))
        if tick_span <= 0 or cpu_span <= 0 or last_ns <= first_ns or (np.diff(mine["device_tick"].astype(np.int64)) < 0).any():
            raise corrupt(path, f"the clock samples of device {device} do not advance together")
        clocks[device] = DeviceClock(ClockFit(int(first["device_tick"]), int(first["host_cpu_ns"]), tick_span, cpu_span),
                                     ClockFit(int(first["device_tick"]), first_ns, tick_span, last_ns - first_ns))
    return clocks


def device_dispatches(path: Path, events: np.ndarray, clocks: dict[int, DeviceClock]) -> np.ndarray:
    """Device-timed dispatch events (``DEVICE_DISPATCH_DTYPE``) as dispatch rows on IREE's host clock (``DISPATCH_DTYPE``).

    Refuses (one line) an event outside a command buffer, without valid ticks,
    recorded twice, or of a device without two clock samples.
    """
    outside = first_true(events["flags"] & DISPATCH_IN_COMMAND_BUFFER == 0)
    if outside >= 0:
        raise corrupt(path, f"dispatch event {events['event_id'][outside]} was not recorded in a command buffer")
    start, end = events["start_tick"], events["end_tick"]
    invalid = first_true((start == 0) | (end < start) | (end >= np.uint64(MAX_TIMESTAMP_NS)))
    if invalid >= 0:
        raise corrupt(path, f"dispatch event {events['event_id'][invalid]} has no valid device ticks")
    check_unique(path, "a dispatch event", events["device"], events["event_id"])
    rows = np.zeros(len(events), DISPATCH_DTYPE)
    for name in ("submission", "command_buffer", "command_index", "key", "device", "queue"):
        rows[name] = events[name]
    for device in np.unique(events["device"]).tolist():
        clock = clocks.get(device)
        if clock is None:
            raise corrupt(path, f"device {device} has dispatch events but not two clock samples to time them")
        mine = events["device"] == device
        rows["start_ns"][mine] = clock.host.map(start[mine])
        rows["end_ns"][mine] = rows["start_ns"][mine] + clock.durations.scale(end[mine] - start[mine])
    return rows


def device_executions(executes: np.ndarray, dispatches: np.ndarray) -> np.ndarray:
    """Command-buffer executions (``SUBMISSION_DTYPE``) spanning their dispatches (``dispatches`` by submission)."""
    submissions = np.zeros(len(executes), SUBMISSION_DTYPE)
    submissions["submission"], submissions["command_buffer"] = executes["submission"], executes["command_buffer"]
    submissions["start_ns"] = submissions["end_ns"] = executes["host_time_ns"]
    if len(dispatches):
        grouped = dispatches[np.argsort(dispatches["submission"], kind="stable")]
        ids, first = np.unique(grouped["submission"], return_index=True)
        starts = np.minimum.reduceat(grouped["start_ns"], first)
        ends = np.maximum.reduceat(grouped["end_ns"], first)
        rank = np.searchsorted(ids, submissions["submission"])
        has = (rank < len(ids)) & (ids[np.minimum(rank, len(ids) - 1)] == submissions["submission"])
        submissions["start_ns"][has], submissions["end_ns"][has] = starts[rank[has]], ends[rank[has]]
    return submissions
