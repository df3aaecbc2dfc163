"""Record a program on two devices: prefill + decode of a tensor-parallel GPT with its KV cache on both devices.

The model (tests/helpers/parallel_gpt.py `cached_parallel_gpt`): each device's attention heads keep their own keys
and values, written at the call's positions and returned, so the program passes them back on the device that
wrote them. It is loaded with ``sm.load(compiled, devices=[...])``, recorded, replayed under iree-benchmark-module
with one ``--device`` per device, and profiled per function and per device: each function's busy time per section
on each device equals the sum of its own dispatches' ``host_execution_event`` durations (`section_oracle` per
device and function), coverage is exact on each device, every section is on the device that ran it, and the
replay computes what the program computed, bit for bit.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from invariants import FLOAT_RELATIVE, assert_profile_invariants
from parallel_gpt import KV_CONFIG, KV_PROMPT, cached_parallel_gpt, empty_kv_cache, export_cached_parallel_gpt
from tiny_profiles import export_rows, section_oracle
from two_devices import RUNTIME_DEVICES

import sectionmark as sm
from sectionmark.compiler.targets import target_flags
from sectionmark.cli import main
from sectionmark.errors import SectionmarkError
from sectionmark.profiling.devices import DEVICE_TIME_PARTS
from sectionmark.workflows.record import Recording
from sectionmark.workflows.replay_devices import DeviceReplayProfile
from sectionmark.workflows.replay_module import ResultArgument

DECODE_STEPS = 3
ITERATIONS, WARMUP = 2, 1  # replays
RTOL, ATOL = 1e-4, 1e-5  # compiled float32 against eager torch


@pytest.fixture(scope="module")
def program():
    model = cached_parallel_gpt()
    prompt = torch.randint(0, KV_CONFIG.vocab_size, (1, KV_PROMPT), generator=torch.Generator().manual_seed(2))
    exported = export_cached_parallel_gpt(model, prompt)
    return SimpleNamespace(model=model, prompt=prompt, exported=exported,
                           compiled=sm.compile(exported, devices=2, quiet=True))


def generate(run, prompt: torch.Tensor, cache: list) -> tuple[list, list[int]]:
    """The user's loop: prefill, then greedy decode steps passing each device's cache along; every call's
    logits as host arrays, and the tokens chosen."""
    logits, *cache = run("prefill", prompt, np.arange(KV_PROMPT), cache)
    outputs, chosen = [logits], []
    for position in range(KV_PROMPT, KV_PROMPT + DECODE_STEPS):
        token = int(np.argmax(outputs[-1][0, -1]))
        chosen.append(token)
        logits, *cache = run("decode", np.array([[token]]), np.array([position]), cache)
        outputs.append(logits)
    return outputs, chosen


@pytest.fixture(scope="module")
def recorded(program):
    module = sm.load(program.compiled, devices=RUNTIME_DEVICES)

    def call(function, tokens, positions, cache):
        logits, *written = getattr(module, function)(np.asarray(tokens), positions, *cache)
        return (logits.to_host(), *written)  # the caches stay device arrays: passed along on their devices

    with sm.record(module) as recording:
        outputs, chosen = generate(call, program.prompt.numpy(), [c.numpy() for c in empty_kv_cache()])
    return SimpleNamespace(recording=recording, outputs=outputs, chosen=chosen)


@pytest.fixture(scope="module")
def replayed(recorded, tmp_path_factory):
    kept = tmp_path_factory.mktemp("replay") / "replay.ireeprof"
    result = recorded.recording.profile(iterations=ITERATIONS, warmup=WARMUP, quiet=True, keep_profile=kept)
    rows = export_rows(kept)
    assert rows is not None
    return result, rows


def test_the_program_computes_what_eager_torch_computes_and_the_replay_what_the_program_did(program, recorded):
    def eager(function, tokens, positions, cache):
        with torch.no_grad():
            logits, *written = program.model(torch.as_tensor(tokens), torch.as_tensor(positions), *cache)
        return (logits.numpy(), *written)

    expected, chosen = generate(eager, program.prompt, empty_kv_cache())
    assert chosen == recorded.chosen
    for got, want in zip(recorded.outputs, expected):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    assert recorded.recording.devices == RUNTIME_DEVICES
    np.testing.assert_array_equal(recorded.recording.replay()[0], recorded.outputs[-1])


def test_every_decode_step_takes_both_devices_caches_from_the_call_before(recorded):
    calls = recorded.recording.calls
    assert [call.function for call in calls] == ["prefill"] + ["decode"] * DECODE_STEPS
    for index, call in enumerate(calls[1:], start=1):
        assert call.arguments[2:] == tuple(ResultArgument(index - 1, result) for result in range(1, 5))


def test_the_caches_never_move_only_what_the_model_moves(program):
    """Each function's program (IREE's flow level) transfers exactly what the model moves per call (the
    activations and positions to device 1, the halves' products back): no cache is moved, on return or on
    the next call's arguments, so the state stays on the device that wrote it."""
    import iree.compiler

    flow = iree.compiler.compile_str(program.exported.mlir, extra_args=[*target_flags("llvm-cpu", devices=2),
                                                                      "--iree-input-type=torch", "--compile-to=flow"])
    text = flow.decode() if isinstance(flow, bytes) else flow
    cache_type = "tensor<1x{}x{}x{}xf32>".format(KV_CONFIG.n_head // 2, KV_CONFIG.block_size,
                                                 KV_CONFIG.n_embd // KV_CONFIG.n_head)
    for function in ("prefill", "decode"):
        start = text.index(f"@{function}$async(")
        body = text[start:text.find("util.func public", start + 1)]
        transfers = [line for line in body.splitlines() if "flow.tensor.transfer" in line]
        assert len(transfers) == 5 and not any(cache_type in line for line in transfers), transfers


def test_each_function_on_each_device_equals_the_oracle_of_its_own_events(program, replayed):
    result, rows = replayed
    assert isinstance(result, DeviceReplayProfile)
    assert [(entry.function, entry.calls_per_replay) for entry in result.functions] == [("prefill", 1),
                                                                                        ("decode", DECODE_STEPS)]
    section_map = program.compiled.section_map
    for entry in result.functions:
        calls = entry.calls_per_replay
        assert [device.ordinal for device in entry.profile.devices] == [0, 1]
        for device in entry.profile.devices:
            session = device.session
            assert_profile_invariants(session)
            assert session.coverage_error <= FLOAT_RELATIVE
            measured, oracle = section_oracle(rows, section_map, calls * WARMUP, device=device.ordinal,
                                              calls=calls * (ITERATIONS + WARMUP),
                                              function=f"{entry.function}$async")
            assert measured == session.calls == calls * ITERATIONS
            exclusive = {row.path: row.exclusive_ns for row in session.sections}
            assert {path for path, ns in exclusive.items() if ns} == {path for path, ns in oracle.items() if ns}
            for path, ns in oracle.items():
                assert abs(exclusive[path] - ns) < 1, (entry.function, device.ordinal, path)  # to the ns


def test_every_section_is_on_the_device_that_ran_it(program, replayed):
    result, _rows = replayed
    for entry in result.functions:
        placed_on: dict[tuple, set[int]] = {}
        for buffer in program.compiled.section_map.command_buffers:
            for command in buffer.commands if buffer.function == f"{entry.function}$async" else []:
                for share in command.shares if command.op == "dispatch" else []:
                    placed_on.setdefault(share.path, set()).add(buffer.device)
        across = {row.path: row for row in entry.profile.sections}
        assert placed_on[("Block 0", "Self Attention", "QKV")] == {0, 1}  # each device's heads and their cache
        for path, devices in placed_on.items():
            assert set(across[path].ran_on) >= devices, (entry.function, path)
            for ordinal in devices:
                row = next(row for row in entry.profile.devices[ordinal].session.sections if row.path == path)
                assert row.exclusive_ns > 0, (entry.function, ordinal, path)


def test_each_device_time_adds_up_to_every_call_window(replayed):
    result, _rows = replayed
    for entry in result.functions:
        per_call = np.array([device.time.per_call for device in entry.profile.devices])  # [device, call, part]
        assert per_call.shape == (2, entry.calls_per_replay * ITERATIONS, len(DEVICE_TIME_PARTS))
        windows = per_call.sum(axis=2)
        assert (windows == windows[0]).all()
        for device in entry.profile.devices:
            assert sum(getattr(device.time, f"{part}_ns") for part in DEVICE_TIME_PARTS) == device.time.window_ns


def test_outputs_of_the_replay_on_several_devices(replayed, tmp_path):
    result, _rows = replayed
    table = result.table()
    assert "── prefill: 1 call per replay, 2 measured replays ──" in table
    assert f"── decode: {DECODE_STEPS} calls per replay, 2 measured replays ──" in table
    document = json.loads(result.save(tmp_path / "replay.json").read_text())
    assert document["kind"] == "replay-devices" and document["devices"] == RUNTIME_DEVICES
    decode = document["functions"][1]
    assert decode["function"] == "decode" and [d["ordinal"] for d in decode["profile"]["devices"]] == [0, 1]
    lines = result.render("csv").splitlines()
    assert lines[0].startswith("function,device,") and {line.split(",")[1] for line in lines[1:]} == {"0", "1"}
    with pytest.raises(SectionmarkError, match="of a replay on several devices is not drawn yet"):
        result.render("perfetto")
    assert result.function("decode") is result.functions[1].profile


def test_a_saved_recording_replays_on_its_devices_from_the_command_line(recorded, tmp_path, capsys):
    saved = recorded.recording.save(tmp_path / "recording")
    out = tmp_path / "replay.json"
    assert main(["profile", str(saved), "-n", "1", "--warmup", "0", "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    assert document["kind"] == "replay-devices" and [f["function"] for f in document["functions"]] == ["prefill",
                                                                                                        "decode"]
    assert "── decode: 3 calls per replay, 1 measured replay ──" in capsys.readouterr().out
    # Every function's profile is not one to compare; the line says what to compare instead, and that compares.
    assert main(["compare", str(out), str(out)]) == 1
    assert capsys.readouterr().err == (
        f"sectionmark: error: {out}: a replay on several devices (\"kind\": \"replay-devices\": every function's "
        "profile); compare one function's: sectionmark profile RECORDING --function NAME --json F\n")
    decode = tmp_path / "decode.json"
    assert main(["profile", str(saved), "-n", "1", "--warmup", "0", "--function", "decode", "--json", str(decode)]) == 0
    assert main(["compare", str(decode), str(decode)]) == 0
    capsys.readouterr()
    assert main(["profile", str(saved), "--html", str(tmp_path / "r.html")]) != 0
    assert capsys.readouterr().err.strip().endswith(
        "--html of a replay on several devices is not drawn yet (its table, --json and --csv are)")


def test_a_saved_recording_replays_on_its_devices(recorded, tmp_path):
    saved = recorded.recording.save(tmp_path / "recording")
    assert json.loads((saved / "recording.json").read_text())["devices"] == RUNTIME_DEVICES
    again = Recording.load(saved)
    assert again.devices == RUNTIME_DEVICES
    np.testing.assert_array_equal(again.replay()[0], recorded.outputs[-1])
    with pytest.raises(SectionmarkError, match="runs > 1 of a replay on several devices"):
        again.profile(runs=2, quiet=True)
    with pytest.raises(SectionmarkError, match="several devices of one driver only"):
        again.profile(devices=["local-task", "vulkan"], quiet=True)
    with pytest.raises(SectionmarkError, match="replaying a recording is profiled with IREE's HAL-native profiler"):
        again.profile(devices=["cuda", "cuda"], quiet=True)  # several CUDA devices profile, but not a replay
