"""Writing output files: all or nothing, never onto an input, never over a non-file.

Every file sectionmark writes (a .vmfb, a section map, a table's JSON, CSV,
chart or trace) goes through here, so a full disk, a size limit or a kill in
the middle leaves the previous file intact: the data goes to a temporary file
in the same directory, which is renamed over the target only once complete
(a rename within one file system is atomic); what a killed writer left there
is removed by the next writer of the same file. Paths that would destroy what
the user has are refused up front with one clear line: an empty name, a
directory or device node, a directory where no file can be created, or a
file the same command reads (``--json
run.ireeprof``; ``compile a.mlir -o a.mlir``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Iterable, Iterator, Union

from sectionmark.errors import SectionmarkError

PathLike = Union[str, os.PathLike]

# The process umask, read once (reading it means setting it): temporary files
# are created 0600, and the output should get the mode a plain open() gives.
_UMASK = os.umask(0o022)
os.umask(_UMASK)


def check_output_path(path: PathLike, inputs: Iterable[PathLike] = ()) -> Path:
    """The output path, or one clear error if writing it would lose something or cannot succeed.

    For checking ahead (before a long run); `atomic_path` does the same checks
    as it creates its temporary file.
    """
    target = _refuse_destructive(path, inputs)
    try:  # a file can be created there (a long run must not fail only at the end)
        with tempfile.TemporaryFile(dir=target.parent):
            pass
    except OSError as error:
        raise _cannot_create(target, error) from None
    return target


def _refuse_destructive(path: PathLike, inputs: Iterable[PathLike]) -> Path:
    """The output path, unless it is empty, not a regular file, an input, or in a missing directory."""
    text = os.fspath(path)
    if not text.strip():
        raise SectionmarkError("an output file name is empty")
    target = Path(text)
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as error:
        raise SectionmarkError(f"cannot write {target}: {error.strerror}") from None
    if mode is not None and not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise SectionmarkError(f"cannot write {target}: it is {kind}")
    for source in inputs:
        if mode is not None and _same_file(target, Path(source)):
            raise SectionmarkError(f"refusing to write {target}: it is also an input of this command")
    if not target.parent.is_dir():
        raise SectionmarkError(f"cannot write {target}: directory {target.parent} does not exist")
    return target


def _cannot_create(target: Path, error: OSError) -> SectionmarkError:
    return SectionmarkError(f"cannot write {target}: {error.strerror or error} (in {target.parent})")


@contextlib.contextmanager
def atomic_path(path: PathLike, inputs: Iterable[PathLike] = ()) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path`` in one rename.

    For writers that want a file name (matplotlib, a capture tool). On any
    error the temporary file is removed and ``path`` is untouched.
    """
    target = _refuse_destructive(path, inputs)
    remove_stale_temporaries(target)
    try:  # also the check that a file can be created there
        descriptor, temporary = tempfile.mkstemp(**temporary_name(target))
    except OSError as error:
        raise _cannot_create(target, error) from None
    os.close(descriptor)
    temporary_path = Path(temporary)
    try:
        yield temporary_path
        os.chmod(temporary_path, stat.S_IMODE(target.stat().st_mode) if target.exists() else 0o666 & ~_UMASK)
        os.replace(temporary_path, target)
    except OSError as error:
        raise SectionmarkError(f"cannot write {target}: {error.strerror or error}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary_path.unlink()


def copy_output(source: PathLike, path: PathLike, inputs: Iterable[PathLike] = ()) -> None:
    """Copy ``source`` to ``path`` atomically (`atomic_path`), never onto one of ``inputs``: a kept raw profile."""
    with atomic_path(path, inputs) as temporary:
        shutil.copyfile(source, temporary)


_PARTIAL = ".partial"


def temporary_name(target: Path) -> dict[str, str]:
    """``mkstemp`` / ``mkdtemp`` arguments for a temporary beside ``target``: ``.NAME.<pid>.<random>.partial``.

    The writer's process id in the name is how a later writer of the same
    target tells what a killed one left (`remove_stale_temporaries`).
    """
    return {"prefix": f".{target.name}.{os.getpid()}.", "suffix": _PARTIAL, "dir": str(target.parent)}


def remove_stale_temporaries(target: Path) -> None:
    """Remove the temporaries of ``target`` whose writer is gone (killed: a kill -9 runs no clean-up).

    A temporary of a running writer (this process or another) is left alone.
    """
    try:
        names = os.listdir(target.parent)
    except OSError:
        return
    for name in names:
        if not name.endswith(_PARTIAL):
            continue
        parts = name[: -len(_PARTIAL)].rsplit(".", 2)  # ".NAME", pid, the random part (no dots)
        if len(parts) != 3 or parts[0] != f".{target.name}" or not parts[1].isdigit() or process_running(int(parts[1])):
            continue
        stale = target.parent / name
        with contextlib.suppress(OSError):
            if stale.is_dir() and not stale.is_symlink():
                shutil.rmtree(stale)
            else:
                stale.unlink()


def process_running(pid: int) -> bool:
    """Whether a process ``pid`` exists (another user's counts); the id alone: a later process may have it."""
    try:
        os.kill(pid, 0)
    except PermissionError:  # another user's process
        return True
    except (ProcessLookupError, OverflowError):  # gone, or a number no process can have
        return False
    return True


def write_atomic(path: PathLike, data: Union[bytes, str], inputs: Iterable[PathLike] = (), newline: str | None = None) -> Path:
    """Write ``data`` (text is UTF-8) to ``path`` all at once or not at all; returns the path."""
    with atomic_path(path, inputs) as temporary:
        if isinstance(data, str):
            with open(temporary, "w", encoding="utf-8", newline=newline) as file:
                file.write(data)
        else:
            temporary.write_bytes(data)
    return Path(path)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
