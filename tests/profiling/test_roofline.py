"""Roofline: peaks measured by the profiler, their cache as an input, the ceiling raised when a profile beats
it, and sections placed under them."""

from __future__ import annotations

import json
import os
import re
import signal
from types import SimpleNamespace

import pytest
from matmul_chain import chain_model
from test_kernels import MM, binding, hand_built

from sectionmark.cli import main
from sectionmark.errors import SectionmarkError
from sectionmark.workflows.peak import (
    CACHE_LIMIT, _cache_document, _write_cache, cache_path, cached_peak, iree_version, module_shapes, peak,
)
from sectionmark.profiling.roofline import (
    DRAM_KERNEL, MeasuredKernel, Peak, bounding_peak, component_roofline, roofline, roofline_text,
)
from sectionmark.workflows.runner import local_task_workers

PNG = b"\x89PNG\r\n\x1a\n"


def fake_peak(bandwidth: float = 100.0, gflops: float = 1000.0) -> Peak:
    return Peak(device="local-task", bandwidth_gb_per_s=bandwidth, dram_gb_per_s=bandwidth / 2, gflop_per_s=gflops,
                workers=2, host="h", cpu_model="cpu", iree_version="3.13.0", date="2026-01-01T00:00:00+00:00",
                load=[0.5, 0.5, 0.5], kernels=[])


def cacheable_peak(bandwidth: float = 50.0, gflops: float = 200.0) -> Peak:
    """A peak of this machine (host, workers, IREE version) whose figures are the best of its kernels, as a cache
    holds them: the 64 MiB add at ``bandwidth`` GB/s, a matmul at ``gflops`` GFLOP/s."""
    add = MeasuredKernel(DRAM_KERNEL, bytes=1 << 27, flops=float(1 << 24), best_ns=(1 << 27) / bandwidth, dispatches=9)
    matmul = MeasuredKernel("matmul 1x64x64x256", bytes=1 << 10, flops=2.0 * 64 * 64 * 256,
                            best_ns=2.0 * 64 * 64 * 256 / gflops, dispatches=9)
    import socket

    return Peak(device="local-task", bandwidth_gb_per_s=max(add.gb_per_s, matmul.gb_per_s), dram_gb_per_s=add.gb_per_s,
                gflop_per_s=max(add.gflop_per_s, matmul.gflop_per_s), workers=local_task_workers(),
                host=socket.gethostname(), cpu_model="cpu", iree_version=iree_version(),
                date="2026-01-01T00:00:00+00:00", load=[0.5, 0.25, 0.125], kernels=[add, matmul])


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
    assert bounding_peak(hand_built(), fake_peak()) == fake_peak()  # nothing above it: the peak as measured
    text = roofline_text([mlp, attn], fake_peak())
    assert "ridge 10.00" in text and " 49.2%" in text and "compute" in text and "note:" not in text


def test_the_note_names_the_kernel_a_section_ties_to_float_rounding():
    """MLP is one matmul run 3 times in 1007 ns: the section's rate (3 * flops / 1007) is one rounding above its
    kernel's (flops / (1007 / 3)); the note names the kernel, as a clean-clone run found it naming the section."""
    from test_session import synthetic

    from sectionmark.profiling.session import ProfileSession

    attribution, section_map = synthetic([(0, 335, (MM,)), (335, 671, (MM,)), (671, 1007, (MM,))])
    (matmul,) = section_map.sites
    matmul.bindings = [binding("input0", "read", [64, 64], read=16384), binding("@w", "read", [64, 64], read=16384),
                       binding("site 0 #0", "write", [64, 64], written=16384)]
    matmul.flops = 2 * 64 ** 3
    session = ProfileSession.build(attribution, section_map, function="main")
    (section,) = roofline(session, fake_peak())
    assert section.gflop_per_s > matmul.flops / (1007 / 3)  # the premise: the section is the faster by rounding
    low = fake_peak(bandwidth=1.0, gflops=1.0)
    raised = bounding_peak(session, low)
    assert re.search(r"kernel \S+ \(site 0\) ran at [\d.]+ GB/s, above the peak's 1\.0 and kernel \S+ \(site 0\) "
                     r"ran at [\d.]+ GFLOP/s", raised.raised_by)
    # ... and the ceiling is the section's rate, the fastest: no figure above 100%
    (row,) = roofline(session, low)
    assert row.bandwidth_fraction <= 1 and row.compute_fraction <= 1


def test_a_kernel_above_the_peak_becomes_the_ceiling_and_one_line_says_so():
    """A cached peak below what the profile's kernels ran at (the matmul 524 GFLOP/s, the transpose 82 GB/s): the
    ceiling is raised to them, no figure is above 100%, and the table says which kernel raised it."""
    session, low = hand_built(), fake_peak(bandwidth=10.0, gflops=100.0)
    raised = bounding_peak(session, low)
    assert raised.gflop_per_s == pytest.approx(2 * 64 ** 3 / 1000) and raised.bandwidth_gb_per_s == pytest.approx(81.92)
    assert raised.dram_gb_per_s == low.dram_gb_per_s and low.raised_by is None
    assert re.search(r"kernel \S+ \(site 0\) ran at 524\.3 GFLOP/s, above the peak's 100\.0", raised.raised_by)
    assert re.search(r"kernel \S+ \(site 1\) ran at 81\.9 GB/s, above the peak's 10\.0", raised.raised_by)
    assert bounding_peak(session, raised) == raised  # a raised ceiling bounds the profile that raised it
    rows = roofline(session, low) + component_roofline(session, low)
    assert max(max(row.bandwidth_fraction, row.compute_fraction) for row in rows) == pytest.approx(1.0)
    assert all(row.bandwidth_fraction <= 1 and row.compute_fraction <= 1 for row in rows)
    text = roofline_text(roofline(session, raised), raised)
    assert text.splitlines()[1] == raised.raised_by and max(percentages(text)) == 100.0  # nothing above
    with pytest.raises(SectionmarkError, match="needs the machine's peaks"):
        session.render("roofline")  # a renderer never measures


def test_a_roofline_without_peaks_for_the_device_is_refused_before_the_profile_runs(tmp_path, capsys):
    """Peaks are measured on local-task only: --roofline of a Vulkan profile is one line, before any run (the
    module does not even have to exist)."""
    assert main(["profile", str(tmp_path / "absent.vmfb"), "--device", "vulkan", "--roofline",
                 str(tmp_path / "r.roofline.png")]) == 1
    assert capsys.readouterr().err == ("sectionmark: error: peak measures local-task only (the CPU device sectionmark "
                                       "profiles), not 'vulkan'\n")
    assert os.listdir(tmp_path) == []


def two_blocks():
    """Block 0 / MLP and Block 1 / MLP: the same 64x64 matmul, 1000 and 3000 ns; Block 1 / Attn a transpose."""
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


def test_a_modules_heaviest_matmuls_and_copies_become_benchmark_kernels():
    """Shapes from IREE's kernel names (B x M x N x K, or M x N x K) by FLOPs; copies by bytes moved, as an add
    of the elements they write; other element types and names without a shape are left out."""
    def site(key, flops, read, written):
        return SimpleNamespace(key=key, flops=flops, bindings=[binding("a", "read", [1], read=read),
                                                               binding("b", "write", [1], written=written)])

    sites = [site("main$async_dispatch_3_batch_matmul_1x32x512x64_f32", 2.0 * 32 * 512 * 64, 139264, 65536),
             site("main$async_dispatch_9_matmul_64x64x256_f32", 2.0 * 64 ** 2 * 256, 81920, 16384),
             site("main$async_dispatch_4_batch_matmul_1x32x512x64_f32", 2.0 * 32 * 512 * 64, 139264, 65536),  # again
             site("main$async_dispatch_5_batch_matmul_4x8x8x8_f16", 2.0 * 4 * 8 ** 3, 1024, 512),
             site("main$async_dispatch_6_batch_matmul_2x8x8x8_f32", 2.0 * 2 * 8 ** 3, 1024, 512),
             site("main$async_dispatch_7_matmul_like_f32", 1e9, 1024, 512),
             site("main$async_dispatch_1_slow_memcpy", None, 8192, 8192),
             site("main$async_dispatch_2_transpose_32x64_f32", 0.0, 32768, 32768),
             site("main$async_dispatch_8_elementwise_32_f32", 32.0, 128, 128)]
    shapes = module_shapes(sites)
    assert [(shape.name, shape.matmul, shape.elements) for shape in shapes] == [
        ("module matmul 1x32x512x64", (1, 32, 512, 64), 0), ("module matmul 1x64x64x256", (1, 64, 64, 256), 0),
        ("module matmul 2x8x8x8", (2, 8, 8, 8), 0),
        ("module copy 8192 f32", None, 8192), ("module copy 2048 f32", None, 2048)]
    assert "linalg.batch_matmul" in shapes[1].mlir() and "tensor<1x64x256xf32>" in shapes[1].mlir()
    assert [argument.shape for argument in shapes[1].arguments()] == [(1, 64, 256), (1, 256, 64)]


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = cache_path()
    path.parent.mkdir(parents=True)
    return path


def refused(capsys, reason: str) -> None:
    """The cache is not used and one line on stderr says why (it is then measured again)."""
    assert cached_peak() is None
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and re.fullmatch(rf"sectionmark: peak cache .+ not used \(.*{reason}.*\): measuring again",
                                            lines[0]), lines


def test_a_cache_written_is_read_back_and_one_not_a_plausible_peak_is_refused(cache_home, capsys):
    measured = cacheable_peak()
    _write_cache(cache_home, measured)
    assert cached_peak() == measured and capsys.readouterr().err == ""
    document = _cache_document(measured)
    for change, reason in (
        ({"bandwidth_gb_per_s": "Infinity"}, "bandwidth_gb_per_s inf"),
        ({"bandwidth_gb_per_s": 1e-300}, "bandwidth_gb_per_s 1e-300 is not between"),
        ({"bandwidth_gb_per_s": True}, "bandwidth_gb_per_s True"),
        ({"gflop_per_s": -200.0}, "gflop_per_s -200.0"),
        ({"gflop_per_s": 10 ** 400}, "gflop_per_s 1000000"),
        ({"gflop_per_s": 1e6 * local_task_workers()}, "not between"),  # implausible for this machine's workers
        ({"gflop_per_s": 150.0}, "not the best of its kernels"),
        ({"date": 20260101}, "date is not a string"),
        ({"date": "yesterday"}, "not an ISO 8601"),
        ({"load": [1.0, "high", 1.0]}, "load 'high'"),
        ({"host": "another-host"}, "host 'another-host'"),
        ({"workers": local_task_workers() + 1}, "workers"),
        ({"iree_version": "2.0"}, "iree_version '2.0'"),
        ({"version": 2}, "version 2, not 3"),
        ({"kernels": [{"name": DRAM_KERNEL, "bytes": 1 << 27, "flops": 0.0, "best_ns": 0, "dispatches": 1}]},
         "best_ns 0"),
        ({"extra": 1}, "fields"),
    ):
        text = json.dumps({**document, **change}).replace('"Infinity"', "Infinity")
        cache_home.write_text(text)
        refused(capsys, re.escape(reason))
    for text, reason in (("{not json", "not JSON"), ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
                         ("\udcff", "not JSON"), ("[]", "fields")):
        cache_home.write_bytes(text.encode("utf-8", "surrogateescape"))
        refused(capsys, reason)
    cache_home.write_bytes(b" " * (CACHE_LIMIT + 1))
    refused(capsys, "more than a peak cache can be")


def test_a_cache_that_is_not_a_regular_file_is_refused_at_once(cache_home, capsys):
    """A FIFO at the cache path used to block `peak` and `--roofline` for ever, /dev/zero to fill memory."""
    def hung(_signal, _frame):
        raise TimeoutError("reading the peak cache blocked")

    previous = signal.signal(signal.SIGALRM, hung)
    try:
        signal.alarm(20)
        os.mkfifo(cache_home)
        refused(capsys, "not a regular file")
        cache_home.unlink()
        cache_home.symlink_to("/dev/zero")
        refused(capsys, "not a regular file")
        cache_home.unlink()
        cache_home.mkdir()
        refused(capsys, "not a regular file")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def leftovers(folder):
    return sorted(name for name in os.listdir(folder) if name.startswith("."))


def test_the_cache_is_written_atomically_never_through_a_symlink_and_a_failure_is_a_warning(cache_home, capsys,
                                                                                            tmp_path):
    measured, victim = cacheable_peak(), tmp_path / "victim"
    victim.write_text("precious")
    planted = cache_home.parent / f".{cache_home.name}.{os.getpid()}"  # the temporary's name was predictable
    planted.symlink_to(victim)
    cache_home.symlink_to(victim)  # at the destination: replaced by the cache, its target untouched
    _write_cache(cache_home, measured)
    assert victim.read_text() == "precious" and not cache_home.is_symlink() and cached_peak() == measured
    planted.unlink()
    assert leftovers(cache_home.parent) == [] and capsys.readouterr().err == ""
    cache_home.unlink()
    cache_home.mkdir()  # a directory at the cache file's path
    _write_cache(cache_home, measured)
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("sectionmark: warning: cannot write") and "used for this run only" in line
    assert leftovers(cache_home.parent) == []
    cache_home.rmdir()
    locked = cache_home.parent
    locked.chmod(0o500)  # a read-only folder (root writes anyway: then nothing to check)
    try:
        if not os.access(locked, os.W_OK):
            _write_cache(cache_home, measured)
            assert "warning: cannot write" in capsys.readouterr().err and leftovers(locked) == []
    finally:
        locked.chmod(0o700)
    blocked = cache_home.parent.parent / "blocked"
    blocked.write_text("a file where the cache folder should be")
    _write_cache(blocked / "sectionmark" / cache_home.name, measured)
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("sectionmark: warning: cannot cache the peak in") and "used for this run only" in line


def percentages(out: str) -> list[float]:
    return [float(value) for value in re.findall(r"(\d+\.\d)%", out.split("roofline vs peak", 1)[1])]


@pytest.mark.slow
def test_a_profile_above_the_cached_peak_raises_the_ceiling_and_writes_its_outputs(tmp_path, cache_home, capsys):
    """The chain profiled under a hand-written cache far below any machine (1 GB/s, 1 GFLOP/s): one line names
    the kernel that beat it, no figure is above 100%, the chart is written; nothing was measured (the cache
    held)."""
    import sectionmark as sm

    model, args = chain_model()
    vmfb = sm.compile(sm.torch.export(model, args=args), target="llvm-cpu").save(tmp_path / "chain.vmfb")
    sm_input = tmp_path / "x.npy"
    import numpy as np

    np.save(sm_input, args[0].numpy())
    _write_cache(cache_home, cacheable_peak(bandwidth=1.0, gflops=1.0))
    capsys.readouterr()
    chart = tmp_path / "chain.roofline.png"
    assert main(["profile", str(vmfb), "--input", str(sm_input), "-n", "20", "--roofline", str(chart)]) == 0
    captured = capsys.readouterr()
    assert chart.read_bytes()[:8] == PNG and "measuring" not in captured.err
    (line,) = [line for line in captured.out.splitlines() if line.startswith("note: ")]
    assert re.search(r"kernel \S*matmul\S* \(site \d+\) ran at [\d.]+ GFLOP/s, above the peak's 1\.0", line)
    assert "Step 1 / Down" in captured.out and max(percentages(captured.out)) == 100.0


@pytest.mark.slow
def test_an_unwritable_cache_location_warns_and_the_roofline_is_still_written(tmp_path, monkeypatch, capsys):
    """A file where the cache folder should be: the peak is measured, used, and not cached (one warning line);
    the table and the chart are written, exit 0 (it used to run the whole profile, then exit 1)."""
    import numpy as np

    import sectionmark as sm

    model, args = chain_model()
    vmfb = sm.compile(sm.torch.export(model, args=args), target="llvm-cpu").save(tmp_path / "chain.vmfb")
    np.save(tmp_path / "x.npy", args[0].numpy())
    (tmp_path / "cache").write_text("not a folder")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    chart = tmp_path / "chain.roofline.png"
    assert main(["profile", str(vmfb), "--input", str(tmp_path / "x.npy"), "--roofline", str(chart)]) == 0
    captured = capsys.readouterr()
    warnings = [line for line in captured.err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "cannot cache the peak" in warnings[0]
    assert chart.read_bytes()[:8] == PNG and "roofline vs peak" in captured.out
    assert max(percentages(captured.out)) <= 100.0
    assert sorted(os.listdir(tmp_path)) == ["cache", "chain.roofline.png", "chain.sections.json", "chain.vmfb", "x.npy"]


@pytest.mark.slow
def test_peak_command_measures_every_kernel_exactly_and_caches(tmp_path, monkeypatch, capsys):
    """What can be exact is checked exactly: each kernel's bytes and FLOPs (the kernel table's) are its shape's,
    the roofs are the best of the kernels, the DRAM figure the 64 MiB add's; a FLOP count or a time unit gone
    wrong would make a figure implausible, which the command refuses. (It used to compare the rates with numpy's
    and torch's, measured in separate runs: on a busy machine that failed, 183 against 41 GFLOP/s.)"""
    from sectionmark.workflows.peak import SHAPES

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert main(["peak", "--json", str(tmp_path / "peak.json")]) == 0
    out = capsys.readouterr().out
    assert "GB/s" in out and "GFLOP/s" in out and "at load" in out and "\nmatmul 1x512x512x512 " in out
    document = json.loads((tmp_path / "peak.json").read_text())
    measured = Peak(**{**document, "kernels": [MeasuredKernel(**kernel) for kernel in document["kernels"]]})
    assert [kernel.name for kernel in measured.kernels] == [shape.name for shape in SHAPES]
    for shape, kernel in zip(SHAPES, measured.kernels):
        if shape.matmul is None:
            assert (kernel.bytes, kernel.flops) == (8 * shape.elements, shape.elements)
        else:
            batch, m, n, k = shape.matmul
            assert (kernel.bytes, kernel.flops) == (4 * batch * (m * k + k * n + m * n), 2 * batch * m * n * k)
        assert kernel.dispatches >= 2 * shape.calls and kernel.best_ns > 0
    assert measured.bandwidth_gb_per_s == max(kernel.gb_per_s for kernel in measured.kernels)
    assert measured.gflop_per_s == max(kernel.gflop_per_s for kernel in measured.kernels)
    assert measured.dram_gb_per_s == measured.kernels[0].gb_per_s and measured.kernels[0].name == DRAM_KERNEL
    assert measured.workers == local_task_workers() and len(measured.load) == 3 and measured.raised_by is None
    assert peak() == measured and cache_path().name.endswith(f"-{measured.workers}w-iree{iree_version()}.json")
    assert main(["peak", "--device", "cuda"]) == 1 and "local-task only" in capsys.readouterr().err


@pytest.mark.slow
def test_no_nanogpt_section_or_kernel_is_above_the_peak_and_report_draws_it(tmp_path, monkeypatch, capsys):
    """`sectionmark peak --map` (the model's own heaviest kernels among the benchmarks), then the demo model:
    every figure at most 100%; a kernel that beat the measured peak is named in the one line that raises it."""
    import sectionmark as sm
    from nanogpt_builders import torch_gpt

    from sectionmark.profiling.kernels import kernels

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    model, args = torch_gpt()
    compiled = sm.compile(sm.torch.export(model, args=args), target="llvm-cpu")
    vmfb = compiled.save(tmp_path / "gpt.vmfb")
    assert main(["peak", "--map", str(vmfb)]) == 0
    assert "module matmul 1x32x512x64" in capsys.readouterr().out
    session = sm.profile(compiled, args=args, iterations=3, warmup=1, quiet=True,
                         keep_profile=tmp_path / "gpt.ireeprof")
    measured = sm.peak()
    rows = measured.roofline(session)
    assert {row.path for row in rows} >= {row.path for row in session.section_rows if row.dispatched and row.path}
    components = measured.component_roofline(session)
    assert {row.name for row in components} >= {"MLP", "Self Attention", "Layer Norm"}
    for row in rows + components:
        assert row.bandwidth_fraction <= 1 and row.compute_fraction <= 1, row
    beaten = any((row.gflop_per_s or 0) > measured.gflop_per_s or (row.gb_per_s or 0) > measured.bandwidth_gb_per_s
                 for row in kernels(session))
    assert (measured.bounding(session).raised_by is not None) == beaten
    capsys.readouterr()
    assert main(["report", str(tmp_path / "gpt.ireeprof"), "--map", str(vmfb), "--warmup", "1",
                 "--roofline", str(tmp_path / "gpt.roofline.png")]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "gpt.roofline.png").read_bytes()[:8] == PNG
    assert "roofline vs peak" in out and "Block 0" in out and max(percentages(out)) <= 100.0
    assert "\ncomponent " in out and "\nMLP " in out  # the components' rows under the sections'
