"""Z2 column reduction (the standard persistence algorithm) of columns held by
one process: the serial reference, and the kernels of _dist_reduction.py.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.typed import List

__all__ = ["reduce_columns"]


@njit(cache=True)
def _symdiff(a, b):  # pragma: no cover
    """Symmetric difference of two sorted unique int64 arrays (Z2 column sum)."""
    out = np.empty(a.shape[0] + b.shape[0], np.int64)
    i = j = n = 0
    while i < a.shape[0] and j < b.shape[0]:
        if a[i] < b[j]:
            out[n] = a[i]
            i += 1
            n += 1
        elif b[j] < a[i]:
            out[n] = b[j]
            j += 1
            n += 1
        else:
            i += 1
            j += 1
    while i < a.shape[0]:
        out[n] = a[i]
        i += 1
        n += 1
    while j < b.shape[0]:
        out[n] = b[j]
        j += 1
        n += 1
    return out[:n]


@njit(cache=True)
def reduce_columns(ptr, rows, nrows):  # pragma: no cover
    """Z2 column reduction (standard algorithm) of sparse columns given in
    CSR form (row indices sorted ascending, columns in filtration order).

    Returns ``pivot_col``: for every row the column whose reduced lowest
    entry it is, or -1; and ``zero``: whether each column reduced to 0.
    Not collective.
    """
    ncol = ptr.shape[0] - 1
    pivot = np.full(nrows, -1, np.int64)
    zero = np.zeros(ncol, np.bool_)
    red = List.empty_list(types.int64[:])
    for c in range(ncol):
        col = rows[ptr[c]:ptr[c + 1]].copy()
        while col.shape[0] > 0:
            low = col[-1]
            k = pivot[low]
            if k < 0:
                pivot[low] = c
                break
            col = _symdiff(col, red[k])
        red.append(col)
        if col.shape[0] == 0:
            zero[c] = True
    return pivot, zero
