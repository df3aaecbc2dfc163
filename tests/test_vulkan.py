"""Vulkan on a real driver (Mesa's lavapipe where there is no GPU): what IREE's profiler records there.

Skipped, with one line, where IREE sees no Vulkan device (the ``vulkan_device``
fixture). The facts docs/gpu.md states about a Vulkan profile are checked here
with IREE's own decoder (``iree-profile export``), on a module compiled by
sectionmark for ``vulkan-spirv`` and run by sectionmark's runner.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from tiny_profiles import TWO_MATMULS, export_rows

import sectionmark as sm
from sectionmark.arguments import host_array
from sectionmark.profiling import runner
from sectionmark.section_map import COMMAND_OPS

CALLS, WARMUP = 3, 1
ARGS = tuple(np.random.default_rng(0).random((2, 64, 64), np.float32))


@pytest.fixture(scope="module")
def vulkan_module():
    return sm.compile(TWO_MATMULS, target="vulkan-spirv")


@pytest.fixture(scope="module")
def vulkan_run(vulkan_device, vulkan_module, tmp_path_factory):
    """TWO_MATMULS compiled for vulkan-spirv and profiled on Vulkan: (section map, iree-profile export rows)."""
    folder = tmp_path_factory.mktemp("vulkan")
    run = runner.run_profile(vulkan_module.save(folder / "m.vmfb"), ARGS, folder, device="vulkan", iterations=CALLS,
                             warmup=WARMUP, quiet=True)
    rows = export_rows(run.profile_path)
    assert rows is not None, "iree-profile could not read the Vulkan profile"
    return vulkan_module.section_map, rows


def test_results_are_read_back_from_the_vulkan_device(vulkan_device, vulkan_module):
    on_vulkan = sm.load(vulkan_module, device="vulkan").main(*ARGS)
    if "llvmpipe" in vulkan_device:  # lavapipe offers host-pointer import: IREE 3.13's to_host() fails there
        with pytest.raises(ValueError, match="minImportedHostPointerAlignment"):
            on_vulkan.to_host()
    on_cpu = sm.load(sm.compile(TWO_MATMULS)).main(*ARGS).to_host()
    np.testing.assert_allclose(host_array(on_vulkan), on_cpu, rtol=1e-5)


def rows_of(rows: list[dict], record_type: str) -> list[dict]:
    return [row for row in rows if row["record_type"] == record_type]


def test_dispatches_are_device_timed_events_of_recorded_commands(vulkan_run):
    section_map, rows = vulkan_run
    assert not rows_of(rows, "host_execution_event")  # Vulkan records no host-execution events
    commands = {(row["command_buffer_id"], row["command_index"]): row for row in rows_of(rows, "command_operation")}
    events = rows_of(rows, "dispatch_event")
    static_dispatches = [c for buffer in section_map.command_buffers for c in buffer.commands if c.op == "dispatch"]
    assert len(events) == (CALLS + WARMUP) * len(static_dispatches)
    for event in events:
        command = commands[event["command_buffer_id"], event["command_index"]]
        assert (command["op"], command["key"]) == ("dispatch", event["key"])
        assert event["valid"] and event["end_tick"] - event["start_tick"] == event["duration_ticks"] > 0
    # Each call executes the one recorded command buffer: its commands, less the debug groups'
    # profile markers, are the section map's, so events join the map as host events do on CPU.
    executes = [row for row in rows_of(rows, "queue_event") if row["op"] == "execute"]
    assert len(executes) == CALLS + WARMUP
    assert Counter(event["submission_id"] for event in events) == Counter(
        {row["submission_id"]: len(static_dispatches) for row in executes})
    recorded = sorted(commands.values(), key=lambda row: row["command_index"])
    assert {row["op"] for row in recorded} - set(COMMAND_OPS) == {"profile_marker"}
    assert [(row["op"], row["key"]) for row in recorded if row["op"] in COMMAND_OPS] == [
        (c.op, c.key) for c in section_map.command_buffers[0].commands]


def test_clock_samples_map_device_ticks_to_host_time(vulkan_run):
    _section_map, rows = vulkan_run
    samples = rows_of(rows, "clock_correlation")
    events = rows_of(rows, "dispatch_event")
    assert len(samples) >= 2
    ticks = [sample["device_tick"] for sample in samples]
    assert ticks == sorted(ticks) and ticks[0] <= min(e["start_tick"] for e in events)
    assert max(e["end_tick"] for e in events) <= ticks[-1]
    for sample in samples:  # each sample brackets its device tick with two host clock reads
        assert sample["host_time_begin_ns"] <= sample["host_time_end_ns"]
    for event in events:  # iree-profile's own fit, from the first and last samples
        assert event["derived_time_available"] and event["derived_time_basis"] == "first_last_clock_correlation"


def test_the_nanogpt_on_vulkan_computes_what_the_cpu_computes(vulkan_device):
    """The default vulkan-spirv target is the portable baseline: right on any device (docs/gpu.md)."""
    from nanogpt_builders import torch_gpt

    model, args = torch_gpt(True)
    exported = sm.torch.export(model, args=args)
    tokens = args[0].numpy()
    on_vulkan = host_array(sm.load(sm.compile(exported, target="vulkan-spirv"), device="vulkan").main(tokens))
    np.testing.assert_allclose(on_vulkan, sm.load(sm.compile(exported)).main(tokens).to_host(), atol=1e-5)
