"""Helpers of the tests of a rank's threaded kernels: blocks small enough
that a small problem splits into several, a count of the blocks handed to
pool threads (so a test knows the work was split), and a bitwise compare."""

import numpy as np

from dmsolve import threads


def small_blocks(monkeypatch, rows: int = 64, lane: int = 64) -> None:
    """Make blocks of ``rows`` rows and reduction lanes of ``lane`` elements
    for the rest of the test."""
    monkeypatch.setattr(threads, "MIN_BLOCK", rows)
    monkeypatch.setattr(threads, "LANE", lane)


class Posts:
    """Counts the calls of :func:`dmsolve.threads.post` (work given to the
    pool's threads) while the test runs."""

    def __init__(self, monkeypatch):
        self.count = 0
        original = threads.post

        def post(item, workers):
            self.count += 1
            original(item, workers)

        monkeypatch.setattr(threads, "post", post)


def same_bits(a, b) -> bool:
    """Whether two arrays hold the same bits (dtype, shape and every byte)."""
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and \
        np.array_equal(np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8))
