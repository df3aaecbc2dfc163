#!/usr/bin/env bash
# Creates (once) the pinned virtualenv .venv with sectionmark and its dev tools.
# Sourced by demo.sh and test.sh; safe to run again (it only installs what changed).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"
if [ ! -x "$root/.venv/bin/python" ]; then
  echo "sectionmark: creating virtualenv in $root/.venv" >&2
  "$python" -m venv "$root/.venv"
  "$root/.venv/bin/python" -m pip install --quiet --upgrade pip
fi
stamp="$root/.venv/.sectionmark-installed"
stale=0
for input in constraints.txt pyproject.toml setup.py src/sectionmark/markers/_zonestack.c src/sectionmark/readers/_ireeprof.c \
    src/sectionmark/profiling/_sectionpass.c src/sectionmark/_buffers.h src/sectionmark/readers/_tracyread.c \
    src/sectionmark/renderers/_tracyreplay.c; do
  if [ "$root/$input" -nt "$stamp" ]; then stale=1; fi
done
if [ ! -f "$stamp" ] || [ "$stale" = 1 ]; then
  echo "sectionmark: installing pinned dependencies (first run takes a few minutes)" >&2
  # torch is pinned to the CPU build (torch==2.13.0); see constraints.txt.
  "$root/.venv/bin/python" -m pip install --quiet -c "$root/constraints.txt" -e "$root[dev]"
  touch "$stamp"
fi
export PATH="$root/.venv/bin:$PATH"
