"""The .ireeprof bundle reader: IREE 3.13's binary HAL profile decoded from the mapped file with whole-array numpy.

Events are fixed-size records gathered in one pass (in C when the extension
is built); a layout it was not checked against raises `UnsupportedLayout`, and
`read_profile` then falls back to the JSONL reader. The file is mapped, and
read in windows (record headers, host and memory events), each window's pages
given back after it: the mapped file adds a bounded amount to the process's
RSS, not its size (the tables read from it still grow with the events).
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from sectionmark.errors import SectionmarkError
from sectionmark.readers.arrays import first_true, strictly_increasing
from sectionmark.readers.bundle_records import (RECORD_HEADER_SIZE, Chunks, RecordPositions, UnsupportedLayout, content_type,
                                                fixed_records, records_at, release_pages, walk_records)
from sectionmark.readers.checks import (KnownOrder, check_unique, checked_profile, corrupt, define_function,
                                        exports_by_executable, record_command, run_failed, timed_dispatch)
from sectionmark.readers.device_events import (CLOCK_SAMPLE_DTYPE, DEVICE_DISPATCH_DTYPE, EXECUTE_DTYPE, device_clocks,
                                              device_dispatches, device_executions)
from sectionmark.readers.event_model import (DISPATCH_DTYPE, EVENT_DISPATCH, EVENT_EXECUTE, EVENT_NAMES, MEMORY_DTYPE,
                                             MEMORY_EVENT_NAMES, OPERATION_NAMES, QUEUE_OP_DTYPE, SUBMISSION_DTYPE,
                                             CommandRecord, Profile, Provenance, native)


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
_KNOWN_CONTENT_TYPES = tuple((_CONTENT_PREFIX + name).encode() for name in KNOWN_CHUNKS)
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


def _bundle_chunks(path: Path, mapped: mmap.mmap, data: np.ndarray, header_length: int,
                   file_length: int) -> dict[str, Chunks]:
    """Walk the records of ``data[:file_length]``: check their framing and session, return the payloads of the
    chunks we use.

    Checked all at once over the table of record headers, reporting the first
    record (in file order) that fails a check, and its first failed check.
    """
    data = data[:file_length]
    offsets, headers, kinds = walk_records(mapped, data, header_length, file_length, _KNOWN_CONTENT_TYPES)
    complete = offsets[: len(headers)]
    record_length, header_size, record_type = (
        headers["record_length"], headers["header_size"].astype(np.uint64), headers["record_type"])
    lengths_ok = (  # each part within the record, so that the uint64 sum cannot wrap
        (header_size >= RECORD_HEADER_SIZE)
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
        kind = content_type(data, offset, headers[index], _CONTENT_PREFIX) if bad_chunk[index] else ""
        _raise_record_error(path, offset, headers[index], after_end[index], lengths_ok[index], known_type[index],
                            begin_ok[index], kind)
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
    return {name: Chunks(payload_start[rows], payload_length[rows], headers["device"][rows], headers["queue"][rows])
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


@dataclass
class OpenBundle:
    """A bundle mapped and walked, with everything but its events decoded: what a reader of its events needs."""

    path: Path
    mapped: mmap.mmap
    data: np.ndarray  # the mapped file, as bytes
    chunks: dict[str, Chunks]  # the payloads of each chunk type used
    functions: dict[tuple[int, int], str]  # (executable id, ordinal) -> name
    keys: list[str]  # dispatch keys (function names), each once
    # Each known function's (executable id << 32 | ordinal), sorted, and its key's index in ``keys``.
    known_codes: np.ndarray
    known_keys: np.ndarray
    declared: set[int]  # the command buffers the profile defines
    commands: dict[int, dict[int, CommandRecord]]  # their recorded commands, by index

    def host_event_positions(self) -> RecordPositions:
        return RecordPositions(self.chunks["host-execution-events"], HOST_EVENT.itemsize)

    def close(self) -> None:
        """Let the mapped file and the chunk tables go: a reader that has read every event needs neither."""
        self.chunks, self.data = {}, np.zeros(0, np.uint8)
        try:
            self.mapped.close()
        except BufferError:  # a view of the map is still alive: the map goes with the last of them
            pass

    @property
    def device_timed(self) -> bool:
        """Whether its dispatches were timed by a device (a GPU's dispatch events), not by the host."""
        return bool(len(self.chunks["dispatch-events"].starts))


def open_bundle(path: Path, file: BinaryIO, size: int) -> OpenBundle:
    """Map the bundle, check its header and records, decode its functions and command buffers."""
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
    chunks = _bundle_chunks(path, mapped, data, header_length, file_length)

    functions = _executable_functions(path, chunks["executable-functions"].views(mapped))

    def key_of(executable_id: int, ordinal: int) -> str:
        name = functions.get((executable_id, ordinal))
        if name is None:
            raise corrupt(path, f"dispatch of unknown executable function {executable_id}:{ordinal}")
        return name

    declared = {record[1] for record in fixed_records(data, chunks["command-buffers"], _COMMAND_BUFFER).tolist()}
    commands: dict[int, dict[int, CommandRecord]] = {}
    for record in fixed_records(data, chunks["command-operations"], _COMMAND_OPERATION).tolist():
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
    return OpenBundle(path, mapped, data, chunks, functions, keys, known_codes, known_keys, declared, commands)


def read_bundle(path: Path, file: BinaryIO, size: int) -> Profile:
    bundle = open_bundle(path, file, size)
    data, chunks = bundle.data, bundle.chunks
    host = _host_events(path, bundle.mapped, data, chunks["host-execution-events"], bundle.known_codes,
                        bundle.known_keys)
    memory = memory_events(bundle)
    exports = exports_by_executable(bundle.functions)
    if bundle.device_timed:
        if len(host.dispatches):
            raise SectionmarkError(f"{path}: it has both host-timed and device-timed dispatches; sectionmark reads "
                                   "one device's profile at a time")
        dispatches, submissions = _device_events(path, data, chunks, bundle.known_codes, bundle.known_keys)
        return checked_profile(path, dispatches, submissions, bundle.keys, bundle.declared, bundle.commands, exports,
                               Provenance("bundle", device_timed=True), host.queue_ops, memory)
    return checked_profile(path, host.dispatches, host.submissions, bundle.keys, bundle.declared, bundle.commands,
                           exports, Provenance("bundle"), host.queue_ops, memory, host.order)


def _device_events(path: Path, data: np.ndarray, chunks: dict[str, Chunks], known_codes: np.ndarray,
                   known_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A device-timed profile's dispatches and command-buffer executions (`sectionmark.readers.device_events`).

    The dispatch events are gathered in C when the extension is built (the
    record layout and each event's function checked on the way), else with numpy.
    """
    dispatch_chunks = chunks["dispatch-events"]
    positions = RecordPositions(dispatch_chunks, _DEVICE_DISPATCH_EVENT.itemsize)[:]
    per_chunk = dispatch_chunks.lengths // _DEVICE_DISPATCH_EVENT.itemsize
    events = np.empty(len(positions), DEVICE_DISPATCH_DTYPE)
    if native() is not None and getattr(native(), "DEVICE_DISPATCH_SIZE", None) == DEVICE_DISPATCH_DTYPE.itemsize:
        bad_length, unknown = native().device_dispatch_events(data, positions, known_codes, known_keys, events)
    else:
        records = records_at(data, positions, _DEVICE_DISPATCH_EVENT)
        bad_length = first_true(records["record_length"] != _DEVICE_DISPATCH_EVENT.itemsize)
        for name in ("flags", "event_id", "submission", "command_buffer", "command_index", "start_tick", "end_tick"):
            events[name] = records[name]
        events["key"], unknown = _lookup_keys(records["executable_id"], records["function_ordinal"], known_codes,
                                              known_keys)
    if bad_length >= 0:
        raise UnsupportedLayout("record length differs from the known layout")
    if unknown >= 0:
        bad = records_at(data, positions[[unknown]], _DEVICE_DISPATCH_EVENT)[0]
        raise corrupt(path, f"dispatch of unknown executable function {bad['executable_id']}:{bad['function_ordinal']}")
    events["device"] = np.repeat(dispatch_chunks.devices, per_chunk)
    events["queue"] = np.repeat(dispatch_chunks.queues, per_chunk)
    samples = fixed_records(data, chunks["clock-correlations"], _CLOCK_SAMPLE)
    clock_samples = np.zeros(len(samples), CLOCK_SAMPLE_DTYPE)
    for name in CLOCK_SAMPLE_DTYPE.names:
        clock_samples[name] = samples[name]
    dispatches = device_dispatches(path, events, device_clocks(path, clock_samples))
    queue_events = fixed_records(data, chunks["queue-events"], _QUEUE_EVENT)
    executes = queue_events[queue_events["type"] == EVENT_EXECUTE]
    execute_rows = np.zeros(len(executes), EXECUTE_DTYPE)
    for name in EXECUTE_DTYPE.names:
        execute_rows[name] = executes[name]
    return dispatches, device_executions(execute_rows, dispatches)


def memory_events(bundle: OpenBundle) -> np.ndarray:
    """The memory events (MEMORY_DTYPE), each checked for layout, type and identity (in C when built), read
    ``HOST_EVENTS_WINDOW`` at a time like the host events."""
    path, mapped, data, chunks = bundle.path, bundle.mapped, bundle.data, bundle.chunks["memory-events"]
    positions = RecordPositions(chunks, MEMORY_EVENT.itemsize)
    memory = np.empty(len(positions), MEMORY_DTYPE)
    devices, event_ids = np.empty(len(positions), np.uint64), np.empty(len(positions), np.uint64)
    firsts, increasing = _Firsts(), True
    for begin in range(0, len(positions), HOST_EVENTS_WINDOW):
        window = positions[begin : begin + HOST_EVENTS_WINDOW]
        rows = slice(begin, begin + len(window))
        bad_length, unknown, window_increasing = decode_memory_events(data, window, memory[rows], devices[rows],
                                                                      event_ids[rows])
        increasing = increasing and window_increasing and (
            not begin or (int(devices[begin]), int(event_ids[begin])) > (int(devices[begin - 1]),
                                                                         int(event_ids[begin - 1])))
        firsts.add(begin, bad_length, -1, -1, unknown)
        release_pages(mapped, int(window[0]), int(window[-1]) + MEMORY_EVENT.itemsize)
    if firsts.bad_length >= 0:
        raise UnsupportedLayout("record length differs from the known layout")
    if firsts.unknown >= 0:
        raise corrupt(path, f"unknown memory event type {memory['type'][firsts.unknown]}")
    if not increasing:  # strictly increasing pairs are unique
        check_unique(path, "a memory event", devices, event_ids)
    return memory


def decode_memory_events(data: np.ndarray, positions: np.ndarray, memory: np.ndarray, devices: np.ndarray,
                         event_ids: np.ndarray) -> tuple[int, int, bool]:
    """The memory events at byte ``positions`` of ``data`` into the first rows of ``memory``, ``devices`` and
    ``event_ids``: (the first whose record length is not the known one, the first of an unknown type, -1 for none;
    whether the (device, event id) pairs strictly increase, so are unique). In C when the extension is built."""
    if native() is not None:
        return native().memory_events(data, positions, memory, devices, event_ids)
    events = records_at(data, positions, MEMORY_EVENT)
    count = len(events)
    devices[:count], event_ids[:count] = events["device"], events["event_id"]
    fill_columns(memory, events, np.arange(count))
    return (first_true(events["record_length"] != MEMORY_EVENT.itemsize),
            first_true(~np.isin(events["type"], list(MEMORY_EVENT_NAMES))),
            strictly_increasing(devices[:count], event_ids[:count]))


@dataclass
class _HostEvents:
    dispatches: np.ndarray
    submissions: np.ndarray
    queue_ops: np.ndarray
    order: KnownOrder


# Host execution events read per pass: the file pages of one window are mapped in at a time and given back
# after it (`release_pages`), so the mapped profile adds at most about this many 152-byte records to the RSS
# (10 MB), not the whole file; the tables the events go to are the reader's output.
HOST_EVENTS_WINDOW = 1 << 16


@dataclass
class _Firsts:
    """The first host event (index among all) failing each check, over the windows read so far; -1: none."""

    bad_length: int = -1
    bad_type: int = -1
    failed: int = -1
    unknown: int = -1

    def add(self, begin: int, *window_firsts: int) -> None:
        for name, first in zip(("bad_length", "bad_type", "failed", "unknown"), window_firsts):
            if first >= 0 and getattr(self, name) < 0:
                setattr(self, name, begin + first)


def _host_events(path: Path, mapped: mmap.mmap, data: np.ndarray, chunks: Chunks, known_codes: np.ndarray,
                 known_keys: np.ndarray) -> _HostEvents:
    """Split the host execution events into dispatches, submissions and queue operations, each dispatch keyed by
    the ``known_keys`` entry of its function's code (executable id << 32 | ordinal) among the sorted
    ``known_codes``; checks every event's layout, type, status, identity and function. In C when the extension
    is built (one pass over the events, which also checks times and orders), else with numpy; either way in
    windows of ``HOST_EVENTS_WINDOW`` events, each window's file pages given back after it."""
    positions = RecordPositions(chunks, HOST_EVENT.itemsize)
    total = len(positions)
    tables = [np.empty(total, dtype) for dtype in (DISPATCH_DTYPE, SUBMISSION_DTYPE, QUEUE_OP_DTYPE)]
    sizes, firsts = [0, 0, 0], _Firsts()
    # The C pass checks times, order and identity as it goes (true until a window says otherwise); the numpy
    # pass leaves them to checked_profile and check_unique.
    order = KnownOrder(True, True) if native() is not None else KnownOrder()
    increasing = native() is not None
    for begin in range(0, total, HOST_EVENTS_WINDOW):
        window = positions[begin : begin + HOST_EVENTS_WINDOW]
        outputs = [table[size:] for table, size in zip(tables, sizes)]
        if native() is not None:
            (*added, bad_length, bad_type, failed, unknown, plausible, dispatches_sorted,
             window_increasing) = native().host_events(data, window, known_codes, known_keys, *outputs)
            order.times_plausible &= plausible
            order.dispatches_sorted &= dispatches_sorted and _in_order_after(tables[0], sizes[0], added[0])
            increasing = increasing and window_increasing and (not begin or _increasing_across(data, positions, begin))
        else:
            added, (bad_length, bad_type, failed, unknown) = split_with_numpy(data, window, known_codes, known_keys,
                                                                                outputs)
        firsts.add(begin, bad_length, bad_type, failed, unknown)
        sizes = [size + count for size, count in zip(sizes, added)]
        release_pages(mapped, int(window[0]), int(window[-1]) + HOST_EVENT.itemsize)
    dispatches, submissions, queue_ops = (table[:size] for table, size in zip(tables, sizes))

    def check(checked: tuple[int, int, int, int]) -> None:
        failing = [first for first in checked if first >= 0]
        if failing:
            raise_host_event_error(path, records_at(data, positions[failing], HOST_EVENT), checked)

    check((firsts.bad_length, firsts.bad_type, firsts.failed, -1))
    if not increasing:  # strictly increasing pairs are unique
        check_unique(path, "a host execution event", *_host_event_fields(mapped, data, positions, "stream", "event_id"))
    check((-1, -1, -1, firsts.unknown))
    return _HostEvents(dispatches, submissions, queue_ops, order)


def raise_host_event_error(path: Path, failing: np.ndarray, firsts: tuple[int, int, int, int]) -> None:
    """The error of the first host event failing a check, in the order the checks are made: ``firsts`` (bad
    length, bad type, failed, unknown function: an index or -1) and ``failing``, the records of those that are
    not -1, in that order."""
    records = iter(failing)
    bad_length, bad_type, failed, unknown = ((next(records) if first >= 0 else None) for first in firsts)
    if bad_length is not None:
        raise UnsupportedLayout("record length differs from the known layout")
    if bad_type is not None:
        raise corrupt(path, f"unknown host execution event type {bad_type['type']}")
    if failed is not None:
        raise run_failed(path, EVENT_NAMES[int(failed["type"])], int(failed["event_id"]), int(failed["status_code"]))
    if unknown is not None:
        raise corrupt(path, f"dispatch of unknown executable function {unknown['executable_id']}:"
                      f"{unknown['function_ordinal']}")


def _in_order_after(dispatches: np.ndarray, before: int, added: int) -> bool:
    """Whether the first of ``added`` new dispatch rows (after ``before`` rows) keeps (submission, start) order."""
    if not before or not added:
        return True
    last, first = dispatches[before - 1], dispatches[before]
    return (int(first["submission"]), int(first["start_ns"])) >= (int(last["submission"]), int(last["start_ns"]))


def _increasing_across(data: np.ndarray, positions: RecordPositions, begin: int) -> bool:
    """Whether host event ``begin``'s (stream, event id) exceeds event ``begin - 1``'s (the C pass checks within
    a window)."""
    last, first = records_at(data, positions[[begin - 1, begin]], HOST_EVENT)
    return (int(first["stream"]), int(first["event_id"])) > (int(last["stream"]), int(last["event_id"]))


def _host_event_fields(mapped: mmap.mmap, data: np.ndarray, positions: RecordPositions,
                       *names: str) -> list[np.ndarray]:
    """Fields of every host event, gathered window by window (the whole 152-byte records are never all copied)."""
    fields = [np.empty(len(positions), HOST_EVENT.fields[name][0]) for name in names]
    for begin in range(0, len(positions), HOST_EVENTS_WINDOW):
        window = positions[begin : begin + HOST_EVENTS_WINDOW]
        events = records_at(data, window, HOST_EVENT)
        for field, name in zip(fields, names):
            field[begin : begin + len(window)] = events[name]
        release_pages(mapped, int(window[0]), int(window[-1]) + HOST_EVENT.itemsize)
    return fields


def split_with_numpy(data: np.ndarray, window: np.ndarray, known_codes: np.ndarray, known_keys: np.ndarray,
                      outputs: list[np.ndarray]) -> tuple[list[int], tuple[int, int, int, int]]:
    """The numpy twin of the C pass over one window: its events into the starts of ``outputs`` (dispatch,
    submission, queue-op tables); (rows added to each, first bad length, bad type, failed, unknown function)."""
    events = records_at(data, window, HOST_EVENT)
    bad_length, bad_type, failed = (
        first_true(wrong)
        for wrong in (events["record_length"] != HOST_EVENT.itemsize, ~np.isin(events["type"], list(EVENT_NAMES)),
                      events["status_code"] != 0)
    )
    types = events["type"]
    raw = np.flatnonzero(types == EVENT_DISPATCH)  # positions: indexing whole 152-byte records would copy them all
    keys, unknown = _lookup_keys(events["executable_id"][raw], events["function_ordinal"][raw], known_codes,
                                 known_keys)
    fill_columns(outputs[0], events, raw, skip=("key",))
    outputs[0]["key"][: len(raw)] = keys
    unknown = int(raw[unknown]) if unknown >= 0 else -1
    executions = np.flatnonzero(types == EVENT_EXECUTE)
    fill_columns(outputs[1], events, executions)
    operations = np.flatnonzero((types != EVENT_DISPATCH) & (types != EVENT_EXECUTE))
    fill_columns(outputs[2], events, operations)
    return [len(raw), len(executions), len(operations)], (bad_length, bad_type, failed, unknown)


def _lookup_keys(executable: np.ndarray, ordinal: np.ndarray, known_codes: np.ndarray,
                 known_keys: np.ndarray) -> tuple[np.ndarray, int]:
    """Each dispatch's key (0 where its function is unknown) and the index of the first unknown one (-1: none)."""
    codes = (executable << np.uint64(32)) | ordinal.astype(np.uint64)
    found = np.minimum(np.searchsorted(known_codes, codes), max(len(known_codes) - 1, 0))
    missing = (executable >= np.uint64(1 << 32)) | (
        known_codes[found] != codes if len(known_codes) else np.ones(len(codes), bool))
    keys = np.where(missing, 0, known_keys[found] if len(known_keys) else 0)
    return keys, first_true(missing)


def fill_columns(table: np.ndarray, records: np.ndarray, rows: np.ndarray, skip: tuple[str, ...] = ()) -> None:
    """Write the fields of ``table``'s dtype (but ``skip``) of raw records ``rows`` into its first rows."""
    for name in table.dtype.names:
        if name not in skip:
            table[name][: len(rows)] = records[name][rows]
