"""What a session needs of a run's measured events, summed a window at a time: `EventFold` makes `EventTotals`.

Each window's events are added to the running sums (`add_event_sums`: each
sum grows in event order, as one pass over all events would add them). Wall
time is a sweep over the events' intervals (`wall_parts`), carried across
windows: the events of the union blocks that end at or before the window's
frontier (no later event starts before it) are final and swept, the others
wait for the next window, so a block is always swept whole. Only sums stay.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from sectionmark.errors import SectionmarkError
from sectionmark.profiling.attribute import Attribution
from sectionmark.profiling.queue_time import CallWindows, union_by_window
from sectionmark.profiling.section_time import (EventSums, add_event_sums, empty_event_sums, slot_compositions,
                                                union_length, wall_parts)


@dataclass
class EventTotals:
    """What the session needs of the measured events, summed: per composition, slot and (call, composition)."""

    sums: EventSums
    wall: np.ndarray  # [compositions]: wall time (each event's part of the union, `wall_parts`)
    total_wall: int  # the union of all measured events' intervals
    call_windows: Optional[CallWindows]  # the measured calls' windows (`measured_windows`); None: calls without one
    dispatch_union: Optional[np.ndarray]  # [call windows]: the union of the dispatch intervals inside each (call time)


class EventFold:
    """The running sums of measured events added a window at a time, and the sweep carried across windows."""

    def __init__(self, attribution: Attribution, call_windows: Optional[CallWindows]):
        self._attribution = attribution
        self._slot_composition = slot_compositions(attribution)
        compositions = len(attribution.compositions)
        self.sums = empty_event_sums(max(attribution.calls, 1), compositions, len(attribution.slots))
        self._any_tiles = False
        self._wall = np.zeros(compositions)
        self._total_wall = 0
        self._call_windows = call_windows
        self._call_union = np.zeros(0 if call_windows is None else len(call_windows.starts), np.int64)
        # Events swept but not yet final: (start, end, composition) of the union blocks still open.
        self._carry = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
        self._last_final_end: Optional[int] = None  # the end of the last block made final
        self._first_start: Optional[int] = None  # the first event's start and the last one's end, in event order
        self._previous_end: Optional[int] = None

    def add(self, events: np.ndarray, slots: np.ndarray, calls: np.ndarray, frontier: Optional[int]) -> None:
        """One window's measured events (by submission, then start), their slots and calls; ``frontier``: no
        later event starts before it (None: no event comes later)."""
        if len(events):
            window = Attribution(events=events, event_slots=slots, event_calls=calls,
                                 slots=self._attribution.slots, compositions=self._attribution.compositions,
                                 calls=self._attribution.calls, warmup=0, calls_known=True, keys=[],
                                 buffer_matches={})
            self._any_tiles |= add_event_sums(window, self.sums)
            starts, ends = events["start_ns"].astype(np.int64), events["end_ns"].astype(np.int64)
            if self._last_final_end is not None and starts.min() < self._last_final_end:
                raise SectionmarkError("internal error: a dispatch starts before the frontier of the profile's "
                                       "submissions")
            # In order and apart across windows too (each window's own order is add_event_sums'): wall is busy.
            if self._previous_end is not None and starts[0] < self._previous_end:
                self.sums.disjoint = False
            self._first_start = int(starts[0]) if self._first_start is None else self._first_start
            self._previous_end = int(ends[-1])
            carried = self._carry
            self._carry = (np.concatenate([carried[0], starts]), np.concatenate([carried[1], ends]),
                           np.concatenate([carried[2], self._slot_composition[slots]]))
        self._sweep(frontier)

    def _sweep(self, frontier: Optional[int]) -> None:
        """Sweep the carried events whose union blocks end at or before ``frontier`` (all when None)."""
        starts, ends, compositions = self._carry
        if not len(starts):
            return
        durations = ends - starts
        apart = bool((starts[1:] >= ends[:-1]).all() and (durations >= 0).all())  # in order, none overlapping
        if frontier is None:
            final = np.ones(len(starts), bool)
        elif apart:  # each event is a block of its own
            final = ends <= frontier
        else:
            order = np.argsort(starts, kind="stable")
            reach = np.maximum.accumulate(ends[order])  # the end of the block each event's start lies in, so far
            block_ends = np.empty(len(starts), np.int64)
            # An event's block ends where the running reach is first at or below the next start.
            closes = np.concatenate([reach[:-1] <= starts[order][1:], [True]])
            block_of = np.cumsum(np.concatenate([[0], closes[:-1]]))
            block_ends[order] = reach[closes][block_of]
            final = block_ends <= frontier
        if not final.any():
            return
        every = bool(final.all())
        parts_starts, parts_ends = (starts, ends) if every else (starts[final], ends[final])
        parts_compositions = compositions if every else compositions[final]
        if apart:  # sorted and apart: each one's part of the union is its whole duration
            parts = (durations if every else durations[final]).astype(np.float64)
            self._wall += np.bincount(parts_compositions, weights=parts, minlength=len(self._wall))
            self._total_wall += int((parts_ends - parts_starts).sum())
            sorted_starts, sorted_ends = parts_starts, parts_ends
        else:
            self._wall += np.bincount(parts_compositions, weights=wall_parts(parts_starts, parts_ends),
                                      minlength=len(self._wall))
            order = np.argsort(parts_starts, kind="stable")
            sorted_starts, sorted_ends = parts_starts[order], parts_ends[order]
            self._total_wall += union_length(sorted_starts, sorted_ends)
        if self._call_windows is not None:
            self._call_union += union_by_window(sorted_starts, sorted_ends, self._call_windows.starts,
                                                self._call_windows.ends)
        final_end = int(parts_ends.max())
        self._last_final_end = final_end if self._last_final_end is None else max(final_end, self._last_final_end)
        self._carry = (starts[~final], ends[~final], compositions[~final]) if not every else (
            starts[:0], ends[:0], compositions[:0])

    def finish(self) -> EventTotals:
        self._sweep(None)
        sums = self.sums
        if not self._any_tiles:
            sums.tiles = None
        if self._first_start is not None and self._previous_end - self._first_start >= 1 << 53:
            sums.disjoint = False  # sums of durations no longer exact in float64 (add_event_sums' rule)
        # Disjoint events in order: each one's wall part is its whole duration, summed as its busy time is.
        wall = sums.busy.copy() if sums.disjoint else self._wall
        total_wall = sums.total_ns if sums.disjoint else self._total_wall
        windows = self._call_windows
        return EventTotals(sums, wall, total_wall, windows, None if windows is None else self._call_union)


def fold_events(attribution: Attribution, call_windows: Optional[CallWindows]) -> EventTotals:
    """`EventTotals` of the events an attribution holds (one window)."""
    fold = EventFold(attribution, call_windows)
    fold.add(attribution.events, attribution.event_slots, attribution.event_calls, None)
    return fold.finish()
