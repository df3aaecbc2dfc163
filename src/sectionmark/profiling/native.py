"""Profiling's passes over every attributed event in C (`_sectionpass.c`), when setup.py built them.

`attribute.attributed_events`, `section_time.event_sums`, `section_time.wall_parts`,
`section_time.EventFold`'s sweep carried across windows, `queue_time.union_by_window` and
`queue_time.partition_time` each run one C pass over the events when `native_passes()` gives the module, else
their numpy twin, with the same results (tests/profiling/test_sectionpass.py compares them). The readers' C
passes are apart (`sectionmark.readers.event_model.native`).
"""

from __future__ import annotations

from typing import Any

from sectionmark.readers.event_model import DISPATCH_DTYPE

try:  # built when a C compiler is present
    from sectionmark.profiling import _sectionpass as _passes
except ImportError:
    _passes = None

# The version of the passes' arguments this code calls them with (the C module's INTERFACE_VERSION).
INTERFACE_VERSION = 4
if _passes is not None and (getattr(_passes, "DISPATCH_SIZE", None), getattr(_passes, "INTERFACE_VERSION", None)) != (
        DISPATCH_DTYPE.itemsize, INTERFACE_VERSION):
    _passes = None  # a stale build, reading rows of another width or taking other arguments: numpy gives the same


def native_passes() -> Any:
    """The C extension's module, or None when it is not built, is stale, or is switched off (as tests do to
    compare it with numpy)."""
    return _passes
