"""Rank profiles of one module, as a data-parallel launcher's processes record them, one rank made slower on purpose.

``RANKS_MODULE``'s "Layer/Wide" multiplies an input of dynamic rows, "Layer/Fixed" one of 64 rows, by the same
weight: the rank given 8x the rows (``SLOW_RANK``) does 8x the work in Wide only, with one module (one section
map) for every rank. For tests/workflows/test_report_ranks.py and benchmarks/bench_ranks.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import sectionmark as sm

RANKS_MODULE = """
func.func @main(%x: tensor<?x256xf32>, %y: tensor<64x256xf32>, %w: tensor<256x256xf32>)
    -> (tensor<?x256xf32>, tensor<64x256xf32>) {
  %c0 = arith.constant 0.0 : f32
  %i0 = arith.constant 0 : index
  %n = tensor.dim %x, %i0 : tensor<?x256xf32>
  %e = tensor.empty(%n) : tensor<?x256xf32> loc("sectionmark:Layer/Wide"("t.py":1:1))
  %z = linalg.fill ins(%c0 : f32) outs(%e : tensor<?x256xf32>) -> tensor<?x256xf32> loc("sectionmark:Layer/Wide"("t.py":1:1))
  %m = linalg.matmul ins(%x, %w : tensor<?x256xf32>, tensor<256x256xf32>) outs(%z : tensor<?x256xf32>)
       -> tensor<?x256xf32> loc("sectionmark:Layer/Wide"("t.py":2:1))
  %e2 = tensor.empty() : tensor<64x256xf32> loc("sectionmark:Layer/Fixed"("t.py":3:1))
  %z2 = linalg.fill ins(%c0 : f32) outs(%e2 : tensor<64x256xf32>) -> tensor<64x256xf32> loc("sectionmark:Layer/Fixed"("t.py":3:1))
  %m2 = linalg.matmul ins(%y, %w : tensor<64x256xf32>, tensor<256x256xf32>) outs(%z2 : tensor<64x256xf32>)
        -> tensor<64x256xf32> loc("sectionmark:Layer/Fixed"("t.py":4:1))
  return %m, %m2 : tensor<?x256xf32>, tensor<64x256xf32>
}
"""
WIDE = ("Layer", "Wide")
SLOW_RANK = 2
WARMUP = 1


def record_rank_files(folder: Path, ranks: int = 4, calls: int = 5) -> tuple[Path, list[Path]]:
    """The compiled module and one profile per rank (``rank<i>.ireeprof``, ``calls`` calls after ``WARMUP``, one
    local-task worker), each recorded by its own run of iree-benchmark-module; rank ``SLOW_RANK`` ran Wide on 512
    rows, the others on 64."""
    vmfb = sm.compile(RANKS_MODULE, target="llvm-cpu").save(folder / "model.vmfb")
    rng = np.random.default_rng(0)
    paths = []
    for rank in range(ranks):
        rows = 512 if rank == SLOW_RANK else 64
        args = (rng.random((rows, 256), np.float32), rng.random((64, 256), np.float32),
                rng.random((256, 256), np.float32))
        path = folder / f"rank{rank}.ireeprof"
        sm.profile(vmfb, args, iterations=calls, warmup=WARMUP, keep_profile=path, quiet=True, cost=False,
                   workers=1).close()
        paths.append(path)
    return vmfb, paths
