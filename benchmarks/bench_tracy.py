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
  * the capture reader's throughput (zones/s; goal >= 2M) on two captures
    recorded here: the flat one of the timed loops above (about 2M zones on
    one thread, at depth 0) and nested sections on three threads with nested
    zones on two GPU contexts; its first (cold) read in this process and the
    best of the rounds, with the C extension (sectionmark.readers._tracyread)
    and once without it; and, as the baseline measured in the same run,
    Tracy's own reader loading the same file (csvexport from shared/tools,
    C++: its CPU time, all threads), when present.

The timed loops run in a child process under a live headless capture: a
Tracy client without a server keeps every event in memory, which slows the
loop as it grows and is not how anyone profiles. Each figure is the best of
several rounds (variants interleaved), timed in CPU time of the measuring
thread (time.thread_time_ns), so that load from other processes does not count.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CSVEXPORT = Path(__file__).resolve().parents[1] / ".." / "shared" / "tools" / "tracy-csvexport-0.11.2"


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


def nested_child(blocks: int) -> None:
    """Nested zones for the reader: sections four deep on three threads, then two GPU contexts replaying layers."""
    import threading

    import sectionmark as sm
    import sectionmark.tracy as smt

    smt.enable()

    def sections(tag: str) -> None:
        for i in range(blocks):
            with sm.section(tag):
                with sm.section("Attention"):
                    with sm.section(f"head {i % 4}"):
                        pass
                with sm.section("MLP"):
                    with sm.section("gelu"):
                        with sm.section("tanh"):
                            pass

    threads = [threading.Thread(target=sections, args=(f"Block on worker {n}",)) for n in range(2)]
    for thread in threads:
        thread.start()
    sections("Block")
    for thread in threads:
        thread.join()
    for queue in range(2):
        timeline, start = smt.GpuTimeline(f"queue {queue}"), time.monotonic_ns()
        for i in range(blocks // 2):
            at = start + i * 1_000
            timeline.begin("Block", at)
            timeline.zone("matmul", at + 10, at + 400)
            timeline.begin("MLP", at + 500)
            timeline.zone("gelu", at + 600, at + 800)
            timeline.end(at + 900)
            timeline.end(at + 950)


def _zone_count_and_read_s(path: Path) -> tuple[int, float]:
    """One read: zones and CPU seconds (the capture is dropped after the timing)."""
    from sectionmark.readers.tracy_capture import read_capture

    start = time.thread_time()
    capture = read_capture(path)
    read_s = time.thread_time() - start
    return sum(len(track.zones) for track in capture.tracks), read_s


def _csvexport_s(path: Path) -> float:
    """CPU seconds (all threads) of Tracy's csvexport loading ``path`` (its per-name summary: every zone read)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([str(CSVEXPORT), str(path)], stdout=subprocess.DEVNULL, check=True, timeout=600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def reader_figures(label: str, path: Path, rounds: int) -> None:
    """Print the reader's throughput on one capture: cold, best of ``rounds``, without C, and Tracy's csvexport."""
    from sectionmark.readers import tracy_capture as reader

    zones, cold_s = _zone_count_and_read_s(path)  # first: the cold read
    best_s = min(_zone_count_and_read_s(path)[1] for _ in range(rounds))
    native, reader._native = reader._native, None
    try:
        python_s = _zone_count_and_read_s(path)[1]
    finally:
        reader._native = native
    print(f"  {label}: {zones:,} zones, {path.stat().st_size / 1e6:.1f} MB")
    print(f"    cold read {cold_s:.3f} s = {zones / cold_s / 1e6:.2f}M zones/s; best of {rounds}: {best_s:.3f} s = "
          f"{zones / best_s / 1e6:.2f}M zones/s (goal >= 2M)"
          f"{'' if native is not None else ' [C extension not built: these are the Python walks]'}")
    print(f"    without the C extension: {python_s:.3f} s = {zones / python_s / 1e6:.2f}M zones/s "
          f"({python_s / best_s:.1f}x the time)")
    if CSVEXPORT.exists():
        tracy_s = min(_csvexport_s(path) for _ in range(rounds))
        print(f"    Tracy's csvexport loads it in {tracy_s:.3f} s CPU = {zones / tracy_s / 1e6:.2f}M zones/s: "
              f"sectionmark's reader is {tracy_s / best_s:.2f}x its speed")
    else:
        print(f"    (Tracy's csvexport not found at {CSVEXPORT}: no baseline)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--child", metavar="RESULT_JSON", help=argparse.SUPPRESS)
    parser.add_argument("--stack", choices=["c", "python"], help=argparse.SUPPRESS)
    parser.add_argument("--nested-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.iterations, args.rounds, args.stack, args.child)
        return
    if args.nested_child:
        nested_child(args.iterations // 2)
        return

    from sectionmark.tracy.capture import capture_command
    from sectionmark.markers import zonestack

    stacks = ["c", "python"] if zonestack.c_extension_available() else ["python"]
    best = {}
    with tempfile.TemporaryDirectory() as folder:
        for stack in stacks:
            result = Path(folder) / f"{stack}.json"
            command = [sys.executable, __file__, "--iterations", str(args.iterations), "--rounds", str(args.rounds),
                       "--stack", stack, "--child", str(result)]
            flat = capture_command(command, Path(folder) / f"{stack}.tracy", timeout=600)
            best[stack] = json.loads(result.read_text())
        print("recording nested zones for the reader...", file=sys.stderr, flush=True)
        nested = capture_command([sys.executable, __file__, "--iterations", str(args.iterations), "--nested-child"],
                                 Path(folder) / "nested.tracy", timeout=600)
        report_markers(stacks, best)
        print("reader (sectionmark.tracy.read_capture), CPU time:")
        reader_figures("the capture of the timed loops (flat, one thread)", flat, args.rounds)
        reader_figures("nested sections on 3 threads, nested zones on 2 GPU contexts", nested, args.rounds)


def report_markers(stacks: list[str], best: dict) -> None:
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


if __name__ == "__main__":
    main()
