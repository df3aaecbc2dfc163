"""Roofline: the device's peak bandwidth and FLOP/s, and where each section sits under them.

The peaks are measured, not looked up: a GB/s or GFLOP/s figure from a data
sheet says little about what IREE's own kernels can reach through the same
driver and worker count the profile ran with. So three micro-benchmarks are
compiled with `sectionmark.compiler.compile` and run with the same
iree-benchmark-module the profiler uses (`sectionmark.artifacts.tools`):

* bandwidth: ``x + x`` over f32 tensors (bytes read + written per call), at
  two sizes: 64 MiB, far beyond the caches (the DRAM figure), and 4 MiB, which
  a last-level cache holds. The roof is the better of the two: a small model's
  tensors stay in cache, and its sections (measured: the nanoGPT's attention
  projection) go beyond the DRAM figure, which is drawn as a lower roof;
* compute: four 512x512 f32 matmuls in one batch (2·b·n³ FLOPs). Measured on a
  2-core EPYC, IREE reaches ~140 GFLOP/s on one 1024x1024 matmul (its tiles
  spill the caches) but ~250-265 on 512x512 batches, and the nanoGPT's small
  matmuls ~220: a peak from the big matmul put sections above 100%.

Each runs many repetitions and the best is kept (a peak is what the machine
can do, not what it usually does): single calls of the long benchmarks, so
that other jobs on the machine cost only the calls they hit (``DRAM_RUNS``). The result is cached per machine and device
in the user's cache directory (``$XDG_CACHE_HOME`` or ``~/.cache``, then
``sectionmark/peak-<host>-<device>.json``): measuring takes seconds, a chart
should not. A cache file that cannot be read back is measured again.

A section's achieved figures are its traffic (`sectionmark.profiling.stats.Traffic`):
the kernel table's bytes and FLOPs per execution times executions, split by
the site's section weights (the same split as its time), over the site time
so split; sites whose sizes are dynamic are left out. A component (sections
of one name summed across blocks, `sectionmark.profiling.components`) is
placed the same way with its sections' traffic summed. A row whose intensity
(FLOPs per byte) is below the ridge point (peak FLOP/s / peak bandwidth) is
nearer the memory roof, else the compute roof.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional, Sequence

from sectionmark.artifacts.tools import exit_description, find_tool, last_useful_line
from sectionmark.errors import SectionmarkError
from sectionmark.profiling import display
from sectionmark.section_path import SectionPath, format_path
from sectionmark.profiling.components import components
from sectionmark.profiling.session import ProfileSession
from sectionmark.profiling.stats import Traffic

DRAM_ELEMENTS = 16 * 1024 * 1024  # f32: 64 MiB per tensor, beyond any L3 this runs on
# 4 MiB: measured on a 2-core EPYC (32 MiB L3), x + x reaches ~60 GB/s at 4-16 MiB, ~42 at 64 MiB, and below
# 1 MiB the call's own overhead (~50 µs) dominates the time per call.
CACHE_ELEMENTS = 1024 * 1024
MATMUL_BATCH, MATMUL_N = 4, 512
# (calls per repetition, repetitions) of each benchmark; its figure is the best repetition's time per call.
# The 64 MiB add (~3 ms a call) and the matmuls (~4 ms) run one call per repetition, 100 times: local-task's
# call waits for its slowest worker, so on a machine shared with other jobs a call is fast only whole. Measured
# on a 2-core EPYC at load 8: the best of 5 means of 20 calls read 8.4 GB/s and 47.5 GFLOP/s, the best of 100
# single calls 43.0 GB/s and 144-300 GFLOP/s (quiet: ~50 GB/s, ~290 GFLOP/s; numpy's best copy at that
# load: 38.8 GB/s); the first calls, which fault in the 64 MiB output, are simply not the best. The 4 MiB
# add (~0.14 ms) runs 200 calls per repetition, 5 times: short enough to slip between other jobs.
DRAM_RUNS = (1, 100)
CACHE_RUNS = (200, 5)
MATMUL_RUNS = (1, 100)
TIMEOUT_S = 600
CPU_DEVICES = ("local-task", "local-sync")
CACHE_VERSION = 2  # 2: the DRAM figure beside the roof



def _add_mlir(elements: int) -> str:
    vector = f"tensor<{elements}xf32>"
    return f"""
func.func @main(%a: {vector}) -> {vector} {{
  %r = arith.addf %a, %a : {vector}
  return %r : {vector}
}}
"""


_MATRIX = f"tensor<{MATMUL_BATCH}x{MATMUL_N}x{MATMUL_N}xf32>"
_MATMUL_MLIR = f"""
func.func @main(%a: {_MATRIX}, %b: {_MATRIX}) -> {_MATRIX} {{
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : {_MATRIX}
  %init = linalg.fill ins(%zero : f32) outs(%empty : {_MATRIX}) -> {_MATRIX}
  %r = linalg.batch_matmul ins(%a, %b : {_MATRIX}, {_MATRIX}) outs(%init : {_MATRIX}) -> {_MATRIX}
  return %r : {_MATRIX}
}}
"""


@dataclass(frozen=True)
class Peak:
    """Measured peaks of one device on one machine, and how they were measured."""

    device: str
    bandwidth_gb_per_s: float  # bytes read + written per ns: the roof, the better of DRAM and cache-sized
    dram_gb_per_s: float  # the 64 MiB figure alone
    gflop_per_s: float
    workers: int  # local-task workers (IREE's default topology); 1 on local-sync
    host: str
    cpu_model: str
    date: str  # UTC, ISO 8601
    commands: list[str]  # the iree-benchmark-module command lines (their modules were temporary)

    @property
    def ridge(self) -> float:
        """FLOPs per byte where the two roofs meet: below it a kernel cannot be compute bound."""
        return self.gflop_per_s / self.bandwidth_gb_per_s

    def roofline(self, session) -> list["RooflineRow"]:
        """Each section of ``session`` against these peaks (`roofline`)."""
        return roofline(session, self)

    def component_roofline(self, session, by: str = "name") -> list["RooflineRow"]:
        """Each component of ``session`` against these peaks (`component_roofline`)."""
        return component_roofline(session, self, by)

    def text(self) -> str:
        """What ``sectionmark peak`` prints: the figures, what each measured, and the commands (to rerun by hand)."""
        dram_mib, cache_mib = DRAM_ELEMENTS * 4 >> 20, CACHE_ELEMENTS * 4 >> 20
        matmuls = f"{MATMUL_BATCH} x {MATMUL_N}x{MATMUL_N} f32 matmuls"
        lines = [f"peak on {self.device} ({self.cpu_model}, {self.workers} worker{'s' * (self.workers != 1)}, "
                 f"{self.host}, measured {self.date}):",
                 f"  memory bandwidth {self.bandwidth_gb_per_s:9.1f} GB/s    (the roof: the better of "
                 f"{cache_mib} MiB and {dram_mib} MiB f32 x + x, read + written / best time)",
                 f"  DRAM bandwidth   {self.dram_gb_per_s:9.1f} GB/s    ({dram_mib} MiB alone)",
                 f"  compute          {self.gflop_per_s:9.1f} GFLOP/s ({matmuls}: 2bn³ / best time)",
                 f"  ridge point      {self.ridge:9.2f} FLOPs/byte",
                 "commands:"]
        return "\n".join(lines + [f"  {command}" for command in self.commands])

    # ------------------------------------------------------------------ notebooks (repr: the figures in one line; inline: `text`)

    __repr__ = display.summary_repr
    _repr_pretty_ = display.pretty
    _repr_html_ = display.inline_html


@dataclass(frozen=True)
class RooflineRow:
    """One section's (or component's) achieved bandwidth and FLOP/s, as fractions of the peaks."""

    path: Optional[SectionPath]  # None for a component
    time_ns: float  # time of the dispatches whose bytes are known, split by section weight
    bytes: float
    flops: float
    gb_per_s: float
    gflop_per_s: float
    bandwidth_fraction: float
    compute_fraction: float
    intensity: Optional[float]  # FLOPs per byte; None when no bytes were moved
    bound: str  # "memory" or "compute": the roof nearer at this intensity
    component: Optional[str] = None  # the component's name (sections of one name summed); None for a section

    @property
    def name(self) -> str:
        return self.component if self.path is None else format_path(self.path)


def roofline(session: ProfileSession, peak: Peak) -> list[RooflineRow]:
    """One row per section of ``session`` that ran a dispatch of known size (report order, "(unmarked)" last)."""
    return [_placed(row.traffic, peak, path=row.path) for row in session.sections if _measured(row.traffic)]


def component_roofline(session: ProfileSession, peak: Peak, by: str = "name") -> list[RooflineRow]:
    """One row per component of ``session`` (`components(session, by)`, its order) that ran a dispatch of known size."""
    return [_placed(component.traffic, peak, component=component.name) for component in components(session, by)
            if _measured(component.traffic)]


def _measured(traffic: Optional[Traffic]) -> bool:
    return traffic is not None and traffic.time_ns > 0


def _placed(traffic: Traffic, peak: Peak, path: Optional[SectionPath] = None,
            component: Optional[str] = None) -> RooflineRow:
    """The traffic of a section or component against the peaks: its fractions and the nearer roof."""
    gb_per_s, gflop_per_s, intensity = traffic.gb_per_s, traffic.gflop_per_s, traffic.intensity
    return RooflineRow(
        path=path, component=component, time_ns=traffic.time_ns, bytes=traffic.bytes, flops=traffic.flops,
        gb_per_s=gb_per_s, gflop_per_s=gflop_per_s, bandwidth_fraction=gb_per_s / peak.bandwidth_gb_per_s,
        compute_fraction=gflop_per_s / peak.gflop_per_s, intensity=intensity,
        bound="memory" if intensity is None or intensity < peak.ridge else "compute",
    )


def roofline_text(rows: list[RooflineRow], peak: Peak, components: Sequence[RooflineRow] = ()) -> str:
    """The roofline as a text table (what ``--roofline`` prints beside its chart): the sections' rows, then the
    components' under a line of their own."""
    header = (f"roofline vs peak {peak.bandwidth_gb_per_s:.1f} GB/s, {peak.gflop_per_s:.1f} GFLOP/s "
              f"(ridge {peak.ridge:.2f} FLOPs/byte, {peak.device}, {peak.date[:10]})")
    width = max([len(row.name) for row in [*rows, *components]] + [9])
    lines = [header]
    for title, group in (("section", rows), ("component", components)):
        if title == "section" or group:
            lines.append(f"{title:<{width}}  {'GB/s':>8} {'% bw':>6}  {'GFLOP/s':>8} {'% flop':>6}  "
                         f"{'FLOP/B':>8}  bound")
        for row in group:
            intensity = f"{row.intensity:8.3f}" if row.intensity is not None else f"{'-':>8}"
            lines.append(f"{row.name:<{width}}  {row.gb_per_s:8.2f} {100 * row.bandwidth_fraction:5.1f}%  "
                         f"{row.gflop_per_s:8.2f} {100 * row.compute_fraction:5.1f}%  {intensity}  {row.bound}")
    return "\n".join(lines)


# ---------------------------------------------------------------------- measuring and caching


def peak(device: str = "local-task", refresh: bool = False) -> Peak:
    """The peaks of ``device`` on this machine: cached, or measured (and cached) when missing, unreadable or
    ``refresh``."""
    _check_device(device)
    path = cache_path(device)
    if not refresh:
        cached = _read_cache(path, device)
        if cached is not None:
            return cached
    measured = measure_peak(device)
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"version": CACHE_VERSION, **dataclasses.asdict(measured)}
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(json.dumps(document, indent=1), encoding="utf-8")
    os.replace(temporary, path)
    return measured


def cached_peak(device: str) -> Optional[Peak]:
    """The cached peaks of ``device``, or None when there are none (or they cannot be read)."""
    _check_device(device)
    return _read_cache(cache_path(device), device)


def peak_for_chart(device: str) -> Peak:
    """The cached peaks, else measured with a one-line note on stderr (a chart asked for them)."""
    cached = cached_peak(device)
    if cached is not None:
        return cached
    print(f"sectionmark: no peak cached for {device} on this machine: measuring it (a few seconds; "
          f"'sectionmark peak' shows it)", file=sys.stderr)
    return peak(device, refresh=True)


def cache_path(device: str) -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", f"peak-{socket.gethostname()}-{device}")
    return root / "sectionmark" / f"{name}.json"


def measure_peak(device: str = "local-task") -> Peak:
    """Measure both peaks now (no cache)."""
    from sectionmark.compiler import compile
    from sectionmark.profiling.runner import local_task_workers

    _check_device(device)
    with tempfile.TemporaryDirectory(prefix="sectionmark-peak-") as directory:
        commands = []
        times = []
        for name, mlir, inputs, (calls, repetitions) in (
            ("dram", _add_mlir(DRAM_ELEMENTS), [f"{DRAM_ELEMENTS}xf32=1"], DRAM_RUNS),
            ("cache", _add_mlir(CACHE_ELEMENTS), [f"{CACHE_ELEMENTS}xf32=1"], CACHE_RUNS),
            ("matmul", _MATMUL_MLIR, [f"{MATMUL_BATCH}x{MATMUL_N}x{MATMUL_N}xf32=1"] * 2, MATMUL_RUNS),
        ):
            module = Path(directory) / f"{name}.vmfb"
            module.write_bytes(compile(mlir, target="llvm-cpu", markers=False).vmfb)
            command = [str(find_tool("iree-benchmark-module")), f"--device={device}", f"--module={module}",
                       "--function=main", *[f"--input={value}" for value in inputs],
                       f"--benchmark_min_time={calls}x", f"--benchmark_repetitions={repetitions}",
                       "--benchmark_format=json"]
            commands.append(shlex.join(command))
            times.append(_best_seconds(command, device))
    dram, cache = (2 * 4 * elements / seconds / 1e9 for elements, seconds in zip((DRAM_ELEMENTS, CACHE_ELEMENTS), times))
    return Peak(
        device=device, bandwidth_gb_per_s=max(dram, cache), dram_gb_per_s=dram,
        gflop_per_s=2 * MATMUL_BATCH * MATMUL_N ** 3 / times[2] / 1e9,
        workers=local_task_workers() if device == "local-task" else 1, host=socket.gethostname(),
        cpu_model=_cpu_model(), date=datetime.now(timezone.utc).isoformat(timespec="seconds"), commands=commands,
    )


def _best_seconds(command: list[str], device: str) -> float:
    """The best per-call time over the repetitions of one iree-benchmark-module run."""
    from sectionmark.profiling.runner import benchmark_times_ns

    try:
        result = subprocess.run(command, capture_output=True, encoding="utf-8", errors="replace", timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise SectionmarkError(f"iree-benchmark-module did not finish within {TIMEOUT_S} s on {device}") from None
    if result.returncode != 0:
        raise SectionmarkError(f"iree-benchmark-module {exit_description(result.returncode)} on {device}: "
                               f"{last_useful_line(result.stderr)}")
    return min(benchmark_times_ns(result.stdout)) / 1e9


def _read_cache(path: Path, device: str) -> Optional[Peak]:
    """The cached Peak, or None when missing or not a valid cache of ``device`` (it is then measured again)."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        if document.pop("version") != CACHE_VERSION:
            return None
        cached = Peak(**document)
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    valid = (cached.device == device and all(isinstance(value, (int, float)) and value > 0
                                             for value in (cached.bandwidth_gb_per_s, cached.dram_gb_per_s,
                                                           cached.gflop_per_s))
             and isinstance(cached.workers, int) and isinstance(cached.commands, list))
    return cached if valid else None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return "unknown CPU"


def _check_device(device: str) -> None:
    if device not in CPU_DEVICES:
        raise SectionmarkError(f"peak measures CPU devices only ({', '.join(CPU_DEVICES)}), not {device!r}")
