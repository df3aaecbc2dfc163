"""Several processes' profiles of one module reported together: per section, its spread across the ranks.

A data-parallel launcher runs the same module in several processes (ranks),
each recording its own profile. Each rank's file is read into its own
`ProfileSession` where the file is (`sectionmark.workflows.ranks`: one process
per file); what comes back is that session, the small per-section summary, and
`merge_ranks` here joins them: for every section row, its busy time per call on
each rank, their minimum, median and maximum, and the slowest rank (the
straggler). Pure: the same sessions always give the same report, and each
rank's figures are exactly its own session's (nothing re-measured, nothing
averaged into them).

The figure compared is a row's inclusive busy time per measured call
(``busy_ns / calls``, the section table's "Busy/call"): per call, so ranks that
made different numbers of calls compare. The median of an even number of ranks
is the mean of the middle two (numpy's). A section that ran no dispatch on any
rank (a declared section with a note) names no slowest rank; ties name the
first rank in the order given.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence, Union

import numpy as np

from sectionmark.errors import SectionmarkError
from sectionmark.outputs import PathLike
from sectionmark.profiling.session import ProfileSession
from sectionmark.section_path import SectionPath, format_path

RANKS_JSON_VERSION = 1


@dataclass
class RankProfile:
    """One rank: the file it recorded (as given) and that file's own session."""

    file: str
    session: ProfileSession

    @property
    def name(self) -> str:
        """The file's name without its folder, for the table (``rank2.ireeprof``)."""
        return Path(self.file).name


@dataclass
class SectionAcrossRanks:
    """One section row across the ranks: its busy ns per call on each rank (None: the rank has no such row)."""

    path: SectionPath
    per_rank_ns: list[Optional[float]]
    min_ns: float
    median_ns: float
    max_ns: float
    slowest_rank: Optional[int]  # index into the report's ranks; None where it ran on no rank
    ranks: int  # ranks that have the row

    @property
    def name(self) -> str:
        return format_path(self.path)

    @property
    def slowest_over_median(self) -> Optional[float]:
        """How far the straggler is from the typical rank (max / median); None where the median is 0."""
        return self.max_ns / self.median_ns if self.slowest_rank is not None and self.median_ns else None


@dataclass
class RankReport:
    """Several ranks' profiles of one module and, per section, their spread (`merge_ranks`). Outputs by name like
    a profile's: ``render("table" | "json" | "csv")``, ``save(path)``."""

    ranks: list[RankProfile]
    sections: list[SectionAcrossRanks]  # the first rank's row order, then rows only later ranks have
    total: SectionAcrossRanks  # every dispatch's busy time per call (path ``()`` is not a row: the total)

    @property
    def rank_files(self) -> list[str]:
        return [rank.file for rank in self.ranks]

    def section(self, path: SectionPath) -> SectionAcrossRanks:
        for row in self.sections:
            if row.path == tuple(path):
                return row
        raise KeyError(path)

    def render(self, format: str, **options: Any) -> Union[str, bytes]:
        """This report in an output format by name: the formats with a ranks form (``table``, ``json``, ``csv``)."""
        from sectionmark import renderers

        return renderers.get(format).render_ranks(self, **options)

    def save(self, path: PathLike, format: Optional[str] = None, *, inputs: Iterable[PathLike] = (),
             **options: Any) -> Path:
        """Write this report to ``path`` in ``format`` (default: from the suffix), all at once, never onto one of
        ``inputs``."""
        from sectionmark import renderers

        return renderers.save(self, path, format, inputs=inputs, **options)

    def table(self) -> str:
        return self.render("table")

    def to_json(self) -> dict[str, Any]:
        """The versioned ranks document without each rank's profile (`sectionmark.renderers.ranks` adds them)."""
        return {
            "version": RANKS_JSON_VERSION,
            "kind": "ranks",
            "ranks": [{"rank": index, "file": rank.file} for index, rank in enumerate(self.ranks)],
            "total": {key: value for key, value in _row_json(self.total).items() if key not in ("path", "name")},
            "sections": [_row_json(row) for row in self.sections],
        }


def _row_json(row: SectionAcrossRanks) -> dict[str, Any]:
    rounded = [None if ns is None else round(ns) for ns in row.per_rank_ns]
    return {"path": list(row.path), "name": row.name, "ranks": row.ranks, "per_rank_ns": rounded,
            "min_ns": round(row.min_ns), "median_ns": round(row.median_ns), "max_ns": round(row.max_ns),
            "slowest_rank": row.slowest_rank, "slowest_over_median": row.slowest_over_median}


def merge_ranks(ranks: Sequence[RankProfile]) -> RankReport:
    """Per section row, the ranks' busy time per call, its min / median / max and the slowest rank."""
    if not ranks:
        raise SectionmarkError("no rank profiles to report")
    per_rank: list[dict[SectionPath, float]] = [
        {row.path: row.busy_ns / max(rank.session.calls, 1) for row in rank.session.sections} for rank in ranks]
    paths: dict[SectionPath, None] = {}
    for rank in ranks:
        paths.update(dict.fromkeys(row.path for row in rank.session.sections))
    sections = [_across(path, [figures.get(path) for figures in per_rank]) for path in paths]
    totals = [rank.session.total_ns / max(rank.session.calls, 1) for rank in ranks]
    return RankReport(list(ranks), sections, _across((), totals))


def _across(path: SectionPath, per_rank_ns: list[Optional[float]]) -> SectionAcrossRanks:
    present = np.array([ns for ns in per_rank_ns if ns is not None], dtype=np.float64)
    slowest = None
    if present.size and present.max() > 0:
        slowest = next(index for index, ns in enumerate(per_rank_ns) if ns is not None and ns == present.max())
    return SectionAcrossRanks(path, list(per_rank_ns), float(present.min()), float(np.median(present)),
                              float(present.max()), slowest, int(present.size))
