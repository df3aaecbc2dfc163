"""The .ireeprof bundle layout (IREE 3.13), for editing precise fields of real profiles in tests.

Written down from IREE's `iree/hal/profile_sink.h` and the bundle file format,
independently of sectionmark's reader, so that a test can corrupt one field
of a real profile and check that the reader notices (or that the result still
matches `iree-profile export` of the same file).
"""

from __future__ import annotations

from dataclasses import dataclass

CONTENT_PREFIX = "application/vnd.iree.hal.profile."
RECORD_SESSION_END = 3
Fields = dict[str, tuple[int, int]]  # name -> (offset, size in bytes)

FILE_HEADER_FIELDS: Fields = {"magic": (0, 4), "version_major": (4, 2), "version_minor": (6, 2),
                              "header_length": (8, 4), "flags": (12, 4), "file_length": (16, 8)}
RECORD_HEADER_FIELDS: Fields = {
    "record_length": (0, 8), "payload_length": (8, 8), "session_id": (16, 8), "stream_id": (24, 8),
    "event_id": (32, 8), "executable_id": (40, 8), "command_buffer_id": (48, 8), "header_length": (56, 4),
    "content_type_length": (60, 4), "name_length": (64, 4), "physical_device_ordinal": (68, 4),
    "queue_ordinal": (72, 4), "chunk_flags": (80, 8), "dropped_record_count": (88, 8),
    "session_status_code": (96, 4), "record_type": (100, 2), "record_flags": (102, 2),
}
HOST_EXECUTION_EVENT: tuple[int, Fields] = (152, {
    "record_length": (0, 4), "type": (4, 4), "flags": (8, 4), "status_code": (12, 4), "event_id": (16, 8),
    "submission_id": (24, 8), "command_buffer_id": (32, 8), "executable_id": (40, 8), "allocation_id": (48, 8),
    "stream_id": (56, 8), "physical_device_ordinal": (64, 4), "queue_ordinal": (68, 4), "command_index": (72, 4),
    "export_ordinal": (76, 4), "workgroup_count_x": (80, 4), "workgroup_count_y": (84, 4),
    "workgroup_count_z": (88, 4), "workgroup_size_x": (92, 4), "workgroup_size_y": (96, 4),
    "workgroup_size_z": (100, 4), "start_host_time_ns": (104, 8), "end_host_time_ns": (112, 8),
    "payload_length": (120, 8), "tile_count": (128, 8), "tile_duration_sum_ns": (136, 8),
    "operation_count": (144, 4), "reserved0": (148, 4),
})
COMMAND_OPERATION: tuple[int, Fields] = (120, {
    "record_length": (0, 4), "type": (4, 4), "flags": (8, 4), "command_index": (12, 4),
    "command_buffer_id": (16, 8), "block_ordinal": (24, 4), "block_command_ordinal": (28, 4),
    "executable_id": (32, 8), "export_ordinal": (40, 4), "binding_count": (44, 4), "workgroup_count_x": (48, 4),
    "workgroup_count_y": (52, 4), "workgroup_count_z": (56, 4), "workgroup_size_x": (60, 4),
    "workgroup_size_y": (64, 4), "workgroup_size_z": (68, 4), "source_offset": (72, 8), "target_offset": (80, 8),
    "length": (88, 8), "source_ordinal": (96, 4), "target_ordinal": (100, 4), "target_block_ordinal": (104, 4),
    "alternate_block_ordinal": (108, 4), "reserved0": (112, 4),
})
COMMAND_BUFFER: tuple[int, Fields] = (48, {
    "record_length": (0, 4), "flags": (4, 4), "command_buffer_id": (8, 8), "mode": (16, 8),
    "command_categories": (24, 8), "queue_affinity": (32, 8), "physical_device_ordinal": (40, 4), "reserved0": (44, 4),
})
MEMORY_EVENT: tuple[int, Fields] = (160, {
    "record_length": (0, 4), "type": (4, 4), "flags": (8, 4), "result": (12, 4), "event_id": (16, 8),
    "host_time_ns": (24, 8), "allocation_id": (32, 8), "pool_id": (40, 8), "backing_id": (48, 8),
    "submission_id": (56, 8), "physical_device_ordinal": (64, 4), "queue_ordinal": (68, 4),
    "frontier_entry_count": (72, 4), "reserved0": (76, 4), "memory_type": (80, 8), "buffer_usage": (88, 8),
    "offset": (96, 8), "length": (104, 8), "alignment": (112, 8), "pool_bytes_reserved": (120, 8),
    "pool_bytes_free": (128, 8), "pool_bytes_committed": (136, 8), "pool_budget_limit": (144, 8),
    "pool_reservation_count": (152, 4), "pool_slab_count": (156, 4),
})
DISPATCH_EVENT: tuple[int, Fields] = (88, {  # device-timed (Vulkan); device and queue are the chunk header's
    "record_length": (0, 4), "flags": (4, 4), "event_id": (8, 8), "submission_id": (16, 8),
    "command_buffer_id": (24, 8), "executable_id": (32, 8), "command_index": (40, 4), "export_ordinal": (44, 4),
    "workgroup_count_x": (48, 4), "workgroup_count_y": (52, 4), "workgroup_count_z": (56, 4),
    "workgroup_size_x": (60, 4), "workgroup_size_y": (64, 4), "workgroup_size_z": (68, 4), "start_tick": (72, 8),
    "end_tick": (80, 8),
})
CLOCK_CORRELATION: tuple[int, Fields] = (72, {
    "record_length": (0, 4), "flags": (4, 4), "physical_device_ordinal": (8, 4), "reserved0": (12, 4),
    "sample_id": (16, 8), "device_tick": (24, 8), "host_cpu_timestamp_ns": (32, 8), "host_system_timestamp": (40, 8),
    "host_system_frequency_hz": (48, 8), "host_time_begin_ns": (56, 8), "host_time_end_ns": (64, 8),
})
QUEUE_EVENT: tuple[int, Fields] = (104, {
    "record_length": (0, 4), "type": (4, 4), "flags": (8, 4), "dependency_strategy": (12, 4), "event_id": (16, 8),
    "host_time_ns": (24, 8), "submission_id": (32, 8), "command_buffer_id": (40, 8), "allocation_id": (48, 8),
    "stream_id": (56, 8), "physical_device_ordinal": (64, 4), "queue_ordinal": (68, 4), "wait_count": (72, 4),
    "signal_count": (76, 4), "barrier_count": (80, 4), "operation_count": (84, 4), "payload_length": (88, 8),
    "ready_host_time_ns": (96, 8),
})
FUNCTION_HEADER_SIZE = 64  # executable function record: this header, then name_length bytes of name
FUNCTION_FIELDS: Fields = {"record_length": (0, 4), "flags": (4, 4), "executable_id": (8, 8),
                           "function_ordinal": (16, 4), "name_length": (44, 4)}
FUNCTION_NAME_LENGTH = FUNCTION_FIELDS["name_length"]
RECORD_HEADER_SIZE = 104
FIXED_RECORDS = {"host-execution-events": HOST_EXECUTION_EVENT, "command-operations": COMMAND_OPERATION,
                 "command-buffers": COMMAND_BUFFER, "memory-events": MEMORY_EVENT, "dispatch-events": DISPATCH_EVENT,
                 "clock-correlations": CLOCK_CORRELATION, "queue-events": QUEUE_EVENT}


@dataclass(frozen=True)
class Record:
    offset: int
    length: int
    record_type: int
    content_type: str  # without CONTENT_PREFIX
    payload: int  # absolute offset of the payload
    payload_length: int


def read(blob: bytes, offset: int, size: int) -> int:
    return int.from_bytes(blob[offset : offset + size], "little")


def write(blob: bytearray, offset: int, size: int, value: int) -> None:
    blob[offset : offset + size] = (value % (1 << (8 * size))).to_bytes(size, "little")


def records(blob: bytes) -> list[Record]:
    """The records of a well-formed bundle."""
    found = []
    offset = read(blob, *FILE_HEADER_FIELDS["header_length"])
    while offset < len(blob):
        field = {name: read(blob, offset + at, size) for name, (at, size) in RECORD_HEADER_FIELDS.items()}
        type_start = offset + field["header_length"]
        content_type = blob[type_start : type_start + field["content_type_length"]].decode().removeprefix(CONTENT_PREFIX)
        payload = type_start + field["content_type_length"] + field["name_length"]
        found.append(Record(offset, field["record_length"], field["record_type"], content_type, payload,
                            field["payload_length"]))
        offset += field["record_length"]
    return found


def fixed_records(blob: bytes, content_type: str) -> list[int]:
    """Absolute offsets of every fixed-size record in the chunks of one content type."""
    size, _fields = FIXED_RECORDS[content_type]
    return [base for record in records(blob) if record.content_type == content_type
            for base in range(record.payload, record.payload + record.payload_length - size + 1, size)]


def _function_fields(record: Record, blob: bytes) -> list[tuple[str, int, int]]:
    """(name, offset, size) of the fields of the variable-size executable function records; "name" is the name."""
    fields, base = [], record.payload
    while base < record.payload + record.payload_length:
        name_length = read(blob, base + FUNCTION_NAME_LENGTH[0], FUNCTION_NAME_LENGTH[1])
        fields += [(name, base + at, size) for name, (at, size) in FUNCTION_FIELDS.items()]
        fields.append(("name", base + FUNCTION_HEADER_SIZE, name_length))
        base += read(blob, base, 4)
    return fields


def fields(blob: bytes) -> list[tuple[str, str, int, int]]:
    """(where, field, offset, size) of every header and record field of a well-formed bundle.

    ``where`` is "file", "record" (a record header), "content_type", "record_name", or the chunk
    content type of a payload record.
    """
    found = [("file", name, at, size) for name, (at, size) in FILE_HEADER_FIELDS.items()]
    for record in records(blob):
        found += [("record", name, record.offset + at, size) for name, (at, size) in RECORD_HEADER_FIELDS.items()]
        type_start = record.offset + RECORD_HEADER_SIZE
        type_length = len(CONTENT_PREFIX) + len(record.content_type)
        found += [("content_type", "", type_start, type_length),
                  ("record_name", "", type_start + type_length, record.payload - type_start - type_length)]
        if record.content_type in FIXED_RECORDS:
            size, layout = FIXED_RECORDS[record.content_type]
            for base in range(record.payload, record.payload + record.payload_length - size + 1, size):
                found += [(record.content_type, name, base + at, width) for name, (at, width) in layout.items()]
        elif record.content_type == "executable-functions":
            found += [(record.content_type, name, at, size) for name, at, size in _function_fields(record, blob)]
    return found


def field_spans(blob: bytes) -> list[tuple[int, int]]:
    """(offset, size) of every header and record field, and of each byte of names: where corruption means something."""
    spans = []
    for where, field, offset, size in fields(blob):
        if where in ("content_type", "record_name") or field == "name":
            spans += [(offset + index, 1) for index in range(size)]
        else:
            spans.append((offset, size))
    return spans


def unread_positions(blob: bytes, read_fields: dict[str, set[str]]) -> list[int]:
    """Byte positions that no field named in ``read_fields`` (``where`` -> field names) covers."""
    covered = bytearray(len(blob))
    for where, field, offset, size in fields(blob):
        if field in read_fields.get(where, ()):
            covered[offset : offset + size] = b"\x01" * size
    return [position for position, flag in enumerate(covered) if not flag]


def with_record(blob: bytes, content_type: str, payload: bytes, after_end: bool = False) -> bytes:
    """The bundle with one more chunk record, before the session end record (or after it)."""
    end = next(record for record in records(blob) if record.record_type == RECORD_SESSION_END)
    template = bytearray(blob[end.offset : end.offset + RECORD_HEADER_SIZE])
    type_bytes, name = (CONTENT_PREFIX + content_type).encode(), b"test"
    for field, value in [("record_length", RECORD_HEADER_SIZE + len(type_bytes) + len(name) + len(payload)),
                         ("payload_length", len(payload)), ("header_length", RECORD_HEADER_SIZE),
                         ("content_type_length", len(type_bytes)), ("name_length", len(name)), ("record_type", 2)]:
        write(template, *RECORD_HEADER_FIELDS[field], value)
    record = bytes(template) + type_bytes + name + payload
    at = len(blob) if after_end else end.offset
    edited = bytearray(blob[:at] + record + blob[at:])
    write(edited, *FILE_HEADER_FIELDS["file_length"], len(edited))
    return bytes(edited)


def duplicated(blob: bytes, record: Record) -> bytes:
    """The bundle with a copy of ``record`` right after it."""
    copy = blob[record.offset : record.offset + record.length]
    edited = bytearray(blob[: record.offset + record.length] + copy + blob[record.offset + record.length :])
    write(edited, *FILE_HEADER_FIELDS["file_length"], len(edited))
    return bytes(edited)
