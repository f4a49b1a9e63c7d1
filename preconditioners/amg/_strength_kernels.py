"""Compiled loops of the classical and symmetric strength measures
(:mod:`.strength`), one block of rows per call so that blocks run at once on
several threads (``nogil``). They take a rank's diagonal and off-process
blocks as sorted CSR arrays (unsigned indices) and give the same graph as
the numpy formulation.
Not collective.
"""

from __future__ import annotations

import numpy as np

from dmsolve.jit import njit

__all__ = ["classical_count", "classical_fill", "symmetric_count", "symmetric_fill",
           "classical_mask_rows"]


@njit(cache=True, nogil=True, boundscheck=False)
def classical_count(d_ptr, d_ind, d_val, o_ptr, o_val, theta, start, stop, m,
                    sizes, weak):  # pragma: no cover
    """For rows ``start .. stop - 1``: ``m[i] = max(0, max_j (-a_ij))`` over
    the whole row (both blocks), ``sizes[i + 1]`` = its strong entries in the
    diagonal block (off the diagonal, ``-a_ij > 0`` and ``-a_ij >= theta m_i``),
    and ``weak[i]`` whether the row holds a nonzero off-diagonal entry that is
    not strong. Not collective."""
    for i in range(start, stop):
        mi = 0.0
        for t in range(d_ptr[i], d_ptr[i + 1]):
            x = -d_val[t]
            if x > mi:
                mi = x
        for t in range(o_ptr[i], o_ptr[i + 1]):
            x = -o_val[t]
            if x > mi:
                mi = x
        m[i] = mi
        bound = theta * mi
        n = 0
        w = False
        for t in range(d_ptr[i], d_ptr[i + 1]):
            if d_ind[t] == i:
                continue
            x = -d_val[t]
            if x > 0 and x >= bound:
                n += 1
            elif x != 0:
                w = True
        for t in range(o_ptr[i], o_ptr[i + 1]):
            x = -o_val[t]
            if not (x > 0 and x >= bound) and x != 0:
                w = True
        sizes[i + 1] = n
        weak[i] = w


@njit(cache=True, nogil=True, boundscheck=False)
def classical_fill(d_ptr, d_ind, d_val, theta, start, stop, m, s_ptr, s_ind,
                   s_val):  # pragma: no cover
    """The strong entries of rows ``start .. stop - 1`` of the diagonal block
    (as :func:`classical_count` counted them), ``|a_ij|``, from
    ``s_ptr[i]`` on in column order. Not collective."""
    for i in range(start, stop):
        bound = theta * m[i]
        p = s_ptr[i]
        for t in range(d_ptr[i], d_ptr[i + 1]):
            j = d_ind[t]
            if j == i:
                continue
            x = -d_val[t]
            if x > 0 and x >= bound:
                s_ind[p] = j
                s_val[p] = abs(d_val[t])
                p += 1


@njit(cache=True, nogil=True, boundscheck=False)
def _symmetric_strong(v, di, dj, theta):  # pragma: no cover
    if theta <= 0:
        return v != 0
    return abs(v) >= theta * np.sqrt(abs(di * dj))


@njit(cache=True, nogil=True, boundscheck=False)
def symmetric_count(d_ptr, d_ind, d_val, diag, theta, start, stop, sizes):  # pragma: no cover
    """``sizes[i + 1]`` = the strong entries of row ``i`` of the diagonal
    block by the symmetric measure (off the diagonal, ``|a_ij| >= theta
    sqrt(|a_ii a_jj|)``, or nonzero for ``theta <= 0``), for rows ``start ..
    stop - 1``. Not collective."""
    for i in range(start, stop):
        n = 0
        for t in range(d_ptr[i], d_ptr[i + 1]):
            j = d_ind[t]
            if j != i and _symmetric_strong(d_val[t], diag[i], diag[j], theta):
                n += 1
        sizes[i + 1] = n


@njit(cache=True, nogil=True, boundscheck=False)
def symmetric_fill(d_ptr, d_ind, d_val, diag, theta, start, stop, s_ptr, s_ind,
                   s_val):  # pragma: no cover
    """The strong entries of rows ``start .. stop - 1`` (as
    :func:`symmetric_count` counted them), ``|a_ij|``, from ``s_ptr[i]`` on
    in column order. Not collective."""
    for i in range(start, stop):
        p = s_ptr[i]
        for t in range(d_ptr[i], d_ptr[i + 1]):
            j = d_ind[t]
            if j != i and _symmetric_strong(d_val[t], diag[i], diag[j], theta):
                s_ind[p] = j
                s_val[p] = abs(d_val[t])
                p += 1


@njit(cache=True, nogil=True, boundscheck=False)
def classical_mask_rows(rows, cols, vals, theta, lo, hi, out):  # pragma: no cover
    """``out[t]`` for entries ``lo .. hi - 1`` (whole rows, ``rows``
    sorted): ``-a_ij > 0`` and ``-a_ij >= theta m_i``, off the diagonal, with
    ``m_i`` numpy's ``maximum(maximum.reduceat(neg), 0)`` over the row's
    entries given (``neg`` 0 on the diagonal; a NaN carries through as in
    numpy). Not collective."""
    s = lo
    while s < hi:
        e = s + 1
        while e < hi and rows[e] == rows[s]:
            e += 1
        m = -vals[s] if rows[s] != cols[s] else 0.0
        for t in range(s + 1, e):
            x = -vals[t] if rows[t] != cols[t] else 0.0
            if not (m >= x or m != m):
                m = x
        if not (m >= 0.0 or m != m):
            m = 0.0
        bound = theta * m
        for t in range(s, e):
            x = -vals[t] if rows[t] != cols[t] else 0.0
            out[t] = x > 0 and x >= bound
        s = e
