"""Several Vulkan devices in one process (Mesa's lavapipe where there is no GPU): compiled, profiled, read per device.

Skipped, with one line, where IREE sees no Vulkan device (the ``vulkan_device`` fixture). `TWO_DEVICES` (a matmul
split over two devices, its operands moved to device 1 and its half product back) compiled with
``sm.compile(target="vulkan-spirv", devices=2)`` and profiled once with ``sm.profile(devices=["vulkan", "vulkan"])``
under iree-benchmark-module: each device's busy time per section equals the sum of that device's own
device-timed dispatch events in ``iree-profile export`` (`device_timed_oracle`, to the ns), coverage is exact on
each device, every section is on the device that ran it, and each device's time split says what Vulkan's events
cannot tell apart (``untimed``) instead of guessing it. Numerics: iree-run-module on the two devices against
numpy (IREE 3.13's Python runtime cannot group two Vulkan devices: `sm.load` says so in one line).

The reads are also checked, with no Vulkan device, on such a run recorded on lavapipe (`RECORDED`: the kept
.ireeprof of the fixture's run and its section map), against iree-profile's export of it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from invariants import FLOAT_RELATIVE, assert_device_time_adds_up, assert_profile_invariants
from tiny_profiles import TWO_DEVICES, device_timed_oracle, export_rows

import sectionmark as sm
from sectionmark.artifacts.tools import find_tool
from sectionmark.cli import main
from sectionmark.errors import SectionmarkError
from sectionmark.readers.bundle_records import RECORD_HEADER_DTYPE
from sectionmark.section_map import SectionMap
from sectionmark.workflows.measure import report

pytest.importorskip("iree.compiler")

DEVICES = ["vulkan", "vulkan"]
ITERATIONS, WARMUP = 3, 1
# `two_vulkan`'s kept profile and map (Mesa 22.3.6 lavapipe, iree-base-runtime 3.13.0, 2026-11-28).
RECORDED = Path(__file__).parent / "lavapipe-two-devices"


@pytest.fixture(scope="module")
def two_vulkan(vulkan_device, tmp_path_factory):
    """TWO_DEVICES compiled for two Vulkan devices and profiled on them once: the run, its kept .ireeprof,
    iree-profile's rows of it, the saved module and its inputs."""
    folder = tmp_path_factory.mktemp("vulkan-devices")
    compiled = sm.compile(TWO_DEVICES, target="vulkan-spirv", devices=2, quiet=True)
    module = compiled.save(folder / "two.vmfb")
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((64, 128), np.float32), rng.standard_normal((128, 64), np.float32)]
    inputs = [folder / "a.npy", folder / "b.npy"]
    for path, array in zip(inputs, args):
        np.save(path, array)
    kept = folder / "two.ireeprof"
    run = sm.profile(compiled, args, devices=DEVICES, iterations=ITERATIONS, warmup=WARMUP, keep_profile=kept,
                     quiet=True)
    rows = export_rows(kept)
    assert rows is not None, "iree-profile could not read the profile of two Vulkan devices"
    return SimpleNamespace(compiled=compiled, module=module, args=args, inputs=inputs, kept=kept, run=run,
                           rows=rows, folder=folder)


@pytest.fixture(scope="module", params=["recorded", "live"])
def vulkan_profile(request):
    """A profile of two Vulkan devices read per device: the one recorded on lavapipe (`RECORDED`, read by
    `report`: no Vulkan device needed), and the live run's (`two_vulkan`)."""
    if request.param == "live":
        live = request.getfixturevalue("two_vulkan")
        return SimpleNamespace(run=live.run, rows=live.rows, section_map=live.compiled.section_map, kept=live.kept)
    section_map = SectionMap.load(RECORDED / "two.sections.json")
    rows = export_rows(RECORDED / "two.ireeprof")
    assert rows is not None
    return SimpleNamespace(run=report(RECORDED / "two.ireeprof", section_map, warmup=WARMUP), rows=rows,
                           section_map=section_map, kept=RECORDED / "two.ireeprof")


def test_each_device_busy_per_section_equals_its_own_dispatch_events(vulkan_profile):
    run, rows, section_map = vulkan_profile.run, vulkan_profile.rows, vulkan_profile.section_map
    assert {r["physical_device_ordinal"] for r in rows if r["record_type"] == "dispatch_event"} == {0, 1}
    assert not [r for r in rows if r["record_type"] == "host_execution_event"]  # Vulkan times on the device only
    assert [device.ordinal for device in run.devices] == [0, 1]
    for device in run.devices:
        session = device.session
        assert_profile_invariants(session)
        assert session.coverage_error <= FLOAT_RELATIVE, device.ordinal
        calls, oracle = device_timed_oracle(rows, section_map, WARMUP, device.ordinal, ITERATIONS + WARMUP)
        assert calls == session.calls == ITERATIONS
        exclusive = {row.path: row.exclusive_ns for row in session.sections}
        assert {path for path, ns in exclusive.items() if ns} == {path for path, ns in oracle.items() if ns}
        for path, ns in oracle.items():
            assert abs(exclusive[path] - ns) < 1, (device.ordinal, path)  # to the ns
        assert session.total_ns == round(sum(oracle.values()))


def test_every_section_is_on_the_device_that_ran_it(vulkan_profile):
    placed_on: dict[tuple, set[int]] = {}
    for buffer in vulkan_profile.section_map.command_buffers:
        for command in buffer.commands:
            for share in command.shares if command.op == "dispatch" else []:
                placed_on.setdefault(share.path, set()).add(buffer.device)
    assert placed_on[("Half 1",)] >= {1} and placed_on[("Half 0",)] == {0}
    across = {row.path: row for row in vulkan_profile.run.sections}
    for path, devices in placed_on.items():
        assert set(across[path].ran_on) == devices, path
        for ordinal in devices:
            row = next(row for row in vulkan_profile.run.device(ordinal).sections if row.path == path)
            assert row.dispatches > 0 and row.busy_ns > 0, (ordinal, path)


def test_each_device_time_says_what_vulkan_events_cannot_tell_apart(vulkan_profile):
    """Compute is the device's dispatches; transfer and gaps its time between them inside its executions; its
    queue, waiting and idle time Vulkan's events do not time (queue events are instants, executions known from
    their dispatches only): ``untimed``, not guessed. Every part of every call adds up to its window."""
    run = vulkan_profile.run
    assert_device_time_adds_up(run, ITERATIONS)
    for device in run.devices:
        time = device.time
        assert time.compute_ns > 0 and time.queue_ns == time.waiting_ns == time.idle_ns == 0 and time.untimed_ns > 0
        assert device.waits is None  # waiting is not known, so neither is it by section
    text = run.table()
    assert "+ idle + untimed" in text and "untimed: a device whose profile times only" in text
    assert "Waiting dev" not in text and "the section it waited to run" not in text
    document = json.loads(run.render("json"))
    assert document["version"] == 5
    assert [device["time"]["untimed_ns"] for device in document["devices"]] == [d.time.untimed_ns for d in run.devices]
    assert "data-part=\"untimed\"" in run.render("html")


def test_the_numerics_equal_numpys(two_vulkan):
    a, b = two_vulkan.args
    out = two_vulkan.folder / "out.npy"
    subprocess.run([str(find_tool("iree-run-module")), f"--module={two_vulkan.module}", "--function=main",
                    *(f"--device={device}" for device in DEVICES), *(f"--input=@{path}" for path in two_vulkan.inputs),
                    f"--output=@{out}"], check=True, capture_output=True, timeout=120)
    np.testing.assert_allclose(np.load(out), a @ b, rtol=1e-4, atol=1e-4)
    with pytest.raises(SectionmarkError, match="opens each Vulkan device in a group of its own"):
        sm.load(two_vulkan.compiled, devices=DEVICES)


def test_report_of_the_kept_profile_and_of_its_export(two_vulkan, tmp_path):
    """`sectionmark report` of the kept .ireeprof, and of iree-profile's ireeperf-jsonl export, read each device
    as the run did."""
    export = tmp_path / "two.jsonl"
    subprocess.run([str(find_tool("iree-profile")), "export", "--format=ireeperf-jsonl", f"--output={export}",
                    str(two_vulkan.kept)], check=True, capture_output=True, timeout=60)
    expected = [[row.busy_ns for row in device.session.sections] for device in two_vulkan.run.devices]
    for source in (two_vulkan.kept, export):
        again = report(source, two_vulkan.module, warmup=WARMUP)
        assert [[row.busy_ns for row in device.session.sections] for device in again.devices] == expected, source
        assert [device.time.per_call for device in again.devices] == [d.time.per_call for d in two_vulkan.run.devices]
    out = tmp_path / "again.json"
    assert main(["report", str(two_vulkan.kept), "--map", str(two_vulkan.module), "--warmup", str(WARMUP),
                 "--json", str(out)]) == 0
    assert len(json.loads(out.read_text())["devices"]) == 2


def test_a_dispatch_chunk_that_names_no_device_is_one_error_line(tmp_path):
    """A device-timed dispatch chunk's records have no device field: its header names the device. One that says
    IREE's "any" cannot be given to a device: refused, never written to every device's file."""
    blob = bytearray((RECORDED / "two.ireeprof").read_bytes())
    offset = int.from_bytes(blob[8:12], "little")  # the file header's length
    chunk_type = b"application/vnd.iree.hal.profile.dispatch-events"
    while offset < len(blob):
        header = np.frombuffer(bytes(blob[offset:offset + RECORD_HEADER_DTYPE.itemsize]), RECORD_HEADER_DTYPE)[0]
        start = offset + int(header["header_size"])
        if bytes(blob[start:start + int(header["type_length"])]) == chunk_type:
            device_at = offset + RECORD_HEADER_DTYPE.fields["device"][1]
            blob[device_at:device_at + 4] = (0xFFFFFFFF).to_bytes(4, "little")
            break
        offset += int(header["record_length"])
    else:
        pytest.fail("no dispatch-events chunk in the profile")
    edited = tmp_path / "any.ireeprof"
    edited.write_bytes(bytes(blob))
    with pytest.raises(SectionmarkError, match="a dispatch-events chunk names no device"):
        report(edited, RECORDED / "two.sections.json")


def test_profile_two_vulkan_devices_from_the_shell(two_vulkan, tmp_path, capsys):
    out = tmp_path / "run.json"
    inputs = [arg for path in two_vulkan.inputs for arg in ("--input", str(path))]
    assert main(["profile", str(two_vulkan.module), *inputs, "--device", "vulkan", "--device", "vulkan", "-n", "2",
                 "--warmup", "1", "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    assert [device["device"] for device in document["devices"]] == DEVICES
    assert all(device["profile"]["coverage_error"] <= FLOAT_RELATIVE for device in document["devices"])
    assert "untimed" in capsys.readouterr().out
