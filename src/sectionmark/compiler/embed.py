"""The section map inside the .vmfb, so the module alone is enough to profile it.

The map (compact JSON) is stored as one more entry, ``sectionmark.section_map``,
in the ``iree.reflection`` dictionary of the first exported function, prefixed
by the SHA-256 of the JSON and a space: a corrupted module gives an error, not
a map with other section names. IREE keeps reflection entries verbatim in the
module's function signatures (the runtime exposes them as
``VmFunction.reflection``, ``iree-dump-module`` prints them); executables are
untouched. A sidecar ``<name>.sections.json`` is the fallback for modules
compiled elsewhere.

Reading does not load the module: the IREE runtime can crash on a corrupt one
(found by tests/test_readers_fuzz.py), so the checksummed string is found in
the file's bytes and verified.

The map also carries the module's fingerprint (its executable functions),
taken here from the hal-phase module and checked against profiles.

Reading never trusts a file's name: the first bytes decide whether it is a
module or a JSON map, before the rest is read, and only regular files are read.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import re
import stat
import struct
from pathlib import Path
from typing import Optional

from iree.compiler import ir

from sectionmark.errors import SectionmarkError
from sectionmark.section_map import ModuleFingerprint, SectionMap, SectionMapError

REFLECTION_KEY = "sectionmark.section_map"
REFLECTION_ATTR = "iree.reflection"
LOOKUP_OP = "hal.executable.lookup.function"
MAX_MAP_BYTES = 256 << 20  # a JSON map larger than this is not a section map (a 2-block GPT: 36 KB)
_ZIP_MAGIC = b"PK\x03\x04"  # a .vmfb is a flatbuffer, usually inside a zip (IREE's default)
_FLATBUFFER_IDENTIFIER = b"IREE"  # at bytes 4..8 of a bare .vmfb flatbuffer
_HEAD_BYTES = 4096
_MAP_START = b'{"version":'  # compact JSON of a map (to_json puts the version first)
_DIGEST_LENGTH = 64  # hex digits of SHA-256
_CHECKSUM_PREFIX = re.compile(rb"[0-9a-f]{64} ")


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
        entries[REFLECTION_KEY] = ir.StringAttr.get(f"{_digest(text)} {text}", context=op.context)
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


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sidecar_path(vmfb_path: str | Path) -> Path:
    """``model.vmfb`` -> ``model.sections.json``."""
    path = Path(vmfb_path)
    return path.with_name(path.stem + ".sections.json")


def _open_regular(path: Path, what: str):
    """Open a regular file for reading (never a device, pipe or directory, which could be endless)."""
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            raise SectionmarkError(f"{path}: not a regular file, so not {what}")
        return path.open("rb")
    except OSError as error:
        raise SectionmarkError(f"cannot read {path}: {error.strerror or error}") from None


def _is_module(head: bytes) -> bool:
    return head.startswith(_ZIP_MAGIC) or head[4:8] == _FLATBUFFER_IDENTIFIER


def _embedded_map(path: Path) -> Optional[SectionMap]:
    """The map embedded in a .vmfb, or None if it has none.

    The map is a flatbuffer string (u32 length, the text, a NUL) made of the
    checksum, a space and JSON starting ``{"version":``; maps embedded before
    checksums are the same string without them.
    """
    with path.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        if data.find(REFLECTION_KEY.encode()) < 0:
            return None
        position = data.find(_MAP_START)
        while position >= 0:
            prefix = data[max(position - _DIGEST_LENGTH - 1, 0) : position]
            checksummed = _CHECKSUM_PREFIX.fullmatch(prefix) is not None
            start = position - len(prefix) if checksummed else position
            text = _flatbuffer_string(data, start)
            if text is not None:
                return _checked_map(path, text, checksummed)
            position = data.find(_MAP_START, position + 1)
    raise SectionmarkError(f"{path}: the embedded section map is corrupt (no complete copy of it in the module)")


def _flatbuffer_string(data: mmap.mmap, start: int) -> Optional[bytes]:
    """The flatbuffer string whose text begins at ``start``, or None if no well-formed one does."""
    if start < 4:
        return None
    (length,) = struct.unpack_from("<I", data, start - 4)
    end = start + length
    if end >= len(data) or data[end] != 0:
        return None
    return data[start:end]


def _checked_map(path: Path, text: bytes, checksummed: bool) -> SectionMap:
    if checksummed:
        digest, _space, text = text.partition(b" ")
        if digest.decode("ascii") != hashlib.sha256(text).hexdigest():
            raise SectionmarkError(f"{path}: the embedded section map is corrupt (checksum mismatch)")
    try:
        return SectionMap.loads(text.decode("utf-8"))
    except (SectionMapError, UnicodeDecodeError) as error:
        raise SectionmarkError(f"{path}: embedded section map is unreadable: {error}") from None


def _json_map(path: Path) -> SectionMap:
    with _open_regular(path, "a section map") as file:
        data = file.read(MAX_MAP_BYTES + 1)
    if len(data) > MAX_MAP_BYTES:
        raise SectionmarkError(f"{path}: larger than {MAX_MAP_BYTES >> 20} MiB, so not a section map")
    try:
        return SectionMap.loads(data.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise SectionmarkError(f"{path}: section map is not UTF-8 text ({error.reason} at byte {error.start})") from None
    except SectionMapError as error:
        raise SectionmarkError(f"{path}: {error}") from None


def read_section_map(path: str | Path) -> SectionMap:
    """The section map in a file: a .vmfb (embedded, else its sidecar JSON) or a .sections.json.

    The first bytes decide which it is, whatever the file is called.
    """
    path = Path(path)
    with _open_regular(path, "a module or section map") as file:
        head = file.read(_HEAD_BYTES)
    if _is_module(head):
        embedded = _embedded_map(path)
        if embedded is not None:
            return embedded
        sidecar = sidecar_path(path)
        if not sidecar.exists():
            raise SectionmarkError(
                f"{path} has no embedded section map and no {sidecar.name}; compile it with sectionmark"
            )
        return _json_map(sidecar)
    if head.lstrip(b" \t\r\n")[:1] == b"{":
        return _json_map(path)
    if not head:
        raise SectionmarkError(f"{path}: the file is empty, so not a module or section map")
    raise SectionmarkError(f"{path}: neither an IREE module (.vmfb) nor a section map (.sections.json)")
