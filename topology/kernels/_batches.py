"""Batches of independent items on the threads of a rank: a kernel called on
blocks of its items, and its outputs joined in item order (not collective).

A V-path kernel (or any kernel whose output for an item depends on that
item alone) returns, for the concatenation of two batches, the
concatenation of its outputs for each: so the blocks can run on any
number of threads and their joined outputs are the same bits as one call
on the whole batch."""

from __future__ import annotations

import numpy as np

from dmsolve.threads import parallel_map, resolve, split

__all__ = ["item_blocks", "run_blocks", "PATH_BLOCK", "BLOCKS_PER_THREAD"]

#: The fewest items worth a block of their own: a V-path item walks tens of
#: cells, so a few thousand of them outweigh the hand-over of a block.
PATH_BLOCK = 1 << 11
#: Blocks per thread: paths differ in length, so a thread that finishes
#: early takes another block rather than wait for the slowest.
BLOCKS_PER_THREAD = 4


def item_blocks(n: int, threads: int | None = None, min_block: int = PATH_BLOCK,
                groups: np.ndarray | None = None) -> np.ndarray:
    """Boundaries of the blocks ``n`` items are cut into for ``threads``
    threads (:func:`dmsolve.threads.resolve`): one block on one thread,
    else up to :data:`BLOCKS_PER_THREAD` per thread, none shorter than
    ``min_block`` items. With ``groups`` (one sorted key per item), a
    boundary never falls inside a run of equal keys (the items of one
    query stay in one block). Not collective."""
    k = resolve(threads)
    parts = 1 if k == 1 else max(1, min(k * BLOCKS_PER_THREAD, int(n) // max(1, int(min_block))))
    cut = split(n, parts)
    if groups is not None and parts > 1:
        inner = np.asarray(groups)[cut[1:-1]]
        cut[1:-1] = np.searchsorted(groups, inner, side="left")
        cut = np.unique(cut)
    return cut


def run_blocks(kernel, fixed: tuple, items: tuple, *, threads: int | None = None,
               min_block: int = PATH_BLOCK, groups: np.ndarray | None = None) -> tuple:
    """``kernel(*fixed, *items)`` computed by blocks of the items, on up to
    ``threads`` threads: each block calls ``kernel(*fixed, *(a[lo:hi] for
    a in items))``, and each output array of the blocks is concatenated in
    block order. The kernel must return a tuple of arrays (or one array),
    each output row coming from one item and in item order, and must not
    write what another block reads (``nogil=True`` kernels run at once).
    ``groups`` as in :func:`item_blocks`. Not collective."""
    n = len(items[0])
    cut = item_blocks(n, threads, min_block, groups)
    if cut.size <= 2:
        return kernel(*fixed, *items)

    def block(b):
        lo, hi = int(cut[b]), int(cut[b + 1])
        return kernel(*fixed, *(a[lo:hi] for a in items))

    outs = parallel_map(block, cut.size - 1, threads)
    if not isinstance(outs[0], tuple):
        return np.concatenate(outs)
    return tuple(np.concatenate(parts) for parts in zip(*outs))
