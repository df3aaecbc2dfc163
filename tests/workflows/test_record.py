"""Record a program's own call sequence, replay it under the profiler, per function.

The acceptance case: a tiny Hugging Face GPT-2 exported as two functions of
one module (prefill, decode) sharing a KV cache that stays on the device;
the program runs prefill and 8 decode steps choosing each next token on the
host. The replay must compute exactly what the program computed, and its
profile must give one exact table per function with the right call counts.
"""

from __future__ import annotations

import csv
import io
import json
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from iree.turbine import aot  # noqa: E402

import sectionmark as sm  # noqa: E402
from hf_models import VOCAB, CachedLM, TensorCacheLayer, empty_cache, tiny_gpt2  # noqa: E402
from invariants import assert_profile_invariants  # noqa: E402
from sectionmark.cli import main  # noqa: E402
from sectionmark.readers.ireeprof import read_profile  # noqa: E402
from sectionmark.workflows.replay import ReplayProfile, replay_calls  # noqa: E402
from sectionmark.workflows.replay_module import InputArgument, ReplayCall, ResultArgument, replay_module_text  # noqa: E402

PROMPT = 4
DECODE_STEPS = 8


def tokens(count: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (1, count), generator=torch.Generator().manual_seed(2))


def kv_program(cache_layer: type = TensorCacheLayer, attention: str = "sdpa", positions: torch.dtype = torch.int64):
    """The tiny GPT-2 and its export as two functions, prefill and decode, sharing a fixed-size KV cache.

    For Vulkan's portable target, which IREE 3.13 compiles neither a scatter, the fused attention op ("sdpa"
    becomes) nor vectors of 64-bit integers for: ``BlendedCacheLayer``, "eager" attention and int32 positions.
    """
    model = tiny_gpt2()
    model.config._attn_implementation = attention
    keys, values = empty_cache(model)
    builder = aot.FxProgramsBuilder(CachedLM(model, cache_layer))
    with sm.torch.sections():

        @builder.export_program(name="prefill", args=(tokens(PROMPT), torch.arange(PROMPT, dtype=positions), keys,
                                                      values))
        def prefill(module, input_ids, positions, keys, values):
            return module(input_ids, positions, keys, values)

        @builder.export_program(name="decode", args=(tokens(1), torch.tensor([PROMPT], dtype=positions), keys, values))
        def decode(module, input_ids, positions, keys, values):
            return module(input_ids, positions, keys, values)

    return model, sm.torch.export(builder)


@pytest.fixture(scope="module")
def kv_module(tmp_path_factory):
    """prefill + decode of one tiny GPT-2 with a fixed-size KV cache, compiled for the CPU and saved."""
    model, exported = kv_program()
    compiled = sm.compile(exported, target="llvm-cpu")
    path = tmp_path_factory.mktemp("kv") / "model.vmfb"
    compiled.save(path)
    return SimpleNamespace(model=model, compiled=compiled, path=path)


def generate(module, model) -> tuple[np.ndarray, list[int]]:
    """The user's loop: prefill, then greedy decode steps; the cache never leaves the device."""
    keys, values = (cache.numpy() for cache in empty_cache(model))
    logits, keys, values = module.prefill(tokens(PROMPT).numpy(), np.arange(PROMPT), keys, values)
    chosen = []
    for position in range(PROMPT, PROMPT + DECODE_STEPS):
        token = int(np.argmax(logits.to_host()[0, -1]))
        chosen.append(token)
        logits, keys, values = module.decode(np.array([[token]]), np.array([position]), keys, values)
    return logits.to_host(), chosen


@pytest.fixture(scope="module")
def recorded(kv_module):
    module = sm.load(kv_module.compiled)
    with sm.record(module) as recording:
        final_logits, chosen = generate(module, kv_module.model)
    return SimpleNamespace(recording=recording, final_logits=final_logits, chosen=chosen, module=module)


@pytest.fixture(scope="module")
def replay_profile(recorded, tmp_path_factory):
    path = tmp_path_factory.mktemp("replay") / "replay.ireeprof"
    return recorded.recording.profile(iterations=2, warmup=1, quiet=True, keep_profile=path), path


def test_the_recording_knows_where_each_device_array_came_from(recorded):
    calls = recorded.recording.calls
    assert [call.function for call in calls] == ["prefill"] + ["decode"] * DECODE_STEPS
    # every decode step takes the cache from the call before it, and the token and position from the host
    for index, call in enumerate(calls[1:], start=1):
        assert call.arguments[2:] == (ResultArgument(index - 1, 1), ResultArgument(index - 1, 2))
        assert all(isinstance(argument, InputArgument) for argument in call.arguments[:2])
    assert [int(recorded.recording.inputs[call.arguments[0].index][0, 0]) for call in calls[1:]] == recorded.chosen


def test_the_replay_computes_what_the_program_computed(recorded):
    replayed_logits, _keys, _values = recorded.recording.replay()
    np.testing.assert_array_equal(replayed_logits, recorded.final_logits)


def test_replay_profile_per_function(replay_profile):
    replay, _path = replay_profile
    assert [(entry.function, entry.calls_per_replay) for entry in replay.functions] == [("prefill", 1),
                                                                                        ("decode", DECODE_STEPS)]
    assert replay.replays == 2 and replay.warmup == 1
    decode = replay.function("decode")
    assert decode.calls == 2 * DECODE_STEPS and decode.warmup == DECODE_STEPS
    assert replay.function("prefill").calls == 2
    for entry in replay.functions:
        session = entry.profile
        assert_profile_invariants(session)
        assert session.coverage_error < 1e-9
        assert {row.path for row in session.section_rows if row.busy_ns > 0} >= {("Embedding",), ("LM Head",)}
        rows = session.call_time.rows
        assert abs(sum(rows.values()) - session.call_time.call_ns) <= 0.01 * session.call_time.call_ns
    table = replay.table()
    assert "prefill: 1 call per replay, 2 measured replays" in table
    assert f"decode: {DECODE_STEPS} calls per replay" in table


def test_replay_of_several_runs_has_each_functions_spread(recorded):
    """``runs=2``: two fresh replays, each function's sections with their busy time per call in both."""
    replay = recorded.recording.profile(iterations=2, warmup=1, quiet=True, runs=2, workers=1)
    for entry in replay.functions:
        session = entry.profile
        assert_profile_invariants(session)
        assert session.runs == 2 and len(session.total_runs.values_ns) == 2
        assert all(value > 0 for value in session.section(("LM Head",)).runs.values_ns)
    assert "Median of 2" in replay.table()


def test_replay_json_round_trip(replay_profile):
    replay, _path = replay_profile
    data = json.loads(replay.render("json"))
    assert [entry["function"] for entry in data["functions"]] == ["prefill", "decode"]
    again = ReplayProfile.from_json(data)
    assert again.function("decode").calls == replay.function("decode").calls
    assert again.function("decode").total_ns == replay.function("decode").total_ns
    with pytest.raises(sm.SectionmarkError, match="never called 'main'"):
        replay.function("main")


def test_a_profile_that_does_not_follow_the_recording_is_refused(recorded, replay_profile):
    _replay, path = replay_profile
    profile, section_map = read_profile(path), recorded.recording.section_map
    sequence = recorded.recording.sequence
    calls = replay_calls(profile, section_map, sequence, 3)
    assert calls.tolist() == list(range(3 * len(sequence)))  # one submission per call here
    with pytest.raises(sm.SectionmarkError, match="cannot be 2 equal replays"):
        replay_calls(profile, section_map, sequence, 2)
    with pytest.raises(sm.SectionmarkError, match=r"'decode' submitted 24 command buffers per replay over 7 calls"):
        replay_calls(profile, section_map, sequence[:-1], 1)
    swapped = sequence[1:2] + sequence[:1] + sequence[2:]
    with pytest.raises(sm.SectionmarkError, match="call 0 of replay 0 is 'decode' but its submission 0 is 'prefill'"):
        replay_calls(profile, section_map, swapped, 3)


def test_saved_recording_profiles_from_the_command_line(recorded, tmp_path, capsys):
    directory = recorded.recording.save(tmp_path / "recording")
    assert {path.name for path in directory.iterdir()} == {"recording.json", "model.vmfb", "model.sections.json",
                                                          "replay.vmfb", "inputs"}
    loaded = sm.Recording.load(directory)
    np.testing.assert_array_equal(loaded.replay()[0], recorded.final_logits)
    output = tmp_path / "replay.json"
    page = tmp_path / "replay.html"
    assert main(["profile", str(directory), "-n", "1", "--warmup", "0", "--json", str(output), "--html", str(page)]) == 0
    printed = capsys.readouterr().out
    assert "decode: 8 calls per replay, 1 measured replay" in printed and f"wrote {output}" in printed
    # The report: one tab per function, each with its own tree and timeline.
    text = page.read_text()
    assert re.findall(r'<nav class="tabs"><button type="button">(\w+)</button><button type="button">(\w+)</button>',
                      text) == [("prefill", "decode")]
    assert text.count('<section class="tab"') == 2 and text.count('<table class="tree"') == 2
    assert "8 calls per replay, 1 measured replay" in text
    data = json.loads(output.read_text())
    assert [(entry["function"], entry["profile"]["calls"]) for entry in data["functions"]] == [("prefill", 1),
                                                                                               ("decode", 8)]
    perfetto = tmp_path / "decode.json"
    assert main(["profile", str(directory), "-n", "1", "--warmup", "0", "--function", "decode",
                 "--perfetto", str(perfetto)]) == 0
    assert json.loads(perfetto.read_text())
    capsys.readouterr()
    rows = tmp_path / "replay.csv"  # every function's rows in one CSV: the same path as one profile's outputs
    trace = tmp_path / "replay.perfetto.json"
    assert main(["profile", str(directory), "-n", "1", "--warmup", "0", "--csv", str(rows), "--cpu", "--by", "name",
                 "--perfetto", str(trace), "--sites", "--chart", str(tmp_path / "replay.png")]) == 0
    printed = capsys.readouterr().out
    assert printed.count("dispatch sites") == 2 and printed.count("── decode: 8 calls per replay") == 3  # table, sites, by
    assert printed.count("Section") >= 2 and "Parallel" in printed and "prefill: 1 call per replay" in printed
    functions = [row["function"] for row in csv.DictReader(io.StringIO(rows.read_text(), newline=""))]
    assert functions[0] == "prefill" and functions[-1] == "decode" and set(functions) == {"prefill", "decode"}
    processes = [event["args"]["name"] for event in json.loads(trace.read_text())["traceEvents"]
                 if event["name"] == "process_name"]
    assert processes == ["sectionmark: prefill", "sectionmark: decode"]
    assert (tmp_path / "replay.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _error_line(argv, capsys) -> str:
    assert main(argv) == 1
    return capsys.readouterr().err.strip()


def test_bad_recordings_are_one_line(recorded, kv_module, tmp_path, capsys):
    directory = recorded.recording.save(tmp_path / "recording")
    with pytest.raises(sm.SectionmarkError, match="already exists and is not an empty directory"):
        recorded.recording.save(directory)
    assert _error_line(["profile", str(directory), "--graph", str(tmp_path / "g.html")], capsys) == (
        "sectionmark: error: --graph of a recording is per function: add --function NAME "
        "(it called: prefill, decode)")
    assert _error_line(["profile", str(directory), "--function", "main"], capsys) == (
        "sectionmark: error: the recording never called 'main' (it called: prefill, decode)")
    (directory / "inputs" / "3.npy").unlink()
    assert _error_line(["profile", str(directory)], capsys) == (
        f"sectionmark: error: cannot read input {directory}/inputs/3.npy: No such file or directory")
    other = recorded.recording.save(tmp_path / "other")
    from tiny_profiles import TWO_MATMULS

    (other / "model.vmfb").write_bytes(sm.compile(TWO_MATMULS, target="llvm-cpu").vmfb)
    assert _error_line(["profile", str(other)], capsys) == (
        f"sectionmark: error: {other}/model.vmfb is not the module this recording was made with (its SHA-256 is not "
        "the recorded one): record again with the module you want to profile")


def test_profiling_a_recording_never_writes_over_it(recorded, tmp_path, capsys):
    directory = recorded.recording.save(tmp_path / "recording")
    before = {path: path.read_bytes() for path in directory.rglob("*") if path.is_file()}
    for option, target in [("--json", "model.vmfb"), ("--json", "recording.json"), ("--json", "replay.vmfb"),
                           ("--keep-profile", "inputs/0.npy"), ("--json", "model.sections.json")]:
        line = _error_line(["profile", str(directory), option, str(directory / target)], capsys)
        assert line.endswith("it is also an input of this command"), line
    with pytest.raises(sm.SectionmarkError, match="also an input"):
        sm.Recording.load(directory).profile(keep_profile=directory / "replay.vmfb")
    assert {path: path.read_bytes() for path in directory.rglob("*") if path.is_file()} == before


def _edited(directory, edit) -> None:
    path = directory / "recording.json"
    description = json.loads(path.read_text())
    edit(description)
    path.write_text(json.dumps(description))


def test_a_recording_whose_files_disagree_is_refused(recorded, kv_module, tmp_path, capsys):
    """recording.json, model.vmfb and replay.vmfb are checked against each other, not only read."""
    fewer = recorded.recording.save(tmp_path / "fewer")  # the driver still makes 9 calls: tables would be per 8
    _edited(fewer, lambda description: description["calls"].pop())
    assert _error_line(["profile", str(fewer)], capsys) == (
        f"sectionmark: error: {fewer}/replay.vmfb does not make the calls recording.json lists (one of them was "
        "replaced or edited): record the program again")
    same_names = recorded.recording.save(tmp_path / "same-names")  # another model, same module and function names
    functions = "".join(f"func.func @{name}(%x: tensor<4xf32>) -> tensor<4xf32> {{ return %x : tensor<4xf32> }}\n"
                        for name in ("prefill", "decode"))
    other = sm.compile(f"module @{recorded.recording.name} {{\n{functions}}}", target="llvm-cpu")
    (same_names / "model.vmfb").write_bytes(other.vmfb)
    assert "is not the module this recording was made with" in _error_line(["profile", str(same_names)], capsys)
    old = recorded.recording.save(tmp_path / "old")
    _edited(old, lambda description: description.pop("sha256"))
    assert "has no checksums (saved by an older sectionmark)" in _error_line(["profile", str(old)], capsys)
    nested = recorded.recording.save(tmp_path / "nested")
    (nested / "recording.json").write_text("[" * 100_000 + "]" * 100_000)
    assert "malformed recording" in _error_line(["profile", str(nested)], capsys)


def test_recording_json_is_read_value_by_value(recorded, tmp_path, capsys):
    """recording.json goes through sectionmark.serialization: every value checked, one line naming its place."""
    directory = recorded.recording.save(tmp_path / "recording")
    data = json.loads((directory / "recording.json").read_text())
    assert list(data) == ["version", "kind", "module", "device", "parameters", "inputs", "calls", "sha256"]
    assert data["calls"][1]["arguments"][:1] == [{"input": 4}] and {"call": 0, "result": 1} in data["calls"][1]["arguments"]
    bad = {
        "inputs": (lambda description: description.update(inputs=True), "recording.inputs: expected an integer, got bool True"),
        "results": (lambda description: description["calls"][2].update(results="3"),
                    "recording.calls[2].results: expected an integer, got str '3'"),
        "both": (lambda description: description["calls"][1]["arguments"][0].update(call=0, result=0),
                 "recording.calls[1].arguments[0]: neither an input nor a call and its result"),
        "neither": (lambda description: description["calls"][1]["arguments"][0].pop("input"),
                    "recording.calls[1].arguments[0]: neither an input nor a call and its result"),
    }
    for name, (edit, message) in bad.items():
        case = recorded.recording.save(tmp_path / name)
        _edited(case, edit)
        assert _error_line(["profile", str(case)], capsys) == (
            f"sectionmark: error: {case}/recording.json: malformed sectionmark recording: {message}")


def test_a_recording_of_endless_files_is_one_line_at_once(recorded, tmp_path):
    """A model or input that is /dev/zero or a FIFO is refused before it is read (it used to be read for ever)."""
    import os
    import subprocess
    import sys

    cases = []
    for name, target in [("model.vmfb", "/dev/zero"), ("model.vmfb", None), ("replay.vmfb", None),
                         ("inputs/0.npy", None), ("recording.json", None)]:
        directory = recorded.recording.save(tmp_path / f"case{len(cases)}")
        (directory / name).unlink()
        os.symlink(target, directory / name) if target else os.mkfifo(directory / name)
        cases.append((directory, name))
    for directory, name in cases:
        done = subprocess.run([sys.executable, "-m", "sectionmark", "profile", str(directory)], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith("sectionmark: error: ") and "not a regular file" in done.stderr, done.stderr


def test_two_saves_at_once_one_wins_the_other_says_why(recorded, tmp_path, monkeypatch):
    import sectionmark.workflows.record as record_module

    target = tmp_path / "recording"
    save = record_module.np.save

    def other_save_finishes_meanwhile(*args, **kwargs):  # the other save renames its copy into place now
        if not target.exists():
            target.mkdir()
            (target / "recording.json").write_text("{}")
        return save(*args, **kwargs)

    monkeypatch.setattr(record_module.np, "save", other_save_finishes_meanwhile)
    with pytest.raises(sm.SectionmarkError, match="already exists and is not an empty directory"):
        recorded.recording.save(target)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["recording"]  # no staging copy left behind


def test_recording_misuse_is_one_error(kv_module, recorded):
    module = recorded.module
    with pytest.raises(sm.SectionmarkError, match="needs a module from sm.load, got CompiledProgram"):
        sm.record(kv_module.compiled)
    with sm.record(module):
        with pytest.raises(sm.SectionmarkError, match="is already being recorded"):
            with sm.record(module):
                pass
        with pytest.raises(sm.SectionmarkError, match="argument 0: unsupported type str; pass arrays, tensors, scalars or pytrees of them"):
            module.decode("token", np.array([PROMPT]), *empty_cache(kv_module.model))
        with pytest.raises(sm.SectionmarkError, match="^decode: keyword arguments cannot be recorded; pass them by "
                                                      "position$"):
            module.decode(np.array([[1]]), np.array([PROMPT]), *empty_cache(kv_module.model), extra=1)
    with pytest.raises(sm.SectionmarkError, match="nothing was recorded"):
        with sm.record(module) as empty:
            pass
        empty.profile()


def test_driver_text_passes_results_along():
    calls = [ReplayCall("prefill", (InputArgument(0),), 2),
             ReplayCall("decode", (InputArgument(1), ResultArgument(0, 1)), 2),
             ReplayCall("norm", (ResultArgument(1, 0),), 1)]
    text = replay_module_text("model", calls, 2)
    assert 'func.func private @"model.prefill"(!hal.buffer_view) -> (!hal.buffer_view, !hal.buffer_view)' in text
    assert '%call1:2 = func.call @"model.decode"(%input1, %call0#1)' in text
    assert '%call2 = func.call @"model.norm"(%call1#0)' in text
    assert "return %call2 : !hal.buffer_view" in text
    with pytest.raises(sm.SectionmarkError, match="'decode' was called with 1 arguments giving 2 results and with 2"):
        replay_module_text("model", calls + [ReplayCall("decode", (InputArgument(0),), 2)], 2)


def test_a_recordings_replay_json_is_compared_function_by_function(replay_profile, tmp_path, capsys):
    """`sectionmark compare` takes a recording's outputs: the replay JSON (a function named, or its only one) and
    one function's profile JSON."""
    replay, _path = replay_profile
    replays = tmp_path / "replay.json"
    replay.save_json(replays)
    decode = replay.function("decode").save(tmp_path / "decode.json")
    comparison = sm.compare(replays, decode, function="decode")
    assert comparison.sections and {row.verdict for row in comparison.sections if row.ratio} == {"within drift"}
    assert all(row.ratio == 1 for row in comparison.sections if row.ratio)  # the same calls on both sides
    assert (comparison.sections[0].a_calls, comparison.components[0].b_calls) == (2 * DECODE_STEPS, 2 * DECODE_STEPS)
    assert main(["compare", str(replays), str(replays), "--function", "prefill"]) == 0
    assert "within drift" in capsys.readouterr().out
    for argv, fragment in [([str(replays), str(decode)], "a replay of 2 functions that ran dispatches (prefill, "
                                                         "decode): name one with --function"),
                           ([str(replays), str(decode), "--function", "main"], "never called 'main'"),
                           ([str(decode), str(decode), "--function", "prefill"],
                            "a profile of function 'decode', not 'prefill'")]:
        assert main(["compare", *argv]) == 1
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and err.startswith("sectionmark: error: ") and fragment in err, err
