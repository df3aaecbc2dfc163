"""Where the torch importer hooks in: the markers' registry, and patches of torch, turbine and IREE internals.

Registry. `register_with_markers` (called on import of the package) tells
`sectionmark.markers.frameworks` what a section enters while torch traces
(`scope.enter_export_scope`, or under TorchDynamo an annotate scope keyed by
`scope.new_annotation_key`); the first section traced either way installs
the import hooks for the process.

Import hooks (`install_import_hooks`): they turn the section paths in node
meta into MLIR locations, so plain ``aot.export`` / ``torch.export.export``
of a marked model keep their sections with no sectionmark scope. They act
only on what carries sections, so an unmarked graph imports exactly as plain
iree-turbine imports it:

* iree-turbine's FX importer gives each op the location plain iree-turbine
  gives it, wrapped in a NameLoc ``sectionmark:<path>`` (`_tagging_locations`,
  only for the locations that become op locations: `_importing_ops`);
* re-traces keep sections (`sectionmark.importers.torch.retrace`);
* the MLIR bindings get back the ``isinstance`` that iree-turbine 3.9 calls
  (`_restore_mlir_isinstance`): without it turbine cannot expand its custom
  ops, so ``transfer_to_logical_device`` (work placed on several devices)
  and ``aot.jittable`` fail in IREE 3.13, with or without sectionmark.

Scope hooks (`scope_hooks`, only while a ``sections`` scope is open):
``aot.jittable`` functions of a ``CompiledModule`` keep sections. jittable
runs the model's Python under make_fx, outside torch.export, where sections
would stay eager; there they annotate the graph's node meta as in non-strict
export (`_annotating_jittable_traces`), which takes a wider torch probe in
the markers' registry: every eager section then asks it, so these are
installed only while a scope is open.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator, Optional, Sequence

import torch

from sectionmark.importers.torch import retrace
from sectionmark.importers.torch.scope import (ExportSection, enter_export_scope, new_annotation_key, node_section_path,
                                               this_thread)
from sectionmark.markers import frameworks
from sectionmark.section_path import LOC_PREFIX, encode_path

__all__ = ["register_with_markers", "install_import_hooks", "scope_hooks"]

_hooks_lock = threading.Lock()
_import_hooks_installed = False
_scope_users = 0
_remove_scope_hooks: Optional[Callable[[], None]] = None


def register_with_markers() -> None:
    """Tell the markers' framework registry what a section enters while torch traces."""
    frameworks.register("torch", _traced_section, _compiled_section_key)


def _traced_section(name: str, _enclosing: Sequence[str]) -> Optional[ExportSection]:
    """A section entered while torch exports (on any thread): its export scope, installing the hooks first.

    The enclosing sections are in torch's node meta already.
    """
    if not _import_hooks_installed:
        install_import_hooks()
    return enter_export_scope(name)


def _compiled_section_key() -> str:
    """The key of the annotate scope a section returns under TorchDynamo, installing the hooks first."""
    if not _import_hooks_installed:
        install_import_hooks()
    return new_annotation_key()


def install_import_hooks() -> None:
    """Make every torch export and import of this process keep sections (once; thread-safe).

    Installed by the first section traced under torch.export (so that plain
    ``aot.export`` and ``torch.export.export`` of a marked model need no
    scope) and by the first `sections` scope. The hooks act only on what
    carries sections: a graph without them imports exactly as plain
    iree-turbine imports it.
    """
    global _import_hooks_installed
    with _hooks_lock:
        if not _import_hooks_installed:
            _restore_mlir_isinstance()
            _patch(_import_patches())
            _import_hooks_installed = True


@contextlib.contextmanager
def scope_hooks() -> Iterator[None]:
    """The import hooks, and while any thread holds this open, the jittable hooks (see the module docstring)."""
    global _scope_users, _remove_scope_hooks
    install_import_hooks()
    with _hooks_lock:
        if _scope_users == 0:
            _remove_scope_hooks = _install_jittable_hooks()
        _scope_users += 1
    try:
        yield
    finally:
        with _hooks_lock:
            _scope_users -= 1
            if _scope_users == 0 and _remove_scope_hooks is not None:
                _remove_scope_hooks()
                _remove_scope_hooks = None


def _import_patches() -> list[tuple[Any, str, Callable]]:
    """Where sections would be lost on their way from node meta to MLIR locations."""
    import torch._functorch.aot_autograd as aot_autograd
    import torch.export.exported_program as exported_program
    from iree.compiler.extras.fx_importer import ContextCache, GraphNodeImporter
    from torch._higher_order_ops.wrap import WrapWithAutocast, WrapWithSetGradEnabled

    return [
        (ContextCache, "get_node_location", _tagging_locations),
        (GraphNodeImporter, "import_nodes", _importing_ops),
        (WrapWithSetGradEnabled, "__call__", retrace.recording_regions),
        (WrapWithAutocast, "__call__", retrace.recording_regions),
        (aot_autograd, "_aot_export_function", retrace.recording_joint_graphs),
        (exported_program, "_decompose_and_get_gm_with_new_signature_constants",
         retrace.carrying_sections_through_retraces),
    ]


def _restore_mlir_isinstance() -> None:
    """Give back ``IntegerType.isinstance(t)`` (and every other type, value and attribute class's) to IREE 3.13's
    MLIR bindings, which dropped it; iree-turbine 3.9 still calls it.

    Where: turbine's type conversion while it expands custom ops
    (``transfer_to_logical_device``, which places work on another device) and
    its procedural tracing (``aot.jittable``): without it an export fails with
    "type object 'IntegerType' has no attribute 'isinstance'", with or without
    sectionmark. Added only where missing, with the meaning it had: is ``value``,
    as its most specific class, an instance of this class. An export that
    never calls it imports exactly as before.
    """
    from iree.compiler import ir

    for name in dir(ir):
        kind = getattr(ir, name)
        if (isinstance(kind, type) and issubclass(kind, (ir.Type, ir.Value, ir.Attribute))
                and not hasattr(kind, "isinstance")):
            kind.isinstance = staticmethod(lambda value, kind=kind: isinstance(value.maybe_downcast(), kind))


def _install_jittable_hooks() -> Callable[[], None]:
    """Patch where ``aot.jittable`` traces the model's Python and widen the markers' torch probe; returns the undo."""
    import sys

    import iree.turbine.aot  # noqa: F401 - loads the jittable module patched below

    remove_patch = _patch([(sys.modules["iree.turbine.aot.builtins.jittable"], "functorch_functionalize",
                            _annotating_jittable_traces)])
    restore_probe = frameworks.replace_probe("torch", _exporting_or_tracing_jittable)

    def remove() -> None:
        restore_probe()
        remove_patch()

    return remove


def _patch(patches: list[tuple[Any, str, Callable]]) -> Callable[[], None]:
    """Wrap each ``owner.name`` in ``wrap(original)``; returns the undo."""
    originals = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    for (owner, name, wrap), (_, _, original) in zip(patches, originals):
        setattr(owner, name, wrap(original))

    def remove() -> None:
        for owner, name, original in originals:
            setattr(owner, name, original)

    return remove


def _annotating_jittable_traces(original: Callable) -> Callable:
    """``functorch_functionalize``: where ``aot.jittable`` runs the model's Python.

    It traces with make_fx, outside torch.export, where sections stay eager
    and the graph gets no sections. Inside a scope they annotate its nodes as
    in non-strict export; jittable's Dynamo trace of that graph then keeps
    each node's sections.
    """

    def functorch_functionalize(*args: Any, **kwargs: Any):
        if not this_thread.auto_modules:
            return original(*args, **kwargs)
        outer, this_thread.tracing_jittable = this_thread.tracing_jittable, True
        try:
            return original(*args, **kwargs)
        finally:
            this_thread.tracing_jittable = outer

    return functorch_functionalize


def _exporting_or_tracing_jittable() -> bool:
    """The markers' torch probe while a scope is open: ``torch.compiler.is_exporting()``, or this thread
    traces a jittable."""
    return torch.compiler.is_exporting() or this_thread.tracing_jittable


class _OpLocations:
    """Locations of one ``import_nodes`` call: what plain iree-turbine gives each op."""

    __slots__ = ("plain",)

    def __init__(self) -> None:
        # The importer keeps the last location it got for nodes that have none
        # (no stack trace); that must be the last plain one, never a tagged one.
        self.plain = None


class _ThreadImports(threading.local):
    def __init__(self) -> None:
        self.op_locations: Optional[_OpLocations] = None  # inside GraphNodeImporter.import_nodes


_this_thread_imports = _ThreadImports()


def _importing_ops(original: Callable) -> Callable:
    """``GraphNodeImporter.import_nodes``: the one caller whose locations become op locations.

    The importer also asks for node locations to pick a function location;
    those stay plain.
    """

    def import_nodes(self, *args: Any, **kwargs: Any):
        outer, _this_thread_imports.op_locations = _this_thread_imports.op_locations, _OpLocations()
        try:
            return original(self, *args, **kwargs)
        finally:
            _this_thread_imports.op_locations = outer

    return import_nodes


def _tagging_locations(original: Callable) -> Callable:
    """``ContextCache.get_node_location``: an op's plain location, in a NameLoc of its path."""
    from iree.compiler.ir import Location

    def get_node_location(self, node: torch.fx.Node):
        location = original(self, node)
        op_locations = _this_thread_imports.op_locations
        if op_locations is None:
            return location
        if location is not None:
            op_locations.plain = location
        plain = op_locations.plain if op_locations.plain is not None else Location.unknown(context=self._c)
        path = None if node.op in ("placeholder", "output") else node_section_path(node, this_thread.names_modules)
        if path is None:
            return plain
        return Location.name(LOC_PREFIX + encode_path(path), childLoc=plain, context=self._c)

    return get_node_location
