"""Benchmarks for per-section profiling.

1. Attribution throughput: a real profile of about 1M dispatch events (a chain
   of small matmuls, many calls) read from the .ireeprof file, attributed and
   aggregated into a ProfileSession (call-time breakdown and device memory
   included), end to end; compared with
   ``iree-profile dispatch`` (IREE's own per-function aggregation) and
   ``iree-profile export`` (the JSONL the fallback reader consumes) on the
   same file.
2. Profiling-run overhead: the same module under ``iree-benchmark-module``
   with and without ``--device_profiling_mode``.

Usage: python benchmarks/bench_attribution.py [--events 1000000] [--dispatches 50]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
from iree.compiler import compile_str

from sectionmark.profiling.attribute import attribute
from sectionmark.readers.ireeprof import read_profile
from sectionmark.profiling.runner import benchmark_command, write_inputs
from sectionmark.profiling.session import ProfileSession
from sectionmark.artifacts.tools import find_tool
from sectionmark.section_map import Command, CommandBuffer, SectionMap, Share

GOAL_EVENTS_PER_S = 5e6  # end to end, and at most GOAL_RATIO x the time of iree-profile dispatch
GOAL_RATIO = 2.0
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


def timed(function) -> tuple[float, object]:
    start = time.perf_counter()
    result = function()
    return time.perf_counter() - start, result


def run_benchmark_tool(command: list[str]) -> tuple[float, float]:
    """(wall seconds of the tool, benchmark's own mean ms per call)."""
    start = time.perf_counter()
    result = subprocess.run([*command, "--benchmark_format=json"], capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    report = json.loads(result.stdout)
    mean_ms = report["benchmarks"][0]["real_time"]
    unit = report["benchmarks"][0]["time_unit"]
    return wall, mean_ms * {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[unit]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000, help="dispatch events in the profile")
    parser.add_argument("--dispatches", type=int, default=50, help="dispatches per call")
    parser.add_argument("--repeat", type=int, default=3, help="best of N for timings")
    options = parser.parse_args()
    calls = -(-options.events // options.dispatches)

    with tempfile.TemporaryDirectory(prefix="sectionmark-bench-") as scratch:
        directory = Path(scratch)
        vmfb = directory / "chain.vmfb"
        vmfb.write_bytes(compile_str(chain_module(options.dispatches), extra_args=CPU_FLAGS))
        rng = np.random.default_rng(0)
        inputs = write_inputs([rng.random((SIZE, SIZE), np.float32) * 0.1, rng.random((SIZE, SIZE), np.float32) * 0.1],
                              directory)
        profile_path = directory / "big.ireeprof"

        plain = benchmark_command(vmfb, "main", inputs, device="local-task", calls=calls, profile_path=None)
        profiled = benchmark_command(vmfb, "main", inputs, device="local-task", calls=calls, profile_path=profile_path)
        plain_wall, plain_ms = run_benchmark_tool(plain)
        profiled_wall, profiled_ms = run_benchmark_tool(profiled)
        size_mb = profile_path.stat().st_size / 1e6

        section_map = section_map_for(profile_path)

        def end_to_end() -> ProfileSession:
            return ProfileSession.build(attribute(read_profile(profile_path), section_map, calls=calls), section_map)

        ours = min(timed(end_to_end)[0] for _ in range(options.repeat))
        session = end_to_end()
        events = len(session.attribution.events)
        read_s = min(timed(lambda: read_profile(profile_path))[0] for _ in range(options.repeat))
        tool = str(find_tool("iree-profile"))
        dispatch_s = min(
            timed(lambda: subprocess.run([tool, "dispatch", str(profile_path)], capture_output=True, check=True))[0]
            for _ in range(options.repeat)
        )
        export_s, _ = timed(lambda: subprocess.run(
            [tool, "export", "--format=ireeperf-jsonl", f"--output={directory / 'big.jsonl'}", str(profile_path)],
            check=True))
        jsonl_mb = (directory / "big.jsonl").stat().st_size / 1e6
        jsonl_s, _ = timed(lambda: read_profile(directory / "big.jsonl"))

    print(f"profile: {events:,} dispatch events, {calls:,} calls x {options.dispatches} dispatches, "
          f"{size_mb:.0f} MB .ireeprof ({jsonl_mb:.0f} MB as jsonl)")
    print(f"sectionmark end to end (read .ireeprof + attribute + session): {ours:.3f} s "
          f"= {events / ours / 1e6:.2f} M events/s (read alone {read_s:.3f} s)")
    print(f"iree-profile dispatch on the same file: {dispatch_s:.3f} s "
          f"(sectionmark end to end takes {ours / dispatch_s:.1f}x as long)")
    met = events / ours >= GOAL_EVENTS_PER_S and ours / dispatch_s <= GOAL_RATIO
    print(f"goal (>= {GOAL_EVENTS_PER_S / 1e6:g} M events/s, <= {GOAL_RATIO:g}x iree-profile dispatch): "
          f"{'met' if met else 'not met'}")
    timing = session.call_time
    if timing is not None:
        rows = sum(timing.rows.values())
        print(f"call time {timing.call_ns / calls / 1e3:.1f} us/call: dispatch {timing.dispatch_ns / calls / 1e3:.1f} + "
              f"command-buffer gaps {timing.command_buffer_gap_ns / calls / 1e3:.1f} + allocation "
              f"{timing.allocation_ns / calls / 1e3:.1f} + transfers {timing.transfer_ns / calls / 1e3:.1f} + idle "
              f"{timing.idle_ns / calls / 1e3:.1f} us (rows add up to the call time within "
              f"{abs(rows - timing.call_ns) / timing.call_ns:.2e})")
    print(f"jsonl path: iree-profile export {export_s:.3f} s + jsonl reader {jsonl_s:.3f} s "
          f"= {events / (export_s + jsonl_s) / 1e6:.2f} M events/s")
    print(f"run overhead: plain {plain_ms * 1e3:.1f} us/call ({plain_wall:.2f} s wall), "
          f"profiled {profiled_ms * 1e3:.1f} us/call ({profiled_wall:.2f} s wall): "
          f"{profiled_ms / plain_ms:.2f}x per call, {profiled_wall / plain_wall:.2f}x wall")


if __name__ == "__main__":
    main()
