"""Blocks of rows for the vector updates of the smoothers on a rank's
threads (:mod:`dmsolve.threads`): each entry is computed as on one thread,
so the results are the same bits at any thread count."""

from __future__ import annotations

import numpy as np

from dmsolve import threads

__all__ = ["row_split", "run_blocks", "ufunc_blocks"]


def row_split(n: int, count: int | None = None) -> np.ndarray | None:
    """Boundaries of the blocks ``n`` entries are updated in on ``count``
    threads (default the process's), or None when they make one block (then
    the caller runs its one-thread code). Not collective."""
    k = threads.resolve(count)
    if k == 1:
        return None
    rows = threads.row_blocks(n, k, threads.MIN_BLOCK)
    return rows if rows.size > 2 else None


def run_blocks(func, rows: np.ndarray) -> None:
    """``func(lo, hi)`` for each block of ``rows`` (:func:`row_split`), on
    as many threads as blocks. Not collective."""
    threads.parallel_for(lambda b: func(int(rows[b]), int(rows[b + 1])), rows.size - 1,
                          rows.size - 1)


def ufunc_blocks(ufunc, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``ufunc(a, b, out=out)`` for arrays of one length, by blocks of
    entries on the process's threads (numpy releases the GIL in the loop of
    each block). Not collective."""
    rows = row_split(out.shape[0])
    if rows is None:
        ufunc(a, b, out=out)
    else:
        run_blocks(lambda lo, hi: ufunc(a[lo:hi], b[lo:hi], out=out[lo:hi]), rows)
