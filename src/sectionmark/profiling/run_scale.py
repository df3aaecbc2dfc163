"""The whole run's factor, told apart from each section's change: what makes runs taken apart comparable.

Two profiles taken one after the other, or a test session today against the
sessions of last week, run under different load. Load slows a whole run: the
same workers are preempted in every section, so every section of a run moves
by about one factor (measured on a loaded 2-core machine: two runs of one
module, 88.9 -> 155.5 µs and 40.8 -> 75.6 µs in its two sections, 1.75x and
1.85x). Compared as absolute times, such runs differ by up to +86% with
nothing changed; compared as each section's share of its own run, by little
(benchmarks/bench_compare.py prints both).

A run's **scale** is where most of its leaf sections (named sections with no
named section inside them, that ran in the reference) agree: each leaf's
time in that run divided by its reference time (the median of its runs on
the reference side: A, or the history), and of those ratios the shortest
range that holds a majority of them (n // 2 + 1 of n), its median
(`majority_centre`: a "shorth"). Each run value divided by its run's scale
is the section's time "at the reference's speed". A change of one section
moves its own ratio out of that range and leaves the scale where the others
are (the plain median of four ratios, one of them doubled, is pulled half
way to the next: measured, it made unchanged sections look faster).

What this cannot tell apart, and how it is handled:

* A change of most leaves alike looks like a change of the whole run: when
  half or more of the leaves got k times slower, the scale is k, those
  leaves look unchanged and the others faster. The scale itself is reported
  (B's runs as wholes against A's), so a reader sees that the whole run
  moved; only a comparison of the modules (interleaved rounds) can say why.
* With fewer than `MIN_LEAVES` leaves one changed leaf is no minority (of
  two, the median is their middle): no scale is taken (`run_scales` returns
  None) and the caller judges the absolute times, beyond the drift of a
  whole run only.

Pure functions of numbers; tests build them by hand.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Optional, Sequence, TypeVar

import numpy as np

from sectionmark.section_path import SectionPath

MIN_LEAVES = 3  # leaf sections a scale needs: one changed leaf of three leaves the median to the other two
Key = TypeVar("Key")


def leaf_paths(paths: Iterable[SectionPath]) -> list[SectionPath]:
    """The named sections among ``paths`` with no other of them inside (the unmarked time, path (), is none)."""
    named = [tuple(path) for path in paths if path]
    return [path for path in named
            if not any(len(other) > len(path) and other[:len(path)] == path for other in named)]


def run_scales(reference: Mapping[Key, Sequence[float]], other: Mapping[Key, Sequence[float]],
               leaves: Sequence[Key]) -> Optional[tuple[np.ndarray, np.ndarray]]:
    """Each run's scale on both sides (``reference``'s and ``other``'s run values per section, runs aligned
    across sections), against the reference's median per leaf; None when fewer than `MIN_LEAVES` of ``leaves``
    ran in the reference and are on both sides, when a side's leaves hold different numbers of runs, or when a
    run's scale is 0 (most leaves did not run in it)."""
    usable = [leaf for leaf in leaves if leaf in reference and leaf in other and len(reference[leaf])
              and float(np.median(reference[leaf])) > 0]
    if len(usable) < MIN_LEAVES:
        return None
    sides = []
    for values in (reference, other):
        if len({len(values[leaf]) for leaf in usable}) != 1:
            return None
        sides.append(np.asarray([values[leaf] for leaf in usable], float))
    medians = np.median(sides[0], axis=1, keepdims=True)
    scales = tuple(majority_centre(side / medians) for side in sides)
    if any((scale <= 0).any() for scale in scales):
        return None
    return scales[0], scales[1]


def majority_centre(ratios: np.ndarray) -> np.ndarray:
    """Per column of ``ratios`` (leaves x runs): the median of the n // 2 + 1 values lying closest together (the
    first such window when several are as narrow)."""
    ordered = np.sort(ratios, axis=0)
    leaves = len(ordered)
    majority = leaves // 2 + 1
    widths = ordered[majority - 1:] - ordered[:leaves - majority + 1]
    starts = np.argmin(widths, axis=0)
    windows = np.stack([ordered[start:start + majority, run] for run, start in enumerate(starts)], axis=1)
    return np.median(windows, axis=0)


def scaled(values: Sequence[float], scales: np.ndarray) -> np.ndarray:
    """Run values divided by their runs' scales: the times at the reference's speed."""
    return np.asarray(values, float) / scales
