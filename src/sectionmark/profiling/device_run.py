"""DeviceRun: a profile of several devices and the file its events come from, for the views that draw every event.

A `DeviceProfile` is data: each device's figures summed a window at a time,
no events. Its Perfetto trace, Tracy capture and HTML report draw every
dispatch of every device; a `DeviceRun` reads them from its profile file when
such a view asks (each device's events through the one read path, attributed
as that device's figures were: `device_events`), checking the file has not
changed since the figures were read, and keeps them for the next view, as a
one-device `ProfileRun` does. `sectionmark.profile(devices=...)` returns a run
owning a scratch copy of the profile (removed by `close`, at the latest when
the process exits); `sectionmark.report` one reading the user's own file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from sectionmark.profiling.attribute import Attribution, attribute
from sectionmark.profiling.devices import DeviceProfile
from sectionmark.profiling.read import KeptProfile, ReadArguments
from sectionmark.readers.sources import read_device_events
from sectionmark.section_map import SectionMap, device_section_map


def device_events(path: Path, section_map: SectionMap, read_as: ReadArguments) -> dict[int, Attribution]:
    """Every measured event of each device of the profile at ``path``, by ordinal: each device's events read
    (its windows, joined) and attributed in that device's map (`device_section_map`) as its figures were."""
    return {ordinal: attribute(profile, device_section_map(section_map, ordinal), calls=read_as.calls,
                               warmup=read_as.warmup, function=read_as.function)
            for ordinal, profile in sorted(read_device_events(path, section_map, read_as.function).items())}


@dataclass(eq=False)
class DeviceRun(DeviceProfile, KeptProfile):
    """A `DeviceProfile` and where its events are: ``profile_path`` read with ``section_map`` as the figures were
    (``read_as``)."""

    profile_path: Optional[Path] = None
    section_map: Optional[SectionMap] = field(default=None, repr=False)
    read_as: ReadArguments = ReadArguments()
    scratch: Optional[Path] = None  # a folder this run owns (its profile's scratch copy): removed by `close`
    _identity: Optional[tuple[int, int, int]] = field(default=None, repr=False)
    _events: Optional[dict[int, Attribution]] = field(default=None, repr=False)

    @classmethod
    def of(cls, profile: DeviceProfile, profile_path: Path, section_map: SectionMap, read_as: ReadArguments,
           scratch: Optional[Path] = None) -> "DeviceRun":
        return cls(profile.devices, profile.sections, profile.calls, profile.function, profile.call_windows,
                   profile_path=profile_path, section_map=section_map, read_as=read_as, scratch=scratch)

    def __post_init__(self) -> None:
        self._keep_profile()

    def events(self) -> dict[int, Attribution]:
        """Each device's measured events, by ordinal: read from the profile file on the first view that draws
        them, then kept."""
        if self._events is None:
            self._check_unchanged()
            self._events = device_events(self.profile_path, self.section_map, self.read_as)
        return self._events

    def render(self, format: str, **options: Any) -> Union[str, bytes]:
        """This run in an output format by name (`DeviceProfile.render`); the views that draw events get each
        device's."""
        from sectionmark import renderers

        if renderers.get(format).events and "events" not in options:
            options["events"] = self.events()
        return super().render(format, **options)
