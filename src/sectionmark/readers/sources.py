"""Every profile file as windows of events: the one way from a file to a session.

`open_source` gives an `EventSource` for any file `sectionmark report` reads:
its ``layout`` (the profile less its dispatches and memory events: the
submissions and queue operations that number the calls), then its dispatches
in ``windows`` of whole submissions, then its ``profile`` (the layout with the
memory events). Attribution and the session's sums consume the windows the
same way whatever their size (`sectionmark.profiling.read`). A host-timed
.ireeprof bundle is read a window at a time in bounded memory
(`ireeprof_stream.DispatchStream`); any other file (a device-timed bundle, its
ireeperf-jsonl export, a Tracy capture) is read whole by its reader and is one
window. `read_events` reads a file whole, for the views that draw every event.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import BinaryIO, Iterator, Optional, Protocol, Union

import numpy as np

from sectionmark.artifacts.files import open_regular
from sectionmark.artifacts.scratch import PREFIX, scratch_folder
from sectionmark.errors import SectionmarkError
from sectionmark.readers.bundle_records import UnsupportedLayout
from sectionmark.readers.checks import by_submission_and_start
from sectionmark.readers.event_model import Profile, RecordedCommand
from sectionmark.readers.ireeprof import read_profile
from sectionmark.readers.ireeprof_bundle import read_open_bundle
from sectionmark.readers.ireeprof_jsonl import read_jsonl_devices
from sectionmark.readers.bundle_events import OpenBundle, open_bundle, open_split_bundle
from sectionmark.readers.bundle_records import BUNDLE_MAGIC
from sectionmark.readers.devices import profile_devices, several_devices_error, split_devices
from sectionmark.readers.ireeprof_stream import DispatchStream, FirstPass
from sectionmark.section_map import SectionMap


class EventSource(Protocol):
    """A profile's events: ``layout`` first, then ``windows`` once, then ``profile``."""

    command_buffers: dict[int, list[RecordedCommand]]

    def layout(self) -> Profile:
        """The profile without dispatches: its submissions (sorted by id), queue operations, keys, recorded
        command buffers, exports and provenance; its memory events where they are known before the windows."""

    def windows(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(dispatches sorted by (submission, start), the submissions they belong to, sorted) of successive
        whole submissions in submission order; the rows may be reused by the next window."""

    def profile(self) -> Profile:
        """After the windows: the layout with every memory event."""

    def explain(self, problem: SectionmarkError) -> SectionmarkError:
        """The error line for ``problem``, met while reading or attributing this source's events: the line
        a read of all its events gives when the file is malformed (a window meets a file's problems in another
        order, and the line a user gets must not depend on it), else ``problem``."""

    def close(self) -> None:
        """Let the file go now, not when the source is collected: a reader that stops before the windows end
        (an error, which keeps the source alive as long as its traceback) must not hold a device's split file,
        deleted but still on disk while open."""


class WholeProfile:
    """A profile read whole: one window of all its dispatches."""

    def __init__(self, profile: Profile):
        self._profile = profile
        self.command_buffers = profile.command_buffers

    def layout(self) -> Profile:
        return replace(self._profile, dispatches=self._profile.dispatches[:0])

    def windows(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        yield by_submission_and_start(self._profile.dispatches), self._profile.submissions

    def profile(self) -> Profile:
        return self.layout()

    def explain(self, problem: SectionmarkError) -> SectionmarkError:
        return problem  # read whole already: its reader's checks came first

    def close(self) -> None:
        pass  # read whole already: no file open


def open_source(path: Union[str, Path], section_map: SectionMap, function: Optional[str] = None) -> EventSource:
    """The events of a recorded profile: .ireeprof (host- or device-timed), ireeperf-jsonl, or a .tracy capture
    (its GPU dispatch zones, or a live capture's worker-thread zones; ``section_map`` and ``function`` place
    them). A file that is none of these, or breaks its format, is one error line; so is a profile of several
    devices (`open_device_sources` reads it)."""
    return _open(path, section_map, function, several_devices=False)[0]


def open_device_sources(path: Union[str, Path], section_map: SectionMap,
                        function: Optional[str] = None) -> dict[int, EventSource]:
    """The events of each device of a recorded profile, by device ordinal: a host-timed .ireeprof of a process
    that drove several devices gives one source per device (`sectionmark.readers.devices`), read as every
    host-timed bundle is, and its ireeperf-jsonl export one per device too (`read_jsonl_devices`: its rows name
    their device); any other profile is device 0's."""
    return _open(path, section_map, function, several_devices=True)


def _bundle_devices(bundle: OpenBundle) -> list[int]:
    return profile_devices(bundle) if bundle.sessions > 1 else [0]  # a session per device


def _open(path: Union[str, Path], section_map: SectionMap, function: Optional[str],
          several_devices: bool) -> dict[int, EventSource]:
    path = Path(path)
    if path.suffix == ".tracy":  # a capture by its name: a damaged one gets the capture reader's error
        return _capture_sources(path, section_map, function, several_devices)
    file = open_regular(path, "profile")
    bundle: Optional[OpenBundle] = None
    try:
        head = file.read(4)
        if head == BUNDLE_MAGIC:
            first_pass = FirstPass()  # made while the record walk maps the file (one device's host-timed bundle)
            bundle = open_bundle(path, file, os.fstat(file.fileno()).st_size, first_pass.visit)
            devices = _bundle_devices(bundle)
            if len(devices) > 1 and not several_devices:
                raise several_devices_error(path, devices)
            if len(devices) > 1:
                try:
                    sources = _device_streams(path, bundle, file, devices)
                except UnsupportedLayout as why:  # IREE's export would read every device's events as one's
                    raise unknown_layout_of_devices(path, why) from None
                file.close()
                return sources
            if not bundle.device_timed:
                # It reads the events from the file, and closes it.
                return {0: _Stream(DispatchStream(bundle, file, first_pass))}
            bundle.close()
    except UnsupportedLayout:
        head = BUNDLE_MAGIC  # read_profile reads it through iree-profile's export
    except BaseException:
        if bundle is not None:
            bundle.close()
        file.close()
        raise
    file.close()
    if head != BUNDLE_MAGIC and head[:1] != b"{":  # a capture by its first bytes, or an error line
        return _capture_sources(path, section_map, function, several_devices)
    if head[:1] == b"{" and several_devices:  # an ireeperf-jsonl export: its rows name their device
        return {device: WholeProfile(profile) for device, profile in read_jsonl_devices(path).items()}
    return {0: WholeProfile(read_profile(path))}


def _device_streams(path: Path, bundle: OpenBundle, file: BinaryIO, devices: list[int]) -> dict[int, EventSource]:
    """Each device's events of a bundle of several (`devices`): the file split into one file per device in a scratch
    folder, each then read as any one-device bundle is. The folder goes when this returns (or fails); the open
    files keep their bytes on disk until each device's stream has read them and closed its file."""
    opened: list[tuple[OpenBundle, BinaryIO]] = []
    try:
        with scratch_folder(PREFIX + "devices-") as folder:
            try:
                split = split_devices(bundle, file, devices, folder)
            finally:
                bundle.close()
            sources: dict[int, EventSource] = {}
            for device, written in split.items():
                device_file = open_regular(written.path, "profile")
                try:  # its errors name the profile, not its device's file (`read_device_profile` names the device)
                    device_bundle = open_split_bundle(path, device_file, written.chunks)
                except BaseException:
                    device_file.close()
                    raise
                if device_bundle.device_timed:  # a GPU's dispatch events: read whole, as one device's profile is
                    try:
                        sources[device] = WholeProfile(read_open_bundle(device_bundle))
                    finally:
                        device_bundle.close()
                        device_file.close()
                    continue
                opened.append((device_bundle, device_file))
                sources[device] = _DeviceStream(DispatchStream(device_bundle, device_file), device)
    except BaseException:
        for device_bundle, device_file in opened:
            device_bundle.close()
            device_file.close()
        raise
    return sources


class _Stream:
    """A host-timed bundle's `DispatchStream` as an `EventSource`; a record layout its first pass finds it does not
    know is read through IREE's own export instead (`read_profile`: as the whole read reads it), before any
    window."""

    def __init__(self, stream: DispatchStream):
        self._stream = stream
        self._export: Optional[WholeProfile] = None
        self.command_buffers = stream.command_buffers

    def layout(self) -> Profile:
        try:
            return self._stream.layout()
        except UnsupportedLayout:
            self._export = WholeProfile(read_profile(self._stream.path))
            self.command_buffers = self._export.command_buffers
            return self._export.layout()

    def windows(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        return self._export.windows() if self._export is not None else self._stream.windows()

    def profile(self) -> Profile:
        return self._export.profile() if self._export is not None else self._stream.profile()

    def explain(self, problem: SectionmarkError) -> SectionmarkError:
        try:
            read_profile(self._stream.path)
        except SectionmarkError as whole:
            return whole
        return problem

    def close(self) -> None:
        self._stream.close()


class _DeviceStream(_Stream):
    """One device's events of a profile of several devices: its problems are its own (the whole read of the file,
    which `_Stream.explain` asks, reads one device's events only), and a layout its stream does not know is an
    error line (the whole read of the file, `_Stream.layout`'s fallback, would give it every device's events)."""

    def __init__(self, stream: DispatchStream, device: int):
        super().__init__(stream)
        self._device = device

    def layout(self) -> Profile:
        try:
            return self._stream.layout()
        except UnsupportedLayout as why:
            raise unknown_layout_of_devices(self._stream.path, why, self._device) from None

    def explain(self, problem: SectionmarkError) -> SectionmarkError:
        return problem


def unknown_layout_of_devices(path: Path, why: UnsupportedLayout, device: Optional[int] = None) -> SectionmarkError:
    """The line for a profile of several devices (of ``device``'s events, when known) in a record layout this
    reader does not know: IREE's export, which reads such a one-device profile, would mix the devices' events."""
    whose = "" if device is None else f" of device {device}'s events"
    return SectionmarkError(f"{path}: unsupported profile layout{whose} ({why}); a profile of several devices is "
                            "read in the layout sectionmark knows only (IREE 3.13's)")


def read_events(path: Union[str, Path], section_map: SectionMap, function: Optional[str] = None) -> Profile:
    """Every event of a recorded profile or of a Tracy capture's dispatch zones, read whole (one device's: a
    capture of several is one error line, as a bundle of several is)."""
    from sectionmark.readers.tracy_capture import is_capture

    path = Path(path)
    if not is_capture(path):
        return read_profile(path)
    profiles = _capture_profiles(path, section_map, function)
    if len(profiles) > 1:
        raise several_devices_error(path, sorted(profiles))
    return profiles[0]


def _capture_sources(path: Path, section_map: SectionMap, function: Optional[str],
                     several_devices: bool) -> dict[int, EventSource]:
    """A file taken for a capture (by its name or first bytes): each device's events, or one reader's error line."""
    from sectionmark.readers.tracy_capture import is_capture

    if not several_devices or not is_capture(path):
        return {0: WholeProfile(read_events(path, section_map, function))}
    return {device: WholeProfile(profile) for device, profile in _capture_profiles(path, section_map, function).items()}


def _capture_profiles(path: Path, section_map: SectionMap, function: Optional[str]) -> dict[int, Profile]:
    """A capture's dispatch zones by device: a GPU run's contexts, one per device of a module compiled for several
    (`capture_device_profiles`), or a live capture's worker-thread zones (one device's)."""
    from sectionmark.readers.tracy_capture import read_capture
    from sectionmark.readers.tracy_devices import capture_device_profiles
    from sectionmark.readers.tracy_live import is_live_capture, live_capture_profile

    capture = read_capture(path)
    if is_live_capture(capture):
        return {0: live_capture_profile(capture, section_map, function=function)}
    return capture_device_profiles(capture, section_map, function=function)


def read_device_events(path: Union[str, Path], section_map: SectionMap,
                       function: Optional[str] = None) -> dict[int, Profile]:
    """Every event of each device of a recorded profile, read whole, by device ordinal (`open_device_sources`):
    for the views that draw every event (a run's) or split a device's events before attributing them (a replay's
    calls per function)."""
    sources = open_device_sources(path, section_map, function)
    try:
        return {ordinal: whole_profile(source) for ordinal, source in sources.items()}
    finally:
        close_all(sources)


def close_all(sources: dict[int, EventSource]) -> None:
    """Close every device's source (`EventSource.close`), whether or not it was read to its end."""
    for source in sources.values():
        source.close()


def whole_profile(source: EventSource) -> Profile:
    """Every event of ``source``, its windows kept (its memory grows with the events, as a whole read's does)."""
    layout = source.layout()
    windows = [dispatches.copy() for dispatches, _submissions in source.windows()]  # a window's rows are reused
    return replace(source.profile(), dispatches=by_submission_and_start(np.concatenate(windows)) if windows
                   else layout.dispatches)
