"""Compiled loops of the sparse matrix product and transpose of
:mod:`dmsolve.spgemm`, one row block per call.

Compiled on the first product and cached on disk next to this module. The
product is Gustavson's row by row, as scipy's ``csr_matmat``: an output
entry is ``0 + a_i1 b_1k + a_i2 b_2k + ...`` over the entries of ``A``'s row
in stored order, and entries that sum to zero are dropped; so the values are
the same bits as scipy's. Each call works on rows ``start .. stop - 1`` only,
with its own marker and accumulator arrays, so that blocks run at once on
several threads (``nogil``).

Not collective.
"""

from __future__ import annotations

import numpy as np

from .jit import njit

__all__ = ["matmat_count", "matmat_fill", "compact_rows", "transpose_count",
           "transpose_fill"]

#: Rows of at most this many entries are sorted by insertion, longer ones by
#: numpy's sort: the rows of a sparse product are mostly a few dozen long.
INSERTION_MAX = 48


@njit(cache=True, nogil=True, boundscheck=False)
def matmat_count(a_indptr, a_indices, b_indptr, b_indices, ncols, start, stop,
                 sizes):  # pragma: no cover
    """``sizes[i + 1]`` = the number of distinct columns of row ``i`` of
    ``A @ B`` (before dropping zeros), for rows ``start .. stop - 1``.
    Not collective."""
    mark = np.full(ncols, -1, np.int64)
    for i in range(start, stop):
        n = 0
        for jj in range(a_indptr[i], a_indptr[i + 1]):
            j = a_indices[jj]
            for kk in range(b_indptr[j], b_indptr[j + 1]):
                k = b_indices[kk]
                if mark[k] != i:
                    mark[k] = i
                    n += 1
        sizes[i + 1] = n


@njit(cache=True, nogil=True, boundscheck=False)
def matmat_fill(a_indptr, a_indices, a_data, b_indptr, b_indices, b_data, ncols, start,
                stop, c_indptr, c_indices, c_data, lengths):  # pragma: no cover
    """Rows ``start .. stop - 1`` of ``C = A @ B`` into ``C``'s arrays, each
    row from ``c_indptr[i]`` on with its columns sorted and its zero sums
    dropped; ``lengths[i]`` = the entries kept (at most the row's room).
    Not collective."""
    mark = np.full(ncols, -1, np.int64)
    acc = np.zeros(ncols, c_data.dtype)
    for i in range(start, stop):
        base = c_indptr[i]
        n = 0
        for jj in range(a_indptr[i], a_indptr[i + 1]):
            j = a_indices[jj]
            v = a_data[jj]
            for kk in range(b_indptr[j], b_indptr[j + 1]):
                k = b_indices[kk]
                acc[k] += v * b_data[kk]
                if mark[k] != i:
                    mark[k] = i
                    c_indices[base + n] = k
                    n += 1
        if n > INSERTION_MAX:
            c_indices[base:base + n] = np.sort(c_indices[base:base + n])
        else:
            for t in range(base + 1, base + n):
                c = c_indices[t]
                s = t - 1
                while s >= base and c_indices[s] > c:
                    c_indices[s + 1] = c_indices[s]
                    s -= 1
                c_indices[s + 1] = c
        kept = 0
        for t in range(base, base + n):
            k = c_indices[t]
            x = acc[k]
            acc[k] = 0
            if x != 0:
                c_indices[base + kept] = k
                c_data[base + kept] = x
                kept += 1
        lengths[i] = kept


@njit(cache=True, nogil=True, boundscheck=False)
def compact_rows(indptr, indices, data, lengths, new_indptr, start, stop,
                 out_indices, out_data):  # pragma: no cover
    """Copy the first ``lengths[i]`` entries of rows ``start .. stop - 1``
    to ``new_indptr[i]`` on in the output arrays. Not collective."""
    for i in range(start, stop):
        src = indptr[i]
        dst = new_indptr[i]
        for t in range(lengths[i]):
            out_indices[dst + t] = indices[src + t]
            out_data[dst + t] = data[src + t]


@njit(cache=True, nogil=True, boundscheck=False)
def transpose_count(indptr, indices, start, stop, counts):  # pragma: no cover
    """``counts[c]`` += the entries of column ``c`` in rows ``start .. stop - 1``.
    Not collective."""
    for t in range(indptr[start], indptr[stop]):
        counts[indices[t]] += 1


@njit(cache=True, nogil=True, boundscheck=False)
def transpose_fill(indptr, indices, data, start, stop, nxt, t_indices,
                   t_data):  # pragma: no cover
    """Scatter rows ``start .. stop - 1`` into the transpose: the entry of
    column ``c`` goes to position ``nxt[c]``, which then moves on. Rows are
    taken in order, so each row of the transpose lists its entries by
    increasing row, as scipy's ``csr_tocsc``. Not collective."""
    for i in range(start, stop):
        for t in range(indptr[i], indptr[i + 1]):
            c = indices[t]
            p = nxt[c]
            t_indices[p] = i
            t_data[p] = data[t]
            nxt[c] = p + 1
