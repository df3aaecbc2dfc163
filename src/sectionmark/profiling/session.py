"""ProfileSession: per-section statistics of one profiled run, for every renderer.

How times are computed (docs/profile-json.md has the full story):

* busy time: the sum of dispatch durations (end - start on IREE's host clock);
  a fused dispatch is split between its sections by the section map's weights;
* wall time: the length of the union of all dispatch intervals, partitioned
  among the dispatches (where k dispatches overlap, each gets 1/k of that
  stretch) and each dispatch's part split between its sections like its busy
  time. Dispatches inside one barrier region run concurrently on local-task,
  so busy can exceed wall; section walls add up to the total wall, and no
  section's wall exceeds its busy time;
* inclusive time of a section includes its nested sections; exclusive time is
  what remains for the section itself;
* coverage: top-level sections + "(unmarked)" must add up to the total
  measured dispatch time and to the total wall time (checked to 0.1%);
* a declared section that owns no part of any measured dispatch keeps its row,
  with a note saying why (initializers only, another function, folded away);
* CPU time (local-task): each dispatch's summed tile time across workers, split
  between sections like its busy time; parallelism is CPU time / busy time
  (workers busy on average while the section's dispatches ran), utilization
  parallelism / the run's workers. A profile without tiles (Vulkan, Tracy)
  leaves them None: "not recorded", never a measured-looking 0;
* start and end: where in the call a section runs. Per measured call, the
  offset of the section's first dispatch start and of its last dispatch end
  from the call's start (its first queue operation, or its first dispatch when
  no queue operations were recorded); min / p50 / max over the calls it ran in.
  A section runs during every dispatch it has a share of, so a fused dispatch
  counts for each of its sections, and a parent's span covers its children's;
* traffic and working set: the bytes and FLOPs of the kernel table's sites,
  split between sections like their time, with the achieved GB/s, GFLOP/s and
  FLOPs per byte; the working set is the distinct whole tensors a section's
  dispatches touch in a call (`section_traffic`).

``build`` is a pipeline of small pure functions over numpy arrays (one row
per event, composition or section), because profiles can hold millions of
events; each is unit-tested on hand-built data in tests/test_session.py.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, Iterable, Optional, Union

import numpy as np

from sectionmark import serialization
from sectionmark.errors import SectionmarkError
from sectionmark.outputs import PathLike
from sectionmark.section_path import UNMARKED, SectionPath, format_path
from sectionmark.profiling.attribute import Attribution, Composition
from sectionmark.profiling.runs import RunSpread
from sectionmark.profiling.queue_time import (
    CallTime,
    DeviceMemory,
    call_time_and_memory,
    measured_call_starts,
    union_blocks,
)
from sectionmark.readers.event_model import native
from sectionmark.section_map import INITIALIZER_FUNCTION, Binding, SectionMap, Share
from sectionmark.serialization import json_field

PROFILE_JSON_VERSION = 2
COVERAGE_TOLERANCE = 1e-3
MAX_SAMPLES = 1000  # per-call samples kept per section (profile JSON ``samples``)
# A section whose only commands are fills / copies / updates: local-task times none of them individually.
UNTIMED_TRANSFERS_NOTE = "no dispatches: only fills/copies, not timed on CPU (in the call time's command-buffer gaps)"


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
        if not len(per_call):
            return cls(0.0, 0.0, 0.0, 0.0, 0.0)
        p50, p95 = np.percentile(per_call, [50, 95])
        return cls(float(per_call.mean()), float(per_call.min()), float(per_call.max()), float(p50), float(p95))


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
        return cls(float(per_call.min()), float(np.percentile(per_call, 50)), float(per_call.max()))


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
    """What the profiler itself costs: the median measured call (warmup excluded) as iree-benchmark-module
    timed each call, with the profiler on, and in an unprofiled run of the same function, inputs and calls
    made by the same ``profile``. A profiled call records an event per dispatch: with dispatches of a few
    hundred nanoseconds that is a visible part of the call, which the section times include."""

    JSON_PROPERTIES: ClassVar[tuple[str, ...]] = ("ratio",)

    profiled_ns: float = json_field(rounded=True)  # per call
    unprofiled_ns: float = json_field(rounded=True)  # per call

    @property
    def ratio(self) -> float:
        """Profiled / unprofiled time per call (1.3: a profiled call takes 30% longer)."""
        return self.profiled_ns / self.unprofiled_ns if self.unprofiled_ns else float("inf")


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


@dataclass(frozen=True)
class Weights:
    """How each composition's time is split into section columns.

    Rows are compositions, columns the section paths in report order plus a
    last column for "(unmarked)".
    """

    exclusive: np.ndarray  # [c, s]: fraction of composition c's time that is exclusive time of s
    inclusive: np.ndarray  # [c, s]: ... inclusive time of s (its own share and its descendants')
    member: np.ndarray  # [c, s]: s or a section nested in it has a share in c (even of weight 0)


@dataclass(frozen=True)
class CompositionSums:
    """Event data summed per composition (a composition is one distinct split of a dispatch)."""

    busy_by_call: np.ndarray  # [call, c]: summed durations
    wall: np.ndarray  # [c]: summed wall parts
    count: np.ndarray  # [c]: events
    tiles: Optional["TileSums"] = None  # CPU tile data; None when the profile records no tiles

    @property
    def busy(self) -> np.ndarray:
        return self.busy_by_call.sum(axis=0)


@dataclass
class ProfileSession:
    """The second core data model: a profiled run joined with its section map.

    Outputs are not made here: `render` and `save` look the format up in
    `sectionmark.renderers` when called, so the session imports no renderer
    and a new output needs no change here. ``table()`` and the ``save_*``
    methods are one-line aliases kept because they are the documented API
    (``print(prof.table())``, ``prof.save_tracy("run.tracy")``).
    """

    # The component view by name and the kernel table: written for readers, recomputed (not read) by from_json.
    JSON_PROPERTIES: ClassVar[tuple[str, ...]] = ("components", "kernels", "parallelism", "utilization")

    total_ns: int  # sum of all measured dispatch durations
    wall_ns: int  # union of all measured dispatch intervals
    unmarked_ns: float = json_field(rounded=True)
    calls: int  # measured calls (warmup excluded)
    warmup: int
    calls_known: bool
    sections: list[SectionStats]  # depth-first, parents before children; "(unmarked)" last
    sites: list[SiteStats]
    coverage_error: float  # |sections + unmarked - total| / total (busy time)
    function: Optional[str] = None
    weight_rule: str = "op-count"  # how fused dispatches were split: "cost", "op-count", or "mixed" (see split_rules)
    split_rules: dict[str, int] = json_field(default_factory=dict)  # sites split between sections, by rule
    # per-event data for timelines; None after from_json
    attribution: Optional[Attribution] = json_field(stored=False, default=None)
    call_time: Optional[CallTime] = None  # where the calls' time went beside dispatches (queue_time.py)
    memory: Optional[DeviceMemory] = None  # device memory during the calls (memory-events)
    cpu_ns: Optional[int] = None  # summed tile time of all measured dispatches; None: no tiles recorded
    tiles: Optional[int] = None  # summed tiles of all measured dispatches
    workers: Optional[int] = None  # local-task workers of the run (IREE's default topology); None: unknown
    # The run that made the profile (set by `sectionmark.profiling.profile`; None for a recorded profile):
    # the module's file name (None: compiled in this process), the IREE device, and the profiler's cost.
    module: Optional[str] = None
    device: Optional[str] = None
    profiler_cost: Optional[ProfilerCost] = None
    # Fresh runs of the tool behind this profile (sectionmark.profiling.runs): with more than one, every row's
    # ``runs`` and ``total_runs`` hold the figures of each run, and the other figures are those of run
    # ``shown_run`` (1-based: the run of median total busy time per call).
    runs: int = 1
    shown_run: Optional[int] = None
    total_runs: Optional[RunSpread] = None  # total busy ns per call in each run

    # ------------------------------------------------------------------ building

    @classmethod
    def build(cls, attribution: Attribution, section_map: SectionMap, function: Optional[str] = None,
              workers: Optional[int] = None) -> "ProfileSession":
        """``workers``: local-task's worker count during the run, for utilization (None: unknown)."""
        events = attribution.events
        if not len(events):
            raise SectionmarkError(
                "the profile contains no dispatch events (did the function run any dispatches, "
                "and was host-execution profiling on?)"
            )
        compositions = attribution.compositions
        sums = event_sums(attribution)
        if sums.disjoint:  # each event's wall part is its whole duration: no sweep needed
            wall, total_wall = sums.busy, sums.total_ns
        else:
            starts, ends = events["start_ns"].astype(np.int64), events["end_ns"].astype(np.int64)
            composition = _slot_compositions(attribution)[attribution.event_slots]
            wall = np.bincount(composition, weights=wall_parts(starts, ends), minlength=len(compositions))
            total_wall = _union_length(starts, ends)

        paths = section_paths(section_map.sections, compositions)
        weights = weight_matrices(compositions, paths)
        tiles = sums.tiles
        rows = section_rows(paths, compositions, weights, CompositionSums(sums.busy_by_call, wall, sums.count, tiles),
                            workers)
        # A call's first dispatch is the first of its compositions' first dispatches.
        starts_of_calls = call_starts(sums.first_start.min(axis=1, initial=np.iinfo(np.int64).max),
                                      measured_call_starts(attribution.queue_spans, attribution.calls))
        for row, start, end in zip(rows, *section_spans(sums.first_start, sums.last_end, starts_of_calls,
                                                        weights.member)):
            row.start_ns, row.end_ns = start, end
        profiled = _profiled_functions(attribution, section_map, function)
        for row in rows[:-1]:
            if not row.dispatched:
                row.note = no_dispatch_note(row.path, section_map, profiled)

        total_busy = float(sums.total_ns)
        top_level = [row for row in rows if len(row.path) == 1] + [rows[-1]]
        covered_busy, covered_wall = sum(row.busy_ns for row in top_level), sum(row.wall_ns for row in top_level)
        coverage_error = _relative_error(covered_busy, total_busy)
        if max(coverage_error, _relative_error(covered_wall, total_wall)) > COVERAGE_TOLERANCE:
            raise SectionmarkError(
                f"internal error: sections cover {covered_busy:.0f} ns of {total_busy:.0f} ns busy "
                f"and {covered_wall:.0f} ns of {total_wall} ns wall dispatch time"
            )
        timing, memory = call_time_and_memory(events["start_ns"], events["end_ns"], attribution.queue_spans,
                                              attribution.memory, attribution.calls)
        sites = _sites(attribution, section_map, sums)
        for row, traffic, working_set in zip(rows, *section_traffic(sites, paths)):
            row.traffic, row.working_set_bytes = traffic, working_set
        split_rules = Counter(site.rule for site in sites if len(site.sections) > 1 and site.rule)
        return cls(
            total_ns=sums.total_ns,
            wall_ns=total_wall,
            unmarked_ns=rows[-1].busy_ns,
            calls=attribution.calls,
            warmup=attribution.warmup,
            calls_known=attribution.calls_known,
            sections=rows,
            sites=sites,
            coverage_error=coverage_error,
            function=function,
            weight_rule=_weight_rule(split_rules, section_map.weight_rule),
            split_rules=dict(sorted(split_rules.items())),
            attribution=attribution,
            call_time=timing,
            memory=memory,
            cpu_ns=tiles.total_ns if tiles else None,
            tiles=tiles.total_tiles if tiles else None,
            workers=workers,
        )

    # ------------------------------------------------------------------ views

    @property
    def section_rows(self) -> list[SectionStats]:
        """Named sections, without the "(unmarked)" row."""
        return [row for row in self.sections if row.path]

    @property
    def unmarked(self) -> SectionStats:
        return self.sections[-1]

    @property
    def parallelism(self) -> Optional[float]:
        """Workers busy on average while any dispatch ran: CPU time / the dispatches' union (None: no tiles)."""
        return self.cpu_ns / self.wall_ns if self.cpu_ns is not None and self.wall_ns else None

    @property
    def utilization(self) -> Optional[float]:
        """``parallelism`` / the run's workers (None when either is unknown)."""
        parallelism = self.parallelism
        return parallelism / self.workers if parallelism is not None and self.workers else None

    def section(self, path: SectionPath) -> SectionStats:
        for row in self.sections:
            if row.path == tuple(path):
                return row
        raise KeyError(path)

    def components(self, by: str = "name") -> list:
        """Sections of one name summed across repeated blocks (or one path pattern): see
        `sectionmark.profiling.components`."""
        from sectionmark.profiling.components import components

        return components(self, by)

    # ------------------------------------------------------------------ outputs

    def render(self, format: str, **options: Any) -> Union[str, bytes]:
        """This profile in an output format by name (``sectionmark.renderers.RENDERERS``): text or bytes.

        ``options`` go to the renderer (``width`` of the table, ``title`` of the chart).
        """
        from sectionmark import renderers

        return renderers.get(format).render(self, **options)

    def save(self, path: PathLike, format: Optional[str] = None, *, inputs: Iterable[PathLike] = (), **options: Any) -> Path:
        """Write this profile to ``path`` in ``format`` (default: from the suffix: .json, .csv,
        .perfetto.json, .tracy, .png, .txt), all at once, never onto one of ``inputs``."""
        from sectionmark import renderers

        return renderers.save(self, path, format, inputs=inputs, **options)

    def table(self) -> str:
        """The console table as text."""
        return self.render("table")

    def save_json(self, path: PathLike) -> Path:
        return self.save(path, "json")

    def save_csv(self, path: PathLike) -> Path:
        return self.save(path, "csv")

    def save_perfetto(self, path: PathLike) -> Path:
        """Chrome/Perfetto JSON trace: section tracks enclosing dispatch slices."""
        return self.save(path, "perfetto")

    def save_tracy(self, path: PathLike) -> Path:
        """A real .tracy capture of the profiled timeline (needs IREE's tracing runtime)."""
        return self.save(path, "tracy")

    def save_chart(self, path: PathLike) -> Path:
        """PNG bar chart of the section breakdown (to exactly ``path``, whatever its suffix)."""
        return self.save(path, "chart")

    def save_timeline(self, path: PathLike) -> Path:
        """PNG timeline of where in the call each section runs (to exactly ``path``, whatever its suffix)."""
        return self.save(path, "timeline")

    def kernels(self) -> list:
        """One row per dispatch site in execution order: shapes, bytes, FLOPs, rates (sectionmark.profiling.kernels)."""
        from sectionmark.profiling.kernels import kernels

        return kernels(self)

    def save_graph(self, path: PathLike) -> Path:
        """The read/write graph of the dispatches: .dot, .svg (needs graphviz) or .html (sectionmark.renderers.graph)."""
        return self.save(path, "graph")

    # ------------------------------------------------------------------ JSON

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable, versioned dict (schema: docs/profile-json.md), derived from the dataclasses."""
        return {"version": PROFILE_JSON_VERSION, **serialization.to_json(self)}

    @classmethod
    def from_json(cls, data: Any) -> "ProfileSession":
        """Rebuild the statistics (not the per-event data) from :meth:`to_json` output, checking every value."""
        try:
            session = serialization.from_versioned_json(
                cls, data, version=PROFILE_JSON_VERSION, document="profile JSON", root="profile",
                advice="run `sectionmark report` on the .ireeprof again")
        except serialization.SchemaError as error:
            raise SectionmarkError(str(error)) from None
        if not session.sections or not session.sections[-1].unmarked:
            raise SectionmarkError("malformed sectionmark profile JSON: the last section row must be the unmarked row")
        return session


def section_paths(declared: Iterable[SectionPath], compositions: Iterable[Composition]) -> list[SectionPath]:
    """Report order of the section columns: declared paths, then any that only appear in
    compositions, each with its parents, depth first (a parent right before its children)."""
    ordered: dict[SectionPath, None] = {}
    for path in [*declared, *(p for parts in compositions for p, _w in parts if p)]:
        for depth in range(1, len(path) + 1):
            ordered.setdefault(tuple(path[:depth]), None)
    return _depth_first(list(ordered))


def weight_matrices(compositions: list[Composition], paths: list[SectionPath]) -> Weights:
    """Per composition, the fraction of its time that goes to each section column.

    A share of ``(P, C)`` with weight w adds w to the exclusive column of
    ``(P, C)`` and to the inclusive columns of ``(P,)`` and ``(P, C)``; a share
    of ``()`` goes to the last, unmarked column. Every row of ``exclusive``
    sums to 1, so any time split with it is neither lost nor doubled.
    """
    column = {path: index for index, path in enumerate(paths)}
    unmarked = len(paths)
    exclusive = np.zeros((len(compositions), len(paths) + 1))
    inclusive = np.zeros_like(exclusive)
    member = np.zeros(exclusive.shape, bool)
    for c, parts in enumerate(compositions):
        for path, weight in parts:
            columns = [column[path[:depth]] for depth in range(1, len(path) + 1)] if path else [unmarked]
            exclusive[c, columns[-1]] += weight
            inclusive[c, columns] += weight
            member[c, columns] = True
    return Weights(exclusive, inclusive, member)


def wall_parts(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Each interval's part of the length of the union of all intervals ``[start, end)``.

    The boundaries cut time into elementary segments; a segment in which k
    intervals are active gives 1/k of its length to each of them, so the parts
    add up to the union's length and no part exceeds its interval's length.
    Vectorised (sort, cumulative sums) for millions of events: a prefix sum of
    length/k over the segments gives each interval's part as
    ``prefix[end] - prefix[start]``.
    """
    starts, ends = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
    if not len(starts):
        return np.zeros(0)
    durations = (ends - starts).astype(np.float64)
    if (starts[1:] >= ends[:-1]).all() and (ends >= starts).all() and ends[-1] - starts[0] < 1 << 53:
        # In order, none overlapping: every part is its whole interval; the sums below are of whole
        # numbers under 2**53, so exact, and would give the same.
        return durations
    values = np.concatenate([starts, ends])
    order = np.argsort(values, kind="stable")  # near-linear: starts and ends are each (nearly) sorted already
    ordered = values[order]
    new = np.concatenate([[True], ordered[1:] != ordered[:-1]])
    boundaries, index = ordered[new], np.empty(len(values), np.int64)
    index[order] = np.cumsum(new) - 1  # each value's position among the boundaries
    first, last = index[: len(starts)], index[len(starts):]
    change = np.bincount(first, minlength=len(boundaries)) - np.bincount(last, minlength=len(boundaries))
    active = np.cumsum(change)[:-1]  # intervals covering segment [boundaries[i], boundaries[i + 1])
    lengths = np.diff(boundaries).astype(np.float64)
    per_interval = np.divide(lengths, active, out=np.zeros_like(lengths), where=active > 0)
    prefix = np.concatenate([[0.0], np.cumsum(per_interval)])
    # Clipped to [0, duration] against rounding in the prefix sums: keeps wall <= busy exact per event.
    return np.clip(prefix[last] - prefix[first], 0.0, durations)


@dataclass
class EventSums:
    """Every event's duration summed per (call, composition), per composition and per slot, in event order
    (as ``np.bincount`` sums), and counted; one pass over the events."""

    busy_by_call: np.ndarray  # [calls, compositions]: summed durations (float64)
    busy: np.ndarray  # [compositions]: summed durations
    count: np.ndarray  # [compositions]: events
    slot_busy: np.ndarray  # [slots]: summed durations
    slot_count: np.ndarray  # [slots]: events
    total_ns: int  # all durations
    disjoint: bool  # in start order and none overlapping: every event's wall part is its duration (wall_parts)
    tiles: Optional["TileSums"]  # CPU tile data per composition; None when no event has tiles (tile_sums)
    # [calls, compositions]: the first start and the last end of the events of each (call, composition); int64's
    # maximum and minimum where none ran (composition_extents)
    first_start: np.ndarray
    last_end: np.ndarray


def event_sums(attribution: Attribution) -> EventSums:
    """The sums of ``attribution``'s events (in C when the extension is built, else numpy: the same numbers).

    The C pass makes no temporary the size of the events: what the session
    keeps of them is one value per composition, slot, or (call, composition).
    """
    events, slots = attribution.events, len(attribution.slots)
    slot_composition = _slot_compositions(attribution)
    calls, compositions = max(attribution.calls, 1), len(attribution.compositions)
    native_passes = native()
    if native_passes is not None:
        sums = EventSums(np.zeros((calls, compositions)), np.zeros(compositions), np.zeros(compositions, np.int64),
                         np.zeros(slots), np.zeros(slots, np.int64), 0, False,
                         TileSums(np.zeros(compositions), np.zeros(compositions), 0, 0),
                         np.full((calls, compositions), np.iinfo(np.int64).max, np.int64),
                         np.full((calls, compositions), np.iinfo(np.int64).min, np.int64))
        sums.total_ns, sums.disjoint, tile_ns, tiles, any_tiles = native_passes.event_sums(
            np.ascontiguousarray(events), np.ascontiguousarray(attribution.event_slots, np.int32),
            np.ascontiguousarray(attribution.event_calls, np.int32), slot_composition, calls, sums.busy_by_call,
            sums.busy, sums.count, sums.slot_busy, sums.slot_count, sums.tiles.cpu, sums.tiles.tiles,
            sums.first_start, sums.last_end)
        sums.tiles = replace(sums.tiles, total_ns=tile_ns, total_tiles=tiles) if any_tiles else None
        return sums
    starts, ends, slot = events["start_ns"].astype(np.int64), events["end_ns"].astype(np.int64), attribution.event_slots
    duration = (ends - starts).astype(np.float64)
    composition = slot_composition[slot]
    call = np.minimum(attribution.event_calls, calls - 1).astype(np.int64)
    disjoint = bool(len(starts) == 0 or ((starts[1:] >= ends[:-1]).all() and (ends >= starts).all()
                                          and ends[-1] - starts[0] < 1 << 53))
    return EventSums(
        busy_by_call=busy_by_call(composition, call, duration, calls, compositions),
        busy=np.bincount(composition, weights=duration, minlength=compositions),
        count=np.bincount(composition, minlength=compositions),
        slot_busy=np.bincount(slot, weights=duration, minlength=slots),
        slot_count=np.bincount(slot, minlength=slots),
        total_ns=int((ends - starts).sum()),
        disjoint=disjoint,
        tiles=tile_sums(events, composition, compositions),
        **dict(zip(("first_start", "last_end"), composition_extents(starts, ends, composition, call, calls,
                                                                    compositions))),
    )


def busy_by_call(composition: np.ndarray, call: np.ndarray, duration: np.ndarray, calls: int, compositions: int) -> np.ndarray:
    """[calls, compositions]: summed event durations."""
    flat = np.bincount(call * compositions + composition, weights=duration, minlength=calls * compositions)
    return flat.reshape(calls, compositions)


@dataclass(frozen=True)
class TileSums:
    """CPU tile data of the measured events per composition (local-task records it per dispatch)."""

    cpu: np.ndarray  # [c]: summed tile time across workers (ns)
    tiles: np.ndarray  # [c]: summed tile counts
    total_ns: int  # all events' tile time, exactly
    total_tiles: int


def tile_sums(events: np.ndarray, composition: np.ndarray, compositions: int) -> Optional[TileSums]:
    """Tile time and tiles summed per composition (``composition``: each event's); None when no event has tiles.

    Every dispatch that runs workgroups on local-task has at least one tile, so
    a profile whose events all have none did not record tiles (Vulkan, a Tracy
    capture): its CPU columns are "not recorded", not 0.
    """
    counts = events["tile_count"]
    if not len(events) or not counts.any():
        return None
    tile_ns = events["tile_ns"]
    return TileSums(
        cpu=np.bincount(composition, weights=tile_ns.astype(np.float64), minlength=compositions),
        tiles=np.bincount(composition, weights=counts.astype(np.float64), minlength=compositions),
        total_ns=int(tile_ns.sum(dtype=np.uint64)),
        total_tiles=int(counts.sum(dtype=np.uint64)),
    )


def shared_time(
    compositions: list[Composition], busy: np.ndarray, paths: list[SectionPath]
) -> tuple[np.ndarray, list[dict[SectionPath, float]]]:
    """Per column: exclusive busy time from compositions of several sections, and who got the rest.

    ``busy`` is the summed busy time per composition. Returns the shared time
    of each column (last: unmarked) and, per column, the other paths of those
    compositions with the time each of them received.
    """
    column = {path: index for index, path in enumerate(paths)}
    shared = np.zeros(len(paths) + 1)
    shared_with: list[dict[SectionPath, float]] = [{} for _ in range(len(paths) + 1)]
    for c, parts in enumerate(compositions):
        if len(parts) < 2:
            continue
        for path, weight in parts:
            index = column[path] if path else len(paths)
            shared[index] += busy[c] * weight
            for other, other_weight in parts:
                if other != path:
                    shared_with[index][other] = shared_with[index].get(other, 0.0) + busy[c] * other_weight
    return shared, shared_with


def section_rows(
    paths: list[SectionPath], compositions: list[Composition], weights: Weights, sums: CompositionSums,
    workers: Optional[int] = None,
) -> list[SectionStats]:
    """One row per section column, then the "(unmarked)" row: busy, wall and CPU time split by the same weights.

    Parallelism divides CPU time by busy time, not by the apportioned wall
    time: a dispatch's tiles run inside its own interval on at most
    ``workers`` threads, so CPU / busy never exceeds the workers, while a
    dispatch overlapping another gets only part of its interval as wall time.
    """
    busy = sums.busy
    per_call_inclusive = sums.busy_by_call @ weights.inclusive  # calls x columns
    inclusive, exclusive = busy @ weights.inclusive, busy @ weights.exclusive
    inclusive_wall, exclusive_wall = sums.wall @ weights.inclusive, sums.wall @ weights.exclusive
    dispatches = sums.count @ weights.member
    shared, shared_with = shared_time(compositions, busy, paths)
    total = float(busy.sum())
    cpu = sums.tiles.cpu @ weights.inclusive if sums.tiles else None
    tiles = sums.tiles.tiles @ weights.member if sums.tiles else None
    rows = [
        SectionStats(
            path=path,
            busy_ns=float(inclusive[s]),
            exclusive_ns=float(exclusive[s]),
            shared_ns=float(shared[s]),
            wall_ns=float(inclusive_wall[s]),
            exclusive_wall_ns=float(exclusive_wall[s]),
            calls=int((per_call_inclusive[:, s] > 0).sum()),
            dispatches=int(dispatches[s]),
            share=float(inclusive[s] / total) if total else 0.0,
            per_call=CallStats.of(per_call_inclusive[:, s]),
            shared_with=shared_with[s],
            samples=call_samples(per_call_inclusive[:, s]),
        )
        for s, path in enumerate([*paths, ()])
    ]
    if cpu is not None and tiles is not None:
        for s, row in enumerate(rows):
            row.cpu_ns, row.tiles = float(cpu[s]), int(round(tiles[s]))
            row.parallelism = row.cpu_ns / row.busy_ns if row.busy_ns > 0 else None
            row.utilization = row.parallelism / workers if row.parallelism is not None and workers else None
    return rows


def call_samples(per_call: np.ndarray, limit: int = MAX_SAMPLES) -> list[float]:
    """The per-call values a comparison resamples: all of them, or ``limit`` evenly spaced calls (first and
    last included) when there are more. Evenly spaced rather than random: the same profile always keeps the
    same calls, and a drift over the run stays represented."""
    if len(per_call) > limit:
        per_call = per_call[np.linspace(0, len(per_call) - 1, limit).round().astype(np.int64)]
    return per_call.tolist()


def per_call_inclusive(attribution: Attribution, paths: list[SectionPath]) -> np.ndarray:
    """[calls, sections + unmarked]: each measured call's inclusive busy time per section column.

    The same split as the rows' ``per_call`` statistics, kept as a matrix for
    views that sum sections (`sectionmark.profiling.components`).
    """
    return event_sums(attribution).busy_by_call @ weight_matrices(attribution.compositions, paths).inclusive


def section_traffic(sites: list[SiteStats], paths: list[SectionPath]) -> tuple[list[Optional[Traffic]],
                                                                              list[Optional[int]]]:
    """Per section column (last: unmarked), its `Traffic` and its working set per call.

    A site counts when every binding's bytes are known (static slices). Its
    bytes, FLOPs and time go to the columns by the site's inclusive weights
    (`weight_matrices`, as its time in the rows); its tensors to the working set
    of every column with a share in it (even of weight 0), each distinct tensor
    once, whole (``tensor_shape``), so a section touching a slice of a weight
    counts the weight. A column without a counted site gets None for both; a
    tensor of dynamic shape or unknown element size makes that working set None.
    """
    sized = [site for site in sites if site.bindings and all(
        binding.read_bytes is not None and binding.written_bytes is not None for binding in site.bindings)]
    columns = len(paths) + 1
    if not sized:
        return [None] * columns, [None] * columns
    weights = weight_matrices([site.sections for site in sized], paths)
    executions = np.array([site.dispatches for site in sized], np.float64)
    per_site = np.array([
        [site.busy_ns for site in sized],
        [sum(b.read_bytes for b in site.bindings) for site in sized] * executions,
        [sum(b.written_bytes for b in site.bindings) for site in sized] * executions,
        [site.flops or 0.0 for site in sized] * executions,
    ])
    sums = per_site @ weights.inclusive  # [time, read, written, flops] x columns
    traffic: list[Optional[Traffic]] = []
    working_sets: list[Optional[int]] = []
    for column in range(columns):
        members = np.flatnonzero(weights.member[:, column])
        if not len(members):
            traffic.append(None)
            working_sets.append(None)
            continue
        traffic.append(Traffic(*(float(value) for value in sums[:, column])))
        sizes = {binding.tensor: tensor_bytes(binding) for index in members for binding in sized[index].bindings}
        working_sets.append(None if None in sizes.values() else sum(sizes.values()))
    return traffic, working_sets


def tensor_bytes(binding: Binding) -> Optional[int]:
    """The whole bound tensor's bytes (``tensor_shape`` x its element's), None when a dimension is dynamic or the
    element type has no bit width (``f32``: 4, ``bf16``: 2, ``i1``: 1 byte, as IREE stores it)."""
    bits = re.search(r"(\d+)$", binding.dtype)
    if bits is None or any(size < 0 for size in binding.tensor_shape):
        return None
    return int(np.prod(binding.tensor_shape, dtype=np.int64)) * -(-int(bits.group(1)) // 8)


def first_dispatch_starts(starts: np.ndarray, call: np.ndarray, calls: int,
                          queue_starts: Optional[np.ndarray] = None) -> np.ndarray:
    """Each call's start: its first dispatch's start, or its first queue operation's when that is earlier
    (``queue_starts``: None when the profile has none). A section's offsets count from here, so a section
    that runs first starts at 0 without queue operations and after the call's allocations and copies with
    them. A call without dispatches gets int64's maximum (no section ran in it)."""
    first = np.full(calls, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first, call, starts.astype(np.int64))
    return call_starts(first, queue_starts)


def call_starts(first_dispatch: np.ndarray, queue_starts: Optional[np.ndarray]) -> np.ndarray:
    """Each call's start (`first_dispatch_starts`) from its first dispatch's start (int64)."""
    return first_dispatch if queue_starts is None else np.minimum(first_dispatch, queue_starts.astype(np.int64))


def composition_extents(starts: np.ndarray, ends: np.ndarray, composition: np.ndarray, call: np.ndarray, calls: int,
                        compositions: int) -> tuple[np.ndarray, np.ndarray]:
    """[calls, compositions]: the first start and the last end of each (call, composition)'s events (int64's
    maximum and minimum where none ran)."""
    flat = call.astype(np.int64) * compositions + composition
    first = np.full(calls * compositions, np.iinfo(np.int64).max, np.int64)
    last = np.full(calls * compositions, np.iinfo(np.int64).min, np.int64)
    np.minimum.at(first, flat, starts.astype(np.int64))
    np.maximum.at(last, flat, ends.astype(np.int64))
    return first.reshape(calls, compositions), last.reshape(calls, compositions)


def section_spans(first: np.ndarray, last: np.ndarray, call_starts: np.ndarray,
                  member: np.ndarray) -> tuple[list[Optional[Offsets]], list[Optional[Offsets]]]:
    """Per section column (last: unmarked), the offsets of its first dispatch start and last dispatch end
    from ``call_starts[call]``, over the calls it ran in; None for a column that never ran.

    ``first`` and ``last``: [calls, compositions], each (call, composition)'s first start and last end
    (`composition_extents`). ``member`` (`Weights.member`, [compositions, columns]) says which columns run
    during a composition's dispatches: every section with a share in it (even of weight 0) and their parents,
    so a fused dispatch counts for each of its sections and a parent's span covers its children's.
    """
    calls, (compositions, columns) = len(call_starts), member.shape
    high, low = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    section_first = np.full((calls, columns), high, np.int64)
    section_last = np.full((calls, columns), low, np.int64)
    for c in range(compositions):
        runs = member[c]
        section_first[:, runs] = np.minimum(section_first[:, runs], first[:, c, None])
        section_last[:, runs] = np.maximum(section_last[:, runs], last[:, c, None])
    ran = section_first != high
    return ([Offsets.of(section_first[ran[:, s], s] - call_starts[ran[:, s]]) for s in range(columns)],
            [Offsets.of(section_last[ran[:, s], s] - call_starts[ran[:, s]]) for s in range(columns)])


def _slot_compositions(attribution: Attribution) -> np.ndarray:
    """Each slot's composition index."""
    return np.array([slot.composition for slot in attribution.slots], np.int64)


def no_dispatch_note(path: SectionPath, section_map: SectionMap, profiled_functions: set[str]) -> str:
    """Why a declared section owns no part of any measured dispatch, from where the map places it.

    ``profiled_functions``: the functions whose command buffers ran in the profile.
    """

    def carries(shares: list[Share]) -> bool:
        return any(share.path[: len(path)] == path for share in shares)

    functions = {site.function for site in section_map.sites if carries(site.shares)}
    functions |= {
        buffer.function for buffer in section_map.command_buffers if any(carries(c.shares) for c in buffer.commands)
    }
    if not functions:
        return "no dispatches: optimised away or folded into constants"
    transfers = {buffer.function for buffer in section_map.command_buffers
                 if any(c.op in ("fill", "copy", "update") and carries(c.shares) for c in buffer.commands)}
    if transfers & profiled_functions:
        return UNTIMED_TRANSFERS_NOTE
    if functions & profiled_functions:
        return "no dispatches: its dispatches did not run in the profiled calls"
    if functions == {INITIALIZER_FUNCTION}:
        return "no dispatches: ran only in initializers"
    elsewhere = sorted(functions - {INITIALIZER_FUNCTION}) + (["initializers"] if INITIALIZER_FUNCTION in functions else [])
    return f"no dispatches in this function: its dispatches are in {', '.join(elsewhere)}"


def _profiled_functions(attribution: Attribution, section_map: SectionMap, function: Optional[str]) -> set[str]:
    """Functions whose static command buffers matched the profile's (plus the one asked for)."""
    function_of = {buffer.index: buffer.function for buffer in section_map.command_buffers}
    profiled = {function_of[index] for index in attribution.buffer_matches.values() if index in function_of}
    return profiled | ({function} if function else set())


def _relative_error(covered: float, total: float) -> float:
    return abs(covered - total) / total if total else abs(covered)


def _depth_first(paths: list[SectionPath]) -> list[SectionPath]:
    """Order paths so each parent comes right before its children (siblings keep their order)."""
    children: dict[SectionPath, list[SectionPath]] = {}
    for path in paths:
        children.setdefault(path[:-1], []).append(path)
    ordered: list[SectionPath] = []

    def visit(parent: SectionPath) -> None:
        for child in children.get(parent, []):
            ordered.append(child)
            visit(child)

    visit(())
    return ordered


def _union_length(starts: np.ndarray, ends: np.ndarray) -> int:
    """Total length covered by intervals ``[start, end)``."""
    if not len(starts):
        return 0
    block_starts, block_ends = union_blocks(starts, ends)
    return int((block_ends - block_starts).sum())


def _weight_rule(split_rules: Counter, map_rule: str) -> str:
    """The one rule the split sites used ("mixed" when they differ; the map's when none was split)."""
    if len(split_rules) > 1:
        return "mixed"
    return next(iter(split_rules), map_rule)


def _sites(attribution: Attribution, section_map: SectionMap, sums: EventSums) -> list[SiteStats]:
    """Aggregate events per dispatch site (static dispatches without a site id stand alone)."""
    slots = attribution.slots
    busy, count = sums.slot_busy, sums.slot_count
    map_sites = {site.id: site for site in section_map.sites}
    grouped: dict[int, list[int]] = {}
    for index, slot in enumerate(slots):
        site = slot.command.site if slot.command.site is not None else -1 - index
        grouped.setdefault(site, []).append(index)

    # Linking puts all CPU dispatches into one executable, so "shared" is judged per
    # export function (key): deduplicated dispatch sites run the same function.
    sections_of_key: dict[str, set] = {}
    rows = []
    for site, members in grouped.items():
        command = slots[members[0]].command
        executable = map_sites[site].executable if site in map_sites else None
        parts = list(attribution.compositions[slots[members[0]].composition])
        sections_of_key.setdefault(command.key or "", set()).add(tuple(p for p, _w in parts))
        rows.append(
            SiteStats(
                site=site,
                key=command.key or "",
                executable=executable,
                sections=parts,
                workgroups=command.workgroups,
                binding_bytes=sum(command.binding_bytes) if command.binding_bytes else None,
                dispatches=int(count[members].sum()),
                busy_ns=float(busy[members].sum()),
                shared_executable=False,
                bindings=map_sites[site].bindings if site in map_sites else [],
                flops=map_sites[site].flops if site in map_sites else None,
                rule=map_sites[site].rule if site in map_sites else None,
            )
        )
    for row in rows:
        row.shared_executable = len(sections_of_key[row.key]) > 1
    rows.sort(key=lambda row: -row.busy_ns)
    return rows

