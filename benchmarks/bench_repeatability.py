"""Run-to-run repeatability of per-section times, with and without the measures that reduce it.

The nanoGPT demo (examples/nanogpt/run.py, the model of scripts/demo.sh,
built here into a temporary directory unless ``--demo DIR`` names one that
has model.vmfb and tokens.npy) is profiled ``--runs`` times (5: `sm.profile`
with ``runs=5``, ``-n 40 --warmup 5`` as a user would run it) in each
setting; per section, the coefficient of variation (sample standard
deviation / mean) of its busy time per call across the runs. Printed per
setting: the median and the worst section's CV, and the range of the total
per call.

Settings (docs/cli.md#run-to-run-variation):

* ``default``: IREE's default topology (one worker per physical core, each
  pinned to its core), 5 warmup calls;
* ``warmup 20``: 20 warmup calls;
* ``workers N``: ``--workers`` one fewer than the physical cores (at least
  1), leaving a core to the calling thread and the rest of the machine;
* ``both``: the two together.

The settings take turns, ``--rounds`` times (default 3), so that a change in
the machine's load shows in every setting rather than in one; every round is
printed with the machine's load average when it started, then the median
over the rounds.

Usage: python benchmarks/bench_repeatability.py [--demo out] [--runs 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

import numpy as np

import sectionmark as sm
from sectionmark.workflows.runner import local_task_workers

ROOT = Path(__file__).resolve().parent.parent
ITERATIONS, WARMUP, LONG_WARMUP = 40, 5, 20


def build_demo(directory: Path) -> None:
    """The demo's model.vmfb and tokens.npy (the demo itself, one short profile included)."""
    subprocess.run([sys.executable, str(ROOT / "examples" / "nanogpt" / "run.py"), "--out", str(directory), "-n", "1",
                    "--warmup", "0"], check=True, stdout=subprocess.DEVNULL)


def spread(vmfb: Path, tokens: np.ndarray, runs: int, warmup: int,
           workers: Optional[int]) -> tuple[float, float, str, float, float]:
    """(median CV, worst CV, worst section, lowest and highest total per call in µs) over ``runs`` fresh runs."""
    session = sm.profile(vmfb, args=(tokens,), iterations=ITERATIONS, warmup=warmup, runs=runs, workers=workers,
                         quiet=True)
    variation = {row.name: row.runs.coefficient_of_variation for row in session.sections if row.dispatched}
    worst = max(variation, key=variation.get)
    totals = session.total_runs.values_ns
    return statistics.median(variation.values()), variation[worst], worst, min(totals) / 1e3, max(totals) / 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demo", type=Path, help="a demo output directory with model.vmfb and tokens.npy "
                        "(default: build one in a temporary directory)")
    parser.add_argument("--runs", type=int, default=5, help="fresh runs per setting (default: 5)")
    parser.add_argument("--rounds", type=int, default=3, help="times each setting is measured, in turns (default: 3)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-repeatability-") as scratch:
        demo = args.demo
        if demo is None:
            demo = Path(scratch)
            print("building the demo model ...", flush=True)
            build_demo(demo)
        vmfb, tokens = demo / "model.vmfb", np.load(demo / "tokens.npy")
        fewer = max(local_task_workers() - 1, 1)
        settings = {"default": (WARMUP, None), f"warmup {LONG_WARMUP}": (LONG_WARMUP, None),
                    f"workers {fewer}": (WARMUP, fewer), "both": (LONG_WARMUP, fewer)}
        print(f"demo profiled {args.runs} times per setting (-n {ITERATIONS}); {local_task_workers()} physical cores; "
              f"CV = standard deviation / mean of a section's busy time per call across the runs")
        results: dict[str, list[tuple]] = {name: [] for name in settings}
        for round_ in range(args.rounds):
            print(f"round {round_ + 1}: load average {os.getloadavg()[0]:.1f} (the machine's other work)")
            for name, (warmup, workers) in settings.items():
                median, worst, section, low, high = spread(vmfb, tokens, args.runs, warmup, workers)
                results[name].append((median, worst))
                print(f"round {round_ + 1}  {name:10s}  median CV {median:6.1%}  worst {worst:6.1%} ({section})  "
                      f"total/call {low:.1f}-{high:.1f} µs", flush=True)
        print(f"\nmedian over {args.rounds} rounds:")
        for name, values in results.items():
            medians, worsts = zip(*values)
            print(f"  {name:10s}  median CV {statistics.median(medians):6.1%}  worst CV {statistics.median(worsts):6.1%}")


if __name__ == "__main__":
    main()
