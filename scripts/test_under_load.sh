#!/usr/bin/env bash
# Runs the test suite (or the pytest arguments given: a file, -k ...) beside a CPU hog on every core.
# The suite must pass on a busy machine (a CI runner, a laptop with a browser open): no test may assert a wall
# time or a ratio of times of separate runs (tests/entry/test_no_timed_assertions.py). The hogs are plain
# busy loops at normal priority, one per CPU this shell may run on; they are ended however the run ends
# (exit, Ctrl-C, SIGTERM), by their process ids. SECTIONMARK_PYTHON=/path/to/python runs pytest with that
# interpreter (an environment set up already) instead of scripts/test.sh's .venv.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cores="$(python3 -c 'import os; print(len(os.sched_getaffinity(0)))' 2>/dev/null || nproc)"
hogs=()
end_hogs() {
  if [ "${#hogs[@]}" -gt 0 ]; then
    kill "${hogs[@]}" 2>/dev/null || true
    wait "${hogs[@]}" 2>/dev/null || true
  fi
}
tests=""
trap end_hogs EXIT
# The tests run in the background and the script waits for them, so that a signal is handled at once (bash runs
# a trap only once its foreground command has ended): they are ended with the hogs.
trap '[ -z "$tests" ] || kill "$tests" 2>/dev/null; exit 130' INT
trap '[ -z "$tests" ] || kill "$tests" 2>/dev/null; exit 143' TERM
for _ in $(seq "$cores"); do
  ( trap - EXIT INT TERM; while :; do :; done ) &
  hogs+=("$!")
done
echo "test_under_load: ${#hogs[@]} CPU hog(s) running (one per core) beside the tests" >&2
if [ -n "${SECTIONMARK_PYTHON:-}" ]; then
  (cd "$root" && exec "$SECTIONMARK_PYTHON" -m pytest "$@") &
else
  bash "$root/scripts/test.sh" "$@" &
fi
tests=$!
status=0
wait "$tests" || status=$?
exit "$status"
