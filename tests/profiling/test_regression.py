"""The history gate's verdict on hand-built run values: between runs, with the threshold beyond the intervals."""

from __future__ import annotations

import pytest

from sectionmark.errors import SectionmarkError
from sectionmark.profiling.regression import (FASTER, NO_CHANGE, NO_HISTORY, SLOWER, Gate, parse_gate,
                                              regression_verdict)

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


def test_gates_parse_a_section_or_any():
    assert parse_gate("Block 0/MLP:10%") == Gate(("Block 0", "MLP"), 10.0)
    assert parse_gate("*:7.5") == Gate(None, 7.5)
    assert parse_gate("*:10%").applies_to(("LM Head",)) and not parse_gate("*:10%").applies_to(())
    assert parse_gate("Block 0/MLP:10%").applies_to(("Block 0", "MLP"))
    assert not parse_gate("Block 0/MLP:10%").applies_to(("Block 0",))
    for bad in ("MLP", "MLP:", ":10%", "MLP:ten%", "MLP:-5%"):
        with pytest.raises(SectionmarkError, match="expected SECTION:PERCENT%"):
            parse_gate(bad)
