"""Per-thread stacks of open zones: what eager sections need to close zones right.

Tracy keeps one zone stack per OS thread and, in the client IREE ships, does
not check that an end belongs to the innermost zone: closing out of order
silently swaps zone times. A section's exit therefore closes its own zone
only when it is the innermost on its thread; when asyncio tasks or suspended
generators leave sections out of order, the zones opened inside it are closed
with it (shortened, never mis-nested) and their own exits find nothing.

Two implementations of the same two calls, ``open(marker, location)`` and
``close(marker) -> bool`` (whether anything was closed):

* `CZoneStack`: the `sectionmark._zonestack` extension, calling Tracy's C
  functions directly (built when a C compiler was present at install);
* `PythonZoneStack`: the same logic over any Python ``begin``/``end``.
"""

from __future__ import annotations

import threading
import warnings
from typing import Callable, Optional

__all__ = ["PythonZoneStack", "CZoneStack", "c_extension_available"]

try:
    from sectionmark import _zonestack
except ImportError:  # built without a C compiler
    _zonestack = None


def c_extension_available() -> bool:
    return _zonestack is not None


def _name_new_thread(name_thread: Optional[Callable[[str], None]]) -> None:
    """Name the calling thread in the profiler; a failure must not break the section."""
    thread = threading.current_thread()
    if name_thread is None or thread is threading.main_thread():  # the profiler names the main thread
        return
    try:
        name_thread(thread.name)
    except Exception as error:  # noqa: BLE001 - reported, never raised into user code
        warnings.warn(f"sectionmark: could not name thread {thread.name!r} in the profiler: {error}", RuntimeWarning)


class PythonZoneStack:
    """Zones through Python callables: ``begin(location, 1) -> zone``, ``end(zone)``."""

    def __init__(self, begin: Callable[[object, int], object], end: Callable[[object], None],
                 name_thread: Optional[Callable[[str], None]] = None):
        class ThreadState(threading.local):
            def __init__(self) -> None:
                self.open: list[tuple[object, object]] = []  # (marker, zone), innermost last
                _name_new_thread(name_thread)

        state = ThreadState()

        def open(marker: object, location: object) -> None:
            state.open.append((marker, begin(location, 1)))

        def close(marker: object) -> bool:
            entries = state.open
            if not entries:
                return False
            if entries[-1][0] is marker:
                end(entries.pop()[1])
                return True
            if not any(entry[0] is marker for entry in entries):
                return False
            while True:
                entered, zone = entries.pop()
                end(zone)
                if entered is marker:
                    return True

        # Closures, not methods: the hot path does no attribute lookups on self.
        self.open, self.close = open, close
        self.depth = lambda: len(state.open)


class CZoneStack:
    """Zones through C function addresses (Tracy's begin/end); locations are addresses.

    The extension holds one binding per process: creating a second CZoneStack
    rebinds it, which is only safe while no zone is open. ``keep_alive`` is
    held while bound (e.g. the ctypes objects behind the two addresses).
    """

    def __init__(self, begin_address: int, end_address: int,
                 name_thread: Optional[Callable[[str], None]] = None, keep_alive: object = None):
        if _zonestack is None:
            raise RuntimeError("sectionmark._zonestack was not built (no C compiler at install)")
        _zonestack.bind(begin_address, end_address, lambda: _name_new_thread(name_thread), keep_alive)
        self.open, self.close, self.depth = _zonestack.open_zone, _zonestack.close_zone, _zonestack.depth
