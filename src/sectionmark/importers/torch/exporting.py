"""The public export API: `export`, `export_training_step` and the `sections` scope.

`export` is iree-turbine's ``aot.export`` inside a `sections` scope, whose
result keeps section names (`TorchExport`); `export_training_step` exports
forward, loss and backward through torch's joint graph.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import TYPE_CHECKING, Any, Iterator, Optional

import torch

from sectionmark.errors import SectionmarkError, first_line
from sectionmark.importers.exported import warn_empty_sections
from sectionmark.importers.torch.hooks import scope_hooks
from sectionmark.importers.torch.scope import this_thread
from sectionmark.progress import progress

if TYPE_CHECKING:
    from sectionmark.importers.turbine import TorchExport

__all__ = ["export", "export_training_step", "sections"]


@contextlib.contextmanager
def sections(auto_modules: bool = False) -> Iterator[None]:
    """Scoped markers: exports and imports this thread runs inside keep section paths.

    Not needed to keep sections since the hooks install themselves on the
    first section torch traces; ``with sm.torch.sections(): out = aot.export(...)``
    still works, and the scope adds two things for the thread inside it:
    ``auto_modules`` names ops outside any section after their ``nn.Module``
    path, and ``aot.jittable`` functions of a ``CompiledModule`` keep
    sections (see `sectionmark.importers.torch.hooks`).
    """
    with scope_hooks():
        this_thread.auto_modules.append(auto_modules)
        try:
            yield
        finally:
            this_thread.auto_modules.pop()


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
    quiet: bool = False,
) -> "TorchExport":
    """iree-turbine's ``aot.export``, keeping section names: same arguments, same defaults.

    ``model`` is an ``nn.Module`` (traced here with ``args``/``kwargs`` or
    positional example tensors), a ``torch.export.ExportedProgram``, an
    ``aot.FxProgramsBuilder`` (several functions, e.g. prefill and decode) or
    an ``aot.CompiledModule`` class.
    ``strict_export`` selects TorchDynamo (the default, as in ``aot.export``)
    or Python (non-strict) export; both carry sections. ``auto_modules``
    names unmarked ops after their ``nn.Module`` path. The result is turbine's
    ``ExportOutput`` with ``sections`` (see `TorchExport`). On a terminal a
    progress line shows what is exported and the time elapsed
    (`sectionmark.progress`); ``quiet=True`` hides it.
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
    this_thread.entered = {}
    how = "torch.export" + ("" if strict_export else " (non-strict)")
    try:
        with progress(f"exporting {_kind(model)} with {how}", quiet), sections(auto_modules), _without_export_notices():
            output = aot.export(
                model, *example_args, args=args, kwargs=kwargs, dynamic_shapes=dynamic_shapes,
                module_name=module_name, function_name=function_name, strict_export=strict_export,
                import_symbolic_shape_expressions=import_symbolic_shape_expressions, arg_device=arg_device,
            )
        entered = list(this_thread.entered)
    finally:
        this_thread.entered = None
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
