"""The colours sections were given in code: the one way ``section(name, color=...)`` reaches the section map.

Op locations carry section names only, so the marker notes each colour here
(`note_color`) and the compiler asks for them when it writes a map
(`declared_colors`). A module of its own, importing nothing: the compiler
reads it without importing the marker (and, through it, the framework registry).
"""

from __future__ import annotations

from typing import Optional

__all__ = ["note_color", "declared_colors"]

_colors: dict[str, int] = {}  # section name -> the colour last given with it in this process


def note_color(name: str, color: Optional[int]) -> None:
    if color is not None:
        _colors[name] = color


def declared_colors() -> dict[str, int]:
    """Every section name given a ``color=`` in this process, with the colour last given to it."""
    return dict(_colors)
