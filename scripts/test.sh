#!/usr/bin/env bash
# Runs the test suite in the pinned virtualenv (created on first use).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/env.sh"
cd "$root"
exec python -m pytest "$@"
