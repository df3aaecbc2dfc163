"""Benchmarks for per-section profiling.

1. Attribution, as a user waits for it: a real profile of N dispatch events
   (a chain of small matmuls, many calls; 1M and 10M by default) read from
   the .ireeprof file, attributed and aggregated into a ProfileSession
   (call-time breakdown and device memory included), end to end, as
   ``sectionmark report`` does it (``sm.report``: in windows, keeping no event). Each size
   is measured in fresh processes: first one **cold** run (a new process's
   first call, as one `sectionmark report`) with its **peak RSS**, then the
   **best of N** runs of another process; compared with ``iree-profile
   dispatch`` (IREE's own per-function aggregation) on the same file, cold
   and best of N too. The peak RSS of the larger size is given as a multiple
   of the smaller one's (the goal: bounded memory, at most 1.5x).
2. For the first size only: ``iree-profile export`` (the JSONL the fallback
   reader consumes) and the profiling-run overhead (the same module under
   ``iree-benchmark-module`` with and without ``--device_profiling_mode``),
   beside the profiler cost that ``sm.profile`` reports for it (its own
   paired rounds of unprofiled and profiled runs of the same calls: the
   profile JSON's ``profiler_cost``, the HTML report's header).

3. ``--pipelined``: each profile again with its calls' submissions moved to overlap in time (each one's first
   dispatch starting halfway through the one before's last, as pipelined calls run), so union blocks reach
   across the reader's windows: the one read path carries its sweep over, in the same bounded memory.

4. ``--devices N``: several devices against one (`bench_devices.py`, run with the same options; ``--model gpt``:
   the 4-layer tensor-parallel GPT split over N devices against the same GPT on one, instead of a matmul chain).

Usage: python benchmarks/bench_attribution.py [--events 1000000,10000000] [--dispatches 50] [--repeat 3] [--pipelined]
       python benchmarks/bench_attribution.py --devices 8 [--events 100000,400000] [--dispatches 48] [--repeat 3]
       python benchmarks/bench_attribution.py --devices 8 --model gpt [--events 100000,400000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import pickle
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from iree.compiler import compile_str

from sectionmark.workflows.measure import profile, report
from sectionmark.readers.ireeprof import read_profile
from sectionmark.workflows.runner import benchmark_command, median_call_ns, write_inputs
from sectionmark.profiling.session import ProfileSession
from sectionmark.artifacts.tools import find_tool
from sectionmark.section_map import Command, CommandBuffer, SectionMap, Share

GOAL_RATIO = 2.0  # a cold end-to-end run: at most this many times iree-profile dispatch on the same file
CPU_FLAGS = ["--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
             "--iree-llvmcpu-target-cpu=host"]
SIZE = 16


def chain_module(count: int) -> str:
    """``count`` dependent 16x16 matmuls: one dispatch each, one barrier between each."""
    lines = [f"func.func @main(%x0: tensor<{SIZE}x{SIZE}xf32>, %w: tensor<{SIZE}x{SIZE}xf32>) -> tensor<{SIZE}x{SIZE}xf32> {{",
             "  %c0 = arith.constant 0.0 : f32",
             f"  %e = tensor.empty() : tensor<{SIZE}x{SIZE}xf32>",
             f"  %z = linalg.fill ins(%c0 : f32) outs(%e : tensor<{SIZE}x{SIZE}xf32>) -> tensor<{SIZE}x{SIZE}xf32>"]
    t = f"tensor<{SIZE}x{SIZE}xf32>"
    for i in range(count):
        lines.append(f"  %x{i + 1} = linalg.matmul ins(%x{i}, %w : {t}, {t}) outs(%z : {t}) -> {t}")
    lines += [f"  return %x{count} : {t}", "}"]
    return "\n".join(lines)


def section_map_for(profile_path: Path) -> SectionMap:
    """A map for the recorded command sequence: 4 sections, every 5th dispatch fused across two."""
    recorded = next(iter(read_profile(profile_path).command_buffers.values()))
    commands = []
    for index, op, key in recorded:
        if op != "dispatch":
            commands.append(Command(op))
            continue
        section = ("Model", f"Layer {index % 4}")
        shares = [Share(section, 1.0)] if index % 5 else [Share(section, 0.5), Share(("Model", "Fused"), 0.5)]
        commands.append(Command("dispatch", key, site=index, shares=shares))
    sections = sorted({share.path for command in commands for share in command.shares})
    return SectionMap(sections=sections, sites=[], command_buffers=[CommandBuffer(0, "main", commands)])


def pipelined_copy(profile_path: Path) -> Path:
    """A copy of the profile whose submissions overlap: each submission's host events (dispatches and execution)
    moved earlier so that its first dispatch starts halfway through the previous submission's last one."""
    import os

    from sectionmark.readers.bundle_records import records_at
    from sectionmark.readers.bundle_events import open_bundle
    from sectionmark.readers.bundle_records import HOST_EVENT

    with open(profile_path, "rb") as file:
        bundle = open_bundle(profile_path, file, os.fstat(file.fileno()).st_size)
        positions = bundle.host_event_positions()[:]

        def field(name: str) -> np.ndarray:
            return records_at(bundle.data, positions + HOST_EVENT.fields[name][1], np.dtype(HOST_EVENT.fields[name][0]))

        submission, kind = field("submission"), field("type")
        start, end = field("start_ns").astype(np.int64), field("end_ns").astype(np.int64)
        bundle.close()
    dispatch = kind == 2
    ids, rank = np.unique(submission, return_inverse=True)
    first = np.full(len(ids), np.iinfo(np.int64).max)
    np.minimum.at(first, rank[dispatch], start[dispatch])
    last = np.full(len(ids), -1)  # each submission's last-ending dispatch
    order = np.lexsort((end[dispatch], rank[dispatch]))
    rows = np.flatnonzero(dispatch)[order]
    last[rank[rows]] = rows
    has = last >= 0
    middle = np.where(has, (start[np.maximum(last, 0)] + end[np.maximum(last, 0)]) // 2, 0)
    ran = np.flatnonzero(has)  # submissions that ran dispatches (the others: queue operations, moved with them)
    step = np.zeros(len(ids), np.int64)
    step[ran[1:]] = first[ran[1:]] - middle[ran[:-1]]
    shift = np.cumsum(step)[rank]
    copy = profile_path.with_name(profile_path.stem + ".pipelined.ireeprof")
    copy.write_bytes(profile_path.read_bytes())
    patched = np.memmap(copy, np.uint8, "r+")
    for name, values in (("start_ns", start - shift), ("end_ns", end - shift)):
        offset = HOST_EVENT.fields[name][1]
        view = np.ndarray((len(patched) - 7,), "<i8", buffer=patched, strides=(1,))
        view[positions + offset] = values
    patched.flush()
    del patched
    return copy


def timed(function) -> tuple[float, object]:
    start = time.perf_counter()
    result = function()
    return time.perf_counter() - start, result


def cpu_seconds(who: int) -> float:
    """User + system CPU seconds of this process (RUSAGE_SELF) or of its waited-for children (RUSAGE_CHILDREN):
    unlike wall time, barely moved by other work on a busy machine."""
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def run_benchmark_tool(command: list[str]) -> tuple[float, float]:
    """(wall seconds of the tool, the median of its own time of each call in ms)."""
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    return wall, median_call_ns(result.stdout) / 1e6


def memory_kb(field: str) -> int:
    """A figure of /proc/self/status in kB: VmHWM is this process's peak RSS (unlike ru_maxrss, which Linux
    carries over from the parent through fork and exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise SystemExit(f"/proc/self/status has no {field} (Linux only)")


def measure(profile_path: Path, map_path: Path, calls: int, repeat: int) -> None:
    """In this (fresh) process: the first end-to-end run, then the best of ``repeat`` more; one JSON line."""
    section_map = pickle.loads(map_path.read_bytes())
    before_kb = memory_kb("VmHWM")

    def end_to_end() -> ProfileSession:  # as `sectionmark report` reads it
        return report(profile_path, section_map, calls=calls)

    cpu_before = cpu_seconds(resource.RUSAGE_SELF)
    first, session = timed(end_to_end)
    first_cpu = cpu_seconds(resource.RUSAGE_SELF) - cpu_before
    peak_kb = memory_kb("VmHWM")
    events = sum(site.dispatches for site in session.sites)
    timing = session.call_time
    del session
    best = min([timed(end_to_end)[0] for _ in range(repeat)], default=first)
    print(json.dumps({"first_s": first, "first_cpu_s": first_cpu, "best_s": best, "events": events,
                      "before_mb": before_kb / 1024,
                      "peak_mb": peak_kb / 1024,
                      "call_time": None if timing is None else {
                          "call": timing.call_ns, "dispatch": timing.dispatch_ns, "gap": timing.command_buffer_gap_ns,
                          "allocation": timing.allocation_ns, "transfer": timing.transfer_ns, "idle": timing.idle_ns,
                          "rows": sum(timing.rows.values())}}))


def fresh_process(profile_path: Path, calls: int, repeat: int) -> dict:
    """`measure` in a new Python process: its first run is cold (imports, page cache of the code, allocator).
    The section map is made here and passed pickled (it names no sites: not a valid map file): making it reads
    the profile, which the child must not do before its cold run."""
    map_path = profile_path.with_suffix(".map.pickle")
    map_path.write_bytes(pickle.dumps(section_map_for(profile_path)))
    result = subprocess.run([sys.executable, __file__, "--measure", str(profile_path), "--map", str(map_path),
                             "--calls", str(calls), "--repeat", str(repeat)], capture_output=True, text=True)
    if result.returncode:
        raise SystemExit(f"the measuring process failed:\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def iree_profile_dispatch(profile_path: Path, repeat: int) -> tuple[float, float, float]:
    """(first, best of ``repeat`` more) wall seconds of ``iree-profile dispatch`` on the file, and the CPU seconds
    of the first."""
    tool = str(find_tool("iree-profile"))
    times, cpu = [], []
    for _ in range(repeat + 1):
        cpu_before = cpu_seconds(resource.RUSAGE_CHILDREN)
        times.append(timed(lambda: subprocess.run([tool, "dispatch", str(profile_path)], capture_output=True,
                                                  check=True))[0])
        cpu.append(cpu_seconds(resource.RUSAGE_CHILDREN) - cpu_before)
    return times[0], min(times[1:], default=times[0]), cpu[0]


def measured(profile_path: Path, calls: int, options: argparse.Namespace, peaks: list[float], what: str) -> dict:
    """Measure a profile in fresh processes and against iree-profile dispatch; print the figures and the goal
    (``peaks``: the peak RSS of each profile measured so far, the first one the reference)."""
    size_mb = profile_path.stat().st_size / 1e6
    ours = fresh_process(profile_path, calls, options.repeat)
    dispatch_first, dispatch_best, dispatch_cpu = iree_profile_dispatch(profile_path, options.repeat)
    events = ours["events"]
    peaks.append(ours["peak_mb"])
    print(f"profile: {events:,} dispatch events, {what}, {size_mb:.0f} MB .ireeprof")
    print(f"  cold (a fresh process's first run: read .ireeprof + attribute + session): {ours['first_s']:.3f} s "
          f"= {events / ours['first_s'] / 1e6:.2f} M events/s; iree-profile dispatch cold {dispatch_first:.3f} s "
          f"({ours['first_s'] / dispatch_first:.1f}x)")
    print(f"  cold CPU (user + system): {ours['first_cpu_s']:.3f} s; iree-profile dispatch cold {dispatch_cpu:.3f} s "
          f"({ours['first_cpu_s'] / dispatch_cpu:.1f}x)")
    print(f"  best of {options.repeat}: {ours['best_s']:.3f} s = {events / ours['best_s'] / 1e6:.2f} M events/s; "
          f"iree-profile dispatch {dispatch_best:.3f} s ({ours['best_s'] / dispatch_best:.1f}x)")
    print(f"  peak RSS {ours['peak_mb']:.0f} MB ({ours['before_mb']:.0f} MB before reading: Python, numpy, "
          f"the modules) = {ours['peak_mb'] / peaks[0]:.2f}x the first size's; "
          f"{(ours['peak_mb'] - ours['before_mb']) * 1e6 / events / 1.048576:.0f} bytes per event")
    met = ours["first_s"] / dispatch_first <= GOAL_RATIO and ours["peak_mb"] <= 1.5 * peaks[0]
    print(f"  goal (cold <= {GOAL_RATIO:g}x iree-profile dispatch, peak RSS <= 1.5x the first size's): "
          f"{'met' if met else 'not met'}")
    return ours


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", default="1000000,10000000", help="dispatch events of each profile, comma-separated")
    parser.add_argument("--dispatches", type=int, default=50, help="dispatches per call")
    parser.add_argument("--repeat", type=int, default=3, help="best of N after the cold run")
    parser.add_argument("--pipelined", action="store_true",
                        help="also measure each profile with its submissions moved to overlap in time")
    parser.add_argument("--devices", type=int, help="several local-task devices against one instead "
                        "(benchmarks/bench_devices.py; the other options are passed on to it)")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # the child process of fresh_process
    parser.add_argument("--map", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--calls", type=int, help=argparse.SUPPRESS)
    options, _ = parser.parse_known_args()
    if options.devices is not None:  # its own benchmark, in its own process: the same options
        raise SystemExit(subprocess.run([sys.executable, str(Path(__file__).with_name("bench_devices.py")),
                                         *sys.argv[1:]]).returncode)
    options = parser.parse_args()
    if options.measure is not None:
        measure(options.measure, options.map, options.calls, options.repeat)
        return
    sizes = [int(text) for text in options.events.split(",")]

    with tempfile.TemporaryDirectory(prefix="sectionmark-bench-") as scratch:
        directory = Path(scratch)
        vmfb = directory / "chain.vmfb"
        vmfb.write_bytes(compile_str(chain_module(options.dispatches), extra_args=CPU_FLAGS))
        rng = np.random.default_rng(0)
        arrays = [rng.random((SIZE, SIZE), np.float32) * 0.1, rng.random((SIZE, SIZE), np.float32) * 0.1]
        inputs = write_inputs(arrays, directory)
        peaks = []
        for number, size in enumerate(sizes):
            calls = -(-size // options.dispatches)
            profile_path = directory / "big.ireeprof"
            profile_path.unlink(missing_ok=True)
            profiled = benchmark_command(vmfb, "main", inputs, device="local-task", calls=calls,
                                         profile_path=profile_path)
            profiled_wall, profiled_ms = run_benchmark_tool(profiled)
            ours = measured(profile_path, calls, options, peaks, f"{calls:,} calls x {options.dispatches} dispatches")
            events = ours["events"]
            timing = ours["call_time"]
            if timing is not None:
                print(f"  call time {timing['call'] / calls / 1e3:.1f} us/call: dispatch {timing['dispatch'] / calls / 1e3:.1f}"
                      f" + command-buffer gaps {timing['gap'] / calls / 1e3:.1f} + allocation "
                      f"{timing['allocation'] / calls / 1e3:.1f} + transfers {timing['transfer'] / calls / 1e3:.1f} + idle "
                      f"{timing['idle'] / calls / 1e3:.1f} us (rows add up to the call time within "
                      f"{abs(timing['rows'] - timing['call']) / timing['call']:.2e})")
            if options.pipelined:
                measured(pipelined_copy(profile_path), calls, options, peaks, "pipelined: submissions overlapping")
            if number:
                continue
            tool = str(find_tool("iree-profile"))
            export_s, _ = timed(lambda: subprocess.run(
                [tool, "export", "--format=ireeperf-jsonl", f"--output={directory / 'big.jsonl'}", str(profile_path)],
                check=True))
            jsonl_mb = (directory / "big.jsonl").stat().st_size / 1e6
            jsonl_s, _ = timed(lambda: read_profile(directory / "big.jsonl"))
            (directory / "big.jsonl").unlink()
            print(f"  jsonl path ({jsonl_mb:.0f} MB): iree-profile export {export_s:.3f} s + jsonl reader {jsonl_s:.3f} s "
                  f"= {events / (export_s + jsonl_s) / 1e6:.2f} M events/s")
            plain_wall, plain_ms = run_benchmark_tool(benchmark_command(vmfb, "main", inputs, device="local-task",
                                                                        calls=calls, profile_path=None))
            print(f"  run overhead (median call): plain {plain_ms * 1e3:.1f} us/call ({plain_wall:.2f} s wall), "
                  f"profiled {profiled_ms * 1e3:.1f} us/call ({profiled_wall:.2f} s wall): "
                  f"{profiled_ms / plain_ms:.2f}x per call, {profiled_wall / plain_wall:.2f}x wall")
            # What the report shows (profile JSON `profiler_cost`, the HTML header): sm.profile's own paired rounds.
            cost = profile(vmfb, arrays, iterations=calls, warmup=0, section_map=section_map_for(profile_path),
                           quiet=True).profiler_cost
            print(f"  report's profiler cost (sm.profile, same module and calls): profiled {cost.profiled_ns / 1e3:.1f} "
                  f"us/call, unprofiled {cost.unprofiled_ns / 1e3:.1f} us/call: {cost.ratio:.2f}x "
                  f"(interval {cost.low:.2f}-{cost.high:.2f}x over {cost.rounds} rounds), "
                  f"{abs(cost.ratio / (profiled_ms / plain_ms) - 1):.1%} from the run-overhead line")


if __name__ == "__main__":
    main()
