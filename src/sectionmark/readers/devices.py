"""The devices of a .ireeprof of several devices: the file split into one .ireeprof per device, in one pass.

A process driving several devices writes every device's records into one
file, their chunks interleaved every few kB (`sectionmark.readers.devices`).
Reading each device straight from that file would make N passes over all of
it, each mapping in and giving back the pages of every device, with windows
N times wider. Instead, one pass walks the file's records once, finds each
record's device (from its records' own device fields: every chunk header says
IREE's "any"), and writes each device's records, in file order, to its own
file: its session begin and end, its device, queue and command-buffer records
and command operations, its queue, host-execution and memory events; the
executables and their functions (which name no device: an executable's id is
its device's) and chunks of types read by no one go to every device. Each
device's file is then an ordinary one-device profile, read at one device's
speed and memory by the one path every profile takes (and readable by IREE's
own ``iree-profile``); the split costs disk space about the file's size, for as
long as the devices are read.

Every record of a chunk must name its chunk's device, or the file is refused
with one error line: no event can be written into another device's file.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Optional

import numpy as np

from sectionmark.errors import SectionmarkError
from sectionmark.readers.bundle_events import HOST_EVENTS_WINDOW, OpenBundle
from sectionmark.readers.bundle_records import (COMMAND_BUFFER, COMMAND_OPERATION, KNOWN_CHUNKS, KNOWN_CONTENT_TYPES,
                                                RECORD_WALK_WINDOW, Chunks, RecordPositions, records_at,
                                                release_pages, walk_records)
from sectionmark.readers.checks import corrupt

_U32, _U64 = np.dtype("<u4"), np.dtype("<u8")
_FILE_LENGTH = struct.Struct("<Q")
_FILE_LENGTH_OFFSET = 16  # of the file header (magic, major, minor, header_length, flags, file_length)
_SESSION_BEGIN, _CHUNK, _SESSION_END = 1, 2, 3
# Where each record of a chunk type names its device (its physical device ordinal): (record size, field offset);
# IREE 3.13's record layouts (iree/hal/profile_sink.h).
DEVICE_FIELDS = {"host-execution-events": (152, 64), "memory-events": (160, 64), "queue-events": (104, 64),
                 "devices": (32, 8), "queues": (24, 4), "command-buffers": (48, 40), "clock-correlations": (72, 8)}
_EVERY_DEVICE, _NO_DEVICE = -1, -2  # a record written to every device's file, to none
_WRITE_BUFFER = 4 << 20  # bytes buffered per device's file: big sequential writes


class RecordTable:
    """Every record of a bundle, walked once: byte offsets, lengths, record types, and for chunks their content type
    (an index in ``KNOWN_CHUNKS``) and payload."""

    def __init__(self, bundle: OpenBundle, header_length: int):
        offsets, headers, kinds = walk_records(bundle.mapped, bundle.data, header_length, len(bundle.data),
                                               KNOWN_CONTENT_TYPES)
        self.offsets, self.kinds = offsets, kinds  # every record is whole: `open_bundle` checked the file
        self.lengths = headers["record_length"].astype(np.int64)
        self.types = headers["record_type"]
        self.payloads = offsets + (headers["header_size"] + headers["type_length"]
                                   + headers["name_length"]).astype(np.int64)
        self.payload_lengths = headers["payload_length"].astype(np.int64)

    def chunks(self, chunk_type: str) -> tuple[np.ndarray, Chunks]:
        """The records that are chunks of ``chunk_type``, and their payloads."""
        rows = np.flatnonzero((self.types == _CHUNK) & (self.kinds == KNOWN_CHUNKS.index(chunk_type)))
        nothing = np.zeros(len(rows), np.uint32)
        return rows, Chunks(self.payloads[rows], self.payload_lengths[rows], nothing, nothing)


def chunk_devices(bundle: OpenBundle, chunk_type: str, chunks: Optional[Chunks] = None) -> np.ndarray:
    """The device of each chunk of ``chunk_type`` (one of `DEVICE_FIELDS`; ``chunks``: the bundle's, unless given):
    its first record's (-1 for an empty chunk). Every record of the chunk is checked to name it, else one error
    line; in one pass, a window at a time, its pages given back after it."""
    chunks = bundle.chunks[chunk_type] if chunks is None else chunks
    itemsize, offset = DEVICE_FIELDS[chunk_type]
    positions = RecordPositions(chunks, itemsize)
    devices = np.full(len(chunks.starts), -1, np.int64)
    filled = np.flatnonzero(chunks.lengths > 0)
    filled_starts = chunks.starts[filled]
    for begin in range(0, len(positions), HOST_EVENTS_WINDOW):
        window = positions[begin : begin + HOST_EVENTS_WINDOW]
        recorded = records_at(bundle.data, window + offset, _U32).astype(np.int64)
        release_pages(bundle.mapped, int(window[0]), int(window[-1]) + itemsize)
        chunk = filled[np.searchsorted(filled_starts, window, side="right") - 1]
        first = window == chunks.starts[chunk]  # a chunk's first record comes before its others
        devices[chunk[first]] = recorded[first]
        mixed = recorded != devices[chunk]
        if mixed.any():
            raise corrupt(bundle.path, f"a {chunk_type} chunk holds events of devices "
                          f"{int(devices[chunk[mixed][0]])} and {int(recorded[mixed][0])}")
    return devices


def profile_devices(bundle: OpenBundle) -> list[int]:
    """The devices whose host events the bundle holds, in ordinal order (``[0]`` for a one-device run; ``[]``
    when it has no host event): each host-execution chunk's first record's."""
    chunks = bundle.chunks["host-execution-events"]
    offset = DEVICE_FIELDS["host-execution-events"][1]
    found: set[int] = set()
    for begin in range(0, len(chunks.starts), _CHUNKS_WINDOW):  # a chunk is a page or two: give them back
        part = slice(begin, begin + _CHUNKS_WINDOW)
        starts = chunks.starts[part][chunks.lengths[part] > 0]
        found.update(records_at(bundle.data, starts + offset, _U32).tolist())
        release_pages(bundle.mapped, int(chunks.starts[part][0]), int(chunks.starts[part][-1]) + 8)
    return sorted(found)


_CHUNKS_WINDOW = 4096  # chunks whose first record is read per pass (`profile_devices`)


def record_devices(bundle: OpenBundle, table: RecordTable) -> np.ndarray:
    """The device of each record (`_EVERY_DEVICE` for the executables, their functions and chunks read by no
    one; the sessions' begins and ends are `session_devices`')."""
    owner = np.full(len(table.offsets), _EVERY_DEVICE, np.int64)
    for chunk_type in DEVICE_FIELDS:
        rows, chunks = table.chunks(chunk_type)
        owner[rows] = chunk_devices(bundle, chunk_type, chunks)
    buffer_rows, buffer_chunks = table.chunks("command-buffers")
    buffer_positions = RecordPositions(buffer_chunks, DEVICE_FIELDS["command-buffers"][0])[:]
    buffers = records_at(bundle.data, buffer_positions + COMMAND_BUFFER.fields["command_buffer"][1], _U64)
    buffer_devices = records_at(bundle.data, buffer_positions + DEVICE_FIELDS["command-buffers"][1], _U32)
    device_of_buffer = dict(zip(buffers.tolist(), buffer_devices.tolist()))
    rows, chunks = table.chunks("command-operations")
    positions = RecordPositions(chunks, COMMAND_OPERATION.itemsize)
    operated = records_at(bundle.data, positions[:] + COMMAND_OPERATION.fields["command_buffer"][1], _U64)
    chunk = np.searchsorted(chunks.starts, positions[:], side="right") - 1
    for index, buffer in zip(chunk.tolist(), operated.tolist()):
        device = device_of_buffer.get(buffer)
        if device is None:
            raise corrupt(bundle.path, f"command operations of undeclared command buffer {buffer}")
        if owner[rows[index]] not in (_EVERY_DEVICE, device):
            raise corrupt(bundle.path, f"a command-operations chunk holds commands of devices "
                          f"{int(owner[rows[index]])} and {device}")
        owner[rows[index]] = device
    owner[table.types != _CHUNK] = _NO_DEVICE  # the sessions' begins and ends: `session_devices`
    return owner


def session_devices(bundle: OpenBundle, table: RecordTable, owner: np.ndarray) -> None:
    """The k-th session begin and end are the k-th device's (IREE writes each device's begin, then its device
    record); where they do not pair so, every device's file gets the first begin and the last end."""
    devices_rows = np.flatnonzero((table.types == _CHUNK) & (table.kinds == KNOWN_CHUNKS.index("devices")))
    ordinals = owner[devices_rows]
    for record_type in (_SESSION_BEGIN, _SESSION_END):
        rows = np.flatnonzero(table.types == record_type)
        if len(rows) == len(ordinals):
            owner[rows] = ordinals
        else:
            owner[rows[0 if record_type == _SESSION_BEGIN else -1]] = _EVERY_DEVICE


def split_devices(bundle: OpenBundle, devices: list[int], folder: Path) -> dict[int, Path]:
    """Write each device's records of ``bundle`` (of ``devices``, its devices with host events) to its own
    .ireeprof in ``folder``, in one pass over the file: {device: its file}."""
    if bundle.device_timed:
        raise SectionmarkError(f"{bundle.path}: a device-timed profile of several devices cannot be read yet "
                               "(sectionmark reads several CPU devices' host-timed profiles)")
    header_length = int(records_at(bundle.data, np.array([8]), _U32)[0])
    table = RecordTable(bundle, header_length)
    owner = record_devices(bundle, table)
    session_devices(bundle, table, owner)
    ends = table.offsets + table.lengths
    runs = []  # (start, end, device) of each run of consecutive records written to one device's file
    for device in devices:
        chosen = np.concatenate([[False], (owner == device) | (owner == _EVERY_DEVICE), [False]])
        firsts = np.flatnonzero(chosen[1:-1] & ~chosen[:-2])
        lasts = np.flatnonzero(chosen[1:-1] & ~chosen[2:])
        runs.append(np.stack([table.offsets[firsts], ends[lasts], np.full(len(firsts), device)], axis=1))
    every = np.concatenate(runs) if runs else np.zeros((0, 3), np.int64)
    every = every[np.argsort(every[:, 0], kind="stable")]
    paths = {device: folder / f"device{device}.ireeprof" for device in devices}
    files = {device: open(path, "wb", buffering=_WRITE_BUFFER) for device, path in paths.items()}
    try:
        view = memoryview(bundle.mapped)
        head = bytes(view[:header_length])
        for file in files.values():
            file.write(head)
        released = 0
        for start, end, device in every.tolist():
            files[device].write(view[start:end])
            if end - released >= RECORD_WALK_WINDOW:  # the pages read so far go back
                release_pages(bundle.mapped, released, end)
                released = end
        release_pages(bundle.mapped, released, len(bundle.data))
        view.release()
        for file in files.values():
            length = file.tell()
            file.seek(_FILE_LENGTH_OFFSET)
            file.write(_FILE_LENGTH.pack(length))
    finally:
        for file in files.values():
            file.close()
    return paths


def several_devices_error(path: Path, devices: list[int]) -> SectionmarkError:
    """The line for a reader of one device's events given a profile of several devices."""
    return SectionmarkError(f"{path}: the profile records {len(devices)} devices ({', '.join(map(str, devices))}); "
                            "read it per device (sectionmark report / sm.report read each device's events)")
