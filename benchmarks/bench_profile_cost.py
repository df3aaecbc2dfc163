"""What the profiler-cost rounds cost `sectionmark profile`: the demo profiled with them and with ``--no-cost``.

The nanoGPT demo (``sectionmark demo``, built here into a temporary directory
unless ``--demo DIR`` names one that has model.vmfb and tokens.npy) is
profiled by the command a user types, ``python -m sectionmark profile
model.vmfb --input tokens.npy`` (defaults: 3 warmup + 20 calls), each run a
fresh process timed from start to exit, in ``--pairs`` interleaved pairs:
one run with the cost rounds (`measure_profiler_cost`: 5 paired rounds of an
unprofiled and a profiled run) and one with ``--no-cost``, in a random order
per pair. The second half of the pairs runs beside a CPU hog on every core
(``--no-hog``: none). Before the pairs, one run of each, untimed: the
interpreter's bytecode of sectionmark is compiled once (into a temporary
``PYTHONPYCACHEPREFIX``), as an installed package's is, so that no run
measures the compilation of sectionmark's source.

Printed per half: the median wall time of each kind, their ratio (``--no-cost``
/ with cost) and the median of the pairs' own ratios; the CPU time (user +
system, the process and its tools) of each kind as well, which moves less with
the load. Goal: ``--no-cost`` takes at most half the wall time of the profile
with the cost rounds, in both halves.

Usage: python benchmarks/bench_profile_cost.py [--demo out] [--pairs 16] [--no-hog]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from load import Hog  # benchmarks/load.py

GOAL = 0.5  # --no-cost / with the cost rounds, wall time


def build_demo(directory: Path, environment: dict[str, str]) -> None:
    """The demo's model.vmfb and tokens.npy (the demo command itself, one short profile included)."""
    subprocess.run([sys.executable, "-m", "sectionmark", "demo", "--out", str(directory), "-n", "1", "--warmup", "0"],
                   check=True, stdout=subprocess.DEVNULL, env=environment)


def timed_profile(demo: Path, cost: bool, environment: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process and its children) of one ``sectionmark profile`` of the demo."""
    command = [sys.executable, "-m", "sectionmark", "profile", "model.vmfb", "--input", "tokens.npy"]
    started = time.perf_counter()
    process = subprocess.Popen(command + ([] if cost else ["--no-cost"]), cwd=demo, env=environment,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _pid, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    error = process.stderr.read().decode(errors="replace")
    process.stderr.close()
    if process.returncode != 0:
        raise SystemExit(f"sectionmark profile failed ({process.returncode}): {error.strip()}")
    # The tools it ran are its children: their CPU time is counted in the process's own children's.
    return wall, usage.ru_utime + usage.ru_stime


def half(name: str, measured: list[tuple[tuple[float, float], tuple[float, float]]]) -> bool:
    """Print one half's medians and ratios; whether its wall-time ratio meets the goal."""
    with_cost = statistics.median(pair[0][0] for pair in measured)
    without = statistics.median(pair[1][0] for pair in measured)
    paired = statistics.median(pair[1][0] / pair[0][0] for pair in measured)
    cpu_cost = statistics.median(pair[0][1] for pair in measured)
    cpu_without = statistics.median(pair[1][1] for pair in measured)
    ratio = without / with_cost
    print(f"{name:6s} {len(measured):2d} pairs: wall with cost {with_cost:.3f} s, --no-cost {without:.3f} s: "
          f"{ratio:.2f}x (median of the pairs' ratios {paired:.2f}x); CPU {cpu_cost:.3f} s vs {cpu_without:.3f} s: "
          f"{cpu_without / cpu_cost:.2f}x")
    return ratio <= GOAL


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demo", type=Path, help="a demo output directory with model.vmfb and tokens.npy "
                        "(default: build one in a temporary directory)")
    parser.add_argument("--pairs", type=int, default=16, help="interleaved pairs, half of them beside the hog "
                        "(default: 16)")
    parser.add_argument("--no-hog", action="store_true", help="no CPU hog in the second half")
    parser.add_argument("--seed", type=int, default=0, help="seed of the order within each pair (default: 0)")
    args = parser.parse_args()
    if args.pairs < 2:
        parser.error("--pairs must be at least 2")

    order = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="bench-profile-cost-") as scratch:
        environment = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
        environment["PYTHONPYCACHEPREFIX"] = str(Path(scratch) / "pycache")
        demo = args.demo
        if demo is None:
            demo = Path(scratch) / "demo"
            print("building the demo model ...", flush=True)
            build_demo(demo, environment)
        demo = demo.resolve()
        for cost in (True, False):  # untimed: sectionmark's bytecode compiled, the tools' files in the page cache
            timed_profile(demo, cost, environment)
        print(f"demo: {demo}; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; each pair one "
              "`sectionmark profile model.vmfb --input tokens.npy` with the cost rounds and one with --no-cost, "
              "in a random order", flush=True)
        quiet = args.pairs if args.no_hog else args.pairs // 2
        met = [half("quiet", pairs(demo, quiet, order, environment, ""))]
        if quiet < args.pairs:
            with Hog():
                met.append(half("hog", pairs(demo, args.pairs - quiet, order, environment, " (hog)")))
        print(f"goal: --no-cost at most {GOAL:g}x the wall time with the cost rounds, quiet and beside the hog: "
              f"{'met' if all(met) else 'NOT met'}")


def pairs(demo: Path, count: int, order: random.Random, environment: dict[str, str],
          label: str) -> list[tuple[tuple[float, float], tuple[float, float]]]:
    """``count`` pairs, each (with cost, --no-cost) as (wall, CPU) seconds, in a random order within the pair."""
    measured_pairs = []
    for index in range(count):
        kinds = [True, False]
        order.shuffle(kinds)
        measured = {cost: timed_profile(demo, cost, environment) for cost in kinds}
        measured_pairs.append((measured[True], measured[False]))
        print(f"  pair {index + 1:2d}{label}: with cost {measured[True][0]:.3f} s, --no-cost {measured[False][0]:.3f} s",
              flush=True)
    return measured_pairs


if __name__ == "__main__":
    main()
