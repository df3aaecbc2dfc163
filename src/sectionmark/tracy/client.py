"""Emit Tracy zones from Python through the tracing runtime's Tracy C API.

With ``IREE_PY_RUNTIME=tracy``, iree-base-runtime's extension module embeds a
Tracy 0.11.2 client and exports its C API; binding it with ctypes puts our
zones in the same capture as IREE's own. Three things live here:

* `TracyClient`: the bound C API plus a cache of static source locations.
* `TracyZones`: the zone emitter (see `sectionmark.markers`) that makes ``with section(...)``
  in plain Python a Tracy CPU zone.
* `GpuTimeline`: a custom GPU-context track that takes zones with explicit
  begin/end timestamps (device or replayed timings).

Tracy does not check nesting in this build: a zone closed out of order
silently corrupts times. So both zone kinds only ever close the innermost
open zone: eager sections through the per-thread stacks of
`sectionmark.markers.zonestack`, `GpuTimeline` through its own.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import importlib.util
import os
import threading
import time
from pathlib import Path
from typing import Optional, Union

from sectionmark.markers import marker as markers, zonestack
from sectionmark.errors import SectionmarkError

__all__ = ["TracyClient", "TracyZones", "GpuTimeline", "client", "enable", "disable"]


class _SourceLocation(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_void_p),
        ("function", ctypes.c_void_p),
        ("file", ctypes.c_void_p),
        ("line", ctypes.c_uint32),
        ("color", ctypes.c_uint32),
    ]


class _ZoneContext(ctypes.Structure):
    """Tracy's ``TracyCZoneCtx``: returned by zone begin, handed back to zone end.

    A Structure (not a plain int) so ctypes passes it back by value unchanged.
    """

    _fields_ = [("id", ctypes.c_uint32), ("active", ctypes.c_int32)]


class _GpuNewContextData(ctypes.Structure):
    _fields_ = [
        ("gpuTime", ctypes.c_int64),
        ("period", ctypes.c_float),
        ("context", ctypes.c_uint8),
        ("flags", ctypes.c_uint8),
        ("type", ctypes.c_uint8),
    ]


class _GpuContextNameData(ctypes.Structure):
    _fields_ = [("context", ctypes.c_uint8), ("name", ctypes.c_char_p), ("len", ctypes.c_uint16)]


class _GpuZoneBeginData(ctypes.Structure):
    _fields_ = [("srcloc", ctypes.c_uint64), ("queryId", ctypes.c_uint16), ("context", ctypes.c_uint8)]


class _GpuTimeData(ctypes.Structure):
    _fields_ = [("gpuTime", ctypes.c_int64), ("queryId", ctypes.c_uint16), ("context", ctypes.c_uint8)]


class _GpuZoneEndData(ctypes.Structure):
    _fields_ = [("queryId", ctypes.c_uint16), ("context", ctypes.c_uint8)]


class _GpuCalibrationData(ctypes.Structure):
    _fields_ = [("gpuTime", ctypes.c_int64), ("cpuDelta", ctypes.c_int64), ("context", ctypes.c_uint8)]


assert ctypes.sizeof(_SourceLocation) == 32 and ctypes.sizeof(_GpuNewContextData) == 16
assert ctypes.sizeof(_GpuContextNameData) == 24 and ctypes.sizeof(_GpuZoneBeginData) == 16
assert ctypes.sizeof(_GpuTimeData) == 16 and ctypes.sizeof(_GpuZoneEndData) == 4
assert ctypes.sizeof(_GpuCalibrationData) == 24

_GPU_CONTEXT_TYPE_CUSTOM = 7
_GPU_CONTEXT_CALIBRATED = 1
# A GpuTimeline re-anchors its clock until one calibration call took at most this long.
_ANCHOR_CALL_NS = 1_000
_ANCHOR_ATTEMPTS = 20
# The file/function Tracy shows for section zones: Python call sites are unknown.
_SOURCE_FILE = "sectionmark"
# Tracy 0.11.2 sends every string with a 16-bit length: longer names would
# wrap around. Names are C strings: a NUL would end them. Both are made
# visible instead (docs/tracy.md).
NAME_LIMIT_BYTES = 65_535
TRUNCATION_MARK = "\u2026"  # …
NUL_MARK = "\u2400"  # ␀


def tracy_name(name: str) -> bytes:
    """``name`` as Tracy can carry it: UTF-8, NUL shown as ␀, at most 65,535 bytes ending in … if cut.

    A cut never splits a character; a lone surrogate becomes "?".
    """
    encoded = name.replace("\0", NUL_MARK).encode("utf-8", "replace")
    if len(encoded) <= NAME_LIMIT_BYTES:
        return encoded
    mark = TRUNCATION_MARK.encode("utf-8")
    kept = encoded[: NAME_LIMIT_BYTES - len(mark)].decode("utf-8", "ignore").encode("utf-8")
    return kept + mark


def _permanent_bytes(data: bytes) -> int:
    """Copy ``data`` into memory that is never freed and return its address.

    Tracy reads source locations lazily, possibly after the interpreter has
    shut down (TRACY_NO_EXIT), so they must not be Python-owned.
    """
    address = ctypes.pythonapi.PyMem_RawMalloc(ctypes.c_size_t(max(len(data), 1)))
    if not address:
        raise MemoryError("cannot allocate a Tracy source location")
    ctypes.memmove(address, data, len(data))
    return address


ctypes.pythonapi.PyMem_RawMalloc.restype = ctypes.c_void_p
ctypes.pythonapi.PyMem_RawMalloc.argtypes = [ctypes.c_size_t]


def _tracing_runtime_library() -> Path:
    """Path of the tracing runtime's extension module, which embeds Tracy."""
    if os.environ.get("IREE_PY_RUNTIME") != "tracy":
        raise SectionmarkError(
            "Tracy zones need IREE's tracing runtime: set IREE_PY_RUNTIME=tracy before starting Python"
        )
    spec = importlib.util.find_spec("iree._runtime_libs_tracy")
    if spec is None or not spec.submodule_search_locations:
        raise SectionmarkError(
            "IREE_PY_RUNTIME=tracy is set but this iree-base-runtime has no tracing runtime "
            "(iree/_runtime_libs_tracy is missing)"
        )
    folder = Path(list(spec.submodule_search_locations)[0])
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = folder / f"_runtime{suffix}"
        if candidate.is_file():
            return candidate
    raise SectionmarkError(f"the tracing runtime's extension module is missing from {folder}")


class TracyClient:
    """The Tracy C API of one loaded library, bound once with fixed signatures.

    Functions are looked up once; argument and result types are set once. The
    library is loaded with `ctypes.PyDLL`, which keeps the GIL during calls:
    Tracy's emit functions only write to a lock-free queue, and not releasing
    and re-taking the GIL makes each call markedly cheaper.
    """

    def __init__(self, library: Union[str, os.PathLike, None] = None):
        path = Path(library) if library is not None else _tracing_runtime_library()
        try:
            lib = ctypes.PyDLL(str(path))
            # getattr with strings: "___tracy..." inside a class body would be name-mangled.
            c_api = lambda name: getattr(lib, "___tracy_" + name)  # noqa: E731
            self.zone_begin = c_api("emit_zone_begin")
            self.zone_end = c_api("emit_zone_end")
            self.set_thread_name = c_api("set_thread_name")
            self._gpu_new_context = c_api("emit_gpu_new_context_serial")
            self._gpu_context_name = c_api("emit_gpu_context_name_serial")
            self._gpu_zone_begin = c_api("emit_gpu_zone_begin_serial")
            self._gpu_zone_end = c_api("emit_gpu_zone_end_serial")
            self._gpu_time = c_api("emit_gpu_time_serial")
            self._gpu_calibration = c_api("emit_gpu_calibration_serial")
            gpu_context_counter = lib._ZN5tracy16GetGpuCtxCounterEv
        except (OSError, AttributeError) as error:
            raise SectionmarkError(f"cannot bind Tracy's C API in {path}: {error}") from None
        # zone_begin takes a source location by pointer: pass the cached
        # `byref` objects directly (no argtypes: the cheapest conversion).
        self.zone_begin.restype = _ZoneContext
        self.zone_end.restype = None
        self.set_thread_name.argtypes = [ctypes.c_char_p]  # Tracy copies the name
        self.set_thread_name.restype = None
        for function, argument in (
            (self._gpu_new_context, _GpuNewContextData),
            (self._gpu_context_name, _GpuContextNameData),
            (self._gpu_zone_begin, _GpuZoneBeginData),
            (self._gpu_zone_end, _GpuZoneEndData),
            (self._gpu_time, _GpuTimeData),
            (self._gpu_calibration, _GpuCalibrationData),
        ):
            function.argtypes = [argument]
            function.restype = None
        gpu_context_counter.restype = ctypes.c_void_p
        gpu_context_counter.argtypes = []
        # std::atomic<uint8_t>, shared with IREE's own GPU contexts.
        self._gpu_context_counter = ctypes.c_uint8.from_address(gpu_context_counter())
        self._lock = threading.Lock()
        self._locations: dict[tuple[str, Optional[int]], tuple[int, object]] = {}
        self.path = path

    def source_location(self, name: str, color: Optional[int] = None) -> tuple[int, object]:
        """The static source location for (name, color): (address, by-pointer argument).

        One per distinct pair, created on first use and never freed.
        """
        key = (name, color)
        found = self._locations.get(key)
        if found is not None:
            return found
        with self._lock:
            found = self._locations.get(key)
            if found is None:
                text = _permanent_bytes(tracy_name(name) + b"\0")
                address = _permanent_bytes(bytes(ctypes.sizeof(_SourceLocation)))
                location = _SourceLocation.from_address(address)
                location.name = text
                location.function = text
                location.file = _permanent_bytes(_SOURCE_FILE.encode() + b"\0")
                location.line = 0
                location.color = color or 0
                found = (address, ctypes.byref(location))
                self._locations[key] = found
        return found

    def new_gpu_context_id(self) -> int:
        """Take the next GPU context id from the counter IREE's contexts also use.

        The counter is a C++ atomic that Python cannot increment atomically:
        create timelines before IREE creates its HAL devices.
        """
        with self._lock:
            context = self._gpu_context_counter.value
            if context == 255:
                raise SectionmarkError("Tracy supports at most 255 GPU contexts per process")
            self._gpu_context_counter.value = context + 1
        return context


_client: Optional[TracyClient] = None
_client_lock = threading.Lock()


def client() -> TracyClient:
    """The process-wide client for the tracing runtime (loaded on first use)."""
    global _client
    if _client is None:
        with _client_lock:
            if _client is None:
                _client = TracyClient()
    return _client


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


def enable() -> TracyZones:
    """Make every eager ``section`` a Tracy CPU zone from now on (idempotent).

    Raises SectionmarkError when the tracing runtime is not selected
    (IREE_PY_RUNTIME=tracy) or not installed.
    """
    global _installed
    if _installed is None:
        zones = TracyZones()
        with _client_lock:
            if _installed is None:
                _installed = zones
    markers.set_zone_emitter(_installed)
    return _installed


def disable() -> None:
    """Stop emitting zones for eager sections (zones already open still close)."""
    if markers.zone_emitter() is _installed:
        markers.set_zone_emitter(None)


class GpuTimeline:
    """A named Tracy GPU-context track whose zones carry explicit timestamps.

    For timings measured elsewhere (a device, a profile being replayed):
    ``begin(name, start_ns)`` / ``end(end_ns)`` pairs nest as a stack, and all
    timestamps must be non-decreasing in emission order. ``origin_ns`` is the
    timeline clock's reading now; Tracy places zones relative to it, so with
    the default (``time.monotonic_ns()``) pass monotonic-clock timestamps.
    Calls from several threads are serialized, but the zones of one timeline
    still form a single stack: use one timeline per queue or stream.
    """

    def __init__(self, name: str, *, origin_ns: Optional[int] = None, tracy: Optional[TracyClient] = None):
        self._tracy = tracy if tracy is not None else client()
        self.context = self._tracy.new_gpu_context_id()
        self.name = name
        self._lock = threading.Lock()
        self._depth = 0
        self._query = 0
        self._last_ns = time.monotonic_ns() if origin_ns is None else int(origin_ns)
        self._tracy._gpu_new_context(
            _GpuNewContextData(
                self._last_ns, 1.0, self.context, _GPU_CONTEXT_CALIBRATED, _GPU_CONTEXT_TYPE_CUSTOM
            )
        )
        encoded = tracy_name(name)
        self._tracy._gpu_context_name(_GpuContextNameData(self.context, encoded, len(encoded)))
        if origin_ns is None:
            self._anchor_to_monotonic_clock()

    def _anchor_to_monotonic_clock(self) -> None:
        """Tie the track to the monotonic clock again, as precisely as a warm call allows.

        Tracy maps a context's times to its CPU clock by the (our time, its
        time) pair taken when the context is created: its time is read inside
        the C call, ours just before. The first such call in a process is slow
        (measured 5-15 µs), which shifted a process's first track by that much
        against the others. A calibration message re-takes the pair (with
        equal CPU and GPU deltas Tracy's rate stays exactly 1); the last one
        sent counts, so it is repeated until one call took at most
        ``_ANCHOR_CALL_NS``, which bounds the error of the anchor.
        """
        data = _GpuCalibrationData(0, 0, self.context)
        for _ in range(_ANCHOR_ATTEMPTS):
            now = max(time.monotonic_ns(), self._last_ns + 1)
            data.gpuTime, data.cpuDelta = now, now - self._last_ns
            self._tracy._gpu_calibration(data)
            took = time.monotonic_ns() - now
            self._last_ns = now
            if took <= _ANCHOR_CALL_NS:
                break

    def _next_query(self) -> int:
        # Each query's time is sent right after its begin/end, so ids can be
        # reused immediately; cycling through all of them is just cautious.
        self._query = (self._query + 1) & 0xFFFF
        return self._query

    def _check_time(self, ns: int) -> int:
        ns = int(ns)
        if ns < self._last_ns:
            raise ValueError(
                f"GpuTimeline {self.name!r}: timestamp {ns} ns is earlier than the previous one "
                f"({self._last_ns} ns); emit zones in time order"
            )
        self._last_ns = ns
        return ns

    def begin(self, name: str, start_ns: int, color: Optional[int] = None) -> None:
        """Open a zone at ``start_ns`` inside the zone open now (if any)."""
        address, _ = self._tracy.source_location(name, color)
        with self._lock:
            start_ns = self._check_time(start_ns)
            query = self._next_query()
            self._tracy._gpu_zone_begin(_GpuZoneBeginData(address, query, self.context))
            self._tracy._gpu_time(_GpuTimeData(start_ns, query, self.context))
            self._depth += 1

    def end(self, end_ns: int) -> None:
        """Close the innermost open zone at ``end_ns``."""
        with self._lock:
            if not self._depth:
                raise ValueError(f"GpuTimeline {self.name!r}: end() without an open zone")
            end_ns = self._check_time(end_ns)
            query = self._next_query()
            self._tracy._gpu_zone_end(_GpuZoneEndData(query, self.context))
            self._tracy._gpu_time(_GpuTimeData(end_ns, query, self.context))
            self._depth -= 1

    def zone(self, name: str, start_ns: int, end_ns: int, color: Optional[int] = None) -> None:
        """A zone without children: ``begin`` then ``end``."""
        self.begin(name, start_ns, color)
        self.end(end_ns)
