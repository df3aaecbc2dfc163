"""A Tracy capture of a GPU run on several devices: each device's dispatch zones as its own `Profile`.

On CUDA, IREE 3.13 has no HAL-native profiler (its CUDA device answers
``--device_profiling_mode`` with UNIMPLEMENTED), so a run of a module compiled
for several devices (``sm.compile(..., target="cuda", devices=N)``, run with
one ``--device`` each) is measured by its tracing runtime. Each HAL device
creates its own Tracy GPU context when the tool creates it, and the tool
creates the devices in ``--device`` order, so the capture's GPU contexts are
the devices in that order (seen on an H200: two devices on one GPU give two
contexts, both named ``cuda``, each holding only its device's command buffers:
docs/multi-device.md). Each context's zones are matched to its device's own
command buffers of the map (`CommandBuffer.device`), as one device's capture is
to the whole map (`capture_profile`): zones that are not that device's
commands are an error that names the device, never attributed elsewhere.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from sectionmark.errors import SectionmarkError
from sectionmark.readers.event_model import Profile
from sectionmark.readers.queue_tracks import track_queue
from sectionmark.readers.tracy_capture import Capture
from sectionmark.readers.tracy_dispatch_zones import capture_profile
from sectionmark.section_map import SectionMap, device_section_map


def map_devices(section_map: SectionMap) -> list[int]:
    """The device ordinals the map's command buffers run on: several for a module compiled for several devices,
    ``[0]`` for a module of one (whose buffers name no device)."""
    return sorted({buffer.device for buffer in section_map.command_buffers if buffer.device is not None}) or [0]


def capture_device_profiles(capture: Capture, section_map: SectionMap, *,
                            function: Optional[str] = None) -> dict[int, Profile]:
    """Each device's dispatch zones as its `Profile`, by device ordinal: one per GPU context of a run of a module
    compiled for several devices, the contexts in the devices' order; ``{0: capture_profile(...)}`` for a module of
    one device or a replay (whose tracks name their queues). One error line when the capture's GPU contexts do not
    number the module's devices."""
    devices = map_devices(section_map)
    contexts = [track for track in capture.gpu_contexts if track.zones]
    if len(devices) == 1 or any(track_queue(track.name) is not None for track in contexts):
        return {0: capture_profile(capture, section_map, function=function)}
    if len(contexts) != len(devices):
        raise SectionmarkError(
            f"the capture has {len(contexts)} GPU context(s) with zones for a module compiled for {len(devices)} "
            f"devices (one context per device, in --device order, is what IREE's tracing runtime records); "
            "was it run with one --device per device of the module?")
    profiles = {}
    for ordinal, context in zip(devices, contexts):
        try:
            profiles[ordinal] = capture_profile(replace(capture, gpu_contexts=[context]),
                                                device_section_map(section_map, ordinal), function=function)
        except SectionmarkError as problem:
            raise SectionmarkError(f"device {ordinal} (GPU context {context.id}, {context.name!r}): {problem}") from None
    return profiles
