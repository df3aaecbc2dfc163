"""One read path: a profile read in windows of any size gives the session of the same events read at once."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Optional

import numpy as np
import pytest
from test_ireeprof_fast import swapped_dispatches
from test_readers import ALLOCA, BUNDLE_CASES, DISPATCH, EXECUTE, event_offsets, field_of, set_event
from tiny_profiles import hand_map

from sectionmark.errors import SectionmarkError
from sectionmark.profiling import native as profiling_native
from sectionmark.profiling.attribute import attribute
from sectionmark.profiling.queue_time import measured_windows
from sectionmark.profiling.read import attributed_totals, read_session
from sectionmark.profiling.section_time import fold_events
from sectionmark.profiling.session import ProfileSession
from sectionmark.profiling.timeline import session_timelines
from sectionmark.readers import event_model, ireeprof_bundle, ireeprof_stream
from sectionmark.readers.bundle_events import open_bundle
from sectionmark.readers.bundle_records import UnsupportedLayout
from sectionmark.readers.event_model import native
from sectionmark.readers.ireeprof_stream import DispatchStream
from sectionmark.readers.ireeprof import read_profile
from sectionmark.readers.sources import WholeProfile, open_source
from sectionmark.readers.ireeprof_stream import FirstPass
from sectionmark.serialization import to_json
from sectionmark.workflows.measure import report


def whole(path, calls, warmup) -> ProfileSession:
    """The session of the profile's events held in memory: one window."""
    return ProfileSession.build(attribute(read_profile(path), hand_map(), calls=calls, warmup=warmup), hand_map())


def windowed(path, calls, warmup) -> ProfileSession:
    return read_session(open_source(path, hand_map()), hand_map(), calls=calls, warmup=warmup)


def as_json(session: ProfileSession) -> str:
    return json.dumps(to_json(session), sort_keys=True)


@pytest.mark.parametrize("passes", ["C", "numpy"])
@pytest.mark.parametrize("window", [1, 3, 7, 1 << 16])
@pytest.mark.parametrize("calls, warmup", [(None, 0), (None, 3), (11, 3), (11, 10)])
def test_windows_of_any_size_give_the_same_session_and_events(plain_run, monkeypatch, passes, window, calls, warmup):
    """plain_run: 3 warmup + 8 calls of two dispatches; windows cut submissions and calls anywhere (a warmup of
    10 calls reaches across many windows); the C passes and their numpy twins."""
    if passes == "numpy":
        monkeypatch.setattr(event_model, "_native", None)
    elif native() is None:
        pytest.skip("the C extension is not built (setup.py)")
    monkeypatch.setattr(ireeprof_stream, "HOST_EVENTS_WINDOW", window)
    path = plain_run[1]
    source = open_source(path, hand_map())
    assert not isinstance(source, WholeProfile)  # read in windows
    session = read_session(source, hand_map(), calls=calls, warmup=warmup)
    expected = whole(path, calls, warmup)
    assert session.attribution is None  # no events kept
    assert as_json(session) == as_json(expected)
    assert np.array_equal(session.per_call_busy, expected.per_call_busy)
    run = report(path, hand_map(), calls=calls, warmup=warmup)
    events, kept = run.events(), expected.attribution  # read from the file when a view asks: the same rows
    assert events.events.tobytes() == kept.events.tobytes()
    assert events.event_slots.tolist() == kept.event_slots.tolist()
    assert events.event_calls.tolist() == kept.event_calls.tolist()


def test_a_report_imports_no_masked_arrays(plain_run):
    """A cold `sectionmark report` spends no time importing numpy.ma (tens of ms, the statistics' np.percentile
    imported it through np.unique): nothing of the report needs it."""
    import subprocess
    import sys

    code = ("import sys; from sectionmark.workflows.measure import report; from tiny_profiles import hand_map; "
            f"report({str(plain_run[1])!r}, hand_map(), calls=11, warmup=3).table(); print('numpy.ma' in sys.modules)")
    helpers = Path(__file__).parents[1] / "helpers"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join([*sys.path, str(helpers)])})
    assert result.returncode == 0 and result.stdout.split() == ["False"], result.stderr


def mapped_kb(path: Path) -> Optional[int]:
    """The resident kB of this process's mappings of the file ``path`` (/proc/self/smaps; None: not mapped)."""
    total, inside = None, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and not fields[0].endswith(":"):  # a mapping's first line: address range ... path
            inside = fields[-1] == str(path)
        elif inside and fields[0] == "Rss:":
            total = (total or 0) + int(fields[1])
    return total


def layout_of(path: Path, during_walk: bool) -> tuple:
    """The stream's first pass of ``path``: made while the record walk maps the file (`open_bundle` given it as
    its visitor), or after the walk; (its tables, or its error; whether the walk's pass was used; the kB of the
    file still mapped after it)."""
    first_pass = FirstPass() if during_walk else None
    with open(path, "rb") as file:
        try:
            bundle = open_bundle(path, file, os.fstat(file.fileno()).st_size, first_pass and first_pass.visit)
            used = first_pass is not None and first_pass.covers(bundle)
            stream = DispatchStream(bundle, file, first_pass)
            try:
                layout = stream.layout()
                return (layout.submissions.tobytes(), layout.queue_ops.tobytes()), used, mapped_kb(path)
            finally:
                stream.close()
        except (SectionmarkError, UnsupportedLayout) as error:
            return f"{type(error).__name__}: {error}", None, None


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="Linux's /proc/self/smaps")
@pytest.mark.parametrize("during_walk", [True, False])
def test_the_first_pass_leaves_no_page_of_the_file_mapped(plain_run, during_walk):
    """The first pass (`layout`) gives back every page it mapped, those of the memory events between the host events
    too (their lengths checked with the host events around them): checked after the pass, they were mapped in
    again and kept, the whole file of a long profile in the RSS. (One window: the kernel maps a page's
    neighbours in with it, so a window's pages given back come in again with the next window's of a small file.)"""
    tables, used, mapped = layout_of(plain_run[1].resolve(), during_walk)
    assert used == during_walk and mapped == 0  # mapped (not None), no page resident


@pytest.mark.parametrize("case", ["none", *sorted(BUNDLE_CASES)])
def test_the_first_pass_made_during_the_walk_is_the_pass_after_it(plain_run, tmp_path, case):
    """The executions and queue operations the first pass finds while the record walk maps the file are those of
    the pass after the walk, and a file one refuses the other refuses with the same error (corrupt bundles:
    the visits' findings are not used, or the walk's error comes first)."""
    path = tmp_path / "run.ireeprof"
    path.write_bytes(plain_run[1].read_bytes() if case == "none" else BUNDLE_CASES[case][0](plain_run[1].read_bytes()))
    during, used, _ = layout_of(path, True)
    after, _, _ = layout_of(path, False)
    assert during == after
    if case == "none":
        assert used  # the walk's pass, not a second one


@pytest.mark.parametrize("case", ["none", *sorted(BUNDLE_CASES)])
def test_the_first_pass_in_c_finds_what_its_numpy_twin_finds(plain_run, tmp_path, monkeypatch, case):
    """The first pass's executions and queue operations split and decoded by the C passes (`not_dispatches`, then
    `host_events` on the records found) are the rows numpy gathers field by field, and a file one refuses the
    other refuses alike (the windows compare their own rows with these: any byte apart reads as a changed file)."""
    if native() is None:
        pytest.skip("the C extension is not built (setup.py)")
    path = tmp_path / "run.ireeprof"
    path.write_bytes(plain_run[1].read_bytes() if case == "none" else BUNDLE_CASES[case][0](plain_run[1].read_bytes()))
    with_c = [layout_of(path, during_walk)[0] for during_walk in (True, False)]
    monkeypatch.setattr(event_model, "_native", None)
    assert [layout_of(path, during_walk)[0] for during_walk in (True, False)] == with_c
    if case == "none":
        assert all(len(table) for table in with_c[0])  # executions and queue operations both found


def test_report_draws_timelines_from_the_file_and_refuses_a_changed_one(plain_run, tmp_path):
    run = report(plain_run[1], hand_map(), calls=11, warmup=3)
    assert run.session.attribution is None and session_timelines(run.session, run.events())
    assert run.table() == run.session.table() and run.sections == run.session.sections
    shutil.copy(plain_run[1], tmp_path / "run.ireeprof")
    later = report(tmp_path / "run.ireeprof", hand_map(), calls=11, warmup=3)
    with open(tmp_path / "run.ireeprof", "ab") as file:
        file.write(b"\0")
    with pytest.raises(SectionmarkError, match="changed or went away since it was read"):
        later.events()
    with pytest.raises(SectionmarkError, match="changed or went away since it was read"):
        later.render("perfetto")
    assert later.render("table") == run.render("table")  # the figures need no event


def _moved(plain_run, tmp_path, name, move) -> Path:
    """plain_run's profile with each dispatch's start (and end) moved by ``move(blob, offset, previous offset)``."""
    blob = bytearray(plain_run[1].read_bytes())
    offsets = event_offsets(bytes(blob), DISPATCH)
    for previous, offset in zip(offsets, offsets[1:]):
        move(blob, offset, previous)
    path = tmp_path / name
    path.write_bytes(bytes(blob))
    return path


@pytest.mark.parametrize("window", [2, 5, 1 << 16])
def test_overlapping_dispatches_give_the_same_walls_and_unions(plain_run, tmp_path, monkeypatch, window):
    """Each submission's second dispatch moved to start inside its first (as concurrent dispatches run on
    local-task): the wall sweep and the call's dispatch union per window, as one window gives them."""
    def overlap(blob, second, first):
        if field_of(blob, first, "submission_id") == field_of(blob, second, "submission_id"):
            start, end = field_of(blob, first, "start_host_time_ns"), field_of(blob, first, "end_host_time_ns")
            set_event(blob, second, "start_host_time_ns", (start + end) // 2)
    path = _moved(plain_run, tmp_path, "overlapping.ireeprof", overlap)
    monkeypatch.setattr(ireeprof_stream, "HOST_EVENTS_WINDOW", window)
    session, expected = windowed(path, 11, 3), whole(path, 11, 3)
    assert expected.wall_ns < expected.total_ns  # overlaps: wall below busy
    assert as_json(session) == as_json(expected)


@pytest.mark.parametrize("window", [1, 2, 5, 1 << 16])
def test_submissions_overlapping_in_time_are_read_in_windows_too(plain_run, tmp_path, monkeypatch, window):
    """Pipelined calls: each submission's execution and dispatches moved to start inside the one before (a
    call's submission overlapping the next one's), so union blocks reach across windows: the sweep is carried
    over, and every figure is the one window's."""
    blob = bytearray(plain_run[1].read_bytes())
    executions = event_offsets(bytes(blob), EXECUTE)
    dispatches = event_offsets(bytes(blob), DISPATCH)
    by_submission: dict[int, list[int]] = {}
    for offset in dispatches + executions:
        by_submission.setdefault(field_of(blob, offset, "submission_id"), []).append(offset)
    previous_last = None  # (start, end) of the previous submission's last dispatch, once moved
    for submission in sorted(by_submission):
        records = by_submission[submission]
        mine = [offset for offset in records if offset in dispatches]
        if previous_last is not None and mine:
            first = min(field_of(blob, offset, "start_host_time_ns") for offset in mine)
            shift = first - (previous_last[0] + previous_last[1]) // 2  # starts inside that dispatch
            for offset in records:
                for name in ("start_host_time_ns", "end_host_time_ns"):
                    set_event(blob, offset, name, field_of(blob, offset, name) - shift)
        if mine:
            last = max(mine, key=lambda offset: field_of(blob, offset, "end_host_time_ns"))
            previous_last = (field_of(blob, last, "start_host_time_ns"), field_of(blob, last, "end_host_time_ns"))
    path = tmp_path / "pipelined.ireeprof"
    path.write_bytes(bytes(blob))
    monkeypatch.setattr(ireeprof_stream, "HOST_EVENTS_WINDOW", window)
    session, expected = windowed(path, 11, 3), whole(path, 11, 3)
    assert as_json(session) == as_json(expected)
    assert expected.wall_ns < expected.total_ns


def crowded(plain_run, tmp_path) -> Path:
    """plain_run's profile with its submissions' times written anew, four at a time overlapping (their
    executions too, around their dispatches): each submission's two dispatches last 333 and 777 ns, back to back,
    the next submission of its group starting 113 ns after it, the next group 10 us after the group before (each
    group a union block of its own). Three and four dispatches run at once: parts of thirds and quarters, which
    float64 rounds."""
    blob = bytearray(plain_run[1].read_bytes())
    dispatches = event_offsets(bytes(blob), DISPATCH)
    base = min(field_of(blob, offset, "start_host_time_ns") for offset in dispatches)
    by_submission: dict[int, list[int]] = {}
    for offset in dispatches:
        by_submission.setdefault(field_of(blob, offset, "submission_id"), []).append(offset)
    assert all(len(offsets) == 2 for offsets in by_submission.values())  # TWO_MATMULS: two dispatches a call
    starts = {}
    for rank, submission in enumerate(sorted(by_submission)):
        start = starts[submission] = base + rank // 4 * 10000 + rank % 4 * 113
        for offset, (begin, end) in zip(by_submission[submission], [(0, 333), (333, 1110)]):
            set_event(blob, offset, "start_host_time_ns", start + begin)
            set_event(blob, offset, "end_host_time_ns", start + end)
    for offset in event_offsets(bytes(blob), EXECUTE):
        start = starts[field_of(blob, offset, "submission_id")]
        set_event(blob, offset, "start_host_time_ns", start - 1)
        set_event(blob, offset, "end_host_time_ns", start + 1111)
    path = tmp_path / "crowded.ireeprof"
    path.write_bytes(bytes(blob))
    return path


@pytest.mark.parametrize("passes", ["C", "numpy"])
def test_several_submissions_at_once_give_the_whole_read_s_walls_to_the_bit(plain_run, tmp_path, monkeypatch,
                                                                             passes):
    """Three and four dispatches at once in each union block (`crowded`): their wall parts are thirds and quarters,
    which float64 rounds. Cut into windows of any size, each block's parts and their sums are the whole read's to
    the bit (the sweep started its prefix from 0 at each window's blocks and summed each window's apart: here a
    section's wall rounded to another nanosecond in windows of 1 to 3 host events than read whole)."""
    if passes == "numpy":
        monkeypatch.setattr(event_model, "_native", None)
        monkeypatch.setattr(profiling_native, "_passes", None)
    elif native() is None or profiling_native.native_passes() is None:
        pytest.skip("the C extensions are not built (setup.py)")
    path = crowded(plain_run, tmp_path)
    attribution = attribute(read_profile(path), hand_map(), calls=11, warmup=3)
    expected = fold_events(attribution, measured_windows(attribution.queue_spans, attribution.calls))
    assert not expected.sums.disjoint and expected.wall.tobytes() != np.round(expected.wall).tobytes()  # fractions
    for window in (1, 2, 3, 4, 5, 6, 1 << 16):
        monkeypatch.setattr(ireeprof_stream, "HOST_EVENTS_WINDOW", window)
        assert as_json(windowed(path, 11, 3)) == as_json(ProfileSession.build(attribution, hand_map())), window
        _, totals = attributed_totals(open_source(path, hand_map()), hand_map(), calls=11, warmup=3, function=None)
        assert (totals.wall.tobytes(), totals.total_wall) == (expected.wall.tobytes(), expected.total_wall), window


def test_dispatches_written_out_of_order_give_the_same_session(plain_run, tmp_path, monkeypatch):
    """Two records swapped: their event ids no longer increase; they are still unique, so the file is read."""
    path = swapped_dispatches(plain_run, tmp_path)
    for window in (1, 2, 3, 4, 5, 1 << 16):  # the two in one window, or the first pending when the second comes
        monkeypatch.setattr(ireeprof_stream, "HOST_EVENTS_WINDOW", window)
        assert as_json(windowed(path, 11, 3)) == as_json(whole(path, 11, 3))


@pytest.mark.parametrize("passes", ["C", "numpy"])
def test_windows_give_dispatches_written_out_of_order_sorted(plain_run, tmp_path, monkeypatch, passes):
    """Two dispatches of one submission written in the other order, in one window or the first one pending when
    the second comes: each window's dispatches come sorted (the C pass's order of the rows it added, known
    without a pass over them, checked where they meet the pending ones), as the whole read sorts them."""
    if passes == "numpy":
        monkeypatch.setattr(event_model, "_native", None)
    elif native() is None:
        pytest.skip("the C extension is not built (setup.py)")
    path = swapped_dispatches(plain_run, tmp_path)
    expected = read_profile(path).dispatches
    for window in (1, 2, 3, 4, 5, 1 << 16):
        monkeypatch.setattr(ireeprof_stream, "HOST_EVENTS_WINDOW", window)
        source = open_source(path, hand_map())
        source.layout()
        parts = [dispatches.copy() for dispatches, _ in source.windows()]
        assert np.concatenate(parts).tobytes() == expected.tobytes(), window


def _each_submission_s_dispatches(edit):
    """An edit of plain_run's profile calling ``edit(blob, first, second)`` with the offsets of each submission's
    two dispatch records, in file order."""
    def edited(blob: bytearray) -> None:
        offsets = event_offsets(bytes(blob), DISPATCH)
        for first, second in zip(offsets, offsets[1:]):
            if field_of(blob, first, "submission_id") == field_of(blob, second, "submission_id"):
                edit(blob, first, second)
    return edited


def _swap(blob: bytearray, first: int, second: int) -> None:
    size = 152
    blob[first : first + size], blob[second : second + size] = blob[second : second + size], blob[first : first + size]


def _tie(blob: bytearray, first: int, second: int) -> None:
    set_event(blob, second, "start_host_time_ns", field_of(blob, first, "start_host_time_ns"))


ORDER_EDITS = {
    "ties": _each_submission_s_dispatches(_tie),  # equal starts: file order kept
    "reversed": _each_submission_s_dispatches(_swap),  # every submission's later dispatch written first
    "reversed ties": _each_submission_s_dispatches(lambda blob, first, second: (_tie(blob, first, second),
                                                                                 _swap(blob, first, second))),
}


@pytest.mark.parametrize("passes", ["C", "numpy"])
@pytest.mark.parametrize("edit", sorted(ORDER_EDITS))
def test_windows_sort_every_submission_s_dispatches_as_the_whole_read(plain_run, tmp_path, monkeypatch, passes, edit):
    """Every submission's dispatches tied in start, or written in the other order, or both (ties keep the order
    they were written in): in windows of 1 to 6 host events a submission's dispatches are cut between the pending
    rows and those a window adds, anywhere; the windows give the whole read's rows in its order, and its session."""
    if passes == "numpy":
        monkeypatch.setattr(event_model, "_native", None)
    elif native() is None:
        pytest.skip("the C extension is not built (setup.py)")
    blob = bytearray(plain_run[1].read_bytes())
    ORDER_EDITS[edit](blob)
    path = tmp_path / "edited.ireeprof"
    path.write_bytes(bytes(blob))
    expected = read_profile(path).dispatches
    session = as_json(whole(path, 11, 3))
    for window in (1, 2, 3, 4, 5, 6, 1 << 16):
        monkeypatch.setattr(ireeprof_stream, "HOST_EVENTS_WINDOW", window)
        source = open_source(path, hand_map())
        source.layout()
        parts = [dispatches.copy() for dispatches, _ in source.windows()]
        assert np.concatenate(parts).tobytes() == expected.tobytes(), window
        assert as_json(windowed(path, 11, 3)) == session, window


def test_executions_written_out_of_submission_order_give_the_same_session(plain_run, tmp_path, monkeypatch):
    """IREE writes a submission's execution when it ends, so submissions in flight together may be written out of
    order (a JAX cond's): one call's execution moved after the next call's."""
    import bundle_layout

    blob = bytearray(plain_run[1].read_bytes())
    size = 152
    executions = event_offsets(bytes(blob), EXECUTE)
    slots = list(bundle_layout.fixed_records(bytes(blob), "host-execution-events"))  # every host event, in order
    between = slots[slots.index(executions[4]) : slots.index(executions[5]) + 1]  # two measured calls' executions
    contents = [bytes(blob[slot : slot + size]) for slot in between]
    for slot, content in zip(between, contents[1:] + contents[:1]):  # the first execution moved to the end
        blob[slot : slot + size] = content
    path = tmp_path / "out-of-order.ireeprof"
    path.write_bytes(bytes(blob))
    expected = whole(path, 11, 3)
    for window in (1, 2, 4, 1 << 16):
        monkeypatch.setattr(ireeprof_stream, "HOST_EVENTS_WINDOW", window)
        assert as_json(windowed(path, 11, 3)) == as_json(expected)


@pytest.mark.parametrize("window", [1, 3, 1 << 16])
def test_queue_operations_written_out_of_start_order_are_checked_in_their_order(plain_run, tmp_path, monkeypatch,
                                                                                window):
    """The last allocation moved to start before the one written first (the first pass sorts queue operations by
    start): the windows find each one the first pass found, and the file reads as it reads whole."""
    blob = bytearray(plain_run[1].read_bytes())
    allocations = event_offsets(bytes(blob), ALLOCA)
    first, last = allocations[0], allocations[-1]
    length = field_of(blob, last, "end_host_time_ns") - field_of(blob, last, "start_host_time_ns")
    set_event(blob, last, "start_host_time_ns", field_of(blob, first, "start_host_time_ns") - 1)
    set_event(blob, last, "end_host_time_ns", field_of(blob, first, "start_host_time_ns") - 1 + length)
    path = tmp_path / "allocation-moved.ireeprof"
    path.write_bytes(bytes(blob))
    monkeypatch.setattr(ireeprof_stream, "HOST_EVENTS_WINDOW", window)
    assert as_json(windowed(path, 11, 3)) == as_json(whole(path, 11, 3))


@pytest.mark.parametrize("event_type", [EXECUTE, ALLOCA])
@pytest.mark.parametrize("window", [1, 3, 1 << 16])
def test_a_profile_changed_between_the_two_passes_is_refused(plain_run, tmp_path, monkeypatch, event_type, window):
    """The windows read an execution or a queue operation (an allocation) other than the first pass found (the
    file was rewritten in between): one error line, whichever window reads it."""
    path = tmp_path / "changing.ireeprof"
    shutil.copy(plain_run[1], path)
    monkeypatch.setattr(ireeprof_stream, "HOST_EVENTS_WINDOW", window)
    source = open_source(path, hand_map())
    source.layout()  # the first pass
    blob = bytearray(path.read_bytes())
    offset = event_offsets(bytes(blob), event_type)[-1]
    set_event(blob, offset, "end_host_time_ns", field_of(blob, offset, "end_host_time_ns") + 1)
    with open(path, "r+b") as file:  # in place: the open source reads the same file
        file.write(bytes(blob))
    with pytest.raises(SectionmarkError, match="the profile changed while it was read"):
        read_session(source, hand_map(), calls=11, warmup=3)


@pytest.mark.parametrize("passes", ["C", "numpy"])
@pytest.mark.parametrize("case", sorted(BUNDLE_CASES))
def test_a_corrupt_profile_is_refused_with_the_whole_reads_error(plain_run, tmp_path, monkeypatch, case, passes):
    """Any corrupt profile: `report` names the problem exactly as reading its events at once does."""
    if passes == "numpy":
        monkeypatch.setattr(event_model, "_native", None)
    path = tmp_path / "bad.ireeprof"
    path.write_bytes(BUNDLE_CASES[case][0](plain_run[1].read_bytes()))
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


def test_other_formats_are_one_window_of_the_same_events(plain_run, tmp_path):
    """The profile exported as ireeperf-jsonl: read whole by its reader, one window, the same session."""
    import subprocess

    from sectionmark.artifacts.tools import find_tool

    jsonl = tmp_path / "run.jsonl"
    subprocess.run([str(find_tool("iree-profile")), "export", "--format=ireeperf-jsonl", f"--output={jsonl}",
                    str(plain_run[1])], check=True, capture_output=True)
    source = open_source(jsonl, hand_map())
    assert isinstance(source, WholeProfile) and len(list(source.windows())) == 1
    session = read_session(open_source(jsonl, hand_map()), hand_map(), calls=11, warmup=3)
    assert session.total_ns == windowed(plain_run[1], 11, 3).total_ns
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"record_type": "session"}\n')
    with pytest.raises(SectionmarkError):
        open_source(empty, hand_map())


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


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_level_changes_in_c_are_its_numpy_twins(seed, monkeypatch):
    """The memory events changing their pool's level, found in one C pass (`level_changes`) or by numpy, window by
    window from the levels the windows before left: the same events, the same levels after each window (pools
    seen before or not, a dozen new at once, levels past int64's range, events without pool figures)."""
    from sectionmark.readers.event_model import MEMORY_DTYPE, MEMORY_POOL_STATS

    if native() is None:
        pytest.skip("the C extension is not built (setup.py)")
    rng = np.random.default_rng(seed)
    events = np.zeros(300, MEMORY_DTYPE)
    events["time_ns"] = np.cumsum(rng.integers(0, 30, len(events)))
    events["pool"] = rng.choice(np.array([5, 9, 1 << 63, *range(100, 112)], np.uint64), len(events))
    events["flags"] = np.where(rng.random(len(events)) < 0.8, MEMORY_POOL_STATS, 0) | rng.integers(0, 4, len(events))
    events["pool_reserved"] = rng.choice(np.array([0, 4096, 8192, (1 << 64) - 1, 1 << 63], np.uint64), len(events))
    windows = [(begin, begin + size) for begin, size in zip(range(0, 300, 60), rng.integers(1, 60, 5).tolist())]

    def changes() -> list:
        levels = {9: 4096, 7: 0}  # a pool seen before, and one never seen again
        found = []
        for begin, end in windows:
            found.append((ireeprof_stream._level_changes(events[begin:end], levels).tolist(), dict(levels)))
        return found

    with_c = changes()
    monkeypatch.setattr(event_model, "_native", None)
    assert changes() == with_c
    assert any(any(window) for window, _ in with_c) and not all(all(window) for window, _ in with_c)


def test_a_profiled_run_owns_its_profile_until_closed(plain_run, inputs, tmp_path, monkeypatch):
    """sm.profile's run keeps the scratch profile its figures come from, for the views that draw events, in a
    folder of its own: removed by close() or at the end of its with block, never by the garbage collector."""
    import sectionmark as sm

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # this test's own scratch folders

    def scratch_folders() -> set[Path]:
        return set(tmp_path.glob("sectionmark-*"))

    before = scratch_folders()
    run = sm.profile(plain_run[0], inputs, iterations=4, warmup=1, section_map=hand_map(), quiet=True)
    assert isinstance(run, sm.ProfileRun) and run.session.attribution is None
    (folder,) = scratch_folders() - before  # the run's scratch folder went; the folder of its kept profile stays
    assert sorted(path.suffix for path in folder.iterdir()) == [".ireeprof", ".json"]  # the profile, its owner
    assert session_timelines(run.session, run.events()) and len(run.events().events) == 2 * 4
    run.close()
    assert not folder.exists()
    with sm.profile(plain_run[0], inputs, iterations=4, warmup=1, section_map=hand_map(), quiet=True) as run:
        (folder,) = scratch_folders() - before
        assert run.render("perfetto")
    assert not folder.exists()
    assert run.table()  # the figures stay
