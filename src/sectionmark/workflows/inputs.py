"""Read a function argument from a ``.npy`` file, refusing anything that is not one.

``np.load`` alone turns an empty file into EOFError, reads a device such as
``/dev/zero`` as a pickle, and trusts the header's shape (a corrupt header can
ask for terabytes). Here the file must be a regular file whose ``.npy`` header
parses and whose data is exactly as long as the header says, so every bad
input is one error line before any data is read.
"""

from __future__ import annotations

import os
import tokenize
import warnings
from pathlib import Path

import numpy as np

from sectionmark.artifacts.files import open_regular
from sectionmark.errors import SectionmarkError

NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = b"PK\x03\x04"
_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def load_input_array(path: str | Path) -> np.ndarray:
    """The array in a ``.npy`` file (as written by ``np.save``), or one clear SectionmarkError."""
    path = Path(path)

    def bad(why: str) -> SectionmarkError:
        return SectionmarkError(f"cannot read input {path}: {why}")

    with open_regular(path, "input") as file:
        head = file.read(len(NPY_MAGIC))
        if not head:
            raise bad("the file is empty")
        if head.startswith(_ZIP_MAGIC):
            raise bad("an .npz archive holds several arrays; save each argument with np.save")
        if head != NPY_MAGIC:
            raise bad("not a .npy file (write it with numpy.save)")
        file.seek(0)
        try:
            version = np.lib.format.read_magic(file)
            read_header = _HEADER_READERS.get(version)
            if read_header is None:
                raise bad(f".npy format version {version[0]}.{version[1]} is not supported")
            with warnings.catch_warnings():  # a corrupt header is an error below, not also a SyntaxWarning
                warnings.simplefilter("ignore")
                shape, _fortran_order, dtype = read_header(file)
        # numpy parses the header as a Python literal: a corrupt one raises any of these.
        except (ValueError, OSError, EOFError, SyntaxError, TypeError, tokenize.TokenError) as error:
            raise bad(f"corrupt .npy header ({str(error).strip()[:200]})") from None
        if dtype.hasobject:
            raise bad("an array of Python objects cannot be passed to a compiled function")
        expected = int(np.prod(shape, dtype=object)) * dtype.itemsize
        available = os.fstat(file.fileno()).st_size - file.tell()
        if available != expected:
            raise bad(f"the header describes {expected} bytes of data but the file has {available}")
        file.seek(0)
        try:
            return np.load(file, allow_pickle=False)
        except (ValueError, OSError, EOFError) as error:
            raise bad(str(error).strip()[:200]) from None
