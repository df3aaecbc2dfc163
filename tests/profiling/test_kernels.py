"""Kernel table: per-dispatch arguments, exact bytes, FLOPs and rates (hand-built data and a real JAX model)."""

from __future__ import annotations

import csv
import io
import json

import pytest
from test_session import synthetic

from sectionmark.profiling.components import components
from sectionmark.profiling.kernels import kernels
from sectionmark.profiling.session import ProfileSession
from sectionmark.renderers import kernels as kernels_renderer
from sectionmark.section_map import Binding

MM, TRANSPOSE = (("MLP",), 1.0), (("Attn",), 1.0)


def binding(tensor, access, shape, read=0, written=0, tensor_shape=None):
    return Binding(tensor=tensor, shape=shape, tensor_shape=tensor_shape or shape, dtype="f32", access=access,
                   read_bytes=read, written_bytes=written)


def hand_built() -> ProfileSession:
    """A matmul (site 0), a transpose of its result (site 1), and the matmul's export again (site 2)."""
    attribution, section_map = synthetic([(0, 1000, (MM,)), (1000, 1400, (TRANSPOSE,)), (1400, 2400, (MM,))])
    matmul, transpose = section_map.sites
    matmul.bindings = [binding("input0", "read", [64, 64], read=16384), binding("@w", "read", [64, 64], read=16384),
                       binding("site 0 #0", "write", [64, 64], written=16384)]
    matmul.flops = 2 * 64 ** 3
    transpose.bindings = [binding("site 0 #0", "read", [64, 64], read=16384),
                          binding("site 1 #0", "write", [64, 64], written=16384)]
    transpose.flops = 0.0
    return ProfileSession.build(attribution, section_map, function="main")


def test_rows_carry_exact_bytes_rates_and_the_data_movement_flag():
    matmul, transpose = kernels(hand_built())
    assert (matmul.read_bytes, matmul.written_bytes, matmul.bytes) == (32768, 16384, 49152)
    assert matmul.dispatches == 2 and matmul.time_per_dispatch_ns == 1000
    assert matmul.gb_per_s == pytest.approx(49152 / 1000)
    assert matmul.gflop_per_s == pytest.approx(2 * 64 ** 3 / 1000)
    assert matmul.intensity == pytest.approx(2 * 64 ** 3 / 49152)
    assert not matmul.data_movement
    assert transpose.data_movement and transpose.bytes == 32768 and transpose.gb_per_s == pytest.approx(32768 / 400)


def test_unknown_sizes_stay_unknown_and_nothing_is_flagged_without_bindings():
    attribution, section_map = synthetic([(0, 100, (MM,))])
    section_map.sites[0].bindings = [binding("input0", "read", [-1, 4], read=None)]
    (row,) = kernels(ProfileSession.build(attribution, section_map, function="main"))
    assert row.read_bytes is None and row.bytes is None and row.gb_per_s is None and not row.data_movement
    attribution, section_map = synthetic([(0, 100, (MM,))])
    (row,) = kernels(ProfileSession.build(attribution, section_map, function="main"))
    assert row.bindings == [] and row.read_bytes is None and not row.data_movement


def test_renderers_show_shapes_access_and_flags():
    session = hand_built()
    text = kernels_renderer.render(session)
    assert "R input0 f32[64x64]" in text and "W site 1 #0 f32[64x64]" in text and "[data movement]" in text
    document = json.loads(session.render("json"))["kernels"]
    assert [row["site"] for row in document] == [0, 1] and document[1]["data_movement"]
    assert document[0]["bindings"][1] == {"tensor": "@w", "shape": [64, 64], "tensor_shape": [64, 64], "dtype": "f32",
                                          "access": "read", "read_bytes": 16384, "written_bytes": 0, "outputs": []}
    assert document[0]["bytes"] == document[0]["read_bytes"] + document[0]["written_bytes"]
    rows = list(csv.DictReader(io.StringIO(session.render("kernels-csv"))))
    assert rows[1]["data_movement"] == "1" and rows[0]["read_bytes"] == "32768"


# ---------------------------------------------------------------------------- real stack: JAX Griffin block


@pytest.fixture(scope="module")
def griffin(tmp_path_factory):
    """The Griffin-style block under jax.value_and_grad, compiled and profiled."""
    pytest.importorskip("jax")
    import griffin_block

    import sectionmark as sm

    exported, args = griffin_block.export()
    vmfb = sm.compile(exported, target="llvm-cpu").save(tmp_path_factory.mktemp("griffin") / "griffin.vmfb")
    session = sm.profile(vmfb, args=args, iterations=3, warmup=1)
    return session


def test_griffin_transposes_are_listed_with_shapes_bytes_and_flagged(griffin):
    from invariants import assert_profile_invariants

    assert_profile_invariants(griffin)
    rows = kernels(griffin)
    transposes = [row for row in rows if "transpose" in row.key and row.flops == 0]
    assert transposes, [row.key for row in rows]
    for row in transposes:
        assert row.data_movement and row.read_bytes > 0 and row.written_bytes > 0
        assert all(b.shape and b.dtype == "f32" for b in row.bindings)
    # Exact slices: bytes are whole loads/stores of the (first) slice shape (the recurrence loads the even and
    # odd halves of one tensor: two slices), within the tensor bound; some slices are smaller than their tensor.
    def f32_bytes(shape):
        elements = 1
        for size in shape:
            elements *= size
        return 4 * elements

    bindings = [b for row in rows for b in row.bindings]
    for b in bindings:
        for size in (b.read_bytes, b.written_bytes):
            assert size % f32_bytes(b.shape) == 0 and size <= f32_bytes(b.tensor_shape) * 2
    assert any(f32_bytes(b.shape) < f32_bytes(b.tensor_shape) for b in bindings)
    conv = [row for row in rows if "_conv_" in row.key and row.sections[0][0] == ("Conv",)]
    assert len(conv) == 1 and conv[0].flops > 0 and not conv[0].data_movement
    assert "[data movement]" in kernels_renderer.render(griffin)


# ---------------------------------------------------------------------------- traffic per section (hand-built)


def test_section_traffic_is_the_kernel_tables_bytes_and_flops_split_like_time():
    """hand_built: MLP runs the matmul twice (1000 ns each), Attn the transpose once (400 ns)."""
    session = hand_built()
    mlp, attn = session.section(("MLP",)), session.section(("Attn",))
    assert (mlp.traffic.time_ns, mlp.traffic.read_bytes, mlp.traffic.written_bytes) == (2000, 2 * 32768, 2 * 16384)
    assert mlp.traffic.flops == 2 * 2 * 64 ** 3 and mlp.traffic.gb_per_s == pytest.approx(49.152)
    assert mlp.traffic.gflop_per_s == pytest.approx(524.288) and mlp.traffic.intensity == pytest.approx(2 * 64 ** 3 / 49152)
    assert attn.traffic.bytes == 32768 and attn.traffic.flops == 0 and attn.traffic.intensity == 0
    assert session.unmarked.traffic is None and session.unmarked.working_set_bytes is None  # nothing ran there
    # the working set counts each tensor once, whole: the matmul's result is read again by the transpose
    assert (mlp.working_set_bytes, attn.working_set_bytes) == (3 * 16384, 2 * 16384)
    # every byte the kernel table moved is in exactly one top-level row
    moved = sum(row.bytes * row.dispatches for row in kernels(session))
    assert sum(row.traffic.bytes for row in session.sections if row.traffic and len(row.path) <= 1) == moved


def test_fused_traffic_is_split_by_weight_and_dynamic_sizes_are_left_out():
    fused = ((("Block", "MLP"), 0.75), (("Block", "Attn"), 0.25))
    attribution, section_map = synthetic([(0, 1000, fused), (1000, 1100, (MM,))],
                                         declared=[("Block", "MLP"), ("Block", "Attn"), ("MLP",)])
    site, dynamic = section_map.sites
    # a slice of a bigger weight: the bytes are the slice's, the working set the whole weight's
    site.bindings = [binding("@w", "read", [64, 64], read=16384, tensor_shape=[512, 64]),
                     binding("site 0 #0", "write", [64, 64], written=16384)]
    site.flops = 1e6
    dynamic.bindings = [binding("input0", "read", [-1, 64], read=None, tensor_shape=[-1, 64])]
    session = ProfileSession.build(attribution, section_map, function="main")
    mlp, attn, block = session.section(("Block", "MLP")), session.section(("Block", "Attn")), session.section(("Block",))
    assert (mlp.traffic.time_ns, mlp.traffic.bytes, mlp.traffic.flops) == (750, 0.75 * 32768, 0.75e6)
    assert (attn.traffic.time_ns, attn.traffic.bytes, attn.traffic.flops) == (250, 0.25 * 32768, 0.25e6)
    assert block.traffic.bytes == 32768 and block.traffic.gb_per_s == mlp.traffic.gb_per_s == pytest.approx(32.768)
    assert mlp.working_set_bytes == attn.working_set_bytes == 512 * 64 * 4 + 16384  # both run the fused dispatch
    assert session.section(("MLP",)).traffic is None  # only a dispatch of dynamic size: nothing known, not 0


def test_traffic_in_json_csv_the_memory_table_and_components():
    session = hand_built()
    again = ProfileSession.from_json(json.loads(json.dumps(session.to_json())))
    assert again.section(("MLP",)).traffic == session.section(("MLP",)).traffic
    assert again.section(("MLP",)).working_set_bytes == 49152
    row = session.to_json()["sections"][0]
    assert row["traffic"] == {"time_ns": 2000, "read_bytes": 65536, "written_bytes": 32768, "flops": 1048576,
                              "bytes": 98304, "gb_per_s": pytest.approx(49.152), "gflop_per_s": pytest.approx(524.288),
                              "intensity": pytest.approx(10.6667, rel=1e-4)}
    rows = list(csv.DictReader(io.StringIO(session.render("csv"))))
    assert (rows[0]["read_bytes"], rows[0]["written_bytes"], rows[0]["gb_per_s"], rows[0]["working_set_bytes"]) == (
        "65536", "32768", "49.1520", "49152")
    assert rows[2]["section"] == "(unmarked)" and rows[2]["read_bytes"] == rows[2]["working_set_bytes"] == ""
    table = session.render("table", memory=True)
    assert "Bytes/call" in table and "96.0 KiB" in table and "48.0 KiB" in table and "49.15" in table
    total = table.split("Total")[1]
    assert "128.0 KiB" in total and f"{131072 / 2400:.2f}" in total  # all top-level bytes over all sized time
    assert "Bytes/call" not in session.table()
    spans = session.render("table", span=True)
    assert "Start p50" in spans and "End p50" in spans and "2.400 µs" in spans
    mlp_component = next(component for component in components(session) if component.name == "MLP")
    assert mlp_component.traffic == session.section(("MLP",)).traffic
