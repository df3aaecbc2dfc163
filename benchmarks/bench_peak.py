"""Does the measured peak bound every kernel? (issue 38, item 2)

``sectionmark peak`` (measured now, into a scratch cache; with ``--map``: each model's own heaviest kernels
among the benchmarks), then the nanoGPT demo model (small, torch) and a 64x64x256 matmul chain
(tests/helpers/matmul_chain.py), each profiled in the same process: every kernel's (dispatch site's) and
section's GB/s and GFLOP/s as a percentage of the measured peak, before any raise, and whether the roofline
had to raise its ceiling (the one line it prints). The goal: the highest figure at most 100%, no raise.

Usage: python benchmarks/bench_peak.py [--iterations 50] [--map] [--repeat 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "helpers"))

import sectionmark as sm  # noqa: E402
from sectionmark.profiling.kernels import kernels  # noqa: E402


def models():
    from matmul_chain import chain_model
    from nanogpt_builders import torch_gpt

    return {"nanoGPT small": torch_gpt(), "64x64x256 matmul chain": chain_model(steps=4)}


def highest(session, peak) -> tuple[float, str]:
    """The highest percentage of either roof any kernel or section of ``session`` reaches, and which."""
    figures = [(row.gb_per_s or 0.0, row.gflop_per_s or 0.0, f"kernel {row.site} {row.key}") for row in kernels(session)]
    figures += [(row.traffic.gb_per_s, row.traffic.gflop_per_s, f"section {' / '.join(row.path)}")
                for row in session.sections if row.traffic is not None and row.traffic.time_ns > 0]
    return max((100 * max(gb / peak.bandwidth_gb_per_s, gflop / peak.gflop_per_s), what)
               for gb, gflop, what in figures)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=50, help="profiled calls per model (default: 50)")
    parser.add_argument("--map", action="store_true", help="measure the peak with each model's own kernels too")
    parser.add_argument("--repeat", type=int, default=1, help="peak + profiles this many times (default: 1)")
    args = parser.parse_args()
    compiled = {name: (sm.compile(sm.torch.export(model, args=inputs), target="llvm-cpu"), inputs)
                for name, (model, inputs) in models().items()}
    with tempfile.TemporaryDirectory() as cache:
        os.environ["XDG_CACHE_HOME"] = cache
        worst = 0.0
        for repetition in range(args.repeat):
            for name, (program, inputs) in compiled.items():
                measured = sm.peak(refresh=True, section_map=program.section_map if args.map else None)
                session = sm.profile(program, args=inputs, iterations=args.iterations, warmup=3, quiet=True)
                percent, what = highest(session, measured)
                worst = max(worst, percent)
                raised = measured.bounding(session).raised_by is not None
                print(f"[{repetition + 1}] {name}: peak {measured.bandwidth_gb_per_s:.1f} GB/s, "
                      f"{measured.gflop_per_s:.1f} GFLOP/s (load {measured.load[0]:.2f}); highest {percent:.1f}% "
                      f"({what}){'; ceiling raised' if raised else ''}")
        print(f"highest figure of any kernel or section: {worst:.1f}% of the peak measured before it "
              f"(goal: at most 100%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
