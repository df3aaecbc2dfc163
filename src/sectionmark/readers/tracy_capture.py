"""Read the zones of a Tracy capture (.tracy) written by Tracy 0.11.2.

Tracy ships no exporter for this version, and the file is Tracy's in-memory
state serialized field by field (``Worker::Write`` in server/TracyWorker.cpp),
so the layout changes between releases: this reader checks the version and
refuses anything but 0.11.2. It reads only what sectionmark needs: threads
with their CPU zone trees and GPU contexts with their GPU zone trees.

File = container header, then blocks of a few compressed streams; inflated
and concatenated in block order they give the serialization parsed below.
"""

from __future__ import annotations

import os
import struct
from itertools import repeat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, NamedTuple, Optional, Union

from sectionmark.artifacts.files import open_regular, read_regular
from sectionmark.errors import SectionmarkError
from sectionmark.readers.tracy_zone_walks import ZONE_FIELDS, ZONE_ROW, cpu_zone_table, gpu_zone_table

try:  # the walks over every zone in C (setup.py builds it when a compiler is present)
    from sectionmark.readers import _tracyread as _native
except ImportError:
    _native = None

__all__ = ["Zone", "Track", "SourceLocation", "Capture", "read_capture", "is_capture", "implausible_zone", "SUPPORTED_VERSION"]

SUPPORTED_VERSION = (0, 11, 2)

_CONTAINER_MAGIC = b"tr\xfdP"
_OLD_LZ4_MAGIC = b"tlZ\x04"
_OLD_ZSTD_MAGIC = b"tZst"
_BLOCK_SIZE = 64 * 1024  # every block inflates to this, except the last one


class Zone(NamedTuple):
    """One zone. ``parent`` is the index of the enclosing zone in the same
    track's ``zones`` list (-1 at top level); zones are listed parents first."""

    name: str
    start_ns: int
    end_ns: int
    depth: int
    parent: int

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass
class Track:
    """A CPU thread or a GPU context (a timeline row in Tracy's view)."""

    kind: str  # "thread" or "gpu"
    id: int  # thread id, or GPU context index in the capture
    name: str
    zones: list[Zone] = field(default_factory=list)
    # A GPU context's zones' CPU-side begin and end (ns since capture start, in ``zones``' order): when the
    # client sent the zone's begin and end, from which Tracy shows "CPU command setup time" (end - begin)
    # and "delay to execution" (GPU start - begin). Empty for a thread.
    cpu_side: list[tuple[int, int]] = field(default_factory=list)


class SourceLocation(NamedTuple):
    """A source location of the capture: what Tracy shows of a zone besides its times.

    ``function`` is the line under the name in Tracy's zone tooltip (the text of a sectionmark replay's GPU
    zones); ``color`` 0xRRGGBB, 0 for Tracy's default.
    """

    name: str
    function: str
    file: str
    line: int
    color: int


@dataclass
class Capture:
    """What sectionmark reads from a capture. Times are ns since capture start."""

    version: tuple[int, int, int]
    program: str
    threads: list[Track]
    gpu_contexts: list[Track]
    end_ns: Optional[int] = None  # the capture's own recorded end (Tracy's last time); None: not known
    source_locations: list[SourceLocation] = field(default_factory=list)  # static ones, then allocated ones
    # Where each frame of the main frame set starts (ns): Tracy's start-up is the first (from 0), the time from its
    # end to the first frame mark the second, then one per frame mark the client sent (a sectionmark replay: one
    # per call).
    frames: list[int] = field(default_factory=list)
    on_demand: bool = False  # a client built on-demand (TRACY_ON_DEMAND): it sent only what followed the connection

    @property
    def tracks(self) -> list[Track]:
        return self.threads + self.gpu_contexts

    def opening_view(self) -> tuple[int, int]:
        """The time range (ns) the Tracy GUI (0.11.2) shows when it opens this file, unless it saved a view of
        this capture before (its user data): `View::View` of a file sets ``m_vd.zvStart = GetFirstTime()`` and
        ``zvEnd = GetLastTime()`` (`end_ns`), and `Worker::GetFirstTime` is 0, or for an on-demand client the
        start of the main frame set's third frame (the first after the connection)."""
        if self.end_ns is None:
            raise SectionmarkError("this capture's end is not known (its header was not read)")
        return (self.frames[2] if self.on_demand else 0), self.end_ns

    def zones(self) -> Iterator[tuple[Track, Zone]]:
        for track in self.tracks:
            for zone in track.zones:
                yield track, zone


class _Truncated(Exception):
    pass


def _inflate(data: bytes, path: Path) -> bytearray:
    """Undo the container: each stream is one continuous zstd frame, its blocks in turn.

    Every block but the last inflates to exactly `_BLOCK_SIZE`, so each is
    inflated to at most that many bytes and nothing may follow the last one:
    a small file cannot inflate to more than its blocks say (a zstd bomb is
    refused after one block, not after gigabytes). The blocks are appended to
    one growing buffer (no second copy of the whole payload to join them).
    """
    if data[:4] in (_OLD_LZ4_MAGIC, _OLD_ZSTD_MAGIC):
        raise SectionmarkError(f"{path}: written by a Tracy older than 0.9; sectionmark reads Tracy 0.11.2 captures")
    if data[:4] != _CONTAINER_MAGIC:
        raise SectionmarkError(f"{path}: not a Tracy capture (bad magic bytes)")
    if len(data) < 6:
        raise SectionmarkError(f"{path}: Tracy capture is truncated (no container header)")
    compression, streams = data[4], data[5]
    if compression == 0:
        raise SectionmarkError(
            f"{path}: LZ4-compressed capture; sectionmark reads zstd captures (as iree-tracy-capture writes), "
            "re-save it with zstd compression in the Tracy GUI"
        )
    if compression != 1 or streams == 0:
        raise SectionmarkError(f"{path}: not a Tracy capture (bad container header)")
    import zstandard

    blocks: list[list[memoryview]] = [[] for _ in range(streams)]  # each stream's compressed blocks, in order
    view, pos, count = memoryview(data), 6, 0
    while pos < len(data):
        if pos + 4 > len(data):
            raise SectionmarkError(f"{path}: Tracy capture is truncated (incomplete compressed block)")
        (size,) = struct.unpack_from("<I", data, pos)
        pos += 4
        if size == 0 or pos + size > len(data):
            raise SectionmarkError(f"{path}: Tracy capture is truncated (incomplete compressed block)")
        blocks[count % streams].append(view[pos : pos + size])
        pos += size
        count += 1
    readers = [zstandard.ZstdDecompressor().stream_reader(_Blocks(stream)) for stream in blocks]
    payload = bytearray()
    try:
        for block in range(count):
            chunk = readers[block % streams].read(_BLOCK_SIZE)
            if block < count - 1 and len(chunk) != _BLOCK_SIZE:
                raise SectionmarkError(f"{path}: corrupt Tracy capture (a compressed block has the wrong size)")
            payload += chunk
        if any(reader.read(1) for reader in readers):
            raise SectionmarkError(f"{path}: corrupt Tracy capture (its streams inflate past their last block)")
    except zstandard.ZstdError as error:
        raise SectionmarkError(f"{path}: corrupt Tracy capture (zstd: {error})") from None
    return payload


class _Blocks:
    """One stream's compressed blocks as the file object zstandard's stream reader reads from."""

    def __init__(self, blocks: list[memoryview]):
        self._blocks, self._next = blocks, 0

    def read(self, _size: int = -1) -> bytes:
        if self._next == len(self._blocks):
            return b""
        self._next += 1
        return bytes(self._blocks[self._next - 1])


class _Parser:
    """Walks the inflated serialization; every read checks bounds."""

    def __init__(self, buf: bytearray):
        self.buf = buf
        self.pos = 0

    def take(self, fmt: struct.Struct) -> tuple:
        values = fmt.unpack_from(self.buf, self.pos)
        self.pos += fmt.size
        return values

    def skip(self, count: int) -> None:
        self.pos += count
        if self.pos > len(self.buf):
            raise _Truncated

    def u64(self) -> int:
        return self.take(_Q)[0]

    def text(self) -> str:
        size = self.u64()
        start = self.pos
        self.skip(size)
        return self.buf[start : start + size].decode("utf-8", "replace")


_Q = struct.Struct("<Q")
_QQ = struct.Struct("<QQ")
_I = struct.Struct("<I")
_IQ = struct.Struct("<IQ")
_HEADER = struct.Struct("<qqdqQQqBI12sB")
_FRAME_SET = struct.Struct("<QBQ")
_SOURCE_LOCATION = struct.Struct("<QBQBQBII")  # name, function, file as (u64, flags); line; color
_LOCK_HEADER_SIZE = 27  # id u32, name u24, srcloc i16, type u8, valid u8, announce i64, terminate i64
_LOCK_EVENT_SIZE = 12
_MESSAGE_SIZE = 32
_ZONE_EXTRA_SIZE = 12  # callstack, text, name, color: u24 each
_THREAD = struct.Struct("<QQQBi")
_GPU_CONTEXT = struct.Struct("<QBQfB3sQ")
_SAMPLE_SIZE = 11
if _native is not None and getattr(_native, "ZONE_ROW_SIZE", None) != ZONE_ROW.size:
    _native = None  # a stale build of _tracyread.c: the Python walks give the same results


def is_capture(path: Union[str, os.PathLike]) -> bool:
    """Whether ``path`` is meant as a Tracy capture: named ``.tracy`` or starting like one.

    The name alone is enough so that a damaged ``.tracy`` file gets the
    reader's own error rather than another format's.
    """
    path = Path(path)
    if path.suffix == ".tracy":
        return True
    try:
        with open_regular(path, "profile") as file:
            head = file.read(4)
    except (SectionmarkError, OSError):  # the profile reader says what is wrong with it
        return False
    return head in (_CONTAINER_MAGIC, _OLD_LZ4_MAGIC, _OLD_ZSTD_MAGIC)


def read_capture(path: Union[str, os.PathLike]) -> Capture:
    """Read threads, GPU contexts and their zone trees from a Tracy 0.11.2 capture.

    Raises SectionmarkError (one line) for a missing, foreign, other-version,
    truncated or corrupt file.
    """
    path = Path(path)
    buf = _inflate(read_regular(path, "Tracy capture"), path)
    if len(buf) < 8 or buf[:5] != b"tracy":
        raise SectionmarkError(f"{path}: corrupt Tracy capture (no serialization header)")
    version = (buf[5], buf[6], buf[7])
    if version != SUPPORTED_VERSION:
        found = ".".join(map(str, version))
        raise SectionmarkError(
            f"{path}: Tracy capture version {found} is not supported; sectionmark reads version 0.11.2 "
            "(IREE 3.13's Tracy), re-capture with iree-tracy-capture from iree-base-runtime 3.13"
        )
    try:
        capture, tables = _parse(buf, version)
    except (_Truncated, struct.error, IndexError):
        raise SectionmarkError(f"{path}: Tracy capture is truncated or corrupt") from None
    for track, table in zip(capture.tracks, tables):
        problem = table.implausible_zone(track, capture.end_ns)
        if problem is not None:
            raise SectionmarkError(f"{path}: corrupt Tracy capture ({problem})")
    for track, table in zip(capture.tracks, tables):
        track.zones = table.zones()
        if track.kind == "gpu":
            track.cpu_side = list(zip(table.rows["cpu_start_ns"].tolist(), table.rows["cpu_end_ns"].tolist()))
    return capture


def implausible_zone(capture: Capture) -> Optional[str]:
    """What is impossible in ``capture``'s zone trees, or None: the first zone found.

    Tracy captures carry no checksum, so a damaged file can decode into zones
    that cannot have been recorded: a time beyond 64 bits, a zone that ends
    before it begins or after the capture itself ended (Tracy records that
    end, and every time it receives moves it), or a child that starts before
    its parent or ends after it (Tracy nests every track's zones as a stack).
    Such a capture would give wrong times, so it is refused. Vectorized:
    captures hold millions of zones (`read_capture` checks its tables before
    it makes zones of them, the same way).
    """
    import numpy as np

    for track in capture.tracks:
        if not track.zones:
            continue
        try:
            starts = np.fromiter((zone.start_ns for zone in track.zones), np.int64, len(track.zones))
            ends = np.fromiter((zone.end_ns for zone in track.zones), np.int64, len(track.zones))
        except OverflowError:
            return f"a zone {_where(track)} has a time beyond 64 bits"
        parents = np.fromiter((zone.parent for zone in track.zones), np.int64, len(track.zones))
        problem = _implausible(track, starts, ends, parents, capture.end_ns, lambda index: track.zones[index].name)
        if problem is not None:
            return problem
    return None


def _where(track: Track) -> str:
    return f"on {track.kind} track {track.name!r}"


def _implausible(track: Track, starts, ends, parents, end_ns: Optional[int],
                 name_of: Callable[[int], str]) -> Optional[str]:
    """`implausible_zone` for one track's zones given as arrays (int64) of starts, ends and parent indices."""
    import numpy as np

    where = _where(track)
    nested = np.flatnonzero(parents >= 0)
    outside = nested[(starts[nested] < starts[parents[nested]]) | (ends[nested] > ends[parents[nested]])]
    backwards = np.flatnonzero(ends < starts)
    late = np.flatnonzero(ends > end_ns) if end_ns is not None else ()
    if len(backwards):
        zone = backwards[0]
        return f"zone {name_of(zone)!r} {where} ends before it begins ({starts[zone]} > {ends[zone]} ns)"
    if len(late):
        zone = late[0]
        return f"zone {name_of(zone)!r} {where} ends after the capture ended ({ends[zone]} > {end_ns} ns)"
    if len(outside):
        zone = outside[0]
        parent = parents[zone]
        return (f"zone {name_of(zone)!r} {where} lies outside its parent {name_of(parent)!r} "
                f"([{starts[zone]}, {ends[zone]}] not in [{starts[parent]}, {ends[parent]}] ns)")
    return None


class _Names:
    """Every name a zone can have, as one tuple, and which of them each srcloc id and zone extra names.

    A CPU zone is named by its zone extra's name when it has a non-empty one,
    else by its source location; a GPU zone by its source location. Unknown
    ids are named "???" as Tracy shows them.
    """

    def __init__(self, srcloc_names: dict[int, str], string_data: list[str], extra_name_index):
        import numpy as np

        names = ["???"]
        self.by_srcloc = np.zeros(1 << 16, np.int32)  # srcloc (int16) + 2**15 -> index in names
        for srcloc, name in srcloc_names.items():
            if -(1 << 15) <= srcloc < 1 << 15:
                self.by_srcloc[srcloc + (1 << 15)] = len(names)
                names.append(name)
        # Zone extra index -> index in names, -1 for none: extra 0 means "no extra", and one past the
        # table (the last entry) stands for every index beyond it.
        self.by_extra = np.full(len(extra_name_index) + 1, -1, np.int32)
        nonempty = np.fromiter(map(bool, string_data), bool, len(string_data))
        named = np.flatnonzero(extra_name_index)
        named = named[(named > 0) & nonempty[extra_name_index[named] - 1]]
        self.by_extra[named] = len(names) + extra_name_index[named] - 1
        names.extend(string_data)
        self.names = tuple(names)

    def ids(self, rows, cpu: bool):
        import numpy as np

        ids = self.by_srcloc[rows["srcloc"] + (1 << 15)]
        if not cpu:
            return ids
        extra = self.by_extra[np.minimum(rows["extra"], len(self.by_extra) - 1)]
        return np.where(extra >= 0, extra, ids)


class _ZoneTable:
    """One track's zones as rows (`ZONE_FIELDS`), before they become `Zone`s; rows None: a time beyond 64 bits."""

    def __init__(self, tables: list[Optional[bytes]], names: _Names, cpu: bool):
        import numpy as np

        self.names = names
        if any(table is None for table in tables):
            self.rows = None
            return
        parts = [np.frombuffer(table, ZONE_FIELDS) for table in tables]
        if len(parts) == 1:
            self.rows = parts[0]
        elif not parts:  # a GPU context that stored no zones (from no thread)
            self.rows = np.zeros(0, ZONE_FIELDS)
        else:  # a GPU context's zones sent from several threads: each thread's parent indices start at 0
            self.rows = np.concatenate(parts)
            offsets = np.repeat(np.cumsum([0] + [len(part) for part in parts[:-1]]), [len(part) for part in parts])
            self.rows["parent"] += np.where(self.rows["parent"] >= 0, offsets, 0)
        self.name_ids = names.ids(self.rows, cpu)

    def implausible_zone(self, track: Track, end_ns: int) -> Optional[str]:
        if self.rows is None:
            return f"a zone {_where(track)} has a time beyond 64 bits"
        if not len(self.rows):
            return None
        return _implausible(track, self.rows["start_ns"], self.rows["end_ns"], self.rows["parent"], end_ns,
                            lambda index: self.names.names[self.name_ids[index]])

    def zones(self) -> list[Zone]:
        if _native is not None:
            return _native.zone_list(Zone, self.names.names, self.rows, self.name_ids)
        import numpy as np

        rows = self.rows
        names = np.array(self.names.names, dtype=object)[self.name_ids].tolist()
        fields = (rows["start_ns"].tolist(), rows["end_ns"].tolist(), rows["depth"].tolist(), rows["parent"].tolist())
        # tuple.__new__ through map: no Python-level call per zone (2x faster than Zone._make).
        return list(map(tuple.__new__, repeat(Zone), zip(names, *fields)))


def _parse(buf: bytearray, version: tuple[int, int, int]) -> tuple[Capture, list[_ZoneTable]]:
    """The capture with its tracks (zones still empty) and each track's zone table, in `Capture.tracks` order."""
    import numpy as np

    p = _Parser(buf)
    p.pos = 8
    (_, _, _, last_time, _, _, _, _, _, _, on_demand) = p.take(_HEADER)
    p.text()  # capture name
    program = p.text()
    p.skip(16)  # capture time, executable time
    p.text()  # host info
    _skip_cpu_topology(p)
    p.skip(28)  # crash event
    frame_starts: list[int] = []
    for _ in range(p.u64()):
        name, continuous, frames = p.take(_FRAME_SET)
        size = frames * (12 if continuous else 20)
        if size > len(p.buf) - p.pos:  # a count the file cannot hold: refused before anything is sized by it
            raise _Truncated
        if name == 0 and continuous:  # the main frame set: each frame's start, delta-encoded (and a frame image)
            records = np.frombuffer(p.buf, np.dtype([("delta", "<i8"), ("image", "<i4")]), frames, p.pos)
            frame_starts = np.cumsum(records["delta"]).tolist()
        p.skip(size)

    by_pointer: dict[int, str] = {}
    string_data: list[str] = []
    for _ in range(p.u64()):
        pointer = p.u64()
        text = p.text()
        by_pointer[pointer] = text
        string_data.append(text)
    strings = {}
    for _ in range(p.u64()):
        key, pointer = p.take(_QQ)
        if pointer in by_pointer:
            strings[key] = by_pointer[pointer]
    thread_names = {}
    for _ in range(p.u64()):
        thread, pointer = p.take(_QQ)
        if pointer in by_pointer:
            thread_names[thread] = by_pointer[pointer]
    p.skip(p.u64() * 24)  # external thread names
    p.skip(p.u64() * 8)  # local thread compression table
    p.skip(p.u64() * 8)  # external thread compression table

    def string_ref(value: int, flags: int) -> Optional[str]:
        if not flags & 2:  # not active
            return None
        return string_data[value] if flags & 1 else strings.get(value, "???")

    def location(record: tuple) -> SourceLocation:
        name_value, name_flags, function_value, function_flags, file_value, file_flags, line, color = record
        function = string_ref(function_value, function_flags)
        # Tracy stores a colour as the GUI draws it, 0xBBGGRR: as the client gave it, 0xRRGGBB.
        rgb = (color & 0xFF) << 16 | color & 0xFF00 | color >> 16 & 0xFF
        return SourceLocation(string_ref(name_value, name_flags) or function or "???", function or "",
                              string_ref(file_value, file_flags) or "", line, rgb)

    static_locations = {}
    for _ in range(p.u64()):
        pointer = p.u64()
        static_locations[pointer] = location(p.take(_SOURCE_LOCATION))
    expand = [p.u64() for _ in range(p.u64())]
    payload_locations = [location(p.take(_SOURCE_LOCATION)) for _ in range(p.u64())]
    payload_names = [found.name for found in payload_locations]
    # Zone srcloc ids: >= 0 index the expand table, < 0 the payload table.
    srcloc_names: dict[int, str] = {}
    for index, pointer in enumerate(expand):
        if pointer in static_locations:
            srcloc_names[index] = static_locations[pointer].name
    for index, name in enumerate(payload_names):
        srcloc_names[-index - 1] = name

    p.skip(p.u64() * 10)  # CPU zone counts per source location
    p.skip(p.u64() * 10)  # GPU zone counts per source location
    for _ in range(p.u64()):  # locks
        p.skip(_LOCK_HEADER_SIZE)
        p.skip(p.u64() * 8)
        p.skip(p.u64() * _LOCK_EVENT_SIZE)
    p.skip(p.u64() * _MESSAGE_SIZE)
    extras, at = p.u64(), p.pos  # zone extras: callstack, text, name, color (u24 each); name: string data index + 1
    p.skip(extras * _ZONE_EXTRA_SIZE)
    fields = np.frombuffer(buf, np.uint8, extras * _ZONE_EXTRA_SIZE, at).reshape(extras, _ZONE_EXTRA_SIZE)
    name_bytes = fields[:, 6:9].astype(np.int64)
    extra_name_index = name_bytes[:, 0] | name_bytes[:, 1] << 8 | name_bytes[:, 2] << 16
    if extras and extra_name_index.max() > len(string_data):
        raise IndexError("a zone extra names a string past the string table")
    names = _Names(srcloc_names, string_data, extra_name_index)

    p.skip(16)  # total zone count, zone children vector count
    threads, tables = [], []
    for _ in range(p.u64()):
        thread, _, _, _, _ = p.take(_THREAD)
        (count,) = p.take(_I)
        tables.append(_ZoneTable([_walk(cpu_zone_table, p, count, last_time)], names, cpu=True))
        p.skip(p.u64() * 8)  # message references
        p.skip(p.u64() * _SAMPLE_SIZE)  # context switch samples
        p.skip(p.u64() * _SAMPLE_SIZE)  # samples
        threads.append(Track("thread", thread, thread_names.get(thread, str(thread))))

    p.skip(16)  # total GPU zone count, GPU children vector count
    contexts = []
    for index in range(p.u64()):
        _, _, _, _, _, name, _ = p.take(_GPU_CONTEXT)
        name_index = int.from_bytes(name, "little")
        contexts.append(Track("gpu", index, string_data[name_index - 1] if name_index else f"GPU context {index}"))
        # Zones sent from several threads are stored per thread; one track shows them all.
        chunks = []
        for _ in range(p.u64()):
            _, count = p.take(_QQ)
            chunks.append(_walk(gpu_zone_table, p, count, last_time))
        tables.append(_ZoneTable(chunks, names, cpu=False))
    return Capture(version, program, threads, contexts, last_time,
                   [*static_locations.values(), *payload_locations], frame_starts, bool(on_demand)), tables


def _skip_cpu_topology(p: _Parser) -> None:
    for _ in range(p.u64()):
        _, dies = p.take(_IQ)
        for _ in range(dies):
            _, cores = p.take(_IQ)
            for _ in range(cores):
                _, threads = p.take(_IQ)
                p.skip(threads * 4)


def _walk(walker: Callable, p: _Parser, count: int, last_time: int) -> Optional[bytes]:
    """Run a zone tree walk at the parser's position, in C when built (the extension's function of the same
    name) and in Python otherwise: its rows, None for a time beyond 64 bits."""
    walked = (getattr(_native, walker.__name__) if _native is not None else walker)(p.buf, p.pos, count, last_time)
    if walked is None:
        raise _Truncated
    p.pos, table, overflow = walked
    return None if overflow else table
