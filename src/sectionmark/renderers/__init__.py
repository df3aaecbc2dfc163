"""Renderers: one module per output format, each with ``save(session, path)``."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Union

from sectionmark.errors import SectionmarkError


def write_text(path: Union[str, Path], text: str, newline: Optional[str] = None) -> Path:
    """Write an output file, turning OS errors into one user-facing line."""
    path = Path(path)
    try:
        path.write_text(text, encoding="utf-8", newline=newline)
    except OSError as error:
        raise SectionmarkError(f"cannot write {path}: {error.strerror}") from None
    return path
