"""The views of a run on several devices: a Perfetto track group, a Tracy GPU context and an HTML lane per device.

Real stack: `TWO_DEVICES` (a matmul split over two local-task devices) compiled with `sm.compile(devices=2)`,
profiled with `sm.profile(devices=[...])` under iree-benchmark-module; each view's figures are checked per device
against the one oracle of that device's events (`section_oracle` over `iree-profile export`'s rows).
"""

from __future__ import annotations

import json
from collections import defaultdict

import chromium
import pytest
from shared_tools import CSVEXPORT, csvexport
from tiny_profiles import export_rows, profile_two_devices, section_oracle

import sectionmark as sm
from sectionmark.errors import SectionmarkError
from sectionmark.profiling.device_run import DeviceRun
from sectionmark.profiling.devices import DEVICE_TIME_PARTS
from sectionmark.readers.tracy_capture import read_capture
from sectionmark.workflows.measure import report

pytest.importorskip("iree.compiler")

ITERATIONS, WARMUP = 4, 1


@pytest.fixture(scope="module")
def two_devices(tmp_path_factory):
    """(compiled module, kept .ireeprof, the run, iree-profile export's rows of the profile)."""
    compiled, kept, run = profile_two_devices(tmp_path_factory.mktemp("device-views"), ITERATIONS, WARMUP)
    rows = export_rows(kept)
    assert rows is not None
    yield compiled, kept, run, rows
    run.close()


def device_commands(section_map, ordinal):
    """(export key, command index) -> the map's shares of that dispatch, for the command buffers of a device."""
    shares = {}
    for buffer in section_map.command_buffers:
        if buffer.device == ordinal:
            for index, command in enumerate(buffer.commands):
                if command.op == "dispatch":
                    shares.setdefault((command.key, index), command.shares)
    return shares


def test_perfetto_has_a_track_group_per_device_and_each_device_busy_time_per_section(two_devices):
    compiled, _kept, run, rows = two_devices
    assert isinstance(run, DeviceRun)
    trace = json.loads(run.render("perfetto"))["traceEvents"]
    processes = {event["pid"]: event["args"]["name"] for event in trace if event["name"] == "process_name"}
    assert sorted(processes.values()) == ["device 0 (local-task)", "device 1 (local-task)"]
    for device in run.devices:
        pid = next(pid for pid, name in processes.items() if name.startswith(f"device {device.ordinal} "))
        shares = device_commands(compiled.section_map, device.ordinal)
        per_section: dict[tuple, float] = defaultdict(float)
        slices = [event for event in trace if event.get("pid") == pid and event.get("cat") == "dispatch"]
        for event in slices:
            for share in shares[(event["name"], event["args"]["command_index"])]:
                per_section[share.path] += share.weight * event["dur"] * 1e3
        _calls, oracle = section_oracle(rows, compiled.section_map, WARMUP, device=device.ordinal,
                                        calls=ITERATIONS + WARMUP)
        assert {path for path, ns in oracle.items() if ns} == set(per_section)
        for path, ns in oracle.items():  # the trace's microseconds, back in ns
            assert abs(per_section[path] - ns) < 1e-3 * len(slices) + 1, (device.ordinal, path)
        assert abs(sum(event["dur"] for event in slices) * 1e3 - device.session.total_ns) < 1e-3 * len(slices) + 1
        # The device's section slices are sections it ran (a fused dispatch is drawn in its heaviest section).
        sections = {tuple(event["args"]["path"]) for event in trace if event.get("pid") == pid
                    and event.get("cat") == "section"}
        assert sections and sections <= {path for path, ns in oracle.items() if ns}


def test_a_report_of_the_kept_profile_draws_the_same_trace(two_devices):
    compiled, kept, run, _rows = two_devices
    again = report(kept, compiled.section_map, calls=ITERATIONS + WARMUP, warmup=WARMUP, device="local-task")
    assert isinstance(again, DeviceRun)
    assert again.render("perfetto") == run.render("perfetto")


def test_outputs_still_per_device_are_one_error_line(two_devices):
    _compiled, _kept, run, _rows = two_devices
    with pytest.raises(SectionmarkError, match="several devices is not drawn yet"):
        run.render("chart")


def measured_dispatches(rows, ordinal):
    """That device's measured dispatch rows of iree-profile export (its executions after the warmup calls')."""
    events = [r for r in rows if r.get("record_type") == "host_execution_event"
              and r.get("physical_device_ordinal") == ordinal]
    executes = sorted(r["submission_id"] for r in events if r.get("op") == "execute")
    per_call = len(executes) // (ITERATIONS + WARMUP)
    measured = set(executes[WARMUP * per_call:])
    return [r for r in events if r.get("op") == "dispatch" and r["submission_id"] in measured]


def test_tracy_has_a_gpu_context_per_device_with_its_own_dispatches(two_devices, tmp_path):
    _compiled, _kept, run, rows = two_devices
    path = run.save(tmp_path / "two.tracy")
    contexts = read_capture(path).gpu_contexts
    names = [context.name for context in contexts]
    assert names == ["device 0: local-task queue 0: sections", "device 1: local-task queue 0: sections"], names
    keys = {key for r in rows if r.get("record_type") == "host_execution_event" for key in [r.get("key")] if key}
    for device, context in zip(run.devices, contexts):
        drawn: dict[str, list[int]] = defaultdict(list)
        for zone in context.zones:
            if zone.name in keys:
                drawn[zone.name].append(zone.end_ns - zone.start_ns)
        expected: dict[str, list[int]] = defaultdict(list)
        for r in measured_dispatches(rows, device.ordinal):
            expected[r["key"]].append(r["duration_ns"])
        assert {key: (len(v), sum(v)) for key, v in drawn.items()} == \
            {key: (len(v), sum(v)) for key, v in expected.items()}, device.ordinal
    if CSVEXPORT is not None:  # Tracy's own reader: the same zones per name (of every context: it names none)
        counted: dict[str, list[int]] = defaultdict(list)
        for name, _file, _start, duration in csvexport(path, "-g"):
            if name in keys:
                counted[name].append(int(duration))
        every: dict[str, list[int]] = defaultdict(list)
        for device in run.devices:
            for r in measured_dispatches(rows, device.ordinal):
                every[r["key"]].append(r["duration_ns"])
        assert {key: (len(v), sum(v)) for key, v in counted.items()} == \
            {key: (len(v), sum(v)) for key, v in every.items()}


def lane_bars(run, found):
    """Per device of ``run``: (its dispatch bars in the page's lanes, its dispatches in the call they draw)."""
    call = int(next(element for element in found if element.attributes.get("class") == "device-lanes")
               .attributes["data-call"])
    events = run.events()
    return [([element for element in found if element.attributes.get("class") == "device-dispatch"
              and element.attributes["data-device"] == str(device.ordinal)],
             int((events[device.ordinal].event_calls == call).sum())) for device in run.devices]


def test_the_lanes_draw_a_call_in_the_windows_of_the_time_split(two_devices):
    """The profile keeps the calls' windows its time split is in (the common windows of every device's queue
    operations), and the report draws its call from them: it does not find windows of its own."""
    import numpy as np

    from sectionmark.profiling.devices import common_windows
    from sectionmark.renderers.devices_html import call_windows_of

    _compiled, _kept, run, _rows = two_devices
    events = run.events()
    expected = common_windows([events[device.ordinal].queue_spans for device in run.devices], run.calls)
    assert all(map(np.array_equal, run.call_windows, expected))
    lengths = run.call_windows[1] - run.call_windows[0]
    assert all(np.sum(device.time.per_call, axis=1).tolist() == lengths.tolist() for device in run.devices)
    assert call_windows_of(run, events) is run.call_windows


def test_html_report_in_chromium_has_a_lane_per_device_and_every_section(two_devices, tmp_path):
    chromium.require_chromium()
    _compiled, _kept, run, _rows = two_devices
    page = run.save(tmp_path / "two.html")
    loaded = chromium.load(page)
    assert loaded.console == []  # no error, no CSP violation (a request would be one)
    found = chromium.elements(loaded.dom)
    root = found[0]
    assert root.attributes["data-resources"] == "0" and "data-problems" not in root.attributes  # nothing fetched
    lanes = [element.attributes["data-device"] for element in found if element.attributes.get("class") == "device-lane"]
    assert lanes == ["0", "1"]
    # The lanes draw one call: each device's dispatch bars are its events of that call.
    for bars, dispatches in lane_bars(run, found):
        assert len(bars) == dispatches > 0
    queue = {element.attributes["data-kind"] for element in found if element.attributes.get("class") == "device-queue"}
    assert "command_buffer" in queue
    # The sections table has a column per device and every section; the split a bar part per device and part.
    headers = [element.text for element in found if element.tag == "th"]
    assert {"Busy/call dev 0", "Busy/call dev 1"} <= set(headers)
    shown = " ".join(element.text for element in found)
    assert all(name in shown for name in ("Half 0", "Half 1", "Join"))
    parts = [(element.attributes["data-part"]) for element in found if element.attributes.get("class") == "split-part"]
    assert parts == [*DEVICE_TIME_PARTS] * 2  # gaps (launches, barriers) beside transfer
    tabs = [element.text for element in found if element.tag == "button" and element.text.startswith("device")]
    assert tabs == ["device 0 (local-task)", "device 1 (local-task)"]


def test_waiting_is_what_the_others_ran_less_what_the_device_ran():
    from sectionmark.renderers.devices_html import _subtract, _union

    others = _union([(0, 10), (5, 20), (30, 40)])
    assert others == [(0, 20), (30, 40)]
    assert _subtract(others, [(2, 4), (15, 35)]) == [(0, 2), (4, 15), (35, 40)]
    assert _subtract(others, []) == others and _subtract(others, [(0, 50)]) == []


def test_report_command_draws_the_views_of_a_kept_profile(two_devices, tmp_path):
    from sectionmark.cli import main

    compiled, kept, _run, _rows = two_devices
    vmfb = compiled.save(tmp_path / "two.vmfb")
    trace, page = tmp_path / "two.perfetto.json", tmp_path / "two.html"
    assert main(["report", str(kept), "--map", str(vmfb), "--calls", str(ITERATIONS + WARMUP), "--warmup", str(WARMUP),
                 "--perfetto", str(trace), "--html", str(page)]) == 0
    processes = [event["args"]["name"] for event in json.loads(trace.read_text())["traceEvents"]
                 if event["name"] == "process_name"]
    assert processes == ["device 0", "device 1"]  # a recorded profile does not know its IREE devices
    assert page.read_text().count("class=\"device-lane\"") == 2
    assert main(["report", str(kept), "--map", str(vmfb), "--chart", str(tmp_path / "c.png")]) == 1
    assert not (tmp_path / "c.png").exists()


# ------------------------------------------------------------------ compare, device by device


def test_compare_of_two_runs_on_several_devices_is_device_by_device(two_devices, tmp_path):
    from sectionmark.cli import main
    from sectionmark.profiling.device_compare import DeviceComparison

    _compiled, _kept, run, _rows = two_devices
    same = sm.compare(run, run)
    assert isinstance(same, DeviceComparison) and [device.ordinal for device in same.devices] == [0, 1]
    for device, changes in zip(run.devices, same.devices):
        ran = {row.path: row.busy_ns / run.calls for row in device.session.sections if row.dispatches}
        compared = {row.path: row.a_ns for row in changes.comparison.sections if row.path in ran}
        assert compared.keys() == ran.keys() and all(abs(compared[path] - ran[path]) < 1e-6 for path in ran)
        assert all(row.a_ns == row.b_ns and row.verdict != "slower" for row in changes.comparison.sections)
    # B: device 1's "Half 1" 100 times slower in every call (its JSON edited), device 0 unchanged: beyond any
    # spread of a few calls' times (a one-run comparison's interval is over its calls).
    a = run.save(tmp_path / "a.json")
    document = json.loads(a.read_text())
    for row in document["devices"][1]["profile"]["sections"]:
        if row["name"] == "Half 1":
            row["samples"] = [100 * value for value in row["samples"]]
            row["busy_ns"] *= 100
    b = tmp_path / "b.json"
    b.write_text(json.dumps(document))
    changed = sm.compare(a, b, min_change=10)
    verdicts = {(device.ordinal, row.name): row.verdict for device in changed.devices
                for row in device.comparison.sections}
    assert verdicts[(1, "Half 1")] == "slower" and verdicts[(0, "Half 1")] != "slower"
    table = tmp_path / "c.csv"
    assert main(["compare", str(a), str(b), "--csv", str(table), "--fail-if-slower", "50"]) == 1
    lines = table.read_text().splitlines()
    assert lines[0].startswith("device,section,") and {line.split(",")[0] for line in lines[1:]} == {"0", "1"}


def test_a_version_3_document_without_gaps_still_compares(two_devices, tmp_path):
    """A file written before the time split had ``gaps_ns`` (version 3: five parts, gaps inside transfer) and
    ``untimed_ns`` (version 4) reads back as before."""
    _compiled, _kept, run, _rows = two_devices
    document = json.loads(run.render("json"))
    assert document["version"] == 5 and all(len(part) == 7 for device in document["devices"]
                                            for part in device["time"]["per_call"])
    for device in document["devices"]:
        time = device["time"]
        time["transfer_ns"] += time.pop("gaps_ns")
        assert time.pop("untimed_ns") == 0  # local-task times every part
        time["per_call"] = [[c, t + g, q, w, i] for c, t, g, q, w, i, _untimed in time["per_call"]]
    document["version"] = 3
    old = tmp_path / "old.json"
    old.write_text(json.dumps(document))
    compared = sm.compare(old, run.save(tmp_path / "new.json"))
    assert [device.ordinal for device in compared.devices] == [0, 1]
    assert all(row.a_ns == row.b_ns for device in compared.devices for row in device.comparison.sections)


def test_compare_of_several_devices_with_one_is_one_error_line(two_devices):
    _compiled, _kept, run, _rows = two_devices
    with pytest.raises(SectionmarkError, match="is a profile of several devices and B of one"):
        sm.compare(run, run.device(0))


def test_a_huge_call_merges_each_device_bars_keeping_every_dispatch(two_devices, monkeypatch):
    """Merged or not, each device's bars count every dispatch of the call (these devices' dispatches of a call
    are of different sections: `merge_bars` itself is tested on one device's many, tests/renderers/test_html.py)."""
    from sectionmark.renderers import devices_html

    _compiled, _kept, run, _rows = two_devices
    monkeypatch.setattr(devices_html, "MAX_BARS", 0)
    found = chromium.elements(run.render("html"))
    for bars, dispatches in lane_bars(run, found):
        assert sum(int(bar.attributes["data-count"]) for bar in bars) == dispatches > 0
