"""The section map inside the .vmfb, so the module alone is enough to profile it.

The map (compact JSON, checksummed: `SectionMap.embedded_text`) is stored as
one more entry, ``sectionmark.section_map``, in the ``iree.reflection``
dictionary of the first exported function. IREE keeps reflection entries
verbatim in the module's function signatures (the runtime exposes them as
``VmFunction.reflection``, ``iree-dump-module`` prints them); executables are
untouched. Reading it back needs no compiler: `sectionmark.artifacts`.

The map also carries the module's fingerprint (its executable functions),
taken here from the hal-phase module and checked against profiles.
"""

from __future__ import annotations

from iree.compiler import ir

from sectionmark.section_map import EMBEDDED_KEY, ModuleFingerprint, SectionMap

REFLECTION_KEY = EMBEDDED_KEY
REFLECTION_ATTR = "iree.reflection"
LOOKUP_OP = "hal.executable.lookup.function"


def embed_section_map(module: ir.Operation, section_map: SectionMap) -> bool:
    """Add the map to the first public function's reflection; False if there is none."""
    for op in module.regions[0].blocks[0].operations:
        op = op.operation
        if op.name != "util.func" or not _is_public(op):
            continue
        entries = {}
        if REFLECTION_ATTR in op.attributes:
            existing = ir.DictAttr(op.attributes[REFLECTION_ATTR])
            entries = {existing[i].name: existing[i].attr for i in range(len(existing))}
        entries[REFLECTION_KEY] = ir.StringAttr.get(section_map.embedded_text(), context=op.context)
        op.attributes[REFLECTION_ATTR] = ir.DictAttr.get(entries, context=op.context)
        return True
    return False


def module_fingerprint(module: ir.Operation) -> ModuleFingerprint:
    """The executable functions a hal-phase module looks up (every one it can dispatch)."""
    exports: set[str] = set()

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == LOOKUP_OP:
            exports.add(ir.SymbolRefAttr(op.attributes["entry_point"]).value[-1])
        return ir.WalkResult.ADVANCE

    module.walk(visit, ir.WalkOrder.PRE_ORDER)
    return ModuleFingerprint(exports=sorted(exports))


def _is_public(op: ir.Operation) -> bool:
    if "sym_visibility" not in op.attributes:
        return True
    return ir.StringAttr(op.attributes["sym_visibility"]).value == "public"

