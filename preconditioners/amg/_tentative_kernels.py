"""Compiled loop of the tentative prolongator (:mod:`.tentative`): where each
aggregated row goes in its aggregate's block, in one pass instead of a sort.
Not collective.
"""

from __future__ import annotations

import numpy as np

from dmsolve.jit import njit

__all__ = ["aggregate_slots"]


@njit(cache=True, nogil=True, boundscheck=False)
def aggregate_slots(a, count):  # pragma: no cover
    """``(slot, sizes)``: ``slot[t]`` = how many entries before ``t`` share
    its aggregate ``a[t]`` (``0 <= a[t] < count``), the place a stable sort
    by aggregate gives it within its aggregate; ``sizes`` = the entries of
    each aggregate. Not collective."""
    sizes = np.zeros(count, np.int64)
    slot = np.empty(a.shape[0], np.int64)
    for t in range(a.shape[0]):
        g = a[t]
        slot[t] = sizes[g]
        sizes[g] += 1
    return slot, sizes
