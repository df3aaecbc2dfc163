"""Benchmark the Tracy layer: eager section zones and the capture reader.

    .venv/bin/python benchmarks/bench_tracy.py [--iterations N] [--rounds R]

Prints, in one run:
  * eager section enter+exit with tracing on, in ns, reusing one marker and
    as models write it (``with sm.section(name):``, goal <= 500 ns), and its
    ratio to the bare Tracy begin+end ctypes calls a user would write by hand
    (with the C extension, sectionmark.markers._zonestack, section's enter/exit
    call the same two functions directly; without it, the fallback when no C
    compiler was present at install, through the Python zone stack and ctypes);
  * eager section enter+exit with tracing off, and its ratio to an empty
    context manager;
  * reader throughput (zones/s) on the capture this benchmark just recorded.

The timed loops run in a child process under a live headless capture: a
Tracy client without a server keeps every event in memory, which slows the
loop as it grows and is not how anyone profiles. Each figure is the best of
several rounds (variants interleaved), timed in CPU time of the measuring
thread (time.thread_time_ns), so that load from other processes does not count.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path


def _best_ns_per_iteration(loops: dict, iterations: int, rounds: int) -> dict:
    best = {name: float("inf") for name in loops}
    for _ in range(rounds):
        for name, loop in loops.items():
            start = time.thread_time_ns()
            loop(iterations)
            best[name] = min(best[name], (time.thread_time_ns() - start) / iterations)
    return best


def child(iterations: int, rounds: int, stack: str, result_path: str) -> None:
    """Timed loops; runs under the capture (IREE_PY_RUNTIME=tracy set by the parent).

    One zone stack per process, as in real use (after a swap of emitters,
    every exit also asks the previous one). The Python stack's process runs
    without the C extension, as an install without a C compiler does
    (section's enter/exit in Python too).
    """
    if stack == "python":
        sys.modules["sectionmark.markers._zonestack"] = None  # the import fails as if never built
    import sectionmark as sm
    from sectionmark.markers import marker as markers
    from sectionmark.tracy import binding, zones as tracy_zones

    tracy = binding.client()
    begin, end = tracy.zone_begin, tracy.zone_end
    location = tracy.source_location("bare")[1]
    zones = tracy_zones.TracyZones(tracy, use_c=stack == "c")
    marker = sm.section("Prefill")

    class Empty:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

    empty = Empty()

    def bare_calls(n):
        for _ in range(n):
            end(begin(location, 1))

    def with_marker(n):
        for _ in range(n):
            with marker:
                pass

    def with_new_section(n):
        for _ in range(n):
            with sm.section("Prefill"):
                pass

    def empty_cm(n):
        for _ in range(n):
            with empty:
                pass

    def traced(loop):
        def run(n):
            markers.set_zone_emitter(zones)
            try:
                loop(n)
            finally:
                markers.set_zone_emitter(None)

        return run

    best = _best_ns_per_iteration(
        {
            "bare": bare_calls,
            "on": traced(with_marker),
            "on_new": traced(with_new_section),
            "off": with_marker,
            "empty": empty_cm,
        },
        iterations,
        rounds,
    )
    Path(result_path).write_text(json.dumps(best))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--child", metavar="RESULT_JSON", help=argparse.SUPPRESS)
    parser.add_argument("--stack", choices=["c", "python"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.iterations, args.rounds, args.stack, args.child)
        return

    from sectionmark.tracy.capture import capture_command
    from sectionmark.markers import zonestack
    from sectionmark.readers.tracy_capture import read_capture

    stacks = ["c", "python"] if zonestack.c_extension_available() else ["python"]
    best = {}
    with tempfile.TemporaryDirectory() as folder:
        for stack in stacks:
            result = Path(folder) / f"{stack}.json"
            command = [sys.executable, __file__, "--iterations", str(args.iterations), "--rounds", str(args.rounds),
                       "--stack", stack, "--child", str(result)]
            capture = capture_command(command, Path(folder) / f"{stack}.tracy", timeout=600)
            best[stack] = json.loads(result.read_text())
        start = time.thread_time()
        zone_count = sum(len(track.zones) for track in read_capture(capture).tracks)
        read_s = time.thread_time() - start

    for stack in stacks:
        figures = best[stack]
        label = "C extension (section enter/exit and zone stack in C)" if stack == "c" else "no C extension (no C compiler at install)"
        print(f"{label}:")
        print(f"  eager section, tracing on : {figures['on']:7.0f} ns enter+exit "
              f"({figures['on'] / figures['bare']:.2f}x the bare Tracy begin+end ctypes calls, {figures['bare']:.0f} ns)")
        print(f"    with a new section object: {figures['on_new']:5.0f} ns (`with sm.section(name):` as written in models"
              f"{'; goal <= 500 ns' if stack == 'c' else ''})")
        print(f"  eager section, tracing off: {figures['off']:7.0f} ns enter+exit "
              f"({figures['off'] / figures['empty']:.2f}x an empty context manager, {figures['empty']:.0f} ns)")
    print(f"reader: {zone_count} zones in {read_s:.2f} s = {zone_count / read_s:,.0f} zones/s")


if __name__ == "__main__":
    main()
