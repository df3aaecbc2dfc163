"""CSV output: one row per section (and "(unmarked)"), times in nanoseconds.

Paths are written as ``Outer / Inner`` in ``section`` and as a JSON list in
``path`` so that names containing " / " survive a round trip. ``note`` is
empty except for declared sections that ran no dispatch (it says why). The CPU
columns (``cpu_ns``, ``tiles``, ``parallelism``, ``utilization``) are empty
where the profile recorded no tiles (Vulkan, Tracy) or, for the ratios, where
nothing ran or the worker count is unknown: empty is "not recorded", never 0.
The start and end columns (min / p50 / max offset from the call's start of the
section's first dispatch start and last dispatch end) are empty for a section
that never ran. A
text cell that a spreadsheet would evaluate (starting with ``= + - @``) is
written with a ``'`` before it (`sectionmark.renderers.csv_format.inert`).
Columns mean what the profile JSON's fields of the same name mean
(docs/profile-json.md).
"""

from __future__ import annotations

import json
from typing import Iterable, Optional

from sectionmark.profiling.session import ProfileSession
from sectionmark.profiling.stats import Offsets
from sectionmark.renderers.csv_format import csv_text

COLUMNS = [
    "section", "path", "depth", "calls", "dispatches", "busy_ns", "exclusive_ns", "shared_ns", "wall_ns",
    "exclusive_wall_ns", "share", "mean_ns", "min_ns", "max_ns", "p50_ns", "p95_ns", "note",
    "cpu_ns", "tiles", "parallelism", "utilization",
    "start_min_ns", "start_p50_ns", "start_max_ns", "end_min_ns", "end_p50_ns", "end_max_ns",
]


def _offsets(offsets: Optional[Offsets]) -> list:
    """min, p50, max in whole ns; empty cells where the section never ran (or the file predates them)."""
    return ["", "", ""] if offsets is None else [round(offsets.min), round(offsets.p50), round(offsets.max)]


def render(session: ProfileSession) -> str:
    """The CSV text, RFC 4180 line ends (written unchanged)."""
    return csv_text(COLUMNS, csv_rows(session))


def csv_rows(session: ProfileSession) -> Iterable[list]:
    """One list of cells per section row, in ``COLUMNS`` order."""
    return (
        [
            row.name, json.dumps(list(row.path), ensure_ascii=False), len(row.path), row.calls, row.dispatches,
            round(row.busy_ns), round(row.exclusive_ns), round(row.shared_ns), round(row.wall_ns),
            round(row.exclusive_wall_ns), f"{row.share:.6f}",
            round(row.per_call.mean_ns), round(row.per_call.min_ns), round(row.per_call.max_ns),
            round(row.per_call.p50_ns), round(row.per_call.p95_ns), row.note or "",
            round(row.cpu_ns) if row.cpu_ns is not None else "", row.tiles if row.tiles is not None else "",
            f"{row.parallelism:.4f}" if row.parallelism is not None else "",
            f"{row.utilization:.4f}" if row.utilization is not None else "",
            *_offsets(row.start_ns), *_offsets(row.end_ns),
        ]
        for row in session.sections
    )
