"""CSV output: one row per section (and "(unmarked)"), times in nanoseconds.

Paths are written as ``Outer / Inner`` in ``section`` and as a JSON list in
``path`` so that names containing " / " survive a round trip. ``note`` is
empty except for declared sections that ran no dispatch (it says why). The CPU
columns (``cpu_ns``, ``tiles``, ``parallelism``, ``utilization``) are empty
where the profile recorded no tiles (Vulkan, Tracy) or, for the ratios, where
nothing ran or the worker count is unknown: empty is "not recorded", never 0.
The start and end columns (min / p50 / max offset from the call's start of the
section's first dispatch start and last dispatch end) are empty for a section
that never ran. The traffic columns (``read_bytes``, ``written_bytes``,
``flops``, ``traffic_ns`` summed over the measured calls; ``gb_per_s``,
``gflop_per_s``, ``intensity``) and ``working_set_bytes`` (per call) are
empty where none of the section's dispatches has static sizes. The run columns
(``run_median_ns``, ``run_low_ns``, ``run_high_ns``: a section's busy ns per
call over ``--runs K`` runs, the median and its interval, ``runs`` in the
profile JSON) are empty for a profile of one run. A
text cell that a spreadsheet would evaluate (starting with ``= + - @``) is
written with a ``'`` before it (`sectionmark.renderers.csv_format.inert`).
Columns mean what the profile JSON's fields of the same name mean
(docs/profile-json.md).
"""

from __future__ import annotations

import json
from typing import Iterable, Optional

from sectionmark.profiling.runs import RunSpread
from sectionmark.profiling.session import ProfileSession
from sectionmark.profiling.stats import Offsets, Traffic
from sectionmark.renderers.csv_format import csv_text

COLUMNS = [
    "section", "path", "depth", "calls", "dispatches", "busy_ns", "exclusive_ns", "shared_ns", "wall_ns",
    "exclusive_wall_ns", "share", "mean_ns", "min_ns", "max_ns", "p50_ns", "p95_ns", "note",
    "cpu_ns", "tiles", "parallelism", "utilization",
    "start_min_ns", "start_p50_ns", "start_max_ns", "end_min_ns", "end_p50_ns", "end_max_ns",
    "read_bytes", "written_bytes", "flops", "traffic_ns", "gb_per_s", "gflop_per_s", "intensity", "working_set_bytes",
    "run_median_ns", "run_low_ns", "run_high_ns",
]


def _offsets(offsets: Optional[Offsets]) -> list:
    """min, p50, max in whole ns; empty cells where the section never ran (or the file predates them)."""
    return ["", "", ""] if offsets is None else [round(offsets.min), round(offsets.p50), round(offsets.max)]


def _traffic(traffic: Optional[Traffic]) -> list:
    """Totals in whole bytes, FLOPs and ns, rates to 4 decimals; empty cells without traffic (or a rate of no time)."""
    if traffic is None:
        return [""] * 7
    rates = (traffic.gb_per_s, traffic.gflop_per_s, traffic.intensity)
    return [round(traffic.read_bytes), round(traffic.written_bytes), round(traffic.flops), round(traffic.time_ns),
            *("" if rate is None else f"{rate:.4f}" for rate in rates)]


def _run_cells(spread: Optional[RunSpread]) -> list:
    """median, low, high in whole ns; empty cells for a profile of one run."""
    return ["", "", ""] if spread is None else [round(spread.median_ns), round(spread.low_ns), round(spread.high_ns)]


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
            *_traffic(row.traffic), row.working_set_bytes if row.working_set_bytes is not None else "",
            *_run_cells(row.runs),
        ]
        for row in session.sections
    )
