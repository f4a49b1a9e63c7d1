"""Compiled loops of the sparse matrix product and transpose of
:mod:`dmsolve.spgemm`, one row block per call.

Compiled on the first product and cached on disk next to this module. The
product is Gustavson's row by row, as scipy's ``csr_matmat``: an output
entry is ``0 + a_i1 b_1k + a_i2 b_2k + ...`` over the entries of ``A``'s row
in stored order, and entries that sum to zero are dropped; so the values are
the same bits as scipy's. Each call works on rows ``start .. stop - 1`` only,
with its own marker, accumulator and output arrays, so that blocks run at
once on several threads (``nogil``).

Not collective.
"""

from __future__ import annotations

import numpy as np

from .jit import njit

__all__ = ["matmat_rows", "copy_entries", "transpose_count", "transpose_fill",
           "subtract_scaled_rows"]

#: Rows of at most this many entries are sorted by insertion, longer ones by
#: numpy's sort: the rows of a sparse product are mostly a few dozen long.
INSERTION_MAX = 48


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _gather_row(a_indptr, a_indices, a_data, b_indptr, b_indices, b_data, i, mark, acc, cols,
                n):  # pragma: no cover
    """Add row ``i`` of ``A`` times ``B`` into ``acc``, listing in
    ``cols[n:]`` the columns the row has not met yet; the new ``n``."""
    for jj in range(a_indptr[i], a_indptr[i + 1]):
        j = a_indices[jj]
        v = a_data[jj]
        for kk in range(b_indptr[j], b_indptr[j + 1]):
            k = b_indices[kk]
            acc[k] += v * b_data[kk]
            if mark[k] != i:
                mark[k] = i
                cols[n] = k
                n += 1
    return n


@njit(cache=True, nogil=True, boundscheck=False)
def matmat_rows(a_indptr, a_indices, a_data, b_indptr, b_indices, b_data, a2_indptr,
                a2_indices, a2_data, b2_indptr, b2_indices, b2_data, ncols, start, stop,
                capacity, sort):  # pragma: no cover
    """Rows ``start .. stop - 1`` of ``C = [A A2] @ [B; B2]`` (each row of
    ``A``'s entries, then ``A2``'s, as in the stacked matrices; ``A2`` may
    have no entries): ``(indptr, indices, data)`` of those rows alone
    (``indptr`` from 0), its zero sums dropped, each row's columns sorted
    when ``sort`` (else in the order the row met them). The output starts
    with room for ``capacity`` entries; when full, it grows to what the
    rows so far foretell for the whole block (a first pass that counts each
    row would cost a third of the product). Not collective."""
    room = max(capacity, 16)
    indptr = np.empty(stop - start + 1, np.int64)
    indptr[0] = 0
    indices = np.empty(room, b_indices.dtype)
    data = np.empty(room, a_data.dtype)
    mark = np.full(ncols, -1, np.int64)
    acc = np.zeros(ncols, a_data.dtype)
    cols = np.empty(ncols, b_indices.dtype)
    top = 0
    for i in range(start, stop):
        n = _gather_row(a_indptr, a_indices, a_data, b_indptr, b_indices, b_data, i, mark, acc,
                        cols, 0)
        n = _gather_row(a2_indptr, a2_indices, a2_data, b2_indptr, b2_indices, b2_data, i, mark,
                        acc, cols, n)
        if top + n > indices.shape[0]:
            done = i - start + 1
            room = max((top + n) * (stop - start) // done * 5 // 4,
                       indices.shape[0] * 5 // 4, top + n)
            grown = np.empty(room, indices.dtype)
            grown[:top] = indices[:top]
            indices = grown
            grown_data = np.empty(room, data.dtype)
            grown_data[:top] = data[:top]
            data = grown_data
        if not sort:
            pass
        elif n > INSERTION_MAX:
            cols[:n] = np.sort(cols[:n])
        else:
            for t in range(1, n):
                c = cols[t]
                s = t - 1
                while s >= 0 and cols[s] > c:
                    cols[s + 1] = cols[s]
                    s -= 1
                cols[s + 1] = c
        for t in range(n):
            k = cols[t]
            x = acc[k]
            acc[k] = 0
            if x != 0:
                indices[top] = k
                data[top] = x
                top += 1
        indptr[i - start + 1] = top
    return indptr, indices[:top], data[:top]


@njit(cache=True, nogil=True, boundscheck=False)
def copy_entries(indices, data, offset, out_indices, out_data):  # pragma: no cover
    """``out[offset : offset + len]`` = a block's entries. Not collective."""
    for t in range(indices.shape[0]):
        out_indices[offset + t] = indices[t]
        out_data[offset + t] = data[t]


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


@njit(cache=True, nogil=True, boundscheck=False)
def subtract_scaled_rows(t_indptr, t_indices, t_data, f_indptr, f_indices, f_data, w, start,
                         stop):  # pragma: no cover
    """Rows ``start .. stop - 1`` of ``T - diag(w) F`` (both sorted, no
    duplicates): ``(indptr, indices, data)`` of those rows alone, merged
    row by row as scipy's ``csr_minus_csr`` does (``t - w_i f``, ``t - 0``
    or ``0 - w_i f``), zero results dropped. Not collective."""
    room = (t_indptr[stop] - t_indptr[start]) + (f_indptr[stop] - f_indptr[start])
    indptr = np.empty(stop - start + 1, np.int64)
    indptr[0] = 0
    indices = np.empty(room, t_indices.dtype)
    data = np.empty(room, t_data.dtype)
    top = 0
    for i in range(start, stop):
        wi = w[i]
        p, pend = t_indptr[i], t_indptr[i + 1]
        q, qend = f_indptr[i], f_indptr[i + 1]
        while p < pend or q < qend:
            if q >= qend or (p < pend and t_indices[p] < f_indices[q]):
                j = t_indices[p]
                r = t_data[p] - 0.0
                p += 1
            elif p >= pend or f_indices[q] < t_indices[p]:
                j = f_indices[q]
                x = wi * f_data[q]
                r = 0.0 - x
                q += 1
            else:
                j = t_indices[p]
                r = t_data[p] - wi * f_data[q]
                p += 1
                q += 1
            if r != 0:
                indices[top] = j
                data[top] = r
                top += 1
        indptr[i - start + 1] = top
    return indptr, indices[:top], data[:top]
