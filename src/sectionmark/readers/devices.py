"""The devices of a .ireeprof of several devices: the file split into one .ireeprof per device, in one pass.

A process driving several devices writes every device's records into one
file, their chunks interleaved every few kB (`sectionmark.readers.devices`).
Reading each device straight from that file would make N passes over all of
it, each mapping in and giving back the pages of every device, with windows
N times wider. Instead, one pass walks the file's records once, finds each
record's device (from its records' own device fields: every chunk header says
IREE's "any", but a device-timed dispatch-events chunk's, whose records have no
device field: its header names it), and writes each device's records, in file
order, to its own file: its session begin and end, its device, queue and
command-buffer records and command operations, its queue, host-execution and
memory events, or (a GPU's device-timed profile: Vulkan's) its dispatch events
and clock samples; the
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

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from sectionmark.errors import SectionmarkError
from sectionmark.readers.bundle_events import OpenBundle
from sectionmark.readers.bundle_records import (COMMAND_BUFFER, COMMAND_OPERATION, HOST_EVENT, KNOWN_CHUNKS,
                                                MEMORY_EVENT, USED_CHUNKS, Chunks, RecordPositions, records_at,
                                                release_pages)
from sectionmark.readers.checks import corrupt

_U32, _U64 = np.dtype("<u4"), np.dtype("<u8")
_FILE_LENGTH = struct.Struct("<Q")
_FILE_LENGTH_OFFSET = 16  # of the file header (magic, major, minor, header_length, flags, file_length)
_SESSION_BEGIN, _CHUNK, _SESSION_END = 1, 2, 3
# Where each record of a chunk type names its device (its physical device ordinal): (record size, field offset);
# IREE 3.13's record layouts (iree/hal/profile_sink.h).
DEVICE_FIELDS = {"host-execution-events": (HOST_EVENT.itemsize, HOST_EVENT.fields["device"][1]),
                 "memory-events": (MEMORY_EVENT.itemsize, MEMORY_EVENT.fields["device"][1]), "queue-events": (104, 64),
                 "devices": (32, 8), "queues": (24, 4), "command-buffers": (48, 40), "clock-correlations": (72, 8)}
_EVERY_DEVICE, _NO_DEVICE = -1, -2  # a record written to every device's file, to none
_WRITES_PER_CALL = 1024  # runs of records written per `os.writev` (Linux's IOV_MAX)
_BLOCK = 16 << 20  # bytes of the file read per step of the split (`split_devices`)
_EVENT_CHUNKS = ("host-execution-events", "memory-events", "queue-events", "clock-correlations")
_ANY = 0xFFFFFFFF  # a chunk header's device or queue: IREE's "any"


class RecordTable:
    """Every record of a bundle, as `open_bundle` walked them: byte offsets, lengths, record types, and for chunks
    their content type (an index in ``KNOWN_CHUNKS``) and payload."""

    def __init__(self, bundle: OpenBundle):
        walk = bundle.records  # open_bundle's walk, kept for a bundle of several sessions (the bundles split)
        if walk is None:
            raise SectionmarkError(f"internal error: {bundle.path} records one session: there is nothing to split")
        offsets, headers, kinds = walk.offsets, walk.headers, walk.kinds
        self.offsets, self.kinds = offsets, kinds  # every record is whole: `open_bundle` checked the file
        self.lengths = headers["record_length"].astype(np.int64)
        self.types = headers["record_type"]
        self.payloads = offsets + (headers["header_size"] + headers["type_length"]
                                   + headers["name_length"]).astype(np.int64)
        self.payload_lengths = headers["payload_length"].astype(np.int64)
        self.devices, self.queues = headers["device"], headers["queue"]  # of the chunk headers: IREE's "any"

    def chunks(self, chunk_type: str) -> tuple[np.ndarray, Chunks]:
        """The records that are chunks of ``chunk_type``, and their payloads."""
        rows = np.flatnonzero((self.types == _CHUNK) & (self.kinds == KNOWN_CHUNKS.index(chunk_type)))
        return rows, self.chunks_of(rows)

    def chunks_of(self, rows: np.ndarray, start: int = 0) -> Chunks:
        """The payloads of the chunks ``rows``, their offsets from byte ``start`` of the file."""
        return Chunks(self.payloads[rows] - start, self.payload_lengths[rows], self.devices[rows], self.queues[rows])

    def device_chunks(self, owner: np.ndarray, device: int, header_length: int) -> dict[str, Chunks]:
        """The payloads of each used chunk type (`USED_CHUNKS`) in ``device``'s file of the split: its records
        (``owner``: each record's device, or every device's) written one after another after the file header."""
        rows = np.flatnonzero((owner == device) | (owner == _EVERY_DEVICE))
        lengths = self.lengths[rows]
        payloads = header_length + np.cumsum(lengths) - lengths + (self.payloads - self.offsets)[rows]
        kinds = np.where(self.types[rows] == _CHUNK, self.kinds[rows], -1)
        by_kind = np.argsort(kinds, kind="stable")  # each kind's chunks together, in file order
        bounds = np.searchsorted(kinds[by_kind], [KNOWN_CHUNKS.index(name) + side for name in USED_CHUNKS
                                                   for side in (0, 1)])
        payload_lengths, devices, queues = self.payload_lengths[rows], self.devices[rows], self.queues[rows]
        return {name: Chunks(payloads[chosen], payload_lengths[chosen], devices[chosen], queues[chosen])
                for name, first, last in zip(USED_CHUNKS, bounds[0::2], bounds[1::2])
                for chosen in [by_kind[first:last]]}


def chunk_devices(path: Path, data: np.ndarray, chunks: Chunks, chunk_type: str) -> np.ndarray:
    """The device of each chunk of ``chunk_type`` (one of `DEVICE_FIELDS`) whose payloads ``chunks`` places in
    ``data``: its first record's (-1 for an empty chunk). Every record of the chunk is checked to name it, else
    one error line (about ``path``)."""
    itemsize, offset = DEVICE_FIELDS[chunk_type]
    positions = RecordPositions(chunks, itemsize)[:]
    devices = np.full(len(chunks.starts), -1, np.int64)
    if not len(positions):
        return devices
    recorded = records_at(data, positions + offset, _U32).astype(np.int64)
    counts = chunks.lengths // itemsize
    filled = counts > 0
    devices[filled] = recorded[(np.cumsum(counts) - counts)[filled]]  # each chunk's first record's
    chunk_device = np.repeat(devices, counts)
    mixed = recorded != chunk_device
    if mixed.any():
        raise corrupt(path, f"a {chunk_type} chunk holds events of devices {int(chunk_device[mixed][0])} and "
                      f"{int(recorded[mixed][0])}")
    return devices


def profile_devices(bundle: OpenBundle) -> list[int]:
    """The devices whose events the bundle holds, in ordinal order (``[0]`` for a one-device run; ``[]`` when it
    has none): each host-execution chunk's first record's; in a device-timed profile (Vulkan's, which has no
    host-execution events) also each dispatch-events chunk's (named in its header) and each queue-events chunk's
    first record's (a device whose command buffers only copy has queue events and no dispatch)."""
    timed_chunks = ("host-execution-events", "queue-events") if bundle.device_timed else ("host-execution-events",)
    dispatch_devices = bundle.chunks["dispatch-events"].devices
    if (dispatch_devices == _ANY).any():
        raise corrupt(bundle.path, "a dispatch-events chunk names no device")
    found = set(dispatch_devices.tolist())
    for chunk_type in timed_chunks:
        chunks = bundle.chunks[chunk_type]
        offset = DEVICE_FIELDS[chunk_type][1]
        for begin in range(0, len(chunks.starts), _CHUNKS_WINDOW):  # a chunk is a page or two: give them back
            part = slice(begin, begin + _CHUNKS_WINDOW)
            starts = chunks.starts[part][chunks.lengths[part] > 0]
            found.update(records_at(bundle.data, starts + offset, _U32).tolist())
            release_pages(bundle.mapped, int(chunks.starts[part][0]), int(chunks.starts[part][-1]) + 8)
    return sorted(found)


_CHUNKS_WINDOW = 4096  # chunks whose first record is read per pass (`profile_devices`)


def metadata_devices(bundle: OpenBundle, table: RecordTable) -> np.ndarray:
    """The device of each record that is known before the events' (`_EVERY_DEVICE` for the executables, their
    functions and chunks read by no one; `_NO_DEVICE` for the events', found a block at a time): the devices,
    queues, command buffers and their operations (a few records, read from the mapped file) and the sessions'
    begins and ends (`session_devices`), and the device-timed dispatch events (each chunk's header names its
    device)."""
    owner = np.full(len(table.offsets), _EVERY_DEVICE, np.int64)
    for chunk_type in _EVENT_CHUNKS:
        owner[table.chunks(chunk_type)[0]] = _NO_DEVICE
    dispatch_rows = table.chunks("dispatch-events")[0]
    owner[dispatch_rows] = table.devices[dispatch_rows]  # `profile_devices` refused a chunk naming no device
    for chunk_type in ("devices", "queues", "command-buffers"):
        rows, chunks = table.chunks(chunk_type)
        owner[rows] = chunk_devices(bundle.path, bundle.data, chunks, chunk_type)
    buffer_positions = RecordPositions(table.chunks("command-buffers")[1], DEVICE_FIELDS["command-buffers"][0])[:]
    buffers = records_at(bundle.data, buffer_positions + COMMAND_BUFFER.fields["command_buffer"][1], _U64)
    buffer_devices = records_at(bundle.data, buffer_positions + DEVICE_FIELDS["command-buffers"][1], _U32)
    device_of_buffer = dict(zip(buffers.tolist(), buffer_devices.tolist()))
    rows, chunks = table.chunks("command-operations")
    positions = RecordPositions(chunks, COMMAND_OPERATION.itemsize)[:]
    operated = records_at(bundle.data, positions + COMMAND_OPERATION.fields["command_buffer"][1], _U64)
    chunk = np.searchsorted(chunks.starts, positions, side="right") - 1
    for index, buffer in zip(chunk.tolist(), operated.tolist()):
        device = device_of_buffer.get(buffer)
        if device is None:
            raise corrupt(bundle.path, f"command operations of undeclared command buffer {buffer}")
        if owner[rows[index]] not in (_EVERY_DEVICE, device):
            raise corrupt(bundle.path, f"a command-operations chunk holds commands of devices "
                          f"{int(owner[rows[index]])} and {device}")
        owner[rows[index]] = device
    release_pages(bundle.mapped, 0, len(bundle.data))
    session_devices(table, owner)
    return owner


def session_devices(table: RecordTable, owner: np.ndarray) -> None:
    """The k-th session begin and end are the k-th device's (IREE writes each device's begin, then its device
    record); where they do not pair so, every device's file gets the first begin and the last end."""
    ordinals = owner[table.chunks("devices")[0]]
    for record_type in (_SESSION_BEGIN, _SESSION_END):
        rows = np.flatnonzero(table.types == record_type)
        owner[rows] = _NO_DEVICE
        if len(rows) == len(ordinals):
            owner[rows] = ordinals
        else:
            owner[rows[0 if record_type == _SESSION_BEGIN else -1]] = _EVERY_DEVICE


@dataclass
class DeviceFile:
    """One device's .ireeprof written by the split, and the payloads of its chunks there (`RecordTable.device_chunks`),
    with which it is opened without walking its records again (`open_split_bundle`)."""

    path: Path
    chunks: dict[str, Chunks]


def split_devices(bundle: OpenBundle, file: BinaryIO, devices: list[int], folder: Path) -> dict[int, DeviceFile]:
    """Write each device's records of ``bundle`` (open as ``file``; of ``devices``, its devices with host events)
    to its own .ireeprof in ``folder``, in one pass over the file: {device: its file}.

    The records are those `open_bundle` walked (`RecordWalk`), read a block of `_BLOCK` bytes at a time
    into one reused buffer (read, not mapped: no page faults, nothing to give back), each block's events'
    devices found and checked, and each device's runs of records in it written to its file."""
    header_length = int(records_at(bundle.data, np.array([8]), _U32)[0])
    table = RecordTable(bundle)
    owner = metadata_devices(bundle, table)
    event_rows = {chunk_type: table.chunks(chunk_type)[0] for chunk_type in _EVENT_CHUNKS}
    ends = table.offsets + table.lengths
    buffer = np.empty(min(_BLOCK, len(bundle.data)), np.uint8)
    paths = {device: folder / f"device{device}.ireeprof" for device in devices}
    files: dict[int, int] = {}
    try:
        for device, path in paths.items():
            files[device] = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            _write_all(files[device], [memoryview(bundle.data[:header_length].tobytes())])
        first = 0
        while first < len(table.offsets):
            last = max(int(np.searchsorted(ends, table.offsets[first] + _BLOCK, side="right")), first + 1)
            start, end = int(table.offsets[first]), int(ends[last - 1])
            data = buffer if end - start <= len(buffer) else np.empty(end - start, np.uint8)  # one huge record
            if os.preadv(file.fileno(), [data[: end - start]], start) != end - start:
                raise SectionmarkError(f"{bundle.path}: the profile changed while it was read (it is shorter)")
            for chunk_type, rows in event_rows.items():
                inside = rows[np.searchsorted(rows, first) : np.searchsorted(rows, last)]
                owner[inside] = chunk_devices(bundle.path, data, table.chunks_of(inside, start), chunk_type)
            _write_runs(files, data, table.offsets[first:last] - start, ends[first:last] - start, owner[first:last])
            first = last
        for file_descriptor in files.values():
            length = os.lseek(file_descriptor, 0, os.SEEK_CUR)
            os.pwrite(file_descriptor, _FILE_LENGTH.pack(length), _FILE_LENGTH_OFFSET)
    except OSError as error:  # a full disk, most likely
        raise SectionmarkError(f"{bundle.path}: cannot write its devices' files in {folder}: {error.strerror} "
                               "(reading a profile of several devices needs free space about its size in TMPDIR)"
                               ) from None
    finally:
        for file_descriptor in files.values():
            os.close(file_descriptor)
    return {device: DeviceFile(path, table.device_chunks(owner, device, header_length))
            for device, path in paths.items()}


def _write_runs(files: dict[int, int], data: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                owner: np.ndarray) -> None:
    """Write each run of consecutive records (at ``starts``, ``ends`` of ``data``) of a device, or of every device
    (`_EVERY_DEVICE`), to that device's file (``files``: descriptors), straight from ``data``."""
    view = memoryview(data)
    for device, file in files.items():
        chosen = np.concatenate([[False], (owner == device) | (owner == _EVERY_DEVICE), [False]])
        firsts = starts[np.flatnonzero(chosen[1:-1] & ~chosen[:-2])].tolist()
        lasts = ends[np.flatnonzero(chosen[1:-1] & ~chosen[2:])].tolist()
        for begin in range(0, len(firsts), _WRITES_PER_CALL):
            _write_all(file, [view[start:end] for start, end in zip(firsts[begin : begin + _WRITES_PER_CALL],
                                                                     lasts[begin : begin + _WRITES_PER_CALL])])
    view.release()


def _write_all(file: int, parts: list[memoryview]) -> None:
    """Write ``parts`` to ``file`` in order, whole (`os.writev` may write less than asked)."""
    first = 0
    while first < len(parts):
        written = os.writev(file, parts[first:])
        if written == sum(map(len, parts[first:])):  # all of them, as a write to a file nearly always is
            return
        while first < len(parts) and written >= len(parts[first]):
            written -= len(parts[first])
            first += 1
        if written:
            parts[first] = parts[first][written:]


def several_devices_error(path: Path, devices: list[int]) -> SectionmarkError:
    """The line for a reader of one device's events given a profile of several devices."""
    return SectionmarkError(f"{path}: the profile records {len(devices)} devices ({', '.join(map(str, devices))}); "
                            "read it per device (sectionmark report / sm.report read each device's events)")
