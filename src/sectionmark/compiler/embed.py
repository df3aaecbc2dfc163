"""The section map inside the .vmfb, so the module alone is enough to profile it.

The map (compact JSON) is stored as one more entry, ``sectionmark.section_map``,
in the ``iree.reflection`` dictionary of the first exported function. IREE
keeps reflection entries verbatim in the module's function signatures and the
runtime exposes them (``VmFunction.reflection``), so reading needs no custom
flatbuffer parsing; executables are untouched. A sidecar
``<name>.sections.json`` is the fallback for modules compiled elsewhere.
"""

from __future__ import annotations

import json
from pathlib import Path

from iree.compiler import ir

from sectionmark.errors import SectionmarkError
from sectionmark.section_map import SectionMap, SectionMapError

REFLECTION_KEY = "sectionmark.section_map"
REFLECTION_ATTR = "iree.reflection"


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
        text = json.dumps(section_map.to_json(), ensure_ascii=False, separators=(",", ":"))
        entries[REFLECTION_KEY] = ir.StringAttr.get(text, context=op.context)
        op.attributes[REFLECTION_ATTR] = ir.DictAttr.get(entries, context=op.context)
        return True
    return False


def _is_public(op: ir.Operation) -> bool:
    if "sym_visibility" not in op.attributes:
        return True
    return ir.StringAttr(op.attributes["sym_visibility"]).value == "public"


def sidecar_path(vmfb_path: str | Path) -> Path:
    """``model.vmfb`` -> ``model.sections.json``."""
    path = Path(vmfb_path)
    return path.with_name(path.stem + ".sections.json")


def read_embedded(vmfb: bytes) -> SectionMap | None:
    """The map embedded in a .vmfb, or None if it has none."""
    from iree import runtime

    try:
        module = runtime.VmModule.copy_buffer(runtime.VmInstance(), vmfb)
    except (RuntimeError, ValueError) as error:
        raise SectionmarkError(f"not an IREE module (.vmfb): {error}") from None
    for name in module.function_names:
        function = module.lookup_function(name)
        text = function.reflection.get(REFLECTION_KEY) if function is not None else None
        if text is not None:
            try:
                return SectionMap.loads(text)
            except SectionMapError as error:
                raise SectionmarkError(f"embedded section map is unreadable: {error}") from None
    return None


def read_section_map(vmfb_path: str | Path) -> SectionMap:
    """The section map of a compiled module: embedded, else its sidecar JSON."""
    path = Path(vmfb_path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise SectionmarkError(f"cannot read {path}: {error.strerror}") from None
    embedded = read_embedded(data)
    if embedded is not None:
        return embedded
    sidecar = sidecar_path(path)
    if not sidecar.exists():
        raise SectionmarkError(
            f"{path} has no embedded section map and no {sidecar.name}; compile it with sectionmark"
        )
    try:
        return SectionMap.load(sidecar)
    except SectionMapError as error:
        raise SectionmarkError(f"{sidecar}: {error}") from None
