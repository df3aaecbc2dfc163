"""What each dispatch site reads and writes, at phase ``dispatch-creation`` (read only).

A ``flow.dispatch.workgroups`` op binds whole tensors, but its body loads and
stores exact slices of them (``iree_tensor_ext.dispatch.tensor.load`` /
``.store`` with static sizes), so the bytes a dispatch moves are the sizes of
those slices, not of the buffers bound. Outside the body, the op's operands
and results are the program's values: a result consumed by a later site is an
edge of the read/write graph. Each tensor gets a stable name:

* ``site 3 #0``: result 0 of dispatch site 3;
* ``input0``, ``output0``: the function's arguments and results (IREE's
  ``hal.tensor.import`` / ``export`` names, else the argument's position);
* ``@name``: a global (a parameter or an inlined constant's global);
* ``constant 0``, ``constant 1``...: constants in the program text, numbered as
  met; a loop's block argument (``scf.while argument 0``); else the producing op's name.

Reshapes and bitcasts move no data (``flow.tensor.reshape``, ``bitcast``,
``tie_shape``): a tensor passed through them keeps its producer's name.

An embedding lookup loads its whole table but reads one row per token
(``tensor.extract`` inside the body of a gather): such a load is charged one
element per iteration point of the ops that extract from it, not the table.
"""

from __future__ import annotations

import re
from typing import Iterable, Optional

from iree.compiler import ir

from sectionmark.compiler.weights import LOAD_OP, TensorType, TensorTypes, walk_body
from sectionmark.section_map import Binding

STORE_OP = "iree_tensor_ext.dispatch.tensor.store"
WORKGROUPS_OP = "flow.dispatch.workgroups"
PASS_THROUGH_OPS = ("flow.tensor.reshape", "flow.tensor.bitcast", "flow.tensor.tie_shape", "tensor.cast")
RETURN_OPS = ("util.return", "func.return")
FUNCTION_OPS = ("util.func", "func.func")
EXTRACT_OP = "tensor.extract"
_ACCESS = re.compile(r"dispatch\.tensor<(readonly|writeonly|readwrite):")


class ModuleTensors:
    """What the sites of one module share: the names of its tensor values and the facts of its tensor types.

    Names: the sites' results (given), then constants, numbered as met.
    ``types``: the analysis' tensor types (`weights.TensorTypes`).
    """

    def __init__(self, site_results: Iterable[tuple[ir.Value, str]], types: TensorTypes):
        self.names: dict[ir.Value, str] = dict(site_results)
        self.constants = 0  # constants named so far
        self.types = types
        self._access: dict[ir.Type, Optional[str]] = {}

    def access(self, argument_type: ir.Type) -> Optional[str]:
        """``readonly``, ``writeonly`` or ``readwrite`` for a dispatch tensor argument; None for a scalar."""
        if argument_type not in self._access:
            access = _ACCESS.search(str(argument_type))
            self._access[argument_type] = access.group(1) if access else None
        return self._access[argument_type]


def tensor_name(value: ir.Value, tensors: ModuleTensors) -> str:
    """The program-level name of a tensor value (see the module docstring).

    ``tensors.names`` holds the site results' names; constants are numbered in it as they are met.
    """
    names = tensors.names
    while True:
        if value in names:
            return names[value]
        owner = value.owner
        if isinstance(owner, ir.Block):
            number = ir.BlockArgument(value).arg_number
            region_op = owner.owner.operation
            return f"input{number}" if region_op.name in FUNCTION_OPS else f"{region_op.name} argument {number}"
        op = owner.operation
        if op.name in PASS_THROUGH_OPS:
            value = op.operands[0]
            continue
        if op.name == "hal.tensor.import":
            if "name" in op.attributes:
                return ir.StringAttr(op.attributes["name"]).value
            value = op.operands[0]  # the imported buffer view: a function argument
            continue
        if op.name == "util.global.load" and "global" in op.attributes:
            return "@" + ir.FlatSymbolRefAttr(op.attributes["global"]).value
        if op.name in ("arith.constant", "flow.tensor.constant"):
            names[value] = f"constant {tensors.constants}"
            tensors.constants += 1
            return names[value]
        return op.name


def program_outputs(value: ir.Value) -> list[str]:
    """Names under which a site result leaves the function (``output0``), through reshapes."""
    names = []
    for use in value.uses:
        op = use.owner.operation
        if op.name == "hal.tensor.export" and "name" in op.attributes:
            names.append(ir.StringAttr(op.attributes["name"]).value)
        elif op.name in RETURN_OPS:
            names.append(f"output{use.operand_number}")
        elif op.name in PASS_THROUGH_OPS or op.name == "hal.tensor.export":  # an unnamed export: its return
            names.extend(program_outputs(op.results[0]))
        elif op.name == "hal.tensor.barrier":  # result i is operand i, once the fence is signalled
            names.extend(program_outputs(op.results[use.operand_number]))
    return names


def operand_groups(op: ir.Operation) -> list[list[ir.Value]]:
    """The operands of an op with variadic operands, one list per operand of its definition, in order.

    What the typed op classes of MLIR's Python bindings give by name
    (``entry_point``, ``binding_lengths``), read from the generic op: the
    section hook does not load those classes (`compiler.phases.generic_op_views`).
    """
    operands = list(op.operands)
    groups, start = [], 0
    for size in ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]):
        groups.append(operands[start:start + size])
        start += size
    return groups


def site_bindings(site: ir.Operation, tensors: ModuleTensors) -> list[Binding]:
    """Every tensor the site binds, with the exact slices its body loads and stores."""
    if site.name != WORKGROUPS_OP:
        return []
    arguments = operand_groups(site)[1]
    tied = [ir.IntegerAttr(attr).value for attr in ir.ArrayAttr(site.attributes["tied_operands"])] \
        if "tied_operands" in site.attributes else [-1] * len(site.results)
    block = site.regions[0].blocks[0]
    # Block arguments: one per argument, then one per result not tied to an argument.
    outer: list[tuple[ir.Value, Optional[ir.Value]]] = [(value, None) for value in arguments]
    for index, result in enumerate(site.results):
        if tied[index] < 0:
            outer.append((result, result))
        else:
            outer[tied[index]] = (arguments[tied[index]], result)
    loads, stores = _slices(site, tensors)
    bindings = []
    for argument, (value, result) in zip(block.arguments, outer):
        access = tensors.access(argument.type)
        if access is None:  # an index or other scalar argument
            continue
        read, written = loads.get(argument, []), stores.get(argument, [])
        tensor_type = tensors.types(value.type)
        slice_type = tensors.types((read or written)[0][0]) if (read or written) else tensor_type
        bindings.append(Binding(
            tensor=tensors.names[result] if result is not None and result in tensors.names
            else tensor_name(value, tensors),
            shape=list(slice_type.shape),
            tensor_shape=list(tensor_type.shape),
            dtype=tensor_type.dtype,
            access={"readonly": "read", "writeonly": "write"}.get(access, "readwrite"),
            read_bytes=_sum_bytes(read),
            written_bytes=_sum_bytes(written),
            outputs=program_outputs(result) if result is not None else [],
        ))
    return bindings


def _slices(site: ir.Operation, tensors: ModuleTensors) -> tuple[dict, dict]:
    """Per dispatch argument: (slice type, bytes actually touched or None) of each load and store."""
    loads: dict[ir.Value, list] = {}
    stores: dict[ir.Value, list] = {}
    extracted: dict[ir.Value, int] = {}  # loaded value -> points of the ops that extract from it

    def visit(op: ir.Operation, name: str, _path: None) -> ir.WalkResult:
        if name == LOAD_OP:
            loads.setdefault(op.operands[0], []).append((op.results[0].type, op.results[0]))
        elif name == STORE_OP:
            stores.setdefault(op.operands[1], []).append((op.operands[0].type, None))
        elif name == EXTRACT_OP:
            structured = op.parent.operation
            while "indexing_maps" not in structured.attributes and structured.name != WORKGROUPS_OP:
                structured = structured.parent.operation
            if "indexing_maps" in structured.attributes:
                extracted[op.operands[0]] = extracted.get(op.operands[0], 0) + _points(structured, tensors)
        return ir.WalkResult.ADVANCE

    walk_body(site, visit, None)
    for argument, entries in loads.items():
        loads[argument] = [(slice_type, _loaded_bytes(tensors.types(slice_type), value, extracted))
                           for slice_type, value in entries]
    stores = {argument: [(slice_type, tensors.types(slice_type).bytes) for slice_type, _ in entries]
              for argument, entries in stores.items()}
    return loads, stores


def _loaded_bytes(slice_type: TensorType, value: ir.Value, extracted: dict[ir.Value, int]) -> Optional[int]:
    """A load's bytes; a gather's table (only read by ``tensor.extract``) counts the extracted elements."""
    whole = slice_type.bytes
    if value in extracted and all(use.owner.operation.name == EXTRACT_OP for use in value.uses) and whole:
        return min(whole, extracted[value] * slice_type.element_bytes)
    return whole


def _points(op: ir.Operation, tensors: ModuleTensors) -> int:
    """Iteration points of a structured op: the elements of its first shaped result."""
    for result in op.results:
        if isinstance(result.type, ir.ShapedType):
            facts = tensors.types(result.type)
            if facts.bytes is not None:
                return facts.bytes // facts.element_bytes
    return 0


def _sum_bytes(entries: list[tuple[ir.Type, Optional[int]]]) -> Optional[int]:
    if not entries:
        return 0
    sizes = [size for _type, size in entries]
    return None if any(size is None for size in sizes) else sum(sizes)
