"""Compare two profiles section by section: time per call, the ratio B/A and whether it changed.

A difference between two runs is only called a change when the calls
themselves say so: each section's per-call busy times (``SectionStats.samples``,
kept in the profile JSON) are resampled with replacement, A and B
independently, and the ratio of the resampled means gives a bootstrap
confidence interval of the ratio B/A. "slower" or "faster" only when that
interval excludes 1 by more than ``min_change``; otherwise "no change". The
generator is seeded, so the same two files always give the same verdicts.

Why a minimum change: the per-call samples of one run see the noise between
calls, not the drift between runs (another process: CPU frequency, caches,
other load shift every call of a run alike). Profiling one module six times
on a 2-core VM gave run means of sections of 6-14 µs up to 23% apart, each
with an interval a few percent wide, so a pure "excludes 1" test calls
identical modules faster or slower. ``min_change=0`` is that pure test.

Sections are matched by path. A section declared in one profile only is
listed as such ("only in A" / "only in B"); one that ran no dispatch in
either run has nothing to compare ("no dispatches"), and one that ran in one
run only says so ("not run in A" / "not run in B"). Pure functions of two
sessions (no IREE): tests build them by hand; `sectionmark.renderers.compare`
reads profile JSON files for `sm.compare` and writes the outputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional, Sequence

import numpy as np

from sectionmark import serialization
from sectionmark.errors import SectionmarkError
from sectionmark.section_path import SectionPath, format_path
from sectionmark.profiling.session import ProfileSession

COMPARISON_JSON_VERSION = 1
RESAMPLES = 2000
CONFIDENCE = 0.95
SEED = 0
MIN_CHANGE = 25.0  # percent: drift between runs of one module reached 23% (module docstring)

FASTER, SLOWER, NO_CHANGE = "faster", "slower", "no change"
ONLY_IN_A, ONLY_IN_B = "only in A", "only in B"
NOT_RUN_IN_A, NOT_RUN_IN_B, NO_DISPATCHES = "not run in A", "not run in B", "no dispatches"


@dataclass
class SectionChange:
    """One section of the comparison. Times are mean busy ns per call (inclusive, like the table's Busy/call)."""

    path: SectionPath
    verdict: str  # faster, slower, no change, only in A/B, not run in A/B, no dispatches
    a_ns: Optional[float] = serialization.json_field(rounded=True, default=None)  # None: not in A
    b_ns: Optional[float] = serialization.json_field(rounded=True, default=None)  # None: not in B
    ratio: Optional[float] = None  # b_ns / a_ns; None when either is missing or 0
    low: Optional[float] = None  # the ratio's confidence interval (bootstrap percentiles)
    high: Optional[float] = None
    a_calls: int = 0  # per-call samples compared
    b_calls: int = 0

    JSON_PROPERTIES: ClassVar[tuple[str, ...]] = ("name", "change_percent")

    @property
    def name(self) -> str:
        return format_path(self.path)

    @property
    def change_percent(self) -> Optional[float]:
        """(B/A - 1) in percent: +25.0 is 25% slower."""
        return (self.ratio - 1) * 100 if self.ratio is not None else None


@dataclass
class Comparison:
    """Every section of A and B, in A's table order, then the sections only B has (in B's order)."""

    a: str  # labels: the files compared (or "A" / "B" for sessions)
    b: str
    resamples: int
    confidence: float
    seed: int
    min_change: float  # percent: the interval must lie beyond 1 +- this for "slower" / "faster"
    sections: list[SectionChange] = field(default_factory=list)

    def slower_than(self, percent: float) -> list[SectionChange]:
        """Sections judged slower whose ratio exceeds 1 + ``percent`` / 100 (what ``--fail-if-slower`` fails on)."""
        return [row for row in self.sections
                if row.verdict == SLOWER and row.ratio is not None and row.ratio > 1 + percent / 100]

    def to_json(self) -> dict[str, Any]:
        """Versioned JSON (docs/cli.md, `sectionmark compare --json`)."""
        return {"version": COMPARISON_JSON_VERSION, **serialization.to_json(self)}


def ratio_interval(a: np.ndarray, b: np.ndarray, resamples: int, confidence: float,
                   rng: np.random.Generator) -> tuple[float, float]:
    """Bootstrap percentile interval of mean(b) / mean(a): A's and B's calls resampled independently.

    Resamples whose A mean is 0 (a section that ran in only some calls) are
    left out; none left gives the interval (inf, inf).
    """
    means_a = a[rng.integers(0, len(a), (resamples, len(a)))].mean(axis=1)
    means_b = b[rng.integers(0, len(b), (resamples, len(b)))].mean(axis=1)
    valid = means_a > 0
    if not valid.any():
        return float("inf"), float("inf")
    ratios = means_b[valid] / means_a[valid]
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return float(low), float(high)


def compare_sessions(a: ProfileSession, b: ProfileSession, *, labels: Sequence[str] = ("A", "B"),
                     resamples: int = RESAMPLES, confidence: float = CONFIDENCE, seed: int = SEED,
                     min_change: float = MIN_CHANGE) -> Comparison:
    """The per-section comparison of ``b`` against ``a`` (see the module docstring).

    "slower" when the interval's low end exceeds 1 + ``min_change`` / 100,
    "faster" when its high end is below 1 / (1 + ``min_change`` / 100) (the
    same factor the other way).
    """
    if resamples < 100:
        raise SectionmarkError(f"resamples must be at least 100, got {resamples}")
    if not 0 < confidence < 1:
        raise SectionmarkError(f"confidence must be between 0 and 1, got {confidence}")
    if not 0 <= min_change < 1e6:
        raise SectionmarkError(f"the minimum change must be a percentage of at least 0, got {min_change}")
    factor = 1 + min_change / 100
    for label, session in zip(labels, (a, b)):
        _check_samples(label, session)
    rng = np.random.default_rng(seed)
    rows_b = {row.path: row for row in b.sections}
    paths_a = {row.path for row in a.sections}
    changes = []
    for row in a.sections:
        other = rows_b.get(row.path)
        if other is None:
            changes.append(SectionChange(row.path, ONLY_IN_A, a_ns=_mean(row.samples)))
            continue
        samples_a, samples_b = np.asarray(row.samples, float), np.asarray(other.samples, float)
        change = SectionChange(row.path, NO_CHANGE, a_ns=float(samples_a.mean()), b_ns=float(samples_b.mean()),
                               a_calls=len(samples_a), b_calls=len(samples_b))
        ran_a, ran_b = row.dispatched and change.a_ns > 0, other.dispatched and change.b_ns > 0
        if not ran_a or not ran_b:  # dispatches of no measurable time count as not run: no ratio
            change.verdict = NO_DISPATCHES if ran_a == ran_b else NOT_RUN_IN_A if ran_b else NOT_RUN_IN_B
        else:
            change.ratio = change.b_ns / change.a_ns
            change.low, change.high = ratio_interval(samples_a, samples_b, resamples, confidence, rng)
            change.verdict = (SLOWER if change.low > factor else FASTER if change.high * factor < 1 else NO_CHANGE)
        changes.append(change)
    changes += [SectionChange(row.path, ONLY_IN_B, b_ns=_mean(row.samples))
                for row in b.sections if row.path not in paths_a]
    return Comparison(a=labels[0], b=labels[1], resamples=resamples, confidence=confidence, seed=seed,
                      min_change=min_change, sections=changes)


def _check_samples(label: str, session: ProfileSession) -> None:
    """Both profiles need per-call samples of at least two calls: one call gives no interval."""
    if any(row.samples is None for row in session.sections):
        raise SectionmarkError(f"{label} has no per-call samples (a profile JSON written before they were kept): "
                               "profile or report it again")
    if not session.calls_known or session.calls < 2:
        raise SectionmarkError(f"{label} has {session.calls} call{'s' * (session.calls != 1)} that can be told apart: "
                               "a comparison needs per-call times of at least 2 calls (profile with -n 20)")


def _mean(samples: Optional[list[float]]) -> Optional[float]:
    return float(np.mean(samples)) if samples else None
