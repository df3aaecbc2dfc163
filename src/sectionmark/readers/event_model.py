"""The events every reader produces: `Profile`, its row types and the limits a plausible profile keeps.

The .ireeprof bundle reader, the JSONL reader and the Tracy readers all build
a `Profile`; attribution joins it to the section map without asking which
reader ran (what it needs to know of the source is in `Provenance`). Column by
column, what each table holds is in `sectionmark.readers.ireeprof`'s docstring
and docs/profile-json.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

try:  # the reading passes over every record in C (setup.py builds it when a compiler is present)
    from sectionmark.readers import _ireeprof as _native
except ImportError:
    _native = None


def native() -> Any:
    """The C extension's module, or None when it is not built (or switched off, as tests do to compare).

    A build older than ``DISPATCH_DTYPE`` (other row sizes) would write rows
    of the wrong width, and one older than ``NATIVE_INTERFACE_VERSION`` would
    expect other arguments, so neither is used (set after ``DISPATCH_DTYPE``
    below).
    """
    return _native


DISPATCH_DTYPE = np.dtype(
    [
        ("submission", "<u8"),
        ("command_buffer", "<u8"),
        ("command_index", "<u4"),
        ("key", "<u4"),
        ("device", "<u4"),
        ("queue", "<u4"),
        ("start_ns", "<i8"),
        ("end_ns", "<i8"),
        ("tile_ns", "<u8"),
        ("tile_count", "<u8"),
    ]
)
# The C code writes DISPATCH_DTYPE rows; the version of its functions' arguments: 2 takes attribution's slot and
# call as int32 columns beside them (attribute.Attribution), not as wider rows; 3 has event_sums sum the tiles and
# find the section spans' first starts and last ends too; 4 has only the reading passes (profiling's passes over
# the attributed events are sectionmark.profiling._sectionpass); 5 adds not_dispatches (a bundle's first pass); 6 adds
# record_positions (the offsets of a window of records).
NATIVE_INTERFACE_VERSION = 6
if _native is not None and (getattr(_native, "DISPATCH_SIZE", None), getattr(_native, "INTERFACE_VERSION", None)) != (
        DISPATCH_DTYPE.itemsize, NATIVE_INTERFACE_VERSION):
    _native = None  # a stale build of _ireeprof.c: the numpy passes give the same results
SUBMISSION_DTYPE = np.dtype(
    [("submission", "<u8"), ("command_buffer", "<u8"), ("start_ns", "<i8"), ("end_ns", "<i8")]
)
# Queue operations outside command buffers (host execution events other than dispatch and execute):
# allocations, transfers, barriers, host calls. ``type`` is the event type (EVENT_NAMES).
QUEUE_OP_DTYPE = np.dtype(
    [("submission", "<u8"), ("type", "<u4"), ("start_ns", "<i8"), ("end_ns", "<i8"), ("payload_bytes", "<u8")]
)
# Memory lifecycle events (memory-events family). ``pool_reserved``: the pool's bytes in live
# reservations after the event, valid where ``flags`` has MEMORY_POOL_STATS.
MEMORY_DTYPE = np.dtype(
    [("time_ns", "<i8"), ("type", "<u4"), ("flags", "<u4"), ("submission", "<u8"), ("allocation", "<u8"),
     ("pool", "<u8"), ("length", "<u8"), ("pool_reserved", "<u8")]
)

# Command operation type codes (iree_hal_profile_command_operation_type_t).
OPERATION_NAMES = {
    1: "barrier",
    2: "dispatch",
    3: "fill",
    4: "copy",
    5: "update",
    6: "profile_marker",
    7: "branch",
    8: "cond_branch",
    9: "return",
}
# Host execution event types (iree_hal_profile_queue_event_type_t), named as iree-profile exports them.
# Dispatch and execute events are the timed work of command buffers; the others are queue operations
# outside command buffers (kept as ``Profile.queue_ops``).
EVENT_NAMES = {
    1: "barrier",
    2: "dispatch",
    3: "execute",
    4: "copy",
    5: "fill",
    6: "update",
    7: "read",
    8: "write",
    9: "alloca",
    10: "dealloca",
    11: "host_call",
}
EVENT_DISPATCH = 2
EVENT_EXECUTE = 3
# Memory event types (iree_hal_profile_memory_event_type_t), named as iree-profile exports them.
MEMORY_EVENT_NAMES = {
    1: "slab_acquire",
    2: "slab_release",
    3: "pool_reserve",
    4: "pool_materialize",
    5: "pool_release",
    6: "pool_wait",
    7: "queue_alloca",
    8: "queue_dealloca",
    9: "buffer_allocate",
    10: "buffer_free",
    11: "buffer_import",
    12: "buffer_unimport",
}
MEMORY_POOL_STATS = 1 << 4  # memory event flag: pool_bytes_reserved and the other pool figures are valid
ALLOCATION_DTYPE = np.dtype([("time_ns", "<i8"), ("length", "<u8")])  # a queue allocation: when, how many bytes
QUEUE_ALLOCA = next(type_ for type_, name in MEMORY_EVENT_NAMES.items() if name == "queue_alloca")
INDIRECT_PARAMETERS = 1 << 1  # command operation flag: the workgroup count is read at run time

NO_INDEX = 0xFFFFFFFF
EXPORT_TIMEOUT_S = 600.0  # iree-profile export of a long profile takes seconds; a hang must not last

# Plausibility bounds: beyond them a profile is corrupt, and int64 sums of durations cannot overflow.
MAX_TIMESTAMP_NS = 1 << 62
MAX_EVENT_NS = 3600 * 10**9
MAX_SESSION_NS = 30 * 86400 * 10**9
MAX_JSONL_LINE_BYTES = 1 << 20

RecordedCommand = tuple[int, str, Optional[str]]  # (command_index, op, key or None)
CommandRecord = tuple[str, Optional[str], bool]  # (op, key, timed): timed = one event per execution expected


@dataclass(frozen=True)
class Provenance:
    """Where a profile's events came from, as far as attribution needs to know: filled in by its reader."""

    reader: str  # which reader made the events: "bundle", "jsonl" or "tracy"
    # Submissions are the queue's own command-buffer executions, timed by IREE, so each call's queue time
    # (transfers, allocation, idle) can be read beside them; False where a reader rebuilt them as the spans of
    # dispatch zones (a Tracy capture has no queue operations).
    timed_submissions: bool = True
    # The dispatches were timed by the device (a GPU's dispatch events, ticks mapped onto IREE's host clock): no
    # CPU time (tiles) exists, and each execution spans its dispatches (the device does not time executions).
    device_timed: bool = False

    @property
    def dispatches_only(self) -> bool:
        """Only the dispatches are timed: a GPU's HAL-native profile (Vulkan's), its executions rebuilt as the spans
        of their dispatches and its queue operations instants (a Tracy capture's executions are its command-buffer
        zones, `sectionmark.readers.tracy_dispatch_zones`)."""
        return self.device_timed and self.reader != "tracy"


@dataclass
class Profile:
    """The events of one profile, ready for attribution."""

    dispatches: np.ndarray  # DISPATCH_DTYPE, sorted by (submission, start_ns)
    submissions: np.ndarray  # SUBMISSION_DTYPE, sorted by submission
    keys: list[str]  # dispatch key (executable function name) by ``dispatches["key"]``
    command_buffers: dict[int, list[RecordedCommand]] = field(default_factory=dict)
    exports: dict[int, list[str]] = field(default_factory=dict)  # executable id -> its function names
    queue_ops: np.ndarray = field(default_factory=lambda: np.zeros(0, QUEUE_OP_DTYPE))  # sorted by (start, submission)
    memory: np.ndarray = field(default_factory=lambda: np.zeros(0, MEMORY_DTYPE))  # sorted by time
    # The queue allocations (ALLOCATION_DTYPE, by time) where a reader keeps them apart from ``memory`` (the
    # windowed .ireeprof read keeps only the memory events that change a level); None: ``memory``'s own
    # queue_alloca rows.
    allocations: Optional[np.ndarray] = None
    provenance: Provenance = field(kw_only=True)  # every reader says where its events came from
