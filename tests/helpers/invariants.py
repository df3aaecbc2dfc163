"""The invariants every ProfileSession keeps; every test that builds one from a profile calls this.

DESIGN.md invariant 2 in checkable form: busy and wall time are both fully
apportioned (top-level sections + "(unmarked)" = total), no section's wall
exceeds its busy time, parents hold their children, shares add up to 100%, and
a declared section without dispatches says so instead of showing zeros.
"""

from __future__ import annotations

import numpy as np
import pytest

from sectionmark.profiling.devices import DEVICE_TIME_PARTS, DeviceProfile
from sectionmark.profiling.section_time import MAX_SAMPLES
from sectionmark.profiling.session import ProfileSession
from sectionmark.profiling.stats import SectionStats

FLOAT_RELATIVE = 1e-9  # float rounding of sums over millions of events (a coverage error "0": sections split by cost)
COVERAGE_RELATIVE = 1e-6
CALL_TIME_RELATIVE = 0.01  # the acceptance bound: the call-time rows add up to the call time within 1%


def assert_profile_invariants(session: ProfileSession) -> None:
    """Assert the invariants of ``session`` (built from a profile, or read back from its JSON)."""
    rows = session.sections
    assert rows and rows[-1].path == (), "the last row must be (unmarked)"
    assert all(row.path for row in rows[:-1]), "only the last row may be (unmarked)"
    # Read back from JSON, every time is a rounded integer: allow half a nanosecond per rounded term.
    rounding = 0.5 if session.per_call_busy is None else 0.0
    slack = FLOAT_RELATIVE * max(session.total_ns, 1) + 2 * rounding

    for row in rows:
        what = row.name
        assert min(row.busy_ns, row.exclusive_ns, row.wall_ns, row.exclusive_wall_ns, row.shared_ns) >= 0, what
        assert row.wall_ns <= row.busy_ns + slack, f"{what}: wall {row.wall_ns} > busy {row.busy_ns}"
        assert row.exclusive_wall_ns <= row.exclusive_ns + slack, (
            f"{what}: exclusive wall {row.exclusive_wall_ns} > exclusive busy {row.exclusive_ns}"
        )
        assert row.shared_ns <= row.exclusive_ns + slack, what
        if row.path:
            _assert_holds_children(row, [r for r in rows if r.path[:-1] == row.path], rounding, slack)
        if row.path and not row.dispatched:
            assert row.note and row.note.startswith("no dispatches"), f"{what} has no dispatches and no note"
            assert row.busy_ns == row.wall_ns == row.calls == 0, what
        else:
            assert row.note is None, f"{what} ran dispatches but has a note: {row.note}"

    top_level = [row for row in rows if len(row.path) == 1] + [rows[-1]]
    rounded_terms = rounding * (len(top_level) + 1)
    busy = sum(row.busy_ns for row in top_level)
    wall = sum(row.wall_ns for row in top_level)
    assert abs(busy - session.total_ns) <= COVERAGE_RELATIVE * session.total_ns + rounded_terms, (
        f"busy: sections + unmarked = {busy} of {session.total_ns} ns"
    )
    assert abs(wall - session.wall_ns) <= COVERAGE_RELATIVE * session.wall_ns + rounded_terms, (
        f"wall: sections + unmarked = {wall} of {session.wall_ns} ns"
    )
    assert session.wall_ns <= session.total_ns
    assert session.unmarked_ns == rows[-1].busy_ns
    if session.total_ns:
        assert abs(sum(row.share for row in top_level) - 1) <= COVERAGE_RELATIVE + rounded_terms / session.total_ns
        for row in rows:
            assert abs(row.share - row.busy_ns / session.total_ns) <= COVERAGE_RELATIVE + rounding / session.total_ns, row.name
    _assert_call_time(session)
    _assert_cpu_time(session, top_level, rounding)
    _assert_samples(session, rounding)
    _assert_spans(session, rounding)
    _assert_runs(session, rounding)


def _assert_runs(session: ProfileSession, rounding: float) -> None:
    """A profile of K runs: every row has K run values, its median and an interval of two of them around the
    median; the figures shown are those of run ``shown_run``, whose total is the median total."""
    if session.total_runs is None:
        assert session.runs == 1 and session.shown_run is None
        assert all(row.runs is None for row in session.sections)
        return
    runs, shown = session.runs, session.shown_run
    assert runs >= 2 and shown is not None and 1 <= shown <= runs
    calls = max(session.calls, 1)
    for spread, shown_ns in [(session.total_runs, session.total_ns / calls),
                             *((row.runs, row.busy_ns / calls) for row in session.sections)]:
        assert spread is not None and len(spread.values_ns) == runs
        assert spread.values_ns[shown - 1] == pytest.approx(shown_ns, abs=1 + rounding)
        assert spread.low_ns <= spread.median_ns <= spread.high_ns
        assert spread.low_ns in spread.values_ns and spread.high_ns in spread.values_ns
    middle = sorted(session.total_runs.values_ns)[(runs - 1) // 2]  # the median, or the lower middle of an even K
    assert middle == pytest.approx(session.total_ns / calls, abs=1 + rounding)


def _assert_samples(session: ProfileSession, rounding: float) -> None:
    """Per-call samples: one per call up to MAX_SAMPLES, none negative; with all calls kept, their mean is the
    per-call mean. A file written before they were kept has none in any row."""
    if all(row.samples is None for row in session.sections) and session.per_call_busy is None:
        return
    for row in session.sections:
        assert row.samples is not None and len(row.samples) == min(max(session.calls, 1), MAX_SAMPLES), row.name
        assert min(row.samples) >= 0 and max(row.samples) <= row.per_call.max_ns + rounding, row.name
        if len(row.samples) == session.calls:
            assert abs(sum(row.samples) / len(row.samples) - row.per_call.mean_ns) <= (
                FLOAT_RELATIVE * max(row.per_call.mean_ns, 1) + 2 * rounding), row.name


def _assert_spans(session: ProfileSession, rounding: float) -> None:
    """Where in the call each section runs: start and end both known or both None (None wherever nothing ran),
    ordered min <= p50 <= max, no start after its end, none before the call's start, and a parent's span
    covering its children's (its earliest start and latest end, over a superset of their calls)."""
    for row in session.sections:
        start, end = row.start_ns, row.end_ns
        assert (start is None) == (end is None), row.name
        if not row.dispatched:
            assert start is None, row.name
        if start is None or end is None:
            continue
        assert 0 <= start.min <= start.p50 <= start.max and end.min <= end.p50 <= end.max, row.name
        assert start.min <= end.min and start.p50 <= end.p50 and start.max <= end.max, row.name
        for child in session.sections if row.path else ():
            if child.path[:-1] == row.path and child.start_ns is not None and child.end_ns is not None:
                assert start.min <= child.start_ns.min + rounding and end.max + rounding >= child.end_ns.max, (
                    row.name, child.name)


def _assert_cpu_time(session: ProfileSession, top_level: list[SectionStats], rounding: float) -> None:
    """Tile (CPU) time: split like busy time, so it adds up to the profile's; None everywhere when not recorded;
    parallelism (CPU / busy) never above the run's workers."""
    rows = session.sections
    if session.cpu_ns is None:
        for row in rows:
            assert (row.cpu_ns, row.tiles, row.parallelism, row.utilization) == (None, None, None, None), row.name
        assert session.parallelism is None and session.utilization is None
        return
    assert session.tiles is not None and session.tiles > 0
    cpu = sum(row.cpu_ns for row in top_level)
    assert abs(cpu - session.cpu_ns) <= FLOAT_RELATIVE * session.cpu_ns + rounding * len(top_level), (
        f"CPU: sections + unmarked = {cpu} of {session.cpu_ns} ns"
    )
    for row in rows:
        assert row.cpu_ns is not None and row.cpu_ns >= 0 and row.tiles is not None and row.tiles >= 0, row.name
        if row.parallelism is not None:
            assert row.busy_ns > 0, row.name
            if session.per_call_busy is not None:
                assert row.parallelism == row.cpu_ns / row.busy_ns, row.name
            if session.workers:
                assert row.parallelism <= session.workers * (1 + 1e-9), (row.name, row.parallelism, session.workers)
                assert row.utilization == pytest.approx(row.parallelism / session.workers), row.name
        if row.path:
            children = [child for child in rows if child.path[:-1] == row.path]
            assert row.cpu_ns + rounding * len(children) + FLOAT_RELATIVE * session.cpu_ns >= sum(
                child.cpu_ns for child in children), row.name
    if session.workers and session.parallelism is not None:
        assert session.parallelism <= session.workers * (1 + 1e-9), (session.parallelism, session.workers)


def _assert_call_time(session: ProfileSession) -> None:
    """Dispatch time + the time outside dispatches = call time; memory figures ordered as they must be."""
    timing = session.call_time
    if timing is not None:
        assert all(value >= 0 for value in timing.rows.values()), timing
        assert abs(sum(timing.rows.values()) - timing.call_ns) <= CALL_TIME_RELATIVE * timing.call_ns, timing
        # dispatch time inside the call windows is the union of the measured dispatches
        assert abs(timing.dispatch_ns - session.wall_ns) <= CALL_TIME_RELATIVE * session.wall_ns, (timing, session.wall_ns)
        assert timing.dispatch_ns + timing.command_buffer_gap_ns <= timing.execute_ns, timing
        assert timing.call_p50_ns <= timing.call_p95_ns
    memory = session.memory
    if memory is not None:
        assert 0 <= memory.average_bytes <= memory.peak_bytes, memory
        assert 0 <= memory.mean_peak_bytes <= memory.peak_bytes, memory
        assert memory.allocated_bytes >= 0 and memory.allocations >= 0, memory


def _assert_holds_children(row: SectionStats, children: list[SectionStats], rounding: float, slack: float) -> None:
    """Inclusive time = the section's own time + its children's inclusive time (busy and wall)."""
    tolerance = slack + rounding * len(children)
    for inclusive, exclusive, nested in [
        (row.busy_ns, row.exclusive_ns, sum(child.busy_ns for child in children)),
        (row.wall_ns, row.exclusive_wall_ns, sum(child.wall_ns for child in children)),
    ]:
        assert abs(inclusive - exclusive - nested) <= tolerance, (row.name, inclusive, exclusive, nested)


def assert_device_time_adds_up(result: DeviceProfile, calls: int) -> None:
    """A `DeviceProfile`'s time split: each device's parts of every measured call add up to that call's window,
    the same windows on every device, and its compute is its dispatches' time (`DEVICE_TIME_PARTS`)."""
    per_call = np.array([device.time.per_call for device in result.devices])  # [device, call, part]
    assert per_call.shape == (len(result.devices), calls, len(DEVICE_TIME_PARTS))
    windows = per_call.sum(axis=2)
    assert (windows == windows[0]).all() and (windows > 0).all()
    for device in result.devices:
        time = device.time
        assert sum(getattr(time, f"{part}_ns") for part in DEVICE_TIME_PARTS) == time.window_ns
        assert time.compute_ns == device.session.call_time.dispatch_ns, device.ordinal
