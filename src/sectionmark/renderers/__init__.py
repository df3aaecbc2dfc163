"""Renderers: one module per output format, each with ``save(session, path)``."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Union

from sectionmark.outputs import write_atomic


def write_text(path: Union[str, Path], text: str, newline: Optional[str] = None) -> Path:
    """Write an output file all at once (see `sectionmark.outputs`); errors are one user-facing line."""
    return write_atomic(path, text, newline=newline)
