"""Compare two profiles section by section and component by component: time per call, B/A, whether it changed.

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

Between-run variation, when both profiles have it (``--runs K``, K >= 2
each: ``SectionStats.runs``): the interval then resamples each profile's
run values (busy time per call of each fresh run) instead of its calls, so
it sees the drift between runs itself; the times compared are then the
means of the run values. A profile of one run falls back to the calls.

Sections are matched by path. A section declared in one profile only is
listed as such ("only in A" / "only in B"); one that ran no dispatch in
either run has nothing to compare ("no dispatches"), and one that ran in one
run only says so ("not run in A" / "not run in B"). Components (sections of
one name summed across blocks, `sectionmark.profiling.components`) are
judged the same way, matched by name, from their per-call samples (the
summed samples of their sections): "MLP" over every block, with the verdict
of the sum. Pure functions of two sessions (no IREE): tests build them by
hand; `sectionmark.renderers.compare` reads profile JSON files for
`sm.compare` and writes the outputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Optional, Sequence

import numpy as np

from sectionmark import serialization
from sectionmark.errors import SectionmarkError
from sectionmark.section_path import SectionPath, format_path
from sectionmark.profiling import display
from sectionmark.profiling.components import components
from sectionmark.profiling.session import ProfileSession

COMPARISON_JSON_VERSION = 1
RESAMPLES = 2000
CONFIDENCE = 0.95
SEED = 0
MIN_CHANGE = 25.0  # percent: drift between runs of one module reached 23% (module docstring)

FASTER, SLOWER, NO_CHANGE = "faster", "slower", "no change"
CALLS, RUNS = "calls", "runs"
ONLY_IN_A, ONLY_IN_B = "only in A", "only in B"
NOT_RUN_IN_A, NOT_RUN_IN_B, NO_DISPATCHES = "not run in A", "not run in B", "no dispatches"


@dataclass(kw_only=True)
class Change:
    """The verdict on one section or component. Times are mean busy ns per call (inclusive, like the table's
    Busy/call)."""

    verdict: str  # faster, slower, no change, only in A/B, not run in A/B, no dispatches
    a_ns: Optional[float] = serialization.json_field(rounded=True, default=None)  # None: not in A
    b_ns: Optional[float] = serialization.json_field(rounded=True, default=None)  # None: not in B
    ratio: Optional[float] = None  # b_ns / a_ns; None when either is missing or 0
    low: Optional[float] = None  # the ratio's confidence interval (bootstrap percentiles)
    high: Optional[float] = None
    a_calls: int = 0  # per-call samples compared
    b_calls: int = 0
    basis: str = CALLS  # what the interval resampled: "calls" (of one run each) or "runs" (each run's time per call)

    @property
    def change_percent(self) -> Optional[float]:
        """(B/A - 1) in percent: +25.0 is 25% slower."""
        return (self.ratio - 1) * 100 if self.ratio is not None else None


@dataclass(kw_only=True)
class SectionChange(Change):
    """One section of the comparison."""

    JSON_PROPERTIES: ClassVar[tuple[str, ...]] = ("name", "change_percent")

    path: SectionPath

    @property
    def name(self) -> str:
        return format_path(self.path)


@dataclass(kw_only=True)
class ComponentChange(Change):
    """One component of the comparison: the sections of one name summed across blocks."""

    JSON_PROPERTIES: ClassVar[tuple[str, ...]] = ("change_percent",)

    name: str  # the sections' innermost name, or "(unmarked)"
    a_sections: int = 0  # sections summed in A (0: not in A)
    b_sections: int = 0


@dataclass
class Comparison:
    """Every section of A and B, in A's table order, then the sections only B has (in B's order); the same for
    the components (A's order: most time first)."""

    a: str  # labels: the files compared (or "A" / "B" for sessions)
    b: str
    resamples: int
    confidence: float
    seed: int
    min_change: float  # percent: the interval must lie beyond 1 +- this for "slower" / "faster"
    sections: list[SectionChange] = field(default_factory=list)
    components: list[ComponentChange] = field(default_factory=list)

    def slower_than(self, percent: float) -> list[Change]:
        """Sections, then components, judged slower whose ratio exceeds 1 + ``percent`` / 100 (what
        ``--fail-if-slower`` fails on)."""
        return [row for row in [*self.sections, *self.components]
                if row.verdict == SLOWER and row.ratio is not None and row.ratio > 1 + percent / 100]

    def to_json(self) -> dict[str, Any]:
        """Versioned JSON (docs/cli.md, `sectionmark compare --json`)."""
        return {"version": COMPARISON_JSON_VERSION, **serialization.to_json(self)}

    # ------------------------------------------------------------------ notebooks (repr: how many sections got slower or faster, which; inline: the tables)

    __repr__ = display.summary_repr
    _repr_pretty_ = display.pretty
    _repr_html_ = display.inline_html


def ratio_interval(a: np.ndarray, b: np.ndarray, resamples: int, confidence: float,
                   rng: np.random.Generator) -> tuple[float, float]:
    """Bootstrap percentile interval of mean(b) / mean(a): A's and B's values (per-call times, or each run's
    time per call) resampled independently.

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
    """The per-section and per-component (by name) comparison of ``b`` against ``a`` (see the module docstring).

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
    judge = _Judge(1 + min_change / 100, resamples, confidence, np.random.default_rng(seed))
    for label, session in zip(labels, (a, b)):
        _check_samples(label, session)
    sections = judge.rows(a.sections, b.sections, lambda row: row.path,
                          lambda row, verdict: SectionChange(path=row.path, verdict=verdict))
    components_a, components_b = components(a), components(b)
    in_a, in_b = ({row.name: len(row.sections) for row in rows} for rows in (components_a, components_b))
    component_changes = judge.rows(components_a, components_b, lambda row: row.name,
                                   lambda row, verdict: ComponentChange(name=row.name, verdict=verdict,
                                                                        a_sections=in_a.get(row.name, 0),
                                                                        b_sections=in_b.get(row.name, 0)))
    return Comparison(a=labels[0], b=labels[1], resamples=resamples, confidence=confidence, seed=seed,
                      min_change=min_change, sections=sections, components=component_changes)


@dataclass
class _Judge:
    """The verdicts of one comparison: rows of A and B matched by key, one seeded generator for all intervals."""

    factor: float  # 1 + min_change / 100
    resamples: int
    confidence: float
    rng: np.random.Generator

    def rows(self, rows_a: list, rows_b: list, key: Callable[[Any], Any],
             make: Callable[[Any, str], Change]) -> list:
        """One change per row of A (its order), then per row only B has; rows have ``samples`` and ``dispatched``."""
        by_key = {key(row): row for row in rows_b}
        keys_a = {key(row) for row in rows_a}
        changes = []
        for row in rows_a:
            other = by_key.get(key(row))
            change = make(row, ONLY_IN_A if other is None else NO_CHANGE)
            if other is None:
                change.a_ns = _mean(row.samples)
            else:
                self.judge(change, row, other)
            changes.append(change)
        for row in rows_b:
            if key(row) not in keys_a:
                change = make(row, ONLY_IN_B)
                change.b_ns = _mean(row.samples)
                changes.append(change)
        return changes

    def judge(self, change: Change, row_a: Any, row_b: Any) -> None:
        """Means, ratio, interval and verdict of a row present in both runs."""
        samples_a, samples_b = np.asarray(row_a.samples, float), np.asarray(row_b.samples, float)
        runs_a, runs_b = getattr(row_a, "runs", None), getattr(row_b, "runs", None)  # components have no runs
        change.basis = RUNS if runs_a is not None and runs_b is not None else CALLS
        values_a, values_b = ((np.asarray(runs_a.values_ns, float), np.asarray(runs_b.values_ns, float))
                              if change.basis == RUNS else (samples_a, samples_b))
        change.a_ns, change.b_ns = float(values_a.mean()), float(values_b.mean())
        change.a_calls, change.b_calls = len(samples_a), len(samples_b)
        ran_a, ran_b = row_a.dispatched and change.a_ns > 0, row_b.dispatched and change.b_ns > 0
        if not ran_a or not ran_b:  # dispatches of no measurable time count as not run: no ratio
            change.verdict = NO_DISPATCHES if ran_a == ran_b else NOT_RUN_IN_A if ran_b else NOT_RUN_IN_B
            return
        change.ratio = change.b_ns / change.a_ns
        change.low, change.high = ratio_interval(values_a, values_b, self.resamples, self.confidence, self.rng)
        change.verdict = (SLOWER if change.low > self.factor else FASTER if change.high * self.factor < 1
                          else NO_CHANGE)


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
