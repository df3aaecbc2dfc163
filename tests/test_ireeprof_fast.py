"""The fast paths of reading and attributing a profile give exactly what the plain ways give.

The C extension (``sectionmark.profiling._ireeprof``) and its numpy fallback
read a real profile into identical tables and refuse each corrupt file of
tests/test_readers.py with the same line; each numpy shortcut equals the
straightforward numpy it replaces, on random data shaped like profiles.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from test_readers import BUNDLE_CASES
from tiny_profiles import hand_map

from sectionmark.errors import SectionmarkError
from sectionmark.profiling import ireeprof, queue_time
from sectionmark.profiling.attribute import attribute
from sectionmark.profiling.ireeprof import DISPATCH_DTYPE, read_profile
from sectionmark.profiling.session import ProfileSession, _union_length, wall_parts

SEEDS = range(8)


def read_both(path, monkeypatch) -> tuple:
    """What the reader gives with the C extension and without it (each: a Profile, or the error's line)."""

    def read():
        try:
            return read_profile(path, reader="bundle")
        except SectionmarkError as error:
            return str(error)

    with_c = read()
    monkeypatch.setattr(ireeprof, "_native", None)
    return with_c, read()


def assert_same_profile(first: ireeprof.Profile, second: ireeprof.Profile) -> None:
    for name in ("dispatches", "submissions", "queue_ops", "memory"):
        a, b = getattr(first, name), getattr(second, name)
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), name
    for name in ("keys", "command_buffers", "exports", "source"):
        assert getattr(first, name) == getattr(second, name), name


def test_c_extension_is_built():
    assert ireeprof._native is not None


def test_c_and_numpy_read_a_profile_alike(plain_run, monkeypatch):
    with_c, without = read_both(plain_run[1], monkeypatch)
    assert_same_profile(with_c, without)
    assert len(with_c.dispatches) and len(with_c.submissions) and len(with_c.queue_ops) and len(with_c.memory)
    first, second = (ProfileSession.build(attribute(profile, hand_map(), calls=11, warmup=3), hand_map())
                     for profile in (with_c, without))
    assert first.to_json() == second.to_json()


@pytest.mark.parametrize("case", sorted(BUNDLE_CASES))
def test_c_and_numpy_refuse_corrupt_bundles_alike(plain_run, tmp_path, monkeypatch, case):
    edit, _message = BUNDLE_CASES[case]
    path = tmp_path / "bad.ireeprof"
    path.write_bytes(edit(plain_run[1].read_bytes()))
    with_c, without = read_both(path, monkeypatch)
    if isinstance(with_c, str):
        assert with_c == without
    else:
        assert_same_profile(with_c, without)


@pytest.mark.parametrize("cut", [1, 50, 103, 104, 200])
def test_c_and_python_walk_truncated_records_alike(plain_run, monkeypatch, cut):
    blob = plain_run[1].read_bytes()
    data = np.frombuffer(blob[: len(blob) - cut], np.uint8)
    with_c = ireeprof._record_offsets(data, 24, len(data))
    monkeypatch.setattr(ireeprof, "_native", None)
    assert np.array_equal(with_c, ireeprof._record_offsets(data, 24, len(data)))


def grouped_times(rng: np.random.Generator, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """(group id, time) rows grouped by nondecreasing group id, times mostly increasing, some ties and swaps."""
    sizes = rng.integers(1, 6, groups)
    group = np.repeat(np.sort(rng.choice(10 * groups, groups, replace=False)), sizes).astype(np.uint64)
    time = np.cumsum(rng.integers(0, 3, len(group))).astype(np.int64)
    swaps = rng.choice(len(time) - 1, len(time) // 10, replace=False)
    time[swaps], time[swaps + 1] = time[swaps + 1], time[swaps].copy()
    return group, time


@pytest.mark.parametrize("seed", SEEDS)
def test_distinct_and_run_lookup_are_unique_and_searchsorted(seed):
    rng = np.random.default_rng(seed)
    group, time = grouped_times(rng, 200)
    assert np.array_equal(ireeprof.distinct(time), np.unique(time))
    ids = np.unique(group[rng.random(len(group)) < 0.7])
    runs = np.repeat(group, 8)
    for values in (runs, runs[::-1], rng.permutation(group)):  # long runs (sorted or not), and short ones
        assert np.array_equal(ireeprof.searchsorted_runs(ids, values), np.searchsorted(ids, values))


@pytest.mark.parametrize("seed", SEEDS)
def test_dispatch_order_is_lexsorts(seed):
    rng = np.random.default_rng(seed)
    group, time = grouped_times(rng, 300)
    dispatches = np.zeros(len(group), DISPATCH_DTYPE)
    dispatches["submission"], dispatches["start_ns"] = group, time
    dispatches["command_index"] = np.arange(len(group))  # tells tied rows apart
    shuffled = dispatches[rng.permutation(len(group))]
    for table in (dispatches, shuffled):  # grouped by submission (sorted locally) and not (lexsort)
        expected = table[np.lexsort((table["start_ns"], table["submission"]))]
        assert ireeprof._by_submission_and_start(table.copy()).tobytes() == expected.tobytes()


@pytest.mark.parametrize("seed", SEEDS)
def test_dispatch_of_one_command_twice_is_found_by_counting_and_by_sorting(seed):
    rng = np.random.default_rng(seed)
    ids = np.sort(rng.choice(1000, 50, replace=False)).astype(np.uint64)
    rank = np.sort(rng.integers(0, len(ids), 400))
    index = rng.integers(0, 40, len(rank))
    for scale in (1, 10**6):  # a small (submission, index) table: counted; a huge one: sorted
        pairs = Counter(zip(ids[rank].tolist(), (index * scale).tolist()))
        assert ireeprof._duplicate_command(ids, rank, index * scale) == min(p for p, n in pairs.items() if n > 1)
        _, first = np.unique(rank * 40 + index, return_index=True)
        assert ireeprof._duplicate_command(ids, rank[first], index[first] * scale) is None


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
    assert _union_length(starts, ends) == _union_length(*backwards)
    edges = np.sort(rng.choice(np.arange(bounds[0] - 500, bounds[-1] + 500), 20, replace=False))
    windows = edges[0::2], edges[1::2]
    apart = starts[1:] > ends[:-1]  # the window shortcut needs gaps: touching intervals form one block
    apart_starts, apart_ends = starts[np.append(True, apart)], ends[np.append(True, apart)]
    assert np.array_equal(queue_time.union_by_window(apart_starts, apart_ends, *windows),
                          queue_time.union_by_window(apart_starts[::-1], apart_ends[::-1], *windows))
