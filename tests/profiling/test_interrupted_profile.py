"""A profile ended by a signal leaves nothing behind: no process of the run, no scratch folder.

SIGTERM and SIGHUP during ``sectionmark profile`` end the tool's process group, remove the scratch folder and
exit with one line (128 + the signal); during ``sm.profile`` the same clean-up runs and the process then ends
by the signal, as it would have without sectionmark. A ``kill -9`` runs nothing: the next profile ends the tool
it left and removes its folder (`sectionmark.artifacts.scratch`). Each run gets a private TMPDIR.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from sectionmark.artifacts import scratch
from sectionmark.errors import Interrupted, signals_raising

SRC = Path(__file__).resolve().parents[2] / "src"
TOOL = "iree-benchmark-module"
WAIT_S = 300.0  # a bound on waiting for the run to reach its tool, not a measured time: the suite may be loaded
LONG_RUN = ["-n", "1000000", "--warmup", "0", "--no-cost"]  # the profiled run, far longer than the test waits (the
# cost rounds before it are short: --no-cost leaves them out so that the signal comes in the long run)


@pytest.fixture
def module_and_inputs(compiled_two_matmuls, inputs, tmp_path):
    _compiled, vmfb = compiled_two_matmuls
    paths = []
    for index, array in enumerate(inputs):
        paths.append(tmp_path / f"arg{index}.npy")
        np.save(paths[-1], array)
    return vmfb, paths


def _environment(temporary: Path) -> dict[str, str]:
    temporary.mkdir(exist_ok=True)
    return {**os.environ, "TMPDIR": str(temporary), "PYTHONPATH": os.pathsep.join(
        [str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])])}


def _start(command: list[str], temporary: Path) -> psutil.Popen:
    return psutil.Popen(command, env=_environment(temporary), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        text=True)


def _profile_command(vmfb: Path, paths: list[Path], *extra: str) -> list[str]:
    inputs = [argument for path in paths for argument in ("--input", str(path))]
    return [sys.executable, "-m", "sectionmark", "profile", str(vmfb), *inputs, *extra]


@pytest.fixture
def tool_of():
    """The run's iree-benchmark-module once it runs (and the scratch folder with it); a tool still running when
    the test ends (it failed) is ended, the run too, so that a failure leaves no long run behind."""
    seen: list[psutil.Process] = []

    def find(process: psutil.Popen) -> psutil.Process:
        seen.append(process)
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            assert process.poll() is None, f"the run ended before its tool started: {process.communicate()}"
            tools = [child for child in process.children(recursive=True) if child.name().startswith(TOOL[:15])]
            if tools:
                seen.append(tools[0])
                return tools[0]
            time.sleep(0.05)
        raise AssertionError(f"{TOOL} never started")

    yield find
    for process in seen:
        if not _gone(process):
            process.kill()


def _gone(process: psutil.Process) -> bool:
    try:
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _marked_children(temporary: Path) -> set[int]:
    children = set()
    for folder in _scratch_folders(temporary):
        try:
            children |= {pid for pid, _start in json.loads((folder / scratch.MARKER).read_text())["children"]}
        except (OSError, ValueError, KeyError):
            pass  # being replaced
    return children


def _scratch_folders(temporary: Path) -> list[Path]:
    return sorted(path for path in temporary.iterdir() if path.name.startswith(scratch.PREFIX))


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_during_sectionmark_profile_ends_the_tool_removes_the_scratch_folder_and_says_so(
        module_and_inputs, tool_of, tmp_path, signum):
    vmfb, paths = module_and_inputs
    temporary = tmp_path / "tmp"
    run = _start(_profile_command(vmfb, paths, *LONG_RUN), temporary)
    tool = tool_of(run)
    assert _scratch_folders(temporary)  # the run is under way: its folder exists
    run.send_signal(signum)
    _stdout, stderr = run.communicate(timeout=WAIT_S)
    assert run.returncode == 128 + signum
    assert stderr == f"sectionmark: interrupted by {signal.Signals(signum).name}\n"
    assert _gone(tool)
    assert _scratch_folders(temporary) == []


def test_sigterm_during_sm_profile_cleans_up_then_ends_the_process_by_the_signal(module_and_inputs, tool_of, tmp_path):
    vmfb, paths = module_and_inputs
    temporary = tmp_path / "tmp"
    code = (f"import numpy as np, sectionmark.workflows.measure as p; "
            f"p.profile({str(vmfb)!r}, [np.load(path) for path in {[str(path) for path in paths]!r}], "
            f"iterations=1000000, warmup=0, quiet=True, cost=False)")
    run = _start([sys.executable, "-c", code], temporary)
    tool = tool_of(run)
    run.send_signal(signal.SIGTERM)
    _stdout, stderr = run.communicate(timeout=WAIT_S)
    assert run.returncode == -signal.SIGTERM, stderr  # ended by the signal, as without sectionmark
    assert _gone(tool)
    assert _scratch_folders(temporary) == []


def test_after_kill_9_the_next_profile_ends_the_orphaned_tool_and_removes_its_folder(module_and_inputs, tool_of,
                                                                                    tmp_path):
    vmfb, paths = module_and_inputs
    temporary = tmp_path / "tmp"
    run = _start(_profile_command(vmfb, paths, *LONG_RUN), temporary)
    tool = tool_of(run)
    deadline = time.monotonic() + WAIT_S
    while tool.pid not in _marked_children(temporary) and time.monotonic() < deadline:
        time.sleep(0.05)  # the marker names the tool moments after it starts: a kill -9 before that is not this case
    run.kill()
    run.communicate(timeout=WAIT_S)
    (left,) = _scratch_folders(temporary)  # what a kill -9 leaves: the folder, and the tool running on
    assert json.loads((left / scratch.MARKER).read_text())["pid"] == run.pid
    assert not _gone(tool)
    done = subprocess.run(_profile_command(vmfb, paths, "-n", "1", "--warmup", "0"), env=_environment(temporary),
                          capture_output=True, text=True, timeout=WAIT_S)
    assert done.returncode == 0, done.stderr
    assert _gone(tool)
    assert _scratch_folders(temporary) == []


def test_abandoned_folders_go_and_those_of_running_owners_or_without_a_marker_stay(tmp_path):
    """On hand-made folders: the owner's start time, not its id alone, says whether it still runs."""
    me = {"pid": os.getpid(), "start": scratch.process_start_time(os.getpid()), "children": []}
    # An owner with this process's id but another start time: a process that ran before and got the same id.
    reused = {**me, "start": me["start"] + 1}
    dead = {"pid": 2 ** 22 + 1, "start": 5, "children": [[2 ** 22 + 2, 7]]}  # ids above Linux's pid_max
    folders = {}
    for name, marker in (("alive", me), ("reused", reused), ("dead", dead), ("unmarked", None),
                         ("garbled", "{not json")):
        folder = tmp_path / f"{scratch.PREFIX}{name}"
        (folder / "run1").mkdir(parents=True)
        (folder / "run1" / "run.ireeprof").write_bytes(b"x" * 10)
        if marker is not None:
            (folder / scratch.MARKER).write_text(marker if isinstance(marker, str) else json.dumps(marker))
        folders[name] = folder
    other = tmp_path / "other-dead"  # not a scratch folder's name: never touched
    other.mkdir()
    (other / scratch.MARKER).write_text(json.dumps(dead))
    scratch.remove_abandoned(tmp_path)
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
        ["other-dead", folders["alive"].name, folders["unmarked"].name, folders["garbled"].name])


def test_a_scratch_folder_is_removed_when_its_block_ends_in_any_way(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(scratch.tempfile, "tempdir", None)  # tempfile reads TMPDIR again
    with signals_raising():  # the CLI's handlers: the folder's block leaves the signal to them
        with pytest.raises(Interrupted):
            with scratch.scratch_folder() as folder:
                (folder / "profile").write_bytes(b"x")
                raise Interrupted(signal.SIGHUP)  # as the handler raises it
    assert not folder.exists()
    with pytest.raises(ZeroDivisionError):
        with scratch.scratch_folder() as folder:
            1 / 0
    assert not folder.exists()


def test_a_process_naming_an_abandoned_folder_is_ended_though_the_marker_missed_it(tmp_path):
    """A tool started moments before the kill -9 is not in the marker yet: its command line names the folder."""
    folder = tmp_path / f"{scratch.PREFIX}dead"
    folder.mkdir()
    (folder / scratch.MARKER).write_text(json.dumps({"pid": 2 ** 22 + 1, "start": 5, "children": []}))
    orphan = psutil.Popen([sys.executable, "-c", "import time; time.sleep(600)", str(folder / "run1" / "arg0.npy")])
    bystander = psutil.Popen([sys.executable, "-c", "import time; time.sleep(600)", str(tmp_path / "elsewhere")])
    try:
        scratch.remove_abandoned(tmp_path)
        assert orphan.wait(timeout=WAIT_S) == -signal.SIGKILL
        assert not folder.exists() and bystander.poll() is None
    finally:
        for process in (orphan, bystander):
            if process.poll() is None:
                process.kill()
                process.wait()


def test_a_killed_owner_not_yet_reaped_no_longer_runs(tmp_path):
    """A run killed by kill -9 stays a zombie until its parent reaps it: its folder is abandoned already."""
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        start = scratch.process_start_time(owner.pid)
        assert start is not None
        folder = tmp_path / f"{scratch.PREFIX}zombie"
        folder.mkdir()
        (folder / scratch.MARKER).write_text(json.dumps({"pid": owner.pid, "start": start, "children": []}))
        scratch.remove_abandoned(tmp_path)
        assert folder.exists()  # its owner runs
        owner.kill()
        deadline = time.monotonic() + WAIT_S
        while psutil.Process(owner.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.01)
        scratch.remove_abandoned(tmp_path)
        assert not folder.exists()
    finally:
        owner.kill()
        owner.wait()
