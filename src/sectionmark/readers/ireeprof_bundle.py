"""The .ireeprof bundle reader: IREE 3.13's binary HAL profile read whole from the mapped file with whole-array numpy.

Events are fixed-size records (`bundle_records`: the container and the
layouts) gathered in one pass (`bundle_events`: in C when the extension is
built); a layout it was not checked against raises `UnsupportedLayout`, and
`read_profile` then falls back to the JSONL reader. The file is mapped, and
read in windows (record headers, host and memory events), each window's pages
given back after it: the mapped file adds a bounded amount to the process's
RSS, not its size (the tables read from it still grow with the events).
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from sectionmark.errors import SectionmarkError
from sectionmark.readers.arrays import first_true
from sectionmark.readers.bundle_events import (HOST_EVENTS_WINDOW, OpenBundle, decode_memory_events, lookup_keys,
                                               open_bundle, raise_host_event_error, split_with_numpy)
from sectionmark.readers.bundle_records import (CLOCK_SAMPLE, DEVICE_DISPATCH_EVENT, HOST_EVENT, MEMORY_EVENT, QUEUE_EVENT,
                                                Chunks, RecordPositions, UnsupportedLayout, fixed_records, records_at,
                                                release_pages)
from sectionmark.readers.checks import KnownOrder, check_unique, checked_profile, corrupt, exports_by_executable
from sectionmark.readers.devices import profile_devices, several_devices_error
from sectionmark.readers.device_events import (CLOCK_SAMPLE_DTYPE, DEVICE_DISPATCH_DTYPE, EXECUTE_DTYPE, device_clocks,
                                              device_dispatches, device_executions)
from sectionmark.readers.event_model import (DISPATCH_DTYPE, EVENT_EXECUTE, MEMORY_DTYPE, QUEUE_OP_DTYPE,
                                             SUBMISSION_DTYPE, Profile, Provenance, native)


def read_bundle(path: Path, file: BinaryIO, size: int) -> Profile:
    return read_open_bundle(open_bundle(path, file, size))


def read_open_bundle(bundle: OpenBundle) -> Profile:
    """Every event of an opened bundle of one device (a split device's file too: `open_split_bundle`)."""
    path = bundle.path
    devices = profile_devices(bundle) if bundle.sessions > 1 else [0]  # a session per device
    if len(devices) > 1:  # each device numbers its own submissions: one table of them all would mix calls
        bundle.close()
        raise several_devices_error(path, devices)
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
    positions = RecordPositions(dispatch_chunks, DEVICE_DISPATCH_EVENT.itemsize)[:]
    per_chunk = dispatch_chunks.lengths // DEVICE_DISPATCH_EVENT.itemsize
    events = np.empty(len(positions), DEVICE_DISPATCH_DTYPE)
    if native() is not None and getattr(native(), "DEVICE_DISPATCH_SIZE", None) == DEVICE_DISPATCH_DTYPE.itemsize:
        bad_length, unknown = native().device_dispatch_events(data, positions, known_codes, known_keys, events)
    else:
        records = records_at(data, positions, DEVICE_DISPATCH_EVENT)
        bad_length = first_true(records["record_length"] != DEVICE_DISPATCH_EVENT.itemsize)
        for name in ("flags", "event_id", "submission", "command_buffer", "command_index", "start_tick", "end_tick"):
            events[name] = records[name]
        events["key"], unknown = lookup_keys(records["executable_id"], records["function_ordinal"], known_codes,
                                             known_keys)
    if bad_length >= 0:
        raise UnsupportedLayout("record length differs from the known layout")
    if unknown >= 0:
        bad = records_at(data, positions[[unknown]], DEVICE_DISPATCH_EVENT)[0]
        raise corrupt(path, f"dispatch of unknown executable function {bad['executable_id']}:{bad['function_ordinal']}")
    events["device"] = np.repeat(dispatch_chunks.devices, per_chunk)
    events["queue"] = np.repeat(dispatch_chunks.queues, per_chunk)
    samples = fixed_records(data, chunks["clock-correlations"], CLOCK_SAMPLE)
    clock_samples = np.zeros(len(samples), CLOCK_SAMPLE_DTYPE)
    for name in CLOCK_SAMPLE_DTYPE.names:
        clock_samples[name] = samples[name]
    dispatches = device_dispatches(path, events, device_clocks(path, clock_samples))
    queue_events = fixed_records(data, chunks["queue-events"], QUEUE_EVENT)
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


@dataclass
class _HostEvents:
    dispatches: np.ndarray
    submissions: np.ndarray
    queue_ops: np.ndarray
    order: KnownOrder


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
