"""Thick-restart (Krylov-Schur) Arnoldi over a distributed operator: the dominant
Schur vectors of a nonsymmetric operator, for GeMSLR's low-rank corrections."""

from __future__ import annotations

import dataclasses

import numpy as np
from mpi4py import MPI

__all__ = ["KrylovSchurResult", "krylov_schur"]


@dataclasses.dataclass
class KrylovSchurResult:
    """Leading Schur vectors ``W`` (k x local rows, orthonormal columns of
    the distributed ``W^T``) and Schur form ``T`` (k x k, real quasi-upper
    triangular) with ``G W^T ~= W^T T``; ``residuals[i] = ||G w_i - W^T t_i||``
    (estimated), ``converged`` how many of the leading ones met the
    tolerance, ``restarts`` and ``steps`` the work done."""

    W: np.ndarray
    T: np.ndarray
    residuals: np.ndarray
    converged: int
    restarts: int
    steps: int

    @property
    def rank(self) -> int:
        """Number of Schur vectors kept."""
        return int(self.T.shape[0])

    def eigenvalues(self) -> np.ndarray:
        """The eigenvalues of ``T`` (Ritz values). Not collective."""
        return np.linalg.eigvals(self.T) if self.rank else np.zeros(0, complex)


def _sorted_schur(H: np.ndarray, k: int):
    """Real Schur form of ``H`` with the ``k`` eigenvalues of largest modulus
    first (a conjugate pair is never split, so the count may be ``k + 1``)."""
    import scipy.linalg as sla
    m = H.shape[0]
    T, Q = sla.schur(H, output="real")
    if k >= m:
        return T, Q, m
    mags = np.sort(np.abs(np.linalg.eigvals(T)))[::-1]
    thr = mags[k - 1] * (1.0 - 1e-10)
    T, Q, sdim = sla.schur(H, output="real", sort=lambda re, im: np.hypot(re, im) >= thr)
    return T, Q, int(sdim)


def krylov_schur(op, comm, local_size: int, start: np.ndarray, *, rank: int, steps: int,
                 maxits: int, tol: float, tr_factor: float = 0.25) -> KrylovSchurResult:
    """The ``rank`` eigenvalues of largest modulus of a distributed operator,
    as an orthonormal Schur basis, by thick-restart Arnoldi (Krylov-Schur).

    Each cycle extends the basis to ``steps`` vectors (classical Gram-Schmidt
    done twice, one fused ``Allreduce`` per pass), computes the real Schur form
    of the projected matrix sorted by modulus, and stops when the leading
    ``rank`` Schur vectors have residuals below ``tol`` or after ``maxits``
    restarts; otherwise it keeps the leading ``rank + tr_factor*(steps -
    rank)`` Schur vectors and restarts from them (Stewart 2001).

    Parameters
    ----------
    op : callable ``op(x, out)``
        The operator on this rank's slices; collective on ``comm``.
    comm : MPI.Comm
    local_size : int
        This rank's rows.
    start : ndarray
        This rank's part of the start vector (not zero globally).
    rank, steps, maxits : int
        Wanted Schur vectors, basis size per cycle, maximum restarts. These
        and the options after them are keyword only.
    tol : float
        Absolute residual tolerance of the wanted Schur vectors.
    tr_factor : float
        Fraction of the unwanted part of the basis kept at a restart.

    Returns
    -------
    KrylovSchurResult
        The leading ``rank`` (or ``rank + 1`` to keep a conjugate pair whole)
        Schur vectors, converged or not; ``converged`` says how many met
        ``tol``.

    Notes
    -----
    Collective on ``comm``. The global size bounds ``steps`` and ``rank``; an
    invariant subspace found early (breakdown) ends the iteration with
    every vector converged.

    References
    ----------
    .. [1] G. W. Stewart, "A Krylov-Schur algorithm for large eigenproblems",
       SIAM J. Matrix Anal. Appl. 23(3), 2001.
    .. [2] T. Xu, V. Kalantzis, R. Li, Y. Xi, G. Dillon, Y. Saad, parGeMSLR,
       Parallel Computing 113 (2022): thick-restart Arnoldi for the low-rank
       corrections.
    """
    n = int(comm.allreduce(local_size, op=MPI.SUM))
    m = int(min(steps, n))
    k = int(min(rank, m - 1 if m > 1 else m))
    empty = KrylovSchurResult(np.zeros((0, local_size)), np.zeros((0, 0)), np.zeros(0), 0, 0, 0)
    if k <= 0 or n == 0:
        return empty
    V = np.zeros((m + 1, local_size))
    H = np.zeros((m + 1, m))
    h = np.zeros(m + 1)
    nrm = np.sqrt(comm.allreduce(float(start @ start), op=MPI.SUM))
    if nrm == 0.0:
        return empty
    V[0] = start / nrm
    p = 0
    total_steps = 0
    restarts = 0
    while True:
        j = p
        breakdown = False
        while j < m:
            w = V[j + 1]
            op(V[j], w)
            total_steps += 1
            h[:j + 1] = 0.0
            # classical Gram-Schmidt with the projections and the norm in one
            # reduction; a second pass when the vector lost more than 1 - 1/sqrt(2)
            # of its norm (the DGKS test): two passes are enough (Giraud et al. 2005)
            loc = np.empty(j + 2)
            c = np.empty(j + 2)
            for _ in range(2):
                loc[:j + 1] = V[:j + 1] @ w
                loc[j + 1] = w @ w
                comm.Allreduce(loc, c, op=MPI.SUM)
                w -= V[:j + 1].T @ c[:j + 1]
                h[:j + 1] += c[:j + 1]
                before = c[j + 1]
                after = before - float(c[:j + 1] @ c[:j + 1])
                if after > 0.5 * before:
                    break
            beta = np.sqrt(max(after, 0.0)) if after > 0.5 * before else \
                np.sqrt(comm.allreduce(float(w @ w), op=MPI.SUM))
            H[:j + 1, j] = h[:j + 1]
            H[j + 1, j] = beta
            scale = np.sqrt(np.sum(h[:j + 1] ** 2) + beta ** 2)
            if beta <= 1e-13 * max(scale, 1e-300):
                j += 1
                breakdown = True
                break
            w /= beta
            j += 1
        msize = j
        beta = H[msize, msize - 1]
        T, Q, sdim = _sorted_schur(H[:msize, :msize], k)
        kk = min(sdim, msize)
        res = np.abs(beta * Q[msize - 1, :kk]) if not breakdown else np.zeros(kk)
        nconv = int(np.argmin(res < tol)) if not np.all(res < tol) else kk
        if nconv >= kk or restarts >= maxits or breakdown or msize < m:
            W = Q[:, :kk].T @ V[:msize]
            return KrylovSchurResult(W, T[:kk, :kk].copy(), res, nconv, restarts, total_steps)
        # thick restart: keep the leading Schur vectors plus a part of the rest
        keep = int(min(m - 1, kk + max(1, int(np.ceil(tr_factor * (m - kk))))))
        T, Q, keep = _sorted_schur(H[:msize, :msize], keep)
        keep = min(keep, m - 1)
        if keep < msize and T[keep, keep - 1] != 0.0:  # never split a 2x2 block
            keep -= 1
        last = V[msize].copy()
        V[:keep] = Q[:, :keep].T @ V[:msize]
        V[keep] = last
        H[:] = 0.0
        H[:keep, :keep] = T[:keep, :keep]
        H[keep, :keep] = beta * Q[msize - 1, :keep]
        p = keep
        restarts += 1
