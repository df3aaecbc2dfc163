"""The records of a mapped .ireeprof bundle: the walk of their headers, the chunks of fixed-size records, their byte
offsets made a window at a time, gathered into packed copies, and the mapped pages of a window given back after it.

`sectionmark.readers.ireeprof_bundle` reads every table of a bundle through
these, so a long profile is read in windows of bounded size.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from typing import Union

import numpy as np

from sectionmark.readers.event_model import native


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


RECORD_HEADER_SIZE = 104
RECORD_WALK_WINDOW = 64 << 20  # bytes of the file walked for record headers per pass (`walk_records`)
_RECORD_LENGTH = struct.Struct("<Q")
RECORD_HEADER_DTYPE = np.dtype(
    {
        "names": ["record_length", "payload_length", "header_size", "type_length", "name_length", "device", "queue",
                  "chunk_flags", "dropped", "status", "record_type"],
        "formats": ["<u8", "<u8", "<u4", "<u4", "<u4", "<u4", "<u4", "<u8", "<u8", "<u4", "<u2"],
        "offsets": [0, 8, 56, 60, 64, 68, 72, 80, 88, 96, 100],
        "itemsize": RECORD_HEADER_SIZE,
    }
)


def _record_table(data: np.ndarray, start: int, end: int, known_types: tuple[bytes, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Walk the records of ``data[start:end]``: (offsets, headers, kinds).

    ``offsets``: of every record; the walk stops after a record whose header is cut short or whose length is
    below a header's or past ``end`` (``_bundle_chunks`` reports it). ``headers`` (``RECORD_HEADER_DTYPE``):
    of the records with a whole header (all but maybe the last); ``kinds``: the index in ``KNOWN_CHUNKS`` of
    each one's content type, -1 when it is none of them or its type string does not lie inside the record.
    In C when the extension is built.
    """
    if native() is not None:
        offsets, headers, kinds = native().record_table(data, start, end, known_types)
        return (np.frombuffer(offsets, np.int64), np.frombuffer(headers, RECORD_HEADER_DTYPE),
                np.frombuffer(kinds, np.int64))
    offsets, offset, unpack = [], start, _RECORD_LENGTH.unpack_from
    while offset < end:
        offsets.append(offset)
        if end - offset < RECORD_HEADER_SIZE:
            break
        (length,) = unpack(data, offset)
        if length < RECORD_HEADER_SIZE or length > end - offset:
            break
        offset += length
    whole = np.array(offsets[: len(offsets) - (end - offsets[-1] < RECORD_HEADER_SIZE)] if offsets else [], np.int64)
    headers = records_at(data, whole, RECORD_HEADER_DTYPE)
    return np.array(offsets, np.int64), headers, _content_kinds(data, whole, headers, end, known_types)


def _content_kinds(data: np.ndarray, offsets: np.ndarray, headers: np.ndarray, end: int,
                   known_types: tuple[bytes, ...]) -> np.ndarray:
    """``_record_table``'s kinds, with numpy: the type strings of each length are gathered and looked up once."""
    length, header_size = headers["record_length"], headers["header_size"].astype(np.uint64)
    type_length = headers["type_length"].astype(np.uint64)
    fits = ((length <= (end - offsets).astype(np.uint64)) & (header_size >= RECORD_HEADER_SIZE)
            & (header_size <= length) & (type_length <= length - header_size))
    kinds = np.full(len(offsets), -1, np.int64)
    codes = {name: index for index, name in enumerate(known_types)}
    rows = np.flatnonzero(fits)
    for size in set(type_length[rows].tolist()) & {len(name) for name in codes}:
        chosen = rows[type_length[rows] == size]
        raw = records_at(data, offsets[chosen] + header_size[chosen].astype(np.int64), np.dtype(f"V{size}"))
        kinds[chosen] = [codes.get(value, -1) for value in raw.tolist()]
    return kinds


def content_type(data: np.ndarray, offset: int, header: np.void, prefix: str) -> str:
    """The content type of the record at ``offset`` (its lengths checked), ``_CONTENT_PREFIX`` removed."""
    start = offset + int(header["header_size"])
    return bytes(data[start : start + int(header["type_length"])]).decode("utf-8", "replace").removeprefix(
        prefix)


def walk_records(mapped: mmap.mmap, data: np.ndarray, start: int, end: int,
                 known_types: tuple[bytes, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`_record_table` of ``data[start:end]``, walked ``RECORD_WALK_WINDOW`` bytes at a time, each window's pages
    given back after it (records are about a page long, so the walk maps in every page of the file).

    A window's walk lists the records wholly inside it, then stops at the first that is not: one crossing the
    window's end is walked again at the start of the next window (which reaches at least to its end), so only
    the last window can stop at a bad record, where the walk of the whole range stops too.
    """
    parts, position, reach = [], start, start
    while True:
        stop = min(end, max(position + RECORD_WALK_WINDOW, reach))
        offsets, headers, kinds = _record_table(data, position, stop, known_types)
        release_pages(mapped, position, stop)
        lengths = headers["record_length"].astype(np.int64)
        inside = (lengths >= RECORD_HEADER_SIZE) & (lengths <= stop - offsets[: len(headers)])
        whole = int(np.argmin(inside)) if not inside.all() else len(headers)
        if stop == end or (whole < len(headers) and lengths[whole] < RECORD_HEADER_SIZE):
            parts.append((offsets, headers, kinds))  # the end, or a bad length: the whole walk stops there too
            break
        parts.append((offsets[:whole], headers[:whole], kinds[:whole]))
        if whole == len(offsets):  # every record inside: the next one starts where the last one ends
            position = reach = int(offsets[-1] + lengths[-1])
        else:  # the first record not inside (its header cut, or its end past the window's) starts the next window
            position = int(offsets[whole])
            reach = position + (int(lengths[whole]) if whole < len(headers) else RECORD_HEADER_SIZE)
    return tuple(np.concatenate([part[index] for part in parts]) for index in range(3))
