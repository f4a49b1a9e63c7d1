"""Compiled products of a :class:`dmsolve._sell.SlicedEll` block.

Imported on the first product, not with dmsolve (importing numba costs about
a second). Compiled code is cached on disk next to this module.

The loops are written for numba's code generator as measured here (3D
Poisson 100^3, one core, AMD EPYC with AVX-512): indices are unsigned (a
signed index costs a negative-index check per access), and the lane loop
``for i in range(CHUNK)`` has a constant trip count, which LLVM unrolls into
``CHUNK`` independent multiply-add chains held in ``acc``. LLVM does not turn
them into SIMD instructions (``vmulsd``/``vaddsd`` on one double each; neither
the loop nor the SLP vectoriser fires, with ``NUMBA_SLP_VECTORIZE=1`` either:
``acc`` may alias ``x`` and ``y`` for all LLVM can tell). What pays is the
memory side: a run slot reads ``CHUNK`` consecutive values of ``x`` with no
column index at all.

Not collective; nothing is allocated per call.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["CHUNK", "sell_matvec", "sell_rmatvec_add"]

#: Rows per chunk. Measured on 3D Poisson 100^3 (one core): 16 rows
#: 4.6 ms, 32 rows 3.6 ms, 64 rows 2.8 ms per product (scipy CSR 6.9 ms).
CHUNK = 64
_C = np.uint64(CHUNK)


@njit(cache=True, nogil=True, boundscheck=False)
def sell_matvec(nrows, slot_ptr, run_col, gather_ptr, gather_col, vals, x, y,
                acc):  # pragma: no cover
    """``y = B @ x`` over the chunks of a sliced-ELL block (every row of
    ``y`` written). ``acc`` is work of ``CHUNK`` float64. Not collective."""
    nchunks = slot_ptr.shape[0] - 1
    for k in range(nchunks):
        for i in range(_C):
            acc[i] = 0.0
        for s in range(slot_ptr[k], slot_ptr[k + 1]):
            o = np.uint64(s) * _C
            c = run_col[s]
            if c >= 0:
                cu = np.uint64(c)
                for i in range(_C):
                    acc[i] += vals[o + i] * x[cu + i]
            else:
                q = np.uint64(gather_ptr[s])
                for i in range(_C):
                    acc[i] += vals[o + i] * x[np.uint64(gather_col[q + i])]
        r = np.uint64(k) * _C
        m = min(_C, np.uint64(nrows) - r)
        for i in range(m):
            y[r + i] = acc[i]


@njit(cache=True, nogil=True, boundscheck=False)
def sell_rmatvec_add(nrows, slot_ptr, run_col, gather_ptr, gather_col, vals, y,
                     x):  # pragma: no cover
    """``x += B^T y`` over the chunks of a sliced-ELL block. Not collective."""
    nchunks = slot_ptr.shape[0] - 1
    for k in range(nchunks):
        r = np.uint64(k) * _C
        m = min(_C, np.uint64(nrows) - r)
        for s in range(slot_ptr[k], slot_ptr[k + 1]):
            o = np.uint64(s) * _C
            c = run_col[s]
            if c >= 0:
                cu = np.uint64(c)
                for i in range(m):
                    x[cu + i] += vals[o + i] * y[r + i]
            else:
                q = np.uint64(gather_ptr[s])
                for i in range(m):
                    x[np.uint64(gather_col[q + i])] += vals[o + i] * y[r + i]
