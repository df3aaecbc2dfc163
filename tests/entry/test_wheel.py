"""The installed package as a user gets it: scripts/check_wheel.sh builds the wheel and the sdist, installs each
into a fresh virtualenv without the source tree (the sdist with CC=false), runs `sectionmark demo` from an empty
directory and a smoke test of the install."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_wheel_and_sdist_install_and_run_the_demo_without_the_source_tree():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs the git checkout (the script packages the files git tracks)")
    done = subprocess.run(["bash", str(ROOT / "scripts" / "check_wheel.sh")], capture_output=True, text=True,
                          env={**os.environ, "PYTHON": sys.executable}, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "sectionmark demo in an empty directory (compiled)" in done.stderr
    assert "sectionmark demo in an empty directory (fallback)" in done.stderr
    fallback = [line for line in done.stdout.splitlines() if "pure-Python fallback" in line]
    extensions = re.findall(r'Extension\("sectionmark\.[\w.]*?(\w+)"', (ROOT / "setup.py").read_text())
    assert len(fallback) == 1 and len(extensions) >= 5 and f"({', '.join(extensions)})" in fallback[0]
    assert done.stdout.count("ok: ") == 2 and "venv-sdist" in done.stdout
