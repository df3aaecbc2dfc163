"""The cost of markers, measured in one run.

1. Eager ``section`` enter+exit with no tracing, as a ratio to an empty
   no-op context manager used the same way (reused, or created in the
   ``with`` statement as models write it; goal <= 1.5 for the latter), in
   three fresh processes: neither framework imported, torch imported, JAX
   imported (each entry then reads torch's export flag or JAX's current
   trace; in C when sectionmark.markers._zonestack was built). Tracy-on
   figures: benchmarks/bench_tracy.py.
2. Export time of the small nanoGPT with sections (``sm.torch.export``) as a
   ratio to the same model without sections (plain ``aot.export``), both
   non-strict, alternated, best of N (goal <= 1.05).

Run: .venv/bin/python benchmarks/bench_markers.py [--repeats N]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import timeit
import warnings
from pathlib import Path

import sectionmark as sm  # noqa: E402


class Empty:
    __slots__ = ()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


def eager_cost_in_fresh_processes(number: int) -> None:
    for framework in ("", "torch", "jax"):
        print(f"eager cost, {'with ' + framework + ' imported' if framework else 'no framework imported'}:", flush=True)
        code = (f"import {framework}; " if framework else "") + f"import bench_markers; bench_markers.eager_cost({number})"
        subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parent)


def eager_cost(number: int = 1_000_000) -> None:
    marker, empty = sm.section("MLP"), Empty()
    stmt_reused = "with m:\n    pass"
    best = {}
    for label, stmt, env in [
        ("empty context manager (reused)", stmt_reused, {"m": empty}),
        ("section (reused object)", stmt_reused, {"m": marker}),
        ("empty context manager (new each time)", "with Empty():\n    pass", {"Empty": Empty}),
        ("section('MLP') (new each time)", "with section('MLP'):\n    pass", {"section": sm.section}),
    ]:
        best[label] = min(timeit.repeat(stmt, globals=env, number=number, repeat=5)) / number * 1e9
    for label, ns in best.items():
        print(f"  {label:<40} {ns:8.1f} ns")
    reused = best["section (reused object)"] / best["empty context manager (reused)"]
    fresh = best["section('MLP') (new each time)"] / best["empty context manager (new each time)"]
    print(f"eager enter+exit ratio, reused object: {reused:.2f}x")
    print(f"eager enter+exit ratio, section(...) in the with statement: {fresh:.2f}x (goal <= 1.5)")


def export_ratio(repeats: int) -> None:
    import torch
    from iree.turbine import aot
    from sectionmark.demo.model_torch import CONFIGS, GPT, example_input

    config = CONFIGS["small"]
    x = example_input(config)
    marked, unmarked = GPT(config, marked=True), GPT(config, marked=False)
    times = {"marked": [], "unmarked": []}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        sm.torch.export(marked, args=(x,), strict_export=False)  # warm caches of torch and iree
        for _ in range(repeats):
            start = time.perf_counter()
            sm.torch.export(marked, args=(x,), strict_export=False)
            times["marked"].append(time.perf_counter() - start)
            start = time.perf_counter()
            output = aot.export(unmarked, args=(x,), strict_export=False)
            output.mlir_module.get_asm(enable_debug_info=True)
            times["unmarked"].append(time.perf_counter() - start)
    best = {k: min(v) for k, v in times.items()}
    print(f"  export with sections: {best['marked'] * 1e3:.0f} ms, without: {best['unmarked'] * 1e3:.0f} ms (best of {repeats})")
    print(f"export time ratio with / without sections: {best['marked'] / best['unmarked']:.3f}x (goal <= 1.05)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5, help="export repetitions per variant (default 5)")
    parser.add_argument("--number", type=int, default=1_000_000, help="enter+exit per timing (default 1,000,000)")
    args = parser.parse_args()
    eager_cost_in_fresh_processes(args.number)
    export_ratio(args.repeats)


if __name__ == "__main__":
    main()
