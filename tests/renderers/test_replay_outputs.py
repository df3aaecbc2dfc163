"""A replay's per-function profiles render through the renderer registry, like one profile (hand-built data).

The real replay (a recorded GPT-2 prefill + decode loop) is in tests/workflows/test_record.py; here the result family
itself: each format as its registry entry's ``replays`` says, the JSON document read back, and the formats
that show one function at a time refused with one line.
"""

from __future__ import annotations

import csv
import importlib
import io
import json

import numpy as np
import pytest
from test_session import A, B, build

from sectionmark.errors import SectionmarkError
from sectionmark.profiling.session import ProfileSession
from sectionmark.renderers import RENDERERS, REPLAY_FORMS
from sectionmark.tracy import read_capture
from sectionmark.workflows.replay import FunctionProfile, ReplayProfile


def replay_of_two_functions() -> ReplayProfile:
    """``step`` ran dispatches in A and A+B, ``init`` none (its profile is None)."""
    step = build([(0, 100, ((A, 1.0),)), (100, 300, ((A, 0.5), (B, 0.5)))], declared=[A, B])
    second = build([(0, 40, ((B, 1.0),))], declared=[A, B])
    return ReplayProfile(replays=2, warmup=1, calls_per_replay=4, functions=[
        FunctionProfile("step", 2, step), FunctionProfile("init", 1, None), FunctionProfile("finish", 1, second)])


def test_text_tables_are_each_functions_table_under_its_heading():
    replay = replay_of_two_functions()
    step, finish = replay.function("step"), replay.function("finish")
    assert replay.render("table") == (
        f"── step: 2 calls per replay, 2 measured replays ──\n{step.table()}\n"
        "── init: 1 call per replay, 2 measured replays ──\nno dispatches\n\n"
        f"── finish: 1 call per replay, 2 measured replays ──\n{finish.table()}")
    assert replay.table() == replay.render("table")
    with_cpu = replay.render("table", cpu=True)
    assert step.render("table", cpu=True) in with_cpu and finish.render("table", cpu=True) in with_cpu
    components = replay.render("components", by="name")
    assert step.render("components") in components and "── finish: 1 call per replay" in components


@pytest.mark.parametrize("name", ["csv", "components-csv", "kernels-csv"])
def test_csv_is_every_functions_rows_with_a_function_column(name):
    replay = replay_of_two_functions()
    rows = list(csv.reader(io.StringIO(replay.render(name), newline="")))
    header, body = rows[0], rows[1:]
    assert header[0] == "function"
    expected = []
    for function in ("step", "finish"):
        own = list(csv.reader(io.StringIO(replay.function(function).render(name), newline="")))
        assert own[0] == header[1:]
        expected += [[function, *row] for row in own[1:]]
    assert body == expected  # init ran no dispatch: no rows


def test_json_is_one_document_read_back_function_by_function(tmp_path):
    replay = replay_of_two_functions()
    path = replay.save(tmp_path / "replay.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert [data[key] for key in ("version", "kind", "replays", "warmup", "calls_per_replay")] == [1, "replay", 2, 1, 4]
    assert [(entry["function"], entry["calls_per_replay"]) for entry in data["functions"]] == [
        ("step", 2), ("init", 1), ("finish", 1)]
    assert data["functions"][0]["profile"] == json.loads(replay.function("step").render("json"))
    assert data["functions"][1]["profile"] is None
    again = ReplayProfile.from_json(data)
    assert again.function_names == ["step", "init", "finish"] and again.functions[1].profile is None
    assert again.function("finish").total_ns == 40 and isinstance(again.function("step"), ProfileSession)
    assert json.loads(again.render("json"))["functions"][2]["profile"]["sections"] == data["functions"][2]["profile"]["sections"]


def test_perfetto_is_one_trace_with_a_process_per_function():
    replay = replay_of_two_functions()
    events = json.loads(replay.render("perfetto"))["traceEvents"]
    processes = {event["pid"]: event["args"]["name"] for event in events if event["name"] == "process_name"}
    assert processes == {1: "sectionmark: step", 2: "sectionmark: finish"}  # init ran no dispatch: no process
    for pid, function in ((1, "step"), (2, "finish")):
        alone = json.loads(replay.function(function).render("perfetto"))["traceEvents"]
        slices = [event for event in events if event["pid"] == pid and event["ph"] == "X"]
        assert [(e["name"], e["dur"]) for e in slices] == [(e["name"], e["dur"]) for e in alone if e["ph"] == "X"]
    assert min(event["ts"] for event in events if event["ph"] == "X") == 0  # one clock for all functions


def test_tracy_is_one_capture_with_each_functions_tracks(tmp_path):
    """A real capture (IREE's tracing runtime, iree-tracy-capture): the tracks of one profile, named by function."""
    replay = replay_of_two_functions()
    capture = read_capture(replay.save(tmp_path / "replay.tracy"))
    contexts = {track.name: [zone.name for zone in track.zones] for track in capture.gpu_contexts}
    for function in ("step", "finish"):
        alone = read_capture(replay.function(function).save(tmp_path / f"{function}.tracy"))
        for track in alone.gpu_contexts:
            assert contexts.pop(f"{function}: {track.name}") == [zone.name for zone in track.zones]
    assert contexts == {}  # init ran no dispatch: no track


@pytest.mark.parametrize("name", ["chart", "timeline", "components-chart"])
def test_pictures_are_each_functions_picture_stacked(name):
    pytest.importorskip("matplotlib")
    from PIL import Image

    replay = replay_of_two_functions()
    stacked = np.asarray(Image.open(io.BytesIO(replay.render(name))).convert("RGBA"))
    top = 0
    for function in ("step", "finish"):  # init ran no dispatch: no picture
        alone = np.asarray(Image.open(io.BytesIO(replay.function(function).render(name))).convert("RGBA"))
        height, width = alone.shape[:2]
        assert np.array_equal(stacked[top:top + height, :width], alone)  # every pixel as drawn alone
        assert (stacked[top:top + height, width:] == 255).all()
        top += height
    assert top == stacked.shape[0]


def test_every_registered_form_is_implemented():
    for renderer in RENDERERS.values():
        module = importlib.import_module(renderer.module)
        assert renderer.replays in (*REPLAY_FORMS, None), renderer.name
        if renderer.replays == "document":
            assert callable(module.render_replay), renderer.name
        if renderer.replays == "csv":
            assert callable(module.csv_rows) and module.COLUMNS, renderer.name


def test_malformed_replay_json_is_one_line():
    data = json.loads(replay_of_two_functions().render("json"))
    data["functions"][0]["calls_per_replay"] = True
    with pytest.raises(SectionmarkError, match=r"replay profile JSON: replay.functions\[0\].calls_per_replay: "
                                               "expected an integer, got bool True"):
        ReplayProfile.from_json(data)
    data = json.loads(replay_of_two_functions().render("json"))
    data["functions"][2]["profile"]["version"] = 99
    with pytest.raises(SectionmarkError, match="profile JSON version 99 is not supported"):
        ReplayProfile.from_json(data)
    with pytest.raises(SectionmarkError, match="not a sectionmark replay profile JSON"):
        ReplayProfile.from_json([])


def test_formats_of_one_function_at_a_time_are_refused(tmp_path):
    replay = replay_of_two_functions()
    per_function = [name for name, renderer in RENDERERS.items() if renderer.replays is None]
    assert per_function == ["graph"]
    for name in per_function:
        with pytest.raises(SectionmarkError, match=rf"^--{name} of a recording is per function: add --function NAME "
                                                   r"\(it called: step, init, finish\)$"):
            replay.save(tmp_path / f"out{RENDERERS[name].extensions[0]}", name)
    assert list(tmp_path.iterdir()) == []
