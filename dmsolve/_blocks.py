"""Row blocks and reduction lanes of a rank's threaded kernels, planned once
per size and thread count (see :mod:`dmsolve.threads`)."""

from __future__ import annotations

import functools

import numpy as np

from . import threads as _threads

__all__ = ["row_blocks", "lane_plan", "run_lanes", "parallel_blocks", "lane_total"]


@functools.lru_cache(maxsize=512)
def _row_blocks(n: int, k: int, align: int, min_block: int) -> np.ndarray:
    return _threads.row_blocks(n, k, min_block, align)


def row_blocks(n: int, k: int, align: int = 1) -> np.ndarray:
    """:func:`dmsolve.threads.row_blocks` of ``n`` rows for ``k`` threads
    (blocks of at least :data:`dmsolve.threads.MIN_BLOCK` rows, boundaries
    multiples of ``align``), kept for the next call: read it, do not change
    it. Not collective."""
    return _row_blocks(int(n), int(k), int(align), int(_threads.MIN_BLOCK))


@functools.lru_cache(maxsize=512)
def _lane_plan(n: int, k: int, lane: int) -> tuple[np.ndarray, np.ndarray]:
    return _threads.lane_bounds(n, lane), _threads.lane_blocks(n, k, lane)


def lane_plan(n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The lanes of a reduction over ``n`` elements (:func:`dmsolve.threads.lane_bounds`,
    of :data:`dmsolve.threads.LANE` elements) and the blocks of lanes ``k``
    threads take (:func:`dmsolve.threads.lane_blocks`); kept for the next
    call. Not collective."""
    return _lane_plan(int(n), int(k), int(_threads.LANE))


def run_lanes(func, n: int, k: int, width: int = 0, dtype=np.float64) -> np.ndarray:
    """The lane partial sums of a reduction over ``n`` elements on ``k``
    threads: ``func(bounds, l0, l1, partial)`` sums lanes ``l0 .. l1 - 1``
    into ``partial[l0:l1]``; returns ``partial`` (one entry per lane, or a
    row of ``width`` per lane). Not collective."""
    bounds, blocks = lane_plan(n, k)
    nlanes = bounds.size - 1
    partial = np.zeros((nlanes, width) if width else nlanes, dtype=dtype)
    parallel_blocks(lambda lo, hi: func(bounds, lo, hi, partial), blocks, k)
    return partial


def parallel_blocks(func, bounds: np.ndarray, k: int) -> None:
    """``func(bounds[b], bounds[b + 1])`` for every block ``b`` on up to
    ``k`` threads. Not collective."""
    nb = bounds.size - 1
    if nb == 1:
        func(int(bounds[0]), int(bounds[1]))
        return
    _threads.parallel_for(lambda b: func(int(bounds[b]), int(bounds[b + 1])), nb, k)


def lane_total(partial: np.ndarray):
    """The sum of lane partial sums added in lane order (rows of a 2-D
    ``partial`` summed entry by entry): the same bits whatever thread summed
    which lane. Not collective."""
    total = partial[0].copy() if partial.ndim == 2 else partial[0]
    for i in range(1, partial.shape[0]):
        total = total + partial[i]
    return total
