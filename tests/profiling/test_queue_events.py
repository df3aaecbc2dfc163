"""Time outside dispatches and device memory, on real profiles of tiny modules (queue and memory events)."""

from __future__ import annotations

import dataclasses
import json
import subprocess

import numpy as np
import pytest

import sectionmark.compiler as smc
from sectionmark.workflows import measure as profiling
from sectionmark.artifacts import tools
from sectionmark.profiling.attribute import attribute
from sectionmark.profiling.session import UNTIMED_TRANSFERS_NOTE, ProfileSession
from sectionmark.readers.event_model import Provenance
from sectionmark.readers.ireeprof import read_profile
from invariants import assert_profile_invariants

# One transient (the 32x128 f32 product: 16 KiB) and one result (32x16 f32: 2 KiB) per call.
KNOWN_SIZES = """
func.func @main(%x: tensor<32x64xf32>, %w: tensor<64x128xf32>, %v: tensor<128x16xf32>) -> tensor<32x16xf32> {
  %c0 = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<32x128xf32>
  %z1 = linalg.fill ins(%c0 : f32) outs(%e1 : tensor<32x128xf32>) -> tensor<32x128xf32>
  %m = linalg.matmul ins(%x, %w : tensor<32x64xf32>, tensor<64x128xf32>) outs(%z1 : tensor<32x128xf32>) -> tensor<32x128xf32> loc("sectionmark:Up"("k.py":1:0))
  %e2 = tensor.empty() : tensor<32x16xf32>
  %z2 = linalg.fill ins(%c0 : f32) outs(%e2 : tensor<32x16xf32>) -> tensor<32x16xf32>
  %r = linalg.matmul ins(%m, %v : tensor<32x128xf32>, tensor<128x16xf32>) outs(%z2 : tensor<32x16xf32>) -> tensor<32x16xf32> loc("sectionmark:Down"("k.py":2:0))
  return %r : tensor<32x16xf32>
}
"""
TRANSIENT_BYTES, RESULT_BYTES = 32 * 128 * 4, 32 * 16 * 4

# A command buffer with a copy (concatenation) and a fill beside one dispatch.
FILL_COPY = """
func.func @main(%a: tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<16x16xf32>) {
  %c = arith.constant 3.0 : f32
  %e = tensor.empty() : tensor<8x16xf32> loc("sectionmark:Fill"("x.py":3:0))
  %f = linalg.fill ins(%c : f32) outs(%e : tensor<8x16xf32>) -> tensor<8x16xf32> loc("sectionmark:Fill"("x.py":3:0))
  %n = arith.negf %a : tensor<8x16xf32> loc("sectionmark:Neg"("x.py":4:0))
  %cat = tensor.concat dim(0) %a, %n : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<16x16xf32> loc("sectionmark:Concat"("x.py":5:0))
  return %f, %cat : tensor<8x16xf32>, tensor<16x16xf32>
}
"""
CALLS, WARMUP = 6, 2


@pytest.fixture(scope="module")
def known_sizes(tmp_path_factory):
    directory = tmp_path_factory.mktemp("known")
    rng = np.random.default_rng(0)
    args = [rng.random(shape, np.float32) for shape in ((32, 64), (64, 128), (128, 16))]
    path = directory / "run.ireeprof"
    session = profiling.profile(smc.compile(KNOWN_SIZES), args, iterations=CALLS, warmup=WARMUP, quiet=True,
                                keep_profile=path)
    return session, path


def test_dispatch_time_and_time_outside_dispatches_add_up_to_the_call_time(known_sizes):
    session, _path = known_sizes
    assert_profile_invariants(session)
    timing = session.call_time
    assert timing is not None
    assert sum(timing.rows.values()) == pytest.approx(timing.call_ns, rel=0.01)
    assert timing.dispatch_ns == session.wall_ns
    assert timing.allocation_ns > 0  # two queue allocas and a dealloca per call, each timed
    assert timing.execute_ns >= timing.dispatch_ns + timing.command_buffer_gap_ns


def test_memory_matches_the_modules_known_allocations(known_sizes):
    session, _path = known_sizes
    memory = session.memory
    assert memory is not None
    assert memory.allocations == 2 * CALLS
    assert memory.allocated_bytes == CALLS * (TRANSIENT_BYTES + RESULT_BYTES)
    # the transient and the result are live together while the second matmul runs
    assert memory.peak_bytes == TRANSIENT_BYTES + RESULT_BYTES
    assert RESULT_BYTES <= memory.average_bytes <= memory.peak_bytes


def test_the_breakdown_is_shown_under_the_table_and_kept_in_json(known_sizes):
    session, _path = known_sizes
    text = session.table()
    assert "call time" in text and "dispatches" in text
    assert "device memory: peak 18.0 KiB" in text
    back = ProfileSession.from_json(json.loads(json.dumps(session.to_json())))
    assert back.call_time == session.call_time and back.memory == session.memory
    assert_profile_invariants(back)


def test_bundle_and_exported_jsonl_give_the_same_breakdown(known_sizes, tmp_path):
    session, path = known_sizes
    jsonl = tmp_path / "run.jsonl"
    subprocess.run([str(tools.find_tool("iree-profile")), "export", "--format=ireeperf-jsonl", f"--output={jsonl}",
                    str(path)], check=True, capture_output=True)
    bundle = profiling.report(path, session_map(path), calls=CALLS + WARMUP, warmup=WARMUP)
    exported = profiling.report(jsonl, session_map(path), calls=CALLS + WARMUP, warmup=WARMUP)
    assert bundle.call_time == exported.call_time == session.call_time
    assert bundle.memory == exported.memory == session.memory


def session_map(path):
    """The map of KNOWN_SIZES (compiling again gives the same module)."""
    return smc.compile(KNOWN_SIZES).section_map


def test_fills_and_copies_in_a_command_buffer_are_inside_its_execution(tmp_path):
    """local-task times fills and copies of a command buffer only as part of its execution span."""
    session = profiling.profile(smc.compile(FILL_COPY), [np.ones((8, 16), np.float32)], iterations=4, warmup=1,
                                quiet=True)
    assert_profile_invariants(session)
    timing = session.call_time
    assert timing is not None and timing.command_buffer_gap_ns > 0
    assert timing.dispatch_ns + timing.command_buffer_gap_ns <= timing.execute_ns
    for path in [("Fill",), ("Concat",)]:  # their ops became a fill or copy command beside the dispatch
        assert session.section(path).note == UNTIMED_TRANSFERS_NOTE
    assert session.section(("Neg",)).note is None


def test_submissions_rebuilt_from_dispatch_zones_give_no_call_time_or_memory(known_sizes):
    """A capture's submissions are spans of dispatch zones, not queue operations: nothing is made up from them."""
    _session, path = known_sizes
    traced = dataclasses.replace(read_profile(path), provenance=Provenance("tracy", timed_submissions=False))
    section_map = session_map(path)
    session = ProfileSession.build(attribute(traced, section_map, calls=CALLS + WARMUP, warmup=WARMUP), section_map)
    assert session.call_time is None and session.memory is None
    assert "call time" not in session.table() and "device memory" not in session.table()
