"""A profile's session from its events, a window at a time: the one path from any profile file to a session.

The reader (`sectionmark.readers.sources`) gives the profile's layout first
(its submissions and queue operations), so the calls are numbered before any
dispatch is read: each window's dispatches are placed in the map's slots and
given their call (`placed_events`), the warmup calls' are dropped, and the
rest are summed into the running totals (`add_event_sums`, each sum growing
in event order as one pass over all events would). Wall time is a sweep over
the events' intervals; it is carried across windows: the events of the union
blocks that end before any later submission's execution can start are final
and swept, the others wait for the next window (with pipelined calls, one
submission's dispatches may overlap the next one's). Only sums stay: what
is kept grows with the calls and the map, not with the events. A whole read
(a capture, JSONL, a device-timed profile, a replay's in-memory profile) is
one window and takes the same path.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from sectionmark.errors import SectionmarkError
from sectionmark.profiling.attribute import (Attribution, SlotMatcher, attribution_without_events, call_numbers,
                                             check_fingerprint, measured_rows, placed_events)
from sectionmark.profiling.event_fold import EventFold, EventTotals
from sectionmark.profiling.queue_time import measured_windows
from sectionmark.profiling.session import ProfileSession
from sectionmark.readers.event_model import Profile
from sectionmark.readers.sources import EventSource, WholeProfile
from sectionmark.section_map import SectionMap


def read_session(source: EventSource, section_map: SectionMap, *, calls: Optional[int] = None, warmup: int = 0,
                 function: Optional[str] = None, workers: Optional[int] = None,
                 device: Optional[str] = None) -> ProfileSession:
    """The session of ``source``'s events joined with ``section_map`` (`sectionmark.report` documents the
    arguments); the reader's error line for a file it refuses, attribution's for events the map cannot place."""
    try:
        attribution, totals = attributed_totals(source, section_map, calls=calls, warmup=warmup, function=function)
    except SectionmarkError as problem:
        raise source.explain(problem) from None
    return ProfileSession.from_totals(attribution, totals, section_map, function, workers, device)


def profile_session(profile: Profile, section_map: SectionMap, **options) -> ProfileSession:
    """The session of a profile held in memory (one window)."""
    return read_session(WholeProfile(profile), section_map, **options)


def attributed_totals(source: EventSource, section_map: SectionMap, *, calls: Optional[int], warmup: int,
                      function: Optional[str]) -> tuple[Attribution, EventTotals]:
    """Everything the session needs of ``source``: the attribution without its events, and their sums."""
    layout = source.layout()
    check_fingerprint(layout, section_map)
    matcher = SlotMatcher(section_map, function, layout.keys)
    call_of_submission, measured_calls, exact = call_numbers(layout, calls, warmup)
    attribution = attribution_without_events(layout, matcher, call_of_submission, measured_calls, exact, warmup)
    submissions = layout.submissions
    # Where each submission's dispatches may start at the earliest: no later submission's start before it.
    execution_starts = submissions["start_ns"].astype(np.int64)
    later_starts = np.minimum.accumulate(execution_starts[::-1])[::-1] if len(submissions) else execution_starts
    fold = EventFold(attribution, measured_windows(attribution.queue_spans, measured_calls))
    submission_ids = np.ascontiguousarray(submissions["submission"])  # once, not per window
    yielded, first_left = np.zeros(len(submission_ids), bool), 0  # submissions read; the first one not yet
    for dispatches, executed in source.windows():
        yielded[np.searchsorted(submission_ids, executed["submission"])] = True
        left = yielded[first_left:]
        first_left += len(left) if left.all() else int(np.argmin(left))
        # No later event starts before the earliest start of the submissions from the first not yet read on.
        frontier = int(later_starts[first_left]) if first_left < len(later_starts) else None
        if not len(dispatches):
            fold.add(dispatches, np.zeros(0, np.int32), np.zeros(0, np.int32), frontier)
            continue
        slots, event_calls, failures = placed_events(dispatches, matcher, source.command_buffers, layout.keys,
                                                     submission_ids, call_of_submission)
        measured = measured_rows(event_calls, failures)
        fold.add(dispatches[measured], slots[measured], event_calls[measured], frontier)
    totals = fold.finish()
    full = source.profile()
    attribution.memory, attribution.allocations = full.memory, full.allocations
    return attribution, totals
