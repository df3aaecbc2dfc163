"""Random mutants of a real profile: windows of any size give the one-window read's every figure, or its refusal.

Each mutant changes a few fields of a few host events of `plain_run`'s profile (times, tile counts and times,
submission and event ids, types, status). Read in windows of a random size, its session must equal the
session of the same file's events read at once, in every column (CPU tiles included), or both must refuse it
with the same error line. ``SECTIONMARK_MUTANTS`` sets how many (200 by default; 10,000 for the figure in
issue R4's closing note).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from test_readers import DISPATCH, EXECUTE, event_offsets, field_of, set_event
from tiny_profiles import hand_map

from sectionmark.errors import SectionmarkError
from sectionmark.profiling.attribute import attribute
from sectionmark.profiling.read import read_session
from sectionmark.profiling.session import ProfileSession
from sectionmark.readers import ireeprof_stream
from sectionmark.readers.ireeprof import read_profile
from sectionmark.readers.sources import open_source
from sectionmark.serialization import to_json

MUTANTS = int(os.environ.get("SECTIONMARK_MUTANTS", "200"))
FIELDS = {  # field -> values a mutation writes, from the event's own value
    "start_host_time_ns": lambda rng, value: value + int(rng.integers(-5000, 5000)),
    "end_host_time_ns": lambda rng, value: value + int(rng.integers(-5000, 5000)),
    "tile_count": lambda rng, value: int(rng.choice([0, 1, value * 3, (1 << 63) - 1, 1 << 62])),
    "tile_duration_sum_ns": lambda rng, value: int(rng.choice([0, value * 7, 1 << 60])),
    "submission_id": lambda rng, value: value + int(rng.integers(-2, 3)),
    "event_id": lambda rng, value: value + int(rng.integers(-3, 4)),
    "type": lambda rng, value: int(rng.choice([DISPATCH, EXECUTE, 9, 12])),
    "status_code": lambda rng, value: int(rng.choice([0, 0, 1])),
}


def _session_or_error(read) -> str:
    try:
        return json.dumps(to_json(read()), sort_keys=True)
    except SectionmarkError as error:
        return f"error: {error}"


def test_random_mutants_read_in_windows_equal_the_one_window_read(plain_run, tmp_path, monkeypatch):
    rng = np.random.default_rng(20261128)
    original = plain_run[1].read_bytes()
    offsets = sorted(event_offsets(original, DISPATCH) + event_offsets(original, EXECUTE))
    path = tmp_path / "mutant.ireeprof"
    refused = 0
    for mutant in range(MUTANTS):
        blob = bytearray(original)
        for _ in range(int(rng.integers(1, 4))):
            offset = int(rng.choice(offsets))
            name = str(rng.choice(list(FIELDS)))
            value = FIELDS[name](rng, field_of(blob, offset, name))
            set_event(blob, offset, name, value % (1 << 64) if name.endswith(("_ns", "_id", "count")) else value % (1 << 32))
        path.write_bytes(bytes(blob))
        calls, warmup = [(11, 3), (None, 0), (None, 3), (11, 10)][mutant % 4]
        monkeypatch.setattr(ireeprof_stream, "HOST_EVENTS_WINDOW", int(rng.choice([1, 2, 3, 5, 8, 1 << 16])))
        windowed = _session_or_error(lambda: read_session(open_source(path, hand_map()), hand_map(), calls=calls,
                                                          warmup=warmup))
        whole = _session_or_error(lambda: ProfileSession.build(
            attribute(read_profile(path), hand_map(), calls=calls, warmup=warmup), hand_map()))
        assert windowed == whole, f"mutant {mutant}"
        refused += windowed.startswith("error: ")
    assert 0 < refused < MUTANTS  # both kinds were made


def test_a_warmup_events_huge_tile_count_leaves_the_measured_calls_tiles_alone(plain_run, tmp_path, monkeypatch):
    """A warmup event's tile count near 2**63 was once summed and subtracted back out of float64 totals
    (Embedding 0 tiles instead of 10): warmup events are dropped before any sum now."""
    blob = bytearray(plain_run[1].read_bytes())
    set_event(blob, event_offsets(bytes(blob), DISPATCH)[0], "tile_count", (1 << 63) - 1)
    path = tmp_path / "huge.ireeprof"
    path.write_bytes(bytes(blob))
    plain = read_session(open_source(plain_run[1], hand_map()), hand_map(), calls=11, warmup=3)
    for window in (1, 3, 1 << 16):
        monkeypatch.setattr(ireeprof_stream, "HOST_EVENTS_WINDOW", window)
        session = read_session(open_source(path, hand_map()), hand_map(), calls=11, warmup=3)
        assert session.tiles == plain.tiles and [row.tiles for row in session.sections] == [
            row.tiles for row in plain.sections]
        assert [row.cpu_ns for row in session.sections] == [row.cpu_ns for row in plain.sections]


@pytest.mark.parametrize("window", [1, 4, 1 << 16])
def test_pipelined_submissions_overlapping_the_warmup_are_measured_as_one_window_measures_them(
        plain_run, tmp_path, monkeypatch, window):
    """The first measured call's submission starts inside the last warmup call's: the warmup's events are out
    of the sweep, as they are when all events are read at once."""
    blob = bytearray(plain_run[1].read_bytes())
    dispatches = event_offsets(bytes(blob), DISPATCH)
    submissions = sorted({field_of(blob, offset, "submission_id") for offset in dispatches})
    fourth = submissions[3]  # the first measured call (3 warmup calls, one submission each)
    previous = [offset for offset in dispatches if field_of(blob, offset, "submission_id") == submissions[2]]
    end = max(field_of(blob, offset, "end_host_time_ns") for offset in previous)
    mine = [offset for offset in dispatches + event_offsets(bytes(blob), EXECUTE)
            if field_of(blob, offset, "submission_id") == fourth]
    first = min(field_of(blob, offset, "start_host_time_ns") for offset in mine)
    shift = first - (end - 100)
    for offset in mine:
        for name in ("start_host_time_ns", "end_host_time_ns"):
            set_event(blob, offset, name, field_of(blob, offset, name) - shift)
    path = tmp_path / "overlapping-warmup.ireeprof"
    path.write_bytes(bytes(blob))
    monkeypatch.setattr(ireeprof_stream, "HOST_EVENTS_WINDOW", window)
    windowed = read_session(open_source(path, hand_map()), hand_map(), calls=11, warmup=3)
    whole = ProfileSession.build(attribute(read_profile(path), hand_map(), calls=11, warmup=3), hand_map())
    assert json.dumps(to_json(windowed), sort_keys=True) == json.dumps(to_json(whole), sort_keys=True)
