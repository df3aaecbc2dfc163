"""A Tracy capture's GPU dispatch zones as a profile that the section map can attribute.

On CUDA and HIP, IREE 3.13 has no HAL-native profiler: its tracing runtime is
the measurement. Every command buffer execution is a GPU zone, each
``begin/end_debug_group`` the compiler put around a section is a zone named
after the section's leaf name, and each dispatch is a zone named after its
executable export, i.e. the section map's dispatch ``key`` (docs/gpu.md says
where in IREE's source this comes from). sectionmark's own replay of a CPU
profile (``sectionmark tracy``) has the same section-around-dispatch zones,
with dispatches that ran concurrently moved to extra "lane" tracks.

A capture has no command-buffer ids or command indices, so they are rebuilt
here. Per queue, dispatch zones in time order are split into executions of the
map's static command buffers: each barrier region must hold the region's
dispatch keys as a multiset, because dispatches inside one region may start
in any order. Inside a region a zone takes a command of its key whose section
grouping (the heaviest share, as the compiler grouped it) agrees with the
section zones around the zone; zones with no section information (lanes,
modules compiled without debug groups) take the remaining commands of their
key in recording order. The result is a `Profile` with synthetic ids that
``sectionmark.profiling.attribute`` joins like a recorded one.

Each execution's span is the GPU-timed command-buffer zone that holds its
dispatches, where the driver records one (CUDA, HIP): then the submissions are
the queue's own executions, timed by the device, and the time inside one with
no dispatch running (its copies, fills and barriers: the transfers between
devices of a module compiled for several) is known, as on a HAL profile
(`Provenance.timed_submissions`). Where executions have no such zone
(a replay, a live capture), or the matched executions are not one-to-one with
the zones, or a zone without dispatches lies among the executions of its own
GPU context (its time would be missed; another context's, a stream running at
the same time, is no gap in this one's), each execution spans its dispatch
zones and no queue time is claimed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Mapping, Optional

import numpy as np

from sectionmark.errors import SectionmarkError
from sectionmark.section_path import SectionPath, format_path
from sectionmark.readers.event_model import DISPATCH_DTYPE, SUBMISSION_DTYPE, Profile, Provenance, RecordedCommand
from sectionmark.readers.queue_tracks import track_queue
from sectionmark.readers.tracy_capture import Capture, Track
from sectionmark.section_map import COMMAND_OPS, Command, CommandBuffer, SectionMap

__all__ = [
    "capture_profile", "dispatch_keys", "executions_profile", "static_buffers", "DispatchZone", "Execution", "StaticBuffer",
]

# Zones IREE's GPU drivers add around and beside dispatches (command buffers, fills, copies).
_DRIVER_ZONE_PREFIX = "iree_hal_"


@dataclass(frozen=True)
class DispatchZone:
    """One dispatch zone. ``sections``: enclosing section zones, None when its track has none; ``execution``: the
    command-buffer zone that holds it (its track's index, start, end), None when none does."""

    key: int
    start_ns: int
    end_ns: int
    sections: Optional[SectionPath]
    track: str
    execution: Optional[tuple[int, int, int]] = None


@dataclass(frozen=True)
class StaticBuffer:
    """A static command buffer as the matcher needs it."""

    buffer: CommandBuffer
    regions: tuple[tuple[int, ...], ...]  # per barrier region: positions of its dispatches, in recording order
    region_keys: tuple[tuple[int, ...], ...]  # per region: its dispatch key ids, sorted
    keys: dict[int, int]  # position -> key id
    groupings: dict[int, frozenset]  # position -> section paths the compiler may have grouped it under
    dispatches: int


@dataclass
class Execution:
    queue: int
    buffer: StaticBuffer
    placed: list[tuple[int, DispatchZone]]  # (command position, zone)


def capture_profile(capture: Capture, section_map: SectionMap, *, function: Optional[str] = None) -> Profile:
    """The capture's dispatch zones as a `Profile` for ``attribute``.

    ``function``: prefer static command buffers of this function when several
    could have produced the same zones. Raises SectionmarkError (one line) when
    the capture has no GPU dispatch zones, has GPU zones the map does not
    know, or its zones cannot be the map's command buffers.
    """
    keys, key_ids = dispatch_keys(section_map)
    section_names = {name for path in _section_paths(section_map) for name in path}
    buffers = static_buffers(section_map, key_ids, function)
    queues, command_buffer_zones = _queues(capture, key_ids, section_names)
    executions = [execution for number, zones in queues.items() for execution in _match(number, zones, buffers, keys)]
    return executions_profile(executions, keys, command_buffer_zones)


def executions_profile(executions: list[Execution], keys: list[str],
                       command_buffer_zones: Optional[Mapping[int, Iterable[tuple[int, int]]]] = None) -> Profile:
    """Matched executions as a `Profile` with synthetic ids: one submission per execution, in time order, spanning
    its command-buffer zone where `_zone_spans` finds them all (``command_buffer_zones``: by queue, the spans of
    every such zone of its GPU context), else its dispatch zones."""
    executions = sorted(executions, key=lambda execution: min(zone.start_ns for _position, zone in execution.placed))
    zone_spans = _zone_spans(executions, command_buffer_zones or {})
    rows, submissions, recorded = [], [], {}
    for number, execution in enumerate(executions):
        for position, zone in execution.placed:
            rows.append((number, number, position, zone.key, 0, execution.queue, zone.start_ns, zone.end_ns, 0, 0))
        if zone_spans is not None:
            submissions.append((number, number, *zone_spans[number]))
        else:
            submissions.append((number, number, min(zone.start_ns for _position, zone in execution.placed),
                                max(zone.end_ns for _position, zone in execution.placed)))
        recorded[number] = _recorded_commands(execution.buffer.buffer)
    dispatches = np.array(rows, dtype=DISPATCH_DTYPE)
    dispatches = dispatches[np.lexsort((dispatches["start_ns"], dispatches["submission"]))]
    timed = zone_spans is not None
    return Profile(
        dispatches=dispatches,
        submissions=np.array(submissions, dtype=SUBMISSION_DTYPE),
        keys=keys,
        command_buffers=recorded,
        provenance=Provenance("tracy", timed_submissions=timed, device_timed=timed),
    )


def _zone_spans(executions: list[Execution],
                command_buffer_zones: Mapping[int, Iterable[tuple[int, int]]]) -> Optional[list[tuple[int, int]]]:
    """Each execution's command-buffer zone (start, end), in the executions' order; None unless every execution's
    dispatches lie in one zone of their own (the matcher split the zones as the driver ran them), and no other
    command-buffer zone of its queue's GPU context (``command_buffer_zones``, by queue: one without dispatches, a
    buffer of copies or fills only) lies between that queue's first execution's start and its last one's end,
    whose time would be missing from the queue's time. Each queue is its own GPU context (a stream of the
    device): its zones are compared with its own executions only, as another context's run at the same time. A
    context whose zones hold no dispatch at all (no execution of its own) must have none among the executions'
    time, whose time would be missing from the device's."""
    spans: list[tuple[int, int]] = []
    by_queue: dict[int, set[tuple[int, int]]] = {}
    seen: set[tuple[int, tuple[int, int, int]]] = set()
    for execution in executions:
        zones = {zone.execution for _position, zone in execution.placed}
        zone = zones.pop() if len(zones) == 1 else None
        if zone is None or (execution.queue, zone) in seen:
            return None
        seen.add((execution.queue, zone))
        spans.append(zone[1:])
        by_queue.setdefault(execution.queue, set()).add(zone[1:])
    if not spans:
        return None
    every = (min(start for start, _end in spans), max(end for _start, end in spans))
    for queue, zones in command_buffer_zones.items():
        own = by_queue.get(queue, set())
        first, last = (min(start for start, _end in own), max(end for _start, end in own)) if own else every
        if any(start < last and end > first for start, end in set(zones) - own):
            return None
    return spans


# ----------------------------------------------------------------------------- the map


def dispatch_keys(section_map: SectionMap) -> tuple[list[str], dict[str, int]]:
    """The map's dispatch keys, sorted, and each key's index: the key ids of a `Profile`."""
    keys = sorted({c.key for b in section_map.command_buffers for c in b.commands if c.op == "dispatch" and c.key})
    return keys, {key: index for index, key in enumerate(keys)}


def _section_paths(section_map: SectionMap) -> Iterable[SectionPath]:
    yield from section_map.sections
    for buffer in section_map.command_buffers:
        for command in buffer.commands:
            for share in command.shares:
                yield tuple(share.path)


def _groupings(command: Command) -> frozenset:
    """Where the compiler put a dispatch's debug group: its heaviest share (ties: any of them)."""
    if not command.shares:
        return frozenset({()})
    heaviest = max(share.weight for share in command.shares)
    return frozenset(tuple(s.path) for s in command.shares if s.weight >= heaviest * (1 - 1e-9))


def static_buffers(section_map: SectionMap, key_ids: dict[str, int], function: Optional[str]) -> list[StaticBuffer]:
    """Buffers that record dispatches, those of ``function`` first (the matcher tries them in order)."""
    buffers = []
    for buffer in section_map.command_buffers:
        regions: list[list[int]] = [[]]
        keys, groupings = {}, {}
        for position, command in enumerate(buffer.commands):
            if command.op == "barrier":
                regions.append([])
            elif command.op == "dispatch":
                regions[-1].append(position)
                # A dispatch without an export name cannot match any zone: -1 keeps it unmatched.
                keys[position] = key_ids.get(command.key, -1)
                groupings[position] = _groupings(command)
        regions = [region for region in regions if region]
        if regions:
            buffers.append(
                StaticBuffer(
                    buffer=buffer,
                    regions=tuple(tuple(region) for region in regions),
                    region_keys=tuple(tuple(sorted(keys[p] for p in region)) for region in regions),
                    keys=keys,
                    groupings=groupings,
                    dispatches=len(keys),
                )
            )
    buffers.sort(key=lambda static: function is not None and static.buffer.function != function)
    return buffers


def _recorded_commands(buffer: CommandBuffer) -> list[RecordedCommand]:
    """The commands as a recorded profile lists them: index, op, key (dispatches only)."""
    return [
        (position, command.op, command.key if command.op == "dispatch" else None)
        for position, command in enumerate(buffer.commands)
        if command.op in COMMAND_OPS
    ]


# ----------------------------------------------------------------------------- the capture


def _queues(capture: Capture, key_ids: dict[str, int],
            section_names: set[str]) -> tuple[dict[int, list[DispatchZone]], dict[int, list[tuple[int, int]]]]:
    """Dispatch zones per queue, in time order: a replay's tracks of one queue together, other GPU contexts alone;
    and per queue the (start, end) of its contexts' command-buffer execution zones (`_command_buffer_zones`).

    A replay's queues keep their numbers; other GPU contexts (one per device
    stream on a GPU run) take the free numbers from 0, in capture order.
    Replay tracks share one clock to within a microsecond (`GpuTimeline`
    anchors each), so a queue's lanes merge into its section track by time.
    """
    gpu_tracks = [track for track in capture.gpu_contexts if track.zones]
    if not gpu_tracks:
        raise SectionmarkError(
            "the Tracy capture has no GPU zones and no IREE worker dispatch zones: a report needs a capture of a "
            "GPU run (sectionmark profile --device cuda|hip), a replay written by 'sectionmark tracy', or a live "
            "capture of a program on local-task with the tracing runtime (IREE_PY_RUNTIME=tracy)"
        )
    unknown: dict[str, int] = {}
    tracks = [(track, _dispatch_zones(track, key_ids, section_names, unknown)) for track in gpu_tracks]
    if not any(zones for _track, zones in tracks):
        names = sorted({zone.name for track in gpu_tracks for zone in track.zones})
        raise SectionmarkError(
            f"none of the capture's GPU zones is a dispatch of the section map (GPU zones: {_some(names)}); "
            "is the map from the module that ran?"
        )
    if unknown:
        name, count = max(unknown.items(), key=lambda item: item[1])
        raise SectionmarkError(
            f"the capture has GPU zones that are neither dispatches nor sections of the section map: "
            f"'{name}' ({count} zones; {len(unknown)} such names in all); is the map from the module that ran?"
        )
    replayed = [track_queue(track.name) for track, _zones in tracks]  # a replay's tracks name their queue
    taken = {queue for queue in replayed if queue is not None}
    free = (number for number in range(len(tracks) + len(taken)) if number not in taken)
    queues: dict[int, list[DispatchZone]] = {}
    buffer_zones: dict[int, list[tuple[int, int]]] = {}
    for (track, zones), queue in zip(tracks, replayed):
        number = queue if queue is not None else next(free)
        queues.setdefault(number, []).extend(zones)
        buffer_zones.setdefault(number, []).extend(_command_buffer_zones(track))
    for zones in queues.values():
        zones.sort(key=lambda zone: (zone.start_ns, zone.end_ns))
    return dict(sorted(queues.items())), buffer_zones


def _dispatch_zones(
    track: Track, key_ids: dict[str, int], section_names: set[str], unknown: dict[str, int]
) -> list[DispatchZone]:
    """The track's dispatch zones (leaves named by a map key), each with its enclosing section zones.

    A zone with children and a section's name is a section zone; other zones
    with children (a command buffer execution) are transparent. Leaves that are
    neither dispatches nor IREE driver zones nor sections are counted in ``unknown``.
    """
    zones = track.zones
    parents = {zone.parent for zone in zones}
    paths: list[SectionPath] = []
    roots: list[int] = []  # each zone's outermost enclosing zone (itself at depth 0)
    found = []
    has_sections = False
    for index, zone in enumerate(zones):
        enclosing = paths[zone.parent] if zone.parent >= 0 else ()
        roots.append(roots[zone.parent] if zone.parent >= 0 else index)
        if index in parents:
            is_section = zone.name in section_names
            has_sections = has_sections or is_section
            paths.append(enclosing + (zone.name,) if is_section else enclosing)
            continue
        paths.append(enclosing)
        key = key_ids.get(zone.name)
        if key is not None:
            root = zones[roots[index]]
            execution = ((roots[index], root.start_ns, root.end_ns)
                         if roots[index] != index and _is_command_buffer(root.name) else None)
            found.append(DispatchZone(key, zone.start_ns, zone.end_ns, enclosing, track.name, execution))
        elif not zone.name.startswith(_DRIVER_ZONE_PREFIX) and zone.name not in section_names:
            unknown[zone.name] = unknown.get(zone.name, 0) + 1
    if not has_sections:
        found = [replace(z, sections=None) for z in found]
    return found


def _is_command_buffer(name: str) -> bool:
    """A driver's command-buffer execution zone (``iree_hal_cuda_stream_command_buffer``, HIP's alike)."""
    return name.startswith(_DRIVER_ZONE_PREFIX) and name.endswith("command_buffer")


def _command_buffer_zones(track: Track) -> list[tuple[int, int]]:
    """The (start, end) of every command-buffer execution zone of a GPU context."""
    return [(zone.start_ns, zone.end_ns) for zone in track.zones if zone.parent < 0 and _is_command_buffer(zone.name)]


def _some(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(f"'{name}'" for name in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


# ----------------------------------------------------------------------------- matching


def _match(queue: int, zones: list[DispatchZone], buffers: list[StaticBuffer], keys: list[str]) -> list[Execution]:
    """Split one queue's time-ordered zones into consecutive executions of static buffers.

    Backtracking: a buffer whose regions fit the next zones is taken, and
    given up again when the zones after it cannot be split; positions from
    which nothing fits are remembered, so each is tried once per buffer.
    """
    key_sequence = [zone.key for zone in zones]
    dead: set[int] = set()  # positions from which no split reaches the end
    plan: list[tuple[int, int, list[int]]] = []  # (zone position, buffer number, command positions)
    position, next_buffer = 0, 0
    furthest = 0
    disagreements: dict[int, str] = {}  # position -> why the section zones ruled a buffer out there
    while position < len(zones):
        choice = None
        if position not in dead:
            for number in range(next_buffer, len(buffers)):
                static = buffers[number]
                end = position + static.dispatches
                if end > len(zones) or end in dead or not _same_keys(static, key_sequence, position):
                    continue
                placement = _place(static, zones, position)
                if isinstance(placement, str):
                    disagreements.setdefault(position, placement)
                    continue
                choice = (number, placement)
                break
        if choice is None:
            dead.add(position)
            furthest = max(furthest, position)
            if not plan:
                raise SectionmarkError(_mismatch_message(zones, furthest, disagreements.get(furthest), keys))
            position, last, _placement = plan.pop()
            next_buffer = last + 1
            continue
        number, placement = choice
        plan.append((position, number, placement))
        position += buffers[number].dispatches
        next_buffer = 0
    return [
        Execution(queue, buffers[number], list(zip(placement, zones[start : start + buffers[number].dispatches])))
        for start, number, placement in plan
    ]


def _same_keys(static: StaticBuffer, key_sequence: list[int], position: int) -> bool:
    for region_keys in static.region_keys:
        end = position + len(region_keys)
        if tuple(sorted(key_sequence[position:end])) != region_keys:
            return False
        position = end
    return True


def _place(static: StaticBuffer, zones: list[DispatchZone], position: int) -> list[int] | str:
    """The command position of each zone of one execution, or why the section zones disagree.

    Per region and key: zones inside section zones take a command grouped
    there (the one allowing fewest groupings, then the first recorded), the
    others take the remaining commands in recording order.
    """
    placement = [0] * static.dispatches
    offset = 0
    for region in static.regions:
        free_by_key: dict[int, list[int]] = {}
        for command in region:
            free_by_key.setdefault(static.keys[command], []).append(command)
        members = range(offset, offset + len(region))
        for index in [i for i in members if zones[position + i].sections is not None] + [
            i for i in members if zones[position + i].sections is None
        ]:
            zone = zones[position + index]
            free = free_by_key[zone.key]
            if zone.sections is None:
                placement[index] = free.pop(0)
                continue
            fitting = [c for c in free if zone.sections in static.groupings[c]]
            if not fitting:
                return _disagreement(zone, static, region)
            command = min(fitting, key=lambda c: len(static.groupings[c]))
            free.remove(command)
            placement[index] = command
        offset += len(region)
    return placement


def _disagreement(zone: DispatchZone, static: StaticBuffer, region: tuple[int, ...]) -> str:
    expected = sorted({path for c in region if static.keys[c] == zone.key for path in static.groupings[c]})
    return (
        f"the capture and the section map disagree: a dispatch zone on GPU track '{zone.track}' at "
        f"{zone.start_ns / 1e6:.3f} ms lies in section zones '{_describe(zone.sections)}', but the map groups "
        f"that dispatch under {' or '.join(repr(_describe(path)) for path in expected)}; "
        "is the map from the module that ran?"
    )


def _describe(path: Optional[SectionPath]) -> str:
    return format_path(path) if path else "(none)"


def _mismatch_message(zones: list[DispatchZone], position: int, disagreement: Optional[str], keys: list[str]) -> str:
    if disagreement is not None:
        return disagreement
    zone = zones[position]
    following = [keys[z.key] for z in zones[position : position + 3]]
    return (
        f"the section map does not match this capture: the dispatch zones from {zone.start_ns / 1e6:.3f} ms on "
        f"GPU track '{zone.track}' ({_some(following, 3)}, ...) are no execution of a command buffer of the map; "
        "is the map from the module that ran?"
    )
