"""The cross-table checks every IREE profile reader runs before it hands a `Profile` on.

Each reader (`ireeprof_bundle`, `ireeprof_jsonl`) decodes its own format into
the same tables and calls `checked_profile`, so both refuse the same
inconsistencies with the same error lines (the list is in
`sectionmark.readers.ireeprof`'s docstring). With them, the tables' order
(`sorted_by`) and their rows gathered, copied and compared as raw records
(`rows_of`, `copy_rows`, `same_records`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

import numpy as np

from sectionmark.errors import SectionmarkError
from sectionmark.readers.arrays import distinct, first_true, searchsorted_runs
from sectionmark.readers.event_model import (INDIRECT_PARAMETERS, MAX_EVENT_NS, MAX_SESSION_NS, MAX_TIMESTAMP_NS,
                                             CommandRecord, Profile, Provenance, RecordedCommand, native)


def corrupt(path: Path, what: str) -> SectionmarkError:
    """The one error line of every reader for a profile that breaks its format or is inconsistent."""
    return SectionmarkError(f"{path}: not a valid IREE profile ({what})")


def run_failed(path: Path, event: str, event_id: int, status: int) -> SectionmarkError:
    return SectionmarkError(
        f"{path}: {event} event {event_id} finished with IREE status code {status}: the profiled run failed"
    )


@dataclass
class KnownOrder:
    """What a reader already established about its tables, so that ``checked_profile`` need not check it again."""

    times_plausible: bool = False  # every host event's times pass check_times
    dispatches_sorted: bool = False  # dispatches in (submission, start) order (by_submission_and_start's)


def timed_dispatch(op: str, flags: int, workgroups: list[int]) -> bool:
    """A dispatch whose every execution must produce one event: static, non-zero workgroup count."""
    return op == "dispatch" and not flags & INDIRECT_PARAMETERS and min(workgroups) > 0


def define_function(path: Path, functions: dict[tuple[int, int], str], executable: int, ordinal: int, name: str) -> None:
    if functions.setdefault((executable, ordinal), name) != name:
        raise corrupt(path, f"executable function {executable}:{ordinal} is recorded twice with different names")


def record_command(path: Path, commands: dict[int, dict[int, CommandRecord]], buffer: int, index: int,
                    command: CommandRecord) -> None:
    if commands.setdefault(buffer, {}).setdefault(index, command) != command:
        raise corrupt(path, f"command {index} of command buffer {buffer} is recorded twice with different contents")


def exports_by_executable(functions: dict[tuple[int, int], str]) -> dict[int, list[str]]:
    exports: dict[int, list[str]] = {}
    for (executable, _ordinal), name in sorted(functions.items()):
        exports.setdefault(executable, []).append(name)
    return exports


def check_unique(path: Path, what: str, first: np.ndarray, second: np.ndarray) -> None:
    """Error if two rows agree in both columns (a duplicated record)."""
    if len(first) < 2:
        return
    first, second = first.astype(np.uint64), second.astype(np.uint64)
    width = int(second.max()).bit_length()
    if int(first.max()).bit_length() + width <= 64:  # one sortable key: much faster than lexsort
        keys = (first << np.uint64(width)) | second
        if (keys[1:] > keys[:-1]).all():  # in increasing order, as IREE writes them: unique, no sort needed
            return
        keys = np.sort(keys, kind="stable")  # timsort: near-linear on the nearly sorted keys profiles have
        same = keys[1:] == keys[:-1]
        if same.any():
            key = int(keys[1:][same][0])
            raise corrupt(path, f"{what} ({key >> width}, {key & ((1 << width) - 1)}) is recorded twice")
        return
    order = np.lexsort((second, first))
    first, second = first[order], second[order]
    same = (first[1:] == first[:-1]) & (second[1:] == second[:-1])
    if same.any():
        index = np.argmax(same)
        raise corrupt(path, f"{what} ({first[index]}, {second[index]}) is recorded twice")


def check_times(path: Path, dispatches: np.ndarray, submissions: np.ndarray, queue_ops: np.ndarray,
                 memory: np.ndarray, host_events_plausible: bool = False) -> None:
    """Every timestamp plausible, so that durations and their sums fit in int64.

    ``host_events_plausible``: the reader checked each host event's own times (dispatches, executions, queue
    operations) already; what spans tables is checked here either way.
    """
    if len(memory) and ((memory["time_ns"] < 0) | (memory["time_ns"] >= MAX_TIMESTAMP_NS)).any():
        raise corrupt(path, f"a memory event has an impossible timestamp: {memory['time_ns'].min()} ns")
    if not host_events_plausible:
        _check_event_times(path, dispatches, submissions, queue_ops)
    if len(submissions) and submissions["end_ns"].max() - submissions["start_ns"].min() > MAX_SESSION_NS:
        raise corrupt(path, "its command-buffer executions span more than 30 days")


def _check_event_times(path: Path, dispatches: np.ndarray, submissions: np.ndarray, queue_ops: np.ndarray) -> None:
    """Each host event starts at a plausible time and ends after it, within an hour; tile times are not negative."""
    for what, table in (("dispatch", dispatches), ("command-buffer execution", submissions), ("queue operation", queue_ops)):
        start, end = table["start_ns"], table["end_ns"]
        if not len(start):
            continue
        duration = end - start
        if start.min() >= 0 and duration.min() >= 0 and end.max() < MAX_TIMESTAMP_NS and duration.max() <= MAX_EVENT_NS:
            continue  # all plausible: four reductions, no masks (those only find the culprit)
        impossible = (start < 0) | (end < start) | (end >= MAX_TIMESTAMP_NS)
        if impossible.any():
            index = np.argmax(impossible)
            raise corrupt(path, f"a {what} event has impossible timestamps: {start[index]} to {end[index]} ns")
        too_long = end - start > MAX_EVENT_NS
        if too_long.any():
            index = np.argmax(too_long)
            raise corrupt(path, f"a {what} event lasts {(end[index] - start[index]) / 1e9:.0f} s (more than an hour)")
    if len(dispatches) and (dispatches["tile_ns"] >= np.uint64(1 << 63)).any():
        raise corrupt(path, "a dispatch event has a negative tile time")


def _duplicate_command(ids: np.ndarray, rank: np.ndarray, command_index: np.ndarray) -> Optional[tuple[int, int]]:
    """The smallest (submission, command index) with two dispatch events (``ids[rank]``, ids sorted and unique).

    Counted in a table of (submission, command index) when that table is small (a profile's command buffers
    have few commands), else through sorting.
    """
    width = int(command_index.max()) + 1
    if len(ids) * width > 8 * len(rank) + 4096:
        first, second = ids[rank], command_index.astype(np.uint64)
        order = np.lexsort((second, first))
        first, second = first[order], second[order]
        same = (first[1:] == first[:-1]) & (second[1:] == second[:-1])
        return (int(first[np.argmax(same)]), int(second[np.argmax(same)])) if same.any() else None
    counts = np.bincount(rank * width + command_index, minlength=len(ids) * width)
    if not (counts > 1).any():
        return None
    code = int(np.argmax(counts > 1))
    return int(ids[code // width]), code % width


@dataclass
class _LinkFailures:
    """The first dispatch (index) failing each link check, -1 for none; see ``check_links``."""

    orphan: int  # its submission executes no command buffer
    wrong_buffer: int  # names another command buffer than its submission executes
    outside: int  # runs outside its submission's execution
    duplicate: Optional[tuple[int, int]]  # (submission, command index) with two events
    short: int  # first submission (rank) with fewer timed dispatch events than its command buffer has
    found: np.ndarray  # timed dispatch events per submission


def _link_failures(dispatches: np.ndarray, submissions: np.ndarray, buffer_ids: np.ndarray,
                   timed: list[list[int]]) -> _LinkFailures:
    """Every link check over all dispatches (in C when built, else numpy).

    ``buffer_ids``: sorted ids of the recorded command buffers, among them every executed one; ``timed``: the
    timed command indices of each.
    """
    ids = submissions["submission"]
    expected = np.array([len(indices) for indices in timed], np.int64)
    if native() is not None:
        # Flat table: command i of buffer b is timed when timed_table[bases[b] + i] is 1.
        bases = np.concatenate([[0], np.cumsum([max(indices, default=-1) + 1 for indices in timed])]).astype(np.int64)
        timed_table = np.zeros(int(bases[-1]), np.uint8)
        for base, indices in zip(bases.tolist(), timed):
            timed_table[[base + index for index in indices]] = 1
        found = np.empty(len(ids), np.int64)
        orphan, wrong, outside, duplicate_rank, duplicate_index, short = native().dispatch_links(
            dispatches, submissions, buffer_ids, bases, timed_table, expected, found)
        if duplicate_rank == -2:  # command indices too large for the C table
            rank = np.minimum(searchsorted_runs(ids, dispatches["submission"]), len(ids) - 1)
            duplicate = _duplicate_command(ids, rank, dispatches["command_index"].astype(np.int64))
        else:
            duplicate = None if duplicate_rank < 0 else (int(ids[duplicate_rank]), duplicate_index)
        return _LinkFailures(orphan, wrong, outside, duplicate, short, found)

    rank = np.minimum(searchsorted_runs(ids, dispatches["submission"]), len(ids) - 1)
    command_index = dispatches["command_index"].astype(np.int64)
    # Whether each dispatch is a timed command of its buffer: its (buffer, command index) code among the
    # sorted codes of the timed commands (a binary search among a few dozen: faster than np.isin).
    timed_codes = np.array(sorted((position << 32) | index for position, indices in enumerate(timed)
                                  for index in indices), np.uint64)
    buffer_of_execution = np.searchsorted(buffer_ids, submissions["command_buffer"]).astype(np.uint64)
    codes = (buffer_of_execution[rank] << np.uint64(32)) | command_index.astype(np.uint64)
    place = np.minimum(np.searchsorted(timed_codes, codes), max(len(timed_codes) - 1, 0))
    is_timed = timed_codes[place] == codes if len(timed_codes) else np.zeros(len(codes), bool)
    found = np.bincount(rank[is_timed], minlength=len(ids))
    return _LinkFailures(
        orphan=first_true(ids[rank] != dispatches["submission"]),
        wrong_buffer=first_true(submissions["command_buffer"][rank] != dispatches["command_buffer"]),
        outside=first_true((dispatches["start_ns"] < submissions["start_ns"][rank])
                      | (dispatches["end_ns"] > submissions["end_ns"][rank])),
        duplicate=_duplicate_command(ids, rank, command_index),
        short=first_true(found < expected[buffer_of_execution.astype(np.int64)]),
        found=found,
    )


def check_links(
    path: Path, dispatches: np.ndarray, submissions: np.ndarray, command_buffers: dict[int, list[RecordedCommand]],
    timed: dict[int, set[int]],
) -> None:
    """Dispatches inside executions of their command buffer, one event per timed dispatch and execution."""
    ids = submissions["submission"]
    if len(ids) > 1 and (ids[1:] == ids[:-1]).any():
        raise corrupt(path, f"submission {ids[1:][ids[1:] == ids[:-1]][0]} executes twice (duplicated records)")
    executed = submissions["command_buffer"].tolist()
    unknown = next((buffer for buffer in executed if buffer not in command_buffers), None)
    if unknown is not None:
        raise corrupt(path, f"a command buffer ({unknown}) is executed but its recording is not in the profile")
    if not len(dispatches):
        return
    if not len(ids):
        raise corrupt(path, f"a dispatch belongs to submission {dispatches['submission'][0]}, which executes no "
                             "command buffer")
    buffers = sorted(command_buffers)
    buffer_ids = np.array(buffers, np.uint64)
    failures = _link_failures(dispatches, submissions, buffer_ids, [sorted(timed[buffer]) for buffer in buffers])
    if failures.orphan >= 0:
        raise corrupt(path, f"a dispatch belongs to submission {dispatches['submission'][failures.orphan]}, "
                             "which executes no command buffer")
    if failures.wrong_buffer >= 0:
        bad = dispatches[failures.wrong_buffer]
        execution = submissions[np.searchsorted(ids, bad["submission"])]
        raise corrupt(path, f"a dispatch names command buffer {bad['command_buffer']} but its submission "
                             f"{execution['submission']} executes command buffer {execution['command_buffer']}")
    if failures.outside >= 0:
        raise corrupt(path, f"a dispatch of submission {dispatches['submission'][failures.outside]} runs outside "
                             "the execution of its command buffer")
    if failures.duplicate is not None:
        raise corrupt(path, f"a dispatch of (submission, command index) {failures.duplicate} is recorded twice")
    if failures.short >= 0:
        index = failures.short
        wanted = len(timed[int(submissions["command_buffer"][index])])
        raise SectionmarkError(
            f"{path}: submission {ids[index]} has {failures.found[index]} of the {wanted} dispatch events its command "
            f"buffer must produce: events are missing (a capture filtered with --device_profiling_filter_* cannot "
            "be attributed)"
        )


def by_submission_and_start(dispatches: np.ndarray, known_sorted: bool = False) -> np.ndarray:
    """Dispatches in (submission, start) order, ties in their order: ``np.lexsort``'s result.

    IREE writes them grouped by submission and all but a few in start order:
    then only the submissions out of order are sorted, in place (the readers
    pass tables they own). ``known_sorted``: the reader put them in order already.
    """
    if known_sorted:
        return dispatches
    submission, start = dispatches["submission"], dispatches["start_ns"]
    in_order = in_dispatch_order(dispatches)
    if in_order.all():
        return dispatches
    if not (submission[1:] >= submission[:-1]).all():
        return rows_of(dispatches, np.lexsort((start, submission)))
    unsorted = distinct(submission[np.flatnonzero(~in_order)])
    first, lengths = np.searchsorted(submission, unsorted), np.searchsorted(submission, unsorted, "right")
    lengths -= first
    rows = np.repeat(first - (np.cumsum(lengths) - lengths), lengths) + np.arange(int(lengths.sum()))
    whole = raw_records(dispatches)  # rows moved as raw records (`rows_of`)
    whole[rows] = whole[rows[np.lexsort((start[rows], submission[rows]))]]
    return dispatches


def in_dispatch_order(dispatches: np.ndarray) -> np.ndarray:
    """Whether each dispatch is in `by_submission_and_start`'s order with the one before it (one fewer than the
    dispatches)."""
    submission, start = dispatches["submission"], dispatches["start_ns"]
    return (submission[1:] > submission[:-1]) | ((submission[1:] == submission[:-1]) & (start[1:] >= start[:-1]))


def recorded_commands(path: Path, declared: set[int], commands: dict[int, dict[int, CommandRecord]]
                      ) -> tuple[dict[int, list[RecordedCommand]], dict[int, set[int]]]:
    """The recorded commands of each command buffer the profile defines, in index order, and the indices of the
    timed ones (one event per execution expected); commands of an undefined buffer are refused."""
    undeclared = sorted(set(commands) - declared)
    if undeclared:
        raise corrupt(path, f"commands are recorded for command buffer {undeclared[0]}, which the profile does not define")
    recorded = {buffer: commands.get(buffer, {}) for buffer in declared}
    command_buffers = {
        buffer: [(index, op, key) for index, (op, key, _timed) in sorted(by_index.items())]
        for buffer, by_index in recorded.items()
    }
    timed = {buffer: {index for index, (_op, _key, is_timed) in by_index.items() if is_timed}
             for buffer, by_index in recorded.items()}
    return command_buffers, timed


def checked_profile(
    path: Path,
    dispatches: np.ndarray,
    submissions: np.ndarray,
    keys: list[str],
    declared: set[int],
    commands: dict[int, dict[int, CommandRecord]],
    exports: dict[int, list[str]],
    provenance: Provenance,
    queue_ops: np.ndarray,
    memory: np.ndarray,
    known: Optional[KnownOrder] = None,
) -> Profile:
    """Check a reader's tables against each other (the list in `sectionmark.readers.ireeprof`) and build the Profile.

    ``declared``: the command buffers the profile defines (command-buffer
    records); ``commands``: the recorded commands of each, by index; ``known``:
    what the reader established already.
    """
    known = known or KnownOrder()
    command_buffers, timed = recorded_commands(path, declared, commands)
    check_times(path, dispatches, submissions, queue_ops, memory, known.times_plausible)
    dispatches = by_submission_and_start(dispatches, known.dispatches_sorted)
    submissions = sorted_by(submissions, "submission")
    check_links(path, dispatches, submissions, command_buffers, timed)
    return Profile(dispatches, submissions, keys, command_buffers, exports,
                   sorted_by(queue_ops, "start_ns", "submission"), sorted_by(memory, "time_ns"), provenance=provenance)


def rows_of(table: np.ndarray, selection: Union[slice, np.ndarray]) -> np.ndarray:
    """A copy of ``table[selection]`` (a mask, indices or a slice: copied too) of a structured table, gathered as
    whole raw records: numpy copies structured rows field by field, 10 to 20 times slower (a window's 30,000
    dispatches: 1.2 ms against 0.05 ms)."""
    chosen = raw_records(table)[selection]
    return (chosen.copy() if isinstance(selection, slice) else chosen).view(table.dtype)


def copy_rows(target: np.ndarray, rows: np.ndarray) -> None:
    """``target[...] = rows`` for two structured tables of one dtype, copied as raw records (`rows_of`)."""
    raw_records(target)[...] = raw_records(rows)


def raw_records(table: np.ndarray) -> np.ndarray:
    """A structured table viewed as one opaque record per row (what `rows_of` and `copy_rows` gather and copy)."""
    return table.view(np.dtype((np.void, table.dtype.itemsize)))


def same_records(first: np.ndarray, second: np.ndarray) -> bool:
    """``np.array_equal`` of two tables of one packed dtype of integer fields (a profile's executions and queue
    operations: no padding byte, no float), compared as their bytes: numpy compares structured rows field by field,
    each comparison made anew per window."""
    return first.dtype == second.dtype and first.shape == second.shape and first.tobytes() == second.tobytes()


def sorted_by(table: np.ndarray, first: str, second: Optional[str] = None) -> np.ndarray:
    """``table`` stably sorted by its ``first`` field, then ``second``; itself when it is in that order already
    (profiles nearly always are: no copy)."""
    order = sort_order(table, first, second)
    return table if order is None else rows_of(table, order)


def sort_order(table: np.ndarray, first: str, second: Optional[str] = None) -> Optional[np.ndarray]:
    """The rows of ``table`` in `sorted_by`'s order; None when they are in it already."""
    a = table[first]
    b = table[second] if second else np.zeros(len(table), np.int8)
    if len(table) < 2 or ((a[1:] > a[:-1]) | ((a[1:] == a[:-1]) & (b[1:] >= b[:-1]))).all():
        return None
    return np.lexsort((b, a))
