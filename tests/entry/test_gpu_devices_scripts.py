"""scripts/gpu_devices/: the several-CUDA-device runs' scripts, checked on the CPU.

probe.sh recorded tests/readers/h200-two-devices on an H200; profile.sh runs `sectionmark profile --device cuda
--device cuda` end to end there (tried on a CPU machine with ``GPU_DEVICE=local-task``: its header). Here: their
Python lints clean and its check of the logits works on hand-made arrays, and the bash parses.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "scripts" / "gpu_devices"


def load_logits():
    spec = importlib.util.spec_from_file_location("gpu_devices_logits", FOLDER / "logits.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_python_lints_clean_and_the_bash_parses():
    files = sorted(FOLDER.glob("*.py"))
    assert {path.name for path in files} == {"logits.py", "prepare.py"}
    lint = subprocess.run([sys.executable, "-m", "pyflakes", *map(str, files)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    for script in FOLDER.glob("*.sh"):
        subprocess.run(["bash", "-n", str(script)], check=True)
        assert "<<" not in script.read_text(encoding="utf-8")  # no heredoc: the Python is in the .py files


def test_compare_passes_close_logits_and_fails_far_or_misshapen_ones(tmp_path, capsys):
    logits = load_logits()
    reference = np.linspace(-1, 1, 32, dtype=np.float32).reshape(2, 16)
    np.save(tmp_path / "reference.npy", reference)
    np.save(tmp_path / "close.npy", reference + 5e-7)
    np.save(tmp_path / "far.npy", reference + 0.01)
    np.save(tmp_path / "shape.npy", reference.reshape(4, 8))
    assert logits.main(["compare", str(tmp_path / "close.npy"), str(tmp_path / "reference.npy")]) == 0
    assert "max abs error against eager 5" in capsys.readouterr().out
    assert logits.main(["compare", str(tmp_path / "far.npy"), str(tmp_path / "reference.npy")]) == 1
    with pytest.raises(SystemExit, match="shapes differ"):
        logits.main(["compare", str(tmp_path / "shape.npy"), str(tmp_path / "reference.npy")])
