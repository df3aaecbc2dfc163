"""The Tracy replay's document and its send loops, on hand-built data (the real replay of a model:
tests/workflows/test_tracy_replay.py).

* the document of a profile: each span's colour, text and submission; a profile whose submissions the host did
  not time (the device timed its dispatches: Vulkan) says so in every zone's text, and no CPU side is made up;
* the C send loop and the Python one (without a compiler) send the same document alike: the same zones, the same
  messages and plot points, every zone at its submission or later (never with more delay than the document's).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace

import numpy as np
import pytest
from shared_tools import CSVEXPORT, csvexport
from test_session import synthetic

from sectionmark.profiling.queue_time import QUEUE_SPAN_DTYPE
from sectionmark.profiling.session import ProfileSession
from sectionmark.readers.event_model import EVENT_EXECUTE
from sectionmark.renderers import tracy_out
from sectionmark.renderers.tracy_texts import NO_HOST_TIMES
from sectionmark.tracy import capture_command, read_capture

CAPTURE_TIMEOUT_S = 120
A, B = (("A",), 1.0), (("B",), 1.0)


def session_of(host_submissions: bool) -> ProfileSession:
    """Two calls of two dispatches (A, then B); each call one command-buffer execution starting 300 ns early."""
    events = [(1_000, 1_100, (A,)), (1_100, 1_300, (B,)), (5_000, 5_100, (A,)), (5_100, 5_500, (B,))]
    attribution, section_map = synthetic(events, calls=2, call_of=[0, 0, 1, 1])
    section_map.colors = {"B": 0x34A853}
    spans = np.zeros(2, QUEUE_SPAN_DTYPE)
    spans["type"], spans["start_ns"], spans["end_ns"], spans["call"] = EVENT_EXECUTE, [700, 4_700], [1_400, 5_600], [0, 1]
    attribution = replace(attribution, queue_spans=spans, submissions_on_host=host_submissions)
    session = ProfileSession.build(attribution, section_map, function="main", device="local-task")
    return session


def spans_of(document: dict) -> list[list]:
    def walk(span):
        yield span
        for child in span[3]:
            yield from walk(child)

    return [span for _name, spans in document["tracks"] for top in spans for span in walk(top)]


def test_the_document_carries_colours_texts_and_the_submissions_the_host_timed():
    document = tracy_out.tracks_document([("", session_of(host_submissions=True), None)])
    assert document["thread"] == "sectionmark replay of local-task"
    assert [name for name, _spans in document["tracks"]] == ["local-task queue 0: sections"]
    assert document["messages"] == [(700, "call 1 of 2"), (4_700, "call 2 of 2")]
    assert document["frames"] == [700, 4_700]  # a frame per call: Tracy's frame bar steps from call to call
    spans = spans_of(document)
    assert [(span[0], span[1], span[4]["cpu"]) for span in spans if span[0] in "AB"] == [
        ("A", 1_000, [700, 700]), ("B", 1_100, [700, 700]), ("A", 5_000, [4_700, 4_700]), ("B", 5_100, [4_700, 4_700])]
    assert {span[4]["color"] for span in spans if span[0] == "B"} == {0x34A853}  # the code's colour
    assert all(NO_HOST_TIMES not in span[4]["text"] for span in spans)


def test_without_host_submissions_every_zone_says_so_and_gets_no_cpu_side():
    """A device-timed profile's executions are the spans of its dispatches, not submissions: no delay is made up."""
    spans = spans_of(tracy_out.tracks_document([("", session_of(host_submissions=False), None)]))
    assert spans and all("cpu" not in span[4] and NO_HOST_TIMES in span[4]["text"] for span in spans)


DOCUMENT = {
    "thread": "sectionmark replay of test",
    "tracks": [
        ["t0", [["S", 10_000, 19_000, [["k1", 10_000, 14_000, [], {"cpu": [9_000, 9_000], "color": 0x4C8BF5,
                                                                     "text": "k1 text"}],
                                       ["k2", 15_000, 19_000, [], {"cpu": [9_000, 9_000]}]],
                 {"cpu": [9_000, 9_000], "color": 0x34A853, "text": "S text"}],
                ["S", 40_000, 45_000, [["k1", 40_000, 45_000, [], {"cpu": [38_000, 38_000]}]],
                 {"cpu": [38_000, 38_000]}]]],
        ["t1", [["k3", 12_000, 13_000, [], {"cpu": [9_000, 9_000]}]]],
    ],
    "messages": [[9_000, "call 1 of 2"], [38_000, "call 2 of 2"]],
    "frames": [9_000, 38_000],
    "plots": [["memory", [[9_000, 1_000], [20_000, 3_000], [38_000, 2_000]]]],
}


def replay(tmp_path, python_loop: bool):
    """The document replayed by the C send loop or, as without a compiler, the Python one."""
    document = tmp_path / "document.json"
    document.write_text(json.dumps(DOCUMENT))
    code = ("import json, sys; from sectionmark.renderers import tracy_out as t; "
            + ("t._native = None; " if python_loop else "")
            + "t._emit(json.load(open(sys.argv[1])))")
    name = "python" if python_loop else "c"
    return capture_command([sys.executable, "-c", code, str(document)], tmp_path / f"{name}.tracy",
                           timeout=CAPTURE_TIMEOUT_S, origin_after_startup=True)  # as tracy_out.render


@pytest.mark.parametrize("python_loop", [False, True], ids=["C loop", "Python loop"])
def test_each_send_loop_sends_the_document_alike(tmp_path, python_loop):
    if not python_loop and tracy_out._native is None:
        pytest.skip("sectionmark.renderers._tracyreplay not built (no C compiler)")
    path = replay(tmp_path, python_loop)
    capture = read_capture(path)
    assert [thread.name for thread in capture.threads] == ["sectionmark replay of test"]
    t0, t1 = capture.gpu_contexts
    assert [(zone.name, zone.duration_ns, zone.depth) for zone in t0.zones] == [
        ("S", 9_000, 0), ("k1", 4_000, 1), ("k2", 4_000, 1), ("S", 5_000, 0), ("k1", 5_000, 1)]
    # Every zone's delay (start - CPU-side begin) is at most the document's (start - its submission).
    planned = [1_000, 1_000, 6_000, 2_000, 2_000]
    for zone, (cpu_begin, _cpu_end), delay in zip(t0.zones, t0.cpu_side, planned):
        assert zone.start_ns - cpu_begin <= delay + 100_000, zone
    # Within a call, the zones keep their places; the second call never comes closer to the first.
    assert [zone.start_ns - t0.zones[0].start_ns for zone in t0.zones[:3]] == [0, 0, 5_000]
    assert t0.zones[3].start_ns - t0.zones[0].start_ns >= 30_000
    # Another track agrees to Tracy's anchoring of each GPU context (about a microsecond; 5 µs as test_tracy_report).
    assert abs(t1.zones[0].start_ns - t0.zones[0].start_ns - 2_000) <= 5_000 and t1.zones[0].duration_ns == 1_000
    # Tracy's start-up is the first frame (0 ns: the capture starts at its end), the wait for the first mark the
    # second; then a frame per call, from its submission on (no earlier than planned).
    start_up, start_up_end, *calls = capture.frames
    assert start_up == start_up_end == 0 and len(calls) == 2 and calls[1] - calls[0] >= 29_000
    assert calls[0] <= t0.cpu_side[0][0] and calls[1] <= t0.cpu_side[3][0]
    locations = {(location.name, location.function, location.color) for location in capture.source_locations}
    assert {("S", "S text", 0x34A853), ("k1", "k1 text", 0x4C8BF5)} <= locations
    if CSVEXPORT is not None:
        assert [row[0] for row in csvexport(path, "-m")] == ["call 1 of 2", "call 2 of 2"]
        assert [float(row[-1]) for row in csvexport(path, "-u", "-p") if row[0] == "memory"] == [1_000, 3_000, 2_000]


def test_the_capture_ends_with_the_replay_not_with_pythons_teardown(tmp_path):
    """The replay process ends through C's exit right after its last step. Tracy's client samples the process's
    CPU usage every 100 ms until its destructor runs, and each sample stretches the capture, and so the GUI's
    opening view (`Capture.opening_view`), past the calls: Python's own teardown took 20-80 ms, here made 300 ms
    by an exit handler that must not run (injected with a sitecustomize)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import atexit, time\natexit.register(time.sleep, 0.3)\n")
    document = tmp_path / "document.json"
    document.write_text(json.dumps(DOCUMENT))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), *sys.path]))
    path = capture_command([sys.executable, "-m", "sectionmark.renderers.tracy_out", str(document)],
                           tmp_path / "replay.tracy", timeout=CAPTURE_TIMEOUT_S, env=env, origin_after_startup=True)
    capture = read_capture(path)
    last_zone_end = max(zone.end_ns for track in capture.gpu_contexts for zone in track.zones)
    start, end = capture.opening_view()
    assert start == 0 and last_zone_end <= end < last_zone_end + 100_000_000  # no CPU usage sample 100 ms later
