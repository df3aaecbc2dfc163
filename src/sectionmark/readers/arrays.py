"""Whole-array numpy helpers for the tables of a profile (a million rows): faster than numpy's general forms.

Shared by the readers' checks, attribution and the queue-time split.
"""

from __future__ import annotations

from typing import Sequence

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


def percentiles(values: np.ndarray, quantiles: Sequence[float]) -> np.ndarray:
    """``np.percentile(values, quantiles, axis=-1)`` (its default 'linear' method, NaN included), to the bit: the
    same partition and interpolation, without the ``np.unique`` of numpy's that imports ``numpy.ma`` (tens of
    ms of a cold ``sectionmark report``, which needs nothing else of it). Shape: (quantiles, *values' others)."""
    values = np.asanyarray(values)
    count = values.shape[-1]
    virtual = (count - 1) * np.true_divide(np.asarray(quantiles, np.float64), 100)  # as numpy: float64 indexes
    previous = np.floor(virtual)
    following = previous + 1
    beyond = virtual >= count - 1  # the last value's (numpy's index -1)
    previous[beyond], following[beyond] = -1, -1
    previous, following = previous.astype(np.intp), following.astype(np.intp)
    ordered = np.partition(values, sorted({0, -1, *previous.tolist(), *following.tolist()}), axis=-1)
    low, high = np.moveaxis(ordered[..., previous], -1, 0), np.moveaxis(ordered[..., following], -1, 0)
    gamma = (virtual - previous).reshape(virtual.shape + (1,) * (values.ndim - 1))
    difference = high - low  # numpy's _lerp: from the low end below gamma 0.5, from the high end above
    result = np.add(low, difference * gamma)
    np.subtract(high, difference * (1 - gamma), out=result, where=gamma >= 0.5, casting="unsafe")
    if np.issubdtype(values.dtype, np.inexact):  # a NaN sorts last and makes its slice's every percentile NaN
        np.copyto(result, ordered[..., -1], where=np.isnan(ordered[..., -1]))
    return result
