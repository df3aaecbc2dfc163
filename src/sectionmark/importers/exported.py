"""An exported program: MLIR whose op locations carry section paths.

The MLIR module is the source of truth, never its text: a model's weights
live in the module (or in external parameter files) and printing them would
cost gigabytes for a model of real size. Sections are read from op
locations by walking the module; text is printed only when asked for
(`SectionedExport.mlir`, `save_mlir` to a ``.mlir`` path).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any, Optional

from sectionmark.errors import SectionmarkError
from sectionmark.locations import section_paths
from sectionmark.paths import BACKWARD_SUFFIX, SectionPath, format_path


def _declare(found: dict[SectionPath, None], path: SectionPath) -> None:
    """Add ``path`` to ``found`` after its parents: a marked parent whose ops all sit in
    its children (a layer wrapped as "Layer 0") is declared by them."""
    if path not in found:
        for depth in range(1, len(path)):
            found.setdefault(path[:depth], None)
        found[path] = None


def find_sections(mlir_text: str) -> tuple[SectionPath, ...]:
    """Every section path mentioned in the locations of an MLIR text, and their parents, in order."""
    found: dict[SectionPath, None] = {}
    for line in mlir_text.splitlines():
        if "loc(" in line:
            for path in section_paths(line):
                _declare(found, path)
    return tuple(found)


def module_sections(module: Any) -> tuple[SectionPath, ...]:
    """Every section path in the op locations of a live MLIR module, and their parents, in module order.

    Reads each op's location only (never its attributes, which hold the
    weights), and prints each distinct location once: locations are uniqued,
    so their attribute identifies them.
    """
    from iree.compiler import ir

    found: dict[SectionPath, None] = {}
    seen: set[ir.Attribute] = set()

    def visit(op: ir.Operation) -> ir.WalkResult:
        location = op.location
        if location.attr not in seen:
            seen.add(location.attr)
            for path in section_paths(str(location)):
                _declare(found, path)
        return ir.WalkResult.ADVANCE

    module.walk(visit, ir.WalkOrder.PRE_ORDER)
    return tuple(found)


class SectionedExport:
    """What the importers produce and `sectionmark.compile` consumes.

    ``input_type`` is the iree-compile input dialect ("torch" for iree-turbine
    output, "stablehlo" for JAX). A torch export is iree-turbine's
    ``ExportOutput`` itself (`sectionmark.importers.torch.TorchExport`) and
    keeps its live module; a JAX export is the text JAX lowers to.
    """

    def __init__(self, *, input_type: str, framework: str, text: Optional[str] = None):
        self.input_type = input_type
        self.framework = framework
        self._text = text
        self._text_sections: Optional[tuple[SectionPath, ...]] = None

    @property
    def mlir_module(self) -> Optional[Any]:
        """The live MLIR module (an ``iree.compiler.ir.Operation``), or None for an export made of text."""
        return None

    @property
    def mlir(self) -> str:
        """MLIR text with locations; a module is printed on each request (weights included)."""
        module = self.mlir_module
        if module is None:
            return self._text
        return module.get_asm(enable_debug_info=True)

    @property
    def sections(self) -> tuple[SectionPath, ...]:
        """Every section path in the program's op locations, in program order."""
        module = self.mlir_module
        if module is not None:
            return module_sections(module)
        if self._text_sections is None:
            self._text_sections = find_sections(self._text)
        return self._text_sections

    def save_mlir(self, path: str | Path) -> Path:
        """Write the program with its locations: MLIR bytecode for ``.mlirbc``, else text.

        Text is streamed to the file from the module, never held as one string.
        """
        path = Path(path)
        module = self.mlir_module
        if path.suffix == ".mlirbc" and module is None:
            raise SectionmarkError(f"a {self.framework} export is MLIR text: save it as .mlir, not {path.name}")
        try:
            with open(path, "wb") as file:
                if module is None:
                    file.write(self._text.encode("utf-8"))
                elif path.suffix == ".mlirbc":
                    module.write_bytecode(file)
                else:
                    module.print(file=file, binary=True, enable_debug_info=True)
        except OSError as error:
            raise SectionmarkError(f"cannot write {error.filename or path}: {error.strerror}") from None
        return path


def as_sectioned_export(source: Any) -> Optional[SectionedExport]:
    """``source`` as a SectionedExport: itself, or iree-turbine's ``ExportOutput`` wrapped; else None.

    Without iree-turbine imported nothing can be its ExportOutput, so this
    never imports torch.
    """
    if isinstance(source, SectionedExport):
        return source
    exporter = sys.modules.get("iree.turbine.aot.exporter")
    if exporter is not None and isinstance(source, exporter.ExportOutput):
        from sectionmark.importers.turbine import TorchExport

        return TorchExport(source)
    return None


def warn_empty_sections(entered: list[SectionPath], found: tuple[SectionPath, ...]) -> None:
    """One warning line per section entered while the framework traced that owns no op.

    A section owns an op when it or a section nested in it does; a forward
    section whose ops all landed in the backward pass (" (backward)") counts.
    """
    owning = {path[:depth] for path in found for depth in range(1, len(path) + 1)}
    owning |= {tuple(name.removesuffix(BACKWARD_SUFFIX) for name in path) for path in owning}
    for path in entered:
        if path not in owning:
            warnings.warn(f"sectionmark: section {format_path(path)!r} produced no ops in the export", stacklevel=3)
