"""The rows of a ProfileSession: per-section and per-dispatch-site statistics (profile JSON ``sections``, ``sites``),
with the records they and the session hold (a section's traffic, the profiler's cost).

Plain data, written and read by `sectionmark.serialization`; how the numbers
are computed is in `sectionmark.profiling.section_time` and the session's
``build``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Iterable, Optional, Sequence

import numpy as np

from sectionmark.profiling.runs import RunSpread, median_interval
from sectionmark.readers.arrays import percentiles
from sectionmark.section_path import UNMARKED, SectionPath, format_path
from sectionmark.section_map import Binding
from sectionmark.serialization import json_field

if TYPE_CHECKING:
    from sectionmark.profiling.session import ProfileSession


@dataclass
class CallStats:
    """Distribution of a section's inclusive busy time over the measured calls."""

    mean_ns: float
    min_ns: float
    max_ns: float
    p50_ns: float
    p95_ns: float

    @classmethod
    def of(cls, per_call: np.ndarray) -> "CallStats":
        return cls.of_columns(per_call[:, None])[0]

    @classmethod
    def of_columns(cls, per_call: np.ndarray) -> list["CallStats"]:
        """The statistics of each column of ``per_call`` ([calls, columns]), all columns in one pass each."""
        stats = [cls(0.0, 0.0, 0.0, 0.0, 0.0) for _ in range(per_call.shape[1])]
        if not len(per_call):
            return stats
        columns = np.ascontiguousarray(per_call.T)  # each column's mean summed as one array's: the same bits
        # A column that never ran (every call 0: a map's section elsewhere, on another device) is all zeros.
        ran = np.flatnonzero(columns.any(axis=1))
        columns = columns[ran]
        p50, p95 = percentiles(columns, [50, 95])
        for column, values in zip(ran.tolist(), zip(columns.mean(axis=1), columns.min(axis=1), columns.max(axis=1),
                                                    p50, p95)):
            stats[column] = cls(*(float(value) for value in values))
        return stats


@dataclass
class Offsets:
    """Distribution over the measured calls of one time within the call (ns from the call's start)."""

    min: float
    p50: float
    max: float

    @classmethod
    def of(cls, per_call: np.ndarray) -> Optional["Offsets"]:
        """None when there is no call to describe (the section never ran): no made-up 0."""
        if not len(per_call):
            return None
        return cls(float(per_call.min()), float(percentiles(per_call, [50])[0]), float(per_call.max()))


@dataclass
class Traffic:
    """What dispatches moved and computed over the measured calls, from the kernel table's inputs.

    Each dispatch site's bytes (its bindings' exact slices, read and written)
    and FLOPs (the cost model's estimate) per execution, times its executions,
    split between sections by the site's weights, like its time. Sites whose
    slices have dynamic sizes are left out of every sum, their time included,
    so the rates are over the time of the dispatches counted; a site the cost
    model could not size (a copy's body) counts no FLOPs. The fields add up
    (`total`): a component's traffic is its sections' summed.
    """

    JSON_PROPERTIES: ClassVar[tuple[str, ...]] = ("bytes", "gb_per_s", "gflop_per_s", "intensity")

    time_ns: float = json_field(rounded=True)  # busy time of the sites counted
    read_bytes: float = json_field(rounded=True)
    written_bytes: float = json_field(rounded=True)
    flops: float = json_field(rounded=True)

    @property
    def bytes(self) -> float:
        return self.read_bytes + self.written_bytes

    @property
    def gb_per_s(self) -> Optional[float]:
        """Achieved bandwidth (bytes per ns = GB/s); None when no time was measured."""
        return self.bytes / self.time_ns if self.time_ns > 0 else None

    @property
    def gflop_per_s(self) -> Optional[float]:
        return self.flops / self.time_ns if self.time_ns > 0 else None

    @property
    def intensity(self) -> Optional[float]:
        """Arithmetic intensity, FLOPs per byte moved; None when nothing was moved."""
        return self.flops / self.bytes if self.bytes > 0 else None

    @classmethod
    def total(cls, parts: Iterable[Optional["Traffic"]]) -> Optional["Traffic"]:
        """The sum of ``parts`` (None ones left out); None when all are None."""
        known = [part for part in parts if part is not None]
        if not known:
            return None
        return cls(*(sum(getattr(part, name) for part in known)
                     for name in ("time_ns", "read_bytes", "written_bytes", "flops")))


@dataclass
class SectionStats:
    """One row of the report. ``path == ()`` is the "(unmarked)" row."""

    JSON_PROPERTIES: ClassVar[tuple[str, ...]] = ("name", "unmarked", "dispatched")

    path: SectionPath
    busy_ns: float = json_field(rounded=True)  # inclusive: this section and its nested sections
    exclusive_ns: float = json_field(rounded=True)  # this section alone
    shared_ns: float = json_field(rounded=True)  # part of exclusive_ns from dispatches fused with other sections
    wall_ns: float = json_field(rounded=True)  # inclusive part of the total wall time (apportioned like busy time)
    exclusive_wall_ns: float = json_field(rounded=True)  # this section alone
    calls: int  # measured calls in which the section ran
    dispatches: int  # dispatch events touching the section (inclusive)
    share: float  # busy_ns / total busy
    per_call: CallStats = json_field(rounded=True)
    # other section -> ns it took from the shared dispatches
    shared_with: dict[SectionPath, float] = json_field(rounded=True, entries=("path", "ns"), default_factory=dict)
    note: Optional[str] = None  # a declared section without dispatches: why it has none
    # CPU (local-task) tile data; None when the profile records no tiles (Vulkan, Tracy) or, for
    # utilization, the worker count is unknown. Files written before these fields read back as None.
    cpu_ns: Optional[float] = json_field(rounded=True, default=None)  # inclusive tile time across workers
    tiles: Optional[int] = None  # tiles of the dispatch events touching the section (inclusive, like dispatches)
    parallelism: Optional[float] = None  # cpu_ns / busy_ns: workers busy on average; None when nothing ran
    utilization: Optional[float] = None  # parallelism / the run's workers
    # inclusive busy ns of each measured call (at most MAX_SAMPLES, evenly spaced: call_samples), for
    # `sectionmark compare`; None in a file written before they were kept
    samples: Optional[list[float]] = json_field(rounded=True, default=None)
    # Where in the call the section runs: its first dispatch's start and its last dispatch's end, from the
    # call's start, over the calls it ran in (section_spans); None where it never ran, or in a file written
    # before they were kept.
    start_ns: Optional[Offsets] = json_field(rounded=True, default=None)
    end_ns: Optional[Offsets] = json_field(rounded=True, default=None)
    # What the section's dispatches moved and computed (section_traffic); None where none of its dispatches has
    # static sizes, or in a file written before it was kept.
    traffic: Optional[Traffic] = None
    # Bytes of the distinct tensors its dispatches touch per call (whole tensors); None when a size is dynamic.
    working_set_bytes: Optional[int] = None
    # Busy ns per call in each of the profile's runs, their median and its interval (sectionmark.profiling.runs);
    # None for a profile of one run (run-to-run variation not measured) or a file written before runs existed.
    runs: Optional[RunSpread] = None

    @property
    def name(self) -> str:
        return format_path(self.path)

    @property
    def leaf(self) -> str:
        """The innermost name (``MLP`` of ``Block 0 / MLP``); "(unmarked)" for the unmarked row."""
        return self.path[-1] if self.path else UNMARKED

    @property
    def unmarked(self) -> bool:
        return not self.path

    @property
    def depth(self) -> int:
        return max(len(self.path) - 1, 0)

    @property
    def dispatched(self) -> bool:
        """Whether any measured dispatch carried (part of) this section."""
        return self.dispatches > 0


@dataclass
class ProfilerCost:
    """What the profiler itself costs, from paired rounds: in each, one run of the same function, inputs and calls
    unprofiled and one profiled, in alternating order (so that a drift of the machine hits both kinds alike);
    iree-benchmark-module times each call, and a run's figure is its median measured call (warmup excluded).
    Each round's ratio profiled / unprofiled compares runs made moments apart; their median, with an
    order-statistic interval (`sectionmark.profiling.runs.median_interval`), is the cost. A profiled call records
    an event per dispatch: with dispatches of a few hundred nanoseconds that is a visible part of the call, which
    the section times include. An interval reaching down to 1 is no measurable cost, never a speed-up.

    A file written before the rounds holds one unprofiled and one profiled run (no ``ratios``): read back as
    such, without an interval."""

    JSON_PROPERTIES: ClassVar[tuple[str, ...]] = ("ratio", "measurable")

    profiled_ns: float = json_field(rounded=True)  # per call: the median over the rounds of each round's median call
    unprofiled_ns: float = json_field(rounded=True)  # the same, unprofiled
    ratios: list[float] = json_field(default_factory=list)  # profiled / unprofiled median call of each round, in order
    low: Optional[float] = None  # the interval of the median ratio: two of the ratios (order statistics)
    high: Optional[float] = None
    confidence: Optional[float] = None  # how often such an interval covers the true median ratio

    @classmethod
    def from_rounds(cls, profiled_ns: Sequence[float], unprofiled_ns: Sequence[float]) -> "ProfilerCost":
        """The cost of paired rounds: each round's median profiled and unprofiled call, in round order."""
        # 1 ns at least below: the tool's clock has no finer step, and a ratio stays finite (JSON has no infinity)
        ratios = [profiled / max(unprofiled, 1.0) for profiled, unprofiled in zip(profiled_ns, unprofiled_ns, strict=True)]
        low, high, confidence = median_interval(ratios)
        return cls(float(np.median(profiled_ns)), float(np.median(unprofiled_ns)), ratios, low, high, confidence)

    @property
    def rounds(self) -> int:
        return len(self.ratios)

    @property
    def ratio(self) -> float:
        """The median of the rounds' ratios (1.3: a profiled call takes 30% longer); of a file without rounds, its
        one profiled / unprofiled."""
        if self.ratios:
            return float(np.median(self.ratios))
        return self.profiled_ns / self.unprofiled_ns if self.unprofiled_ns else float("inf")

    @property
    def measurable(self) -> bool:
        """Whether the profiled calls were slower beyond doubt: the whole interval above 1 (False without one)."""
        return self.low is not None and self.low > 1.0


@dataclass
class SiteStats:
    """One dispatch site: where a dispatch was recorded, what it ran, and what it cost."""

    site: int
    key: str
    executable: Optional[str]
    sections: list[tuple[SectionPath, float]] = json_field(entries=("path", "weight"))  # [((), 1.0)] when unmarked
    workgroups: Optional[list[int]]
    binding_bytes: Optional[int]
    dispatches: int
    busy_ns: float = json_field(rounded=True)
    shared_executable: bool  # the same export function (key) also runs for another section
    bindings: list[Binding] = json_field(default_factory=list)  # tensors read/written (from the section map)
    flops: Optional[float] = None  # estimated FLOPs per execution (from the section map)
    rule: Optional[str] = None  # how the map weighed its sections: "cost", "op-count" or "root"; None: not in the map


@dataclass
class RunVariation:
    """What an earlier profile of several runs measured on this machine: coefficients of variation (sample
    standard deviation / mean) across its runs, of the total busy time per call and of each section's."""

    runs: int  # K, the runs it had
    total_cv: float
    median_section_cv: float
    worst_section_cv: float
    device: str
    workers: Optional[int]  # local-task's workers; None: another device
    module: Optional[str]  # the module's file name; None: compiled in that process
    measured_at: str  # UTC, ISO 8601 to the second

    @classmethod
    def of(cls, session: "ProfileSession") -> Optional["RunVariation"]:
        """The variation a profile of several runs measured; None for one run (or an unknown device)."""
        if session.total_runs is None or session.device is None:
            return None
        section_cvs = [row.runs.coefficient_of_variation for row in session.sections
                       if row.runs is not None and row.path and row.busy_ns > 0]
        if not section_cvs:
            return None
        return cls(runs=session.runs, total_cv=session.total_runs.coefficient_of_variation,
                   median_section_cv=float(np.median(section_cvs)), worst_section_cv=float(max(section_cvs)),
                   device=session.device, workers=session.workers, module=session.module,
                   measured_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))

    @property
    def key(self) -> str:
        return self.key_for(self.device, self.workers)

    @staticmethod
    def key_for(device: str, workers: Optional[int]) -> str:
        """The machine's variations are kept per device and local-task worker count."""
        return f"{device} workers={workers}" if workers is not None else device
