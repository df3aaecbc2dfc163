"""The container of a .ireeprof bundle: its file header, its records and chunks, and the layouts of the records.

`map_bundle` maps the file and walks and checks its record headers (a window
at a time, each window's mapped pages given back after it), giving the
payloads of each chunk type used. The fixed-size records of a chunk have
public layouts (`HOST_EVENT`, `MEMORY_EVENT`, ...); `RecordPositions` makes
their byte offsets a window at a time and `records_at` gathers them into
packed copies, for the readers above: `bundle_events` (decode),
`ireeprof_bundle` (the whole read) and `ireeprof_stream` (the windows).
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Iterator, Optional, Union

import numpy as np

from sectionmark.errors import SectionmarkError
from sectionmark.readers.checks import corrupt
from sectionmark.readers.event_model import native


class UnsupportedLayout(Exception):
    """The bundle uses a record layout this reader was not checked against."""


BUNDLE_MAGIC = b"IRPF"
_FILE_HEADER = struct.Struct("<4sHHIIQ")  # magic, major, minor, header_length, flags, file_length
_RECORD_SESSION_BEGIN, _RECORD_CHUNK, _RECORD_SESSION_END = 1, 2, 3
_CHUNK_TRUNCATED = 1
_CONTENT_PREFIX = "application/vnd.iree.hal.profile."

USED_CHUNKS = ("executable-functions", "command-buffers", "command-operations", "host-execution-events",
               "memory-events", "dispatch-events", "clock-correlations", "queue-events")
# Chunk types that carry no timing or memory figure we use: session metadata, device-side
# counters and traces. They are skipped; any other type is an error. (Queue events are read only
# for a device-timed profile: on CPU each execution is a host-execution event.)
IGNORED_CHUNKS = frozenset(
    {
        "session", "devices", "queues", "executables",
        "queue-device-events", "event-relationships", "executable-code-objects",
        "executable-code-object-loads", "executable-traces", "counter-sets", "counters", "counter-samples",
        "device-metric-sources", "device-metric-descriptors", "device-metric-samples", "command-region-events",
    }
)
KNOWN_CHUNKS = USED_CHUNKS + tuple(sorted(IGNORED_CHUNKS))
KNOWN_CONTENT_TYPES = tuple((_CONTENT_PREFIX + name).encode() for name in KNOWN_CHUNKS)
# The layouts of the records inside the chunks used (IREE 3.13's structs), the fields read of each: the readers
# gather records with them (`records_at`); _ireeprof.c reads the same offsets.
HOST_EVENT = np.dtype(
    {
        "names": [
            "record_length", "type", "status_code", "event_id", "submission", "command_buffer",
            "executable_id", "stream", "device", "queue", "command_index", "function_ordinal",
            "start_ns", "end_ns", "payload_bytes", "tile_count", "tile_ns",
        ],
        "formats": ["<u4", "<u4", "<u4", "<u8", "<u8", "<u8", "<u8", "<u8", "<u4", "<u4", "<u4",
                    "<u4", "<i8", "<i8", "<u8", "<u8", "<u8"],
        "offsets": [0, 4, 12, 16, 24, 32, 40, 56, 64, 68, 72, 76, 104, 112, 120, 128, 136],
        "itemsize": 152,
    }
)
MEMORY_EVENT = np.dtype(
    {
        "names": ["record_length", "type", "flags", "event_id", "time_ns", "allocation", "pool", "submission",
                  "device", "length", "pool_reserved"],
        "formats": ["<u4", "<u4", "<u4", "<u8", "<i8", "<u8", "<u8", "<u8", "<u4", "<u8", "<u8"],
        "offsets": [0, 4, 8, 16, 24, 32, 40, 56, 64, 104, 120],
        "itemsize": 160,
    }
)
COMMAND_OPERATION = np.dtype(
    {
        "names": ["record_length", "type", "flags", "command_index", "command_buffer",
                  "executable_id", "function_ordinal", "workgroup_count"],
        "formats": ["<u4", "<u4", "<u4", "<u4", "<u8", "<u8", "<u4", ("<u4", (3,))],
        "offsets": [0, 4, 8, 12, 16, 32, 40, 48],
        "itemsize": 120,
    }
)
# Device-timed dispatch event (iree_hal_profile_dispatch_event_t); device and queue are its chunk's.
DEVICE_DISPATCH_EVENT = np.dtype(
    {
        "names": ["record_length", "flags", "event_id", "submission", "command_buffer", "executable_id",
                  "command_index", "function_ordinal", "start_tick", "end_tick"],
        "formats": ["<u4", "<u4", "<u8", "<u8", "<u8", "<u8", "<u4", "<u4", "<u8", "<u8"],
        "offsets": [0, 4, 8, 16, 24, 32, 40, 44, 72, 80],
        "itemsize": 88,
    }
)
CLOCK_SAMPLE = np.dtype(  # iree_hal_profile_clock_correlation_record_t
    {
        "names": ["record_length", "flags", "device", "device_tick", "host_cpu_ns", "host_time_begin_ns",
                  "host_time_end_ns"],
        "formats": ["<u4", "<u4", "<u4", "<u8", "<u8", "<i8", "<i8"],
        "offsets": [0, 4, 8, 24, 32, 56, 64],
        "itemsize": 72,
    }
)
QUEUE_EVENT = np.dtype(  # iree_hal_profile_queue_event_t
    {
        "names": ["record_length", "type", "submission", "command_buffer", "host_time_ns"],
        "formats": ["<u4", "<u4", "<u8", "<u8", "<i8"],
        "offsets": [0, 4, 32, 40, 24],
        "itemsize": 104,
    }
)
COMMAND_BUFFER = np.dtype(
    {"names": ["record_length", "command_buffer"], "formats": ["<u4", "<u8"], "offsets": [0, 8], "itemsize": 48}
)
FUNCTION_HEADER = struct.Struct("<IIQI")  # record_length, flags, executable_id, function_ordinal
FUNCTION_NAME_LENGTH_OFFSET = 44
FUNCTION_HEADER_SIZE = 64


@dataclass
class Chunks:
    """The payloads of one chunk type: byte offsets into the file and lengths, in file order."""

    starts: np.ndarray  # int64
    lengths: np.ndarray  # int64
    devices: np.ndarray  # uint32: the physical device ordinal of each chunk's header
    queues: np.ndarray  # uint32: its queue ordinal

    def views(self, data: mmap.mmap) -> list[memoryview]:
        view = memoryview(data)
        return [view[start : start + length] for start, length in zip(self.starts.tolist(), self.lengths.tolist())]


def records_at(data: np.ndarray, offsets: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The ``dtype`` records starting at byte ``offsets`` of ``data`` (uint8), gathered into one packed copy.

    Records of a bundle sit at any byte alignment, so ``data`` is viewed as one
    record starting at every byte (stride 1) and indexed once: no per-chunk
    Python work and no intermediate copy of the chunks. A record with fields is
    gathered as its raw bytes and then viewed with its fields: one copy of each
    record, where numpy would copy it field by field (four times slower).
    """
    if not len(offsets):
        return np.zeros(0, dtype)
    raw = np.dtype((np.void, dtype.itemsize)) if dtype.names else dtype
    every_byte = np.ndarray((len(data) - dtype.itemsize + 1,), raw, buffer=data, strides=(1,))
    return every_byte[offsets].view(dtype) if dtype.names else every_byte[offsets]


class RecordPositions:
    """Byte offsets of the fixed-size records of ``chunks``, made for the records asked (a window of them), not
    for all at once: an offset per record would be 8 bytes per event of a long profile, and making them all one
    more pass over fresh memory."""

    def __init__(self, chunks: Chunks, itemsize: int):
        if (chunks.lengths % itemsize).any():
            bad = chunks.lengths[np.argmax(chunks.lengths % itemsize != 0)]
            raise UnsupportedLayout(f"{bad}-byte chunk is not a whole number of records")
        self._counts = np.ascontiguousarray(chunks.lengths // itemsize, np.int64)
        self._starts, self._itemsize = np.ascontiguousarray(chunks.starts, np.int64), itemsize
        self._firsts = np.cumsum(self._counts) - self._counts  # index of each chunk's first record among all
        self._count = int(self._counts.sum())

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, records: Union[slice, list[int]]) -> np.ndarray:
        """The offsets of records ``records`` (a slice without step, or a list of indices)."""
        if not isinstance(records, slice):
            indices = np.asarray(records, np.int64)
            chunk = self._chunk_of(indices)
            return self._starts[chunk] + (indices - self._firsts[chunk]) * self._itemsize
        begin, end, _step = records.indices(self._count)
        if end <= begin:
            return np.zeros(0, np.int64)
        # The chunks the window reaches, each repeated for its records inside the window: one lookup per window.
        first, last = self._chunk_of(np.array([begin, end - 1])).tolist()
        if native() is not None:  # in one pass
            positions = np.empty(end - begin, np.int64)
            native().record_positions(self._starts, self._firsts, self._counts, first, begin, self._itemsize,
                                      positions)
            return positions
        firsts, counts = self._firsts[first : last + 1], self._counts[first : last + 1]
        inside = np.minimum(firsts + counts, end) - np.maximum(firsts, begin)
        base = np.repeat(self._starts[first : last + 1] - firsts * self._itemsize, np.maximum(inside, 0))
        return base + np.arange(begin, end, dtype=np.int64) * self._itemsize

    def _chunk_of(self, indices: np.ndarray) -> np.ndarray:
        """Each record's chunk: the last one starting at or before it (empty chunks share their successor's first)."""
        return np.searchsorted(self._firsts, indices, side="right") - 1


def fixed_records(data: np.ndarray, chunks: Chunks, dtype: np.dtype) -> np.ndarray:
    """All records of chunks of fixed-size records, checking each record's own length."""
    records = records_at(data, RecordPositions(chunks, dtype.itemsize)[:], dtype)
    if len(records) and (records["record_length"] != dtype.itemsize).any():
        raise UnsupportedLayout("record length differs from the known layout")
    return records


def release_pages(mapped: mmap.mmap, start: int, end: int) -> None:
    """Give the mapped pages of bytes ``[start, end)`` back (they stay in the page cache: a later read maps them
    in again), so that reading a long profile does not keep the whole file in this process's RSS."""
    page = mmap.PAGESIZE
    first = start // page * page
    if end > first and hasattr(mmap, "MADV_DONTNEED"):
        mapped.madvise(mmap.MADV_DONTNEED, first, end - first)


RECORD_HEADER_SIZE = 104
RECORD_WALK_WINDOW = 64 << 20  # bytes of the file walked for record headers per pass (`walk_windows`)
_RECORD_LENGTH = struct.Struct("<Q")
RECORD_HEADER_DTYPE = np.dtype(
    {
        "names": ["record_length", "payload_length", "header_size", "type_length", "name_length", "device", "queue",
                  "chunk_flags", "dropped", "status", "record_type"],
        "formats": ["<u8", "<u8", "<u4", "<u4", "<u4", "<u4", "<u4", "<u8", "<u8", "<u4", "<u2"],
        "offsets": [0, 8, 56, 60, 64, 68, 72, 80, 88, 96, 100],
        "itemsize": RECORD_HEADER_SIZE,
    }
)


def _record_table(data: np.ndarray, start: int, end: int, known_types: tuple[bytes, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Walk the records of ``data[start:end]``: (offsets, headers, kinds).

    ``offsets``: of every record; the walk stops after a record whose header is cut short or whose length is
    below a header's or past ``end`` (``_bundle_chunks`` reports it). ``headers`` (``RECORD_HEADER_DTYPE``):
    of the records with a whole header (all but maybe the last); ``kinds``: the index in ``KNOWN_CHUNKS`` of
    each one's content type, -1 when it is none of them or its type string does not lie inside the record.
    In C when the extension is built.
    """
    if native() is not None:
        offsets, headers, kinds = native().record_table(data, start, end, known_types)
        return (np.frombuffer(offsets, np.int64), np.frombuffer(headers, RECORD_HEADER_DTYPE),
                np.frombuffer(kinds, np.int64))
    offsets, offset, unpack = [], start, _RECORD_LENGTH.unpack_from
    while offset < end:
        offsets.append(offset)
        if end - offset < RECORD_HEADER_SIZE:
            break
        (length,) = unpack(data, offset)
        if length < RECORD_HEADER_SIZE or length > end - offset:
            break
        offset += length
    whole = np.array(offsets[: len(offsets) - (end - offsets[-1] < RECORD_HEADER_SIZE)] if offsets else [], np.int64)
    headers = records_at(data, whole, RECORD_HEADER_DTYPE)
    return np.array(offsets, np.int64), headers, _content_kinds(data, whole, headers, end, known_types)


def _content_kinds(data: np.ndarray, offsets: np.ndarray, headers: np.ndarray, end: int,
                   known_types: tuple[bytes, ...]) -> np.ndarray:
    """``_record_table``'s kinds, with numpy: the type strings of each length are gathered and looked up once."""
    length, header_size = headers["record_length"], headers["header_size"].astype(np.uint64)
    type_length = headers["type_length"].astype(np.uint64)
    fits = ((length <= (end - offsets).astype(np.uint64)) & (header_size >= RECORD_HEADER_SIZE)
            & (header_size <= length) & (type_length <= length - header_size))
    kinds = np.full(len(offsets), -1, np.int64)
    codes = {name: index for index, name in enumerate(known_types)}
    rows = np.flatnonzero(fits)
    for size in set(type_length[rows].tolist()) & {len(name) for name in codes}:
        chosen = rows[type_length[rows] == size]
        raw = records_at(data, offsets[chosen] + header_size[chosen].astype(np.int64), np.dtype(f"V{size}"))
        kinds[chosen] = [codes.get(value, -1) for value in raw.tolist()]
    return kinds


def content_type(data: np.ndarray, offset: int, header: np.void, prefix: str) -> str:
    """The content type of the record at ``offset`` (its lengths checked), ``_CONTENT_PREFIX`` removed."""
    start = offset + int(header["header_size"])
    return bytes(data[start : start + int(header["type_length"])]).decode("utf-8", "replace").removeprefix(
        prefix)


def walk_records(mapped: mmap.mmap, data: np.ndarray, start: int, end: int,
                 known_types: tuple[bytes, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`_record_table` of ``data[start:end]``, walked ``RECORD_WALK_WINDOW`` bytes at a time (`walk_windows`)."""
    parts = list(walk_windows(mapped, data, start, end, known_types))
    return tuple(np.concatenate([part[index] for part in parts]) for index in range(3))


def walk_windows(mapped: mmap.mmap, data: np.ndarray, start: int, end: int,
                 known_types: tuple[bytes, ...]) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """`_record_table` of ``data[start:end]`` a window of ``RECORD_WALK_WINDOW`` bytes at a time, in file order:
    each window's pages are given back once the caller has taken its part (records are about a page long, so the
    walk maps in every page of the file).

    A window's walk lists the records wholly inside it, then stops at the first that is not: one crossing the
    window's end is walked again at the start of the next window (which reaches at least to its end), so only
    the last window can stop at a bad record, where the walk of the whole range stops too.
    """
    position, reach = start, start
    while True:
        stop = min(end, max(position + RECORD_WALK_WINDOW, reach))
        offsets, headers, kinds = _record_table(data, position, stop, known_types)
        lengths = headers["record_length"].astype(np.int64)
        inside = (lengths >= RECORD_HEADER_SIZE) & (lengths <= stop - offsets[: len(headers)])
        whole = int(np.argmin(inside)) if not inside.all() else len(headers)
        last = stop == end or (whole < len(headers) and lengths[whole] < RECORD_HEADER_SIZE)
        # The end, or a bad length: the whole walk stops there too.
        yield (offsets, headers, kinds) if last else (offsets[:whole], headers[:whole], kinds[:whole])
        release_pages(mapped, position, stop)
        if last:
            return
        if whole == len(offsets):  # every record inside: the next one starts where the last one ends
            position = reach = int(offsets[-1] + lengths[-1])
        else:  # the first record not inside (its header cut, or its end past the window's) starts the next window
            position = int(offsets[whole])
            reach = position + (int(lengths[whole]) if whole < len(headers) else RECORD_HEADER_SIZE)


@dataclass
class RecordWalk:
    """Every record of a bundle (`walk_records`): its byte offset, its header (``RECORD_HEADER_DTYPE``) and the
    index in ``KNOWN_CHUNKS`` of its content type."""

    offsets: np.ndarray
    headers: np.ndarray
    kinds: np.ndarray


# What `map_bundle` hands a chunk visitor for each window of the walk, while the window's pages are mapped: the
# file's bytes, per chunk type used the payloads (starts, lengths) of its chunks found in the window, and the
# profiling sessions (devices) begun so far.
ChunkVisitor = Callable[[np.ndarray, dict[str, tuple[np.ndarray, np.ndarray]], int], None]


def map_bundle(path: Path, file: BinaryIO, size: int, visit: Optional[ChunkVisitor] = None) -> tuple[
        mmap.mmap, np.ndarray, dict[str, Chunks], int, Optional[RecordWalk]]:
    """Map the bundle and check its header and records: (the map, its bytes, the payloads of each chunk type used,
    its number of profiling sessions: one per device the run drove, and for several its records' walk, which the
    split into devices reads again: `sectionmark.readers.devices`). ``visit``: called for each window of the
    walk with its chunks (`ChunkVisitor`), before the records are all checked: what it finds counts only once
    this returns."""
    file.seek(0)
    header = file.read(_FILE_HEADER.size)
    if len(header) < _FILE_HEADER.size:
        raise corrupt(path, "file is shorter than its header")
    magic, major, _minor, header_length, _flags, file_length = _FILE_HEADER.unpack(header)
    if magic != BUNDLE_MAGIC:
        raise corrupt(path, "bad magic")
    if major != 1:
        raise UnsupportedLayout(f"bundle version {major}")
    if file_length == 0:
        raise corrupt(path, "the profiling session was not finished; did the run crash?")
    if file_length > size:
        raise corrupt(path, f"truncated: {size} of {file_length} bytes")
    if header_length < _FILE_HEADER.size or header_length > file_length:
        raise corrupt(path, "bad header length")
    # Mapped, not read: only the chunks used are copied (once, into their record arrays).
    mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    if len(mapped) < file_length:
        raise corrupt(path, f"truncated: {len(mapped)} of {file_length} bytes")
    data = np.frombuffer(mapped, np.uint8, count=file_length)
    return (mapped, data, *_bundle_chunks(path, mapped, data, header_length, file_length, visit))


@dataclass
class _Checked:
    """A record as `_bundle_chunks` checked it, with what names it: the first failing one (in file order) is
    raised; every session begin is kept, its end known only after the walk."""

    index: int  # among all records
    offset: int
    header: np.void
    after_end: bool
    lengths_ok: bool
    known_type: bool
    begin_ok: bool
    content_type: str  # of a chunk of an unknown type, else ""


def _bundle_chunks(path: Path, mapped: mmap.mmap, data: np.ndarray, header_length: int, file_length: int,
                   visit: Optional[ChunkVisitor]) -> tuple[dict[str, Chunks], int, Optional[RecordWalk]]:
    """Walk the records of ``data[:file_length]``: check their framing and session, return the payloads of the
    chunks we use and the number of sessions.

    Checked window by window over the table of record headers (not kept whole: 120 bytes per record, a long
    profile's hundreds of thousands), reporting the first record (in file order) that fails a check, and its
    first failed check. One session per device (a process driving several devices writes a begin for each, then
    their chunks, then an end for each): the first record begins one, any other begin comes before every end,
    and each begin has its end (known at the end of the walk: the begins are kept to check it then).
    """
    data = data[:file_length]
    parts: dict[str, list[tuple[np.ndarray, ...]]] = {name: [] for name in USED_CHUNKS}
    failure: Optional[_Checked] = None
    begins: list[_Checked] = []  # every session begin, failing or not (few: one per device)
    # The walk's windows while the bundle may hold several sessions (their begins come first): the split into
    # devices reads the records again (`RecordWalk`).
    kept: Optional[list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = []
    records = ends = dropped = 0
    broken = False  # a record's lengths stopped the walk
    offsets = np.zeros(0, np.int64)
    for offsets, headers, kinds in walk_windows(mapped, data, header_length, file_length, KNOWN_CONTENT_TYPES):
        complete = offsets[: len(headers)]
        record_length, header_size, record_type = (
            headers["record_length"], headers["header_size"].astype(np.uint64), headers["record_type"])
        lengths_ok = (  # each part within the record, so that the uint64 sum cannot wrap
            (header_size >= RECORD_HEADER_SIZE)
            & (headers["payload_length"] <= record_length)
            & (record_length <= (file_length - complete).astype(np.uint64))
            & (header_size + headers["type_length"] + headers["name_length"] + headers["payload_length"]
               == record_length)
        )
        known_type = np.isin(record_type, (_RECORD_SESSION_BEGIN, _RECORD_CHUNK, _RECORD_SESSION_END))
        first = np.arange(records, records + len(headers)) == 0
        began, ended = record_type == _RECORD_SESSION_BEGIN, record_type == _RECORD_SESSION_END
        ended_before = ends + np.cumsum(ended) - ended
        begin_ok = (began | ~first) & ~(began & (ended_before > 0))  # and the begin's end, checked after the walk
        # After every session begun has ended (a device's records may follow another's end: Vulkan's last clock
        # samples of device 1 come after device 0's session end).
        after_end = (ended_before >= len(begins) + np.cumsum(began)) & ~ended
        chunk = (record_type == _RECORD_CHUNK) & lengths_ok & known_type & begin_ok & ~after_end
        bad_chunk = chunk & (kinds < 0)
        failing = (after_end | ~lengths_ok | ~known_type | ~begin_ok
                   | (headers["chunk_flags"] & _CHUNK_TRUNCATED != 0) | (ended & (headers["status"] != 0)) | bad_chunk)

        def failure_at(row: int) -> _Checked:
            offset = int(complete[row])
            kind = content_type(data, offset, headers[row], _CONTENT_PREFIX) if bad_chunk[row] else ""
            return _Checked(records + row, offset, headers[row].copy(), bool(after_end[row]), bool(lengths_ok[row]),
                            bool(known_type[row]), bool(begin_ok[row]), kind)

        broken |= not lengths_ok.all()
        if failure is None and failing.any():
            failure = failure_at(int(np.argmax(failing)))
        begins += [failure_at(row) for row in np.flatnonzero(began).tolist()]
        payload_start = complete + (header_size + headers["type_length"] + headers["name_length"]).astype(np.int64)
        payload_length = headers["payload_length"].astype(np.int64)
        found = {}
        for index, name in enumerate(USED_CHUNKS):
            rows = np.flatnonzero(chunk & (kinds == index))
            parts[name].append((payload_start[rows], payload_length[rows], headers["device"][rows],
                                headers["queue"][rows]))
            found[name] = parts[name][-1][:2]
        if visit is not None:
            visit(data, found, len(begins))
        if kept is not None:
            kept.append((complete, headers, kinds))
            if len(begins) <= 1 and chunk.any():  # one device's: the usual, and not kept (a later begin: walked again)
                kept = None
        records, ends = records + len(headers), ends + int(ended.sum())
        dropped += sum(headers["dropped"].tolist()) if headers["dropped"].any() else 0
    # A begin past the ends' count has no end of its own (the first one aside: a session that never ended). Not
    # when a record's lengths broke the walk: the ends after it were never reached, and a record before it is the
    # error (IREE 3.13 now and then writes a record header twice in a profile of several devices).
    unended = {begin.index for number, begin in enumerate(begins, 1) if number > max(ends, 1) and not broken}
    for checked in [*begins, *([failure] if failure else [])]:
        checked.begin_ok &= checked.index not in unended
    failures = [checked for checked in (failure, *(begin for begin in begins if begin.index in unended))
                if checked is not None]
    if failures:
        first_failure = min(failures, key=lambda checked: checked.index)
        _raise_record_error(path, first_failure.offset, first_failure.header, first_failure.after_end,
                            first_failure.lengths_ok, first_failure.known_type, first_failure.begin_ok,
                            first_failure.content_type)
    if len(offsets) > len(headers):  # the last window's walk stopped at a record whose header is cut short
        where = "record after the session end" if ends else "truncated record"
        raise corrupt(path, f"{where} at byte {offsets[-1]}")
    if not ends:
        raise corrupt(path, "no session end record")
    if dropped:
        raise SectionmarkError(
            f"{path}: the profiler dropped {dropped} records, so times would be incomplete; profile fewer iterations"
        )
    walk = None
    if len(begins) > 1:
        walk = RecordWalk(*(walk_records(mapped, data, header_length, file_length, KNOWN_CONTENT_TYPES) if kept is None
                            else (np.concatenate([window[column] for window in kept]) for column in range(3))))
    return ({name: Chunks(*(np.concatenate([part[column] for part in parts[name]]) for column in range(4)))
             for name in USED_CHUNKS}, len(begins), walk)


def _raise_record_error(path: Path, offset: int, header: np.void, after_end: bool, lengths_ok: bool,
                        known_type: bool, begin_ok: bool, content_type: str) -> None:
    """Raise the first check the record at byte ``offset`` fails, in the order of `sectionmark.readers.ireeprof`'s list."""
    if after_end:
        raise corrupt(path, f"record after the session end at byte {offset}")
    if not lengths_ok:
        raise corrupt(path, f"inconsistent record lengths at byte {offset}")
    if not known_type:
        raise corrupt(path, f"unknown record type {header['record_type']} at byte {offset}")
    if not begin_ok:
        raise corrupt(path, f"the session begin record must come first, and once per device (byte {offset})")
    if header["chunk_flags"] & _CHUNK_TRUNCATED:
        raise SectionmarkError(f"{path}: the profiler truncated a chunk, so times would be incomplete")
    if header["record_type"] == _RECORD_SESSION_END:
        raise SectionmarkError(f"{path}: the profiling session ended with IREE status code {header['status']}")
    if not content_type.isprintable():  # not a type IREE does not know: bytes of something else where it belongs
        raise corrupt(path, f"damaged record at byte {offset}: its content type is not text")
    raise corrupt(path, f"unknown chunk type {content_type[:80]!r} at byte {offset}")
