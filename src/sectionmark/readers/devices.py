"""The devices of a .ireeprof bundle written by one process driving several devices: one bundle per device.

A process that drives several devices (``iree-benchmark-module --device=local-task --device=local-task``)
writes one profiling session per device into one file: a session begin each, then the devices' chunks, then
a session end each. Event, submission and queue ids count per device, so they collide across devices; command
buffer and executable ids do not (the same executable loaded on two devices gets two ids, both listed with
their functions). Each chunk of host execution events or memory events holds one device's events (its
records carry the device's ordinal: the chunk header's own device field is IREE's "any"), and each command
buffer record names its device.

So the natural split is per device: `device_bundles` gives, for each device, the bundle with only that
device's event chunks and command buffers, over the same mapped file. Each is read by the one path every
host-timed bundle takes (`ireeprof_stream.DispatchStream`, its first pass and its dispatch windows), and
attributed by the one path every source takes (`sectionmark.profiling.read`): events are keyed by (device,
event id) by construction. Every record of a chunk is checked to carry its chunk's device (a window at a
time, its pages given back after it), so no event can be read as another device's.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import BinaryIO, Optional

import numpy as np

from sectionmark.errors import SectionmarkError
from sectionmark.readers.bundle_events import HOST_EVENTS_WINDOW, OpenBundle
from sectionmark.readers.bundle_records import (COMMAND_BUFFER, HOST_EVENT, MEMORY_EVENT, Chunks, RecordPositions,
                                                fixed_records, records_at, release_pages)
from sectionmark.readers.checks import corrupt
from sectionmark.readers.ireeprof_stream import DispatchStream

_U32 = np.dtype("<u4")
# Where each record names its device (its physical device ordinal): IREE 3.13's record layouts.
COMMAND_BUFFER_DEVICE_OFFSET = 40
_DEVICE_OFFSETS = {"host-execution-events": (HOST_EVENT.itemsize, HOST_EVENT.fields["device"][1]),
                   "memory-events": (MEMORY_EVENT.itemsize, MEMORY_EVENT.fields["device"][1])}


def chunk_devices(bundle: OpenBundle, chunk_type: str) -> np.ndarray:
    """The device of each chunk of ``chunk_type`` (one of ``_DEVICE_OFFSETS``): its first record's (-1 for an
    empty chunk)."""
    chunks = bundle.chunks[chunk_type]
    offset = _DEVICE_OFFSETS[chunk_type][1]
    devices = np.full(len(chunks.starts), -1, np.int64)
    for begin in range(0, len(chunks.starts), _CHUNKS_WINDOW):  # a chunk is a page or two: give them back
        part = slice(begin, begin + _CHUNKS_WINDOW)
        starts, filled = chunks.starts[part], chunks.lengths[part] > 0
        devices[part][filled] = records_at(bundle.data, starts[filled] + offset, _U32)
        release_pages(bundle.mapped, int(starts[0]), int(starts[-1]) + 8)
    return devices


_CHUNKS_WINDOW = 4096  # chunks whose first record is read per pass (`chunk_devices`)


def profile_devices(bundle: OpenBundle) -> list[int]:
    """The devices whose host events the bundle holds, in ordinal order (``[0]`` for a one-device run; ``[]``
    when it has no host event)."""
    devices = chunk_devices(bundle, "host-execution-events")
    return sorted(set(devices[devices >= 0].tolist()))


def _check_chunk_devices(bundle: OpenBundle, chunk_type: str, devices: np.ndarray) -> None:
    """Every record of every ``chunk_type`` chunk names its chunk's device (``devices``), else one error line."""
    chunks = bundle.chunks[chunk_type]
    itemsize, offset = _DEVICE_OFFSETS[chunk_type]
    positions = RecordPositions(chunks, itemsize)
    for begin in range(0, len(positions), HOST_EVENTS_WINDOW):
        window = positions[begin : begin + HOST_EVENTS_WINDOW]
        recorded = records_at(bundle.data, window + offset, _U32).astype(np.int64)
        chunk = np.searchsorted(chunks.starts, window, side="right") - 1
        release_pages(bundle.mapped, int(window[0]), int(window[-1]) + itemsize)
        mixed = recorded != devices[chunk]
        if mixed.any():
            raise corrupt(bundle.path, f"a {chunk_type} chunk holds events of devices {int(devices[chunk[mixed][0]])} "
                          f"and {int(recorded[mixed][0])}")


def _chunks_of(chunks: Chunks, chosen: np.ndarray) -> Chunks:
    return Chunks(chunks.starts[chosen], chunks.lengths[chosen], chunks.devices[chosen], chunks.queues[chosen])


def device_bundles(bundle: OpenBundle) -> dict[int, OpenBundle]:
    """Each device's bundle (by ordinal): its host and memory event chunks and its command buffers, over the same
    mapped file; the functions of every executable stay (an executable's id names its device)."""
    if bundle.device_timed:
        raise SectionmarkError(f"{bundle.path}: a device-timed profile of several devices cannot be read yet "
                               "(sectionmark reads several CPU devices' host-timed profiles)")
    by_type = {}
    for chunk_type in _DEVICE_OFFSETS:
        devices = chunk_devices(bundle, chunk_type)
        _check_chunk_devices(bundle, chunk_type, devices)
        by_type[chunk_type] = devices
    records = fixed_records(bundle.data, bundle.chunks["command-buffers"], COMMAND_BUFFER)
    buffer_ids = records["command_buffer"].tolist()
    starts = RecordPositions(bundle.chunks["command-buffers"], COMMAND_BUFFER.itemsize)[:]
    buffer_devices = records_at(bundle.data, starts + COMMAND_BUFFER_DEVICE_OFFSET, _U32).tolist()
    device_of_buffer = dict(zip(buffer_ids, buffer_devices))
    bundles = {}
    for device in profile_devices(bundle):
        chunks = dict(bundle.chunks)
        for chunk_type, devices in by_type.items():
            chunks[chunk_type] = _chunks_of(bundle.chunks[chunk_type], devices == device)
        declared = {buffer for buffer in bundle.declared if device_of_buffer.get(buffer) == device}
        commands = {buffer: recorded for buffer, recorded in bundle.commands.items() if buffer in declared}
        bundles[device] = replace(bundle, chunks=chunks, declared=declared, commands=commands)
    return bundles


def several_devices_error(path: Path, devices: list[int]) -> SectionmarkError:
    """The line for a reader of one device's events given a profile of several devices."""
    return SectionmarkError(f"{path}: the profile records {len(devices)} devices ({', '.join(map(str, devices))}); "
                            "read it per device (sectionmark report / sm.report read each device's events)")


class DeviceDispatchStream(DispatchStream):
    """One device's events of a bundle of several, read as every host-timed bundle's are (`DispatchStream`), but
    its windows are the mapped file itself, not a read copy: a window of the device's records spans the other
    devices' chunks between them, so a copy of it would make reading N devices N passes over the whole file.
    Only the pages of this device's records are touched (mapped in), and given back at the next window; the
    last window's go with the map."""

    def __init__(self, bundle: OpenBundle, file: BinaryIO):
        super().__init__(bundle, file)
        self._mapped_window: Optional[tuple[int, int]] = None  # the bytes the last window mapped in

    def _read(self, start: int, end: int) -> np.ndarray:
        if self._mapped_window is not None:
            release_pages(self._bundle.mapped, *self._mapped_window)
        self._mapped_window = (start, end)
        return self._bundle.data[start:end]
