"""The Tracy replay of a CPU profile, checked against the profile itself.

Acceptance: a real headless capture of the CPU replay of a small model
contains every section as zones, nested as the sections, with durations equal
to the profile's within 1 µs, and dispatch zones inside them.

A tiny torch model with nested sections and one fused dispatch is exported,
compiled for llvm-cpu, profiled and replayed into a .tracy file by
`ProfileSession.save_tracy` (a child process under the real iree-tracy-capture);
the capture is read back with `sectionmark.tracy.read_capture`. Expected zones
come from the session's raw dispatch events, not from hard-coded numbers and
not from `sectionmark.profiling.timeline` (which is checked against the same
oracle separately):

* per queue, events sorted by start; an event that starts before the previous
  main-track event ended ran concurrently and goes to a "concurrent
  dispatches" lane, every other event is on the main ("sections") track;
* a main-track dispatch is drawn in its heaviest section (`dispatch_label`);
* a section zone at depth d is a maximal run of consecutive main-track
  dispatches whose drawn paths share that section's path (their first d
  names): it starts at the run's first start and ends at its latest end.
"""

from __future__ import annotations

import itertools
import json
import sys
from dataclasses import dataclass

import numpy as np
import pytest
from invariants import assert_profile_invariants

from sectionmark.section_path import SectionPath
from sectionmark.profiling.timeline import dispatch_label, session_timelines
from sectionmark.readers.tracy_capture import Capture, Track
from sectionmark.tracy import capture_command, read_capture

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.slow  # compiles, profiles and captures a model (about 10 s)

TOLERANCE_NS = 1_000  # the acceptance criterion: within 1 µs
# Tracy anchors each GPU context to its own clock when the context is created,
# against a monotonic-clock reading taken in Python just before: replay tracks
# (main track, concurrent-dispatch lanes, queues) agree only to within that
# gap, measured at 5-60 µs on a loaded 2-core machine, while the bug this
# guards against moved later tracks by the replay's emission time (ms).
# Within one track times are exact.
CROSS_TRACK_TOLERANCE_NS = 1_000_000
CAPTURE_TIMEOUT_S = 120


class Tiny(torch.nn.Module):
    """Block/{Attn, MLP} then Head. IREE fuses Attn's matmul with MLP's scale+exp."""

    def __init__(self):
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.w1 = torch.nn.Parameter(torch.randn(64, 64, generator=generator))
        self.w2 = torch.nn.Parameter(torch.randn(64, 64, generator=generator))

    def forward(self, x):
        import sectionmark as sm

        with sm.section("Block"):
            with sm.section("Attn"):
                x = x @ self.w1
            with sm.section("MLP"):
                x = torch.exp(x * 0.01) @ self.w2
        with sm.section("Head"):
            x = torch.tanh(x).sum(dim=1)
        return x


@dataclass(frozen=True)
class Item:
    """One zone to expect, or one zone found: times in profile ns for both."""

    kind: str  # "section" or "dispatch"
    name: str
    path: SectionPath  # a section's path; a dispatch's enclosing section path (() at top level)
    start_ns: int
    end_ns: int

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


# ------------------------------------------------------------------ the oracle


def expected_tracks(session) -> dict[str, list[Item]]:
    """Replay track name -> the zones it must hold, straight from the profile's events."""
    attribution = session.events()
    events = attribution.events
    tracks: dict[str, list[Item]] = {}
    for queue in sorted({int(q) for q in events["queue"]}):
        order = np.flatnonzero(events["queue"] == queue)
        order = order[np.argsort(events["start_ns"][order], kind="stable")]
        main: list[tuple[SectionPath, str, int, int]] = []
        lanes: list[list[Item]] = []
        main_end = None
        for event, slot in zip(events[order], attribution.event_slots[order].tolist()):
            key = attribution.keys[event["key"]]
            start, end = int(event["start_ns"]), int(event["end_ns"])
            if main_end is not None and start < main_end:  # ran concurrently with the main track
                lane = next((lane for lane in lanes if lane[-1].end_ns <= start), None)
                if lane is None:
                    lanes.append(lane := [])
                lane.append(Item("dispatch", key, (), start, end))
                continue
            parts = attribution.compositions[attribution.slots[slot].composition]
            path, _label = dispatch_label(parts)
            main.append((path, key, start, end))
            main_end = end
        items = [Item("dispatch", key, path, start, end) for path, key, start, end in main]
        for depth in range(1, max((len(path) for path, *_ in main), default=0) + 1):
            for prefix, run in itertools.groupby(main, key=lambda d: d[0][:depth]):
                if len(prefix) == depth:
                    run = list(run)
                    items.append(Item("section", prefix[-1], prefix, run[0][2], max(d[3] for d in run)))
        tracks[f"queue {queue}: sections"] = items
        for number, lane in enumerate(lanes, 1):
            tracks[f"queue {queue}: concurrent dispatches {number}"] = lane
    return tracks


def zone_items(track: Track, offset_ns: int) -> list[Item]:
    """A capture track's zones as Items; a zone's path is its chain of parent names.

    Leaves are dispatches (every section zone encloses at least one), so a
    dispatch's path is its parent's. ``offset_ns`` maps capture time to profile time.
    Also checks that every zone lies inside its parent, one level deeper.
    """
    has_children = {zone.parent for zone in track.zones}
    paths: list[SectionPath] = []
    items = []
    for index, zone in enumerate(track.zones):
        parent_path: SectionPath = ()
        if zone.parent >= 0:
            parent = track.zones[zone.parent]
            assert zone.depth == parent.depth + 1, (track.name, zone, parent)
            assert parent.start_ns <= zone.start_ns and zone.end_ns <= parent.end_ns, (
                f"{track.name}: zone {zone} is not inside its parent {parent}"
            )
            parent_path = paths[zone.parent]
        else:
            assert zone.depth == 0, (track.name, zone)
        paths.append(parent_path + (zone.name,))
        kind = "section" if index in has_children else "dispatch"
        path = paths[-1] if kind == "section" else parent_path
        items.append(Item(kind, zone.name, path, zone.start_ns + offset_ns, zone.end_ns + offset_ns))
    return items


def by_identity(items: list[Item]) -> list[Item]:
    return sorted(items, key=lambda item: (item.kind, item.path, item.name, item.start_ns))


# ------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def replay(tmp_path_factory) -> tuple[object, Capture]:
    """One export / compile / profile / replay / read for the whole module."""
    import sectionmark as sm

    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(1))
    exported = sm.torch.export(Tiny(), args=(x,))
    compiled = sm.compile(exported, target="llvm-cpu")
    session = sm.profile(compiled, args=(x.numpy(),), iterations=4, warmup=1, quiet=True)
    assert_profile_invariants(session)
    path = session.save_tracy(tmp_path_factory.mktemp("replay") / "run.tracy")
    return session, read_capture(path)


@pytest.fixture(scope="module")
def session(replay):
    return replay[0]


@pytest.fixture(scope="module")
def expected(session) -> dict[str, list[Item]]:
    return expected_tracks(session)


@pytest.fixture(scope="module")
def found(replay, expected) -> dict[str, list[Item]]:
    """Replay tracks of the capture, mapped to profile time by each track's first zone."""
    _session, capture = replay
    tracks = {track.name: track for track in capture.gpu_contexts if track.name.startswith("queue ")}
    assert sorted(tracks) == sorted(expected), "the capture has other replay tracks than the profile needs"
    result = {}
    for name, track in tracks.items():
        assert track.zones, f"replay track {name!r} is empty"
        offset = min(item.start_ns for item in expected[name]) - min(zone.start_ns for zone in track.zones)
        result[name] = zone_items(track, offset)
    return result


# ------------------------------------------------------------------ tests


def test_model_exercises_nesting_and_fusion(session):
    paths = {row.path for row in session.section_rows}
    assert any(len(path) == 2 for path in paths), paths
    compositions = session.events().compositions
    slots = session.events().slots
    assert any(len(compositions[slots[slot].composition]) > 1 for slot in session.events().event_slots), (
        "no fused dispatch shared by two sections: the model no longer exercises shared dispatches"
    )


def test_timeline_spans_are_the_oracles_runs(session, expected):
    """profiling.timeline (what the replay emits) equals the oracle exactly, in profile ns."""
    built: dict[str, list[Item]] = {}
    for timeline in session_timelines(session.session, session.events()):
        main = built[f"queue {timeline.queue}: sections"] = []
        for top in timeline.main:
            for _depth, span in top.walk():
                main.append(Item(span.kind, span.name, span.path, span.start_ns, span.end_ns))
        for number, lane in enumerate(timeline.lanes, 1):
            built[f"queue {timeline.queue}: concurrent dispatches {number}"] = [
                Item("dispatch", span.name, (), span.start_ns, span.end_ns) for span in lane
            ]
    assert {name: by_identity(items) for name, items in built.items()} == {
        name: by_identity(items) for name, items in expected.items()
    }


def test_every_profiled_section_is_a_zone_nested_as_the_sections(session, found):
    # A zone's path is its chain of parent zone names (zone_items), so a zone
    # "MLP" counts as ("Block", "MLP") only when its parent zone is "Block".
    section_paths = {item.path for items in found.values() for item in items if item.kind == "section"}
    assert section_paths == {row.path for row in session.section_rows if row.dispatches}


def test_section_and_dispatch_zones_match_the_profile_within_1us(found, expected):
    for name in expected:
        want, got = by_identity(expected[name]), by_identity(found[name])
        assert [(i.kind, i.path, i.name) for i in got] == [(i.kind, i.path, i.name) for i in want], name
        for zone, item in zip(got, want):
            what = f"{name}: {zone.kind} {'/'.join(zone.path)} {zone.name}"
            assert abs(zone.duration_ns - item.duration_ns) <= TOLERANCE_NS, (what, zone, item)
            assert abs(zone.start_ns - item.start_ns) <= TOLERANCE_NS, (what, zone, item)
            assert abs(zone.end_ns - item.end_ns) <= TOLERANCE_NS, (what, zone, item)


def test_every_dispatch_is_one_zone_inside_its_section(session, found):
    events = session.events().events
    dispatches = [item for items in found.values() for item in items if item.kind == "dispatch"]
    assert len(dispatches) == len(events)
    profiled = sorted(int(d) for d in events["end_ns"] - events["start_ns"])
    assert all(
        abs(zone - event) <= TOLERANCE_NS
        for zone, event in zip(sorted(item.duration_ns for item in dispatches), profiled, strict=True)
    )
    for name, items in found.items():
        sections = [item for item in items if item.kind == "section"]
        for dispatch in (item for item in items if item.kind == "dispatch"):
            if not dispatch.path:
                continue  # unmarked, or on a lane of concurrent dispatches
            enclosing = [s for s in sections if s.path == dispatch.path
                         and s.start_ns <= dispatch.start_ns and dispatch.end_ns <= s.end_ns]
            assert len(enclosing) == 1, (name, dispatch)


def test_tracks_are_placed_together(replay, expected):
    """All replay tracks share one time mapping (up to Tracy's per-context anchoring)."""
    _session, capture = replay
    tracks = [track for track in capture.gpu_contexts if track.name in expected]
    capture_origin = min(zone.start_ns for track in tracks for zone in track.zones)
    profile_origin = min(item.start_ns for items in expected.values() for item in items)
    for track in tracks:
        got = min(zone.start_ns for zone in track.zones) - capture_origin
        want = min(item.start_ns for item in expected[track.name]) - profile_origin
        assert abs(got - want) <= CROSS_TRACK_TOLERANCE_NS, (track.name, got, want)


def test_lanes_are_not_shifted_by_the_replay_of_earlier_tracks(tmp_path):
    """Regression: each track was anchored after the earlier tracks were emitted,
    shifting it by their emission time (about 0.1 s for this document)."""
    base = 10**12
    main = [[f"S{i}", base + i * 10_000, base + i * 10_000 + 5_000,
             [["d", base + i * 10_000, base + i * 10_000 + 5_000, []]]] for i in range(3_000)]
    lane = [["concurrent", base + 2_000, base + 4_000, []]]
    document = tmp_path / "timeline.json"
    document.write_text(json.dumps({"origin_ns": base, "tracks": [["main", main], ["lane", lane]]}))
    path = capture_command([sys.executable, "-m", "sectionmark.renderers.tracy_out", str(document)],
                           tmp_path / "lanes.tracy", timeout=CAPTURE_TIMEOUT_S)
    first, second = read_capture(path).gpu_contexts
    assert (first.name, second.name) == ("main", "lane") and len(first.zones) == 6_000
    offset = second.zones[0].start_ns - first.zones[0].start_ns
    assert abs(offset - 2_000) <= CROSS_TRACK_TOLERANCE_NS, offset
    assert second.zones[0].duration_ns == 2_000
