"""Turns attributed dispatch events into nested timelines, one per queue.

Perfetto and Tracy both draw a track as a strict stack of slices, while
dispatches inside one barrier region may overlap. This processor builds, per
queue, a main track of section spans enclosing their dispatches: a section
span runs from its first dispatch's start to its last dispatch's end, so the
spans are exactly the profiled timestamps. Dispatches that overlap an earlier
one (they ran concurrently) go to extra lanes, flat tracks beside the main
one, which keeps the main track strictly nested and no time hidden.

Each span also carries its host side where the profile timed it: when the
command buffer of its first and of its last dispatch was submitted (the start
of the queue's execution around the dispatch), for viewers that show how long
work waited after its submission (Tracy's "delay to execution").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Optional

import numpy as np

from sectionmark.errors import SectionmarkError
from sectionmark.section_map import section_colors
from sectionmark.section_path import SectionPath, format_path
from sectionmark.profiling.attribute import Attribution
from sectionmark.readers.event_model import EVENT_EXECUTE
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
    # Host time of the submission of its first / last dispatch's command buffer; None: not timed on the host
    # (a device-timed or Tracy profile).
    submitted_ns: Optional[int] = None
    last_submitted_ns: Optional[int] = None

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

    def tracks(self, device: Optional[str] = None) -> list[tuple[str, list[Span]]]:
        """(track name, top-level spans): the main track, then each lane (names: `readers.queue_tracks`, after
        ``device`` when given)."""
        return list(zip(queue_track_names(self.queue, len(self.lanes), device), [self.main, *self.lanes]))


def dispatch_label(parts: tuple[tuple[SectionPath, float], ...]) -> tuple[SectionPath, str]:
    """Where a dispatch is drawn (its heaviest section) and how its sections are described."""
    path = max(parts, key=lambda part: part[1])[0]
    if len(parts) == 1:
        return path, format_path(path)
    shares = ", ".join(f"{format_path(p)} {w:.0%}" for p, w in parts)
    return path, f"shared: {shares}"


def build_timelines(attribution: Attribution) -> list[QueueTimeline]:
    events = attribution.events
    submitted = submission_times(attribution)
    timelines = []
    for queue in np.unique(events["queue"]) if len(events) else []:
        rows = np.flatnonzero(events["queue"] == queue)
        rows = rows[np.argsort(events["start_ns"][rows], kind="stable")]
        timelines.append(_queue_timeline(int(queue), attribution.select(rows),
                                         None if submitted is None else submitted[rows]))
    return timelines


def submission_times(attribution: Attribution) -> Optional[np.ndarray]:
    """Per event, the host time its command buffer was submitted: the start of the latest execution that
    started before it (IREE times each execution on the host from its submission). None when the profile
    timed no executions on the host (device-timed dispatches, a Tracy capture)."""
    spans = attribution.queue_spans
    if not attribution.submissions_on_host:
        return None
    starts = np.sort(spans["start_ns"][spans["type"] == EVENT_EXECUTE])
    if not len(starts):
        return None
    events = attribution.events["start_ns"]
    index = np.searchsorted(starts, events, side="right") - 1
    return np.where(index >= 0, starts[np.maximum(index, 0)], events)


def session_timelines(session, events: Optional[Attribution] = None) -> list[QueueTimeline]:
    """Timelines of a run's ``events`` (`sectionmark.ProfileRun.events`), or of the events a ProfileSession holds
    (a replay's function); one error line for a session without events (read back from JSON)."""
    attribution = events if events is not None else session.attribution
    if attribution is None:
        raise SectionmarkError("this profile has no per-dispatch events (it was loaded from JSON); re-run the report from the .ireeprof")
    return build_timelines(attribution)


def session_colors(session) -> dict[SectionPath, int]:
    """Each section's colour (0xRRGGBB) in every view of ``session``: its code's, else the palette's by name in
    the rows' order (`sectionmark.section_map.section_colors`); a dispatch takes its span's path's colour."""
    return section_colors([row.path for row in session.sections], session.colors)


def _queue_timeline(queue: int, attribution: Attribution, submitted: Optional[np.ndarray]) -> QueueTimeline:
    """The spans of one queue's events (``attribution``'s, in start order); ``submitted``: each event's
    `submission_times`."""
    root = Span("", 0, 0, "section", ())
    stack: list[Span] = [root]  # open spans; stack[i] has path of length i
    lanes: list[list[Span]] = []
    main_end = np.iinfo(np.int64).min  # end of the last dispatch on the main track
    submissions = [None] * len(attribution.events) if submitted is None else submitted.tolist()
    for event, slot, submission in zip(attribution.events, attribution.event_slots.tolist(), submissions):
        parts = attribution.compositions[attribution.slots[slot].composition]
        path, sections = dispatch_label(parts)
        start, end = int(event["start_ns"]), int(event["end_ns"])
        dispatch = Span(
            attribution.keys[event["key"]], start, end, "dispatch", path,
            args={"sections": sections, "command_index": int(event["command_index"]),
                  "site": attribution.slots[slot].command.site},
            submitted_ns=submission, last_submitted_ns=submission,
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
            span = Span(path[depth], start, end, "section", path[: depth + 1], submitted_ns=submission)
            stack[-1].children.append(span)
            stack.append(span)
        stack[-1].children.append(dispatch)
        for span in stack[1:]:
            span.end_ns = max(span.end_ns, end)
            span.last_submitted_ns = submission
        main_end = end
    return QueueTimeline(queue, root.children, lanes)


def _place_on_lane(lanes: list[list[Span]], dispatch: Span) -> None:
    for lane in lanes:
        if lane[-1].end_ns <= dispatch.start_ns:
            lane.append(dispatch)
            return
    lanes.append([dispatch])
