"""The profile, map and input readers refuse what they cannot vouch for, with one clear line.

Each case corrupts one thing in a real profile (or module, or input) and
checks the error names it; the per-call logic is checked on the real profile
with its submissions edited in memory. tests/readers/test_readers_fuzz.py checks the
same readers against random corruption.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Callable

import bundle_layout as layout
import numpy as np
import pytest
from invariants import assert_profile_invariants
from tiny_profiles import KEY_0, KEY_1, TWO_MATMULS, export_rows, hand_map

import sectionmark.workflows.measure as profiling
from sectionmark.artifacts import read_section_map
from sectionmark.compiler import compile, embed, pipeline
from sectionmark.errors import SectionmarkError
from sectionmark.profiling.attribute import attribute
from sectionmark.profiling.session import ProfileSession
from sectionmark.workflows.inputs import load_input_array
from sectionmark.readers.event_model import MAX_EVENT_NS, Profile
from sectionmark.readers.ireeprof import read_profile
from sectionmark.section_map import ModuleFingerprint

pytest.importorskip("iree.compiler")
HOST_EVENTS, OPERATIONS = "host-execution-events", "command-operations"


def one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert message and "\n" not in message
    return message


def event_offsets(blob: bytes, event_type: int) -> list[int]:
    size, fields = layout.HOST_EXECUTION_EVENT
    return [base for base in layout.fixed_records(blob, HOST_EVENTS) if layout.read(blob, base + fields["type"][0], 4) == event_type]


def set_event(blob: bytearray, base: int, field: str, value: int) -> None:
    layout.write(blob, base + layout.HOST_EXECUTION_EVENT[1][field][0], layout.HOST_EXECUTION_EVENT[1][field][1], value)


def edit_first(event_type: int, field: str, value: Callable[[bytes, int], int]) -> Callable[[bytes], bytes]:
    """An edit setting ``field`` of the first host event of ``event_type`` to ``value(blob, base)``."""

    def edit(blob: bytes) -> bytes:
        edited = bytearray(blob)
        base = event_offsets(blob, event_type)[0]
        set_event(edited, base, field, value(blob, base))
        return bytes(edited)

    return edit


def field_of(blob: bytes, base: int, field: str) -> int:
    return layout.read(blob, base + layout.HOST_EXECUTION_EVENT[1][field][0], layout.HOST_EXECUTION_EVENT[1][field][1])


def rename_chunk(blob: bytes, content_type: str, new: str) -> bytes:
    record = next(r for r in layout.records(blob) if r.content_type == content_type)
    start = record.offset + layout.RECORD_HEADER_SIZE + len(layout.CONTENT_PREFIX)
    assert len(new) == len(content_type)
    return blob[:start] + new.encode() + blob[start + len(new):]


def set_record_header(field: str, value: int, record_index: int = 1) -> Callable[[bytes], bytes]:
    def edit(blob: bytes) -> bytes:
        edited = bytearray(blob)
        record = layout.records(blob)[record_index]
        at, size = layout.RECORD_HEADER_FIELDS[field]
        layout.write(edited, record.offset + at, size, value)
        return bytes(edited)

    return edit


DISPATCH, EXECUTE, ALLOCA = 2, 3, 9
BUNDLE_CASES = {
    "dispatch failed": (edit_first(DISPATCH, "status_code", lambda b, o: 1), "finished with IREE status code 1"),
    "unknown event type": (edit_first(DISPATCH, "type", lambda b, o: 12), "unknown host execution event type 12"),
    "dispatch turned into an allocation": (edit_first(DISPATCH, "type", lambda b, o: ALLOCA), "events are missing"),
    "huge timestamps": (edit_first(DISPATCH, "start_host_time_ns", lambda b, o: 1 << 62), "impossible timestamps"),
    "negative start": (edit_first(DISPATCH, "start_host_time_ns", lambda b, o: -5), "impossible timestamps"),
    "an event over an hour": (edit_first(DISPATCH, "end_host_time_ns",
                                         lambda b, o: field_of(b, o, "start_host_time_ns") + MAX_EVENT_NS + 1),
                              "more than an hour"),
    "dispatch moved to the next call": (edit_first(DISPATCH, "submission_id",
                                                   lambda b, o: field_of(b, o, "submission_id") + 4),
                                        "runs outside the execution"),
    "dispatch of a submission without execution": (edit_first(DISPATCH, "submission_id", lambda b, o: 10**6),
                                                   "executes no command buffer"),
    "dispatch names another command buffer": (edit_first(DISPATCH, "command_buffer_id", lambda b, o: 7),
                                              "names command buffer 7"),
    "execution of an unrecorded command buffer": (edit_first(EXECUTE, "command_buffer_id", lambda b, o: 7),
                                                  "recording is not in the profile"),
    "executable id beyond 32 bits": (edit_first(DISPATCH, "executable_id", lambda b, o: field_of(
        b, o, "executable_id") + (1 << 32)), "dispatch of unknown executable function 4294967297:0"),
    "dispatch at the other dispatch's index": (edit_first(DISPATCH, "command_index", lambda b, o: 2),
                                               "(submission, command index)"),
    "duplicated event id": (lambda blob: edit_first(DISPATCH, "event_id", lambda b, o: field_of(
        b, event_offsets(b, DISPATCH)[1], "event_id"))(blob), "is recorded twice"),
    "duplicated event chunk": (lambda blob: layout.duplicated(blob, next(
        r for r in layout.records(blob) if r.content_type == HOST_EVENTS)), "is recorded twice"),
    "duplicated memory event chunk": (lambda blob: layout.duplicated(blob, next(
        r for r in layout.records(blob) if r.content_type == "memory-events")), "a memory event"),
    "unknown chunk type": (lambda blob: rename_chunk(blob, HOST_EVENTS, "host-execution-eventz"), "unknown chunk type"),
    "device-timed dispatch events": (lambda blob: layout.with_record(blob, "dispatch-events", b""),
                                     "both host-timed and device-timed"),
    "record after the session end": (lambda blob: layout.with_record(blob, "counters", b"", after_end=True),
                                      "after the session end"),
    "truncated chunk": (set_record_header("chunk_flags", 1), "truncated a chunk"),
    "dropped records": (set_record_header("dropped_record_count", 3), "dropped 3 records"),
    "unknown record type": (set_record_header("record_type", 7), "unknown record type 7"),
    "second session begin": (set_record_header("record_type", 1), "session begin record must come first"),
    "session failed": (set_record_header("session_status_code", 13, record_index=-1), "ended with IREE status code 13"),
}


@pytest.mark.parametrize("case", sorted(BUNDLE_CASES))
def test_corrupt_bundle_is_one_error(plain_run, tmp_path, case):
    edit, message = BUNDLE_CASES[case]
    path = tmp_path / "bad.ireeprof"
    path.write_bytes(edit(plain_run[1].read_bytes()))
    with pytest.raises(SectionmarkError) as error:
        profiling.report(path, hand_map(), warmup=3)
    assert message in one_line(error)


def test_chunks_without_cpu_dispatch_timing_are_skipped(plain_run, tmp_path):
    """Chunk types documented as irrelevant (IGNORED_CHUNKS) do not change the result."""
    baseline = profiling.report(plain_run[1], hand_map(), warmup=3)
    path = tmp_path / "extra.ireeprof"
    path.write_bytes(layout.with_record(plain_run[1].read_bytes(), "counter-samples", b"\x01" * 40))
    again = profiling.report(path, hand_map(), warmup=3)
    assert again.to_json() == baseline.to_json()


def jsonl_lines(plain_run) -> list[dict]:
    rows = export_rows(plain_run[1])
    assert rows is not None
    return rows


def first(rows: list[dict], op: str) -> dict:
    return next(r for r in rows if r["record_type"] == "host_execution_event" and r["op"] == op)


def first_memory(rows: list[dict]) -> dict:
    return next(r for r in rows if r["record_type"] == "memory_event")


def huge_timestamps(rows: list[dict]) -> None:
    row = first(rows, "dispatch")
    row["start_host_time_ns"], row["end_host_time_ns"] = 2**62 + 5, 2**62 + 10
    row["duration_ns"] = 5


def device_timed_row(host: dict) -> dict:
    """A device-timed dispatch event (a Vulkan profile's row) for the same command as a host dispatch event."""
    return {"record_type": "dispatch_event", "physical_device_ordinal": 0, "queue_ordinal": 0, "flags": 1,
            "start_tick": 1, "end_tick": 2, **{name: host[name] for name in (
                "event_id", "submission_id", "command_buffer_id", "command_index", "key")}}


JSONL_CASES = {
    "huge timestamps": (huge_timestamps, "impossible timestamps"),
    "timestamp beyond int64": (lambda rows: first(rows, "dispatch").update(end_host_time_ns=2**64), "must be an integer"),
    "duration disagrees": (lambda rows: first(rows, "dispatch").update(duration_ns=1), "duration_ns differs"),
    "duplicated dispatch row": (lambda rows: rows.append(dict(first(rows, "dispatch"))), "is recorded twice"),
    "duplicated execute row (a phantom call)": (lambda rows: rows.append(dict(first(rows, "execute"))),
                                                "is recorded twice"),
    "duplicated memory event": (lambda rows: rows.append(dict(first_memory(rows))), "a memory event"),
    "memory event type and value disagree": (lambda rows: first_memory(rows).update(event_type="pool_release"),
                                             "does not match its event_type_value"),
    "negative allocation size": (lambda rows: first_memory(rows).update(length=-1), "must be an integer"),
    "unknown record type": (lambda rows: rows.append({"record_type": "mystery"}), "unknown record type 'mystery'"),
    "event status": (lambda rows: first(rows, "dispatch").update(status_code=5), "finished with IREE status code 5"),
    "invalid event": (lambda rows: first(rows, "dispatch").update(valid=False), "marked invalid"),
    "op and type disagree": (lambda rows: first(rows, "dispatch").update(op="alloca"), "does not match its type_value"),
    "device-timed events beside host events": (lambda rows: rows.append(device_timed_row(first(rows, "dispatch"))),
                                               "both host-timed and device-timed"),
    "iree-profile error": (lambda rows: rows.append({"record_type": "diagnostic", "severity": "error",
                                                     "message": "chunk was marked truncated by the producer"}),
                           "chunk was marked truncated"),
    "float index": (lambda rows: first(rows, "dispatch").update(command_index=0.0), "must be an integer"),
    "key of another type": (lambda rows: first(rows, "dispatch").update(key=7), "must be a string"),
}


@pytest.mark.parametrize("case", sorted(JSONL_CASES))
def test_corrupt_jsonl_is_one_error(plain_run, tmp_path, case):
    rows = jsonl_lines(plain_run)
    edit, message = JSONL_CASES[case]
    edit(rows)
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(json.dumps(row) for row in rows), encoding="utf-8")
    with pytest.raises(SectionmarkError) as error:
        profiling.report(path, hand_map(), warmup=3)
    assert message in one_line(error)


@pytest.mark.parametrize("content, message", [
    (b'{"record_type": "device"}\n' + b"\xff\xfe\n", "line 2 is not UTF-8"),
    (b"{" + b" " * (1 << 20) + b"}\n", "longer than"),
])
def test_jsonl_lines_are_utf8_and_bounded(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    with pytest.raises(SectionmarkError) as error:
        read_profile(path)
    assert message in one_line(error)


@pytest.mark.parametrize("target", ["/dev/zero", "directory"])
def test_non_regular_files_are_not_read(tmp_path, target):
    path = tmp_path if target == "directory" else Path(target)
    for read in (read_profile, read_section_map):
        with pytest.raises(SectionmarkError, match="not a regular file") as error:
            read(path)
        one_line(error)


# ---------------------------------------------------------------------------- calls


@pytest.fixture(scope="module")
def real_profile(plain_run) -> Profile:
    return read_profile(plain_run[1])


def with_odd_submission(profile: Profile, position: int) -> Profile:
    """The profile with submission ``position`` executing a command buffer of other commands."""
    submissions = profile.submissions.copy()
    submissions["command_buffer"][position] = 77
    buffers = {**profile.command_buffers, 77: [(0, "fill", None)]}
    return dataclasses.replace(profile, submissions=submissions, command_buffers=buffers)


def test_calls_are_the_repeating_submissions(real_profile):
    attribution = attribute(real_profile, hand_map(), warmup=3)
    assert (attribution.calls, attribution.warmup, attribution.calls_known) == (8, 3, True)
    assert sorted(set(attribution.event_calls.tolist())) == list(range(8))


def test_attribution_keeps_the_profiles_dispatch_rows_of_the_measured_calls_without_copying_them(real_profile):
    """The measured calls' events are the profile's rows after the warmup's (a view: no second table of rows),
    each with its slot and call; `select` keeps the three together."""
    attribution = attribute(real_profile, hand_map(), warmup=3)
    dispatches = real_profile.dispatches
    warmup_rows = len(dispatches) - len(attribution.events)
    assert warmup_rows == 3 * len(dispatches) // 11 and np.shares_memory(attribution.events, dispatches)
    assert attribution.events.tobytes() == dispatches[warmup_rows:].tobytes()
    assert len(attribution.event_slots) == len(attribution.event_calls) == len(attribution.events)
    keys = [attribution.slots[slot].command.key for slot in attribution.event_slots.tolist()]
    assert keys == [real_profile.keys[key] for key in attribution.events["key"].tolist()]
    last = attribution.select(attribution.event_calls == 7)
    assert set(last.event_calls.tolist()) == {7} and len(last.events) == len(attribution.events) // 8
    assert last.events.tobytes() == attribution.events[attribution.event_calls == 7].tobytes()


def test_submissions_that_do_not_repeat_cannot_be_split_into_calls(real_profile):
    odd = with_odd_submission(real_profile, 5)
    session = ProfileSession.build(attribute(odd, hand_map()), hand_map())
    assert_profile_invariants(session)
    assert (session.calls, session.warmup, session.calls_known) == (1, 0, False)
    assert session.to_json()["calls_known"] is False
    assert "calls could not be told apart" in session.render("table", width=200)
    with pytest.raises(SectionmarkError, match="cannot drop 3 warmup calls: the calls cannot be told apart") as error:
        attribute(odd, hand_map(), warmup=3)
    one_line(error)
    told = attribute(odd, hand_map(), calls=11, warmup=3)  # an explicit count is honoured
    assert (told.calls, told.warmup, told.calls_known) == (8, 3, True)


@pytest.mark.parametrize("calls, warmup, message", [
    (None, 11, "warmup 11 leaves no call to measure: the profile has 11 calls"),
    (None, 100, "warmup 100 leaves no call"),
    (11, 11, "warmup 11 leaves no call"),
    (0, 0, "calls must be a whole number >= 1, got 0"),
    (-3, 0, "calls must be a whole number >= 1, got -3"),
    (2.5, 0, "calls must be a whole number >= 1, got 2.5"),
    (True, 0, "calls must be a whole number >= 1, got True"),
    (4, 0, "cannot split the profile into 4 calls: it has 11 command-buffer submissions"),
    (None, -1, "warmup must be a whole number >= 0, got -1"),
])
def test_counts_that_cannot_be_honoured_are_refused(real_profile, calls, warmup, message):
    with pytest.raises(SectionmarkError) as error:
        attribute(real_profile, hand_map(), calls=calls, warmup=warmup)
    assert message in one_line(error)


def test_warmup_leaving_one_call(real_profile):
    attribution = attribute(real_profile, hand_map(), calls=np.int64(11), warmup=10)
    assert (attribution.calls, attribution.warmup) == (1, 10)
    assert len(attribution.events) == 2


# ---------------------------------------------------------------------------- events against the map


def test_event_key_must_be_the_maps_key_at_its_command(real_profile):
    """An event whose command index points at another dispatch is refused, not attributed there."""
    dispatches = real_profile.dispatches.copy()
    first_of_key_0 = np.flatnonzero(dispatches["command_index"] == 0)[0]
    dispatches["command_index"][first_of_key_0] = 2
    moved = dataclasses.replace(real_profile, dispatches=dispatches)
    with pytest.raises(SectionmarkError, match=f"'{KEY_0}' at command 2 .* is '{KEY_1}' in the section map") as error:
        attribute(moved, hand_map())
    one_line(error)


def test_command_buffers_with_control_flow_are_refused(real_profile):
    buffer = int(real_profile.dispatches["command_buffer"][0])
    branching = {**real_profile.command_buffers,
                 buffer: real_profile.command_buffers[buffer] + [(4, "cond_branch", None)]}
    with pytest.raises(SectionmarkError, match="uses control flow \\(cond_branch\\)") as error:
        attribute(dataclasses.replace(real_profile, command_buffers=branching), hand_map())
    one_line(error)


# ---------------------------------------------------------------------------- module fingerprint

OTHER_FUNCTION = """
func.func @other(%x: tensor<32x32xf32>) -> tensor<32x32xf32> {
  %e = tensor.empty() : tensor<32x32xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0,d1)->(d1,d0)>, affine_map<(d0,d1)->(d0,d1)>],
                       iterator_types = ["parallel","parallel"]} ins(%x : tensor<32x32xf32>) outs(%e : tensor<32x32xf32>) {
  ^bb0(%a: f32, %b: f32):
    %s = math.tanh %a : f32
    linalg.yield %s : f32
  } -> tensor<32x32xf32> loc("sectionmark:Other"("t.py":5:1))
  return %r : tensor<32x32xf32>
}
"""


def test_fingerprint_matches_the_profiled_module(plain_run, compiled_two_matmuls):
    compiled, _path = compiled_two_matmuls
    assert compiled.section_map.fingerprint == ModuleFingerprint(exports=[KEY_0, KEY_1])
    session = profiling.report(plain_run[1], compiled.section_map, warmup=3)  # plain compile: same executables
    assert_profile_invariants(session)


def test_map_of_a_module_with_other_functions_is_refused(plain_run):
    """Same `main` (the command buffers match) but the module has one more function: not this profile's map."""
    other = compile(TWO_MATMULS + OTHER_FUNCTION, target="llvm-cpu").section_map
    assert other.command_buffers[0].signature() == [("dispatch", KEY_0), ("barrier", "barrier"),
                                                    ("dispatch", KEY_1), ("barrier", "barrier")]
    with pytest.raises(SectionmarkError, match="not from the profiled module: the profiled module has no "
                                               "executable function 'other_dispatch_0") as error:
        profiling.report(plain_run[1], other, warmup=3)
    one_line(error)
    fewer = dataclasses.replace(hand_map(), fingerprint=ModuleFingerprint(exports=[KEY_0]))
    with pytest.raises(SectionmarkError, match=f"also has executable function '{KEY_1}'"):
        profiling.report(plain_run[1], fewer, warmup=3)


# ---------------------------------------------------------------------------- maps in modules


def test_embedded_map_is_checksummed(compiled_two_matmuls, tmp_path):
    compiled, path = compiled_two_matmuls
    assert read_section_map(path) == compiled.section_map
    data = path.read_bytes()
    assert data.count(b'"Attn"') >= 1
    renamed = tmp_path / "renamed.vmfb"
    renamed.write_bytes(data.replace(b'"Attn"', b'"Attm"'))
    with pytest.raises(SectionmarkError, match="embedded section map is corrupt") as error:
        read_section_map(renamed)
    one_line(error)


def test_map_embedded_without_checksum_is_still_read(monkeypatch, tmp_path):
    """Modules compiled before checksums carry the plain JSON."""
    from iree.compiler import ir

    stripped = []

    def plain_json(module, section_map):
        """Embed as today, then drop the checksum prefix from the reflection entry."""
        assert embed.embed_section_map(module, section_map)
        for op in module.regions[0].blocks[0].operations:
            attributes = op.operation.attributes
            if embed.REFLECTION_ATTR not in attributes:
                continue
            entries = ir.DictAttr(attributes[embed.REFLECTION_ATTR])
            values = {entries[i].name: entries[i].attr for i in range(len(entries))}
            if embed.REFLECTION_KEY in values:
                text = ir.StringAttr(values[embed.REFLECTION_KEY]).value.partition(" ")[2]
                values[embed.REFLECTION_KEY] = ir.StringAttr.get(text, context=op.operation.context)
                attributes[embed.REFLECTION_ATTR] = ir.DictAttr.get(values, context=op.operation.context)
                stripped.append(text)
                return True
        return False

    monkeypatch.setattr(pipeline, "embed_section_map", plain_json)
    compiled = compile(TWO_MATMULS, target="llvm-cpu")
    assert stripped and stripped[0].startswith("{")
    path = tmp_path / "old.vmfb"
    path.write_bytes(compiled.vmfb)
    assert read_section_map(path) == compiled.section_map


def test_files_are_told_apart_by_content_not_name(compiled_two_matmuls, tmp_path):
    compiled, path = compiled_two_matmuls
    json_named_vmfb = tmp_path / "m.json"
    json_named_vmfb.write_bytes(path.read_bytes())
    vmfb_named_json = tmp_path / "map.vmfb"
    vmfb_named_json.write_text(compiled.section_map.dumps(), encoding="utf-8")
    assert read_section_map(json_named_vmfb) == read_section_map(vmfb_named_json) == compiled.section_map


@pytest.mark.parametrize("content, message", [
    (b"", "the file is empty"),
    (b"\x00" * 64, "neither an IREE module (.vmfb) nor a section map"),
    (b"PK\x03\x04" + b"\x00" * 200, "has no embedded section map and no bad.sections.json"),
    (b'{"version": 2, "sections": "\xff"}', "not UTF-8"),
])
def test_bad_map_files_are_one_error(tmp_path, content, message):
    path = tmp_path / "bad"
    path.write_bytes(content)
    with pytest.raises(SectionmarkError) as error:
        read_section_map(path)
    assert message in one_line(error)


def test_map_is_read_without_loading_the_module(compiled_two_matmuls, tmp_path):
    """The runtime can crash on a corrupt module; the checksummed map is found and verified in the bytes."""
    compiled, path = compiled_two_matmuls
    data = bytearray(path.read_bytes())
    data[100:140] = bytes(40)  # inside the module flatbuffer's tables, not the map
    damaged = tmp_path / "damaged.vmfb"
    damaged.write_bytes(bytes(data))
    assert read_section_map(damaged) == compiled.section_map
    cut = tmp_path / "cut.vmfb"
    cut.write_bytes(path.read_bytes()[: path.read_bytes().index(b'"command_buffers"')])
    with pytest.raises(SectionmarkError, match="embedded section map is corrupt") as error:
        read_section_map(cut)
    one_line(error)


# ---------------------------------------------------------------------------- inputs


def npy_bytes(array: np.ndarray, path: Path) -> bytes:
    np.save(path, array)
    return path.read_bytes()


def test_input_arrays_round_trip(tmp_path):
    for array in (np.arange(12, dtype=np.float32).reshape(3, 4), np.asfortranarray(np.ones((2, 3), np.int8)),
                  np.float64(2.5), np.zeros((0, 4), np.float16)):
        path = tmp_path / "x.npy"
        np.save(path, array)
        loaded = load_input_array(path)
        assert loaded.dtype == array.dtype and np.array_equal(loaded, array)


@pytest.mark.parametrize("make, message", [
    (lambda d: b"", "the file is empty"),
    (lambda d: d[:-3], "the header describes 48 bytes of data but the file has 45"),
    (lambda d: d + b"\x00", "the header describes 48 bytes of data but the file has 49"),
    (lambda d: d[:10], "corrupt .npy header"),
    (lambda d: b"PK\x03\x04" + d, ".npz archive"),
    (lambda d: b"hello world", "not a .npy file"),
    (lambda d: d.replace(b"(3, 4)", b"(9**9, 4)"), "corrupt .npy header"),
])
def test_bad_inputs_are_one_error(tmp_path, make, message):
    data = npy_bytes(np.arange(12, dtype=np.float32).reshape(3, 4), tmp_path / "good.npy")
    path = tmp_path / "bad.npy"
    path.write_bytes(make(data))
    with pytest.raises(SectionmarkError) as error:
        load_input_array(path)
    assert message in one_line(error)


def test_object_and_device_inputs_are_refused(tmp_path):
    path = tmp_path / "objects.npy"
    np.save(path, np.array([1, "x"], dtype=object), allow_pickle=True)
    with pytest.raises(SectionmarkError, match="Python objects"):
        load_input_array(path)
    with pytest.raises(SectionmarkError, match="not a regular file"):
        load_input_array("/dev/zero")


def test_a_record_header_written_twice_in_a_profile_of_several_devices_is_named(tmp_path):
    """IREE 3.13 now and then writes a record header twice in a profile of several devices (the copy's length
    runs over the next record): the error names that record, not a session begin whose end the stopped walk
    never reached (it said "the session begin record must come first" at the second device's begin)."""
    blob = (Path(__file__).parents[1] / "gpu" / "lavapipe-two-devices" / "two.ireeprof").read_bytes()
    records = layout.records(blob)
    assert [record.record_type for record in records].count(1) == 2  # two devices' sessions
    record = records[len(records) // 2]
    header = blob[record.offset : record.payload - len(layout.CONTENT_PREFIX) - len(record.content_type)]
    edited = bytearray(blob[: record.offset] + header + blob[record.offset :])
    layout.write(edited, *layout.FILE_HEADER_FIELDS["file_length"], len(edited))
    path = tmp_path / "twice.ireeprof"
    path.write_bytes(bytes(edited))
    with pytest.raises(SectionmarkError) as error:
        profiling.report(path, Path(__file__).parents[1] / "gpu" / "lavapipe-two-devices" / "two.sections.json")
    assert f"damaged record at byte {record.offset}: its content type is not text" in one_line(error)
