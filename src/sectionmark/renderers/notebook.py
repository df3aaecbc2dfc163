"""What Jupyter shows for a result: a one-line text summary, and the inline HTML view.

A notebook evaluates ``prof`` in a cell and shows its ``_repr_html_`` (or,
in a terminal and in a notebook that cannot show HTML, its ``__repr__``).
The dataclass repr of a profile was tens of thousands of characters of
nested rows; the summary says what the result is in one line: function,
calls, device, coverage, the sections that took the most time.

The inline view of a profile or a replay is the HTML report itself
(`sectionmark.renderers.html`), in an ``<iframe srcdoc>`` sandboxed to
scripts only. Inside the frame the report keeps its own
Content-Security-Policy (its script allowed by hash, nothing fetched), its
element ids cannot collide with another report's in the same notebook, and
its script cannot reach the notebook's page; the same output works in
JupyterLab, the classic notebook and a notebook exported by ``nbconvert
--to html`` (tests/entry/test_notebook.py opens one in Chromium). A
comparison is a plain table (it has no script), a peak its figures as
``sectionmark peak`` prints them.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Union

from sectionmark.renderers.compare import build_table
from sectionmark.renderers.html import render_replay, rich_table_html
from sectionmark.renderers.table import format_ns
from sectionmark.profiling.compare import FASTER, SLOWER, Comparison
from sectionmark.profiling.read import ProfileRun
from sectionmark.profiling.roofline import Peak
from sectionmark.profiling.session import ProfileSession
from sectionmark.section_path import format_path

if TYPE_CHECKING:
    from sectionmark.profiling.stats import SectionStats
    from sectionmark.workflows.replay import ReplayProfile

FRAME_HEIGHT_PX = 640  # the inline report's height; the frame scrolls, and the user can drag it taller
TOP_SECTIONS = 3  # sections named in a summary
Result = Union[ProfileSession, ProfileRun, "ReplayProfile", Comparison, Peak]


def summary(result: Result) -> str:
    """One line saying what ``result`` is (its ``__repr__``)."""
    if isinstance(result, ProfileRun):
        return f"<ProfileRun {session_summary(result.session)}>"
    if isinstance(result, ProfileSession):
        return f"<ProfileSession {session_summary(result)}>"
    if hasattr(result, "functions"):  # a replay's profiles
        parts = [f"{entry.function} ({result.calls_summary(entry)}): "
                 + (session_summary(entry.profile, with_function=False) if entry.profile else "ran no dispatch")
                 for entry in result.functions]
        return "<ReplayProfile " + "; ".join(parts) + ">"
    if isinstance(result, Comparison):
        return f"<Comparison {comparison_summary(result)}>"
    return (f"<Peak {result.device}: {result.bandwidth_gb_per_s:.1f} GB/s, {result.gflop_per_s:.1f} GFLOP/s, ridge "
            f"{result.ridge:.2f} FLOPs/byte ({result.workers} workers, {result.host}, {result.date})>")


def inline_html(result: Result) -> str:
    """The HTML a notebook shows for ``result`` (its ``_repr_html_``)."""
    if isinstance(result, (ProfileSession, ProfileRun)):  # a run's report draws its calls from its events
        return framed(result.render("html"), summary(result))
    if hasattr(result, "functions"):  # a replay's profiles
        return framed(render_replay(result), summary(result))
    if isinstance(result, Peak):
        return f"<pre>{html.escape(result.text())}</pre>"
    return (f"<div class=\"sectionmark-compare\"><p>{html.escape(comparison_summary(result))}</p>"
            + rich_table_html(build_table(result), "sections")
            + rich_table_html(build_table(result, components=True), "components") + "</div>")


def framed(page: str, title: str) -> str:
    """``page`` (a whole HTML document) in a sandboxed ``srcdoc`` frame: its scripts run, in an opaque origin."""
    return (f"<iframe sandbox=\"allow-scripts\" title=\"{html.escape(title, quote=True)}\" "
            f"style=\"width:100%;height:{FRAME_HEIGHT_PX}px;border:1px solid #ccc;resize:vertical\" "
            f"srcdoc=\"{html.escape(page, quote=True)}\"></iframe>")


def session_summary(session: ProfileSession, with_function: bool = True) -> str:
    """Function, calls, device, busy time per call, coverage and the sections of most exclusive time."""
    calls = max(session.calls, 1)
    warmup = f" (+{session.warmup} warmup)" if session.warmup else ""
    head = (f"{session.function or 'profile'}: " if with_function else "") + f"{session.calls} calls{warmup}"
    device = f" on {session.device}" if session.device else ""
    runs = f", {session.runs} runs" if session.runs > 1 else ""
    top = ", ".join(f"{_label(row)} {row.exclusive_ns / max(session.total_ns, 1):.1%}" for row in top_sections(session))
    return (f"{head}{device}{runs}, {format_ns(session.total_ns / calls)} busy/call, "
            f"coverage {100 - 100 * session.coverage_error:.2f}%, {len(session.section_rows)} sections"
            + (f"; top: {top}" if top else ""))


def top_sections(session: ProfileSession, count: int = TOP_SECTIONS) -> list["SectionStats"]:
    """The sections (and the unmarked row) that took the most time of their own (exclusive busy time)."""
    ranked = sorted((row for row in session.sections if row.exclusive_ns > 0), key=lambda row: -row.exclusive_ns)
    return ranked[:count]


def comparison_summary(comparison: Comparison) -> str:
    """B against A, how many sections got slower or faster, and the slower ones by name."""
    slower = [row for row in comparison.sections if row.verdict == SLOWER]
    faster = sum(row.verdict == FASTER for row in comparison.sections)
    named = ", ".join(f"{format_path(row.path) or '(unmarked)'} {row.change_percent:+.0f}%" for row in slower
                      if row.change_percent is not None)
    return (f"B: {comparison.b} vs A: {comparison.a}: {len(slower)} sections slower, {faster} faster, "
            f"{len(comparison.sections) - len(slower) - faster} other" + (f"; slower: {named}" if named else ""))


def _label(row: "SectionStats") -> str:
    return format_path(row.path) if row.path else "(unmarked)"
