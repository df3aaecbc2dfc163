"""Turns attributed dispatch events into nested timelines, one per queue.

Perfetto and Tracy both draw a track as a strict stack of slices, while
dispatches inside one barrier region may overlap. This processor builds, per
queue, a main track of section spans enclosing their dispatches: a section
span runs from its first dispatch's start to its last dispatch's end, so the
spans are exactly the profiled timestamps. Dispatches that overlap an earlier
one (they ran concurrently) go to extra lanes, flat tracks beside the main
one, which keeps the main track strictly nested and no time hidden.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Optional

import numpy as np

from sectionmark.errors import SectionmarkError
from sectionmark.section_path import SectionPath, format_path
from sectionmark.profiling.attribute import Attribution
from sectionmark.readers.queue_tracks import queue_track_names


@dataclass
class Span:
    name: str
    start_ns: int
    end_ns: int
    kind: str  # "section" or "dispatch"
    path: SectionPath  # section path (for a dispatch: the section it is drawn in)
    children: list["Span"] = field(default_factory=list)
    args: dict = field(default_factory=dict)

    def walk(self, depth: int = 0) -> Iterator[tuple[int, "Span"]]:
        """Pre-order (depth, span): the order a strict stack is emitted in."""
        yield depth, self
        for child in self.children:
            yield from child.walk(depth + 1)


@dataclass
class QueueTimeline:
    queue: int
    main: list[Span]  # top-level spans: sections (with nested sections/dispatches) and unmarked dispatches
    lanes: list[list[Span]]  # extra flat lanes for dispatches that overlapped the main track

    def tracks(self) -> list[tuple[str, list[Span]]]:
        """(track name, top-level spans): the main track, then each lane (names: `readers.queue_tracks`)."""
        return list(zip(queue_track_names(self.queue, len(self.lanes)), [self.main, *self.lanes]))


def dispatch_label(parts: tuple[tuple[SectionPath, float], ...]) -> tuple[SectionPath, str]:
    """Where a dispatch is drawn (its heaviest section) and how its sections are described."""
    path = max(parts, key=lambda part: part[1])[0]
    if len(parts) == 1:
        return path, format_path(path)
    shares = ", ".join(f"{format_path(p)} {w:.0%}" for p, w in parts)
    return path, f"shared: {shares}"


def build_timelines(attribution: Attribution) -> list[QueueTimeline]:
    events = attribution.events
    timelines = []
    for queue in np.unique(events["queue"]) if len(events) else []:
        mine = attribution.select(events["queue"] == queue)
        timelines.append(_queue_timeline(int(queue), mine.select(np.argsort(mine.events["start_ns"], kind="stable"))))
    return timelines


def session_timelines(session, events: Optional[Attribution] = None) -> list[QueueTimeline]:
    """Timelines of a run's ``events`` (`sectionmark.ProfileRun.events`), or of the events a ProfileSession holds
    (a replay's function); one error line for a session without events (read back from JSON)."""
    attribution = events if events is not None else session.attribution
    if attribution is None:
        raise SectionmarkError("this profile has no per-dispatch events (it was loaded from JSON); re-run the report from the .ireeprof")
    return build_timelines(attribution)


def _queue_timeline(queue: int, attribution: Attribution) -> QueueTimeline:
    """The spans of one queue's events (``attribution``'s, in start order)."""
    root = Span("", 0, 0, "section", ())
    stack: list[Span] = [root]  # open spans; stack[i] has path of length i
    lanes: list[list[Span]] = []
    main_end = np.iinfo(np.int64).min  # end of the last dispatch on the main track
    for event, slot in zip(attribution.events, attribution.event_slots.tolist()):
        parts = attribution.compositions[attribution.slots[slot].composition]
        path, sections = dispatch_label(parts)
        start, end = int(event["start_ns"]), int(event["end_ns"])
        dispatch = Span(
            attribution.keys[event["key"]], start, end, "dispatch", path,
            args={"sections": sections, "command_index": int(event["command_index"])},
        )
        if start < main_end:  # overlaps the previous dispatch: put it on a free lane
            _place_on_lane(lanes, dispatch)
            continue
        # Close sections that are not a prefix of this dispatch's path, open the missing ones.
        common = 0
        while common < len(path) and common + 1 < len(stack) and stack[common + 1].name == path[common]:
            common += 1
        del stack[common + 1:]
        for depth in range(common, len(path)):
            span = Span(path[depth], start, end, "section", path[: depth + 1])
            stack[-1].children.append(span)
            stack.append(span)
        stack[-1].children.append(dispatch)
        for span in stack[1:]:
            span.end_ns = max(span.end_ns, end)
        main_end = end
    return QueueTimeline(queue, root.children, lanes)


def _place_on_lane(lanes: list[list[Span]], dispatch: Span) -> None:
    for lane in lanes:
        if lane[-1].end_ns <= dispatch.start_ns:
            lane.append(dispatch)
            return
    lanes.append([dispatch])
