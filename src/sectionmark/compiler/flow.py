"""Dispatch sites and their section composition, at phase ``dispatch-creation``.

At the end of dispatch creation every future dispatch is a
``flow.dispatch.workgroups`` op whose body still holds all the ops that were
fused into it, each with its own location. This is the last point before
executables are outlined and deduplicated (two blocks' MLPs become one
executable with one set of locations), so it is where a fused dispatch's
sections are still visible.

Each site gets an id, in module order, carried to its HAL dispatch by wrapping
the site op's location in a NameLoc ``sectionmark.site:<id>``. Locations are
ignored by deduplication and code generation, so executables stay
byte-identical (tests check this).

Weight rule ("op-count", docs/section-map.md): count the compute ops in the
body: ops without regions, except bookkeeping (tensor loads/stores, empty
tensors, constants, accumulator fills, terminators, shape arithmetic); an op
with regions counts as one op only if nothing inside it counted
(``linalg.transpose``, ``linalg.copy``: pure data movement); an op without a
section of its own inside a marked op takes that op's section. A section's weight is its share of
the counted ops that carry a section path. A site with no such op (a pure
copy or fill) belongs wholly to the section of its root op, whose location
the dispatch carries; if that has none either, the site is unmarked (no
shares).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Optional

from iree.compiler import ir

from sectionmark.locations import section_path
from sectionmark.paths import SectionPath
from sectionmark.section_map import DispatchSite, Share

SITE_PREFIX = "sectionmark.site:"
SITE_OPS = ("flow.dispatch.workgroups", "flow.dispatch.region")
_SITE_NAME = re.compile(r'"' + re.escape(SITE_PREFIX) + r'(\d+)"')

# Ops that move or describe data rather than compute; they carry the root op's
# location and would bias the weights toward it.
_BOOKKEEPING_DIALECTS = ("iree_tensor_ext", "flow", "tensor", "util", "hal", "affine", "bufferization", "memref")
# linalg.fill initialises accumulators; CSE merges identical fills across
# sections before dispatch formation, so its location is often another block's.
_BOOKKEEPING_OPS = ("arith.constant", "arith.index_cast", "arith.index_castui", "linalg.index", "linalg.fill")


def function_name(op: ir.Operation) -> str:
    """The symbol of a function-like op; ``__init`` for initializers (the VM's name)."""
    if "sym_name" in op.attributes:
        return ir.StringAttr(op.attributes["sym_name"]).value
    return "__init"


def site_id(location: ir.Location) -> Optional[int]:
    """The site id carried by a location (the first one, if ops were merged)."""
    match = _SITE_NAME.search(str(location))
    return int(match.group(1)) if match else None


FUNCTION_OPS = ("util.func", "func.func", "util.initializer")
EXECUTABLE_OPS = ("hal.executable", "flow.executable")  # already outlined: not sites


def annotate_sites(module: ir.Operation) -> list[DispatchSite]:
    """Give every dispatch site an id in its location and compute its composition.

    Uses ``Operation.walk`` (plain operations, traversal in C++): iterating
    blocks from Python would build typed op views and import every dialect's
    Python module, which costs more than the analysis itself.
    """
    sites: list[DispatchSite] = []
    function = "__init"

    def visit(op: ir.Operation) -> ir.WalkResult:
        nonlocal function
        if op.name in FUNCTION_OPS:
            function = function_name(op)
        elif op.name in SITE_OPS:
            sites.append(_annotate(op, function, len(sites)))
            return ir.WalkResult.SKIP
        elif op.name in EXECUTABLE_OPS:
            return ir.WalkResult.SKIP
        return ir.WalkResult.ADVANCE

    module.walk(visit, ir.WalkOrder.PRE_ORDER)
    return sites


def _annotate(site: ir.Operation, function: str, index: int) -> DispatchSite:
    counts = _count_ops(site)
    marked = {path: n for path, n in counts.items() if path is not None}
    root = section_path(str(site.location))
    if not marked and root is not None:  # pure data movement (copies, fills)
        marked = {root: 1}
    total = sum(marked.values())
    shares = [Share(path, n / total) for path, n in sorted(marked.items(), key=lambda item: -item[1])]
    site.location = ir.Location.name(f"{SITE_PREFIX}{index}", childLoc=site.location, context=site.context)
    return DispatchSite(id=index, function=function, shares=shares, op_count=sum(counts.values()))


def _count_ops(site: ir.Operation) -> Counter:
    """Counted ops of the site's body by section path (see the module docstring).

    An op without a section of its own takes its enclosing op's: the implicit
    bodies of named linalg ops (``linalg.matmul``) have unknown locations.
    """
    counts: Counter[Optional[SectionPath]] = Counter()
    path_of: dict[ir.Operation, Optional[SectionPath]] = {site: None}
    parent_of: dict[ir.Operation, ir.Operation] = {}
    empty_containers: dict[ir.Operation, None] = {}  # ops with regions, nothing counted inside yet

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op == site:
            return ir.WalkResult.ADVANCE
        parent = op.parent
        path = section_path(str(op.location)) or path_of[parent]
        path_of[op] = path
        parent_of[op] = parent
        if op.name == "flow.return" and parent == site:
            return ir.WalkResult.INTERRUPT  # end of the body; the workgroup count region follows
        if _is_bookkeeping(op):
            return ir.WalkResult.ADVANCE
        if len(op.regions):
            empty_containers[op] = None
            return ir.WalkResult.ADVANCE
        counts[path] += 1
        while parent in empty_containers:  # its containers are no longer empty
            del empty_containers[parent]
            parent = parent_of[parent]
        return ir.WalkResult.ADVANCE

    site.walk(visit, ir.WalkOrder.PRE_ORDER)
    for container in empty_containers:
        counts[path_of[container]] += 1
    return counts


def _is_bookkeeping(op: ir.Operation) -> bool:
    name = op.name
    dialect, _, short = name.partition(".")
    return (
        dialect in _BOOKKEEPING_DIALECTS
        or name in _BOOKKEEPING_OPS
        or short in ("yield", "return", "condition")
    )
