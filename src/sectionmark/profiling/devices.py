"""A run on several devices: each device's session, the sections across devices, and where each device's time went.

One process driving several devices records one profiling session per device
in one file (`sectionmark.readers.devices`). Each device's events are read and
attributed by the one path every profile takes (`sectionmark.profiling.read`),
so each device's session is exactly a one-device session of that device's
events: its busy time per section is the sum of its own dispatch events, its
coverage is checked on its own events. On top of them, here:

* the sections across devices (`DeviceSectionRow`): each section's busy and
  wall time on every device, and their sums. A section may span devices;
* where each device's time went in each measured call (`DeviceTime`,
  `split_device_time`). A call's window is the stretch from the first queue
  operation of that call on any device to the last one's end (the calls'
  windows clipped not to overlap, as one device's are). Each nanosecond of it
  goes, for each device, to exactly one of:
  ``compute`` (a dispatch of the device ran), ``transfer`` (inside one of its
  command-buffer executions with no dispatch running, where the buffer records
  a copy, fill or update between the dispatches on either side: the copies of
  a tensor to or from another device, which neither local-task nor CUDA times
  one by one (`sectionmark.profiling.device_transfers`); plus its queue fills,
  copies, updates, reads and writes), ``gaps`` (the rest of its executions'
  time with no dispatch running: launches and barriers between dispatches),
  ``queue`` (its allocations and other queue operations), ``waiting`` (the
  device ran nothing while another device did) and ``idle`` (no device ran
  anything). So compute + transfer + gaps + queue + waiting + idle = the
  call's window, on every device, exactly (integer nanoseconds from the same
  events). A device whose profile times only its dispatches (a GPU's
  device-timed profile, Vulkan's: no host-execution events, its queue
  operations mere instants, its executions known only from their first
  dispatch's start to their last one's end) has one more part, ``untimed``:
  the rest of the window, where its events cannot tell its copies before its
  first or after its last dispatch, its queue operations, its waiting and its
  idle time apart. Its ``queue``, ``waiting`` and ``idle`` are then 0 and
  ``untimed`` holds them, never guessed; its ``transfer`` is the time between
  its dispatches around copy commands, and its compute and gaps are exact;
  ``overlap`` is the time the device ran something while another device ran
  something too;
* each device's transfer time by section (`sectionmark.profiling.device_transfers`):
  each command-buffer execution's transfer time goes to the sections of that
  buffer's copy commands, so a device's sections' transfers add up to its
  ``transfer`` exactly (`DeviceSectionRow.transfer_ns`); and its waiting time by
  section (`sectionmark.profiling.device_waits`): each wait goes to the section
  the device waits to run, adding up to its ``waiting`` exactly.

Everything here is plain data and pure functions over numpy arrays (unit-tested on hand-built data in
tests/profiling/test_devices.py); `read_device_profile` is the only function that reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional, Union

import numpy as np

from sectionmark.errors import SectionmarkError
from sectionmark.outputs import PathLike
from sectionmark.profiling.attribute import NO_DISPATCH_EVENTS, SlotMatcher, attribution_without_events, call_numbers
from sectionmark.profiling.device_activity import DeviceActivity
from sectionmark.profiling.device_sessions import DeviceRead, device_sessions
from sectionmark.profiling.device_transfers import ExecutionGaps, SectionTransfers, section_transfers, static_buffers
from sectionmark.profiling.device_waits import SectionWaits, section_waits, waiting_stretches
from sectionmark.profiling.queue_time import (ALLOCATION, COMMAND_BUFFER, OTHER_QUEUE, QUEUE_ROWS, ROW_OF_EVENT_TYPE,
                                              TRANSFER, call_windows, measured_windows, partition_time)
from sectionmark.profiling.read import attributed_totals
from sectionmark.profiling.session import ProfileSession
from sectionmark.readers.event_model import Profile
from sectionmark.readers.sources import EventSource, close_all
from sectionmark.section_map import SectionMap, device_section_map
from sectionmark.section_path import SectionPath
from sectionmark.serialization import json_field

DEVICE_TIME_PARTS = ("compute", "transfer", "gaps", "queue", "waiting", "idle", "untimed")


@dataclass
class DeviceTime:
    """Where one device's time went over the measured calls' windows (module docstring): ns summed over the calls,
    and per call."""

    compute_ns: int
    transfer_ns: int
    gaps_ns: int
    queue_ns: int
    waiting_ns: int
    idle_ns: int
    window_ns: int  # the calls' windows: the six parts above add up to it exactly
    overlap_ns: int  # time it ran something while another device ran something too
    per_call: list[list[int]] = field(default_factory=list)  # [call] -> the six parts, in DEVICE_TIME_PARTS order
    # The part of ``transfer_ns`` of queue transfers outside command buffers (fills, copies, updates, reads, writes);
    # the rest is the command-buffer executions' time with no dispatch running around their copy commands.
    queue_transfer_ns: int = 0
    # A device-timed device's time its events do not tell apart (module docstring): its queue, waiting and idle
    # time, and its copies outside its dispatches' span; 0 on a device whose events time all of them.
    untimed_ns: int = 0


@dataclass
class DeviceSession:
    """One device of the run: its ordinal (the order of ``--device``), its IREE device, its session."""

    ordinal: int
    device: Optional[str]
    session: ProfileSession
    time: Optional[DeviceTime] = None  # None when the calls' windows are not known (no queue operations)
    transfers: Optional[SectionTransfers] = None  # its transfer time by section; None with ``time``
    waits: Optional[SectionWaits] = None  # its waiting time by section; None with ``time``


@dataclass
class DeviceSectionRow:
    """A section across devices: its busy and wall time on each device (ns over the measured calls; 0 where it
    did not run) and their sums."""

    path: SectionPath
    busy_ns: list[float] = json_field(rounded=True)  # by device, in `DeviceProfile.devices` order
    wall_ns: list[float] = json_field(rounded=True)
    ran_on: list[int] = field(default_factory=list)  # the ordinals of the devices where it ran dispatches
    # Its transfer time on each device (`sectionmark.profiling.device_transfers`); 0 where it copied nothing.
    transfer_ns: list[float] = json_field(rounded=True, default_factory=list)
    # The ordinals of the devices where its transfer time was split with other sections' copies of one execution.
    transfer_split: list[int] = field(default_factory=list)
    # The time each device waited for another to run it (`sectionmark.profiling.device_waits`), and the devices
    # where that wait was split by the shares of the fused dispatch waited for.
    waiting_ns: list[float] = json_field(rounded=True, default_factory=list)
    waiting_split: list[int] = field(default_factory=list)

    @property
    def total_busy_ns(self) -> float:
        return float(sum(self.busy_ns))


@dataclass
class DeviceProfile:
    """A profiled run on several devices: each device's session and the views across them."""

    devices: list[DeviceSession]
    sections: list[DeviceSectionRow]
    calls: int
    function: Optional[str] = None
    # The measured calls' windows across devices (`common_windows`: starts, ends), those the time split is in;
    # None where not known (no time split, or read back from JSON, which does not hold them).
    call_windows: Optional[tuple[np.ndarray, np.ndarray]] = field(default=None, repr=False)

    def device(self, ordinal: int) -> ProfileSession:
        """One device's session (every output of a one-device profile draws it)."""
        for device in self.devices:
            if device.ordinal == ordinal:
                return device.session
        known = ", ".join(str(device.ordinal) for device in self.devices)
        raise SectionmarkError(f"the profile has no device {ordinal} (it has: {known})")

    def render(self, format: str, **options: Any) -> Union[str, bytes]:
        """The table, JSON or CSV of every device (`sectionmark.renderers.devices`), looked up when called."""
        from sectionmark import renderers

        return renderers.render_devices(self, format, **options)

    def table(self) -> str:
        return self.render("table")

    def save(self, path: PathLike, format: Optional[str] = None, *, inputs: Iterable[PathLike] = (),
             **options: Any) -> Path:
        """Write the table (.txt), JSON (.json) or CSV (.csv) of every device to ``path``, all at once."""
        from sectionmark import renderers

        return renderers.save(self, path, format, inputs=inputs, **options)


def device_sections(devices: list[DeviceSession]) -> list[DeviceSectionRow]:
    """Every section of any device's session (in the first order met, "(unmarked)" last), with its busy and wall
    time on each device."""
    rows: dict[SectionPath, DeviceSectionRow] = {}
    for index, device in enumerate(devices):
        for stats in device.session.sections:
            row = rows.setdefault(stats.path, DeviceSectionRow(stats.path, [0.0] * len(devices),
                                                               [0.0] * len(devices)))
            row.busy_ns[index], row.wall_ns[index] = stats.busy_ns, stats.wall_ns
            if stats.dispatches:
                row.ran_on.append(device.ordinal)
    return sorted(rows.values(), key=lambda row: row.path == ())  # stable: unmarked last


def common_windows(spans: list[np.ndarray], calls: int) -> tuple[np.ndarray, np.ndarray]:
    """The windows of the measured calls across devices: from the first queue operation of the call on any device
    to the last one's end, clipped not to overlap (`call_windows`)."""
    measured = [part[(part["call"] >= 0) & (part["call"] < calls)] for part in spans]
    every = np.concatenate(measured)
    return call_windows(every["start_ns"].astype(np.int64), every["end_ns"].astype(np.int64),
                        every["call"].astype(np.int64), calls)


def split_device_time(spans: list[np.ndarray], compute: list[np.ndarray], windows: tuple[np.ndarray, np.ndarray],
                      activity: Optional[DeviceActivity] = None,
                      copies: Optional[list[np.ndarray]] = None,
                      dispatches_only: Optional[list[bool]] = None) -> list[DeviceTime]:
    """Each device's `DeviceTime` in ``windows`` (per call: starts, ends): ``spans``, each device's queue spans
    (QUEUE_SPAN_DTYPE: its executions and other queue operations); ``compute``, the union of its dispatch
    intervals in each window (int64 per call); ``copies``, the part of its executions' time with no dispatch
    running that is transfer in each window (`ExecutionGaps.transfer_by_window`; None: none is, all of it is
    gaps); ``activity``: the devices' sweep of ``spans`` when already made; ``dispatches_only``: the devices
    whose events time only their dispatches (`Provenance.dispatches_only`: their queue, waiting and idle time
    is ``untimed``). Exact: the parts of every call add up to its window."""
    starts, ends = windows
    length = ends - starts
    activity = DeviceActivity(spans, windows) if activity is None else activity
    any_busy = activity.anyone()
    times = []
    copies = [np.zeros(len(starts), np.int64)] * len(spans) if copies is None else copies
    dispatches_only = [False] * len(spans) if dispatches_only is None else dispatches_only
    for index, (part, dispatch, copied, untimed) in enumerate(zip(spans, compute, copies, dispatches_only)):
        parts = partition_time(part["start_ns"], part["end_ns"], ROW_OF_EVENT_TYPE[part["type"]], len(QUEUE_ROWS),
                               starts, ends).astype(np.int64)
        busy = length - parts[:, len(QUEUE_ROWS)]
        dispatch = np.asarray(dispatch, np.int64)
        executions, copied = parts[:, COMMAND_BUFFER], np.asarray(copied, np.int64)
        if (dispatch + copied > executions).any():
            raise SectionmarkError("internal error: a device's dispatches and copies reach outside its "
                                   "command-buffer executions in a call's window")
        per_call = np.stack([dispatch, copied + parts[:, TRANSFER], executions - dispatch - copied,
                             parts[:, ALLOCATION] + parts[:, OTHER_QUEUE], any_busy - busy, length - any_busy,
                             np.zeros_like(length)], axis=1)
        if untimed:  # queue, waiting and idle: not told apart by its events
            per_call[:, -1] = per_call[:, 3:6].sum(axis=1)
            per_call[:, 3:6] = 0
        sums = [int(value) for value in per_call.sum(axis=0)]
        times.append(DeviceTime(*sums[:-1], window_ns=int(length.sum()), overlap_ns=int(activity.overlap(index).sum()),
                                per_call=per_call.tolist(), queue_transfer_ns=int(parts[:, TRANSFER].sum()),
                                untimed_ns=sums[-1]))
    return times


def read_device_profile(sources: dict[int, EventSource], section_map: SectionMap, *, calls: Optional[int] = None,
                        warmup: int = 0, function: Optional[str] = None, workers: Optional[int] = None,
                        devices: Optional[list[str]] = None) -> DeviceProfile:
    """The `DeviceProfile` of each device's events (``sources``, by ordinal: `open_device_sources`), each read and
    attributed as one device's profile is (`sectionmark.profiling.read`). ``devices``: the IREE devices, in
    ordinal order (``--device``), to name them. Every source is closed when this returns or fails."""
    try:
        return _read_devices(sources, section_map, calls, warmup, function, workers, devices)
    finally:
        close_all(sources)


def _read_devices(sources: dict[int, EventSource], section_map: SectionMap, calls: Optional[int], warmup: int,
                  function: Optional[str], workers: Optional[int], devices: Optional[list[str]]) -> DeviceProfile:
    summed: list[DeviceRead] = []
    windows_of_calls = _calls_windows_once(sources, section_map, calls, warmup, function)
    tees = {ordinal: _TransferSweep(source, windows_of_calls) for ordinal, source in sources.items()}
    for ordinal, source in sorted(tees.items()):
        name = devices[ordinal] if devices is not None and ordinal < len(devices) else None
        device_map = device_section_map(section_map, ordinal)
        try:
            attribution, totals = attributed_totals(source, device_map, calls=calls, warmup=warmup,
                                                    function=function)
        except SectionmarkError as problem:  # which device's events it is about
            raise SectionmarkError(f"device {ordinal}: {source.explain(problem)}") from None
        summed.append((ordinal, name, device_map, attribution, totals))
    read = [(ordinal, attribution, totals) for ordinal, _name, _map, attribution, totals in summed]
    sessions = [DeviceSession(ordinal, name, session) for (ordinal, name, *_rest), session
                in zip(summed, device_sessions(summed, function, workers))]
    # A device that ran no dispatch is kept (its transfers and waits), but not every device.
    if not any(totals.sums.count.sum() for _ordinal, _attribution, totals in read):
        raise SectionmarkError(NO_DISPATCH_EVENTS)
    counts = {attribution.calls for _ordinal, attribution, _totals in read}
    if len(counts) > 1:
        raise SectionmarkError(f"the devices' profiles have different numbers of measured calls ({sorted(counts)}); "
                               "give the number of calls")
    calls_measured = counts.pop()
    spans = [attribution.queue_spans for _ordinal, attribution, _totals in read]
    windows = windows_of_calls()
    swept = [tees[ordinal].gaps for ordinal, _attribution, _totals in read]
    # The dispatches' union in the common windows, folded as they were read: exact however calls overlap across
    # devices (a device's call may end after another's next call began, past its common window's end).
    if windows is not None and all(gaps is not None for gaps in swept):
        compute = [gaps.dispatch_union() for gaps in swept]
        activity = DeviceActivity(spans, windows)
        copies = [gaps.transfer_by_window() for gaps in swept]
        dispatches_only = [sources[ordinal].layout().provenance.dispatches_only
                           for ordinal, _attribution, _totals in read]
        for device, time in zip(sessions, split_device_time(spans, compute, windows, activity, copies,
                                                            dispatches_only)):
            device.time = time
        for device, (ordinal, attribution, _totals), stretches, gaps, untimed in zip(
                sessions, read, waiting_stretches(spans, windows, activity), swept, dispatches_only):
            executions = sources[ordinal].layout().submissions
            buffers = static_buffers(np.unique(executions["command_buffer"]).tolist(),
                                     attribution.buffer_matches, sources[ordinal].command_buffers,
                                     device_section_map(section_map, ordinal).command_buffers)
            device.transfers = section_transfers(executions, gaps.transfers(), buffers,
                                                  device.time.queue_transfer_ns)
            # The first rows of the queue spans are the executions, in the layout's order (with their calls).
            # A device-timed device's waiting is not known (it is untimed): no waits by section.
            device.waits = None if untimed else section_waits(stretches, executions["start_ns"].astype(np.int64),
                                                              attribution.queue_spans["call"][:len(executions)],
                                                              executions["command_buffer"], buffers)
    sections = device_sections(sessions)
    _add_transfers(sessions, sections)
    _note_other_devices(sessions, sections)
    return DeviceProfile(sessions, sections, calls_measured, function,
                         call_windows=windows)


def _calls_windows_once(sources: dict[int, EventSource], section_map: SectionMap, calls: Optional[int],
                        warmup: int, function: Optional[str]) -> Callable[[], Optional[tuple[np.ndarray, np.ndarray]]]:
    """The calls' windows across devices (`common_windows`) from every device's layout, found once when first
    asked (before any device's dispatches are read); None where they are not known (read_device_profile then
    reports no time split)."""
    found: list[Optional[tuple[np.ndarray, np.ndarray]]] = []

    def windows() -> Optional[tuple[np.ndarray, np.ndarray]]:
        if not found:
            try:
                spans, counts = [], set()
                for ordinal, source in sorted(sources.items()):
                    layout = source.layout()
                    numbers = call_numbers(layout, calls, warmup)
                    matcher = SlotMatcher(device_section_map(section_map, ordinal), function, layout.keys)
                    spans.append(attribution_without_events(layout, matcher, *numbers, warmup).queue_spans)
                    counts.add(numbers[1])
                known = len(counts) == 1 and all(measured_windows(part, numbers[1]) is not None for part in spans)
                found.append(common_windows(spans, counts.pop()) if known else None)
            except SectionmarkError:
                found.append(None)
        return found[0]

    return windows


class _TransferSweep:
    """A device's source whose dispatch windows, as the session reads them, are also swept against its
    command-buffer executions (`ExecutionGaps`): its transfer time by section comes from the same one read."""

    def __init__(self, source: EventSource, windows_of_calls: Callable[[], Optional[tuple[np.ndarray, np.ndarray]]]):
        self._source, self._windows_of_calls = source, windows_of_calls
        self.command_buffers = source.command_buffers
        # The executions' gaps and the dispatches' union in the calls' windows, once the windows were read; None
        # where those windows are not known.
        self.gaps: Optional[ExecutionGaps] = None

    def layout(self) -> Profile:
        return self._source.layout()

    def profile(self) -> Profile:
        return self._source.profile()

    def explain(self, problem: SectionmarkError) -> SectionmarkError:
        return self._source.explain(problem)

    def close(self) -> None:
        self._source.close()

    def windows(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        windows = self._windows_of_calls()
        self.gaps = None if windows is None else ExecutionGaps(self._source.layout().submissions, windows,
                                                               self._source.command_buffers)
        for dispatches, executed in self._source.windows():
            if self.gaps is not None:
                self.gaps.add(dispatches, executed)
            yield dispatches, executed


def _add_transfers(devices: list[DeviceSession], sections: list[DeviceSectionRow]) -> None:
    """Each section's transfer and waiting time on each device (rows added for sections that only copied or
    waited, and for "(unmarked)" ones, which stays last); none where no device's time split is known."""
    if all(device.transfers is None and device.waits is None for device in devices):
        return
    count = len(devices)
    for row in sections:
        row.transfer_ns, row.waiting_ns = [0.0] * count, [0.0] * count
    rows = {row.path: row for row in sections}
    for index, device in enumerate(devices):
        for kind, by_section in (("transfer", device.transfers), ("waiting", device.waits)):
            for path, ns in (getattr(by_section, f"{kind}_ns").items() if by_section is not None else ()):
                if path not in rows:
                    rows[path] = DeviceSectionRow(path, [0.0] * count, [0.0] * count, transfer_ns=[0.0] * count,
                                                  waiting_ns=[0.0] * count)
                    sections.append(rows[path])
                getattr(rows[path], f"{kind}_ns")[index] = ns
                if path in by_section.split:
                    getattr(rows[path], f"{kind}_split").append(device.ordinal)
    sections.sort(key=lambda row: row.path == ())


def _note_other_devices(devices: list[DeviceSession], sections: list[DeviceSectionRow]) -> None:
    """A section that ran no dispatch on a device but did on others says so in that device's table (its note
    would say why it ran nowhere)."""
    ran_on = {row.path: row.ran_on for row in sections}
    for device in devices:
        for stats in device.session.sections:
            others = [ordinal for ordinal in ran_on.get(stats.path, []) if ordinal != device.ordinal]
            if stats.path and not stats.dispatches and others:
                stats.note = f"no dispatches on this device: it ran on device {', '.join(map(str, others))}"
