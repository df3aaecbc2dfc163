"""The kernel table (sectionmark.profiling.kernels) as CSV: one row per dispatch site, bytes per execution."""

from __future__ import annotations

from typing import Iterable

from sectionmark.profiling.kernels import kernels
from sectionmark.profiling.session import ProfileSession
from sectionmark.renderers.csv_format import csv_text
from sectionmark.renderers.kernels import format_binding, format_sections


COLUMNS = ["site", "sections", "key", "arguments", "read_bytes", "written_bytes", "flops", "dispatches",
           "busy_ns", "time_per_dispatch_ns", "gb_per_s", "gflop_per_s", "flops_per_byte",
           "shared_with_sites", "data_movement"]


def render(session: ProfileSession) -> str:
    return csv_text(COLUMNS, csv_rows(session))


def csv_rows(session: ProfileSession) -> Iterable[list]:
    """One list of cells per dispatch site (`kernels`), in ``COLUMNS`` order."""
    return (
        [
            row.site, format_sections(row), row.key, "; ".join(format_binding(b) for b in row.bindings),
            _blank(row.read_bytes), _blank(row.written_bytes), _blank(row.flops), row.dispatches,
            f"{row.busy_ns:.0f}", f"{row.time_per_dispatch_ns:.1f}", _blank(row.gb_per_s), _blank(row.gflop_per_s),
            _blank(row.intensity), " ".join(map(str, row.shared_with)), int(row.data_movement),
        ]
        for row in kernels(session)
    )


def _blank(value) -> str:
    """A cell: empty where the figure is unknown, floats in their shortest form."""
    return "" if value is None else f"{value:g}" if isinstance(value, float) else str(value)
