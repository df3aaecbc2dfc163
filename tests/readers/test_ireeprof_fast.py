"""The fast paths of reading a profile give exactly what the plain ways give.

The C extension (``sectionmark.readers._ireeprof``) and its numpy fallback
read a real profile into identical tables (and sessions, with profiling's C
passes off too) and refuse each corrupt file of tests/readers/test_readers.py
with the same line; each numpy shortcut of the readers equals the
straightforward numpy it replaces, on random data shaped like profiles.
(Profiling's passes: tests/profiling/test_sectionpass.py.)
"""

from __future__ import annotations

import mmap
from collections import Counter

import numpy as np
import pytest
from test_readers import BUNDLE_CASES, DISPATCH, event_offsets, field_of
from tiny_profiles import hand_map

from sectionmark.errors import SectionmarkError
from sectionmark.profiling import native as profiling_native
from sectionmark.profiling.attribute import attribute
from sectionmark.profiling.session import ProfileSession
from sectionmark.readers import arrays, bundle_records, checks, event_model, ireeprof_bundle
from sectionmark.readers.event_model import DISPATCH_DTYPE
from sectionmark.readers.bundle_records import KNOWN_CONTENT_TYPES as KNOWN_TYPES
from sectionmark.readers.ireeprof import read_profile

SEEDS = range(8)


def read_both(path, monkeypatch) -> tuple:
    """What the reader gives with the C extension and without it (each: a Profile, or the error's line)."""

    def read():
        try:
            return read_profile(path, reader="bundle")
        except SectionmarkError as error:
            return str(error)

    with_c = read()
    monkeypatch.setattr(event_model, "_native", None)
    return with_c, read()


def assert_same_profile(first: event_model.Profile, second: event_model.Profile) -> None:
    for name in ("dispatches", "submissions", "queue_ops", "memory"):
        a, b = getattr(first, name), getattr(second, name)
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), name
    for name in ("keys", "command_buffers", "exports", "provenance"):
        assert getattr(first, name) == getattr(second, name), name


def test_c_extension_is_built():
    assert event_model._native is not None


def test_c_and_numpy_read_a_profile_alike(plain_run, monkeypatch):
    native, passes = event_model._native, profiling_native._passes
    with_c, without = read_both(plain_run[1], monkeypatch)  # leaves the extension switched off
    assert_same_profile(with_c, without)
    assert len(with_c.dispatches) and len(with_c.submissions) and len(with_c.queue_ops) and len(with_c.memory)

    def session(profile: event_model.Profile) -> dict:
        return ProfileSession.build(attribute(profile, hand_map(), calls=11, warmup=3), hand_map()).to_json()

    monkeypatch.setattr(profiling_native, "_passes", None)  # read, attributed and summed with numpy only
    numpy_session = session(without)
    monkeypatch.setattr(event_model, "_native", native)
    monkeypatch.setattr(profiling_native, "_passes", passes)
    assert passes is not None and session(with_c) == numpy_session


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


def test_dispatches_written_out_of_order_are_sorted_alike(plain_run, tmp_path, monkeypatch):
    with_c, without = read_both(swapped_dispatches(plain_run, tmp_path), monkeypatch)
    assert_same_profile(with_c, without)
    submission, start = with_c.dispatches["submission"], with_c.dispatches["start_ns"]
    assert ((submission[1:] > submission[:-1]) | ((submission[1:] == submission[:-1]) & (start[1:] >= start[:-1]))).all()


def swapped_dispatches(plain_run, tmp_path) -> "Path":
    """The profile with two dispatches of one submission written in the other order."""
    blob = bytearray(plain_run[1].read_bytes())
    offsets = event_offsets(bytes(blob), DISPATCH)
    first, second = next((a, b) for a, b in zip(offsets, offsets[1:])
                         if field_of(blob, a, "submission_id") == field_of(blob, b, "submission_id"))
    size = bundle_records.HOST_EVENT.itemsize
    blob[first:first + size], blob[second:second + size] = blob[second:second + size], blob[first:first + size]
    path = tmp_path / "swapped.ireeprof"
    path.write_bytes(bytes(blob))
    return path


def read_in_windows(path, monkeypatch, window: int) -> tuple:
    """`read_both` with the host and memory events read ``window`` at a time and the record headers walked
    ``window`` x 100 bytes at a time (the C extension switched on again after)."""
    native = event_model._native
    monkeypatch.setattr(ireeprof_bundle, "HOST_EVENTS_WINDOW", window)
    monkeypatch.setattr(bundle_records, "RECORD_WALK_WINDOW", window * 100)
    both = read_both(path, monkeypatch)
    monkeypatch.setattr(event_model, "_native", native)
    return both


@pytest.mark.parametrize("window", [1, 2, 7, 64])
@pytest.mark.parametrize("case", ["real", "swapped", *sorted(BUNDLE_CASES)])
def test_reading_host_events_in_windows_gives_what_one_pass_gives(plain_run, tmp_path, monkeypatch, case, window):
    """Every window size, C and numpy: the same tables and order flags, or the same error line, as one window."""
    if case == "real":
        path = plain_run[1]
    elif case == "swapped":
        path = swapped_dispatches(plain_run, tmp_path)
    else:
        path = tmp_path / "bad.ireeprof"
        path.write_bytes(BUNDLE_CASES[case][0](plain_run[1].read_bytes()))
    whole = read_in_windows(path, monkeypatch, 1 << 30)
    for one_pass, windowed in zip(whole, read_in_windows(path, monkeypatch, window)):
        if isinstance(one_pass, str):
            assert windowed == one_pass
        else:
            assert_same_profile(windowed, one_pass)


@pytest.mark.parametrize("window", [120, 500, 1 << 12])
@pytest.mark.parametrize("cut", [0, 1, 50, 103, 104, 200])
def test_walking_the_records_in_windows_gives_what_one_walk_gives(plain_run, monkeypatch, window, cut):
    """Windows smaller than one record, about one record and a few pages, on whole and truncated files."""
    blob = plain_run[1].read_bytes()
    data = np.frombuffer(blob[: len(blob) - cut], np.uint8)
    mapped = mmap.mmap(-1, max(len(data), 1))  # release_pages gives its pages back: harmless on an anonymous map
    for native in (event_model._native, None):
        monkeypatch.setattr(event_model, "_native", native)
        whole = bundle_records._record_table(data, 24, len(data), KNOWN_TYPES)
        monkeypatch.setattr(bundle_records, "RECORD_WALK_WINDOW", window)
        windowed = bundle_records.walk_records(mapped, data, 24, len(data), KNOWN_TYPES)
        monkeypatch.setattr(bundle_records, "RECORD_WALK_WINDOW", 1 << 30)
        assert [part.tolist() for part in windowed] == [part.tolist() for part in whole]


@pytest.mark.parametrize("cut", [1, 50, 103, 104, 200])
def test_c_and_python_walk_truncated_records_alike(plain_run, monkeypatch, cut):
    blob = plain_run[1].read_bytes()
    data = np.frombuffer(blob[: len(blob) - cut], np.uint8)
    with_c = bundle_records._record_table(data, 24, len(data), KNOWN_TYPES)
    monkeypatch.setattr(event_model, "_native", None)
    without = bundle_records._record_table(data, 24, len(data), KNOWN_TYPES)
    assert [part.tolist() for part in with_c] == [part.tolist() for part in without]
    assert (with_c[2] >= 0).sum() > 3  # the chunks' content types are recognised


def grouped_times(rng: np.random.Generator, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """(group id, time) rows grouped by nondecreasing group id, times mostly increasing, some ties and swaps."""
    sizes = rng.integers(1, 6, groups)
    group = np.repeat(np.sort(rng.choice(10 * groups, groups, replace=False)), sizes).astype(np.uint64)
    time = np.cumsum(rng.integers(0, 3, len(group))).astype(np.int64)
    swaps = rng.choice(len(time) - 1, len(time) // 10, replace=False)
    time[swaps], time[swaps + 1] = time[swaps + 1], time[swaps].copy()
    return group, time


@pytest.mark.parametrize("passes", ["C", "numpy"])
@pytest.mark.parametrize("seed", SEEDS)
def test_record_positions_of_any_window_are_those_of_every_record_in_file_order(seed, passes, monkeypatch):
    """A window's offsets made in one C pass (`record_positions`) or by numpy: those of every record."""
    if passes == "numpy":
        monkeypatch.setattr(event_model, "_native", None)
    elif event_model.native() is None:
        pytest.skip("the C extension is not built (setup.py)")
    rng = np.random.default_rng(seed)
    itemsize = 152
    counts = rng.integers(0, 4, 40)  # empty chunks too, first and last among them
    counts[0] = counts[-1] = 0
    starts = np.cumsum(rng.integers(200, 900, len(counts)) + counts * itemsize).astype(np.int64)
    no_ordinals = np.zeros(len(counts), np.uint32)
    chunks = bundle_records.Chunks(starts, counts.astype(np.int64) * itemsize, no_ordinals, no_ordinals)
    every = [start + k * itemsize for start, count in zip(starts.tolist(), counts.tolist()) for k in range(count)]
    positions = bundle_records.RecordPositions(chunks, itemsize)
    assert len(positions) == len(every) and positions[:].tolist() == every
    for begin, size in zip(rng.integers(0, len(every), 10).tolist(), rng.integers(1, 3 * max(counts), 10).tolist()):
        assert positions[begin : begin + size].tolist() == every[begin : begin + size]
    picked = sorted(rng.choice(len(every), 5, replace=False).tolist())
    assert positions[picked].tolist() == [every[index] for index in picked]


@pytest.mark.parametrize("seed", SEEDS)
def test_distinct_and_run_lookup_are_unique_and_searchsorted(seed):
    rng = np.random.default_rng(seed)
    group, time = grouped_times(rng, 200)
    assert np.array_equal(arrays.distinct(time), np.unique(time))
    ids = np.unique(group[rng.random(len(group)) < 0.7])
    runs = np.repeat(group, 8)
    for values in (runs, runs[::-1], rng.permutation(group)):  # long runs (sorted or not), and short ones
        assert np.array_equal(arrays.searchsorted_runs(ids, values), np.searchsorted(ids, values))


@pytest.mark.parametrize("seed", SEEDS)
def test_rows_gathered_as_raw_records_are_numpys_rows(seed):
    """`rows_of` (a mask, indices, a slice, none) and `copy_rows` give the rows numpy's structured indexing and
    assignment give, of the readers' tables, as copies: changing them leaves the table alone."""
    rng = np.random.default_rng(seed)
    for dtype in (DISPATCH_DTYPE, event_model.MEMORY_DTYPE, event_model.QUEUE_OP_DTYPE):
        table = np.zeros(40, dtype)
        for name in dtype.names:
            table[name] = rng.integers(0, 1 << 40, len(table))
        for selection in (rng.random(len(table)) < 0.5, rng.permutation(len(table))[:15], slice(7, 30),
                          slice(None), np.zeros(0, np.int64)):
            gathered = checks.rows_of(table, selection)
            assert gathered.dtype == dtype and gathered.tobytes() == table[selection].tobytes()
            if len(gathered):
                gathered[dtype.names[0]] += 1
                assert not np.shares_memory(gathered, table)
        target = np.zeros(len(table) + 5, dtype)
        checks.copy_rows(target[5:], table)
        assert target[5:].tobytes() == table.tobytes() and not target[:5].tobytes().strip(b"\0")


@pytest.mark.parametrize("seed", SEEDS)
def test_same_records_is_array_equal_of_executions_and_queue_operations(seed):
    """Tables of the packed integer dtypes the windows compare with the first pass's: equal as bytes exactly when
    numpy finds them equal field by field (one field of one row apart, a row fewer, a slice of a larger table)."""
    rng = np.random.default_rng(seed)
    for dtype in (event_model.SUBMISSION_DTYPE, event_model.QUEUE_OP_DTYPE):
        table = np.zeros(50, dtype)
        for name in dtype.names:
            table[name] = rng.integers(0, 1 << 40, len(table))
        changed = table.copy()
        changed[rng.integers(len(table))][dtype.names[rng.integers(len(dtype.names))]] += 1
        larger = np.concatenate([table, table])
        for first, second in ((table, table.copy()), (table, changed), (table, table[:-1]), (larger[:50], table),
                              (larger[50:][::-1][::-1], table), (table[::2], larger[:100:2])):
            assert checks.same_records(first, second) == np.array_equal(first, second)
        assert not checks.same_records(table, changed) and checks.same_records(larger[50:], table)


@pytest.mark.parametrize("seed", SEEDS)
def test_percentiles_are_numpys_to_the_bit(seed):
    """Per-call figures (integer ns, float sums of shares, ties, a NaN) of one call or many: the same values,
    dtype and shape as np.percentile's; one quantile as np.percentile's of a scalar."""
    rng = np.random.default_rng(seed)
    for calls in (1, 2, 3, 20, 101):
        for values in (rng.integers(0, 1 << 40, (4, calls)), rng.random((4, calls)) * 1e9,
                       rng.integers(0, 3, (4, calls)) * 0.1, np.where(rng.random((4, calls)) < 0.1, np.nan, 1.5)):
            for quantiles in ([50, 95], [0, 100, 37.5], [95]):
                expected, got = np.percentile(values, quantiles, axis=-1), arrays.percentiles(values, quantiles)
                assert (got.shape, got.dtype, got.tobytes()) == (expected.shape, expected.dtype, expected.tobytes())
            row = values[0]
            assert arrays.percentiles(row, [50])[0].tobytes() == np.float64(np.percentile(row, 50)).tobytes()
            assert arrays.percentiles(row, [50, 95]).tobytes() == np.percentile(row, [50, 95]).tobytes()


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
        assert checks.by_submission_and_start(table.copy()).tobytes() == expected.tobytes()


@pytest.mark.parametrize("seed", SEEDS)
def test_dispatch_of_one_command_twice_is_found_by_counting_and_by_sorting(seed):
    rng = np.random.default_rng(seed)
    ids = np.sort(rng.choice(1000, 50, replace=False)).astype(np.uint64)
    rank = np.sort(rng.integers(0, len(ids), 400))
    index = rng.integers(0, 40, len(rank))
    for scale in (1, 10**6):  # a small (submission, index) table: counted; a huge one: sorted
        pairs = Counter(zip(ids[rank].tolist(), (index * scale).tolist()))
        assert checks._duplicate_command(ids, rank, index * scale) == min(p for p, n in pairs.items() if n > 1)
        _, first = np.unique(rank * 40 + index, return_index=True)
        assert checks._duplicate_command(ids, rank[first], index[first] * scale) is None


def synthetic_run(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[list[int]]]:
    """(dispatches, submissions, buffer ids, timed command indices per buffer) of a well-formed run: every
    submission executes one of three buffers and has one event per timed command, in start order."""
    buffer_ids = np.array([5, 9, 20], np.uint64)
    timed = [[0, 1, 2], [1, 3, 5, 7], [0]]
    ids = np.sort(rng.choice(10_000, 40, replace=False)).astype(np.uint64)
    submissions = np.zeros(len(ids), event_model.SUBMISSION_DTYPE)
    submissions["submission"], submissions["command_buffer"] = ids, buffer_ids[rng.integers(0, 3, len(ids))]
    submissions["start_ns"] = np.arange(len(ids)) * 1000
    submissions["end_ns"] = submissions["start_ns"] + 900
    rows = []
    for execution in submissions:
        indices = timed[int(np.searchsorted(buffer_ids, execution["command_buffer"]))]
        for order, index in enumerate(indices):
            start = int(execution["start_ns"]) + 10 * order
            rows.append((execution["submission"], execution["command_buffer"], index, index % 2, 0, 0, start,
                         start + 5, 5, 1))
    return np.array(rows, DISPATCH_DTYPE), submissions, buffer_ids, timed


CORRUPTIONS = {
    "none": lambda d, rng: None,
    "missing event": lambda d, rng: d.__setitem__("command_index", np.where(np.arange(len(d)) == 7, 99, d["command_index"])),
    "duplicate index": lambda d, rng: d["command_index"].__setitem__(slice(8, 10), d["command_index"][8]),
    "orphan": lambda d, rng: d["submission"].__setitem__(slice(len(d) - 1, None), 10**6),
    "other buffer": lambda d, rng: d["command_buffer"].__setitem__(3, 9 if d["command_buffer"][3] != 9 else 5),
    "outside": lambda d, rng: d["end_ns"].__setitem__(11, d["end_ns"][11] + 10**4),
    "huge command index": lambda d, rng: d["command_index"].__setitem__(slice(4, 6), 1 << 30),
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
@pytest.mark.parametrize("seed", SEEDS[:3])
def test_c_and_numpy_link_checks_agree(seed, corruption, monkeypatch):
    rng = np.random.default_rng(seed)
    dispatches, submissions, buffer_ids, timed = synthetic_run(rng)
    CORRUPTIONS[corruption](dispatches, rng)
    results = []
    for switched_off in (False, True):
        if switched_off:
            monkeypatch.setattr(event_model, "_native", None)
        failures = checks._link_failures(dispatches, submissions, buffer_ids, timed)
        results.append({**vars(failures), "found": failures.found.tolist()})
    assert results[0] == results[1]
    if corruption == "none":
        assert results[0]["short"] == results[0]["orphan"] == results[0]["outside"] == -1
    else:
        assert any(value not in (-1, None) for name, value in results[0].items() if name != "found")




def test_a_stream_table_grows_with_its_rows_and_reserves_no_bound():
    """The first pass's tables are bounded by the file's size (every host event a submission): reserved at once,
    a profile larger than the machine's memory asked for half its size in address space, which strict overcommit
    refuses. A bound of 10**15 rows (32 PB) is taken; rows appended, whole and by field, come back in order."""
    from sectionmark.readers.event_model import SUBMISSION_DTYPE
    from sectionmark.readers.ireeprof_stream import Rows

    rng = np.random.default_rng(7)
    table, expected = Rows(10**15, SUBMISSION_DTYPE), []
    for size in rng.integers(0, 3000, 40).tolist():
        rows = np.zeros(size, SUBMISSION_DTYPE)
        rows["submission"] = rng.integers(0, 1 << 40, size)
        rows["start_ns"] = rng.integers(0, 1 << 50, size)
        if size % 2:
            table.append(rows)
            expected.append(rows)
        else:
            chosen = rng.random(size) < 0.5
            table.append_fields(rows, chosen)
            expected.append(rows[chosen])
    assert table.rows().tobytes() == np.concatenate(expected).tobytes()
    bounded = Rows(5, SUBMISSION_DTYPE)  # a bound is kept where it is right
    bounded.append(np.zeros(5, SUBMISSION_DTYPE))
    assert len(bounded.rows()) == 5


def test_a_stream_table_grows_without_a_second_copy_of_its_rows():
    """A table grown by a copy holds its old and new tables at once, and the allocator's heap keeps the old one
    as a hole (10M events: 16 MB more at the read's peak): the table grows by moving its mapping's pages. What the
    allocator lends while it grows (traced) stays far below its rows' bytes; the rows come back unchanged."""
    import tracemalloc

    from sectionmark.readers.event_model import MEMORY_DTYPE
    from sectionmark.readers.ireeprof_stream import Rows

    part = np.zeros(4096, MEMORY_DTYPE)
    part["time_ns"] = np.arange(len(part))
    table = Rows(10**9, MEMORY_DTYPE)
    tracemalloc.start()
    try:
        for _ in range(64):  # 12.6 MB of rows, through five growths
            table.append(part)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    rows = table.rows()
    assert len(rows) == 64 * len(part) and (rows["time_ns"] == np.tile(part["time_ns"], 64)).all()
    assert peak < rows.nbytes // 8, f"{peak} bytes allocated while growing {rows.nbytes} bytes of rows"


def test_a_stream_table_grows_where_the_system_cannot_move_a_mapping():
    """Without ``mremap`` (macOS) CPython refuses to resize a mapping (SystemError): the table's mapping is then
    copied into a larger one, its rows kept."""
    import mmap

    from sectionmark.readers.ireeprof_stream import grown_mapping

    class WithoutMremap(mmap.mmap):
        def resize(self, newsize: int) -> None:
            raise SystemError("mmap: resizing not available--no mremap()")

    mapping = WithoutMremap(-1, 4096, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    mapping[:5] = b"rows!"
    grown = grown_mapping(mapping, 5, 1 << 16)
    assert len(grown) == 1 << 16 and grown[:5] == b"rows!" and mapping.closed
    moved = grown_mapping(grown, 5, 1 << 20)  # where it can move, it is the same mapping, grown
    assert moved is grown and len(moved) == 1 << 20 and moved[:5] == b"rows!"
