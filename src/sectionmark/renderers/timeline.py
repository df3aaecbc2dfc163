"""PNG timeline of one call: where in the call each section runs.

One horizontal bar per section that ran, from its median start to its median
end (offsets from the call's start: `SectionStats.start_ns` / ``end_ns``),
with whiskers from the earliest to the latest start and end over the calls:
a section whose whiskers are long moves around from call to call. Nested rows
are indented by depth, "(unmarked)" last, as in the table. It draws the
session's statistics only, so a profile read back from JSON draws the same.
"""

from __future__ import annotations


from sectionmark.renderers.chart import names_as_text, png_bytes, pyplot


def render(session, title: str | None = None) -> bytes:
    """The timeline as PNG bytes; ``title`` replaces the default (function, and median call length when known)."""
    rows = [row for row in session.sections if row.start_ns is not None and row.end_ns is not None]
    plt = pyplot("timeline")
    # The median call's length where the profile has queue operations (without them a call has no known end).
    length = f" (median call {session.call_time.call_p50_ns / 1e3:.1f} µs)" if session.call_time else ""
    title = title or f"sectionmark: {session.function or 'profile'} — where in the call each section runs{length}"
    with names_as_text():
        figure, axes = plt.subplots(figsize=(10, max(3.0, 0.32 * len(rows) + 1.2)))
        positions = list(range(len(rows)))[::-1]
        for position, row in zip(positions, rows):
            start, end = row.start_ns, row.end_ns
            axes.barh(position, (end.p50 - start.p50) / 1e3, left=start.p50 / 1e3, height=0.6,
                      color="#C6C6C6" if row.unmarked else "#4C8BF5")
            for offsets in (start, end):
                axes.errorbar(offsets.p50 / 1e3, position, xerr=[[(offsets.p50 - offsets.min) / 1e3],
                                                                [(offsets.max - offsets.p50) / 1e3]],
                              fmt="none", ecolor="black", elinewidth=0.8, capsize=2)
        axes.set_yticks(positions, [("· " * row.depth) + row.leaf for row in rows], fontsize=8)
        axes.set_xlabel("time from the call's start (µs): bar median start to median end, whiskers min..max")
        axes.set_xlim(left=0)
        axes.set_title(title, fontsize=10)
        figure.tight_layout()
        return png_bytes(plt, figure)
