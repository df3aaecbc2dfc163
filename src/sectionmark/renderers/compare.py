"""The outputs of `sectionmark compare`: table, CSV and JSON of a `Comparison`.

Not in ``RENDERERS``: those render one profile; these render the comparison
of two (`sectionmark.profiling.compare`, made by `sectionmark.workflows.compare`
from two modules run alternately or two profiles). Times are busy time per
call, as in the section table; names are data (``rich.text.Text``, never
markup, control characters shown escaped). The table has the sections, then
the components (sections of one name summed across blocks); the CSV has both,
told apart by its ``kind`` column.
"""

from __future__ import annotations

import io
import json
from typing import Optional

from rich.console import Console
from rich.table import Table
from rich.text import Text

from sectionmark.profiling.compare import CALLS, FASTER, ROUNDS, RUNS, SLOWER, Change, Comparison
from sectionmark.renderers.csv_format import csv_text
from sectionmark.renderers.table import format_ns
from sectionmark.section_path import printable

CSV_COLUMNS = ["section", "path", "verdict", "a_ns", "b_ns", "ratio", "low", "high", "change_percent", "a_calls",
               "b_calls", "coverage", "a_runs", "b_runs", "bound", "kind", "basis", "scaled"]
VERDICT_STYLES = {SLOWER: "red", FASTER: "green"}


def _ratio(value: Optional[float]) -> str:
    return f"{value:.3f}" if value is not None else ""


def _change(row: Change) -> str:
    return f"{row.change_percent:+.1f}%" if row.change_percent is not None else ""


def method_caption(comparison: Comparison) -> str:
    """What the intervals are over (each basis present), and the change each must lie beyond for a verdict."""
    judged = [row for row in [*comparison.sections, *comparison.components] if row.low is not None]
    parts = []
    for row in ([next((row for row in judged if row.basis == basis), None) for basis in (ROUNDS, RUNS, CALLS)]):
        if row is None:
            continue
        if row.basis == ROUNDS:
            parts.append(f"interval: {row.a_runs} interleaved rounds of {comparison.calls_per_round or '?'} calls, "
                         f"median B/A of the rounds and its sign-test interval ({row.coverage:.1%}); slower/faster: "
                         f"beyond {row.bound:g}%")
        elif row.basis == RUNS:
            how = ("fewer than 3 leaf sections: no whole-run factor to take out" if comparison.unscaled_runs
                   else "each run's whole-run factor taken out")
            parts.append(f"interval: runs ({row.a_runs} of A, {row.b_runs} of B), median B/A of every pair and its "
                         f"rank-test interval ({row.coverage:.1%}); slower/faster: beyond {row.bound:g}% ({how})")
        else:
            parts.append(f"interval: bootstrap of the calls of one run, {comparison.resamples} resamples, seed "
                         f"{comparison.seed} ({comparison.confidence:.0%}); slower/faster: beyond {row.bound:g}% "
                         "(the drift between runs)")
    return "; ".join(parts)


def build_table(comparison: Comparison, components: bool = False) -> Table:
    """One row per section (``components``: per component), time per call in A and B, B/A with its interval, the
    verdict."""
    if components:
        table = Table(title="components (sections of one name summed across blocks)", title_justify="left")
        table.add_column("Component")
        table.add_column("Sections A/B", justify="right")
    else:
        table = Table(title=Text(printable(f"B: {comparison.b}  vs  A: {comparison.a}")), title_justify="left",
                      caption=method_caption(comparison), caption_justify="left")
        table.add_column("Section")
    for column in ("A/call", "B/call", "B/A", "Interval", "Change"):
        table.add_column(column, justify="right")
    table.add_column("Verdict")
    for row in comparison.components if components else comparison.sections:
        if components:
            name = [Text(printable(row.name)), f"{row.a_sections}/{row.b_sections}"]
        else:
            name = [Text("  " * max(len(row.path) - 1, 0) + printable(row.path[-1] if row.path else "(unmarked)"))]
        table.add_row(
            *name,
            format_ns(row.a_ns) if row.a_ns is not None else "",
            format_ns(row.b_ns) if row.b_ns is not None else "",
            _ratio(row.ratio),
            f"{row.low:.3f} – {row.high:.3f}" if row.low is not None and row.high is not None else "",
            _change(row),
            Text(row.verdict, style=VERDICT_STYLES.get(row.verdict, "")),
        )
    return table


def render_table(comparison: Comparison, width: int = 140) -> str:
    """The sections' table, then the components', as plain text; then the note on rows without a verdict."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, force_terminal=False)
    console.print(build_table(comparison))
    console.print(build_table(comparison, components=True))
    if comparison.note:
        console.print(Text(printable(f"note: {comparison.note}")))
    return buffer.getvalue()


def render_csv(comparison: Comparison) -> str:
    """One row per section (``kind`` "section"), then per component (``kind`` "component": its name in
    ``section``, ``path`` empty); empty cells where a figure does not exist (a section in one profile only)."""
    return csv_text(CSV_COLUMNS, csv_rows(comparison))


def csv_rows(comparison: Comparison) -> list[list]:
    """The CSV's rows (`render_csv`), in ``CSV_COLUMNS`` order."""
    def cell(value: Optional[float], digits: int) -> object:
        return "" if value is None else round(value) if digits == 0 else round(value, digits)

    def figures(row: Change) -> list:
        return [row.verdict, cell(row.a_ns, 0), cell(row.b_ns, 0), cell(row.ratio, 6), cell(row.low, 6),
                cell(row.high, 6), cell(row.change_percent, 3), row.a_calls, row.b_calls, cell(row.coverage, 6),
                row.a_runs, row.b_runs, cell(row.bound, 3)]

    return [
        *([row.name, json.dumps(list(row.path), ensure_ascii=False), *figures(row), "section", row.basis,
           row.scaled] for row in comparison.sections),
        *([row.name, "", *figures(row), "component", row.basis, row.scaled] for row in comparison.components),
    ]


def render_json(comparison: Comparison) -> str:
    return json.dumps(comparison.to_json(), ensure_ascii=False, indent=1) + "\n"
