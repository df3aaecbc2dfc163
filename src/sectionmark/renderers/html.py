"""One self-contained HTML profile report: the page people open.

Everything is in the one file: the views are made here from the same
functions as the other outputs (the section table's figures and notes, the
component and kernel tables, the read/write graph's edges), a small
hand-written script (``report.js``) and style sheet (``report.css``) are
inlined, and the page's Content-Security-Policy allows nothing but that
script (by its hash): no request leaves the file, and a hostile name could
not run even if it were not escaped. Every string from a map or a profile is
escaped here (markup) or written into the embedded JSON with ``<``, ``>``
and ``&`` as ``\\u`` escapes, which the script only ever sets as text.

A tab holds one profiled function (a replayed recording has one per
function): a header (module, device, calls, coverage, the profiler's own
cost), the foldable section tree, a timeline of one call, the component
view, the sortable and filterable kernel table and the read/write graph laid
out as SVG (`sectionmark.renderers.graph.layered_svg`).

The timeline draws one measured call: each dispatch as a bar on its queue
(concurrent dispatches on extra lanes), coloured by section, with the
section spans above (`sectionmark.profiling.timeline`, as in the Perfetto
and Tracy outputs). Its chooser offers every call of a short run, else the
calls that matter (first, fastest, p50, p95, slowest, last); the p50 call is
shown first. A call of more than ``MAX_BARS`` dispatches draws consecutive
dispatches of one section on one row as one bar (their count in its hover
text), so a huge call stays a light page. The kernel table and the graph,
thousands of elements for a big model, are laid out only when scrolled to
(CSS ``content-visibility``): a 2,000-site profile opens in about a second
(benchmarks/bench_html.py).
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
from rich.table import Table

from sectionmark.section_path import format_path
from sectionmark.profiling.queue_time import measured_call_starts
from sectionmark.profiling.attribute import Attribution
from sectionmark.profiling.section_time import first_dispatch_starts
from sectionmark.profiling.session import ProfileSession
from sectionmark.profiling.timeline import Span, build_timelines
from sectionmark.renderers.components import build_components_table
from sectionmark.renderers.graph import layered_svg, report_colors
from sectionmark.renderers.kernels import build_kernels_table
from sectionmark.renderers.table import SHARED_MARK, format_ns, notes, profiler_cost_text

if TYPE_CHECKING:
    from sectionmark.workflows.replay import ReplayProfile

MAX_LISTED_CALLS = 30  # a run of at most this many calls offers each of them in the timeline's chooser
MAX_BARS = 20_000  # dispatch bars of one call; beyond, consecutive dispatches of a section on a row merge
TIMELINE_WIDTH = 1180  # pixels


@dataclass(frozen=True)
class Tab:
    """One function's part of the report."""

    name: str
    session: Optional[ProfileSession]  # None: the function ran no dispatch (a recording's function)
    subtitle: str = ""
    events: Optional[Attribution] = None  # the run's events, for the timeline of a call (None: not drawn)


def render(session: ProfileSession, title: Optional[str] = None, events: Optional[Attribution] = None) -> str:
    """The report of one profile as one HTML page; ``title`` replaces the default heading; ``events``: the run's,
    for the timeline of a call (`sectionmark.ProfileRun` passes them)."""
    name = session.function or "profile"
    return page([Tab(name, session, events=events)], title or f"sectionmark profile: {name}")


def render_replay(replay: "ReplayProfile", title: Optional[str] = None) -> str:
    """The report of a replayed recording (`sectionmark.workflows.replay.ReplayProfile`): one tab per function."""
    tabs = [Tab(entry.function, entry.profile, replay.calls_summary(entry),
                entry.profile.attribution if entry.profile is not None else None) for entry in replay.functions]
    return page(tabs, title or "sectionmark profile of a recording: " + ", ".join(tab.name for tab in tabs))


def page(tabs: list[Tab], title: str, overview: str = "") -> str:
    """The whole document: ``overview`` (markup above the tabs: a run on several devices' views across them),
    tab bar (when there are several), one section per tab, data, style and script."""
    data = {"tabs": [_tab_data(tab.session, tab.events) for tab in tabs]}
    bar = ("<nav class=\"tabs\">" + "".join(f"<button type=\"button\">{_text(tab.name)}</button>" for tab in tabs)
           + "</nav>") if len(tabs) > 1 else ""
    body = "".join(_tab(index, tab, len(tabs) > 1) for index, tab in enumerate(tabs))
    script = resources.files(__package__).joinpath("report.js").read_text(encoding="utf-8")
    style = resources.files(__package__).joinpath("report.css").read_text(encoding="utf-8")
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    policy = f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; img-src data:"
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{policy}\">"
            f"<title>{_text(title)}</title><style>{style}</style></head><body>"
            f"<h1>{_text(title)}</h1>{overview}{bar}{body}"
            f"<script type=\"application/json\" id=\"sm-data\">{script_json(data)}</script>"
            f"<script>{script}</script></body></html>\n")


def script_json(data: Any) -> str:
    """JSON safe inside a ``<script>`` element: no ``<``, ``>`` or ``&`` (``</script>`` cannot end it)."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def rich_table_html(table: Table, table_id: str, classes: str = "") -> str:
    """A rich Table (the text renderers' own) as an HTML table: the same headers and cells, escaped."""
    headers = "".join(f"<th>{_text(str(column.header))}</th>" for column in table.columns)
    columns = [(column.justify, [_text(str(cell)) for cell in column.cells]) for column in table.columns]
    rows = ["<tr>" + "".join(f"<td class=\"{justify}\">{cells[index]}</td>" for justify, cells in columns) + "</tr>"
            for index in range(table.row_count)]
    caption = f"<caption>{_text(str(table.caption))}</caption>" if table.caption else ""
    return (f"<table id=\"{table_id}\" class=\"{classes}\">{caption}<thead><tr>{headers}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")


# ---------------------------------------------------------------------- one tab


def _tab(index: int, tab: Tab, headed: bool) -> str:
    """One tab's section; ``headed``: with the function's name as its heading (several tabs)."""
    session = tab.session
    heading = (f"<h2>{_text(tab.name)}</h2>" if headed else "") + (
        f"<p class=\"subtitle\">{_text(tab.subtitle)}</p>" if tab.subtitle else "")
    if session is None:
        return (f"<section class=\"tab\" id=\"tab{index}\">{heading}"
                "<p>This function ran no dispatch in the replay: nothing to attribute.</p></section>")
    kernels_id, components_id = f"tab{index}-kernels", f"tab{index}-components"
    graph = layered_svg(session, report_colors(session))
    timeline = (f"<div class=\"timeline\" data-tab=\"{index}\"><label>call <select></select></label> "
                "<button type=\"button\" class=\"reset\">reset zoom</button> "
                "<span class=\"hint\">wheel: zoom, drag: pan, hover: details</span>"
                f"<div class=\"scroll\"><svg class=\"calls\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{TIMELINE_WIDTH}\" "
                "height=\"40\" font-family=\"sans-serif\"></svg></div></div>"
                if tab.events is not None else
                "<p>This profile was read back from JSON: it has no per-dispatch events to draw.</p>")
    return (f"<section class=\"tab\" id=\"tab{index}\">{heading}{_header(session)}"
            f"<h3>Sections</h3>{_tree(index, session)}"
            f"<h3>Timeline of one call</h3>{timeline}"
            f"<h3>Components</h3>{rich_table_html(build_components_table(session), components_id, 'sortable')}"
            f"<h3>Kernels</h3><input class=\"filter\" data-table=\"{kernels_id}\" placeholder=\"filter kernels\">"
            f"<div class=\"deferred\">{rich_table_html(build_kernels_table(session), kernels_id, 'sortable')}</div>"
            "<h3>Read/write graph</h3><p class=\"hint\">dispatch sites in execution order, coloured by section; "
            "red: a tensor read by several dispatches; dashed orange: data movement; hover for details</p>"
            f"<div class=\"scroll graph deferred\">{graph}</div></section>")


def _header(session: ProfileSession) -> str:
    calls = max(session.calls, 1)
    facts = [("module", session.module or ("compiled in this process" if session.device else None)),
             ("device", session.device), ("function", session.function),
             ("calls", f"{session.calls}" + (f" (+{session.warmup} warmup)" if session.warmup else "")
              + ("" if session.calls_known else " (calls could not be told apart)")),
             ("coverage", f"sections + unmarked = {100 - 100 * session.coverage_error:.3f}% of the measured "
                          "dispatch time"),
             ("dispatch busy / wall", f"{format_ns(session.total_ns / calls)} / {format_ns(session.wall_ns / calls)} "
                                      "per call"),
             ("call time", f"{format_ns(session.call_time.call_ns / calls)} per call (p50 "
                           f"{format_ns(session.call_time.call_p50_ns)})" if session.call_time else None),
             ("profiler cost", _cost(session))]
    cells = "".join(f"<div><dt>{_text(name)}</dt><dd>{_text(value)}</dd></div>" for name, value in facts if value)
    return f"<dl class=\"facts\">{cells}</dl>"


def _cost(session: ProfileSession) -> Optional[str]:
    return None if session.profiler_cost is None else profiler_cost_text(session.profiler_cost)


def _tree(index: int, session: ProfileSession) -> str:
    calls = max(session.calls, 1)
    rows, colors = session.sections, report_colors(session)
    per = "/call" if session.calls_known else " (total)"
    headers = ["Section", "Share", f"Busy{per}", f"Wall{per}", f"Excl{per}", f"Shared{per}", "p50", "p95",
               f"Dispatches{per}", "Start p50", "End p50"]
    body = []
    for number, row in enumerate(rows):
        if row.unmarked and row.busy_ns == 0:
            continue
        parent = number + 1 < len(rows) and rows[number + 1].path[: len(row.path)] == row.path and row.path
        toggle = "<button type=\"button\" class=\"fold\" title=\"fold\"></button>" if parent else "<span class=\"leaf\"></span>"
        name = f"{toggle}<span class=\"swatch\" style=\"background:{colors[row.name]}\"></span>{_text(row.leaf)}"
        if row.shared_ns:
            others = ", ".join(f"{format_path(path) if path else '(unmarked)'} {format_ns(ns / calls)}"
                               for path, ns in row.shared_with.items())
            name += f" <abbr class=\"fused\" title=\"{_text('shares fused dispatches with: ' + others)}\">{SHARED_MARK}</abbr>"
        attributes = f"id=\"tab{index}-row{number}\" data-depth=\"{row.depth}\" data-path=\"{_text(row.name)}\""
        classes = "unmarked" if row.unmarked else "note" if row.note else ""
        cell = f"<td class=\"name\" style=\"padding-left:{0.3 + 1.2 * row.depth:.1f}em\">{name}</td>"
        if row.note:
            body.append(f"<tr {attributes} class=\"{classes}\">{cell}<td colspan=\"{len(headers) - 1}\">"
                        f"{_text(row.note)}</td></tr>")
            continue
        bar = f"<div class=\"bar\"><div style=\"width:{100 * row.share:.2f}%\"></div><span>{row.share:.1%}</span></div>"
        values = [format_ns(row.busy_ns / calls), format_ns(row.wall_ns / calls), format_ns(row.exclusive_ns / calls),
                  format_ns(row.shared_ns / calls) if row.shared_ns else "",
                  format_ns(row.per_call.p50_ns) if session.calls_known else "",
                  format_ns(row.per_call.p95_ns) if session.calls_known else "", f"{row.dispatches / calls:g}",
                  format_ns(row.start_ns.p50) if row.start_ns else "", format_ns(row.end_ns.p50) if row.end_ns else ""]
        body.append(f"<tr {attributes} class=\"{classes}\">{cell}<td>{bar}</td>"
                    + "".join(f"<td class=\"right\">{_text(value)}</td>" for value in values) + "</tr>")
    total = [format_ns(session.total_ns / calls), format_ns(session.wall_ns / calls), "", "", "", "",
             f"{sum(site.dispatches for site in session.sites) / calls:g}", "", ""]
    footer = ("<tr><td>Total</td><td>100.0%</td>" + "".join(f"<td class=\"right\">{value}</td>" for value in total)
              + "</tr>")
    cost = _cost(session)
    if cost:
        footer += f"<tr class=\"cost\"><td colspan=\"{len(headers)}\">profiler cost: {_text(cost)}</td></tr>"
    notes_list = "".join(f"<li>{_text(line)}</li>" for line in notes(session))
    head = "".join(f"<th>{_text(header)}</th>" for header in headers)
    return (f"<table class=\"tree\" id=\"tab{index}-tree\"><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody>"
            f"<tfoot>{footer}</tfoot></table><ul class=\"notes\">{notes_list}</ul>")


# ---------------------------------------------------------------------- the data the script draws


def _tab_data(session: Optional[ProfileSession], events: Optional[Attribution]) -> Optional[dict[str, Any]]:
    if session is None:
        return None
    colors = report_colors(session)
    return {"sections": [[row.name, colors[row.name]] for row in session.sections],
            "timeline": timeline_data(session, events) if events is not None else None}


def call_lengths(attribution: Attribution) -> tuple[np.ndarray, np.ndarray]:
    """Each measured call's start (as the section offsets count it) and its length to its last dispatch's end."""
    events, calls = attribution.events, max(attribution.calls, 1)
    call = np.minimum(attribution.event_calls, calls - 1).astype(np.int64)
    starts = first_dispatch_starts(events["start_ns"], call, calls,
                                   measured_call_starts(attribution.queue_spans, attribution.calls))
    ends = np.full(calls, np.iinfo(np.int64).min, np.int64)
    np.maximum.at(ends, call, events["end_ns"].astype(np.int64))
    return starts, np.where(ends > starts, ends - starts, 0)


def shown_calls(lengths: np.ndarray) -> tuple[list[tuple[int, str]], int]:
    """The calls the chooser offers, as (call, why), and the index of the p50 call among them."""
    order = np.argsort(lengths, kind="stable")
    p50 = int(order[(len(order) - 1) // 2])
    if len(lengths) <= MAX_LISTED_CALLS:
        listed = [(call, "p50" if call == p50 else "") for call in range(len(lengths))]
    else:
        marks = {int(order[0]): "fastest", p50: "p50", int(order[int(0.95 * (len(order) - 1))]): "p95",
                 int(order[-1]): "slowest"}
        for call, why in ((0, "first"), (len(lengths) - 1, "last")):
            marks.setdefault(call, why)
        listed = sorted(marks.items())
    return listed, next(index for index, (call, _why) in enumerate(listed) if call == p50)


def timeline_data(session: ProfileSession, attribution: Attribution) -> dict[str, Any]:
    """Per shown call of the run's events (``attribution``): its rows (section depths, dispatches and lanes per
    queue), section spans and dispatch bars, times in ns from the call's start; strings (export keys, section
    descriptions) once in ``strings``."""
    column = {row.path: index for index, row in enumerate(session.sections)}
    starts, lengths = call_lengths(attribution)
    listed, shown = shown_calls(lengths)
    strings: dict[str, int] = {}
    call_of = np.minimum(attribution.event_calls, max(attribution.calls, 1) - 1)

    def string(text: str) -> int:
        return strings.setdefault(text, len(strings))

    described = []
    for call, why in listed:
        origin = int(starts[call])
        rows: list[str] = []
        spans, bars = [], []
        for queue in build_timelines(attribution.select(call_of == call)):
            depth = max((d + 1 for span in queue.main for d, s in span.walk() if s.kind == "section"), default=0)
            first = len(rows)
            rows += [f"queue {queue.queue}: sections" if d == 0 else "" for d in range(depth)]
            rows += [f"queue {queue.queue}: dispatches"]
            rows += [f"queue {queue.queue}: concurrent {n}" for n in range(1, len(queue.lanes) + 1)]
            tracks = [(first + depth, queue.main)] + [(first + depth + n, lane) for n, lane in enumerate(queue.lanes, 1)]
            for row, top in tracks:
                for span in top:
                    for d, item in span.walk():
                        if item.kind == "section":
                            spans.append([item.start_ns - origin, item.end_ns - origin, column[item.path], first + d])
                        else:
                            bars.append(_bar(item, origin, row, column, string))
        described.append({"call": call, "label": f"call {call}" + (f" ({why})" if why else "")
                          + f": {format_ns(lengths[call])}", "length": int(lengths[call]), "rows": rows,
                          "spans": spans, "bars": merge_bars(bars) if len(bars) > MAX_BARS else bars})
    return {"calls": described, "shown": shown, "strings": list(strings)}


def _bar(span: Span, origin: int, row: int, column: dict, string) -> list:
    """[start, end, section column, row, export key string, sections string, dispatches]."""
    return [span.start_ns - origin, span.end_ns - origin, column[span.path], row, string(span.name),
            string(span.args["sections"]), 1]


def merge_bars(bars: list[list]) -> list[list]:
    """Consecutive bars of one row and section as one (from the first start to the last end), counting them."""
    merged: dict[int, list] = {}
    result = []
    for bar in sorted(bars, key=lambda bar: (bar[3], bar[0])):
        last = merged.get(bar[3])
        if last is not None and last[2] == bar[2]:
            last[1] = max(last[1], bar[1])
            last[6] += 1
            continue
        merged[bar[3]] = bar = list(bar)
        result.append(bar)
    return result


def _text(value: object) -> str:
    return html.escape(str(value), quote=True)

