# Sourced by probe.sh and profile.sh: `step NAME LIMIT COMMAND...` runs COMMAND (a program or an exported
# function) under `timeout`, its output in $LOGS/NAME.log and its last $TAIL lines here, its exit status and
# seconds appended to $OUT/summary.txt; returns its exit status.
step() {
  local name=$1 limit=$2 t0 rc
  shift 2
  t0=$(date +%s)
  timeout -k 5 "$limit" bash -c '"$@"' _ "$@" > "$LOGS/$name.log" 2>&1 < /dev/null
  rc=$?
  echo "$(printf '%-22s rc=%-4s %4ss' "$name" "$rc" $(( $(date +%s) - t0 )))" | tee -a "$OUT/summary.txt"
  tail -n "${TAIL:-6}" "$LOGS/$name.log" | cut -c1-300 | sed 's/^/    /'
  return $rc
}
