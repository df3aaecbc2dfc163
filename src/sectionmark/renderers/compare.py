"""`sm.compare` on profile files, and the outputs of `sectionmark compare`: table, CSV and JSON.

Not in ``RENDERERS``: those render one profile; these render the comparison
of two (`sectionmark.profiling.compare`), read here from the profile JSON
files `--json` writes (`json_out.load`). Times are busy time per call, as in
the section table; names are data (``rich.text.Text``, never markup).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Optional, Union

from rich.console import Console
from rich.table import Table
from rich.text import Text

from sectionmark.errors import SectionmarkError
from sectionmark.profiling.compare import (CONFIDENCE, FASTER, MIN_CHANGE, RESAMPLES, SEED, SLOWER, Comparison,
                                           SectionChange, compare_sessions)
from sectionmark.profiling.session import ProfileSession
from sectionmark.renderers import json_out
from sectionmark.renderers.csv_out import csv_text
from sectionmark.renderers.table import format_ns

CSV_COLUMNS = ["section", "path", "verdict", "a_ns", "b_ns", "ratio", "low", "high", "change_percent", "a_calls",
               "b_calls", "basis"]
VERDICT_STYLES = {SLOWER: "red", FASTER: "green"}


def compare(a: Union[ProfileSession, str, Path], b: Union[ProfileSession, str, Path], *,
            resamples: int = RESAMPLES, confidence: float = CONFIDENCE, seed: int = SEED,
            min_change: float = MIN_CHANGE) -> Comparison:
    """Compare profile ``b`` against ``a``: sessions, or profile JSON files (``prof.save("run.json")``, ``--json``).

    Per section: busy time per call in A and B, the ratio B/A, its bootstrap
    confidence interval from the per-call samples (``resamples`` draws, seeded
    with ``seed``), and "faster"/"slower" only when the interval excludes 1 by
    more than ``min_change`` percent (run-to-run drift: `sectionmark.profiling.compare`).
    """
    labels = [str(x) if isinstance(x, (str, Path)) else name for x, name in ((a, "A"), (b, "B"))]
    return compare_sessions(load_profile(a), load_profile(b), labels=labels, resamples=resamples,
                            confidence=confidence, seed=seed, min_change=min_change)


def load_profile(source: Union[ProfileSession, str, Path]) -> ProfileSession:
    """A session as is, or a profile JSON file read back; an error names the file."""
    if isinstance(source, ProfileSession):
        return source
    try:
        return json_out.load(source)
    except SectionmarkError as error:
        message = str(error)
        raise SectionmarkError(message if str(source) in message else f"{source}: {message}") from None


def _ratio(value: Optional[float]) -> str:
    return f"{value:.3f}" if value is not None else ""


def _change(row: SectionChange) -> str:
    return f"{row.change_percent:+.1f}%" if row.change_percent is not None else ""


def build_table(comparison: Comparison) -> Table:
    """One row per section: time per call in A and B, B/A with its interval, the verdict."""
    bases = " or ".join(sorted({row.basis for row in comparison.sections if row.low is not None})) or "calls"
    table = Table(title=Text(f"B: {comparison.b}  vs  A: {comparison.a}"), title_justify="left",
                  caption=f"interval: bootstrap of the {bases}, {comparison.resamples} resamples, seed "
                          f"{comparison.seed}; slower/faster: beyond {comparison.min_change:g}%",
                  caption_justify="left")
    table.add_column("Section")
    for column in ("A/call", "B/call", "B/A", f"{comparison.confidence:.0%} interval", "Change"):
        table.add_column(column, justify="right")
    table.add_column("Verdict")
    for row in comparison.sections:
        depth = max(len(row.path) - 1, 0)
        table.add_row(
            Text("  " * depth + (row.path[-1] if row.path else "(unmarked)")),
            format_ns(row.a_ns) if row.a_ns is not None else "",
            format_ns(row.b_ns) if row.b_ns is not None else "",
            _ratio(row.ratio),
            f"{row.low:.3f} – {row.high:.3f}" if row.low is not None and row.high is not None else "",
            _change(row),
            Text(row.verdict, style=VERDICT_STYLES.get(row.verdict, "")),
        )
    return table


def render_table(comparison: Comparison, width: int = 140) -> str:
    """The table as plain text."""
    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None, force_terminal=False).print(build_table(comparison))
    return buffer.getvalue()


def render_csv(comparison: Comparison) -> str:
    """One row per section; empty cells where a figure does not exist (a section in one profile only)."""
    def cell(value: Optional[float], digits: int) -> object:
        return "" if value is None else round(value) if digits == 0 else round(value, digits)

    return csv_text(CSV_COLUMNS, (
        [row.name, json.dumps(list(row.path), ensure_ascii=False), row.verdict, cell(row.a_ns, 0), cell(row.b_ns, 0),
         cell(row.ratio, 6), cell(row.low, 6), cell(row.high, 6), cell(row.change_percent, 3), row.a_calls,
         row.b_calls, row.basis]
        for row in comparison.sections
    ))


def render_json(comparison: Comparison) -> str:
    return json.dumps(comparison.to_json(), ensure_ascii=False, indent=1) + "\n"
