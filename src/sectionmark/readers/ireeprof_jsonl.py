"""The JSONL reader: ``iree-profile export --format=ireeperf-jsonl`` streamed, from a file or from the export subprocess.

Schema-versioned and slower than the bundle reader; it reads exported
``.jsonl`` files and the bundles whose layout the bundle reader does not know.
"""

from __future__ import annotations

import json
import subprocess
import threading
from itertools import count
from pathlib import Path
from typing import Any, BinaryIO, Iterable, Iterator, Optional

import numpy as np

from sectionmark.artifacts.files import open_regular
from sectionmark.artifacts.tools import find_tool, last_useful_line
from sectionmark.errors import SectionmarkError
from sectionmark.readers.checks import (check_unique, checked_profile, corrupt, define_function,
                                        exports_by_executable, record_command, run_failed, timed_dispatch)
from sectionmark.readers.devices import several_devices_error
from sectionmark.readers.device_events import (CLOCK_SAMPLE_DTYPE, DEVICE_DISPATCH_DTYPE, EXECUTE_DTYPE, device_clocks,
                                              device_dispatches, device_executions)
from sectionmark.readers.event_model import (DISPATCH_DTYPE, EVENT_NAMES, EXPORT_TIMEOUT_S, MAX_JSONL_LINE_BYTES,
                                             MEMORY_DTYPE, MEMORY_EVENT_NAMES, OPERATION_NAMES, QUEUE_OP_DTYPE,
                                             SUBMISSION_DTYPE, CommandRecord, Profile, Provenance)


_JSONL_SCHEMA_VERSIONS = {15}
# Record types of ireeperf-jsonl that carry no CPU dispatch timing (see IGNORED_CHUNKS); any
# type neither here nor read below is an error.
IGNORED_JSONL_RECORDS = frozenset(
    {
        "device", "queue", "executable", "queue_device_event",
        "event_relationship", "counter_set", "counter", "counter_sample",
        "device_metric_source", "device_metric_descriptor", "device_metric_sample", "command_region_event",
        "executable_trace",
    }
)
# The rows of one device's events: each names it (physical_device_ordinal).
_DEVICE_ROWS = frozenset({"host_execution_event", "memory_event", "dispatch_event", "clock_correlation",
                          "queue_event"})
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
    """Accumulates the rows of an ireeperf-jsonl stream: every device's (one, or it is refused), or ``device``'s
    events' only and the rows of every device (`_owned`)."""

    _READERS = {
        "schema": "_schema", "session": "_session", "diagnostic": "_diagnostic",
        "executable_function": "_executable_function", "command_buffer": "_command_buffer",
        "command_operation": "_command_operation", "host_execution_event": "_host_execution_event",
        "memory_event": "_memory_event", "dispatch_event": "_dispatch_event",
        "clock_correlation": "_clock_correlation", "queue_event": "_queue_event",
    }

    def __init__(self, path: Path, device: Optional[int] = None):
        self.path, self.device = path, device
        self.keys: list[str] = []
        self.key_ids: dict[str, int] = {}
        self.dispatch_rows: list[tuple] = []
        self.submission_rows: list[tuple] = []
        self.queue_op_rows: list[tuple] = []
        self.memory_rows: list[tuple] = []
        self.device_dispatch_rows: list[tuple] = []  # device_events.DEVICE_DISPATCH_DTYPE
        self.clock_rows: list[tuple] = []  # device_events.CLOCK_SAMPLE_DTYPE
        self.execute_rows: list[tuple] = []  # device_events.EXECUTE_DTYPE: queue executions
        self.memory_ids: list[tuple[int, int]] = []  # (device, event id)
        self.event_ids: list[tuple[int, int]] = []
        self.declared: set[int] = set()
        self.devices: set[int] = set()  # the physical device ordinals of the events: one, or the file is refused
        self.commands: dict[int, dict[int, CommandRecord]] = {}
        self.functions: dict[tuple[int, int], str] = {}
        self.saw_schema = False
        self.ended = False

    def add(self, row: Any) -> None:
        if not isinstance(row, dict):
            raise _BadRow("a row must be a JSON object")
        kind = _text(row, "record_type")
        if self.device is not None and not self._owned(kind, row):
            return
        if kind in self._READERS:
            getattr(self, self._READERS[kind])(row)
        elif kind not in IGNORED_JSONL_RECORDS:
            raise _BadRow(f"unknown record type {kind[:80]!r}")

    def _owned(self, kind: str, row: dict) -> bool:
        """Whether ``row`` (of type ``kind``) is ``device``'s events' or every device's (the command buffers
        too: a device's executions name its own, and the others are never executed there)."""
        return kind not in _DEVICE_ROWS or _int(row, "physical_device_ordinal", _U32) == self.device

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
        define_function(self.path, self.functions, _int(row, "executable_id", _U64),
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
        command = (op, key, timed_dispatch(op, _int(row, "flags", _U32), counts))
        record_command(self.path, self.commands, _int(row, "command_buffer_id", _U64),
                        _int(row, "command_index", _U32), command)

    def _host_execution_event(self, row: dict) -> None:
        op, type_value = _text(row, "op"), _int(row, "type_value", _U32)
        if EVENT_NAMES.get(type_value) != op:
            raise _BadRow(f"host execution event op {op[:40]!r} does not match its type_value {type_value}")
        event_id, device = _int(row, "event_id", _U64), _int(row, "physical_device_ordinal", _U32)
        self.devices.add(device)
        self.event_ids.append((_int(row, "stream_id", _U64), event_id))
        status = _int(row, "status_code", _U32)
        if status != 0:
            raise run_failed(self.path, op, event_id, status)
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
        self.dispatch_rows.append(
            (submission, buffer, _int(row, "command_index", _U32), self._key_id(_text(row, "key")), device,
             _int(row, "queue_ordinal", _U32), start, end, _int(row, "tile_duration_sum_ns", (0, _I64[1])),
             _int(row, "tile_count", _U64))
        )

    def _key_id(self, key: str) -> int:
        key_id = self.key_ids.setdefault(key, len(self.keys))
        if key_id == len(self.keys):
            self.keys.append(key)
        return key_id

    def _dispatch_event(self, row: dict) -> None:
        self.devices.add(_int(row, "physical_device_ordinal", _U32))
        self.device_dispatch_rows.append(
            (_int(row, "event_id", _U64), _int(row, "submission_id", _U64), _int(row, "command_buffer_id", _U64),
             _int(row, "start_tick", _U64), _int(row, "end_tick", _U64), _int(row, "physical_device_ordinal", _U32),
             _int(row, "queue_ordinal", _U32), _int(row, "flags", _U32), _int(row, "command_index", _U32),
             self._key_id(_text(row, "key")))
        )

    def _clock_correlation(self, row: dict) -> None:
        self.clock_rows.append(
            (_int(row, "physical_device_ordinal", _U32), _int(row, "flags", _U32), _int(row, "device_tick", _U64),
             _int(row, "host_cpu_timestamp_ns", _U64), _int(row, "host_time_begin_ns", _I64),
             _int(row, "host_time_end_ns", _I64))
        )

    def _queue_event(self, row: dict) -> None:
        if _text(row, "op") == "execute":
            self.execute_rows.append((_int(row, "submission_id", _U64), _int(row, "command_buffer_id", _U64),
                                      _int(row, "host_time_ns", _I64)))

    def _memory_event(self, row: dict) -> None:
        kind, type_value = _text(row, "event_type"), _int(row, "event_type_value", _U32)
        if MEMORY_EVENT_NAMES.get(type_value) != kind:
            raise _BadRow(f"memory event type {kind[:40]!r} does not match its event_type_value {type_value}")
        self.memory_ids.append((_int(row, "physical_device_ordinal", _U32), _int(row, "event_id", _U64)))
        self.devices.add(self.memory_ids[-1][0])
        self.memory_rows.append(
            (_int(row, "host_time_ns", _I64), type_value, _int(row, "flags", _U32), _int(row, "submission_id", _U64),
             _int(row, "allocation_id", _U64), _int(row, "pool_id", _U64), _int(row, "length", _U64),
             _int(row, "pool_bytes_reserved", _U64))
        )

    def finish(self) -> Profile:
        if not self.saw_schema:
            raise corrupt(self.path, "no ireeperf-jsonl schema row")
        if not self.ended:
            raise corrupt(self.path, "no session end row")
        if len(self.devices) > 1:  # each device numbers its own submissions: one table of them all would mix calls
            raise several_devices_error(self.path, sorted(self.devices))
        streams, events = (np.array(column, np.uint64) for column in zip(*self.event_ids)) if self.event_ids else (
            np.zeros(0, np.uint64), np.zeros(0, np.uint64))
        check_unique(self.path, "a host execution event", streams, events)
        devices, ids = (np.array(column, np.uint64) for column in zip(*self.memory_ids)) if self.memory_ids else (
            np.zeros(0, np.uint64), np.zeros(0, np.uint64))
        check_unique(self.path, "a memory event", devices, ids)
        dispatches = np.array(self.dispatch_rows, dtype=DISPATCH_DTYPE)
        submissions = np.array(self.submission_rows, dtype=SUBMISSION_DTYPE)
        queue_ops, memory = np.array(self.queue_op_rows, dtype=QUEUE_OP_DTYPE), np.array(self.memory_rows, dtype=MEMORY_DTYPE)
        if self.device_dispatch_rows:
            if len(dispatches):
                raise SectionmarkError(f"{self.path}: it has both host-timed and device-timed dispatches; sectionmark "
                                       "reads one device's profile at a time")
            clocks = device_clocks(self.path, np.array(self.clock_rows, dtype=CLOCK_SAMPLE_DTYPE))
            dispatches = device_dispatches(self.path, np.array(self.device_dispatch_rows, dtype=DEVICE_DISPATCH_DTYPE),
                                           clocks)
            submissions = device_executions(np.array(self.execute_rows, dtype=EXECUTE_DTYPE), dispatches)
            return checked_profile(self.path, dispatches, submissions, self.keys, self.declared, self.commands,
                                   exports_by_executable(self.functions), Provenance("jsonl", device_timed=True),
                                   queue_ops, memory)
        return checked_profile(self.path, dispatches, submissions, self.keys, self.declared, self.commands,
                       exports_by_executable(self.functions), Provenance("jsonl"), np.array(self.queue_op_rows, dtype=QUEUE_OP_DTYPE),
                       np.array(self.memory_rows, dtype=MEMORY_DTYPE))


def read_jsonl_lines(path: Path, lines: Iterable[tuple[int, str]]) -> Profile:
    return _jsonl_rows(path, lines).finish()


def read_jsonl_devices(path: Path) -> dict[int, Profile]:
    """Each device's events of an ireeperf-jsonl file, by physical device ordinal, read as a one-device export's
    (`_JsonlProfile`): the file read once, and once more per device when it has several."""
    with open_regular(path, "profile") as file:
        every = _jsonl_rows(path, jsonl_lines(path, file))
    devices = sorted(every.devices)
    if len(devices) <= 1:
        return {0: every.finish()}
    every, profiles = None, {}  # every device's rows let go before each device's are read
    for device in devices:
        with open_regular(path, "profile") as file:
            profiles[device] = _jsonl_rows(path, jsonl_lines(path, file), device).finish()
    return profiles


def _jsonl_rows(path: Path, lines: Iterable[tuple[int, str]], device: Optional[int] = None) -> _JsonlProfile:
    """The rows ``lines`` of the file at ``path`` (every device's, or ``device``'s), each checked as it is added;
    a row that is not well formed is one error line naming it."""
    profile = _JsonlProfile(path, device)
    for number, line in lines:
        if not line.strip():
            continue
        try:
            profile.add(json.loads(line))
        except SectionmarkError:
            raise
        except (_BadRow, ValueError, KeyError, TypeError, RecursionError) as error:
            what = f"missing field {error}" if isinstance(error, KeyError) else str(error)[:200]
            raise corrupt(path, f"line {number}: {what}") from None
    return profile


def jsonl_lines(path: Path, stream: BinaryIO) -> Iterator[tuple[int, str]]:
    """Numbered UTF-8 lines, each read with a bound (a profile row is well under a megabyte)."""
    for number in count(1):
        raw = stream.readline(MAX_JSONL_LINE_BYTES + 1)
        if not raw:
            return
        if len(raw) > MAX_JSONL_LINE_BYTES:
            raise corrupt(path, f"line {number} is longer than {MAX_JSONL_LINE_BYTES} bytes")
        try:
            yield number, raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise corrupt(path, f"line {number} is not UTF-8 ({error.reason})") from None


def export_jsonl(path: Path, timeout_s: float = EXPORT_TIMEOUT_S) -> Profile:
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
        profile = read_jsonl_lines(path, jsonl_lines(path, process.stdout))
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
