#!/usr/bin/env bash
# K2, on a CPU machine with network, before scripts/gpu_check.sh runs on the GPU machine (no network there).
# Builds what must be sent along (ignored folders; name them in the run's `carry`):
#   .whl/  iree-base-runtime 3.13.0 for CPython 3.12 (runtime, tracing runtime, tools, iree-tracy-capture),
#          ml_dtypes and zstandard (cp312; installed there only if missing) and setuptools (for the C
#          extensions' build where the machine's is older than 77)
#   .gpu/  nanogpt-{torch,jax}/: the demo exported and compiled for `cuda` (model.vmfb + model.sections.json),
#          tokens.npy, reference_logits.npy (the eager model here); prebuilt-compile/: the sm.compile calls of
#          tests/gpu/test_gpu.py, compiled for cuda (iree-base-compiler, 83 MB, cannot be sent);
#          tracy-csvexport-0.11.2.gz (Tracy's own reader, from shared/tools); MANIFEST.txt, SHA256SUMS;
#          nanogpt-torch-groups/model.vmfb: the torch demo with debug groups forced (debug_groups=True), for
#          gpu_check.sh's informational experiment (sectionmark compiles CUDA modules without them: IREE 3.13's
#          CUDA runtime crashes on them in its default stream mode)
# then tries gpu_check.sh on this CPU machine (GPU_CHECK_SIMULATE: the CUDA runs replaced by simulated
# captures) in the project's venv and, unless --no-py312, in a Python 3.12 venv shaped like the GPU machine
# (no IREE, no ml_dtypes, no zstandard, old setuptools) that installs from .whl/ as the GPU machine does.
#
#   bash scripts/gpu_prepare.sh [--no-selftest] [--no-py312]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/env.sh"
cd "$root"
selftest=1 py312=1
for arg in "$@"; do
  case "$arg" in
    --no-selftest) selftest=0 ;;
    --no-py312) py312=0 ;;
    *) echo "usage: gpu_prepare.sh [--no-selftest] [--no-py312]" >&2; exit 2 ;;
  esac
done
say() { echo "[gpu_prepare $(date +%H:%M:%S)] $*"; }

# Ignored, so never committed; sent only through `carry`.
exclude="$(git rev-parse --git-path info/exclude)"
mkdir -p "$(dirname "$exclude")"
for pattern in /.whl/ /.gpu/ /.gpu-out/; do
  grep -qxF "$pattern" "$exclude" 2>/dev/null || echo "$pattern" >> "$exclude"
done

# ------------------------------------------------------------------------------------------ wheels
IREE_VERSION=3.13.0
compiler_version=$(python -c 'from importlib.metadata import version; print(version("iree-base-compiler"))')
[ "$compiler_version" = "$IREE_VERSION" ] || { echo "iree-base-compiler here is $compiler_version, not $IREE_VERSION" >&2; exit 1; }
zstd_version=$(python -c 'from importlib.metadata import version; print(version("zstandard"))')
ml_dtypes_version=$(python -c 'from importlib.metadata import version; print(version("ml_dtypes"))')
setuptools_version=$(python -c 'from importlib.metadata import version; print(version("setuptools"))')
say "wheels for CPython 3.12 into .whl/ (iree-base-runtime $IREE_VERSION, ml_dtypes $ml_dtypes_version, zstandard $zstd_version, setuptools $setuptools_version)"
rm -rf .whl && mkdir -p .whl
download=(python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp
          --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl)
"${download[@]}" "iree-base-runtime==$IREE_VERSION" "ml_dtypes==$ml_dtypes_version" "zstandard==$zstd_version"
python -m pip download -q --no-deps --only-binary=:all: -d .whl "setuptools==$setuptools_version"
ls -la .whl

# ------------------------------------------------------------------------------------------ modules
say "exporting the nanoGPT demo (torch, JAX) and compiling it and tests/gpu/test_gpu.py's modules for cuda into .gpu/"
rm -rf .gpu && mkdir -p .gpu/prebuilt-compile
helpers=${GPU_PREPARE_TMP:-/tmp/sm-gpu-prepare}   # helpers and self-test runs (kept for reading)
rm -rf "$helpers" && mkdir -p "$helpers"
bash scripts/gpu_check.sh --write-helpers "$helpers"
python - "$helpers" <<'EOF'
import ast, functools, hashlib, json, sys, time, warnings
from pathlib import Path

import numpy as np

sys.path[:0] = [sys.argv[1], "tests/gpu", "tests/helpers"]  # test_gpu and its helpers
import sectionmark as sm
from sectionmark.artifacts import read_section_map
from sm_prebuilt_compile import compile_key
from sectionmark.demo.model_torch import CONFIGS
from sectionmark.demo.run import export

out = Path(".gpu")
config = CONFIGS["small"]
GROUP_OP = b"begin_debug_group"  # the HAL import a module with debug groups calls


def eager_logits(framework, tokens):
    if framework == "torch":
        import torch
        from sectionmark.demo.model_torch import GPT
        with torch.no_grad():
            return GPT(config).eval()(torch.from_numpy(tokens)).numpy()
    import jax
    from sectionmark.demo import model_jax
    params = jax.tree_util.tree_map(jax.numpy.asarray, model_jax.init_params(config))
    return np.asarray(model_jax.gpt(params, jax.numpy.asarray(tokens), n_head=config.n_head))


for framework in ("torch", "jax"):
    folder = out / f"nanogpt-{framework}"
    folder.mkdir()
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exported, tokens = export(framework, config)
    compiled = sm.compile(exported, target="cuda")
    compiled.save(folder / "model.vmfb")
    # CUDA: no debug groups by default (sectionmark.compiler.targets.WITHOUT_DEBUG_GROUPS).
    assert GROUP_OP not in compiled.vmfb, f"nanogpt-{framework}: the cuda module has debug groups"
    np.save(folder / "tokens.npy", tokens)
    np.save(folder / "reference_logits.npy", eager_logits(framework, tokens))
    # The embedded map is the map (gpu_check.sh reports with --map model.vmfb).
    assert read_section_map(folder / "model.vmfb").dumps() == compiled.section_map.dumps()
    dispatches = sum(c.op == "dispatch" for b in compiled.section_map.command_buffers for c in b.commands)
    print(f"  nanogpt-{framework}: {compiled.sections_summary}; {dispatches} dispatches per call; "
          f"{len(compiled.vmfb)} bytes; tokens {tokens.dtype}{list(tokens.shape)} "
          f"({time.perf_counter() - started:.1f} s)")
    if framework == "torch":  # the experiment's module: the same export with debug groups forced
        groups = sm.compile(exported, target="cuda", debug_groups=True)
        assert GROUP_OP in groups.vmfb, "debug_groups=True compiled no debug groups"
        assert [(c.op, c.key) for b in groups.section_map.command_buffers for c in b.commands] == \
            [(c.op, c.key) for b in compiled.section_map.command_buffers for c in b.commands]
        (out / "nanogpt-torch-groups").mkdir()
        groups.save(out / "nanogpt-torch-groups" / "model.vmfb")
        print(f"  nanogpt-torch-groups: the same with debug groups ({len(groups.vmfb)} bytes; "
              f"{groups.vmfb.count(GROUP_OP)} mentions of {GROUP_OP.decode()})")

# tests/gpu/test_gpu.py compiles in a fixture: `sm.compile(MLIR, target="cuda")`. Make sure that is still all it
# compiles, then compile exactly that (twice: the compile is deterministic, so a module compiled here is the
# module the test would compile there).
source = Path("tests/gpu/test_gpu.py").read_text()
calls = [ast.unparse(node) for node in ast.walk(ast.parse(source))
         if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("compile")]
assert calls == ["sm.compile(MLIR, target='cuda')"], f"tests/gpu/test_gpu.py compiles {calls}: update gpu_prepare.sh"
import test_gpu  # noqa: E402  (its skipif probe finds no GPU here)

first, second = sm.compile(test_gpu.MLIR, target="cuda"), sm.compile(test_gpu.MLIR, target="cuda")
assert first.vmfb == second.vmfb and first.section_map.dumps() == second.section_map.dumps(), "compile not deterministic"
key = compile_key(test_gpu.MLIR, target="cuda")
assert GROUP_OP not in first.vmfb, "tests/gpu/test_gpu.py's cuda module has debug groups"
saved = first.save(out / "prebuilt-compile" / f"{key}.vmfb")
assert read_section_map(saved).dumps() == first.section_map.dumps()
(out / "prebuilt-compile" / "index.json").write_text(json.dumps(
    {key: {"call": "sm.compile(MLIR, target='cuda')", "from": "tests/gpu/test_gpu.py",
           "mlir_sha256": hashlib.sha256(test_gpu.MLIR.encode()).hexdigest()}}, indent=1))
print(f"  prebuilt-compile/{key[:12]}….vmfb: tests/gpu/test_gpu.py's module ({len(first.vmfb)} bytes, compiled twice: identical)")
EOF

csvexport=$root/../shared/tools/tracy-csvexport-0.11.2
if [ -x "$csvexport" ]; then
  gzip -9 -c "$csvexport" > .gpu/tracy-csvexport-0.11.2.gz
else
  echo "warning: $csvexport not found: gpu_check.sh will skip Tracy's csvexport" >&2
fi

{
  echo "prepared: $(date -u +%FT%TZ) on $(hostname)"
  echo "repo: $(git rev-parse HEAD); changed files at preparation: $(git status --short | wc -l)"
  git status --short | sed 's/^/  /'
  python -c 'import sys, iree.compiler.version as c; print("iree-base-compiler", c.VERSION, c.REVISIONS, "python", sys.version.split()[0])' 2>/dev/null ||
    echo "iree-base-compiler $compiler_version"
  python -c 'import torch, jax; print("torch", torch.__version__, "jax", jax.__version__)'
  echo "wheels: $(cd .whl && ls | tr '\n' ' ')"
  echo "src digest: $(python "$helpers/steps.py" src-digest .)"
} > .gpu/MANIFEST.txt
(cd .gpu && find . -type f ! -name SHA256SUMS | sort | xargs sha256sum > SHA256SUMS)

say "what travels (carry: .whl .gpu; the tree: tracked and untracked-not-ignored files)"
tree_bytes=$( { git ls-files -z; git ls-files -z --others --exclude-standard; } | xargs -0 -r stat -c %s -- 2>/dev/null |
             awk '{ s += $1 } END { print s + 0 }')
whl_bytes=$(du -sb .whl | cut -f1)
gpu_bytes=$(du -sb .gpu | cut -f1)
du -sh .whl .gpu
python -c 'import sys; t, w, g = (int(x) / 2**20 for x in sys.argv[1:]); print(f"tree {t:.1f} MiB + .whl {w:.1f} MiB + .gpu {g:.1f} MiB = {t + w + g:.1f} MiB (limit 64 MiB)")' \
  "$tree_bytes" "$whl_bytes" "$gpu_bytes"
[ $((tree_bytes + whl_bytes + gpu_bytes)) -lt $((60 * 1048576)) ] || { echo "over 60 MiB" >&2; exit 1; }

[ "$selftest" = 1 ] || exit 0

# ------------------------------------------------------------------------------------------ self-test
say "self-test 1: syntax, helpers, every sectionmark command line of gpu_check.sh parses"
bash -n scripts/gpu_check.sh
python -m py_compile "$helpers"/*.py
grep -q -- '--tracy sections.tracy' scripts/gpu_check.sh
python - <<'EOF'
from sectionmark.cli import build_parser
g, w = ".gpu/nanogpt-torch", "/tmp"
lines = [
    ["profile", f"{g}/model.vmfb", "--input", f"{g}/tokens.npy", "--device", "cuda", "-n", "20", "--warmup", "3",
     "--keep-profile", "run.tracy", "--json", "sections.json"],
    ["report", "run.tracy", "--map", f"{g}/model.vmfb", "--warmup", "3", "--calls", "23", "--json", "report.json",
     "--table", "report-table.txt", "--tracy", "sections.tracy"],
    ["report", "run.tracy", "--map", f"{g}/model.vmfb", "--warmup", "0", "--calls", "23", "--json", "report-all.json"],
    ["report", "run.tracy", "--map", f"{g}/model.vmfb", "--warmup", "3", "--calls", "23", "--csv", "sections.csv",
     "--perfetto", "run.perfetto.json", "--kernels", "kernels.txt", "--components", "components.txt", "--sites", "--by", "name"],
    ["report", "run.tracy", "--map", f"{g}/model.vmfb", "--warmup", "3", "--calls", "23", "--chart", "sections.png",
     "--components-chart", "components.png"],
    ["tracy-stats", "run.tracy"], ["tracy-stats", "run.tracy", "--gpu", "--json", "stats-gpu.json"],
    ["tracy-stats", "run.tracy", "--gpu", "--depth", "0"], ["tracy-stats", "eager.tracy", "--cpu", "--depth", "0"],
    ["report", "eager.tracy", "--map", f"{g}/model.vmfb", "--warmup", "1", "--json", "eager-report.json"],
]
parser = build_parser()
for line in lines:
    parser.parse_args(line)
print(f"  {len(lines)} command lines parse")
EOF
if [ -f .gpu/tracy-csvexport-0.11.2.gz ]; then
  gzip -dc .gpu/tracy-csvexport-0.11.2.gz > "$helpers/csvexport" && chmod +x "$helpers/csvexport"
  "$helpers/csvexport" -h > /dev/null 2>&1 && echo "  Tracy's csvexport runs here"
fi

# The eager capture on local-task needs llvm-cpu modules of the same exports (not sent).
cpu_modules=$helpers/cpu-modules
python - "$cpu_modules" <<'EOF'
import sys, warnings
from pathlib import Path
import sectionmark as sm
from sectionmark.demo.model_torch import CONFIGS
from sectionmark.demo.run import export
for framework in ("torch", "jax"):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exported, _tokens = export(framework, CONFIGS["small"])
    folder = Path(sys.argv[1]) / f"nanogpt-{framework}"
    folder.mkdir(parents=True)
    sm.compile(exported, target="llvm-cpu").save(folder / "model.vmfb")
EOF

simulate() {  # NAME PYTHON SKIP_INSTALL: gpu_check.sh with simulated CUDA runs; prints its summary
  local name=$1 out=$helpers/out-$1
  say "self-test $name: gpu_check.sh on this CPU (python $2), CUDA runs simulated"
  GPU_CHECK_SIMULATE=1 GPU_CHECK_SKIP_INSTALL=$3 PYTHON=$2 OUT=$out GPU_CHECK_WORK=$helpers/work-$1 \
    GPU_CHECK_EAGER_DEVICE=local-task GPU_CHECK_EAGER_MODULES=$cpu_modules GPU_CHECK_BUDGET_S=900 \
    bash scripts/gpu_check.sh > "$helpers/$name.log" 2>&1 || true
  sed -n '/==== summary/,$p' "$out/gpu_check.log"
  ls "$out" | tr '\n' ' '; echo
  # What must work without a GPU: every check of the simulated captures.
  python - "$out/verify.json" <<'EOF'
import json, sys
results = json.load(open(sys.argv[1]))
profile = {k: v for k, v in results.items() if k.endswith("verify-profile")}
failed = [(k, r["check"]) for k, v in profile.items() for r in v if not r["ok"]]
assert len(profile) == 2 and not failed, (sorted(profile), failed)
print(f"  simulated captures: {sum(len(v) for v in profile.values())} checks passed (torch and jax)")
EOF
}

simulate venv "$root/.venv/bin/python" 1
python - "$helpers/out-venv/verify.json" <<'EOF'
import json, sys
results = json.load(open(sys.argv[1]))
eager = {k: v for k, v in results.items() if k.endswith("verify-eager")}
# local-task has no GPU zones: those checks fail by design; the rest must pass.
failed = [(k, r["check"]) for k, v in eager.items() for r in v if not r["ok"] and "GPU zones" not in r["check"]]
assert len(eager) == 2 and not failed, (sorted(eager), failed)
print(f"  eager captures on local-task: every check but the GPU zones' passed (torch and jax)")
EOF
python - "$helpers/work-venv" <<'EOF'
import json, re, sys
from pathlib import Path
work = Path(sys.argv[1])
# The simulated raw captures hold no section zones (as a module without debug groups on the GPU); the
# report's capture does, around every dispatch zone.
results = {k: {r["check"]: r for r in v} for k, v in
           ((p.parent.name, json.loads(p.read_text())) for p in work.glob("*/verify-profile.json"))}
for framework, checks in sorted(results.items()):
    raw = checks["capture: dispatch zones and no section zones (module compiled without debug groups)"]
    nested = checks["report's Tracy capture: section zones nest their dispatch zones (sectionmark reader)"]
    assert raw["ok"] and nested["ok"], (raw, nested)
    print(f"  {framework}: raw {raw['detail']}; report's capture {nested['detail']}")
# The experiment ran (without a GPU every run fails: recorded, not failed) and its summary lines are there.
record = json.loads((work / "experiment" / "experiment.json").read_text())
assert record["module_has_debug_groups"] and [r["run"] for r in record["runs"]] == \
    ["plain-graphs", "tracing-graphs-capture", "plain-default-flags"], record
summary = (work / "summary.txt").read_text()
assert re.search(r"^experiment +rc=0 ", summary, re.M) and "tracing-graphs-capture: rc=" in summary, summary
print("  experiment: " + "; ".join(f"{r['run']} {r['outcome'][:60]!r}" for r in record["runs"]))
EOF

if [ "$py312" = 1 ]; then
  # Shaped like the GPU machine, only poorer: CPython 3.12, numpy, pytest, rich, an old setuptools; no IREE,
  # ml_dtypes or zstandard (installed from .whl/), no torch or JAX (so its eager captures fail).
  py=$(PYENV_VERSION=3.12.1 pyenv which python3.12 2>/dev/null || command -v python3.12 || true)
  if [ -z "$py" ]; then
    echo "no python3.12 here: skipping the Python 3.12 self-test" >&2
  else
    venv312=$helpers/venv312
    "$py" -m venv "$venv312"
    "$venv312/bin/python" -m pip install -q "numpy<3" pytest rich "setuptools<70"
    [ -d build ] && had_build=1 || had_build=0
    simulate py312 "$venv312/bin/python" 0
    [ "$had_build" = 1 ] || rm -rf build   # pip's in-tree build of the project under Python 3.12
    grep -E "C extension|IREE runtime|missing|setuptools >= 77|tool |sectionmark" "$helpers/work-py312/logs/"*install*.log | sed 's/^/  /'
    grep -qE '^install +rc=0 ' "$helpers/out-py312/summary.txt" || { echo "the install step failed under Python 3.12" >&2; exit 1; }
    [ "$(grep -c 'C extension .* OK' "$helpers/work-py312/logs/"*install*.log)" = 2 ] || { echo "C extensions not built" >&2; exit 1; }
  fi
fi
say "done: carry .whl and .gpu; on the GPU machine run: bash scripts/gpu_check.sh (self-test runs in $helpers)"
