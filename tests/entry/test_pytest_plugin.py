"""The sectionmark pytest plugin, in a project of its own run by pytest as a user runs it.

Acceptance: three sessions on an unchanged model (the second, the first judged, with a CPU hog on every core
beside it) pass the ``--sectionmark-fail '*:25%'`` gate; a fourth with one section doing twice the work fails it,
naming that section and only it. The gate is paired: each session after the first runs the module the last session
kept beside its own, alternately (runs of one module taken apart drift as wholes by up to +81% on a busy machine;
issue Q). `sectionmark history` shows the four runs; judged against run 4's module, a fifth passes. With the kept
modules deleted, the gate falls back to the recorded runs. Two xdist workers recording at once lose no
row. A malformed gate, a bad store or an unknown run is one line.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from sectionmark.cli import main
from sectionmark.workflows.history import HistoryStore

ROOT = Path(__file__).resolve().parents[2]
MODEL = """
import torch
from sectionmark import section

LIGHT_REPEATS = {repeats}


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.heavy = torch.nn.Parameter(torch.randn(256, 256, generator=generator) / 16)
        self.light = torch.nn.Parameter(torch.randn(256, 256, generator=generator) / 16)

    def forward(self, x):
        with section("Heavy"):
            x = torch.tanh(torch.tanh(x @ self.heavy) @ self.heavy)
        with section("Light"):
            for _ in range(LIGHT_REPEATS):
                x = torch.tanh(x @ self.light)
        return x
"""
TESTS = """
import torch
import sectionmark as sm
from model import Model


def compiled_model():
    x = torch.randn(64, 256, generator=torch.Generator().manual_seed(1))
    return sm.compile(sm.torch.export(Model(), args=(x,))), x.numpy()


def test_model_speed(sectionmark_profile):
    compiled, x = compiled_model()
    prof = sectionmark_profile(compiled, args=(x,), iterations=20, warmup=3)
    assert {row.leaf for row in prof.section_rows} == {"Heavy", "Light"} and prof.runs >= 3
"""
WORKER_TESTS = """
import pytest
from test_speed import compiled_model


@pytest.mark.parametrize("worker", ["one", "two"])
def test_recorded_by_each_worker(sectionmark_profile, worker):
    compiled, x = compiled_model()
    sectionmark_profile(compiled, args=(x,), runs=2, iterations=5, warmup=1)
"""


def plugin_installed() -> bool:
    """The installed sectionmark registers the plugin (pyproject's pytest11 entry point)."""
    return any(point.value == "sectionmark.pytest_plugin" for point in entry_points(group="pytest11"))


def project(folder: Path, repeats: int) -> Path:
    folder.mkdir(exist_ok=True)
    (folder / "model.py").write_text(MODEL.format(repeats=repeats), encoding="utf-8")
    (folder / "test_speed.py").write_text(TESTS, encoding="utf-8")
    (folder / "pytest.ini").write_text("[pytest]\nsectionmark_history = store/history.sqlite\n", encoding="utf-8")
    # From a source tree whose sectionmark is not installed, the conftest loads the plugin by name.
    conftest = "" if plugin_installed() else 'pytest_plugins = ["sectionmark.pytest_plugin"]\n'
    (folder / "conftest.py").write_text(conftest, encoding="utf-8")
    return folder


def pytest_in(folder: Path, *options: str) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != "SECTIONMARK_RUN_ID"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options], cwd=folder,
                          env=env, capture_output=True, text=True, timeout=900)


def with_hog(run):
    """``run()`` beside a CPU hog on every core (busy loops, killed by process id after)."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        return run()
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


GATE = ("--sectionmark-fail", "*:25%", "test_speed.py")


@pytest.mark.slow
def test_the_gate_passes_unchanged_runs_and_fails_the_slower_section(tmp_path, capsys):
    folder = project(tmp_path / "project", repeats=1)
    first = pytest_in(folder, *GATE)
    results = [first, with_hog(lambda: pytest_in(folder, *GATE)), pytest_in(folder, *GATE)]
    for result in results:
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    store = folder / "store" / "history.sqlite"
    with HistoryStore(store, create=False) as history:
        # sessions 2 and 3 ran the module the one before kept beside their own: 10 rounds each
        assert [len(result.values_ns) for result in history.results(section="Light")] == [3, 10, 10]
    project(folder, repeats=2)  # the Light section does twice the work
    slower = pytest_in(folder, *GATE)
    assert slower.returncode == 1, slower.stdout[-3000:]
    failure = next(line for line in slower.stdout.splitlines() if "slower than its history" in line)
    assert "Light" in failure and "Heavy" not in failure and "rounds run alternately with the module of run 3" in \
        failure, failure

    with HistoryStore(store, create=False) as history:
        assert len(history.runs()) == 4 and all(run.machine for run in history.runs())
    capsys.readouterr()
    assert main(["history", "--store", str(store), "--section", "Light"]) == 0
    shown = capsys.readouterr().out
    print(slower.stdout[-2000:], shown)  # seen with -s, or when an assertion below fails
    rows = [line for line in shown.splitlines() if line.startswith("│") and line.split("│")[1].strip()]
    assert [row.split("│")[1].strip() for row in rows] == ["1", "2", "3", "4"]
    # Against run 4's module (--sectionmark-compare RUN), the slower module is no change: the gate passes.
    against_four = pytest_in(folder, "--sectionmark-compare", "4", "--sectionmark-fail", "Light:25%", "test_speed.py")
    assert against_four.returncode == 0, against_four.stdout[-3000:]
    # The kept modules deleted: the recorded runs are judged instead (fresh runs, not rounds).
    for copy in (folder / "store" / "modules").iterdir():
        copy.unlink()
    fallback = pytest_in(folder, "test_speed.py", "--sectionmark-compare")
    assert fallback.returncode == 0 and "rounds run alternately" not in fallback.stdout, fallback.stdout[-3000:]
    with HistoryStore(store, create=False) as history:
        assert len(history.results(section="Light")[-1].values_ns) == 3  # fresh runs, not rounds


@pytest.mark.slow
def test_two_xdist_workers_record_one_run_and_lose_no_row(tmp_path):
    pytest.importorskip("xdist")
    folder = project(tmp_path / "project", repeats=1)
    (folder / "test_workers.py").write_text(WORKER_TESTS, encoding="utf-8")
    result = pytest_in(folder, "-n", "2", "test_workers.py")
    assert result.returncode == 0 and "2 passed" in result.stdout, result.stdout[-3000:] + result.stderr[-2000:]
    with HistoryStore(folder / "store" / "history.sqlite", create=False) as history:
        assert len(history.runs()) == 1  # both workers under the session's run
        tests = {result.test for result in history.results()}
        assert tests == {"test_workers.py::test_recorded_by_each_worker[one]",
                         "test_workers.py::test_recorded_by_each_worker[two]"}
        assert len(history.results()) == 2 * 3  # Heavy, Light and the unmarked time of each


BAD_STORE_TEST = """
def test_uses_the_store(sectionmark_profile):
    sectionmark_profile("never-profiled.vmfb")
"""


def test_a_malformed_gate_is_one_usage_error(tmp_path):
    folder = project(tmp_path / "project", repeats=1)
    result = pytest_in(folder, "--sectionmark-fail", "Light", "test_speed.py")
    assert result.returncode == 4  # pytest's usage error, before any test ran
    assert "ERROR: --sectionmark-fail 'Light': expected SECTION:PERCENT%" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_a_bad_store_or_run_fails_the_test_in_one_line_before_profiling(tmp_path):
    folder = project(tmp_path / "project", repeats=1)
    (folder / "test_store.py").write_text(BAD_STORE_TEST, encoding="utf-8")
    store = folder / "store" / "history.sqlite"
    store.parent.mkdir()
    store.write_bytes(b"\x00" * 4096)
    result = pytest_in(folder, "test_store.py")
    assert result.returncode == 1
    assert "Failed: sectionmark: " in result.stdout and "not a sectionmark history store" in result.stdout
    assert "never-profiled.vmfb" not in result.stdout and store.read_bytes() == b"\x00" * 4096  # left as it was
    store.unlink()
    result = pytest_in(folder, "--sectionmark-compare", "7", "test_store.py")
    assert result.returncode == 1 and "sectionmark: no recorded run '7'" in result.stdout


WIDTH_TEST = """
import numpy as np
import sectionmark as sm

WIDTH = {width}
SOURCE = '''
func.func @main(%x: tensor<WxWxf32>) -> tensor<WxWxf32> {{
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<WxWxf32>
  %z = linalg.fill ins(%c0 : f32) outs(%e : tensor<WxWxf32>) -> tensor<WxWxf32>
  %m = linalg.matmul ins(%x, %x : tensor<WxWxf32>, tensor<WxWxf32>) outs(%z : tensor<WxWxf32>) -> tensor<WxWxf32> loc("sectionmark:Square")
  return %m : tensor<WxWxf32>
}}
'''.replace("W", str(WIDTH))


def test_square(sectionmark_profile):
    sectionmark_profile(sm.compile(SOURCE, quiet=True), args=(np.ones((WIDTH, WIDTH), np.float32),), runs=2,
                        rounds=2, iterations=3, warmup=1)
"""


def test_a_kept_module_that_cannot_run_the_new_inputs_gives_the_between_runs_verdict_and_this_run_is_recorded(
        tmp_path):
    folder = project(tmp_path / "project", repeats=1)
    outputs = []
    for width in (16, 32, 32):  # the input's shape changes after the first session
        (folder / "test_width.py").write_text(WIDTH_TEST.format(width=width), encoding="utf-8")
        result = pytest_in(folder, "test_width.py", "--sectionmark-compare")
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
        outputs.append(result.stdout)
    print(outputs[1][-3000:])  # seen with -s, or when an assertion below fails
    notes = [line for line in outputs[1].splitlines() if "judged between runs instead" in line]
    assert len(notes) == 1 and notes[0].startswith("test_width.py::test_square: no rounds beside the module of "
                                                   "run 1 (iree-benchmark-module failed"), notes
    assert "judged between runs instead" not in outputs[2]
    with HistoryStore(folder / "store" / "history.sqlite", create=False) as history:
        assert len(history.runs()) == 3
        # session 2: 2 fresh runs (its baseline could not run); session 3: 2 rounds beside session 2's module
        assert [len(result.values_ns) for result in history.results(section="Square")] == [2, 2, 2]
