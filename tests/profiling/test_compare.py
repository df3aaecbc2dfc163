"""`sm.compare` / `sectionmark compare`: verdicts on hand-built sessions, then on real profiles of tiny models.

Hand-built: per-call times (one run a side) and per-round times (rounds of
two modules run alternately, with a drift common to both) are chosen so that
every verdict is known. Real: a three-section torch model and a copy with its
middle section 32x wider, compared as modules run alternately (the structure
of the comparison and the exit codes), as profile JSON and as .ireeprof with
--map. What a comparison concludes on real runs of the same module (its
false alarms) depends on the machine's load: benchmarks/bench_compare.py
measures it, no test asserts it.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import tracemalloc
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pytest
from invariants import assert_profile_invariants
from test_session import synthetic

import sectionmark as sm
from sectionmark.cli import main
from sectionmark.errors import SectionmarkError
from sectionmark.section_path import SectionPath
from sectionmark.profiling.compare import (CALLS, DRIFT_BOUND, FASTER, MIN_CHANGE, NO_CHANGE, NO_DISPATCHES,
                                           NOT_RUN_IN_A, NOT_RUN_IN_B, ONLY_IN_A, ONLY_IN_B, ROUNDS, RUNS,
                                           RUNS_MIN_CHANGE, SLOWER,
                                           WITHIN_DRIFT, bootstrap_interval, compare_sessions, paired_ratios,
                                           rank_sum_counts, shift_interval)
from sectionmark.profiling.runs import combine_runs
from sectionmark.profiling.section_time import MAX_SAMPLES, call_samples
from sectionmark.profiling.session import ProfileSession
from sectionmark.renderers import json_out
from sectionmark.renderers.compare import render_csv, render_json, render_table
from sectionmark.workflows.compare import load_profile

A, B, C, D = ("A",), ("B",), ("C",), ("D",)


def per_call_session(times: dict[SectionPath, Sequence[float]], declared: Sequence[SectionPath] = ()) -> ProfileSession:
    """A session with one dispatch per section per call, of the given durations (ns), calls one after another."""
    calls = len(next(iter(times.values())))
    events, call_of, clock = [], [], 0
    for call in range(calls):
        for path, durations in times.items():
            events.append((clock, clock + int(durations[call]), ((path, 1.0),)))
            call_of.append(call)
            clock += int(durations[call]) + 10
    attribution, section_map = synthetic(events, declared=list(declared) or list(times), calls=calls, call_of=call_of)
    session = ProfileSession.build(attribution, section_map, function="main")
    assert_profile_invariants(session)
    return session


def noisy(mean: float, calls: int = 30, spread: float = 0.05, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(mean, mean * spread, calls).clip(1)


def test_one_run_a_side_is_a_verdict_only_beyond_the_drift_between_runs():
    """Calls of one run each cannot see the drift between runs: 4x slower or faster is a verdict, 1x and 1.5x are
    "within drift" (the bound, 100%), and the note says how to get a verdict."""
    a = per_call_session({A: noisy(10_000, seed=1), B: noisy(10_000, seed=2), C: noisy(10_000, seed=3),
                          D: noisy(10_000, seed=7)})
    b = per_call_session({A: noisy(10_000, seed=4), B: noisy(40_000, seed=5), C: noisy(2_500, seed=6),
                          D: noisy(15_000, seed=8)})
    comparison = compare_sessions(a, b)
    rows = {row.path: row for row in comparison.sections}
    assert [rows[path].verdict for path in (A, B, C, D)] == [WITHIN_DRIFT, SLOWER, FASTER, WITHIN_DRIFT]
    assert {row.basis for row in comparison.sections} == {CALLS} and rows[B].coverage == 0.95
    assert rows[A].low < 1 < rows[A].high and rows[D].low > 1.25  # D's calls alone exclude 1: still no verdict
    assert rows[B].low > 2 and rows[B].ratio == pytest.approx(4, rel=0.05)
    assert rows[C].high < 0.5 and rows[C].ratio == pytest.approx(0.25, rel=0.05)
    assert rows[()].verdict == NO_DISPATCHES and rows[()].ratio is None
    assert (rows[B].a_calls, rows[B].b_calls, rows[B].a_runs) == (30, 30, 1)
    assert rows[B].a_ns == pytest.approx(a.section(B).per_call.mean_ns)
    assert "--runs 3" in comparison.note and "sectionmark compare A.vmfb B.vmfb" in comparison.note
    assert f"{DRIFT_BOUND:g}%" in comparison.note
    # the section B and the component "B" (its one section): "within drift" never fails --fail-if-slower
    assert [(type(row).__name__, row.name) for row in comparison.slower_than(50)] == [
        ("SectionChange", "B"), ("ComponentChange", "B")] and comparison.slower_than(400) == []
    assert compare_sessions(a, b, drift_bound=0).sections[3].verdict == SLOWER  # D beyond 10% alone
    # seeded: the same inputs give the same intervals
    again = compare_sessions(a, b)
    assert [(row.low, row.high) for row in again.sections] == [(row.low, row.high) for row in comparison.sections]


def rounds_of(means: dict[SectionPath, Sequence[float]], seed: int = 0,
              declared: Sequence[SectionPath] = ()) -> ProfileSession:
    """One session per round (each section's mean per call given per round, 1% noise between its 10 calls),
    combined as `sm.compare` combines the rounds of one module (or as `--runs` combines runs)."""
    count = len(next(iter(means.values())))
    return combine_runs([per_call_session({path: noisy(values[round_index], calls=10, spread=0.01,
                                                       seed=seed + 7 * round_index + index)
                                           if values[round_index] else np.zeros(10)  # ran, in no measurable time
                                           for index, (path, values) in enumerate(means.items())}, declared)
                         for round_index in range(count)])


DRIFT = 1 + 0.4 * np.sin(np.arange(10))  # the machine: +-40% from round to round, on both modules alike


def test_paired_rounds_cancel_a_drift_that_hits_both_modules():
    a = rounds_of({A: 10_000 * DRIFT, B: 10_000 * DRIFT})
    b = rounds_of({A: 10_000 * DRIFT, B: 20_000 * DRIFT}, seed=100)
    paired = {row.path: row for row in compare_sessions(a, b, paired=True).sections}
    assert (paired[A].basis, paired[A].verdict, paired[A].a_runs) == (ROUNDS, NO_CHANGE, 10)
    assert 0.97 < paired[A].low < 1 < paired[A].high < 1.03
    assert paired[B].verdict == SLOWER and 1.95 < paired[B].low < paired[B].ratio < paired[B].high < 2.05
    assert paired[A].coverage == pytest.approx(1 - 2 * 11 / 1024)  # 2nd lowest to 2nd highest of 10
    assert paired[A].a_ns == pytest.approx(np.median(a.section(A).runs.values_ns))
    # the same runs unpaired: the drift is in the interval; two leaf sections give no whole-run scale, so only a
    # change beyond the drift bound would be a verdict
    unpaired = compare_sessions(a, b)
    rows = {row.path: row for row in unpaired.sections}
    assert rows[A].basis == RUNS and rows[A].low < 0.85 and rows[A].high > 1.15
    assert rows[A].verdict == rows[B].verdict == WITHIN_DRIFT
    assert (rows[A].bound, paired[A].bound) == (DRIFT_BOUND, MIN_CHANGE)
    assert unpaired.whole_run is None and unpaired.note.startswith("fewer than 3 leaf sections")


FOUR = {("P", "X"): 10_000, ("P", "Y"): 20_000, ("Q",): 15_000, ("R",): 5_000}  # four leaves, P their parent
NESTED = [("P",), *FOUR]


def runs_of(drift: Sequence[float], changed: Optional[dict[SectionPath, float]] = None,
            seed: int = 0) -> ProfileSession:
    """A profile of ``len(drift)`` runs of the four leaves, every section of run i slowed by ``drift[i]`` (what
    load does to a whole run), the leaves in ``changed`` that many times their work."""
    return rounds_of({path: np.asarray(drift) * ns * (changed or {}).get(path, 1.0) for path, ns in FOUR.items()},
                     seed=seed, declared=NESTED)


def test_profiles_taken_apart_need_a_larger_change_over_their_runs():
    """Two profiles with X 20% slower, steady runs: beyond the rounds' 10%, not the 25% left of the drift between
    profiles taken apart; a minimum change given applies to both."""
    a, b = runs_of(np.ones(5)), runs_of(np.ones(5), {("P", "X"): 1.2}, seed=9)
    verdicts = [{row.path: row.verdict for row in compare_sessions(a, b, paired=paired).sections}
                for paired in (True, False)]
    assert [verdict[("P", "X")] for verdict in verdicts] == [SLOWER, NO_CHANGE]
    assert {row.path: row.verdict for row in compare_sessions(a, b, min_change=15).sections}[("P", "X")] == SLOWER


def test_a_whole_run_slowed_by_load_is_taken_out_of_profiles_taken_apart():
    """B's three runs ran 1.6-1.9x slower as wholes (every section alike: load): no section changed, and the note
    says the whole run moved. One leaf doing 2x the work under the same load: it and its parent are slower, the
    rest no change."""
    a, loaded = runs_of([1.0, 1.05, 0.97]), [1.8, 1.6, 1.9]
    same = compare_sessions(a, runs_of(loaded, seed=50))
    assert {row.verdict for row in [*same.sections, *same.components] if row.ratio is not None} == {NO_CHANGE}
    assert {row.basis for row in same.sections if row.ratio is not None} == {RUNS}
    assert 1.6 < same.whole_run[0] < 1.9 and f"as wholes took {same.whole_run[0]:.2f}x" in same.note
    assert json.loads(render_json(same))["whole_run"] == pytest.approx(list(same.whole_run), rel=1e-6)
    assert same.sections[1].b_ns == pytest.approx(np.median(loaded) * 10_000, rel=0.02)  # the times as measured
    changed = compare_sessions(a, runs_of(loaded, {("P", "Y"): 2.0}, seed=60))
    verdicts = {row.name: row.verdict for row in changed.sections}
    assert verdicts == {"P": SLOWER, "P / X": NO_CHANGE, "P / Y": SLOWER, "Q": NO_CHANGE, "R": NO_CHANGE,
                        "(unmarked)": NO_DISPATCHES}
    assert {row.name: row.verdict for row in changed.components}["Y"] == SLOWER
    assert 1.95 < {row.name: row for row in changed.sections}["P / Y"].ratio < 2.05
    # a section whose time did not follow its run's (R: the same under load, as the first section of a call that
    # waits for the workers): against the rest of its run it looks 1.8x faster, as measured it did not move: no
    # verdict either way
    fixed = compare_sessions(a, runs_of(loaded, {("R",): 1 / 1.8}, seed=65))
    row = {row.name: row for row in fixed.sections}["R"]
    assert row.verdict == NO_CHANGE and row.scaled and row.high < 0.8
    # most leaves doubled looks like a whole run doubled, which saved profiles cannot tell from load: the note says
    # the whole run moved; the verdicts say nothing either way (X looks faster against its run, not as measured)
    most = compare_sessions(a, runs_of(np.ones(3), {("P", "Y"): 2.0, ("Q",): 2.0, ("R",): 2.0}, seed=70))
    assert {row.verdict for row in most.sections if row.ratio is not None} == {NO_CHANGE} and "as wholes" in most.note


def test_rounds_take_out_a_drift_between_the_two_runs_of_a_round_and_keep_a_change_of_everything():
    """Rounds where B's run ran up to 1.6x slower or faster than A's beside it (load changed within the round):
    as measured, the parent P of a doubled leaf (1.67x) is not beyond 10% in the second lowest round; with each
    run's whole-run factor taken out it is, and the unchanged rows stay no change. A module twice as slow in every
    section (nothing for a scale to tell) is still slower, from the ratios as measured."""
    within = np.array([1.0, 1.6, 0.6, 1.0, 1.5, 0.7, 1.3, 0.65, 1.0, 1.4])
    a = runs_of(DRIFT)
    changed = compare_sessions(a, runs_of(DRIFT * within, {("P", "Y"): 2.0}, seed=80), paired=True)
    rows = {row.name: row for row in changed.sections}
    assert {name: row.verdict for name, row in rows.items()} == {
        "P": SLOWER, "P / X": NO_CHANGE, "P / Y": SLOWER, "Q": NO_CHANGE, "R": NO_CHANGE, "(unmarked)": NO_DISPATCHES}
    assert rows["P"].scaled and rows["P"].basis == ROUNDS and 1.6 < rows["P"].low < rows["P"].high < 1.75
    assert float(np.sort(within)[1] * 50 / 30) < 1 + MIN_CHANGE / 100  # as measured: no verdict for P
    assert not rows["Q"].scaled and changed.whole_run is None  # no verdict either way: shown as measured
    everything = compare_sessions(a, runs_of(DRIFT, dict.fromkeys(FOUR, 2.0), seed=90), paired=True)
    assert {row.verdict for row in everything.sections if row.ratio is not None} == {SLOWER}
    assert not any(row.scaled for row in everything.sections)


def test_a_profile_of_few_leaf_sections_has_no_scale():
    """Two leaves: a whole-run drift of 1.8x is within the drift bound, never slower; 4x the work is slower."""
    a = rounds_of({A: np.full(3, 10_000.0), B: np.full(3, 10_000.0)})
    drifted = compare_sessions(a, rounds_of({A: np.full(3, 18_000.0), B: np.full(3, 18_000.0)}, seed=5))
    assert {row.verdict for row in drifted.sections if row.ratio is not None} == {WITHIN_DRIFT}
    assert drifted.slower_than(10) == [] and drifted.note.startswith("fewer than 3 leaf sections")
    changed = compare_sessions(a, rounds_of({A: np.full(3, 10_000.0), B: np.full(3, 40_000.0)}, seed=6))
    assert {row.path: row.verdict for row in changed.sections}[B] == SLOWER


def test_one_disturbed_round_moves_neither_end_of_the_interval():
    """B is 2x A in every round but one, where A's run stalled (3x): still "slower", the interval near 2."""
    stalled = np.ones(10)
    stalled[3] = 3.0
    a = rounds_of({A: 10_000 * stalled, B: np.full(10, 10_000.0)})
    b = rounds_of({A: np.full(10, 20_000.0), B: np.full(10, 10_000.0)}, seed=50)
    row, steady = compare_sessions(a, b, paired=True).sections[:2]
    assert row.verdict == SLOWER and 1.9 < row.low <= row.high < 2.1
    assert steady.verdict == NO_CHANGE
    # below the minimum change: no verdict either way
    assert compare_sessions(a, b, paired=True, min_change=150).sections[0].verdict == NO_CHANGE


def test_rounds_where_a_section_did_not_run():
    a = rounds_of({A: np.full(10, 10_000.0), B: np.zeros(10)})
    b = rounds_of({A: np.full(10, 10_000.0), B: np.full(10, 5_000.0)})
    rows = {row.path: row for row in compare_sessions(a, b, paired=True).sections}
    assert rows[B].verdict == NOT_RUN_IN_A and rows[B].ratio is None
    assert list(paired_ratios(np.array([0.0, 2, 0]), np.array([1.0, 1, 0]))) == [np.inf, 0.5, 1.0]


def test_mann_whitney_counts_and_the_interval_over_runs():
    for m, n in [(1, 1), (2, 3), (3, 3), (4, 2), (5, 4)]:
        brute = np.zeros(m * n + 1)
        for a_places in itertools.combinations(range(m + n), m):  # which ranks A's values take
            b_places = [place for place in range(m + n) if place not in a_places]
            brute[sum(b > a for a in a_places for b in b_places)] += 1
        assert list(rank_sum_counts(m, n)) == pytest.approx(list(brute)), (m, n)
    ratio, low, high, coverage = shift_interval(np.array([10.0, 11, 12]), np.array([20.0, 21, 23]), 0.95)
    assert (low, high, coverage) == (pytest.approx(20 / 12), pytest.approx(2.3), pytest.approx(0.9))
    assert ratio == pytest.approx(np.median([b / a for a in (10, 11, 12) for b in (20, 21, 23)]))
    # many runs: the normal approximation, an interval around 1 for one distribution
    values = np.random.default_rng(0).normal(1000, 50, (2, 200))
    ratio, low, high, coverage = shift_interval(values[0], values[1], 0.95)
    assert low < 1 < high and high - low < 0.05 and coverage == 0.95


def test_bootstrap_memory_is_bounded_by_the_samples_kept():
    """A million calls a side: at most MAX_SAMPLES of them are resampled, RESAMPLE_BLOCK resamples at a time (the
    matrix of every resample was 2000 x 10^6 indices, 14.9 GiB). Memory only, no time."""
    values = np.random.default_rng(0).normal(10_000, 500, (2, 1_000_000))
    tracemalloc.start()
    try:
        low, high = bootstrap_interval(values[0], values[1], 2000, 0.95, np.random.default_rng(0))
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert low < 1 < high
    assert peak < 32 << 20, peak


def test_a_profile_with_more_samples_than_kept_is_thinned_as_a_profile_keeps_them(tmp_path):
    document = json.loads(json_out.render(per_call_session({A: noisy(10_000)})))
    many = np.random.default_rng(1).normal(10_000, 100, 5_000).round()
    document["calls"], document["sections"][0]["samples"] = 5_000, many.tolist()
    document["sections"][1]["samples"] = [0.0] * 5_000
    path = tmp_path / "many.json"
    path.write_text(json.dumps(document))
    session = load_profile(path)
    assert session.section(A).samples == call_samples(many) and len(session.section(A).samples) == MAX_SAMPLES
    assert compare_sessions(session, session).sections[0].a_calls == MAX_SAMPLES


def test_sections_in_one_profile_only_and_sections_that_did_not_run():
    a = per_call_session({A: noisy(10_000), B: noisy(10_000)}, declared=[A, B, C])  # C: declared, never ran
    b = per_call_session({A: noisy(10_000, seed=7), D: noisy(10_000)}, declared=[A, B, D, C])
    rows = {row.path: row for row in compare_sessions(a, b).sections}
    assert rows[B].verdict == NOT_RUN_IN_B and rows[B].ratio is None
    assert rows[C].verdict == NO_DISPATCHES
    assert rows[D].verdict == ONLY_IN_B and rows[D].a_ns is None and rows[D].b_ns == pytest.approx(
        b.section(D).per_call.mean_ns)
    a2 = per_call_session({A: noisy(10_000), ("E",): noisy(100)})
    assert {row.path: row.verdict for row in compare_sessions(a2, b).sections}[("E",)] == ONLY_IN_A
    # dispatches of no measurable time (0 ns each) give no ratio, not a division by zero
    zero = per_call_session({A: noisy(10_000), ("Z",): [0] * 30})
    assert zero.section(("Z",)).dispatched
    assert {row.path: (row.verdict, row.ratio) for row in compare_sessions(zero, zero).sections}[("Z",)] == (
        NO_DISPATCHES, None)


BLOCKS = {("Block 0", "MLP"): 20_000, ("Block 0", "Attn"): 10_000, ("Block 1", "MLP"): 20_000,
          ("Block 1", "Attn"): 10_000}


def blocks(slower: Optional[dict[SectionPath, float]] = None, seed: int = 0) -> ProfileSession:
    """Two blocks of MLP and Attn, 10 rounds drifting by DRIFT; ``slower``: a factor per section."""
    slower = slower or {}
    return rounds_of({path: mean * slower.get(path, 1.0) * DRIFT for path, mean in BLOCKS.items()}, seed=seed)


def test_components_are_compared_by_name_from_their_summed_rounds():
    """One block's MLP 3x slower: that section, its block and the MLP component slower; Attn no change."""
    a, b = blocks(), blocks({("Block 1", "MLP"): 3.0}, seed=10)
    comparison = compare_sessions(a, b, paired=True)
    sections = {row.path: row.verdict for row in comparison.sections}
    assert sections == {("Block 0",): NO_CHANGE, ("Block 0", "MLP"): NO_CHANGE, ("Block 0", "Attn"): NO_CHANGE,
                        ("Block 1",): SLOWER, ("Block 1", "MLP"): SLOWER, ("Block 1", "Attn"): NO_CHANGE,
                        (): NO_DISPATCHES}
    components = {row.name: row for row in comparison.components}
    assert {name: row.verdict for name, row in components.items()} == {
        "MLP": SLOWER, "Attn": NO_CHANGE, "Block 0": NO_CHANGE, "Block 1": SLOWER, "(unmarked)": NO_DISPATCHES}
    mlp = components["MLP"]
    assert (mlp.a_sections, mlp.b_sections, mlp.a_calls, mlp.a_runs, mlp.basis) == (2, 2, 10, 10, ROUNDS)
    # the component's value in each round is its sections' summed: the median of those sums
    summed = np.add(a.section(("Block 0", "MLP")).runs.values_ns, a.section(("Block 1", "MLP")).runs.values_ns)
    assert mlp.a_ns == pytest.approx(np.median(summed))
    assert mlp.ratio == pytest.approx(2.0, rel=0.03) and 1.9 < mlp.low < mlp.ratio < mlp.high < 2.1
    # a component of one profile only
    c = per_call_session({("Block 0", "MLP"): noisy(20_000, calls=10), ("Block 0", "Gate"): noisy(5_000, calls=10)})
    by_name = {row.name: row for row in compare_sessions(a, c).components}
    assert by_name["Gate"].verdict == ONLY_IN_B and by_name["Gate"].a_sections == 0 and by_name["Gate"].b_sections == 1
    assert by_name["Attn"].verdict == ONLY_IN_A and by_name["MLP"].a_sections == 2 and by_name["MLP"].b_sections == 1
    assert by_name["MLP"].basis == CALLS  # one side has one run
    # read back from JSON, the runs and samples are kept: the same verdicts over the runs (unpaired: a file does
    # not say which runs were paired)
    again = compare_sessions(ProfileSession.from_json(a.to_json()), ProfileSession.from_json(b.to_json()))
    unpaired = compare_sessions(a, b)
    assert [(row.name, row.verdict, row.basis) for row in again.components] == [
        (row.name, row.verdict, row.basis) for row in unpaired.components]


def test_outputs_table_csv_json():
    comparison = compare_sessions(blocks(), blocks({("Block 1", "MLP"): 3.0}, seed=10), paired=True,
                                  labels=("before.json", "after.json"))
    comparison.rounds, comparison.calls_per_round = 10, 10
    table = render_table(comparison)
    assert "before.json" in table and "10 interleaved rounds of 10 calls" in table and "(97.9%)" in table
    assert "note:" not in table  # every row has a verdict
    components = table.split("components (sections of one name summed across blocks)")[1]
    assert "Sections A/B" in components and "2/2" in components
    assert components.count("slower") == 2 and components.count("no change") == 2
    assert f"{comparison.sections[3].change_percent:+.1f}%" in table
    rows = list(csv.DictReader(io.StringIO(render_csv(comparison))))
    assert [row["kind"] for row in rows] == ["section"] * 7 + ["component"] * 5
    assert [row["verdict"] for row in rows[3:5]] == [SLOWER, SLOWER] and rows[6]["ratio"] == ""
    mlp = next(row for row in rows if row["kind"] == "component" and row["section"] == "MLP")
    assert mlp["verdict"] == SLOWER and mlp["path"] == "" and float(mlp["ratio"]) == pytest.approx(2.0, rel=0.05)
    assert (mlp["basis"], mlp["a_runs"], float(mlp["coverage"])) == (ROUNDS, "10", pytest.approx(1 - 22 / 1024))
    assert float(mlp["bound"]) == MIN_CHANGE
    data = json.loads(render_json(comparison))
    assert (data["version"], data["min_change"], data["drift_bound"], data["rounds"]) == (3, None, DRIFT_BOUND,
                                                                                          10)
    assert (data["whole_run"], data["unscaled_runs"]) == (None, False)  # rounds: nothing to scale
    assert data["note"] is None and data["sections"][4]["name"] == "Block 1 / MLP"
    assert data["sections"][4]["verdict"] == SLOWER
    assert data["sections"][4]["change_percent"] == pytest.approx((comparison.sections[4].ratio - 1) * 100)
    assert {row["name"]: row["verdict"] for row in data["components"]}["MLP"] == SLOWER
    assert set(data["components"][0]) == {"name", "verdict", "a_ns", "b_ns", "ratio", "low", "high", "coverage",
                                          "bound", "a_calls", "b_calls", "a_runs", "b_runs", "a_sections",
                                          "b_sections", "change_percent", "basis", "scaled"}
    assert {row["bound"] for row in data["sections"] if row["ratio"]} == {MIN_CHANGE}
    single = compare_sessions(per_call_session({A: noisy(10_000)}), per_call_session({A: noisy(10_000, seed=3)}))
    assert json.loads(render_json(single))["note"] == single.note and f"note: {single.note[:40]}" in render_table(
        single).replace("\n", " ")


def test_call_samples_keep_at_most_a_thousand_evenly_spaced_calls():
    per_call = np.arange(2500, dtype=float)
    kept = call_samples(per_call)
    assert len(kept) == MAX_SAMPLES and kept[0] == 0 and kept[-1] == 2499
    assert np.all(np.diff(kept) >= 2) and np.all(np.diff(kept) <= 3)  # evenly spaced
    assert call_samples(per_call[:40]) == per_call[:40].tolist()


def test_profiles_without_samples_or_with_one_call_are_refused():
    a = per_call_session({A: noisy(10_000)})
    data = a.to_json()
    for row in data["sections"]:
        del row["samples"]
    old = ProfileSession.from_json(data)  # written before samples were kept: still readable
    assert_profile_invariants(old)
    with pytest.raises(SectionmarkError, match=r"^B has no per-call samples .*profile or report it again$"):
        compare_sessions(a, old)
    single = per_call_session({A: [10_000]})
    with pytest.raises(SectionmarkError, match=r"^A has 1 call that can be told apart: .*at least 2 calls"):
        compare_sessions(single, a)
    with pytest.raises(SectionmarkError, match="confidence"):
        compare_sessions(a, a, confidence=1.5)


# ---------------------------------------------------------------------------- real profiles

# 32x the work: a single-run comparison calls it slower only beyond its 2x drift bound, and that must hold with
# every core busy (a stalled base run, seen up to 3x on this 2-core machine, leaves it 10x).
WIDTHS = {"base": 128, "wide": 4096}


def model(width: int):
    import torch

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            generator = torch.Generator().manual_seed(0)
            self.a = torch.nn.Parameter(torch.randn(128, 128, generator=generator) / 11)
            self.b1 = torch.nn.Parameter(torch.randn(128, width, generator=generator) / 11)
            self.b2 = torch.nn.Parameter(torch.randn(width, 128, generator=generator) / 11)
            self.c = torch.nn.Parameter(torch.randn(128, 128, generator=generator) / 11)

        def forward(self, x):
            with sm.section("Embed"):
                x = torch.tanh(x @ self.a)
            with sm.section("Wide"):  # the same names in both modules; 32x the work in "wide"
                x = torch.relu(x @ self.b1) @ self.b2
            with sm.section("Head"):
                x = torch.tanh(x @ self.c)
            return x

    return Net()


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """base.vmfb, wide.vmfb, x.npy; base.json, base2.json (the same module again), wide.json (one run each) and the
    .ireeprof of the base runs; base3.json (3 runs)."""
    pytest.importorskip("iree.compiler")
    import torch

    directory = tmp_path_factory.mktemp("compare")
    x = torch.randn(64, 128, generator=torch.Generator().manual_seed(1))
    np.save(directory / "x.npy", x.numpy())
    files = {"x": directory / "x.npy", "args": (x,)}
    for name, width in WIDTHS.items():
        compiled = sm.compile(sm.torch.export(model(width), args=(x,)))
        vmfb = directory / f"{name}.vmfb"
        vmfb.write_bytes(compiled.vmfb)
        files[f"{name}.vmfb"], files[f"{name}.compiled"] = vmfb, compiled
        for run in ([name, f"{name}2"] if name == "base" else [name]):
            session = sm.profile(vmfb, args=(x,), iterations=30, warmup=10, quiet=True, workers=1,
                                 keep_profile=directory / f"{run}.ireeprof")
            assert_profile_invariants(session)
            files[run] = session.save(directory / f"{run}.json")
            files[f"{run}.ireeprof"] = directory / f"{run}.ireeprof"
    files["base3"] = sm.profile(files["base.vmfb"], args=(x,), iterations=10, quiet=True, runs=3).save(
        directory / "base3.json")
    return files


def test_modules_run_alternately_judge_the_rounds(runs, tmp_path, capsys):
    """Real rounds, 3 of 10 calls: every row judged over the rounds; the 32x wider section is slower (32x: beyond
    any stall of a busy machine), and --fail-if-slower fails naming it."""
    base, wide = str(runs["base.vmfb"]), str(runs["wide.vmfb"])
    out_json = tmp_path / "change.json"
    argv = ["compare", base, wide, "--input", str(runs["x"]), "--rounds", "3", "-n", "10", "--warmup", "2",
            "--workers", "1", "--json", str(out_json)]
    assert main([*argv, "--fail-if-slower", "10"]) == 1
    captured = capsys.readouterr()
    progress = captured.err.strip().splitlines()
    assert [line.split(" (")[0] for line in progress[:3]] == [f"compare: round {index} of 3" for index in (1, 2, 3)]
    assert all("A then B" in line or "B then A" in line for line in progress[:3])
    assert progress[3].startswith("sectionmark: error: ") and "Wide (+" in progress[3] and len(progress) == 4
    assert "3 interleaved rounds of 10 calls" in captured.out
    data = json.loads(out_json.read_text())
    assert data["rounds"] == 3 and data["calls_per_round"] == 10
    judged = [row for row in [*data["sections"], *data["components"]] if row["ratio"] is not None]
    assert {(row["basis"], row["a_runs"], row["b_runs"], row["a_calls"]) for row in judged} == {(ROUNDS, 3, 3, 10)}
    assert [row["name"] for row in data["sections"]] == ["Embed", "Wide", "Head", "(unmarked)"]
    assert {row["name"]: row["verdict"] for row in data["sections"]}["Wide"] == SLOWER
    slower = {row["name"] for row in judged if row["verdict"] == SLOWER}
    assert "Wide" in slower
    # the same module against itself: every row over the rounds (what it concludes: benchmarks/bench_compare.py)
    comparison = sm.compare(runs["base.compiled"], runs["base.compiled"], runs["args"], rounds=2, iterations=5,
                            workers=1, quiet=True)
    assert comparison.rounds == 2 and comparison.a == "A" and comparison.note is None
    assert {row.basis for row in comparison.sections if row.ratio is not None} == {ROUNDS}
    assert {row.verdict for row in comparison.sections} <= {NO_CHANGE, SLOWER, FASTER, NO_DISPATCHES}


def test_one_run_profiles_give_a_verdict_only_beyond_the_drift(runs):
    same = sm.compare(runs["base"], runs["base2"])
    assert {row.basis for row in same.sections if row.ratio is not None} == {CALLS}
    assert NO_CHANGE not in {row.verdict for row in [*same.sections, *same.components]}  # never "no change"
    assert same.note is not None and all(row.a_calls == row.b_calls == 30 for row in same.sections)
    assert same.a == str(runs["base"])
    wide = sm.compare(runs["base"], runs["wide"])
    rows = {row.name: row for row in wide.sections}
    assert rows["Wide"].verdict == SLOWER and rows["Wide"].low > 1 + DRIFT_BOUND / 100, rows["Wide"]
    assert rows["Wide"].a_ns == pytest.approx(json_out.load(runs["base"]).section(("Wide",)).per_call.mean_ns, abs=0.5)
    # a profile of 3 runs against one of 1: over the calls; against itself: over the runs
    assert {row.basis for row in sm.compare(runs["base3"], runs["base"]).sections if row.ratio} == {CALLS}
    itself = sm.compare(runs["base3"], runs["base3"])
    assert {(row.basis, row.verdict, row.ratio) for row in itself.sections if row.ratio} == {(RUNS, NO_CHANGE, 1.0)}


def test_cli_compare_outputs_and_fail_if_slower(runs, tmp_path, capsys):
    base, base2, wide = (str(runs[name]) for name in ("base", "base2", "wide"))
    assert main(["compare", base, base2, "--fail-if-slower", "10"]) in (0, 1)
    out = capsys.readouterr().out
    assert "note: one run on a side" in out and "bootstrap of the calls of one run" in out
    out_json, out_csv = tmp_path / "change.json", tmp_path / "change.csv"
    assert main(["compare", base, wide, "--json", str(out_json), "--csv", str(out_csv)]) == 0
    captured = capsys.readouterr()
    assert "slower" in captured.out and f"wrote {out_json}" in captured.out
    data = json.loads(out_json.read_text())
    assert {row["name"]: row["verdict"] for row in data["sections"]}["Wide"] == SLOWER
    csv_rows = list(csv.DictReader(io.StringIO(out_csv.read_text())))
    assert {("section", "Wide"), ("component", "Wide")} <= {
        (row["kind"], row["section"]) for row in csv_rows if row["verdict"] == SLOWER}
    assert main(["compare", base, wide, "--fail-if-slower", "10"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("sectionmark: error: ") and "slower by more than 10%: " in err
    assert "Wide (+" in err and "components: " in err
    # a slowdown below the threshold passes
    ratio = max(row["ratio"] for row in data["sections"] + data["components"] if row["verdict"] == SLOWER)
    assert main(["compare", base, wide, "--fail-if-slower", str(round((ratio - 1) * 100 + 50))]) == 0
    capsys.readouterr()


def test_cli_compare_recorded_profiles_with_their_map(runs, capsys):
    base, base2 = str(runs["base.ireeprof"]), str(runs["base2.ireeprof"])
    assert main(["compare", base, base2, "--map", str(runs["base.vmfb"]), "--warmup", "10"]) == 0
    out = capsys.readouterr().out
    assert out.count("Embed") == 2 and "bootstrap of the calls of one run" in out  # 1 section, 1 component
    assert main(["compare", str(runs["base"]), str(runs["wide.ireeprof"]), "--map", str(runs["wide.vmfb"]),
                 "--warmup", "10", "--fail-if-slower", "20"]) == 1
    assert "Wide (+" in capsys.readouterr().err


def one_error_line(capsys, argv, fragment):
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("sectionmark: error:") and fragment in err, err


def test_cli_compare_bad_inputs_are_one_line(runs, tmp_path, capsys):
    base = str(runs["base"])
    garbage, other = tmp_path / "garbage.json", tmp_path / "other.json"
    garbage.write_text("{not json")
    other.write_text('{"version": 1, "sites": []}')
    data = json.loads(runs["base"].read_text())
    for row in data["sections"]:
        del row["samples"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(data))
    one_error_line(capsys, ["compare", base, str(tmp_path / "missing.json")], "missing.json")
    one_error_line(capsys, ["compare", base, str(garbage)], f"{garbage} is not JSON")
    one_error_line(capsys, ["compare", str(other), base], f"{other}: profile JSON version 1 is not supported")
    one_error_line(capsys, ["compare", base, str(old)], "has no per-call samples")
    one_error_line(capsys, ["compare", base, str(runs["base.ireeprof"])], "is not a profile JSON (.json): give its "
                   "section map with --map")
    one_error_line(capsys, ["compare", base, base, "--json", base], "")
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", base, base, "--fail-if-slower", "-5"])
    assert exit_info.value.code == 2 and "--fail-if-slower" in capsys.readouterr().err
    # options that do not apply to what is compared
    vmfb = str(runs["base.vmfb"])
    one_error_line(capsys, ["compare", base, base, "--map", vmfb], "--map does not apply to two profile JSON files")
    one_error_line(capsys, ["compare", base, base, "--warmup", "3"], "--warmup does not apply to two profile JSON")
    one_error_line(capsys, ["compare", base, base, "--rounds", "3", "-n", "5"],
                   "--rounds, -n do not apply to two profiles")
    one_error_line(capsys, ["compare", base, base, "--input", str(runs["x"])], "--input does not apply")
    one_error_line(capsys, ["compare", vmfb, vmfb, "--map", vmfb], "--map does not apply to two modules")
    one_error_line(capsys, ["compare", vmfb, base], f"{base} is a profile and {vmfb} a module")
    with pytest.raises(SectionmarkError, match="only for two modules"):
        sm.compare(runs["base"], runs["base"], rounds=3)
    with pytest.raises(SectionmarkError, match="between 2 and 1,000 rounds"):
        sm.compare(runs["base.compiled"], runs["base.compiled"], runs["args"], rounds=1)


@pytest.mark.slow
def test_nanogpt_with_one_wider_mlp_is_slower_there(tmp_path, capsys):
    """The demo's GPT and a copy whose Block 1 MLP is 8x wider, three runs a profile, compared over the runs: Block 1
    / MLP, its block and the MLP component slower (8x: beyond any stall); the command fails on them. Every row of
    the demo against itself is judged over the runs (what it concludes: benchmarks/bench_compare.py)."""
    import torch
    from nanogpt_builders import torch_gpt

    model, args = torch_gpt()
    wide, _args = torch_gpt()
    mlp = wide.blocks[1].mlp
    mlp.fc, mlp.proj = torch.nn.Linear(64, 2048), torch.nn.Linear(2048, 64)
    base, widened = (sm.compile(sm.torch.export(module, args=args)) for module in (model, wide))
    files = {name: sm.profile(compiled, args=args, iterations=30, warmup=5, quiet=True, workers=1, runs=3).save(
                 tmp_path / f"{name}.json")
             for name, compiled in (("base", base), ("base2", base), ("wide", widened))}
    same = sm.compare(files["base"], files["base2"])
    assert len(same.sections) == 18 and len(same.components) == 11
    assert {row.basis for row in [*same.sections, *same.components] if row.ratio is not None} == {RUNS}
    changed = {(type(row).__name__, row.name): row.verdict
               for row in [*sm.compare(files["base"], files["wide"]).sections,
                           *sm.compare(files["base"], files["wide"]).components]}
    assert {changed[key] for key in [("SectionChange", "Block 1 / MLP"), ("SectionChange", "Block 1"),
                                     ("ComponentChange", "MLP")]} == {SLOWER}
    assert main(["compare", str(files["base"]), str(files["wide"]), "--fail-if-slower", "10"]) == 1
    assert "Block 1 / MLP (+" in capsys.readouterr().err
