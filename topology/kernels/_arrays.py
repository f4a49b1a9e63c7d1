"""Array kernels for results of unknown length (numba, not collective)."""

from __future__ import annotations

import numpy as np

from dmsolve.jit import njit

__all__ = ["grow"]


@njit(cache=True)
def grow(a, n):  # pragma: no cover
    """``a`` with twice the rows, its first ``n`` rows kept (capacity doubling)."""
    b = np.empty((2 * a.shape[0],) + a.shape[1:], a.dtype)
    b[:n] = a[:n]
    return b
