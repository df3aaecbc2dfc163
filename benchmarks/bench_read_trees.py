"""The cold read of `bench_attribution.py` by two checkouts of sectionmark on the same kept profiles, alternating.

A change to the read path is measured against the code before it in one sitting: each round reads every profile
once with each checkout (a fresh process's first ``sm.report``, as `bench_attribution.py` measures it: its
``--measure`` child, run with the checkout's own ``src`` and benchmark) and once with ``iree-profile dispatch``,
the order rotating from round to round, so that a machine other work loads weighs on all three alike. Printed:
each run's wall and CPU seconds, then per profile and reader the best and median over the rounds and their ratio
to ``iree-profile dispatch``'s best and median, and the peak RSS.

The profiles (as `bench_attribution.py` makes them: a chain of 16x16 matmuls, 50 dispatches per call, every 5th
fused across two sections; each also with its submissions moved to overlap, ``.pipelined``) are made once in
``--keep`` by the first checkout and read again by later runs.

Usage: PYTHONPATH=src python benchmarks/bench_read_trees.py BEFORE AFTER [--events 1000000,10000000] [--rounds 5]
       [--keep DIR]   e.g. BEFORE /work/main, AFTER . (a worktree of the change)
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from sectionmark.artifacts.tools import find_tool


def make_profiles(checkout: Path, keep: Path, sizes: list[int], dispatches: int) -> list[tuple[Path, int]]:
    """The profiles of ``sizes`` dispatch events in ``keep`` (made there once, with ``checkout``'s code), each
    with its pipelined copy and their pickled section maps: (profile, calls) pairs."""
    profiles = []
    for size in sizes:
        calls = -(-size // dispatches)
        plain = keep / f"events{size}.ireeprof"
        pipelined = plain.with_name(plain.stem + ".pipelined.ireeprof")
        if not (plain.with_suffix(".map.pickle").exists() and pipelined.with_suffix(".map.pickle").exists()):
            maker = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import bench_read_trees as b; "
                     f"b.write_profile({str(plain)!r}, {calls}, {dispatches})")
            subprocess.run([sys.executable, "-c", maker], check=True,
                           env={**os.environ, "PYTHONPATH": str(checkout / "src")})
        profiles += [(plain, calls), (pipelined, calls)]
    return profiles


def write_profile(path: str, calls: int, dispatches: int) -> None:
    """`bench_attribution.py`'s profile of ``calls`` calls, its pipelined copy and both maps (pickled)."""
    import numpy as np
    from bench_attribution import CPU_FLAGS, SIZE, chain_module, pipelined_copy, run_benchmark_tool, section_map_for
    from iree.compiler import compile_str

    from sectionmark.workflows.runner import benchmark_command, write_inputs

    profile = Path(path)
    vmfb = profile.with_suffix(".vmfb")
    vmfb.write_bytes(compile_str(chain_module(dispatches), extra_args=CPU_FLAGS))
    rng = np.random.default_rng(0)
    inputs = write_inputs([rng.random((SIZE, SIZE), np.float32) * 0.1 for _ in range(2)], profile.parent)
    run_benchmark_tool(benchmark_command(vmfb, "main", inputs, device="local-task", calls=calls, profile_path=profile))
    for made in (profile, pipelined_copy(profile)):
        made.with_suffix(".map.pickle").write_bytes(pickle.dumps(section_map_for(made)))


def cold_read(checkout: Path, profile: Path, calls: int) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MB) of ``checkout``'s first report of ``profile`` in a fresh process."""
    result = subprocess.run(
        [sys.executable, str(checkout / "benchmarks" / "bench_attribution.py"), "--measure", str(profile), "--map",
         str(profile.with_suffix(".map.pickle")), "--calls", str(calls), "--repeat", "0"],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(checkout / "src")})
    if result.returncode:
        raise SystemExit(f"{checkout}: the measuring process failed:\n{result.stderr}")
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    return figures["first_s"], figures["first_cpu_s"], figures["peak_mb"]


def iree_profile_dispatch(tool: str, profile: Path) -> tuple[float, float, float]:
    """(wall s, CPU s, 0) of ``iree-profile dispatch`` on ``profile``."""
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run([tool, "dispatch", str(profile)], capture_output=True, check=True)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path, help="the checkout before the change (a sectionmark worktree)")
    parser.add_argument("after", type=Path, help="the checkout after it")
    parser.add_argument("--events", default="1000000,10000000", help="dispatch events of each profile, comma-separated")
    parser.add_argument("--dispatches", type=int, default=50, help="dispatches per call")
    parser.add_argument("--rounds", type=int, default=5, help="reads of every profile by each reader")
    parser.add_argument("--keep", type=Path, default=Path("/tmp/sectionmark-read-profiles"),
                        help="where the profiles are made once and kept")
    options = parser.parse_args()
    checkouts = {"before": options.before.resolve(), "after": options.after.resolve()}
    options.keep.mkdir(parents=True, exist_ok=True)
    profiles = make_profiles(checkouts["before"], options.keep, [int(text) for text in options.events.split(",")],
                             options.dispatches)
    tool = str(find_tool("iree-profile"))
    runs: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    for round_number in range(options.rounds):
        for profile, calls in profiles:
            readers = [*((name, lambda c=checkout, p=profile, n=calls: cold_read(c, p, n))
                         for name, checkout in checkouts.items()),
                       ("iree-profile", lambda p=profile: iree_profile_dispatch(tool, p))]
            shift = round_number % len(readers)
            for name, read in readers[shift:] + readers[:shift]:
                wall, cpu, peak = read()
                runs.setdefault((profile.name, name), []).append((wall, cpu, peak))
                print(f"round {round_number} {profile.name} {name}: wall {wall:.3f} s, CPU {cpu:.3f} s, peak "
                      f"{peak:.0f} MB, load average {os.getloadavg()[0]:.1f}", flush=True)
    print("best / median over the rounds (ratio to iree-profile dispatch's best / median):")
    for profile, _calls in profiles:
        reference = runs[(profile.name, "iree-profile")]
        for name in (*checkouts, "iree-profile"):
            line = f"  {profile.name:32s} {name:12s}"
            for column, what in ((0, "wall"), (1, "CPU")):
                values, base = [run[column] for run in runs[(profile.name, name)]], [run[column] for run in reference]
                best, median = min(values), statistics.median(values)
                line += (f" {what} {best:.3f} / {median:.3f} s "
                         f"({best / min(base):.2f}x / {median / statistics.median(base):.2f}x)")
            if name != "iree-profile":
                line += f", peak RSS {max(run[2] for run in runs[(profile.name, name)]):.0f} MB"
            print(line)


if __name__ == "__main__":
    main()
