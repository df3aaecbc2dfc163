"""One in-process IREE compilation that can stop between pipeline phases.

The section hook must see the module twice: at phase ``dispatch-creation``
(dispatch regions still inline, before executables are outlined and
deduplicated) and at phase ``hal`` (command buffers recorded). IREE's C API
can stop and resume at a named phase, but the Python wrapper does not expose
``ireeCompilerInvocationSetCompileToPhase`` / ``SetCompileFromPhase``, so we
bind them with ctypes on the same library handle. Between phases the module
leaves the compiler as a live ``ir.Operation`` and goes back in unchanged in
memory: no second process, no text round trip of the weights.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import os
import sys
import tempfile
from pathlib import Path
from typing import Iterator, Optional, Sequence

from iree.compiler import ir
from iree.compiler.api import Output, Session, Source, ctypes_dl

from sectionmark.errors import SectionmarkError, first_line

_DIAGNOSTIC_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
_SEVERITY_ERROR = 2
_bound = False


def _library() -> ctypes.CDLL:
    """The compiler library with the phase and diagnostics entry points typed."""
    global _bound
    library = ctypes_dl._dylib
    if not _bound:
        for name in ("ireeCompilerInvocationSetCompileToPhase", "ireeCompilerInvocationSetCompileFromPhase"):
            function = getattr(library, name)
            function.restype = None
            function.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        callback_setter = library.ireeCompilerInvocationEnableCallbackDiagnostics
        callback_setter.restype = None
        callback_setter.argtypes = [ctypes.c_void_p, ctypes.c_int, _DIAGNOSTIC_CALLBACK, ctypes.c_void_p]
        _bound = True
    return library


class PhasedCompilation:
    """A compiler session and invocation that advances phase by phase.

    Usage: ``parse_*`` once, then ``advance(phase)`` (returns the module to
    rewrite in place), ..., then ``finish()`` for the .vmfb bytes.
    """

    def __init__(self, flags: Sequence[str]):
        self._library = _library()
        self._session = Session()
        with _native_stderr() as printed:
            try:
                self._session.set_flags(*flags)
            except ValueError as error:
                failure = str(error)
            else:
                failure = None
        if failure is not None:
            raise SectionmarkError(f"bad compiler flag: {_flag_error(failure, ''.join(printed))}") from None
        self._invocation = self._session.invocation()
        self._errors: list[str] = []
        self._callback = _DIAGNOSTIC_CALLBACK(self._on_diagnostic)  # kept alive with self
        self._library.ireeCompilerInvocationEnableCallbackDiagnostics(self._invocation._inv_p, 0, self._callback, None)
        self._phase: Optional[str] = None
        self._module: Optional[ir.Operation] = None

    def _on_diagnostic(self, severity: int, message: int, size: int, _user: int) -> None:
        if severity == _SEVERITY_ERROR:
            self._errors.append(ctypes.string_at(message, size).decode("utf-8", errors="replace"))

    def _fail(self, what: str) -> SectionmarkError:
        detail = first_line(self._errors[0]) if self._errors else "no diagnostic was reported"
        return SectionmarkError(f"{what}: {detail}")

    @property
    def multithreaded(self) -> bool:
        """Whether the compiler's context runs threads, and so locks what it uniques (types, attributes).

        Only then may another thread create attributes in it while the compiler runs (IREE
        disables threading with ``--mlir-disable-threading``; a 1-core machine runs one thread).
        """
        return self._session.context.get_num_threads() > 1

    def parse_text(self, text: str, name: str = "source.mlir") -> None:
        self._parse(Source.wrap_buffer(self._session, text.encode("utf-8") + b"\0", buffer_name=name))

    def parse_file(self, path: Path) -> None:
        self._parse(Source.open_file(self._session, str(path)))

    def parse_module(self, module: ir.Operation) -> None:
        """A live module from another MLIR context goes in as MLIR bytecode (binary, lossless)."""
        buffer = io.BytesIO()
        module.write_bytecode(buffer)
        self._parse(Source.wrap_buffer(self._session, buffer.getvalue(), buffer_name="exported.mlirbc"))

    def _parse(self, source: Source) -> None:
        if not self._invocation.parse_source(source):
            raise self._fail("MLIR input does not parse")

    def parsed_module(self) -> ir.Operation:
        """The module as parsed, before any pass ran (for reading only)."""
        self._module = self._invocation.export_module()
        return self._module

    def advance(self, phase: str) -> ir.Operation:
        """Compile up to and including ``phase``; return the module for rewriting."""
        self._run(phase)
        self._module = self._invocation.export_module()
        return self._module

    def finish(self) -> bytes:
        """Compile the rest of the pipeline and return the VM bytecode (.vmfb)."""
        self._run("end")
        output = Output.open_membuffer()
        try:
            self._invocation.output_vm_bytecode(output)
        except ValueError as error:
            raise SectionmarkError(f"could not write the compiled module: {first_line(str(error))}") from None
        return bytes(output.map_memory())

    def _run(self, phase: str) -> None:
        handle = self._invocation._inv_p
        if self._module is not None:
            self._invocation.import_module(self._module)
            self._module = None
        if self._phase is not None:
            self._library.ireeCompilerInvocationSetCompileFromPhase(handle, self._phase.encode())
        self._library.ireeCompilerInvocationSetCompileToPhase(handle, phase.encode())
        if not self._invocation.execute():
            raise self._fail("compilation failed")
        self._phase = phase

    def close(self) -> None:
        self._invocation.close()
        self._session.close()


@contextlib.contextmanager
def generic_op_views() -> Iterator[None]:
    """Read modules without loading dialects' Python modules.

    MLIR's Python bindings import ``iree.compiler.dialects.<name>`` the first
    time an op of that dialect is handed to Python, to give it its typed
    class; ``hal`` and ``linalg`` alone take a quarter of a second, on every
    fresh process that compiles. The section hook reads ops only through the
    generic ``Operation`` API, so while it walks a module the dialect search
    path is empty: ops come back as plain OpViews and nothing is imported.
    A miss is not remembered, so typed classes work as before afterwards.
    """
    bindings = ir._globals  # the bindings' process-wide settings
    search_path = bindings.dialect_search_modules
    bindings.dialect_search_modules = []
    try:
        yield
    finally:
        bindings.dialect_search_modules = search_path


def _flag_error(message: str, printed: str = "") -> str:
    """IREE's flag error on one line: "Error parsing flags:" names the flag only on the lines after it,
    and LLVM's option parser prints why (``'O9' value not a valid optimization level``) on stderr."""
    lines = [line.strip() for line in (message + "\n" + printed).splitlines() if line.strip()]
    return " ".join(lines) if lines else "no message"


@contextlib.contextmanager
def _native_stderr() -> Iterator[list[str]]:
    """What native code writes to file descriptor 2 meanwhile, instead of the terminal: the
    yielded list holds it once the block is over."""
    printed: list[str] = []
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace") as captured:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(captured.fileno(), 2)
            yield printed
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            printed.append(captured.read())
