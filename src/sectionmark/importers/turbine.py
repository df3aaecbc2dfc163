"""`TorchExport`: iree-turbine's ``ExportOutput`` that also knows its sections.

``sm.torch.export`` returns one, so code written for ``aot.export`` keeps
working unchanged (``mlir_module``, ``session``, ``compiled_module``,
``verify``, ``print_readable``, ``import_to``, ``save_mlir``, ``compile``),
and ``sm.compile`` wraps a plain ``ExportOutput`` in one. This module
imports iree-turbine (about a second), which only code holding an export needs.
"""

from __future__ import annotations

import atexit
import weakref
from pathlib import Path
from typing import Optional, Sequence, Union

from iree.compiler.api import Output
from iree.turbine.aot import ExportOutput

from sectionmark.errors import SectionmarkError
from sectionmark.importers.exported import SectionedExport

__all__ = ["TorchExport"]

_BACKENDS_FLAG = "--iree-hal-target-backends="
_sessions: weakref.WeakSet = weakref.WeakSet()  # of every export sectionmark saw, see _close_sessions


class TorchExport(ExportOutput, SectionedExport):
    """An iree-turbine export with section names in its op locations.

    Differences from ``ExportOutput``, both for the sections' sake:
    ``save_mlir`` writes text *with* locations (turbine's text has none), and
    ``compile`` runs sectionmark's compile with exactly the flags turbine
    would use, so the .vmfb has the same executables plus debug groups and
    the embedded section map.
    """

    def __init__(self, output: ExportOutput):
        ExportOutput.__init__(self, output.session, output.compiled_module,
                              importer_uses_session=output._importer_uses_session)
        SectionedExport.__init__(self, input_type="torch", framework="torch")
        _sessions.add(self.session)

    save_mlir = SectionedExport.save_mlir

    def compile(
        self,
        save_to: Union[str, Path, None, Output],
        *,
        target_backends: Union[str, Sequence[str], None] = ("llvm-cpu",),
    ) -> Optional[Output]:
        """Compile like ``ExportOutput.compile``, keeping sections.

        ``save_to``: a path (the .vmfb, and its ``.sections.json`` beside it),
        an ``iree.compiler.api.Output``, or None to get an in-memory Output
        (``.map_memory()``) as turbine returns it. ``target_backends``: one
        IREE backend (sections are mapped for one target at a time), added to
        the flags of ``self.session`` as turbine does; None compiles with the
        flags set there alone.
        """
        from sectionmark.compiler.pipeline import compile_with_flags

        backends = [target_backends] if isinstance(target_backends, str) else list(target_backends or ())
        backends = [name for entry in backends for name in entry.split(",") if name]
        if len(backends) > 1:
            raise SectionmarkError(f"sections are mapped for one target at a time; got target_backends={backends}")
        flags = list(self.session.get_flags(non_default_only=True))
        if backends:  # what turbine sets on the session (where a second compile would append a second backend)
            flags = [flag for flag in flags if not flag.startswith(_BACKENDS_FLAG)] + [_BACKENDS_FLAG + backends[0]]
        compiled = compile_with_flags(self, flags, target=backends[0] if backends else _target_of(flags))
        if isinstance(save_to, (str, Path)):
            compiled.save(save_to)
            return None
        output = Output.open_membuffer() if save_to is None else save_to
        output.write(compiled.vmfb)
        output.keep()
        return output if save_to is None else None


def _target_of(flags: Sequence[str]) -> str:
    """The target a flag list compiles for, as the section map records it."""
    for flag in flags:
        for prefix in (_BACKENDS_FLAG, "--iree-hal-target-device="):
            if flag.startswith(prefix):
                return flag[len(prefix):]
    raise SectionmarkError("no target: pass target_backends=, or set --iree-hal-target-device on the session")


@atexit.register
def _close_sessions() -> None:
    """Close the compiler sessions of exports still alive at exit, while the compiler library is loaded.

    Python may clear a script's globals after iree.compiler's ctypes module;
    each session destroyed then prints an ignored AttributeError.
    """
    for session in list(_sessions):
        session.close()
