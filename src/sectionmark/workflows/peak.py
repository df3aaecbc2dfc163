"""The device's peak bandwidth and FLOP/s: measured by the profiler on benchmark kernels, and cached.

The peaks are measured, not looked up, and by the instrument that measures the
sections: each benchmark kernel is compiled with `sectionmark.compiler.compile`
and profiled with `sectionmark.profiling.profile` (the same device, worker count
and HAL-native dispatch timing as a profile), and its figure is its fastest
dispatch. A peak timed over whole calls of iree-benchmark-module carried the
call's own overhead (~50 µs), and single 64x64x256 matmul dispatches of a
profile ran at 327-363 GFLOP/s above it (issue 38). The kernels (``SHAPES``):

* bandwidth: f32 ``x + x`` at 64 MiB, beyond the caches (the DRAM figure,
  drawn as a lower roof), and at 4 MiB, 256 KiB and 32 KiB, which the caches
  hold: a small model's tensors stay in cache and go beyond the DRAM figure;
* compute: one 512x512x512 matmul, one 256x256x256 and one
  64x64x256 (a 1024x1024 one spills the caches and reaches about half);
* given a module (its section map, or a profile of it): its own heaviest
  matmuls and copies, rebuilt from the kernel names and bindings the map
  records (`module_shapes`).

The bandwidth roof is the best GB/s of any kernel, the compute roof the best
GFLOP/s: a peak bounds every kernel it measured. Each kernel runs rounds of
many calls until a round no longer improves its best (a peak is what the
machine can do, not what it usually does: on a shared machine only the calls
other jobs hit are slow).

The result is cached per host, device, worker count and IREE version in the
user's cache directory (``$XDG_CACHE_HOME`` or ``~/.cache``, then
``sectionmark/peak-<host>-<device>-<workers>w-iree<version>.json``), with
when it was measured and the load average then. The cache is an input like any
other: read without blocking and bounded (`sectionmark.artifacts.files`),
validated as strictly (finite, positive, plausible on this machine,
consistent with its own kernels); one it refuses is measured again, with one
line saying why. It is written atomically under an unpredictable temporary
name (`sectionmark.outputs.write_atomic`); a location that cannot be written
is one warning line, and the peak measured is still used.

Sections and components are placed under the peaks by `sectionmark.profiling.roofline`,
which raises a peak that a profile's kernel beats (`sectionmark.profiling.roofline.bounding_peak`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import socket
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence, Union

import numpy as np

from sectionmark.artifacts.files import read_regular
from sectionmark.errors import SectionmarkError
from sectionmark.outputs import write_atomic
from sectionmark.profiling.kernels import DATA_MOVEMENT_INTENSITY, kernels
from sectionmark.profiling.roofline import DRAM_KERNEL, MeasuredKernel, Peak
from sectionmark.section_map import SectionMap

DEVICE = "local-task"  # the CPU device sectionmark profiles (IREE 3.13 cannot profile local-sync)
CACHE_VERSION = 3  # 3: measured by the profiler, its kernels, load average, keyed by workers and IREE version
CACHE_LIMIT = 1 << 20  # bytes: a cache is a few KiB; anything larger is not one
# Each kernel runs rounds of calls until a round improves its best dispatch by less than IMPROVEMENT (at least
# MIN_ROUNDS, at most MAX_ROUNDS), a round about ROUND_NS of work at the rates below, within [MIN_CALLS, MAX_CALLS].
MIN_ROUNDS, MAX_ROUNDS, IMPROVEMENT = 2, 4, 0.02
ROUND_NS, MIN_CALLS, MAX_CALLS, WARMUP = 50e6, 20, 400, 2
ESTIMATED_GB_PER_S, ESTIMATED_GFLOP_PER_S = 100.0, 200.0
MODULE_MATMULS, MODULE_COPIES = 3, 2  # a module's heaviest kernels measured beside the generic ones
# Plausible figures (a cached peak outside them is refused): at least MIN_RATE, at most these per worker thread
# (8x what one core's widest f32 FMA units or its L1 cache can do).
MIN_RATE = 0.1
MAX_GB_PER_S_PER_WORKER, MAX_GFLOP_PER_S_PER_WORKER = 1000.0, 2000.0


@dataclass(frozen=True)
class KernelShape:
    """One benchmark kernel: f32 ``x + x`` over ``elements`` values, or f32 matmuls ``(batch, m, n, k)``."""

    name: str
    elements: int = 0
    matmul: Optional[tuple[int, int, int, int]] = None

    def mlir(self, function: str = "main") -> str:
        if self.matmul is None:
            vector = f"tensor<{self.elements}xf32>"
            return (f"func.func @{function}(%a: {vector}) -> {vector} {{\n  %r = arith.addf %a, %a : {vector}\n"
                    f"  return %r : {vector}\n}}\n")
        batch, m, n, k = self.matmul
        left, right, out = (f"tensor<{batch}x{rows}x{columns}xf32>" for rows, columns in ((m, k), (k, n), (m, n)))
        return f"""func.func @{function}(%a: {left}, %b: {right}) -> {out} {{
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : {out}
  %init = linalg.fill ins(%zero : f32) outs(%empty : {out}) -> {out}
  %r = linalg.batch_matmul ins(%a, %b : {left}, {right}) outs(%init : {out}) -> {out}
  return %r : {out}
}}
"""

    def arguments(self) -> list[np.ndarray]:
        if self.matmul is None:
            return [np.ones(self.elements, np.float32)]
        batch, m, n, k = self.matmul
        return [np.ones((batch, m, k), np.float32), np.ones((batch, k, n), np.float32)]

    @property
    def calls(self) -> int:
        """Calls per round: about ``ROUND_NS`` of work, so a round of a small kernel is many dispatches."""
        if self.matmul is None:
            estimated_ns = 8 * self.elements / ESTIMATED_GB_PER_S
        else:
            estimated_ns = 2 * math.prod(self.matmul) / ESTIMATED_GFLOP_PER_S
        return int(min(MAX_CALLS, max(MIN_CALLS, ROUND_NS / estimated_ns)))


DRAM_SHAPE = KernelShape(DRAM_KERNEL, elements=16 * 1024 * 1024)
SHAPES = (
    DRAM_SHAPE,
    KernelShape("add 4 MiB", elements=1024 * 1024),
    KernelShape("add 256 KiB", elements=64 * 1024),
    KernelShape("add 32 KiB", elements=8 * 1024),
    KernelShape("matmul 1x512x512x512", matmul=(1, 512, 512, 512)),
    KernelShape("matmul 1x256x256x256", matmul=(1, 256, 256, 256)),
    KernelShape("matmul 1x64x64x256", matmul=(1, 64, 64, 256)),
)
# IREE names a dispatch after its root op and static shape: ..._batch_matmul_1x32x512x64_f32 (B x M x N x K),
# ..._matmul_32x512x64_f32 (M x N x K).
_MATMUL_KEY = re.compile(r"_(batch_)?matmul(?:_transpose_[ab])?_(\d+(?:x\d+)+)_f32(?:_|$)")


def module_shapes(sites: Iterable[Any]) -> list[KernelShape]:
    """A module's heaviest f32 matmuls (by FLOPs, shape from the kernel's name) and copies (by bytes moved) as
    benchmark kernels: ``sites`` are a section map's or a profile's dispatch sites (``key``, ``bindings``,
    ``flops``). A matmul of another element type or a name without its shape is left out."""
    matmuls: dict[tuple[int, int, int, int], float] = {}
    copies: dict[int, int] = {}
    for site in sites:
        match = _MATMUL_KEY.search(site.key or "")
        dims = tuple(int(size) for size in match.group(2).split("x")) if match else ()
        if match and len(dims) == (4 if match.group(1) else 3) and all(dims):
            shape = dims if match.group(1) else (1, *dims)
            matmuls[shape] = max(matmuls.get(shape, 0.0), 2.0 * math.prod(shape))
        sizes = [(binding.read_bytes, binding.written_bytes) for binding in site.bindings]
        if not sizes or any(None in pair for pair in sizes):
            continue
        moved = sum(read + written for read, written in sizes)
        written = sum(written for _read, written in sizes)
        if moved and (site.flops or 0.0) < DATA_MOVEMENT_INTENSITY * moved and written >= 4:
            copies[written // 4] = max(copies.get(written // 4, 0), moved)
    heaviest = sorted(matmuls, key=lambda shape: -matmuls[shape])[:MODULE_MATMULS]
    largest = sorted(copies, key=lambda elements: -copies[elements])[:MODULE_COPIES]
    return ([KernelShape(f"module matmul {'x'.join(map(str, shape))}", matmul=shape) for shape in heaviest]
            + [KernelShape(f"module copy {elements} f32", elements=elements) for elements in largest])

def peak(device: str = DEVICE, refresh: bool = False, *, workers: Optional[int] = None,
         section_map: Union[SectionMap, str, Path, None] = None) -> Peak:
    """The peaks of ``device`` on this machine with ``workers`` local-task workers (as `profile` takes it; None:
    one per physical core): cached, or measured (and cached) when missing, refused (one line says why) or
    ``refresh``. ``section_map``: a module's map (a SectionMap, a .vmfb or a .sections.json): its heaviest
    matmuls and copies are measured too (`module_shapes`), so it always measures."""
    shapes = []
    if section_map is not None:
        from sectionmark.artifacts.modules import read_section_map

        sites = (section_map if isinstance(section_map, SectionMap) else read_section_map(section_map)).sites
        shapes = module_shapes(sites)
    return _cached_or_measured(device, workers, shapes, refresh=refresh or section_map is not None)


def cached_peak(device: str = DEVICE, workers: Optional[int] = None) -> Optional[Peak]:
    """The cached peaks of ``device``, or None when there are none or the cache is refused (one line says why)."""
    check_device(device)
    count = _worker_count(workers)
    return _read_cache(cache_path(device, count), device, count)


def peak_for_chart(device: str, workers: Optional[int] = None, sites: Iterable[Any] = ()) -> Peak:
    """The cached peaks, else measured with a one-line note on stderr (a roofline asked for them), with the
    profiled module's heaviest kernels (``sites``: its dispatch sites, `module_shapes`) among those measured."""
    check_device(device)
    if not os.path.lexists(cache_path(device, _worker_count(workers))):
        _say(f"no peak cached for {device} on this machine: measuring it (seconds to a minute on a busy machine; "
             "'sectionmark peak' shows it)")
    return _cached_or_measured(device, workers, module_shapes(sites), refresh=False)


def cache_path(device: str = DEVICE, workers: Optional[int] = None) -> Path:
    """Where the peaks of ``device`` with ``workers`` (None: one per physical core) are cached: one file per host,
    device, worker count and IREE version."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    key = f"peak-{socket.gethostname()}-{device}-{_worker_count(workers)}w-iree{iree_version()}"
    return root / "sectionmark" / f"{re.sub(r'[^A-Za-z0-9._-]+', '_', key)}.json"


def iree_version() -> str:
    """The IREE runtime's version (a peak measured with another may not hold)."""
    try:
        return metadata.version("iree-base-runtime")
    except metadata.PackageNotFoundError:
        return "unknown"


def measure_peak(device: str = DEVICE, workers: Optional[int] = None, shapes: Sequence[KernelShape] = ()) -> Peak:
    """Measure the peaks now (no cache): every kernel of ``SHAPES`` and ``shapes``, each profiled in rounds
    (`_fastest`); the roofs are the best rates of any kernel."""
    from sectionmark.compiler import compile

    check_device(device)
    shapes = (*SHAPES, *shapes)
    # One module, a function per kernel: one compile (most of the time on a busy machine) for them all.
    compiled = compile("\n".join(shape.mlir(f"kernel{index}") for index, shape in enumerate(shapes)),
                       target="llvm-cpu")
    measured = [_fastest(shape, compiled, f"kernel{index}", device, workers) for index, shape in enumerate(shapes)]
    result = Peak(
        device=device, bandwidth_gb_per_s=max(kernel.gb_per_s for kernel in measured),
        dram_gb_per_s=measured[SHAPES.index(DRAM_SHAPE)].gb_per_s,
        gflop_per_s=max(kernel.gflop_per_s for kernel in measured), workers=_worker_count(workers),
        host=socket.gethostname(), cpu_model=_cpu_model(), iree_version=iree_version(),
        date=datetime.now(timezone.utc).isoformat(timespec="seconds"), load=list(os.getloadavg()), kernels=measured,
    )
    try:  # the figures a cache must hold hold for a measure too
        return _peak_from_document(_cache_document(result), device, result.workers)
    except ValueError as error:
        raise SectionmarkError(f"the peak measured on {device} is not plausible: {error}") from None


def _fastest(shape: KernelShape, compiled: Any, function: str, device: str, workers: Optional[int]) -> MeasuredKernel:
    """``shape`` (``function`` of ``compiled``) profiled in rounds of calls (one dispatch a call) until a round no
    longer improves its fastest dispatch by ``IMPROVEMENT``; its bytes and FLOPs are the kernel table's."""
    from sectionmark.workflows.measure import profile

    arguments = shape.arguments()
    best, dispatches, site = math.inf, 0, None
    for round_number in range(1, MAX_ROUNDS + 1):
        with profile(compiled, args=arguments, function=function, device=device, iterations=shape.calls,
                     warmup=WARMUP, quiet=True, workers=workers) as run:
            session = run.session
        sites = [row for row in kernels(session) if row.dispatches]
        if len(sites) != 1 or sites[0].dispatches != session.calls or sites[0].bytes is None:
            raise SectionmarkError(f"peak: the benchmark {shape.name} did not run one dispatch of known size a call "
                                   f"({len(sites)} sites)")
        site = sites[0]
        # No sections: one column (unmarked), which with one dispatch a call is each dispatch's time.
        times = session.per_call_busy[:, 0]
        fastest = float(times[times > 0].min())
        improved = fastest < best * (1 - IMPROVEMENT)
        best, dispatches = min(best, fastest), dispatches + site.dispatches
        if round_number >= MIN_ROUNDS and not improved:
            break
    return MeasuredKernel(name=shape.name, bytes=site.bytes, flops=float(site.flops or 0.0), best_ns=best,
                          dispatches=dispatches)


def _cached_or_measured(device: str, workers: Optional[int], shapes: Sequence[KernelShape], refresh: bool) -> Peak:
    check_device(device)
    count = _worker_count(workers)
    path = cache_path(device, count)
    if not refresh:
        cached = _read_cache(path, device, count)
        if cached is not None:
            return cached
    measured = measure_peak(device, workers, shapes)
    _write_cache(path, measured)
    return measured


def _write_cache(path: Path, measured: Peak) -> None:
    """Cache ``measured`` atomically (`write_atomic`: a temporary of unpredictable name created exclusively
    beside ``path``, renamed over it: a symlink there is replaced, never followed); a location that cannot be
    written is one warning line, not a failure (the peak is still used)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(_cache_document(measured), indent=1))
    except OSError as error:
        _say(f"warning: cannot cache the peak in {path}: {error.strerror or error}; it is used for this run only")
    except SectionmarkError as error:
        _say(f"warning: {error}; the peak is used for this run only")


def _cache_document(measured: Peak) -> dict[str, Any]:
    document = {"version": CACHE_VERSION, **dataclasses.asdict(measured)}
    del document["raised_by"]  # a ceiling raised by one profile is not what the machine measured
    return document


def _read_cache(path: Path, device: str, workers: int) -> Optional[Peak]:
    """The cached Peak; None when there is none, or when the file is refused (one line says why: it is then
    measured again). Read without blocking and bounded (a FIFO, a device, a huge file are refused)."""
    if not os.path.lexists(path):
        return None
    try:
        document = json.loads(read_regular(path, "peak cache", limit=CACHE_LIMIT).decode("utf-8"))
        return _peak_from_document(document, device, workers)
    except SectionmarkError as error:
        reason = str(error).removeprefix(f"cannot read peak cache {path}: ")
    except RecursionError:
        reason = "nested too deeply"
    except ValueError as error:  # not UTF-8, not JSON, or not a plausible peak of this machine
        reason = str(error) if isinstance(error, _Refused) else f"not JSON ({type(error).__name__})"
    _say(f"peak cache {path} not used ({reason}): measuring again")
    return None


class _Refused(ValueError):
    """Why a peak document is not a plausible peak of this machine, device and worker count."""


def _peak_from_document(document: Any, device: str, workers: int) -> Peak:
    """A cache document (or a measure) as a Peak, checked as strictly as any input: its fields, key (host,
    device, workers, IREE version), finite positive figures plausible for ``workers`` threads, and figures
    equal to the best of its own kernels; a `_Refused` (ValueError) says what is wrong."""
    fields = {field.name for field in dataclasses.fields(Peak)} - {"raised_by"} | {"version"}
    _require(isinstance(document, dict) and set(document) == fields, "not a peak cache's fields")
    _require(type(document["version"]) is int and document["version"] == CACHE_VERSION,
             f"version {_shown(document['version'])}, not {CACHE_VERSION}")
    for name in ("device", "host", "cpu_model", "iree_version", "date"):
        _require(isinstance(document[name], str) and len(document[name]) < 1000, f"{name} is not a string")
    for name, expected in (("device", device), ("host", socket.gethostname()), ("iree_version", iree_version())):
        _require(document[name] == expected, f"{name} {_shown(document[name])}, not {expected!r}")
    _require(type(document["workers"]) is int and document["workers"] == workers,
             f"workers {_shown(document['workers'])}, not {workers}")
    try:
        datetime.fromisoformat(document["date"])
    except ValueError:
        raise _Refused(f"date {_shown(document['date'])} is not an ISO 8601 time") from None
    load = document["load"]
    _require(isinstance(load, list) and len(load) == 3, "load is not three load averages")
    for value in load:
        _number(value, "load", 0.0, 1e6)
    measured = _kernels(document["kernels"])
    high = {"GB/s": MAX_GB_PER_S_PER_WORKER * workers, "GFLOP/s": MAX_GFLOP_PER_S_PER_WORKER * workers}
    figures = {}
    for name, unit, best in (("bandwidth_gb_per_s", "GB/s", max(kernel.gb_per_s for kernel in measured)),
                             ("dram_gb_per_s", "GB/s", next((kernel.gb_per_s for kernel in measured
                                                             if kernel.name == DRAM_KERNEL), math.nan)),
                             ("gflop_per_s", "GFLOP/s", max(kernel.gflop_per_s for kernel in measured))):
        figures[name] = _number(document[name], name, MIN_RATE, high[unit])
        _require(math.isclose(figures[name], best, rel_tol=1e-9),
                 f"{name} {figures[name]:g} is not the best of its kernels ({best:g})")
    values = {key: value for key, value in document.items() if key != "version"}
    return Peak(**{**values, **figures, "kernels": measured, "load": [float(value) for value in load]})


def _kernels(entries: Any) -> list[MeasuredKernel]:
    _require(isinstance(entries, list) and 0 < len(entries) <= 100, "kernels is not a list of kernels")
    fields = {field.name for field in dataclasses.fields(MeasuredKernel)}
    measured = []
    for entry in entries:
        _require(isinstance(entry, dict) and set(entry) == fields, "a kernel is not a kernel's fields")
        _require(isinstance(entry["name"], str) and len(entry["name"]) < 200, "a kernel's name is not a string")
        _require(type(entry["bytes"]) is int and 0 <= entry["bytes"] < 1 << 50, "a kernel's bytes are not a size")
        _require(type(entry["dispatches"]) is int and 0 < entry["dispatches"] < 1 << 40,
                 "a kernel's dispatches are not a count")
        measured.append(MeasuredKernel(name=entry["name"], bytes=entry["bytes"],
                                       flops=_number(entry["flops"], "a kernel's flops", 0.0, 1e18),
                                       best_ns=_number(entry["best_ns"], "a kernel's best_ns", 1e-3, 1e13),
                                       dispatches=entry["dispatches"]))
    return measured


def _number(value: Any, name: str, low: float, high: float) -> float:
    """``value`` as a float when it is a JSON number (not a boolean) in [``low``, ``high``], else `_Refused`."""
    try:
        number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
    except OverflowError:  # an integer of hundreds of digits
        number = math.nan
    _require(low <= number <= high, f"{name} {_shown(value)} is not between {low:g} and {high:g}")
    return number


def _require(condition: bool, reason: str) -> None:
    if not condition:
        raise _Refused(reason)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _say(line: str) -> None:
    print(f"sectionmark: {line}", file=sys.stderr)


def _worker_count(workers: Optional[int]) -> int:
    from sectionmark.workflows.runner import check_workers, local_task_workers

    check_workers(workers, DEVICE)
    return local_task_workers(workers)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return "unknown CPU"


def check_device(device: str) -> None:
    """Refuse a device the peaks cannot be measured on (before a profile that would need them runs)."""
    if device != DEVICE:
        raise SectionmarkError(f"peak measures {DEVICE} only (the CPU device sectionmark profiles), not {device!r}")

