"""A CUDA run of a module compiled for two devices, read per device from its Tracy capture (issue M item 5).

Recorded on an NVIDIA H200 (tests/readers/h200-two-devices/probe.log: scripts/gpu_devices/probe.sh): the tensor-parallel
and pipeline-parallel GPTs of tests/helpers/parallel_gpt.py compiled for two CUDA devices
(``sm.compile(..., target="cuda", devices=2)``, their maps beside the captures), run with ``--device=cuda
--device=cuda`` (two HAL devices on the one GPU) by the tracing iree-benchmark-module under iree-tracy-capture, 23
calls: what ``sectionmark profile --device cuda --device cuda`` runs. Their logits equalled eager torch's (7e-7).

Each device's figures are checked against Tracy's own reader (csvexport -g: every GPU zone's name, start and
duration), each zone's device being the GPU context it is in: per device, the sections' busy time plus
unmarked equals the sum of that device's dispatch zones, to the ns; every section is on the device that ran it.
Each device's time split (compute / transfer / gaps / queue / waiting / idle in each call's window) is checked
against the capture's own zones: each execution is its command-buffer zone (GPU-timed), the copies between devices
are its time with no dispatch zone running where its buffer records a copy, the rest launch gaps.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from invariants import FLOAT_RELATIVE
from shared_tools import csvexport, shared_tool

import sectionmark as sm
from sectionmark.profiling.devices import DEVICE_TIME_PARTS
from sectionmark.errors import SectionmarkError
from sectionmark.readers.sources import read_events
from sectionmark.readers.tracy_capture import read_capture
from sectionmark.readers.tracy_devices import capture_device_profiles
from sectionmark.section_map import SectionMap

DATA = Path(__file__).parent / "h200-two-devices"
CALLS, WARMUP = 23, 3
MODULES = ("tp", "pp")


def capture_and_map(name: str):
    return DATA / f"{name}.tracy", SectionMap.load(DATA / f"{name}.sections.json")


def dispatch_keys(section_map) -> set[str]:
    return {command.key for buffer in section_map.command_buffers for command in buffer.commands
            if command.op == "dispatch"}


@pytest.mark.parametrize("name", MODULES)
def test_each_device_busy_equals_its_own_dispatch_zones(name):
    path, section_map = capture_and_map(name)
    if shared_tool("tracy-csvexport-0.11.2") is None:
        pytest.skip("Tracy's csvexport is not in ../shared/tools")
    run = sm.report(path, section_map, warmup=0, calls=CALLS)
    keys = dispatch_keys(section_map)
    # Tracy's own reader: every GPU zone's name, start and duration; the device of a zone is its GPU context.
    context_of = {(zone.name, zone.start_ns): index for index, context in enumerate(read_capture(path).gpu_contexts)
                  for zone in context.zones}
    zones = [(row[0], int(row[2]), int(row[3])) for row in csvexport(path, "-g") if row[0] in keys]
    assert len(zones) == sum(1 for key in context_of if key[0] in keys)  # every dispatch zone, each in one context
    per_device = Counter()
    for zone_name, start, duration in zones:
        per_device[context_of[(zone_name, start)]] += duration
    assert [device.ordinal for device in run.devices] == [0, 1]
    for device in run.devices:
        session = device.session
        assert session.calls == CALLS and session.coverage_error <= FLOAT_RELATIVE, device.ordinal
        busy = sum(row.exclusive_ns for row in session.sections)  # every call's, "(unmarked)" the last row
        assert abs(busy - per_device[device.ordinal]) < 1, (device.ordinal, busy, per_device[device.ordinal])


@pytest.mark.parametrize("name", MODULES)
def test_every_section_is_on_the_device_that_ran_it(name):
    path, section_map = capture_and_map(name)
    run = sm.report(path, section_map, warmup=WARMUP, calls=CALLS)
    placed_on: dict[tuple, set[int]] = {}
    for buffer in section_map.command_buffers:
        for command in buffer.commands:
            for share in command.shares if command.op == "dispatch" else []:
                placed_on.setdefault(tuple(share.path), set()).add(buffer.device)
    for path_, devices in placed_on.items():
        for ordinal in devices:
            row = next(row for row in run.devices[ordinal].session.sections if row.path == path_)
            assert row.dispatches > 0 and row.busy_ns > 0, (ordinal, path_)
        for ordinal in {0, 1} - devices:
            rows = [row for row in run.devices[ordinal].session.sections if row.path == path_]
            assert not rows or rows[0].exclusive_ns == 0, (ordinal, path_)
    if name == "pp":  # the pipeline's stages: blocks 0-1 on device 0, blocks 2-3 on device 1
        assert placed_on[("Block 0", "MLP")] == {0} and placed_on[("Block 3", "MLP")] == {1}


def test_the_contexts_must_number_the_devices():
    path, section_map = capture_and_map("pp")
    capture = read_capture(path)
    with pytest.raises(SectionmarkError, match=r"1 GPU context\(s\) with zones for a module compiled for 2 devices"):
        capture_device_profiles(replace(capture, gpu_contexts=capture.gpu_contexts[:1]), section_map)
    swapped = replace(capture, gpu_contexts=capture.gpu_contexts[::-1])  # device 1's zones are not device 0's buffers
    with pytest.raises(SectionmarkError, match=r"^device 0 \(GPU context 1, 'cuda'\): "):
        capture_device_profiles(swapped, section_map)


def test_a_reader_of_one_device_refuses_the_capture_of_two():
    path, section_map = capture_and_map("tp")
    with pytest.raises(SectionmarkError, match="the profile records 2 devices"):
        read_events(path, section_map)


def covered(spans: list[tuple[int, int]], start: int, end: int) -> int:
    """The length of the union of ``spans`` inside ``[start, end)``."""
    total, reach = 0, start
    for first, last in sorted(spans):
        first, last = max(first, reach), min(last, end)
        if last > first:
            total, reach = total + last - first, last
    return total


def transfer_places(section_map: SectionMap, ordinal: int) -> dict[tuple[str, ...], set[int]]:
    """Each of device ``ordinal``'s map buffers by its dispatches' keys, in recording order: the places of its
    transfer commands (copy, fill, update) among them, k where one lies between dispatch k - 1 and dispatch k (0:
    before the first; the dispatch count: after the last). Buffers recording the same dispatches must agree."""
    places: dict[tuple[str, ...], set[int]] = {}
    for buffer in section_map.command_buffers:
        if buffer.device != ordinal:
            continue
        keys, found = [], set()
        for command in buffer.commands:
            if command.op == "dispatch":
                keys.append(command.key)
            elif command.op in ("copy", "fill", "update"):
                found.add(len(keys))
        assert places.setdefault(tuple(keys), found) == found
    return places


def zone_oracle(path: Path, section_map: SectionMap, calls: int, warmup: int) -> list[list[list[int]]]:
    """[device][measured call] -> compute, transfer, gaps, queue, waiting, idle, untimed (0) from the capture's zones
    and the map's recording order alone: each context's command-buffer zones after its first (the initializer's, before
    the calls) are its calls' executions, the same number each call; a call's window runs from its first execution
    on any device to its last one's end. An execution's dispatch zones run one after another (CUDA's one stream):
    its k-th is its buffer's k-th dispatch command, the buffer being the device's one recording those dispatches;
    the time between two of them (before the first, after the last) is transfer where the buffer records a transfer
    command between them, launch and barrier gaps otherwise."""
    executions, dispatches, copy_gaps = [], [], []
    for ordinal, context in enumerate(read_capture(path).gpu_contexts):
        places = transfer_places(section_map, ordinal)
        roots = [index for index, zone in enumerate(context.zones) if zone.parent < 0][1:]
        per_call = len(roots) // calls
        assert per_call * calls == len(roots)
        executions.append([[(context.zones[root].start_ns, context.zones[root].end_ns)
                            for root in roots[call * per_call:(call + 1) * per_call]] for call in range(calls)])
        dispatches.append([(zone.start_ns, zone.end_ns) for zone in context.zones if zone.parent >= 0])
        gaps = []
        for root in roots:
            execution = context.zones[root]
            inside = [zone for zone in context.zones if zone.parent == root]
            assert all(after.start_ns >= before.end_ns for before, after in zip(inside, inside[1:]))
            edges = [execution.start_ns, *(edge for zone in inside for edge in (zone.start_ns, zone.end_ns)),
                     execution.end_ns]
            gaps += [(edges[2 * k], edges[2 * k + 1]) for k in places[tuple(zone.name for zone in inside)]]
        copy_gaps.append(gaps)
    parts = [[] for _ in executions]
    for call in range(warmup, calls):
        spans = [span for device in executions for span in device[call]]
        start, end = min(first for first, _last in spans), max(last for _first, last in spans)
        anyone = covered(spans, start, end)
        for device, own in enumerate(executions):
            busy, compute = covered(own[call], start, end), covered(dispatches[device], start, end)
            transfer = covered(copy_gaps[device], start, end)
            parts[device].append([compute, transfer, busy - compute - transfer, 0, anyone - busy,
                                  end - start - anyone, 0])  # untimed: none (the zones time the executions)
    return parts


@pytest.mark.parametrize("name", MODULES)
def test_each_device_time_adds_up_to_the_window_of_every_call(name):
    """compute + transfer + gaps + queue + waiting + idle = each call's window on each device, exactly, and each part
    is the capture's zones' own (`zone_oracle`); the device that sends its activations to the other has transfer
    time, given to the sections of its copies; the launch gaps between kernels are gaps, no section's."""
    path, section_map = capture_and_map(name)
    run = sm.report(path, section_map, warmup=WARMUP, calls=CALLS)
    per_call = np.array([device.time.per_call for device in run.devices])  # [device, call, part]
    assert per_call.shape == (2, CALLS - WARMUP, len(DEVICE_TIME_PARTS))
    starts, ends = run.call_windows
    assert (per_call.sum(axis=2) == ends - starts).all() and (ends > starts).all()
    assert per_call.tolist() == zone_oracle(path, section_map, CALLS, WARMUP)
    for index, device in enumerate(run.devices):
        time = device.time
        assert sum(getattr(time, f"{part}_ns") for part in DEVICE_TIME_PARTS) == time.window_ns
        assert time.compute_ns == device.session.call_time.dispatch_ns
        assert time.gaps_ns > 0 and time.queue_ns == 0, device.ordinal  # a launch gap between every two kernels
        # Transfer only where the device's buffers record copies (pp's device 1 copies nothing).
        copies = any(transfer_places(section_map, device.ordinal).values())
        assert (time.transfer_ns > 0) == copies, device.ordinal
        transfers = [row.transfer_ns[index] for row in run.sections]
        waits = [row.waiting_ns[index] for row in run.sections]
        assert sum(transfers) == pytest.approx(time.transfer_ns, abs=1e-6 * time.transfer_ns)
        assert sum(waits) == pytest.approx(time.waiting_ns, abs=1e-6 * time.waiting_ns)
    if name == "pp":  # device 0 copies block 1's output to device 1, where block 2 reads it: block 2's transfer
        block_2 = next(row for row in run.sections if row.path == ("Block 2",))
        assert block_2.transfer_ns[0] == pytest.approx(run.devices[0].time.transfer_ns) and block_2.ran_on == [1]
        assert run.devices[1].time.transfer_ns == 0
