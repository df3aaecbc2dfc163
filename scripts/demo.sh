#!/usr/bin/env bash
# Runs the nanoGPT demo: export -> compile -> profile -> table, report.html, trace files, chart in out/.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/env.sh"
cd "$root"
exec python -m sectionmark demo --out out "$@"
