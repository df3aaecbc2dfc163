"""The zone tree walks of a Tracy capture in Python: the twins of the C extension's (``_tracyread.c``).

`readers.tracy_capture` runs the C walks when the extension is built and
these otherwise; both write the same rows (tests/readers/test_tracy_fast.py).
"""

from __future__ import annotations

import struct
from itertools import starmap
from typing import Optional

_q = struct.Struct("<q")
_CPU_ZONE_AND_END = struct.Struct("<hqIIq")  # srcloc, start delta, extra index, child count (+ end delta)
_GPU_ZONE = struct.Struct("<qqh3sHQ")  # cpu/gpu start deltas, srcloc, callstack, thread, child count
_GPU_END = struct.Struct("<qq")
# A zone as both zone tree walks write it (the C one in _tracyread.c): start, end, parent index, depth,
# srcloc id, zone extra index (0: none; always 0 for GPU zones), then the CPU-side start and end (a GPU zone's
# CPU-side begin and end, Tracy's "CPU command setup"; a CPU zone's start and end again). numpy reads the rows
# with ZONE_FIELDS.
ZONE_ROW = struct.Struct("<qqqqiIqq")
ZONE_FIELDS = [("start_ns", "<i8"), ("end_ns", "<i8"), ("parent", "<i8"), ("depth", "<i8"), ("srcloc", "<i4"),
               ("extra", "<u4"), ("cpu_start_ns", "<i8"), ("cpu_end_ns", "<i8")]


def cpu_zone_table(buf: bytes | bytearray, pos: int, count: int, last_time: int) -> Optional[tuple[int, bytes, bool]]:
    """A thread's zone tree at ``buf[pos:]`` as rows (`ZONE_FIELDS`), parents first: (position after it,
    rows, whether a time left 64 bits: then no rows), or None when it runs past ``buf``.

    Each zone is (srcloc, start delta, extra, child count), its children, then
    an end delta; one running time reference goes start -> children -> end.
    Iterative (explicit stack) so deep nesting cannot hit Python's recursion
    limit. The C extension's function of the same name gives the same.
    """
    unpack_zone, unpack_time = _CPU_ZONE_AND_END.unpack_from, _q.unpack_from
    rows: list = []  # (start, end, parent, depth, srcloc, extra); a list while its end is unknown
    stack = []
    remaining, parent, depth, ref = count, -1, 0, 0
    try:
        while True:
            if remaining:
                remaining -= 1
                # Read the zone with the 8 bytes after it: the end delta if it is a
                # leaf (most zones), so leaves take one unpack. Children always
                # follow a non-leaf, so the extra bytes exist in a valid file.
                srcloc, delta, extra, children, end_delta = unpack_zone(buf, pos)
                ref += delta
                if children:
                    pos += 18
                    rows.append([ref, 0, parent, depth, srcloc, extra])
                    stack.append((remaining, parent, depth))
                    remaining, parent, depth = children, len(rows) - 1, depth + 1
                else:
                    pos += 26
                    start, ref = ref, ref + end_delta
                    end = ref if ref >= 0 else _unfinished_end(start, last_time)
                    rows.append((start, end, parent, depth, srcloc, extra))
            elif stack:
                ref += unpack_time(buf, pos)[0]
                pos += 8
                row = rows[parent]
                row[1] = ref if ref >= 0 else _unfinished_end(row[0], last_time)
                remaining, parent, depth = stack.pop()
            else:
                break
    except struct.error:
        return None
    return (pos, *_packed([(*row, row[0], row[1]) for row in rows]))


def gpu_zone_table(buf: bytes | bytearray, pos: int, count: int, last_time: int) -> Optional[tuple[int, bytes, bool]]:
    """`cpu_zone_table` for one thread's zones of a GPU context: times are the GPU timestamps
    (mapped to the CPU clock by Tracy), extra is 0, the CPU side has its own running reference; a leaf's end
    record follows it at once."""
    unpack_zone, unpack_end = _GPU_ZONE.unpack_from, _GPU_END.unpack_from
    rows: list = []
    stack = []
    remaining, parent, depth, gpu_ref, cpu_ref = count, -1, 0, 0, 0
    try:
        while True:
            if remaining:
                remaining -= 1
                cpu_delta, gpu_delta, srcloc, _, _, children = unpack_zone(buf, pos)
                pos += 31
                gpu_ref += gpu_delta
                cpu_ref += cpu_delta
                row = [gpu_ref, 0, parent, depth, srcloc, 0, cpu_ref, 0]
                rows.append(row)
                if children:
                    stack.append((remaining, parent, depth))
                    remaining, parent, depth = children, len(rows) - 1, depth + 1
                    continue
                # A leaf: its end record follows at once.
            elif stack:
                row = rows[parent]  # the last child is read: the parent's end follows
                remaining, parent, depth = stack.pop()
            else:
                break
            cpu_delta, gpu_delta = unpack_end(buf, pos)
            pos += 16
            gpu_ref += gpu_delta
            cpu_ref += cpu_delta
            row[1] = gpu_ref if gpu_ref >= 0 else _unfinished_end(row[0], last_time)
            row[7] = cpu_ref if cpu_ref >= 0 else _unfinished_end(row[6], last_time)
    except struct.error:
        return None
    return (pos, *_packed(rows))


def _packed(rows: list) -> tuple[bytes, bool]:
    """The rows as `ZONE_FIELDS` bytes and False, or no rows and True when a time does not fit 64 bits."""
    try:
        return b"".join(starmap(ZONE_ROW.pack, rows)), False
    except struct.error:
        return b"", True


def _unfinished_end(start: int, last_time: int) -> int:
    # A zone still open when the capture ended is stored with end -1: Tracy
    # draws it to the end of the capture, and so do we.
    return max(last_time, start)
