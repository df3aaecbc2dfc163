"""FLOPs of a program counted on its input MLIR, split into marked and unmarked, without sectionmark's cost model.

The exported program is compiled by ``iree.compiler`` alone up to phase
``input`` (torch / StableHLO lowered to linalg on tensors, before any
global optimisation, dispatch formation or fusion), with its locations, and
every structured op is counted here:

* ``linalg.generic`` (and ``linalg.map`` / ``linalg.reduce``): iteration
  points × the floating-point ``arith`` / ``math`` ops of its body (an op with
  a float operand or result; ``arith.constant`` excluded). Integer ops in a
  body (indices, masks from an iota) are addressing, not FLOPs.
* named contractions and convolutions (``linalg.matmul``, ``batch_matmul``,
  ``matvec``, ``conv_2d_*``, ...): 2 × the product of their loop sizes (a
  multiply and an add per point); pooling 1 × its loop sizes.
* ``iree_linalg_ext.attention``: its two contractions, 2·B·M·K2·(K1 + N)
  (the softmax between them is not counted).
* other ops with tensor results in ``linalg`` / ``iree_linalg_ext`` (gather,
  scatter, sort, ...): one FLOP per result element.
* data movement is free: ``linalg.fill``, ``transpose``, ``broadcast``,
  ``copy``, a generic whose body only yields, every ``tensor.*`` op.

An op is marked when its location names a section (read with
``sectionmark.locations.section_path``, a location reader); a body op is
weighed by its own location, or by the structured op's when it has none of its
own (``loc(unknown)``). The program is counted statically: the body of a loop
counts once, as the section map lists a command recorded in a loop once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from sectionmark.compiler.targets import target_flags
from sectionmark.locations import has_no_own_location, section_path

PHASE = "input"

# dims of each operand (ins, then outs) of a named op with default indexing maps; "2" FLOPs per point
_CONTRACTIONS: dict[str, tuple[tuple[int, ...], ...]] = {
    "linalg.matmul": ((0, 2), (2, 1), (0, 1)),  # (m, n, k)
    "linalg.batch_matmul": ((0, 1, 3), (0, 3, 2), (0, 1, 2)),  # (b, m, n, k)
    "linalg.matvec": ((0, 1), (1,), (0,)),
    "linalg.vecmat": ((0,), (0, 1), (1,)),
    "linalg.batch_matvec": ((0, 1, 2), (0, 2), (0, 1)),
    "linalg.dot": ((0,), (0,), ()),
}
_FREE = {"linalg.fill", "linalg.transpose", "linalg.broadcast", "linalg.copy", "linalg.yield", "linalg.index",
         "iree_linalg_ext.yield"}
_NOT_FLOPS = {"arith.constant"}


@dataclass
class InputFlops:
    """FLOPs of the input program: marked (per section path) and unmarked."""

    by_path: dict[tuple[str, ...], float] = field(default_factory=dict)
    unknown_ops: set[str] = field(default_factory=set)

    def add(self, path: tuple[str, ...] | None, flops: float) -> None:
        if flops:
            key = path or ()
            self.by_path[key] = self.by_path.get(key, 0.0) + flops

    @property
    def total(self) -> float:
        return sum(self.by_path.values())

    @property
    def unmarked(self) -> float:
        return self.by_path.get((), 0.0)

    @property
    def unmarked_share(self) -> float:
        return self.unmarked / self.total if self.total else 0.0


def lower_to_input_phase(mlir_text: str, input_type: str) -> str:
    """``iree.compiler`` alone, up to phase ``input``: linalg on tensors with every location printed."""
    import iree.compiler

    flags = [*target_flags("llvm-cpu"), f"--iree-input-type={input_type}", f"--compile-to={PHASE}",
             "--mlir-print-debuginfo"]
    return iree.compiler.compile_str(mlir_text, extra_args=flags).decode()


def count_input_flops(mlir_text: str, input_type: str) -> InputFlops:
    """Lower ``mlir_text`` to phase ``input`` and count its FLOPs, marked and unmarked."""
    from iree.compiler import ir

    result = InputFlops()
    with ir.Context() as context:
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(lower_to_input_phase(mlir_text, input_type))
        _assert_no_calls_into_bodies(module)

        def visit(op: ir.Operation) -> ir.WalkResult:
            name = op.name
            if name in _FREE or name.startswith("tensor."):
                return ir.WalkResult.SKIP
            dialect = name.split(".", 1)[0]
            if dialect not in ("linalg", "iree_linalg_ext"):
                return ir.WalkResult.ADVANCE
            _count_structured(op, result)
            return ir.WalkResult.SKIP

        module.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return result


def _count_structured(op, result: InputFlops) -> None:
    name = op.name
    own = str(op.location)
    path = section_path(own)
    if name in ("linalg.generic", "linalg.map", "linalg.reduce"):
        points = math.prod(_domain(op))
        for body_op in _body_ops(op):
            if body_op.name in _NOT_FLOPS or not _is_float_op(body_op):
                continue
            location = str(body_op.location)
            result.add(path if has_no_own_location(location) else section_path(location), points)
        return
    if name in _CONTRACTIONS or name.startswith(("linalg.conv_", "linalg.depthwise_conv_", "linalg.pooling_")):
        per_point = 1 if name.startswith("linalg.pooling_") else 2
        result.add(path, per_point * math.prod(_domain(op)))
        return
    if name == "iree_linalg_ext.attention":
        b, m, n, k1, k2 = _attention_sizes(op)
        result.add(path, 2 * b * m * k2 * (k1 + n))
        return
    tensors = [value for value in op.results if _shape(value) is not None]
    if not tensors:
        result.unknown_ops.add(name)
        return
    result.add(path, sum(math.prod(_shape(value)) for value in tensors))


def _shape(value) -> list[int] | None:
    from iree.compiler import ir

    try:
        shaped = ir.ShapedType(value.type)
    except ValueError:
        return None
    if not shaped.has_rank:
        return None
    shape = list(shaped.shape)
    assert all(size >= 0 for size in shape), f"dynamic shape {value.type}: count only static programs"
    return shape


def _operand_dims(op) -> list[tuple[list[int], tuple[int | None, ...]]]:
    """(shape, loop dim of each of its axes; None for a non-dim expression) of every shaped operand."""
    from iree.compiler import ir

    operands = [value for value in op.operands if _shape(value) is not None]
    name = op.name
    if "indexing_maps" in op.attributes:
        maps = [ir.AffineMapAttr(attribute).value for attribute in ir.ArrayAttr(op.attributes["indexing_maps"])]
        pairs = []
        for value, affine in zip(operands, maps):
            dims = tuple(expr.position if isinstance(expr, ir.AffineDimExpr) else None
                         for expr in affine.results)
            pairs.append((_shape(value), dims))
        return pairs
    if name in _CONTRACTIONS:
        return [(_shape(value), dims) for value, dims in zip(operands, _CONTRACTIONS[name])]
    raise AssertionError(f"{name}: no indexing maps to size it by")


def _domain(op) -> list[int]:
    """Loop sizes of a structured op."""
    name = op.name
    if name.startswith(("linalg.conv_", "linalg.depthwise_conv_", "linalg.pooling_")):
        return _conv_domain(op)
    if name == "linalg.map":
        return _shape(op.results[0])
    if name == "linalg.reduce":
        return _shape(op.operands[0])
    sizes: dict[int, int] = {}
    for shape, dims in _operand_dims(op):
        for size, dim in zip(shape, dims):
            if dim is not None:
                assert sizes.setdefault(dim, size) == size, (name, sizes, dim, size)
    return [sizes[dim] for dim in sorted(sizes)]


def _conv_domain(op) -> list[int]:
    """Output elements × the filter's window and input channels (its output-channel axis excluded)."""
    name = op.name
    image, filt = (_shape(value) for value in op.operands[:2])
    out = _shape(op.results[0])
    layout = name.rsplit("_", 1)[-1]  # nchw_fchw -> fchw, nhwc_hwcf -> hwcf
    if name.startswith("linalg.pooling_"):
        return [*out, *filt]  # the "filter" is the window's shape
    if name.startswith("linalg.depthwise_conv_"):
        return [*out, *[size for size, axis in zip(filt, layout) if axis not in "cm"]]  # one input channel per output
    assert len(layout) == len(filt) and "f" in layout, f"{name}: unknown filter layout"
    return [*out, *[size for size, axis in zip(filt, layout) if axis != "f"]]


def _attention_sizes(op) -> tuple[int, int, int, int, int]:
    """(B, M, N, K1, K2) of an attention op: query [B, M, K1], key [B, K2, K1], value [B, K2, N]."""
    sizes: dict[int, int] = {}
    for shape, dims in _operand_dims(op):
        for size, dim in zip(shape, dims):
            if dim is not None:
                sizes.setdefault(dim, size)
    query, key, value = (_operand_dims(op)[index][1] for index in range(3))
    batch = [dim for dim in query if dim in key and dim in value]
    m = [dim for dim in query if dim not in key]
    k1 = [dim for dim in query if dim in key and dim not in value]
    k2 = [dim for dim in key if dim not in query]
    n = [dim for dim in value if dim not in key]
    size = lambda dims: math.prod(sizes[dim] for dim in dims)  # noqa: E731
    return size(batch), size(m), size(n), size(k1), size(k2)


def _body_ops(op):
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                yield inner.operation
                yield from _body_ops(inner.operation)


def _is_float_op(op) -> bool:
    if op.name.split(".", 1)[0] not in ("arith", "math"):
        return False
    types = [value.type for value in (*op.operands, *op.results)]
    return any(_is_float(t) for t in types)


def _is_float(mlir_type) -> bool:
    text = str(mlir_type)
    return text.startswith(("f", "bf")) and text[1:2].isdigit() or text.startswith("bf16")


def _assert_no_calls_into_bodies(module) -> None:
    """Each function is read once: a function with structured ops must be called at most once.

    (At phase ``input`` a torch program's ``main`` calls ``main$async`` once; JAX
    private functions are inlined by then. A function called twice would need
    its FLOPs counted per call site, with the call's location around its ops.)
    """
    from iree.compiler import ir

    calls: dict[str, int] = {}
    computes: set[str] = set()
    for top in module.body.operations:
        top = top.operation
        name = str(top.attributes["sym_name"]).strip('"') if "sym_name" in top.attributes else None

        def visit(op: ir.Operation, name=name) -> ir.WalkResult:
            if op.name in ("util.call", "func.call") and "callee" in op.attributes:
                callee = str(op.attributes["callee"]).lstrip("@").strip('"')
                calls[callee] = calls.get(callee, 0) + 1
            elif op.name.split(".", 1)[0] in ("linalg", "iree_linalg_ext") and name is not None:
                computes.add(name)
            return ir.WalkResult.ADVANCE

        top.walk(visit, ir.WalkOrder.PRE_ORDER)
    repeated = {callee: count for callee, count in calls.items() if callee in computes and count > 1}
    assert not repeated, f"functions with structured ops called more than once at phase {PHASE}: {repeated}"
