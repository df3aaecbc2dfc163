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

from sectionmark.errors import SectionmarkError, first_line
from sectionmark.locations import paths_in_location
from sectionmark.section_path import SectionPath, format_path, without_pass_suffix


def declare_section(found: dict[SectionPath, None], path: SectionPath) -> None:
    """Add ``path`` to ``found`` after its parents: a marked parent whose ops all sit in
    its children (a layer wrapped as "Layer 0") is declared by them."""
    if path not in found:
        for depth in range(1, len(path)):
            found.setdefault(path[:depth], None)
        found[path] = None


def find_sections(mlir_text: str) -> tuple[SectionPath, ...]:
    """Every section path in the locations of an MLIR text, and their parents, in order (see `module_sections`)."""
    from iree.compiler import ir

    with ir.Context() as context:
        context.allow_unregistered_dialects = True
        try:
            module = ir.Module.parse(mlir_text)
        except ir.MLIRError as error:
            raise SectionmarkError(f"cannot read sections from MLIR that does not parse: {first_line(str(error))}") from None
        return module_sections(module.operation)


def module_sections(module: Any) -> tuple[SectionPath, ...]:
    """Every section path in the op locations of a live MLIR module, and their parents, in module order.

    Reads each op's location only (never its attributes, which hold the
    weights), and prints each distinct location once: locations are uniqued,
    so their attribute identifies them. The ops of a private function are in
    the sections of the calls to it too (a JAX scan body or nested jit names
    its ops relative to the call), as they will be once the compiler inlines
    them: each is read as ``callsite(<op> at <call>)``.
    """
    from iree.compiler import ir

    printed: dict[ir.Attribute, str] = {}

    def text(location: ir.Location) -> str:
        key = location.attr
        if key not in printed:
            printed[key] = _inner_location(str(location))
        return printed[key]

    functions: dict[str, _FunctionLocations] = {}
    order: list[_FunctionLocations] = []
    for top in module.regions[0].blocks[0].operations:
        top = top.operation
        attributes = top.attributes
        name = ir.StringAttr(attributes["sym_name"]).value if "sym_name" in attributes else None
        private = "sym_visibility" in attributes and ir.StringAttr(attributes["sym_visibility"]).value == "private"
        function = _FunctionLocations(private and name is not None)
        if name is not None:
            functions[name] = function
        order.append(function)

        def visit(op: ir.Operation, function: _FunctionLocations = function) -> ir.WalkResult:
            function.locations.setdefault(text(op.location), None)
            if "callee" in op.attributes:
                callee = str(op.attributes["callee"]).lstrip("@").strip('"')
                function.calls.append((callee, text(op.location)))
            return ir.WalkResult.ADVANCE

        top.walk(visit, ir.WalkOrder.PRE_ORDER)

    found: dict[SectionPath, None] = {}
    for function in order:
        for context in _call_contexts(function, functions, order):
            for location in function.locations:
                whole = location if context is None else f"callsite({location} at {context})"
                for path in paths_in_location(f"loc({whole})"):
                    declare_section(found, path)
    return tuple(found)


class _FunctionLocations:
    """One top-level op's distinct op locations (printed, without ``loc(...)``) and the calls it makes."""

    __slots__ = ("private", "locations", "calls")

    def __init__(self, private: bool):
        self.private = private
        self.locations: dict[str, None] = {}
        self.calls: list[tuple[str, str]] = []  # (callee, location of the call)


def _call_contexts(function: _FunctionLocations, functions: dict[str, _FunctionLocations],
                   order: list[_FunctionLocations], depth: int = 0) -> list[Optional[str]]:
    """Where ``function``'s ops run: None (as written) for a public one, else each call's location,
    itself within its caller's calls (recursion stops after a few levels)."""
    if not function.private or depth > _MAX_CALL_DEPTH:
        return [None]
    contexts: list[Optional[str]] = []
    for caller in order:
        for callee, location in caller.calls:
            if functions.get(callee) is function:
                for outer in _call_contexts(caller, functions, order, depth + 1):
                    contexts.append(location if outer is None else f"callsite({location} at {outer})")
    return contexts or [None]


_MAX_CALL_DEPTH = 8


def _inner_location(printed: str) -> str:
    """``loc(X)`` -> ``X``."""
    return printed[4:-1] if printed.startswith("loc(") and printed.endswith(")") else printed


class SectionedExport:
    """What the importers produce and `sectionmark.compile` consumes.

    ``input_type`` is the iree-compile input dialect ("torch" for iree-turbine
    output, "stablehlo" for JAX). A torch export is iree-turbine's
    ``ExportOutput`` itself (`sectionmark.importers.turbine.TorchExport`) and
    keeps its live module; a JAX export is the text JAX lowers to.
    """

    def __init__(self, *, input_type: str, framework: str, text: Optional[str] = None,
                 path_aliases: Optional[dict[SectionPath, SectionPath]] = None):
        self.input_type = input_type
        self.framework = framework
        self._text = text
        self._text_sections: Optional[tuple[SectionPath, ...]] = None
        # A path some ops' locations name relative to where it ran -> the full path (see sectionmark.importers.jax)
        self.path_aliases: dict[SectionPath, SectionPath] = path_aliases or {}

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
            found: dict[SectionPath, None] = {}
            for path in find_sections(self._text):
                declare_section(found, self.full_path(path))
            self._text_sections = tuple(found)
        return self._text_sections

    def full_path(self, path: SectionPath) -> SectionPath:
        """``path`` as it ran: a path its ops name relative to where it ran gets the names around it."""
        if not self.path_aliases or not path:
            return path
        bare = tuple(without_pass_suffix(name) for name in path)
        for length in range(len(path), 0, -1):
            full = self.path_aliases.get(bare[:length])
            if full is not None:
                suffix = path[0][len(bare[0]):]  # " (backward)" of the ops' own first name, if any
                return tuple(name + suffix for name in full[:len(full) - length]) + path
        return path

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
    section whose ops all landed in the backward pass (" (backward)") or in a
    recomputation (" (recompute)") counts. A path entered inside a function
    traced on its own (a JAX scan body, a nested jit) is relative to where the
    function is called: it counts when it runs inside any found path.
    """
    owning: set[SectionPath] = set()
    for path in found:
        names = tuple(without_pass_suffix(name) for name in path)
        owning.update(names[start:end] for start in range(len(names)) for end in range(start + 1, len(names) + 1))
    for path in entered:
        if tuple(without_pass_suffix(name) for name in path) not in owning:
            warnings.warn(f"sectionmark: section {format_path(path)!r} produced no ops in the export", stacklevel=3)

