#!/usr/bin/env bash
# K2: the CUDA path on one NVIDIA GPU (H100/H200), in one run of about 5 minutes, with no network.
#
#   bash scripts/gpu_check.sh                      # on the GPU machine, in the repo root; results in $OUT
#   bash scripts/gpu_check.sh --write-helpers DIR  # only write its Python helpers to DIR (gpu_prepare.sh tests them)
#
# The Python of the steps lives in scripts/gpu_check/ (verify.py: the acceptance checks; steps.py: the small
# checks and summaries; eager_capture.py, sim_capture.py, experiment.py, sm_prebuilt_compile.py), copied to
# $WORK/helpers and run from there; tests/entry/test_gpu_check.py lints it and tests it on recorded data.
#
# Needs what scripts/gpu_prepare.sh built on a CPU machine beforehand (ignored folders, sent along):
#   .whl/  iree-base-runtime 3.13.0 (cp312; the tracing runtime, iree-tracy-capture), ml_dtypes, zstandard, setuptools
#   .gpu/  the nanoGPT demo (torch and JAX) compiled for `cuda` with its inputs and eager reference logits,
#          the modules tests/gpu/test_gpu.py compiles (iree-base-compiler is too big to send), Tracy's csvexport,
#          and the torch demo compiled with debug groups forced (nanogpt-torch-groups/, for the experiment)
#
# CUDA modules are compiled without debug groups (IREE 3.13's CUDA runtime crashes on them: SIGSEGV in
# iree_hal_module_command_buffer_begin_debug_group), so the raw capture has dispatch zones only; the section
# zones around them are checked in the report's own Tracy capture (report --tracy sections.tracy).
#
# Steps (each runs whatever happened before; its exit status is in the summary at the end):
#   env, install (runtime wheel + this project with its C extensions, no network), cuda probe;
#   per framework (torch, jax): sectionmark profile --device cuda -n 20 --warmup 3 --keep-profile run.tracy
#   --json sections.json; sectionmark report run.tracy --map ... (one with --tracy sections.tracy);
#   sectionmark tracy-stats run.tracy; Tracy's csvexport -g of run.tracy and sections.tracy; the acceptance
#   checks (verify); pytest -m gpu (tests/gpu/test_gpu.py);
#   per framework: a Tracy capture of eager sections around compiled calls (and the demo model run
#   eagerly: its own sections as CPU zones), its stats, report and checks; `pytest -m gpu` over the whole suite
#   (informational: the other test modules need packages this machine lacks); experiment (informational,
#   not in the acceptance checks: the torch demo WITH debug groups, plain tool in graph mode, tracing tool
#   under a capture, plain tool with default flags; experiment/experiment.json, summarized in summary.txt).
# Outputs ($OUT, 7 files): gpu_check.log (this transcript), summary.txt, verify.json, results.tar.gz
# (every output and every step's full log), sections-torch.json, sections-jax.json, nvidia-smi.txt.
set -o pipefail
set -u

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# ----------------------------------------------------------------------------------------------- helpers
write_helpers() {  # the Python of the steps, under version control in scripts/gpu_check/ (linted and tested)
  mkdir -p "$1" && cp "$ROOT"/scripts/gpu_check/*.py "$1"/
}

if [ "${1:-}" = "--write-helpers" ]; then
  write_helpers "${2:?usage: gpu_check.sh --write-helpers DIR}"
  exit 0
fi

# ----------------------------------------------------------------------------------------------- setup
START=$(date +%s)
BUDGET_S=${GPU_CHECK_BUDGET_S:-300}           # the whole run, packaging included (goal: 5 minutes)
DEADLINE=$((START + BUDGET_S))
PY=${PYTHON:-python3}   # the machine's Python 3.12 with torch, JAX, numpy, pytest (its venv if python3 is another)
if [ -z "${PYTHON:-}" ] && ! python3 -c 'import numpy, pytest' 2>/dev/null && [ -x /opt/torch/.venv/bin/python3 ]; then
  PY=/opt/torch/.venv/bin/python3
fi
OUT=${OUT:-$ROOT/.gpu-out}
WORK=${GPU_CHECK_WORK:-/tmp/sm-gpu-check}
SITE=$WORK/site                               # iree-base-runtime, zstandard (pip --target)
SMSITE=$WORK/sm-site                          # sectionmark itself, with its C extensions
BUILDTOOLS=$WORK/buildtools                   # setuptools >= 77 for the build (pyproject's license field)
HELPERS=$WORK/helpers
G=$ROOT/.gpu
DEVICE=${GPU_CHECK_DEVICE:-cuda}
# Only for trying this script on a CPU machine (gpu_prepare.sh): SIMULATE=1 replaces the CUDA run of
# `profile` by a simulated capture (after running the real command, which must fail for want of a GPU);
# SKIP_INSTALL=1 uses the current environment; EAGER_DEVICE / EAGER_MODULES: device and folder of the
# modules (nanogpt-FRAMEWORK/model.vmfb) for the eager capture (local-task and llvm-cpu modules).
SIMULATE=${GPU_CHECK_SIMULATE:-0}
SKIP_INSTALL=${GPU_CHECK_SKIP_INSTALL:-0}
EAGER_DEVICE=${GPU_CHECK_EAGER_DEVICE:-$DEVICE}
EAGER_MODULES=${GPU_CHECK_EAGER_MODULES:-$G}
CALLS=20 WARMUP=3
rm -rf "$WORK"
mkdir -p "$OUT" "$WORK/logs" "$WORK/torch" "$WORK/jax" "$WORK/pytest"
exec > >(tee "$OUT/gpu_check.log") 2>&1
TEE_PID=$!
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PYTHONNOUSERSITE=1
export PATH="$SMSITE/bin:$SITE/bin:$PATH"
export PYTHONPATH="$SMSITE:$SITE${PYTHONPATH:+:$PYTHONPATH}"
export SM_PREBUILT_DIR="$G/prebuilt-compile"
export XLA_PYTHON_CLIENT_PREALLOCATE=false JAX_PLATFORMS=cpu   # JAX only runs the eager reference, on the CPU
export ROOT PY WORK SITE SMSITE BUILDTOOLS HELPERS G DEVICE SIMULATE EAGER_DEVICE EAGER_MODULES CALLS WARMUP
write_helpers "$HELPERS"

ts() { date +%H:%M:%S; }
elapsed() { echo $(( $(date +%s) - START )); }
SUMMARY=()
NSTEP=0

# step NAME LIMIT_S FUNCTION [ARGS...]: run under `timeout` (the deadline shortens it), full output in
# $WORK/logs/NN-NAME.log, its tail here; skipped when less than 15 s are left.
step() {
  local name=$1 limit=$2 left rc t0 t1 log
  shift 2
  NSTEP=$((NSTEP + 1))
  log=$WORK/logs/$(printf %02d "$NSTEP")-$name.log
  left=$((DEADLINE - $(date +%s) - 20))
  if [ "$left" -lt 15 ]; then
    echo "[$(ts) +$(elapsed)s] --- $name SKIPPED (time budget spent)"
    SUMMARY+=("$(printf '%-26s %-8s %5s' "$name" skipped -)")
    return 99
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "[$(ts) +$(elapsed)s] >>> $name (limit ${limit}s)"
  t0=$(date +%s)
  timeout -k 5 "$limit" bash -c '"$@"' _ "$@" > "$log" 2>&1 < /dev/null
  rc=$?
  t1=$(date +%s)
  tail -n "${TAIL_LINES:-40}" "$log" | cut -c1-400 | sed 's/^/    /'
  [ "$rc" = 124 ] && echo "    (timed out after ${limit}s)"
  echo "[$(ts) +$(elapsed)s] <<< $name rc=$rc ($((t1 - t0))s)"
  SUMMARY+=("$(printf '%-26s rc=%-5s %4ss' "$name" "$rc" $((t1 - t0)))")
  return "$rc"
}

# ----------------------------------------------------------------------------------------------- steps
s_env() {
  echo "date: $(date -u +%FT%TZ)  host: $(hostname)  kernel: $(uname -srm)"
  echo "repo: $(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo '?') ($(git -C "$ROOT" status --short 2>/dev/null | wc -l) changed files)"
  echo "python: $(command -v "$PY") $("$PY" -VV)"
  nvidia-smi > "$WORK/nvidia-smi.txt" 2>&1; echo "nvidia-smi rc=$?"
  cat "$WORK/nvidia-smi.txt"
  nvidia-smi -q > "$WORK/nvidia-smi-q.txt" 2>&1
  echo "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader > "$WORK/gpu-name.txt" 2>&1
  (nvcc --version 2>&1 | tail -n 2; gcc --version 2>&1 | head -n 1) | sed 's/^/toolchain: /'
  "$PY" -m pip list 2>/dev/null > "$WORK/pip-list.txt"
  grep -i -E '^(torch|jax|jaxlib|numpy|pytest|setuptools|rich|zstandard|matplotlib|iree|hypothesis) ' "$WORK/pip-list.txt"
  echo "carried:"; du -sh "$ROOT/.whl" "$ROOT/.gpu" 2>&1; ls -la "$ROOT/.whl" 2>&1
  cat "$G/MANIFEST.txt" 2>&1
  (cd "$G" && sha256sum -c --quiet SHA256SUMS) && echo "carried files: checksums OK"
  local digest
  digest=$("$PY" "$HELPERS/steps.py" src-digest "$ROOT")
  if grep -qx "src digest: $digest" "$G/MANIFEST.txt"; then
    echo "src/ is the one the modules were compiled with"
  else
    echo "WARNING: src/ changed since gpu_prepare.sh compiled the modules (digest $digest): run it again if the section map changed"
  fi
}

s_install() {
  local rc=0 setuptools_ok
  # 1. IREE's runtime (with the tracing runtime, its tools and iree-tracy-capture), from the carried wheel.
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$ROOT"/.whl/iree_base_runtime-*.whl || rc=1
  # 2. What the machine lacks of: ml_dtypes (iree.runtime imports it; JAX brings it), zstandard (the Tracy reader).
  for module in ml_dtypes zstandard; do
    if ! "$PY" -c "import $module" 2>/dev/null; then
      echo "$module missing: installing the carried wheel"
      "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$ROOT"/.whl/"$module"-*.whl || rc=1
    fi
  done
  # 3. sectionmark with its C extensions (setup.py), no network: setuptools >= 77 from the carried wheel if needed.
  setuptools_ok=$("$PY" -c 'import setuptools; print(int(setuptools.__version__.split(".")[0]) >= 77)' 2>/dev/null)
  echo "machine's setuptools >= 77: ${setuptools_ok:-missing}"
  if [ "$setuptools_ok" != True ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$BUILDTOOLS" "$ROOT"/.whl/setuptools-*.whl || rc=1
  fi
  (cd "$ROOT" && PYTHONPATH="$BUILDTOOLS:$PYTHONPATH" "$PY" -m pip install --no-index --no-deps --no-build-isolation \
      --no-cache-dir --target "$SMSITE" .) || {
    echo "pip install of the project failed: building the C extensions in place instead"
    rc=1
    (cd "$ROOT" && PYTHONPATH="$BUILDTOOLS:$PYTHONPATH" "$PY" setup.py build_ext --inplace) &&
      rm -rf "$SMSITE/sectionmark" && mkdir -p "$SMSITE" && ln -sfn "$ROOT/src/sectionmark" "$SMSITE/sectionmark"
  }
  "$PY" "$HELPERS/steps.py" install || rc=1
  echo "sectionmark entry point: $(command -v sectionmark || echo 'missing (python -m sectionmark is used)')"
  "$PY" -m sectionmark --help > /dev/null || rc=1
  "$PY" -c 'import iree.runtime.version as v; print(v.VERSION, v.REVISIONS["IREE"])' > "$WORK/iree-version.txt"
  return $rc
}

s_cuda_probe() {
  "$PY" -c 'import iree.runtime as rt; print("cuda devices:", rt.get_driver("cuda").query_available_devices())'
  local rc=$?
  IREE_PY_RUNTIME=tracy "$PY" -c 'import iree.runtime as rt; print("tracing runtime, cuda devices:", rt.get_driver("cuda").query_available_devices())' || rc=1
  "$("$PY" -c 'from sectionmark.artifacts.tools import find_tool; print(find_tool("iree-benchmark-module", tracing=True))')" \
    --help 2>&1 | grep -E 'cuda_tracing|cuda_use_streams' | head -n 4
  return $rc
}

sm() { "$PY" -m sectionmark "$@"; }

s_profile() {  # FRAMEWORK: the acceptance command, as written in the issue
  cd "$WORK/$1" && sm profile "$G/nanogpt-$1/model.vmfb" --input "$G/nanogpt-$1/tokens.npy" --device "$DEVICE" \
    -n "$CALLS" --warmup "$WARMUP" --keep-profile run.tracy --json sections.json
  local rc=$?
  [ "$SIMULATE" = 1 ] || return $rc
  echo "SIMULATION: profile exited $rc (1 expected without a GPU); a simulated CUDA capture instead"
  [ "$rc" = 1 ] || return 1
  "$PY" "$HELPERS/sim_capture.py" "$G/nanogpt-$1/model.vmfb" run.tracy --calls $((CALLS + WARMUP)) --repo "$ROOT" &&
    sm report run.tracy --map "$G/nanogpt-$1/model.vmfb" --warmup "$WARMUP" --calls $((CALLS + WARMUP)) --json sections.json
}

s_report() {
  cd "$WORK/$1" || return 1
  local rc=0 all=$((CALLS + WARMUP))
  # --tracy: the report's own capture, section zones around the measured calls' dispatch zones (the raw
  # capture has none: CUDA modules are compiled without debug groups).
  sm report run.tracy --map "$G/nanogpt-$1/model.vmfb" --warmup "$WARMUP" --calls "$all" --json report.json \
    --table report-table.txt --tracy sections.tracy || rc=1
  ls -la sections.tracy
  echo "=== every call (--warmup 0), for the sum check"
  sm report run.tracy --map "$G/nanogpt-$1/model.vmfb" --warmup 0 --calls "$all" --json report-all.json > report-all.txt || rc=1
  tail -n 3 report-all.txt
  echo "=== the other outputs"
  sm report run.tracy --map "$G/nanogpt-$1/model.vmfb" --warmup "$WARMUP" --calls "$all" --csv sections.csv \
    --perfetto run.perfetto.json --kernels kernels.txt --components components.txt --sites --by name > report-more.txt || rc=1
  tail -n 6 report-more.txt
  sm report run.tracy --map "$G/nanogpt-$1/model.vmfb" --warmup "$WARMUP" --calls "$all" --chart sections.png \
    --components-chart components.png > /dev/null || echo "(charts failed: $?)"
  return $rc
}

s_stats() {
  cd "$WORK/$1" || return 1
  local rc=0
  sm tracy-stats run.tracy > stats.txt || rc=1
  cat stats.txt
  sm tracy-stats run.tracy --gpu --json stats-gpu.json > stats-gpu.txt || rc=1
  sm tracy-stats run.tracy --gpu --depth 0 > stats-gpu-depth0.txt || rc=1
  return $rc
}

csvexport_tool() {
  local tool=$WORK/tracy-csvexport
  [ -x "$tool" ] || { gzip -dc "$G/tracy-csvexport-0.11.2.gz" > "$tool" && chmod +x "$tool"; } || return 1
  echo "$tool"
}

s_csvexport() {  # FRAMEWORK CAPTURE: csvexport-STEM-gpu.csv (every GPU zone), csvexport-STEM-cpu-summary.csv
  cd "$WORK/$1" || return 1
  local tool rc=0 stem=${2%.tracy}
  tool=$(csvexport_tool) || return 1
  "$tool" -g "$2" > "csvexport-$stem-gpu.csv" || rc=1
  "$tool" "$2" > "csvexport-$stem-cpu-summary.csv" || rc=1
  [ "$stem" = run ] && cp csvexport-run-gpu.csv csvexport-gpu.csv
  echo "$(($(wc -l < "csvexport-$stem-gpu.csv") - 1)) GPU zones; per name (count, summed ns):"
  awk -F, 'NR > 1 { n[$1]++; t[$1] += $NF } END { for (k in n) printf "%8d %14d  %s\n", n[k], t[k], k }' \
    "csvexport-$stem-gpu.csv" | sort -k2,2nr | head -n 30
  return $rc
}

s_csvexports() {  # FRAMEWORK: the raw capture and the report's own
  local rc=0
  echo "=== run.tracy (profile --keep-profile)"
  s_csvexport "$1" run.tracy || rc=1
  echo "=== sections.tracy (report --tracy)"
  s_csvexport "$1" sections.tracy || rc=1
  return $rc
}

s_experiment() {  # informational: the torch demo compiled WITH debug groups on CUDA (experiment.py)
  ulimit -c 0
  cd "$WORK" && mkdir -p experiment &&
    "$PY" "$HELPERS/experiment.py" "$G/nanogpt-torch-groups/model.vmfb" "$G/nanogpt-torch/tokens.npy" experiment \
      --device "$DEVICE" --budget 50
}

s_verify() {
  cd "$WORK/$1" && "$PY" "$HELPERS/verify.py" profile . --map "$G/nanogpt-$1/model.vmfb" --calls $((CALLS + WARMUP)) \
    --warmup "$WARMUP"
}

s_pytest_gpu() {
  cd "$ROOT" && PYTHONPATH="$HELPERS:$PYTHONPATH" "$PY" -m pytest -m gpu tests/gpu/test_gpu.py -p sm_prebuilt_compile \
    -p no:cacheprovider -v -rA --junitxml="$WORK/pytest/pytest-gpu.xml" --basetemp="$WORK/pytest/tmp"
  local rc=$?
  # Skipped tests would pass quietly: the check is that both ran and passed.
  "$PY" "$HELPERS/steps.py" pytest-counts "$WORK/pytest/pytest-gpu.xml" || rc=1
  return $rc
}

s_eager() {
  cd "$WORK/$1" || return 1
  local rc=0
  "$PY" "$HELPERS/eager_capture.py" capture eager.tracy --vmfb "$EAGER_MODULES/nanogpt-$1/model.vmfb" \
    --tokens "$G/nanogpt-$1/tokens.npy" --framework "$1" --device "$EAGER_DEVICE" --calls 10 \
    --reference "$G/nanogpt-$1/reference_logits.npy" --repo "$ROOT" || return 1
  sm tracy-stats eager.tracy > eager-stats.txt || rc=1
  cat eager-stats.txt
  sm tracy-stats eager.tracy --cpu --depth 0 || rc=1
  echo "=== report of the eager capture (its GPU zones; first call dropped)"
  sm report eager.tracy --map "$EAGER_MODULES/nanogpt-$1/model.vmfb" --warmup 1 --json eager-report.json > eager-report.txt || rc=1
  cat eager-report.txt
  s_csvexport "$1" eager.tracy > /dev/null || rc=1
  "$PY" "$HELPERS/verify.py" eager . --map "$EAGER_MODULES/nanogpt-$1/model.vmfb" --calls 10 || rc=1
  return $rc
}

s_pytest_gpu_suite() {  # informational: `pytest -m gpu` as written, over the whole suite
  cd "$ROOT" && PYTHONPATH="$HELPERS:$PYTHONPATH" "$PY" -m pytest -m gpu -p sm_prebuilt_compile -p no:cacheprovider \
    --continue-on-collection-errors -q -rfEs --basetemp="$WORK/pytest/tmp-suite"
}

# ----------------------------------------------------------------------------------------------- run
echo "[$(ts)] K2 GPU check: repo $ROOT, python $PY, device $DEVICE, out $OUT, budget ${BUDGET_S}s"
export -f sm csvexport_tool s_env s_install s_cuda_probe s_profile s_report s_stats s_csvexport s_csvexports s_verify \
  s_pytest_gpu s_eager s_pytest_gpu_suite s_experiment

step env 60 s_env
if [ "$SKIP_INSTALL" = 1 ]; then
  echo "SKIP_INSTALL: using the current environment"
else
  TAIL_LINES=25 step install 120 s_install
fi
step cuda-probe 60 s_cuda_probe
for fw in torch jax; do
  step "profile-$fw" 120 s_profile "$fw"
  TAIL_LINES=12 step "report-$fw" 90 s_report "$fw"
  TAIL_LINES=12 step "tracy-stats-$fw" 45 s_stats "$fw"
  TAIL_LINES=12 step "csvexport-$fw" 45 s_csvexports "$fw"
  step "verify-$fw" 60 s_verify "$fw"
done
step pytest-gpu 180 s_pytest_gpu
for fw in torch jax; do
  TAIL_LINES=30 step "eager-$fw" 150 s_eager "$fw"
done
# (the suite leaves the experiment its minute)
suite_limit=$((DEADLINE - $(date +%s) - 20 - 65)); [ "$suite_limit" -gt 120 ] && suite_limit=120
[ "$suite_limit" -lt 15 ] && suite_limit=15
TAIL_LINES=15 step pytest-gpu-suite "$suite_limit" s_pytest_gpu_suite
# Informational, not acceptance: a module with debug groups in graph mode, and with default flags (crash).
TAIL_LINES=12 step experiment 60 s_experiment

# ----------------------------------------------------------------------------------------------- outputs
{
  echo "K2 GPU check, $(date -u +%FT%TZ), $(elapsed)s"
  echo "GPU: $(cat "$WORK/gpu-name.txt" 2>/dev/null)"
  echo "IREE runtime: $(cat "$WORK/iree-version.txt" 2>/dev/null)"
  echo "repo: $(git -C "$ROOT" rev-parse HEAD 2>/dev/null)"
  echo
  printf '%s\n' "${SUMMARY[@]}"
  echo
  "$PY" "$HELPERS/steps.py" verdicts "$WORK"
  echo
  echo "experiment (informational, not an acceptance check: the torch demo compiled WITH debug groups):"
  "$PY" "$HELPERS/steps.py" experiment "$WORK/experiment/experiment.json" 2>&1 | sed 's/^/  /'
} > "$WORK/summary.txt"
"$PY" "$HELPERS/steps.py" verify-json "$WORK" > "$OUT/verify.json"
cp "$WORK/summary.txt" "$OUT/summary.txt"
cp "$WORK/nvidia-smi.txt" "$OUT/nvidia-smi.txt" 2>/dev/null
for fw in torch jax; do cp "$WORK/$fw/sections.json" "$OUT/sections-$fw.json" 2>/dev/null; done
cp "$OUT/gpu_check.log" "$WORK/logs/00-transcript-so-far.log" 2>/dev/null
tar -C "$(dirname "$WORK")" --exclude="$(basename "$WORK")/site" --exclude="$(basename "$WORK")/sm-site" \
  --exclude="$(basename "$WORK")/buildtools" --exclude="$(basename "$WORK")/tracy-csvexport" \
  -czf "$OUT/results.tar.gz" "$(basename "$WORK")"
if [ "$(stat -c %s "$OUT/results.tar.gz")" -gt $((15 * 1024 * 1024)) ]; then
  echo "results.tar.gz over 15 MiB: leaving the captures and CSVs out"
  tar -C "$(dirname "$WORK")" --exclude='*.tracy' --exclude='*.csv' --exclude="$(basename "$WORK")/site" \
    --exclude="$(basename "$WORK")/sm-site" --exclude="$(basename "$WORK")/buildtools" \
    --exclude="$(basename "$WORK")/tracy-csvexport" -czf "$OUT/results.tar.gz" "$(basename "$WORK")"
fi
echo
echo "==================== summary ($(elapsed)s) ===================="
cat "$WORK/summary.txt"
echo "outputs in $OUT:"
ls -la "$OUT"
exec >&- 2>&-
wait "$TEE_PID"   # the transcript is complete before the run ends
