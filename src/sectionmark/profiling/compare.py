"""Compare two profiles section by section and component by component: time per call, B/A, whether it changed.

A difference is only called a change when the runs themselves say so. The
calls of one run share its process (CPU frequency, caches, where the workers
landed, what else the machine ran), so a drift between two runs shifts every
call of one of them alike: per-call samples cannot tell it from a change.
What the verdict rests on, best first (``Change.basis``):

* ``rounds`` — the two modules run alternately, A B A B ... in a random order
  per round (`sectionmark.workflows.interleave`), each round one profiled run
  of each: per section the paired ratios B/A of the rounds. The shown ratio is
  their median, the interval the distribution-free interval of that median
  from order statistics (`sectionmark.profiling.runs.median_interval`: a sign
  test over rounds; 10 rounds: their second lowest to second highest ratio,
  97.9%). A drift slower than a round hits both modules of the round.
* ``runs`` — two profiles of several runs each (``--runs K``): each run
  value divided by its run's scale (`sectionmark.profiling.run_scale`: where
  most leaf sections' times against A's agree, so that a load which slowed a
  whole run, every section alike, is taken out), then the ratios of every B
  run to every A run; the shown ratio is their median (the Hodges–Lehmann
  estimate on a log scale), the interval from the Mann–Whitney distribution
  (`shift_interval`; 3 runs each: the lowest to highest of the 9 ratios,
  90%); a verdict only where the median of the ratios as measured lies
  beyond the bound the same way (`agreed_verdict`). The whole runs' factor
  is the comparison's ``whole_run``. Rounds are judged as measured first,
  then, failing a verdict, scaled the same way (`_Judge.judge_rounds`).
  With fewer than 3 leaf sections there is no scale: the absolute ratios are
  judged beyond ``DRIFT_BOUND`` only ("within drift" inside it).
* ``calls`` — a profile of one run on either side: a bootstrap of the per-call
  samples (A and B resampled independently, seeded). It cannot see the drift
  between runs, so it is a verdict only beyond ``DRIFT_BOUND`` (a same-module
  drift measured on a loaded 2-core machine, docs/cli.md); inside it the
  verdict is "within drift", and the comparison's note says how to get one.

"slower" when the interval's low end exceeds 1 + bound / 100, "faster" when
its high end is below 1 / (1 + bound / 100), else "no change" (``Change.bound``:
what the basis cannot see). Over rounds ``min_change`` (10%): a real but tiny
difference, or a bias common to all rounds, is not called a change. Over
scaled runs ``RUNS_MIN_CHANGE`` (what is left of the drift between profiles
taken apart once the whole run's factor is out, measured by
benchmarks/bench_compare.py); ``min_change`` given replaces both. Over calls,
and over unscaled runs, ``DRIFT_BOUND``.

Sections are matched by path. A section declared in one profile only is
listed as such ("only in A" / "only in B"); one that ran no dispatch in
either run has nothing to compare ("no dispatches"), and one that ran in one
run only says so ("not run in A" / "not run in B"). Components (sections of
one name summed across blocks, `sectionmark.profiling.components`) are
judged the same way, matched by name, from their summed samples and run
values. Pure functions of two sessions (no IREE): tests build them by hand;
`sectionmark.renderers.compare` reads profile JSON files for `sm.compare` and
writes the outputs. Every input is checked first (`_section_figures`): a
damaged or hand-edited profile is one error line, never a figure.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional, Sequence

import numpy as np

from sectionmark import serialization
from sectionmark.errors import SectionmarkError
from sectionmark.section_path import SectionPath, format_path
from sectionmark.profiling import display
from sectionmark.profiling.compare_defaults import DRIFT_BOUND, MIN_CHANGE, RUNS_MIN_CHANGE
from sectionmark.profiling.components import components, outermost
from sectionmark.profiling.run_scale import leaf_paths, run_scales, scaled
from sectionmark.profiling.runs import median_interval
from sectionmark.profiling.section_time import MAX_SAMPLES, call_samples
from sectionmark.profiling.session import ProfileSession

COMPARISON_JSON_VERSION = 3  # 3: whole_run, unscaled_runs and each row's scaled (runs scaled by their whole-run factor)
RESAMPLES = 2000
RESAMPLE_BLOCK = 250  # resamples drawn at a time: at most 250 x MAX_SAMPLES indices in memory
CONFIDENCE = 0.95
SEED = 0
MAX_TIME_NS = 1e15  # a per-call time beyond 11.6 days is not a measurement
MAX_CALLS = 10**12  # nor are more calls than a microsecond each would make in 11.6 days
EXACT_RANK_LIMIT = 10_000  # runs_a x runs_b up to which the Mann-Whitney distribution is counted exactly

FASTER, SLOWER, NO_CHANGE, WITHIN_DRIFT = "faster", "slower", "no change", "within drift"
CALLS, RUNS, ROUNDS = "calls", "runs", "rounds"
ONLY_IN_A, ONLY_IN_B = "only in A", "only in B"
NOT_RUN_IN_A, NOT_RUN_IN_B, NO_DISPATCHES = "not run in A", "not run in B", "no dispatches"


@dataclass(kw_only=True)
class Change:
    """The verdict on one section or component. Times are busy ns per call (inclusive, like the table's Busy/call):
    the mean of the calls (basis ``calls``) or the median of the runs or rounds."""

    verdict: str  # faster, slower, no change, within drift, only in A/B, not run in A/B, no dispatches
    a_ns: Optional[float] = serialization.json_field(rounded=True, default=None)  # None: not in A
    b_ns: Optional[float] = serialization.json_field(rounded=True, default=None)  # None: not in B
    ratio: Optional[float] = None  # B/A (see basis); None when either is missing or 0
    low: Optional[float] = None  # the ratio's interval
    high: Optional[float] = None
    coverage: Optional[float] = None  # how often such an interval covers the true ratio (exact for rounds and runs)
    bound: Optional[float] = None  # percent: the change the interval had to lie beyond for a verdict
    a_calls: int = 0  # per-call samples in A (of the shown run)
    b_calls: int = 0
    a_runs: int = 1  # runs (or rounds) compared
    b_runs: int = 1
    basis: str = CALLS  # "rounds" (paired), "runs" or "calls": what the interval is over
    scaled: bool = False  # the interval is of run values divided by their runs' whole-run factors (`run_scale`)

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

    JSON_PROPERTIES: ClassVar[tuple[str, ...]] = ("note",)

    a: str  # labels: the files compared (or "A" / "B" for sessions)
    b: str
    resamples: int
    confidence: float
    seed: int
    min_change: Optional[float]  # percent an interval over rounds or runs must lie beyond (None: 10 and 25)
    drift_bound: float  # percent: the same for an interval over the calls of one run
    sections: list[SectionChange] = field(default_factory=list)
    components: list[ComponentChange] = field(default_factory=list)
    rounds: Optional[int] = None  # the modules were run alternately: rounds of one run each
    calls_per_round: Optional[int] = None
    # Over runs: B's runs as wholes against A's (their scales, `run_scale`): (ratio, low, high) of the Mann-Whitney
    # interval; None when the runs were not scaled (rounds, calls, or fewer than 3 leaf sections)
    whole_run: Optional[tuple[float, float, float]] = None
    unscaled_runs: bool = False  # rows over runs judged without a scale (fewer than 3 leaf sections)

    def slower_than(self, percent: float) -> list[Change]:
        """Sections, then components, judged slower whose ratio exceeds 1 + ``percent`` / 100 (what
        ``--fail-if-slower`` fails on)."""
        return [row for row in [*self.sections, *self.components]
                if row.verdict == SLOWER and row.ratio is not None and row.ratio > 1 + percent / 100]

    @property
    def note(self) -> Optional[str]:
        """What the verdicts cannot see (a whole run's change, rows within drift), and how to get more; None when
        there is nothing to say."""
        notes = []
        if self.whole_run is not None and not 1 / (1 + RUNS_MIN_CHANGE / 100) <= self.whole_run[0] <= (
                1 + RUNS_MIN_CHANGE / 100):
            ratio, low, high = self.whole_run
            notes.append(f"B's runs as wholes took {ratio:.2f}x A's ({low:.2f}-{high:.2f}), every section alike: a "
                         "change of the machine's load, or of most sections alike, which profiles taken apart cannot "
                         "tell apart; a verdict needs a section's change both against the rest of its run and as "
                         "measured (compare the modules to judge a change of everything)")
        if any(row.verdict == WITHIN_DRIFT for row in [*self.sections, *self.components]):
            why = ("fewer than 3 leaf sections, so no whole-run factor to take out" if self.unscaled_runs
                   else "one run on a side")
            notes.append(f"{why}: a change under {self.drift_bound:g}% cannot be told from the drift between runs "
                         "('within drift'); for a verdict " + ("" if self.unscaled_runs else
                                                                "profile both with --runs 3 or more, or ")
                         + "compare the modules themselves (sectionmark compare A.vmfb B.vmfb --input ...: "
                         "interleaved rounds)")
        return "; ".join(notes) or None

    def to_json(self) -> dict[str, Any]:
        """Versioned JSON (docs/cli.md, `sectionmark compare --json`)."""
        return {"version": COMPARISON_JSON_VERSION, **serialization.to_json(self)}

    # ------------------------------------------------------------------ notebooks (repr: how many sections got slower or faster, which; inline: the tables)

    __repr__ = display.summary_repr
    _repr_pretty_ = display.pretty
    _repr_html_ = display.inline_html


# ------------------------------------------------------------------------------------------- intervals


def paired_ratios(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Round by round B/A: inf where only B ran in a round, 1 where neither did."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(a > 0, b / np.where(a > 0, a, 1), np.where(b > 0, np.inf, 1.0))


def rank_sum_counts(m: int, n: int) -> np.ndarray:
    """How many of the C(m+n, m) orders of m A values and n B values give each Mann–Whitney count U = 0 .. m·n:
    the coefficients of the Gaussian binomial ∏_{i=1..m} (1 − q^(n+i)) / (1 − q^i), built one factor at a time
    (each partial product is a Gaussian binomial itself, so its coefficients stay whole and non-negative)."""
    size = m * n + m + 1
    counts = np.zeros(size)
    counts[0] = 1.0
    for i in range(1, m + 1):
        counts[n + i:] -= counts[: size - n - i].copy()  # times (1 - q^(n+i))
        padded = np.zeros(-(-size // i) * i)
        padded[:size] = counts
        counts = padded.reshape(-1, i).cumsum(axis=0).ravel()[:size]  # divided by (1 - q^i)
    return counts[: m * n + 1]


def shift_interval(a: np.ndarray, b: np.ndarray, confidence: float) -> tuple[float, float, float, float]:
    """(ratio, low, high, coverage) of B against A from unpaired values (each run's time per call): the median of
    the m·n ratios b_j / a_i and the interval [r_(k), r_(mn+1-k)] of the sorted ratios whose coverage,
    1 − 2·P(U ≤ k − 1) under the Mann–Whitney distribution, is at least ``confidence`` (exact up to
    ``EXACT_RANK_LIMIT`` pairs, normal beyond); too few runs for that: the widest, with its smaller coverage."""
    m, n = len(a), len(b)
    ratios = np.sort(paired_ratios(np.repeat(a, n), np.tile(b, m)))
    pairs = m * n
    if pairs <= EXACT_RANK_LIMIT:
        cdf = np.cumsum(rank_sum_counts(m, n))
        cdf /= cdf[-1]
        coverages = 1 - 2 * cdf[: (pairs + 1) // 2]
        rank = max(1, int(np.count_nonzero(coverages >= confidence)))
        coverage = float(coverages[rank - 1])
    else:
        spread = math.sqrt(pairs * (m + n + 1) / 12)
        rank = max(1, int(pairs / 2 - statistics.NormalDist().inv_cdf((1 + confidence) / 2) * spread))
        coverage = confidence
    return float(np.median(ratios)), float(ratios[rank - 1]), float(ratios[pairs - rank]), max(coverage, 0.0)


def bootstrap_interval(a: np.ndarray, b: np.ndarray, resamples: int, confidence: float,
                       rng: np.random.Generator) -> tuple[float, float]:
    """Bootstrap percentile interval of mean(b) / mean(a) from per-call samples, A's and B's resampled
    independently, in bounded memory: at most ``MAX_SAMPLES`` evenly spaced samples a side (as a profile keeps
    them, `call_samples`), drawn ``RESAMPLE_BLOCK`` resamples at a time.

    Resamples whose A mean is 0 (a section that ran in only some calls) are
    left out; none left gives the interval (inf, inf).
    """
    means_a, means_b = (_resampled_means(np.asarray(call_samples(values), float), resamples, rng) for values in (a, b))
    valid = means_a > 0
    if not valid.any():
        return float("inf"), float("inf")
    ratios = means_b[valid] / means_a[valid]
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return float(low), float(high)


def _resampled_means(values: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    means = np.empty(resamples)
    for start in range(0, resamples, RESAMPLE_BLOCK):
        block = min(RESAMPLE_BLOCK, resamples - start)
        means[start:start + block] = values[rng.integers(0, len(values), (block, len(values)))].mean(axis=1)
    return means


# ------------------------------------------------------------------------------------------- the comparison


@dataclass
class _Figures:
    """What one row of a profile brings to the comparison."""

    samples: np.ndarray  # per-call busy ns (checked)
    runs: Optional[np.ndarray]  # busy ns per call of each run or round; None for one run
    dispatched: bool
    size: int = 0  # sections summed (components)


def compare_sessions(a: ProfileSession, b: ProfileSession, *, labels: Sequence[str] = ("A", "B"),
                     resamples: int = RESAMPLES, confidence: float = CONFIDENCE, seed: int = SEED,
                     min_change: Optional[float] = None, drift_bound: float = DRIFT_BOUND,
                     paired: bool = False) -> Comparison:
    """The per-section and per-component (by name) comparison of ``b`` against ``a`` (see the module docstring).

    ``paired``: the two sessions' runs are rounds of one interleaved
    measurement, run i of A beside run i of B (`sectionmark.workflows.interleave`).
    """
    if resamples < 100:
        raise SectionmarkError(f"resamples must be at least 100, got {resamples}")
    if not 0 < confidence < 1:
        raise SectionmarkError(f"confidence must be between 0 and 1, got {confidence}")
    for name, percent in (("minimum change", min_change), ("drift bound", drift_bound)):
        if percent is not None and not 0 <= percent <= 1e6:
            raise SectionmarkError(f"the {name} must be a percentage from 0 to 1,000,000, got {percent}")
    figures = [_section_figures(label, session) for label, session in zip(labels, (a, b))]
    scales = _run_scales(*figures)
    judge = _Judge(min_change, drift_bound, resamples, confidence, np.random.default_rng(seed), paired, scales)
    sections = judge.rows(*figures, lambda path, verdict: SectionChange(path=path, verdict=verdict))
    component_figures = [_component_figures(session, rows) for session, rows in zip((a, b), figures)]
    component_changes = judge.rows(*component_figures, lambda name, verdict: ComponentChange(
        name=name, verdict=verdict, a_sections=_size(component_figures[0], name),
        b_sections=_size(component_figures[1], name)))
    return Comparison(a=labels[0], b=labels[1], resamples=resamples, confidence=confidence, seed=seed,
                      min_change=min_change, drift_bound=drift_bound, sections=sections, components=component_changes,
                      whole_run=None if scales is None or paired else shift_interval(*scales, confidence)[:3],
                      unscaled_runs=scales is None and any(row.basis == RUNS
                                                           for row in [*sections, *component_changes]))


def _run_scales(rows_a: dict[SectionPath, _Figures],
                rows_b: dict[SectionPath, _Figures]) -> Optional[tuple[np.ndarray, np.ndarray]]:
    """Each run's scale on both sides (`run_scale.run_scales` over A's leaf sections); None without runs on both
    sides or with too few leaves."""
    runs_a, runs_b = ({path: row.runs for path, row in rows.items() if row.runs is not None} for rows in (rows_a, rows_b))
    if not runs_a or not runs_b:
        return None
    return run_scales(runs_a, runs_b, leaf_paths(rows_a))


def _size(figures: dict[Any, _Figures], key: Any) -> int:
    return figures[key].size if key in figures else 0


@dataclass
class _Judge:
    """The verdicts of one comparison: rows of A and B matched by key, one seeded generator for all intervals."""

    min_change: Optional[float]
    drift_bound: float
    resamples: int
    confidence: float
    rng: np.random.Generator
    paired: bool
    scales: Optional[tuple[np.ndarray, np.ndarray]]  # each run's scale of A and of B (None: not scaled)

    def rows(self, rows_a: dict[Any, _Figures], rows_b: dict[Any, _Figures], make) -> list:
        """One change per row of A (its order), then per row only B has."""
        changes = []
        for key, row in rows_a.items():
            other = rows_b.get(key)
            change = make(key, ONLY_IN_A if other is None else NO_CHANGE)
            if other is None:
                change.a_ns, change.a_calls = float(row.samples.mean()), len(row.samples)
            else:
                self.judge(change, row, other)
            changes.append(change)
        for key, row in rows_b.items():
            if key not in rows_a:
                change = make(key, ONLY_IN_B)
                change.b_ns, change.b_calls = float(row.samples.mean()), len(row.samples)
                changes.append(change)
        return changes

    def judge(self, change: Change, row_a: _Figures, row_b: _Figures) -> None:
        """Times, ratio, interval and verdict of a row present in both profiles."""
        change.a_calls, change.b_calls = len(row_a.samples), len(row_b.samples)
        ran_a = row_a.dispatched and row_a.samples.max() > 0
        ran_b = row_b.dispatched and row_b.samples.max() > 0
        if row_a.runs is not None and row_b.runs is not None:
            change.a_runs, change.b_runs = len(row_a.runs), len(row_b.runs)
            change.a_ns, change.b_ns = float(np.median(row_a.runs)), float(np.median(row_b.runs))
            ran_a, ran_b = ran_a or row_a.runs.max() > 0, ran_b or row_b.runs.max() > 0
        else:
            change.a_ns, change.b_ns = float(row_a.samples.mean()), float(row_b.samples.mean())
        if not ran_a or not ran_b:  # dispatches of no measurable time count as not run: no ratio
            change.verdict = NO_DISPATCHES if ran_a == ran_b else NOT_RUN_IN_A if ran_b else NOT_RUN_IN_B
            return
        if row_a.runs is None or row_b.runs is None:
            change.basis, change.bound = CALLS, max(self.min_change or 0.0, self.drift_bound)
            change.ratio = change.b_ns / change.a_ns if change.a_ns > 0 else math.inf
            change.low, change.high = bootstrap_interval(row_a.samples, row_b.samples, self.resamples,
                                                         self.confidence, self.rng)
            change.coverage = self.confidence
        elif self.paired and len(row_a.runs) == len(row_b.runs):
            change.basis, change.bound = ROUNDS, MIN_CHANGE if self.min_change is None else self.min_change
            self.judge_rounds(change, row_a.runs, row_b.runs)
            return
        elif self.scales is not None:
            change.basis, change.bound = RUNS, RUNS_MIN_CHANGE if self.min_change is None else self.min_change
            change.ratio, change.low, change.high, change.coverage = shift_interval(
                scaled(row_a.runs, self.scales[0]), scaled(row_b.runs, self.scales[1]), self.confidence)
            change.scaled = True
            measured = shift_interval(row_a.runs, row_b.runs, self.confidence)[0]
            change.verdict = agreed_verdict(_verdict(change.low, change.high, change.bound), measured, change.bound) or (
                NO_CHANGE)
            return
        else:  # runs a whole load may have slowed alike: only beyond the drift bound
            change.basis, change.bound = RUNS, max(self.min_change or 0.0, self.drift_bound)
            change.ratio, change.low, change.high, change.coverage = shift_interval(row_a.runs, row_b.runs,
                                                                                    self.confidence)
        change.verdict = _verdict(change.low, change.high, change.bound) or WITHIN_DRIFT

    def judge_rounds(self, change: Change, runs_a: np.ndarray, runs_b: np.ndarray) -> None:
        """Over the rounds' paired ratios as measured; when those give no verdict and the runs have scales, over
        the paired ratios of the scaled runs (a drift between the two runs of one round taken out too), a verdict
        only where the measured median ratio lies beyond the bound the same way (`agreed_verdict`)."""
        measured = paired_ratios(runs_a, runs_b)
        change.ratio = float(np.median(measured))
        change.low, change.high, change.coverage = median_interval(measured, self.confidence)
        verdict = _verdict(change.low, change.high, change.bound)
        if verdict is None and self.scales is not None:
            ratios = paired_ratios(scaled(runs_a, self.scales[0]), scaled(runs_b, self.scales[1]))
            low, high, coverage = median_interval(ratios, self.confidence)
            verdict = agreed_verdict(_verdict(low, high, change.bound), change.ratio, change.bound)
            if verdict is not None:
                change.ratio, change.low, change.high, change.coverage = float(np.median(ratios)), low, high, coverage
                change.scaled = True
        change.verdict = verdict or NO_CHANGE


def _verdict(low: float, high: float, bound: float) -> Optional[str]:
    """"slower" when the interval lies above 1 + bound/100, "faster" when below its inverse, else None."""
    factor = 1 + bound / 100
    return SLOWER if low > factor else FASTER if high * factor < 1 else None


def agreed_verdict(verdict: Optional[str], measured_ratio: float, bound: float) -> Optional[str]:
    """A verdict over scaled runs, kept only where the ratio as measured (its median) lies beyond the bound the
    same way: a section whose time does not follow its run's (the first of a call, which also waits for the
    workers to wake) can look changed against the rest of its run while its own time did not move."""
    return verdict if verdict is not None and verdict == _verdict(measured_ratio, measured_ratio, bound) else None


def _section_figures(label: str, session: ProfileSession) -> dict[SectionPath, _Figures]:
    """Every section of a profile by path, its samples and run values checked (`checked_times`)."""
    if session.calls > MAX_CALLS:
        raise SectionmarkError(f"{label} claims more than {MAX_CALLS:.0e} measured calls: a damaged or edited profile")
    if not session.calls_known or session.calls < 2:
        raise SectionmarkError(f"{label} has {session.calls} call{'s' * (session.calls != 1)} that can be told apart: "
                               "a comparison needs per-call times of at least 2 calls (profile with -n 20)")
    expected = (min(session.calls, MAX_SAMPLES), session.calls)
    figures: dict[SectionPath, _Figures] = {}
    for row in session.sections:
        where = f"{label}: section {format_path(row.path)!r}"
        if row.path in figures:
            raise SectionmarkError(f"{where} is listed twice: a damaged or edited profile")
        if row.samples is None:
            raise SectionmarkError(f"{label} has no per-call samples (a profile JSON written before they were kept): "
                                   "profile or report it again")
        samples = checked_times(where, "per-call sample", row.samples)
        if not expected[0] <= len(samples) <= expected[1]:
            raise SectionmarkError(f"{where} has {len(samples)} per-call sample{'s' * (len(samples) != 1)} for "
                                   f"{session.calls} calls (a profile keeps one per call, at most {MAX_SAMPLES}): "
                                   "a damaged or edited profile")
        runs = None if row.runs is None else checked_times(where, "run value", row.runs.values_ns)
        if runs is not None and len(runs) < 2:
            runs = None
        figures[row.path] = _Figures(samples, runs, row.dispatched, 1)
    if len({len(row.samples) for row in figures.values()}) > 1:
        raise SectionmarkError(f"{label}: its sections hold samples of different calls: a damaged or edited profile")
    if len({len(row.runs) for row in figures.values() if row.runs is not None}) > 1:
        raise SectionmarkError(f"{label}: its sections hold values of different runs: a damaged or edited profile")
    return figures


def checked_times(where: str, what: str, values: Any) -> np.ndarray:
    """``values`` as float ns, each a time (finite, 0 to ``MAX_TIME_NS``), or one line naming the first that is not."""
    try:
        times = np.asarray(values, dtype=float)
    except (TypeError, ValueError, OverflowError):
        times = None
    if times is None or times.ndim != 1:
        raise SectionmarkError(f"{where}: its {what}s are not a list of numbers: a damaged or edited profile")
    bad = ~((times >= 0) & (times <= MAX_TIME_NS))  # NaN fails both
    if bad.any():
        raise SectionmarkError(f"{where} has a {what} of {times[bad][0]:g} ns: not a measured time (0 to "
                               f"{MAX_TIME_NS:g} ns)")
    return times


def _component_figures(session: ProfileSession, sections: dict[SectionPath, _Figures]) -> dict[str, _Figures]:
    """Per component (by name): its summed samples (`components`) and its outermost sections' run values summed
    run by run."""
    figures = {}
    for component in components(session):
        parts = [sections[path] for path in outermost(component.sections)]
        runs = None if any(part.runs is None for part in parts) else np.sum([part.runs for part in parts], axis=0)
        figures[component.name] = _Figures(np.asarray(component.samples, float), runs, component.dispatched,
                                           len(component.sections))
    return figures
