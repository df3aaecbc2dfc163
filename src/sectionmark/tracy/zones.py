"""Eager sections as Tracy CPU zones: the zone emitter and its switch.

`enable()` installs a `TracyZones` as the zone emitter of
`sectionmark.markers`, so that ``with section(...)`` in plain Python opens a
Tracy zone. Tracy does not check nesting in this build (a zone closed out of
order silently corrupts times), so zones go through the per-thread stacks of
`sectionmark.markers.zonestack`, which only ever close the innermost zone.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Optional

from sectionmark.markers import marker as markers, zonestack
from sectionmark.tracy.binding import TracyClient, client, tracy_name

__all__ = ["TracyZones", "enable", "disable"]


class TracyZones:
    """The zone emitter that makes eager sections Tracy CPU zones.

    Zones go through the C zone stack (`sectionmark.markers._zonestack`, Tracy's C
    functions called directly) when it was built, else through the Python
    stack over the ctypes functions; see benchmarks/bench_tracy.py for both.
    """

    def __init__(self, tracy: Optional[TracyClient] = None, *, use_c: Optional[bool] = None):
        tracy = tracy if tracy is not None else client()
        name_thread = lambda name: tracy.set_thread_name(tracy_name(name))  # noqa: E731
        self.uses_c = zonestack.c_extension_available() if use_c is None else use_c
        if self.uses_c:
            address = lambda function: ctypes.cast(function, ctypes.c_void_p).value  # noqa: E731
            stack = zonestack.CZoneStack(address(tracy.zone_begin), address(tracy.zone_end), name_thread, tracy)
        else:
            stack = zonestack.PythonZoneStack(tracy.zone_begin, tracy.zone_end, name_thread)
        self.open, self.close = stack.open, stack.close
        self._stack = stack  # alive while in use: its zones are closed at exit
        self._tracy = tracy

    def location(self, name: str, color: Optional[int]) -> object:
        address, by_pointer = self._tracy.source_location(name, color)
        return address if self.uses_c else by_pointer


_installed: Optional[TracyZones] = None
_install_lock = threading.Lock()


def enable() -> TracyZones:
    """Make every eager ``section`` a Tracy CPU zone from now on (idempotent).

    Raises SectionmarkError when the tracing runtime is not selected
    (IREE_PY_RUNTIME=tracy) or not installed.
    """
    global _installed
    if _installed is None:
        zones = TracyZones()
        with _install_lock:
            if _installed is None:
                _installed = zones
    markers.set_zone_emitter(_installed)
    return _installed


def disable() -> None:
    """Stop emitting zones for eager sections (zones already open still close)."""
    if markers.zone_emitter() is _installed:
        markers.set_zone_emitter(None)


def tracing(enabled: bool = True) -> Optional[TracyZones]:
    """``sm.tracing()``: eager sections become Tracy CPU zones; ``sm.tracing(False)``: they stop.

    Returns the zone emitter while tracing, None once stopped. Zones open when
    tracing stops still close at their section's exit, so no zone is left
    dangling in the capture.
    """
    if enabled:
        return enable()
    disable()
    return None
