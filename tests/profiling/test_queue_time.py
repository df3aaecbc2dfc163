"""Call-time breakdown and device memory (profiling/queue_time.py) on hand-built arrays."""

from __future__ import annotations

import numpy as np
import pytest

from sectionmark.profiling import native, queue_time
from sectionmark.profiling.queue_time import (
    QUEUE_ALLOCA, QUEUE_SPAN_DTYPE, assign_calls, call_time, call_windows, device_memory, memory_by_window,
    partition_time, union_by_window,
)
from sectionmark.readers.event_model import EVENT_NAMES, MEMORY_DTYPE, MEMORY_POOL_STATS

TYPE = {name: value for value, name in EVENT_NAMES.items()}


def spans(*rows: tuple[str, int, int, int]) -> np.ndarray:
    """(event name, start, end, call) rows as QUEUE_SPAN_DTYPE."""
    return np.array([(TYPE[name], start, end, 0, call) for name, start, end, call in rows], QUEUE_SPAN_DTYPE)


def test_each_operation_goes_to_the_call_it_prepares_or_closes():
    # alloca alloca execute dealloca | alloca execute dealloca read
    submissions = np.array([1, 2, 4, 5, 7, 8], np.uint64)
    types = np.array([TYPE[t] for t in ("alloca", "alloca", "dealloca", "alloca", "dealloca", "read")], np.uint32)
    calls = assign_calls(submissions, types, np.array([3, 6], np.uint64), np.array([0, 1]))
    assert calls.tolist() == [0, 0, 0, 1, 1, 1]


def test_operations_beyond_the_first_or_last_execution_go_to_it():
    submissions = np.array([1, 9], np.uint64)
    types = np.array([TYPE["dealloca"], TYPE["alloca"]], np.uint32)
    assert assign_calls(submissions, types, np.array([5], np.uint64), np.array([3])).tolist() == [3, 3]


def test_call_windows_are_clipped_not_to_overlap():
    starts, ends = np.array([0, 50, 90, 200]), np.array([40, 120, 150, 260])
    window_starts, window_ends = call_windows(starts, ends, np.array([0, 0, 1, 2]), 3)
    assert window_starts.tolist() == [0, 90, 200]
    assert window_ends.tolist() == [90, 150, 260]


def test_time_goes_to_the_first_row_active_and_the_rest_is_idle():
    # rows: 0 execute [10, 50), 1 transfer [40, 70), 2 alloca [0, 5); window [0, 100)
    parts = partition_time(np.array([10, 40, 0]), np.array([50, 70, 5]), np.array([0, 1, 2]), 3,
                           np.array([0]), np.array([100]))
    assert parts.tolist() == [[40, 20, 5, 35]]
    assert parts.sum() == 100


def test_time_outside_every_window_is_not_counted():
    parts = partition_time(np.array([0, 150]), np.array([120, 160]), np.array([0, 0]), 1,
                           np.array([10, 100]), np.array([60, 130]))
    assert parts.tolist() == [[50, 0], [20, 10]]


@pytest.mark.parametrize("per_pass", [1, 2, 5])
def test_windows_partitioned_a_few_at_a_time_give_one_pass_result(monkeypatch, per_pass):
    """Operations of four rows reaching across windows (clipped windows, a gap, one long span over three); numpy's
    passes (the C pass takes every window at once)."""
    monkeypatch.setattr(native, "_passes", None)
    rng = np.random.default_rng(3)
    window_starts = np.array([0, 100, 180, 300, 310, 500, 640])
    window_ends = np.array([100, 180, 250, 310, 450, 640, 700])
    starts = rng.integers(-20, 700, 60)
    ends = starts + rng.integers(0, 120, 60)
    starts[0], ends[0] = 90, 520  # one operation over several windows
    rows = rng.integers(0, 4, 60)
    whole = queue_time.partition_time(starts, ends, rows, 4, window_starts, window_ends)
    monkeypatch.setattr(queue_time, "WINDOWS_PER_PASS", per_pass)
    assert queue_time.partition_time(starts, ends, rows, 4, window_starts, window_ends).tolist() == whole.tolist()
    assert whole.sum(axis=1).tolist() == (window_ends - window_starts).tolist()


@pytest.mark.parametrize("per_pass", [1, 2, 5])
def test_memory_of_windows_a_few_at_a_time_is_one_pass_memory(monkeypatch, per_pass):
    """Two pools' levels over seven windows (events before, between and after them): the same peaks and
    averages, to the bit."""
    rng = np.random.default_rng(5)
    times = np.sort(rng.integers(-50, 760, 80))
    pools, reserved = rng.integers(1, 3, 80), rng.integers(0, 5, 80) * 4096
    window_starts = np.array([0, 100, 180, 300, 310, 500, 640])
    window_ends = np.array([100, 180, 250, 310, 450, 640, 700])
    whole = queue_time.memory_by_window(times, pools, reserved, window_starts, window_ends)
    monkeypatch.setattr(queue_time, "WINDOWS_PER_PASS", per_pass)
    passes = queue_time.memory_by_window(times, pools, reserved, window_starts, window_ends)
    assert [part.tolist() for part in passes] == [part.tolist() for part in whole]
    assert whole[0].max() > 0


@pytest.mark.parametrize("order", [[0, 1, 2, 3], [1, 0, 2, 3]])  # sorted by start (one pass) and not (sorting)
def test_union_by_window_counts_overlapping_intervals_once(order):
    starts, ends = np.array([0, 5, 30, 110])[order], np.array([10, 20, 40, 150])[order]
    assert union_by_window(starts, ends, np.array([0, 100]), np.array([100, 140])).tolist() == [30, 30]


def test_memory_peak_and_time_weighted_average_over_pools():
    # pool 1: 100 at t=0, 300 at t=10, 100 at t=20; pool 2: 50 at t=5
    times = np.array([0, 5, 10, 20])
    pools = np.array([1, 2, 1, 1], np.uint64)
    reserved = np.array([100, 50, 300, 100], np.uint64)
    peak, average = memory_by_window(times, pools, reserved, np.array([0, 10]), np.array([10, 30]))
    assert peak.tolist() == [150, 350]
    # [0, 5): 100, [5, 10): 150 -> 125; [10, 20): 350, [20, 30): 150 -> 250
    assert average.tolist() == [125.0, 250.0]


def test_memory_of_one_pool_is_its_own_figure():
    peak, average = memory_by_window(np.array([0, 10, 20]), np.array([1, 1, 1], np.uint64),
                                     np.array([100, 300, 100], np.uint64), np.array([0, 10]), np.array([10, 30]))
    assert peak.tolist() == [100, 300] and average.tolist() == [100.0, 200.0]


def test_memory_before_a_pools_first_event_counts_zero():
    peak, average = memory_by_window(np.array([10]), np.array([1], np.uint64), np.array([80], np.uint64),
                                     np.array([0]), np.array([20]))
    assert peak.tolist() == [80] and average.tolist() == [40.0]


def test_call_time_rows_add_up_to_the_call_time():
    queue = spans(("alloca", 0, 10, 0), ("execute", 20, 100, 0), ("dealloca", 110, 115, 0),
                  ("alloca", 200, 210, 1), ("execute", 215, 300, 1), ("copy", 300, 320, 1),
                  ("alloca", -50, -40, -1))  # a warmup call: not measured
    queue["payload_bytes"][5] = 4096  # the copy
    timing = call_time(np.array([25, 60, 220]), np.array([55, 90, 280]), queue, 2)
    assert timing is not None
    assert (timing.call_ns, timing.dispatch_ns, timing.command_buffer_gap_ns) == (235, 120, 45)
    assert (timing.transfer_ns, timing.allocation_ns, timing.idle_ns, timing.execute_ns) == (20, 25, 25, 165)
    assert sum(timing.rows.values()) == timing.call_ns
    assert timing.transfer_bytes == 4096


def test_no_call_time_without_queue_spans_or_with_a_call_missing():
    assert call_time(np.array([0]), np.array([5]), np.zeros(0, QUEUE_SPAN_DTYPE), 1) is None
    assert call_time(np.array([0]), np.array([5]), spans(("execute", 0, 5, 0)), 2) is None


def memory_events(*rows: tuple[int, int, int, int, int]) -> np.ndarray:
    """(time, type, length, pool reserved, flags) rows of pool 1 as MEMORY_DTYPE."""
    return np.array([(time, kind, flags, 0, 0, 1, length, reserved) for time, kind, length, reserved, flags in rows],
                    MEMORY_DTYPE)


def test_device_memory_of_the_measured_calls():
    queue = spans(("execute", 0, 100, 0), ("execute", 200, 300, 1))
    memory = memory_events((-10, QUEUE_ALLOCA, 64, 64, MEMORY_POOL_STATS), (50, QUEUE_ALLOCA, 32, 96, MEMORY_POOL_STATS),
                           (80, 5, 32, 64, MEMORY_POOL_STATS), (150, 5, 64, 0, MEMORY_POOL_STATS))
    found = device_memory(memory, queue, 2)
    assert found is not None
    assert (found.peak_bytes, found.mean_peak_bytes, found.allocated_bytes, found.allocations) == (96, 48.0, 32, 1)
    # call 0: 64 for 50 ns, 96 for 30, 64 for 20 = 7360 ns*B; call 1: 0
    assert found.average_bytes == pytest.approx(7360 / 200)


def test_no_device_memory_without_pool_figures():
    queue = spans(("execute", 0, 100, 0))
    assert device_memory(memory_events((50, QUEUE_ALLOCA, 32, 32, 0)), queue, 1) is None
