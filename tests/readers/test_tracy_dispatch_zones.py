"""GPU dispatch zones of a Tracy capture joined to a section map (sectionmark.readers.tracy_dispatch_zones).

Pure logic on hand-built captures and maps: the zones are what IREE's CUDA
driver records (tests/helpers/gpu_zones.py) or what sectionmark's replay writes
(section track plus lanes of concurrent dispatches). Expected times are
computed here from the durations the zones were given and the map's shares.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import pytest

from gpu_zones import COMMAND_BUFFER_ZONE, FILL_ZONE, execution, expected_busy, timed_commands
from sectionmark.errors import SectionmarkError
from sectionmark.section_path import SectionPath
from sectionmark.profiling.attribute import attribute
from sectionmark.profiling.session import ProfileSession
from sectionmark.readers.queue_tracks import queue_track_names, track_queue
from sectionmark.readers.tracy_capture import Capture, Track, Zone
from sectionmark.readers.tracy_dispatch_zones import capture_profile
from sectionmark.section_map import Command, CommandBuffer, SectionMap, Share

A, AB, C = ("A",), ("A", "B"), ("C",)
BARRIER = Command("barrier", key="barrier")


def dispatch(key: str, *shares: tuple[SectionPath, float]) -> Command:
    return Command("dispatch", key=key, shares=[Share(path, weight) for path, weight in shares])


def section_map(*buffers: list[Command], functions: Optional[list[str]] = None) -> SectionMap:
    functions = functions or ["main"] * len(buffers)
    paths = {tuple(s.path) for commands in buffers for c in commands for s in c.shares if s.path}
    return SectionMap(
        sections=sorted(paths),
        command_buffers=[CommandBuffer(i, f, list(c)) for i, (f, c) in enumerate(zip(functions, buffers))],
        sites=[],
    )


def track(name: str, spans: list, index: int = 0) -> Track:
    """A GPU track from nested spans ``[name, start, end, children]`` (parents first, as the reader lists them)."""
    zones: list[Zone] = []

    def add(span: list, depth: int, parent: int) -> None:
        zones.append(Zone(span[0], span[1], span[2], depth, parent))
        me = len(zones) - 1
        for child in span[3] if len(span) > 3 else []:
            add(child, depth + 1, me)

    for span in spans:
        add(span, 0, -1)
    return Track("gpu", index, name, zones)


def capture(*tracks: Track, threads: Optional[list[Track]] = None) -> Capture:
    return Capture((0, 11, 2), "test", threads or [], list(tracks))


def gpu_run(buffer: CommandBuffer, calls: list[list[int]]) -> tuple[Track, list[tuple[Command, int]]]:
    """A "cuda" track of consecutive executions; also each timed command with its duration."""
    spans, timed, now = [], [], 1_000
    for durations in calls:
        span, now = execution(buffer, now, durations)
        spans.append(span)
        timed += list(zip(timed_commands(buffer), durations))
        now += 5_000
    return track("cuda", spans), timed


def report(capture_: Capture, map_: SectionMap, *, calls=None, warmup=0, function=None) -> ProfileSession:
    """What `sectionmark.profiling.report` does with a capture file, on an in-memory capture."""
    events = capture_profile(capture_, map_, function=function)
    return ProfileSession.build(attribute(events, map_, calls=calls, warmup=warmup, function=function), map_, function)


def busy_by_path(session: ProfileSession) -> dict[SectionPath, float]:
    return {row.path: row.busy_ns for row in session.sections if row.dispatches}


def one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


# ----------------------------------------------------------------------------- GPU runs


FUSED_MAP = section_map([
    dispatch("k1", (A, 1.0)),
    dispatch("k2", (AB, 0.75), (C, 0.25)),
    Command("fill", key="fill", shares=[Share(C, 1.0)]),
    BARRIER,
    dispatch("k1", (C, 1.0)),
    dispatch("k3"),
])


def test_gpu_run_gives_every_section_its_share():
    buffer = FUSED_MAP.command_buffers[0]
    gpu, timed = gpu_run(buffer, [[100, 400, 7, 30, 20], [110, 380, 9, 33, 25], [90, 410, 8, 31, 19]])
    session = report(capture(gpu), FUSED_MAP)
    assert session.calls == 3 and session.calls_known
    want = expected_busy(timed)
    assert busy_by_path(session) == pytest.approx(want, abs=1e-6)
    assert session.total_ns == sum(d for c, d in timed if c.op == "dispatch")
    assert session.section(C).dispatches == 6 and session.unmarked.busy_ns == 20 + 25 + 19


def test_capture_profile_rebuilds_command_indices_and_executions():
    buffer = FUSED_MAP.command_buffers[0]
    gpu, _timed = gpu_run(buffer, [[100, 400, 7, 30, 20], [110, 380, 9, 33, 25]])
    profile = capture_profile(capture(gpu), FUSED_MAP)
    assert len(profile.submissions) == 2
    first = profile.dispatches[profile.dispatches["submission"] == 0]
    assert [profile.keys[k] for k in first["key"]] == ["k1", "k2", "k1", "k3"]
    assert first["command_index"].tolist() == [0, 1, 4, 5]  # the fill (2) and the barrier (3) count too
    assert (first["end_ns"] - first["start_ns"]).tolist() == [100, 400, 30, 20]


def test_warmup_calls_are_dropped():
    buffer = FUSED_MAP.command_buffers[0]
    calls = [[1000, 4000, 7, 300, 200], [100, 400, 7, 30, 20], [110, 380, 9, 33, 25]]
    gpu, timed = gpu_run(buffer, calls)
    session = report(capture(gpu), FUSED_MAP, calls=3, warmup=1)
    assert session.calls == 2 and session.warmup == 1
    assert busy_by_path(session) == pytest.approx(expected_busy(timed[5:]), abs=1e-6)


def test_same_key_in_one_region_is_placed_by_its_section_zones():
    # Two k1 in one barrier region, one per section; the zone of the second
    # recorded one ran first (concurrent dispatches start in any order).
    map_ = section_map([dispatch("k1", (A, 1.0)), dispatch("k1", (C, 1.0))])
    spans = [["C", 0, 50, [["k1", 0, 50]]], ["A", 60, 100, [["k1", 60, 100]]]]
    session = report(capture(track("cuda", [[COMMAND_BUFFER_ZONE, 0, 100, spans]])), map_)
    assert busy_by_path(session) == {A: 40, C: 50}
    profile = capture_profile(capture(track("cuda", [[COMMAND_BUFFER_ZONE, 0, 100, spans]])), map_)
    assert profile.dispatches["command_index"].tolist() == [1, 0]


def test_replay_lanes_take_the_commands_left_in_their_region():
    # sectionmark's replay: the section track holds k1 in C; the lane's k1 has no sections.
    map_ = section_map([dispatch("k1", (A, 1.0)), dispatch("k1", (C, 1.0)), BARRIER, dispatch("k2", (A, 1.0))])
    main = track("queue 0: sections", [["C", 0, 50, [["k1", 0, 50]]], ["A", 70, 90, [["k2", 70, 90]]]])
    lane = track("queue 0: concurrent dispatches 1", [["k1", 10, 40]], 1)
    session = report(capture(main, lane), map_)
    assert busy_by_path(session) == {A: 30 + 20, C: 50}
    assert session.wall_ns == 50 + 20


def test_queues_of_a_replay_keep_their_numbers_and_other_contexts_take_free_ones():
    map_ = section_map([dispatch("k1", (A, 1.0))])
    replay = track("queue 0: sections", [["A", 0, 10, [["k1", 0, 10]]]])
    gpu = track("cuda", [[COMMAND_BUFFER_ZONE, 0, 30, [["A", 5, 25, [["k1", 5, 25]]]]]], 1)
    profile = capture_profile(capture(replay, gpu), map_)
    durations = (profile.dispatches["end_ns"] - profile.dispatches["start_ns"]).tolist()
    assert sorted(zip(profile.dispatches["queue"].tolist(), durations)) == [(0, 10), (1, 20)]


@pytest.mark.parametrize("queue", [0, 7, 12])
def test_every_track_name_a_replay_writes_reads_back_as_its_queue(queue):
    names = queue_track_names(queue, 11)
    assert names[:2] == [f"queue {queue}: sections", f"queue {queue}: concurrent dispatches 1"]
    assert [track_queue(name) for name in names] == [queue] * 12
    for other in ("cuda", f"queue {queue}: sections ", f"queue {queue}: concurrent dispatches", "CUDA stream 0"):
        assert track_queue(other) is None


def test_backtracking_finds_the_split_that_covers_every_zone():
    # f records [k1], g records [k1 | k2]: zones k1 k2 k1 can only be g then f.
    map_ = section_map([dispatch("k1")], [dispatch("k1"), BARRIER, dispatch("k2")], functions=["f", "g"])
    gpu = track("cuda", [["k1", 0, 10], ["k2", 20, 30], ["k1", 40, 50]])
    profile = capture_profile(capture(gpu), map_)
    assert len(profile.submissions) == 2
    assert profile.dispatches["command_index"].tolist() == [0, 2, 0]
    assert [len(profile.command_buffers[i]) for i in (0, 1)] == [3, 1]


def test_function_picks_among_buffers_recording_the_same_commands():
    map_ = section_map([dispatch("k1", (A, 1.0))], [dispatch("k1", (C, 1.0))], functions=["prefill", "decode"])
    gpu = track("cuda", [["k1", 0, 10], ["k1", 20, 35]])
    assert busy_by_path(report(capture(gpu), map_, function="decode")) == {C: 25}
    with pytest.raises(SectionmarkError, match="ambiguous") as error:
        report(capture(gpu), map_)
    one_line(error)


@pytest.mark.parametrize("group", ["A", "C"])
def test_a_dispatch_split_evenly_may_be_grouped_under_either_section(group):
    map_ = section_map([dispatch("k1", (A, 0.5), (C, 0.5))])
    session = report(capture(track("cuda", [[group, 0, 10, [["k1", 0, 10]]]])), map_)
    assert busy_by_path(session) == {A: 5, C: 5}


def test_a_dispatch_mostly_unmarked_lies_outside_section_zones():
    map_ = section_map([dispatch("k1", ((), 0.6), (A, 0.4)), dispatch("k2", (A, 1.0))])
    gpu = track("cuda", [[COMMAND_BUFFER_ZONE, 0, 100, [["k1", 0, 50], ["A", 60, 100, [["k2", 60, 100]]]]]])
    session = report(capture(gpu), map_)
    assert busy_by_path(session) == pytest.approx({A: 20 + 40, (): 30})


def test_without_debug_groups_the_map_alone_places_zones():
    map_ = section_map([dispatch("k1", (A, 1.0)), dispatch("k1", (C, 1.0))])
    gpu = track("cuda", [[COMMAND_BUFFER_ZONE, 0, 100, [["k1", 0, 30], ["k1", 40, 100]]]])
    assert busy_by_path(report(capture(gpu), map_)) == {A: 30, C: 60}


# ----------------------------------------------------------------------------- bad captures


def test_zone_in_another_section_than_the_map_says_is_a_clear_error():
    gpu = track("cuda", [[COMMAND_BUFFER_ZONE, 0, 100, [["A", 0, 10, [["k1", 0, 10]]], ["A", 10, 50, [["k2", 10, 50]]],
                                                     ["C", 60, 70, [["k1", 60, 70]]], ["k3", 70, 80]]]])
    with pytest.raises(SectionmarkError, match="the capture and the section map disagree") as error:
        report(capture(gpu), FUSED_MAP)
    message = one_line(error)
    assert "'A'" in message and "'A / B'" in message


@pytest.mark.parametrize(
    "tracks, threads, fragment",
    [
        ([], [track("Main thread", [["k1", 0, 10]])], "has no GPU zones"),
        ([track("cuda", [["iree_hal_cuda_stream_command_buffer", 0, 10]])], None, "none of the capture's GPU zones"),
        ([track("cuda", [["k1", 0, 10], ["mystery_dispatch", 20, 30]])], None, "'mystery_dispatch' (1 zones"),
        ([track("cuda", [["k1", 0, 10], ["k1", 20, 30]])], None, "does not match this capture"),
    ],
    ids=["cpu-only", "no-dispatch", "unknown-zone", "no-buffer"],
)
def test_bad_captures_give_one_clear_line(tracks, threads, fragment):
    with pytest.raises(SectionmarkError) as error:
        capture_profile(capture(*tracks, threads=threads), section_map([dispatch("k1"), BARRIER, dispatch("k2")]))
    assert fragment in one_line(error)


def test_driver_zones_beside_dispatches_are_not_dispatches():
    map_ = section_map([dispatch("k1", (A, 1.0)), Command("fill", key="fill")])
    gpu = track("cuda", [[COMMAND_BUFFER_ZONE, 0, 100, [["A", 0, 50, [["k1", 0, 50]]], [FILL_ZONE, 60, 90]]]])
    profile = capture_profile(capture(gpu), map_)
    assert len(profile.dispatches) == 1 and np.all(profile.dispatches["end_ns"] == 50)


# ----------------------------------------------------------------------------- executions


def test_executions_span_their_command_buffer_zones():
    """On a GPU run each execution is the driver's command-buffer zone, timed by the GPU: its time with no dispatch
    running (its fills, copies and barriers) is known, as a HAL profile's executions give it (call time)."""
    buffer = FUSED_MAP.command_buffers[0]
    gpu, timed = gpu_run(buffer, [[100, 400, 7, 30, 20], [110, 380, 9, 33, 25]])
    zones = [(zone.start_ns, zone.end_ns) for zone in gpu.zones if zone.name == COMMAND_BUFFER_ZONE]
    profile = capture_profile(capture(gpu), FUSED_MAP)
    assert profile.submissions[["start_ns", "end_ns"]].tolist() == zones
    assert profile.provenance.timed_submissions and profile.provenance.device_timed
    timing = report(capture(gpu), FUSED_MAP, calls=2).call_time
    dispatched = sum(duration for command, duration in timed if command.op == "dispatch")
    assert timing.call_ns == timing.execute_ns == sum(end - start for start, end in zones)
    assert timing.dispatch_ns == dispatched and timing.command_buffer_gap_ns == timing.call_ns - dispatched
    assert timing.idle_ns == 0


@pytest.mark.parametrize("zones", [
    [["A", 0, 10, [["k1", 0, 10]]], ["A", 20, 30, [["k1", 20, 30]]]],  # a replay: no command-buffer zone
    [[COMMAND_BUFFER_ZONE, 0, 40, [["k1", 5, 10], ["k1", 20, 30]]]],  # two executions matched in one zone
    [[COMMAND_BUFFER_ZONE, 0, 12, [["k1", 2, 10]]], [COMMAND_BUFFER_ZONE, 14, 18],  # a zone of no dispatch between
     [COMMAND_BUFFER_ZONE, 20, 32, [["k1", 22, 30]]]],
], ids=["replay", "shared-zone", "zone-between"])
def test_executions_without_a_command_buffer_zone_of_their_own_span_their_dispatches(zones):
    """No queue time is claimed where the zones do not give every execution's own span, or would miss some of the
    device's command-buffer time."""
    profile = capture_profile(capture(track("cuda", zones)), section_map([dispatch("k1", (A, 1.0))]))
    assert not profile.provenance.timed_submissions
    dispatched = profile.dispatches[["start_ns", "end_ns"]].tolist()
    assert profile.submissions[["start_ns", "end_ns"]].tolist() == dispatched
    assert report(capture(track("cuda", zones)), section_map([dispatch("k1", (A, 1.0))]), calls=2).call_time is None


def test_a_contexts_zones_are_compared_with_its_own_executions_only():
    """One device's two streams (GPU contexts) whose zones overlap in time: a zone of no dispatch of one context (its
    initializer's buffer, before its own executions) lies among the other context's executions, and is no gap in
    them: every execution keeps its command-buffer zone (the time split stays known)."""
    first = track("cuda", [[COMMAND_BUFFER_ZONE, 0, 5], [COMMAND_BUFFER_ZONE, 30, 42, [["k1", 32, 40]]]])
    second = track("cuda", [[COMMAND_BUFFER_ZONE, 2, 14, [["k1", 4, 12]]],
                            [COMMAND_BUFFER_ZONE, 20, 28, [["k1", 22, 26]]]], index=1)
    map_ = section_map([dispatch("k1", (A, 1.0))])
    profile = capture_profile(capture(first, second), map_)
    assert profile.provenance.timed_submissions
    assert profile.submissions[["start_ns", "end_ns"]].tolist() == [(2, 14), (20, 28), (30, 42)]
    # Within one context, a zone of no dispatch among its executions still leaves their spans (its time is missed).
    between = track("cuda", [[COMMAND_BUFFER_ZONE, 0, 12, [["k1", 2, 10]]], [COMMAND_BUFFER_ZONE, 14, 18],
                             [COMMAND_BUFFER_ZONE, 20, 32, [["k1", 22, 30]]]], index=1)
    assert not capture_profile(capture(first, between), map_).provenance.timed_submissions
    # A context with no dispatch at all: its zone among the executions' time would be missed from the device's.
    copies = track("cuda", [[COMMAND_BUFFER_ZONE, 16, 18]], index=1)
    assert not capture_profile(capture(second, copies), map_).provenance.timed_submissions
    assert capture_profile(capture(first, track("cuda", [[COMMAND_BUFFER_ZONE, 50, 52]], index=1)),
                           map_).provenance.timed_submissions


def test_command_buffer_zones_outside_the_executions_leave_their_spans():
    """A zone of no dispatch before the calls (a module initializer's buffer, as on the H200) misses no call's time."""
    zones = [[COMMAND_BUFFER_ZONE, 0, 5], [COMMAND_BUFFER_ZONE, 10, 22, [["k1", 12, 20]]]]
    profile = capture_profile(capture(track("cuda", zones)), section_map([dispatch("k1", (A, 1.0))]))
    assert profile.provenance.timed_submissions
    assert profile.submissions[["start_ns", "end_ns"]].tolist() == [(10, 22)]
