"""Whether a section got slower than its history: the verdict of the pytest plugin's gate and `sectionmark history`.

A figure here is a section's busy time per call in one fresh run of the
profiled tool (``prof.section(path).runs.values_ns`` of a ``runs=K``
profile, `sectionmark.profiling.runs`): the variation that matters between
two commits is the variation between runs (another process: CPU frequency,
caches, other load shift every call of a run alike), not between the calls
of one run, so the calls never enter the verdict.

The history is every run value recorded for the section before (several
test sessions of K runs each); the new values are the K runs of this
session. Each side gets the distribution-free interval of its median
(`median_interval`); the section is "slower" only when the new interval
lies wholly above the history's, by more than the threshold: new low >
history high x (1 + threshold). "faster" is the mirror image; anything
else is "no change".

Sessions days apart run under different load, and load slows a whole run:
every section alike (`sectionmark.profiling.run_scale`). So the sections of
one profile are judged together (`regression_verdicts`): each run value,
of the history and of the new runs, is divided by its run's scale (the
median over the leaf sections of their time against the history's), and
the rule above applies to those, with the threshold raised to 25% at least
(``RUNS_MIN_CHANGE``: what is left of the drift), and a verdict stands only
where the medians as measured differ beyond it the same way (a section whose
time does not follow its run's can look changed against the rest of it). A profile with fewer than
3 leaf sections has no scale: its absolute values are judged, and only a
change beyond the drift of whole runs (``DRIFT_BOUND``, 100%) can be slower. Pure functions of
numbers: tests build them by hand.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import numpy as np

from sectionmark.errors import SectionmarkError
from sectionmark.profiling.compare import DRIFT_BOUND, RUNS_MIN_CHANGE, agreed_verdict
from sectionmark.profiling.run_scale import leaf_paths, run_scales, scaled
from sectionmark.profiling.runs import median_interval
from sectionmark.section_path import SectionPath, decode_path

SLOWER, FASTER, NO_CHANGE, NO_HISTORY = "slower", "faster", "no change", "no history"


@dataclass(frozen=True)
class RegressionVerdict:
    """The new runs of one section against its history."""

    verdict: str  # slower, faster, no change, no history
    ratio: Optional[float]  # median(new) / median(history); None without history (or a history of 0)
    history: Optional[tuple[float, float]]  # the history median's interval (low, high) in ns; None: no history
    new: tuple[float, float]  # the new median's interval
    bound: float = 0.0  # percent the new interval had to lie beyond the history's
    scaled: bool = False  # the values were divided by their runs' scales (times at the history's whole-run speed)

    @property
    def change_percent(self) -> Optional[float]:
        return (self.ratio - 1) * 100 if self.ratio is not None else None


def regression_verdict(history: Sequence[float], new: Sequence[float], threshold_percent: float) -> RegressionVerdict:
    """Judge ``new`` run values against ``history`` run values (ns per call): slower only when the new median's
    interval lies above the history's by more than ``threshold_percent``."""
    if not new:
        raise SectionmarkError("no new run values to judge")
    new_low, new_high, _coverage = median_interval(new)
    if not history:
        return RegressionVerdict(NO_HISTORY, None, None, (new_low, new_high))
    low, high, _coverage = median_interval(history)
    factor = 1 + threshold_percent / 100
    median = float(np.median(history))
    ratio = float(np.median(new)) / median if median > 0 else None
    verdict = SLOWER if new_low > high * factor else FASTER if new_high * factor < low else NO_CHANGE
    return RegressionVerdict(verdict, ratio, (low, high), (new_low, new_high), threshold_percent)


def regression_verdicts(history: Mapping[str, Sequence[float]], new: Mapping[str, Sequence[float]],
                        thresholds: Mapping[str, float]) -> dict[str, RegressionVerdict]:
    """Every section of one profile (``new``: its run values per encoded path, "" the unmarked time) against its
    ``history`` (the run values recorded before, runs in the same order for every section), at its threshold
    (percent): over the runs scaled by their whole-run factor when the leaf sections allow one, beyond
    ``RUNS_MIN_CHANGE`` at least (what is left of the drift of runs taken apart, as `sectionmark compare` judges
    saved profiles), else over the absolute values beyond ``DRIFT_BOUND`` at least."""
    paths = {section: decode_path(section) if section else () for section in new}
    leaves = set(leaf_paths(paths.values()))
    scales = run_scales(history, new, [section for section, path in paths.items() if path in leaves])
    verdicts = {}
    for section, values in new.items():
        past = list(history.get(section, ()))
        if scales is not None and len(past) == len(scales[0]) and len(values) == len(scales[1]):
            verdict = regression_verdict(list(scaled(past, scales[0])), list(scaled(values, scales[1])),
                                         max(thresholds[section], RUNS_MIN_CHANGE))
            measured = float(np.median(values)) / float(np.median(past)) if np.median(past) > 0 else math.inf
            kept = agreed_verdict(verdict.verdict if verdict.verdict in (SLOWER, FASTER) else None, measured,
                                  verdict.bound)
            verdicts[section] = RegressionVerdict(kept or NO_CHANGE, verdict.ratio, verdict.history, verdict.new,
                                                  verdict.bound, scaled=True)
        else:
            verdicts[section] = regression_verdict(past, values, max(thresholds[section], DRIFT_BOUND))
    return verdicts


@dataclass(frozen=True)
class Gate:
    """``--sectionmark-fail SECTION:PCT%``: fail when a section (``*``: every named section) is judged slower by
    more than PCT percent."""

    path: Optional[SectionPath]  # None: any named section
    threshold_percent: float

    def applies_to(self, path: SectionPath) -> bool:
        return bool(path) if self.path is None else tuple(path) == self.path


def parse_gate(text: str) -> Gate:
    """``"Block 0/MLP:10%"``, ``"*:10%"`` (the ``%`` is optional); a malformed one is an error naming it."""
    section, separator, amount = text.strip().rpartition(":")
    try:
        threshold = float(amount.strip().removesuffix("%"))
    except ValueError:
        threshold = -1.0
    if not separator or not section.strip() or not 0 <= threshold <= 1e6:
        raise SectionmarkError(f"--sectionmark-fail {text!r}: expected SECTION:PERCENT%, e.g. 'Block 0/MLP:10%' or "
                               "'*:10%'")
    return Gate(None if section.strip() == "*" else decode_path(section.strip()), threshold)
