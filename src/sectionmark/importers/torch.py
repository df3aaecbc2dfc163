"""PyTorch: sections into FX node metadata, then into MLIR locations.

Tracing. While torch.export traces, every `section` adds one key
``sectionmark#<n>`` to ``node.meta["custom"]``; the keys of a node, in
insertion order, are its section path (one key per nesting level, so nesting
stays a path and recursion never overwrites a level).

* Strict export (TorchDynamo): the `section` constructor returns
  ``torch.fx.traceback.annotate``, the one context manager Dynamo carries.
* Non-strict export runs the model's Python: `_ExportSection` puts an extended
  copy of the current ``custom`` dict in torch's node meta and the previous
  dict back on exit. (``annotate`` updates that dict in place, which leaked
  each section into every later one when the meta was saved and restored
  around it.) Only the thread that runs the export does this:
  ``torch.compiler.is_exporting()`` and torch's node meta are process-wide,
  while torch's tracing context is per thread; sections that other threads
  run meanwhile stay eager and never touch export state.

Import. Hooks turn those paths into MLIR locations. The first section traced
under torch.export installs them for the process (`install_import_hooks`), so
plain ``aot.export`` / ``torch.export.export`` of a marked model keep their
sections with no sectionmark scope; they act only on what carries sections,
so an unmarked graph imports exactly as plain iree-turbine imports it. They
change imports in three ways:

* iree-turbine's FX importer gives each op the location plain iree-turbine
  gives it, wrapped in a NameLoc ``sectionmark:<path>`` (`_tagging_locations`);
* re-traces keep sections. ``run_decompositions`` inlines each
  ``torch.no_grad()`` / ``set_grad_enabled`` / ``autocast`` region (a
  higher-order op around a graph) and ``_export_forward_backward`` traces the
  joint forward+backward graph once more: both run a graph's generated code
  and record its ops without that graph's node meta. `_carry_sections` gives
  each op the sections of its node back, with " (backward)" on backward ops
  (torch gives backward nodes their forward node's sections);
* ``aot.jittable`` functions of a ``CompiledModule`` keep sections: jittable
  runs the model's Python under make_fx, outside torch.export, where
  sections would stay eager; there they annotate the graph's node meta as in
  non-strict export (`_annotating_jittable_traces`). This one needs the
  `sections` scope (`export` runs inside one): its patch makes every eager
  section ask one more probe, so it is installed only while a scope is open.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import threading
import warnings
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

import torch
import torch.fx.traceback as fx_traceback
from torch._guards import TracingContext

from sectionmark.errors import SectionmarkError, first_line
from sectionmark.importers.exported import warn_empty_sections
from sectionmark.markers.marker import TORCH_ANNOTATION_PREFIX as ANNOTATION_PREFIX
from sectionmark.paths import BACKWARD_SUFFIX, LOC_PREFIX, SectionPath, encode_path

if TYPE_CHECKING:
    from sectionmark.importers.turbine import TorchExport

__all__ = ["export", "export_training_step", "sections", "node_section_path"]

_annotation_numbers = itertools.count(1)


def enter_export_scope(name: str) -> Optional["_ExportSection"]:
    """Enter ``name`` into torch's node meta if this thread runs the export, else None.

    Called while ``torch.compiler.is_exporting()``, which is true for every
    thread as long as any thread exports; torch's tracing context is set only
    on the exporting one. ``aot.jittable`` traces outside torch.export, on
    this thread only (see `_annotating_jittable_traces`).
    """
    if TracingContext.try_get() is None and not _this_thread.tracing_jittable:
        return None
    scope = _ExportSection(name)
    scope.__enter__()
    return scope


class _ExportSection:
    """One section while non-strict export runs the model's Python on this thread."""

    __slots__ = ("_key", "_name", "_had_custom", "_previous", "_preserve")

    def __init__(self, name: str):
        self._key = ANNOTATION_PREFIX + str(next(_annotation_numbers))
        self._name = name

    def __enter__(self) -> "_ExportSection":
        self._preserve = None
        if not fx_traceback.has_preserved_node_meta():
            # New nodes copy torch's current node meta only while this is on.
            self._preserve = fx_traceback.preserve_node_meta()
            self._preserve.__enter__()
        meta = fx_traceback.get_current_meta()
        self._had_custom, self._previous = "custom" in meta, meta.get("custom")
        meta["custom"] = {**(self._previous or {}), self._key: self._name}
        entered = _this_thread.entered
        if entered is not None:
            entered.setdefault(tuple(_section_annotations(meta["custom"]).values()), None)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        meta = fx_traceback.get_current_meta()
        if self._had_custom:
            meta["custom"] = self._previous
        else:
            meta.pop("custom", None)
        if self._preserve is not None:
            self._preserve.__exit__(None, None, None)


def node_section_path(node: torch.fx.Node, auto_modules: bool = False) -> Optional[SectionPath]:
    """The section path of an FX node; with ``auto_modules``, fall back to its module path."""
    path = tuple(_section_annotations(node.meta.get("custom")).values())
    if path:
        return path
    if auto_modules:
        return _module_path(node.meta.get("nn_module_stack"))
    return None


def _section_annotations(custom: Optional[dict[str, Any]]) -> dict[str, Any]:
    return {key: value for key, value in (custom or {}).items() if key.startswith(ANNOTATION_PREFIX)}


def _other_annotations(custom: Optional[dict[str, Any]]) -> dict[str, Any]:
    return {key: value for key, value in (custom or {}).items() if not key.startswith(ANNOTATION_PREFIX)}


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


class _ThreadScopes(threading.local):
    def __init__(self) -> None:
        self.auto_modules: list[bool] = []  # one entry per open `sections` scope, innermost last
        self.traced_code: Optional[dict[str, _TracedCode]] = None  # see _carrying_sections_through_retraces
        self.op_locations: Optional[_OpLocations] = None  # inside GraphNodeImporter.import_nodes
        self.entered: Optional[dict[SectionPath, None]] = None  # sections entered by `export` (non-strict)
        self.tracing_jittable = False  # inside aot.jittable's trace of the model's Python

    @property
    def names_modules(self) -> bool:
        """Whether the innermost open scope names unmarked ops after their module path."""
        return bool(self.auto_modules) and self.auto_modules[-1]


_this_thread = _ThreadScopes()
_hooks_lock = threading.Lock()
_import_hooks_installed = False
_scope_users = 0
_remove_scope_hooks: Optional[Callable[[], None]] = None


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
            _patch(_import_patches())
            _import_hooks_installed = True


@contextlib.contextmanager
def sections(auto_modules: bool = False) -> Iterator[None]:
    """Scoped markers: exports and imports this thread runs inside keep section paths.

    Not needed to keep sections since the hooks install themselves
    (`install_import_hooks`); ``with sm.torch.sections(): out = aot.export(...)``
    still works, and the scope adds two things for the thread inside it:
    ``auto_modules`` names ops outside any section after their ``nn.Module``
    path, and ``aot.jittable`` functions of a ``CompiledModule`` keep
    sections (`_annotating_jittable_traces`).
    """
    global _scope_users, _remove_scope_hooks
    install_import_hooks()
    with _hooks_lock:
        if _scope_users == 0:
            _remove_scope_hooks = _patch(_jittable_patches())
        _scope_users += 1
    _this_thread.auto_modules.append(auto_modules)
    try:
        yield
    finally:
        _this_thread.auto_modules.pop()
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
        (WrapWithSetGradEnabled, "__call__", _recording_regions),
        (WrapWithAutocast, "__call__", _recording_regions),
        (aot_autograd, "_aot_export_function", _recording_joint_graphs),
        (exported_program, "_decompose_and_get_gm_with_new_signature_constants", _carrying_sections_through_retraces),
    ]


def _jittable_patches() -> list[tuple[Any, str, Callable]]:
    """Where ``aot.jittable`` traces the model's Python (only while a scope is open: the probe
    patched here makes every eager section ask it)."""
    import sys

    import iree.turbine.aot  # noqa: F401 - loads the jittable module patched below

    from sectionmark.markers import marker as markers

    markers._bind_torch_probes()  # bound lazily otherwise, which would undo the patch of the probe
    return [
        (sys.modules["iree.turbine.aot.builtins.jittable"], "functorch_functionalize", _annotating_jittable_traces),
        (markers, "_torch_exporting", _exporting_or_tracing_jittable),
    ]


def _patch(patches: list[tuple[Any, str, Callable]]) -> Callable[[], None]:
    """Wrap each ``owner.name`` in ``wrap(original)``; returns the undo."""
    from sectionmark.markers import marker as markers

    originals = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    for (owner, name, wrap), (_, _, original) in zip(patches, originals):
        setattr(owner, name, wrap(original))
    markers.torch_probe_replaced()

    def remove() -> None:
        for owner, name, original in originals:
            setattr(owner, name, original)
        markers.torch_probe_replaced()

    return remove


def _annotating_jittable_traces(original: Callable) -> Callable:
    """``functorch_functionalize``: where ``aot.jittable`` runs the model's Python.

    It traces with make_fx, outside torch.export, where sections stay eager
    and the graph gets no sections. Inside a scope they annotate its nodes as
    in non-strict export; jittable's Dynamo trace of that graph then keeps
    each node's sections.
    """

    def functorch_functionalize(*args: Any, **kwargs: Any):
        if not _this_thread.auto_modules:
            return original(*args, **kwargs)
        outer, _this_thread.tracing_jittable = _this_thread.tracing_jittable, True
        try:
            return original(*args, **kwargs)
        finally:
            _this_thread.tracing_jittable = outer

    return functorch_functionalize


def _exporting_or_tracing_jittable(original: Callable[[], bool]) -> Callable[[], bool]:
    """The markers' probe ``torch.compiler.is_exporting``, also true while this thread traces a jittable."""

    def is_exporting() -> bool:
        return original() or _this_thread.tracing_jittable

    return is_exporting


class _OpLocations:
    """Locations of one ``import_nodes`` call: what plain iree-turbine gives each op."""

    __slots__ = ("plain",)

    def __init__(self) -> None:
        # The importer keeps the last location it got for nodes that have none
        # (no stack trace); that must be the last plain one, never a tagged one.
        self.plain = None


def _importing_ops(original: Callable) -> Callable:
    """``GraphNodeImporter.import_nodes``: the one caller whose locations become op locations.

    The importer also asks for node locations to pick a function location;
    those stay plain.
    """

    def import_nodes(self, *args: Any, **kwargs: Any):
        outer, _this_thread.op_locations = _this_thread.op_locations, _OpLocations()
        try:
            return original(self, *args, **kwargs)
        finally:
            _this_thread.op_locations = outer

    return import_nodes


def _tagging_locations(original: Callable) -> Callable:
    """``ContextCache.get_node_location``: an op's plain location, in a NameLoc of its path."""
    from iree.compiler.ir import Location

    def get_node_location(self, node: torch.fx.Node):
        location = original(self, node)
        op_locations = _this_thread.op_locations
        if op_locations is None:
            return location
        if location is not None:
            op_locations.plain = location
        plain = op_locations.plain if op_locations.plain is not None else Location.unknown(context=self._c)
        path = None if node.op in ("placeholder", "output") else node_section_path(node, _this_thread.names_modules)
        if path is None:
            return plain
        return Location.name(LOC_PREFIX + encode_path(path), childLoc=plain, context=self._c)

    return get_node_location


def _recording_regions(original: Callable) -> Callable:
    """``wrap_with_set_grad_enabled(enable, graph, *args)`` / ``wrap_with_autocast``: note the region's graph."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        traced = _this_thread.traced_code
        if traced is not None:
            traced.update((code.filename, code) for code in map(_TracedCode, args) if code.filename)
        return original(self, *args, **kwargs)

    return __call__


def _recording_joint_graphs(original: Callable) -> Callable:
    """``_aot_export_function``: note the joint graph, whose nodes still have their sections."""

    def _aot_export_function(*args: Any, **kwargs: Any):
        result = original(*args, **kwargs)
        traced = _this_thread.traced_code
        code = _TracedCode(result[0]) if traced is not None and kwargs.get("trace_joint") else None
        if code is not None and code.filename:
            traced[code.filename] = code
        return result

    return _aot_export_function


def _carrying_sections_through_retraces(original: Callable) -> Callable:
    """``_decompose_and_get_gm_with_new_signature_constants``: behind ``run_decompositions``
    and ``_export_forward_backward``, the two retraces that lose sections."""

    def decompose(*args: Any, **kwargs: Any):
        if _this_thread.traced_code is not None:
            return original(*args, **kwargs)
        _this_thread.traced_code = traced = {}
        try:
            graph_module, *rest = original(*args, **kwargs)
        finally:
            _this_thread.traced_code = None
        _carry_sections(graph_module, traced)
        return (graph_module, *rest)

    return decompose


class _TracedCode:
    """A GraphModule whose generated code torch ran while re-tracing: line -> node."""

    __slots__ = ("filename", "_first_line", "_lineno_map", "_nodes", "has_sections")

    def __init__(self, module: Any):
        self.filename, self.has_sections = None, False
        if isinstance(module, torch.fx.GraphModule) and module._lineno_map is not None:
            code = type(module).forward.__code__
            self.filename, self._first_line = code.co_filename, code.co_firstlineno
            self._lineno_map, self._nodes = module._lineno_map, list(module.graph.nodes)
            self.has_sections = any(node_section_path(node) for node in self._nodes)

    def node_at(self, line: int) -> Optional[torch.fx.Node]:
        index = self._lineno_map.get(line - self._first_line)
        return self._nodes[index] if index is not None else None


_FRAME = re.compile(r'File "([^"\n]*)", line (\d+)')


def _carry_sections(graph_module: torch.fx.GraphModule, traced: dict[str, _TracedCode]) -> None:
    """Give each op of a re-traced graph the sections of the node it was traced from.

    Re-tracing runs the generated code of a graph (a no_grad region's, or the
    joint forward+backward graph) and records each op without that node's
    meta. The op's stack trace names the line of generated code it came
    from, and ``_lineno_map`` maps the line to the node, the way Dynamo keeps
    the meta of graphs it re-traces.
    """
    if not traced:
        return
    carried = 0
    for module in graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            path = _traced_path(node, traced) if node.op == "call_function" else None
            if path is not None:
                annotations = {f"{ANNOTATION_PREFIX}{depth}": name for depth, name in enumerate(path, 1)}
                node.meta["custom"] = {**_other_annotations(node.meta.get("custom")), **annotations}
                carried += 1
    if carried == 0 and any(code.has_sections for code in traced.values()):
        warnings.warn(
            "sectionmark: torch re-traced a graph in a way sectionmark cannot follow (no stack traces); "
            "the ops of no_grad regions or of a training step are reported as (unmarked)",
            RuntimeWarning,
            stacklevel=3,
        )


def _traced_path(node: torch.fx.Node, traced: dict[str, _TracedCode]) -> Optional[SectionPath]:
    """The path of the node ``node`` was traced from (innermost traced frame), or None.

    That node may itself come from an earlier re-trace (an op of a no_grad
    region inside a training step). Backward nodes, which torch tags
    ``partitioner_tag="is_backward"`` and gives their forward node's
    sections, get " (backward)" on every name.
    """
    for filename, line in reversed(_FRAME.findall(node.stack_trace or "")):
        code = traced.get(filename)
        if code is None:
            continue
        source = code.node_at(int(line))
        if source is None:
            return None
        path = _traced_path(source, traced) or node_section_path(source)
        if path and source.meta.get("partitioner_tag") == "is_backward":
            path = tuple(name + BACKWARD_SUFFIX for name in path)
        return path
    return None


def export(
    model: Any,
    /,
    *example_args: torch.Tensor,
    args: Optional[tuple] = None,
    kwargs: Optional[dict[str, Any]] = None,
    dynamic_shapes: Any = None,
    module_name: Optional[str] = None,
    function_name: Optional[str] = None,
    strict_export: bool = True,
    import_symbolic_shape_expressions: bool = False,
    arg_device: Optional[dict[int, Any]] = None,
    auto_modules: bool = False,
) -> "TorchExport":
    """iree-turbine's ``aot.export``, keeping section names: same arguments, same defaults.

    ``model`` is an ``nn.Module`` (traced here with ``args``/``kwargs`` or
    positional example tensors), a ``torch.export.ExportedProgram``, an
    ``aot.FxProgramsBuilder`` (several functions, e.g. prefill and decode) or
    an ``aot.CompiledModule`` class.
    ``strict_export`` selects TorchDynamo (the default, as in ``aot.export``)
    or Python (non-strict) export; both carry sections. ``auto_modules``
    names unmarked ops after their ``nn.Module`` path. The result is turbine's
    ``ExportOutput`` with ``sections`` (see `TorchExport`).
    """
    from iree.turbine import aot

    from sectionmark.importers.turbine import TorchExport

    is_compiled_module = isinstance(model, type) and issubclass(model, aot.CompiledModule)
    if not (isinstance(model, (torch.nn.Module, torch.export.ExportedProgram, aot.FxPrograms)) or is_compiled_module):
        raise SectionmarkError("sm.torch.export takes an nn.Module, a torch.export.ExportedProgram, an "
                               f"iree.turbine.aot.FxProgramsBuilder or a CompiledModule class, got {_kind(model)}")
    if not isinstance(model, torch.nn.Module):
        if example_args or args is not None or kwargs is not None or dynamic_shapes is not None:
            raise SectionmarkError(f"example arguments, args, kwargs and dynamic_shapes apply to an nn.Module; this "
                                   f"{_kind(model)} was already exported with its own")
    _this_thread.entered = {}
    try:
        with sections(auto_modules), _without_export_notices():
            output = aot.export(
                model, *example_args, args=args, kwargs=kwargs, dynamic_shapes=dynamic_shapes,
                module_name=module_name, function_name=function_name, strict_export=strict_export,
                import_symbolic_shape_expressions=import_symbolic_shape_expressions, arg_device=arg_device,
            )
        entered = list(_this_thread.entered)
    finally:
        _this_thread.entered = None
    exported = TorchExport(output)
    if entered:  # only non-strict export records the sections it entered
        warn_empty_sections(entered, exported.sections)
    return exported


def _kind(model: Any) -> str:
    return f"class {model.__name__}" if isinstance(model, type) else type(model).__name__


@contextlib.contextmanager
def _without_export_notices() -> Iterator[None]:
    """Hide what iree-turbine says about every non-strict export: its "experimental" notice."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="When strict_export == False")
        yield


def export_training_step(
    model: torch.nn.Module,
    args: tuple = (),
    kwargs: Optional[dict[str, Any]] = None,
    *,
    loss_index: int = 0,
    dynamic_shapes: Any = None,
    strict_export: bool = True,
    auto_modules: bool = False,
    function_name: Optional[str] = None,
) -> "TorchExport":
    """Export one training step of ``model``: forward, loss and backward, keeping section names.

    ``model(*args, **kwargs)`` returns a tuple whose ``loss_index`` element is
    a scalar loss (its other outputs must not require gradients). The
    exported function returns the forward's outputs, then the gradient of
    every parameter that requires one, in ``named_parameters()`` order; the
    optimizer update is not part of it. Forward ops keep their sections,
    backward ops are named ``"<section> (backward)"``. Built on
    ``torch.export.experimental._export_forward_backward``, whose joint
    graph iree-turbine would import as a function without results.
    """
    import torch.export.experimental  # imports TorchDynamo: about a second
    from torch.export.graph_signature import ExportGraphSignature, OutputKind, OutputSpec

    with sections(auto_modules), _without_export_notices():
        program = torch.export.export(model, tuple(args), kwargs, dynamic_shapes=dynamic_shapes, strict=strict_export)
        try:
            joint = torch.export.experimental._export_forward_backward(program, joint_loss_index=loss_index)
        except RuntimeError as error:
            reason = first_line(str(error), type(error).__name__)
            raise SectionmarkError(f"cannot export the training step of {type(model).__name__}: {reason}") from None
    _gradients_in_parameter_order(joint, [name for name, _ in model.named_parameters()])
    results = (OutputKind.LOSS_OUTPUT, OutputKind.GRADIENT_TO_PARAMETER, OutputKind.GRADIENT_TO_USER_INPUT)
    outputs = [OutputSpec(OutputKind.USER_OUTPUT, spec.arg, None) if spec.kind in results else spec
               for spec in joint.graph_signature.output_specs]
    step = joint._update(joint.graph_module, ExportGraphSignature(joint.graph_signature.input_specs, outputs))
    return export(step, auto_modules=auto_modules, function_name=function_name)


def _gradients_in_parameter_order(joint: Any, parameters: list[str]) -> None:
    """Put the joint graph's parameter gradients in ``named_parameters()`` order (torch gives them in
    the order the parameters are first used), the other outputs first and in place."""
    from torch.export.graph_signature import OutputKind

    specs = joint.graph_signature.output_specs
    output = next(node for node in reversed(joint.graph_module.graph.nodes) if node.op == "output")
    values = list(output.args[0])
    position = {name: index for index, name in enumerate(parameters)}
    order = sorted(range(len(specs)), key=lambda i: (specs[i].kind == OutputKind.GRADIENT_TO_PARAMETER,
                                                     position.get(specs[i].target, -1)
                                                     if specs[i].kind == OutputKind.GRADIENT_TO_PARAMETER else i))
    specs[:] = [specs[i] for i in order]
    output.args = (type(output.args[0])(values[i] for i in order),)
    joint.graph_module.recompile()
