"""Per-function profiles of a replayed recording of a module on several devices (docs/multi-device.md "Recording").

A module loaded with ``sm.load(compiled, devices=[...])`` is recorded as any other; its replay runs under
``iree-benchmark-module`` with one ``--device`` per device, and results (a KV cache split over the devices)
are passed along as buffer views, so each stays on the device that wrote it. The profile holds one session
per device; each device's events are read on their own (`read_device_events`), split per function by that
device's command buffers of the map (`split_by_function`: every device is checked against the recording),
and each function's parts of all devices are read as one several-device profile (`read_device_profile`):
per device its sections, coverage and time split, and the sections across devices.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence, Union

from sectionmark.outputs import PathLike
from sectionmark.profiling.devices import DeviceProfile, read_device_profile
from sectionmark.readers.event_model import Profile
from sectionmark.readers.sources import WholeProfile
from sectionmark.section_map import SectionMap, device_section_map
from sectionmark.workflows.replay import PerFunction, map_function, split_by_function


@dataclass
class DeviceFunctionProfile:
    """One function of a several-device replay: its calls per replay and its profile of every device where it ran
    anything (command buffers or queue operations; None: it ran no dispatch on any device)."""

    function: str
    calls_per_replay: int
    profile: Optional[DeviceProfile] = None


@dataclass
class DeviceReplayProfile(PerFunction):
    """Per-function several-device profiles of a replayed recording, functions in the order first called."""

    replays: int  # measured replays (warmup replays excluded)
    warmup: int
    calls_per_replay: int
    devices: list[str]  # the IREE devices, in the order of the module's (``--device``)
    functions: list[DeviceFunctionProfile]

    @classmethod
    def build(cls, profiles: dict[int, Profile], section_map: SectionMap, sequence: Sequence[str], *, replays: int,
              warmup: int, devices: list[str]) -> "DeviceReplayProfile":
        """Attribute each device's events (``profiles``, by ordinal) of ``warmup + replays`` replays of
        ``sequence`` per function."""
        total = warmup + replays
        parts = {ordinal: split_by_function(profile, device_section_map(section_map, ordinal), sequence, total)
                 for ordinal, profile in sorted(profiles.items())}
        functions = []
        for function in dict.fromkeys(sequence):
            calls = list(sequence).count(function)
            # Every device that did anything in the function: one that only copied or waited (no dispatch of
            # its own) still has its transfers and waits, and the others' waiting for it is not idle.
            kept = {ordinal: split[function] for ordinal, split in parts.items()
                    if len(split[function].submissions) or len(split[function].queue_ops)}
            profile = None
            if any(len(part.dispatches) for part in kept.values()):
                sources = {ordinal: WholeProfile(part) for ordinal, part in kept.items()}
                profile = read_device_profile(sources, section_map, calls=calls * total, warmup=calls * warmup,
                                              function=map_function(section_map, function), devices=devices)
                profile.function = function
                for device in profile.devices:
                    device.session.function = function
            functions.append(DeviceFunctionProfile(function, calls, profile))
        return cls(replays=replays, warmup=warmup, calls_per_replay=len(sequence), devices=devices,
                   functions=functions)

    def function(self, name: str) -> DeviceProfile:
        """The several-device profile of one function's calls (all its calls in all measured replays)."""
        return self._function_profile(name)

    def render(self, format: str, **options: Any) -> Union[str, bytes]:
        """Every function's several-device table, JSON or CSV (`sectionmark.renderers.replay_devices`), looked up
        when called."""
        from sectionmark import renderers

        return renderers.render_replay_devices(self, format, **options)

    def table(self) -> str:
        return self.render("table")

    def save(self, path: PathLike, format: Optional[str] = None, *, inputs: Iterable[PathLike] = (),
             **options: Any) -> Path:
        """Write every function's table (.txt), JSON (.json) or CSV (.csv) to ``path``, all at once."""
        from sectionmark import renderers

        return renderers.save(self, path, format, inputs=inputs, **options)
