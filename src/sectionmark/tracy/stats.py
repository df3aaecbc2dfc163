"""Per-zone-name timing statistics from a Tracy capture (backs `sectionmark tracy-stats`).

Rows are plain data; rendering (table, JSON, CSV) is the caller's job.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Optional, Union

from sectionmark.readers.tracy_capture import Capture, read_capture

__all__ = ["ZoneStats", "zone_stats"]


@dataclass(frozen=True)
class ZoneStats:
    """Durations of all zones with one name on one kind of track, in ns.

    ``p95_ns`` uses the nearest-rank method: the smallest duration that at
    least 95% of the zones do not exceed (always an observed duration).
    """

    name: str
    kind: str  # "thread" (CPU zones) or "gpu" (GPU-context zones)
    count: int
    total_ns: int
    mean_ns: float
    min_ns: int
    max_ns: int
    p95_ns: int


def zone_stats(
    capture: Union[Capture, str, os.PathLike],
    *,
    depth: Optional[int] = None,
    gpu_only: bool = False,
) -> list[ZoneStats]:
    """Count / total / mean / min / max / p95 per (zone name, track kind).

    ``depth`` keeps only zones at that nesting depth (0 = outermost, e.g. the
    top-level sections); ``gpu_only`` keeps only GPU-context zones. Rows are
    sorted by total time, largest first. Durations of nested zones include
    their children, as in Tracy's own statistics.
    """
    if not isinstance(capture, Capture):
        capture = read_capture(capture)
    durations: dict[tuple[str, str], list[int]] = {}
    for track in capture.gpu_contexts if gpu_only else capture.tracks:
        for zone in track.zones:
            if depth is None or zone.depth == depth:
                durations.setdefault((zone.name, track.kind), []).append(zone.end_ns - zone.start_ns)
    rows = []
    for (name, kind), values in durations.items():
        values.sort()
        total = sum(values)
        rows.append(
            ZoneStats(
                name=name,
                kind=kind,
                count=len(values),
                total_ns=total,
                mean_ns=total / len(values),
                min_ns=values[0],
                max_ns=values[-1],
                p95_ns=values[math.ceil(0.95 * len(values)) - 1],
            )
        )
    rows.sort(key=lambda row: (-row.total_ns, row.kind, row.name))
    return rows
