"""PyTorch: sections into FX node metadata, then into MLIR locations.

While torch.export traces, every `section` adds one key ``sectionmark#<n>`` to
``node.meta["custom"]`` through ``torch.fx.traceback.annotate``; the keys of a
node, in insertion order, are its section path (one key per nesting level, so
nesting stays a path and recursion never overwrites a level). During import,
a scoped hook on iree-turbine's FX importer wraps each node's location in a
NameLoc ``sectionmark:<path>``.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Iterator, Optional

import torch
import torch.fx.traceback as fx_traceback

from sectionmark.exported import ExportedProgram
from sectionmark.paths import LOC_PREFIX, SectionPath, encode_path

__all__ = ["export", "section_locations", "node_section_path"]

ANNOTATION_PREFIX = "sectionmark#"
_entries = 0


def dynamo_scope(name: str):
    """The annotate scope a section becomes while TorchDynamo traces (strict export)."""
    global _entries
    _entries += 1
    return fx_traceback.annotate({ANNOTATION_PREFIX + str(_entries): name})


def enter_export_scope(name: str) -> list:
    """Enter the scopes a section needs while non-strict export runs real Python."""
    entered = []
    if not fx_traceback.has_preserved_node_meta():
        # Non-strict export copies node meta only while this is on.
        preserve = fx_traceback.preserve_node_meta()
        preserve.__enter__()
        entered.append(preserve)
    annotation = dynamo_scope(name)
    annotation.__enter__()
    entered.append(annotation)
    return entered


def node_section_path(node: torch.fx.Node, auto_modules: bool = False) -> Optional[SectionPath]:
    """The section path of an FX node; with ``auto_modules``, fall back to its module path."""
    custom = node.meta.get("custom")
    if custom:
        path = tuple(value for key, value in custom.items() if key.startswith(ANNOTATION_PREFIX))
        if path:
            return path
    if auto_modules:
        return _module_path(node.meta.get("nn_module_stack"))
    return None


def _module_path(stack: Optional[dict[str, Any]]) -> Optional[SectionPath]:
    """``blocks.3.attn`` -> ``("blocks.3", "attn")``: one name per module call level."""
    if not stack:
        return None
    names: list[str] = []
    parent = ""
    for qualified_name, _module_type in stack.values():
        if not qualified_name:
            continue
        relative = qualified_name[len(parent) + 1:] if parent and qualified_name.startswith(parent + ".") else qualified_name
        names.append(relative)
        parent = qualified_name
    return tuple(names) or None


@contextlib.contextmanager
def section_locations(auto_modules: bool = False) -> Iterator[None]:
    """Scoped hook: while active, iree-turbine's FX importer tags op locations.

    Restores the importer on exit, so plain ``aot.export`` outside the scope is
    untouched.
    """
    from iree.compiler.extras.fx_importer import ContextCache
    from iree.compiler.ir import Location

    original = ContextCache.get_node_location

    def get_node_location(self, node):
        location = original(self, node)
        if node.op in ("placeholder", "output"):  # function arguments, not ops
            return location
        path = node_section_path(node, auto_modules)
        if path is None:
            return location
        if location is None:
            location = Location.unknown(context=self._c)
        return Location.name(LOC_PREFIX + encode_path(path), childLoc=location, context=self._c)

    ContextCache.get_node_location = get_node_location
    try:
        yield
    finally:
        ContextCache.get_node_location = original


def export(
    model: torch.nn.Module,
    args: tuple = (),
    kwargs: Optional[dict[str, Any]] = None,
    *,
    dynamic_shapes: Any = None,
    strict: bool = False,
    auto_modules: bool = False,
    function_name: str = "main",
) -> ExportedProgram:
    """Export ``model`` with iree-turbine's ``aot.export``, keeping section names.

    ``strict`` selects TorchDynamo (strict) or Python (non-strict) export; both
    carry sections. ``auto_modules`` names unmarked ops after their
    ``nn.Module`` path.
    """
    from iree.turbine import aot

    with fx_traceback.preserve_node_meta(), section_locations(auto_modules), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="When strict_export == False")
        warnings.filterwarnings("ignore", message="While compiling, we found certain side effects")
        output = aot.export(
            model,
            args=tuple(args),
            kwargs=kwargs,
            dynamic_shapes=dynamic_shapes,
            strict_export=strict,
            function_name=function_name,
        )
    module = output.mlir_module
    text = module.get_asm(enable_debug_info=True)
    return ExportedProgram(mlir=text, input_type="torch", framework="torch", module=module)
