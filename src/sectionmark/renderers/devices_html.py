"""The HTML report of a run on several devices: the views across devices above one tab per device.

Above the tabs (`sectionmark.renderers.html.page`'s ``overview``):

* the sections across devices, with a busy-per-call column per device
  (`sectionmark.renderers.devices.sections_table`, the text table's);
* each device's time split (compute / transfer / gaps / queue / waiting / idle per
  call, `times_table`), drawn as one stacked bar per device;
* one call on every device, one lane per device on the devices' shared host
  clock: the device's dispatches coloured by section (concurrent ones on extra
  rows), its queue operations (command-buffer executions, which hold its
  copies to and from the other devices; transfers; allocations) and the time
  it waited while another device ran. The call drawn is the p50 of the calls'
  windows across devices (`DeviceProfile.call_windows`, those of the time split).

Each device's tab is the one-device report of its session and events (section
tree, its timeline of a call, components, kernels, graph). The lanes are drawn
here as SVG markup (no script): every name in them is escaped as the rest of
the report is.
"""

from __future__ import annotations

import html
from typing import Optional

import numpy as np

from sectionmark.profiling.attribute import Attribution
from sectionmark.profiling.devices import DEVICE_TIME_PARTS, DeviceProfile
from sectionmark.profiling.queue_time import QUEUE_ROWS, ROW_OF_EVENT_TYPE
from sectionmark.profiling.timeline import dispatch_label, session_colors
from sectionmark.renderers.devices import device_name, sections_table, time_note, times_table
from sectionmark.renderers.html import MAX_BARS, TIMELINE_WIDTH, Tab, merge_bars, page, rich_table_html, shown_calls
from sectionmark.renderers.table import format_ns
from sectionmark.section_map import css_color

LABEL_WIDTH = 220  # pixels left of the lanes for their names
ROW_HEIGHT, ROW_GAP = 16, 4
# The colours of the parts of a device's time (the split's bars, the lanes' queue rows and waiting).
PART_COLORS = {"compute": "#4c78a8", "transfer": "#f58518", "gaps": "#f2cf5b", "queue": "#9d9d9d",
               "waiting": "#e45756", "idle": "#e8e8e8", "untimed": "#b9a6d6"}
QUEUE_COLORS = {"command_buffer": "#c9c9c9", "transfer": PART_COLORS["transfer"], "allocation": "#9d9d9d",
                "other_queue": "#9d9d9d"}

Interval = tuple[int, int]


def render_devices(profile: DeviceProfile, title: Optional[str] = None,
                   events: Optional[dict[int, Attribution]] = None) -> str:
    """The report of a run on several devices as one HTML page; ``events``: each device's, by ordinal
    (`sectionmark.DeviceRun` passes them), for the lanes and each device's timeline of a call."""
    events = events or {}
    tabs = [Tab(device_name(device), device.session, events=events.get(device.ordinal)) for device in profile.devices]
    name = profile.function or "profile"
    return page(tabs, title or f"sectionmark profile on {len(profile.devices)} devices: {name}",
                overview(profile, events))


def overview(profile: DeviceProfile, events: dict[int, Attribution]) -> str:
    """The views across devices (module docstring), as markup."""
    parts = ["<section class=\"devices\"><h2>Sections across devices</h2>",
             rich_table_html(sections_table(profile), "devices-sections", "sortable")]
    times = times_table(profile)
    parts.append("<h2>Each device's time</h2>")
    if times is None:
        parts.append("<p>Not known: the profile has no queue operations of every call.</p>")
    else:
        parts += [rich_table_html(times, "devices-time", "sortable"), split_svg(profile),
                  f"<p class=\"hint\">{_text(time_note(profile))}</p>"]
    parts.append("<h2>One call on every device</h2>")
    if all(device.ordinal in events for device in profile.devices):
        parts.append(lanes_svg(profile, events))
    else:
        parts.append("<p>This profile was read back from JSON: it has no per-dispatch events to draw.</p>")
    parts.append("</section>")
    return "".join(parts)


def split_svg(profile: DeviceProfile) -> str:
    """One stacked bar per device: its parts of the calls' windows, in `DEVICE_TIME_PARTS` order."""
    width, height = TIMELINE_WIDTH - LABEL_WIDTH, len(profile.devices) * (ROW_HEIGHT + ROW_GAP) + 20
    out = [f"<svg class=\"device-split\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{TIMELINE_WIDTH}\" "
           f"height=\"{height}\" font-family=\"sans-serif\" font-size=\"11\">"]
    for row, device in enumerate(profile.devices):
        y, x, time = row * (ROW_HEIGHT + ROW_GAP), LABEL_WIDTH, device.time
        out.append(f"<g data-device=\"{device.ordinal}\"><text x=\"0\" y=\"{y + 12}\">{_text(device_name(device))}"
                   "</text>")
        for part in DEVICE_TIME_PARTS:
            ns = getattr(time, f"{part}_ns")
            share = ns / time.window_ns if time.window_ns else 0.0
            length = width * share
            out.append(f"<rect class=\"split-part\" data-part=\"{part}\" x=\"{x:.2f}\" y=\"{y}\" "
                       f"width=\"{length:.2f}\" height=\"{ROW_HEIGHT}\" fill=\"{PART_COLORS[part]}\">"
                       f"<title>{_text(device_name(device))}: "
                       f"{part} {format_ns(ns / max(profile.calls, 1))} per call ({share:.1%})</title></rect>")
            x += length
        out.append("</g>")
    legend_y = len(profile.devices) * (ROW_HEIGHT + ROW_GAP) + 12
    out += [f"<rect x=\"{LABEL_WIDTH + 90 * n}\" y=\"{legend_y - 9}\" width=\"10\" height=\"10\" fill=\"{color}\"/>"
            f"<text x=\"{LABEL_WIDTH + 90 * n + 14}\" y=\"{legend_y}\">{part}</text>"
            for n, (part, color) in enumerate(PART_COLORS.items())]
    return "".join(out) + "</svg>"


def call_windows_of(profile: DeviceProfile, events: dict[int, Attribution]) -> tuple[np.ndarray, np.ndarray]:
    """Each measured call's window across devices: the windows the time split is in (`DeviceProfile.call_windows`),
    else from the dispatches."""
    if profile.call_windows is not None:
        return profile.call_windows
    calls = max(profile.calls, 1)
    starts, ends = np.full(calls, np.iinfo(np.int64).max), np.full(calls, np.iinfo(np.int64).min)
    for attribution in events.values():
        call = np.minimum(attribution.event_calls, calls - 1)
        np.minimum.at(starts, call, attribution.events["start_ns"].astype(np.int64))
        np.maximum.at(ends, call, attribution.events["end_ns"].astype(np.int64))
    return starts, np.maximum(ends, starts)


def lanes_svg(profile: DeviceProfile, events: dict[int, Attribution]) -> str:
    """The p50 call (by its window across devices) with a lane per device (module docstring)."""
    starts, ends = call_windows_of(profile, events)
    listed, shown = shown_calls(ends - starts)
    call = listed[shown][0]
    start, length = int(starts[call]), max(int(ends[call] - starts[call]), 1)
    scale = (TIMELINE_WIDTH - LABEL_WIDTH) / length

    def x_of(ns: int) -> float:
        return LABEL_WIDTH + (min(max(ns, start), start + length) - start) * scale

    def rect(kind: str, begin: int, end: int, y: int, color: str, hover: str, extra: str = "") -> str:
        left = x_of(begin)
        return (f"<rect class=\"{kind}\" x=\"{left:.2f}\" y=\"{y}\" width=\"{max(x_of(end) - left, 0.5):.2f}\" "
                f"height=\"{ROW_HEIGHT}\" fill=\"{color}\"{extra}><title>{_text(hover)}</title></rect>")

    busy = {device.ordinal: _busy(events[device.ordinal], call, start, start + length) for device in profile.devices}
    out, y = [], 0
    for device in profile.devices:
        attribution, name = events[device.ordinal], device_name(device)
        colors = session_colors(device.session)
        out.append(f"<g class=\"device-lane\" data-device=\"{device.ordinal}\">"
                   f"<text x=\"0\" y=\"{y + 12}\" font-weight=\"bold\">{_text(name)}</text>")
        rows: list[int] = []  # per dispatch row, the end of its last bar
        bars = []  # as `merge_bars` takes them: [start, end, section path, row, export key, sections, dispatches]
        chosen = np.flatnonzero(np.minimum(attribution.event_calls, max(attribution.calls, 1) - 1) == call)
        for index in chosen[np.argsort(attribution.events["start_ns"][chosen], kind="stable")]:
            event = attribution.events[index]
            begin, end = int(event["start_ns"]), int(event["end_ns"])
            row = next((n for n, last in enumerate(rows) if last <= begin), len(rows))
            rows[row:row + 1] = [end]
            path, sections = dispatch_label(attribution.compositions[
                attribution.slots[attribution.event_slots[index]].composition])
            bars.append([begin, end, path, row, attribution.keys[event["key"]], sections, 1])
        if len(bars) > MAX_BARS:  # a huge call stays a light page, as one device's timeline does
            bars = merge_bars(bars)
        bars = [rect("device-dispatch", begin, end, y + 18 + row * (ROW_HEIGHT + ROW_GAP), css_color(colors[path]),
                     f"{name}: " + (f"{key}\n" if count == 1 else f"{count} dispatches\n")
                     + f"{sections}\n{format_ns(end - begin)}",
                     f" data-device=\"{device.ordinal}\" data-section=\"{_text(sections)}\" data-count=\"{count}\"")
                for begin, end, path, row, key, sections, count in bars]
        out.append(f"<text x=\"12\" y=\"{y + 30}\">dispatches</text>")
        out += bars
        y += 18 + max(len(rows), 1) * (ROW_HEIGHT + ROW_GAP)
        out.append(f"<text x=\"12\" y=\"{y + 12}\">queue, transfers</text>")
        spans = attribution.queue_spans
        for span in spans[spans["call"] == call]:
            kind = QUEUE_ROWS[ROW_OF_EVENT_TYPE[span["type"]]]
            out.append(rect("device-queue", int(span["start_ns"]), int(span["end_ns"]), y, QUEUE_COLORS[kind],
                            f"{name}: {kind.replace('_', ' ')} {format_ns(int(span['end_ns'] - span['start_ns']))}",
                            f" data-kind=\"{kind}\" opacity=\"0.8\""))
        y += ROW_HEIGHT + ROW_GAP
        others = _union([interval for ordinal, intervals in busy.items() if ordinal != device.ordinal
                         for interval in intervals])
        out.append(f"<text x=\"12\" y=\"{y + 12}\">waiting</text>")
        out += [rect("device-waiting", begin, end, y, PART_COLORS["waiting"],
                     f"{name}: waiting for another device {format_ns(end - begin)}")
                for begin, end in _subtract(others, busy[device.ordinal])]
        y += ROW_HEIGHT + 3 * ROW_GAP
        out.append("</g>")
    return (f"<p class=\"hint\">call {call}: {format_ns(length)} from its first queue operation on any device to its "
            "last one's end (the p50 call); hover for details</p><div class=\"scroll\">"
            f"<svg class=\"device-lanes\" data-call=\"{call}\" xmlns=\"http://www.w3.org/2000/svg\" "
            f"width=\"{TIMELINE_WIDTH}\" height=\"{y}\" font-family=\"sans-serif\" font-size=\"11\">"
            + "".join(out) + "</svg></div>")


def _busy(attribution: Attribution, call: int, start: int, end: int) -> list[Interval]:
    """The union of a device's queue operations of ``call`` (it ran something), clipped to ``[start, end)``."""
    spans = attribution.queue_spans
    spans = spans[spans["call"] == call]
    return _union([(max(int(s), start), min(int(e), end)) for s, e in zip(spans["start_ns"], spans["end_ns"])
                   if min(int(e), end) > max(int(s), start)])


def _union(intervals: list[Interval]) -> list[Interval]:
    merged: list[list[int]] = []
    for begin, end in sorted(intervals):
        if merged and begin <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([begin, end])
    return [(begin, end) for begin, end in merged]


def _subtract(intervals: list[Interval], removed: list[Interval]) -> list[Interval]:
    """``intervals`` less ``removed`` (both sorted and disjoint), in one pass over both."""
    out, first = [], 0
    for begin, end in intervals:
        while first < len(removed) and removed[first][1] <= begin:
            first += 1
        cut = first
        while cut < len(removed) and removed[cut][0] < end:
            if removed[cut][0] > begin:
                out.append((begin, removed[cut][0]))
            begin = max(begin, removed[cut][1])
            cut += 1
        if begin < end:
            out.append((begin, end))
    return out


def _text(value: object) -> str:
    return html.escape(str(value), quote=True)
