"""An exported program: MLIR whose op locations carry section paths."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from sectionmark.locations import section_paths
from sectionmark.paths import BACKWARD_SUFFIX, SectionPath, format_path


def find_sections(mlir_text: str) -> tuple[SectionPath, ...]:
    """Every section path mentioned in the locations of an MLIR text, in order."""
    found: dict[SectionPath, None] = {}
    for line in mlir_text.splitlines():
        if "loc(" in line:
            for path in section_paths(line):
                found.setdefault(path, None)
    return tuple(found)


@dataclass
class ExportedProgram:
    """What the importers produce and `sectionmark.compile` consumes.

    ``input_type`` is the iree-compile input dialect ("torch" for iree-turbine
    output, "stablehlo" for JAX). ``module`` is the live MLIR module when the
    importer has one; the compiler takes it as MLIR bytecode, so compiling
    needs no text round trip of the weights.
    """

    mlir: str
    input_type: str
    framework: str
    module: Optional[Any] = None  # iree.compiler.ir.Operation
    _sections: Optional[tuple[SectionPath, ...]] = field(default=None, repr=False)

    @property
    def sections(self) -> tuple[SectionPath, ...]:
        if self._sections is None:
            self._sections = find_sections(self.mlir)
        return self._sections

    def save_mlir(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(self.mlir, encoding="utf-8")
        return path


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
