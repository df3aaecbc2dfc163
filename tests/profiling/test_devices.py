"""Several devices in one process: a matmul split over two local-task devices, profiled and read per device.

Real stack: `sm.compile(devices=2)` of `TWO_DEVICES`, `sm.profile(devices=[...])` under iree-benchmark-module,
each device's figures checked against the one oracle (`section_oracle`, per device) and the invariants of every
session; then the reader's refusals, and the split of each device's time on hand-built spans.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
import numpy as np
import pytest
import bundle_layout as layout
from invariants import assert_profile_invariants
from tiny_profiles import TWO_DEVICES, export_rows, profile_two_devices, section_oracle, transfer_oracle

import sectionmark as sm
from sectionmark.compiler.targets import target_flags
from sectionmark.errors import SectionmarkError
from sectionmark.profiling.devices import DEVICE_TIME_PARTS, common_windows, split_device_time
from sectionmark.profiling.queue_time import QUEUE_SPAN_DTYPE, union_by_window
from sectionmark.readers.bundle_events import open_bundle
from sectionmark.readers.bundle_records import HOST_EVENT
from sectionmark.section_map import device_section_map
from sectionmark.readers.devices import chunk_devices, split_devices
from sectionmark.readers.event_model import DISPATCH_DTYPE, EVENT_DISPATCH
from sectionmark.readers.ireeprof import read_profile
from sectionmark.profiling.device_run import DeviceRun
from sectionmark.profiling.read import ReadArguments
from sectionmark.readers.sources import close_all, open_device_sources, open_source
from sectionmark.workflows.measure import report

pytest.importorskip("iree.compiler")

DEVICES = ["local-task", "local-task"]
ITERATIONS, WARMUP = 4, 1


@pytest.fixture(scope="module")
def two_devices(tmp_path_factory):
    """(compiled module, kept .ireeprof, the DeviceProfile of the run)."""
    return profile_two_devices(tmp_path_factory.mktemp("devices"), ITERATIONS, WARMUP)


def test_the_map_says_which_device_runs_each_command_buffer(two_devices):
    compiled, _kept, _result = two_devices
    devices = [buffer.device for buffer in compiled.section_map.command_buffers]
    assert sorted(set(devices)) == [0, 1], devices
    one_device = sm.compile(TWO_DEVICES.replace("@__device_1", "@__device_0"), quiet=True)
    assert all(buffer.device is None for buffer in one_device.section_map.command_buffers)
    # local[0] and local[1] after llvm-cpu's own `local`: three device globals, @__device_1 being local[0], the
    # first runtime device; the map says where the work runs, not the global's place.
    three = sm.compile(TWO_DEVICES, extra_args=["--iree-hal-target-device=local[0]",
                                                "--iree-hal-target-device=local[1]"], quiet=True)
    assert [buffer.device for buffer in three.section_map.command_buffers] == [0] * len(devices)
    assert '"device"' not in str(one_device.section_map.to_json())


def test_each_device_equals_the_oracle_of_its_own_events(two_devices):
    compiled, kept, result = two_devices
    rows = export_rows(kept)
    assert rows is not None
    assert {r["physical_device_ordinal"] for r in rows if r.get("record_type") == "host_execution_event"} == {0, 1}
    assert [device.ordinal for device in result.devices] == [0, 1]
    for device in result.devices:
        session = device.session
        assert_profile_invariants(session)  # coverage exact on each device, among the rest
        # Shares of fused dispatches are fractions: the sum of the top sections is exact to rounding, not bit for bit.
        assert session.total_ns == pytest.approx(sum(row.busy_ns for row in session.sections if len(row.path) == 1)
                                                 + session.unmarked_ns, rel=1e-12, abs=1e-6)
        calls, oracle = section_oracle(rows, compiled.section_map, WARMUP, device=device.ordinal,
                                       calls=ITERATIONS + WARMUP)
        assert calls == session.calls == ITERATIONS
        ran = {row.path: row for row in session.sections if row.dispatches}
        assert set(ran) == {path for path, ns in oracle.items() if ns}, device.ordinal
        for path, ns in oracle.items():
            assert abs(ran[path].exclusive_ns - ns) < 1, (device.ordinal, path)  # to the ns


def test_every_section_is_on_the_device_that_ran_it(two_devices):
    compiled, _kept, result = two_devices
    expected: dict[tuple, set[int]] = {}
    for buffer in compiled.section_map.command_buffers:
        for command in buffer.commands:
            if command.op == "dispatch":
                for share in command.shares:
                    expected.setdefault(share.path, set()).add(buffer.device)
    by_path = {row.path: row for row in result.sections}
    assert expected and all(set(by_path[path].ran_on) == devices for path, devices in expected.items())
    for device in result.devices:  # a section that ran elsewhere says where, on a device it did not run on
        for row in device.session.sections:
            elsewhere = sorted(expected.get(row.path, set()) - {device.ordinal})
            if row.path and not row.dispatches and elsewhere:
                assert row.note == f"no dispatches on this device: it ran on device {', '.join(map(str, elsewhere))}"
    for row in result.sections:
        assert row.total_busy_ns == sum(device.session.sections[[r.path for r in device.session.sections]
                                                                .index(row.path)].busy_ns
                                        for device in result.devices)


def test_each_device_time_adds_up_to_every_call_window(two_devices):
    _compiled, _kept, result = two_devices
    times = [device.time for device in result.devices]
    assert all(time is not None for time in times)
    per_call = np.array([time.per_call for time in times])  # [device, call, part]
    windows = per_call.sum(axis=2)
    assert (windows == windows[0]).all()  # every device's parts add up to the same window of each call
    for device, time in zip(result.devices, times):
        parts = [getattr(time, f"{part}_ns") for part in DEVICE_TIME_PARTS]
        assert sum(parts) == time.window_ns == int(windows[0].sum())
        assert min(parts) >= 0 and 0 <= time.overlap_ns <= time.window_ns
        assert time.compute_ns == device.session.call_time.dispatch_ns
        assert time.transfer_ns > 0  # every device copies: the halves go to device 1 and back


def test_each_section_transfer_equals_the_oracle_and_adds_up_to_the_device(two_devices):
    """"Half 1" moves its operands to device 1, "Join" its product back: each one's transfer time on each device
    is its buffers' executions less their dispatches (iree-profile export), and a device's sections' transfers
    add up to its transfer time."""
    compiled, kept, result = two_devices
    rows = export_rows(kept)
    by_path = {row.path: row for row in result.sections}
    assert by_path[("Half 1",)].transfer_ns[0] > 0 and by_path[("Half 1",)].transfer_ns[1] > 0
    assert by_path[("Join",)].transfer_ns[1] > 0
    for index, device in enumerate(result.devices):
        oracle = transfer_oracle(rows, compiled.section_map, WARMUP, device.ordinal, ITERATIONS + WARMUP)
        mine = {row.path: row.transfer_ns[index] for row in result.sections if row.transfer_ns[index]}
        assert mine.keys() == {path for path, ns in oracle.items() if ns}, device.ordinal
        for path, ns in oracle.items():
            assert abs(mine.get(path, 0.0) - ns) < 1e-6, (device.ordinal, path)
        assert sum(row.transfer_ns[index] for row in result.sections) == device.time.transfer_ns
    # Device 1's one buffer copies for both sections: split by the bytes each copies, marked.
    assert by_path[("Half 1",)].transfer_split == by_path[("Join",)].transfer_split == [1]
    text = result.table()
    assert "Transfer dev 1" in text and "split by the bytes each copies" in text
    document = json.loads(result.render("json"))
    assert {s["name"]: s["transfer_ns"] for s in document["sections"]}["Join"] == [
        0, round(by_path[("Join",)].transfer_ns[1])]
    header, *lines = csv.reader(io.StringIO(result.render("csv")))
    join = next(line for line in lines if line[:2] == ["1", "Join"])
    assert int(join[header.index("transfer_ns")]) == round(by_path[("Join",)].transfer_ns[1])


def test_each_device_waits_add_up_by_the_section_it_waits_to_run(two_devices):
    """Device 1 waits for device 0 to send "Half 1"'s operands before it runs Half 1; each device's sections'
    waits add up to its waiting time."""
    _compiled, _kept, result = two_devices
    by_path = {row.path: row for row in result.sections}
    assert by_path[("Half 1",)].waiting_ns[1] > 0
    for index, device in enumerate(result.devices):
        waits = sum(row.waiting_ns[index] for row in result.sections)
        assert abs(waits - device.time.waiting_ns) < 1e-6 * max(device.time.waiting_ns, 1)
    assert "Waiting dev 0" in result.table()
    assert result.render("csv").splitlines()[0].endswith(",transfer_ns,waiting_ns")


def shifted(profile, ns: int):
    """A device's events, every time ``ns`` later."""
    from dataclasses import replace

    def moved(table, *fields):
        table = table.copy()
        for name in fields:
            table[name] += ns
        return table

    return replace(profile, dispatches=moved(profile.dispatches, "start_ns", "end_ns"),
                   submissions=moved(profile.submissions, "start_ns", "end_ns"),
                   queue_ops=moved(profile.queue_ops, "start_ns", "end_ns"), memory=moved(profile.memory, "time_ns"),
                   allocations=None if profile.allocations is None else moved(profile.allocations, "time_ns"))


def test_calls_overlapping_across_devices_still_split_each_common_window_exactly(two_devices):
    """Device 1's call 0 moved to run across the start of device 0's call 1: the common windows are clipped there
    (device 1's call 0 reaches into window 1), and every device's time is still split, its parts adding up to each
    common window, its compute the union of its dispatches there (a timeline oracle), its sections' transfers to
    its transfer."""
    from sectionmark.profiling.attribute import attribute
    from sectionmark.profiling.devices import read_device_profile
    from sectionmark.readers.sources import WholeProfile, read_device_events

    compiled, kept, _result = two_devices
    profiles = read_device_events(kept, compiled.section_map)
    spans_of = lambda: [attribute(profile, device_section_map(compiled.section_map, ordinal), calls=ITERATIONS + WARMUP,
                                  warmup=WARMUP).queue_spans for ordinal, profile in sorted(profiles.items())]
    starts = [common_windows([part], ITERATIONS) for part in spans_of()]
    device_1 = starts[1][1][0] - starts[1][0][0]  # its call 0's length
    profiles[1] = shifted(profiles[1], int(starts[0][0][1] - device_1 // 2 - starts[1][0][0]))
    windows = common_windows(spans_of(), ITERATIONS)
    assert windows[1][0] == starts[0][0][1]  # window 0 ends where device 0's call 1 starts, inside device 1's call 0
    result = read_device_profile({ordinal: WholeProfile(profile) for ordinal, profile in profiles.items()},
                                 compiled.section_map, calls=ITERATIONS + WARMUP, warmup=WARMUP)
    first = int(windows[0][0])
    for index, device in enumerate(result.devices):
        assert device.time is not None and device.transfers is not None and device.waits is not None
        per_call = np.array(device.time.per_call)
        assert (per_call.sum(axis=1) == windows[1] - windows[0]).all() and (per_call >= 0).all()
        dispatches = profiles[device.ordinal].dispatches
        ran = np.zeros(int(windows[1][-1]) - first, bool)
        for start, end in zip(dispatches["start_ns"].tolist(), dispatches["end_ns"].tolist()):
            ran[max(start - first, 0):max(end - first, 0)] = True
        oracle = [int(ran[start - first:end - first].sum()) for start, end in zip(*windows)]
        assert per_call[:, 0].tolist() == oracle, device.ordinal
        assert sum(row.transfer_ns[index] for row in result.sections) == pytest.approx(device.time.transfer_ns)
        assert sum(row.waiting_ns[index] for row in result.sections) == pytest.approx(device.time.waiting_ns)


def test_a_replayed_function_keeps_a_device_that_only_copied_and_waited(two_devices):
    """Device 1's dispatches dropped: in the replay's function it only copies and waits. It stays in the
    function's profile with its transfers and waits, device 0's waiting for it stays waiting (not idle), and the
    parts still add up to every window."""
    from dataclasses import replace

    from sectionmark.readers.sources import read_device_events
    from sectionmark.workflows.replay_devices import DeviceReplayProfile

    compiled, kept, _result = two_devices
    profiles = read_device_events(kept, compiled.section_map)
    profiles[1] = replace(profiles[1], dispatches=profiles[1].dispatches[:0])
    replayed = DeviceReplayProfile.build(profiles, compiled.section_map, ["main"], replays=ITERATIONS, warmup=WARMUP,
                                         devices=DEVICES)
    result = replayed.function("main")
    assert [device.ordinal for device in result.devices] == [0, 1]
    first, second = (device.time for device in result.devices)
    assert second.compute_ns == 0 and second.transfer_ns > 0 and first.waiting_ns > 0
    for index, device in enumerate(result.devices):
        assert all(sum(parts) == length for parts, length in zip(device.time.per_call,
                                                                 np.array(first.per_call).sum(axis=1)))
        assert sum(row.transfer_ns[index] for row in result.sections) == pytest.approx(device.time.transfer_ns)
        assert sum(row.waiting_ns[index] for row in result.sections) == pytest.approx(device.time.waiting_ns)
    assert json.loads(result.render("json"))["devices"][1]["time"]["transfer_ns"] == second.transfer_ns
    with pytest.raises(SectionmarkError, match="ran no dispatch in the replay"):
        DeviceReplayProfile.build({0: replace(profiles[0], dispatches=profiles[0].dispatches[:0]), 1: profiles[1]},
                                  compiled.section_map, ["main"], replays=ITERATIONS, warmup=WARMUP,
                                  devices=DEVICES).function("main")


def test_the_map_knows_each_copy_size(two_devices):
    """The bytes the transfers split by: each copy command's length in the map is the length IREE recorded."""
    compiled, kept, _result = two_devices
    recorded = sorted(r["length"] for r in export_rows(kept)
                      if r.get("record_type") == "command_operation" and r.get("op") == "copy")
    mapped = sorted(size for buffer in compiled.section_map.command_buffers for command in buffer.commands
                    if command.op == "copy" for size in command.binding_bytes)
    assert recorded and mapped == recorded


def test_report_of_the_kept_profile_is_the_run(two_devices, tmp_path):
    compiled, kept, result = two_devices
    again = report(kept, compiled.section_map, calls=ITERATIONS + WARMUP, warmup=WARMUP)
    def figures(profile):  # the run knows its worker count (utilization), a recorded profile does not
        return [[(row.path, row.busy_ns, row.wall_ns, row.calls, row.dispatches) for row in device.session.sections]
                for device in profile.devices]

    assert figures(again) == figures(result)
    assert [d.time for d in again.devices] == [d.time for d in result.devices]
    assert [(row.path, row.transfer_ns, row.waiting_ns) for row in again.sections] == [
        (row.path, row.transfer_ns, row.waiting_ns) for row in result.sections]
    for name in ("table", "json", "csv"):
        assert again.render(name)
    with pytest.raises(SectionmarkError, match="several devices is not drawn yet"):
        again.render("chart")


def _host_rows(rows: list[dict], device: int) -> list[str]:
    """The device's host events of an export, less where in the file each was (its record's index)."""
    return sorted(json.dumps({**row, "source_record_index": None}, sort_keys=True) for row in rows
                  if row.get("record_type") == "host_execution_event" and row.get("physical_device_ordinal") == device)


def test_each_device_layout_pass_gives_back_every_page_it_maps_in(two_devices, monkeypatch):
    """The first pass over each device's events (its executions and queue operations) gives back every page of its
    file it read, the memory events' too (read for their record lengths, they lie all over the file): a page kept
    mapped is RSS that grows with the profile (the 8 devices' files of a 400k-event profile kept 300 MB)."""
    import mmap

    from sectionmark.readers import ireeprof_stream

    mapped: set[int] = set()  # the pages read and not given back, by address
    reads, releases = ireeprof_stream.records_at, ireeprof_stream.release_pages

    def records_at(data, offsets, dtype):
        addresses = data.ctypes.data + np.asarray(offsets, np.int64)
        for last_byte in (0, dtype.itemsize - 1):
            mapped.update(((addresses + last_byte) // mmap.PAGESIZE).tolist())
        return reads(data, offsets, dtype)

    def release_pages(pages, start, end):
        base = np.frombuffer(pages, np.uint8).ctypes.data
        mapped.difference_update(range((base + start) // mmap.PAGESIZE, (base + end - 1) // mmap.PAGESIZE + 1))
        releases(pages, start, end)

    monkeypatch.setattr(ireeprof_stream, "records_at", records_at)
    monkeypatch.setattr(ireeprof_stream, "release_pages", release_pages)
    compiled, kept, _result = two_devices
    sources = open_device_sources(kept, compiled.section_map)
    try:
        for device, source in sources.items():
            assert len(source.layout().queue_ops) and not mapped, device
    finally:
        close_all(sources)


def test_each_device_split_file_is_that_device_one_device_profile(two_devices, tmp_path):
    """The split (one pass, a file per device) writes each device's records as a one-device profile: IREE's own
    export reads it and finds exactly that device's events of the whole file, and the one-device read of it gives
    that device's figures of the oracle of the whole file."""
    compiled, kept, result = two_devices
    rows = export_rows(kept)
    with kept.open("rb") as file:
        bundle = open_bundle(kept, file, kept.stat().st_size)
        split = split_devices(bundle, file, [0, 1], tmp_path)
        bundle.close()
    assert sorted(split) == [0, 1]
    for device, written in split.items():
        path = written.path
        with path.open("rb") as file:  # the chunks the split gives are those a walk of its file finds
            walked = open_bundle(path, file, path.stat().st_size)
            assert walked.sessions == 1 and walked.chunks.keys() == written.chunks.keys()
            for name, chunks in walked.chunks.items():
                for field in ("starts", "lengths", "devices", "queues"):
                    assert getattr(chunks, field).tolist() == getattr(written.chunks[name], field).tolist(), name
            walked.close()
        own = export_rows(path)
        assert own is not None, f"iree-profile refuses device {device}'s file"
        assert _host_rows(own, device) == _host_rows(rows, device) != []
        assert {row["physical_device_ordinal"] for row in own if row.get("record_type") == "host_execution_event"} \
            == {device}
        session = report(path, device_section_map(compiled.section_map, device), calls=ITERATIONS + WARMUP,
                         warmup=WARMUP).session
        calls, oracle = section_oracle(rows, compiled.section_map, WARMUP, device=device, calls=ITERATIONS + WARMUP)
        assert calls == session.calls == ITERATIONS
        ran = {row.path: row for row in session.sections if row.dispatches}
        assert set(ran) == {path for path, ns in oracle.items() if ns}
        for path, ns in oracle.items():
            assert abs(ran[path].exclusive_ns - ns) < 1, (device, path)
        assert [(row.path, row.busy_ns, row.dispatches) for row in session.sections] == [
            (row.path, row.busy_ns, row.dispatches) for row in result.device(device).sections]


def test_the_split_files_are_gone_after_the_read(two_devices, tmp_path, monkeypatch):
    compiled, kept, _result = two_devices
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    report(kept, compiled.section_map, calls=ITERATIONS + WARMUP, warmup=WARMUP)
    assert list(tmp_path.iterdir()) == []


def test_no_room_for_the_split_is_one_error_line(two_devices, tmp_path, monkeypatch):
    """A disk too full for the devices' files (here: a file size limit, its signal ignored) is one error line,
    and the folder goes."""
    import resource
    import signal

    compiled, kept, _result = two_devices
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (kept.stat().st_size // 4, limits[1]))
    try:
        with pytest.raises(SectionmarkError, match="cannot write its devices' files in .*free space") as error:
            report(kept, compiled.section_map, calls=ITERATIONS + WARMUP, warmup=WARMUP)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, previous)
    assert "\n" not in str(error.value)
    assert list(tmp_path.iterdir()) == []


def test_one_device_readers_refuse_a_profile_of_several(two_devices):
    compiled, kept, _result = two_devices
    with pytest.raises(SectionmarkError, match="records 2 devices") as error:
        open_source(kept, compiled.section_map)
    assert _open_files(str(kept)) == [], error.value  # the profile is not left mapped while the error lives


def test_the_whole_read_of_several_devices_is_refused_and_the_export_read_per_device(two_devices, tmp_path):
    """Read whole (the bundle reader, or IREE's ireeperf-jsonl export), every device's events would be one
    device's: their submissions numbered as one device's calls. Both are refused, as a one-device reader is;
    a report of the export reads each device's rows, and gives the figures of the profile's."""
    compiled, kept, result = two_devices
    export = tmp_path / "two.jsonl"
    export.write_text("".join(json.dumps(row) + "\n" for row in export_rows(kept)))
    for path in (kept, export):
        with pytest.raises(SectionmarkError, match=r"records 2 devices \(0, 1\); read it per device") as error:
            read_profile(path)
        assert "\n" not in str(error.value)
    exported = report(export, compiled.section_map, calls=ITERATIONS + WARMUP, warmup=WARMUP)
    again = report(kept, compiled.section_map, calls=ITERATIONS + WARMUP, warmup=WARMUP)
    assert [device.ordinal for device in exported.devices] == [0, 1]
    assert [device.session.to_json() for device in exported.devices] == [
        device.session.to_json() for device in again.devices]
    assert [device.time for device in exported.devices] == [device.time for device in again.devices]
    assert [(row.path, row.busy_ns, row.transfer_ns, row.waiting_ns) for row in exported.sections] == [
        (row.path, row.busy_ns, row.transfer_ns, row.waiting_ns) for row in again.sections]


def test_a_layout_not_known_in_a_profile_of_several_devices_is_one_error_line(two_devices, tmp_path):
    """A record layout the reader does not know, found while the devices are split or in one device's file, is
    one error line: not the file read whole through IREE's export (every device's events as one device's)."""
    compiled, kept, _result = two_devices
    blob = kept.read_bytes()
    queues = tmp_path / "queues.ireeprof"  # a queues chunk of 8 bytes: no whole 24-byte record
    queues.write_bytes(layout.with_record(blob, "queues", bytes(8)))
    with pytest.raises(SectionmarkError, match="unsupported profile layout .*; a profile of several devices is read"):
        report(queues, compiled.section_map, calls=ITERATIONS + WARMUP, warmup=WARMUP)
    edited = bytearray(blob)  # a host event of device 1 one byte longer than IREE 3.13's
    size, fields = layout.HOST_EXECUTION_EVENT
    event = next(at for at in layout.fixed_records(blob, "host-execution-events")
                 if layout.read(blob, at + fields["physical_device_ordinal"][0], 4) == 1)
    layout.write(edited, event + fields["record_length"][0], 4, size + 1)
    longer = tmp_path / "longer.ireeprof"
    longer.write_bytes(bytes(edited))
    with pytest.raises(SectionmarkError, match="layout of device 1's events .*several devices") as error:
        report(longer, compiled.section_map, calls=ITERATIONS + WARMUP, warmup=WARMUP)
    assert "\n" not in str(error.value)


def _open_files(named: str = "sectionmark-devices-") -> list[str]:
    """The paths of this process's open files whose path holds ``named`` (by default: devices' split files,
    `sectionmark.readers.devices`)."""
    found = []
    for descriptor in os.listdir("/proc/self/fd"):
        try:
            found.append(os.readlink(f"/proc/self/fd/{descriptor}"))
        except OSError:  # the listing's own descriptor, closed by now
            pass
    return [target for target in found if named in target]


def test_a_failed_read_of_several_devices_leaves_no_split_file_open(two_devices):
    """A read of several devices that fails closes every device's file (deleted, its disk space is kept while
    open, and the error, with the sources in its traceback, may live on)."""
    compiled, kept, result = two_devices
    with pytest.raises(SectionmarkError, match="cannot split the profile into 100 calls") as failed_report:
        report(kept, compiled.section_map, calls=100)
    assert _open_files() == []
    run = DeviceRun.of(result, kept, compiled.section_map, ReadArguments(100, WARMUP))
    with pytest.raises(SectionmarkError, match="cannot split the profile into 100 calls") as failed_events:
        run.events()
    assert _open_files() == []
    assert failed_report.value and failed_events.value  # both errors are still alive here


def test_windows_that_stop_on_an_error_close_their_file(two_devices, tmp_path):
    """A device's windows that meet a failed dispatch close its file as they stop (its error may live on)."""
    compiled, kept, _result = two_devices
    blob = bytearray(kept.read_bytes())
    _size, fields = layout.HOST_EXECUTION_EVENT
    event = next(at for at in layout.fixed_records(bytes(blob), "host-execution-events")
                 if layout.read(blob, at + fields["physical_device_ordinal"][0], 4) == 0
                 and layout.read(blob, at + fields["type"][0], 4) == EVENT_DISPATCH)
    layout.write(blob, event + fields["status_code"][0], 4, 13)  # device 0's dispatch failed
    failed = tmp_path / "failed.ireeprof"
    failed.write_bytes(bytes(blob))
    sources = open_device_sources(failed, compiled.section_map)
    try:
        sources[0].layout()
        with pytest.raises(SectionmarkError, match="status") as error:
            for _window in sources[0].windows():
                pass
        assert [target for target in _open_files() if "device0" in target] == [], error.value
    finally:
        close_all(sources)


def test_a_chunk_mixing_devices_is_one_error_line(two_devices, tmp_path):
    compiled, kept, _result = two_devices
    blob = bytearray(kept.read_bytes())
    with kept.open("rb") as file:
        bundle = open_bundle(kept, file, len(blob))
        chunks = bundle.chunks["host-execution-events"]
        devices = chunk_devices(kept, bundle.data, chunks, "host-execution-events")
        bundle.close()
    # The second host event of a chunk of device 1 says device 0.
    chunk = int(np.flatnonzero((devices == 1) & (chunks.lengths >= 2 * HOST_EVENT.itemsize))[0])
    device_at = int(chunks.starts[chunk]) + HOST_EVENT.itemsize + HOST_EVENT.fields["device"][1]
    blob[device_at:device_at + 4] = (0).to_bytes(4, "little")
    edited = tmp_path / "mixed.ireeprof"
    edited.write_bytes(bytes(blob))
    with pytest.raises(SectionmarkError, match="holds events of devices 1 and 0"):
        report(edited, compiled.section_map)


def test_a_device_record_between_the_sessions_ends_is_its_own(two_devices, tmp_path):
    """IREE may write a device's last records after another device's session end (Vulkan writes device 1's last
    clock sample there: tests/gpu/test_vulkan_devices.py): a record between the sessions' ends belongs to a
    session still open. Device 1's last host-event chunk moved between the ends reads the same; a chunk after
    the last end is refused."""
    compiled, kept, _result = two_devices
    blob = kept.read_bytes()
    found = layout.records(blob)
    first_end, last_end = [record for record in found if record.record_type == layout.RECORD_SESSION_END]
    device_at = HOST_EVENT.fields["device"][1]
    moved = [record for record in found if record.content_type == "host-execution-events"
             and layout.read(blob, record.payload + device_at, 4) == 1][-1]
    piece = blob[moved.offset:moved.offset + moved.length]
    without = blob[:moved.offset] + blob[moved.offset + moved.length:]
    at = first_end.offset + first_end.length - moved.length
    edited = tmp_path / "between.ireeprof"
    edited.write_bytes(without[:at] + piece + without[at:])
    assert [record.record_type for record in layout.records(edited.read_bytes())][-3:] == [
        layout.RECORD_SESSION_END, 2, layout.RECORD_SESSION_END]
    expected, again = report(kept, compiled.section_map), report(edited, compiled.section_map)
    assert [[row.busy_ns for row in device.session.sections] for device in again.devices] == [
        [row.busy_ns for row in device.session.sections] for device in expected.devices]
    after = tmp_path / "after.ireeprof"
    after.write_bytes(layout.with_record(blob, "counters", b"", after_end=True))
    with pytest.raises(SectionmarkError, match="record after the session end"):
        report(after, compiled.section_map)


def test_several_devices_on_another_driver_are_refused_before_running(two_devices):
    compiled, _kept, _result = two_devices
    with pytest.raises(SectionmarkError, match="several devices of one driver only .got local-task, vulkan."):
        sm.profile(compiled, [], devices=["local-task", "vulkan"])
    with pytest.raises(SectionmarkError, match="profiled on local-task, cuda, vulkan only .got hip."):
        sm.profile(compiled, [], devices=["hip", "hip"])
    with pytest.raises(SectionmarkError, match="of cuda or llvm-cpu or vulkan-spirv .got target 'rocm'."):
        sm.compile(TWO_DEVICES, target="rocm", devices=2)


def test_two_cuda_devices_are_compiled_as_a_plain_user_names_them():
    """What the tests/readers/h200-two-devices modules were compiled with (scripts/gpu_devices/prepare.py)."""
    assert target_flags("cuda", devices=2) == ("--iree-hal-target-device=cuda[0]", "--iree-hal-target-device=cuda[1]",
                                               "--iree-cuda-target=sm_80")


def test_two_vulkan_devices_are_compiled_as_a_plain_user_names_them():
    """What iree-compile is given for two Vulkan devices (run with --device=vulkan twice): docs/multi-device.md."""
    assert target_flags("vulkan-spirv", devices=2) == (
        "--iree-hal-target-device=vulkan[0]", "--iree-hal-target-device=vulkan[1]",
        "--iree-vulkan-target=vp_android_baseline_2022")


# ------------------------------------------------------------------ the split of each device's time, hand-built

EXECUTE, ALLOCA, COPY = 3, 9, 4


def spans(*rows: tuple[int, int, int, int]) -> np.ndarray:
    """Queue spans (type, start, end, call)."""
    table = np.zeros(len(rows), QUEUE_SPAN_DTYPE)
    for index, (kind, start, end, call) in enumerate(rows):
        table[index] = (kind, start, end, 0, call)
    return table


def test_split_device_time_by_hand():
    # Call 0: device 0 runs [0, 100) (60 ns of dispatches), device 1 [50, 200) (100 ns) then allocates [200, 210).
    # Call 1: device 0 runs [300, 320) (all dispatch), device 1 copies on its queue [330, 340); idle [320, 330).
    device_0 = spans((EXECUTE, 0, 100, 0), (EXECUTE, 300, 320, 1))
    device_1 = spans((EXECUTE, 50, 200, 0), (ALLOCA, 200, 210, 0), (COPY, 330, 340, 1))
    windows = common_windows([device_0, device_1], 2)
    assert windows[0].tolist() == [0, 300] and windows[1].tolist() == [210, 340]
    # Of the executions' time with no dispatch running in call 0, device 0 copies 30 ns, device 1 20 ns.
    first, second = split_device_time([device_0, device_1], [np.array([60, 20]), np.array([100, 0])], windows,
                                      copies=[np.array([30, 0]), np.array([20, 0])])
    assert first.per_call == [[60, 30, 10, 0, 110, 0, 0], [20, 0, 0, 0, 10, 10, 0]]
    assert second.per_call == [[100, 20, 30, 10, 50, 0, 0], [0, 10, 0, 0, 20, 10, 0]]
    assert second.queue_transfer_ns == 10
    assert first.overlap_ns == second.overlap_ns == 50  # [50, 100)
    for time in (first, second):
        assert sum(getattr(time, f"{part}_ns") for part in DEVICE_TIME_PARTS) == time.window_ns == 250
        assert time.untimed_ns == 0


def test_a_device_timed_device_says_what_its_events_cannot_tell_apart():
    """Vulkan's devices time their dispatches only (their executions spanning them, their queue operations
    instants): compute, transfer between dispatches and gaps are theirs; their queue, waiting and idle time is
    untimed, not guessed (the spans of `test_split_device_time_by_hand`, device 1 device-timed)."""
    device_0 = spans((EXECUTE, 0, 100, 0), (EXECUTE, 300, 320, 1))
    device_1 = spans((EXECUTE, 50, 200, 0), (ALLOCA, 200, 210, 0), (COPY, 330, 340, 1))
    windows = common_windows([device_0, device_1], 2)
    first, second = split_device_time([device_0, device_1], [np.array([60, 20]), np.array([100, 0])], windows,
                                      copies=[np.array([30, 0]), np.array([20, 0])], dispatches_only=[False, True])
    assert first.per_call == [[60, 30, 10, 0, 110, 0, 0], [20, 0, 0, 0, 10, 10, 0]]
    assert second.per_call == [[100, 20, 30, 0, 0, 0, 60], [0, 10, 0, 0, 0, 0, 30]]
    assert (second.queue_ns, second.waiting_ns, second.idle_ns, second.untimed_ns) == (0, 0, 0, 90)
    assert sum(getattr(second, f"{part}_ns") for part in DEVICE_TIME_PARTS) == second.window_ns == 250


def test_dispatches_outside_executions_are_refused():
    device_0 = spans((EXECUTE, 0, 100, 0))
    with pytest.raises(SectionmarkError, match="outside its command-buffer"):
        split_device_time([device_0], [np.array([101])], common_windows([device_0], 1))
    with pytest.raises(SectionmarkError, match="outside its command-buffer"):
        split_device_time([device_0], [np.array([60])], common_windows([device_0], 1), copies=[np.array([41])])


def test_a_device_whose_events_the_map_cannot_place_is_named(two_devices):
    _compiled, kept, _result = two_devices
    one_device = sm.compile(TWO_DEVICES.replace("@__device_1", "@__device_0"), quiet=True)
    with pytest.raises(SectionmarkError, match=r"^device \d: .*(map|fingerprint|executable function)") as error:
        report(kept, one_device.section_map)
    assert "\n" not in str(error.value)


def test_each_device_places_its_events_in_its_own_command_buffers():
    """Two devices recording the same commands for different sections (each its pipeline stage): one device's
    events are placed in its own buffer, not refused as an ambiguous map."""
    from sectionmark.profiling.attribute import SlotMatcher
    from sectionmark.section_map import device_section_map
    from sectionmark.section_map import Command, CommandBuffer, SectionMap, Share

    def stage(index: int, device) -> CommandBuffer:
        return CommandBuffer(index, "main", [Command("dispatch", "k", site=index, shares=[Share((f"Stage {index}",),
                                                                                                1.0)])], device=device)

    both = SectionMap(sections=[("Stage 0",), ("Stage 1",)], sites=[], command_buffers=[stage(0, 0), stage(1, 1)])
    recorded = {7: [(0, "dispatch", "k")]}
    with pytest.raises(SectionmarkError, match="ambiguous"):
        SlotMatcher(both, None, ["k"]).lookup(np.array([(1, 7, 0, 0, 1, 0, 0, 1, 0, 0)], DISPATCH_DTYPE), recorded)
    for ordinal in (0, 1):
        own = device_section_map(both, ordinal)
        assert [buffer.index for buffer in own.command_buffers] == [ordinal]
        matcher = SlotMatcher(own, None, ["k"])
        matcher.lookup(np.array([(1, 7, 0, 0, ordinal, 0, 0, 1, 0, 0)], DISPATCH_DTYPE), recorded)
        assert matcher.buffer_matches == {7: ordinal}
    unknown = SectionMap(sections=both.sections, sites=[], command_buffers=[stage(0, None), stage(1, None)])
    assert device_section_map(unknown, 1) is unknown


def test_device_ordinals_follow_the_target_device_flags():
    from sectionmark.compiler.targets import device_ordinals

    flag = "--iree-hal-target-device="
    assert device_ordinals([f"{flag}local", f"{flag}local[0]", f"{flag}local[1]", "--other"]) == {
        "__device_0": 0, "__device_1": 0, "__device_2": 1}
    assert device_ordinals([f"{flag}device_a=local[1]", f"{flag}device_b=local[0]"]) == {"device_a": 1, "device_b": 0}


# ------------------------------------------------------------------ transfers by section, hand-built


def copy_buffer(device: int, *copies: tuple[str, object]):
    from sectionmark.section_map import Command, CommandBuffer, Share

    return CommandBuffer(0, "main", [Command("dispatch", "k", site=0, shares=[Share(("Compute",), 1.0)]),
                                     Command("barrier")]
                         + [Command("copy", "copy", shares=[Share((name,), 1.0)], binding_bytes=size)
                            for name, size in copies], device=device)


def executions(*rows: tuple[int, int, int, int]) -> np.ndarray:
    """Executions (submission, command buffer, start, end)."""
    from sectionmark.readers.event_model import SUBMISSION_DTYPE

    return np.array(list(rows), SUBMISSION_DTYPE)


def dispatch_rows(*rows: tuple[int, int, int]) -> np.ndarray:
    """Dispatches (submission, start, end)."""
    table = np.zeros(len(rows), DISPATCH_DTYPE)
    for index, (submission, start, end) in enumerate(rows):
        table[index]["submission"], table[index]["start_ns"], table[index]["end_ns"] = submission, start, end
    return table


def test_one_section_copies_get_the_whole_execution_gap():
    from sectionmark.profiling.device_transfers import ExecutionGaps, section_transfers

    runs = executions((1, 7, 0, 100), (2, 7, 200, 300))
    gaps = ExecutionGaps(runs, (np.array([0, 200]), np.array([150, 300])))
    gaps.add(dispatch_rows((1, 10, 40), (1, 30, 50)), runs[:1])  # union 40 ns: gap 60
    gaps.add(dispatch_rows((2, 200, 290)), runs[1:])  # gap 10
    assert gaps.gaps().tolist() == [60, 10]
    transfers = section_transfers(runs, gaps.gaps(), {7: copy_buffer(0, ("Half 1", None), ("Half 1", None))}, 5)
    assert transfers.transfer_ns == {("Half 1",): 70.0, (): 5.0} and not transfers.split


def test_two_sections_copies_split_by_bytes_or_equally():
    from sectionmark.profiling.device_transfers import section_transfers

    runs = executions((1, 7, 0, 100))
    by_bytes = section_transfers(runs, np.array([90]), {7: copy_buffer(1, ("Half 1", [100]), ("Join", [200]))}, 0)
    assert by_bytes.transfer_ns == {("Half 1",): 30.0, ("Join",): 60.0}
    assert by_bytes.split == {("Half 1",), ("Join",)} and by_bytes.by_bytes
    equally = section_transfers(runs, np.array([90]), {7: copy_buffer(1, ("Half 1", [100]), ("Join", None))}, 0)
    assert equally.transfer_ns == {("Half 1",): 45.0, ("Join",): 45.0} and not equally.by_bytes
    nothing = section_transfers(runs, np.array([90]), {7: copy_buffer(1)}, 0)
    assert nothing.transfer_ns == {(): 90.0}


def test_overlapping_executions_and_window_edges_add_up_exactly():
    from sectionmark.profiling.device_transfers import ExecutionGaps, clip_to_windows, execution_pieces

    starts, ends = execution_pieces(np.array([0, 50, 60]), np.array([100, 120, 80]))
    assert (starts.tolist(), ends.tolist()) == ([0, 100, 120], [100, 120, 120])  # the first started owns
    owner, part_starts, part_ends = clip_to_windows(np.array([0, 90]), np.array([100, 130]), np.array([10, 95]),
                                                    np.array([95, 125]))
    assert (owner.tolist(), part_starts.tolist(), part_ends.tolist()) == ([0, 0, 1, 1], [10, 95, 90, 95],
                                                                         [95, 100, 95, 125])
    runs = executions((1, 7, 0, 100), (2, 7, 50, 120))
    gaps = ExecutionGaps(runs, (np.array([0]), np.array([110])))
    gaps.add(dispatch_rows((1, 10, 30), (2, 90, 105)), runs)
    # Union of executions in the window: 110; dispatch union there: 20 + 15 = 35.
    assert gaps.gaps().sum() == 110 - 35 and gaps.gaps().tolist() == [100 - 20 - 10, 10 - 5]


def test_overlapping_executions_read_in_any_windows_give_the_one_window_gaps():
    """A dispatch of an execution read in a later reader window may run in time an earlier-read execution owns
    (the first started owns overlapping time): it is taken from that one's gap whatever the windows."""
    from sectionmark.profiling.device_transfers import ExecutionGaps

    # A [0, 100), B [50, 150), C [140, 200); A owns [0, 100), B [100, 150), C [150, 200).
    # Call 1: D [300, 400) alone.
    runs = executions((1, 7, 0, 100), (2, 7, 50, 150), (3, 7, 140, 200), (4, 7, 300, 400))
    dispatches = dispatch_rows((1, 0, 40), (2, 60, 140), (3, 150, 190), (4, 310, 390))
    windows = (np.array([0, 300]), np.array([200, 400]))
    # One reader window: A less [0, 40) and [60, 100); B less [100, 140); C less [150, 190); D less [310, 390).
    expected = [20, 10, 10, 20]
    # The device's transfer: the executions' union less the dispatches' union, in each call window.
    queue = spans(*((EXECUTE, int(run["start_ns"]), int(run["end_ns"]), 0) for run in runs))
    compute = union_by_window(dispatches["start_ns"].astype(np.int64), dispatches["end_ns"].astype(np.int64),
                              *windows)
    (time,) = split_device_time([queue], [compute], windows)
    assert time.gaps_ns == sum(expected) == 60 and time.transfer_ns == 0  # no buffer records a copy
    for cuts in ([4], [1, 4], [2, 4], [3, 4], [1, 2, 4], [1, 3, 4], [2, 3, 4], [1, 2, 3, 4]):  # the submissions each reader window ends after
        gaps, first = ExecutionGaps(runs, windows), 0
        for last in cuts:
            gaps.add(dispatches[first:last], runs[first:last])
            first = last
        assert gaps.gaps().tolist() == expected, cuts
        assert gaps.dispatch_union().tolist() == compute.tolist() == [160, 80]


def test_dispatches_running_at_once_in_different_reader_windows_are_taken_once():
    """A's dispatch [10, 60) and B's [40, 90) run at once: read in two windows, their union [10, 90) is taken from
    A's part (A owns [0, 100)) once, not each dispatch's whole length."""
    from sectionmark.profiling.device_transfers import ExecutionGaps

    runs = executions((1, 7, 0, 100), (2, 7, 20, 100))
    dispatches = dispatch_rows((1, 10, 60), (2, 40, 90))
    for cuts in ([2], [1, 2]):
        gaps, first = ExecutionGaps(runs, (np.array([0]), np.array([100]))), 0
        for last in cuts:
            gaps.add(dispatches[first:last], runs[first:last])
            first = last
        assert gaps.gaps().tolist() == [20, 0] and gaps.dispatch_union().tolist() == [80], cuts


# ------------------------------------------------------------------ transfer gaps vs launch and barrier gaps


# Buffer 7 records dispatch 0, dispatch 1, a copy (command 2), dispatch 3.
DISPATCH_DISPATCH_COPY_DISPATCH = {7: [(0, "dispatch", "k"), (1, "dispatch", "k"), (2, "copy", "copy"),
                                       (3, "dispatch", "k")]}


def indexed_dispatches(*rows: tuple[int, int, int, int]) -> np.ndarray:
    """Dispatches (submission, command index, start, end)."""
    table = dispatch_rows(*((submission, start, end) for submission, _index, start, end in rows))
    table["command_index"] = [index for _submission, index, _start, _end in rows]
    return table


def test_only_the_gap_around_a_copy_is_transfer():
    """Execution [0, 100): dispatch 0 [5, 20), dispatch 1 [25, 40), the copy, dispatch 3 [70, 90). Only [40, 70)
    has the copy between its neighbours' commands: transfer 30; [0, 5), [20, 25), [90, 100) are launch and
    barrier gaps: 20."""
    from sectionmark.profiling.device_transfers import ExecutionGaps, section_transfers

    runs = executions((1, 7, 0, 100))
    windows = (np.array([0]), np.array([100]))
    gaps = ExecutionGaps(runs, windows, DISPATCH_DISPATCH_COPY_DISPATCH)
    gaps.add(indexed_dispatches((1, 3, 70, 90), (1, 0, 5, 20), (1, 1, 25, 40)), runs)  # any order
    assert gaps.gaps().tolist() == [50] and gaps.transfers().tolist() == [30]
    assert gaps.transfer_by_window().tolist() == [30]
    (time,) = split_device_time([spans((EXECUTE, 0, 100, 0))], [gaps.dispatch_union()], windows,
                                copies=[gaps.transfer_by_window()])
    assert time.per_call == [[50, 30, 20, 0, 0, 0, 0]]
    # The section of the copy gets the copy's gap, not the execution's whole time with no dispatch running.
    transfers = section_transfers(runs, gaps.transfers(), {7: copy_buffer(0, ("Half 1", None))}, 0)
    assert transfers.transfer_ns == {("Half 1",): 30.0}


def test_copies_first_last_inside_a_block_or_alone():
    """A copy before the first dispatch's command: the leading gap; after the last one's: the trailing gap; between
    the commands of dispatches that ran at once (one union block): no gap of its own; an execution that only
    copies: all of it. Several submissions in one reader window, laid end to end, never merge."""
    from sectionmark.profiling.device_transfers import ExecutionGaps

    recorded = {5: [(0, "fill", None), (1, "dispatch", "k"), (2, "dispatch", "k"), (3, "update", None)],
                **DISPATCH_DISPATCH_COPY_DISPATCH, 9: [(0, "copy", "copy")]}
    # 1: fill, [10, 30), [35, 50), update, ends 60: leading 10 + trailing 10. 2 (right after 1): dispatches 0 and
    # 3 run at once [105, 150) with 1 [110, 120) inside: one block, the copy inside it; [100, 105), [150, 160)
    # launch gaps. 3: only a copy, [200, 230).
    runs = executions((1, 5, 0, 60), (2, 7, 100, 160), (3, 9, 200, 230))
    gaps = ExecutionGaps(runs, (np.array([0]), np.array([230])), recorded)
    gaps.add(indexed_dispatches((1, 1, 10, 30), (1, 2, 35, 50), (2, 0, 105, 140), (2, 3, 106, 150),
                                (2, 1, 110, 120)), runs)
    assert gaps.transfers().tolist() == [20, 0, 30]
    assert gaps.gaps().tolist() == [25, 15, 30]


def test_copy_gaps_cut_at_call_windows_and_read_in_any_windows():
    """The copy gap [40, 70) across the call windows' edge at 50: 10 ns in call 0, 20 in call 1, however the
    reader cuts the submissions."""
    from sectionmark.profiling.device_transfers import ExecutionGaps

    runs = executions((1, 7, 0, 100), (2, 7, 100, 200))
    dispatches = indexed_dispatches((1, 0, 5, 20), (1, 1, 25, 40), (1, 3, 70, 90), (2, 0, 100, 150),
                                    (2, 1, 150, 160), (2, 3, 170, 200))
    for cuts in ([6], [3, 6]):
        gaps, first = ExecutionGaps(runs, (np.array([0, 50]), np.array([50, 200])), DISPATCH_DISPATCH_COPY_DISPATCH), 0
        for last in cuts:
            submissions = np.unique(dispatches[first:last]["submission"])
            gaps.add(dispatches[first:last], runs[np.isin(runs["submission"], submissions)])
            first = last
        assert gaps.transfer_by_window().tolist() == [10, 20 + 10], cuts
        assert gaps.transfers().tolist() == [30, 10], cuts


def test_a_copy_gap_where_another_execution_ran_is_transfer_only_up_to_its_gap():
    """A [0, 100) copies after its one dispatch [0, 40): its copy gap is [40, 100); B [50, 120), which copies
    nothing, runs a dispatch [60, 80) in time A owns: A's time with no dispatch running is 40, and so its
    transfer (min of its copy gaps and its gap)."""
    from sectionmark.profiling.device_transfers import ExecutionGaps

    recorded = {7: [(0, "dispatch", "k"), (1, "copy", "copy")], 8: [(0, "dispatch", "k")]}
    runs = executions((1, 7, 0, 100), (2, 8, 50, 120))
    gaps = ExecutionGaps(runs, (np.array([0]), np.array([120])), recorded)
    gaps.add(indexed_dispatches((1, 0, 0, 40), (2, 0, 60, 80)), runs)
    assert gaps.gaps().tolist() == [40, 20] and gaps.transfers().tolist() == [40, 0]


def test_a_wait_goes_to_the_section_the_device_waits_to_run():
    from sectionmark.profiling.device_waits import section_waits, waiting_stretches
    from sectionmark.section_map import Command, CommandBuffer, Share

    # Call 0 = [0, 100): device 0 runs [0, 40) and [90, 100); device 1 runs [40, 80) then [85, 95).
    # Device 0 waits [40, 80) (device 1 ran), then idles [80, 85) (nobody ran), waits [85, 90) again: 45 ns, all
    # before its execution at 90. Device 1 waits [0, 40) for its execution at 40, and [95, 100) with nothing after.
    device_0 = spans((EXECUTE, 0, 40, 0), (EXECUTE, 90, 100, 0))
    device_1 = spans((EXECUTE, 40, 80, 0), (EXECUTE, 85, 95, 0))
    windows = (np.array([0]), np.array([100]))
    first, second = waiting_stretches([device_0, device_1], windows)
    assert (first[0].tolist(), first[1].tolist()) == ([40, 85], [80, 90])
    assert (second[0].tolist(), second[1].tolist()) == ([0, 95], [40, 100])
    fused = CommandBuffer(0, "main", [Command("barrier"), Command("dispatch", "k", site=0, shares=[
        Share(("A",), 0.75), Share(("B",), 0.25)])])
    copying = CommandBuffer(1, "main", [Command("barrier"), Command("copy", "copy", shares=[Share(("C",), 1.0)]),
                                        Command("dispatch", "k", site=1, shares=[Share(("A",), 1.0)])])
    zero = section_waits(first, np.array([0, 90]), np.array([0, 0]), np.array([7, 7]), {7: fused})
    assert zero.waiting_ns == {("A",): 33.75, ("B",): 11.25} and zero.split == {("A",), ("B",)}
    one = section_waits(second, np.array([40, 85]), np.array([0, 0]), np.array([3, 3]), {3: copying})
    assert one.waiting_ns == {("C",): 40.0, (): 5.0} and not one.split
    # A wait before the next call's execution waits for nothing of this call.
    later = section_waits(second, np.array([40, 120]), np.array([0, 1]), np.array([3, 3]), {3: copying})
    assert later.waiting_ns == {("C",): 40.0, (): 5.0}


@pytest.mark.parametrize("seed", range(4))
def test_covered_length_in_parts_is_the_partition_of_the_blocks(seed):
    """The blocks' time inside each execution part (`ExecutionGaps`), from their lengths before each edge, is the
    swept partition's: blocks across parts, inside one, touching an edge, or between parts."""
    from sectionmark.profiling.device_transfers import covered_length
    from sectionmark.profiling.queue_time import partition_time

    rng = np.random.default_rng(seed)
    edges = np.cumsum(rng.integers(0, 20, 400))  # blocks and parts: disjoint, in order (some empty)
    block_starts, block_ends = edges[0::2], edges[1::2]
    cuts = np.sort(rng.choice(np.arange(int(edges[-1]) + 30), 120, replace=False))
    part_starts, part_ends = cuts[0::2], cuts[1::2]
    before_ends, before_starts = (covered_length(block_starts, block_ends, times) for times in (part_ends, part_starts))
    covered = before_ends - before_starts
    swept = partition_time(block_starts, block_ends, np.zeros(len(block_starts), np.int64), 1, part_starts, part_ends)
    assert covered.tolist() == swept[:, 0].tolist()
