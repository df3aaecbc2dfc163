"""Per-event sums and their split into section columns: the pure functions a `ProfileSession` is built with.

Each works on numpy arrays (one row per event, composition or section column),
because profiles can hold millions of events, and is unit-tested on hand-built
data in tests/profiling/test_session.py. How the times are defined (busy, wall, CPU,
start and end) is in `sectionmark.profiling.session`.

`EventFold` makes the sums a window of events at a time (`sectionmark.profiling.read`), `EventTotals`: each
window's events are added to the running sums (`add_event_sums`: each sum grows in event order, as one pass over
all events would add them). Wall time is a sweep over the events' intervals (`wall_parts`), carried across
windows: the events of the union blocks that end at or before the window's frontier (no later event starts before
it) are final and swept, the others wait for the next window, so a block is always swept whole. Only sums stay.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Iterable, Optional

import numpy as np

from sectionmark.errors import SectionmarkError
from sectionmark.profiling.attribute import Attribution, Composition
from sectionmark.profiling.block_parts import block_parts
from sectionmark.profiling.native import native_passes
from sectionmark.profiling.queue_time import CallWindows, union_by_window
from sectionmark.profiling.stats import CallStats, Offsets, SectionStats, SiteStats, Traffic
from sectionmark.section_map import Binding
from sectionmark.section_path import SectionPath

MAX_SAMPLES = 1000  # per-call samples kept per section (profile JSON ``samples``)


@dataclass(frozen=True)
class Weights:
    """How each composition's time is split into section columns.

    Rows are compositions, columns the section paths in report order plus a
    last column for "(unmarked)".
    """

    exclusive: np.ndarray  # [c, s]: fraction of composition c's time that is exclusive time of s
    inclusive: np.ndarray  # [c, s]: ... inclusive time of s (its own share and its descendants')
    member: np.ndarray  # [c, s]: s or a section nested in it has a share in c (even of weight 0)


@dataclass(frozen=True)
class CompositionSums:
    """Event data summed per composition (a composition is one distinct split of a dispatch)."""

    busy_by_call: np.ndarray  # [call, c]: summed durations
    wall: np.ndarray  # [c]: summed wall parts
    count: np.ndarray  # [c]: events
    tiles: Optional["TileSums"] = None  # CPU tile data; None when the profile records no tiles

    @property
    def busy(self) -> np.ndarray:
        return self.busy_by_call.sum(axis=0)



def section_paths(declared: Iterable[SectionPath], compositions: Iterable[Composition]) -> list[SectionPath]:
    """Report order of the section columns: declared paths, then any that only appear in
    compositions, each with its parents, depth first (a parent right before its children)."""
    ordered: dict[SectionPath, None] = {}
    for path in [*declared, *(p for parts in compositions for p, _w in parts if p)]:
        for depth in range(1, len(path) + 1):
            ordered.setdefault(tuple(path[:depth]), None)
    return _depth_first(list(ordered))


def weight_matrices(compositions: list[Composition], paths: list[SectionPath]) -> Weights:
    """Per composition, the fraction of its time that goes to each section column.

    A share of ``(P, C)`` with weight w adds w to the exclusive column of
    ``(P, C)`` and to the inclusive columns of ``(P,)`` and ``(P, C)``; a share
    of ``()`` goes to the last, unmarked column. Every row of ``exclusive``
    sums to 1, so any time split with it is neither lost nor doubled.
    """
    column = {path: index for index, path in enumerate(paths)}
    unmarked = len(paths)
    exclusive = np.zeros((len(compositions), len(paths) + 1))
    inclusive = np.zeros_like(exclusive)
    member = np.zeros(exclusive.shape, bool)
    for c, parts in enumerate(compositions):
        for path, weight in parts:
            columns = [column[path[:depth]] for depth in range(1, len(path) + 1)] if path else [unmarked]
            exclusive[c, columns[-1]] += weight
            inclusive[c, columns] += weight
            member[c, columns] = True
    return Weights(exclusive, inclusive, member)


def wall_parts(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Each interval's part of the length of the union of all intervals ``[start, end)``.

    The boundaries cut time into elementary segments; a segment in which k
    intervals are active gives 1/k of its length to each of them, so the parts
    add up to the union's length and no part exceeds its interval's length.
    A prefix sum of length/k over the segments gives each interval's part as
    ``prefix[end] - prefix[start]``: in C when built (one merge of the starts and the ends, each sorted), else
    vectorised (sort, cumulative sums) for millions of events; the same numbers.
    """
    starts, ends = np.ascontiguousarray(starts, np.int64), np.ascontiguousarray(ends, np.int64)
    if not len(starts):
        return np.zeros(0)
    durations = (ends - starts).astype(np.float64)
    if (starts[1:] >= ends[:-1]).all() and (ends >= starts).all() and ends[-1] - starts[0] < 1 << 53:
        # In order, none overlapping: every part is its whole interval; the sums below are of whole
        # numbers under 2**53, so exact, and would give the same.
        return durations
    passes = native_passes()
    if passes is not None:  # stable sorts: near-linear on the nearly sorted starts and ends of a profile
        parts = np.empty(len(starts))
        passes.wall_parts(starts, ends, np.argsort(starts, kind="stable"), np.argsort(ends, kind="stable"), parts)
        return parts
    values = np.concatenate([starts, ends])
    order = np.argsort(values, kind="stable")  # near-linear: starts and ends are each (nearly) sorted already
    ordered = values[order]
    new = np.concatenate([[True], ordered[1:] != ordered[:-1]])
    boundaries, index = ordered[new], np.empty(len(values), np.int64)
    index[order] = np.cumsum(new) - 1  # each value's position among the boundaries
    first, last = index[: len(starts)], index[len(starts):]
    change = np.bincount(first, minlength=len(boundaries)) - np.bincount(last, minlength=len(boundaries))
    active = np.cumsum(change)[:-1]  # intervals covering segment [boundaries[i], boundaries[i + 1])
    lengths = np.diff(boundaries).astype(np.float64)
    per_interval = np.divide(lengths, active, out=np.zeros_like(lengths), where=active > 0)
    prefix = np.concatenate([[0.0], np.cumsum(per_interval)])
    # Clipped to [0, duration] against rounding in the prefix sums: keeps wall <= busy exact per event.
    return np.clip(prefix[last] - prefix[first], 0.0, durations)


@dataclass
class EventSums:
    """Every event's duration summed per (call, composition), per composition and per slot, in event order
    (as ``np.bincount`` sums), and counted; one pass over the events."""

    busy_by_call: np.ndarray  # [calls, compositions]: summed durations (float64)
    busy: np.ndarray  # [compositions]: summed durations
    count: np.ndarray  # [compositions]: events
    slot_busy: np.ndarray  # [slots]: summed durations
    slot_count: np.ndarray  # [slots]: events
    total_ns: int  # all durations
    disjoint: bool  # in start order and none overlapping: every event's wall part is its duration (wall_parts)
    tiles: Optional["TileSums"]  # CPU tile data per composition; None when no event has tiles (`add_event_sums`)
    # [calls, compositions]: the first start and the last end of the events of each (call, composition); int64's
    # maximum and minimum where none ran
    first_start: np.ndarray
    last_end: np.ndarray


def event_sums(attribution: Attribution) -> EventSums:
    """The sums of ``attribution``'s events (in C when the extension is built, else numpy: the same numbers).

    The C pass makes no temporary the size of the events: what the session
    keeps of them is one value per composition, slot, or (call, composition).
    """
    sums = empty_event_sums(max(attribution.calls, 1), len(attribution.compositions), len(attribution.slots))
    if not add_event_sums(attribution, sums):
        sums.tiles = None
    return sums


def empty_event_sums(calls: int, compositions: int, slots: int) -> EventSums:
    """Sums of no event, to add events to (`add_event_sums`): tile sums present, first starts and last ends at
    int64's maximum and minimum."""
    return EventSums(np.zeros((calls, compositions)), np.zeros(compositions), np.zeros(compositions, np.int64),
                     np.zeros(slots), np.zeros(slots, np.int64), 0, True,
                     TileSums(np.zeros(compositions), np.zeros(compositions), 0, 0),
                     np.full((calls, compositions), np.iinfo(np.int64).max, np.int64),
                     np.full((calls, compositions), np.iinfo(np.int64).min, np.int64))


def add_event_sums(attribution: Attribution, sums: EventSums) -> bool:
    """Add ``attribution``'s events to ``sums`` (`empty_event_sums`, tiles present; each sum grows in event
    order, as one pass over all the events would add them: exactly the same numbers whether the events come at
    once or a window at a time). ``sums.disjoint`` is anded with these events' own (the caller judges the
    order across windows); returns whether any event has tiles."""
    events = attribution.events
    slot_composition = slot_compositions(attribution)
    calls, compositions = sums.busy_by_call.shape
    tiles = sums.tiles
    passes = native_passes()
    if passes is not None:
        total_ns, disjoint, tile_ns, tile_count, any_tiles = passes.event_sums(
            np.ascontiguousarray(events), np.ascontiguousarray(attribution.event_slots, np.int32),
            np.ascontiguousarray(attribution.event_calls, np.int32), slot_composition, calls, sums.busy_by_call,
            sums.busy, sums.count, sums.slot_busy, sums.slot_count, tiles.cpu, tiles.tiles,
            sums.first_start, sums.last_end)
        sums.total_ns += total_ns
        sums.disjoint &= disjoint
        sums.tiles = replace(tiles, total_ns=(tiles.total_ns + tile_ns) % (1 << 64),
                             total_tiles=(tiles.total_tiles + tile_count) % (1 << 64))
        return any_tiles
    starts, ends, slot = events["start_ns"].astype(np.int64), events["end_ns"].astype(np.int64), attribution.event_slots
    duration = (ends - starts).astype(np.float64)
    composition = slot_composition[slot]
    call = np.minimum(attribution.event_calls, calls - 1).astype(np.int64)
    # np.add.at adds in event order, onto what is there: the C pass's order.
    np.add.at(sums.busy_by_call, (call, composition), duration)
    np.add.at(sums.busy, composition, duration)
    np.add.at(sums.count, composition, 1)
    np.add.at(sums.slot_busy, slot, duration)
    np.add.at(sums.slot_count, slot, 1)
    sums.total_ns += int((ends - starts).sum())
    sums.disjoint &= bool(len(starts) == 0 or ((starts[1:] >= ends[:-1]).all() and (ends >= starts).all()
                                               and ends[-1] - starts[0] < 1 << 53))
    flat = call * compositions + composition
    np.minimum.at(sums.first_start.reshape(-1), flat, starts)
    np.maximum.at(sums.last_end.reshape(-1), flat, ends)
    counts = events["tile_count"]
    np.add.at(tiles.cpu, composition, events["tile_ns"].astype(np.float64))
    np.add.at(tiles.tiles, composition, counts.astype(np.float64))
    sums.tiles = replace(tiles, total_ns=(tiles.total_ns + int(events["tile_ns"].sum(dtype=np.uint64))) % (1 << 64),
                         total_tiles=(tiles.total_tiles + int(counts.sum(dtype=np.uint64))) % (1 << 64))
    return bool(len(events) and counts.any())


@dataclass(frozen=True)
class TileSums:
    """CPU tile data of the measured events per composition (local-task records it per dispatch)."""

    cpu: np.ndarray  # [c]: summed tile time across workers (ns)
    tiles: np.ndarray  # [c]: summed tile counts
    total_ns: int  # all events' tile time, exactly
    total_tiles: int


def shared_time(
    compositions: list[Composition], busy: np.ndarray, paths: list[SectionPath]
) -> tuple[np.ndarray, list[dict[SectionPath, float]]]:
    """Per column: exclusive busy time from compositions of several sections, and who got the rest.

    ``busy`` is the summed busy time per composition. Returns the shared time
    of each column (last: unmarked) and, per column, the other paths of those
    compositions with the time each of them received.
    """
    column = {path: index for index, path in enumerate(paths)}
    shared = np.zeros(len(paths) + 1)
    shared_with: list[dict[SectionPath, float]] = [{} for _ in range(len(paths) + 1)]
    for c, parts in enumerate(compositions):
        if len(parts) < 2:
            continue
        for path, weight in parts:
            index = column[path] if path else len(paths)
            shared[index] += busy[c] * weight
            for other, other_weight in parts:
                if other != path:
                    shared_with[index][other] = shared_with[index].get(other, 0.0) + busy[c] * other_weight
    return shared, shared_with


def section_rows(
    paths: list[SectionPath], compositions: list[Composition], weights: Weights, sums: CompositionSums,
    workers: Optional[int] = None, per_call_inclusive: Optional[np.ndarray] = None,
) -> list[SectionStats]:
    """One row per section column, then the "(unmarked)" row: busy, wall and CPU time split by the same weights.
    ``per_call_inclusive``: ``sums.busy_by_call @ weights.inclusive`` when the caller keeps it too (made once: a
    long profile's calls make it one of the session's longest products).

    Parallelism divides CPU time by busy time, not by the apportioned wall
    time: a dispatch's tiles run inside its own interval on at most
    ``workers`` threads, so CPU / busy never exceeds the workers, while a
    dispatch overlapping another gets only part of its interval as wall time.
    """
    busy = sums.busy
    if per_call_inclusive is None:
        per_call_inclusive = sums.busy_by_call @ weights.inclusive  # calls x columns
    inclusive, exclusive = busy @ weights.inclusive, busy @ weights.exclusive
    inclusive_wall, exclusive_wall = sums.wall @ weights.inclusive, sums.wall @ weights.exclusive
    dispatches = sums.count @ weights.member
    shared, shared_with = shared_time(compositions, busy, paths)
    total = float(busy.sum())
    per_call_stats = CallStats.of_columns(per_call_inclusive)
    cpu = sums.tiles.cpu @ weights.inclusive if sums.tiles else None
    tiles = sums.tiles.tiles @ weights.member if sums.tiles else None
    rows = [
        SectionStats(
            path=path,
            busy_ns=float(inclusive[s]),
            exclusive_ns=float(exclusive[s]),
            shared_ns=float(shared[s]),
            wall_ns=float(inclusive_wall[s]),
            exclusive_wall_ns=float(exclusive_wall[s]),
            calls=int((per_call_inclusive[:, s] > 0).sum()),
            dispatches=int(dispatches[s]),
            share=float(inclusive[s] / total) if total else 0.0,
            per_call=per_call_stats[s],
            shared_with=shared_with[s],
            samples=call_samples(per_call_inclusive[:, s]),
        )
        for s, path in enumerate([*paths, ()])
    ]
    if cpu is not None and tiles is not None:
        for s, row in enumerate(rows):
            row.cpu_ns, row.tiles = float(cpu[s]), int(round(tiles[s]))
            row.parallelism = row.cpu_ns / row.busy_ns if row.busy_ns > 0 else None
            row.utilization = row.parallelism / workers if row.parallelism is not None and workers else None
    return rows


def call_samples(per_call: np.ndarray, limit: int = MAX_SAMPLES) -> list[float]:
    """The per-call values a comparison resamples: all of them, or ``limit`` evenly spaced calls (first and
    last included) when there are more. Evenly spaced rather than random: the same profile always keeps the
    same calls, and a drift over the run stays represented."""
    if len(per_call) > limit:
        per_call = per_call[np.linspace(0, len(per_call) - 1, limit).round().astype(np.int64)]
    return per_call.tolist()


def section_traffic(sites: list[SiteStats], paths: list[SectionPath]) -> tuple[list[Optional[Traffic]],
                                                                              list[Optional[int]]]:
    """Per section column (last: unmarked), its `Traffic` and its working set per call.

    A site counts when every binding's bytes are known (static slices). Its
    bytes, FLOPs and time go to the columns by the site's inclusive weights
    (`weight_matrices`, as its time in the rows); its tensors to the working set
    of every column with a share in it (even of weight 0), each distinct tensor
    once, whole (``tensor_shape``), so a section touching a slice of a weight
    counts the weight. A column without a counted site gets None for both; a
    tensor of dynamic shape or unknown element size makes that working set None.
    """
    sized = [site for site in sites if site.bindings and all(
        binding.read_bytes is not None and binding.written_bytes is not None for binding in site.bindings)]
    columns = len(paths) + 1
    if not sized:
        return [None] * columns, [None] * columns
    weights = weight_matrices([site.sections for site in sized], paths)
    executions = np.array([site.dispatches for site in sized], np.float64)
    per_site = np.array([
        [site.busy_ns for site in sized],
        [sum(b.read_bytes for b in site.bindings) for site in sized] * executions,
        [sum(b.written_bytes for b in site.bindings) for site in sized] * executions,
        [site.flops or 0.0 for site in sized] * executions,
    ])
    sums = per_site @ weights.inclusive  # [time, read, written, flops] x columns
    traffic: list[Optional[Traffic]] = []
    working_sets: list[Optional[int]] = []
    for column in range(columns):
        members = np.flatnonzero(weights.member[:, column])
        if not len(members):
            traffic.append(None)
            working_sets.append(None)
            continue
        traffic.append(Traffic(*(float(value) for value in sums[:, column])))
        sizes = {binding.tensor: tensor_bytes(binding) for index in members for binding in sized[index].bindings}
        working_sets.append(None if None in sizes.values() else sum(sizes.values()))
    return traffic, working_sets


def tensor_bytes(binding: Binding) -> Optional[int]:
    """The whole bound tensor's bytes (``tensor_shape`` x its element's), None when a dimension is dynamic or the
    element type has no bit width (``f32``: 4, ``bf16``: 2, ``i1``: 1 byte, as IREE stores it)."""
    bits = re.search(r"(\d+)$", binding.dtype)
    if bits is None or any(size < 0 for size in binding.tensor_shape):
        return None
    return int(np.prod(binding.tensor_shape, dtype=np.int64)) * -(-int(bits.group(1)) // 8)


def first_dispatch_starts(starts: np.ndarray, call: np.ndarray, calls: int,
                          queue_starts: Optional[np.ndarray] = None) -> np.ndarray:
    """Each call's start: its first dispatch's start, or its first queue operation's when that is earlier
    (``queue_starts``: None when the profile has none). A section's offsets count from here, so a section
    that runs first starts at 0 without queue operations and after the call's allocations and copies with
    them. A call without dispatches gets int64's maximum (no section ran in it)."""
    first = np.full(calls, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first, call, starts.astype(np.int64))
    return call_starts(first, queue_starts)


def call_starts(first_dispatch: np.ndarray, queue_starts: Optional[np.ndarray]) -> np.ndarray:
    """Each call's start (`first_dispatch_starts`) from its first dispatch's start (int64)."""
    return first_dispatch if queue_starts is None else np.minimum(first_dispatch, queue_starts.astype(np.int64))


def section_spans(first: np.ndarray, last: np.ndarray, call_starts: np.ndarray,
                  member: np.ndarray) -> tuple[list[Optional[Offsets]], list[Optional[Offsets]]]:
    """Per section column (last: unmarked), the offsets of its first dispatch start and last dispatch end
    from ``call_starts[call]``, over the calls it ran in; None for a column that never ran.

    ``first`` and ``last``: [calls, compositions], each (call, composition)'s first start and last end
    (`EventSums`). ``member`` (`Weights.member`, [compositions, columns]) says which columns run
    during a composition's dispatches: every section with a share in it (even of weight 0) and their parents,
    so a fused dispatch counts for each of its sections and a parent's span covers its children's.
    """
    high = np.iinfo(np.int64).max
    # [compositions, calls]: each composition's calls in a row, so that a column's are reduced row by row
    first_by_composition, last_by_composition = np.ascontiguousarray(first.T), np.ascontiguousarray(last.T)
    starts: list[Optional[Offsets]] = []
    ends: list[Optional[Offsets]] = []
    for column in range(member.shape[1]):
        runs = np.flatnonzero(member[:, column])
        section_first = np.minimum.reduce(first_by_composition[runs], axis=0, initial=high)
        ran = section_first != high  # a column that never ran (a section of another device's) has no offsets
        if not ran.any():
            starts.append(None)
            ends.append(None)
            continue
        section_last = np.maximum.reduce(last_by_composition[runs], axis=0)
        base = call_starts[ran]
        starts.append(Offsets.of(section_first[ran] - base))
        ends.append(Offsets.of(section_last[ran] - base))
    return starts, ends


def slot_compositions(attribution: Attribution) -> np.ndarray:
    """Each slot's composition index."""
    return np.array([slot.composition for slot in attribution.slots], np.int64)



def _depth_first(paths: list[SectionPath]) -> list[SectionPath]:
    """Order paths so each parent comes right before its children (siblings keep their order)."""
    children: dict[SectionPath, list[SectionPath]] = {}
    for path in paths:
        children.setdefault(path[:-1], []).append(path)
    ordered: list[SectionPath] = []

    def visit(parent: SectionPath) -> None:
        for child in children.get(parent, []):
            ordered.append(child)
            visit(child)

    visit(())
    return ordered


@dataclass
class EventTotals:
    """What the session needs of the measured events, summed: per composition, slot and (call, composition)."""

    sums: EventSums
    wall: np.ndarray  # [compositions]: wall time (each event's part of the union, `wall_parts`)
    total_wall: int  # the union of all measured events' intervals
    call_windows: Optional[CallWindows]  # the measured calls' windows (`measured_windows`); None: calls without one
    dispatch_union: Optional[np.ndarray]  # [call windows]: the union of the dispatch intervals inside each (call time)


class EventFold:
    """The running sums of measured events added a window at a time, and the sweep carried across windows."""

    def __init__(self, attribution: Attribution, call_windows: Optional[CallWindows]):
        self._attribution = attribution
        self._slot_composition = slot_compositions(attribution)
        compositions = len(attribution.compositions)
        self.sums = empty_event_sums(max(attribution.calls, 1), compositions, len(attribution.slots))
        self._any_tiles = False
        self._wall = np.zeros(compositions)
        self._total_wall = 0
        self._call_windows = call_windows
        self._call_union = np.zeros(0 if call_windows is None else len(call_windows.starts), np.int64)
        # Events swept but not yet final: (start, end, composition) of the union blocks still open.
        self._carry = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
        self._last_final_end: Optional[int] = None  # the end of the last block made final
        self._first_start: Optional[int] = None  # the first event's start and the last one's end, in event order
        self._previous_end: Optional[int] = None

    def add(self, events: np.ndarray, slots: np.ndarray, calls: np.ndarray, frontier: Optional[int]) -> None:
        """One window's measured events (by submission, then start), their slots and calls; ``frontier``: no
        later event starts before it (None: no event comes later)."""
        if len(events):
            window = Attribution(events=events, event_slots=slots, event_calls=calls,
                                 slots=self._attribution.slots, compositions=self._attribution.compositions,
                                 calls=self._attribution.calls, warmup=0, calls_known=True, keys=[],
                                 buffer_matches={})
            self._any_tiles |= add_event_sums(window, self.sums)
            starts, ends = events["start_ns"], events["end_ns"]  # int64 columns: copied once, into the carry
            if self._last_final_end is not None and starts.min() < self._last_final_end:
                raise SectionmarkError("internal error: a dispatch starts before the frontier of the profile's "
                                       "submissions")
            # In order and apart across windows too (each window's own order is add_event_sums'): wall is busy.
            if self._previous_end is not None and starts[0] < self._previous_end:
                self.sums.disjoint = False
            self._first_start = int(starts[0]) if self._first_start is None else self._first_start
            self._previous_end = int(ends[-1])
            carried = self._carry
            self._carry = (np.concatenate([carried[0], starts]), np.concatenate([carried[1], ends]),
                           np.concatenate([carried[2], self._slot_composition[slots]]))
        self._sweep(frontier)

    def _sweep(self, frontier: Optional[int]) -> None:
        """Sweep the carried events whose union blocks end at or before ``frontier`` (all when None): in C when
        built (`_sectionpass.fold_sweep`, one pass), else numpy; the same numbers."""
        starts, ends, compositions = self._carry
        if not len(starts):
            return
        passes = native_passes()
        windows = self._call_windows
        arguments = (frontier, self._wall, *((None, None, None) if windows is None else (
            np.ascontiguousarray(windows.starts, np.int64), np.ascontiguousarray(windows.ends, np.int64),
            self._call_union)))
        swept = None if passes is None else passes.fold_sweep(starts, ends, compositions, None, *arguments)
        if swept is None and passes is not None and (ends >= starts).all():  # not in start order: sorted by numpy
            swept = passes.fold_sweep(starts, ends, compositions, np.argsort(starts, kind="stable"), *arguments)
        if swept is None:  # no C pass, or an event ending before it starts
            self._sweep_numpy(frontier)
            return
        kept, union, final_end = swept
        self._total_wall += union
        if final_end is not None:
            self._last_final_end = final_end if self._last_final_end is None else max(final_end, self._last_final_end)
        self._carry = (starts[:kept], ends[:kept], compositions[:kept])

    def _sweep_numpy(self, frontier: Optional[int]) -> None:
        """`_sweep` in numpy."""
        starts, ends, compositions = self._carry
        durations = ends - starts
        apart = bool((starts[1:] >= ends[:-1]).all() and (durations >= 0).all())  # in order, none overlapping
        if apart:  # each event is a block of its own
            final = np.ones(len(starts), bool) if frontier is None else ends <= frontier
            if not final.any():
                return
            every = bool(final.all())
            parts_starts, parts_ends = (starts, ends) if every else (starts[final], ends[final])
            parts_compositions = compositions if every else compositions[final]
            # Sorted and apart: each one's part of the union is its whole duration, added one by one in start order.
            parts = (durations if every else durations[final]).astype(np.float64)
            np.add.at(self._wall, parts_compositions, parts)
            self._total_wall += int((parts_ends - parts_starts).sum())
            sorted_starts, sorted_ends = parts_starts, parts_ends
        else:
            # The union blocks in start order: a block ends where the running reach is at or below the next start.
            # Their ends never decrease, so the final events (blocks ending at or before the frontier) are the
            # first ``count`` in start order.
            order = np.argsort(starts, kind="stable")
            sorted_starts, reach = starts[order], np.maximum.accumulate(ends[order])
            closes = np.flatnonzero(np.concatenate([reach[:-1] <= sorted_starts[1:], [True]]))
            block_ends = reach[closes]
            blocks = len(closes) if frontier is None else int(np.searchsorted(block_ends, frontier, side="right"))
            if not blocks:
                return
            count = int(closes[blocks - 1]) + 1
            every = count == len(starts)
            final = np.ones(len(starts), bool)
            if not every:
                final[order[count:]] = False
            parts_starts, parts_ends = (starts, ends) if every else (starts[final], ends[final])
            final_order = order[:count]
            np.add.at(self._wall, compositions[final_order], block_parts(starts, ends, final_order, closes[:blocks]))
            block_starts = sorted_starts[np.concatenate([[0], closes[: blocks - 1] + 1])]
            self._total_wall += int((block_ends[:blocks] - block_starts).sum())  # the union of the final events
            sorted_starts, sorted_ends = sorted_starts[:count], ends[order[:count]]
        if self._call_windows is not None:
            self._call_union += union_by_window(sorted_starts, sorted_ends, self._call_windows.starts,
                                                self._call_windows.ends)
        final_end = int(parts_ends.max())
        self._last_final_end = final_end if self._last_final_end is None else max(final_end, self._last_final_end)
        self._carry = (starts[~final], ends[~final], compositions[~final]) if not every else (
            starts[:0], ends[:0], compositions[:0])

    def finish(self) -> EventTotals:
        self._sweep(None)
        sums = self.sums
        if not self._any_tiles:
            sums.tiles = None
        if self._first_start is not None and self._previous_end - self._first_start >= 1 << 53:
            sums.disjoint = False  # sums of durations no longer exact in float64 (add_event_sums' rule)
        # Disjoint events in order: each one's wall part is its whole duration, summed as its busy time is.
        wall = sums.busy.copy() if sums.disjoint else self._wall
        total_wall = sums.total_ns if sums.disjoint else self._total_wall
        windows = self._call_windows
        return EventTotals(sums, wall, total_wall, windows, None if windows is None else self._call_union)


def fold_events(attribution: Attribution, call_windows: Optional[CallWindows]) -> EventTotals:
    """`EventTotals` of the events an attribution holds (one window)."""
    fold = EventFold(attribution, call_windows)
    fold.add(attribution.events, attribution.event_slots, attribution.event_calls, None)
    return fold.finish()
