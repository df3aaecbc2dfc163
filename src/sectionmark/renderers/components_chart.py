"""The component view as a PNG chart: one bar per component, its own time and the time of sections nested in it."""

from __future__ import annotations

from sectionmark.profiling.components import BY_NAME, components
from sectionmark.profiling.session import ProfileSession
from sectionmark.renderers.chart import bar_chart


def render(session: ProfileSession, by: str = BY_NAME) -> bytes:
    """PNG bytes; bars in µs of busy time per call, most time first, "(unmarked)" last."""
    rows = components(session, by)
    per_call = 1e3 * max(session.calls, 1)
    grouping = "by name" if by == BY_NAME else f"matching {by!r}"
    return bar_chart(
        # "(unmarked)" sums the root path () alone: no count of sections beside it.
        labels=[f"{row.name} ({len(row.sections)})" if any(row.sections) else row.name for row in rows],
        own_us=[row.exclusive_ns / per_call for row in rows],
        nested_us=[(row.busy_ns - row.exclusive_ns) / per_call for row in rows],
        notes=[f"{row.share:.1%}" for row in rows],
        legend=("the component itself", "sections nested in it"),
        title=f"sectionmark components {grouping}: {session.function or 'profile'}, busy time per call",
    )
