"""Compiled modules and their section maps, read without the compiler.

A module reaches the runtime side as a compiled object (``sm.compile``'s
result: .vmfb bytes and the map), as bytes, or as a .vmfb file whose map is
embedded (see `sectionmark.section_map.EMBEDDED_KEY`) or sits beside it in a
sidecar ``<name>.sections.json`` (modules compiled elsewhere).

Reading does not load the module: the IREE runtime can crash on a corrupt one
(found by tests/readers/test_readers_fuzz.py), so the checksummed string is found in
the file's bytes and verified. Reading never trusts a file's name: the first
bytes decide whether it is a module or a JSON map, before the rest is read,
and only regular files are read (`sectionmark.artifacts.files`).
"""

from __future__ import annotations

import mmap
import re
import struct
from pathlib import Path
from typing import Any, Optional, Union

from sectionmark.artifacts.files import open_regular, read_regular
from sectionmark.errors import SectionmarkError
from sectionmark.section_map import EMBEDDED_JSON_START, EMBEDDED_KEY, SectionMap, SectionMapError, sidecar_path

MAX_MAP_BYTES = 256 << 20  # a JSON map larger than this is not a section map (a 2-block GPT: 36 KB)
_ZIP_MAGIC = b"PK\x03\x04"  # a .vmfb is a flatbuffer, usually inside a zip (IREE's default)
_FLATBUFFER_IDENTIFIER = b"IREE"  # at bytes 4..8 of a bare .vmfb flatbuffer
_HEAD_BYTES = 4096
_MAP_START = EMBEDDED_JSON_START.encode("ascii")
_DIGEST_LENGTH = 64  # hex digits of SHA-256
_CHECKSUM_PREFIX = re.compile(rb"[0-9a-f]{64} ")

ModuleSource = Union[Any, str, Path, bytes]  # a compiled object (.vmfb + .section_map), a path, or bytes


def read_section_map(path: Union[str, Path]) -> SectionMap:
    """The section map in a file: a .vmfb (embedded, else its sidecar JSON) or a .sections.json.

    The first bytes decide which it is, whatever the file is called.
    """
    path = Path(path)
    with open_regular(path, "module or section map") as file:
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


def module_bytes_and_map(source: ModuleSource) -> tuple[bytes, Optional[SectionMap]]:
    """The .vmfb bytes of ``source`` and its map (None for bytes, or a file that has none: it still runs)."""
    if hasattr(source, "vmfb"):
        return source.vmfb, source.section_map
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source), None
    path = Path(source)
    data = read_regular(path, "module")
    try:
        return data, read_section_map(path)
    except SectionmarkError:
        return data, None  # a plain IREE module runs fine without a map


def _is_module(head: bytes) -> bool:
    return head.startswith(_ZIP_MAGIC) or head[4:8] == _FLATBUFFER_IDENTIFIER


def _embedded_map(path: Path) -> Optional[SectionMap]:
    """The map embedded in a .vmfb, or None if it has none.

    The map is a flatbuffer string (u32 length, the text, a NUL) made of the
    checksum, a space and JSON starting ``{"version":``; maps embedded before
    checksums are the same string without them.
    """
    with open_regular(path, "module") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        if data.find(EMBEDDED_KEY.encode()) < 0:
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
    try:
        return SectionMap.from_embedded_text(text, checksummed)
    except SectionMapError as error:
        raise SectionmarkError(f"{path}: the embedded section map is corrupt ({error})") from None


def _json_map(path: Path) -> SectionMap:
    with open_regular(path, "section map") as file:
        data = file.read(MAX_MAP_BYTES + 1)
    if len(data) > MAX_MAP_BYTES:
        raise SectionmarkError(f"{path}: larger than {MAX_MAP_BYTES >> 20} MiB, so not a section map")
    try:
        return SectionMap.loads(data.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise SectionmarkError(f"{path}: section map is not UTF-8 text ({error.reason} at byte {error.start})") from None
    except SectionMapError as error:
        raise SectionmarkError(f"{path}: {error}") from None
