"""Attribute every dispatch event of a profile to its section(s).

Runtime command-buffer ids are opaque and one-shot buffers (dynamic shapes)
get a new id per call, so each runtime buffer is matched to a static buffer of
the section map by its recorded ``(op, key)`` sequence. The event's
``command_index`` then names the static command, whose shares say which
section(s) it belongs to, and the event's own key must be that command's.
Nothing is dropped: a dispatch in no section belongs to ``()`` (shown as
"(unmarked)"); a dispatch we cannot place is an error. A map whose module
fingerprint lists other executable functions than the profiled module has is
refused before anything is matched.

Calls: the benchmark tool calls the function ``calls`` times and every call
submits the same number of command buffers, so submission ``i`` belongs to
call ``i // (submissions / calls)``. Without a count, the calls are the
repetitions of the shortest repeating pattern of executed command-buffer
signatures (not ids: one-shot buffers get a new id per call); when the
submissions do not repeat, the calls cannot be told apart and the result says
so (``calls_known``). Warmup calls are dropped here; a count or warmup that
cannot be honoured is an error, never silently ignored.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field, replace
from typing import Any, Optional, Union

import numpy as np

from sectionmark.errors import SectionmarkError
from sectionmark.section_path import SectionPath
from sectionmark.profiling.native import native_passes
from sectionmark.profiling.queue_time import QUEUE_SPAN_DTYPE, assign_calls
from sectionmark.readers.arrays import distinct, first_true, searchsorted_runs
from sectionmark.readers.event_model import DISPATCH_DTYPE, EVENT_EXECUTE, MEMORY_DTYPE, Profile, RecordedCommand
from sectionmark.section_map import COMMAND_OPS, Command, SectionMap

CONTROL_FLOW_OPS = ("branch", "cond_branch")  # recorded ops that make commands run other than once, in order

Composition = tuple[tuple[SectionPath, float], ...]  # ((path, weight), ...); () -> unmarked
UNMARKED_COMPOSITION: Composition = (((), 1.0),)


@dataclass(frozen=True)
class Slot:
    """One static dispatch command of the section map."""

    buffer: int  # CommandBuffer.index
    position: int  # position in the buffer's command list
    command: Command
    composition: int  # index into Attribution.compositions


@dataclass
class Attribution:
    """Measured dispatch events, each tied to a static dispatch command (slot).

    The events are the profile's own dispatch rows (a view of them, not a
    copy, when the measured calls' events are one run of rows, as they are
    with calls in submission order); each one's slot and call are columns
    beside them, so attributing a long profile adds 8 bytes per event, not a
    second table of rows.
    """

    events: np.ndarray  # DISPATCH_DTYPE, measured calls only, sorted by (submission, start)
    event_slots: np.ndarray  # int32 per event: its slot (index into ``slots``)
    event_calls: np.ndarray  # int32 per event: its measured call (0 = the first after the warmup)
    slots: list[Slot]
    compositions: list[Composition]
    calls: int  # measured calls (after warmup); 1 when calls could not be told apart
    warmup: int  # warmup calls dropped
    calls_known: bool  # False: no count was given and the submissions do not repeat
    keys: list[str]
    buffer_matches: dict[int, int]  # runtime command buffer id -> static CommandBuffer.index
    # Command-buffer executions and other queue operations of all calls (warmup calls: call < 0);
    # empty for a profile without queue operations (a Tracy capture).
    queue_spans: np.ndarray = field(default_factory=lambda: np.zeros(0, QUEUE_SPAN_DTYPE))
    memory: np.ndarray = field(default_factory=lambda: np.zeros(0, MEMORY_DTYPE))  # memory events, by time
    allocations: Optional[np.ndarray] = None  # queue allocations apart from ``memory`` (`Profile.allocations`)
    # The executions in ``queue_spans`` start when the host submitted them (IREE timed them on the host); False
    # where a reader made them the spans of device-timed dispatches.
    submissions_on_host: bool = False

    def select(self, rows: np.ndarray) -> "Attribution":
        """The same attribution with only the events ``rows`` (a mask or indices) picks: one call's, one queue's."""
        return replace(self, events=self.events[rows], event_slots=self.event_slots[rows],
                       event_calls=self.event_calls[rows])


def _composition(command: Command) -> Composition:
    if not command.shares:
        return UNMARKED_COMPOSITION
    total = sum(share.weight for share in command.shares)
    if total <= 0 or any(share.weight < 0 for share in command.shares):
        raise SectionmarkError(f"section map: dispatch site {command.site} has invalid share weights")
    return tuple((tuple(share.path), share.weight / total) for share in command.shares)


def _signature(commands: list[RecordedCommand]) -> tuple:
    return tuple((op, key) for _index, op, key in commands if op in COMMAND_OPS)


def _static_signature(commands: list[Command]) -> tuple:
    return tuple((c.op, c.key if c.op == "dispatch" else None) for c in commands)


def _whole_number(value: Any, name: str, minimum: int) -> int:
    if not isinstance(value, bool):
        try:
            number = operator.index(value)
        except TypeError:
            pass
        else:
            if number >= minimum:
                return number
    raise SectionmarkError(f"{name} must be a whole number >= {minimum}, got {value!r}")


def _submission_period(profile: Profile) -> Optional[int]:
    """Submissions per call: the shortest period of the executed buffers' signatures; None if none repeats."""
    count = len(profile.submissions)
    signature_ids: dict[tuple, int] = {}
    ids = np.array(
        [
            signature_ids.setdefault(_signature(profile.command_buffers.get(buffer, [])), len(signature_ids))
            for buffer in profile.submissions["command_buffer"].tolist()
        ],
        dtype=np.int64,
    )
    for period in range(1, count):
        if count % period == 0 and np.array_equal(ids, np.resize(ids[:period], count)):
            return period
    return None if count > 1 else 1


def _calls_per_submission(profile: Profile, calls: Optional[int]) -> tuple[np.ndarray, int, bool]:
    """Call index of each submission, number of calls, whether calls could be told apart."""
    count = len(profile.submissions)
    if calls is not None:
        calls = _whole_number(calls, "calls", 1)
        if count % calls:
            raise SectionmarkError(
                f"cannot split the profile into {calls} calls: it has {count} command-buffer submissions "
                "(every call submits the same number)"
            )
        return np.arange(count) // (count // calls), calls, True
    period = _submission_period(profile)
    if period is None:
        return np.zeros(count, np.int64), 1, False
    return np.arange(count) // period, count // period, True


def public_function(name: str) -> str:
    """The function a user calls for a map function: turbine's ``prefill$async`` is called as ``prefill``."""
    return name.removesuffix("$async")


def submitted_functions(profile: Profile, section_map: SectionMap) -> list[frozenset[str]]:
    """For each submission, the functions (user's names) of the static command buffers that record its commands.

    Empty when no static buffer records them (not this model's buffer); more
    than one when several functions record the same commands.
    """
    functions: dict[tuple, set[str]] = {}
    for buffer in section_map.command_buffers:
        functions.setdefault(_static_signature(buffer.commands), set()).add(public_function(buffer.function))
    by_buffer: dict[int, frozenset[str]] = {}
    result = []
    for buffer_id in profile.submissions["command_buffer"].tolist():
        if buffer_id not in by_buffer:
            signature = _signature(profile.command_buffers.get(buffer_id, []))
            by_buffer[buffer_id] = frozenset(functions.get(signature, ()))
        result.append(by_buffer[buffer_id])
    return result


def check_fingerprint(profile: Profile, section_map: SectionMap) -> None:
    """Refuse a map whose module has other executable functions than the profiled module.

    The profile lists the functions of every executable the run loaded (all of
    a module's executables load with it). The map's module must have exactly
    the functions of the executables it shares with the profile; other
    executables (another module loaded beside it) are not compared. Nothing to
    check when the map has no fingerprint or the profile lists no functions.
    """
    if section_map.fingerprint is None or not profile.exports:
        return
    expected = set(section_map.fingerprint.exports)
    listed = {name for names in profile.exports.values() for name in names}
    missing = sorted(expected - listed)
    shared = {name for names in profile.exports.values() if expected.intersection(names) for name in names}
    extra = sorted(shared - expected)
    if missing or extra:
        names, verb = (missing, "has no") if missing else (extra, "also has")
        others = f" (and {len(names) - 1} more)" if len(names) > 1 else ""
        raise SectionmarkError(
            f"the section map is not from the profiled module: the profiled module {verb} executable function "
            f"'{names[0]}'{others} (was the map compiled from another model or with other flags?)"
        )


class SlotMatcher:
    """The slots (static dispatch commands) of a section map, and the match of runtime command buffers to them.

    ``lookup`` gives the flat table that places each dispatch event: the slot
    of (runtime buffer at position b, command index i) is
    ``flat[bases[b] + i]`` (-1: no dispatch there). Buffers are matched as
    they are asked for, so a profile read in windows asks for each window's.
    """

    def __init__(self, section_map: SectionMap, function: Optional[str], keys: list[str]):
        self.slots: list[Slot] = []
        compositions: dict[Composition, int] = {}
        self._by_signature: dict[tuple, list[tuple[int, list[int]]]] = {}
        for buffer in section_map.command_buffers:
            slot_ids = []
            for position, command in enumerate(buffer.commands):
                if command.op == "dispatch":
                    composition = compositions.setdefault(_composition(command), len(compositions))
                    slot_ids.append(len(self.slots))
                    self.slots.append(Slot(buffer.index, position, command, composition))
                else:
                    slot_ids.append(-1)
            self._by_signature.setdefault(_static_signature(buffer.commands), []).append((buffer.index, slot_ids))
        self.compositions = list(compositions)
        self._function = function
        self._buffer_function = {buffer.index: buffer.function for buffer in section_map.command_buffers}
        key_ids = {key: index for index, key in enumerate(keys)}
        self.slot_keys = np.array([key_ids.get(s.command.key, -1) for s in self.slots], np.int64)
        self.buffer_matches: dict[int, int] = {}  # runtime command buffer id -> static CommandBuffer.index
        self._tables: dict[int, np.ndarray] = {}

    def _choose(self, candidates: list[tuple[int, list[int]]]) -> tuple[int, list[int]]:
        if self._function is not None and len(candidates) > 1:
            candidates = [c for c in candidates if self._buffer_function[c[0]] == self._function] or candidates
        distinct = {tuple(self.slots[s].composition if s >= 0 else -1 for s in c[1]) for c in candidates}
        if len(distinct) > 1:
            raise SectionmarkError(
                "section map is ambiguous: static command buffers "
                f"{sorted(c[0] for c in candidates)} record the same commands with different sections"
            )
        return candidates[0]

    def _table(self, runtime_id: int, recorded: Optional[list[RecordedCommand]]) -> np.ndarray:
        """Slot of each command index of a runtime buffer (-1: none), matching it on first use."""
        table = self._tables.get(runtime_id)
        if table is not None:
            return table
        if recorded is None:
            raise SectionmarkError(
                f"profile has dispatches from command buffer {runtime_id} but no record of its commands "
                "(was executable-metadata profiling on?)"
            )
        control_flow = next((op for _i, op, _k in recorded if op in CONTROL_FLOW_OPS), None)
        if control_flow is not None:
            raise SectionmarkError(
                f"command buffer {runtime_id} of the profile uses control flow ({control_flow}), so its commands "
                "do not run once each in order; sectionmark cannot attribute it"
            )
        candidates = self._by_signature.get(_signature(recorded))
        if candidates is None:
            first = next((key for _i, op, key in recorded if op == "dispatch"), None)
            raise SectionmarkError(
                f"the section map does not match this profile: no static command buffer records the "
                f"{sum(op == 'dispatch' for _i, op, _k in recorded)} dispatches starting with '{first}' "
                "(is the map from another model or compile?)"
            )
        static_index, slot_ids = self._choose(candidates)
        self.buffer_matches[runtime_id] = static_index
        counted = [index for index, op, _key in recorded if op in COMMAND_OPS]
        table = np.full(max(counted) + 1, -1, np.int32)
        table[counted] = slot_ids
        self._tables[runtime_id] = table
        return table

    def lookup(self, dispatches: np.ndarray, recorded: dict[int, list[RecordedCommand]]) -> tuple[np.ndarray,
                                                                                                np.ndarray,
                                                                                                np.ndarray]:
        """(runtime_ids, bases, flat) for the runtime buffers of ``dispatches`` (their ids sorted), each matched
        to a static buffer (``recorded``: the profile's recorded commands of each)."""
        buffers = dispatches["command_buffer"]  # in runs (dispatches are grouped by submission): one value per run
        runtime_ids = distinct(buffers[np.concatenate([[True], buffers[1:] != buffers[:-1]])])
        tables = [self._table(runtime_id, recorded.get(runtime_id)) for runtime_id in runtime_ids.tolist()]
        bases = np.concatenate([[0], np.cumsum([len(table) for table in tables], dtype=np.int64)]).astype(np.int64)
        return runtime_ids, bases, np.concatenate(tables) if tables else np.zeros(0, np.int32)


NO_DISPATCH_EVENTS = ("the profile contains no dispatch events (did the function run any dispatches, and was "
                      "host-execution profiling on?)")


def attribute(
    profile: Profile,
    section_map: SectionMap,
    *,
    calls: Optional[int] = None,
    warmup: int = 0,
    function: Optional[str] = None,
) -> Attribution:
    """Tie each dispatch event of ``profile`` to a static dispatch of ``section_map``.

    ``calls``: how many times the function was called during the profile
    (warmup included); None infers it from the repeating submission pattern.
    ``function``: prefer static buffers of this function when several have the
    same command sequence. ``warmup``: leading calls to drop; it needs calls
    that can be told apart and must leave at least one call.
    """
    if not len(profile.dispatches):
        raise SectionmarkError(NO_DISPATCH_EVENTS)
    check_fingerprint(profile, section_map)
    matcher = SlotMatcher(section_map, function, profile.keys)
    dispatches = profile.dispatches
    call_of_submission, measured_calls, exact = call_numbers(profile, calls, warmup)
    event_slots, event_calls, failures = placed_events(dispatches, matcher, profile.command_buffers, profile.keys,
                                                       profile.submissions["submission"], call_of_submission)
    measured = measured_rows(event_calls, failures)
    return replace(attribution_without_events(profile, matcher, call_of_submission, measured_calls, exact, warmup),
                   events=dispatches[measured], event_slots=event_slots[measured], event_calls=event_calls[measured])


def placed_events(dispatches: np.ndarray, matcher: "SlotMatcher", recorded: dict[int, list[RecordedCommand]],
                  keys: list[str], submission_ids: np.ndarray, call_of_submission: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, "_EventFailures"]:
    """Each dispatch's slot and call (int32; call < 0 in a warmup call), ``call_of_submission`` giving the call of
    each of ``submission_ids`` (sorted); the error line of the first dispatch that the map does not place."""
    runtime_ids, bases, flat = matcher.lookup(dispatches, recorded)
    slots = matcher.slots
    (event_slots, event_calls), failures = attributed_events(dispatches, runtime_ids, bases, flat, matcher.slot_keys,
                                                             submission_ids, call_of_submission, 0)
    if failures.unplaced >= 0:
        bad = dispatches[failures.unplaced]
        raise SectionmarkError(
            f"profile dispatch '{keys[bad['key']]}' at command {bad['command_index']} of command buffer "
            f"{bad['command_buffer']} is not a dispatch in the section map"
        )
    if failures.wrong_key >= 0:
        bad = dispatches[failures.wrong_key]
        expected = slots[flat[bases[np.searchsorted(runtime_ids, bad["command_buffer"])] + bad["command_index"]]]
        raise SectionmarkError(
            f"profile dispatch '{keys[bad['key']]}' at command {bad['command_index']} of command buffer "
            f"{bad['command_buffer']} is '{expected.command.key}' in the section map: the profile's event and its "
            "recorded command disagree (corrupt profile?)"
        )
    if failures.orphan >= 0:
        raise SectionmarkError("profile has dispatches outside any queue submission (incomplete profile?)")
    return event_slots, event_calls, failures


def call_numbers(profile: Profile, calls: Optional[int], warmup: int) -> tuple[np.ndarray, int, bool]:
    """Each submission's call, counted from the first measured one (warmup calls negative), the measured calls,
    and whether calls could be told apart; a count or warmup that cannot be honoured is refused."""
    warmup = _whole_number(warmup, "warmup", 0)
    call_of_submission, total_calls, exact = _calls_per_submission(profile, calls)
    if warmup and not exact:
        raise SectionmarkError(
            f"cannot drop {warmup} warmup calls: the calls cannot be told apart in this profile (its command-buffer "
            "submissions do not repeat); give the number of calls"
        )
    if warmup >= total_calls:
        raise SectionmarkError(
            f"warmup {warmup} leaves no call to measure: the profile has {total_calls} call{'s' * (total_calls != 1)}"
        )
    return call_of_submission - warmup, total_calls - warmup, exact


def attribution_without_events(profile: Profile, matcher: SlotMatcher, call_of_submission: np.ndarray, calls: int,
                               calls_known: bool, warmup: int) -> Attribution:
    """Everything an attribution holds but its events (their columns empty): its slots, calls, queue spans."""
    # Submissions a reader rebuilt from dispatch zones are no queue operations: no call time from them.
    queue_spans = (_queue_spans(profile, call_of_submission) if profile.provenance.timed_submissions
                   else np.zeros(0, QUEUE_SPAN_DTYPE))
    return Attribution(
        events=profile.dispatches[:0],
        event_slots=np.zeros(0, np.int32),
        event_calls=np.zeros(0, np.int32),
        slots=matcher.slots,
        compositions=matcher.compositions,
        calls=calls,
        warmup=warmup,
        calls_known=calls_known,
        keys=profile.keys,
        buffer_matches=matcher.buffer_matches,
        queue_spans=queue_spans,
        memory=profile.memory,
        allocations=profile.allocations,
        submissions_on_host=profile.provenance.timed_submissions and not profile.provenance.device_timed,
    )


@dataclass
class _EventFailures:
    """The first dispatch (index) failing each check of ``attributed_events``; -1 for none."""

    unplaced: int  # its command is no dispatch of the matched static buffer
    wrong_key: int  # its key differs from its command's
    orphan: int  # its submission is not in the profile
    first_measured: int = 0  # the first dispatch of a measured call (past the warmup); the count of all when none
    measured: int = 0  # dispatches of measured calls


def attributed_events(dispatches: np.ndarray, runtime_ids: np.ndarray, bases: np.ndarray, flat: np.ndarray,
                       slot_keys: np.ndarray, submission_ids: np.ndarray, call_of_submission: np.ndarray,
                       warmup: int) -> tuple[tuple[np.ndarray, np.ndarray], _EventFailures]:
    """Each dispatch's slot and call (int32, call < 0 in a warmup call) and the checks of every dispatch, in C
    when built.

    The slot of dispatch i is ``flat[bases[b] + command_index]`` for its runtime buffer's position ``b`` among
    ``runtime_ids`` (sorted; -1 or past its table: unplaced); its call comes from its submission's rank among
    ``submission_ids`` (sorted), less ``warmup``.
    """
    if not len(submission_ids):
        return (np.zeros(0, np.int32), np.zeros(0, np.int32)), _EventFailures(-1, -1, 0)
    passes = native_passes()
    if passes is not None:
        slot, call = np.empty(len(dispatches), np.int32), np.empty(len(dispatches), np.int32)
        first_measured, measured, *failures = passes.attribute_events(
            np.ascontiguousarray(dispatches, DISPATCH_DTYPE), runtime_ids, bases, flat, slot_keys,
            np.ascontiguousarray(submission_ids), np.ascontiguousarray(call_of_submission, np.int64), warmup, slot, call)
        return (slot, call), _EventFailures(*failures, first_measured=first_measured, measured=measured)

    dense = searchsorted_runs(runtime_ids, dispatches["command_buffer"])
    index = dispatches["command_index"].astype(np.int64)
    in_range = index < (bases[1:] - bases[:-1])[dense]
    if in_range.all():  # the usual case: no masked copies
        slot = flat[bases[dense] + index]
    else:
        slot = np.full(len(dispatches), -1, np.int32)
        slot[in_range] = flat[bases[dense[in_range]] + index[in_range]]
    placed = slot >= 0
    rank = np.minimum(searchsorted_runs(submission_ids, dispatches["submission"]), len(submission_ids) - 1)
    call = (call_of_submission[rank] - warmup).astype(np.int32)
    measured = call >= 0
    first_measured = first_true(measured)
    failures = _EventFailures(
        unplaced=first_true(~placed),
        wrong_key=first_true(placed & (slot_keys[slot] != dispatches["key"])),
        orphan=first_true(submission_ids[rank] != dispatches["submission"]),
        first_measured=len(call) if first_measured < 0 else first_measured,
        measured=int(np.count_nonzero(measured)),
    )
    return (slot.astype(np.int32, copy=False), call), failures


def measured_rows(event_calls: np.ndarray, failures: _EventFailures) -> Union[slice, np.ndarray]:
    """The events of measured calls: a slice (views, no copy) when they are all the rows from the first of them
    on, as they are when calls follow the submission order; else a mask."""
    if failures.first_measured + failures.measured == len(event_calls):
        return slice(failures.first_measured, None)
    return event_calls >= 0


def _queue_spans(profile: Profile, call_of_submission: np.ndarray) -> np.ndarray:
    """Command-buffer executions and the other queue operations, each with its call (queue_time.assign_calls)."""
    executes, others = profile.submissions, profile.queue_ops
    spans = np.zeros(len(executes) + len(others), QUEUE_SPAN_DTYPE)
    spans["type"][: len(executes)] = EVENT_EXECUTE
    spans["call"][: len(executes)] = call_of_submission
    spans["call"][len(executes):] = assign_calls(others["submission"], others["type"], executes["submission"],
                                                 call_of_submission)
    for name in ("start_ns", "end_ns"):  # column by column, in place: no temporary the size of the spans
        spans[name][: len(executes)] = executes[name]
        spans[name][len(executes):] = others[name]
    for name in ("type", "payload_bytes"):
        spans[name][len(executes):] = others[name]
    return spans
