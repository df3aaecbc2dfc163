"""The history gate's verdict on hand-built run values: between runs, with the threshold beyond the intervals."""

from __future__ import annotations

import pytest

from sectionmark.errors import SectionmarkError
from sectionmark.profiling.compare import DRIFT_BOUND, RUNS_MIN_CHANGE
from sectionmark.profiling.regression import (FASTER, NO_CHANGE, NO_HISTORY, SLOWER, Gate, parse_gate,
                                              regression_verdict, regression_verdicts)

HISTORY = [100.0, 104.0, 98.0, 101.0, 103.0, 99.0, 102.0, 100.0, 97.0]  # 3 sessions x 3 runs, ns per call


def test_slower_only_when_the_new_interval_is_above_the_history_by_more_than_the_threshold():
    verdict = regression_verdict(HISTORY, [400.0, 410.0, 395.0], 10)
    assert verdict.verdict == SLOWER and verdict.ratio == pytest.approx(400 / 100)
    assert verdict.history == (98.0, 103.0)  # 9 values: the 2nd and 8th, 96% coverage
    assert verdict.new == (395.0, 410.0)  # 3 values: min and max
    # 12% above the history's upper end, all three runs: slower at 10%, not at 15%
    assert regression_verdict(HISTORY, [115.5, 116.0, 117.0], 10).verdict == SLOWER
    assert regression_verdict(HISTORY, [115.5, 116.0, 117.0], 15).verdict == NO_CHANGE


def test_one_slow_run_among_the_new_ones_is_no_change():
    """A run slowed by other load widens the new interval down to the normal runs: not a verdict."""
    assert regression_verdict(HISTORY, [100.0, 300.0, 101.0], 10).verdict == NO_CHANGE


def test_a_noisy_history_needs_a_bigger_change():
    noisy = [100.0, 180.0, 95.0, 160.0, 105.0, 170.0]
    assert regression_verdict(noisy, [190.0, 195.0, 200.0], 10).verdict == NO_CHANGE
    assert regression_verdict(noisy, [400.0, 410.0, 420.0], 10).verdict == SLOWER


def test_faster_and_no_history():
    assert regression_verdict(HISTORY, [50.0, 52.0, 51.0], 10).verdict == FASTER
    first = regression_verdict([], [50.0, 52.0, 51.0], 10)
    assert first.verdict == NO_HISTORY and first.ratio is None and first.history is None
    with pytest.raises(SectionmarkError):
        regression_verdict(HISTORY, [], 10)


LEAVES = {"Embed": 40.0, "Heavy": 100.0, "Light": 30.0, "Head": 20.0}  # ns per call at the history's speed
HISTORY_DRIFT = [1.0, 1.02, 0.98, 1.01, 0.99, 1.0, 1.03, 0.97, 1.0]  # 3 sessions x 3 runs, a quiet machine


def profile_values(drift, changed=None):
    """Every leaf's (and the unmarked time's) run values, each run slowed by its drift (load slows a whole run)."""
    values = {section: [ns * factor * (changed or {}).get(section, 1.0) for factor in drift]
              for section, ns in LEAVES.items()}
    values[""] = [2.0 * factor for factor in drift]
    return values


def test_a_session_slowed_as_a_whole_by_load_is_no_change():
    """The new session's runs all 1.7-1.9x slower (a CPU hog beside it): judged at 10%, no section is slower; the
    same values judged section by section, as before, called every one of them slower."""
    new = profile_values([1.8, 1.7, 1.9])
    verdicts = regression_verdicts(profile_values(HISTORY_DRIFT), new, dict.fromkeys(new, 10.0))
    assert {section: verdict.verdict for section, verdict in verdicts.items() if section} == dict.fromkeys(
        LEAVES, NO_CHANGE)
    assert all(verdict.scaled for verdict in verdicts.values())
    assert regression_verdict(profile_values(HISTORY_DRIFT)["Light"], new["Light"], 10).verdict == SLOWER


def test_one_section_twice_as_slow_under_load_is_slower_and_only_it():
    new = profile_values([1.8, 1.7, 1.9], {"Light": 2.0})
    verdicts = regression_verdicts(profile_values(HISTORY_DRIFT), new, dict.fromkeys(new, 10.0))
    assert {section for section, verdict in verdicts.items() if verdict.verdict != NO_CHANGE} == {"Light"}
    assert verdicts["Light"].verdict == SLOWER and verdicts["Light"].ratio == pytest.approx(2.0, rel=0.03)
    # scaled runs of sessions taken apart keep some drift: a gate under 25% is judged at 25%
    assert verdicts["Light"].bound == RUNS_MIN_CHANGE == 25.0
    small = profile_values([1.8, 1.7, 1.9], {"Light": 1.2})
    assert regression_verdicts(profile_values(HISTORY_DRIFT), small, dict.fromkeys(small, 10.0))["Light"].verdict == (
        NO_CHANGE)


def test_a_section_that_did_not_follow_its_runs_load_is_not_slower():
    """The history recorded under load (every section 1.8x) but Light, whose time did not move (as the first
    section of a call, which waits for the workers, can): against the rest of its quiet new runs Light looks 1.8x
    slower, as measured it is not: no change."""
    history = profile_values([1.8] * 9, {"Light": 1 / 1.8})
    new = profile_values([1.0, 1.02, 0.99])
    verdicts = regression_verdicts(history, new, dict.fromkeys(new, 10.0))
    assert verdicts["Light"].verdict == NO_CHANGE and verdicts["Light"].ratio > 1.7 and verdicts["Light"].scaled


def test_without_three_leaves_only_a_change_beyond_the_drift_of_whole_runs_is_slower():
    history = {"Heavy": [100.0] * 9, "Light": [30.0] * 9}
    drifted = {"Heavy": [180.0] * 3, "Light": [54.0] * 3}
    verdicts = regression_verdicts(history, drifted, {"Heavy": 10.0, "Light": 10.0})
    assert {verdict.verdict for verdict in verdicts.values()} == {NO_CHANGE}
    assert {(verdict.scaled, verdict.bound) for verdict in verdicts.values()} == {(False, DRIFT_BOUND)}
    changed = regression_verdicts(history, {"Heavy": [100.0] * 3, "Light": [90.0] * 3}, {"Heavy": 10, "Light": 10})
    assert changed["Light"].verdict == SLOWER and changed["Heavy"].verdict == NO_CHANGE
    first = regression_verdicts({}, drifted, {"Heavy": 10.0, "Light": 10.0})
    assert {verdict.verdict for verdict in first.values()} == {NO_HISTORY}


def test_gates_parse_a_section_or_any():
    assert parse_gate("Block 0/MLP:10%") == Gate(("Block 0", "MLP"), 10.0)
    assert parse_gate("*:7.5") == Gate(None, 7.5)
    assert parse_gate("*:10%").applies_to(("LM Head",)) and not parse_gate("*:10%").applies_to(())
    assert parse_gate("Block 0/MLP:10%").applies_to(("Block 0", "MLP"))
    assert not parse_gate("Block 0/MLP:10%").applies_to(("Block 0",))
    for bad in ("MLP", "MLP:", ":10%", "MLP:ten%", "MLP:-5%"):
        with pytest.raises(SectionmarkError, match="expected SECTION:PERCENT%"):
            parse_gate(bad)
