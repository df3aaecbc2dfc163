"""The component view as CSV: one row per component, times in nanoseconds summed over the measured calls.

Columns mean what the profile JSON's ``components[]`` fields of the same name
mean (docs/profile-json.md); ``sections`` lists the summed section paths
(JSON lists of names, ``;``-separated); p50/p95 are per call and empty for a
session read back from JSON (no per-event data).
"""

from __future__ import annotations

import json
from typing import Iterable

from sectionmark.profiling.components import BY_NAME, components
from sectionmark.profiling.session import ProfileSession
from sectionmark.renderers.csv_format import csv_text

COLUMNS = ["component", "sections", "calls", "dispatches", "busy_ns", "share", "exclusive_ns", "exclusive_share",
           "wall_ns", "p50_ns", "p95_ns"]


def render(session: ProfileSession, by: str = BY_NAME) -> str:
    """The CSV text, RFC 4180 line ends."""
    return csv_text(COLUMNS, csv_rows(session, by))


def csv_rows(session: ProfileSession, by: str = BY_NAME) -> Iterable[list]:
    """One list of cells per component, in ``COLUMNS`` order."""
    return (
        [
            component.name, ";".join(json.dumps(list(path), ensure_ascii=False) for path in component.sections),
            session.calls, component.dispatches, round(component.busy_ns), f"{component.share:.6f}",
            round(component.exclusive_ns), f"{component.exclusive_share:.6f}", round(component.wall_ns),
            round(component.per_call.p50_ns) if component.per_call else "",
            round(component.per_call.p95_ns) if component.per_call else "",
        ]
        for component in components(session, by)
    )
