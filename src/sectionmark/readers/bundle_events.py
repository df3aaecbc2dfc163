"""A bundle's records decoded into tables: its functions and command buffers (`open_bundle`), then its host and
memory events a window at a time, in C when the extension is built, else with numpy (the same rows and the same
first failing record of each kind).

Both readers of a bundle's events decode them here: the whole read
(`ireeprof_bundle`) and the windows (`ireeprof_stream`).
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Optional

import numpy as np

from sectionmark.readers.arrays import first_true, strictly_increasing
from sectionmark.readers.bundle_records import (COMMAND_BUFFER, COMMAND_OPERATION, FUNCTION_HEADER, FUNCTION_HEADER_SIZE,
                                                FUNCTION_NAME_LENGTH_OFFSET, HOST_EVENT, MEMORY_EVENT, ChunkVisitor,
                                                Chunks, RecordPositions, RecordWalk, UnsupportedLayout, fixed_records,
                                                map_bundle, records_at)
from sectionmark.readers.checks import corrupt, define_function, record_command, run_failed, timed_dispatch
from sectionmark.readers.event_model import (EVENT_DISPATCH, EVENT_EXECUTE, EVENT_NAMES, MEMORY_EVENT_NAMES,
                                             OPERATION_NAMES, CommandRecord, native)


def _executable_functions(path: Path, payloads: list[memoryview]) -> dict[tuple[int, int], str]:
    """``(executable_id, function ordinal) -> name`` from the variable-length function records."""
    functions: dict[tuple[int, int], str] = {}
    for payload in payloads:
        position = 0
        while position < len(payload):
            if len(payload) - position < FUNCTION_HEADER_SIZE:
                raise corrupt(path, "truncated executable function record")
            length, _flags, executable_id, ordinal = FUNCTION_HEADER.unpack_from(payload, position)
            (name_length,) = struct.unpack_from("<I", payload, position + FUNCTION_NAME_LENGTH_OFFSET)
            if length != FUNCTION_HEADER_SIZE + name_length or length > len(payload) - position:
                raise UnsupportedLayout("executable function record layout")
            name_start = position + FUNCTION_HEADER_SIZE
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
    sessions: int = 1  # profiling sessions: one per device the run drove (`sectionmark.readers.devices` splits them)
    records: Optional[RecordWalk] = None  # every record, kept where there are several sessions (for their split)

    def host_event_positions(self) -> RecordPositions:
        return RecordPositions(self.chunks["host-execution-events"], HOST_EVENT.itemsize)

    def close(self) -> None:
        """Let the mapped file and the chunk tables go: a reader that has read every event needs neither."""
        self.chunks, self.data, self.records = {}, np.zeros(0, np.uint8), None
        try:
            self.mapped.close()
        except BufferError:  # a view of the map is still alive: the map goes with the last of them
            pass

    @property
    def device_timed(self) -> bool:
        """Whether its dispatches were timed by a device (a GPU's dispatch events), not by the host."""
        return bool(len(self.chunks["dispatch-events"].starts))


def open_bundle(path: Path, file: BinaryIO, size: int, visit: Optional[ChunkVisitor] = None) -> OpenBundle:
    """Map the bundle, check its header and records (`map_bundle`, handing each window of the walk to ``visit``),
    decode its functions and command buffers."""
    return _decoded(path, *map_bundle(path, file, size, visit))


def open_split_bundle(path: Path, file: BinaryIO, chunks: dict[str, Chunks]) -> OpenBundle:
    """A one-device bundle sectionmark wrote (`sectionmark.readers.devices.split_devices`) from records it checked,
    whose chunks' payloads it knows (``chunks``, of `USED_CHUNKS`): mapped and decoded as `open_bundle` decodes
    it, without walking its records again. Its errors name ``path``."""
    mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    return _decoded(path, mapped, np.frombuffer(mapped, np.uint8), chunks, 1, None)


def _decoded(path: Path, mapped: mmap.mmap, data: np.ndarray, chunks: dict[str, Chunks], sessions: int,
             records: Optional[RecordWalk]) -> OpenBundle:
    """The mapped bundle's functions and command buffers decoded."""
    functions = _executable_functions(path, chunks["executable-functions"].views(mapped))

    def key_of(executable_id: int, ordinal: int) -> str:
        name = functions.get((executable_id, ordinal))
        if name is None:
            raise corrupt(path, f"dispatch of unknown executable function {executable_id}:{ordinal}")
        return name

    declared = {record[1] for record in fixed_records(data, chunks["command-buffers"], COMMAND_BUFFER).tolist()}
    commands: dict[int, dict[int, CommandRecord]] = {}
    for record in fixed_records(data, chunks["command-operations"], COMMAND_OPERATION).tolist():
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
    return OpenBundle(path, mapped, data, chunks, functions, keys, known_codes, known_keys, declared, commands,
                      sessions, records)


# Host execution events read per pass: the file pages of one window are mapped in at a time and given back
# after it (`release_pages`), so the mapped profile adds at most about this many 152-byte records to the RSS
# (5 MB), not the whole file; the tables the events go to are the reader's output. The windowed read's buffers
# are this size too (a window's bytes, its dispatch rows): 2**15, not 2**16, costs no time and keeps 6 MB less.
HOST_EVENTS_WINDOW = 1 << 15


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
    keys, unknown = lookup_keys(events["executable_id"][raw], events["function_ordinal"][raw], known_codes,
                                known_keys)
    fill_columns(outputs[0], events, raw, skip=("key",))
    outputs[0]["key"][: len(raw)] = keys
    unknown = int(raw[unknown]) if unknown >= 0 else -1
    executions = np.flatnonzero(types == EVENT_EXECUTE)
    fill_columns(outputs[1], events, executions)
    operations = np.flatnonzero((types != EVENT_DISPATCH) & (types != EVENT_EXECUTE))
    fill_columns(outputs[2], events, operations)
    return [len(raw), len(executions), len(operations)], (bad_length, bad_type, failed, unknown)


def lookup_keys(executable: np.ndarray, ordinal: np.ndarray, known_codes: np.ndarray,
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
