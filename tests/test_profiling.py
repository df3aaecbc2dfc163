"""Per-section CPU profiles: real iree-compile + iree-benchmark-module on tiny models."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from invariants import assert_profile_invariants

import sectionmark.profiling as profiling
from sectionmark.errors import SectionmarkError
from sectionmark.profiling import tools
from sectionmark.profiling.attribute import attribute
from sectionmark.profiling.ireeprof import read_profile
from sectionmark.profiling.session import ProfileSession
from sectionmark.renderers import csv_out, json_out
from sectionmark.renderers.table import render_text
from sectionmark.section_map import Command, CommandBuffer, DispatchSite, SectionMap, Share

iree_compiler = pytest.importorskip("iree.compiler")

CPU_FLAGS = ["--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
             "--iree-llvmcpu-target-cpu=host"]

# Two dispatches on IREE 3.13: matmul (the fill fuses in) and exp+matmul fused.
TWO_MATMULS = """
func.func @main(%x: tensor<64x64xf32>, %w: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %c0 = arith.constant 0.0 : f32 loc("sectionmark:Block/Attn"("t.py":1:1))
  %e = tensor.empty() : tensor<64x64xf32> loc("sectionmark:Block/Attn"("t.py":1:1))
  %z = linalg.fill ins(%c0 : f32) outs(%e : tensor<64x64xf32>) -> tensor<64x64xf32> loc("sectionmark:Block/Attn"("t.py":1:1))
  %m = linalg.matmul ins(%x, %w : tensor<64x64xf32>, tensor<64x64xf32>) outs(%z : tensor<64x64xf32>) -> tensor<64x64xf32> loc("sectionmark:Block/Attn"("t.py":2:1))
  %t = tensor.empty() : tensor<64x64xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0,d1)->(d1,d0)>, affine_map<(d0,d1)->(d0,d1)>],
                       iterator_types = ["parallel","parallel"]} ins(%m : tensor<64x64xf32>) outs(%t : tensor<64x64xf32>) {
  ^bb0(%a: f32, %b: f32):
    %s = math.exp %a : f32
    linalg.yield %s : f32
  } -> tensor<64x64xf32> loc("sectionmark:Block/MLP"("t.py":3:1))
  %m2 = linalg.matmul ins(%r, %w : tensor<64x64xf32>, tensor<64x64xf32>) outs(%z : tensor<64x64xf32>) -> tensor<64x64xf32> loc("sectionmark:Block/MLP"("t.py":4:1))
  return %m2 : tensor<64x64xf32>
}
"""

DYNAMIC = """
func.func @main(%x: tensor<?x64xf32>, %w: tensor<64x64xf32>) -> tensor<?x64xf32> {
  %c0 = arith.constant 0.0 : f32
  %i0 = arith.constant 0 : index
  %n = tensor.dim %x, %i0 : tensor<?x64xf32>
  %e = tensor.empty(%n) : tensor<?x64xf32>
  %z = linalg.fill ins(%c0 : f32) outs(%e : tensor<?x64xf32>) -> tensor<?x64xf32>
  %m = linalg.matmul ins(%x, %w : tensor<?x64xf32>, tensor<64x64xf32>) outs(%z : tensor<?x64xf32>) -> tensor<?x64xf32>
  return %m : tensor<?x64xf32>
}
"""

KEY_0 = "main_dispatch_0_matmul_64x64x64_f32"
KEY_1 = "main_dispatch_1_matmul_64x64x64_f32"


def compile_plain(text: str, path: Path) -> Path:
    path.write_bytes(iree_compiler.compile_str(text, extra_args=CPU_FLAGS))
    return path


def hand_map(weights: tuple[float, float] = (0.25, 0.75)) -> SectionMap:
    """The command sequence IREE 3.13 records for TWO_MATMULS, with a fused second dispatch."""
    return SectionMap(
        sections=[("Block",), ("Block", "Attn"), ("Block", "MLP")],
        sites=[],
        command_buffers=[
            CommandBuffer(
                index=0,
                function="main",
                commands=[
                    Command("dispatch", KEY_0, site=0, shares=[Share(("Block", "Attn"), 1.0)], workgroups=[8, 1, 1]),
                    Command("barrier"),
                    Command("dispatch", KEY_1, site=1,
                            shares=[Share(("Block", "Attn"), weights[0]), Share(("Block", "MLP"), weights[1])]),
                    Command("barrier"),
                ],
            )
        ],
    )


@pytest.fixture(scope="module")
def inputs():
    rng = np.random.default_rng(0)
    return rng.random((64, 64), np.float32), rng.random((64, 64), np.float32)


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory, inputs):
    """A plain iree-compile module profiled for 3 warmup + 8 calls."""
    directory = tmp_path_factory.mktemp("plain")
    vmfb = compile_plain(TWO_MATMULS, directory / "m.vmfb")
    profile_path = directory / "run.ireeprof"
    session = profiling.profile(vmfb, inputs, iterations=8, warmup=3, section_map=hand_map(),
                                keep_profile=profile_path, quiet=True)
    assert_profile_invariants(session)
    return vmfb, profile_path, session


def jsonl_oracle(profile_path: Path, section_map: SectionMap, warmup_calls: int) -> dict:
    """Per-path exclusive ns computed straight from `iree-profile export` rows, in plain Python."""
    import subprocess

    text = subprocess.run([str(tools.find_tool("iree-profile")), "export", "--format=ireeperf-jsonl", "--output=-",
                           str(profile_path)], capture_output=True, text=True, check=True).stdout
    rows = [json.loads(line) for line in text.splitlines()]
    executes = sorted(r["submission_id"] for r in rows if r["record_type"] == "host_execution_event" and r["op"] == "execute")
    measured = set(executes[warmup_calls:])  # one submission per call for these models
    commands = section_map.command_buffers[0].commands
    totals: dict = {}
    for r in rows:
        if r["record_type"] == "host_execution_event" and r["op"] == "dispatch" and r["submission_id"] in measured:
            command = commands[r["command_index"]]
            assert command.key == r["key"]
            for share in command.shares or [Share((), 1.0)]:
                totals[share.path] = totals.get(share.path, 0.0) + share.weight * r["duration_ns"]
    return totals


# ---------------------------------------------------------------------------- reading


def test_bundle_reader_matches_iree_profile_export(plain_run):
    _vmfb, profile_path, _session = plain_run
    bundle, exported = read_profile(profile_path, reader="bundle"), read_profile(profile_path, reader="jsonl")
    assert (bundle.source, exported.source) == ("bundle", "jsonl")
    assert bundle.keys == exported.keys == [KEY_0, KEY_1]
    assert np.array_equal(bundle.dispatches, exported.dispatches)
    assert np.array_equal(bundle.submissions, exported.submissions)
    assert bundle.command_buffers == exported.command_buffers
    assert len(bundle.dispatches) == 2 * 11 and len(bundle.submissions) == 11
    assert [op for _i, op, _k in next(iter(bundle.command_buffers.values()))] == ["dispatch", "barrier"] * 2


# ---------------------------------------------------------------------------- attribution


def test_every_dispatch_attributed_and_fused_shares_split(plain_run):
    _vmfb, profile_path, session = plain_run
    assert session.calls == 8 and session.warmup == 3 and session.calls_known
    assert len(session.attribution.events) == 2 * 8
    oracle = jsonl_oracle(profile_path, hand_map(), warmup_calls=3)
    for path in [("Block", "Attn"), ("Block", "MLP")]:
        assert session.section(path).exclusive_ns == pytest.approx(oracle[path], rel=1e-9)
    assert session.unmarked_ns == 0
    assert session.coverage_error <= 1e-3
    block = session.section(("Block",))
    assert block.busy_ns == pytest.approx(session.total_ns)
    assert block.busy_ns >= session.section(("Block", "Attn")).busy_ns + session.section(("Block", "MLP")).busy_ns - 1e-6
    mlp = session.section(("Block", "MLP"))
    site1 = next(site for site in session.sites if site.site == 1)
    assert mlp.busy_ns == pytest.approx(0.75 * site1.busy_ns)
    assert mlp.shared_ns == pytest.approx(mlp.busy_ns)
    assert mlp.shared_with[("Block", "Attn")] == pytest.approx(0.25 * site1.busy_ns)
    # A barrier separates the two dispatches: nothing overlaps, so every section's wall equals its busy time,
    # the shared dispatch's wall split 25/75 like its busy time.
    for row in session.sections:
        assert row.wall_ns == pytest.approx(row.busy_ns) and row.exclusive_wall_ns == pytest.approx(row.exclusive_ns)
    assert session.wall_ns == session.total_ns
    assert block.per_call.min_ns <= block.per_call.p50_ns <= block.per_call.max_ns


def test_unmarked_dispatch_and_coverage(plain_run):
    _vmfb, profile_path, _session = plain_run
    section_map = hand_map()
    section_map.command_buffers[0].commands[0].shares = []  # first dispatch in no section
    session = profiling.report(profile_path, section_map, calls=11, warmup=3)
    assert_profile_invariants(session)
    first = next(site for site in session.sites if site.site == 0)
    assert session.unmarked_ns == pytest.approx(first.busy_ns)
    covered = sum(row.busy_ns for row in session.sections if len(row.path) == 1) + session.unmarked_ns
    assert covered == pytest.approx(session.total_ns, rel=1e-3)
    assert "(unmarked)" in session.table()


def test_declared_sections_without_dispatches_are_reported(plain_run):
    _vmfb, profile_path, _session = plain_run
    section_map = hand_map()
    section_map.sections += [("Block", "Cache"), ("Folded",)]
    section_map.sites.append(DispatchSite(id=5, function="__init", shares=[Share(("Block", "Cache"), 1.0)], op_count=1))
    session = profiling.report(profile_path, section_map, calls=11, warmup=3)
    assert_profile_invariants(session)
    cache, folded = session.section(("Block", "Cache")), session.section(("Folded",))
    assert (cache.dispatched, cache.note) == (False, "no dispatches: ran only in initializers")
    assert (folded.dispatched, folded.note) == (False, "no dispatches: optimised away or folded into constants")
    assert session.section(("Block",)).note is None
    assert "Cache — no dispatches: ran only in initializers" in render_text(session, width=200)


def test_calls_are_inferred_without_a_count(plain_run):
    _vmfb, profile_path, _session = plain_run
    session = profiling.report(profile_path, hand_map())
    assert_profile_invariants(session)
    assert session.calls == 11 and session.calls_known


def test_one_shot_command_buffers_of_dynamic_shapes(tmp_path):
    vmfb = compile_plain(DYNAMIC, tmp_path / "dyn.vmfb")
    key = "main_dispatch_0_matmul_Dx64x64_f32"
    section_map = SectionMap(
        sections=[("MM",)], sites=[],
        command_buffers=[CommandBuffer(0, "main", [Command("dispatch", key, site=0, shares=[Share(("MM",), 1.0)]),
                                                   Command("barrier")])],
    )
    rng = np.random.default_rng(1)
    path = tmp_path / "dyn.ireeprof"
    session = profiling.profile(vmfb, (rng.random((32, 64), np.float32), rng.random((64, 64), np.float32)),
                                iterations=4, warmup=1, section_map=section_map, keep_profile=path, quiet=True)
    assert len(read_profile(path).command_buffers) == 5  # a new one-shot buffer per call
    assert_profile_invariants(session)
    assert session.calls == 4 and session.section(("MM",)).dispatches == 4
    assert session.section(("MM",)).busy_ns == session.total_ns


def test_real_compiler_section_map(tmp_path, inputs):
    compiler = pytest.importorskip("sectionmark.compiler")
    compiled = compiler.compile(TWO_MATMULS, target="llvm-cpu")
    session = profiling.profile(compiled, inputs, iterations=5, warmup=1, quiet=True)
    assert_profile_invariants(session)
    paths = {row.path for row in session.section_rows}
    assert {("Block",), ("Block", "Attn"), ("Block", "MLP")} <= paths
    assert sum(site.dispatches for site in session.sites) == len(session.attribution.events)
    assert session.coverage_error <= 1e-3
    block = session.section(("Block",))
    children = [row for row in session.section_rows if row.path[:1] == ("Block",) and len(row.path) == 2]
    assert block.busy_ns == pytest.approx(block.exclusive_ns + sum(row.busy_ns for row in children))
    compiled.save(tmp_path / "m.vmfb")  # the saved map is found again by path
    again = profiling.profile(tmp_path / "m.vmfb", inputs, iterations=2, warmup=0, quiet=True)
    assert_profile_invariants(again)
    assert again.calls == 2


# ---------------------------------------------------------------------------- outputs


def test_json_round_trip_and_csv(plain_run, tmp_path):
    _vmfb, _path, session = plain_run
    data = session.to_json()
    assert data["version"] == 2 and data["total_ns"] == session.total_ns
    assert {"path", "busy_ns", "wall_ns", "exclusive_wall_ns", "calls", "dispatches", "dispatched", "note",
            "share"} <= set(data["sections"][0])
    saved = json_out.save(session, tmp_path / "p.json")
    loaded = json_out.load(saved)
    assert_profile_invariants(loaded)
    assert loaded.to_json() == json.loads(json.dumps(data))
    lines = csv_out.dumps(session).splitlines()
    assert lines[0].startswith("section,path") and len(lines) == 1 + len(session.sections)
    text = session.table()
    assert "Attn *" in text and "coverage:" in text


# ---------------------------------------------------------------------------- bad input


def assert_one_line(error: pytest.ExceptionInfo) -> None:
    message = str(error.value)
    assert message and "\n" not in message


@pytest.mark.parametrize("cut", [0.5, 0.999])
def test_truncated_profile(plain_run, tmp_path, cut):
    data = plain_run[1].read_bytes()
    path = tmp_path / "cut.ireeprof"
    path.write_bytes(data[: int(len(data) * cut)])
    with pytest.raises(SectionmarkError, match="truncated") as error:
        read_profile(path)
    assert_one_line(error)


@pytest.mark.parametrize("content", [b"", b"garbage\x00\x01", b"IRPF", b"{not json\n"])
def test_garbage_and_empty_profiles(tmp_path, content):
    path = tmp_path / "bad.ireeprof"
    path.write_bytes(content)
    with pytest.raises(SectionmarkError) as error:
        profiling.report(path, hand_map())
    assert_one_line(error)


def test_map_from_another_model(plain_run):
    other = hand_map()
    other.command_buffers[0].commands[2].key = "other_dispatch_9"
    with pytest.raises(SectionmarkError, match="does not match this profile") as error:
        profiling.report(plain_run[1], other)
    assert_one_line(error)


def test_missing_tool(monkeypatch, tmp_path, plain_run):
    monkeypatch.setattr(tools, "runtime_tools_dir", lambda: tmp_path)
    with pytest.raises(SectionmarkError, match="iree-benchmark-module") as error:
        profiling.profile(plain_run[0], (), section_map=hand_map(), quiet=True)
    assert_one_line(error)


def test_failing_run_is_one_line(plain_run):
    with pytest.raises(SectionmarkError, match="iree-benchmark-module failed") as error:
        profiling.profile(plain_run[0], (np.zeros(3, np.float32),), section_map=hand_map(), quiet=True)
    assert_one_line(error)


# ---------------------------------------------------------------------------- fuzz


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzz_bundle_bytes(plain_run, tmp_path, data):
    original = bytearray(plain_run[1].read_bytes())
    for _ in range(data.draw(st.integers(1, 8))):
        position = data.draw(st.integers(0, len(original) - 1))
        original[position] = data.draw(st.integers(0, 255))
    path = tmp_path / "fuzz.ireeprof"
    path.write_bytes(bytes(original[: data.draw(st.integers(0, len(original)))]))
    try:
        session = profiling.report(path, hand_map())
    except SectionmarkError as error:
        assert "\n" not in str(error)
    else:
        assert_profile_invariants(session)


@pytest.fixture(scope="module")
def exported_lines(plain_run):
    import subprocess

    return subprocess.run([str(tools.find_tool("iree-profile")), "export", "--format=ireeperf-jsonl", "--output=-",
                           str(plain_run[1])], capture_output=True, text=True, check=True).stdout.splitlines()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzz_jsonl_lines(exported_lines, tmp_path, data):
    lines = list(exported_lines)
    for _ in range(data.draw(st.integers(1, 4))):
        index = data.draw(st.integers(0, len(lines) - 1))
        action = data.draw(st.sampled_from(["drop", "garble", "field"]))
        if action == "drop":
            del lines[index]
        elif action == "garble":
            lines[index] = data.draw(st.text(max_size=40))
        else:
            try:
                row = json.loads(lines[index])
            except ValueError:
                continue
            if not isinstance(row, dict) or not row:
                continue
            field = data.draw(st.sampled_from(sorted(row)))
            row[field] = data.draw(st.one_of(st.none(), st.integers(-2**70, 2**70), st.text(max_size=5),
                                             st.lists(st.integers(), max_size=3)))
            lines[index] = json.dumps(row)
        if not lines:
            break
    path = tmp_path / "fuzz.jsonl"
    path.write_text("\n".join(lines), encoding="utf-8")
    try:
        session = ProfileSession.build(attribute(read_profile(path), hand_map()), hand_map())
    except SectionmarkError as error:
        assert "\n" not in str(error)
    else:
        assert_profile_invariants(session)
