"""Record a Tracy capture of a program, headless (no GUI), e.g. in tests and CI.

The recipe (see docs/tracy.md): start IREE's real capture binary on a free
localhost port, run the program with the tracing runtime and Tracy's client
told to wait at exit until everything was sent, then wait for the capture to
write its file. Every wait has a timeout and every process we start is ended.
The capture goes to a temporary file beside the output, renamed over it only
once complete (`sectionmark.outputs`): a failed capture leaves the previous
file intact. If the capture tool stops before the program (it could not
write, or crashed), the program, which would wait at exit for a capture that
never comes, is ended and the tool's own message reported.
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path
from typing import IO, Iterable, Mapping, Optional, Sequence, Union

from sectionmark.errors import SectionmarkError
from sectionmark.outputs import PathLike, atomic_path
from sectionmark.artifacts.tools import exit_description, find_tool, last_useful_line
from sectionmark.tracy.origin import OriginRelay

__all__ = ["capture_command", "tracy_environment", "CapturedProgramFailed"]


class CapturedProgramFailed(SectionmarkError):
    """The captured program exited with a non-zero status (``returncode``)."""

    def __init__(self, message: str, returncode: int):
        super().__init__(message)
        self.returncode = returncode


# How long a program may go on after the capture tool stopped: a normal run
# ends within moments of the capture having all its data.
_EXIT_GRACE_S = 10.0
_POLL_S = 0.1


def tracy_environment(port: int) -> dict[str, str]:
    """Environment variables that make a program a well-behaved capture client.

    TRACY_NO_EXIT keeps the program alive at exit until the capture has every
    zone; ONLY_LOCALHOST needs ONLY_IPV4 or the client listens on ::1 only;
    NO_SAMPLING avoids occasional crashes at exit.
    """
    return {
        "IREE_PY_RUNTIME": "tracy",
        "TRACY_NO_EXIT": "1",
        "TRACY_PORT": str(port),
        "TRACY_ONLY_LOCALHOST": "1",
        "TRACY_ONLY_IPV4": "1",
        "TRACY_NO_SAMPLING": "1",
    }


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _end(process: subprocess.Popen) -> None:
    """Stop a process we started and reap it."""
    if process.poll() is None:
        process.kill()
    process.wait(timeout=10)


def _wait_for_program(program: subprocess.Popen, capture: subprocess.Popen, timeout: Optional[float],
                      capture_log: IO) -> int:
    """The program's exit status; an error if it outlives ``timeout`` or the capture tool."""
    deadline = None if timeout is None else time.monotonic() + timeout
    capture_ended: Optional[float] = None
    while True:
        try:
            return program.wait(timeout=_POLL_S)
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        if deadline is not None and now > deadline:
            raise SectionmarkError(
                f"the captured program did not finish within {timeout:g} s "
                "(with TRACY_NO_EXIT=1 it also waits at exit until the capture has all data)"
            )
        if capture_ended is None and capture.poll() is not None:
            capture_ended = now
        if capture_ended is not None and now - capture_ended > _EXIT_GRACE_S:
            capture_log.seek(0)
            raise SectionmarkError(
                f"the Tracy capture tool stopped ({exit_description(capture.returncode)}) before the captured "
                f"program finished: {last_useful_line(capture_log.read(), '(no message)')}"
            )


def capture_command(
    command: Sequence[str],
    output: Union[str, os.PathLike],
    *,
    timeout: Optional[float] = 300.0,
    save_timeout: float = 60.0,
    env: Optional[Mapping[str, str]] = None,
    cwd: Optional[Union[str, os.PathLike]] = None,
    stdout: Optional[IO] = None,
    stderr: Optional[IO] = None,
    inputs: Iterable[PathLike] = (),
    origin_after_startup: bool = False,
) -> Path:
    """Run ``command`` under a headless Tracy capture and return the .tracy path.

    The program's standard output and error are this process's unless
    ``stdout`` / ``stderr`` (open files) are given.
    The program must load the tracing runtime (``sectionmark.tracy.enable()``,
    or ``import iree.runtime``: IREE_PY_RUNTIME=tracy is set for it; IREE's
    tracing tools have it built in) and exit normally; ``os._exit`` loses
    zones not yet sent. ``timeout`` bounds the program's run (None: no
    bound), ``save_timeout`` the capture's work after it. ``output`` is
    written atomically and never onto one of ``inputs`` (checked before the
    program starts). ``origin_after_startup`` puts the capture's time 0 at
    the end of the Tracy client's start-up (its ~200 ms timer calibration)
    instead of its beginning, every time shifted by that one constant
    (`sectionmark.tracy.origin`), so that the GUI's first view starts where
    the program could first send. Raises SectionmarkError when the program
    fails (`CapturedProgramFailed`), times out or never connects.
    """
    with atomic_path(output, inputs) as temporary:
        _capture(command, temporary, timeout, save_timeout, env, cwd, stdout, stderr, origin_after_startup)
    return Path(output)


def _capture(command, output: Path, timeout, save_timeout, env, cwd, stdout, stderr, origin_after_startup) -> None:
    binary = find_tool("iree-tracy-capture", tracing=True)
    port = _free_port()
    # With a relay, the capture tool connects to the relay and the relay to the program.
    with (OriginRelay(port) if origin_after_startup else nullcontext()) as relay, \
            tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace") as capture_log:
        capture = subprocess.Popen(
            [str(binary), "-o", str(output), "-f", "-a", "127.0.0.1", "-p", str(port if relay is None else relay.port)],
            stdin=subprocess.DEVNULL,
            stdout=capture_log,
            stderr=subprocess.STDOUT,
        )
        try:
            program_env = dict(os.environ if env is None else env)
            program_env.update(tracy_environment(port))
            try:
                program = subprocess.Popen(
                    list(command), env=program_env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr
                )
            except OSError as error:
                raise SectionmarkError(f"cannot start the program to capture: {error}") from None
            try:
                returncode = _wait_for_program(program, capture, timeout, capture_log)
            finally:
                _end(program)
            if returncode != 0:
                where = " (its output is above)" if stderr is None else ""
                raise CapturedProgramFailed(
                    f"the captured program {exit_description(returncode)}{where}", returncode
                )
            try:
                capture.wait(timeout=save_timeout)
            except subprocess.TimeoutExpired:
                raise SectionmarkError(
                    f"the Tracy capture was not saved within {save_timeout:g} s after the program "
                    "exited; most likely the program never loaded the tracing runtime "
                    "(call sectionmark.tracy.enable() or import iree.runtime)"
                ) from None
        finally:
            _end(capture)
        capture_log.seek(0)
        log = capture_log.read()
    if "Instrumentation failure: " in log:
        reason = log.split("Instrumentation failure: ", 1)[1].splitlines()[0]
        raise SectionmarkError(f"Tracy reported an instrumentation failure in the captured program: {reason}")
    if capture.returncode != 0 or not output.is_file() or output.stat().st_size == 0:
        raise SectionmarkError(
            f"the Tracy capture failed ({exit_description(capture.returncode)}): {last_useful_line(log, '(no output)')}"
        )
