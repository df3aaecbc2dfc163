"""ProfileSession: per-section statistics of one profiled run, for every renderer.

How times are computed (docs/profile-json.md has the full story):

* busy time: the sum of dispatch durations (end - start on IREE's host clock);
  a fused dispatch is split between its sections by the section map's weights;
* wall time: the length of the union of the section's dispatch intervals:
  dispatches inside one barrier region run concurrently on local-task, so busy
  can exceed wall. A shared dispatch counts fully towards each section's wall;
* inclusive time of a section includes its nested sections; exclusive time is
  what remains for the section itself;
* coverage: top-level sections + "(unmarked)" must add up to the total
  measured dispatch time (checked to 0.1%).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np

from sectionmark.errors import SectionmarkError
from sectionmark.paths import SectionPath, format_path
from sectionmark.profiling.attribute import Attribution
from sectionmark.section_map import SectionMap

PROFILE_JSON_VERSION = 1
COVERAGE_TOLERANCE = 1e-3


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
class SectionStats:
    """One row of the report. ``path == ()`` is the "(unmarked)" row."""

    path: SectionPath
    busy_ns: float  # inclusive: this section and its nested sections
    exclusive_ns: float  # this section alone
    shared_ns: float  # part of busy_ns that came from dispatches fused with other sections
    wall_ns: int  # union of the intervals of dispatches touching the section (inclusive)
    calls: int  # measured calls in which the section ran
    dispatches: int  # dispatch events touching the section (inclusive)
    share: float  # busy_ns / total busy
    per_call: CallStats
    shared_with: dict[SectionPath, float] = field(default_factory=dict)  # other section -> ns it took from shared dispatches

    @property
    def name(self) -> str:
        return format_path(self.path)

    @property
    def depth(self) -> int:
        return max(len(self.path) - 1, 0)


@dataclass
class SiteStats:
    """One dispatch site: where a dispatch was recorded, what it ran, and what it cost."""

    site: int
    key: str
    executable: Optional[str]
    sections: list[tuple[SectionPath, float]]  # composition; [((), 1.0)] when unmarked
    workgroups: Optional[list[int]]
    binding_bytes: Optional[int]
    dispatches: int
    busy_ns: float
    shared_executable: bool  # the same export function (key) also runs for another section


@dataclass
class ProfileSession:
    """The second core data model: a profiled run joined with its section map."""

    total_ns: int  # sum of all measured dispatch durations
    wall_ns: int  # union of all measured dispatch intervals
    unmarked_ns: float
    calls: int  # measured calls (warmup excluded)
    warmup: int
    calls_known: bool
    sections: list[SectionStats]  # depth-first, parents before children; "(unmarked)" last
    sites: list[SiteStats]
    coverage_error: float  # |sections + unmarked - total| / total
    function: Optional[str] = None
    weight_rule: str = "op-count"  # how fused dispatches were split (from the section map)
    attribution: Optional[Attribution] = None  # per-event data for timelines; None after from_json

    # ------------------------------------------------------------------ building

    @classmethod
    def build(cls, attribution: Attribution, section_map: SectionMap, function: Optional[str] = None) -> "ProfileSession":
        events = attribution.events
        if not len(events):
            raise SectionmarkError(
                "the profile contains no dispatch events (did the function run any dispatches, "
                "and was host-execution profiling on?)"
            )
        compositions = attribution.compositions
        duration = (events["end_ns"] - events["start_ns"]).astype(np.float64)
        slot_composition = np.array([slot.composition for slot in attribution.slots], np.int64)
        composition = slot_composition[events["slot"]]
        calls = max(attribution.calls, 1)
        call = np.minimum(events["call"], calls - 1).astype(np.int64)

        # Paths: those the map declares, then any that only appear in shares; parents first.
        ordered: dict[SectionPath, None] = {}
        for path in [*section_map.sections, *(p for c in compositions for p, _w in c if p)]:
            for depth in range(1, len(path) + 1):
                ordered.setdefault(tuple(path[:depth]), None)
        paths = _depth_first(list(ordered))
        column = {path: index for index, path in enumerate(paths)}
        unmarked = len(paths)

        # weight[c, s]: fraction of composition c's time that is inclusive time of section s.
        exclusive_weight = np.zeros((len(compositions), len(paths) + 1))
        inclusive_weight = np.zeros_like(exclusive_weight)
        for c, parts in enumerate(compositions):
            for path, weight in parts:
                if not path:
                    exclusive_weight[c, unmarked] += weight
                    inclusive_weight[c, unmarked] += weight
                    continue
                exclusive_weight[c, column[path]] += weight
                for depth in range(1, len(path) + 1):
                    inclusive_weight[c, column[path[:depth]]] += weight

        by_call = np.bincount(call * len(compositions) + composition, weights=duration,
                              minlength=calls * len(compositions)).reshape(calls, len(compositions))
        per_call_inclusive = by_call @ inclusive_weight  # calls x sections
        composition_time = by_call.sum(axis=0)
        composition_count = np.bincount(composition, minlength=len(compositions))
        inclusive = composition_time @ inclusive_weight
        exclusive = composition_time @ exclusive_weight
        touching = inclusive_weight > 0
        dispatch_count = composition_count @ touching

        # Shared time: from compositions with more than one section; and with whom.
        shared = np.zeros(len(paths) + 1)
        shared_with: list[dict[SectionPath, float]] = [{} for _ in range(len(paths) + 1)]
        for c, parts in enumerate(compositions):
            if len(parts) < 2:
                continue
            for path, weight in parts:
                shared[column[path] if path else unmarked] += composition_time[c] * weight
                for other, other_weight in parts:
                    if other != path:
                        row = shared_with[column[path] if path else unmarked]
                        row[other] = row.get(other, 0.0) + composition_time[c] * other_weight

        order = np.argsort(events["start_ns"], kind="stable")
        starts, ends, sorted_composition = events["start_ns"][order], events["end_ns"][order], composition[order]
        total = float(duration.sum())
        rows = []
        for s, path in enumerate([*paths, ()]):
            mask = touching[:, s][sorted_composition]
            rows.append(
                SectionStats(
                    path=path,
                    busy_ns=float(inclusive[s]),
                    exclusive_ns=float(exclusive[s]),
                    shared_ns=float(shared[s]),
                    wall_ns=_union_length(starts[mask], ends[mask]),
                    calls=int((per_call_inclusive[:, s] > 0).sum()),
                    dispatches=int(dispatch_count[s]),
                    share=float(inclusive[s] / total) if total else 0.0,
                    per_call=CallStats.of(per_call_inclusive[:, s]),
                    shared_with=shared_with[s],
                )
            )
        top_level = sum(row.busy_ns for row in rows if len(row.path) == 1)
        covered = top_level + rows[-1].busy_ns
        coverage_error = abs(covered - total) / total if total else 0.0
        if coverage_error > COVERAGE_TOLERANCE:
            raise SectionmarkError(
                f"internal error: sections cover {covered:.0f} ns of {total:.0f} ns measured dispatch time"
            )
        return cls(
            total_ns=int(events["end_ns"].astype(np.int64).sum() - events["start_ns"].astype(np.int64).sum()),
            wall_ns=_union_length(starts, ends),
            unmarked_ns=rows[-1].busy_ns,
            calls=attribution.calls,
            warmup=attribution.warmup,
            calls_known=attribution.calls_known,
            sections=rows,
            sites=_sites(attribution, section_map, composition, duration),
            coverage_error=coverage_error,
            function=function,
            weight_rule=section_map.weight_rule,
            attribution=attribution,
        )

    # ------------------------------------------------------------------ views

    @property
    def section_rows(self) -> list[SectionStats]:
        """Named sections, without the "(unmarked)" row."""
        return [row for row in self.sections if row.path]

    @property
    def unmarked(self) -> SectionStats:
        return self.sections[-1]

    def section(self, path: SectionPath) -> SectionStats:
        for row in self.sections:
            if row.path == tuple(path):
                return row
        raise KeyError(path)

    def table(self) -> str:
        """The console table as text (see sectionmark.renderers.table)."""
        from sectionmark.renderers.table import render_text

        return render_text(self)

    def to_csv(self, path: Union[str, Path]) -> Path:
        from sectionmark.renderers import csv_out

        return csv_out.save(self, path)

    def save_json(self, path: Union[str, Path]) -> Path:
        from sectionmark.renderers import json_out

        return json_out.save(self, path)

    def save_perfetto(self, path: Union[str, Path]) -> Path:
        """Chrome/Perfetto JSON trace: section tracks enclosing dispatch slices."""
        from sectionmark.renderers import perfetto

        return perfetto.save(self, path)

    def save_tracy(self, path: Union[str, Path]) -> Path:
        """A real .tracy capture of the profiled timeline (needs IREE's tracing runtime)."""
        from sectionmark.renderers import tracy_out

        return tracy_out.save(self, path)

    def save_chart(self, path: Union[str, Path]) -> Path:
        """PNG bar chart of the section breakdown."""
        from sectionmark.renderers import chart

        return chart.save(self, path)

    # ------------------------------------------------------------------ JSON

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable, versioned dict (schema: docs/profile-json.md)."""

        def stats(row: SectionStats) -> dict[str, Any]:
            return {
                "path": list(row.path),
                "name": row.name,
                "unmarked": not row.path,
                "busy_ns": round(row.busy_ns),
                "exclusive_ns": round(row.exclusive_ns),
                "shared_ns": round(row.shared_ns),
                "wall_ns": row.wall_ns,
                "calls": row.calls,
                "dispatches": row.dispatches,
                "share": row.share,
                "per_call": {name: round(value) for name, value in vars(row.per_call).items()},
                "shared_with": [{"path": list(p), "ns": round(ns)} for p, ns in row.shared_with.items()],
            }

        return {
            "version": PROFILE_JSON_VERSION,
            "function": self.function,
            "weight_rule": self.weight_rule,
            "total_ns": self.total_ns,
            "wall_ns": self.wall_ns,
            "unmarked_ns": round(self.unmarked_ns),
            "calls": self.calls,
            "warmup": self.warmup,
            "calls_known": self.calls_known,
            "coverage_error": self.coverage_error,
            "sections": [stats(row) for row in self.sections],
            "sites": [
                {
                    "site": site.site,
                    "key": site.key,
                    "executable": site.executable,
                    "sections": [{"path": list(p), "weight": w} for p, w in site.sections],
                    "workgroups": site.workgroups,
                    "binding_bytes": site.binding_bytes,
                    "dispatches": site.dispatches,
                    "busy_ns": round(site.busy_ns),
                    "shared_executable": site.shared_executable,
                }
                for site in self.sites
            ],
        }

    @classmethod
    def from_json(cls, data: Any) -> "ProfileSession":
        """Rebuild the statistics (not the per-event data) from :meth:`to_json` output."""
        if not isinstance(data, dict) or data.get("version") != PROFILE_JSON_VERSION:
            version = data.get("version") if isinstance(data, dict) else None
            raise SectionmarkError(f"not a sectionmark profile JSON of version {PROFILE_JSON_VERSION} (version {version!r})")
        try:
            sections = [
                SectionStats(
                    path=tuple(row["path"]),
                    busy_ns=float(row["busy_ns"]),
                    exclusive_ns=float(row["exclusive_ns"]),
                    shared_ns=float(row["shared_ns"]),
                    wall_ns=int(row["wall_ns"]),
                    calls=int(row["calls"]),
                    dispatches=int(row["dispatches"]),
                    share=float(row["share"]),
                    per_call=CallStats(**{k: float(v) for k, v in row["per_call"].items()}),
                    shared_with={tuple(item["path"]): float(item["ns"]) for item in row["shared_with"]},
                )
                for row in data["sections"]
            ]
            sites = [
                SiteStats(
                    site=int(site["site"]),
                    key=str(site["key"]),
                    executable=site["executable"],
                    sections=[(tuple(item["path"]), float(item["weight"])) for item in site["sections"]],
                    workgroups=site["workgroups"],
                    binding_bytes=site["binding_bytes"],
                    dispatches=int(site["dispatches"]),
                    busy_ns=float(site["busy_ns"]),
                    shared_executable=bool(site["shared_executable"]),
                )
                for site in data["sites"]
            ]
            if not sections or sections[-1].path != ():
                raise ValueError("the last section row must be the unmarked row")
            return cls(
                total_ns=int(data["total_ns"]),
                wall_ns=int(data["wall_ns"]),
                unmarked_ns=float(data["unmarked_ns"]),
                calls=int(data["calls"]),
                warmup=int(data["warmup"]),
                calls_known=bool(data["calls_known"]),
                sections=sections,
                sites=sites,
                coverage_error=float(data["coverage_error"]),
                function=data.get("function"),
                weight_rule=str(data.get("weight_rule", "op-count")),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise SectionmarkError(f"malformed sectionmark profile JSON: {error}") from None


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
    """Total length covered by intervals ``[start, end)``; ``starts`` must be sorted."""
    if not len(starts):
        return 0
    reach = np.maximum.accumulate(ends)
    # A covered block begins where an interval starts after everything before it ended,
    # and ends at the running maximum just before the next block begins.
    first = np.flatnonzero(np.concatenate([[True], starts[1:] > reach[:-1]]))
    last = np.concatenate([first[1:] - 1, [len(starts) - 1]])
    return int((reach[last] - starts[first]).sum())


def _sites(
    attribution: Attribution, section_map: SectionMap, composition: np.ndarray, duration: np.ndarray
) -> list[SiteStats]:
    """Aggregate events per dispatch site (static dispatches without a site id stand alone)."""
    slots = attribution.slots
    busy = np.bincount(attribution.events["slot"], weights=duration, minlength=len(slots))
    count = np.bincount(attribution.events["slot"], minlength=len(slots))
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
            )
        )
    for row in rows:
        row.shared_executable = len(sections_of_key[row.key]) > 1
    rows.sort(key=lambda row: -row.busy_ns)
    return rows

