"""The whole run's factor on hand-built run values: where most leaf sections agree, one changed leaf left out."""

from __future__ import annotations

import numpy as np
import pytest

from sectionmark.profiling.run_scale import MIN_LEAVES, leaf_paths, majority_centre, run_scales, scaled


def test_leaves_are_the_named_sections_with_none_inside():
    paths = [(), ("Block 0",), ("Block 0", "Attn"), ("Block 0", "MLP"), ("Block 1",), ("Head",)]
    assert leaf_paths(paths) == [("Block 0", "Attn"), ("Block 0", "MLP"), ("Block 1",), ("Head",)]


def test_the_majority_centre_leaves_one_changed_leaf_out():
    """Four leaves, one doubled: the plain median is pulled half way to it; the majority's centre is not."""
    ratios = np.array([[0.95, 1.8], [1.0, 1.7], [1.05, 1.75], [2.0, 3.6]])
    assert np.median(ratios[:, 0]) == pytest.approx(1.025)
    assert majority_centre(ratios) == pytest.approx([1.0, 1.75])


def test_scales_of_both_sides_against_the_reference_leaves():
    reference = {"a": [10.0, 11.0, 10.0], "b": [20.0, 22.0, 20.0], "c": [5.0, 5.5, 5.0]}
    other = {"a": [18.0, 18.0, 18.0], "b": [36.0, 36.0, 72.0], "c": [9.0, 9.0, 9.0]}  # 1.8x as wholes; b 2x in run 3
    scales = run_scales(reference, other, ["a", "b", "c"])
    assert scales[0] == pytest.approx([1.0, 1.1, 1.0]) and scales[1] == pytest.approx([1.8, 1.8, 1.8])
    assert scaled(other["b"], scales[1]) == pytest.approx([20.0, 20.0, 40.0])


def test_no_scale_without_enough_leaves_or_with_runs_that_do_not_line_up():
    reference = {"a": [10.0, 11.0], "b": [20.0, 22.0], "c": [0.0, 0.0]}  # c never ran: no reference
    other = {"a": [10.0, 11.0], "b": [20.0, 22.0], "c": [1.0, 1.0]}
    assert MIN_LEAVES == 3 and run_scales(reference, other, ["a", "b", "c"]) is None
    reference["c"] = other["c"] = [5.0, 5.0]
    assert run_scales(reference, other, ["a", "b", "c"]) is not None
    assert run_scales(reference, {**other, "c": [5.0]}, ["a", "b", "c"]) is None  # a run missing from one leaf
    assert run_scales(reference, {**other, "a": [0.0, 0.0], "b": [0.0, 0.0]}, ["a", "b", "c"]) is None  # did not run
