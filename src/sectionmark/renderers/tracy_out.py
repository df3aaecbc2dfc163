"""Tracy capture of a CPU profile: the profiled timestamps replayed as GPU-context tracks.

Tracy only records what a live client sends, so the timeline is replayed by a
short child process that loads the tracing runtime and emits, per queue, a
custom GPU-context track whose zones are the section spans enclosing their
dispatches (`sectionmark.profiling.timeline`), at the exact profiled times.
A headless capture (`sectionmark.tracy.capture`) records it into a .tracy file.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from sectionmark.profiling.attribute import Attribution
from sectionmark.profiling.session import ProfileSession
from sectionmark.profiling.timeline import Span, session_timelines

if TYPE_CHECKING:
    from sectionmark.workflows.replay import ReplayProfile


def _span_json(span: Span) -> list:
    return [span.name, span.start_ns, span.end_ns, [_span_json(child) for child in span.children]]


def tracks_document(sessions: list[tuple[str, ProfileSession, Optional[Attribution]]]) -> dict:
    """The tracks to replay: ``[[track name, [span tree...]], ...]`` plus the time origin; each track's name
    starts with its session's prefix (a replay's function, or nothing for one profile); each session's events
    given, or its own."""
    tracks = [[prefix + name, [_span_json(span) for span in spans]]
              for prefix, session, events in sessions
              for timeline in session_timelines(session, events) for name, spans in timeline.tracks()]
    origin = min((spans[0][1] for _name, spans in tracks if spans), default=0)
    return {"origin_ns": origin, "tracks": tracks}


def render(session: ProfileSession, timeout: float = 300.0, events: Optional[Attribution] = None) -> bytes:
    """The bytes of a .tracy capture of ``session``'s run (needs IREE's tracing runtime): its ``events``
    (`sectionmark.ProfileRun` passes them), or the session's own.

    ``timeout`` bounds the replay process (seconds).
    """
    return _capture(tracks_document([("", session, events)]), timeout)


def render_replay(replay: "ReplayProfile", timeout: float = 300.0) -> bytes:
    """One capture of a replay: each function's tracks, named ``function: track``, on the replay's one clock."""
    return _capture(tracks_document([(f"{entry.function}: ", entry.profile, None) for entry in replay.functions
                                     if entry.profile is not None]), timeout)


def _capture(document: dict, timeout: float) -> bytes:
    from sectionmark.tracy.capture import capture_command

    with tempfile.TemporaryDirectory(prefix="sectionmark-tracy-") as scratch:
        spans_file = Path(scratch) / "timeline.json"
        spans_file.write_text(json.dumps(document), encoding="utf-8")
        command = [sys.executable, "-m", "sectionmark.renderers.tracy_out", str(spans_file)]
        return capture_command(command, Path(scratch) / "replay.tracy", timeout=timeout).read_bytes()


def _emit(document: dict) -> None:
    """Child process: emit every track with explicit timestamps, then exit normally."""
    import time

    from sectionmark.renderers.tracy_gpu_timeline import GpuTimeline

    # Tracy ties each GPU context to its own clock when the context is
    # created, so a context's origin_ns must be the monotonic clock's reading
    # at that moment or all its zones move by the difference. Every track is
    # therefore created first, each with the reading at its creation (the
    # default), and the profile is placed to start just after the last one:
    # the tracks share one mapping, and no timestamp precedes an origin.
    # (Creating each track after emitting the previous ones, with one shared
    # origin, shifted it by the time those took: milliseconds on real models.)
    # Within a track times are exact; tracks agree to within the gap between
    # Python's clock reading and Tracy's, a few µs (the first context is cold).
    timelines = [GpuTimeline(track_name) for track_name, _spans in document["tracks"]]
    shift = time.monotonic_ns() - document["origin_ns"]

    def emit(timeline: GpuTimeline, span: list) -> None:
        name, start, end, children = span
        timeline.begin(name, start + shift)
        for child in children:
            emit(timeline, child)
        timeline.end(end + shift)

    for timeline, (_track_name, spans) in zip(timelines, document["tracks"]):
        for span in spans:
            emit(timeline, span)


if __name__ == "__main__":
    _emit(json.loads(Path(sys.argv[1]).read_text(encoding="utf-8")))
