"""Roofline: measured peaks (against numpy on as many threads), their cache, and sections placed under them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from test_kernels import hand_built

from sectionmark.cli import main
from sectionmark.profiling.roofline import CACHE_VERSION, Peak, cache_path, peak, roofline, roofline_text

PNG = b"\x89PNG\r\n\x1a\n"


def fake_peak(bandwidth: float = 100.0, gflops: float = 1000.0) -> Peak:
    return Peak(device="local-task", bandwidth_gb_per_s=bandwidth, dram_gb_per_s=bandwidth / 2, gflop_per_s=gflops, workers=2, host="h",
                cpu_model="cpu", date="2026-01-01T00:00:00+00:00", commands=[])


def test_sections_get_bytes_flops_and_time_of_their_sites_and_the_nearer_roof():
    """hand_built: MLP runs the 64x64 matmul twice (1000 ns each), Attn one transpose (400 ns)."""
    mlp, attn = roofline(hand_built(), fake_peak())
    assert mlp.name == "MLP" and mlp.time_ns == 2000 and mlp.bytes == 2 * 49152 and mlp.flops == 2 * 2 * 64 ** 3
    assert mlp.gb_per_s == pytest.approx(49.152) and mlp.bandwidth_fraction == pytest.approx(0.49152)
    assert mlp.gflop_per_s == pytest.approx(524.288) and mlp.compute_fraction == pytest.approx(0.524288)
    assert mlp.intensity == pytest.approx(2 * 64 ** 3 / 49152) and mlp.bound == "compute"  # 10.7 > ridge 10
    assert roofline(hand_built(), fake_peak(gflops=2000.0))[0].bound == "memory"  # ridge 20
    assert attn.name == "Attn" and attn.flops == 0 and attn.intensity == 0 and attn.bound == "memory"
    assert attn.gb_per_s == pytest.approx(32768 / 400)
    text = roofline_text([mlp, attn], fake_peak())
    assert "ridge 10.00" in text and " 49.2%" in text and "compute" in text


def two_blocks():
    """Block 0 / MLP and Block 1 / MLP: the same 64x64 matmul, 1000 and 3000 ns; Block 1 / Attn a transpose."""
    from test_kernels import binding
    from test_session import synthetic

    from sectionmark.profiling.session import ProfileSession

    mlp0, mlp1, attn = ((("Block 0", "MLP"), 1.0),), ((("Block 1", "MLP"), 1.0),), ((("Block 1", "Attn"), 1.0),)
    attribution, section_map = synthetic([(0, 1000, mlp0), (1000, 4000, mlp1), (4000, 4400, attn)])
    for site in section_map.sites[:2]:
        site.bindings = [binding("input0", "read", [64, 64], read=16384), binding("@w", "read", [64, 64], read=16384),
                         binding(f"site {site.id} #0", "write", [64, 64], written=16384)]
        site.flops = 2 * 64 ** 3
    section_map.sites[2].bindings = [binding("site 1 #0", "read", [64, 64], read=16384),
                                     binding("site 2 #0", "write", [64, 64], written=16384)]
    section_map.sites[2].flops = 0.0
    return ProfileSession.build(attribution, section_map, function="main")


def test_components_sit_under_the_roofs_with_their_sections_traffic_summed():
    session, peak = two_blocks(), fake_peak()
    sections = {row.name: row for row in roofline(session, peak)}
    components = {row.name: row for row in peak.component_roofline(session)}
    assert set(components) == {"MLP", "Attn", "Block 0", "Block 1"}  # "(unmarked)" ran nothing
    mlp = components["MLP"]
    assert mlp.path is None and mlp.component == "MLP"
    assert (mlp.time_ns, mlp.bytes, mlp.flops) == (4000, 2 * 49152, 2 * 2 * 64 ** 3)
    # bandwidth of the sum, not the mean of the blocks' bandwidths
    assert mlp.gb_per_s == pytest.approx(2 * 49152 / 4000) and mlp.bandwidth_fraction == pytest.approx(0.24576)
    assert sections["Block 0 / MLP"].gb_per_s > mlp.gb_per_s > sections["Block 1 / MLP"].gb_per_s
    assert mlp.compute_fraction == pytest.approx(4 * 64 ** 3 / 4000 / 1000) and mlp.bound == "compute"
    assert components["Attn"].bound == "memory" and components["Attn"].compute_fraction == 0
    # a pattern gives one component
    (pattern,) = peak.component_roofline(session, "*/MLP")
    assert pattern.name == "*/MLP" and pattern.bytes == mlp.bytes
    text = roofline_text(list(sections.values()), peak, list(components.values()))
    section_part, component_part = text.split("\ncomponent ")
    assert "Block 0 / MLP" in section_part and "\nMLP " in component_part and "24.6%" in component_part


def test_the_chart_draws_with_sections_that_compute_nothing(tmp_path):
    path = hand_built().save(tmp_path / "run.roofline.png", peak=fake_peak())
    assert path.read_bytes()[:8] == PNG


# IREE's batch matmul (its own AVX-512 kernels) outruns the BLAS libraries' sgemm on this 2-core EPYC: 297-320
# against numpy's and torch's 113-187 GFLOP/s, 1.6-2.8x. The bound still catches a FLOP count or a time unit gone
# wrong (a factor of 2, 1000), and a reference that broke (a generic OpenBLAS kernel read 11.7).
MATMUL_RATIO = 4


def numpy_reference(threads: int) -> tuple[float, float, float]:
    """An independent measure: numpy copies of 64 MiB and 4 MiB (GB/s, read + written) and the same batch of four
    512x512 matmuls as sectionmark's (GFLOP/s; a 1024x1024 one spills the caches and reaches half of it) on
    ``threads`` BLAS threads, in a fresh interpreter (the thread count is read when numpy loads). The matmul rate
    is the better of numpy's and torch's: numpy's OpenBLAS picks its kernel by CPU model, and on one CI machine,
    whose virtual CPU names no model, it ran a generic one at 11.7 GFLOP/s where IREE reached 298; torch's BLAS
    picks by instruction set."""
    script = """
import json, time
import numpy as np
a = np.ones(16 * 1024 * 1024, np.float32); b = np.empty_like(a)
c = np.ones(1024 * 1024, np.float32); d = np.empty_like(c)
m = [np.ones((512, 512), np.float32) for _ in range(4)]  # 2-D products: BLAS in every numpy build
def best(run):
    times = []
    for _ in range(100):  # the best of many, as sectionmark's: on a shared machine only some runs are not hit
        start = time.perf_counter(); run(); times.append(time.perf_counter() - start)
    return min(times)
import sys, torch
torch.set_num_threads(int(sys.argv[1]))
t = [torch.ones(512, 512) for _ in range(4)]
print(json.dumps([2 * a.nbytes / best(lambda: np.copyto(b, a)) / 1e9, 2 * c.nbytes / best(lambda: np.copyto(d, c)) / 1e9,
                  2 * 4 * 512 ** 3 / min(best(lambda: [x @ x for x in m]), best(lambda: [x @ x for x in t])) / 1e9]))
"""
    environment = {**os.environ, "OPENBLAS_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}
    result = subprocess.run([sys.executable, "-c", script, str(threads)], capture_output=True, text=True, env=environment,
                            timeout=120, check=True)
    return tuple(json.loads(result.stdout))


def test_peak_command_measures_near_numpy_and_torch_and_caches(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert main(["peak", "--json", str(tmp_path / "peak.json")]) == 0
    out = capsys.readouterr().out
    assert "GB/s" in out and "GFLOP/s" in out and "iree-benchmark-module --device=local-task" in out
    measured = Peak(**json.loads((tmp_path / "peak.json").read_text()))
    best = numpy_reference(measured.workers)
    for _attempt in range(2):  # a busy moment lowers the reference: the best of up to three measures
        if 0.5 < measured.dram_gb_per_s / best[0] < 2 and 0.5 < measured.gflop_per_s / best[2] < MATMUL_RATIO:
            break
        best = tuple(max(pair) for pair in zip(best, numpy_reference(measured.workers)))
    dram, cached, gflops = best
    assert 0.5 < measured.dram_gb_per_s / dram < 2, (measured.dram_gb_per_s, dram)
    # The roof is the better of the two sizes, so never below the DRAM figure; the 4 MiB figure carries the
    # call's own overhead (~50 µs per call of 8 MiB moved here), so it may sit well under numpy's cache-resident
    # copy (40-60 vs 60-125 GB/s on this 2-core EPYC), never above it by 2x.
    assert measured.dram_gb_per_s <= measured.bandwidth_gb_per_s < 2 * max(dram, cached), (
        measured.bandwidth_gb_per_s, dram, cached)
    assert 0.5 < measured.gflop_per_s / gflops < MATMUL_RATIO, (measured.gflop_per_s, gflops)
    assert peak() == measured  # from the cache: the same temporary module paths
    cache_path("local-task").write_text("{not json")
    remeasured = peak()
    assert remeasured.commands != measured.commands and json.loads(cache_path("local-task").read_text())["version"] == CACHE_VERSION
    assert peak(refresh=True).commands != remeasured.commands
    assert main(["peak", "--device", "cuda"]) == 1 and "CPU devices only" in capsys.readouterr().err


@pytest.mark.slow
def test_no_nanogpt_section_beats_a_measured_peak_and_report_draws_it(tmp_path, monkeypatch, capsys):
    import sectionmark as sm
    from nanogpt_builders import torch_gpt

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    model, args = torch_gpt()
    compiled = sm.compile(sm.torch.export(model, args=args), target="llvm-cpu")
    vmfb = compiled.save(tmp_path / "gpt.vmfb")
    session = sm.profile(compiled, args=args, iterations=3, warmup=1, quiet=True,
                         keep_profile=tmp_path / "gpt.ireeprof")
    measured = sm.peak()
    rows = measured.roofline(session)
    assert {row.path for row in rows} >= {row.path for row in session.section_rows if row.dispatched and row.path}
    components = measured.component_roofline(session)
    assert {row.name for row in components} >= {"MLP", "Self Attention", "Layer Norm"}
    for row in rows + components:
        assert row.bandwidth_fraction <= 1 and row.compute_fraction <= 1, row
    capsys.readouterr()
    assert main(["report", str(tmp_path / "gpt.ireeprof"), "--map", str(vmfb), "--warmup", "1",
                 "--roofline", str(tmp_path / "gpt.roofline.png")]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "gpt.roofline.png").read_bytes()[:8] == PNG
    assert "roofline vs peak" in out and "Block 0" in out
    assert "\ncomponent " in out and "\nMLP " in out  # the components' rows under the sections'
