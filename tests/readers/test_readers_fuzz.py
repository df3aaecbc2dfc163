"""Fuzzing the readers against independent oracles: the right result or one error line, never a wrong table.

Mutants of a real profile (bundle fields and bytes, JSONL rows and fields), of
a module embedding its section map, and of an input array. For every mutant:

* an error is a SectionmarkError of one line, never another exception;
* a profile that is accepted must give exactly what an independent oracle
  computes from the same mutant: `iree-profile export` of the mutated bundle
  decoded in plain Python (tiny_profiles.section_oracle: measured calls and
  each section's exclusive time). Mutations in bytes sectionmark never reads
  (chunks documented as irrelevant, record names, unused fields) are undone
  for the oracle;
  when IREE still refuses the mutant, the mutation touched bytes that carry no
  attributed data, so the result must be the baseline's. A JSONL mutant is
  its own export: the oracle reads its rows;
* a module that is accepted as a map must give the baseline map exactly (the
  embedded map is checksummed, so no mutation may rename a section).

A mutation that changes a timestamp to another plausible value changes the
table and the oracle alike: profiles carry no checksum (docs/limitations.md).
Section-map JSON mutations are fuzzed in tests/foundation/test_section_map.py.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import bundle_layout as layout
import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from invariants import assert_profile_invariants
from tiny_profiles import Inconsistent, export_rows, section_oracle

import sectionmark.workflows.measure as profiling
from sectionmark.artifacts import read_section_map
from sectionmark.errors import SectionmarkError
from sectionmark.readers import bundle_records
from sectionmark.workflows.inputs import load_input_array
from sectionmark.profiling.session import ProfileSession

pytest.importorskip("iree.compiler")

WARMUP = 3
DISPATCH = 2  # host execution event type
FUZZ = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                        HealthCheck.too_slow])
BOUNDARY = [0, 1, 2, 3, 7, 11, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**62, 2**63 - 1, 2**63, 2**64 - 1]
_names = itertools.count()


@pytest.fixture(scope="module")
def fuzz_map(compiled_two_matmuls):
    """The map sectionmark compiled for TWO_MATMULS (with its fingerprint), for the plain profile of it."""
    return compiled_two_matmuls[0].section_map


@pytest.fixture(scope="module")
def baseline(plain_run, fuzz_map) -> ProfileSession:
    session = profiling.report(plain_run[1], fuzz_map, warmup=WARMUP)
    assert_profile_invariants(session)
    return session


def report_or_error(path, section_map):
    """The session, or None after checking the error is one line."""
    try:
        session = profiling.report(path, section_map, warmup=WARMUP)
    except SectionmarkError as error:
        assert str(error) and "\n" not in str(error)
        event("refused")
        return None
    assert_profile_invariants(session)
    return session


def assert_oracle(session: ProfileSession, rows: list[dict], section_map) -> None:
    try:
        calls, totals = section_oracle(rows, section_map, WARMUP)
    except Inconsistent as why:
        raise AssertionError(f"a table was made from an inconsistent profile: {why}") from None
    assert session.calls == calls
    assert session.total_ns == pytest.approx(sum(totals.values()), rel=1e-12, abs=0.5)
    for path in set(totals) | {row.path for row in session.sections if row.exclusive_ns}:
        row = session.unmarked if path == () else session.section(path)
        assert row.exclusive_ns == pytest.approx(totals.get(path, 0.0), rel=1e-9, abs=1e-6), path


# ---------------------------------------------------------------------------- .ireeprof


def mutate_bundle(data: st.DataObject, original: bytes) -> bytes:
    """1-4 field or byte corruptions of a bundle, sometimes truncated.

    Fields are drawn from all records, from host execution events, and from
    dispatch timestamps (plausible shifts change the table and the oracle alike).
    """
    blob = bytearray(original)
    spans = layout.field_spans(original)
    fields = layout.HOST_EXECUTION_EVENT[1]
    events = layout.fixed_records(original, "host-execution-events")
    event_spans = [(base + at, width) for base in events for at, width in fields.values()]
    timing_spans = [(base + fields[name][0], 8) for base in events if layout.read(original, base + 4, 4) == DISPATCH
                    for name in ("start_host_time_ns", "end_host_time_ns")]
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        if data.draw(st.integers(0, 3), label="kind") == 0:
            blob[data.draw(st.integers(0, len(blob) - 1), label="byte")] = data.draw(st.integers(0, 255))
            continue
        offset, size = data.draw(st.sampled_from(spans) | st.sampled_from(event_spans) | st.sampled_from(timing_spans),
                                 label="field")
        current = layout.read(blob, offset, size)
        same_size = [span for span in spans if span[1] == size]
        value = data.draw(st.one_of(
            st.sampled_from(BOUNDARY),
            st.integers(-1000, 1000).map(lambda delta: current + delta),
            st.sampled_from(same_size).map(lambda span: layout.read(original, *span)),
            st.integers(0, (1 << (8 * size)) - 1),
        ), label="value")
        layout.write(blob, offset, size, value)
    if data.draw(st.integers(0, 9), label="truncate?") == 0:
        del blob[data.draw(st.integers(0, len(blob) - 1), label="length"):]
    return bytes(blob)


# The fields sectionmark's bundle reader reads (readers/bundle_records.py's layouts); no other byte can change
# its result.
READ_FIELDS = {
    "file": {"magic", "version_major", "header_length", "file_length"},
    "record": {"record_length", "payload_length", "header_length", "content_type_length", "name_length",
               "physical_device_ordinal", "queue_ordinal", "chunk_flags", "dropped_record_count",
               "session_status_code", "record_type"},
    "content_type": {""},
    "host-execution-events": {"record_length", "type", "status_code", "event_id", "submission_id",
                              "command_buffer_id", "executable_id", "stream_id", "physical_device_ordinal",
                              "queue_ordinal", "command_index", "export_ordinal", "start_host_time_ns",
                              "end_host_time_ns", "payload_length", "tile_duration_sum_ns"},
    "command-operations": {"record_length", "type", "flags", "command_index", "command_buffer_id", "executable_id",
                           "export_ordinal", "workgroup_count_x", "workgroup_count_y", "workgroup_count_z"},
    "command-buffers": {"record_length", "command_buffer_id"},
    "memory-events": {"record_length", "type", "flags", "event_id", "host_time_ns", "allocation_id", "pool_id",
                      "submission_id", "physical_device_ordinal", "length", "pool_bytes_reserved"},
    "executable-functions": {"record_length", "executable_id", "function_ordinal", "name_length", "name"},
    # read only in a device-timed (Vulkan) profile: docs/gpu.md
    "dispatch-events": {"record_length", "flags", "event_id", "submission_id", "command_buffer_id", "executable_id",
                        "command_index", "export_ordinal", "start_tick", "end_tick"},
    "clock-correlations": {"record_length", "flags", "physical_device_ordinal", "device_tick",
                           "host_cpu_timestamp_ns", "host_time_begin_ns", "host_time_end_ns"},
    "queue-events": {"record_length", "type", "submission_id", "command_buffer_id", "host_time_ns"},
}


def test_read_fields_name_the_chunks_the_reader_uses():
    assert set(READ_FIELDS) - {"file", "record", "content_type"} == set(bundle_records.USED_CHUNKS)


def without_unread_mutations(path: Path, original: bytes) -> Path:
    """The mutant with the bytes sectionmark never reads put back (chunks it documents as irrelevant,
    record names, fields it does not use), so that IREE's decoder can be the oracle for the rest."""
    mutant = bytearray(path.read_bytes())
    if len(mutant) == len(original):
        for position in layout.unread_positions(original, READ_FIELDS):
            mutant[position] = original[position]
    repaired = path.with_suffix(".repaired.ireeprof")
    repaired.write_bytes(bytes(mutant))
    return repaired


@FUZZ
@given(data=st.data())
def test_bundle_mutants_match_iree_profile_export_or_fail(plain_run, fuzz_map, baseline, tmp_path, data):
    path = tmp_path / "fuzz.ireeprof"
    path.write_bytes(mutate_bundle(data, plain_run[1].read_bytes()))
    session = report_or_error(path, fuzz_map)
    if session is None:
        return
    rows = export_rows(path) or export_rows(without_unread_mutations(path, plain_run[1].read_bytes()))
    if rows is None:
        event("accepted, IREE refuses it: the baseline")
        assert session.to_json() == baseline.to_json()
    else:
        event("accepted: as iree-profile export" + (" (baseline)" if session.to_json() == baseline.to_json() else ""))
        assert_oracle(session, rows, fuzz_map)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_plausible_time_shifts_are_read_as_iree_profile_reads_them(plain_run, fuzz_map, baseline, tmp_path, data):
    """Shifting dispatch starts later (within the dispatch) leaves a consistent profile: no false refusal."""
    blob = bytearray(plain_run[1].read_bytes())
    fields = layout.HOST_EXECUTION_EVENT[1]
    dispatches = [base for base in layout.fixed_records(bytes(blob), "host-execution-events")
                  if layout.read(blob, base + 4, 4) == DISPATCH]
    for base in data.draw(st.lists(st.sampled_from(dispatches), min_size=1, max_size=4, unique=True), label="events"):
        start, end = (layout.read(blob, base + fields[name][0], 8) for name in ("start_host_time_ns", "end_host_time_ns"))
        layout.write(blob, base + fields["start_host_time_ns"][0], 8, data.draw(st.integers(start, end), label="start"))
    path = tmp_path / "shifted.ireeprof"
    path.write_bytes(bytes(blob))
    session = profiling.report(path, fuzz_map, warmup=WARMUP)
    assert_profile_invariants(session)
    assert_oracle(session, export_rows(path), fuzz_map)
    event("as iree-profile export" + (" (baseline)" if session.to_json() == baseline.to_json() else ""))


# ---------------------------------------------------------------------------- ireeperf-jsonl


@pytest.fixture(scope="module")
def exported_lines(plain_run) -> list[str]:
    rows = export_rows(plain_run[1])
    assert rows is not None
    return [json.dumps(row) for row in rows]


OTHER_VALUES = st.one_of(st.none(), st.booleans(), st.sampled_from(BOUNDARY), st.integers(-2**70, 2**70),
                         st.floats(allow_nan=False), st.text(max_size=8), st.lists(st.integers(0, 9), max_size=3))


def mutate_lines(data: st.DataObject, original: list[str]) -> list[str]:
    lines = list(original)
    original_rows = [json.loads(line) for line in original]
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        index = data.draw(st.integers(0, len(lines) - 1), label="line")
        action = data.draw(st.sampled_from(["drop", "duplicate", "swap", "garble", "field", "field", "field"]))
        if action == "drop":
            del lines[index]
        elif action == "duplicate":
            lines.insert(index, lines[index])
        elif action == "swap":
            other = data.draw(st.integers(0, len(lines) - 1), label="other line")
            lines[index], lines[other] = lines[other], lines[index]
        elif action == "garble":
            lines[index] = data.draw(st.text(max_size=40), label="text")
        else:
            try:
                row = json.loads(lines[index])
            except ValueError:
                continue
            if not isinstance(row, dict) or not row:
                continue
            field = data.draw(st.sampled_from(sorted(row)), label="field")
            peers = [peer[field] for peer in original_rows
                     if peer.get("record_type") == row.get("record_type") and field in peer]
            current = row[field]
            row[field] = data.draw(st.one_of(
                OTHER_VALUES,
                st.sampled_from(peers) if peers else OTHER_VALUES,
                st.integers(-3, 3).map(lambda delta: current + delta if type(current) is int else current),
            ), label="value")
            lines[index] = json.dumps(row)
        if not lines:
            break
    return lines


@FUZZ
@given(data=st.data())
def test_jsonl_mutants_match_their_own_rows_or_fail(exported_lines, fuzz_map, tmp_path, data):
    lines = mutate_lines(data, exported_lines)
    path = tmp_path / "fuzz.jsonl"
    path.write_text("\n".join(lines), encoding="utf-8", errors="surrogatepass")
    session = report_or_error(path, fuzz_map)
    if session is None:
        return
    rows = [json.loads(line) for line in lines if line.strip()]  # accepted: every line must be JSON
    event("accepted: as its rows" + (" (baseline)" if lines == exported_lines else ""))
    assert_oracle(session, rows, fuzz_map)


# ---------------------------------------------------------------------------- .vmfb as a map


@pytest.fixture(scope="module")
def embedded_map_span(compiled_two_matmuls) -> tuple[int, int]:
    """Where the checksummed map text lies in the module: the reflection value after its key."""
    data = compiled_two_matmuls[1].read_bytes()
    start = data.index(b'{"version":2') - 65  # 64 hex digits of SHA-256 and a space before the JSON
    return start, data.index(b"}", data.rindex(b'"target"')) + 1


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_module_mutants_give_the_same_map_or_fail(compiled_two_matmuls, embedded_map_span, tmp_path, data):
    compiled, original = compiled_two_matmuls
    blob = bytearray(original.read_bytes())
    in_map = st.integers(*embedded_map_span)
    for _ in range(data.draw(st.integers(1, 6), label="mutations")):
        position = data.draw(st.one_of(in_map, st.integers(0, len(blob) - 1)), label="byte")
        blob[position] = data.draw(st.integers(0, 255), label="value")
    if data.draw(st.integers(0, 9), label="truncate?") == 0:
        del blob[data.draw(st.integers(0, len(blob) - 1), label="length"):]
    path = tmp_path / f"fuzz{next(_names)}.vmfb"  # a new file each time: the runtime maps it
    path.write_bytes(bytes(blob))
    try:
        section_map = read_section_map(path)
    except SectionmarkError as error:
        assert str(error) and "\n" not in str(error)
        event("refused")
    else:
        event("accepted: the same map")
        assert section_map == compiled.section_map
    finally:
        path.unlink()


# ---------------------------------------------------------------------------- .npy inputs


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_input_mutants_load_whole_or_fail(tmp_path, data):
    original = tmp_path / "x.npy"
    np.save(original, np.arange(12, dtype=np.float32).reshape(3, 4))
    blob = bytearray(original.read_bytes())
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        position = data.draw(st.integers(0, 140), label="byte")  # header (128 bytes) and the first values
        blob[position] = data.draw(st.integers(0, 255), label="value")
    blob = blob[: data.draw(st.integers(0, len(blob)), label="length")]
    path = tmp_path / "mutant.npy"
    path.write_bytes(bytes(blob))
    try:
        array = load_input_array(path)
    except SectionmarkError as error:
        assert str(error) and "\n" not in str(error)
    else:  # accepted: the header describes exactly the data that follows it
        assert array.nbytes == len(blob) - blob.index(b"\n") - 1


@pytest.mark.parametrize("length", [0, 159, 161, 1 << 31])
def test_a_memory_event_of_another_record_length_is_read_through_the_export(plain_run, fuzz_map, baseline, tmp_path,
                                                                           length):
    """A memory event's record length unknown to the reader makes it read the file as iree-profile exports it (or
    refuse it in one line) before any window is summed: found only when the windows reach it, it escaped as
    UnsupportedLayout (a saved Hypothesis example of the test above)."""
    original = plain_run[1].read_bytes()
    memory_events = layout.fixed_records(original, "memory-events")
    assert memory_events, "the profile records memory events"
    blob = bytearray(original)
    layout.write(blob, memory_events[len(memory_events) // 2] + layout.MEMORY_EVENT[1]["record_length"][0], 4, length)
    path = tmp_path / "memory-length.ireeprof"
    path.write_bytes(bytes(blob))
    try:
        session = profiling.report(path, fuzz_map, warmup=WARMUP)
    except SectionmarkError as error:  # what iree-profile says of it, in one line
        assert "memory-events" in str(error) and "\n" not in str(error)
        return
    assert_profile_invariants(session)
    assert_oracle(session, export_rows(path), fuzz_map)
