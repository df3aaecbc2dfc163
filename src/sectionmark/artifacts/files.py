"""Opening the files sectionmark reads: regular files only, without blocking, to a known size.

A path given as a module, profile, capture, map or input can name anything:
a FIFO (opening it for reading blocks until a writer comes, which may be
never), a device such as ``/dev/zero`` (endless), a directory, or a symlink to
one of them. Every reader opens through here: the open does not block
(``O_NONBLOCK``), the opened file itself is checked (``fstat``, so a file
swapped in after a check is still caught), and whole-file reads stop at the
size the file had when opened.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO, Optional, Union

from sectionmark.errors import SectionmarkError

PathLike = Union[str, os.PathLike]


def open_regular(path: PathLike, what: str) -> BinaryIO:
    """``path`` opened for binary reading, or one error line if it cannot be or is not a regular file.

    ``what`` names the file in that line: ``cannot read {what} {path}: ...``
    (``profile``, ``Tracy capture``).
    """
    path = Path(path)
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        raise SectionmarkError(f"cannot read {what} {path}: {error.strerror or error}") from None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise SectionmarkError(f"cannot read {what} {path}: not a regular file")
        os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def read_regular(path: PathLike, what: str, limit: Optional[int] = None) -> bytes:
    """The whole of a regular file (`open_regular`), at most the size it had when opened.

    ``limit``: refuse a larger file with one line before reading it (the
    largest plausible ``what``).
    """
    with open_regular(path, what) as file:
        size = os.fstat(file.fileno()).st_size
        if limit is not None and size > limit:
            raise SectionmarkError(f"cannot read {what} {path}: {size:,} bytes, more than a {what} can be "
                                   f"({limit:,})")
        try:
            return file.read(size)
        except OSError as error:
            raise SectionmarkError(f"cannot read {what} {path}: {error.strerror or error}") from None


MAX_JSON_BYTES = 256 << 20  # far beyond any profile (1,000 samples a section); a larger file is refused unread


def read_json(path: PathLike, what: str, limit: int = MAX_JSON_BYTES) -> Any:
    """The JSON document of a file (``what`` it should be, for the error line), not yet checked against any
    schema: read like every input (`read_regular`: a FIFO or a device refused without blocking, a file over
    ``limit`` bytes unread), one error line when it is not JSON or is nested too deeply to read."""
    path = Path(path)
    data = read_regular(path, what, limit=limit)
    try:
        return json.loads(data.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise SectionmarkError(f"{path} is not JSON: {error}") from None
    except RecursionError:
        raise SectionmarkError(f"{path} is not a {what}: nested too deeply") from None
