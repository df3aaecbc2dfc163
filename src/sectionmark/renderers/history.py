"""`sectionmark history`: each recorded section's time across runs, as text, an offline HTML page or a PNG.

Every point is one recorded run (a test session): the median of its fresh
runs' busy time per call, with the interval of that median, and its verdict
against the runs before it (`sectionmark.workflows.history.test_series`,
the pytest gate's rule). A run whose verdict differs from the previous run's
is marked: where a section started (or stopped) being slower. The HTML page
draws the same points as SVG with no script and a policy that allows
nothing to load; the PNG needs matplotlib (``sectionmark[chart]``).
"""

from __future__ import annotations

import html
import io
from typing import TYPE_CHECKING, Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from sectionmark.errors import SectionmarkError
from sectionmark.profiling.regression import SLOWER
from sectionmark.renderers.table import format_ns
from sectionmark.section_path import decode_path, format_path

if TYPE_CHECKING:
    from sectionmark.workflows.history import HistoryPoint

CHANGED = "◆ changed"
Series = tuple[str, str, list["HistoryPoint"]]  # test, section (encoded), its points oldest first
PLOT_WIDTH, PLOT_HEIGHT, MARGIN = 720, 220, 60


def section_name(section: str) -> str:
    return format_path(decode_path(section)) if section else "(unmarked)"


def render_text(series: Sequence[Series], width: int = 140) -> str:
    """One table per section: each run's median per call, its interval and verdict, changed verdicts marked."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, force_terminal=False)
    for test, section, points in series:
        table = Table(title=Text(f"{test}: {section_name(section)}"), title_justify="left")
        for column in ("Run", "Run id", "Commit", "Date", "Median/call", "Interval", "Runs", "Verdict", ""):
            table.add_column(column, justify="right" if column in ("Run", "Median/call", "Runs") else "left")
        for point in points:
            run, verdict = point.result.run, point.verdict
            change = f" {verdict.change_percent:+.1f}%" if verdict.change_percent is not None else ""
            table.add_row(str(run.number), Text(run.run_id), Text(run.commit or ""), run.date[:16].replace("T", " "),
                          format_ns(point.median_ns), f"{format_ns(point.low_ns)} – {format_ns(point.high_ns)}",
                          str(len(point.result.values_ns)), verdict.verdict + change, CHANGED if point.changed else "")
        console.print(table)
    return buffer.getvalue()


def render_html(series: Sequence[Series]) -> str:
    """One self-contained page: a plot per section (SVG, no script) and its table."""
    plots = "".join(f"<h2>{html.escape(test)}: {html.escape(section_name(section))}</h2>{_svg(points)}"
                    for test, section, points in series)
    table = html.escape(render_text(series))
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            "<title>sectionmark history</title><style>body{font-family:sans-serif;margin:1.5em}"
            "svg{background:#fafafa;border:1px solid #ddd}pre{font-size:12px}</style></head><body>"
            f"<h1>sectionmark history</h1><p>median busy time per call of each recorded run, with the interval of the "
            f"median over its fresh runs; red: judged slower than the runs before it; a ring: the verdict changed</p>"
            f"{plots}<h2>Tables</h2><pre>{table}</pre></body></html>\n")


def _svg(points: Sequence["HistoryPoint"]) -> str:
    top = max(point.high_ns for point in points) or 1.0
    step = (PLOT_WIDTH - 2 * MARGIN) / max(len(points) - 1, 1)

    def x(index: int) -> float:
        return MARGIN + index * step

    def y(ns: float) -> float:
        return PLOT_HEIGHT - 30 - (PLOT_HEIGHT - 50) * ns / top

    parts = [f"<line x1=\"{MARGIN}\" y1=\"{y(0):.1f}\" x2=\"{PLOT_WIDTH - MARGIN / 2}\" y2=\"{y(0):.1f}\" "
             "stroke=\"#999\"/>",
             f"<text x=\"4\" y=\"{y(top) + 4:.1f}\" font-size=\"11\">{html.escape(format_ns(top))}</text>",
             f"<text x=\"4\" y=\"{y(0) + 4:.1f}\" font-size=\"11\">0</text>"]
    line = " ".join(f"{x(index):.1f},{y(point.median_ns):.1f}" for index, point in enumerate(points))
    parts.append(f"<polyline points=\"{line}\" fill=\"none\" stroke=\"#4a78c2\"/>")
    for index, point in enumerate(points):
        color = "#c0392b" if point.verdict.verdict == SLOWER else "#4a78c2"
        title = html.escape(f"run {point.result.run.number} {point.result.run.run_id} ({point.result.run.commit or 'no commit'}): "
                            f"{format_ns(point.median_ns)} per call, {point.verdict.verdict}")
        parts.append(f"<g class=\"run\" data-run=\"{point.result.run.number}\"><title>{title}</title>"
                     f"<line x1=\"{x(index):.1f}\" y1=\"{y(point.low_ns):.1f}\" x2=\"{x(index):.1f}\" "
                     f"y2=\"{y(point.high_ns):.1f}\" stroke=\"{color}\" stroke-width=\"2\"/>"
                     f"<circle cx=\"{x(index):.1f}\" cy=\"{y(point.median_ns):.1f}\" r=\"4\" fill=\"{color}\"/>"
                     + (f"<circle class=\"changed\" cx=\"{x(index):.1f}\" cy=\"{y(point.median_ns):.1f}\" r=\"9\" "
                        "fill=\"none\" stroke=\"#000\"/>" if point.changed else "")
                     + f"<text x=\"{x(index):.1f}\" y=\"{PLOT_HEIGHT - 10}\" font-size=\"11\" text-anchor=\"middle\">"
                     f"{point.result.run.number}</text></g>")
    return (f"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{PLOT_WIDTH}\" height=\"{PLOT_HEIGHT}\" "
            f"font-family=\"sans-serif\">{''.join(parts)}</svg>")


def render_png(series: Sequence[Series]) -> bytes:
    """The same plots, one under the other, as a PNG (matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError:
        raise SectionmarkError("--png needs matplotlib: pip install 'sectionmark[chart]'") from None
    figure, axes = pyplot.subplots(len(series), 1, figsize=(8, 2.6 * len(series)), squeeze=False)
    for axis, (test, section, points) in zip(axes[:, 0], series):
        numbers = [point.result.run.number for point in points]
        medians = [point.median_ns / 1e3 for point in points]
        errors = [[(point.median_ns - point.low_ns) / 1e3 for point in points],
                  [(point.high_ns - point.median_ns) / 1e3 for point in points]]
        axis.errorbar(numbers, medians, yerr=errors, marker="o", capsize=3, color="#4a78c2")
        for point, number, median in zip(points, numbers, medians):
            if point.verdict.verdict == SLOWER:
                axis.plot([number], [median], "o", color="#c0392b", zorder=3)
            if point.changed:
                axis.plot([number], [median], "o", markersize=14, markerfacecolor="none", color="black")
        axis.set_title(f"{test}: {section_name(section)}", fontsize=9, loc="left")
        axis.set_ylabel("µs per call")
        axis.set_ylim(bottom=0)
        axis.set_xticks(numbers)
    axes[-1, 0].set_xlabel("recorded run")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    pyplot.close(figure)
    return buffer.getvalue()
