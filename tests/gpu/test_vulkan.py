"""Vulkan on a real driver (Mesa's lavapipe where there is no GPU): device-timed profiles, exact.

Skipped, with one line, where IREE sees no Vulkan device (the ``vulkan_device``
fixture). A module compiled for ``vulkan-spirv`` is profiled on Vulkan by
sectionmark; the facts docs/gpu.md states about a Vulkan profile, and every
figure of the report, are checked against IREE's own decoder (``iree-profile
export`` of the same file): each section's busy time plus unmarked equals the
sum of iree-profile's per-dispatch device durations, to the ns.
"""

from __future__ import annotations

import json
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
from invariants import assert_profile_invariants
from test_demo import check_chrome_trace
from test_graph import parse_dot
from test_ireeprof_fast import assert_same_profile, read_both
from tiny_profiles import TWO_MATMULS, export_rows

import sectionmark as sm
from sectionmark.arguments import host_array
from sectionmark.cli import main
from sectionmark.errors import SectionmarkError
from sectionmark.profiling.attribute import attribute
from sectionmark.workflows import runner
from sectionmark.workflows.measure import report
from sectionmark.readers.ireeprof import read_profile
from sectionmark.readers.tracy_capture import read_capture
from sectionmark.renderers import json_out
from sectionmark.section_map import COMMAND_OPS

CALLS, WARMUP = 3, 1
ARGS = tuple(np.random.default_rng(0).random((2, 64, 64), np.float32))


@pytest.fixture(scope="module")
def vulkan_module():
    return sm.compile(TWO_MATMULS, target="vulkan-spirv")


@pytest.fixture(scope="module")
def vulkan_run(vulkan_device, vulkan_module, tmp_path_factory):
    """TWO_MATMULS profiled on Vulkan by sm.profile: the session, the kept .ireeprof and iree-profile's rows."""
    folder = tmp_path_factory.mktemp("vulkan")
    module = vulkan_module.save(folder / "m.vmfb")
    kept = folder / "vk.ireeprof"
    session = sm.profile(module, args=ARGS, device="vulkan", iterations=CALLS, warmup=WARMUP, quiet=True,
                         keep_profile=kept)
    rows = export_rows(kept)
    assert rows is not None, "iree-profile could not read the Vulkan profile"
    return SimpleNamespace(session=session, profile=kept, module=module, rows=rows,
                           section_map=vulkan_module.section_map)


def rows_of(rows: list[dict], record_type: str) -> list[dict]:
    return [row for row in rows if row["record_type"] == record_type]


def device_time_of_measured_calls(rows: list[dict], warmup: int) -> int:
    """The oracle: iree-profile's per-dispatch device durations summed over the measured calls (one command
    buffer execution per call, the first ``warmup`` dropped)."""
    executes = sorted(row["submission_id"] for row in rows_of(rows, "queue_event") if row["op"] == "execute")
    measured = set(executes[warmup:])
    return sum(event["duration_ns"] for event in rows_of(rows, "dispatch_event") if event["submission_id"] in measured)


def test_dispatches_are_device_timed_events_of_recorded_commands(vulkan_run):
    rows, section_map = vulkan_run.rows, vulkan_run.section_map
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


def test_clock_samples_cover_the_dispatches(vulkan_run):
    samples, events = rows_of(vulkan_run.rows, "clock_correlation"), rows_of(vulkan_run.rows, "dispatch_event")
    assert len(samples) >= 2
    ticks = [sample["device_tick"] for sample in samples]
    assert ticks == sorted(ticks) and ticks[0] <= min(e["start_tick"] for e in events)
    assert max(e["end_tick"] for e in events) <= ticks[-1]
    for event in events:  # iree-profile's own fit, from the first and last samples
        assert event["derived_time_available"] and event["derived_time_basis"] == "first_last_clock_correlation"


def test_section_busy_time_is_iree_profiles_device_time_to_the_ns(vulkan_run):
    session, rows = vulkan_run.session, vulkan_run.rows
    assert_profile_invariants(session)
    assert session.coverage_error < 1e-12 and session.calls == CALLS and session.device == "vulkan"  # float sums
    oracle = device_time_of_measured_calls(rows, WARMUP)
    top_level = [row for row in session.sections if len(row.path) == 1] + [session.unmarked]
    assert session.total_ns == oracle
    assert abs(sum(row.busy_ns for row in top_level) - oracle) < 0.5  # fused dispatches' shares are floats
    for path in vulkan_run.section_map.sections:  # every section present, with a row per call
        row = session.section(path)
        assert row.dispatched and row.calls == CALLS and len(row.samples) == CALLS and row.per_call.min_ns > 0, path
    assert session.cpu_ns is None  # a GPU records no tiles: CPU time is "not recorded", never 0


def test_dispatch_times_lie_on_the_host_clock_of_the_queue_events(vulkan_run):
    """Mapped through the clock samples, each call's dispatches start after its command buffer was submitted."""
    rows, attribution = vulkan_run.rows, vulkan_run.session.events()
    submitted = {row["submission_id"]: row["host_time_ns"] for row in rows_of(rows, "queue_event")
                 if row["op"] == "execute"}
    uncertainty = max(s["host_time_end_ns"] - s["host_time_begin_ns"] for s in rows_of(rows, "clock_correlation"))
    for event in attribution.events:
        assert event["start_ns"] >= submitted[int(event["submission"])] - uncertainty
    call_time = vulkan_run.session.call_time
    assert call_time.call_ns == call_time.dispatch_ns + call_time.command_buffer_gap_ns > 0


def test_c_numpy_and_jsonl_read_a_vulkan_profile_alike(vulkan_run, monkeypatch):
    with_c, without = read_both(vulkan_run.profile, monkeypatch)
    assert_same_profile(with_c, without)
    from_export = read_profile(vulkan_run.profile, reader="jsonl")
    for name in ("dispatches", "submissions", "keys", "command_buffers"):
        a, b = getattr(with_c, name), getattr(from_export, name)
        assert (a.tobytes() == b.tobytes()) if isinstance(a, np.ndarray) else a == b, name
    assert with_c.provenance.device_timed and from_export.provenance.device_timed


def test_every_output_of_a_vulkan_profile(vulkan_run, tmp_path):
    session = vulkan_run.session
    document = json.loads(session.render("json"))
    assert document["device"] == "vulkan" and document["cpu_ns"] is None
    assert_profile_invariants(json_out.load(session.save(tmp_path / "s.json")))
    assert len(session.render("csv").splitlines()) == len(session.sections) + 1
    slices = check_chrome_trace(json.loads(session.render("perfetto")))
    assert {"Attn", "MLP"} <= {event["name"] for events in slices.values() for event in events}
    for name in ("table", "components", "kernels"):
        assert session.render(name)
    parse_dot(session.render("graph"))
    capture = read_capture(session.save(tmp_path / "vk.tracy"))
    dispatch_keys = {command.key for command in vulkan_run.section_map.command_buffers[0].commands
                     if command.op == "dispatch"}
    zones = [zone for track in capture.gpu_contexts for zone in track.zones]
    assert {"Attn", "MLP"} <= {zone.name for zone in zones} and dispatch_keys <= {zone.name for zone in zones}
    again = report(tmp_path / "vk.tracy", vulkan_run.section_map, warmup=0, calls=CALLS)
    assert {row.path: row.busy_ns for row in again.sections} == {row.path: row.busy_ns for row in session.sections}


def test_report_of_the_kept_profile_from_the_command_line(vulkan_run, tmp_path, capsys):
    out = tmp_path / "again.json"
    assert main(["report", str(vulkan_run.profile), "--map", str(vulkan_run.module), "--warmup", str(WARMUP),
                 "--json", str(out)]) == 0
    assert "error 0.0000%" in capsys.readouterr().out
    again = json_out.load(out)
    assert again.total_ns == vulkan_run.session.total_ns
    assert [row.busy_ns for row in again.sections] == pytest.approx([row.busy_ns for row in vulkan_run.session.sections],
                                                                     abs=0.5)


def test_results_are_read_back_from_the_vulkan_device(vulkan_device, vulkan_module):
    """`sm.load(..., device="vulkan").main(x)`'s result reads as any array: `to_host()`, numpy, arithmetic, and it
    goes into the next call. IREE's own module fails on lavapipe (it offers host-pointer import, and IREE 3.13
    imports an unaligned numpy array: "minImportedHostPointerAlignment 4096"); sectionmark's copies through a
    staging buffer there."""
    import iree.runtime

    if "llvmpipe" in vulkan_device:
        with pytest.raises(ValueError, match="minImportedHostPointerAlignment"):
            iree.runtime.load_vm_flatbuffer(vulkan_module.vmfb, driver="vulkan").main(*ARGS).to_host()
    module = sm.load(vulkan_module, device="vulkan")
    on_vulkan = module.main(*ARGS)
    on_cpu = sm.load(sm.compile(TWO_MATMULS)).main(*ARGS).to_host()
    for values in (on_vulkan.to_host(), np.asarray(on_vulkan), on_vulkan + 0, host_array(on_vulkan)):
        np.testing.assert_allclose(values, on_cpu, rtol=1e-5)
    again = module.main(on_vulkan, ARGS[1])  # a result stays on the device into the next call
    np.testing.assert_allclose(again.to_host(), sm.load(sm.compile(TWO_MATMULS)).main(on_cpu, ARGS[1]).to_host(),
                               rtol=1e-4)


@pytest.fixture(scope="module")
def vulkan_recording(vulkan_device):
    """test_record's prefill + decode program, compiled for vulkan-spirv, run and recorded on Vulkan."""
    pytest.importorskip("transformers")
    import torch
    from test_record import DECODE_STEPS, PROMPT, kv_program, tokens
    from hf_models import BlendedCacheLayer, empty_cache

    model, exported = kv_program(BlendedCacheLayer, "eager", torch.int32)  # what SPIR-V compiles (kv_program)
    module = sm.load(sm.compile(exported, target="vulkan-spirv"), device="vulkan")
    with sm.record(module) as recording:
        keys, values = (cache.numpy() for cache in empty_cache(model))
        logits, keys, values = module.prefill(tokens(PROMPT).numpy(), np.arange(PROMPT, dtype=np.int32), keys, values)
        for position in range(PROMPT, PROMPT + DECODE_STEPS):
            token = int(np.argmax(host_array(logits)[0, -1]))
            logits, keys, values = module.decode(np.array([[token]]), np.array([position], np.int32), keys, values)
    return recording, host_array(logits)


def test_a_recorded_prefill_and_decode_replays_on_vulkan(vulkan_recording):
    from test_record import DECODE_STEPS

    recording, final_logits = vulkan_recording
    np.testing.assert_array_equal(recording.replay()[0], final_logits)
    replay = recording.profile(iterations=2, warmup=1, quiet=True, device="vulkan")  # the recorded one too
    assert [(entry.function, entry.calls_per_replay) for entry in replay.functions] == [("prefill", 1),
                                                                                        ("decode", DECODE_STEPS)]
    for entry in replay.functions:
        assert_profile_invariants(entry.profile)
        assert entry.profile.coverage_error < 1e-9 and entry.profile.device == "vulkan"
    table = replay.table()
    assert "prefill: 1 call per replay, 2 measured replays" in table and f"decode: {DECODE_STEPS} calls" in table


def test_a_saved_vulkan_recording_profiles_from_the_command_line(vulkan_recording, tmp_path, capsys):
    from test_record import DECODE_STEPS

    directory = vulkan_recording[0].save(tmp_path / "recording")
    assert main(["profile", str(directory), "--device", "vulkan", "-n", "1", "--warmup", "0"]) == 0
    assert f"decode: {DECODE_STEPS} calls per replay, 1 measured replay" in capsys.readouterr().out


def test_slice_bench_on_vulkan(vulkan_device, tmp_path, capsys):
    from nanogpt_builders import torch_gpt

    model, args = torch_gpt(True)
    mlir = sm.torch.export(model, args=args).save_mlir(tmp_path / "model.mlir")
    np.save(tmp_path / "tokens.npy", args[0].numpy())
    assert main(["slice", str(mlir), "--section", "Block 0/MLP", "-o", str(tmp_path / "mlp.mlir"), "--bench",
                 "--input", str(tmp_path / "tokens.npy"), "--device", "vulkan", "-n", "2"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert "section Block 0 / MLP" in printed
    in_context, isolated = next(line for line in printed if line.startswith("time per call")).split()[-2:]
    assert float(in_context) > 0 and float(isolated) > 0
    difference = next(line for line in printed if line.startswith("slice outputs vs whole model"))
    assert float(difference.rpartition(": ")[2]) < 1e-4  # the slice on Vulkan computes what the model did


def test_the_nanogpt_on_vulkan_computes_what_the_cpu_computes(vulkan_device):
    """The default vulkan-spirv target is the portable baseline: right on any device (docs/gpu.md)."""
    from nanogpt_builders import torch_gpt

    model, args = torch_gpt(True)
    exported = sm.torch.export(model, args=args)
    tokens = args[0].numpy()
    on_vulkan = host_array(sm.load(sm.compile(exported, target="vulkan-spirv"), device="vulkan").main(tokens))
    np.testing.assert_allclose(on_vulkan, sm.load(sm.compile(exported)).main(tokens).to_host(), atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_the_nanogpt_demo_on_vulkan_is_iree_profiles_device_time(vulkan_device, framework, tmp_path):
    """The acceptance run of docs/gpu.md: the demo with --device vulkan against iree-profile's own durations."""
    import subprocess
    import sys

    from sectionmark.section_map import SectionMap

    out, warmup = tmp_path / "out", 2
    result = subprocess.run([sys.executable, "-m", "sectionmark", "demo", "--device", "vulkan", "--framework", framework,
                             "--out", str(out), "-n", "4", "--warmup", str(warmup)],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-2000:]
    session = json_out.load(out / "sections.json")
    assert_profile_invariants(session)
    assert session.device == "vulkan" and session.coverage_error < 1e-12 and session.calls == 4
    oracle = device_time_of_measured_calls(export_rows(out / "run.ireeprof"), warmup)
    assert session.total_ns == oracle
    top_level = [row for row in session.sections if len(row.path) <= 1]  # and (unmarked)
    assert abs(sum(row.busy_ns for row in top_level) - oracle) <= 0.5 * len(top_level)  # each rounded in the JSON
    for path in SectionMap.load(out / "model.sections.json").sections:
        row = session.section(path)
        assert row.dispatched and len(row.samples) == session.calls, path


def edit_dispatch_event(field: str, value, index: int = 0):
    """An edit of one field of the ``index``-th device-timed dispatch event; ``value(blob, base)`` -> the new value."""
    import bundle_layout as layout

    def edit(blob: bytes) -> bytes:
        edited = bytearray(blob)
        base = layout.fixed_records(blob, "dispatch-events")[index]
        at, size = layout.DISPATCH_EVENT[1][field]
        layout.write(edited, base + at, size, value(blob, base))
        return bytes(edited)

    return edit


def without_clock_samples(blob: bytes) -> bytes:
    """Every clock sample's flags cleared: no sample says what it holds."""
    import bundle_layout as layout

    edited = bytearray(blob)
    for base in layout.fixed_records(blob, "clock-correlations"):
        layout.write(edited, base + layout.CLOCK_CORRELATION[1]["flags"][0], 4, 0)
    return bytes(edited)


def field(name: str):
    """``value`` for edit_dispatch_event: the event's own ``name`` field."""
    import bundle_layout as layout

    return lambda blob, base: layout.read(blob, base + layout.DISPATCH_EVENT[1][name][0], layout.DISPATCH_EVENT[1][name][1])


VULKAN_CASES = {
    "outside a command buffer": (edit_dispatch_event("flags", lambda b, o: 0), "was not recorded in a command buffer"),
    "ends before it starts": (edit_dispatch_event("end_tick", lambda b, o: field("start_tick")(b, o) - 1),
                              "has no valid device ticks"),
    "no start tick": (edit_dispatch_event("start_tick", lambda b, o: 0), "has no valid device ticks"),
    "event recorded twice": (edit_dispatch_event("event_id", lambda b, o: field("event_id")(b, o) - 1, index=1),
                             "a dispatch event (0, 1) is recorded twice"),
    "unknown function": (edit_dispatch_event("export_ordinal", lambda b, o: 99), "unknown executable function"),
    "other record length": (edit_dispatch_event("record_length", lambda b, o: 96), "unsupported profile layout"),
    "no usable clock samples": (without_clock_samples, "not two clock samples to time them"),
    "moved onto the other dispatch's command": (  # TWO_MATMULS: dispatches at commands 2 and 6 (debug groups)
        edit_dispatch_event("command_index", lambda b, o: field("command_index")(b, o) + 4),
        "a dispatch of (submission, command index)"),
}


@pytest.mark.parametrize("case", sorted(VULKAN_CASES))
def test_corrupt_vulkan_profiles_are_one_line_alike_in_c_and_numpy(vulkan_run, tmp_path, monkeypatch, case):
    edit, message = VULKAN_CASES[case]
    path = tmp_path / "bad.ireeprof"
    path.write_bytes(edit(vulkan_run.profile.read_bytes()))
    with pytest.raises(SectionmarkError) as error:  # the bundle reader's own line (no fallback to the export)
        attribute(read_profile(path, reader="bundle"), vulkan_run.section_map, warmup=WARMUP)
    assert message in str(error.value) and "\n" not in str(error.value)
    with_c, without = read_both(path, monkeypatch)
    if isinstance(with_c, str):
        assert with_c == without
    else:
        assert_same_profile(with_c, without)
