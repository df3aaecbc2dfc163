#!/usr/bin/env bash
# Builds sectionmark's wheel and sdist and checks each as a user gets it: installed into a fresh virtualenv
# WITHOUT the source tree, then `sectionmark demo` from an empty directory and a smoke test of the install
# (imported from the install, py.typed and the report's files shipped, the pytest plugin registered).
# The sdist is installed with CC=false: no C compiler, so it must print the fallback line and still work.
#
# The dependencies (torch, IREE, ...: gigabytes) are not downloaded again: the fresh virtualenv sees the
# project's virtualenv's packages through a .pth file, every one of them except sectionmark itself, which
# comes only from the wheel or the sdist. `--system-site-packages` is not used.
#
#   bash scripts/check_wheel.sh            # both; about 5 minutes on 2 cores
#   bash scripts/check_wheel.sh wheel      # the wheel only
set -euo pipefail
unset PYTHONPATH  # a source tree on the path would hide what the install lacks
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-$root/.venv/bin/python}"
[ -x "$python" ] || python="$(command -v python3)"
which="${1:-both}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
say() { echo "[check_wheel] $*" >&2; }

# The tree as committed (plus new files git does not ignore), so nothing built here leaks into the packages.
mkdir "$work/tree"
(cd "$root" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$work/tree")
say "building the wheel and the sdist"
"$python" -m pip wheel --quiet --no-deps --no-build-isolation -w "$work/dist" "$work/tree"
(cd "$work/tree" && "$python" -c "import sys, setuptools.build_meta as b; b.build_sdist(sys.argv[1])" "$work/dist" >/dev/null)
wheel="$(ls "$work"/dist/sectionmark-*.whl)"
sdist="$(ls "$work"/dist/sectionmark-*.tar.gz)"
for member in sectionmark/py.typed sectionmark/demo/model_torch.py sectionmark/renderers/report.js; do
  "$python" -c "import sys, zipfile; sys.exit(sys.argv[2] not in zipfile.ZipFile(sys.argv[1]).namelist())" "$wheel" "$member" \
    || { say "the wheel lacks $member"; exit 1; }
done

# The dependencies: every entry of the project's site-packages but sectionmark's own (its editable install).
site="$("$python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")"
mkdir "$work/deps"
for entry in "$site"/*; do
  case "$(basename "$entry")" in
    sectionmark*|__editable__*sectionmark*|*.pth) ;;
    *) ln -s "$entry" "$work/deps/" ;;
  esac
done

fresh_venv() {  # $1: its folder
  "$python" -m venv --without-pip "$1"
  local purelib
  purelib="$("$1/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")"
  echo "$work/deps" > "$purelib/sectionmark-check-deps.pth"
}

check_install() {  # $1: the venv, $2: "compiled" or "fallback"
  local venv="$1" empty
  empty="$(mktemp -d -p "$work")"
  say "sectionmark demo in an empty directory ($2)"
  (cd "$empty" && "$venv/bin/sectionmark" demo -n 3 --warmup 1 > demo.txt)
  grep -q "coverage:" "$empty/demo.txt" && grep -q "Self Attention" "$empty/demo.txt"
  head -c 15 "$empty/out/report.html" | grep -q "<!DOCTYPE html>"
  for file in table.txt sections.json sections.csv run.perfetto.json sections.png run.tracy kernels.txt SUMMARY.txt; do
    [ -s "$empty/out/$file" ] || { say "the demo wrote no $file"; exit 1; }
  done
  say "smoke test of the install ($2)"
  (cd "$empty" && "$venv/bin/python" - "$venv" "$2" <<'PY'
import importlib.metadata as metadata
import importlib.util
import sys
from pathlib import Path

import sectionmark

venv, kind = Path(sys.argv[1]).resolve(), sys.argv[2]
package = Path(sectionmark.__file__).resolve().parent
assert package.is_relative_to(venv), f"sectionmark imported from {package}, not the fresh virtualenv"
assert (package / "py.typed").is_file() and (package / "renderers" / "report.css").is_file()
points = [point for point in metadata.entry_points(group="pytest11") if point.name == "sectionmark"]
assert [point.value for point in points] == ["sectionmark.pytest_plugin"], points
compiled = [importlib.util.find_spec(name) is not None for name in
            ("sectionmark.markers._zonestack", "sectionmark.readers._ireeprof", "sectionmark.readers._tracyread")]
assert compiled == [kind == "compiled"] * 3, compiled
from sectionmark.renderers import json_out

session = json_out.load("out/sections.json")
assert repr(session).startswith("<ProfileSession main: 3 calls (+1 warmup) on local-task")
print(f"ok: {package}")
PY
  )
  # (the whole help is read before grep: `grep -q` leaving early would fail the pipe under pipefail)
  (cd "$empty" && "$venv/bin/python" -m pytest --help > pytest-help.txt 2>&1) \
    && grep -q -- "--sectionmark-fail" "$empty/pytest-help.txt" \
    || { tail -20 "$empty/pytest-help.txt"; say "pytest in the fresh virtualenv does not load the sectionmark plugin"; exit 1; }
}

if [ "$which" != sdist ]; then
  fresh_venv "$work/venv-wheel"
  "$python" -m pip --python "$work/venv-wheel/bin/python" install --quiet --no-deps --no-index "$wheel"
  check_install "$work/venv-wheel" compiled
fi
if [ "$which" != wheel ]; then
  fresh_venv "$work/venv-sdist"
  say "installing the sdist without a C compiler (CC=false)"
  CC=false "$python" -m pip --python "$work/venv-sdist/bin/python" install -v --no-deps --no-index \
    --no-build-isolation "$sdist" > "$work/sdist-install.log" 2>&1 \
    || { tail -30 "$work/sdist-install.log"; exit 1; }
  grep -m1 "sectionmark: C extensions not built" "$work/sdist-install.log" || true
  grep -q "pure-Python fallback" "$work/sdist-install.log" || { say "no fallback line"; exit 1; }
  check_install "$work/venv-sdist" fallback
fi
say "ok"
