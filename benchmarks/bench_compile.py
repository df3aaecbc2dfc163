"""Cost of the compiler hook: sectionmark compile vs a plain in-process compile.

Exports a small GPT-like model (sectionmark markers on every block) to MLIR
once, then compiles it in fresh subprocesses, alternating plain
(``markers=False``: same flags, no hook) and marked (site ids, the cost
model on a copy of the module, command recording, debug groups,
the embedded map), and prints the median compile-time ratio (goal <= 1.10),
the peak-memory (max RSS) ratio, and how the sites were weighed.

    .venv/bin/python benchmarks/bench_compile.py [--layers 4] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

_CHILD = """
import json, resource, sys, time
import sectionmark.compiler as smc
path, markers = sys.argv[1], sys.argv[2] == "1"
start = time.perf_counter()
compiled = smc.compile(path, input_type="torch", markers=markers)
seconds = time.perf_counter() - start
rules = {}
for site in compiled.section_map.sites if compiled.section_map else []:
    rules[site.rule] = rules.get(site.rule, 0) + 1
print(json.dumps({"seconds": seconds, "max_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "rules": rules}))
"""


def export_gpt(layers: int, width: int, path: Path) -> None:
    import torch
    import torch.nn as nn

    import sectionmark as sm

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.qkv, self.proj = nn.LayerNorm(width), nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.ln2, self.up, self.down = nn.LayerNorm(width), nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

        def forward(self, x):
            with sm.section("Self Attention"):
                q, k, v = self.qkv(self.ln1(x)).chunk(3, -1)
                x = x + self.proj(torch.softmax(q @ k.transpose(-1, -2) / 8.0, -1) @ v)
            with sm.section("MLP"):
                x = x + self.down(nn.functional.gelu(self.up(self.ln2(x))))
            return x

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.head = nn.Embedding(256, width), nn.Linear(width, 256)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))

        def forward(self, tokens):
            with sm.section("Embedding"):
                x = self.embed(tokens)
            for i, block in enumerate(self.blocks):
                with sm.section(f"Block {i}"):
                    x = block(x)
            with sm.section("Head"):
                return self.head(x)

    exported = sm.torch.export(GPT(), args=(torch.randint(0, 256, (1, 64)),))
    path.write_text(exported.mlir, encoding="utf-8")


def measure(path: Path, markers: bool) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), "1" if markers else "0"],
        check=True, capture_output=True, text=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "gpt.mlir"
        export_gpt(args.layers, args.width, path)
        runs = {False: [], True: []}
        for _ in range(args.repeats):
            for markers in (False, True):
                runs[markers].append(measure(path, markers))
    plain_s = statistics.median(r["seconds"] for r in runs[False])
    marked_s = statistics.median(r["seconds"] for r in runs[True])
    plain_kib = statistics.median(r["max_rss_kib"] for r in runs[False])
    marked_kib = statistics.median(r["max_rss_kib"] for r in runs[True])
    print(f"model: GPT, {args.layers} layers, width {args.width}; median of {args.repeats} fresh processes")
    print(f"compile time  plain {plain_s:.3f} s   sectionmark {marked_s:.3f} s   ratio {marked_s / plain_s:.3f} (goal <= 1.10)")
    print(f"peak memory   plain {plain_kib / 1024:.0f} MiB   sectionmark {marked_kib / 1024:.0f} MiB   ratio {marked_kib / plain_kib:.3f}")
    rules = ", ".join(f"{count} by {rule}" for rule, count in runs[True][0]["rules"].items())
    print(f"dispatch sites weighed: {rules}")


if __name__ == "__main__":
    main()
