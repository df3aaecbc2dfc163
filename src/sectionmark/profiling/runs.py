"""Run-to-run variation: K fresh runs of the profiled tool summarised per section.

The calls of one run share its process: CPU frequency, cache and page
placement, where the workers landed and what else the machine ran at the
time shift all of them alike. The p50 / p95 of one run's calls therefore do
not say how much a figure moves when the tool runs again, which is what a
user needs to know before acting on a difference. ``runs=K`` (``--runs K``)
starts the tool K times and keeps, per section, its busy time per call in
each run (``busy_ns / calls``, inclusive, the table's Busy/call), their
median, and a distribution-free confidence interval of that median from
order statistics (`median_interval`, docs/profile-json.md#runs).

The other figures of a K-run profile (per-call percentiles, sites, call
time, timelines) are those of one run: the run whose total busy time per
call is the median of the K (`representative_run`), so that every figure of
the table still comes from one consistent, real measurement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Sequence

import numpy as np

from sectionmark.serialization import json_field

if TYPE_CHECKING:
    from sectionmark.profiling.session import ProfileSession

RUN_CONFIDENCE = 0.95  # the interval covers the median at least this often when the runs allow it (6 or more)


@dataclass
class RunSpread:
    """One figure (a section's busy ns per call) in each of K runs, their median and an interval of the median."""

    JSON_PROPERTIES: ClassVar[tuple[str, ...]] = ("coefficient_of_variation",)  # written for readers, not read

    values_ns: list[float] = json_field(rounded=True)  # per run, in run order
    median_ns: float = json_field(rounded=True)
    low_ns: float = json_field(rounded=True)  # the median's interval: two of the run values (order statistics)
    high_ns: float = json_field(rounded=True)
    confidence: float  # how often such an interval covers the true median (exact, for any distribution)

    @property
    def runs(self) -> int:
        return len(self.values_ns)

    @property
    def coefficient_of_variation(self) -> float:
        """Sample standard deviation / mean of the run values (0 when the mean is 0)."""
        values = np.asarray(self.values_ns, float)
        mean = float(values.mean())
        return float(values.std(ddof=1)) / mean if mean > 0 and len(values) > 1 else 0.0


def median_coverage(runs: int, rank: int) -> float:
    """P(x_(rank) <= median <= x_(runs + 1 - rank)) for ``runs`` independent values of any continuous distribution.

    Each value falls below the true median with probability 1/2, so the number
    below it is Binomial(runs, 1/2); the interval misses the median when fewer
    than ``rank`` values fall on one side: 1 - 2 * P(Binomial <= rank - 1).
    """
    below = sum(math.comb(runs, count) for count in range(rank)) / 2 ** runs
    return max(0.0, 1.0 - 2.0 * below)


def median_interval(values: Sequence[float], confidence: float = RUN_CONFIDENCE) -> tuple[float, float, float]:
    """(low, high, coverage): the narrowest order-statistic interval ``[x_(r), x_(K+1-r)]`` of the median of
    ``values`` whose coverage is at least ``confidence``; with too few runs for that, the widest one
    (min, max), whose smaller coverage is returned (5 runs: 93.75%, 3 runs: 75%)."""
    ordered = np.sort(np.asarray(values, float))
    runs, rank = len(ordered), 1
    while rank + 1 <= (runs + 1) // 2 and median_coverage(runs, rank + 1) >= confidence:
        rank += 1
    return float(ordered[rank - 1]), float(ordered[runs - rank]), median_coverage(runs, rank)


def run_spread(values: Sequence[float], confidence: float = RUN_CONFIDENCE) -> RunSpread:
    """The `RunSpread` of one figure's values over the runs (at least two)."""
    low, high, coverage = median_interval(values, confidence)
    return RunSpread(values_ns=[float(value) for value in values], median_ns=float(np.median(values)),
                     low_ns=low, high_ns=high, confidence=coverage)


def representative_run(sessions: Sequence["ProfileSession"]) -> int:
    """Index of the run whose total busy time per call is the median (the lower one of two for an even K)."""
    per_call = [session.total_ns / max(session.calls, 1) for session in sessions]
    return int(np.argsort(per_call, kind="stable")[(len(per_call) - 1) // 2])


def combine_runs(sessions: Sequence["ProfileSession"], confidence: float = RUN_CONFIDENCE) -> "ProfileSession":
    """One session for K runs of the same module and function: the representative run's figures, with every
    section's (and the total's) `RunSpread` over the runs. One run is returned as it is."""
    if len(sessions) == 1:
        return sessions[0]
    shown = representative_run(sessions)
    session = sessions[shown]
    # A section missing from a run's rows had no dispatch in it (its rows list the map's sections and the paths
    # of the compositions that ran): 0 busy there.
    busy = [{row.path: row.busy_ns for row in run.sections} for run in sessions]
    for row in session.sections:
        row.runs = run_spread([per_path.get(row.path, 0.0) / max(run.calls, 1)
                               for run, per_path in zip(sessions, busy)], confidence)
    session.total_runs = run_spread([run.total_ns / max(run.calls, 1) for run in sessions], confidence)
    session.runs, session.shown_run = len(sessions), shown + 1
    return session
