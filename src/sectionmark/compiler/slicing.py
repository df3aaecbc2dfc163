"""Cut one section out of an exported program so it can be compiled and run alone.

`slice_section` outlines the ops whose location lies in a section (or a
section nested in it) into a standalone ``main``: its arguments are the
values flowing into the section, its results the values flowing out.
Parameters stay parameters: ops that only read weights or build constants
(``util.global.load``, ``torch.vtensor.literal``, ``stablehlo.constant``,
``torch.constant.*`` and anything computed from those alone) are kept beside
the section's ops, so the slice reads the same globals as the whole model.

`capture_module` is the whole program again, returning the values flowing
into and out of the section after its own results: run on the user's
inputs, it gives realistic arguments for the slice and the values the slice
must reproduce.

Both work on a clone of the live MLIR module (never its text) in the input
dialect (torch or stablehlo), before any IREE pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

from sectionmark.errors import SectionmarkError
from sectionmark.importers.exported import SectionedExport, as_sectioned_export, module_sections
from sectionmark.locations import section_path
from sectionmark.paths import SectionPath, decode_path, format_path

# Where a value of the top-level block is defined: ("arg", index) or ("op", op index, result index).
ValueKey = tuple


@dataclass
class SectionSlice:
    """One section outlined into its own program (``slice_module``) and the whole program instrumented to feed it."""

    path: SectionPath
    input_type: str
    slice_module: Any  # iree.compiler.ir.Module: main(values in) -> values out
    capture_module: Any  # the whole program; main returns its results, then the values in, then the values out
    original_results: int  # how many results the whole program's main has
    inputs: list[str]  # MLIR types of the values flowing in
    outputs: list[str]  # MLIR types of the values flowing out

    @property
    def mlir(self) -> str:
        return self.slice_module.operation.get_asm(enable_debug_info=True)

    def export(self) -> SectionedExport:
        """The slice as an export `sectionmark.compile` takes (same input dialect as the model)."""
        return SectionedExport(input_type=self.input_type, framework="slice", text=self.mlir)

    def capture_export(self) -> SectionedExport:
        return SectionedExport(
            input_type=self.input_type, framework="slice",
            text=self.capture_module.operation.get_asm(enable_debug_info=True),
        )


def parse_section_path(text: Union[str, SectionPath]) -> SectionPath:
    """``"Block 0/Self Attention"`` or ``"Block 0 / Self Attention"`` (or a tuple) as a path."""
    if isinstance(text, tuple):
        return text
    return tuple(name.strip() for name in decode_path(text))


def slice_section(source: Any, section: Union[str, SectionPath]) -> SectionSlice:
    """Outline ``section`` of ``source`` (an export, ExportOutput, MLIR text or .mlir path).

    Raises SectionmarkError (one line) for MLIR without sections, an unknown
    path (listing the known ones) and a section with no ops.
    """
    from iree.compiler import ir

    export, module = _module_of(source)
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
        selected = [index for index, op in enumerate(ops) if _in_section(op, path)]
        if not selected:
            raise SectionmarkError(f"section {format_path(path)!r} has no ops of its own in this program")
        plan = _Plan(body, ops, set(selected))
        if not plan.outputs:
            raise SectionmarkError(f"section {format_path(path)!r} computes nothing used outside it: nothing to slice")
        types = [str(_value(body, ops, key).type) for key in plan.inputs + plan.outputs]
        for text in types:
            if not (text.startswith("tensor<") or text.startswith("!torch.vtensor<")):
                raise SectionmarkError(f"section {format_path(path)!r} passes a non-tensor value ({text}) across its boundary")
        slice_module = _outline(module, plan)
        capture = _capture(module, plan)
    return SectionSlice(
        path=path, input_type=export.input_type if export is not None else "auto", slice_module=slice_module,
        capture_module=capture, original_results=plan.original_results,
        inputs=types[:len(plan.inputs)], outputs=types[len(plan.inputs):],
    )


def _module_of(source: Any):
    from iree.compiler import ir
    from pathlib import Path

    export = as_sectioned_export(source)
    if export is not None and export.mlir_module is not None:
        module = ir.Module.parse(export.mlir_module.get_asm(binary=True, enable_debug_info=True),
                                 context=export.mlir_module.context)
        return export, module
    if export is not None:
        text = export.mlir
    elif isinstance(source, Path) or (isinstance(source, str) and "\n" not in source and "{" not in source):
        try:
            text = Path(source).read_text()
        except OSError as error:
            raise SectionmarkError(f"cannot read {source}: {error.strerror}") from None
    else:
        text = source
    from iree.compiler.ir import Context

    context = Context()
    context.allow_unregistered_dialects = True
    try:
        module = ir.Module.parse(text, context=context)
    except Exception as error:  # noqa: BLE001 - the binding raises MLIRError, ValueError...
        first = next((line for line in str(error).splitlines() if line.strip()), str(error))
        raise SectionmarkError(f"cannot parse the MLIR: {first}") from None
    return export, module


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
    """Which top-level ops to keep and which values cross the section's boundary."""

    def __init__(self, body: Any, ops: list, selected: set[int]):
        self.ops = ops
        self.index_of = {_op_key(op): index for index, op in enumerate(ops)}
        self.body = body
        self._constant: dict[int, bool] = {}
        self.keep = set(selected)
        self.inputs: list[ValueKey] = []
        for index in sorted(selected):
            for value in _nested_operands(ops[index]):
                key = self.key(value)
                if key is None or key in self.inputs:
                    continue
                if key[0] == "op" and (key[1] in selected or self._is_constant(key[1])):
                    self._keep_constants(key[1])
                    continue
                self.inputs.append(key)
        self.outputs: list[ValueKey] = []
        for index in sorted(selected):
            for result_index, result in enumerate(ops[index].results):
                if any(self._top_index(use.owner) not in selected for use in result.uses):
                    self.outputs.append(("op", index, result_index))
        terminator = ops[-1]
        self.original_results = len(terminator.operands)

    def key(self, value: Any):
        owner = value.owner
        if isinstance(owner, type(self.body)):
            return ("arg", value.arg_number) if owner == self.body else None
        index = self.index_of.get(_op_key(owner))
        return None if index is None else ("op", index, value.result_number)

    def _top_index(self, op: Any) -> int:
        while _op_key(op) not in self.index_of:
            op = op.parent
        return self.index_of[_op_key(op)]

    def _is_constant(self, index: int) -> bool:
        """Reads weights or builds a constant: no regions, and every operand from such an op."""
        if index not in self._constant:
            op = self.ops[index]
            keys = [self.key(value) for value in op.operands]
            self._constant[index] = (
                not op.regions and op.name not in ("func.call", "func.return", "util.call")
                and all(key is not None and key[0] == "op" and self._is_constant(key[1]) for key in keys)
            )
        return self._constant[index]

    def _keep_constants(self, index: int) -> None:
        if index in self.keep:
            return
        self.keep.add(index)
        for value in self.ops[index].operands:
            self._keep_constants(self.key(value)[1])


def _op_key(op: Any):
    return op.operation


def _nested_operands(op: Any):
    """Operands of ``op`` and of every op nested in its regions."""
    found = []

    def visit(inner):
        found.extend(inner.operands)
        from iree.compiler import ir

        return ir.WalkResult.ADVANCE

    from iree.compiler import ir

    op.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


def _value(body: Any, ops: list, key: ValueKey):
    if key[0] == "arg":
        return body.arguments[key[1]]
    return ops[key[1]].results[key[2]]


def _clone(module: Any):
    from iree.compiler import ir

    copy = ir.Module.parse(module.operation.get_asm(binary=True, enable_debug_info=True), context=module.context)
    body = _main_block(copy)
    return copy, body, list(body.operations)


def _set_returns(body: Any, ops: list, values: list, arguments: list) -> None:
    """Replace ``main``'s return with one of ``values`` and its signature with ``arguments`` -> those."""
    from iree.compiler import ir
    from iree.compiler.dialects import func

    terminator = ops[-1]
    location = terminator.location
    with ir.InsertionPoint.at_block_terminator(body), location:
        func.ReturnOp(values)
    terminator.operation.erase()
    function = body.owner
    function.attributes["function_type"] = ir.TypeAttr.get(
        ir.FunctionType.get([value.type for value in arguments], [value.type for value in values])
    )
    if "res_attrs" in function.attributes:
        del function.attributes["res_attrs"]


def _outline(module: Any, plan: _Plan):
    from iree.compiler import ir

    copy, body, ops = _clone(module)
    original_arguments = len(body.arguments)
    new_arguments = []
    for key in plan.inputs:
        value = _value(body, ops, key)
        argument = body.add_argument(value.type, ops[min(plan.keep)].location)
        value.replace_all_uses_with(argument)
        new_arguments.append(argument)
    outputs = [_value(body, ops, key) for key in plan.outputs]
    _set_returns(body, ops, outputs, list(body.arguments)[original_arguments:])
    for index in reversed(range(len(ops) - 1)):
        if index not in plan.keep:
            ops[index].operation.erase()
    for _ in range(original_arguments):
        body.erase_argument(0)
    function = body.owner
    if "arg_attrs" in function.attributes:
        del function.attributes["arg_attrs"]
    return copy


def _capture(module: Any, plan: _Plan):
    copy, body, ops = _clone(module)
    returned = list(ops[-1].operands)
    extra = [_value(body, ops, key) for key in plan.inputs + plan.outputs]
    _set_returns(body, ops, returned + extra, list(body.arguments))
    return copy
