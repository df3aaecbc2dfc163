"""The .ireeprof bundle reader: IREE 3.13's binary HAL profile decoded from the mapped file with whole-array numpy.

Events are fixed-size records gathered in one pass (in C when the extension
is built); a layout it was not checked against raises `UnsupportedLayout`, and
`read_profile` then falls back to the JSONL reader.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from sectionmark.errors import SectionmarkError
from sectionmark.readers.arrays import first_true
from sectionmark.readers.checks import (KnownOrder, check_unique, checked_profile, corrupt, define_function,
                                        exports_by_executable, record_command, run_failed, timed_dispatch)
from sectionmark.readers.device_events import (CLOCK_SAMPLE_DTYPE, DEVICE_DISPATCH_DTYPE, EXECUTE_DTYPE, device_clocks,
                                              device_dispatches, device_executions)
from sectionmark.readers.event_model import (DISPATCH_DTYPE, EVENT_DISPATCH, EVENT_EXECUTE, EVENT_NAMES, MEMORY_DTYPE,
                                             MEMORY_EVENT_NAMES, OPERATION_NAMES, QUEUE_OP_DTYPE, SUBMISSION_DTYPE,
                                             CommandRecord, Profile, Provenance, native)


class UnsupportedLayout(Exception):
    """The bundle uses a record layout this reader was not checked against."""


BUNDLE_MAGIC = b"IRPF"
_FILE_HEADER = struct.Struct("<4sHHIIQ")  # magic, major, minor, header_length, flags, file_length
_RECORD_HEADER_SIZE = 104
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
_KNOWN_CONTENT_TYPES = tuple((_CONTENT_PREFIX + name).encode() for name in KNOWN_CHUNKS)
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
# Device-timed dispatch event (iree_hal_profile_dispatch_event_t); device and queue are its chunk's.
_DEVICE_DISPATCH_EVENT = np.dtype(
    {
        "names": ["record_length", "flags", "event_id", "submission", "command_buffer", "executable_id",
                  "command_index", "function_ordinal", "start_tick", "end_tick"],
        "formats": ["<u4", "<u4", "<u8", "<u8", "<u8", "<u8", "<u4", "<u4", "<u8", "<u8"],
        "offsets": [0, 4, 8, 16, 24, 32, 40, 44, 72, 80],
        "itemsize": 88,
    }
)
_CLOCK_SAMPLE = np.dtype(  # iree_hal_profile_clock_correlation_record_t
    {
        "names": ["record_length", "flags", "device", "device_tick", "host_cpu_ns", "host_time_begin_ns",
                  "host_time_end_ns"],
        "formats": ["<u4", "<u4", "<u4", "<u8", "<u8", "<i8", "<i8"],
        "offsets": [0, 4, 8, 24, 32, 56, 64],
        "itemsize": 72,
    }
)
_QUEUE_EVENT = np.dtype(  # iree_hal_profile_queue_event_t
    {
        "names": ["record_length", "type", "submission", "command_buffer", "host_time_ns"],
        "formats": ["<u4", "<u4", "<u8", "<u8", "<i8"],
        "offsets": [0, 4, 32, 40, 24],
        "itemsize": 104,
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
        "names": ["record_length", "payload_length", "header_size", "type_length", "name_length", "device", "queue",
                  "chunk_flags", "dropped", "status", "record_type"],
        "formats": ["<u8", "<u8", "<u4", "<u4", "<u4", "<u4", "<u4", "<u8", "<u8", "<u4", "<u2"],
        "offsets": [0, 8, 56, 60, 64, 68, 72, 80, 88, 96, 100],
        "itemsize": _RECORD_HEADER_SIZE,
    }
)
_RECORD_LENGTH = struct.Struct("<Q")


@dataclass
class _Chunks:
    """The payloads of one chunk type: byte offsets into the file and lengths, in file order."""

    starts: np.ndarray  # int64
    lengths: np.ndarray  # int64
    devices: np.ndarray  # uint32: the physical device ordinal of each chunk's header
    queues: np.ndarray  # uint32: its queue ordinal

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
        raise UnsupportedLayout(f"{bad}-byte chunk is not a whole number of records")
    counts = chunks.lengths // itemsize
    # record k of the whole list, in chunk c: starts[c] + (k - index of c's first record) * itemsize
    base = np.repeat(chunks.starts - (np.cumsum(counts) - counts) * itemsize, counts)
    return base + np.arange(int(counts.sum()), dtype=np.int64) * itemsize


def _fixed_records(data: np.ndarray, chunks: _Chunks, dtype: np.dtype) -> np.ndarray:
    """All records of chunks of fixed-size records, checking each record's own length."""
    records = _records_at(data, _record_positions(chunks, dtype.itemsize), dtype)
    if len(records) and (records["record_length"] != dtype.itemsize).any():
        raise UnsupportedLayout("record length differs from the known layout")
    return records


def _record_table(data: np.ndarray, start: int, end: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Walk the records of ``data[start:end]``: (offsets, headers, kinds).

    ``offsets``: of every record; the walk stops after a record whose header is cut short or whose length is
    below a header's or past ``end`` (``_bundle_chunks`` reports it). ``headers`` (``_RECORD_HEADER_DTYPE``):
    of the records with a whole header (all but maybe the last); ``kinds``: the index in ``KNOWN_CHUNKS`` of
    each one's content type, -1 when it is none of them or its type string does not lie inside the record.
    In C when the extension is built.
    """
    if native() is not None:
        offsets, headers, kinds = native().record_table(data, start, end, _KNOWN_CONTENT_TYPES)
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
        raise corrupt(path, f"{where} at byte {offsets[-1]}")
    if not ended.any():
        raise corrupt(path, "no session end record")
    if headers["dropped"].any():
        dropped_records = sum(headers["dropped"].tolist())
        raise SectionmarkError(
            f"{path}: the profiler dropped {dropped_records} records, so times would be incomplete; "
            "profile fewer iterations"
        )
    payload_start = complete + (header_size + headers["type_length"] + headers["name_length"]).astype(np.int64)
    payload_length = headers["payload_length"].astype(np.int64)
    return {name: _Chunks(payload_start[rows], payload_length[rows], headers["device"][rows], headers["queue"][rows])
            for index, name in enumerate(USED_CHUNKS) for rows in [chunk & (kinds == index)]}


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
        raise corrupt(path, f"the session begin record must come first, and once (byte {offset})")
    if header["chunk_flags"] & _CHUNK_TRUNCATED:
        raise SectionmarkError(f"{path}: the profiler truncated a chunk, so times would be incomplete")
    if header["record_type"] == _RECORD_SESSION_END:
        raise SectionmarkError(f"{path}: the profiling session ended with IREE status code {header['status']}")
    raise corrupt(path, f"unknown chunk type {content_type[:80]!r} at byte {offset}")


def _executable_functions(path: Path, payloads: list[memoryview]) -> dict[tuple[int, int], str]:
    """``(executable_id, function ordinal) -> name`` from the variable-length function records."""
    functions: dict[tuple[int, int], str] = {}
    for payload in payloads:
        position = 0
        while position < len(payload):
            if len(payload) - position < _FUNCTION_HEADER_SIZE:
                raise corrupt(path, "truncated executable function record")
            length, _flags, executable_id, ordinal = _FUNCTION_HEADER.unpack_from(payload, position)
            (name_length,) = struct.unpack_from("<I", payload, position + _FUNCTION_NAME_LENGTH_OFFSET)
            if length != _FUNCTION_HEADER_SIZE + name_length or length > len(payload) - position:
                raise UnsupportedLayout("executable function record layout")
            name_start = position + _FUNCTION_HEADER_SIZE
            name = bytes(payload[name_start : name_start + name_length]).decode("utf-8", "replace")
            define_function(path, functions, executable_id, ordinal, name)
            position += length
    return functions


def read_bundle(path: Path, file: BinaryIO, size: int) -> Profile:
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
    chunks = _bundle_chunks(path, data, header_length, file_length)

    functions = _executable_functions(path, chunks["executable-functions"].views(mapped))

    def key_of(executable_id: int, ordinal: int) -> str:
        name = functions.get((executable_id, ordinal))
        if name is None:
            raise corrupt(path, f"dispatch of unknown executable function {executable_id}:{ordinal}")
        return name

    declared = {record[1] for record in _fixed_records(data, chunks["command-buffers"], _COMMAND_BUFFER).tolist()}
    commands: dict[int, dict[int, CommandRecord]] = {}
    for record in _fixed_records(data, chunks["command-operations"], _COMMAND_OPERATION).tolist():
        _length, op_type, flags, index, buffer_id, executable_id, ordinal, workgroups = record
        op = OPERATION_NAMES.get(op_type)
        if op is None:
            raise UnsupportedLayout(f"command operation type {op_type}")
        key = key_of(executable_id, ordinal) if op == "dispatch" else None
        record_command(path, commands, buffer_id, index, (op, key, timed_dispatch(op, flags, workgroups)))

    # Key of each event: its (executable, function ordinal) looked up among the known functions,
    # packed into one 64-bit code (ids beyond 32 bits would wrap: no producer makes that many executables).
    known = sorted(functions)
    if known and known[-1][0] >= 1 << 32:
        raise UnsupportedLayout("executable ids beyond 32 bits")
    keys = list(dict.fromkeys(functions[pair] for pair in known))
    known_codes = np.array([(e << 32) | o for e, o in known], dtype=np.uint64)
    known_keys = np.array([keys.index(functions[pair]) for pair in known], dtype=np.uint32)
    host = _host_events(path, data, chunks["host-execution-events"], known_codes, known_keys)
    memory = _memory_events(path, data, chunks["memory-events"])
    if len(chunks["dispatch-events"].starts):
        if len(host.dispatches):
            raise SectionmarkError(f"{path}: it has both host-timed and device-timed dispatches; sectionmark reads "
                                   "one device's profile at a time")
        dispatches, submissions = _device_events(path, data, chunks, known_codes, known_keys)
        return checked_profile(path, dispatches, submissions, keys, declared, commands,
                               exports_by_executable(functions), Provenance("bundle", device_timed=True),
                               host.queue_ops, memory)
    return checked_profile(path, host.dispatches, host.submissions, keys, declared, commands, exports_by_executable(functions), Provenance("bundle"),
                   host.queue_ops, memory, host.order)


def _device_events(path: Path, data: np.ndarray, chunks: dict[str, _Chunks], known_codes: np.ndarray,
                   known_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A device-timed profile's dispatches and command-buffer executions (`sectionmark.readers.device_events`).

    The dispatch events are gathered in C when the extension is built (the
    record layout and each event's function checked on the way), else with numpy.
    """
    dispatch_chunks = chunks["dispatch-events"]
    positions = _record_positions(dispatch_chunks, _DEVICE_DISPATCH_EVENT.itemsize)
    per_chunk = dispatch_chunks.lengths // _DEVICE_DISPATCH_EVENT.itemsize
    events = np.empty(len(positions), DEVICE_DISPATCH_DTYPE)
    if native() is not None and getattr(native(), "DEVICE_DISPATCH_SIZE", None) == DEVICE_DISPATCH_DTYPE.itemsize:
        bad_length, unknown = native().device_dispatch_events(data, positions, known_codes, known_keys, events)
    else:
        records = _records_at(data, positions, _DEVICE_DISPATCH_EVENT)
        bad_length = first_true(records["record_length"] != _DEVICE_DISPATCH_EVENT.itemsize)
        for name in ("flags", "event_id", "submission", "command_buffer", "command_index", "start_tick", "end_tick"):
            events[name] = records[name]
        events["key"], unknown = _lookup_keys(records["executable_id"], records["function_ordinal"], known_codes,
                                              known_keys)
    if bad_length >= 0:
        raise UnsupportedLayout("record length differs from the known layout")
    if unknown >= 0:
        bad = _records_at(data, positions[[unknown]], _DEVICE_DISPATCH_EVENT)[0]
        raise corrupt(path, f"dispatch of unknown executable function {bad['executable_id']}:{bad['function_ordinal']}")
    events["device"] = np.repeat(dispatch_chunks.devices, per_chunk)
    events["queue"] = np.repeat(dispatch_chunks.queues, per_chunk)
    samples = _fixed_records(data, chunks["clock-correlations"], _CLOCK_SAMPLE)
    clock_samples = np.zeros(len(samples), CLOCK_SAMPLE_DTYPE)
    for name in CLOCK_SAMPLE_DTYPE.names:
        clock_samples[name] = samples[name]
    dispatches = device_dispatches(path, events, device_clocks(path, clock_samples))
    queue_events = _fixed_records(data, chunks["queue-events"], _QUEUE_EVENT)
    executes = queue_events[queue_events["type"] == EVENT_EXECUTE]
    execute_rows = np.zeros(len(executes), EXECUTE_DTYPE)
    for name in EXECUTE_DTYPE.names:
        execute_rows[name] = executes[name]
    return dispatches, device_executions(execute_rows, dispatches)


def _memory_events(path: Path, data: np.ndarray, chunks: _Chunks) -> np.ndarray:
    """The memory events (MEMORY_DTYPE), each checked for layout, type and identity (in C when built)."""
    positions = _record_positions(chunks, _MEMORY_EVENT.itemsize)
    if native() is not None:
        memory = np.empty(len(positions), MEMORY_DTYPE)
        devices, event_ids = np.empty(len(positions), np.uint64), np.empty(len(positions), np.uint64)
        bad_length, unknown, increasing = native().memory_events(data, positions, memory, devices, event_ids)
        types = memory["type"]
    else:
        events = _records_at(data, positions, _MEMORY_EVENT)
        bad_length = first_true(events["record_length"] != _MEMORY_EVENT.itemsize)
        types, devices, event_ids = events["type"], events["device"], events["event_id"]
        unknown = first_true(~np.isin(types, list(MEMORY_EVENT_NAMES)))
        memory, increasing = _columns(events, MEMORY_DTYPE, np.arange(len(events))), False
    if bad_length >= 0:
        raise UnsupportedLayout("record length differs from the known layout")
    if unknown >= 0:
        raise corrupt(path, f"unknown memory event type {types[unknown]}")
    if not increasing:  # strictly increasing pairs are unique
        check_unique(path, "a memory event", devices, event_ids)
    return memory


@dataclass
class _HostEvents:
    dispatches: np.ndarray
    submissions: np.ndarray
    queue_ops: np.ndarray
    order: KnownOrder


def _host_events(path: Path, data: np.ndarray, chunks: _Chunks, known_codes: np.ndarray,
                 known_keys: np.ndarray) -> _HostEvents:
    """Split the host execution events into dispatches, submissions and queue operations, each dispatch keyed by
    the ``known_keys`` entry of its function's code (executable id << 32 | ordinal) among the sorted
    ``known_codes``; checks every event's layout, type, status, identity and function. In C when the extension
    is built (one pass over the events, which also checks times and orders), else with numpy."""
    positions = _record_positions(chunks, _HOST_EVENT.itemsize)
    order = KnownOrder()
    if native() is not None:
        tables = [np.empty(len(positions), dtype) for dtype in (DISPATCH_DTYPE, SUBMISSION_DTYPE, QUEUE_OP_DTYPE)]
        (*sizes, bad_length, bad_type, failed, unknown, order.times_plausible, order.dispatches_sorted,
         increasing) = native().host_events(data, positions, known_codes, known_keys, *tables)
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
        raise UnsupportedLayout("record length differs from the known layout")
    if bad_type >= 0:
        raise corrupt(path, f"unknown host execution event type {record(bad_type)['type']}")
    if failed >= 0:
        bad = record(failed)
        raise run_failed(path, EVENT_NAMES[int(bad["type"])], int(bad["event_id"]), int(bad["status_code"]))
    if not increasing:  # strictly increasing pairs are unique
        events = _records_at(data, positions, _HOST_EVENT) if events is None else events
        check_unique(path, "a host execution event", events["stream"], events["event_id"])
    if unknown >= 0:
        bad = record(unknown)
        raise corrupt(path, f"dispatch of unknown executable function {bad['executable_id']}:{bad['function_ordinal']}")
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
