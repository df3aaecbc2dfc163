"""The tracing runtime's Tracy C API, bound with ctypes.

With ``IREE_PY_RUNTIME=tracy``, iree-base-runtime's extension module embeds a
Tracy 0.11.2 client and exports its C API; binding it with ctypes puts our
zones in the same capture as IREE's own. `TracyClient` is that binding plus a
cache of static source locations; `client()` is the process-wide one. The
users of the binding live beside it: `sectionmark.tracy.zones` (eager
sections as CPU zones) and `sectionmark.renderers.tracy_gpu_timeline` (tracks with
explicit timestamps).
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path
from typing import Optional, Union

from sectionmark.artifacts.tools import tracing_runtime_library
from sectionmark.errors import SectionmarkError

__all__ = ["TracyClient", "client", "SOURCE_LOCATIONS", "SourceLocations", "tracy_name", "permanent_name", "NAME_LIMIT_BYTES"]


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


class GpuNewContextData(ctypes.Structure):
    _fields_ = [
        ("gpuTime", ctypes.c_int64),
        ("period", ctypes.c_float),
        ("context", ctypes.c_uint8),
        ("flags", ctypes.c_uint8),
        ("type", ctypes.c_uint8),
    ]


class GpuContextNameData(ctypes.Structure):
    _fields_ = [("context", ctypes.c_uint8), ("name", ctypes.c_char_p), ("len", ctypes.c_uint16)]


class GpuZoneBeginData(ctypes.Structure):
    _fields_ = [("srcloc", ctypes.c_uint64), ("queryId", ctypes.c_uint16), ("context", ctypes.c_uint8)]


class GpuTimeData(ctypes.Structure):
    _fields_ = [("gpuTime", ctypes.c_int64), ("queryId", ctypes.c_uint16), ("context", ctypes.c_uint8)]


class GpuZoneEndData(ctypes.Structure):
    _fields_ = [("queryId", ctypes.c_uint16), ("context", ctypes.c_uint8)]


class GpuCalibrationData(ctypes.Structure):
    _fields_ = [("gpuTime", ctypes.c_int64), ("cpuDelta", ctypes.c_int64), ("context", ctypes.c_uint8)]


assert ctypes.sizeof(_SourceLocation) == 32 and ctypes.sizeof(GpuNewContextData) == 16
assert ctypes.sizeof(GpuContextNameData) == 24 and ctypes.sizeof(GpuZoneBeginData) == 16
assert ctypes.sizeof(GpuTimeData) == 16 and ctypes.sizeof(GpuZoneEndData) == 4
assert ctypes.sizeof(GpuCalibrationData) == 24

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


def permanent_name(name: str) -> int:
    """`tracy_name` of ``name`` as a C string that is never freed: its address (source locations, plots)."""
    return _permanent_bytes(tracy_name(name) + b"\0")


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


class SourceLocations:
    """Static source locations, one per distinct (name, color, text), created on first use and never freed.

    They are plain memory that Tracy reads when its capture asks (`_permanent_bytes`), so they can be made
    before the client loads: a replay makes its zones' before Tracy's start-up ends, not after.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._locations: dict[tuple[str, Optional[int], Optional[str]], tuple[int, object]] = {}
        self._strings: dict[str, int] = {}

    def get(self, name: str, color: Optional[int] = None, text: Optional[str] = None) -> tuple[int, object]:
        """(address, by-pointer argument) of the source location named ``name``, in ``color``, whose function
        string is ``text`` (Tracy shows it under a zone's name; default: the name)."""
        key = (name, color, text)
        found = self._locations.get(key)
        if found is not None:
            return found
        with self._lock:
            found = self._locations.get(key)
            if found is None:
                address = _permanent_bytes(bytes(ctypes.sizeof(_SourceLocation)))
                location = _SourceLocation.from_address(address)
                location.name = self._string(name)
                location.function = location.name if text is None else self._string(text)
                location.file = self._string(_SOURCE_FILE)
                location.line = 0
                location.color = color or 0
                found = (address, ctypes.byref(location))
                self._locations[key] = found
        return found

    def _string(self, text: str) -> int:
        """One permanent C string per distinct text (under the lock): Tracy asks for each address once."""
        address = self._strings.get(text)
        if address is None:
            address = self._strings[text] = permanent_name(text)
        return address


SOURCE_LOCATIONS = SourceLocations()  # the process's, shared by every client


class TracyClient:
    """The Tracy C API of one loaded library, bound once with fixed signatures.

    Functions are looked up once; argument and result types are set once. The
    library is loaded with `ctypes.PyDLL`, which keeps the GIL during calls:
    Tracy's emit functions only write to a lock-free queue, and not releasing
    and re-taking the GIL makes each call markedly cheaper.
    """

    def __init__(self, library: Union[str, os.PathLike, None] = None):
        path = Path(library) if library is not None else tracing_runtime_library()
        try:
            lib = ctypes.PyDLL(str(path))
            # getattr with strings: "___tracy..." inside a class body would be name-mangled.
            c_api = lambda name: getattr(lib, "___tracy_" + name)  # noqa: E731
            self.zone_begin = c_api("emit_zone_begin")
            self.zone_end = c_api("emit_zone_end")
            self.set_thread_name = c_api("set_thread_name")
            self.gpu_new_context = c_api("emit_gpu_new_context_serial")
            self.gpu_context_name = c_api("emit_gpu_context_name_serial")
            self.gpu_zone_begin = c_api("emit_gpu_zone_begin_serial")
            self.gpu_zone_end = c_api("emit_gpu_zone_end_serial")
            self.gpu_time = c_api("emit_gpu_time_serial")
            self.gpu_calibration = c_api("emit_gpu_calibration_serial")
            self.message = c_api("emit_message")
            self.frame_mark = c_api("emit_frame_mark")
            self.plot = c_api("emit_plot_int")
            self.plot_config = c_api("emit_plot_config")
            gpu_context_counter = lib._ZN5tracy16GetGpuCtxCounterEv
        except (OSError, AttributeError) as error:
            raise SectionmarkError(f"cannot bind Tracy's C API in {path}: {error}") from None
        # zone_begin takes a source location by pointer: pass the cached
        # `byref` objects directly (no argtypes: the cheapest conversion).
        self.zone_begin.restype = _ZoneContext
        self.zone_end.restype = None
        self.set_thread_name.argtypes = [ctypes.c_char_p]  # Tracy copies the name
        self.set_thread_name.restype = None
        self.message.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int32]  # Tracy copies the text
        self.message.restype = None
        self.frame_mark.argtypes = [ctypes.c_char_p]  # None: the main frame set
        self.frame_mark.restype = None
        # A plot's name is read by pointer, lazily: pass `permanent_name` addresses.
        self.plot.argtypes = [ctypes.c_void_p, ctypes.c_int64]
        self.plot.restype = None
        self.plot_config.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, ctypes.c_uint32]
        self.plot_config.restype = None
        for function, argument in (
            (self.gpu_new_context, GpuNewContextData),
            (self.gpu_context_name, GpuContextNameData),
            (self.gpu_zone_begin, GpuZoneBeginData),
            (self.gpu_zone_end, GpuZoneEndData),
            (self.gpu_time, GpuTimeData),
            (self.gpu_calibration, GpuCalibrationData),
        ):
            function.argtypes = [argument]
            function.restype = None
        gpu_context_counter.restype = ctypes.c_void_p
        gpu_context_counter.argtypes = []
        # std::atomic<uint8_t>, shared with IREE's own GPU contexts.
        self._gpu_context_counter = ctypes.c_uint8.from_address(gpu_context_counter())
        self._lock = threading.Lock()
        self.path = path

    def source_location(self, name: str, color: Optional[int] = None,
                        text: Optional[str] = None) -> tuple[int, object]:
        """The static source location for (name, color, text): (address, by-pointer argument).

        ``text`` is its function string, which Tracy shows under a zone's name (GPU zones have no zone text;
        default: the name). The process's one `SOURCE_LOCATIONS`.
        """
        return SOURCE_LOCATIONS.get(name, color, text)

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
