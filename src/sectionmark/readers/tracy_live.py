"""A Tracy capture of the user's own program on local-task as a profile the section map can attribute.

With the tracing runtime (``IREE_PY_RUNTIME=tracy``) IREE 3.13's task system
records, on each worker thread, one zone per tile reservation named after the
dispatch's executable export (the section map's dispatch ``key``), inside an
``iree_hal_local_task_process_region`` zone. The thread that submits work
records an ``iree_hal_device_queue_execute`` zone for each command buffer
execution. Nothing in the capture says which command of the command buffer a
tile belongs to, so the commands are rebuilt here:

* executions: the worker zones that start between one
  ``iree_hal_device_queue_execute`` and the next belong to the first of them
  (a Python call waits for its results, so executions do not overlap);
* per execution, the static command buffer whose dispatch keys cover the
  execution's keys (those of ``function`` first);
* per key, the tiles in time order are cut into as many groups as the buffer
  has commands of that key, at the widest gaps between consecutive tiles, and
  the groups take the commands in recording order. Commands of one key in
  different barrier regions are separated by other dispatches, so the widest
  gaps fall between them; two commands of one key that run concurrently in
  one region may swap tiles, which moves time only between identical exports
  of one region.

A dispatch's time is its span, first tile start to last tile end, not the sum
of its tiles: the span is what the HAL profiler measures for a dispatch (the
exact profile this approximates), while the sum would count a dispatch that
ran on k workers about k times. The Tracy zones themselves are inflated by
the instrumentation, hence ``APPROXIMATION_NOTE``. The result goes through
`tracy_dispatch_zones.executions_profile` and ``sectionmark.profiling.attribute``
like a GPU capture.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Optional, Union

from sectionmark.errors import SectionmarkError
from sectionmark.readers.event_model import Profile
from sectionmark.readers.tracy_capture import Capture, is_capture, read_capture
from sectionmark.readers.tracy_dispatch_zones import (
    DispatchZone,
    Execution,
    StaticBuffer,
    dispatch_keys,
    executions_profile,
    static_buffers,
)
from sectionmark.section_map import SectionMap

__all__ = ["APPROXIMATION_NOTE", "is_live_capture", "is_live_capture_file", "live_capture_profile"]

APPROXIMATION_NOTE = (
    "note: times from a live Tracy capture are approximations inflated by Tracy's instrumentation; "
    "for exact per-section times use sm.record or 'sectionmark profile' (IREE's HAL profiler)"
)
EXECUTE_ZONE = "iree_hal_device_queue_execute"
TILE_PARENT_ZONE = "iree_hal_local_task_process_region"


def is_live_capture(capture: Capture) -> bool:
    """A capture of a program on local-task: no GPU zones, and IREE's per-tile worker zones."""
    has_gpu_zones = any(track.zones for track in capture.gpu_contexts)
    return not has_gpu_zones and any(zone.name == TILE_PARENT_ZONE for _track, zone in capture.zones())


def is_live_capture_file(path: Union[str, Path]) -> bool:
    """Whether ``path`` is a readable live capture (the CLI prints `APPROXIMATION_NOTE` under its report)."""
    return is_capture(path) and is_live_capture(read_capture(path))


def live_capture_profile(capture: Capture, section_map: SectionMap, *, function: Optional[str] = None) -> Profile:
    """The capture's worker-thread dispatch zones as a `Profile` for ``attribute``.

    Raises SectionmarkError (one line) when the capture has no execution or no
    dispatch zone of the map, or an execution matches no command buffer of the map.
    """
    keys, key_ids = dispatch_keys(section_map)
    tiles = _tiles(capture, key_ids)
    if not tiles:
        raise SectionmarkError(
            "none of the capture's worker zones is a dispatch of the section map; "
            "is the map from the module that ran (with IREE_PY_RUNTIME=tracy on local-task)?"
        )
    starts = sorted(zone.start_ns for _track, zone in capture.zones() if zone.name == EXECUTE_ZONE)
    if not starts:
        raise SectionmarkError(f"the capture has dispatch zones but no '{EXECUTE_ZONE}' zone to tell executions apart")
    buffers = static_buffers(section_map, key_ids, function)
    executions = [_execution(window, buffers, keys) for window in _windows(tiles, starts) if window]
    return executions_profile(executions, keys)


def _tiles(capture: Capture, key_ids: dict[str, int]) -> list[DispatchZone]:
    """Worker zones named by a dispatch key inside a process_region zone, in time order."""
    tiles = []
    for track in capture.threads:
        zones = track.zones
        for zone in zones:
            key = key_ids.get(zone.name)
            if key is not None and zone.parent >= 0 and zones[zone.parent].name == TILE_PARENT_ZONE:
                tiles.append(DispatchZone(key, zone.start_ns, zone.end_ns, None, track.name))
    return sorted(tiles, key=lambda tile: (tile.start_ns, tile.end_ns))


def _windows(tiles: list[DispatchZone], execute_starts: list[int]) -> list[list[DispatchZone]]:
    """Tiles grouped by the last execution that started before them (tiles before the first are dropped)."""
    windows: list[list[DispatchZone]] = [[] for _ in execute_starts]
    execution = -1
    for tile in tiles:
        while execution + 1 < len(execute_starts) and execute_starts[execution + 1] <= tile.start_ns:
            execution += 1
        if execution >= 0:
            windows[execution].append(tile)
    return windows


def _execution(tiles: list[DispatchZone], buffers: list[StaticBuffer], keys: list[str]) -> Execution:
    """One execution's tiles as dispatches of the first static buffer that has commands for all its keys."""
    tiles_by_key: dict[int, list[DispatchZone]] = defaultdict(list)
    for tile in tiles:
        tiles_by_key[tile.key].append(tile)
    for static in buffers:
        commands_by_key: dict[int, list[int]] = defaultdict(list)
        for position in sorted(static.keys):
            commands_by_key[static.keys[position]].append(position)
        # Every key of the execution needs a command, and at least one tile per command of its key.
        if all(0 < len(commands_by_key.get(key, ())) <= len(found) for key, found in tiles_by_key.items()):
            placed = []
            for key, found in tiles_by_key.items():
                groups = _split_at_widest_gaps(found, len(commands_by_key[key]))
                placed.extend((position, _span(group)) for position, group in zip(commands_by_key[key], groups))
            return Execution(0, static, sorted(placed, key=lambda item: item[1].start_ns))
    first = tiles[0]
    names = sorted({keys[key] for key in tiles_by_key})
    raise SectionmarkError(
        f"the section map does not match this capture: the dispatch zones of the execution at "
        f"{first.start_ns / 1e6:.3f} ms ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''}) "
        "are no execution of a command buffer of the map; is the map from the module that ran?"
    )


def _split_at_widest_gaps(tiles: list[DispatchZone], groups: int) -> list[list[DispatchZone]]:
    """Time-ordered tiles cut into ``groups`` runs at the ``groups - 1`` widest gaps between them."""
    gaps = sorted(range(1, len(tiles)), key=lambda i: tiles[i].start_ns - tiles[i - 1].end_ns, reverse=True)
    cuts = [0, *sorted(gaps[: groups - 1]), len(tiles)]
    return [tiles[start:end] for start, end in zip(cuts, cuts[1:])]


def _span(tiles: list[DispatchZone]) -> DispatchZone:
    """A dispatch from its tiles: first start to last end."""
    start, end = min(tile.start_ns for tile in tiles), max(tile.end_ns for tile in tiles)
    return DispatchZone(tiles[0].key, start, end, None, tiles[0].track)
