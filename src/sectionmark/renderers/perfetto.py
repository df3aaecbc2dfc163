"""Perfetto / Chrome trace (JSON trace-event format), opens in ui.perfetto.dev.

One process per profiled function; per queue a thread whose slices are the
section spans enclosing their dispatches, plus one thread per overflow lane for
dispatches that ran concurrently (see `sectionmark.profiling.timeline`).
"""

from __future__ import annotations

import json
from typing import Any

from sectionmark.profiling.timeline import QueueTimeline, Span, session_timelines


def _thread_name(pid: int, tid: int, name: str) -> dict[str, Any]:
    return {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}


def _slices(spans: list[Span], pid: int, tid: int, origin: int) -> list[dict[str, Any]]:
    out = []
    for root in spans:
        for _depth, span in root.walk():
            out.append({
                "ph": "X", "pid": pid, "tid": tid, "name": span.name,
                "cat": span.kind, "ts": (span.start_ns - origin) / 1e3, "dur": (span.end_ns - span.start_ns) / 1e3,
                "args": {"path": list(span.path), **span.args},
            })
    return out


def trace_events(timelines: list[QueueTimeline], process_name: str) -> list[dict[str, Any]]:
    pid = 1
    tracks = [track for timeline in timelines for track in timeline.tracks()]
    origin = min((spans[0].start_ns for _name, spans in tracks if spans), default=0)
    events: list[dict[str, Any]] = [{"ph": "M", "name": "process_name", "pid": pid, "args": {"name": process_name}}]
    for tid, (name, spans) in enumerate(tracks, 1):
        events.append(_thread_name(pid, tid, name))
        events += _slices(spans, pid, tid, origin)
    return events


def render(session) -> str:
    """``session`` (a ProfileSession with its events) as a Chrome JSON trace."""
    name = f"sectionmark: {session.function or 'profile'}"
    return json.dumps({"traceEvents": trace_events(session_timelines(session), name), "displayTimeUnit": "ns"})
