#!/usr/bin/env bash
# Check that a code change leaves every output of sectionmark byte-identical (timings included: the same
# kept profiles are rendered again, nothing is measured twice).
#
#   scripts/check_outputs_unchanged.sh DIR TREE
#
# DIR   where the inputs and the outputs live (made on first use):
#         DIR/inputs/      a two-function module compiled from MLIR text (nested, fused and unmarked work),
#                          a kept profile of one function (profile.ireeprof), a saved recording and a kept
#                          profile of its replay (replay.ireeprof); made once, by the first TREE given, then reused
#         DIR/reference/   the outputs rendered by the first TREE given
#         DIR/<label>/     the outputs rendered by every later TREE, compared file by file with reference/
# TREE  the code to run: a sectionmark worktree (a directory) or a git ref of this repository (exported with
#       `git archive` into DIR/trees/, so no worktree is registered; the C extensions built in this checkout
#       are copied in where the ref has their source, else the ref runs its numpy fallbacks, which give the
#       same numbers)
#
# Outputs: every renderer of `sectionmark report` on the kept profile (and the table on stdout, with --sites,
# --by and --cpu); of the replay, what the code before the change could write too (each function's JSON,
# CSV and table, the per-function table and the replay JSON); the recording's recording.json saved again.
# Not covered: --roofline (it measures the machine's peaks). Files are compared with cmp, except Tracy
# captures, which record when and by which process they were written: their zones (`sectionmark
# tracy-stats --json`, names, counts and times) are compared instead.
#
# Typical use (the integrator, after merging):
#   scripts/check_outputs_unchanged.sh /tmp/outputs 437e630     # inputs + reference from main before the change
#   scripts/check_outputs_unchanged.sh /tmp/outputs /work/main  # the merged tree: lists differing files
# Exit status: 0 every file identical, 1 some file differs or is missing, 2 usage error.
set -euo pipefail

if [ $# -ne 2 ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
checkout="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="$(mkdir -p "$1" && cd "$1" && pwd)"
tree_arg="$2"
python_bin="${PYTHON:-$checkout/.venv/bin/python}"
[ -x "$python_bin" ] || python_bin="$(command -v python3)"

if [ -d "$tree_arg" ]; then
  tree="$(cd "$tree_arg" && pwd)"
  label="$(basename "$tree")"
else
  commit="$(git -C "$checkout" rev-parse --verify "$tree_arg^{commit}")" || { echo "not a directory or git ref: $tree_arg" >&2; exit 2; }
  label="${commit:0:12}"
  tree="$dir/trees/$label"
  if [ ! -d "$tree/src" ]; then
    mkdir -p "$tree"
    git -C "$checkout" archive "$commit" | tar -x -C "$tree"
    (cd "$checkout" && find src -name '*.so') | while read -r built; do  # where the ref has its C source
      if [ -f "$tree/${built%%.*}.c" ]; then cp "$checkout/$built" "$tree/$built"; fi
    done
  fi
fi
run() { PYTHONPATH="$tree/src" "$python_bin" -c 'import sys; from sectionmark.cli import main; sys.exit(main(sys.argv[1:]))' "$@"; }
in="$dir/inputs"

if [ ! -f "$in/done" ]; then
  echo "making the inputs in $in with $tree"
  rm -rf "$in" && mkdir -p "$in"
  cat > "$in/model.mlir" <<'EOF'
func.func @step(%x: tensor<32x32xf32>, %w: tensor<32x32xf32>) -> tensor<32x32xf32> {
  %c0 = arith.constant 0.0 : f32 loc("sectionmark:Block/Attn/QK"("m.py":1:1))
  %e = tensor.empty() : tensor<32x32xf32> loc("sectionmark:Block/Attn/QK"("m.py":1:1))
  %z = linalg.fill ins(%c0 : f32) outs(%e : tensor<32x32xf32>) -> tensor<32x32xf32> loc("sectionmark:Block/Attn/QK"("m.py":1:1))
  %qk = linalg.matmul ins(%x, %w : tensor<32x32xf32>, tensor<32x32xf32>) outs(%z : tensor<32x32xf32>) -> tensor<32x32xf32> loc("sectionmark:Block/Attn/QK"("m.py":2:1))
  %t = tensor.empty() : tensor<32x32xf32>
  %p = linalg.generic {indexing_maps = [affine_map<(i,j)->(j,i)>, affine_map<(i,j)->(i,j)>],
                       iterator_types = ["parallel","parallel"]} ins(%qk : tensor<32x32xf32>) outs(%t : tensor<32x32xf32>) {
  ^bb0(%a: f32, %b: f32):
    %s = math.exp %a : f32
    linalg.yield %s : f32
  } -> tensor<32x32xf32> loc("sectionmark:Block/Attn"("m.py":3:1))
  %mlp = linalg.matmul ins(%p, %w : tensor<32x32xf32>, tensor<32x32xf32>) outs(%z : tensor<32x32xf32>) -> tensor<32x32xf32> loc("sectionmark:Block/MLP"("m.py":4:1))
  %u = tensor.empty() : tensor<32x32xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i,j)->(i,j)>, affine_map<(i,j)->(i,j)>, affine_map<(i,j)->(i,j)>],
                       iterator_types = ["parallel","parallel"]} ins(%mlp, %x : tensor<32x32xf32>, tensor<32x32xf32>) outs(%u : tensor<32x32xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %s = arith.addf %a, %b : f32
    linalg.yield %s : f32
  } -> tensor<32x32xf32>
  return %r : tensor<32x32xf32>
}
func.func @finish(%x: tensor<32x32xf32>, %w: tensor<32x32xf32>) -> tensor<32x32xf32> {
  %c0 = arith.constant 0.0 : f32 loc("sectionmark:Head"("m.py":5:1))
  %e = tensor.empty() : tensor<32x32xf32> loc("sectionmark:Head"("m.py":5:1))
  %z = linalg.fill ins(%c0 : f32) outs(%e : tensor<32x32xf32>) -> tensor<32x32xf32> loc("sectionmark:Head"("m.py":5:1))
  %m = linalg.matmul ins(%x, %w : tensor<32x32xf32>, tensor<32x32xf32>) outs(%z : tensor<32x32xf32>) -> tensor<32x32xf32> loc("sectionmark:Head"("m.py":6:1))
  return %m : tensor<32x32xf32>
}
EOF
  run compile "$in/model.mlir" -o "$in/model.vmfb" --target llvm-cpu > /dev/null
  PYTHONPATH="$tree/src" "$python_bin" - "$in" <<'EOF'
import sys
from pathlib import Path

import numpy as np

import sectionmark as sm

inputs = Path(sys.argv[1])
rng = np.random.default_rng(0)
x, w = (rng.random((32, 32), np.float32) / 32 for _ in range(2))
np.save(inputs / "x.npy", x)
np.save(inputs / "w.npy", w)
module = sm.load(inputs / "model.vmfb")
with sm.record(module) as recording:
    for _ in range(2):
        y = module.step(x, w)
        module.finish(y, w)
    module.step(x, w)
recording.save(inputs / "recording")
EOF
  run profile "$in/model.vmfb" --function step --input "$in/x.npy" --input "$in/w.npy" -n 5 --warmup 1 \
    --keep-profile "$in/profile.ireeprof" > /dev/null
  run profile "$in/recording" -n 3 --warmup 1 --keep-profile "$in/replay.ireeprof" > /dev/null
  touch "$in/done"
fi

if [ -d "$dir/reference" ]; then out="$dir/$label"; else out="$dir/reference"; fi
echo "rendering with $tree into $out"
rm -rf "$out" && mkdir -p "$out"
# One function's profile: every renderer, the table with its extra views on stdout.
run report "$in/profile.ireeprof" --map "$in/model.vmfb" --function step --warmup 1 --workers 4 --cpu --sites --by name \
  --table "$out/table.txt" --json "$out/profile.json" --csv "$out/profile.csv" --perfetto "$out/run.perfetto.json" \
  --tracy "$out/run.tracy" --chart "$out/chart.png" --timeline "$out/run.timeline.png" \
  --components "$out/run.components.txt" --components-csv "$out/run.components.csv" \
  --components-chart "$out/run.components.png" --graph "$out/graph.html" --kernels "$out/run.kernels.txt" \
  --kernels-csv "$out/run.kernels.csv" | grep -v '^wrote ' > "$out/report.stdout"
run report "$in/profile.ireeprof" --map "$in/model.vmfb" --function step --graph "$out/graph.dot" > /dev/null
run report "$in/profile.ireeprof" --map "$in/model.vmfb" --function step --by "*/MLP" > "$out/report-by-pattern.stdout"
run tracy "$in/profile.ireeprof" --map "$in/model.vmfb" --function step -o "$out/tracy-command.tracy" > /dev/null
# The replay of the recording, split per function again from its kept profile. The Python API moved
# (sectionmark.profiling.replay -> sectionmark.workflows.replay, the readers to sectionmark.readers), so the
# first module found of each is used; the outputs are what the CLI writes.
PYTHONPATH="$tree/src" "$python_bin" - "$in" "$out" <<'EOF'
import importlib
import sys
import tempfile
from pathlib import Path

from sectionmark.artifacts import read_section_map


def first(attribute, *modules):
    for name in modules:
        try:
            return getattr(importlib.import_module(name), attribute)
        except (ImportError, AttributeError):
            continue
    raise SystemExit(f"none of {modules} defines {attribute}")


ReplayProfile = first("ReplayProfile", "sectionmark.workflows.replay", "sectionmark.profiling.replay")
Recording = first("Recording", "sectionmark.workflows.record", "sectionmark.profiling.record")
read_profile = first("read_profile", "sectionmark.readers", "sectionmark.readers.ireeprof", "sectionmark.readers.bundle",
                     "sectionmark.profiling.ireeprof")
inputs, out = Path(sys.argv[1]), Path(sys.argv[2])
recording = Recording.load(inputs / "recording")
with tempfile.TemporaryDirectory() as scratch:  # the recording saved again: its description, as written
    (out / "recording.json").write_bytes((recording.save(Path(scratch) / "again") / "recording.json").read_bytes())
replay = ReplayProfile.build(read_profile(inputs / "replay.ireeprof"), read_section_map(inputs / "model.vmfb"),
                             recording.sequence, replays=3, warmup=1)
(out / "replay.stdout").write_text(replay.table())
if hasattr(replay, "save"):
    replay.save(out / "replay.json", "json")
else:
    replay.save_json(out / "replay.json")
for function in ("step", "finish"):
    session = replay.function(function)
    session.save(out / f"replay-{function}.json", "json")
    session.save(out / f"replay-{function}.csv", "csv")
    (out / f"replay-{function}.txt").write_text(session.table())
EOF

if [ "$out" = "$dir/reference" ]; then
  echo "reference: $(ls "$out" | wc -l) files in $out"
  exit 0
fi
status=0
for reference in "$dir/reference"/*; do
  name="$(basename "$reference")"
  if [ ! -f "$out/$name" ]; then
    echo "missing: $name"; status=1
  elif [[ "$name" == *.tracy ]]; then  # a capture records when and by which process it was made: compare zones
    for capture in "$reference" "$out/$name"; do run tracy-stats "$capture" --json "$capture.zones.json" > /dev/null; done
    if ! cmp -s "$reference.zones.json" "$out/$name.zones.json"; then echo "differs: $name (its zones)"; status=1; fi
    rm -f "$reference.zones.json" "$out/$name.zones.json"
  elif ! cmp -s "$reference" "$out/$name"; then
    echo "differs: $name"; status=1
  fi
done
[ $status -eq 0 ] && echo "all $(ls "$dir/reference" | wc -l) files identical ($out vs $dir/reference)"
exit $status
