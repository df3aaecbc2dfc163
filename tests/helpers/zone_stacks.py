"""Build either zone stack over Python begin/end callables (shared by the tests).

The C stack calls C function pointers: ctypes callbacks with Tracy's
signatures, the 8-byte zone context passed and returned as one 64-bit integer
(the same registers).
"""

import ctypes

import pytest

from sectionmark.markers import zonestack

BEGIN_C = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_void_p, ctypes.c_int32)
END_C = ctypes.CFUNCTYPE(None, ctypes.c_uint64)

KINDS = ["python", pytest.param("c", marks=pytest.mark.skipif(
    not zonestack.c_extension_available(), reason="sectionmark.markers._zonestack not built (no C compiler)"))]


def make_stack(kind, begin, end, name_thread=None):
    """A zone stack of ``kind`` ("python" or "c"); locations and zones are ints (never 0)."""
    if kind == "python":
        return zonestack.PythonZoneStack(begin, end, name_thread)
    functions = (BEGIN_C(begin), END_C(end))  # held by the stack while bound
    address = lambda function: ctypes.cast(function, ctypes.c_void_p).value  # noqa: E731
    return zonestack.CZoneStack(address(functions[0]), address(functions[1]), name_thread, functions)
