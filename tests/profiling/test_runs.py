"""Run-to-run variation (``--runs K``): the median's interval on hand-built data, then real runs of a tiny model.

Hand-built: sessions whose sections take a chosen time per call in each run
(a known spread between runs, little noise within one), combined as
`sm.profile(runs=K)` combines its runs. Real: the CLI's ``--runs 3`` and
``--workers 1`` on a small compiled module.
"""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
from invariants import assert_profile_invariants
from test_cli import one_error_line, one_usage_line
from test_compare import noisy, per_call_session

from sectionmark.cli import main
from sectionmark.profiling.compare import RUNS, SLOWER, WITHIN_DRIFT, compare_sessions
from sectionmark.profiling.runs import combine_runs, median_coverage, median_interval, representative_run
from sectionmark.profiling.session import ProfileSession
from sectionmark.renderers.table import render

A, B = ("A",), ("B",)


def runs_of(factors: list[float], mean: float = 10_000, spread: float = 0.01) -> list[ProfileSession]:
    """One session per run: section A takes ``mean * factor`` per call (1% noise between calls), B a steady 5 µs."""
    return [per_call_session({A: noisy(mean * factor, spread=spread, seed=run), B: noisy(5_000, spread=spread, seed=99)})
            for run, factor in enumerate(factors)]


def test_coverage_of_order_statistics_is_the_binomial_tail():
    assert median_coverage(5, 1) == 1 - 2 / 32  # min..max of 5 runs
    assert median_coverage(3, 1) == 0.75
    assert median_coverage(9, 2) == pytest.approx(1 - 2 * 10 / 512)
    assert median_coverage(1, 1) == 0.0


@pytest.mark.parametrize("runs, rank", [(3, 1), (5, 1), (6, 1), (9, 2), (20, 6), (50, 18)])
def test_median_interval_is_the_narrowest_that_reaches_the_confidence(runs, rank):
    values = np.random.default_rng(runs).exponential(1.0, runs)
    low, high, coverage = median_interval(values)
    ordered = np.sort(values)
    assert (low, high) == (ordered[rank - 1], ordered[runs - rank])
    assert coverage == median_coverage(runs, rank)
    assert coverage >= 0.95 or rank == 1  # too few runs for 95%: min..max and its smaller coverage, stated
    assert median_coverage(runs, rank + 1) < 0.95


def test_median_interval_covers_the_true_median_as_often_as_it_says():
    """20 runs of a skewed distribution (exponential, median ln 2), 4000 times: the stated coverage holds."""
    rng = np.random.default_rng(0)
    trials = rng.exponential(1.0, (4000, 20))
    intervals = [median_interval(values)[:2] for values in trials]
    covered = np.mean([low <= np.log(2) <= high for low, high in intervals])
    assert covered == pytest.approx(median_coverage(20, 6), abs=0.015)


def test_the_interval_contains_each_runs_value_for_a_known_spread():
    factors = [0.9, 1.0, 1.12, 0.95, 1.05]  # run-to-run spread of A: -10% .. +12%
    sessions = runs_of(factors)
    per_run = [session.section(A).busy_ns / session.calls for session in sessions]
    combined = combine_runs(sessions)
    assert_profile_invariants(combined)
    spread = combined.section(A).runs
    assert spread.values_ns == per_run
    assert spread.median_ns == np.median(per_run) == pytest.approx(10_000, rel=0.02)
    assert all(spread.low_ns <= value <= spread.high_ns for value in per_run)
    assert spread.confidence == 1 - 2 / 32
    assert spread.coefficient_of_variation == pytest.approx(np.std(per_run, ddof=1) / np.mean(per_run))
    steady = combined.section(B).runs
    assert steady.high_ns - steady.low_ns < 0.02 * steady.median_ns  # no spread between runs: a narrow interval
    # The figures shown are those of the run of median total (A's 1.0 run), named in the table.
    assert combined.shown_run == 2 == representative_run(sessions) + 1
    assert combined.runs == 5
    table = render(combined)
    assert "Median of 5" in table and "93.8% CI" in table and "other columns are run 2" in table
    rows = {row["section"]: row for row in csv.DictReader(io.StringIO(combined.render("csv")))}
    assert [int(rows["A"][column]) for column in ("run_median_ns", "run_low_ns", "run_high_ns")] == [
        round(spread.median_ns), round(spread.low_ns), round(spread.high_ns)]


def test_one_run_says_variation_was_not_measured():
    session = runs_of([1.0])[0]
    assert combine_runs([session]) is session and session.total_runs is None
    assert "run-to-run variation not measured (one run," in render(session)
    assert "Median of" not in render(session)
    assert next(csv.DictReader(io.StringIO(session.render("csv"))))["run_median_ns"] == ""


def test_runs_survive_the_json_round_trip():
    combined = combine_runs(runs_of([0.9, 1.0, 1.1]))
    again = ProfileSession.from_json(json.loads(json.dumps(combined.to_json())))
    assert_profile_invariants(again)
    assert (again.runs, again.shown_run) == (3, combined.shown_run)
    assert again.section(A).runs.values_ns == [round(v) for v in combined.section(A).runs.values_ns]
    assert again.total_runs.confidence == 0.75


def test_compare_uses_the_variation_between_runs_when_both_have_it():
    """B's median run is 8% slower than A's, with 1% noise within each run but +-10% between runs: the calls of
    the two shown runs alone call it slower; the runs say it is within their drift."""
    a, b = combine_runs(runs_of([0.9, 1.0, 1.1, 0.95, 1.05])), combine_runs(runs_of([1.08, 1.0, 1.15, 0.97, 1.12]))
    by_runs = compare_sessions(a, b, min_change=0).sections[0]
    # two leaf sections: no whole-run scale, so over the runs only beyond the drift bound
    assert (by_runs.basis, by_runs.verdict) == (RUNS, WITHIN_DRIFT) and by_runs.low < 1 < by_runs.high
    assert by_runs.a_ns == pytest.approx(np.median(a.section(A).runs.values_ns))
    for session in (a, b):  # without the runs: the calls of each shown run
        session.total_runs = None
        for row in session.sections:
            row.runs = None
    by_calls = compare_sessions(a, b, min_change=0, drift_bound=0).sections[0]
    assert (by_calls.basis, by_calls.verdict) == ("calls", SLOWER)


@pytest.fixture(scope="module")
def module_and_inputs(compiled_two_matmuls, inputs, tmp_path_factory):
    directory = tmp_path_factory.mktemp("runs")
    paths = []
    for index, array in enumerate(inputs):
        paths.append(directory / f"arg{index}.npy")
        np.save(paths[-1], array)
    return compiled_two_matmuls[1], paths, directory


def test_cli_runs_three_times(module_and_inputs, capsys):
    vmfb, inputs, directory = module_and_inputs
    output = directory / "runs.json"
    argv = ["profile", str(vmfb), *(f"--input={path}" for path in inputs), "-n", "5", "--warmup", "1", "--runs", "3",
            "--json", str(output)]
    assert main(argv) == 0
    table = capsys.readouterr().out
    assert "5 calls (+1 warmup) in each of 3 runs" in table and "Median of 3" in table and "75.0% CI" in table
    data = json.loads(output.read_text())
    assert data["runs"] == 3 and len(data["total_runs"]["values_ns"]) == 3
    for row in data["sections"]:
        spread = row["runs"]
        assert len(spread["values_ns"]) == 3 and spread["confidence"] == 0.75
        assert spread["low_ns"] == min(spread["values_ns"]) and spread["high_ns"] == max(spread["values_ns"])
        assert spread["median_ns"] == sorted(spread["values_ns"])[1]
    session = ProfileSession.from_json(data)
    assert_profile_invariants(session)
    attn = session.section(("Block", "Attn")).runs
    assert all(value > 0 for value in attn.values_ns)  # each run measured the section for itself


def test_runs_keep_the_shown_runs_events_and_profile(module_and_inputs):
    """Per-event data (timelines, Perfetto) and --keep-profile are of the run whose figures are shown."""
    import sectionmark as sm

    vmfb, inputs, directory = module_and_inputs
    kept = directory / "shown.ireeprof"
    session = sm.profile(vmfb, [np.load(path) for path in inputs], iterations=4, warmup=1, runs=3, quiet=True,
                         keep_profile=kept)
    assert_profile_invariants(session)
    assert session.events() is not None
    assert len(session.events().events) == sum(site.dispatches for site in session.sites)
    again = sm.report(kept, vmfb, calls=5, warmup=1)
    assert again.total_ns == session.total_ns
    assert again.total_ns / again.calls == session.total_runs.values_ns[session.shown_run - 1]


def test_workers_sets_the_worker_threads(module_and_inputs):
    """One worker: IREE ran the tiles on one thread, so no section's CPU time exceeds its busy time."""
    import sectionmark as sm

    vmfb, inputs, _ = module_and_inputs
    session = sm.profile(vmfb, [np.load(path) for path in inputs], iterations=5, warmup=1, workers=1, quiet=True)
    assert_profile_invariants(session)
    assert session.workers == 1
    assert all(row.parallelism <= 1 + 1e-9 for row in session.sections if row.parallelism is not None)


def test_bad_runs_and_workers_are_one_line(module_and_inputs, capsys):
    vmfb, _, _ = module_and_inputs
    one_usage_line(capsys, ["profile", str(vmfb), "--runs", "0"], "--runs")
    one_error_line(capsys, ["profile", str(vmfb), "--workers", "2", "--device", "cuda"],
                   "workers sets local-task's worker threads")
