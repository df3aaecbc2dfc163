"""ProfileSession on hand-built attributions: busy and wall apportioning, notes for sections without dispatches.

No IREE here: events, slots and compositions are built directly, so every
expected number is worked out by hand in the test.
"""

from __future__ import annotations

import csv
import io
import json
import re
from typing import Optional, Sequence
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from invariants import assert_profile_invariants

from sectionmark import renderers
from sectionmark.errors import SectionmarkError
from sectionmark.section_path import SectionPath
from sectionmark.profiling import native
from sectionmark.profiling.attribute import Attribution, Composition, Slot
from sectionmark.profiling.queue_time import QUEUE_SPAN_DTYPE
from sectionmark.profiling.section_time import (
    CompositionSums,
    event_sums,
    first_dispatch_starts,
    section_paths,
    section_rows,
    shared_time,
    wall_parts,
    weight_matrices,
)
from sectionmark.profiling.session import ProfileSession
from sectionmark.profiling.stats import Offsets
from sectionmark.readers.event_model import DISPATCH_DTYPE, EVENT_EXECUTE
from sectionmark.renderers import RENDERERS
from sectionmark.renderers.table import build_sites_table
from sectionmark.section_map import Command, CommandBuffer, DispatchSite, SectionMap, Share

A, B, C = ("A",), ("B",), ("C",)
BLOCK, ATTN, MLP = ("Block",), ("Block", "Attn"), ("Block", "MLP")
Event = tuple[int, int, Composition]  # start_ns, end_ns, composition


def synthetic(
    events: Sequence[Event],
    declared: Sequence[SectionPath] = (),
    calls: int = 1,
    call_of: Optional[Sequence[int]] = None,
    elsewhere: Sequence[tuple[str, Composition]] = (),
    tiles: Optional[Sequence[tuple[int, int]]] = None,
    keys: Optional[Sequence[str]] = None,
) -> tuple[Attribution, SectionMap]:
    """An attribution of ``events`` in function "main" and a map declaring ``declared``.

    ``tiles``: each event's (tile time, tile count), as local-task records them; none by default.
    ``keys``: the export function each distinct composition's dispatch runs (by default one each,
    ``main_dispatch_<n>``); a key given twice is one deduplicated executable run from two sites.

    Each distinct composition becomes one dispatch command (and site) of main's
    command buffer; ``elsewhere`` adds sites of other functions that never ran.
    """
    compositions = list(dict.fromkeys(parts for _s, _e, parts in events))
    commands = [
        Command("dispatch", keys[index] if keys is not None else f"main_dispatch_{index}", site=index,
                shares=[Share(path, weight) for path, weight in parts])
        for index, parts in enumerate(compositions)
    ]
    sites = [DispatchSite(id=index, function="main", shares=command.shares, op_count=1)
             for index, command in enumerate(commands)]
    sites += [DispatchSite(id=len(sites) + index, function=function, shares=[Share(p, w) for p, w in parts], op_count=1)
              for index, (function, parts) in enumerate(elsewhere)]
    section_map = SectionMap(sections=list(declared), sites=sites,
                             command_buffers=[CommandBuffer(index=0, function="main", commands=commands)])
    slots = [Slot(buffer=0, position=index, command=command, composition=index) for index, command in enumerate(commands)]
    array = np.zeros(len(events), DISPATCH_DTYPE)
    array["start_ns"] = [start for start, _e, _p in events]
    array["end_ns"] = [end for _s, end, _p in events]
    if tiles is not None:
        array["tile_ns"], array["tile_count"] = [ns for ns, _n in tiles], [count for _ns, count in tiles]
    event_slots = np.array([compositions.index(parts) for _s, _e, parts in events], np.int32)
    event_calls = np.array(call_of if call_of is not None else [0] * len(events), np.int32)
    attribution = Attribution(events=array, event_slots=event_slots, event_calls=event_calls, slots=slots,
                              compositions=compositions, calls=calls, warmup=0, calls_known=True,
                              keys=[c.key for c in commands],
                              buffer_matches={7: 0})  # some runtime buffer id ran static buffer 0 (function main)
    return attribution, section_map


def build(events: Sequence[Event], workers: Optional[int] = None, **options) -> ProfileSession:
    attribution, section_map = synthetic(events, **options)
    session = ProfileSession.build(attribution, section_map, function="main", workers=workers)
    assert_profile_invariants(session)
    return session


# ---------------------------------------------------------------------------- wall_parts


def test_disjoint_intervals_keep_their_length():
    assert wall_parts(np.array([0, 200, 100]), np.array([100, 250, 150])).tolist() == [100, 50, 50]


def test_overlap_is_split_equally_between_the_running_dispatches():
    # [0, 100) and [50, 150): 50 ns alone each, 50 ns together -> 75 ns each, 150 ns union.
    assert wall_parts(np.array([0, 50]), np.array([100, 150])).tolist() == [75, 75]


def test_identical_intervals_split_evenly():
    assert wall_parts(np.array([10, 10, 10]), np.array([40, 40, 40])).tolist() == [10, 10, 10]


def test_nested_interval_and_zero_length_event():
    # [0, 100) holds [20, 40) (each 10 ns of that stretch) and a zero-length event at 50.
    parts = wall_parts(np.array([0, 20, 50]), np.array([100, 40, 50]))
    assert parts.tolist() == [90, 10, 0]


def test_no_intervals():
    assert wall_parts(np.zeros(0, np.int64), np.zeros(0, np.int64)).shape == (0,)


def brute_force_wall_parts(starts: list[int], ends: list[int]) -> list[float]:
    """Nanosecond by nanosecond: each nanosecond goes in equal parts to the intervals covering it."""
    parts = [0.0] * len(starts)
    for t in range(min(starts), max(ends)):
        running = [i for i, (s, e) in enumerate(zip(starts, ends)) if s <= t < e]
        for i in running:
            parts[i] += 1 / len(running)
    return parts


intervals = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 25)), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(intervals)
def test_wall_parts_match_the_nanosecond_oracle(pairs):
    starts = [start for start, _ in pairs]
    ends = [start + length for start, length in pairs]
    parts = wall_parts(np.array(starts), np.array(ends))
    assert parts == pytest.approx(brute_force_wall_parts(starts, ends), abs=1e-9)


# ---------------------------------------------------------------------------- pure building blocks


def test_section_paths_add_parents_depth_first():
    compositions = [((("X", "Y"), 1.0),), (((), 0.5), (("A",), 0.5))]
    assert section_paths([("A", "B"), ("C",)], compositions) == [("A",), ("A", "B"), ("C",), ("X",), ("X", "Y")]


def test_weight_matrices_nested_shared_and_unmarked():
    paths = [BLOCK, ATTN, MLP]
    compositions = [((ATTN, 1.0),), ((ATTN, 0.25), (MLP, 0.5), ((), 0.25)), ((BLOCK, 1.0),), ((MLP, 0.0), (ATTN, 1.0))]
    weights = weight_matrices(compositions, paths)
    #                                    Block  Attn  MLP  (unmarked)
    assert weights.exclusive.tolist() == [[0, 1, 0, 0], [0, 0.25, 0.5, 0.25], [1, 0, 0, 0], [0, 1, 0, 0]]
    assert weights.inclusive.tolist() == [[1, 1, 0, 0], [0.75, 0.25, 0.5, 0.25], [1, 0, 0, 0], [1, 1, 0, 0]]
    assert weights.member.tolist() == [[True, True, False, False], [True, True, True, True],
                                       [True, False, False, False], [True, True, True, False]]
    assert weights.exclusive.sum(axis=1).tolist() == [1, 1, 1, 1]


@pytest.mark.parametrize("c_passes", [True, False])
def test_event_sums_per_call_composition_and_slot(c_passes, monkeypatch):
    if not c_passes:
        monkeypatch.setattr(native, "_passes", None)
    first, second = ((A, 1.0),), ((A, 0.5), (B, 0.5))
    events = [(0, 10, first), (10, 30, second), (40, 70, first), (70, 110, second), (110, 160, second)]
    sums = event_sums(synthetic(events, calls=2, call_of=[0, 0, 1, 1, 1])[0])
    assert sums.busy_by_call.tolist() == [[10, 20], [30, 90]]
    assert sums.busy.tolist() == [40, 110] and sums.count.tolist() == [2, 3]
    assert sums.slot_busy.tolist() == [40, 110] and sums.slot_count.tolist() == [2, 3]
    assert sums.total_ns == 150 and sums.disjoint
    overlapping = [(0, 10, first), (5, 30, second)]
    assert not event_sums(synthetic(overlapping)[0]).disjoint
    assert not event_sums(synthetic([(10, 20, first), (0, 5, first)])[0]).disjoint  # not in start order


def test_shared_time_and_partners():
    compositions = [((A, 1.0),), ((A, 0.7), (B, 0.3)), ((B, 0.5), ((), 0.5))]
    shared, shared_with = shared_time(compositions, np.array([100.0, 1000, 10]), [A, B])
    assert shared.tolist() == pytest.approx([700, 305, 5])
    assert shared_with[0] == pytest.approx({B: 300})
    assert shared_with[1] == pytest.approx({A: 700, (): 5})
    assert shared_with[2] == pytest.approx({B: 5})


def test_section_rows_split_busy_and_wall_by_the_same_weights():
    paths = [BLOCK, ATTN, MLP]
    compositions = [((ATTN, 1.0),), ((ATTN, 0.25), (MLP, 0.75))]
    sums = CompositionSums(busy_by_call=np.array([[100.0, 200.0]]), wall=np.array([100.0, 80.0]), count=np.array([1, 1]))
    rows = section_rows(paths, compositions, weight_matrices(compositions, paths), sums)
    by_path = {row.path: row for row in rows}
    assert [row.path for row in rows] == [BLOCK, ATTN, MLP, ()]
    assert (by_path[ATTN].busy_ns, by_path[ATTN].wall_ns) == (150, 120)
    assert (by_path[MLP].busy_ns, by_path[MLP].wall_ns) == (150, 60)
    assert (by_path[BLOCK].busy_ns, by_path[BLOCK].exclusive_ns, by_path[BLOCK].wall_ns) == (300, 0, 180)
    assert by_path[BLOCK].dispatches == 2 and by_path[MLP].dispatches == 1
    assert by_path[MLP].shared_ns == 150 and by_path[MLP].shared_with == {ATTN: 50}
    assert by_path[()].dispatches == 0 and by_path[()].busy_ns == 0


# ---------------------------------------------------------------------------- ProfileSession.build


def test_worked_example_two_overlapping_dispatches_one_shared():
    """docs/concepts.md: X (A only) runs 0-100 µs, Y (A 70%, B 30%) 50-150 µs."""
    session = build([(0, 100_000, ((A, 1.0),)), (50_000, 150_000, ((A, 0.7), (B, 0.3)))], declared=[A, B])
    a, b = session.section(A), session.section(B)
    assert (session.total_ns, session.wall_ns) == (200_000, 150_000)
    assert (a.busy_ns, b.busy_ns) == pytest.approx((170_000, 30_000))
    # Each dispatch gets 75 µs of the 150 µs wall; Y's 75 µs is split 70/30.
    assert (a.wall_ns, b.wall_ns) == pytest.approx((127_500, 22_500))
    assert a.wall_ns + b.wall_ns == pytest.approx(session.wall_ns)


def test_cpu_time_is_split_like_busy_time_with_parallelism_and_utilization():
    """The worked example with tiles: X (A) 300 µs of tile time in 16 tiles, Y (A 70%, B 30%) 100 µs in 4; 4 workers."""
    session = build([(0, 100_000, ((A, 1.0),)), (50_000, 150_000, ((A, 0.7), (B, 0.3)))], declared=[A, B],
                    tiles=[(300_000, 16), (100_000, 4)], workers=4)
    a, b, unmarked = session.section(A), session.section(B), session.unmarked
    assert (session.cpu_ns, session.tiles, session.workers) == (400_000, 20, 4)
    assert (a.cpu_ns, b.cpu_ns, unmarked.cpu_ns) == pytest.approx((370_000, 30_000, 0))
    assert (a.tiles, b.tiles, unmarked.tiles) == (20, 4, 0)  # like dispatches: Y's 4 tiles count for A and B
    assert (a.parallelism, b.parallelism) == pytest.approx((370 / 170, 1.0))
    assert (a.utilization, b.utilization) == pytest.approx((370 / 170 / 4, 0.25))
    assert unmarked.parallelism is None and unmarked.utilization is None  # nothing ran: no ratio, not 0
    assert (session.parallelism, session.utilization) == pytest.approx((400 / 150, 400 / 150 / 4))
    data = json.loads(session.render("json"))
    assert data["sections"][0]["cpu_ns"] == 370_000 and data["sections"][0]["tiles"] == 20
    again = ProfileSession.from_json(data)
    assert_profile_invariants(again)
    assert (again.cpu_ns, again.section(B).cpu_ns, again.section(A).parallelism) == (400_000, 30_000, a.parallelism)
    # a file written before the CPU fields existed reads back as "not recorded"
    for row in data["sections"]:
        for key in ("cpu_ns", "tiles", "parallelism", "utilization"):
            del row[key]
    for key in ("cpu_ns", "tiles", "workers", "parallelism", "utilization"):
        del data[key]
    old = ProfileSession.from_json(data)
    assert_profile_invariants(old)
    assert old.cpu_ns is None and old.section(A).cpu_ns is None and old.parallelism is None


def test_cpu_time_without_the_worker_count_has_no_utilization():
    session = build([(0, 100_000, ((A, 1.0),))], declared=[A], tiles=[(150_000, 8)])
    assert session.section(A).parallelism == pytest.approx(1.5)
    assert session.section(A).utilization is None and session.utilization is None


def test_shared_dispatch_does_not_count_in_full_towards_each_section():
    # One 1.2 µs dispatch of which B has 25% (300 ns busy): B's wall is 300 ns, not 1.2 µs.
    session = build([(0, 1_200, ((A, 0.75), (B, 0.25)))], declared=[A, B])
    assert session.section(B).busy_ns == pytest.approx(300)
    assert session.section(B).wall_ns == pytest.approx(300)


@pytest.mark.parametrize("events, keys, shared", [
    # A's and B's sites run one deduplicated function: both are marked shared, C's is not
    ([(0, 100, ((A, 1.0),)), (100, 200, ((B, 1.0),)), (200, 300, ((C, 1.0),))], ["mm", "mm", "exp"],
     [True, True, False]),
    # a site split between A and B and a site of A alone run one function: B's time is in it too
    ([(0, 100, ((A, 1.0),)), (100, 200, ((A, 0.5), (B, 0.5)))], ["mm", "mm"], [True, True]),
    ([(0, 100, ((A, 1.0),)), (100, 200, ((B, 1.0),))], ["mm", "exp"], [False, False]),
])
def test_a_site_is_shared_when_its_function_also_runs_for_another_section(events, keys, shared):
    session = build(events, declared=[A, B, C], keys=keys)
    assert [site.shared_executable for site in sorted(session.sites, key=lambda site: site.site)] == shared
    written = sorted(session.to_json()["sites"], key=lambda site: site["site"])
    assert [site["shared_executable"] for site in written] == shared
    sites_table = io.StringIO()
    Console(file=sites_table, width=140, color_system=None).print(build_sites_table(session))
    assert len(re.findall(r"│ \w+ \* +│", sites_table.getvalue())) == sum(shared), sites_table.getvalue()


def test_nested_sections_and_unmarked_parts():
    events = [
        (0, 400, ((ATTN, 1.0),)),
        (100, 300, ((ATTN, 0.5), (MLP, 0.25), ((), 0.25))),  # runs inside the first: 100 ns of wall
        (400, 500, ((BLOCK, 1.0),)),
        (500, 600, (((), 1.0),)),
    ]
    session = build(events, declared=[BLOCK, ATTN, MLP])
    block, attn, mlp, unmarked = (session.section(p) for p in (BLOCK, ATTN, MLP, ()))
    assert (attn.exclusive_wall_ns, mlp.wall_ns, unmarked.wall_ns) == pytest.approx((300 + 50, 25, 25 + 100))
    assert (block.wall_ns, block.exclusive_wall_ns) == pytest.approx((475, 100))
    assert (block.busy_ns, unmarked.busy_ns) == pytest.approx((400 + 150 + 100, 50 + 100))
    assert session.unmarked_ns == pytest.approx(150)
    assert session.wall_ns == 600 and session.total_ns == 800


def test_identical_and_zero_length_events():
    events = [(0, 100, ((A, 1.0),)), (0, 100, ((B, 1.0),)), (50, 50, ((C, 1.0),))]
    session = build(events, declared=[A, B, C])
    assert [session.section(p).wall_ns for p in (A, B, C)] == pytest.approx([50, 50, 0])
    # The zero-length dispatch still ran: C is dispatched (no note), with zero time.
    assert session.section(C).dispatched and session.section(C).note is None


def test_per_call_statistics_stay_busy_time():
    events = [(0, 100, ((A, 1.0),)), (1_000, 1_300, ((A, 1.0),))]
    session = build(events, declared=[A], calls=2, call_of=[0, 1])
    stats = session.section(A).per_call
    assert (stats.min_ns, stats.max_ns, stats.mean_ns) == (100, 300, 200)
    assert session.section(A).calls == 2


def test_no_dispatch_events_is_one_line_error():
    attribution, section_map = synthetic([(0, 10, ((A, 1.0),))])
    attribution.events = attribution.events[:0]
    with pytest.raises(SectionmarkError, match="no dispatch events"):
        ProfileSession.build(attribution, section_map)


# ---------------------------------------------------------------------------- sections without dispatches


def sections_without_dispatches() -> ProfileSession:
    """Ran: Block/Attn. Declared but no dispatch: Block/Init (only in __init), Block/Gone (folded),
    Decode (only in another function), Stuck (a main site that never ran), Outer/Inner (folded)."""
    events = [(0, 100, ((ATTN, 1.0),))]
    declared = [BLOCK, ATTN, ("Block", "Init"), ("Block", "Gone"), ("Decode",), ("Stuck",), ("Outer", "Inner")]
    attribution, section_map = synthetic(
        events, declared=declared,
        elsewhere=[("__init", ((("Block", "Init"), 1.0),)), ("decode", ((("Decode",), 0.5), ((), 0.5))),
                   ("__init", ((("Decode",), 1.0),))],
    )
    section_map.command_buffers[0].commands.append(
        Command("dispatch", "main_dispatch_9", site=9, shares=[Share(("Stuck",), 1.0)]))
    session = ProfileSession.build(attribution, section_map, function="main")
    assert_profile_invariants(session)
    return session


def test_sections_without_dispatches_say_why():
    session = sections_without_dispatches()
    notes = {row.path: row.note for row in session.sections}
    assert notes == {
        BLOCK: None,
        ATTN: None,
        ("Block", "Init"): "no dispatches: ran only in initializers",
        ("Block", "Gone"): "no dispatches: optimised away or folded into constants",
        ("Decode",): "no dispatches in this function: its dispatches are in decode, initializers",
        ("Stuck",): "no dispatches: its dispatches did not run in the profiled calls",
        ("Outer",): "no dispatches: optimised away or folded into constants",  # parent created as usual
        ("Outer", "Inner"): "no dispatches: optimised away or folded into constants",
        (): None,
    }
    assert [row.path for row in session.sections][:4] == [BLOCK, ATTN, ("Block", "Init"), ("Block", "Gone")]


def test_table_csv_and_json_show_the_notes():
    session = sections_without_dispatches()
    text = session.render("table", width=200)
    init_line = next(line for line in text.splitlines() if "Init" in line)
    assert "Init — no dispatches: ran only in initializers" in init_line
    assert "%" not in init_line and " ns" not in init_line  # a note, not a row of zeros
    rows = {row["section"]: row for row in csv.DictReader(io.StringIO(session.render("csv")))}
    assert rows["Block / Gone"]["note"] == "no dispatches: optimised away or folded into constants"
    assert rows["Block / Attn"]["note"] == ""
    data = session.to_json()
    by_name = {row["name"]: row for row in data["sections"]}
    assert by_name["Decode"]["dispatched"] is False and by_name["Decode"]["note"].startswith("no dispatches")
    assert by_name["Block"]["dispatched"] is True and by_name["Block"]["note"] is None


# ---------------------------------------------------------------------------- JSON


def test_json_round_trip():
    session = sections_without_dispatches()
    data = json.loads(session.render("json"))
    assert data["version"] == 2
    again = ProfileSession.from_json(data)
    assert_profile_invariants(again)
    for component in data["components"]:  # per-call figures need per-event data, which JSON does not keep
        component.update(calls=None, per_call=None)
    assert json.loads(again.render("json")) == data
    # the session's own JSON is its data; the file adds the views computed from it, after the data
    assert list(data) == [*session.to_json(), "components", "kernels", "parallelism", "utilization"]
    assert again.section(("Block", "Init")).note == "no dispatches: ran only in initializers"


def test_json_is_the_documented_schema():
    """docs/profile-json.md, field by field, on the worked example (times rounded to integer ns)."""
    session = build([(0, 100_000, ((A, 1.0),)), (50_000, 150_000, ((A, 0.7), (B, 0.3)))], declared=[A, B])
    data = json.loads(session.render("json"))
    sections, sites, components = data.pop("sections"), data.pop("sites"), data.pop("components")
    assert [row["site"] for row in data.pop("kernels")] == [0, 1]
    assert [component["name"] for component in components] == ["A", "B", "(unmarked)"]
    assert components[0] == {
        "name": "A", "sections": [["A"]], "busy_ns": 170_000, "exclusive_ns": 170_000, "wall_ns": 127_500,
        "share": 0.85, "exclusive_share": 0.85, "dispatches": 2, "calls": 1,
        "per_call": {"mean_ns": 170_000, "min_ns": 170_000, "max_ns": 170_000, "p50_ns": 170_000, "p95_ns": 170_000},
        "samples": [170_000], "traffic": None,
    }
    assert data == {"version": 2, "function": "main", "weight_rule": "cost", "total_ns": 200_000, "wall_ns": 150_000,
                    "unmarked_ns": 0, "calls": 1, "warmup": 0, "calls_known": True, "coverage_error": 0.0, "call_time": None, "memory": None,
                    "split_rules": {"cost": 1}, "cpu_ns": None, "tiles": None, "workers": None, "parallelism": None,
                    "utilization": None, "module": None, "device": None, "profiler_cost": None,
                    "runs": 1, "shown_run": None, "total_runs": None, "run_variation": None,
                    "colors": {}}  # no run: built here
    assert sections[0] == {
        "path": ["A"], "name": "A", "unmarked": False, "busy_ns": 170_000, "exclusive_ns": 170_000,
        "shared_ns": 70_000, "shared_with": [{"path": ["B"], "ns": 30_000}], "wall_ns": 127_500,
        "exclusive_wall_ns": 127_500, "calls": 1, "dispatches": 2, "dispatched": True, "note": None, "share": 0.85,
        "per_call": {"mean_ns": 170_000, "min_ns": 170_000, "max_ns": 170_000, "p50_ns": 170_000, "p95_ns": 170_000},
        "cpu_ns": None, "tiles": None, "parallelism": None, "utilization": None, "samples": [170_000],
        "start_ns": {"min": 0, "p50": 0, "max": 0}, "end_ns": {"min": 150_000, "p50": 150_000, "max": 150_000},
        "traffic": None, "working_set_bytes": None, "runs": None,  # these hand-built sites have no bindings (test_kernels has some)
    }
    assert sections[1]["start_ns"] == {"min": 50_000, "p50": 50_000, "max": 50_000}  # only the fused dispatch
    assert sections[2] == {
        "path": [], "name": "(unmarked)", "unmarked": True, "busy_ns": 0, "exclusive_ns": 0, "shared_ns": 0,
        "shared_with": [], "wall_ns": 0, "exclusive_wall_ns": 0, "calls": 0, "dispatches": 0, "dispatched": False,
        "note": None, "share": 0.0, "per_call": {"mean_ns": 0, "min_ns": 0, "max_ns": 0, "p50_ns": 0, "p95_ns": 0},
        "cpu_ns": None, "tiles": None, "parallelism": None, "utilization": None, "samples": [0],
        "start_ns": None, "end_ns": None, "traffic": None, "working_set_bytes": None, "runs": None,
    }
    assert sites[1] == {
        "site": 1, "key": "main_dispatch_1", "executable": None, "workgroups": None, "binding_bytes": None,
        "sections": [{"path": ["A"], "weight": 0.7}, {"path": ["B"], "weight": 0.3}], "dispatches": 1,
        "busy_ns": 100_000, "shared_executable": False, "bindings": [], "flops": None, "rule": "cost",
    }
    # every time an integer; cpu_ns None here: these hand-built events record no tiles (as on Vulkan)
    assert all(isinstance(row[key], int) or (key in ("cpu_ns", "start_ns", "end_ns") and row[key] is None)
               or (key in ("start_ns", "end_ns") and all(isinstance(value, int) for value in row[key].values()))
               for row in sections for key in row if key.endswith("_ns"))


@pytest.mark.parametrize("data, message", [
    ({"version": 1, "sections": []}, "version 1 is not supported"),
    ([], "no 'version' field"),
    ({"version": 2, "sections": [{"path": []}]}, "malformed sectionmark profile JSON: profile: missing field 'total_ns'"),
])
def test_from_json_refuses_other_versions_and_malformed_data(data, message):
    with pytest.raises(SectionmarkError, match=re.escape(message)) as error:
        ProfileSession.from_json(data)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("change, message", [
    (lambda d: d["sections"][0].update(busy_ns="12"), "profile.sections[0].busy_ns: expected a number, got str '12'"),
    (lambda d: d["sections"][0]["shared_with"].append({"path": ["B"]}), "profile.sections[0].shared_with[1]: missing field 'ns'"),
    (lambda d: d["sites"][0].update(dispatches=1.5), "profile.sites[0].dispatches: expected an integer, got float 1.5"),
    (lambda d: d["sections"].pop(), "the last section row must be the unmarked row"),
])
def test_from_json_names_the_place_of_a_bad_value(change, message):
    data = build([(0, 100, ((A, 0.5), (B, 0.5))), (100, 200, ((B, 1.0),))], declared=[A, B]).to_json()
    change(data)
    with pytest.raises(SectionmarkError, match=re.escape(message)):
        ProfileSession.from_json(data)


# ---------------------------------------------------------------------------- renderers


def test_every_renderer_by_name_and_by_suffix(tmp_path):
    from test_roofline import fake_peak

    session = build([(0, 100, ((A, 1.0),)), (50, 150, ((A, 0.7), (B, 0.3)))], declared=[A, B])
    for renderer in RENDERERS.values():
        assert renderers.for_path(tmp_path / f"out{renderer.extensions[0]}") is renderer
        if renderer.name == "tracy":  # needs IREE's tracing runtime: tests/workflows/test_tracy_replay.py
            continue
        options = {"peak": fake_peak()} if renderer.name == "roofline" else {}  # a view never measures the machine
        output = session.render(renderer.name, **options)
        assert isinstance(output, bytes if renderer.binary else str) and output
        written = session.save(tmp_path / f"out{renderer.extensions[0]}", **options)
        if not renderer.binary:  # written exactly as rendered (the CSV keeps its \r\n)
            assert written.read_bytes() == output.encode("utf-8")
    assert session.save(tmp_path / "chart.data", "chart").read_bytes().startswith(b"\x89PNG")
    assert renderers.for_path("run.perfetto.json").name == "perfetto" and renderers.for_path("RUN.JSON").name == "json"


def test_unknown_formats_are_one_line_errors(tmp_path):
    session = build([(0, 100, ((A, 1.0),))], declared=[A])
    with pytest.raises(SectionmarkError, match="unknown output format 'xml'; use one of: table, json, csv"):
        session.render("xml")
    with pytest.raises(SectionmarkError, match=r"cannot tell the output format of .*run\.xml from its name"):
        session.save(tmp_path / "run.xml")
    assert list(tmp_path.iterdir()) == []


def test_a_session_read_from_json_has_no_timeline():
    session = ProfileSession.from_json(build([(0, 100, ((A, 1.0),))], declared=[A]).to_json())
    assert session.render("json") and session.render("table")
    with pytest.raises(SectionmarkError, match="no per-dispatch events"):
        session.render("perfetto")


# ---------------------------------------------------------------------------- where in the call


def three_calls() -> ProfileSession:
    """Three calls of Attn, then Attn fused with MLP, then an unmarked dispatch; C runs in call 1 only, and the
    declared section Never in none. No queue spans: each call starts at its first dispatch (100, 1000, 2000)."""
    fused = ((ATTN, 0.25), (MLP, 0.75))
    events = [
        (100, 200, ((ATTN, 1.0),)), (250, 400, fused), (450, 500, (((), 1.0),)),
        (1000, 1150, ((ATTN, 1.0),)), (1150, 1200, ((C, 1.0),)), (1200, 1300, fused), (1300, 1400, (((), 1.0),)),
        (2000, 2100, ((ATTN, 1.0),)), (2100, 2400, fused), (2500, 2600, (((), 1.0),)),
    ]
    return build(events, declared=[BLOCK, ATTN, MLP, C, ("Never",)], calls=3, call_of=[0, 0, 0, 1, 1, 1, 1, 2, 2, 2])


def test_start_and_end_offsets_over_the_calls():
    session = three_calls()
    spans = {row.path: (row.start_ns, row.end_ns) for row in session.sections}
    # Attn runs in the fused dispatch too, so it ends when that ends; MLP starts only there.
    assert spans[ATTN] == (Offsets(0, 0, 0), Offsets(300, 300, 400))
    assert spans[MLP] == (Offsets(100, 150, 200), Offsets(300, 300, 400))
    assert spans[BLOCK] == (Offsets(0, 0, 0), Offsets(300, 300, 400))  # covers both children
    assert spans[C] == (Offsets(150, 150, 150), Offsets(200, 200, 200))  # over the one call it ran in
    assert spans[()] == (Offsets(300, 350, 500), Offsets(400, 400, 600))
    assert spans[("Never",)] == (None, None)


def test_a_weight_zero_share_still_runs_the_section():
    """A section with a share of weight 0 in a fused dispatch gets none of its time but runs during it."""
    session = build([(0, 100, ((A, 1.0),)), (100, 300, ((A, 1.0), (B, 0.0)))], declared=[A, B])
    assert session.section(B).busy_ns == 0 and session.section(B).start_ns == Offsets(100, 100, 100)


def test_a_call_starts_at_its_first_queue_operation_when_that_is_earlier():
    starts, call = np.array([5, 3, 20, 30]), np.array([0, 0, 1, 1])
    assert first_dispatch_starts(starts, call, 3).tolist() == [3, 20, np.iinfo(np.int64).max]
    assert first_dispatch_starts(starts, call, 3, np.array([1, 25, 40])).tolist() == [1, 20, 40]


def test_offsets_from_the_queue_operations_start():
    attribution, section_map = synthetic([(100, 200, ((A, 1.0),)), (300, 400, ((B, 1.0),))], declared=[A, B])
    spans = np.zeros(1, QUEUE_SPAN_DTYPE)
    spans[0] = (EVENT_EXECUTE, 40, 420, 0, 0)
    attribution.queue_spans = spans
    session = ProfileSession.build(attribution, section_map, function="main")
    assert_profile_invariants(session)
    assert session.call_time is not None
    assert session.section(A).start_ns == Offsets(60, 60, 60) and session.section(B).end_ns == Offsets(360, 360, 360)


def test_start_and_end_in_json_and_csv_and_files_without_them():
    session = three_calls()
    data = json.loads(json.dumps(session.to_json()))
    attn = next(row for row in data["sections"] if row["path"] == list(ATTN))
    assert (attn["start_ns"], attn["end_ns"]) == ({"min": 0, "p50": 0, "max": 0}, {"min": 300, "p50": 300, "max": 400})
    again = ProfileSession.from_json(data)
    assert_profile_invariants(again)
    assert again.section(MLP).start_ns == Offsets(100, 150, 200) and again.section(("Never",)).end_ns is None
    for row in data["sections"]:  # a file written before the fields existed
        del row["start_ns"], row["end_ns"]
    old = ProfileSession.from_json(data)
    assert_profile_invariants(old)
    assert all(row.start_ns is None and row.end_ns is None for row in old.sections)
    with io.StringIO(session.render("csv"), newline="") as text:
        rows = {row["section"]: row for row in csv.DictReader(text)}
    assert [rows["Block / MLP"][f"{which}_{stat}_ns"] for which in ("start", "end") for stat in ("min", "p50", "max")] \
        == ["100", "150", "200", "300", "300", "400"]
    assert rows["Never"]["start_p50_ns"] == rows["Never"]["end_max_ns"] == ""


def test_timeline_is_a_png_with_names_as_text(tmp_path):
    session = three_calls()
    assert session.save_timeline(tmp_path / "t.data").read_bytes().startswith(b"\x89PNG")
    # Drawn as text: with mathtext this name fails the render ("bad math"), and "$5 and $6" loses its dollars.
    odd = build([(0, 100, ((("cost $5 and $6",), 1.0),)), (100, 200, ((("bad math $\\frac{$",), 1.0),))])
    assert odd.render("timeline").startswith(b"\x89PNG")
    # From JSON (no per-event data) it draws the same statistics.
    assert ProfileSession.from_json(session.to_json()).render("timeline") == session.render("timeline")


# ---------------------------------------------------------------------------- property


PATHS = [A, B, ("A", "X"), ("A", "X", "Y"), ("B", "Z"), ()]


@st.composite
def random_events(draw) -> tuple[list[Event], int, list[int]]:
    def composition() -> Composition:
        chosen = draw(st.lists(st.sampled_from(PATHS), min_size=1, max_size=4, unique=True))
        raw = draw(st.lists(st.integers(0, 10), min_size=len(chosen), max_size=len(chosen)).filter(any))
        return tuple((path, weight / sum(raw)) for path, weight in zip(chosen, raw))

    pool = [composition() for _ in range(draw(st.integers(1, 4)))]
    count = draw(st.integers(1, 30))
    events = []
    for _ in range(count):
        start = draw(st.integers(0, 10**6))
        events.append((start, start + draw(st.integers(0, 10**5)), draw(st.sampled_from(pool))))
    calls = draw(st.integers(1, 3))
    return events, calls, draw(st.lists(st.integers(0, calls - 1), min_size=count, max_size=count))


@settings(max_examples=300, deadline=None)
@given(random_events(), st.lists(st.sampled_from([p for p in PATHS if p] + [("Never",)]), max_size=3))
def test_invariants_hold_on_random_profiles(case, declared):
    events, calls, call_of = case
    session = build(events, declared=declared, calls=calls, call_of=call_of)
    assert_profile_invariants(ProfileSession.from_json(json.loads(json.dumps(session.to_json()))))


@given(random_events())
def test_c_and_numpy_sum_sessions_alike(case):
    events, calls, call_of = case
    attribution, section_map = synthetic(events, calls=calls, call_of=call_of)
    with_c = ProfileSession.build(attribution, section_map).to_json()
    with mock.patch.object(native, "_passes", None):
        assert ProfileSession.build(attribution, section_map).to_json() == with_c


def test_a_million_events_are_apportioned():
    """A million overlapping events: the parts sum to their union. (How fast a million events are attributed end
    to end is benchmarks/bench_attribution.py's figure: a wall time is no test's assertion.)"""
    rng = np.random.default_rng(0)
    starts = np.sort(rng.integers(0, 10**10, 1_000_000))
    ends = starts + rng.integers(0, 50_000, len(starts))
    parts = wall_parts(starts, ends)
    order = np.argsort(starts)
    reach = np.maximum.accumulate(ends[order])
    assert parts.sum() == pytest.approx(_union(starts[order], reach), rel=1e-9)
    assert (parts <= ends - starts).all()


def _union(sorted_starts: np.ndarray, reach: np.ndarray) -> int:
    gaps = np.maximum(sorted_starts[1:] - reach[:-1], 0)
    return int(reach[-1] - sorted_starts[0] - gaps.sum())
