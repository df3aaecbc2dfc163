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

``build`` is a pipeline of small pure functions over numpy arrays
(`sectionmark.profiling.section_time`); the rows it makes are
`sectionmark.profiling.stats`. The session holds data only: views computed
from it (the component view, the kernel table) live in their own modules; the
session's methods of the same names import them when called, so a user finds
them on the object in hand (``prof.components()``, ``prof.kernels()``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Optional, Union

import numpy as np

from sectionmark import serialization
from sectionmark.errors import SectionmarkError
from sectionmark.outputs import PathLike
from sectionmark.section_path import SectionPath
from sectionmark.profiling.attribute import NO_DISPATCH_EVENTS, Attribution
from sectionmark.profiling.queue_time import CallTime, DeviceMemory, call_time_and_memory, measured_windows
from sectionmark.profiling import display
from sectionmark.profiling.runs import RunSpread
from sectionmark.profiling.section_time import (
    CompositionSums,
    EventSums,
    EventTotals,
    call_starts,
    fold_events,
    section_paths,
    section_rows,
    section_spans,
    section_traffic,
    weight_matrices,
)
from sectionmark.profiling.stats import ProfilerCost, RunVariation, SectionStats, SiteStats, Traffic
from sectionmark.section_map import INITIALIZER_FUNCTION, SectionMap, Share
from sectionmark.serialization import json_field

if TYPE_CHECKING:  # views of a session, imported by the methods that return them (they import this module)
    from sectionmark.profiling.components import ComponentStats
    from sectionmark.profiling.kernels import KernelRow
    from sectionmark.profiling.roofline import Peak, RooflineRow

PROFILE_JSON_VERSION = 2
COVERAGE_TOLERANCE = 1e-3
# A section whose only commands are fills / copies / updates: local-task times none of them individually.
UNTIMED_TRANSFERS_NOTE = "no dispatches: only fills/copies, not timed on CPU (in the call time's command-buffer gaps)"


class ProfileOutputs:
    """The outputs of a profile by name (`render`, which the class defines) and their documented one-line
    aliases (``print(prof.table())``, ``prof.save_tracy("run.tracy")``), shared by a session and a run."""

    def render(self, format: str, **options: Any) -> Union[str, bytes]:
        raise NotImplementedError

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

    def save_graph(self, path: PathLike) -> Path:
        """The read/write graph of the dispatches: .dot, .svg (needs graphviz) or .html (sectionmark.renderers.graph)."""
        return self.save(path, "graph")



@dataclass
class ProfileSession(ProfileOutputs):
    """The second core data model: a profiled run joined with its section map.

    Outputs are not made here: `render` and `save` look the format up in
    `sectionmark.renderers` when called, so the session imports no renderer
    and a new output needs no change here. ``table()`` and the ``save_*``
    methods are one-line aliases kept because they are the documented API
    (``print(prof.table())``, ``prof.save_tracy("run.tracy")``).
    """

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
    # Every measured event, when the session was made from events held in memory (a replay's functions); None
    # for a profile read in windows (its `ProfileRun` reads them from the file) and after from_json.
    attribution: Optional[Attribution] = json_field(stored=False, default=None)
    # [calls, sections + unmarked]: each measured call's inclusive busy time per section column (the split of the
    # rows' per-call statistics, for views that sum sections); None after from_json
    per_call_busy: Optional[np.ndarray] = json_field(stored=False, default=None)
    call_time: Optional[CallTime] = None  # where the calls' time went beside dispatches (queue_time.py)
    memory: Optional[DeviceMemory] = None  # device memory during the calls (memory-events)
    cpu_ns: Optional[int] = None  # summed tile time of all measured dispatches; None: no tiles recorded
    tiles: Optional[int] = None  # summed tiles of all measured dispatches
    workers: Optional[int] = None  # local-task workers of the run (IREE's default topology); None: unknown
    # The run that made the profile (set by `sectionmark.profiling.profile`; None for a recorded profile):
    # the module's file name (None: compiled in this process), the IREE device, and the profiler's cost.
    module: Optional[str] = None
    device: Optional[str] = None  # the IREE device profiled ("local-task", "vulkan", "cuda"); None: not known
    profiler_cost: Optional[ProfilerCost] = None
    # Fresh runs of the tool behind this profile (sectionmark.profiling.runs): with more than one, every row's
    # ``runs`` and ``total_runs`` hold the figures of each run, and the other figures are those of run
    # ``shown_run`` (1-based: the run of median total busy time per call).
    runs: int = 1
    shown_run: Optional[int] = None
    total_runs: Optional[RunSpread] = None  # total busy ns per call in each run
    # A profile of one run: how much such figures moved between runs on this machine, as an earlier profile of
    # several runs measured it (`sectionmark.workflows.measure`); None: none did, or several runs here.
    run_variation: Optional[RunVariation] = None
    # Section name -> the colour its code gave it (the map's `SectionMap.colors`); every view colours sections
    # with `sectionmark.section_map.section_colors` over these and the rows' order. Empty in older JSON.
    colors: dict[str, int] = json_field(default_factory=dict)

    # ------------------------------------------------------------------ building

    @classmethod
    def build(cls, attribution: Attribution, section_map: SectionMap, function: Optional[str] = None,
              workers: Optional[int] = None, device: Optional[str] = None) -> "ProfileSession":
        """The session of the events ``attribution`` holds, which it keeps (a replay's function: its views draw
        them). ``workers``: local-task's worker count during the run, for utilization (None: unknown);
        ``device``: the IREE device the run measured, named in the outputs (None: unknown)."""
        totals = fold_events(attribution, measured_windows(attribution.queue_spans, attribution.calls))
        return cls.from_totals(attribution, totals, section_map, function, workers, device, events=attribution)

    @classmethod
    def from_totals(cls, attribution: Attribution, totals: EventTotals, section_map: SectionMap,
                    function: Optional[str] = None, workers: Optional[int] = None, device: Optional[str] = None,
                    events: Optional[Attribution] = None, without_dispatches: bool = False) -> "ProfileSession":
        """The session of the events summed into ``totals`` (`sectionmark.profiling.read`: a window at a time);
        ``attribution``: their slots, calls and queue spans (its events unused); ``events``: the events to keep
        (`attribution` field), if any. ``without_dispatches``: a session with no dispatch event is not refused
        (one device of several that only copied and waited)."""
        sums, wall, total_wall = totals.sums, totals.wall, totals.total_wall
        if not sums.count.sum() and not without_dispatches:
            raise SectionmarkError(NO_DISPATCH_EVENTS)
        compositions = attribution.compositions
        paths = section_paths(section_map.sections, compositions)
        weights = weight_matrices(compositions, paths)
        tiles = sums.tiles
        per_call_busy = sums.busy_by_call @ weights.inclusive
        rows = section_rows(paths, compositions, weights, CompositionSums(sums.busy_by_call, wall, sums.count, tiles),
                            workers, per_call_busy)
        # A call's first dispatch is the first of its compositions' first dispatches.
        starts_of_calls = call_starts(sums.first_start.min(axis=1, initial=np.iinfo(np.int64).max),
                                      None if totals.call_windows is None else totals.call_windows.starts)
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
        timing, memory = call_time_and_memory(totals.call_windows, totals.dispatch_union, attribution.queue_spans,
                                              attribution.memory, attribution.allocations)
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
            attribution=events,
            per_call_busy=per_call_busy,
            call_time=timing,
            memory=memory,
            cpu_ns=tiles.total_ns if tiles else None,
            tiles=tiles.total_tiles if tiles else None,
            workers=workers,
            device=device,
            colors=dict(section_map.colors),
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

    # ------------------------------------------------------------------ outputs

    def render(self, format: str, **options: Any) -> Union[str, bytes]:
        """This profile in an output format by name (``sectionmark.renderers.RENDERERS``): text or bytes.

        ``options`` go to the renderer (``width`` of the table, ``title`` of the chart; ``events``: the run's
        events for the views that draw them, this session's own when it holds them).
        """
        from sectionmark import renderers

        renderer = renderers.get(format)
        if renderer.events:
            options.setdefault("events", self.attribution)
        return renderer.render(self, **options)

    # ------------------------------------------------------------------ JSON

    def to_json(self) -> dict[str, Any]:
        """The session's data as a JSON-serialisable, versioned dict (schema: docs/profile-json.md), derived from
        the dataclasses. The profile JSON file adds views computed from it (`sectionmark.renderers.json_out`)."""
        return {"version": PROFILE_JSON_VERSION, **serialization.to_json(self)}

    @classmethod
    def from_json(cls, data: Any) -> "ProfileSession":
        """Rebuild the statistics (not the per-event data) from :meth:`to_json` output, checking every value."""
        session = serialization.from_versioned_json(
            cls, data, version=PROFILE_JSON_VERSION, document="profile JSON", root="profile",
            advice="run `sectionmark report` on the .ireeprof again", error=SectionmarkError)
        if not session.sections or not session.sections[-1].unmarked:
            raise SectionmarkError("malformed sectionmark profile JSON: the last section row must be the unmarked row")
        return session

    # ------------------------------------------------------------------ views, from the object in hand

    def components(self, by: str = "name") -> list["ComponentStats"]:
        """Sections of one name summed across repeated blocks, or the sections matching one path pattern
        (``by="*/Self Attention"``): `sectionmark.profiling.components.components`."""
        from sectionmark.profiling.components import components

        return components(self, by)

    def kernels(self) -> list["KernelRow"]:
        """The kernel table: one row per dispatch site in execution order, with its bytes, FLOPs and rates
        (`sectionmark.profiling.kernels.kernels`)."""
        from sectionmark.profiling.kernels import kernels

        return kernels(self)

    def traffic(self) -> dict[SectionPath, Traffic]:
        """What each section's dispatches moved and computed (bytes, FLOPs, GB/s: `Traffic`), by path in report
        order, "(unmarked)" as ``()``; a section none of whose dispatches has static sizes is left out."""
        return {row.path: row.traffic for row in self.sections if row.traffic is not None}

    def roofline(self, peak: "Peak", by: Optional[str] = None) -> list["RooflineRow"]:
        """Each section (``by=None``) or component (``by="name"`` or a pattern) against ``peak`` (`sm.peak()`, a
        `Peak`): its fractions of the peak bandwidth and FLOP/s and the nearer roof. The peak is given, never
        measured here."""
        return peak.roofline(self) if by is None else peak.component_roofline(self, by)

    # ------------------------------------------------------------------ notebooks (repr: function, calls, device, coverage, top sections; inline: the HTML report)

    __repr__ = display.summary_repr
    _repr_pretty_ = display.pretty
    _repr_html_ = display.inline_html



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

