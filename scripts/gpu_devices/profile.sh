#!/usr/bin/env bash
# Issue M item 5 on a GPU machine (no network): `sectionmark profile --device cuda --device cuda` end to end on the
# two-device GPTs of scripts/gpu_devices/prepare.py (.gpu/devices/{tp,pp}), with .whl/ as scripts/gpu_prepare.sh
# builds it (iree-base-runtime 3.13.0 for CPython 3.12, ml_dtypes, zstandard, setuptools). Installs the runtime and
# this project (its C extensions built here), then per module: the profile (20 calls after 3 warmup) with every
# output a several-device profile draws, and the module loaded in-process on both devices against eager torch.
# Results: $OUT/profile.tar.gz (tables, JSON, HTML, Perfetto, both captures, logs) and $OUT/summary.txt.
#
#   bash scripts/gpu_devices/profile.sh
#   GPU_DEVICE=local-task MODULES=DIR SKIP_INSTALL=1 bash scripts/gpu_devices/profile.sh   # try it on a CPU machine
#     (DIR/{tp,pp}: the same GPTs compiled with sm.compile(..., devices=2) for llvm-cpu)
set -u -o pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT=${OUT:-$ROOT/.gpu-out}
WORK=/tmp/sm-gpu-devices-profile
PY=python3
DEVICE=${GPU_DEVICE:-cuda} MODULES=${MODULES:-$ROOT/.gpu/devices}
if ! python3 -c 'import numpy' 2>/dev/null && [ -x /opt/torch/.venv/bin/python3 ]; then PY=/opt/torch/.venv/bin/python3; fi
rm -rf "$WORK" && mkdir -p "$WORK/site" "$WORK/sm-site" "$WORK/buildtools" "$WORK/results" "$OUT"
exec > >(tee "$WORK/results/profile.log") 2>&1
[ "${SKIP_INSTALL:-0}" = 1 ] || export PYTHONPATH="$WORK/sm-site:$WORK/site"
export PYTHONDONTWRITEBYTECODE=1 PYTHONNOUSERSITE=1
export PATH="$WORK/sm-site/bin:$WORK/site/bin:$PATH"
LOGS="$WORK/results" TAIL=12
source "$ROOT/scripts/gpu_devices/step.sh"
install_all() {
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$WORK/site" "$ROOT"/.whl/iree_base_runtime-*.whl
  for module in ml_dtypes zstandard; do
    "$PY" -c "import $module" 2>/dev/null ||
      "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$WORK/site" "$ROOT"/.whl/"$module"-*.whl
  done
  if [ "$("$PY" -c 'import setuptools; print(int(setuptools.__version__.split(".")[0]) >= 77)' 2>/dev/null)" != True ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$WORK/buildtools" "$ROOT"/.whl/setuptools-*.whl
  fi
  (cd "$ROOT" && PYTHONPATH="$WORK/buildtools:$PYTHONPATH" "$PY" -m pip install -q --no-index --no-deps \
    --no-build-isolation --no-cache-dir --target "$WORK/sm-site" .) && "$PY" -m sectionmark --help > /dev/null
}
profile() {  # MODULE: the several-device profile, every output it draws
  local dir=$MODULES/$1 out=$WORK/results/$1
  mkdir -p "$out" && cd "$out" &&
    "$PY" -m sectionmark profile "$dir/model.vmfb" --input "$dir/tokens.npy" --device "$DEVICE" --device "$DEVICE" -n 20 \
      --warmup 3 --keep-profile run.tracy --json sections.json --csv sections.csv --html report.html \
      --perfetto run.perfetto.json --tracy sections.tracy > table.txt && cat table.txt
}
in_process() {  # MODULE: sm.load on both devices, its logits against eager torch's
  "$PY" "$ROOT/scripts/gpu_devices/logits.py" in-process "$MODULES/$1" "$DEVICE"
}
export -f install_all profile in_process
export PY ROOT WORK DEVICE MODULES
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader | tee "$OUT/summary.txt"
[ "${SKIP_INSTALL:-0}" = 1 ] || step install 240 install_all
for m in tp pp; do
  step "$m-profile" 120 profile "$m"
  step "$m-in-process" 60 in_process "$m"
done
(cd "$WORK/results" && tar czf "$OUT/profile.tar.gz" .)
ls -la "$OUT"
