"""IREE's tools and tracing runtime inside the installed iree-base-runtime, and what their failures mean.

The tools ship next to the runtime extension in ``iree/_runtime_libs``, and
built with Tracy instrumentation (with the tracing runtime's extension
module, which embeds the Tracy client) in ``iree/_runtime_libs_tracy``. We
look there and nowhere else, so that the profiler, the capture tool and the
runtime we import are always the same IREE version. (Not the
``iree-tracy-capture`` on PATH either: that is a Python wrapper that spawns
the binary, and ending the wrapper would leave the binary running.)
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import os
import re
import signal
import subprocess
from pathlib import Path
from typing import Optional, Sequence

from sectionmark.artifacts.scratch import record_child
from sectionmark.errors import SectionmarkError

RUNTIME_LIBS_PACKAGE = "iree._runtime_libs"
TRACING_RUNTIME_LIBS_PACKAGE = "iree._runtime_libs_tracy"


def runtime_tools_dir() -> Path:
    """The directory holding the iree-* tools of the installed runtime package."""
    return _package_dir(RUNTIME_LIBS_PACKAGE, "runtime tools")


def tracing_tools_dir() -> Path:
    """The directory holding the iree-* tools built with Tracy instrumentation."""
    return _package_dir(TRACING_RUNTIME_LIBS_PACKAGE, "tracing runtime tools (iree/_runtime_libs_tracy)")


def _package_dir(package: str, what: str) -> Path:
    try:
        spec = importlib.util.find_spec(package)
    except ModuleNotFoundError:
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise SectionmarkError(
            f"IREE {what} not found: the 'iree-base-runtime' package is not installed or lacks them "
            "(pip install iree-base-runtime)"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def find_tool(name: str, *, tracing: bool = False) -> Path:
    """Path of an IREE tool such as ``iree-benchmark-module``, ``iree-profile`` or ``iree-tracy-capture``.

    ``tracing``: the build with Tracy instrumentation (GPU zones on CUDA/HIP,
    and the capture tool).
    """
    path = (tracing_tools_dir if tracing else runtime_tools_dir)() / name
    if not path.is_file() or not os.access(path, os.X_OK):
        raise SectionmarkError(
            f"IREE tool '{name}' not found in {path.parent} or not executable "
            "(reinstall iree-base-runtime: pip install --force-reinstall iree-base-runtime)"
        )
    return path


def run_tool(command: Sequence[str], *, timeout: Optional[float]) -> subprocess.CompletedProcess:
    """Run a tool to its end and return what it printed (text), as ``subprocess.run(capture_output=True)`` does,
    in a process group of its own that is ended whatever stops the wait: a timeout
    (``subprocess.TimeoutExpired``, raised), Ctrl-C, a signal (`sectionmark.errors.Interrupted`).

    Its own session keeps a terminal's Ctrl-C for this process, which then ends the whole group: a tool that
    started helpers cannot leave one behind. Within a scratch folder's block, its marker names the tool, so that
    a later run ends it if this process is killed first (`sectionmark.artifacts.scratch`).
    """
    process = subprocess.Popen(list(command), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               encoding="utf-8", errors="replace",  # a mutated module's names may be any bytes
                               start_new_session=True)
    try:
        record_child(process.pid)
        stdout, stderr = process.communicate(timeout=timeout)
        return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    finally:
        if process.returncode is None:
            with contextlib.suppress(OSError):
                os.killpg(process.pid, signal.SIGKILL)
            process.communicate()  # reap it, and close its pipes


def tracing_runtime_library() -> Path:
    """Path of the tracing runtime's extension module, which embeds Tracy's client and its C API."""
    if os.environ.get("IREE_PY_RUNTIME") != "tracy":
        raise SectionmarkError(
            "Tracy zones need IREE's tracing runtime: set IREE_PY_RUNTIME=tracy before starting Python"
        )
    folder = tracing_tools_dir()
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = folder / f"_runtime{suffix}"
        if candidate.is_file():
            return candidate
    raise SectionmarkError(f"the tracing runtime's extension module is missing from {folder}")


# Lines a tool prints that never explain a failure: the banner of the benchmark
# library iree-benchmark-module is built on (date, "Running <tool>", the CPU and
# its caches, the load average, its ***WARNING*** lines such as ASLR and CPU
# scaling) and its table's rules and header.
_NOISE = re.compile(r"\*\*\*WARNING\*\*\*|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\S*$|Running \S+$|Run on \(|CPU Caches:$"
                    r"|L\d (Data|Instruction|Unified) |Load Average:|-+$|Benchmark +Time ")
# A line that states the error: one naming an IREE status code (every word of iree/base/status.h's
# iree_status_code_t, as iree_status_code_string spells it), or a tool's "error" / "FAILED".
_IREE_STATUS_CODES = ("OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
                      "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",
                      "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
                      "DEFERRED", "INCOMPATIBLE")
_ERROR_LINE = re.compile(r"\b(?:" + "|".join(_IREE_STATUS_CODES) + r")\b|error|Error|FAILED")


def last_useful_line(output: str, default: str = "no error message") -> str:
    """The line of a tool's output that best explains a failure, skipping known noise.

    IREE's tools print the failing status last, possibly followed by other
    output: the last line naming an error wins, else the last line. A crashed
    tool often leaves only its start-up warnings, which are never the answer.
    """
    lines = [line.strip() for line in output.splitlines() if line.strip() and not _NOISE.match(line.strip())]
    for line in reversed(lines):
        if _ERROR_LINE.search(line):
            return line
    return lines[-1] if lines else default


def exit_description(returncode: int) -> str:
    """``-11`` -> ``crashed with SIGSEGV``, ``139`` (a shell's 128+11) too; else ``exited with status N``."""
    number = -returncode if returncode < 0 else returncode - 128 if 128 < returncode < 128 + 65 else None
    if number is not None:
        try:
            return f"crashed with {signal.Signals(number).name}"
        except ValueError:
            pass
    return f"exited with status {returncode}"
