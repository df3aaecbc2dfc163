"""Profiling's fast passes give exactly what the plain ways give.

Each C pass of ``sectionmark.profiling._sectionpass`` (attribution, the
session's sums, the dispatch union per call window, the wall sweep carried
across windows) equals its numpy twin,
switched on and off through `sectionmark.profiling.native`; each numpy shortcut
equals the straightforward numpy it replaces, on random data shaped like
profiles. (The readers' passes: tests/readers/test_ireeprof_fast.py.)
"""

from __future__ import annotations

import numpy as np
import pytest
from test_ireeprof_fast import CORRUPTIONS, SEEDS, synthetic_run
from test_session import synthetic

from sectionmark.profiling import native, queue_time
from sectionmark.profiling.attribute import attributed_events
from sectionmark.profiling.block_parts import block_parts
from sectionmark.profiling.queue_time import CallWindows
from sectionmark.profiling.section_time import EventFold, event_sums, wall_parts
from sectionmark.readers.event_model import DISPATCH_DTYPE


def test_c_extension_is_built():
    """setup.py builds it here (a machine with a C compiler), so the comparisons below compare two passes."""
    assert native.native_passes() is not None


@pytest.mark.parametrize("seed", SEEDS)
def test_window_lookup_and_reductions_match_searchsorted_and_ufunc_at(seed):
    rng = np.random.default_rng(seed)
    edges = np.sort(rng.choice(10_000, 40, replace=False))
    starts, ends = edges[0::2], edges[1::2]
    times = np.sort(rng.integers(-100, 10_100, 500))  # sorted: the linear lookup
    expected = np.searchsorted(starts, times, side="right") - 1
    expected = np.where((expected >= 0) & (times < ends[np.maximum(expected, 0)]), expected, -1)
    assert np.array_equal(queue_time._window_of(times, starts, ends), expected)
    groups, values = rng.integers(0, 20, 300), rng.integers(-1000, 1000, 300)
    for ufunc in (np.minimum, np.maximum):
        mine = rng.integers(-500, 500, 25)
        theirs = mine.copy()
        queue_time._reduce_at(ufunc, mine, groups, values)
        ufunc.at(theirs, groups, values)
        assert np.array_equal(mine, theirs)



@pytest.mark.parametrize("seed", SEEDS)
def test_intervals_in_order_give_what_the_general_sweeps_give(seed):
    rng = np.random.default_rng(seed)
    bounds = np.cumsum(rng.integers(0, 1000, 400)) + 10**12
    starts, ends = bounds[0::2], bounds[1::2]  # in order, touching at most: the shortcuts
    backwards = starts[::-1], ends[::-1]  # not in order: the general sweeps
    assert wall_parts(starts, ends).tobytes() == wall_parts(*backwards)[::-1].tobytes()
    edges = np.sort(rng.choice(np.arange(bounds[0] - 500, bounds[-1] + 500), 20, replace=False))
    windows = edges[0::2], edges[1::2]
    apart = starts[1:] > ends[:-1]  # the window shortcut needs gaps: touching intervals form one block
    apart_starts, apart_ends = starts[np.append(True, apart)], ends[np.append(True, apart)]
    assert np.array_equal(queue_time.union_by_window(apart_starts, apart_ends, *windows),
                          queue_time.union_by_window(apart_starts[::-1], apart_ends[::-1], *windows))



@pytest.mark.parametrize("corruption", ["none", "orphan", "missing event", "other buffer"])
@pytest.mark.parametrize("warmup", [0, 3])
def test_c_and_numpy_attribute_events_alike(corruption, warmup, monkeypatch):
    rng = np.random.default_rng(1)
    dispatches, submissions, buffer_ids, timed = synthetic_run(rng)
    CORRUPTIONS[corruption](dispatches, rng)
    # slots: command i of buffer b is slot 10 * b + i (-1 for the untimed ones), keyed i % 2
    bases = np.array([0, 3, 11, 12], np.int64)
    flat = np.full(12, -1, np.int32)
    for position, indices in enumerate(timed):
        flat[bases[position] + np.array(indices)] = 10 * position + np.array(indices)
    slot_keys = np.arange(30, dtype=np.int64) % 2
    calls = np.arange(len(submissions)) // 4
    results = []
    for switched_off in (False, True):
        if switched_off:
            monkeypatch.setattr(native, "_passes", None)
        (slot, call), failures = attributed_events(dispatches, buffer_ids, bases, flat, slot_keys,
                                                    submissions["submission"], calls, warmup)
        results.append((slot.dtype, call.dtype, slot.tobytes(), call.tobytes(), vars(failures)))
    assert results[0] == results[1]
    failures = results[0][-1]
    assert (failures["unplaced"] >= 0) == (corruption == "missing event")
    assert (failures["orphan"] >= 0) == (corruption == "orphan")
    measured = np.searchsorted(submissions["submission"], dispatches["submission"]) >= 4 * warmup
    assert corruption == "orphan" or (failures["measured"], failures["first_measured"]) == (
        measured.sum(), np.argmax(measured))
    assert np.array_equal(call >= 0, measured) or corruption == "orphan"
    placed = slot >= 0
    assert np.array_equal(slot[placed], (10 * np.searchsorted(buffer_ids, dispatches["command_buffer"])
                                         + dispatches["command_index"])[placed])



@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("with_tiles", [True, False])
def test_c_and_numpy_event_sums_alike(seed, with_tiles, monkeypatch):
    """Sums, tiles and each (call, composition)'s first start and last end, over overlapping events of calls that
    skip compositions and calls past the count (summed into the last)."""
    rng = np.random.default_rng(seed)
    count = 300
    starts = np.sort(rng.integers(0, 10**6, count))
    parts = [((("A",), 1.0),), ((("A",), 0.5), (("B",), 0.5)), ((("B",), 1.0),), (((), 1.0),)]
    events = [(int(start), int(start + rng.integers(0, 5000)), parts[rng.integers(0, 3)]) for start in starts]
    tiles = [(int(ns), int(n)) for ns, n in zip(rng.integers(0, 10**4, count), rng.integers(0, 9, count))]
    attribution, _map = synthetic(events, calls=6, call_of=np.sort(rng.integers(0, 8, count)).tolist(),
                                  tiles=tiles if with_tiles else None)
    results = []
    for switched_off in (False, True):
        if switched_off:
            monkeypatch.setattr(native, "_passes", None)
        sums = vars(event_sums(attribution))
        tile_sums = sums.pop("tiles")
        results.append(({name: value.tobytes() if isinstance(value, np.ndarray) else value
                         for name, value in sums.items()},
                        tile_sums and (tile_sums.cpu.tobytes(), tile_sums.tiles.tobytes(), tile_sums.total_ns,
                                       tile_sums.total_tiles)))
    assert results[0] == results[1]
    assert (results[0][1] is None) == (not with_tiles)



@pytest.mark.parametrize("seed", SEEDS)
def test_c_and_numpy_union_by_window_alike(seed, monkeypatch):
    rng = np.random.default_rng(seed)
    starts = np.sort(rng.integers(0, 10_000, 300))
    ends = starts + rng.integers(0, 200, len(starts))  # overlapping, touching and apart
    edges = np.sort(rng.choice(np.arange(-500, 10_500), 20, replace=False))
    table = np.zeros(len(starts), DISPATCH_DTYPE)  # the fields of a dispatch table: strided
    table["start_ns"], table["end_ns"] = starts, ends
    shuffled = rng.permutation(len(starts))  # out of order: the C pass declines, numpy sorts
    cases = [(starts, ends), (table["start_ns"], table["end_ns"]), (starts[shuffled], ends[shuffled])]
    with_c = [queue_time.union_by_window(*case, edges[0::2], edges[1::2]).tolist() for case in cases]
    monkeypatch.setattr(native, "_passes", None)
    assert with_c == [queue_time.union_by_window(*case, edges[0::2], edges[1::2]).tolist() for case in cases]
    assert with_c[0] == with_c[1] == with_c[2]


@pytest.mark.parametrize("seed", SEEDS)
def test_c_and_numpy_wall_parts_alike(seed, monkeypatch):
    """Overlapping intervals as pipelined calls give them (nearly sorted, far past 2**53 ns), ties, nesting, empty
    and backwards intervals: the C sweep's parts are numpy's to the bit."""
    rng = np.random.default_rng(seed)
    chained = np.cumsum(rng.integers(0, 1000, 300)) + (1 << 60)
    cases = [(chained, chained + rng.integers(0, 3000, 300)),  # each overlapping the next few
             (rng.integers(0, 40, 300), rng.integers(0, 40, 300)),  # ties everywhere, some backwards
             (np.repeat(rng.integers(0, 10**6, 30), 10), np.repeat(rng.integers(10**6, 2 * 10**6, 30), 10)),
             (np.array([5, 5]), np.array([5, 9])), (np.array([7]), np.array([3]))]
    for starts, ends in cases:
        with_c = wall_parts(starts, ends)
        monkeypatch.setattr(native, "_passes", None)
        assert with_c.tobytes() == wall_parts(starts, ends).tobytes()
        monkeypatch.undo()


def _carried_events(layout: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) in the order a reader yields them: "pipelined": in start order, every 7th overlapping the next
    few (a call's last dispatch running into the next call's); "interleaved": two submissions at a time listed one
    after the other though they ran at once (not in start order); "apart": in order, some touching; "far": far
    past 2**53 ns, gaps of 2**52; "backwards": some ending before they start (the C pass leaves those to numpy)."""
    count = 600
    durations = rng.integers(0, 300, count)
    starts = np.cumsum(durations + rng.integers(0, 60, count)) + 10**9
    ends = starts + durations
    if layout == "pipelined":
        ends[::7] += rng.integers(0, 900, len(ends[::7]))
    elif layout == "interleaved":  # of every 20 in time, the even ones (one submission) listed first
        listed = np.arange(count).reshape(-1, 10, 2).transpose(0, 2, 1).reshape(-1)
        starts, ends = starts[listed], ends[listed]
    elif layout == "far":
        starts = starts + (1 << 60) + np.arange(count) * (1 << 52)
        ends = starts + durations
        ends[::5] += 400
    elif layout == "backwards":
        ends[::11] = starts[::11] - 5
    return starts, ends


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("layout", ["pipelined", "interleaved", "apart", "far", "backwards"])
@pytest.mark.parametrize("with_windows", [True, False])
def test_c_and_numpy_sweeps_carried_across_windows_alike(seed, layout, with_windows, monkeypatch):
    """EventFold's sweep fed a window at a time, each with a frontier at or below every later event's start (the
    reader's): each composition's wall, the union and the call windows' dispatch union, to the bit."""
    rng = np.random.default_rng(seed)
    starts, ends = _carried_events(layout, rng)
    parts = [((("A",), 1.0),), ((("A",), 0.5), (("B",), 0.5)), ((("B",), 1.0),)]
    attribution, _map = synthetic([(int(start), int(end), parts[rng.integers(0, 3)]) for start, end in
                                   zip(starts, ends)])
    low, high = int(starts.min()), int(max(starts.max(), ends.max()))
    edges = np.unique(rng.integers(low - 100, high + 100, 16, dtype=np.int64))[:14]  # 7 call windows
    windows = CallWindows(edges[0::2], edges[1::2], slice(None)) if with_windows else None
    cuts = np.unique(np.concatenate([[0, len(starts)], rng.integers(0, len(starts), 12)]))
    later_starts = np.append(np.minimum.accumulate(starts[::-1])[::-1], np.iinfo(np.int64).max)

    def folded() -> tuple:
        fold = EventFold(attribution, windows)
        for begin, end in zip(cuts, cuts[1:]):
            frontier = None if end == len(starts) else int(later_starts[end]) - int(rng.integers(0, 500))
            fold.add(attribution.events[begin:end], attribution.event_slots[begin:end],
                     attribution.event_calls[begin:end], frontier)
        totals = fold.finish()
        return (totals.wall.tobytes(), totals.total_wall,
                None if totals.dispatch_union is None else totals.dispatch_union.tolist())

    swept = []

    class Counted:  # the C passes, noting each sweep's answer: done, or declined (without or with numpy's order)
        def __getattr__(self, name):
            return getattr(passes, name)

        def fold_sweep(self, *arguments):
            result = passes.fold_sweep(*arguments)
            swept.append("done" if result is not None else "unsorted" if arguments[3] is None else "declined")
            return result

    passes = native.native_passes()
    monkeypatch.setattr(native, "_passes", Counted())
    state = rng.bit_generator.state  # the same frontiers for both
    with_c = folded()
    rng.bit_generator.state = state
    monkeypatch.setattr(native, "_passes", None)
    assert with_c == folded()
    if layout != "backwards":  # every sweep made in C, after numpy's sort where not in start order
        assert "done" in swept and "declined" not in swept
        assert ("unsorted" in swept) == (layout == "interleaved")


@pytest.mark.parametrize("seed", SEEDS)
def test_c_and_numpy_partition_time_alike(seed, monkeypatch):
    """Queue operations of four rows, overlapping, nested, touching, empty and out of start order (the executions
    then the other operations, as a profile's spans come), some reaching across window edges; windows with gaps,
    touching and empty; fields of a table (strided): each window's time per row to the nanosecond."""
    rng = np.random.default_rng(seed)
    count = 400
    spans = np.zeros(count, queue_time.QUEUE_SPAN_DTYPE)
    spans["start_ns"] = rng.integers(0, 20_000, count)
    spans["end_ns"] = spans["start_ns"] + rng.choice([0, 1, 50, 400, 3000], count)
    rows = rng.integers(0, 4, count)
    edges = np.sort(rng.choice(np.arange(-500, 21_000), 60, replace=False))
    window_starts, window_ends = edges[0::2].copy(), edges[1::2].copy()
    window_ends[::7] = window_starts[::7]  # empty windows
    window_ends[1:-1:5] = window_starts[2::5]  # touching the next
    arguments = (spans["start_ns"], spans["end_ns"], rows, 4, window_starts, window_ends)
    with_c = queue_time.partition_time(*arguments)
    monkeypatch.setattr(native, "_passes", None)
    assert np.array_equal(with_c, queue_time.partition_time(*arguments))
    assert np.array_equal(with_c.sum(axis=1), window_ends - window_starts)  # each window's time, all of it


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("layout", ["pipelined", "interleaved", "apart", "far"])  # none backwards: refused by
@pytest.mark.parametrize("passes", ["C", "numpy"])                                # the readers (check_times)
def test_sweeps_carried_across_windows_give_one_window_s_wall_to_the_bit(seed, layout, passes, monkeypatch):
    """The wall of events cut into windows anywhere a reader may cut them is the wall of the same events in one
    window (the whole read), to the bit: three or more intervals running at once give parts of thirds, which a
    prefix summed from another origin, or sums grouped by window, round otherwise (a composition's wall of
    n + 1/2 then rounded to n or n + 1 in the session's JSON: a pipelined profile read in windows of one host
    event gave another session than its whole read, now and then)."""
    if passes == "numpy":
        monkeypatch.setattr(native, "_passes", None)
    rng = np.random.default_rng(seed)
    starts, ends = _carried_events(layout, rng)
    if layout in ("pipelined", "far"):  # some running through the next two or more: parts of thirds and more
        ends[3::13] += rng.integers(300, 2000, len(ends[3::13]))
    parts = [((("A",), 1.0),), ((("A",), 0.5), (("B",), 0.5)), ((("B",), 1.0),)]
    attribution, _map = synthetic([(int(start), int(end), parts[rng.integers(0, 3)]) for start, end in
                                   zip(starts, ends)])
    later_starts = np.append(np.minimum.accumulate(starts[::-1])[::-1], np.iinfo(np.int64).max)

    def folded(cuts: np.ndarray) -> tuple:
        fold = EventFold(attribution, None)
        for begin, end in zip(cuts, cuts[1:]):
            frontier = None if end == len(starts) else int(later_starts[end])
            fold.add(attribution.events[begin:end], attribution.event_slots[begin:end],
                     attribution.event_calls[begin:end], frontier)
        totals = fold.finish()
        return totals.wall.tobytes(), totals.total_wall

    whole = folded(np.array([0, len(starts)]))
    for windows in (1, 2, 3, 7):
        cuts = np.arange(0, len(starts) + windows, windows).clip(max=len(starts))
        assert folded(np.unique(cuts)) == whole, windows
    for _ in range(4):
        assert folded(np.unique(np.concatenate([[0, len(starts)], rng.integers(0, len(starts), 40)]))) == whole


@pytest.mark.parametrize("seed", SEEDS)
def test_block_parts_are_each_block_s_wall_parts_alone(seed, monkeypatch):
    """`block_parts` (the numpy sweep's parts, all blocks at once) is `wall_parts` of each union block alone, to the
    bit, with the C wall_parts and numpy's: blocks of one interval and of hundreds (past the 64 boundaries
    summed step by step), touching ones, ties, empty and backwards intervals."""
    rng = np.random.default_rng(seed)
    durations = rng.integers(0, 300, 2000)
    starts = np.cumsum(durations + rng.integers(0, 60, 2000)) + 10**9
    ends = starts + durations
    ends[::7] += rng.integers(0, 900, len(ends[::7]))
    ends[1000:1300] += 5000  # a long block
    starts[::13] = starts[::13] - starts[::13] % 50  # ties
    ends[::31] = starts[::31] - 3  # backwards
    order = np.argsort(starts, kind="stable")
    reach = np.maximum.accumulate(ends[order])
    closes = np.flatnonzero(np.concatenate([reach[:-1] <= starts[order][1:], [True]]))
    assert (np.diff(np.concatenate([[-1], closes])) > 64).any()
    for passes in ("C", "numpy"):
        if passes == "numpy":
            monkeypatch.setattr(native, "_passes", None)
        alone = np.concatenate([wall_parts(starts[order][first : last + 1], ends[order][first : last + 1])
                                for first, last in zip(np.concatenate([[0], closes[:-1] + 1]), closes)])
        assert block_parts(starts, ends, order, closes).tobytes() == alone.tobytes(), passes
