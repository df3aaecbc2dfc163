"""Device ticks onto the host clock (readers/device_events.py), on hand-built samples and events.

The expected values are IREE's own (iree-profile's ProfileClockFitTest): a
tick maps to the nearest ns, half up, in exact integer arithmetic, and the
host-time fit goes through the midpoints of the samples' host brackets.
Real Vulkan profiles are checked against iree-profile in tests/gpu/test_vulkan.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sectionmark.errors import SectionmarkError
from sectionmark.readers.device_events import (CLOCK_SAMPLE_DTYPE, DEVICE_DISPATCH_DTYPE, EXECUTE_DTYPE, ClockFit,
                                              device_clocks, device_dispatches, device_executions)

PATH = Path("vk.ireeprof")


def samples(*rows: tuple[int, int, int, int]) -> np.ndarray:
    """Clock samples of device 0, each (device tick, driver CPU ns, host bracket begin, end), all flags set."""
    return np.array([(0, 0b1111, tick, cpu, begin, end) for tick, cpu, begin, end in rows], CLOCK_SAMPLE_DTYPE)


def events(*rows: tuple[int, int, int, int]) -> np.ndarray:
    """Dispatch events in command buffer 1, each (event id, submission, start tick, end tick)."""
    return np.array([(event, submission, 1, start, end, 0, 0, 1, index, 0)
                     for index, (event, submission, start, end) in enumerate(rows)], DEVICE_DISPATCH_DTYPE)


def test_ticks_map_with_irees_integer_rounding():
    fit = ClockFit(first_tick=(1 << 60) + 3, first_ns=900000000000000000, tick_span=7, time_span_ns=10)
    assert fit.map(np.array([(1 << 60) + 6, 1 << 60], np.uint64)).tolist() == [900000000000000004, 899999999999999996]
    assert fit.scale(np.array([7, 4])).tolist() == [10, 6]  # 5.71 -> 6: nearest, half up
    assert ClockFit(1000, 101, 10, 70).map(np.array([1005])).tolist() == [136]


def test_products_beyond_64_bits_stay_exact():
    fit = ClockFit(first_tick=0, first_ns=0, tick_span=3_000_000_007, time_span_ns=3_000_000_001)
    ticks = np.array([2**62, 12_345], np.uint64)
    expected = [(tick * 3_000_000_001 + 3_000_000_007 // 2) // 3_000_000_007 for tick in (2**62, 12_345)]
    assert fit.scale(ticks).tolist() == expected


def test_durations_follow_the_cpu_clock_and_starts_the_host_clock():
    # device ticks in ns, the driver's CPU clock 2x the tick rate, IREE's host clock 1000 ns ahead of the CPU's
    clocks = device_clocks(PATH, samples((1000, 5000, 5999, 6003), (2000, 7000, 7999, 8003)))
    rows = device_dispatches(PATH, events((1, 3, 1100, 1150), (2, 3, 1200, 1201)), clocks)
    assert rows["start_ns"].tolist() == [6001 + 200, 6001 + 400]  # bracket midpoints 6001 and 8001, 2 ns per tick
    assert (rows["end_ns"] - rows["start_ns"]).tolist() == [100, 2]
    assert rows[["submission", "command_buffer", "command_index"]].tolist() == [(3, 1, 0), (3, 1, 1)]


def test_executions_span_their_dispatches():
    clocks = device_clocks(PATH, samples((0, 0, 0, 0), (10_000, 10_000, 10_000, 10_000)))
    rows = device_dispatches(PATH, events((1, 4, 300, 400), (2, 2, 100, 150), (3, 4, 500, 520)), clocks)
    executes = np.array([(2, 1, 50), (4, 1, 250), (6, 1, 600)], EXECUTE_DTYPE)
    spans = device_executions(executes, rows)
    assert spans[["submission", "start_ns", "end_ns"]].tolist() == [(2, 100, 150), (4, 300, 520), (6, 600, 600)]


@pytest.mark.parametrize("edit, message", [
    (lambda e, s: e.__setitem__("flags", 0), "was not recorded in a command buffer"),
    (lambda e, s: e.__setitem__("end_tick", 10), "has no valid device ticks"),
    (lambda e, s: e.__setitem__("event_id", 7), "a dispatch event (0, 7) is recorded twice"),
    (lambda e, s: s.__setitem__("flags", 0b0011), "not two clock samples"),
    (lambda e, s: s.__setitem__("device_tick", [2000, 1000]), "do not advance together"),
])
def test_inconsistent_device_events_are_one_line(edit, message):
    rows, clock_rows = events((1, 3, 1100, 1150), (2, 3, 1200, 1201)), samples((1000, 1000, 1000, 1000),
                                                                                 (2000, 2000, 2000, 2000))
    edit(rows, clock_rows)
    with pytest.raises(SectionmarkError, match=message.replace("(", r"\(").replace(")", r"\)")):
        device_dispatches(PATH, rows, device_clocks(PATH, clock_rows))
