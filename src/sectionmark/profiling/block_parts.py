"""The wall parts of the union blocks a sweep makes final, each block's alone (`block_parts`): the numpy twin of
the C sweep carried across the reader's windows (`_sweeps.h`'s fold_sweep), which starts its prefix sums from 0
at each union block. A block's parts then do not depend on the blocks swept with it, so the walls are the same
to the bit whatever windows the events came in (a prefix carried from earlier blocks rounds the thirds of three
dispatches running at once otherwise, and a wall of n + 1/2 rounds to another nanosecond)."""

from __future__ import annotations

import numpy as np


def block_parts(starts: np.ndarray, ends: np.ndarray, order: np.ndarray, closes: np.ndarray) -> np.ndarray:
    """The wall parts of the intervals ``order`` (in start order), whose union blocks end at ``closes`` (their last
    positions in ``order``): `section_time.wall_parts` of each block alone, to the bit, as the C sweep gives them
    (its prefix starts from 0 at each block). One sweep of every block with several intervals at once: their
    boundaries sorted by (block, time), the prefix summed within each block (`prefix_by_block`)."""
    starts, ends = starts[order], ends[order]
    parts = (ends - starts).astype(np.float64)  # an interval alone: its duration
    firsts = np.concatenate([[0], closes[:-1] + 1])
    swept = (closes > firsts) | (parts[firsts] < 0)  # several at once (or one ending before it starts: clipped)
    if not swept.any():
        return parts
    sizes = closes - firsts + 1
    rows = np.flatnonzero(np.repeat(swept, sizes))
    blocks = np.repeat(np.arange(len(closes)), sizes)[rows]
    values, value_blocks = np.concatenate([starts[rows], ends[rows]]), np.concatenate([blocks, blocks])
    by_time = np.lexsort((values, value_blocks))  # stable: wall_parts's order within each block
    ordered, ordered_blocks = values[by_time], value_blocks[by_time]
    block_begins = np.concatenate([[True], ordered_blocks[1:] != ordered_blocks[:-1]])
    new = block_begins | np.concatenate([[True], ordered[1:] != ordered[:-1]])
    boundaries, index = ordered[new], np.empty(len(values), np.int64)
    index[by_time] = np.cumsum(new) - 1
    first, last = index[: len(rows)], index[len(rows):]
    change = np.bincount(first, minlength=len(boundaries)) - np.bincount(last, minlength=len(boundaries))
    active = np.cumsum(change)[:-1]  # a block's intervals all end in it: none across from one block to the next
    lengths = np.diff(boundaries).astype(np.float64)
    per_interval = np.divide(lengths, active, out=np.zeros_like(lengths), where=active > 0)
    prefix = prefix_by_block(per_interval, np.flatnonzero(block_begins[new]))
    parts[rows] = np.clip(prefix[last] - prefix[first], 0.0, parts[rows])
    return parts


def prefix_by_block(increments: np.ndarray, heads: np.ndarray) -> np.ndarray:
    """Prefix sums at each boundary (``increments[i]``: from boundary i to i + 1), starting from 0.0 again at each
    block's first boundary (``heads``, sorted), each added one after the other as ``np.cumsum`` of the block alone
    adds them: the blocks' i-th sums made together, i up to the longest short block, and each long block's
    by ``np.cumsum``."""
    prefix = np.zeros(len(increments) + 1)
    ends = np.append(heads[1:], len(prefix))
    lengths = ends - heads
    short = lengths <= 64
    for step in range(1, int(lengths[short].max(initial=1))):
        at = heads[short & (lengths > step)] + step
        prefix[at] = prefix[at - 1] + increments[at - 1]
    for head, end in zip(heads[~short].tolist(), ends[~short].tolist()):
        prefix[head + 1 : end] = np.cumsum(increments[head : end - 1])
    return prefix
