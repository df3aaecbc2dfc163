"""Read an IREE HAL profile into compact numpy arrays.

Two readers produce the same :class:`Profile`:

* the bundle reader decodes the ``.ireeprof`` file itself. Events are fixed
  size records, so a million dispatches become one ``np.frombuffer`` call; this
  is what makes reports fast. It only accepts the bundle layout it was checked
  against (bundle 1.x with 152-byte host execution events and 120-byte command
  operations, as written by IREE 3.13) and says so when a record looks different;
* the JSONL reader streams ``iree-profile export --format=ireeperf-jsonl``
  (schema-versioned, slower). ``read_profile`` falls back to it when the bundle
  reader does not recognise a layout, and it reads exported ``.jsonl`` files.

What we keep (see docs/profile-json.md for how it is used):

* ``dispatches``: one row per timed dispatch (host execution event of type
  dispatch): submission, command buffer id, command index, key (index into
  ``keys``), device/queue, start/end ns on IREE's host clock, and the summed
  per-workgroup time (``tile_ns``: CPU time across worker threads);
* ``submissions``: one row per executed command buffer (host execution event of
  type execute), in submission order: the unit we group into calls;
* ``command_buffers``: for every runtime command buffer id, its recorded
  commands ``(command_index, op, key)`` — the sequence matched against the
  section map.
"""

from __future__ import annotations

import json
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

import numpy as np

from sectionmark.errors import SectionmarkError
from sectionmark.profiling.tools import find_tool

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
    ]
)
SUBMISSION_DTYPE = np.dtype(
    [("submission", "<u8"), ("command_buffer", "<u8"), ("start_ns", "<i8"), ("end_ns", "<i8")]
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
# Host execution event types we use (iree_hal_profile_queue_event_type_t).
EVENT_DISPATCH = 2
EVENT_EXECUTE = 3

NO_INDEX = 0xFFFFFFFF

RecordedCommand = tuple[int, str, Optional[str]]  # (command_index, op, key or None)


@dataclass
class Profile:
    """The events of one profile, ready for attribution."""

    dispatches: np.ndarray  # DISPATCH_DTYPE, sorted by (submission, start_ns)
    submissions: np.ndarray  # SUBMISSION_DTYPE, sorted by submission
    keys: list[str]  # dispatch key (executable function name) by ``dispatches["key"]``
    command_buffers: dict[int, list[RecordedCommand]] = field(default_factory=dict)
    source: str = ""  # "bundle" or "jsonl": which reader produced it


class _FallBack(Exception):
    """The bundle uses a record layout this reader was not checked against."""


# --------------------------------------------------------------------------- bundle

_MAGIC = b"IRPF"
_FILE_HEADER = struct.Struct("<4sHHIIQ")  # magic, major, minor, header_length, flags, file_length
_RECORD_HEADER_SIZE = 104
# record_length, payload_length, 5 ids, header_length, content_type_length, name_length,
# device, queue, (padding), chunk flags, dropped_record_count, session_status_code, record_type, flags
_RECORD_HEADER = struct.Struct("<QQ5QIIIII4xQQIHH")
_RECORD_SESSION_END = 3
_CONTENT_PREFIX = "application/vnd.iree.hal.profile."

_HOST_EVENT = np.dtype(
    {
        "names": [
            "record_length", "type", "status_code", "event_id", "submission",
            "command_buffer", "executable_id", "device", "queue", "command_index",
            "function_ordinal", "start_ns", "end_ns", "tile_count", "tile_ns",
        ],
        "formats": ["<u4", "<u4", "<u4", "<u8", "<u8", "<u8", "<u8", "<u4", "<u4", "<u4",
                    "<u4", "<i8", "<i8", "<u8", "<u8"],
        "offsets": [0, 4, 12, 16, 24, 32, 40, 64, 68, 72, 76, 104, 112, 128, 136],
        "itemsize": 152,
    }
)
_COMMAND_OPERATION = np.dtype(
    {
        "names": ["record_length", "type", "command_index", "command_buffer",
                  "executable_id", "function_ordinal"],
        "formats": ["<u4", "<u4", "<u4", "<u8", "<u8", "<u4"],
        "offsets": [0, 4, 12, 16, 32, 40],
        "itemsize": 120,
    }
)
_FUNCTION_HEADER = struct.Struct("<IIQI")  # record_length, flags, executable_id, function_ordinal
_FUNCTION_NAME_LENGTH_OFFSET = 44
_FUNCTION_HEADER_SIZE = 64


def _corrupt(path: Path, what: str) -> SectionmarkError:
    return SectionmarkError(f"{path}: not a valid IREE profile ({what})")


def _fixed_records(path: Path, payloads: list[memoryview], dtype: np.dtype) -> np.ndarray:
    """Concatenate chunks of fixed-size records, checking each record's own length."""
    for payload in payloads:
        if len(payload) % dtype.itemsize:
            raise _FallBack(f"{len(payload)}-byte chunk is not a whole number of records")
    records = np.frombuffer(b"".join(payloads), dtype=dtype)
    if len(records) and (records["record_length"] != dtype.itemsize).any():
        raise _FallBack("record length differs from the known layout")
    return records


def _read_bundle(path: Path, data: bytes) -> Profile:
    if len(data) < _FILE_HEADER.size:
        raise _corrupt(path, "file is shorter than its header")
    magic, major, _minor, header_length, _flags, file_length = _FILE_HEADER.unpack_from(data)
    if magic != _MAGIC:
        raise _corrupt(path, "bad magic")
    if major != 1:
        raise _FallBack(f"bundle version {major}")
    if file_length == 0:
        raise _corrupt(path, "the profiling session was not finished; did the run crash?")
    if file_length > len(data):
        raise _corrupt(path, f"truncated: {len(data)} of {file_length} bytes")
    if header_length < _FILE_HEADER.size or header_length > file_length:
        raise _corrupt(path, "bad header length")

    view = memoryview(data)[:file_length]
    chunks: dict[str, list[memoryview]] = {}
    content_types: dict[bytes, str] = {}
    dropped_records = 0
    ended = False
    offset = header_length
    while offset < file_length:
        if file_length - offset < _RECORD_HEADER_SIZE:
            raise _corrupt(path, f"truncated record at byte {offset}")
        (record_length, payload_length, *_ids, header_size, type_length, name_length, _device, _queue,
         _chunk_flags, dropped, status, record_type, _flags) = _RECORD_HEADER.unpack_from(view, offset)
        if (
            header_size < _RECORD_HEADER_SIZE
            or record_length > file_length - offset
            or header_size + type_length + name_length + payload_length != record_length
        ):
            raise _corrupt(path, f"inconsistent record lengths at byte {offset}")
        start = offset + header_size
        raw_type = data[start : start + type_length]
        content_type = content_types.get(raw_type)
        if content_type is None:
            content_type = content_types[raw_type] = raw_type.decode("utf-8", "replace").removeprefix(_CONTENT_PREFIX)
        payload = view[start + type_length + name_length : offset + record_length]
        dropped_records += dropped
        if record_type == _RECORD_SESSION_END:
            ended = True
            if status != 0:
                raise SectionmarkError(f"{path}: the profiling session ended with IREE status code {status}")
        if payload_length:
            chunks.setdefault(content_type, []).append(payload)
        offset += record_length
    if not ended:
        raise _corrupt(path, "no session end record")
    if dropped_records:
        raise SectionmarkError(
            f"{path}: the profiler dropped {dropped_records} records, so times would be incomplete; "
            "profile fewer iterations"
        )

    functions: dict[tuple[int, int], str] = {}
    for payload in chunks.get("executable-functions", []):
        position = 0
        while position < len(payload):
            if len(payload) - position < _FUNCTION_HEADER_SIZE:
                raise _corrupt(path, "truncated executable function record")
            length, _flags, executable_id, ordinal = _FUNCTION_HEADER.unpack_from(payload, position)
            (name_length,) = struct.unpack_from("<I", payload, position + _FUNCTION_NAME_LENGTH_OFFSET)
            if length != _FUNCTION_HEADER_SIZE + name_length or length > len(payload) - position:
                raise _FallBack("executable function record layout")
            name_start = position + _FUNCTION_HEADER_SIZE
            functions[(executable_id, ordinal)] = bytes(payload[name_start : name_start + name_length]).decode(
                "utf-8", "replace"
            )
            position += length

    def key_of(executable_id: int, ordinal: int) -> str:
        name = functions.get((executable_id, ordinal))
        if name is None:
            raise _corrupt(path, f"dispatch of unknown executable function {executable_id}:{ordinal}")
        return name

    operations = _fixed_records(path, chunks.get("command-operations", []), _COMMAND_OPERATION)
    command_buffers: dict[int, list[RecordedCommand]] = {}
    for record in operations.tolist():
        _length, op_type, index, buffer_id, executable_id, ordinal = record
        op = OPERATION_NAMES.get(op_type)
        if op is None:
            raise _FallBack(f"command operation type {op_type}")
        key = key_of(executable_id, ordinal) if op == "dispatch" else None
        command_buffers.setdefault(buffer_id, []).append((index, op, key))

    events = _fixed_records(path, chunks.get("host-execution-events", []), _HOST_EVENT)
    is_dispatch = events["type"] == EVENT_DISPATCH
    raw = events[is_dispatch]
    # Key of each event: look its (executable, function ordinal) up among the known functions.
    known = sorted(functions)
    keys = list(dict.fromkeys(functions[pair] for pair in known))
    known_codes = np.array([(e << 32) | o for e, o in known], dtype=np.uint64)
    known_keys = np.array([keys.index(functions[pair]) for pair in known], dtype=np.uint32)
    codes = (raw["executable_id"] << np.uint64(32)) | raw["function_ordinal"].astype(np.uint64)
    missing = ~np.isin(codes, known_codes)
    if missing.any():
        bad = raw[np.argmax(missing)]
        raise _corrupt(path, f"dispatch of unknown executable function {bad['executable_id']}:{bad['function_ordinal']}")
    found = np.searchsorted(known_codes, codes)

    dispatches = np.empty(len(raw), DISPATCH_DTYPE)
    for name in ("submission", "command_buffer", "command_index", "device", "queue", "start_ns", "end_ns", "tile_ns"):
        dispatches[name] = raw[name]
    dispatches["key"] = known_keys[found]

    executes = events[events["type"] == EVENT_EXECUTE]
    submissions = np.empty(len(executes), SUBMISSION_DTYPE)
    for name in SUBMISSION_DTYPE.names:
        submissions[name] = executes[name]
    return _finish(path, dispatches, submissions, keys, command_buffers, "bundle")


# --------------------------------------------------------------------------- jsonl

_JSONL_SCHEMA_VERSIONS = {15}


def _read_jsonl_lines(path: Path, lines: Iterable[str]) -> Profile:
    keys: list[str] = []
    key_ids: dict[str, int] = {}
    dispatch_rows: list[tuple] = []
    submission_rows: list[tuple] = []
    command_buffers: dict[int, list[RecordedCommand]] = {}
    saw_schema = False
    ended = False
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            kind = row["record_type"]
            if kind == "host_execution_event":
                op = row["op"]
                if op == "dispatch":
                    key = str(row["key"])
                    key_id = key_ids.setdefault(key, len(keys))
                    if key_id == len(keys):
                        keys.append(key)
                    dispatch_rows.append(
                        (
                            row["submission_id"], row["command_buffer_id"], row["command_index"], key_id,
                            row["physical_device_ordinal"], row["queue_ordinal"],
                            row["start_host_time_ns"], row["end_host_time_ns"], row["tile_duration_sum_ns"],
                        )
                    )
                elif op == "execute":
                    submission_rows.append(
                        (row["submission_id"], row["command_buffer_id"], row["start_host_time_ns"], row["end_host_time_ns"])
                    )
            elif kind == "command_operation":
                op = row["op"]
                key = str(row["key"]) if op == "dispatch" else None
                command_buffers.setdefault(int(row["command_buffer_id"]), []).append(
                    (int(row["command_index"]), str(op), key)
                )
            elif kind == "schema":
                if row.get("format") != "ireeperf-jsonl" or row.get("schema_version") not in _JSONL_SCHEMA_VERSIONS:
                    raise SectionmarkError(
                        f"{path}: unsupported profile export schema {row.get('format')!r} "
                        f"version {row.get('schema_version')!r} (expected ireeperf-jsonl {sorted(_JSONL_SCHEMA_VERSIONS)})"
                    )
                saw_schema = True
            elif kind == "session" and row.get("event") == "end":
                ended = True
                if row.get("session_status_code", 0) != 0:
                    raise SectionmarkError(f"{path}: the profiling session ended with status {row.get('session_status')}")
        except SectionmarkError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as error:
            raise _corrupt(path, f"line {number}: {type(error).__name__}: {error}") from None
    if not saw_schema:
        raise _corrupt(path, "no ireeperf-jsonl schema row")
    if not ended:
        raise _corrupt(path, "no session end row")
    try:
        dispatches = np.array(dispatch_rows, dtype=DISPATCH_DTYPE)
        submissions = np.array(submission_rows, dtype=SUBMISSION_DTYPE)
    except (ValueError, TypeError, OverflowError) as error:
        raise _corrupt(path, f"bad event field: {error}") from None
    return _finish(path, dispatches, submissions, keys, command_buffers, "jsonl")


def _export_jsonl(path: Path) -> Profile:
    """Stream ``iree-profile export`` output into the JSONL reader."""
    tool = find_tool("iree-profile")
    process = subprocess.Popen(
        [str(tool), "export", "--format=ireeperf-jsonl", "--output=-", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stderr is not None
    try:
        profile = _read_jsonl_lines(path, process.stdout)
    except SectionmarkError:
        process.kill()
        process.wait()
        stderr = process.stderr.read().strip().splitlines()
        if stderr:
            raise SectionmarkError(f"{path}: iree-profile could not read it: {stderr[-1]}") from None
        raise
    finally:
        process.stdout.close()
    stderr = process.stderr.read()
    if process.wait() != 0:
        last = (stderr.strip().splitlines() or ["no message"])[-1]
        raise SectionmarkError(f"{path}: iree-profile could not read it: {last}")
    return profile


# --------------------------------------------------------------------------- common


def _finish(
    path: Path,
    dispatches: np.ndarray,
    submissions: np.ndarray,
    keys: list[str],
    command_buffers: dict[int, list[RecordedCommand]],
    source: str,
) -> Profile:
    if len(dispatches) and (dispatches["end_ns"] < dispatches["start_ns"]).any():
        raise _corrupt(path, "a dispatch ends before it starts")
    for commands in command_buffers.values():
        commands.sort()
    submission, start = dispatches["submission"], dispatches["start_ns"]
    in_order = (submission[1:] > submission[:-1]) | ((submission[1:] == submission[:-1]) & (start[1:] >= start[:-1]))
    if not in_order.all():
        dispatches = dispatches[np.lexsort((start, submission))]
    submissions = submissions[np.argsort(submissions["submission"], kind="stable")]
    return Profile(dispatches, submissions, keys, command_buffers, source)


def read_profile(path: str | Path, reader: str = "auto") -> Profile:
    """Read a ``.ireeprof`` bundle or an exported ``ireeperf-jsonl`` file.

    ``reader``: "auto" (bundle reader, falling back to ``iree-profile export``
    for layouts it does not know), "bundle" or "jsonl" (always go through
    ``iree-profile export``; for tests and benchmarks).
    """
    path = Path(path)
    try:
        with path.open("rb") as file:
            head = file.read(4)
    except OSError as error:
        raise SectionmarkError(f"cannot read profile {path}: {error.strerror or error}") from None
    if head == _MAGIC:
        if reader == "jsonl":
            return _export_jsonl(path)
        try:
            return _read_bundle(path, path.read_bytes())
        except _FallBack as why:
            if reader == "bundle":
                raise SectionmarkError(f"{path}: unsupported profile layout ({why})") from None
            return _export_jsonl(path)
    if head[:1] == b"{":
        with path.open("r", encoding="utf-8", errors="replace") as file:
            return _read_jsonl_lines(path, file)
    if not head:
        raise SectionmarkError(f"{path}: the profile file is empty")
    raise _corrupt(path, "neither an .ireeprof bundle nor ireeperf-jsonl")

