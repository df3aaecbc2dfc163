"""A profile read in windows (bounded memory) gives the session of the whole read, or hands over to it."""

from __future__ import annotations

import json
from pathlib import Path
import shutil

import numpy as np
import pytest
from test_ireeprof_fast import swapped_dispatches
from test_readers import BUNDLE_CASES, DISPATCH, event_offsets, field_of, set_event
from tiny_profiles import hand_map

from sectionmark.errors import SectionmarkError
from sectionmark.profiling import native as profiling_native, report, streamed
from sectionmark.profiling.attribute import attribute
from sectionmark.profiling.session import ProfileSession
from sectionmark.profiling.timeline import session_timelines
from sectionmark.readers import bundle_events, event_model, ireeprof_stream
from sectionmark.readers.event_model import native
from sectionmark.readers.ireeprof import read_profile
from sectionmark.serialization import to_json

def whole(path, calls, warmup) -> ProfileSession:
    """The session of the profile read whole, as before windows existed."""
    return ProfileSession.build(attribute(read_profile(path), hand_map(), calls=calls, warmup=warmup), hand_map())


def as_json(session: ProfileSession) -> str:
    return json.dumps(to_json(session), sort_keys=True)


@pytest.mark.parametrize("passes", ["C", "numpy"])
@pytest.mark.parametrize("window", [1, 3, 7, 1 << 16])
@pytest.mark.parametrize("calls, warmup", [(None, 0), (None, 3), (11, 3), (11, 10)])
def test_windows_of_any_size_give_the_whole_reads_session_and_events(plain_run, monkeypatch, passes, window, calls,
                                                                      warmup):
    """plain_run: 3 warmup + 8 calls of two dispatches; windows cut submissions and calls anywhere; the C passes
    and their numpy twins (the whole read then uses numpy too)."""
    if passes == "numpy":
        monkeypatch.setattr(event_model, "_native", None)
        monkeypatch.setattr(profiling_native, "_passes", None)
    elif native() is None or profiling_native.native_passes() is None:
        pytest.skip("the C extension is not built (setup.py)")
    monkeypatch.setattr(ireeprof_stream, "HOST_EVENTS_WINDOW", window)
    path = plain_run[1]
    session = streamed.streamed_session(path, hand_map(), calls=calls, warmup=warmup, function=None)
    assert session is not None and session.attribution is None  # no events kept
    expected = whole(path, calls, warmup)
    assert as_json(session) == as_json(expected)
    assert np.array_equal(session.per_call_busy, expected.per_call_busy)
    events, kept = session.events(), expected.attribution  # read again on demand: the same rows
    assert events.events.tobytes() == kept.events.tobytes()
    assert events.event_slots.tolist() == kept.event_slots.tolist()
    assert events.event_calls.tolist() == kept.event_calls.tolist()


def test_report_reads_in_windows_and_draws_timelines_from_the_file(plain_run, tmp_path):
    session = report(plain_run[1], hand_map(), calls=11, warmup=3)
    assert session.attribution is None and session.reread is not None
    assert session_timelines(session) and session.attribution is not None
    shutil.copy(plain_run[1], tmp_path / "run.ireeprof")
    later = report(tmp_path / "run.ireeprof", hand_map(), calls=11, warmup=3)
    with open(tmp_path / "run.ireeprof", "ab") as file:
        file.write(b"\0")
    with pytest.raises(SectionmarkError, match="changed or went away since it was read"):
        later.events()


@pytest.mark.parametrize("window", [2, 5, 1 << 16])
def test_overlapping_dispatches_give_the_same_walls_and_unions(plain_run, tmp_path, monkeypatch, window):
    """Each submission's second dispatch moved to start inside its first (as concurrent dispatches run on
    local-task): the wall sweep and the call's dispatch union per window, as the whole read gives them."""
    blob = bytearray(plain_run[1].read_bytes())
    offsets = event_offsets(bytes(blob), DISPATCH)
    for first, second in zip(offsets, offsets[1:]):
        if field_of(blob, first, "submission_id") == field_of(blob, second, "submission_id"):
            start, end = field_of(blob, first, "start_host_time_ns"), field_of(blob, first, "end_host_time_ns")
            set_event(blob, second, "start_host_time_ns", (start + end) // 2)
    path = tmp_path / "overlapping.ireeprof"
    path.write_bytes(bytes(blob))
    monkeypatch.setattr(ireeprof_stream, "HOST_EVENTS_WINDOW", window)
    session, expected = streamed.streamed_session(path, hand_map(), calls=11, warmup=3, function=None), whole(path, 11, 3)
    assert session is not None and expected.wall_ns < expected.total_ns  # overlaps: wall below busy
    assert as_json(session) == as_json(expected)


def test_dispatches_written_out_of_order_give_the_same_session(plain_run, tmp_path):
    """Two records swapped: their event ids no longer increase, so the windows hand over to the whole read."""
    path = swapped_dispatches(plain_run, tmp_path)
    assert streamed.streamed_session(path, hand_map(), calls=11, warmup=3, function=None) is None
    assert as_json(report(path, hand_map(), calls=11, warmup=3)) == as_json(whole(path, 11, 3))


@pytest.mark.parametrize("passes", ["C", "numpy"])
@pytest.mark.parametrize("case", sorted(BUNDLE_CASES))
def test_a_profile_the_windows_cannot_read_is_read_whole_with_its_error(plain_run, tmp_path, monkeypatch, case,
                                                                         passes):
    """Any corrupt profile: no windowed session; `report` names the problem exactly as the whole read does."""
    if passes == "numpy":
        monkeypatch.setattr(event_model, "_native", None)
        monkeypatch.setattr(profiling_native, "_passes", None)
    path = tmp_path / "bad.ireeprof"
    path.write_bytes(BUNDLE_CASES[case][0](plain_run[1].read_bytes()))
    assert streamed.streamed_session(path, hand_map(), calls=11, warmup=3, function=None) is None
    with pytest.raises(SectionmarkError) as expected:
        whole(path, 11, 3)
    with pytest.raises(SectionmarkError) as got:
        report(path, hand_map(), calls=11, warmup=3)
    assert str(got.value) == str(expected.value)


@pytest.mark.parametrize("calls, warmup", [(None, -1), (None, True), (None, 2.5), (None, 11), (11, 11), (0, 0),
                                           (True, 0), (4, 0)])
def test_counts_that_cannot_be_honoured_are_refused_as_the_whole_read_refuses_them(plain_run, calls, warmup):
    """A warmup of -1 or True was once taken by the windowed read (12 calls, warmup -1): refused in one place."""
    with pytest.raises(SectionmarkError) as expected:
        whole(plain_run[1], calls, warmup)
    with pytest.raises(SectionmarkError) as got:
        report(plain_run[1], hand_map(), calls=calls, warmup=warmup)
    assert str(got.value) == str(expected.value)


def test_a_warmup_past_the_kept_rows_reads_whole(plain_run, monkeypatch):
    monkeypatch.setattr(ireeprof_stream, "HOST_EVENTS_WINDOW", 4)
    monkeypatch.setattr(streamed, "WARMUP_ROWS", 2)  # one submission's two dispatches: the warmup has three
    assert streamed.streamed_session(plain_run[1], hand_map(), calls=11, warmup=3, function=None) is None
    assert as_json(report(plain_run[1], hand_map(), calls=11, warmup=3)) == as_json(whole(plain_run[1], 11, 3))


def test_other_formats_and_device_timed_profiles_are_read_whole(plain_run, tmp_path, monkeypatch):
    jsonl = tmp_path / "run.jsonl"
    jsonl.write_text('{"record_type": "session"}\n')
    assert ireeprof_stream.open_stream(jsonl) is None
    monkeypatch.setattr(bundle_events.OpenBundle, "device_timed", property(lambda self: True))
    assert ireeprof_stream.open_stream(plain_run[1]) is None


def test_union_by_row_is_each_rows_union():
    """Rows apart in time, intervals overlapping inside a row: each row's union, as union_length gives it."""
    from sectionmark.profiling.section_time import union_length

    rng = np.random.default_rng(1)
    starts, ends, rows = [], [], []
    for row, base in enumerate([0, 1000, 5000]):
        row_starts = np.sort(rng.integers(base, base + 300, 6))
        starts += row_starts.tolist()
        ends += (row_starts + rng.integers(0, 400, 6)).tolist()
        rows += [row] * 6
    starts, ends, rows = np.array(starts), np.array(ends), np.array(rows)
    got = streamed._union_by_row(starts, ends, rows, 4)
    assert got.tolist() == [union_length(starts[rows == r], ends[rows == r]) for r in range(3)] + [0]


def test_submissions_overlapping_in_time_are_refused():
    high, low = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    first = np.array([[0, high], [high, high], [100, 105]])  # the middle submission ran nothing
    streamed._check_submissions_apart(first, np.array([[100, low], [low, low], [120, 130]]))
    with pytest.raises(ireeprof_stream.NotStreamable):
        streamed._check_submissions_apart(np.array([[0], [90]]), np.array([[100], [130]]))


@pytest.mark.parametrize("window", [1, 4, 100])
def test_memory_events_that_change_no_level_leave_peaks_and_averages_alone(window):
    """Two pools interleaved, most events repeating their pool's level: the kept ones give the same levels."""
    from sectionmark.profiling.queue_time import memory_by_window
    from sectionmark.readers.event_model import MEMORY_DTYPE, MEMORY_POOL_STATS, QUEUE_ALLOCA

    rng = np.random.default_rng(7)
    events = np.zeros(200, MEMORY_DTYPE)
    events["time_ns"] = np.cumsum(rng.integers(0, 30, 200))
    events["pool"] = rng.integers(1, 3, 200)
    events["flags"] = np.where(rng.random(200) < 0.9, MEMORY_POOL_STATS, 0)
    events["type"] = rng.choice([3, 4, QUEUE_ALLOCA, 8], 200)
    events["pool_reserved"] = rng.choice([0, 4096, 8192], 200) * (rng.random(200) < 0.3)
    levels: dict[int, int] = {}
    kept = np.concatenate([events[begin : begin + window][ireeprof_stream._level_changes(events[begin : begin + window],
                                                                                         levels)]
                           for begin in range(0, 200, window)])
    assert len(kept) < 120
    starts, ends = np.array([0, 700, 2000]), np.array([650, 1900, 2900])

    def device_memory(table):
        stats = table[(table["flags"] & MEMORY_POOL_STATS) != 0]
        return [part.tolist() for part in memory_by_window(stats["time_ns"], stats["pool"], stats["pool_reserved"],
                                                            starts, ends)]
    assert device_memory(kept) == device_memory(events)


def test_a_profiled_run_keeps_its_profile_for_its_timelines_and_no_longer(plain_run, inputs):
    """sm.profile reads its scratch profile in windows too: the file moves to a folder of the session's own, its
    timelines read it from there, and the folder goes with the session."""
    import gc
    import tempfile

    import sectionmark as sm

    def kept_folders() -> set[Path]:
        return set(Path(tempfile.gettempdir()).glob("sectionmark-profile-*"))

    before = kept_folders()
    session = sm.profile(plain_run[0], inputs, iterations=4, warmup=1, section_map=hand_map(), quiet=True)
    assert session.attribution is None and session.reread is not None
    (folder,) = kept_folders() - before
    assert [path.suffix for path in folder.iterdir()] == [".ireeprof"]
    assert session_timelines(session) and len(session.events().events) == 2 * 4
    del session
    gc.collect()
    assert not folder.exists()
