#!/usr/bin/env bash
# Issue M item 5 on a GPU machine (no network): what IREE 3.13 does with a module compiled for two CUDA devices
# run on one GPU (two HAL devices on cuda://0: `--device=cuda --device=cuda`), recorded raw for the CPU side.
# Needs .whl/ (iree-base-runtime 3.13.0 for CPython 3.12, ml_dtypes) and .gpu/devices/{tp,pp}/ from
# scripts/gpu_devices/prepare.py. Per module (tp: tensor-parallel GPT, pp: pipeline-parallel GPT):
#   run      iree-run-module on both devices, its logits against eager torch's (reference.npy)
#   capture  the tracing iree-benchmark-module (--cuda_tracing=2, 23 calls) under iree-tracy-capture: what
#            `sectionmark profile --device cuda` runs, with a second --device
#   halprof  the plain tool with HAL-native profiling (--device_profiling_mode), to see whether CUDA records it
# Everything lands in $OUT/probe.tar.gz (logs, .tracy, logits); summary.txt says rc and time of each step.
#
#   bash scripts/gpu_devices/probe.sh
set -u -o pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT=${OUT:-$ROOT/.gpu-out}
WORK=/tmp/sm-gpu-devices
PY=python3
if ! python3 -c 'import numpy' 2>/dev/null && [ -x /opt/torch/.venv/bin/python3 ]; then PY=/opt/torch/.venv/bin/python3; fi
rm -rf "$WORK" && mkdir -p "$WORK/site" "$OUT"
exec > >(tee "$OUT/probe.log") 2>&1
START=$(date +%s)
LOGS="$OUT" TAIL=6
source "$ROOT/scripts/gpu_devices/step.sh"
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader | tee "$OUT/gpu.txt"
"$PY" -VV
"$PY" -m pip install -q --no-index --no-deps --no-compile --target "$WORK/site" "$ROOT"/.whl/iree_base_runtime-*.whl
"$PY" -c 'import ml_dtypes' 2>/dev/null ||
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$WORK/site" "$ROOT"/.whl/ml_dtypes-*.whl
LIBS=$WORK/site/iree/_runtime_libs TRACY_LIBS=$WORK/site/iree/_runtime_libs_tracy
chmod +x "$LIBS"/* "$TRACY_LIBS"/* 2>/dev/null
step list-devices 30 "$LIBS/iree-run-module" --list_devices

compare() {  # OUTPUT.npy REFERENCE.npy
  PYTHONPATH="$WORK/site" "$PY" "$ROOT/scripts/gpu_devices/logits.py" compare "$1" "$2"
}

capture() {  # NAME MODULE_DIR DEVICE...: the tracing tool under a capture, 23 calls, dispatch zones on
  local name=$1 dir=$2 port=$((20000 + RANDOM % 20000))
  shift 2
  local devices=()
  for device in "$@"; do devices+=("--device=$device"); done
  "$TRACY_LIBS/iree-tracy-capture" -o "$OUT/$name.tracy" -f -a 127.0.0.1 -p "$port" > "$OUT/$name.capture.log" 2>&1 &
  local capture_pid=$!
  IREE_PY_RUNTIME=tracy TRACY_NO_EXIT=1 TRACY_PORT=$port TRACY_ONLY_LOCALHOST=1 TRACY_ONLY_IPV4=1 TRACY_NO_SAMPLING=1 \
    "$TRACY_LIBS/iree-benchmark-module" "${devices[@]}" --module="$dir/model.vmfb" --function=main \
    --input=@"$dir/tokens.npy" --benchmark_min_time=1x --benchmark_repetitions=23 --benchmark_format=json \
    --cuda_tracing=2
  local rc=$?
  timeout 60 tail --pid=$capture_pid -f /dev/null
  kill $capture_pid 2>/dev/null
  cat "$OUT/$name.capture.log" | tail -n 3
  ls -la "$OUT/$name.tracy"
  return $rc
}

export -f compare capture
export OUT WORK PY LIBS TRACY_LIBS ROOT
for m in tp pp; do
  dir=$ROOT/.gpu/devices/$m
  step "$m-run" 60 "$LIBS/iree-run-module" --device=cuda --device=cuda --module="$dir/model.vmfb" --function=main \
    --input=@"$dir/tokens.npy" --output=@"$OUT/$m-logits.npy" &&
    step "$m-logits" 30 compare "$OUT/$m-logits.npy" "$dir/reference.npy"
  step "$m-capture" 120 capture "$m" "$dir" cuda cuda
  step "$m-halprof" 60 "$LIBS/iree-benchmark-module" --device=cuda --device=cuda --module="$dir/model.vmfb" \
    --function=main --input=@"$dir/tokens.npy" --benchmark_min_time=1x --benchmark_repetitions=3 \
    --device_profiling_mode=queue-events,host-execution,executable-metadata,memory-events \
    --device_profiling_output="$OUT/$m-halprof.ireeprof"
done
# One device of each kind for the same GPU twice by URI, and the single-device demo path's capture of tp's
# device 0 alone would need another module: not probed.
step tp-capture-uri 120 capture tp-uri "$ROOT/.gpu/devices/tp" cuda://0 cuda://0
echo "total $(( $(date +%s) - START )) s"
ls -la "$OUT"
# The device tool brings back a few files only: everything in one archive, the summary beside it.
(cd "$OUT" && tar czf "$WORK/probe.tar.gz" --exclude=summary.txt . && find . -type f ! -name summary.txt -delete &&
  mv "$WORK/probe.tar.gz" .)
