"""Per-thread stacks of open zones: what eager sections need to close zones right.

Tracy keeps one zone stack per OS thread and, in the client IREE ships, does
not check that an end belongs to the innermost zone: closing out of order
silently swaps zone times. A section's exit therefore closes its own zone
only when it is the innermost on its thread; when asyncio tasks or suspended
generators leave sections out of order, the zones opened inside it are closed
with it (shortened, never mis-nested) and their own exits find nothing.

Zones must not outlive their thread or the interpreter: Tracy waits for every
open zone, so a program that exits (or a thread that ends) inside a section
would never finish under a capture. ``close_all()`` ends the calling thread's
open zones; every stack calls it at interpreter exit (atexit, main thread)
and when a thread that opened zones ends (a per-thread guard whose
finalizer runs in the ending thread). Daemon threads still running at exit
are frozen by the interpreter, never end, and keep their zones open
(docs/tracy.md).

Two implementations of the same calls, ``open(marker, location)``,
``close(marker) -> bool`` (whether anything was closed) and ``close_all()``:

* `CZoneStack`: the `sectionmark.markers._zonestack` extension, calling Tracy's C
  functions directly (built when a C compiler was present at install);
* `PythonZoneStack`: the same logic over any Python ``begin``/``end``.
"""

from __future__ import annotations

import atexit
import threading
import warnings
import weakref
from typing import Callable, Optional

__all__ = ["PythonZoneStack", "CZoneStack", "c_extension_available"]

try:
    from sectionmark.markers import _zonestack
except ImportError:  # built without a C compiler
    _zonestack = None


def c_extension_available() -> bool:
    return _zonestack is not None


class _ThreadEndGuard:
    """Closes a thread's open zones when the thread ends.

    Kept in a ``threading.local``: CPython clears a thread's locals in that
    thread as it ends, so the finalizer ends the zones on their own thread.
    The locals of daemon threads still running at exit are cleared by the
    main thread instead; ending their zones there would end the main
    thread's zones in Tracy's eyes, so nothing is done then.
    """

    def __init__(self, close_all: Callable[[], object]):
        self._close_all = close_all
        self._thread = threading.get_ident()

    def __del__(self) -> None:
        if threading.get_ident() == self._thread:
            self._close_all()


_guards = threading.local()


def _on_new_thread(name_thread: Optional[Callable[[str], None]], close_all: Callable[[], object]) -> None:
    """A thread's first zone: name it in the profiler and close its zones when it ends.

    A failure must not break the section. The main thread's zones are closed
    at exit (atexit), and the profiler names it itself.
    """
    thread = threading.current_thread()
    if thread is threading.main_thread():
        return
    guards = getattr(_guards, "guards", None)
    if guards is None:
        guards = _guards.guards = []
    guards.append(_ThreadEndGuard(close_all))
    if name_thread is None:
        return
    try:
        name_thread(thread.name)
    except Exception as error:  # noqa: BLE001 - reported, never raised into user code
        warnings.warn(f"sectionmark: could not name thread {thread.name!r} in the profiler: {error}", RuntimeWarning)


# Python stacks still in use: their main-thread zones are closed at exit
# (weakly held, so that a stack nobody uses any more is freed).
_python_stacks: "weakref.WeakSet[PythonZoneStack]" = weakref.WeakSet()


@atexit.register
def _close_python_stacks() -> None:
    for stack in list(_python_stacks):
        stack.close_all()


class PythonZoneStack:
    """Zones through Python callables: ``begin(location, 1) -> zone``, ``end(zone)``."""

    def __init__(self, begin: Callable[[object, int], object], end: Callable[[object], None],
                 name_thread: Optional[Callable[[str], None]] = None):
        def end_all(entries: list[tuple[object, object]]) -> int:
            for _marker, zone in reversed(entries):
                end(zone)
            closed = len(entries)
            entries.clear()
            return closed

        class ThreadState(threading.local):
            def __init__(self) -> None:
                self.open: list[tuple[object, object]] = []  # (marker, zone), innermost last
                # The guard holds the list itself: this local may be gone when it runs.
                entries = self.open
                _on_new_thread(name_thread, lambda: end_all(entries))

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

        def close_all() -> int:
            return end_all(state.open)

        # Closures, not methods: the hot path does no attribute lookups on self.
        self.open, self.close, self.close_all = open, close, close_all
        self.depth = lambda: len(state.open)
        self.markers = lambda: [marker for marker, _zone in state.open]  # open on this thread, outermost first
        _python_stacks.add(self)


class CZoneStack:
    """Zones through C function addresses (Tracy's begin/end); locations are addresses.

    The extension holds one binding per process: creating a second CZoneStack
    rebinds it, which is only safe while no zone is open. ``keep_alive`` is
    held while bound (e.g. the ctypes objects behind the two addresses).
    """

    def __init__(self, begin_address: int, end_address: int,
                 name_thread: Optional[Callable[[str], None]] = None, keep_alive: object = None):
        if _zonestack is None:
            raise RuntimeError("sectionmark.markers._zonestack was not built (no C compiler at install)")
        _zonestack.bind(begin_address, end_address, lambda: _on_new_thread(name_thread, _zonestack.close_all),
                        keep_alive)
        self.open, self.close, self.depth = _zonestack.open_zone, _zonestack.close_zone, _zonestack.depth
        self.close_all = _zonestack.close_all


if _zonestack is not None:
    atexit.register(_zonestack.close_all)  # one C stack per thread, whatever was bound
