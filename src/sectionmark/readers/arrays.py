"""Whole-array numpy helpers for the tables of a profile (a million rows): faster than numpy's general forms.

Shared by the readers' checks, attribution and the queue-time split.
"""

from __future__ import annotations

import numpy as np


def first_true(mask: np.ndarray) -> int:
    """Index of the first True of ``mask``; -1 when none is."""
    return int(np.argmax(mask)) if mask.any() else -1


def distinct(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` for a 1-D numeric array, by sorting: numpy 2's hash-based ``unique`` is many times
    slower on the large integer arrays of a profile."""
    ordered = np.sort(values, kind="stable")  # timsort: near-linear on the nearly sorted times and ids of profiles
    return ordered[np.concatenate([[True], ordered[1:] != ordered[:-1]])] if len(ordered) else ordered


def searchsorted_runs(ids: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``np.searchsorted(ids, values)``, looking up each run of equal values once: dispatches come grouped by
    submission (and so by command buffer), a few dozen per run, which makes this many times faster."""
    run_starts = np.concatenate([[0], np.flatnonzero(values[1:] != values[:-1]) + 1]) if len(values) else values
    if len(run_starts) > len(values) // 4:
        return np.searchsorted(ids, values)
    return np.repeat(np.searchsorted(ids, values[run_starts]), np.diff(np.append(run_starts, len(values))))


def strictly_increasing(first: np.ndarray, second: np.ndarray) -> bool:
    """Whether the pairs (first, second) strictly increase (then no pair appears twice)."""
    return bool(((first[1:] > first[:-1]) | ((first[1:] == first[:-1]) & (second[1:] > second[:-1]))).all())
