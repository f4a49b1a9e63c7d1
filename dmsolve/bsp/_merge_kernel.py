"""The compiled merge behind :func:`dmsolve.bsp.search_sorted` (compiled on
first use, cached on disk)."""

from __future__ import annotations

import numpy as np

from ..jit import njit

__all__ = ["merge_search"]


@njit(cache=True)
def merge_search(h, s, right):  # pragma: no cover
    """``np.searchsorted(h, s, "right" if right else "left")`` for sorted
    ``s``, by one pass over both. Not collective."""
    out = np.empty(s.size, np.int64)
    j = 0
    n = h.size
    for i in range(s.size):
        v = s[i]
        if right:
            while j < n and h[j] <= v:
                j += 1
        else:
            while j < n and h[j] < v:
                j += 1
        out[i] = j
    return out
