"""Cut one section out of an exported program so it can be compiled and run alone.

`slice_section` outlines the ops whose location lies in a section (or a
section nested in it) into a standalone ``main``: its arguments are the
values flowing into the section, its results the values flowing out.
Parameters stay parameters: ops that only read weights or build constants
(``util.global.load``, ``torch.vtensor.literal``, ``stablehlo.constant``,
``torch.constant.*`` and anything computed from those alone) are kept beside
the section's ops, so the slice reads the same globals as the whole model.

`SectionSlice.capture_program` is the whole program again, returning the values flowing
into and out of the section after its own results: run on the user's
inputs, it gives realistic arguments for the slice and the values the slice
must reproduce.

Both work on a clone of the live MLIR module (never its text) in the input
dialect (torch or stablehlo), before any IREE pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from sectionmark.compiler.pipeline import looks_like_path
from sectionmark.errors import SectionmarkError
from sectionmark.importers.exported import SectionedExport, as_sectioned_export, module_sections
from sectionmark.locations import section_path
from sectionmark.section_path import SectionPath, decode_path, format_path

# Where a value of main's entry block is defined: ("arg", index) or ("op", op index, result index).
ValueKey = tuple


class ModuleExport(SectionedExport):
    """A live MLIR module made here (a slice, or the whole program returning a section's boundary values).

    `sectionmark.compile` takes it as MLIR bytecode, like a torch export: the
    weights are never printed as text.
    """

    def __init__(self, module: Any, input_type: str):
        super().__init__(input_type=input_type, framework="slice")
        self._module = module

    @property
    def mlir_module(self) -> Any:
        return self._module.operation


@dataclass
class SectionSlice:
    """One section outlined into its own program, and the whole program instrumented to feed it."""

    path: SectionPath
    program: ModuleExport  # main(values flowing in) -> values flowing out
    capture_program: ModuleExport  # the whole program; main returns its results, then the values in, then out
    original_results: int  # how many results the whole program's main has
    inputs: list[str]  # MLIR types of the values flowing in
    outputs: list[str]  # MLIR types of the values flowing out
    model_inputs: list[str]  # MLIR types of the whole program's arguments

    @property
    def mlir(self) -> str:
        """The slice as MLIR text with locations (weights included)."""
        return self.program.mlir


def parse_section_path(text: Union[str, SectionPath]) -> SectionPath:
    """``"Block 0/Self Attention"`` or ``"Block 0 / Self Attention"`` (or a tuple) as a path."""
    if isinstance(text, tuple):
        return text
    return tuple(name.strip() for name in decode_path(text))


def slice_section(source: Any, section: Union[str, SectionPath]) -> SectionSlice:
    """Outline ``section`` of ``source`` (an export, ExportOutput, MLIR text or a .mlir/.mlirbc path).

    Raises SectionmarkError (one line) for MLIR without sections, an unknown
    path (listing the known ones) and a section with no ops of its own.
    """
    input_type, module = _module_of(source)
    path = parse_section_path(section)
    known = module_sections(module.operation)
    if not known:
        raise SectionmarkError("the MLIR has no sections: export the model with sectionmark (sm.torch.export, sm.jax.export)")
    if not any(found[:len(path)] == path for found in known):
        listing = "; ".join(format_path(found) for found in known)
        raise SectionmarkError(f"unknown section {format_path(path)!r}; known sections: {listing}")
    with module.context:
        body = _main_block(module)
        ops = list(body.operations)
        selected = {index for index, op in enumerate(ops[:-1]) if _in_section(op, path)}  # never the return
        if not selected:
            raise SectionmarkError(
                f"section {format_path(path)!r} has no ops of its own in the model's main function "
                "(its ops are nested in other ops or functions)"
            )
        plan = _Plan(body, ops, selected)
        if not plan.outputs:
            raise SectionmarkError(f"section {format_path(path)!r} computes nothing used outside it: nothing to slice")
        types = [str(plan.value(body, ops, key).type) for key in plan.inputs + plan.outputs]
        for text in types:
            if not (text.startswith("tensor<") or text.startswith("!torch.vtensor<")):
                raise SectionmarkError(f"section {format_path(path)!r} passes a non-tensor value ({text}) across its boundary")
        program = ModuleExport(_outline(module, plan), input_type)
        capture = ModuleExport(_capture(module, plan), input_type)
        model_inputs = [str(argument.type) for argument in body.arguments]
    return SectionSlice(
        path=path, program=program, capture_program=capture, original_results=plan.original_results,
        inputs=types[:len(plan.inputs)], outputs=types[len(plan.inputs):],
        model_inputs=model_inputs,
    )


def _module_of(source: Any) -> tuple[str, Any]:
    """The input type and a builtin.module op to read (never modified: slices are cut from clones)."""
    from iree.compiler import ir

    export = as_sectioned_export(source)
    if export is not None and export.mlir_module is not None:
        return export.input_type, export.mlir_module.opview
    if export is not None:
        data, input_type = export.mlir, export.input_type
    elif isinstance(source, Path) or (isinstance(source, str) and looks_like_path(source)):
        try:
            data, input_type = Path(source).read_bytes(), "auto"
        except OSError as error:
            raise SectionmarkError(f"cannot read {source}: {error.strerror}") from None
    else:
        data, input_type = source, "auto"
    try:
        module = ir.Module.parse(data, context=ir.Context())
    except ir.MLIRError as error:
        first = error.error_diagnostics[0] if error.error_diagnostics else None
        detail = f"{first.message} at {first.location}" if first else str(error).splitlines()[0]
        raise SectionmarkError(f"cannot parse the MLIR: {detail}") from None
    return input_type, module.operation.opview


def _main_block(module: Any):
    """The entry block of ``main`` (or of the only public function)."""
    functions = [op for op in module.body.operations if op.operation.name == "func.func"]
    named = [op for op in functions if op.attributes["sym_name"].value == "main"]
    if not named:
        named = [op for op in functions if "sym_visibility" not in op.attributes]
    if len(named) != 1:
        raise SectionmarkError("cannot tell which function is the model: expected one public function or @main")
    return named[0].regions[0].blocks[0]


def _in_section(op: Any, path: SectionPath) -> bool:
    found = section_path(str(op.location))
    return found is not None and found[:len(path)] == path


class _Plan:
    """Which top-level ops of ``main`` to keep and which values cross the section's boundary.

    Values are named by position (`ValueKey`), so the plan made on the
    model applies to each clone of it.
    """

    def __init__(self, body: Any, ops: list, selected: set[int]):
        from iree.compiler import ir

        self._body, self._ops = body, ops
        self._index_of = {op.operation: index for index, op in enumerate(ops)}
        self._constant: dict[int, bool] = {}
        self.keep = set(selected)
        self.inputs: list[ValueKey] = []
        for index in sorted(selected):
            operands: list = []
            ops[index].operation.walk(lambda inner: operands.extend(inner.operands) or ir.WalkResult.ADVANCE)
            for value in operands:
                key = self._key(value)
                if key is None or key in self.inputs or (key[0] == "op" and key[1] in selected):
                    continue
                if key[0] == "op" and self._is_constant(key[1]):
                    self._keep_with_operands(key[1])
                else:
                    self.inputs.append(key)
        self.outputs: list[ValueKey] = [
            ("op", index, number)
            for index in sorted(selected)
            for number, result in enumerate(ops[index].results)
            if any(self._top_index(use.owner) not in selected for use in result.uses)
        ]
        self.original_results = len(ops[-1].operands)

    @staticmethod
    def value(body: Any, ops: list, key: ValueKey) -> Any:
        """The value ``key`` names in the function whose entry block is ``body`` and top-level ops ``ops``."""
        return body.arguments[key[1]] if key[0] == "arg" else ops[key[1]].results[key[2]]

    def _key(self, value: Any) -> Optional[ValueKey]:
        """Where ``value`` is defined in the entry block; None when inside a nested region."""
        from iree.compiler import ir

        owner = value.owner
        if isinstance(owner, ir.Block):
            return ("arg", value.arg_number) if owner == self._body else None
        index = self._index_of.get(owner.operation)
        return None if index is None else ("op", index, value.result_number)

    def _top_index(self, op: Any) -> int:
        """Index of the top-level op that is or contains ``op``."""
        while op.operation not in self._index_of:
            op = op.parent
        return self._index_of[op.operation]

    def _is_constant(self, index: int) -> bool:
        """Reads weights or builds a constant: no regions, not a call, and every operand from such an op."""
        if index not in self._constant:
            op = self._ops[index]
            keys = [self._key(value) for value in op.operands]
            self._constant[index] = (
                not op.regions and op.name not in _NOT_CONSTANT
                and all(key is not None and key[0] == "op" and self._is_constant(key[1]) for key in keys)
            )
        return self._constant[index]

    def _keep_with_operands(self, index: int) -> None:
        if index not in self.keep:
            self.keep.add(index)
            for value in self._ops[index].operands:
                self._keep_with_operands(self._key(value)[1])


# Ops without operands that still are not constants.
_NOT_CONSTANT = frozenset({"func.call", "util.call", "func.return", "util.return"})


def _clone(module: Any) -> tuple[Any, Any, list]:
    """A detached copy of the module, its ``main`` entry block and that block's ops."""
    copy = module.operation.clone().opview
    body = _main_block(copy)
    return copy, body, list(body.operations)


def _return(body: Any, ops: list, values: list) -> None:
    """Replace ``main``'s return (``ops[-1]``) with one of ``values``."""
    from iree.compiler import ir
    from iree.compiler.dialects import func

    terminator = ops[-1]
    with ir.InsertionPoint.at_block_terminator(body), terminator.location:
        func.ReturnOp(values)
    terminator.operation.erase()


def _update_signature(body: Any) -> None:
    """``main``'s type from its block arguments and return; per-argument/result attributes no longer apply."""
    from iree.compiler import ir

    function = body.owner
    returned = list(body.operations)[-1].operands
    function.attributes["function_type"] = ir.TypeAttr.get(
        ir.FunctionType.get([argument.type for argument in body.arguments], [value.type for value in returned])
    )
    for name in ("arg_attrs", "res_attrs"):
        if name in function.attributes:
            del function.attributes[name]


def _outline(module: Any, plan: _Plan) -> Any:
    """main(values in) -> values out, with the section's ops and the constants they read."""
    copy, body, ops = _clone(module)
    original_arguments = len(body.arguments)
    for key in plan.inputs:
        value = plan.value(body, ops, key)
        value.replace_all_uses_with(body.add_argument(value.type, value.location))
    _return(body, ops, [plan.value(body, ops, key) for key in plan.outputs])
    for index in reversed(range(len(ops) - 1)):  # users before the ops defining their operands
        if index not in plan.keep:
            ops[index].operation.erase()
    for _ in range(original_arguments):
        body.erase_argument(0)
    _update_signature(body)
    _drop_unused_symbols(copy)
    return copy


def _drop_unused_symbols(module: Any) -> None:
    """Remove the private globals and functions the slice no longer uses (the other sections' weights)."""
    from iree.compiler import passmanager

    passmanager.PassManager.parse("builtin.module(symbol-dce)", context=module.context).run(module.operation)


def _capture(module: Any, plan: _Plan) -> Any:
    """The whole program, returning the section's values in and out after its own results."""
    copy, body, ops = _clone(module)
    extra = [plan.value(body, ops, key) for key in plan.inputs + plan.outputs]
    _return(body, ops, list(ops[-1].operands) + extra)
    _update_signature(body)
    return copy
