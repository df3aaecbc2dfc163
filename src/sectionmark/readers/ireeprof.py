"""Read an IREE HAL profile into compact numpy arrays, refusing anything inconsistent.

Two readers produce the same :class:`Profile`:

* the bundle reader decodes the ``.ireeprof`` file itself. Events are fixed
  size records, gathered from the mapped file with whole-array numpy
  operations, and every check below is one over the whole table (a million
  dispatches in a fraction of a second); the record walk and the split of the
  host events into tables run in C (``_ireeprof.c``) when the extension is
  built, with the same results in numpy when not. It only accepts the bundle layout it was checked
  against (bundle 1.x with 152-byte host execution events and 120-byte command
  operations, as written by IREE 3.13) and says so when a record looks different;
* the JSONL reader streams ``iree-profile export --format=ireeperf-jsonl``
  (schema-versioned, slower). ``read_profile`` falls back to it when the bundle
  reader does not recognise a layout, and it reads exported ``.jsonl`` files.

What we keep (see docs/profile-json.md for how it is used):

* ``dispatches``: one row per timed dispatch (host execution event of type
  dispatch): submission, command buffer id, command index, key (index into
  ``keys``), device/queue, start/end ns on IREE's host clock, and the summed
  per-workgroup time (``tile_ns``: CPU time across worker threads) and the
  number of tiles (``tile_count``); both 0 where the driver records no tiles
  (Vulkan, Tracy captures);
* ``submissions``: one row per executed command buffer (host execution event of
  type execute), in submission order: the unit we group into calls;
* ``command_buffers``: for every runtime command buffer id, its recorded
  commands ``(command_index, op, key)`` — the sequence matched against the
  section map;
* ``exports``: the executable functions of the loaded module(s), which the
  section map's module fingerprint is checked against.
* ``queue_ops``: the queue operations outside command buffers (host
  execution events of type alloca, dealloca, fill, copy, update, read, write,
  barrier, host call): the time of a call beside its dispatches;
* ``memory``: memory events (``memory-events`` family): pool reservations and
  queue allocations with the pool's live bytes after each, for device memory.

A profile has no checksum, so a wrong number is caught only when it makes the
profile inconsistent. Both readers check the same things, and anything else is
one error line naming the problem (docs/limitations.md lists what cannot be
detected):

* structure: known record, chunk and event types (chunks that carry no CPU
  dispatch timing are skipped by name, ``IGNORED_CHUNKS``), no truncated chunk,
  no dropped records, the session ended OK and every event has status OK;
* identity: no event recorded twice (a duplicated execution would be a phantom
  call; memory events included), no command or executable function recorded twice with different
  contents;
* time: timestamps in [0, 2^62), no event ending before it starts or lasting
  more than an hour, a session shorter than 30 days, every dispatch inside the
  execution of its command buffer;
* links: every dispatch belongs to an execution of the command buffer it names,
  every executed command buffer is recorded, and every execution has exactly
  one event for each of its dispatches that runs workgroups (a static count
  above zero; dispatches with zero workgroups leave no event).
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import subprocess
import threading
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path
from typing import Any, BinaryIO, Iterable, Iterator, Optional

import numpy as np

from sectionmark.errors import SectionmarkError
from sectionmark.artifacts.files import open_regular
from sectionmark.artifacts.tools import find_tool, last_useful_line

try:  # the passes over every event in C (setup.py builds it when a compiler is present)
    from sectionmark.readers import _ireeprof as _native
except ImportError:
    _native = None


def native() -> Any:
    """The C extension's module, or None when it is not built (or switched off, as tests do to compare).

    A build older than ``DISPATCH_DTYPE`` (other row sizes) would write rows
    of the wrong width, so it is not used (set after ``DISPATCH_DTYPE`` below).
    """
    return _native


DISPATCH_DTYPE = np.dtype(
    [
        ("submission", "<u8"),
        ("command_buffer", "<u8"),
        ("command_index", "<u4"),
        ("key", "<u4"),
        ("device", "<u4"),
        ("queue", "<u4"),
        ("start_ns", "<i8"),
        ("end_ns", "<i8"),
        ("tile_ns", "<u8"),
        ("tile_count", "<u8"),
    ]
)
# DISPATCH_DTYPE plus slot and call: attribute.ATTRIBUTED_DTYPE (the C code writes both row sizes).
if _native is not None and (getattr(_native, "DISPATCH_SIZE", None), getattr(_native, "ATTRIBUTED_SIZE", None)) != (
        DISPATCH_DTYPE.itemsize, DISPATCH_DTYPE.itemsize + 8):
    _native = None  # a stale build of _ireeprof.c: the numpy passes give the same results
SUBMISSION_DTYPE = np.dtype(
    [("submission", "<u8"), ("command_buffer", "<u8"), ("start_ns", "<i8"), ("end_ns", "<i8")]
)
# Queue operations outside command buffers (host execution events other than dispatch and execute):
# allocations, transfers, barriers, host calls. ``type`` is the event type (EVENT_NAMES).
QUEUE_OP_DTYPE = np.dtype(
    [("submission", "<u8"), ("type", "<u4"), ("start_ns", "<i8"), ("end_ns", "<i8"), ("payload_bytes", "<u8")]
)
# Memory lifecycle events (memory-events family). ``pool_reserved``: the pool's bytes in live
# reservations after the event, valid where ``flags`` has MEMORY_POOL_STATS.
MEMORY_DTYPE = np.dtype(
    [("time_ns", "<i8"), ("type", "<u4"), ("flags", "<u4"), ("submission", "<u8"), ("allocation", "<u8"),
     ("pool", "<u8"), ("length", "<u8"), ("pool_reserved", "<u8")]
)

# Command operation type codes (iree_hal_profile_command_operation_type_t).
OPERATION_NAMES = {
    1: "barrier",
    2: "dispatch",
    3: "fill",
    4: "copy",
    5: "update",
    6: "profile_marker",
    7: "branch",
    8: "cond_branch",
    9: "return",
}
# Host execution event types (iree_hal_profile_queue_event_type_t), named as iree-profile exports them.
# Dispatch and execute events are the timed work of command buffers; the others are queue operations
# outside command buffers (kept as ``Profile.queue_ops``).
EVENT_NAMES = {
    1: "barrier",
    2: "dispatch",
    3: "execute",
    4: "copy",
    5: "fill",
    6: "update",
    7: "read",
    8: "write",
    9: "alloca",
    10: "dealloca",
    11: "host_call",
}
EVENT_DISPATCH = 2
EVENT_EXECUTE = 3
# Memory event types (iree_hal_profile_memory_event_type_t), named as iree-profile exports them.
MEMORY_EVENT_NAMES = {
    1: "slab_acquire",
    2: "slab_release",
    3: "pool_reserve",
    4: "pool_materialize",
    5: "pool_release",
    6: "pool_wait",
    7: "queue_alloca",
    8: "queue_dealloca",
    9: "buffer_allocate",
    10: "buffer_free",
    11: "buffer_import",
    12: "buffer_unimport",
}
MEMORY_POOL_STATS = 1 << 4  # memory event flag: pool_bytes_reserved and the other pool figures are valid
INDIRECT_PARAMETERS = 1 << 1  # command operation flag: the workgroup count is read at run time

NO_INDEX = 0xFFFFFFFF
EXPORT_TIMEOUT_S = 600.0  # iree-profile export of a long profile takes seconds; a hang must not last

# Plausibility bounds: beyond them a profile is corrupt, and int64 sums of durations cannot overflow.
MAX_TIMESTAMP_NS = 1 << 62
MAX_EVENT_NS = 3600 * 10**9
MAX_SESSION_NS = 30 * 86400 * 10**9
MAX_JSONL_LINE_BYTES = 1 << 20

RecordedCommand = tuple[int, str, Optional[str]]  # (command_index, op, key or None)
_Command = tuple[str, Optional[str], bool]  # (op, key, timed): timed = one event per execution expected


@dataclass
class Profile:
    """The events of one profile, ready for attribution."""

    dispatches: np.ndarray  # DISPATCH_DTYPE, sorted by (submission, start_ns)
    submissions: np.ndarray  # SUBMISSION_DTYPE, sorted by submission
    keys: list[str]  # dispatch key (executable function name) by ``dispatches["key"]``
    command_buffers: dict[int, list[RecordedCommand]] = field(default_factory=dict)
    exports: dict[int, list[str]] = field(default_factory=dict)  # executable id -> its function names
    source: str = ""  # "bundle" or "jsonl": which reader produced it
    queue_ops: np.ndarray = field(default_factory=lambda: np.zeros(0, QUEUE_OP_DTYPE))  # sorted by (start, submission)
    memory: np.ndarray = field(default_factory=lambda: np.zeros(0, MEMORY_DTYPE))  # sorted by time


class _FallBack(Exception):
    """The bundle uses a record layout this reader was not checked against."""


def _corrupt(path: Path, what: str) -> SectionmarkError:
    return SectionmarkError(f"{path}: not a valid IREE profile ({what})")


def _run_failed(path: Path, event: str, event_id: int, status: int) -> SectionmarkError:
    return SectionmarkError(
        f"{path}: {event} event {event_id} finished with IREE status code {status}: the profiled run failed"
    )


# --------------------------------------------------------------------------- bundle

_MAGIC = b"IRPF"
_FILE_HEADER = struct.Struct("<4sHHIIQ")  # magic, major, minor, header_length, flags, file_length
_RECORD_HEADER_SIZE = 104
_RECORD_SESSION_BEGIN, _RECORD_CHUNK, _RECORD_SESSION_END = 1, 2, 3
_CHUNK_TRUNCATED = 1
_CONTENT_PREFIX = "application/vnd.iree.hal.profile."

USED_CHUNKS = ("executable-functions", "command-buffers", "command-operations", "host-execution-events",
               "memory-events")
# Chunk types that carry no CPU timing or memory figure we use: session metadata, queue submission
# events (their execution is in host-execution-events), device-side counters and traces. They are
# skipped; any other type is an error.
IGNORED_CHUNKS = frozenset(
    {
        "session", "devices", "queues", "executables", "clock-correlations", "queue-events",
        "queue-device-events", "event-relationships", "executable-code-objects",
        "executable-code-object-loads", "executable-traces", "counter-sets", "counters", "counter-samples",
        "device-metric-sources", "device-metric-descriptors", "device-metric-samples", "command-region-events",
    }
)
KNOWN_CHUNKS = USED_CHUNKS + tuple(sorted(IGNORED_CHUNKS))
_KNOWN_CONTENT_TYPES = tuple((_CONTENT_PREFIX + name).encode() for name in KNOWN_CHUNKS)
_DEVICE_TIMED = (
    "it has device-timed dispatch events (a GPU profile); sectionmark reports CPU (local-task) profiles, "
    "GPU sections are measured with Tracy"
)

_HOST_EVENT = np.dtype(
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
_MEMORY_EVENT = np.dtype(
    {
        "names": ["record_length", "type", "flags", "event_id", "time_ns", "allocation", "pool", "submission",
                  "device", "length", "pool_reserved"],
        "formats": ["<u4", "<u4", "<u4", "<u8", "<i8", "<u8", "<u8", "<u8", "<u4", "<u8", "<u8"],
        "offsets": [0, 4, 8, 16, 24, 32, 40, 56, 64, 104, 120],
        "itemsize": 160,
    }
)
_COMMAND_OPERATION = np.dtype(
    {
        "names": ["record_length", "type", "flags", "command_index", "command_buffer",
                  "executable_id", "function_ordinal", "workgroup_count"],
        "formats": ["<u4", "<u4", "<u4", "<u4", "<u8", "<u8", "<u4", ("<u4", (3,))],
        "offsets": [0, 4, 8, 12, 16, 32, 40, 48],
        "itemsize": 120,
    }
)
_COMMAND_BUFFER = np.dtype(
    {"names": ["record_length", "command_buffer"], "formats": ["<u4", "<u8"], "offsets": [0, 8], "itemsize": 48}
)
_FUNCTION_HEADER = struct.Struct("<IIQI")  # record_length, flags, executable_id, function_ordinal
_FUNCTION_NAME_LENGTH_OFFSET = 44
_FUNCTION_HEADER_SIZE = 64


_RECORD_HEADER_DTYPE = np.dtype(
    {
        "names": ["record_length", "payload_length", "header_size", "type_length", "name_length", "chunk_flags",
                  "dropped", "status", "record_type"],
        "formats": ["<u8", "<u8", "<u4", "<u4", "<u4", "<u8", "<u8", "<u4", "<u2"],
        "offsets": [0, 8, 56, 60, 64, 80, 88, 96, 100],
        "itemsize": _RECORD_HEADER_SIZE,
    }
)
_RECORD_LENGTH = struct.Struct("<Q")


@dataclass
class _Chunks:
    """The payloads of one chunk type: byte offsets into the file and lengths, in file order."""

    starts: np.ndarray  # int64
    lengths: np.ndarray  # int64

    def views(self, data: mmap.mmap) -> list[memoryview]:
        view = memoryview(data)
        return [view[start : start + length] for start, length in zip(self.starts.tolist(), self.lengths.tolist())]


def _records_at(data: np.ndarray, offsets: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The ``dtype`` records starting at byte ``offsets`` of ``data`` (uint8), gathered into one packed copy.

    Records of a bundle sit at any byte alignment, so ``data`` is viewed as one
    record starting at every byte (stride 1) and indexed once: no per-chunk
    Python work and no intermediate copy of the chunks.
    """
    if not len(offsets):
        return np.zeros(0, dtype)
    every_byte = np.ndarray((len(data) - dtype.itemsize + 1,), dtype, buffer=data, strides=(1,))
    return every_byte[offsets]


def _record_positions(chunks: _Chunks, itemsize: int) -> np.ndarray:
    """Byte offset of every fixed-size record of ``chunks``."""
    if (chunks.lengths % itemsize).any():
        bad = chunks.lengths[np.argmax(chunks.lengths % itemsize != 0)]
        raise _FallBack(f"{bad}-byte chunk is not a whole number of records")
    counts = chunks.lengths // itemsize
    # record k of the whole list, in chunk c: starts[c] + (k - index of c's first record) * itemsize
    base = np.repeat(chunks.starts - (np.cumsum(counts) - counts) * itemsize, counts)
    return base + np.arange(int(counts.sum()), dtype=np.int64) * itemsize


def _fixed_records(data: np.ndarray, chunks: _Chunks, dtype: np.dtype) -> np.ndarray:
    """All records of chunks of fixed-size records, checking each record's own length."""
    records = _records_at(data, _record_positions(chunks, dtype.itemsize), dtype)
    if len(records) and (records["record_length"] != dtype.itemsize).any():
        raise _FallBack("record length differs from the known layout")
    return records


def _record_table(data: np.ndarray, start: int, end: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Walk the records of ``data[start:end]``: (offsets, headers, kinds).

    ``offsets``: of every record; the walk stops after a record whose header is cut short or whose length is
    below a header's or past ``end`` (``_bundle_chunks`` reports it). ``headers`` (``_RECORD_HEADER_DTYPE``):
    of the records with a whole header (all but maybe the last); ``kinds``: the index in ``KNOWN_CHUNKS`` of
    each one's content type, -1 when it is none of them or its type string does not lie inside the record.
    In C when the extension is built.
    """
    if _native is not None:
        offsets, headers, kinds = _native.record_table(data, start, end, _KNOWN_CONTENT_TYPES)
        return (np.frombuffer(offsets, np.int64), np.frombuffer(headers, _RECORD_HEADER_DTYPE),
                np.frombuffer(kinds, np.int64))
    offsets, offset, unpack = [], start, _RECORD_LENGTH.unpack_from
    while offset < end:
        offsets.append(offset)
        if end - offset < _RECORD_HEADER_SIZE:
            break
        (length,) = unpack(data, offset)
        if length < _RECORD_HEADER_SIZE or length > end - offset:
            break
        offset += length
    whole = np.array(offsets[: len(offsets) - (end - offsets[-1] < _RECORD_HEADER_SIZE)] if offsets else [], np.int64)
    headers = _records_at(data, whole, _RECORD_HEADER_DTYPE)
    return np.array(offsets, np.int64), headers, _content_kinds(data, whole, headers, end)


def _content_kinds(data: np.ndarray, offsets: np.ndarray, headers: np.ndarray, end: int) -> np.ndarray:
    """``_record_table``'s kinds, with numpy: the type strings of each length are gathered and looked up once."""
    length, header_size = headers["record_length"], headers["header_size"].astype(np.uint64)
    type_length = headers["type_length"].astype(np.uint64)
    fits = ((length <= (end - offsets).astype(np.uint64)) & (header_size >= _RECORD_HEADER_SIZE)
            & (header_size <= length) & (type_length <= length - header_size))
    kinds = np.full(len(offsets), -1, np.int64)
    codes = {name: index for index, name in enumerate(_KNOWN_CONTENT_TYPES)}
    rows = np.flatnonzero(fits)
    for size in set(type_length[rows].tolist()) & {len(name) for name in codes}:
        chosen = rows[type_length[rows] == size]
        raw = _records_at(data, offsets[chosen] + header_size[chosen].astype(np.int64), np.dtype(f"V{size}"))
        kinds[chosen] = [codes.get(value, -1) for value in raw.tolist()]
    return kinds


def _content_type(data: np.ndarray, offset: int, header: np.void) -> str:
    """The content type of the record at ``offset`` (its lengths checked), ``_CONTENT_PREFIX`` removed."""
    start = offset + int(header["header_size"])
    return bytes(data[start : start + int(header["type_length"])]).decode("utf-8", "replace").removeprefix(
        _CONTENT_PREFIX)


def _bundle_chunks(path: Path, data: np.ndarray, header_length: int, file_length: int) -> dict[str, _Chunks]:
    """Walk the records of ``data[:file_length]``: check their framing and session, return the payloads of the
    chunks we use.

    Checked all at once over the table of record headers, reporting the first
    record (in file order) that fails a check, and its first failed check.
    """
    data = data[:file_length]
    offsets, headers, kinds = _record_table(data, header_length, file_length)
    complete = offsets[: len(headers)]
    record_length, header_size, record_type = (
        headers["record_length"], headers["header_size"].astype(np.uint64), headers["record_type"])
    lengths_ok = (  # each part within the record, so that the uint64 sum cannot wrap
        (header_size >= _RECORD_HEADER_SIZE)
        & (headers["payload_length"] <= record_length)
        & (record_length <= (file_length - complete).astype(np.uint64))
        & (header_size + headers["type_length"] + headers["name_length"] + headers["payload_length"] == record_length)
    )
    known_type = np.isin(record_type, (_RECORD_SESSION_BEGIN, _RECORD_CHUNK, _RECORD_SESSION_END))
    first = np.arange(len(headers)) == 0
    begin_ok = (record_type == _RECORD_SESSION_BEGIN) == first
    ended = record_type == _RECORD_SESSION_END
    after_end = np.concatenate([[0], np.cumsum(ended)[:-1]]) > 0 if len(headers) else np.zeros(0, bool)
    chunk = (record_type == _RECORD_CHUNK) & lengths_ok & known_type & begin_ok & ~after_end
    bad_chunk = chunk & (kinds < 0)
    failing = (after_end | ~lengths_ok | ~known_type | ~begin_ok | (headers["chunk_flags"] & _CHUNK_TRUNCATED != 0)
               | (ended & (headers["status"] != 0)) | bad_chunk)
    if failing.any():
        index = int(np.argmax(failing))
        offset = int(complete[index])
        content_type = _content_type(data, offset, headers[index]) if bad_chunk[index] else ""
        _raise_record_error(path, offset, headers[index], after_end[index], lengths_ok[index], known_type[index],
                            begin_ok[index], content_type)
    if len(complete) < len(offsets):
        where = "record after the session end" if ended.any() else "truncated record"
        raise _corrupt(path, f"{where} at byte {offsets[-1]}")
    if not ended.any():
        raise _corrupt(path, "no session end record")
    if headers["dropped"].any():
        dropped_records = sum(headers["dropped"].tolist())
        raise SectionmarkError(
            f"{path}: the profiler dropped {dropped_records} records, so times would be incomplete; "
            "profile fewer iterations"
        )
    payload_start = complete + (header_size + headers["type_length"] + headers["name_length"]).astype(np.int64)
    payload_length = headers["payload_length"].astype(np.int64)
    return {name: _Chunks(payload_start[chunk & (kinds == index)], payload_length[chunk & (kinds == index)])
            for index, name in enumerate(USED_CHUNKS)}


def _raise_record_error(path: Path, offset: int, header: np.void, after_end: bool, lengths_ok: bool,
                        known_type: bool, begin_ok: bool, content_type: str) -> None:
    """Raise the first check the record at byte ``offset`` fails, in the order of the module docstring."""
    if after_end:
        raise _corrupt(path, f"record after the session end at byte {offset}")
    if not lengths_ok:
        raise _corrupt(path, f"inconsistent record lengths at byte {offset}")
    if not known_type:
        raise _corrupt(path, f"unknown record type {header['record_type']} at byte {offset}")
    if not begin_ok:
        raise _corrupt(path, f"the session begin record must come first, and once (byte {offset})")
    if header["chunk_flags"] & _CHUNK_TRUNCATED:
        raise SectionmarkError(f"{path}: the profiler truncated a chunk, so times would be incomplete")
    if header["record_type"] == _RECORD_SESSION_END:
        raise SectionmarkError(f"{path}: the profiling session ended with IREE status code {header['status']}")
    if content_type == "dispatch-events":
        raise SectionmarkError(f"{path}: {_DEVICE_TIMED}")
    raise _corrupt(path, f"unknown chunk type {content_type[:80]!r} at byte {offset}")


def _executable_functions(path: Path, payloads: list[memoryview]) -> dict[tuple[int, int], str]:
    """``(executable_id, function ordinal) -> name`` from the variable-length function records."""
    functions: dict[tuple[int, int], str] = {}
    for payload in payloads:
        position = 0
        while position < len(payload):
            if len(payload) - position < _FUNCTION_HEADER_SIZE:
                raise _corrupt(path, "truncated executable function record")
            length, _flags, executable_id, ordinal = _FUNCTION_HEADER.unpack_from(payload, position)
            (name_length,) = struct.unpack_from("<I", payload, position + _FUNCTION_NAME_LENGTH_OFFSET)
            if length != _FUNCTION_HEADER_SIZE + name_length or length > len(payload) - position:
                raise _FallBack("executable function record layout")
            name_start = position + _FUNCTION_HEADER_SIZE
            name = bytes(payload[name_start : name_start + name_length]).decode("utf-8", "replace")
            _define_function(path, functions, executable_id, ordinal, name)
            position += length
    return functions


def _read_bundle(path: Path, file: BinaryIO, size: int) -> Profile:
    file.seek(0)
    header = file.read(_FILE_HEADER.size)
    if len(header) < _FILE_HEADER.size:
        raise _corrupt(path, "file is shorter than its header")
    magic, major, _minor, header_length, _flags, file_length = _FILE_HEADER.unpack(header)
    if magic != _MAGIC:
        raise _corrupt(path, "bad magic")
    if major != 1:
        raise _FallBack(f"bundle version {major}")
    if file_length == 0:
        raise _corrupt(path, "the profiling session was not finished; did the run crash?")
    if file_length > size:
        raise _corrupt(path, f"truncated: {size} of {file_length} bytes")
    if header_length < _FILE_HEADER.size or header_length > file_length:
        raise _corrupt(path, "bad header length")
    # Mapped, not read: only the chunks used are copied (once, into their record arrays).
    mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    if len(mapped) < file_length:
        raise _corrupt(path, f"truncated: {len(mapped)} of {file_length} bytes")
    data = np.frombuffer(mapped, np.uint8, count=file_length)
    chunks = _bundle_chunks(path, data, header_length, file_length)

    functions = _executable_functions(path, chunks["executable-functions"].views(mapped))

    def key_of(executable_id: int, ordinal: int) -> str:
        name = functions.get((executable_id, ordinal))
        if name is None:
            raise _corrupt(path, f"dispatch of unknown executable function {executable_id}:{ordinal}")
        return name

    declared = {record[1] for record in _fixed_records(data, chunks["command-buffers"], _COMMAND_BUFFER).tolist()}
    commands: dict[int, dict[int, _Command]] = {}
    for record in _fixed_records(data, chunks["command-operations"], _COMMAND_OPERATION).tolist():
        _length, op_type, flags, index, buffer_id, executable_id, ordinal, workgroups = record
        op = OPERATION_NAMES.get(op_type)
        if op is None:
            raise _FallBack(f"command operation type {op_type}")
        key = key_of(executable_id, ordinal) if op == "dispatch" else None
        _record_command(path, commands, buffer_id, index, (op, key, _timed(op, flags, workgroups)))

    # Key of each event: its (executable, function ordinal) looked up among the known functions,
    # packed into one 64-bit code (ids beyond 32 bits would wrap: no producer makes that many executables).
    known = sorted(functions)
    if known and known[-1][0] >= 1 << 32:
        raise _FallBack("executable ids beyond 32 bits")
    keys = list(dict.fromkeys(functions[pair] for pair in known))
    known_codes = np.array([(e << 32) | o for e, o in known], dtype=np.uint64)
    known_keys = np.array([keys.index(functions[pair]) for pair in known], dtype=np.uint32)
    host = _host_events(path, data, chunks["host-execution-events"], known_codes, known_keys)

    memory = _memory_events(path, data, chunks["memory-events"])
    return _finish(path, host.dispatches, host.submissions, keys, declared, commands, _exports(functions), "bundle",
                   host.queue_ops, memory, host.order)


def _memory_events(path: Path, data: np.ndarray, chunks: _Chunks) -> np.ndarray:
    """The memory events (MEMORY_DTYPE), each checked for layout, type and identity (in C when built)."""
    positions = _record_positions(chunks, _MEMORY_EVENT.itemsize)
    if _native is not None:
        memory = np.empty(len(positions), MEMORY_DTYPE)
        devices, event_ids = np.empty(len(positions), np.uint64), np.empty(len(positions), np.uint64)
        bad_length, unknown, increasing = _native.memory_events(data, positions, memory, devices, event_ids)
        types = memory["type"]
    else:
        events = _records_at(data, positions, _MEMORY_EVENT)
        bad_length = first_true(events["record_length"] != _MEMORY_EVENT.itemsize)
        types, devices, event_ids = events["type"], events["device"], events["event_id"]
        unknown = first_true(~np.isin(types, list(MEMORY_EVENT_NAMES)))
        memory, increasing = _columns(events, MEMORY_DTYPE, np.arange(len(events))), False
    if bad_length >= 0:
        raise _FallBack("record length differs from the known layout")
    if unknown >= 0:
        raise _corrupt(path, f"unknown memory event type {types[unknown]}")
    if not increasing:  # strictly increasing pairs are unique
        _check_unique(path, "a memory event", devices, event_ids)
    return memory


@dataclass
class _KnownOrder:
    """What a reader already established about its tables, so that ``_finish`` need not check it again."""

    times_plausible: bool = False  # every host event's times pass _check_times
    dispatches_sorted: bool = False  # dispatches in (submission, start) order (_by_submission_and_start's)


@dataclass
class _HostEvents:
    dispatches: np.ndarray
    submissions: np.ndarray
    queue_ops: np.ndarray
    order: _KnownOrder


def _host_events(path: Path, data: np.ndarray, chunks: _Chunks, known_codes: np.ndarray,
                 known_keys: np.ndarray) -> _HostEvents:
    """Split the host execution events into dispatches, submissions and queue operations, each dispatch keyed by
    the ``known_keys`` entry of its function's code (executable id << 32 | ordinal) among the sorted
    ``known_codes``; checks every event's layout, type, status, identity and function. In C when the extension
    is built (one pass over the events, which also checks times and orders), else with numpy."""
    positions = _record_positions(chunks, _HOST_EVENT.itemsize)
    order = _KnownOrder()
    if _native is not None:
        tables = [np.empty(len(positions), dtype) for dtype in (DISPATCH_DTYPE, SUBMISSION_DTYPE, QUEUE_OP_DTYPE)]
        (*sizes, bad_length, bad_type, failed, unknown, order.times_plausible, order.dispatches_sorted,
         increasing) = _native.host_events(data, positions, known_codes, known_keys, *tables)
        dispatches, submissions, queue_ops = (table[:size] for table, size in zip(tables, sizes))
        events = None
    else:
        events = _records_at(data, positions, _HOST_EVENT)
        bad_length, bad_type, failed = (
            first_true(wrong)
            for wrong in (events["record_length"] != _HOST_EVENT.itemsize, ~np.isin(events["type"], list(EVENT_NAMES)),
                          events["status_code"] != 0)
        )
        types = events["type"]
        raw = np.flatnonzero(types == EVENT_DISPATCH)  # positions: indexing whole 152-byte records would copy them all
        dispatches = _columns(events, DISPATCH_DTYPE, raw, skip=("key",))
        dispatches["key"], unknown = _lookup_keys(events["executable_id"][raw], events["function_ordinal"][raw],
                                                  known_codes, known_keys)
        unknown = int(raw[unknown]) if unknown >= 0 else -1
        submissions = _columns(events, SUBMISSION_DTYPE, np.flatnonzero(types == EVENT_EXECUTE))
        queue_ops = _columns(events, QUEUE_OP_DTYPE, np.flatnonzero((types != EVENT_DISPATCH) & (types != EVENT_EXECUTE)))
        increasing = False

    def record(index: int) -> np.void:
        return _records_at(data, positions[[index]], _HOST_EVENT)[0]

    if bad_length >= 0:
        raise _FallBack("record length differs from the known layout")
    if bad_type >= 0:
        raise _corrupt(path, f"unknown host execution event type {record(bad_type)['type']}")
    if failed >= 0:
        bad = record(failed)
        raise _run_failed(path, EVENT_NAMES[int(bad["type"])], int(bad["event_id"]), int(bad["status_code"]))
    if not increasing:  # strictly increasing pairs are unique
        events = _records_at(data, positions, _HOST_EVENT) if events is None else events
        _check_unique(path, "a host execution event", events["stream"], events["event_id"])
    if unknown >= 0:
        bad = record(unknown)
        raise _corrupt(path, f"dispatch of unknown executable function {bad['executable_id']}:{bad['function_ordinal']}")
    return _HostEvents(dispatches, submissions, queue_ops, order)


def _lookup_keys(executable: np.ndarray, ordinal: np.ndarray, known_codes: np.ndarray,
                 known_keys: np.ndarray) -> tuple[np.ndarray, int]:
    """Each dispatch's key (0 where its function is unknown) and the index of the first unknown one (-1: none)."""
    codes = (executable << np.uint64(32)) | ordinal.astype(np.uint64)
    found = np.minimum(np.searchsorted(known_codes, codes), max(len(known_codes) - 1, 0))
    missing = (executable >= np.uint64(1 << 32)) | (
        known_codes[found] != codes if len(known_codes) else np.ones(len(codes), bool))
    keys = np.where(missing, 0, known_keys[found] if len(known_keys) else 0)
    return keys, first_true(missing)


def _columns(records: np.ndarray, dtype: np.dtype, rows: np.ndarray, skip: tuple[str, ...] = ()) -> np.ndarray:
    """The fields of ``dtype`` (but ``skip``) of raw records ``rows``, as a packed array (one gather per field)."""
    table = np.empty(len(rows), dtype)
    for name in dtype.names:
        if name not in skip:
            table[name] = records[name][rows]
    return table


# --------------------------------------------------------------------------- jsonl

_JSONL_SCHEMA_VERSIONS = {15}
# Record types of ireeperf-jsonl that carry no CPU dispatch timing (see IGNORED_CHUNKS); any
# type neither here nor read below is an error.
IGNORED_JSONL_RECORDS = frozenset(
    {
        "device", "queue", "executable", "clock_correlation", "queue_event", "queue_device_event",
        "event_relationship", "counter_set", "counter", "counter_sample",
        "device_metric_source", "device_metric_descriptor", "device_metric_sample", "command_region_event",
        "executable_trace",
    }
)
_U32, _U64 = (0, (1 << 32) - 1), (0, (1 << 64) - 1)
_I64 = (-(1 << 63), (1 << 63) - 1)


class _BadRow(ValueError):
    """A JSONL row field with the wrong type or range."""


def _checked_int(value: Any, name: str, bounds: tuple[int, int]) -> int:
    if type(value) is not int or not bounds[0] <= value <= bounds[1]:
        raise _BadRow(f"'{name}' must be an integer in [{bounds[0]}, {bounds[1]}], got {str(value)[:40]!r}")
    return value


def _int(row: dict, name: str, bounds: tuple[int, int]) -> int:
    return _checked_int(row[name], name, bounds)


def _text(row: dict, name: str) -> str:
    value = row[name]
    if not isinstance(value, str):
        raise _BadRow(f"'{name}' must be a string, got {str(value)[:40]!r}")
    return value


class _JsonlProfile:
    """Accumulates the rows of an ireeperf-jsonl stream."""

    _READERS = {
        "schema": "_schema", "session": "_session", "diagnostic": "_diagnostic",
        "executable_function": "_executable_function", "command_buffer": "_command_buffer",
        "command_operation": "_command_operation", "host_execution_event": "_host_execution_event",
        "memory_event": "_memory_event",
    }

    def __init__(self, path: Path):
        self.path = path
        self.keys: list[str] = []
        self.key_ids: dict[str, int] = {}
        self.dispatch_rows: list[tuple] = []
        self.submission_rows: list[tuple] = []
        self.queue_op_rows: list[tuple] = []
        self.memory_rows: list[tuple] = []
        self.memory_ids: list[tuple[int, int]] = []  # (device, event id)
        self.event_ids: list[tuple[int, int]] = []
        self.declared: set[int] = set()
        self.commands: dict[int, dict[int, _Command]] = {}
        self.functions: dict[tuple[int, int], str] = {}
        self.saw_schema = False
        self.ended = False

    def add(self, row: Any) -> None:
        if not isinstance(row, dict):
            raise _BadRow("a row must be a JSON object")
        kind = _text(row, "record_type")
        if kind in self._READERS:
            getattr(self, self._READERS[kind])(row)
        elif kind == "dispatch_event":
            raise SectionmarkError(f"{self.path}: {_DEVICE_TIMED}")
        elif kind not in IGNORED_JSONL_RECORDS:
            raise _BadRow(f"unknown record type {kind[:80]!r}")

    def _schema(self, row: dict) -> None:
        if row.get("format") != "ireeperf-jsonl" or row.get("schema_version") not in _JSONL_SCHEMA_VERSIONS:
            raise SectionmarkError(
                f"{self.path}: unsupported profile export schema {row.get('format')!r} "
                f"version {row.get('schema_version')!r} (expected ireeperf-jsonl {sorted(_JSONL_SCHEMA_VERSIONS)})"
            )
        self.saw_schema = True

    def _session(self, row: dict) -> None:
        event = _text(row, "event")
        if event == "end":
            self.ended = True
            if _int(row, "session_status_code", _U32) != 0:
                raise SectionmarkError(f"{self.path}: the profiling session ended with status {row.get('session_status')}")
        elif event != "begin":
            raise _BadRow(f"unknown session event {event[:40]!r}")

    def _diagnostic(self, row: dict) -> None:
        if row.get("severity") == "error":
            raise SectionmarkError(f"{self.path}: iree-profile reports: {str(row.get('message'))[:200]}")

    def _executable_function(self, row: dict) -> None:
        _define_function(self.path, self.functions, _int(row, "executable_id", _U64),
                         _int(row, "function_ordinal", _U32), _text(row, "name"))

    def _command_buffer(self, row: dict) -> None:
        self.declared.add(_int(row, "command_buffer_id", _U64))

    def _command_operation(self, row: dict) -> None:
        op = _text(row, "op")
        if op not in OPERATION_NAMES.values():
            raise _BadRow(f"unknown command operation {op[:40]!r}")
        workgroups = row["workgroup_count"]
        if not isinstance(workgroups, list) or len(workgroups) != 3:
            raise _BadRow("'workgroup_count' must be a list of 3 integers")
        counts = [_checked_int(value, "workgroup_count", _U32) for value in workgroups]
        key = _text(row, "key") if op == "dispatch" else None
        command = (op, key, _timed(op, _int(row, "flags", _U32), counts))
        _record_command(self.path, self.commands, _int(row, "command_buffer_id", _U64),
                        _int(row, "command_index", _U32), command)

    def _host_execution_event(self, row: dict) -> None:
        op, type_value = _text(row, "op"), _int(row, "type_value", _U32)
        if EVENT_NAMES.get(type_value) != op:
            raise _BadRow(f"host execution event op {op[:40]!r} does not match its type_value {type_value}")
        event_id = _int(row, "event_id", _U64)
        self.event_ids.append((_int(row, "stream_id", _U64), event_id))
        status = _int(row, "status_code", _U32)
        if status != 0:
            raise _run_failed(self.path, op, event_id, status)
        if row["valid"] is not True:
            raise _BadRow(f"{op} event {event_id} is marked invalid")
        start, end = _int(row, "start_host_time_ns", _I64), _int(row, "end_host_time_ns", _I64)
        if _int(row, "duration_ns", _I64) != end - start:
            raise _BadRow(f"{op} event {event_id}: duration_ns differs from its end - start")
        submission, buffer = _int(row, "submission_id", _U64), _int(row, "command_buffer_id", _U64)
        if op not in ("dispatch", "execute"):
            self.queue_op_rows.append((submission, type_value, start, end, _int(row, "payload_length", _U64)))
            return
        if op == "execute":
            self.submission_rows.append((submission, buffer, start, end))
            return
        key = _text(row, "key")
        key_id = self.key_ids.setdefault(key, len(self.keys))
        if key_id == len(self.keys):
            self.keys.append(key)
        self.dispatch_rows.append(
            (submission, buffer, _int(row, "command_index", _U32), key_id, _int(row, "physical_device_ordinal", _U32),
             _int(row, "queue_ordinal", _U32), start, end, _int(row, "tile_duration_sum_ns", (0, _I64[1])),
             _int(row, "tile_count", _U64))
        )

    def _memory_event(self, row: dict) -> None:
        kind, type_value = _text(row, "event_type"), _int(row, "event_type_value", _U32)
        if MEMORY_EVENT_NAMES.get(type_value) != kind:
            raise _BadRow(f"memory event type {kind[:40]!r} does not match its event_type_value {type_value}")
        self.memory_ids.append((_int(row, "physical_device_ordinal", _U32), _int(row, "event_id", _U64)))
        self.memory_rows.append(
            (_int(row, "host_time_ns", _I64), type_value, _int(row, "flags", _U32), _int(row, "submission_id", _U64),
             _int(row, "allocation_id", _U64), _int(row, "pool_id", _U64), _int(row, "length", _U64),
             _int(row, "pool_bytes_reserved", _U64))
        )

    def finish(self) -> Profile:
        if not self.saw_schema:
            raise _corrupt(self.path, "no ireeperf-jsonl schema row")
        if not self.ended:
            raise _corrupt(self.path, "no session end row")
        streams, events = (np.array(column, np.uint64) for column in zip(*self.event_ids)) if self.event_ids else (
            np.zeros(0, np.uint64), np.zeros(0, np.uint64))
        _check_unique(self.path, "a host execution event", streams, events)
        devices, ids = (np.array(column, np.uint64) for column in zip(*self.memory_ids)) if self.memory_ids else (
            np.zeros(0, np.uint64), np.zeros(0, np.uint64))
        _check_unique(self.path, "a memory event", devices, ids)
        dispatches = np.array(self.dispatch_rows, dtype=DISPATCH_DTYPE)
        submissions = np.array(self.submission_rows, dtype=SUBMISSION_DTYPE)
        return _finish(self.path, dispatches, submissions, self.keys, self.declared, self.commands,
                       _exports(self.functions), "jsonl", np.array(self.queue_op_rows, dtype=QUEUE_OP_DTYPE),
                       np.array(self.memory_rows, dtype=MEMORY_DTYPE))


def _read_jsonl_lines(path: Path, lines: Iterable[tuple[int, str]]) -> Profile:
    profile = _JsonlProfile(path)
    for number, line in lines:
        if not line.strip():
            continue
        try:
            profile.add(json.loads(line))
        except SectionmarkError:
            raise
        except (_BadRow, ValueError, KeyError, TypeError, RecursionError) as error:
            what = f"missing field {error}" if isinstance(error, KeyError) else str(error)[:200]
            raise _corrupt(path, f"line {number}: {what}") from None
    return profile.finish()


def _lines(path: Path, stream: BinaryIO) -> Iterator[tuple[int, str]]:
    """Numbered UTF-8 lines, each read with a bound (a profile row is well under a megabyte)."""
    for number in count(1):
        raw = stream.readline(MAX_JSONL_LINE_BYTES + 1)
        if not raw:
            return
        if len(raw) > MAX_JSONL_LINE_BYTES:
            raise _corrupt(path, f"line {number} is longer than {MAX_JSONL_LINE_BYTES} bytes")
        try:
            yield number, raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise _corrupt(path, f"line {number} is not UTF-8 ({error.reason})") from None


def _export_jsonl(path: Path, timeout_s: float = EXPORT_TIMEOUT_S) -> Profile:
    """Stream ``iree-profile export`` output into the JSONL reader (the tool is ended after ``timeout_s``)."""
    tool = find_tool("iree-profile")
    process = subprocess.Popen(
        [str(tool), "export", "--format=ireeperf-jsonl", "--output=-", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    timed_out = threading.Event()

    def end() -> None:
        timed_out.set()
        process.kill()

    watchdog = threading.Timer(timeout_s, end)
    watchdog.start()
    reader_error: Optional[SectionmarkError] = None
    try:
        profile = _read_jsonl_lines(path, _lines(path, process.stdout))
    except SectionmarkError as error:
        reader_error = error
        process.kill()
    finally:
        watchdog.cancel()
        process.stdout.close()
    returncode = process.wait()
    if timed_out.is_set():
        raise SectionmarkError(f"{path}: iree-profile export did not finish within {timeout_s:g} s and was ended")
    stderr = process.stderr.read().decode("utf-8", "replace")
    if (reader_error is not None and stderr.strip()) or (reader_error is None and returncode != 0):
        raise SectionmarkError(f"{path}: iree-profile could not read it: {last_useful_line(stderr)}")
    if reader_error is not None:
        raise reader_error
    return profile


# --------------------------------------------------------------------------- common


def _timed(op: str, flags: int, workgroups: list[int]) -> bool:
    """A dispatch whose every execution must produce one event: static, non-zero workgroup count."""
    return op == "dispatch" and not flags & INDIRECT_PARAMETERS and min(workgroups) > 0


def _define_function(path: Path, functions: dict[tuple[int, int], str], executable: int, ordinal: int, name: str) -> None:
    if functions.setdefault((executable, ordinal), name) != name:
        raise _corrupt(path, f"executable function {executable}:{ordinal} is recorded twice with different names")


def _record_command(path: Path, commands: dict[int, dict[int, _Command]], buffer: int, index: int,
                    command: _Command) -> None:
    if commands.setdefault(buffer, {}).setdefault(index, command) != command:
        raise _corrupt(path, f"command {index} of command buffer {buffer} is recorded twice with different contents")


def _exports(functions: dict[tuple[int, int], str]) -> dict[int, list[str]]:
    exports: dict[int, list[str]] = {}
    for (executable, _ordinal), name in sorted(functions.items()):
        exports.setdefault(executable, []).append(name)
    return exports


def _check_unique(path: Path, what: str, first: np.ndarray, second: np.ndarray) -> None:
    """Error if two rows agree in both columns (a duplicated record)."""
    if len(first) < 2:
        return
    first, second = first.astype(np.uint64), second.astype(np.uint64)
    width = int(second.max()).bit_length()
    if int(first.max()).bit_length() + width <= 64:  # one sortable key: much faster than lexsort
        keys = (first << np.uint64(width)) | second
        if (keys[1:] > keys[:-1]).all():  # in increasing order, as IREE writes them: unique, no sort needed
            return
        keys = np.sort(keys, kind="stable")  # timsort: near-linear on the nearly sorted keys profiles have
        same = keys[1:] == keys[:-1]
        if same.any():
            key = int(keys[1:][same][0])
            raise _corrupt(path, f"{what} ({key >> width}, {key & ((1 << width) - 1)}) is recorded twice")
        return
    order = np.lexsort((second, first))
    first, second = first[order], second[order]
    same = (first[1:] == first[:-1]) & (second[1:] == second[:-1])
    if same.any():
        index = np.argmax(same)
        raise _corrupt(path, f"{what} ({first[index]}, {second[index]}) is recorded twice")


def _check_times(path: Path, dispatches: np.ndarray, submissions: np.ndarray, queue_ops: np.ndarray,
                 memory: np.ndarray, host_events_plausible: bool = False) -> None:
    """Every timestamp plausible, so that durations and their sums fit in int64.

    ``host_events_plausible``: the reader checked each host event's own times (dispatches, executions, queue
    operations) already; what spans tables is checked here either way.
    """
    if len(memory) and ((memory["time_ns"] < 0) | (memory["time_ns"] >= MAX_TIMESTAMP_NS)).any():
        raise _corrupt(path, f"a memory event has an impossible timestamp: {memory['time_ns'].min()} ns")
    if not host_events_plausible:
        _check_event_times(path, dispatches, submissions, queue_ops)
    if len(submissions) and submissions["end_ns"].max() - submissions["start_ns"].min() > MAX_SESSION_NS:
        raise _corrupt(path, "its command-buffer executions span more than 30 days")


def _check_event_times(path: Path, dispatches: np.ndarray, submissions: np.ndarray, queue_ops: np.ndarray) -> None:
    """Each host event starts at a plausible time and ends after it, within an hour; tile times are not negative."""
    for what, table in (("dispatch", dispatches), ("command-buffer execution", submissions), ("queue operation", queue_ops)):
        start, end = table["start_ns"], table["end_ns"]
        if not len(start):
            continue
        duration = end - start
        if start.min() >= 0 and duration.min() >= 0 and end.max() < MAX_TIMESTAMP_NS and duration.max() <= MAX_EVENT_NS:
            continue  # all plausible: four reductions, no masks (those only find the culprit)
        impossible = (start < 0) | (end < start) | (end >= MAX_TIMESTAMP_NS)
        if impossible.any():
            index = np.argmax(impossible)
            raise _corrupt(path, f"a {what} event has impossible timestamps: {start[index]} to {end[index]} ns")
        too_long = end - start > MAX_EVENT_NS
        if too_long.any():
            index = np.argmax(too_long)
            raise _corrupt(path, f"a {what} event lasts {(end[index] - start[index]) / 1e9:.0f} s (more than an hour)")
    if len(dispatches) and (dispatches["tile_ns"] >= np.uint64(1 << 63)).any():
        raise _corrupt(path, "a dispatch event has a negative tile time")


def first_true(mask: np.ndarray) -> int:
    """Index of the first True of ``mask``; -1 when none is."""
    return int(np.argmax(mask)) if mask.any() else -1


def distinct(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` for a 1-D numeric array, by sorting: numpy 2's hash-based ``unique`` is many times
    slower on the large integer arrays of a profile."""
    ordered = np.sort(values, kind="stable")  # timsort: near-linear on the nearly sorted times and ids of profiles
    return ordered[np.concatenate([[True], ordered[1:] != ordered[:-1]])] if len(ordered) else ordered


def searchsorted_runs(ids: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``np.searchsorted(ids, values)``, looking up each run of equal values once: dispatches come grouped by
    submission (and so by command buffer), a few dozen per run, which makes this many times faster."""
    run_starts = np.concatenate([[0], np.flatnonzero(values[1:] != values[:-1]) + 1]) if len(values) else values
    if len(run_starts) > len(values) // 4:
        return np.searchsorted(ids, values)
    return np.repeat(np.searchsorted(ids, values[run_starts]), np.diff(np.append(run_starts, len(values))))


def _duplicate_command(ids: np.ndarray, rank: np.ndarray, command_index: np.ndarray) -> Optional[tuple[int, int]]:
    """The smallest (submission, command index) with two dispatch events (``ids[rank]``, ids sorted and unique).

    Counted in a table of (submission, command index) when that table is small (a profile's command buffers
    have few commands), else through sorting.
    """
    width = int(command_index.max()) + 1
    if len(ids) * width > 8 * len(rank) + 4096:
        first, second = ids[rank], command_index.astype(np.uint64)
        order = np.lexsort((second, first))
        first, second = first[order], second[order]
        same = (first[1:] == first[:-1]) & (second[1:] == second[:-1])
        return (int(first[np.argmax(same)]), int(second[np.argmax(same)])) if same.any() else None
    counts = np.bincount(rank * width + command_index, minlength=len(ids) * width)
    if not (counts > 1).any():
        return None
    code = int(np.argmax(counts > 1))
    return int(ids[code // width]), code % width


@dataclass
class _LinkFailures:
    """The first dispatch (index) failing each link check, -1 for none; see ``_check_links``."""

    orphan: int  # its submission executes no command buffer
    wrong_buffer: int  # names another command buffer than its submission executes
    outside: int  # runs outside its submission's execution
    duplicate: Optional[tuple[int, int]]  # (submission, command index) with two events
    short: int  # first submission (rank) with fewer timed dispatch events than its command buffer has
    found: np.ndarray  # timed dispatch events per submission


def _link_failures(dispatches: np.ndarray, submissions: np.ndarray, buffer_ids: np.ndarray,
                   timed: list[list[int]]) -> _LinkFailures:
    """Every link check over all dispatches (in C when built, else numpy).

    ``buffer_ids``: sorted ids of the recorded command buffers, among them every executed one; ``timed``: the
    timed command indices of each.
    """
    ids = submissions["submission"]
    expected = np.array([len(indices) for indices in timed], np.int64)
    if _native is not None:
        # Flat table: command i of buffer b is timed when timed_table[bases[b] + i] is 1.
        bases = np.concatenate([[0], np.cumsum([max(indices, default=-1) + 1 for indices in timed])]).astype(np.int64)
        timed_table = np.zeros(int(bases[-1]), np.uint8)
        for base, indices in zip(bases.tolist(), timed):
            timed_table[[base + index for index in indices]] = 1
        found = np.empty(len(ids), np.int64)
        orphan, wrong, outside, duplicate_rank, duplicate_index, short = _native.dispatch_links(
            dispatches, submissions, buffer_ids, bases, timed_table, expected, found)
        if duplicate_rank == -2:  # command indices too large for the C table
            rank = np.minimum(searchsorted_runs(ids, dispatches["submission"]), len(ids) - 1)
            duplicate = _duplicate_command(ids, rank, dispatches["command_index"].astype(np.int64))
        else:
            duplicate = None if duplicate_rank < 0 else (int(ids[duplicate_rank]), duplicate_index)
        return _LinkFailures(orphan, wrong, outside, duplicate, short, found)

    rank = np.minimum(searchsorted_runs(ids, dispatches["submission"]), len(ids) - 1)
    command_index = dispatches["command_index"].astype(np.int64)
    # Whether each dispatch is a timed command of its buffer: its (buffer, command index) code among the
    # sorted codes of the timed commands (a binary search among a few dozen: faster than np.isin).
    timed_codes = np.array(sorted((position << 32) | index for position, indices in enumerate(timed)
                                  for index in indices), np.uint64)
    buffer_of_execution = np.searchsorted(buffer_ids, submissions["command_buffer"]).astype(np.uint64)
    codes = (buffer_of_execution[rank] << np.uint64(32)) | command_index.astype(np.uint64)
    place = np.minimum(np.searchsorted(timed_codes, codes), max(len(timed_codes) - 1, 0))
    is_timed = timed_codes[place] == codes if len(timed_codes) else np.zeros(len(codes), bool)
    found = np.bincount(rank[is_timed], minlength=len(ids))
    return _LinkFailures(
        orphan=first_true(ids[rank] != dispatches["submission"]),
        wrong_buffer=first_true(submissions["command_buffer"][rank] != dispatches["command_buffer"]),
        outside=first_true((dispatches["start_ns"] < submissions["start_ns"][rank])
                      | (dispatches["end_ns"] > submissions["end_ns"][rank])),
        duplicate=_duplicate_command(ids, rank, command_index),
        short=first_true(found < expected[buffer_of_execution.astype(np.int64)]),
        found=found,
    )


def _check_links(
    path: Path, dispatches: np.ndarray, submissions: np.ndarray, command_buffers: dict[int, list[RecordedCommand]],
    timed: dict[int, set[int]],
) -> None:
    """Dispatches inside executions of their command buffer, one event per timed dispatch and execution."""
    ids = submissions["submission"]
    if len(ids) > 1 and (ids[1:] == ids[:-1]).any():
        raise _corrupt(path, f"submission {ids[1:][ids[1:] == ids[:-1]][0]} executes twice (duplicated records)")
    executed = submissions["command_buffer"].tolist()
    unknown = next((buffer for buffer in executed if buffer not in command_buffers), None)
    if unknown is not None:
        raise _corrupt(path, f"a command buffer ({unknown}) is executed but its recording is not in the profile")
    if not len(dispatches):
        return
    if not len(ids):
        raise _corrupt(path, f"a dispatch belongs to submission {dispatches['submission'][0]}, which executes no "
                             "command buffer")
    buffers = sorted(command_buffers)
    buffer_ids = np.array(buffers, np.uint64)
    failures = _link_failures(dispatches, submissions, buffer_ids, [sorted(timed[buffer]) for buffer in buffers])
    if failures.orphan >= 0:
        raise _corrupt(path, f"a dispatch belongs to submission {dispatches['submission'][failures.orphan]}, "
                             "which executes no command buffer")
    if failures.wrong_buffer >= 0:
        bad = dispatches[failures.wrong_buffer]
        execution = submissions[np.searchsorted(ids, bad["submission"])]
        raise _corrupt(path, f"a dispatch names command buffer {bad['command_buffer']} but its submission "
                             f"{execution['submission']} executes command buffer {execution['command_buffer']}")
    if failures.outside >= 0:
        raise _corrupt(path, f"a dispatch of submission {dispatches['submission'][failures.outside]} runs outside "
                             "the execution of its command buffer")
    if failures.duplicate is not None:
        raise _corrupt(path, f"a dispatch of (submission, command index) {failures.duplicate} is recorded twice")
    if failures.short >= 0:
        index = failures.short
        wanted = len(timed[int(submissions["command_buffer"][index])])
        raise SectionmarkError(
            f"{path}: submission {ids[index]} has {failures.found[index]} of the {wanted} dispatch events its command "
            f"buffer must produce: events are missing (a capture filtered with --device_profiling_filter_* cannot "
            "be attributed)"
        )


def _by_submission_and_start(dispatches: np.ndarray, known_sorted: bool = False) -> np.ndarray:
    """Dispatches in (submission, start) order, ties in their order: ``np.lexsort``'s result.

    IREE writes them grouped by submission and all but a few in start order:
    then only the submissions out of order are sorted, in place (the readers
    pass tables they own). ``known_sorted``: the reader put them in order already.
    """
    if known_sorted:
        return dispatches
    submission, start = dispatches["submission"], dispatches["start_ns"]
    in_order = (submission[1:] > submission[:-1]) | ((submission[1:] == submission[:-1]) & (start[1:] >= start[:-1]))
    if in_order.all():
        return dispatches
    if not (submission[1:] >= submission[:-1]).all():
        return dispatches[np.lexsort((start, submission))]
    unsorted = distinct(submission[np.flatnonzero(~in_order)])
    first, lengths = np.searchsorted(submission, unsorted), np.searchsorted(submission, unsorted, "right")
    lengths -= first
    rows = np.repeat(first - (np.cumsum(lengths) - lengths), lengths) + np.arange(int(lengths.sum()))
    dispatches[rows] = dispatches[rows[np.lexsort((start[rows], submission[rows]))]]
    return dispatches


def _finish(
    path: Path,
    dispatches: np.ndarray,
    submissions: np.ndarray,
    keys: list[str],
    declared: set[int],
    commands: dict[int, dict[int, _Command]],
    exports: dict[int, list[str]],
    source: str,
    queue_ops: np.ndarray,
    memory: np.ndarray,
    known: Optional[_KnownOrder] = None,
) -> Profile:
    """Check a reader's tables against each other (module docstring) and build the Profile.

    ``declared``: the command buffers the profile defines (command-buffer
    records); ``commands``: the recorded commands of each, by index; ``known``:
    what the reader established already.
    """
    known = known or _KnownOrder()
    undeclared = sorted(set(commands) - declared)
    if undeclared:
        raise _corrupt(path, f"commands are recorded for command buffer {undeclared[0]}, which the profile does not define")
    recorded = {buffer: commands.get(buffer, {}) for buffer in declared}
    command_buffers = {
        buffer: [(index, op, key) for index, (op, key, _timed) in sorted(by_index.items())]
        for buffer, by_index in recorded.items()
    }
    timed = {buffer: {index for index, (_op, _key, is_timed) in by_index.items() if is_timed}
             for buffer, by_index in recorded.items()}
    _check_times(path, dispatches, submissions, queue_ops, memory, known.times_plausible)
    dispatches = _by_submission_and_start(dispatches, known.dispatches_sorted)
    submissions = _sorted_by(submissions, "submission")
    _check_links(path, dispatches, submissions, command_buffers, timed)
    return Profile(dispatches, submissions, keys, command_buffers, exports, source,
                   _sorted_by(queue_ops, "start_ns", "submission"), _sorted_by(memory, "time_ns"))


def _sorted_by(table: np.ndarray, first: str, second: Optional[str] = None) -> np.ndarray:
    """``table`` stably sorted by its ``first`` field, then ``second``; itself when it is in that order already
    (profiles nearly always are: no copy)."""
    a = table[first]
    b = table[second] if second else np.zeros(len(table), np.int8)
    if len(table) < 2 or ((a[1:] > a[:-1]) | ((a[1:] == a[:-1]) & (b[1:] >= b[:-1]))).all():
        return table
    return table[np.lexsort((b, a))]


def read_profile(path: str | Path, reader: str = "auto") -> Profile:
    """Read a ``.ireeprof`` bundle or an exported ``ireeperf-jsonl`` file.

    ``reader``: "auto" (bundle reader, falling back to ``iree-profile export``
    for layouts it does not know), "bundle" or "jsonl" (always go through
    ``iree-profile export``; for tests and benchmarks). The file type is
    decided by its first bytes, before anything else is read.
    """
    path = Path(path)
    with open_regular(path, "profile") as file:
        head = file.read(4)
        if head == _MAGIC:
            if reader == "jsonl":
                return _export_jsonl(path)
            try:
                return _read_bundle(path, file, os.fstat(file.fileno()).st_size)
            except _FallBack as why:
                if reader == "bundle":
                    raise SectionmarkError(f"{path}: unsupported profile layout ({why})") from None
                return _export_jsonl(path)
        if head[:1] == b"{":
            file.seek(0)
            return _read_jsonl_lines(path, _lines(path, file))
    if not head:
        raise SectionmarkError(f"{path}: the profile file is empty")
    raise _corrupt(path, "neither an .ireeprof bundle nor ireeperf-jsonl")
