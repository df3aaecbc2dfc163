"""Scratch folders of a profile run that a signal or a ``kill -9`` does not leave behind.

A profile writes its inputs and the tool's profile (hundreds of MiB for a long
run) to a folder in TMPDIR and starts ``iree-benchmark-module``. How a run can
end early, and what cleans up after it:

* Ctrl-C (SIGINT): Python raises KeyboardInterrupt; every ``finally`` runs:
  the tool's process group is ended (`sectionmark.artifacts.tools.run_tool`),
  the folder removed (`scratch_folder`).
* SIGTERM, SIGHUP: Python's default is to die on the spot, cleaning nothing,
  the tool running on. While a scratch folder is open these raise
  `Interrupted` instead (`ending_on_signals`), so the same ``finally`` blocks
  run; then the signal is delivered again under its previous (default)
  handling, so the process still ends as the sender asked. The CLI handles
  them itself for the whole command: one line, exit 128 + the signal's number.
* ``kill -9``: nothing runs. Each folder holds a marker (`MARKER`) naming its
  owner (process id and start time) and the tool processes it started; the
  next run removes every folder whose owner is gone, after ending its tools
  and any process of this user whose command line names a file in the folder
  (a tool started moments before the kill, not yet in the marker)
  (`remove_abandoned`). A start time, not the id alone, tells an owner from
  a later process that got its id.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import shutil
import signal
import stat
import tempfile
import threading
from pathlib import Path
from typing import Iterator, Optional

from sectionmark.artifacts.files import read_regular
from sectionmark.errors import ENDING_SIGNALS, Interrupted, SectionmarkError, signals_raising
from sectionmark.outputs import process_running

PREFIX = "sectionmark-"  # every scratch folder's name starts so (tempfile.mkdtemp adds a random part)
MARKER = "owner.json"  # {"pid": ..., "start": ..., "children": [[pid, start], ...]}
_MARKER_LIMIT = 1 << 20  # bytes: far more than any marker, read whole
# The folder of the innermost `scratch_folder` block of this thread (or task): where `record_child` writes.
_current: contextvars.ContextVar[Optional[Path]] = contextvars.ContextVar("sectionmark_scratch", default=None)


def process_start_time(pid: int) -> Optional[int]:
    """When process ``pid`` started (clock ticks since boot, Linux's /proc/PID/stat field 22); None when no such
    process runs (a zombie, killed and not yet reaped, runs no more), or where /proc does not say."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            fields = file.read().rsplit(b")", 1)[1].split()  # after the command name, which may hold spaces
        return None if fields[0] == b"Z" else int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _alive(pid: int, start: Optional[int]) -> bool:
    """Whether the process that ``pid`` and ``start`` (None: unknown) named still runs."""
    if start is not None and Path("/proc/self/stat").exists():
        return process_start_time(pid) == start
    return process_running(pid)


def _write_marker(folder: Path, marker: dict) -> None:
    """Write the folder's marker whole (a temporary renamed over it): a kill -9 never leaves half of one."""
    temporary = folder / f".{MARKER}.partial"
    temporary.write_text(json.dumps(marker))
    os.replace(temporary, folder / MARKER)


def _read_marker(folder: Path) -> Optional[dict]:
    try:
        marker = json.loads(read_regular(folder / MARKER, "scratch marker", _MARKER_LIMIT))
    except (SectionmarkError, ValueError, RecursionError):
        return None
    return marker if isinstance(marker, dict) else None


def record_child(pid: int) -> None:
    """Name a process started within the current `scratch_folder` block (the leader of its own process group)
    in the folder's marker, so that a later run can end it if this one is killed before it could. Outside such
    a block, nothing to do."""
    folder = _current.get()
    marker = _read_marker(folder) if folder is not None else None
    if marker is not None:
        marker.setdefault("children", []).append([pid, process_start_time(pid)])
        _write_marker(folder, marker)


def _pair(entry: object) -> Optional[tuple[int, Optional[int]]]:
    """A marker's ``[pid, start]``, checked (the marker is a file in TMPDIR like any other input)."""
    if (isinstance(entry, list) and len(entry) == 2 and type(entry[0]) is int and entry[0] > 0
            and (entry[1] is None or type(entry[1]) is int)):
        return entry[0], entry[1]
    return None


def remove_abandoned(directory: Optional[Path] = None) -> None:
    """Remove the scratch folders in ``directory`` (TMPDIR) whose owner no longer runs, after ending the tool
    processes they name that still run. Folders of running owners, of other users, and anything without a
    readable marker are left alone."""
    directory = Path(directory or tempfile.gettempdir())
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        if not entry.name.startswith(PREFIX):
            continue
        try:
            status = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(status.st_mode) or status.st_uid != os.getuid():
            continue
        folder = Path(entry.path)
        marker = _read_marker(folder)
        owner = _pair([marker.get("pid"), marker.get("start")]) if marker is not None else None
        if owner is None or _alive(*owner):
            continue
        children = marker.get("children")
        for child in filter(None, map(_pair, children if isinstance(children, list) else [])):
            if child[1] is not None and process_start_time(child[0]) == child[1]:  # never a process that reused the id
                with contextlib.suppress(OSError):
                    os.killpg(child[0], signal.SIGKILL)
        for pid in _processes_naming(folder):  # a tool started moments before the kill -9, not yet in the marker
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(folder, ignore_errors=True)


def _processes_naming(folder: Path) -> list[int]:
    """This user's processes whose command line names a file in ``folder`` (a run's tool names its inputs and its
    profile there); none where there is no /proc."""
    needle = os.fsencode(folder) + b"/"
    found = []
    try:
        entries = list(os.scandir("/proc"))
    except OSError:
        return found
    for entry in entries:
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
            with open(os.path.join(entry.path, "cmdline"), "rb") as file:
                command_line = file.read(1 << 20)
        except OSError:
            continue
        if needle in command_line:
            found.append(int(entry.name))
    return found


def owned_folder(prefix: str = PREFIX) -> Path:
    """A new folder in TMPDIR whose marker names this process as its owner: the caller removes it, and a later
    run does if this process is killed first (`remove_abandoned`). ``prefix`` must start with `PREFIX`."""
    if not prefix.startswith(PREFIX):
        raise ValueError(f"a scratch folder's prefix starts with {PREFIX!r} (got {prefix!r})")
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        _write_marker(folder, {"pid": os.getpid(), "start": process_start_time(os.getpid()), "children": []})
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder


@contextlib.contextmanager
def scratch_folder(prefix: str = PREFIX) -> Iterator[Path]:
    """A new folder in TMPDIR for one run, removed when the block ends in any way, a signal included
    (`ending_on_signals`); first removes what killed runs left (`remove_abandoned`). ``prefix`` must start with
    `PREFIX`."""
    remove_abandoned()
    with ending_on_signals():
        folder = owned_folder(prefix)
        try:
            token = _current.set(folder)
            try:
                yield folder
            finally:
                _current.reset(token)
        finally:
            with _signals_held():
                shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def ending_on_signals() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise `Interrupted` where they would have ended the process on the
    spot (their handling is the default), so that the block's clean-up runs; the signal is then delivered again
    under the default handling, and the process ends as the sender asked. A signal with a handler of its own
    (the CLI's, the application's), or ignored, is left as it is."""
    ours = [number for number in ENDING_SIGNALS if signal.getsignal(number) == signal.SIG_DFL]
    try:
        with signals_raising(ours):
            yield
    except Interrupted as interrupted:
        if interrupted.signum in ours:
            os.kill(os.getpid(), interrupted.signum)  # the default action again: the process ends here
        raise


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold the ending signals back while a folder is removed (delivered once it is gone): a signal in the middle
    of the removal must not leave half of it."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    held = signal.pthread_sigmask(signal.SIG_BLOCK, ENDING_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
