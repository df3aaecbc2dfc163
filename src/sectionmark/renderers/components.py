"""The component view as a console table: sections of one name summed across blocks.

Every column is **busy** time (summed dispatch durations) per measured call,
like the section table's Busy and Excl columns, and the header says so:
"Busy" is inclusive (nested sections included, each dispatch once), "Excl"
the sections' own time; the exclusive shares of all rows add up to 100%.
See `sectionmark.profiling.components`.
"""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table
from rich.text import Text

from sectionmark.profiling.components import BY_NAME, ComponentStats, components
from sectionmark.profiling.session import ProfileSession
from sectionmark.renderers.table import format_ns


def build_components_table(session: ProfileSession, by: str = BY_NAME) -> Table:
    calls = max(session.calls, 1)
    per = "/call" if session.calls_known else " (total)"
    grouping = "by name" if by == BY_NAME else f"matching {by!r}"
    table = Table(title=Text(f"components {grouping}: busy time, {session.calls} calls"), title_justify="left")
    for header in ("Component", "Sections", f"Busy{per}", "Share", f"Excl{per}", "Excl share", "p50", "p95",
                   f"Dispatches{per}"):
        table.add_column(header, justify="left" if header == "Component" else "right")
    for component in components(session, by):
        table.add_row(*_cells(component, calls, session.calls_known),
                      style="dim" if component.name == "(unmarked)" else None)
    return table


def _cells(component: ComponentStats, calls: int, calls_known: bool) -> list:
    stats = component.per_call if calls_known else None
    return [
        Text(component.name),
        f"{len(component.sections)}",
        format_ns(component.busy_ns / calls),
        f"{component.share:.1%}",
        format_ns(component.exclusive_ns / calls),
        f"{component.exclusive_share:.1%}",
        format_ns(stats.p50_ns) if stats else "",
        format_ns(stats.p95_ns) if stats else "",
        f"{component.dispatches / calls:g}",
    ]


def render(session: ProfileSession, by: str = BY_NAME, width: int = 140) -> str:
    """The component table as plain text, ``width`` columns wide."""
    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None, force_terminal=False).print(
        build_components_table(session, by))
    return buffer.getvalue()
