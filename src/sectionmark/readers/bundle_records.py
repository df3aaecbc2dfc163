"""The fixed-size records of a mapped .ireeprof bundle: the chunks that hold them, their byte offsets made a
window at a time, gathered into packed copies, and the mapped pages of a window given back after it.

`sectionmark.readers.ireeprof_bundle` reads every table of a bundle through
these, so a long profile is read in windows of bounded size.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass
from typing import Union

import numpy as np


class UnsupportedLayout(Exception):
    """The bundle uses a record layout this reader was not checked against."""


@dataclass
class Chunks:
    """The payloads of one chunk type: byte offsets into the file and lengths, in file order."""

    starts: np.ndarray  # int64
    lengths: np.ndarray  # int64
    devices: np.ndarray  # uint32: the physical device ordinal of each chunk's header
    queues: np.ndarray  # uint32: its queue ordinal

    def views(self, data: mmap.mmap) -> list[memoryview]:
        view = memoryview(data)
        return [view[start : start + length] for start, length in zip(self.starts.tolist(), self.lengths.tolist())]


def records_at(data: np.ndarray, offsets: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The ``dtype`` records starting at byte ``offsets`` of ``data`` (uint8), gathered into one packed copy.

    Records of a bundle sit at any byte alignment, so ``data`` is viewed as one
    record starting at every byte (stride 1) and indexed once: no per-chunk
    Python work and no intermediate copy of the chunks.
    """
    if not len(offsets):
        return np.zeros(0, dtype)
    every_byte = np.ndarray((len(data) - dtype.itemsize + 1,), dtype, buffer=data, strides=(1,))
    return every_byte[offsets]


class RecordPositions:
    """Byte offsets of the fixed-size records of ``chunks``, made for the records asked (a window of them), not
    for all at once: an offset per record would be 8 bytes per event of a long profile, and making them all one
    more pass over fresh memory."""

    def __init__(self, chunks: Chunks, itemsize: int):
        if (chunks.lengths % itemsize).any():
            bad = chunks.lengths[np.argmax(chunks.lengths % itemsize != 0)]
            raise UnsupportedLayout(f"{bad}-byte chunk is not a whole number of records")
        self._counts = chunks.lengths // itemsize
        self._starts, self._itemsize = chunks.starts, itemsize
        self._firsts = np.cumsum(self._counts) - self._counts  # index of each chunk's first record among all
        self._count = int(self._counts.sum())

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, records: Union[slice, list[int]]) -> np.ndarray:
        """The offsets of records ``records`` (a slice without step, or a list of indices)."""
        if not isinstance(records, slice):
            indices = np.asarray(records, np.int64)
            chunk = self._chunk_of(indices)
            return self._starts[chunk] + (indices - self._firsts[chunk]) * self._itemsize
        begin, end, _step = records.indices(self._count)
        if end <= begin:
            return np.zeros(0, np.int64)
        # The chunks the window reaches, each repeated for its records inside the window: one lookup per window.
        first, last = self._chunk_of(np.array([begin, end - 1]))
        firsts, counts = self._firsts[first : last + 1], self._counts[first : last + 1]
        inside = np.minimum(firsts + counts, end) - np.maximum(firsts, begin)
        base = np.repeat(self._starts[first : last + 1] - firsts * self._itemsize, np.maximum(inside, 0))
        return base + np.arange(begin, end, dtype=np.int64) * self._itemsize

    def _chunk_of(self, indices: np.ndarray) -> np.ndarray:
        """Each record's chunk: the last one starting at or before it (empty chunks share their successor's first)."""
        return np.searchsorted(self._firsts, indices, side="right") - 1


def fixed_records(data: np.ndarray, chunks: Chunks, dtype: np.dtype) -> np.ndarray:
    """All records of chunks of fixed-size records, checking each record's own length."""
    records = records_at(data, RecordPositions(chunks, dtype.itemsize)[:], dtype)
    if len(records) and (records["record_length"] != dtype.itemsize).any():
        raise UnsupportedLayout("record length differs from the known layout")
    return records


def release_pages(mapped: mmap.mmap, start: int, end: int) -> None:
    """Give the mapped pages of bytes ``[start, end)`` back (they stay in the page cache: a later read maps them
    in again), so that reading a long profile does not keep the whole file in this process's RSS."""
    page = mmap.PAGESIZE
    first = start // page * page
    if end > first and hasattr(mmap, "MADV_DONTNEED"):
        mapped.madvise(mmap.MADV_DONTNEED, first, end - first)
