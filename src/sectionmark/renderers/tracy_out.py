"""Tracy capture of a CPU profile: the profiled timestamps replayed as GPU-context tracks.

Tracy only records what a live client sends, so the timeline is replayed by a
short child process that loads the tracing runtime and emits, per queue, a
custom GPU-context track whose zones are the section spans enclosing their
dispatches (`sectionmark.profiling.timeline`), at the exact profiled times.
A headless capture (`sectionmark.tracy.capture`) records it into a .tracy file.

The replay runs on the profiled run's clock, in real time: Tracy takes a GPU
zone's CPU-side begin and end ("CPU command setup time", "delay to
execution"), a message's and a plot point's time from the moment the client
sends them, so each is sent when the run's host did it, shifted to start just
after the replay's start-up. A zone is sent at the host time its command
buffer was submitted (`Span.submitted_ns`); where the profile timed no
submissions on the host, at its own start (its text says so). Each call
starts a frame (Tracy's frame bar and frame navigation step through the
calls). A replay that
reaches a submission, message or plot point late (a busy machine) moves the
rest of the run later by that much, GPU times included: every zone keeps its
duration, its place in its call and its true delay to execution; only what
comes after sits later than in the run (never closer). The capture's
time 0 is where Tracy's client ended its start-up (its 200 ms timer
calibration; `sectionmark.tracy.origin`), every time shifted by that one
constant, so the GUI, which opens on the whole capture, opens on the calls.
Beside the zones: a message at the start of each call and the device memory in use as a
plot (`sectionmark.renderers.tracy_texts`); every zone has its section's
colour (`profiling.timeline.session_colors`) and a text under its name.

The child reads a JSON document: ``tracks`` ``[[name, [span, ...]], ...]``,
each span ``[name, start_ns, end_ns, [children], {color, text, cpu}]`` (the
last element optional; ``cpu``: [begin, end] host times), and optionally
``thread`` (the replay thread's name), ``messages`` ``[[time_ns, text], ...]``,
``frames`` ``[time_ns, ...]`` (frame marks: one per call, so that Tracy's frame bar
steps from call to call) and ``plots`` ``[[name, [[time_ns, value], ...]], ...]``.
"""

from __future__ import annotations

import ctypes
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import numpy as np

from sectionmark.profiling.attribute import Attribution
from sectionmark.profiling.session import ProfileSession
from sectionmark.profiling.timeline import Span, session_colors, session_timelines
from sectionmark.renderers.tracy_gpu_timeline import GpuTimeline
from sectionmark.renderers.tracy_texts import MEMORY_PLOT, ZoneTexts, call_messages, first_call_start, memory_in_use
from sectionmark.tracy.binding import (SOURCE_LOCATIONS, GpuTimeData, GpuZoneBeginData, GpuZoneEndData, client,
                                       permanent_name, tracy_name)
from sectionmark.section_path import SectionPath

if TYPE_CHECKING:
    from sectionmark.profiling.devices import DeviceProfile
    from sectionmark.workflows.replay import ReplayProfile

try:  # the send loop in C (setup.py builds it when a compiler is present)
    from sectionmark.renderers import _tracyreplay as _native
except ImportError:
    _native = None

# The replay starts this long after its start-up (contexts created, thread named), to be on time from the first
# zone on.
_LEAD_NS = 1_000_000
# Waits longer than this sleep (to 30 ms before the time), shorter ones spin: a sleep overshoots, by
# milliseconds on a busy machine (as in _tracyreplay.c).
_SPIN_NS = 50_000_000
_NAP_MARGIN_NS = 30_000_000
_PLOT_FORMAT_MEMORY = 1  # TracyPlotFormatMemory: Tracy shows the values as bytes


def _span_json(span: Span, colors: dict[SectionPath, int], texts: ZoneTexts) -> list:
    extras: dict = {"color": colors[span.path], "text": texts.text(span)}
    if span.submitted_ns is not None:
        extras["cpu"] = [span.submitted_ns, span.last_submitted_ns]
    return [span.name, span.start_ns, span.end_ns, [_span_json(child, colors, texts) for child in span.children],
            extras]


def tracks_document(sessions: list[tuple[str, ProfileSession, Optional[Attribution]]]) -> dict:
    """The document the replay emits (module docstring): each session's tracks, named ``<prefix><device> queue
    0: sections`` (prefix: a replay's function, or nothing for one profile), drawn from its events (given, or
    the session's own), the calls' messages and the device memory plot of the first session that has one."""
    tracks, messages, plot = [], [], []
    devices: dict[str, None] = {}
    for prefix, session, events in sessions:
        colors, texts = session_colors(session), ZoneTexts(session)
        tracks += [[prefix + name, [_span_json(span, colors, texts) for span in spans]]
                   for timeline in session_timelines(session, events)
                   for name, spans in timeline.tracks(session.device)]
        attribution = events if events is not None else session.attribution
        messages += call_messages(attribution, prefix)
        if not plot:
            plot = memory_in_use(attribution, first_call_start(attribution))
        if session.device:
            devices[session.device] = None
    thread = "sectionmark replay" + (" of " + ", ".join(devices) if devices else "")
    return {"thread": thread, "tracks": tracks, "messages": messages, "frames": sorted({at for at, _text in messages}),
            "plots": [[MEMORY_PLOT, plot]] if plot else []}


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


def render_devices(profile: "DeviceProfile", timeout: float = 300.0,
                   events: Optional[dict[int, Attribution]] = None) -> bytes:
    """One capture of a run on several devices: a GPU context per device and queue, named ``device 1: local-task
    queue 0: sections``, its zones the device's dispatches in their sections; ``events``: each device's, by
    ordinal (`sectionmark.DeviceRun` passes them). The devices share the host clock, so one replay places them
    all; the frames step through the calls of the first device."""
    events = events or {}
    document = tracks_document([(f"device {device.ordinal}: ", device.session, events.get(device.ordinal))
                                for device in profile.devices])
    first = f"device {profile.devices[0].ordinal}: "
    document["frames"] = sorted({at for at, text in document["messages"] if text.startswith(first)})
    return _capture(document, timeout)


def _capture(document: dict, timeout: float) -> bytes:
    from sectionmark.tracy.capture import capture_command

    with tempfile.TemporaryDirectory(prefix="sectionmark-tracy-") as scratch:
        spans_file = Path(scratch) / "timeline.json"
        spans_file.write_text(json.dumps(document), encoding="utf-8")
        command = [sys.executable, "-m", "sectionmark.renderers.tracy_out", str(spans_file)]
        return capture_command(command, Path(scratch) / "replay.tracy", timeout=timeout,
                               origin_after_startup=True).read_bytes()  # the calls begin the capture


# One step of the replay, as the C send loop reads it (_tracyreplay.c): when to send it (monotonic ns); a zone
# begin's or end's GPU timestamp, or a plot's value; a source location's, message text's or plot name's address;
# a message's length; what it is; the GPU context.
STEP_DTYPE = np.dtype([("at_ns", "<i8"), ("time_ns", "<i8"), ("pointer", "<u8"), ("size", "<u8"), ("kind", "<u4"),
                       ("context", "<u4")])
_BEGIN, _END, _MESSAGE, _PLOT, _SUBMISSION, _FRAME = range(6)
if _native is not None and getattr(_native, "STEP_SIZE", None) != STEP_DTYPE.itemsize:
    _native = None  # a stale build of _tracyreplay.c: the Python loop sends the same steps


class _Steps:
    """Everything the replay sends, on the profile's clock, sorted by host time: (time, order, kind, track or
    plot, GPU time or value, what: a zone's (name, colour, text), a message's text).

    The steps of one track keep their stack order: their host times are made
    non-decreasing along it, so sorting by time keeps it. Each submission the
    zones were sent at is a step of its own, before the zones of its time
    (where the send loop checks that it is on time), and so are the messages
    and frame marks of calls.
    """

    def __init__(self, document: dict):
        self.steps: list[tuple[int, int, int, int, int, Optional[tuple]]] = []
        self.earliest: Optional[int] = None
        for track, (_name, spans) in enumerate(document["tracks"]):
            self._last: Optional[int] = None
            for span in spans:
                self._span(track, span)
        for at in sorted({step[0] for step in self.steps if step[2] == _BEGIN and step[5][3]}):
            self.steps.append((at, -1, _SUBMISSION, 0, 0, None))
        for at, text in document.get("messages", []):  # a call's message and frame before its zones
            self._add(at, _MESSAGE, 0, 0, text, order=-1)
        for at in document.get("frames", []):
            self._add(at, _FRAME, 0, 0, None, order=-1)
        for plot, (_name, points) in enumerate(document.get("plots", [])):
            for at, value in points:
                self._add(at, _PLOT, plot, value, None)
        self.steps.sort(key=lambda step: step[:2])

    def _add(self, at: int, kind: int, target: int, value: int, what, order: Optional[int] = None) -> None:
        self.steps.append((at, len(self.steps) if order is None else order, kind, target, value, what))
        self.earliest = at if self.earliest is None else min(self.earliest, at)

    def _track_time(self, at: int) -> int:
        self._last = at if self._last is None else max(self._last, at)
        return self._last

    def _span(self, track: int, span: list) -> None:
        name, start, end, children = span[:4]
        extras = span[4] if len(span) > 4 else {}
        cpu_begin, cpu_end = extras.get("cpu", (start, start))
        self.earliest = start if self.earliest is None else min(self.earliest, start)
        submitted = "cpu" in extras
        self._add(self._track_time(cpu_begin), _BEGIN, track, start,
                  (name, extras.get("color"), extras.get("text"), submitted))
        for child in children:
            self._span(track, child)
        self._add(self._track_time(cpu_end), _END, track, end, None)

    def rows(self, plots: list[int], keep: list) -> np.ndarray:
        """The steps as `STEP_DTYPE` rows, still on the profile's clock, their zones' source locations made and
        their ``context`` the index of their track (the GPU contexts are made later, with Tracy's client);
        ``keep`` holds the message texts the rows point to."""
        rows = []
        for at, _order, kind, target, value, what in self.steps:
            pointer = size = context = 0
            if kind == _BEGIN:
                pointer = SOURCE_LOCATIONS.get(*what[:3])[0]
            if kind in (_BEGIN, _END):
                context = target
            elif kind == _MESSAGE:
                keep.append(tracy_name(what))
                pointer, size = ctypes.cast(ctypes.c_char_p(keep[-1]), ctypes.c_void_p).value, len(keep[-1])
            elif kind == _PLOT:
                pointer = plots[target]
            rows.append((at, value, pointer, size, kind, context))
        return np.array(rows, STEP_DTYPE)


def _wait_until(deadline_ns: int) -> None:
    while True:
        left = deadline_ns - time.monotonic_ns()
        if left <= 0:
            return
        if left > _SPIN_NS:
            time.sleep((left - _NAP_MARGIN_NS) / 1e9)


def _emit(document: dict) -> None:
    """Child process: send everything from a thread of the document's name (Tracy calls the main thread "Main
    thread" whatever it is named), then exit normally."""
    # Everything that does not need Tracy's client is made before it starts (the steps, and as plain memory the
    # zones' source locations, the plot names and message texts), so that the replay begins as soon as Tracy's
    # start-up ends, where the capture's time begins (`sectionmark.tracy.origin`).
    steps = _Steps(document)
    plots = [permanent_name(name) for name, _points in document.get("plots", [])]
    keep: list[bytes] = []
    rows = steps.rows(plots, keep)
    client()  # Tracy's client starts here: the thread that loads it is its "Main thread"
    failed: list[BaseException] = []

    def replay() -> None:
        try:
            _send(document, steps.earliest, rows, plots)
        except BaseException as error:  # re-raised on the main thread: the program fails, and so the capture
            failed.append(error)

    thread = threading.Thread(target=replay, name="sectionmark replay")
    thread.start()
    thread.join()
    if failed:
        raise failed[0]


def _send(document: dict, earliest: Optional[int], rows: np.ndarray, plots: list[int]) -> None:
    """Send every zone, message and plot point (`_Steps.rows`, the first at ``earliest``) at its time."""
    tracy = client()
    tracy.set_thread_name(tracy_name(document.get("thread", "sectionmark replay")))
    for plot in plots:
        tracy.plot_config(plot, _PLOT_FORMAT_MEMORY, 1, 1, 0)
    # Tracy ties each GPU context to its own clock when the context is
    # created, so every track is created first, each anchored to the
    # monotonic clock at its creation (the default), and the run is placed to
    # start just after the last one: tracks, messages and plots share one
    # mapping, and no timestamp precedes an anchor.
    contexts = [GpuTimeline(track_name).context for track_name, _spans in document["tracks"]]
    if earliest is None:
        return
    zone = rows["kind"] <= _END
    rows["context"][zone] = np.asarray(contexts, np.uint32)[rows["context"][zone]]
    shift = time.monotonic_ns() + _LEAD_NS - earliest
    rows["at_ns"] += shift
    rows["time_ns"][zone] += shift
    if _native is not None:
        address = lambda function: ctypes.cast(function, ctypes.c_void_p).value  # noqa: E731
        _native.send(rows.tobytes(), address(tracy.gpu_zone_begin), address(tracy.gpu_zone_end),
                     address(tracy.gpu_time), address(tracy.message), address(tracy.plot), address(tracy.frame_mark), 0)
        return
    queries = dict.fromkeys(contexts, 0)
    delay = 0  # how much later than planned the replay runs since a submission it reached late
    for at, value, pointer, size, kind, context in rows.tolist():
        _wait_until(at + delay)
        if kind >= _MESSAGE:  # between submissions' zones: where the replay may fall behind
            delay += max(time.monotonic_ns() - (at + delay), 0)
        if kind <= _END:
            queries[context] = query = (queries[context] + 1) & 0xFFFF
            if kind == _BEGIN:
                tracy.gpu_zone_begin(GpuZoneBeginData(pointer, query, context))
            else:
                tracy.gpu_zone_end(GpuZoneEndData(query, context))
            tracy.gpu_time(GpuTimeData(value + delay, query, context))
        elif kind == _MESSAGE:
            tracy.message(ctypes.c_char_p(pointer), size, 0)
        elif kind == _PLOT:
            tracy.plot(pointer, value)
        elif kind == _FRAME:
            tracy.frame_mark(None)


def _exit_now() -> None:
    """End the replay process at once, past Python's finalization but through C's exit: Tracy's client sends what
    is left and waits for the capture in its C++ destructor, which C's exit runs. Until then it samples the
    process's CPU usage every 100 ms, and each sample extends the capture, and the GUI's opening view, past the
    last call; Python's module teardown alone took 20-80 ms here."""
    sys.stdout.flush()
    sys.stderr.flush()
    ctypes.CDLL(None).exit(0)


if __name__ == "__main__":
    _emit(json.loads(Path(sys.argv[1]).read_text(encoding="utf-8")))
    _exit_now()
