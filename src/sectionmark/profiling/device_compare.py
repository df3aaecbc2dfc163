"""The comparison of two runs on several devices: each device's sections and components, device by device.

Device i of B is compared with device i of A (`compare_sessions`, the same
verdicts, intervals and rules as two one-device profiles): a section that
moved from one device to the other shows as slower on one and faster on the
other. Both runs must have the same devices (ordinals); anything else is one
error line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from sectionmark.errors import SectionmarkError
from sectionmark.profiling.compare import COMPARISON_JSON_VERSION, Change, Comparison, compare_sessions
from sectionmark.profiling.devices import DeviceProfile


@dataclass
class DeviceChanges:
    """One device's comparison: its ordinal, its IREE device (A's, else B's; None: not known)."""

    ordinal: int
    device: Optional[str]
    comparison: Comparison


@dataclass
class DeviceComparison:
    """Every device's `Comparison`, in ordinal order."""

    devices: list[DeviceChanges]

    @property
    def a(self) -> str:
        return self.devices[0].comparison.a

    @a.setter
    def a(self, label: str) -> None:
        for device in self.devices:
            device.comparison.a = label

    @property
    def b(self) -> str:
        return self.devices[0].comparison.b

    @b.setter
    def b(self, label: str) -> None:
        for device in self.devices:
            device.comparison.b = label

    def slower_than(self, percent: float) -> list[tuple[int, Change]]:
        """(device ordinal, change) of every device's sections and components judged slower beyond ``percent``
        (`Comparison.slower_than`: what ``--fail-if-slower`` fails on)."""
        return [(device.ordinal, change) for device in self.devices
                for change in device.comparison.slower_than(percent)]

    def to_json(self) -> dict[str, Any]:
        """Versioned JSON (docs/multi-device.md): each device's comparison document, with its ordinal and device."""
        return {"version": COMPARISON_JSON_VERSION,
                "devices": [{"ordinal": device.ordinal, "device": device.device,
                             **{key: value for key, value in device.comparison.to_json().items() if key != "version"}}
                            for device in self.devices]}


def compare_devices(a: DeviceProfile, b: DeviceProfile, *, labels: Sequence[str] = ("A", "B"),
                    **options: Any) -> DeviceComparison:
    """Device i of ``b`` against device i of ``a``; ``options``: `compare_sessions`'s."""
    ordinals = [[device.ordinal for device in profile.devices] for profile in (a, b)]
    if ordinals[0] != ordinals[1]:
        raise SectionmarkError(f"{labels[0]} ran on devices {ordinals[0]} and {labels[1]} on {ordinals[1]}: "
                               "compare runs on the same devices")
    return DeviceComparison([DeviceChanges(first.ordinal, first.device or second.device,
                                           compare_sessions(first.session, second.session, labels=labels, **options))
                             for first, second in zip(a.devices, b.devices)])
