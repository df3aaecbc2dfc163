"""Renderers of the component view (sectionmark.profiling.components): table, JSON, CSV, chart.

Every output states which time it shows (exclusive or inclusive busy time,
i.e. summed dispatch durations), so its numbers can be compared with the
section table and told apart from Tracy replay spans.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from sectionmark.errors import SectionmarkError
from sectionmark.outputs import atomic_path
from sectionmark.paths import format_path
from sectionmark.profiling.components import BY_NAME, ComponentView, components
from sectionmark.renderers.table import format_ns

EXTENSION = ".txt"


def render(session, by: str = BY_NAME, width: int = 160) -> str:
    """The component table as text."""
    view = components(session, by)
    table = Table(title=Text(f"components by {view.by}: {view.time}"), title_justify="left", show_footer=True)
    table.add_column("Component", footer="Total")
    table.add_column("Sections", justify="right")
    table.add_column("Share", justify="right", footer=f"{sum(row.share for row in view.rows):.1%}")
    table.add_column("Busy/call", justify="right", footer=format_ns(view.total_ns / max(view.calls, 1)))
    table.add_column("Per section/call", justify="right")
    table.add_column("Dispatches/call (incl. nested)", justify="right")
    calls = max(view.calls, 1)
    for row in view.rows:
        table.add_row(Text(row.name), str(len(row.sections)) if row.sections else "", f"{row.share:.1%}",
                      format_ns(row.per_call_ns), format_ns(row.mean_per_section_ns) if row.sections else "",
                      f"{row.dispatches / calls:g}")
    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None, force_terminal=False).print(table)
    return buffer.getvalue()


def to_json(session, by: str = BY_NAME) -> dict[str, Any]:
    """The component view as a JSON-serialisable dict (states which time its rows show)."""
    view = components(session, by)
    return {
        "by": view.by,
        "time": view.time,
        "total_ns": view.total_ns,
        "calls": view.calls,
        "rows": [
            {"name": row.name, "sections": [format_path(path) for path in row.sections], "busy_ns": row.busy_ns,
             "share": row.share, "per_call_ns": row.per_call_ns, "mean_per_section_ns": row.mean_per_section_ns,
             "dispatches": row.dispatches}
            for row in view.rows
        ],
    }


def render_csv(session, by: str = BY_NAME) -> str:
    view = components(session, by)
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["component", "sections", "busy_ns", "share", "per_call_ns", "mean_per_section_ns", "dispatches",
                     "time"])
    for row in view.rows:
        writer.writerow([row.name, len(row.sections), f"{row.busy_ns:.0f}", f"{row.share:.6f}",
                         f"{row.per_call_ns:.1f}", f"{row.mean_per_section_ns:.1f}", row.dispatches, view.time])
    return buffer.getvalue()


def save_chart(session, path: str | Path, by: str = BY_NAME) -> Path:
    """PNG bar chart, one bar per component, axis in µs per call."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SectionmarkError("the chart needs matplotlib: pip install 'sectionmark[chart]'") from None
    view = components(session, by)
    rows = view.rows[::-1]
    figure, axes = plt.subplots(figsize=(9, max(2.5, 0.35 * len(rows) + 1.2)))
    values = [row.per_call_ns / 1e3 for row in rows]
    axes.barh(range(len(rows)), values, color="#4C8BF5")
    for position, (row, value) in enumerate(zip(rows, values)):
        axes.text(value, position, f" {row.share:.1%}", va="center", fontsize=7)
    axes.set_yticks(range(len(rows)), [row.name for row in rows], fontsize=8)
    axes.set_xlabel("busy time per call (µs)")
    axes.set_title(f"components by {view.by}", fontsize=9)
    figure.tight_layout()
    try:
        with atomic_path(path) as temporary:
            figure.savefig(temporary, dpi=110, format="png")
    finally:
        plt.close(figure)
    return Path(path)
