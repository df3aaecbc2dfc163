"""The names of a queue's timeline tracks: one definition for those who write them and the reader of a replay.

A profile's timeline is drawn per queue as a main track of sections and
extra lanes for dispatches that ran concurrently (`profiling.timeline`).
Perfetto threads and the Tracy replay's GPU contexts carry these names; a
Tracy capture records nothing else about a GPU context that could say which
queue it drew, so the reader of a replay (`readers.tracy_dispatch_zones`)
groups its tracks back by queue from the names made here.
"""

from __future__ import annotations

import re
from typing import Optional

_MAIN = "queue {queue}: sections"
_LANE = "queue {queue}: concurrent dispatches {lane}"
# Optionally after the device's name (one word, not ending in ":", which a replayed function's name does).
_ANY_TRACK = re.compile(r"(?:\S+(?<!:) )?queue (\d+): (?:sections|concurrent dispatches \d+)\Z")


def queue_track_names(queue: int, lanes: int, device: Optional[str] = None) -> list[str]:
    """The main track's name, then lane 1..``lanes``; after ``device`` ("local-task queue 0: sections") when
    known (a name without spaces)."""
    names = [_MAIN.format(queue=queue), *(_LANE.format(queue=queue, lane=lane) for lane in range(1, lanes + 1))]
    return [f"{device} {name}" for name in names] if device and len(device.split()) == 1 else names


def track_queue(name: str) -> Optional[int]:
    """The queue of a track named by `queue_track_names`, None for other names (a GPU run's own contexts)."""
    match = _ANY_TRACK.match(name)
    return int(match.group(1)) if match else None
