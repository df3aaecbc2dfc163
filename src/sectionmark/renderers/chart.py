"""PNG chart: where the time went, one bar per section (nested rows indented)."""

from __future__ import annotations

import io

from sectionmark.errors import SectionmarkError


def render(session, title: str | None = None) -> bytes:
    """The chart as PNG bytes; ``title`` replaces the default (function and time per call)."""
    rows = [row for row in session.sections if row.busy_ns > 0]
    per_call = 1e3 * max(session.calls, 1)  # µs: readable for sub-millisecond sections
    return bar_chart(
        labels=[("· " * row.depth) + row.leaf for row in rows],
        own_us=[row.exclusive_ns / per_call for row in rows],
        nested_us=[(row.busy_ns - row.exclusive_ns) / per_call for row in rows],
        notes=[f"{row.share:.1%}" + (f", {row.shared_ns / row.busy_ns:.0%} shared" if row.shared_ns else "")
               for row in rows],
        legend=("section itself", "nested sections"),
        title=title or f"sectionmark: {session.function or 'profile'} — "
                       f"{session.total_ns / 1e3 / max(session.calls, 1):.1f} µs per call",
    )


def pyplot(what: str):
    """matplotlib's pyplot on the file-only Agg backend, or one line saying ``what`` needs it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SectionmarkError(f"the {what} needs matplotlib: pip install 'sectionmark[chart]'") from None
    return plt


def names_as_text():
    """Names are text, never mathtext: "cost $5 and $6" stays so, and "$\\frac$" cannot fail the render."""
    import matplotlib

    return matplotlib.rc_context({"text.parse_math": False})


def png_bytes(plt, figure) -> bytes:
    """``figure`` as PNG bytes; the figure is closed whatever happens."""
    png = io.BytesIO()
    try:
        figure.savefig(png, dpi=110, format="png")
    finally:
        plt.close(figure)
    return png.getvalue()


def stacked_png(pictures: list[bytes]) -> bytes:
    """PNG pictures one under the other in one PNG, every pixel as drawn (white beside a narrower one).

    Pillow comes with matplotlib; the pixels are copied, never resampled.
    """
    pyplot("picture")
    import numpy as np
    from PIL import Image

    if not pictures:
        raise SectionmarkError("no function of the replay ran a dispatch: there is nothing to draw")
    arrays = [np.asarray(Image.open(io.BytesIO(picture)).convert("RGBA")) for picture in pictures]
    width = max(array.shape[1] for array in arrays)
    stacked = np.concatenate([np.pad(array, ((0, 0), (0, width - array.shape[1]), (0, 0)), constant_values=255)
                              for array in arrays])
    png = io.BytesIO()
    Image.fromarray(stacked, "RGBA").save(png, format="png")
    return png.getvalue()


def bar_chart(labels: list[str], own_us: list[float], nested_us: list[float], notes: list[str],
              legend: tuple[str, str], title: str) -> bytes:
    """Horizontal stacked bars (own time, then nested time) in µs per call, first row on top, as PNG bytes."""
    plt = pyplot("chart")
    with names_as_text():
        return _draw(plt, labels, own_us, nested_us, notes, legend, title)


def _draw(plt, labels: list[str], own_us: list[float], nested_us: list[float], notes: list[str],
          legend: tuple[str, str], title: str) -> bytes:
    height = max(3.0, 0.32 * len(labels) + 1.2)
    figure, axes = plt.subplots(figsize=(10, height))
    positions = list(range(len(labels)))[::-1]
    axes.barh(positions, own_us, color="#4C8BF5", label=legend[0])
    axes.barh(positions, nested_us, left=own_us, color="#C6DAFC", label=legend[1])
    for position, own, nested, note in zip(positions, own_us, nested_us, notes):
        axes.text(own + nested, position, " " + note, va="center", fontsize=7)
    axes.set_yticks(positions, labels, fontsize=8)
    axes.set_xlabel("busy time per call (µs)")
    axes.set_title(title)
    axes.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    return png_bytes(plt, figure)
