"""Per-section CPU profiles: real iree-compile + iree-benchmark-module on tiny models."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest
from invariants import assert_profile_invariants
from tiny_profiles import DYNAMIC, KEY_0, KEY_1, TWO_MATMULS, compile_plain, export_rows, hand_map, section_oracle

import sectionmark.workflows.measure as profiling
from sectionmark.errors import SectionmarkError
from sectionmark.artifacts import tools
from sectionmark.profiling.kernels import kernels
from sectionmark.readers.ireeprof import read_profile
from sectionmark.profiling.queue_time import call_windows
from sectionmark.workflows.runner import local_task_workers
from sectionmark.renderers import json_out
from sectionmark.section_map import Command, CommandBuffer, DispatchSite, SectionMap, Share

pytest.importorskip("iree.compiler")


def jsonl_oracle(profile_path: Path, section_map: SectionMap, warmup_calls: int) -> dict:
    """Per-path exclusive ns computed straight from `iree-profile export` rows."""
    rows = export_rows(profile_path)
    assert rows is not None
    return section_oracle(rows, section_map, warmup_calls)[1]


# ---------------------------------------------------------------------------- reading


def test_bundle_reader_matches_iree_profile_export(plain_run):
    _vmfb, profile_path, _session = plain_run
    bundle, exported = read_profile(profile_path, reader="bundle"), read_profile(profile_path, reader="jsonl")
    assert (bundle.provenance.reader, exported.provenance.reader) == ("bundle", "jsonl")
    assert bundle.keys == exported.keys == [KEY_0, KEY_1]
    assert np.array_equal(bundle.dispatches, exported.dispatches)
    assert np.array_equal(bundle.submissions, exported.submissions)
    assert np.array_equal(bundle.queue_ops, exported.queue_ops) and len(bundle.queue_ops) == 3 * 11  # 2 alloca, 1 dealloca
    assert np.array_equal(bundle.memory, exported.memory) and len(bundle.memory)
    assert bundle.command_buffers == exported.command_buffers
    assert len(bundle.dispatches) == 2 * 11 and len(bundle.submissions) == 11
    assert [op for _i, op, _k in next(iter(bundle.command_buffers.values()))] == ["dispatch", "barrier"] * 2
    assert bundle.exports == exported.exports == {1: [KEY_0, KEY_1]}


# ---------------------------------------------------------------------------- attribution


def test_every_dispatch_attributed_and_fused_shares_split(plain_run):
    _vmfb, profile_path, session = plain_run
    assert session.calls == 8 and session.warmup == 3 and session.calls_known
    assert len(session.events().events) == 2 * 8
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


def test_where_in_the_call_each_section_runs(plain_run):
    """Offsets lie within the calls (their queue windows), parents span their children, and the fused dispatch
    (Attn 25% / MLP 75%, after Attn's own) makes both sections end together."""
    _vmfb, _path, session = plain_run
    spans = session.events().queue_spans
    measured = spans[(spans["call"] >= 0) & (spans["call"] < session.calls)]
    window_starts, window_ends = call_windows(measured["start_ns"], measured["end_ns"], measured["call"], session.calls)
    longest = int((window_ends - window_starts).max())
    for row in session.sections[:-1]:
        assert row.start_ns is not None and row.end_ns is not None, row.name
        assert 0 <= row.start_ns.min and row.end_ns.max <= longest, row.name
    block, attn, mlp = (session.section(path) for path in [("Block",), ("Block", "Attn"), ("Block", "MLP")])
    assert session.unmarked.start_ns is None
    for child in (attn, mlp):
        assert block.start_ns.min <= child.start_ns.min and block.end_ns.max >= child.end_ns.max
    assert block.start_ns == attn.start_ns and block.end_ns == attn.end_ns == mlp.end_ns
    assert attn.start_ns.p50 < mlp.start_ns.p50


def test_cpu_time_per_section_matches_iree_profile_export(plain_run):
    """Tile time and tiles per section from the export's rows (weights applied by hand); workers from the topology."""
    _vmfb, profile_path, session = plain_run
    rows = export_rows(profile_path)
    assert rows is not None
    events = [r for r in rows if r.get("record_type") == "host_execution_event"]
    measured = set(sorted(r["submission_id"] for r in events if r["op"] == "execute")[3:])
    dispatches = [r for r in events if r["op"] == "dispatch" and r["submission_id"] in measured]
    commands = hand_map().command_buffers[0].commands
    oracle: dict = {}
    for r in dispatches:
        for share in commands[r["command_index"]].shares:
            oracle[share.path] = oracle.get(share.path, 0.0) + share.weight * r["tile_duration_sum_ns"]
    assert session.cpu_ns == sum(r["tile_duration_sum_ns"] for r in dispatches) > 0
    assert session.tiles == sum(r["tile_count"] for r in dispatches) > 0
    for path in [("Block", "Attn"), ("Block", "MLP")]:
        assert session.section(path).cpu_ns == pytest.approx(oracle[path], rel=1e-9)
    assert session.section(("Block",)).cpu_ns == pytest.approx(session.cpu_ns, rel=1e-12)
    assert session.unmarked.cpu_ns == 0 and session.unmarked.parallelism is None
    assert session.workers == local_task_workers() >= 1


def test_nanogpt_demo_cpu_time_adds_up_to_the_profiles_tile_time(tmp_path):
    """Acceptance: Σ sections' CPU time + unmarked = total tile time; parallelism ≤ workers; table, JSON and CSV
    show CPU time, parallelism, bytes, GB/s, start and end."""
    import sectionmark as sm
    from nanogpt_builders import torch_gpt

    model, args = torch_gpt()
    session = sm.profile(sm.compile(sm.torch.export(model, args=args)), args=args, iterations=20, warmup=3, quiet=True,
                         keep_profile=tmp_path / "gpt.ireeprof")
    assert_profile_invariants(session)
    top_level = [row for row in session.sections if len(row.path) == 1] + [session.unmarked]
    assert session.cpu_ns is not None and session.workers is not None
    assert sum(row.cpu_ns for row in top_level) == pytest.approx(session.cpu_ns, rel=1e-12, abs=1e-3)
    # the profile's total tile time as iree-profile exports it: the measured calls' dispatch rows
    events = [r for r in export_rows(tmp_path / "gpt.ireeprof") if r.get("record_type") == "host_execution_event"]
    executes = sorted(r["submission_id"] for r in events if r["op"] == "execute")
    per_call = len(executes) // 23
    assert per_call * 23 == len(executes)
    measured = set(executes[3 * per_call:])
    assert session.cpu_ns == sum(r["tile_duration_sum_ns"] for r in events
                                 if r["op"] == "dispatch" and r["submission_id"] in measured) > 0
    assert all(row.parallelism <= session.workers for row in session.sections if row.parallelism is not None)
    assert session.parallelism is not None and 0 < session.parallelism <= session.workers
    table = session.render("table", cpu=True, width=220)
    assert "CPU/call" in table and "Parallel" in table and "not recorded" not in table
    assert "CPU/call" not in session.table()  # the default table keeps its columns
    again = json_out.load(session.save(tmp_path / "run.json"))
    assert_profile_invariants(again)
    assert again.cpu_ns == session.cpu_ns and again.workers == session.workers
    csv_rows = list(csv.DictReader(io.StringIO(session.render("csv"))))
    top_level_cpu = [int(row["cpu_ns"]) for row in csv_rows if int(row["depth"]) <= 1]  # unmarked: depth 0
    assert len(top_level_cpu) == len(top_level) and sum(top_level_cpu) == pytest.approx(session.cpu_ns, abs=len(top_level))
    # bytes, GB/s, start and end: every section that ran has them, in the table (--memory --span), JSON and CSV
    ran = [row for row in session.section_rows if row.dispatched]
    assert all(row.traffic is not None and row.traffic.bytes > 0 and row.traffic.gb_per_s > 0
               and row.working_set_bytes > 0 and row.start_ns is not None and row.end_ns is not None for row in ran)
    # every byte of the kernel table is in exactly one top-level row (the demo's sizes are all static)
    moved = sum(row.bytes * row.dispatches for row in kernels(session))
    assert sum(row.traffic.bytes for row in top_level if row.traffic) == pytest.approx(moved, rel=1e-9)
    wide = session.render("table", cpu=True, memory=True, span=True)
    for header in ("CPU/call", "Parallel", "Bytes/call", "Working set", "GB/s", "Start p50", "End p50"):
        assert header in wide, header
    mlp = again.section(("Block 0", "MLP"))
    measured = session.section(("Block 0", "MLP")).traffic
    assert mlp.traffic.bytes == pytest.approx(measured.bytes, abs=2) and mlp.start_ns is not None  # whole bytes in JSON
    mlp_csv = next(row for row in csv_rows if row["section"] == "Block 0 / MLP")
    assert float(mlp_csv["gb_per_s"]) == pytest.approx(mlp.traffic.gb_per_s, rel=1e-3)
    assert int(mlp_csv["read_bytes"]) == round(mlp.traffic.read_bytes) and mlp_csv["start_p50_ns"] != ""


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
    assert "Cache — no dispatches: ran only in initializers" in session.render("table", width=200)


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
    # Without a count, calls repeat by command signature, not by the (new each call) buffer id.
    inferred = profiling.report(path, section_map, warmup=1, function="main", workers=session.workers)
    assert (inferred.calls, inferred.warmup, inferred.calls_known) == (4, 1, True)
    run_only = {"module", "device", "profiler_cost", "run_variation"}  # what only the run knows, not its profile
    assert {**inferred.to_json(), **dict.fromkeys(run_only)} == {**session.to_json(), **dict.fromkeys(run_only)}
    assert session.profiler_cost is not None and inferred.profiler_cost is None
    with pytest.raises(SectionmarkError, match=r"^the section map has no function 'bogus' \(it has: main\)$"):
        profiling.report(path, section_map, warmup=1, function="bogus")  # was a table titled "bogus: 4 calls"


def test_real_compiler_section_map(tmp_path, inputs):
    compiler = pytest.importorskip("sectionmark.compiler")
    compiled = compiler.compile(TWO_MATMULS, target="llvm-cpu")
    session = profiling.profile(compiled, inputs, iterations=5, warmup=1, quiet=True)
    assert_profile_invariants(session)
    paths = {row.path for row in session.section_rows}
    assert {("Block",), ("Block", "Attn"), ("Block", "MLP")} <= paths
    assert sum(site.dispatches for site in session.sites) == len(session.events().events)
    assert session.coverage_error <= 1e-3
    block = session.section(("Block",))
    children = [row for row in session.section_rows if row.path[:1] == ("Block",) and len(row.path) == 2]
    assert block.busy_ns == pytest.approx(block.exclusive_ns + sum(row.busy_ns for row in children))
    compiled.save(tmp_path / "m.vmfb")  # the saved map is found again by path
    again = profiling.profile(tmp_path / "m.vmfb", inputs, iterations=2, warmup=0, quiet=True)
    assert_profile_invariants(again)
    assert again.calls == 2


# Two identical matmuls, one in A and one in B: IREE deduplicates them into one export function.
SAME_MATMUL_TWICE = """
func.func @main(%x: tensor<64x64xf32>, %w: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x64xf32>
  %z = linalg.fill ins(%c0 : f32) outs(%e : tensor<64x64xf32>) -> tensor<64x64xf32> loc("sectionmark:A"("t.py":1:1))
  %m = linalg.matmul ins(%x, %w : tensor<64x64xf32>, tensor<64x64xf32>) outs(%z : tensor<64x64xf32>) -> tensor<64x64xf32> loc("sectionmark:A"("t.py":2:1))
  %z2 = linalg.fill ins(%c0 : f32) outs(%e : tensor<64x64xf32>) -> tensor<64x64xf32> loc("sectionmark:B"("t.py":3:1))
  %m2 = linalg.matmul ins(%m, %w : tensor<64x64xf32>, tensor<64x64xf32>) outs(%z2 : tensor<64x64xf32>) -> tensor<64x64xf32> loc("sectionmark:B"("t.py":4:1))
  return %m2 : tensor<64x64xf32>
}
"""


def test_deduplicated_dispatch_shared_by_two_sections(tmp_path, inputs):
    """Each site is marked shared exactly when IREE's own export (the key of its events, read with
    `iree-profile export`) runs for another section's command too."""
    compiler = pytest.importorskip("sectionmark.compiler")
    compiled = compiler.compile(SAME_MATMUL_TWICE, target="llvm-cpu")
    profile_path = tmp_path / "run.ireeprof"
    session = profiling.profile(compiled, inputs, iterations=2, warmup=1, keep_profile=profile_path, quiet=True)
    rows = export_rows(profile_path)
    assert rows is not None
    commands = compiled.section_map.command_buffers[0].commands
    sections_of_key: dict[str, set] = {}
    for row in rows:
        if row.get("record_type") == "host_execution_event" and row["op"] == "dispatch":
            sections_of_key.setdefault(row["key"], set()).add(tuple(s.path for s in commands[row["command_index"]].shares))
    assert len(sections_of_key) == 1 and len(session.sites) == 2  # the premise: one function, two sites
    for site in session.sites:
        assert len(sections_of_key[site.key]) == 2 and site.shared_executable, site


# ---------------------------------------------------------------------------- outputs


def test_json_round_trip_and_csv(plain_run, tmp_path):
    _vmfb, _path, session = plain_run
    data = json.loads(session.render("json"))  # the file: the session's data and the views computed from it
    assert data["version"] == 2 and data["total_ns"] == session.total_ns
    assert {"path", "busy_ns", "wall_ns", "exclusive_wall_ns", "calls", "dispatches", "dispatched", "note",
            "share"} <= set(data["sections"][0])
    saved = session.save(tmp_path / "p.json")
    loaded = json_out.load(saved)
    assert_profile_invariants(loaded)
    expected, again = data, json.loads(loaded.render("json"))
    # Components are recomputed from the stored (rounded) rows, without per-event data for per-call figures.
    for mine, theirs in zip(again.pop("components"), expected.pop("components"), strict=True):
        assert (mine["name"], mine["sections"], mine["calls"], mine["per_call"]) == (theirs["name"], theirs["sections"], None, None)
        assert mine["busy_ns"] == pytest.approx(theirs["busy_ns"], abs=len(mine["sections"]))
        assert mine["share"] == pytest.approx(theirs["share"], abs=1e-4)
    assert again == expected
    lines = session.render("csv").splitlines()
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
