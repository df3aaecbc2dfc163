"""Attribute every dispatch event of a profile to its section(s).

Runtime command-buffer ids are opaque and one-shot buffers (dynamic shapes)
get a new id per call, so each runtime buffer is matched to a static buffer of
the section map by its recorded ``(op, key)`` sequence. The event's
``command_index`` then names the static command, whose shares say which
section(s) it belongs to. Nothing is dropped: a dispatch in no section belongs
to ``()`` (shown as "(unmarked)"); a dispatch we cannot place is an error.

Calls: the benchmark tool calls the function ``calls`` times and every call
submits the same number of command buffers, so submission ``i`` belongs to
call ``i // (submissions / calls)``. Warmup calls are dropped here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from sectionmark.errors import SectionmarkError
from sectionmark.paths import SectionPath
from sectionmark.profiling.ireeprof import DISPATCH_DTYPE, Profile, RecordedCommand
from sectionmark.section_map import COMMAND_OPS, Command, SectionMap

ATTRIBUTED_DTYPE = np.dtype(DISPATCH_DTYPE.descr + [("slot", "<i4"), ("call", "<i4")])

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
    """Measured dispatch events, each tied to a static dispatch command (slot)."""

    events: np.ndarray  # ATTRIBUTED_DTYPE, measured calls only, sorted by (submission, start)
    slots: list[Slot]
    compositions: list[Composition]
    calls: int  # measured calls (after warmup); 1 when calls could not be told apart
    warmup: int  # warmup calls dropped
    calls_known: bool  # False: submissions did not split evenly into calls
    keys: list[str]
    buffer_matches: dict[int, int]  # runtime command buffer id -> static CommandBuffer.index


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


def _calls_per_submission(
    profile: Profile, calls: Optional[int]
) -> tuple[np.ndarray, int, bool]:
    """Call index of each submission, number of calls, whether the split is exact."""
    count = len(profile.submissions)
    if calls is None:
        # Smallest period of the sequence of executed buffer signatures.
        signature_ids: dict[tuple, int] = {}
        ids = np.array(
            [
                signature_ids.setdefault(_signature(profile.command_buffers.get(buffer, [])), len(signature_ids))
                for buffer in profile.submissions["command_buffer"].tolist()
            ],
            dtype=np.int64,
        )
        for period in range(1, count + 1):
            if count % period == 0 and np.array_equal(ids, np.resize(ids[:period], count)):
                return np.arange(count) // period, count // period, True
        return np.zeros(count, np.int64), 1, False
    if calls > 0 and count % calls == 0 and count:
        return np.arange(count) // (count // calls), calls, True
    return np.zeros(count, np.int64), 1, False


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
    same command sequence.
    """
    slots: list[Slot] = []
    compositions: dict[Composition, int] = {}
    by_signature: dict[tuple, list[tuple[int, list[int]]]] = {}
    for buffer in section_map.command_buffers:
        slot_ids = []
        for position, command in enumerate(buffer.commands):
            if command.op == "dispatch":
                composition = compositions.setdefault(_composition(command), len(compositions))
                slot_ids.append(len(slots))
                slots.append(Slot(buffer.index, position, command, composition))
            else:
                slot_ids.append(-1)
        by_signature.setdefault(_static_signature(buffer.commands), []).append((buffer.index, slot_ids))
    buffer_function = {buffer.index: buffer.function for buffer in section_map.command_buffers}

    def choose(candidates: list[tuple[int, list[int]]]) -> tuple[int, list[int]]:
        if function is not None and len(candidates) > 1:
            candidates = [c for c in candidates if buffer_function[c[0]] == function] or candidates
        distinct = {tuple(slots[s].composition if s >= 0 else -1 for s in c[1]) for c in candidates}
        if len(distinct) > 1:
            raise SectionmarkError(
                "section map is ambiguous: static command buffers "
                f"{sorted(c[0] for c in candidates)} record the same commands with different sections"
            )
        return candidates[0]

    dispatches = profile.dispatches
    runtime_ids, dense = np.unique(dispatches["command_buffer"], return_inverse=True)
    dense = dense.reshape(-1)
    # Flat lookup: slot of (runtime buffer, command_index) at base[buffer] + command_index.
    bases = np.zeros(len(runtime_ids) + 1, np.int64)
    tables: list[np.ndarray] = []
    buffer_matches: dict[int, int] = {}
    for position, runtime_id in enumerate(runtime_ids.tolist()):
        recorded = profile.command_buffers.get(runtime_id)
        if recorded is None:
            raise SectionmarkError(
                f"profile has dispatches from command buffer {runtime_id} but no record of its commands "
                "(was executable-metadata profiling on?)"
            )
        candidates = by_signature.get(_signature(recorded))
        if candidates is None:
            first = next((key for _i, op, key in recorded if op == "dispatch"), None)
            raise SectionmarkError(
                f"the section map does not match this profile: no static command buffer records the "
                f"{sum(op == 'dispatch' for _i, op, _k in recorded)} dispatches starting with '{first}' "
                "(is the map from another model or compile?)"
            )
        static_index, slot_ids = choose(candidates)
        buffer_matches[runtime_id] = static_index
        counted = [index for index, op, _key in recorded if op in COMMAND_OPS]
        table = np.full(max(counted) + 1, -1, np.int32)
        table[counted] = slot_ids
        tables.append(table)
        bases[position + 1] = bases[position] + len(table)
    flat = np.concatenate(tables) if tables else np.zeros(0, np.int32)

    index = dispatches["command_index"].astype(np.int64)
    in_range = index < (bases[1:] - bases[:-1])[dense] if len(dispatches) else np.zeros(0, bool)
    slot = np.full(len(dispatches), -1, np.int32)
    slot[in_range] = flat[bases[dense[in_range]] + index[in_range]]
    if (slot < 0).any():
        bad = dispatches[np.argmax(slot < 0)]
        raise SectionmarkError(
            f"profile dispatch '{profile.keys[bad['key']]}' at command {bad['command_index']} of command buffer "
            f"{bad['command_buffer']} is not a dispatch in the section map"
        )
    call_of_submission, total_calls, exact = _calls_per_submission(profile, calls)
    rank = np.searchsorted(profile.submissions["submission"], dispatches["submission"])
    if len(dispatches) and (
        (rank >= len(profile.submissions)).any()
        or (profile.submissions["submission"][np.minimum(rank, len(profile.submissions) - 1)] != dispatches["submission"]).any()
    ):
        raise SectionmarkError("profile has dispatches outside any queue submission (incomplete profile?)")
    call = call_of_submission[rank] if len(dispatches) else np.zeros(0, np.int64)
    dropped = warmup if exact and warmup < total_calls else 0

    events = np.empty(len(dispatches), ATTRIBUTED_DTYPE)
    for name in DISPATCH_DTYPE.names:
        events[name] = dispatches[name]
    events["slot"] = slot
    events["call"] = call - dropped
    events = events[events["call"] >= 0]
    return Attribution(
        events=events,
        slots=slots,
        compositions=list(compositions),
        calls=total_calls - dropped,
        warmup=dropped,
        calls_known=exact,
        keys=profile.keys,
        buffer_matches=buffer_matches,
    )
