"""Renderers: one module per output format, each with ``save(session, path, inputs=())``;
``inputs`` are the files the output must never replace."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional, Union

from sectionmark.outputs import PathLike, write_atomic


def write_text(
    path: Union[str, Path], text: str, newline: Optional[str] = None, inputs: Iterable[PathLike] = ()
) -> Path:
    """Write an output file all at once, never onto one of ``inputs`` (see `sectionmark.outputs`)."""
    return write_atomic(path, text, inputs=inputs, newline=newline)
