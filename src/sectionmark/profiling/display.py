"""Jupyter's hooks for the results people evaluate in a cell: a profile, a replay, a comparison, a peak.

A result class takes them at the end of its body (``__repr__ = display.summary_repr`` ...): a dataclass keeps
a ``__repr__`` its body defines, so the generated one (every field, tens of thousands of characters for a
small model's profile) is never made. What they show is made by `sectionmark.renderers.notebook`, looked up
when called: the results import no renderer.
"""

from __future__ import annotations

from typing import Any


def summary_repr(result: Any) -> str:
    """One line saying what ``result`` is (function, calls, device, coverage, top sections for a profile)."""
    from sectionmark import renderers

    return renderers.notebook_view(result, "text")


def pretty(result: Any, printer: Any, cycle: bool) -> None:
    """IPython's plain-text display (``_repr_pretty_``): the same line."""
    printer.text(summary_repr(result))


def inline_html(result: Any) -> str:
    """Jupyter's inline view (``_repr_html_``): a profile's or replay's HTML report in a sandboxed frame, a
    comparison's tables, a peak's figures."""
    from sectionmark import renderers

    return renderers.notebook_view(result, "html")
