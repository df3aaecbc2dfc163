"""Dispatch sites and their shares of sections, at phase ``dispatch-creation``.

At the end of dispatch creation every future dispatch is a
``flow.dispatch.workgroups`` op whose body still holds all the ops that were
fused into it, each with its own location. This is the last point before
executables are outlined and deduplicated (two blocks' MLPs become one
executable with one set of locations), so it is where a fused dispatch's
sections are still visible.

Each site gets an id, in module order, carried to its HAL dispatch by wrapping
the site op's location in a NameLoc ``sectionmark.site:<id>``. Outlining
copies that location onto the executable's export, and IREE embeds
locations in the executable (export source locations that Tracy shows per
dispatch, debug info), so once the executables exist (phase ``flow``)
`restore_executable_locations` removes every sectionmark NameLoc inside
them — the site ids and the torch importer's section names: executables stay
byte-identical to a compile without sectionmark, while the host code keeps
the ids and sections for the command buffers.

The sites are weighed on a copy of the module taken when they are numbered
(`number_sites`, `weigh_sites`), so the pipeline runs the weighing in a second
thread while the compiler goes on with the module.

Shares (docs/section-map.md): a site is split between the sections of
its ops by estimated cost (`sectionmark.compiler.weights`, rule ``"cost"``;
a named linalg op such as a matmul or a convolution is sized through its
indexing maps like any other structured op). Ops in no
section keep their share under the empty path ``()`` ("(unmarked)"). When
some op cannot be sized the site falls back to counting ops (rule
``"op-count"``); a site whose ops cost nothing — data movement (a fill, a
copy) or addressing (a causal mask from iotas, whose ops CSE may have taken
from another block) — belongs to the section of its root op, whose location
the dispatch carries (rule ``"root"``).
"""

from __future__ import annotations

import re
from typing import Optional

from iree.compiler import ir

from sectionmark.compiler.bindings import ModuleTensors, site_bindings
from sectionmark.compiler.weights import Domains, LocationPaths, TensorTypes, site_costs, site_op_counts
from sectionmark.locations import section_path, strip_sectionmark_names
from sectionmark.section_path import SectionPath
from sectionmark.section_map import INITIALIZER_FUNCTION, DispatchSite, Share

SITE_PREFIX = "sectionmark.site:"
SITE_OPS = ("flow.dispatch.workgroups", "flow.dispatch.region")
FUNCTION_OPS = ("util.func", "func.func", "util.initializer")
EXECUTABLE_OPS = ("hal.executable", "flow.executable")  # already outlined: not sites
_SITE_NAME = re.compile(r'"' + re.escape(SITE_PREFIX) + r'(\d+)"')


def function_name(op: ir.Operation) -> str:
    """The symbol of a function-like op; ``__init`` for initializers (the VM's name)."""
    if "sym_name" in op.attributes:
        return ir.StringAttr(op.attributes["sym_name"]).value
    return INITIALIZER_FUNCTION


def site_id(location: ir.Location) -> Optional[int]:
    """The site id carried by a location (the first one, if ops were merged)."""
    match = _SITE_NAME.search(str(location))
    return int(match.group(1)) if match else None


def number_sites(module: ir.Operation) -> tuple[ir.Operation, dict[ir.Attribute, int]]:
    """Give every dispatch site an id in its location.

    Returns a copy of the module as it was, to weigh the sites on
    (`weigh_sites` touches only the copy, so it can run in another thread while
    the compiler goes on with the module itself, see pipeline.py), and each
    site's new location (as an attribute: uniqued, so a dispatch that keeps it
    is recognized without printing it) with its id.
    """
    copy = module.clone()
    ids: dict[ir.Attribute, int] = {}
    try:
        for index, (site, _) in enumerate(_site_ops(module)):
            site.location = ir.Location.name(f"{SITE_PREFIX}{index}", childLoc=site.location, context=site.context)
            ids[site.location.attr] = index
    except BaseException:
        copy.erase()  # it belongs to the compiler's context: it must go before it
        raise
    return copy, ids


def weigh_sites(copy: ir.Operation) -> list[DispatchSite]:
    """Each site's shares and bindings, in the order `number_sites` numbered them.

    Erases the copy when done, failed or not: it belongs to the compiler's
    context and must go before it, even while an exception's traceback still
    holds what was read from it.
    """
    try:
        return _weigh(copy)
    finally:
        copy.erase()


def _weigh(copy: ir.Operation) -> list[DispatchSite]:
    site_ops = _site_ops(copy)
    sites: list[DispatchSite] = []
    types = TensorTypes()  # shared by the costs and the bindings
    paths, domains = LocationPaths(), Domains(types)
    tensors = ModuleTensors(((result, f"site {index} #{number}")
                             for index, (site, _) in enumerate(site_ops) for number, result in enumerate(site.results)),
                            types)
    for index, (site, function) in enumerate(site_ops):
        sites.append(_weighed_site(site, function, index, paths, domains))
        sites[-1].bindings = site_bindings(site, tensors)
    return sites


def restore_executable_locations(module: ir.Operation) -> None:
    """At phase ``flow``: remove sectionmark's NameLocs from every op inside an executable.

    Outlining copied the site wrappers onto executable exports, and the torch
    importer's section wrappers are on every op; IREE embeds these locations
    in the executable binary (source locations for Tracy, debug info), so
    they must be exactly what a compile without sectionmark has.
    """
    restored: dict[ir.Attribute, Optional[ir.Location]] = {}  # by location: without our names, or None if none

    def visit(op: ir.Operation) -> ir.WalkResult:
        location = op.location
        key = location.attr
        if key not in restored:
            text = str(location)
            restored[key] = ir.Operation.parse("module {} " + strip_sectionmark_names(text), context=op.context).location \
                if "sectionmark" in text else None
        if restored[key] is not None:
            op.location = restored[key]
        return ir.WalkResult.ADVANCE

    for executable in _ops_named(module, EXECUTABLE_OPS):
        executable.walk(visit, ir.WalkOrder.PRE_ORDER)


def _ops_named(module: ir.Operation, names: tuple[str, ...]) -> list[ir.Operation]:
    found = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name in names:
            found.append(op)
            return ir.WalkResult.SKIP
        return ir.WalkResult.ADVANCE

    module.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


def _site_ops(module: ir.Operation) -> list[tuple[ir.Operation, str]]:
    """Every dispatch site op with the function it is in, in module order.

    Uses ``Operation.walk`` (plain operations, traversal in C++): iterating
    blocks from Python would build typed op views and import every dialect's
    Python module, which costs more than the analysis itself.
    """
    sites: list[tuple[ir.Operation, str]] = []
    function = INITIALIZER_FUNCTION

    def visit(op: ir.Operation) -> ir.WalkResult:
        nonlocal function
        if op.name in FUNCTION_OPS:
            function = function_name(op)
        elif op.name in SITE_OPS:
            sites.append((op, function))
            return ir.WalkResult.SKIP
        elif op.name in EXECUTABLE_OPS:
            return ir.WalkResult.SKIP
        return ir.WalkResult.ADVANCE

    module.walk(visit, ir.WalkOrder.PRE_ORDER)
    return sites


def _weighed_site(
    site: ir.Operation, function: str, index: int, paths: LocationPaths, domains: Domains
) -> DispatchSite:
    """The site's shares by estimated cost, else by op count, else its root op's section."""
    costs = site_costs(site, paths, domains)
    total_cost = sum(cost.value for cost in costs.values()) if costs is not None else 0.0
    counts = site_op_counts(site, paths if costs is None else None)  # by section only for the fallback rule
    if total_cost > 0:
        rule = "cost"
        shares = [
            Share(path or (), cost.value / total_cost, flops=cost.flops, bytes=cost.bytes)
            for path, cost in costs.items()
            if cost.value > 0
        ]
    elif costs is None and counts:
        rule = "op-count"
        shares = [Share(path or (), n / sum(counts.values())) for path, n in counts.items()]
    else:  # nothing costs anything: data movement (a fill, a copy) or addressing (a mask built from iotas)
        root: Optional[SectionPath] = section_path(str(site.location))
        rule = "root"
        shares = [Share(root, 1.0)] if root else []
    shares.sort(key=lambda share: -share.weight)
    if all(not share.path for share in shares):
        shares = []  # wholly unmarked
    flops = sum(cost.flops for cost in costs.values()) if rule == "cost" else None
    return DispatchSite(id=index, function=function, shares=shares, op_count=sum(counts.values()), rule=rule,
                        flops=flops)
