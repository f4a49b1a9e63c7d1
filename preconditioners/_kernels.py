"""Compiled loops for the sequential kernels numpy cannot vectorise.

Gauss-Seidel/SOR sweeps, the greedy passes of aggregation, ILU(0) and sparse
triangular solves visit rows in order and each row depends on the rows before
it, so they are written as plain loops and compiled with numba (PyAMG writes
the same loops in C++ in ``amg_core``). Every kernel works on this rank's
arrays only (not collective), writes into arrays the caller owns and
allocates nothing per call.

Compiled code is cached on disk (``cache=True``): the first call in a fresh
checkout compiles (about a second per kernel and signature), later processes
load it. Importing this module compiles nothing.
"""

from __future__ import annotations

import numpy as np

from dmsolve.jit import njit

__all__ = ["unsigned_index", "chebyshev_start", "chebyshev_step", "sor_sweep", "aggregate_pass1", "aggregate_pass3",
           "ilu0_factor", "ilu0_split", "lower_unit_solve", "upper_solve", "superlu_solve"]


@njit(cache=True, nogil=True)
def chebyshev_start(b, Ad, dinv, d, x, r, c, zero_guess):  # pragma: no cover
    """The first step of the Chebyshev iteration in one pass: ``r = b - Ad``
    (``r = b`` and ``x = 0`` with ``zero_guess``, ``Ad`` then unread);
    ``d = (r * dinv) * c``; ``x += d``.

    The numpy form is five passes (eleven vector reads and writes from a zero
    guess, thirteen otherwise); this is one (five, seven). The operations
    and their order are numpy's, so the results are the same bit for bit.
    Not collective.
    """
    if zero_guess:
        for i in range(b.shape[0]):
            ri = b[i]
            r[i] = ri
            di = (ri * dinv[i]) * c
            d[i] = di
            x[i] = di
    else:
        for i in range(b.shape[0]):
            ri = b[i] - Ad[i]
            r[i] = ri
            di = (ri * dinv[i]) * c
            d[i] = di
            x[i] += di


@njit(cache=True, nogil=True)
def chebyshev_step(r, Ad, dinv, d, x, a, c):  # pragma: no cover
    """One step of the Chebyshev iteration's vector updates in one pass:
    ``r -= Ad; d = a * d + c * (dinv * r); x += d``, for float64 arrays.

    The unfused numpy form makes six passes over the vectors (16 vector
    reads and writes); this makes one (5 reads, 3 writes). The operations are
    numpy's, in numpy's order, so the results are the same bit for bit.
    Not collective.
    """
    for i in range(r.shape[0]):
        ri = r[i] - Ad[i]
        r[i] = ri
        di = d[i] * a + (ri * dinv[i]) * c
        d[i] = di
        x[i] += di


@njit(cache=True, nogil=True)
def sor_sweep(first, last, indices, data, dinv, b, x, forward, from_zero):  # pragma: no cover
    """One SOR sweep on ``A x = b`` in place of ``x``, rows in increasing
    (``forward``) or decreasing order: ``x_i <- x_i + dinv_i (b_i - sum_j a_ij x_j)``
    with ``dinv_i = omega / a_ii`` (0 leaves a row without diagonal alone, as
    in PyAMG), the sum over the entries at positions ``first[i]:last[i]`` of
    a CSR with sorted indices.

    ``first``, ``last`` and ``indices`` are unsigned (see
    :func:`unsigned_index`): with signed indices numba checks every access
    for a negative index, which makes the sweep up to 2x slower (on a 3D
    Poisson coarse level, 30 entries per row).

    A whole sweep passes ``indptr[:-1], indptr[1:]``. With ``from_zero`` the
    old ``x`` is taken as 0 (and not read): only the entries on the side
    already swept can then be nonzero, so the caller passes the strictly
    lower range of each row for a forward sweep (the strictly upper one for
    a backward sweep), half the work for the same result.

    Each row's sum is taken in two interleaved partial sums, the forward
    sweep visiting the entries last to first (the entries far from the
    diagonal first): measured here, 12% faster than one running sum on a 3D
    Poisson matrix and 8% on its 30-entries-per-row coarse level. The order
    of the additions differs from PyAMG's, so results agree to rounding.

    Not collective.
    """
    # (the two loops are written out: numba compiled them markedly slower
    # as a shared helper function)
    n = b.shape[0]
    one = np.uint64(1)
    two = np.uint64(2)
    if forward:
        for i in range(n):
            s0 = b[i]
            s1 = 0.0
            lo = first[i]
            hi = last[i]
            while hi - lo >= two:
                s1 -= data[hi - one] * x[indices[hi - one]]
                s0 -= data[hi - two] * x[indices[hi - two]]
                hi -= two
            if hi > lo:
                s0 -= data[lo] * x[indices[lo]]
            x[i] = dinv[i] * (s0 + s1) + (0.0 if from_zero else x[i])
    else:
        for i in range(n - 1, -1, -1):
            s0 = b[i]
            s1 = 0.0
            lo = first[i]
            hi = last[i]
            while hi - lo >= two:
                s0 -= data[lo] * x[indices[lo]]
                s1 -= data[lo + one] * x[indices[lo + one]]
                lo += two
            if lo < hi:
                s0 -= data[lo] * x[indices[lo]]
            x[i] = dinv[i] * (s0 + s1) + (0.0 if from_zero else x[i])


def unsigned_index(a: np.ndarray) -> np.ndarray:
    """``a`` (non-negative CSR offsets or column indices) as the unsigned
    integer type of its width: a view, no copy. The kernels take unsigned
    indices, for which numba emits no negative-index check. Not collective."""
    return a.view(np.dtype("u%d" % a.dtype.itemsize))


@njit(cache=True, nogil=True)
def aggregate_pass1(indptr, indices, x):  # pragma: no cover
    """Pass 1 of standard aggregation on ``x`` (zeros on entry): each node whose
    neighbours are all free becomes an aggregate with them (ids from 1), a node
    with no neighbours gets ``-n - 1``. Returns the number of aggregates. Not collective."""
    n = x.shape[0]
    nxt = 1
    for i in range(n):
        if x[i] != 0:
            continue
        s = indptr[i]
        e = indptr[i + 1]
        if s == e:
            x[i] = -n - 1
            continue
        free = True
        for jj in range(s, e):
            if x[indices[jj]] != 0:
                free = False
                break
        if free:
            x[i] = nxt
            for jj in range(s, e):
                x[indices[jj]] = nxt
            nxt += 1
    return nxt - 1


@njit(cache=True, nogil=True)
def aggregate_pass3(indptr, indices, x, count):  # pragma: no cover
    """Pass 3: each node still free (0) starts a new aggregate with its free
    neighbours. Returns the new number of aggregates. Not collective."""
    n = x.shape[0]
    for i in range(n):
        if x[i] != 0:
            continue
        count += 1
        x[i] = count
        for jj in range(indptr[i], indptr[i + 1]):
            if x[indices[jj]] == 0:
                x[indices[jj]] = count
    return count


@njit(cache=True, nogil=True)
def ilu0_factor(indptr, indices, a, dpos):  # pragma: no cover
    """ILU(0) in place of ``a`` (CSR with sorted indices; unsigned ``indptr``
    and ``indices``), writing ``dpos[i]`` (unsigned), the position of row
    ``i``'s diagonal. IKJ variant (Saad, Algorithm 10.4): afterwards the
    strictly lower part holds ``L`` (unit diagonal implied) and the rest
    ``U``. Returns ``(row, missing)``: the first row with no diagonal entry
    (``missing`` true) or a zero or non-finite pivot, or ``(-1, False)``. Not collective."""
    n = dpos.shape[0]
    one = np.uint64(1)
    pos = np.full(n, -1, dtype=np.int64)
    for i in range(n):
        s = indptr[i]
        e = indptr[i + 1]
        for jj in range(s, e):
            pos[indices[jj]] = jj
        if pos[i] < 0:
            return i, True
        d = np.uint64(pos[i])
        dpos[i] = d
        for kk in range(s, d):
            k = indices[kk]
            dk = dpos[k]
            lik = a[kk] / a[dk]
            a[kk] = lik
            for jj in range(dk + one, indptr[k + one]):
                p = pos[indices[jj]]
                if p >= 0:
                    a[p] -= lik * a[jj]
        for jj in range(s, e):
            pos[indices[jj]] = -1
        piv = a[d]
        if piv == 0.0 or not np.isfinite(piv):
            return i, False
    return -1, False


@njit(cache=True, nogil=True)
def ilu0_split(indptr, indices, a, dpos, Lp, Li, Lx, Up, Ui, Ux, dinv):  # pragma: no cover
    """Copy an in-place ILU(0) factor (:func:`ilu0_factor`) into separate
    ``L`` (strictly lower) and ``U`` (strictly upper) CSR arrays, whose row
    pointers ``Lp`` and ``Up`` the caller has filled, and the inverted
    pivots into ``dinv``. All index arrays unsigned. Not collective."""
    one = np.uint64(1)
    for i in range(dpos.shape[0]):
        d = dpos[i]
        q = Lp[i]
        for jj in range(indptr[i], d):
            Li[q] = indices[jj]
            Lx[q] = a[jj]
            q += one
        q = Up[i]
        for jj in range(d + one, indptr[i + 1]):
            Ui[q] = indices[jj]
            Ux[q] = a[jj]
            q += one
        dinv[i] = 1.0 / a[d]


@njit(cache=True, nogil=True)
def lower_unit_solve(Lp, Li, Lx, b, out):  # pragma: no cover
    """``out = L^-1 b``, ``L`` unit lower triangular stored without its
    diagonal (CSR ``Lp, Li, Lx``; unsigned ``Lp`` and ``Li`` are faster, see
    :func:`unsigned_index`). Not collective."""
    n = b.shape[0]
    for i in range(n):
        s = b[i]
        for jj in range(Lp[i], Lp[i + 1]):
            s -= Lx[jj] * out[Li[jj]]
        out[i] = s


@njit(cache=True, nogil=True)
def upper_solve(Up, Ui, Ux, dinv, out):  # pragma: no cover
    """``out = U^-1 out`` in place, ``U`` the strictly upper CSR ``Up, Ui, Ux``
    (unsigned ``Up`` and ``Ui``) plus the diagonal whose inverse is ``dinv``
    (a multiply on the critical path of the recurrence instead of a divide).

    Each row's entries are taken last to first, so that the one on the
    critical path, ``out[i+1]`` computed just before, comes last (the
    forward solve gets that order for free).

    Not collective.
    """
    n = out.shape[0]
    one = np.uint64(1)
    for i in range(n - 1, -1, -1):
        s = out[i]
        lo = Up[i]
        hi = Up[i + 1]
        while hi > lo:
            hi -= one
            s -= Ux[hi] * out[Ui[hi]]
        out[i] = s * dinv[i]


@njit(cache=True, nogil=True)
def superlu_solve(perm_r, perm_c, Lp, Li, Lx, Up, Ui, Ux, udiag, b, work, out):  # pragma: no cover
    """``out = A^-1 b`` from SuperLU's factors ``Pr A Pc = L U`` (CSC, ``L``
    with unit diagonal, ``udiag`` the diagonal of ``U``), through ``work``:
    the two triangular solves scipy's ``SuperLU.solve`` does, without
    allocating its result. Not collective."""
    n = b.shape[0]
    for i in range(n):
        work[perm_r[i]] = b[i]
    for j in range(n):
        xj = work[j]
        for p in range(Lp[j], Lp[j + 1]):
            i = Li[p]
            if i > j:
                work[i] -= Lx[p] * xj
    for j in range(n - 1, -1, -1):
        xj = work[j] / udiag[j]
        work[j] = xj
        for p in range(Up[j], Up[j + 1]):
            i = Ui[p]
            if i < j:
                work[i] -= Ux[p] * xj
    for i in range(n):
        out[i] = work[perm_c[i]]
