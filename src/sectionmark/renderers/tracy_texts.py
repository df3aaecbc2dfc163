"""What the Tracy replay writes beside its zones: the text under each zone's name, a message per call, the
device memory plot.

Tracy's GPU zones have no zone text, so a zone's text is its source location's
function string, which Tracy shows under the zone's name (tooltip, zone info,
find-zone). A dispatch zone shows its kernel-table row (`profiling.kernels`):
export, sections, arguments' shapes, bytes read and written, FLOPs; a section
zone its share of the busy time and the sections it shares fused dispatches
with. Messages and plot points are placed on the profiled run's host clock,
like the zones.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from sectionmark.profiling.attribute import Attribution
from sectionmark.profiling.kernels import KernelRow, kernels
from sectionmark.profiling.session import ProfileSession
from sectionmark.profiling.timeline import Span
from sectionmark.readers.event_model import EVENT_EXECUTE, MEMORY_POOL_STATS
from sectionmark.renderers.kernels import format_binding, format_bytes, format_sections
from sectionmark.renderers.table import format_ns
from sectionmark.section_path import format_path

MEMORY_PLOT = "device memory in use"
# The zone text of a profile whose dispatches the device timed: its executions were not timed on the host.
NO_HOST_TIMES = ("CPU side: not recorded (the device timed this profile's dispatches, the host did not time its "
                 "submissions): Tracy's CPU command setup time and delay to execution are not the run's")


class ZoneTexts:
    """The text of each replayed zone of one profile (`text`)."""

    def __init__(self, session: ProfileSession):
        self._session = session
        self._kernels: dict[int, KernelRow] = {row.site: row for row in kernels(session)}
        self._sections = {row.path: row for row in session.sections}
        self._calls = max(session.calls, 1)

    def text(self, span: Span) -> str:
        lines = self._dispatch(span) if span.kind == "dispatch" else self._section(span)
        if span.submitted_ns is None:
            lines.append(NO_HOST_TIMES)
        return "\n".join(lines)

    def _dispatch(self, span: Span) -> list[str]:
        row = self._kernels.get(span.args.get("site"))
        if row is None:
            return [span.name, span.args["sections"]]
        flops = f"{row.flops:.3g} FLOPs" if row.flops is not None else "FLOPs unknown"
        return [f"{row.key} (site {row.site})", f"sections: {format_sections(row)}",
                *(format_binding(binding) for binding in row.bindings),
                f"read {format_bytes(row.read_bytes)}, written {format_bytes(row.written_bytes)}, {flops}"]

    def _section(self, span: Span) -> list[str]:
        row = self._sections.get(span.path)
        if row is None:
            return [format_path(span.path)]
        lines = [f"{format_path(span.path)}: {row.share:.1%} of the busy time, "
                 f"{format_ns(row.busy_ns / self._calls)} per call"]
        if row.shared_with:
            partners = ", ".join(f"{format_path(path)} ({format_ns(ns / self._calls)} per call)"
                                 for path, ns in sorted(row.shared_with.items(), key=lambda item: -item[1]))
            lines.append(f"shares fused dispatches with: {partners}")
        return lines


def call_messages(attribution: Attribution, prefix: str = "") -> list[tuple[int, str]]:
    """(time, text) at the start of each call: "call 3 of 20", the warmup calls as "warmup call 1 of 3".

    A call starts at its first command-buffer execution (not at a queue operation the reader assigned to it,
    which a replayed function's first call may share with the function before it); without executions (a
    Tracy profile), a measured call at its first dispatch, and warmup calls are not known.
    """
    spans = attribution.queue_spans
    spans = spans[spans["type"] == EVENT_EXECUTE]
    if len(spans):
        calls, starts = spans["call"].astype(np.int64), spans["start_ns"]
    else:
        calls, starts = attribution.event_calls.astype(np.int64), attribution.events["start_ns"]
    messages = []
    for call in np.unique(calls).tolist():
        start = int(starts[calls == call].min())
        if call < 0:
            messages.append((start, f"{prefix}warmup call {call + attribution.warmup + 1} of {attribution.warmup}"))
        elif call < attribution.calls:
            messages.append((start, f"{prefix}call {call + 1} of {attribution.calls}"))
    return messages


def memory_in_use(attribution: Attribution, since_ns: Optional[int] = None) -> list[tuple[int, int]]:
    """(time, bytes) of device memory in live pool reservations, summed over the pools, at each memory event
    that carries the pool's figures (none: an empty list). The level before ``since_ns`` is given once at it."""
    memory = attribution.memory
    memory = memory[(memory["flags"] & MEMORY_POOL_STATS) != 0]
    reserved: dict[int, int] = {}
    points: list[tuple[int, int]] = []
    total = 0
    for time, pool, level in zip(memory["time_ns"].tolist(), memory["pool"].tolist(),
                                 memory["pool_reserved"].tolist()):
        total += level - reserved.get(pool, 0)
        reserved[pool] = level
        points.append((time, total))
    if since_ns is None:
        return points
    before = [level for time, level in points if time < since_ns]
    return ([(since_ns, before[-1])] if before else []) + [(time, level) for time, level in points if time >= since_ns]


def first_call_start(attribution: Attribution) -> Optional[int]:
    """Where a replay of ``attribution`` begins: its first execution (warmup included), else its first dispatch."""
    spans = attribution.queue_spans
    executes = spans["start_ns"][spans["type"] == EVENT_EXECUTE]
    if len(executes):
        return int(executes.min())
    return int(attribution.events["start_ns"].min()) if len(attribution.events) else None
