"""How a dispatch site is split between the sections of its ops: estimated cost, else op count.

A fused dispatch's measured time is split between its sections by what their
ops would cost, not by how many ops they have: a convolution fused with a
BatchNorm and a ReLU does ~100x the work of the two epilogues, and an op
count would give each a third. The estimate, per op of the site's body:

* **FLOPs** of a structured op (anything with indexing maps: every
  ``linalg`` op, named ones such as ``linalg.matmul`` through MLIR's LinalgOp
  interface, and ``iree_linalg_ext`` ops): the
  size of its iteration domain times the scalar ops of its body, each scalar
  op credited to *its own* section (IREE's elementwise fusion merges the
  bodies of ops from several sections into one ``linalg.generic``, and every
  body op keeps its location). Ops computed from loop indices and constants
  alone (causal masks, iotas) are addressing, not work, and cost nothing:
  CSE merges them across blocks, so their location is often another block's.
  A matmul body is ``mulf`` + ``addf``, so a
  matmul costs 2·M·N·K; a conv 2·N·F·OH·OW·C·KH·KW; an add M·N.
  ``iree_linalg_ext.attention`` costs its two contractions, 2·B·M·K2·(K1+N);
  other ``iree_linalg_ext`` structured ops one FLOP per point; ops without
  indexing maps (gather, scatter, sort) one FLOP per result element.
* **Bytes** read from outside the dispatch: an operand loaded from a dispatch
  input (``iree_tensor_ext.dispatch.tensor.load``) costs its loaded size,
  split between the body ops computed from it; a gather's ``tensor.extract``
  costs the elements it reads. Values produced inside the dispatch
  stay in registers or cache and cost nothing; the dispatch's outputs are
  written once whichever sections fused into it, so stores are not charged.
* One estimate: ``flops + FLOPS_PER_BYTE * bytes``, i.e. FLOP-equivalents at
  a machine balance of 4 FLOPs per byte (achieved CPU matmul throughput over
  memory bandwidth; the split is insensitive to it where one op dominates).

Anything the model cannot size (dynamic shapes, an unknown op with tensor
results and no static shape) makes the whole site fall back to the op-count
rule (`site_op_counts`): mixing estimates with counts would make neither
meaningful.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Callable, NamedTuple, Optional

from iree.compiler import ir

# The LinalgOp interface's maps, from the bindings' native module: `iree.compiler.dialects.linalg`
# re-exports it but also defines every linalg op class (0.08 s to import; see
# compiler.phases.generic_op_views).
from iree.compiler._mlir_libs._mlirDialectsLinalg import get_indexing_maps

from sectionmark.locations import has_no_own_location, section_path
from sectionmark.section_path import SectionPath

FLOPS_PER_BYTE = 4

LOAD_OP = "iree_tensor_ext.dispatch.tensor.load"
EXTRACT_OP = "tensor.extract"  # in a linalg body: an element of a table the body does not take as an argument
ATTENTION_OP = "iree_linalg_ext.attention"
# Scalar ops in a structured op's body that do no arithmetic.
_FREE_BODY_OPS = ("linalg.yield", "linalg.index", "arith.constant", "iree_linalg_ext.yield", "scf.yield")
# Tensor-level ops that only move or describe data (their reads are charged to their consumers).
_FREE_DIALECTS = ("iree_tensor_ext", "flow", "tensor", "util", "hal", "bufferization", "memref", "affine")
_FREE_OPS = ("arith.constant",)
# The op-count rule also skips index arithmetic and accumulator fills: CSE merges
# identical fills of different sections, so a fill's location is often another block's.
_COUNT_FREE_OPS = ("arith.constant", "arith.index_cast", "arith.index_castui", "linalg.index", "linalg.fill")


@dataclass
class Cost:
    """Estimated work of one section's ops in one dispatch: FLOPs and bytes read from dispatch inputs."""

    flops: float = 0.0
    bytes: float = 0.0

    @property
    def value(self) -> float:
        """FLOP-equivalents: the quantity fused dispatches are split by."""
        return self.flops + FLOPS_PER_BYTE * self.bytes


class Unsized(Exception):
    """An op whose cost cannot be estimated statically."""


# What `LocationPaths` records for an op with no location of its own.
_NO_LOCATION = object()


class LocationPaths:
    """The section path of each op's location, every distinct location printed once.

    An op whose location names no section is unmarked (None), also inside a
    fused op of a section: IREE's elementwise fusion merges the bodies of
    marked and unmarked ops into one ``linalg.generic``, and each body op
    keeps its own location. Only an op with no location of its own
    (`has_no_own_location`: the implicit body of a named op such as
    ``linalg.matmul``, ops the compiler made from nothing) belongs to the op
    enclosing it.

    Printing a torch location (a chain of call sites) costs ~10 µs, and the
    ops of a site share a few locations; locations are uniqued in their
    context, so their attribute is a key that needs no printing. Keep one for
    one analysis, not longer: it holds the compiler's context alive.
    """

    __slots__ = ("_paths",)

    def __init__(self) -> None:
        self._paths: dict[ir.Attribute, object] = {}

    def __call__(self, op: ir.Operation, enclosing: Optional[SectionPath] = None) -> Optional[SectionPath]:
        """The section of ``op``; ``enclosing``: the section of the op around it, for an op with no location."""
        location = op.location
        key = location.attr
        path = self._paths.get(key, self)
        if path is self:
            text = str(location)
            path = self._paths[key] = _NO_LOCATION if has_no_own_location(text) else section_path(text)
        return enclosing if path is _NO_LOCATION else path


class TensorType(NamedTuple):
    """What the analysis reads of a tensor type."""

    shape: list[int]  # -1: a dynamic size
    dtype: str
    bytes: Optional[int]  # None when a size is dynamic
    element_bytes: int


class TensorTypes:
    """The shape, element type and sizes of each tensor type, read once.

    Types are uniqued, and a model's layers repeat the same few. One for one
    analysis (the costs here, the bindings in bindings.py), as `LocationPaths`.
    """

    __slots__ = ("_facts",)

    def __init__(self) -> None:
        self._facts: dict[ir.Type, TensorType] = {}

    def __call__(self, value_type: ir.Type) -> TensorType:
        facts = self._facts.get(value_type)
        if facts is None:
            shaped = ir.ShapedType(value_type)
            element = shaped.element_type
            count = None
            if shaped.has_static_shape:
                count = 1
                for size in shaped.shape:
                    count *= size
            facts = self._facts[value_type] = TensorType(
                shape=[size if not ir.ShapedType.is_dynamic_size(size) else -1 for size in shaped.shape],
                dtype=str(element),
                bytes=count * element_bytes(element) if count is not None else None,
                element_bytes=element_bytes(element),
            )
        return facts

    def bytes(self, value_type: ir.Type) -> int:
        """The bytes of a statically shaped tensor type; raises `Unsized` for a dynamic one."""
        size = self(value_type).bytes
        if size is None:
            raise Unsized(str(value_type))
        return size


class Domains:
    """The iteration domain of each distinct structured op shape.

    A model's layers repeat the same few shapes: the maps and operand types
    of an op (uniqued, so they are keys without printing) decide its loop
    sizes, which are worked out once. ``types``: the analysis' tensor types.
    """

    __slots__ = ("_domains", "types")

    def __init__(self, types: Optional[TensorTypes] = None) -> None:
        self._domains: dict[tuple, Optional[tuple[list, dict[int, int], int]]] = {}
        self.types = types or TensorTypes()

    def domain(self, op: ir.Operation, maps_attr: ir.ArrayAttr) -> tuple[list, dict[int, int], int]:
        """``(maps, size of each loop dimension, iteration points)``; raises `Unsized`."""
        operand_types = tuple(operand.type for operand in op.operands)
        key = (maps_attr, operand_types)
        if key not in self._domains:
            maps = [ir.AffineMapAttr(attr).value for attr in maps_attr]
            try:
                sizes = _dim_sizes(maps, operand_types)
            except Unsized:
                self._domains[key] = None
            else:
                points = 1
                for size in sizes.values():
                    points *= size
                self._domains[key] = (maps, sizes, points)
        domain = self._domains[key]
        if domain is None:
            raise Unsized(op.name)
        return domain


def walk_body(
    site: ir.Operation,
    visit: Callable[[ir.Operation, str, Optional[SectionPath]], ir.WalkResult],
    paths: Optional[LocationPaths],
) -> None:
    """Call ``visit(op, name, path)`` for each op of the site's body, pre-order.

    ``path`` is the op's own section (None: unmarked), its enclosing op's when
    it has no location (`LocationPaths`); always None when ``paths`` is None
    (no location is read). The
    workgroup-count region after the body is not visited. (This runs for
    every op of every site: each MLIR call in it is made once.)
    """
    path_of: dict[ir.Operation, Optional[SectionPath]] = {site: None}  # ops with regions

    def step(op: ir.Operation) -> ir.WalkResult:
        if op == site:
            return ir.WalkResult.ADVANCE
        name = op.name
        if name == "flow.return" and op.parent == site:
            return ir.WalkResult.INTERRUPT
        path = None
        if paths is not None:
            path = paths(op, path_of[op.parent])
            if len(op.regions):
                path_of[op] = path
        return visit(op, name, path)

    site.walk(step, ir.WalkOrder.PRE_ORDER)


def site_costs(
    site: ir.Operation, paths: Optional[LocationPaths] = None, domains: Optional[Domains] = None
) -> Optional[dict[Optional[SectionPath], Cost]]:
    """Cost of each section's ops in a dispatch site (``None`` key: ops in no section).

    Returns None when some op cannot be sized.
    """
    paths = paths or LocationPaths()
    domains = domains or Domains()
    costs: dict[Optional[SectionPath], Cost] = defaultdict(Cost)
    sized = True
    # Results of the dispatch's input loads; a load precedes its readers in the walk. (Asking a
    # value for its ``owner`` gives a typed op view: the first one imports the dialect's Python package.)
    loaded: set[ir.Value] = set()

    def visit(op: ir.Operation, name: str, path: Optional[SectionPath]) -> ir.WalkResult:
        nonlocal sized
        try:
            if name == LOAD_OP:
                loaded.update(op.results)
            maps = indexing_maps(op, name)
            if maps is not None:
                _structured_cost(op, name, maps, path, costs, loaded, paths, domains)
                return ir.WalkResult.SKIP
            if _is_free(name) or not _has_tensors(op):
                return ir.WalkResult.ADVANCE
            _opaque_cost(op, path, costs, loaded, domains)
            return ir.WalkResult.SKIP
        except Unsized:  # exceptions must not cross the C++ walk
            sized = False
            return ir.WalkResult.INTERRUPT

    walk_body(site, visit, paths)
    return dict(costs) if sized else None


def site_op_counts(site: ir.Operation, paths: Optional[LocationPaths] = None) -> Counter:
    """The fallback rule: counted ops of the site's body by section path (all under None without ``paths``).

    Counted: ops without regions except bookkeeping (data movement, constants,
    index arithmetic, accumulator fills, terminators); an op with regions
    counts once only if nothing inside it counted (``linalg.transpose``).
    """
    counts: Counter[Optional[SectionPath]] = Counter()
    empty_containers: dict[ir.Operation, Optional[SectionPath]] = {}  # ops with regions, nothing counted inside yet

    def visit(op: ir.Operation, name: str, path: Optional[SectionPath]) -> ir.WalkResult:
        if _is_bookkeeping(name):
            return ir.WalkResult.ADVANCE
        if len(op.regions):
            empty_containers[op] = path
            return ir.WalkResult.ADVANCE
        counts[path] += 1
        if empty_containers:
            parent = op.parent
            while parent in empty_containers:  # its containers are no longer empty
                del empty_containers[parent]
                parent = parent.parent
        return ir.WalkResult.ADVANCE

    walk_body(site, visit, paths)
    for path in empty_containers.values():
        counts[path] += 1
    return counts


def indexing_maps(op: ir.Operation, name: str) -> Optional[ir.ArrayAttr]:
    """The indexing maps of a structured op, else None.

    A ``linalg.generic`` or an ``iree_linalg_ext`` op stores them as an
    attribute; a named linalg op (``linalg.matmul``, ``linalg.conv_2d_*``)
    defines them, and MLIR's LinalgOp interface returns them.
    """
    if "indexing_maps" in op.attributes:
        return ir.ArrayAttr(op.attributes["indexing_maps"])
    return get_indexing_maps(op) if name.startswith("linalg.") else None


def _structured_cost(
    op: ir.Operation,
    name: str,
    maps_attr: ir.ArrayAttr,
    path: Optional[SectionPath],
    costs: dict,
    loaded: set[ir.Value],
    paths: LocationPaths,
    domains: Domains,
) -> None:
    maps, sizes, points = domains.domain(op, maps_attr)
    body = _scalar_body(op)
    readers = None  # per body argument: the section of each body op that reads it
    if name == ATTENTION_OP:
        costs[path].flops += _attention_flops(maps, sizes, points)
    elif body is None or not name.startswith("linalg."):
        costs[path].flops += points
    else:
        readers = _body_flops(op, body, path, points, costs, paths)
    _charge_loads(op, path, costs, readers, loaded, domains)


def _body_flops(
    op: ir.Operation, body: ir.Block, path: Optional[SectionPath], points: int, costs: dict, paths: LocationPaths
) -> list[list[Optional[SectionPath]]]:
    """Credit ``points`` FLOPs per scalar op of a linalg body to its section; return who reads each body argument.

    A body argument is read by every op computed from it, directly or through other body ops:
    in ``tanh(exp(x) * 2)`` the load of ``x`` feeds all three, whichever section each is in
    (the value stays in a register between them). A body argument copied straight to the
    output (``linalg.yield``) is the op's own read. A ``tensor.extract`` from a table the body does
    not take as an argument (an embedding lookup) reads one element per point: its section is
    charged those bytes. Operands are followed by the walk, not by
    ``Value.uses``: that gives typed op views, whose first use imports the dialect's Python package.
    """
    argument_numbers = {argument: number for number, argument in enumerate(body.arguments)}
    readers: list[list[Optional[SectionPath]]] = [[] for _ in argument_numbers]
    # The body arguments each value is computed from (none: index arithmetic and constants).
    sources: dict[ir.Value, frozenset[int]] = {argument: frozenset((number,)) for argument, number in argument_numbers.items()}
    nothing: frozenset[int] = frozenset()

    def count(inner: ir.Operation) -> ir.WalkResult:
        if inner == op:
            return ir.WalkResult.ADVANCE
        name, operands = inner.name, list(inner.operands)
        if name in _FREE_BODY_OPS:
            for operand in operands:
                number = argument_numbers.get(operand)
                if number is not None:
                    readers[number].append(path)
            return ir.WalkResult.ADVANCE
        read = nothing.union(*(sources.get(operand, nothing) for operand in operands))
        if name == EXTRACT_OP:  # a gather's read of its table: one element per iteration point
            reader = paths(inner, path)
            costs[reader].bytes += points * element_bytes(ir.ShapedType(operands[0].type).element_type)
        elif read:  # not index arithmetic: work
            reader = paths(inner, path)
            costs[reader].flops += points
        if read:
            for number in read:
                readers[number].append(reader)
            for result in inner.results:
                sources[result] = read
        return ir.WalkResult.ADVANCE

    op.walk(count, ir.WalkOrder.PRE_ORDER)
    return readers


def _attention_flops(maps: list, sizes: dict[int, int], points: int) -> int:
    """Q·Kᵀ then P·V: 2·B·M·K2·(K1 + N), not 2 per point of the 5-d domain."""
    query, output = _dims(maps[0]), _dims(maps[-1])
    head_dim = _product(sizes, query - output)  # K1: contracted in Q·Kᵀ
    value_dim = _product(sizes, output - query)  # N: the output's own dims
    return 2 * (points // max(value_dim, 1) + points // max(head_dim, 1))


def _dims(affine_map) -> set[int]:
    return {expr.position for expr in affine_map.results if isinstance(expr, ir.AffineDimExpr)}


def _product(sizes: dict[int, int], dims: set[int]) -> int:
    result = 1
    for dim in dims:
        result *= sizes[dim]
    return result


def _scalar_body(op: ir.Operation) -> Optional[ir.Block]:
    """The op's body block when it is linalg-style (scalar block arguments, one per operand)."""
    if not len(op.regions) or not len(op.regions[0].blocks):
        return None
    block = op.regions[0].blocks[0]
    return None if any(_is_shaped(argument.type) for argument in block.arguments) else block


def _charge_loads(
    op: ir.Operation,
    path: Optional[SectionPath],
    costs: dict,
    readers: Optional[list[list[Optional[SectionPath]]]],
    loaded: set[ir.Value],
    domains: Domains,
) -> None:
    """Bytes of the operands loaded from dispatch inputs (``loaded``), split between the body ops that read them.

    ``readers``: the sections reading each body argument of a linalg op (None: the op's own section reads all).
    """
    for number, operand in enumerate(op.operands):
        if operand not in loaded:
            continue
        operand_readers = [path]
        if readers is not None and number < len(readers):
            operand_readers = readers[number]
            if not operand_readers:
                continue  # an output operand whose old value the body never reads
        size = domains.types.bytes(operand.type)
        for reader in operand_readers:
            costs[reader].bytes += size / len(operand_readers)


def _opaque_cost(
    op: ir.Operation, path: Optional[SectionPath], costs: dict, loaded: set[ir.Value], domains: Domains
) -> None:
    """An op without indexing maps (gather, scatter, sort, ...): one FLOP per result element."""
    elements = 0
    for result in op.results:
        if _is_shaped(result.type):
            elements += _elements(result.type)
    costs[path].flops += elements
    for operand in op.operands:
        if operand in loaded:
            costs[path].bytes += domains.types.bytes(operand.type)


def _dim_sizes(maps: list, operand_types: tuple[ir.Type, ...]) -> dict[int, int]:
    """Size of every loop dimension of a structured op, from its indexing maps and operand shapes."""
    sizes: dict[int, int] = {}
    for affine_map, operand_type in zip(maps, operand_types):
        if not _is_shaped(operand_type):
            continue
        for expr, size in zip(affine_map.results, operand_type.shape):
            if isinstance(expr, ir.AffineDimExpr) and size >= 0:
                sizes.setdefault(expr.position, size)
    if not maps or any(dim not in sizes for dim in range(maps[0].n_dims)):
        raise Unsized("a loop dimension of unknown size")
    return sizes


def _is_bookkeeping(name: str) -> bool:
    dialect, _, short = name.partition(".")
    return dialect in _FREE_DIALECTS or name in _COUNT_FREE_OPS or short in ("yield", "return", "condition")


def _is_free(name: str) -> bool:
    return name.partition(".")[0] in _FREE_DIALECTS or name in _FREE_OPS


def _is_shaped(value_type: ir.Type) -> bool:
    return isinstance(value_type, ir.ShapedType)


def _has_tensors(op: ir.Operation) -> bool:
    return any(_is_shaped(value.type) for value in [*op.operands, *op.results])


def _elements(value_type: ir.Type) -> int:
    shaped = ir.ShapedType(value_type)
    if not shaped.has_static_shape:
        raise Unsized(str(value_type))
    count = 1
    for size in shaped.shape:
        count *= size
    return count


def element_bytes(element_type: ir.Type) -> int:
    """Bytes of one element; index and other width-less types count 64 bits."""
    return -(-(getattr(element_type, "width", None) or 64) // 8)
