"""PNG chart: where the time went, one bar per section (nested rows indented)."""

from __future__ import annotations

import io

from sectionmark.errors import SectionmarkError


def render(session, title: str | None = None) -> bytes:
    """The chart as PNG bytes; ``title`` replaces the default (function and time per call)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SectionmarkError("the chart needs matplotlib: pip install 'sectionmark[chart]'") from None
    rows = [row for row in session.sections if row.busy_ns > 0]
    labels = [("· " * row.depth) + row.leaf for row in rows]
    per_call = 1e3 * max(session.calls, 1)  # µs: readable for sub-millisecond sections
    own_us = [row.exclusive_ns / per_call for row in rows]
    nested_us = [(row.busy_ns - row.exclusive_ns) / per_call for row in rows]
    height = max(3.0, 0.32 * len(rows) + 1.2)
    figure, axes = plt.subplots(figsize=(10, height))
    positions = list(range(len(rows)))[::-1]
    axes.barh(positions, own_us, color="#4C8BF5", label="section itself")
    axes.barh(positions, nested_us, left=own_us, color="#C6DAFC", label="nested sections")
    for position, row, own, nested in zip(positions, rows, own_us, nested_us):
        note = f"{row.share:.1%}" + (f", {row.shared_ns / row.busy_ns:.0%} shared" if row.shared_ns else "")
        axes.text(own + nested, position, " " + note, va="center", fontsize=7)
    axes.set_yticks(positions, labels, fontsize=8)
    axes.set_xlabel("busy time per call (µs)")
    axes.set_title(title or f"sectionmark: {session.function or 'profile'} — {session.total_ns / 1e3 / max(session.calls, 1):.1f} µs per call")
    axes.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    png = io.BytesIO()
    try:
        figure.savefig(png, dpi=110, format="png")
    finally:
        plt.close(figure)
    return png.getvalue()
