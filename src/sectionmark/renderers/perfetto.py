"""Perfetto / Chrome trace (JSON trace-event format), opens in ui.perfetto.dev.

One process per profiled function (a replay's functions in one trace); per queue a thread whose slices are the
section spans enclosing their dispatches, plus one thread per overflow lane for
dispatches that ran concurrently (see `sectionmark.profiling.timeline`).
Each slice's ``args.color`` is its section's colour in every view
(`sectionmark.profiling.timeline.session_colors`); Perfetto's UI draws slices
in colours of its own (it takes none from a trace), so the colour is there to
read, as in the HTML report and Tracy.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Optional

from sectionmark.profiling.attribute import Attribution
from sectionmark.profiling.session import ProfileSession
from sectionmark.profiling.timeline import QueueTimeline, Span, session_colors, session_timelines
from sectionmark.section_map import css_color
from sectionmark.section_path import SectionPath

if TYPE_CHECKING:
    from sectionmark.profiling.devices import DeviceProfile
    from sectionmark.workflows.replay import ReplayProfile


def _thread_name(pid: int, tid: int, name: str) -> dict[str, Any]:
    return {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}


def _slices(spans: list[Span], pid: int, tid: int, origin: int, colors: dict[SectionPath, int]) -> list[dict[str, Any]]:
    out = []
    for root in spans:
        for _depth, span in root.walk():
            out.append({
                "ph": "X", "pid": pid, "tid": tid, "name": span.name,
                "cat": span.kind, "ts": (span.start_ns - origin) / 1e3, "dur": (span.end_ns - span.start_ns) / 1e3,
                "args": {"path": list(span.path), **span.args, "color": css_color(colors[span.path])},
            })
    return out


Process = tuple[str, list[QueueTimeline], dict[SectionPath, int]]  # (name, its queues' timelines, section colours)


def trace_events(processes: list[Process]) -> list[dict[str, Any]]:
    """One process per (name, timelines, colours), its queues' tracks as threads, times from the earliest span of
    all."""
    tracks_of = [(name, [track for timeline in timelines for track in timeline.tracks()], colors)
                 for name, timelines, colors in processes]
    origin = min((spans[0].start_ns for _process, tracks, _colors in tracks_of for _name, spans in tracks if spans),
                 default=0)
    events: list[dict[str, Any]] = []
    for pid, (process_name, tracks, colors) in enumerate(tracks_of, 1):
        events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": process_name}})
        for tid, (name, spans) in enumerate(tracks, 1):
            events.append(_thread_name(pid, tid, name))
            events += _slices(spans, pid, tid, origin, colors)
    return events


def render(session: ProfileSession, events: Optional[Attribution] = None) -> str:
    """``session``'s run as a Chrome JSON trace: its ``events`` (`sectionmark.ProfileRun` passes them), or the
    session's own."""
    return _trace([(f"sectionmark: {session.function or 'profile'}", session_timelines(session, events),
                    session_colors(session))])


def render_replay(replay: "ReplayProfile") -> str:
    """A replay's functions as one trace, a process per function: their events share the replay's one clock,
    so the calls appear in the order the program made them."""
    return _trace([(f"sectionmark: {entry.function}", session_timelines(entry.profile), session_colors(entry.profile))
                   for entry in replay.functions if entry.profile is not None])


def render_devices(profile: "DeviceProfile", events: list[Attribution]) -> str:
    """A run on several devices as one trace, a process (a track group) per device: their events share the
    host clock, so a device waiting for another shows as the gap under the other's slices."""
    return _trace([(f"sectionmark: device {device.ordinal}" + (f" ({device.device})" if device.device else ""),
                    session_timelines(device.session, device_events), session_colors(device.session))
                   for device, device_events in zip(profile.devices, events)])


def _trace(processes: list[Process]) -> str:
    return json.dumps({"traceEvents": trace_events(processes), "displayTimeUnit": "ns"})
