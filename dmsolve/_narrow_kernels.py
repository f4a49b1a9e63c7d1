"""Compiled products of a :class:`dmsolve._narrow.NarrowRows` block.

Compiled on the first product and cached on disk next to this module. The
loops are scipy's ``csr_matvec`` and ``csc_matvec`` (one running sum per
row, entries in stored order), so the results are the same bits as scipy's
for float64; what differs is the memory side: the column indices are read
as unsigned 16-bit integers where the block has at most 65536 columns (10
bytes per entry instead of CSR's 12), and an unsigned index costs numba no
negative-index check.

Not collective; nothing is allocated per call.
"""

from __future__ import annotations

import numpy as np

from .jit import njit

__all__ = ["narrow_matvec", "narrow_matvec_rows", "narrow_rmatvec_add", "scatter_rows",
           "narrow_count_columns", "narrow_transpose_fill"]


@njit(cache=True, nogil=True, boundscheck=False)
def narrow_matvec(indptr, indices, data, x, y):  # pragma: no cover
    """``y = B @ x`` for the CSR arrays of ``B`` (unsigned ``indptr`` and
    ``indices``); every entry of ``y`` is written. The sum of a row is
    formed in float64 whatever the dtype of ``data`` (as the sliced ELL
    kernels do). Not collective."""
    for i in range(y.shape[0]):
        s = 0.0
        for k in range(np.uint64(indptr[i]), np.uint64(indptr[i + 1])):
            s += data[k] * x[np.uint64(indices[k])]
        y[i] = s


@njit(cache=True, nogil=True, boundscheck=False)
def narrow_rmatvec_add(indptr, indices, data, y, x):  # pragma: no cover
    """``x += B^T y`` for the CSR arrays of ``B`` (unsigned ``indptr`` and
    ``indices``): each row scatters into ``x``. Not collective."""
    for i in range(y.shape[0]):
        yi = y[i]
        for k in range(np.uint64(indptr[i]), np.uint64(indptr[i + 1])):
            x[np.uint64(indices[k])] += data[k] * yi


@njit(cache=True, nogil=True, boundscheck=False)
def narrow_matvec_rows(r0, r1, indptr, indices, data, x, y):  # pragma: no cover
    """:func:`narrow_matvec` over rows ``r0 .. r1 - 1`` only (a block of a
    threaded product), each row summed as there. Not collective."""
    for i in range(r0, r1):
        s = 0.0
        for k in range(np.uint64(indptr[i]), np.uint64(indptr[i + 1])):
            s += data[k] * x[np.uint64(indices[k])]
        y[i] = s


@njit(cache=True, nogil=True, boundscheck=False)
def scatter_rows(r0, r1, indptr, indices, data, y, x):  # pragma: no cover
    """``x[j] = sum_k data[k] * y[indices[k]]`` for ``j`` in ``r0 .. r1 - 1``,
    the terms added one by one into ``x[j]`` from zero in stored order, in
    ``x``'s dtype: what a scatter ``x += B^T y`` into a zeroed ``x`` adds into
    ``x[j]``, when the rows of this transposed copy hold its terms in the
    order the scatter meets them. Not collective."""
    for j in range(r0, r1):
        x[j] = 0
        for k in range(np.uint64(indptr[j]), np.uint64(indptr[j + 1])):
            x[j] += data[k] * y[np.uint64(indices[k])]



@njit(cache=True, nogil=True, boundscheck=False)
def narrow_count_columns(indices, counts):  # pragma: no cover
    """``counts[c] += 1`` for every stored entry of column ``c``. Not collective."""
    for k in range(indices.shape[0]):
        counts[np.uint64(indices[k])] += 1


@njit(cache=True, nogil=True, boundscheck=False)
def narrow_transpose_fill(indptr, indices, data, next_pos, out_indices,
                          out_data):  # pragma: no cover
    """The terms of :func:`narrow_rmatvec_add` placed by column, in the order
    it adds them (a stable counting sort): the term of entry ``k`` of row
    ``i`` goes to ``next_pos[indices[k]]``, which then moves on; ``next_pos``
    starts as the transposed copy's row pointers. Not collective."""
    for i in range(indptr.shape[0] - 1):
        for k in range(np.uint64(indptr[i]), np.uint64(indptr[i + 1])):
            c = np.uint64(indices[k])
            p = next_pos[c]
            out_indices[p] = i
            out_data[p] = data[k]
            next_pos[c] = p + 1
