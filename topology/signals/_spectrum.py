"""A few extreme eigenpairs of a Hodge Laplacian by distributed LOBPCG, with
an AMG preconditioner for the smallest ones (the harmonic space among them).
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from dmsolve import DistCSR, DistVector
from dmsolve.validate import agreed, check_choice, check_int, check_real

from ._filters import IterationError, _bound, check_complex, check_k
from ._flows import _make_pc
from ._hodge import _laplacian

__all__ = ["hodge_eigenpairs", "Eigenpairs"]


class Eigenpairs:
    """What :func:`hodge_eigenpairs` found.

    Attributes
    ----------
    eigenvalues : ndarray
        Ascending for ``which="smallest"``, descending for ``"largest"``; the
        same on every rank.
    eigenvectors : list of DistVector
        Orthonormal, on ``cx.simplex_layout(k)``.
    residual_norms : ndarray
        ``||L v - lam v||`` of each pair.
    iterations : int
    converged : bool
    harmonic_dimension : int
        How many eigenvalues are at most ``tol * bound`` (zero up to the
        tolerance): the Betti number ``beta_k`` when ``nev`` exceeds it, for
        ``which="smallest"`` and ``part="full"``.

    Not collective (built by :func:`hodge_eigenpairs`).
    """

    def __init__(self, eigenvalues, eigenvectors, residual_norms, iterations, converged,
                 harmonic_dimension):
        self.eigenvalues = eigenvalues
        self.eigenvectors = eigenvectors
        self.residual_norms = residual_norms
        self.iterations = iterations
        self.converged = converged
        self.harmonic_dimension = harmonic_dimension

    def __repr__(self) -> str:
        return "Eigenpairs(eigenvalues=%s, converged=%s, iterations=%d)" % (
            np.array2string(self.eigenvalues, precision=6), self.converged, self.iterations)


def hodge_eigenpairs(cx, k: int = 1, nev: int = 4, *, which: str = "smallest",
                     part: str = "full", pc="default", tol: float = 1e-8,
                     maxiter: int = 500, shift: float | None = None,
                     block: int | None = None) -> Eigenpairs:
    """The ``nev`` smallest or largest eigenpairs of ``L_k`` (or of its up or down part).

    Locally optimal block preconditioned CG (Knyazev 2001) with soft
    locking: each iteration forms the Rayleigh-Ritz projection on the
    current block, the preconditioned residuals and the previous search
    directions, all ``B``-orthonormalised by Cholesky (Hetmaniuk and
    Lehoucq's basis choice). For the smallest eigenpairs the preconditioner
    is AMG on ``L + shift I`` (``shift`` default ``1e-3`` times a bound on
    the spectrum), which keeps it positive definite on the harmonic space;
    for the largest, none. A pair has converged when ``||L v - lam v|| <=
    tol * a``, ``a`` the Lanczos bound of :func:`spectral_bounds`. The
    zero eigenvalues are the harmonic space: their number is the Betti
    number ``beta_k`` (``part="full"``), reported as
    ``harmonic_dimension`` for a cross-check against
    :func:`betti_numbers`.

    Parameters
    ----------
    cx : SimplicialComplex
    k : int
    nev : int
        Positive, at most the number of k-simplices.
    which : {"smallest", "largest"}
    part : {"full", "up", "down"}
    pc : "default", str, (name, options) or None
        "default" is AMG for the smallest and None for the largest.
    tol : float
    maxiter : int
    shift : float, optional
    block : int, optional
        The block size (default ``nev + min(nev, 4)``: a few guard vectors
        speed up the last wanted pairs).

    Returns
    -------
    Eigenpairs

    Raises
    ------
    TypeError, ValueError
        On every rank, for a ``k``, ``nev``, ``which``, ``part``, ``tol`` or
        ``maxiter`` out of range.
    dmsolve.krylov.ConvergenceError
        On every rank, if the wanted pairs have not converged in ``maxiter``
        iterations.

    Notes
    -----
    Collective on ``cx.comm``: per iteration ``block`` matvecs and
    preconditioner applications, and three reductions of small Gram
    matrices.

    References
    ----------
    .. [1] A. V. Knyazev, "Toward the optimal preconditioned eigensolver:
       locally optimal block preconditioned conjugate gradient method",
       SIAM J. Sci. Comput. 23(2), 2001.
    .. [2] U. Hetmaniuk and R. Lehoucq, "Basis selection in LOBPCG", J.
       Comput. Phys. 218, 2006.

    Examples
    --------
    A triangulated 3 x 3 square with the middle square left open: one hole,
    so one zero eigenvalue of ``L_1``:

    >>> import numpy as np
    >>> from mpi4py import MPI
    >>> import topology
    >>> comm = MPI.COMM_WORLD
    >>> v = np.arange(16).reshape(4, 4)                   # vertex (x, y) is 4 y + x
    >>> a, b, c, d = v[:-1, :-1].ravel(), v[:-1, 1:].ravel(), v[1:, :-1].ravel(), v[1:, 1:].ravel()
    >>> keep = np.arange(9) != 4                          # the middle square left open
    >>> triangles = np.vstack([np.c_[a, b, d][keep], np.c_[a, c, d][keep]])
    >>> cx = topology.SimplicialComplex([triangles[comm.rank::comm.size]], comm)
    >>> ep = topology.hodge_eigenpairs(cx, 1, 3)
    >>> print(ep.converged, ep.harmonic_dimension, topology.betti_numbers(cx)[1])
    True 1 1
    >>> print(np.round(ep.eigenvalues[1:], 3))
    [0.592 0.909]

    Against numpy's dense eigenvalues of the gathered Laplacian:

    >>> L1 = topology.hodge_laplacian(cx, 1).to_scipy().toarray()
    >>> print(np.allclose(ep.eigenvalues, np.linalg.eigvalsh(L1)[:3], atol=1e-6))
    True
    """

    check_complex(cx)
    comm = cx.comm
    with agreed(comm):
        k = check_k(cx, k)
        n = cx.simplex_layout(k).global_size
        nev = check_int("nev", nev, low=1, high=max(n, 1))
        which = check_choice("which", which, ("smallest", "largest"))
        part = check_choice("part", part, ("full", "up", "down"))
        tol = check_real("tol", tol, low=0.0, low_open=True)
        maxiter = check_int("maxiter", maxiter, low=1)
        shift = check_real("shift", shift, low=0.0, low_open=True, allow_none=True)
        block = check_int("block", block, low=1, allow_none=True)
        if block is not None and block < nev:
            raise ValueError("block must be at least nev = %d, got %d" % (nev, block))
    m = min(block if block is not None else nev + min(nev, 4), n)
    L = _laplacian(cx, k, part)
    scale = max(_bound(L, 30), np.finfo(float).tiny)
    if pc == "default":
        pc = "amg" if which == "smallest" else None
    M = None
    if pc is not None:
        M = _make_pc(pc, _shifted(L, shift if shift is not None else 1e-3 * scale))
    ops = _BlockOperators(L, M)
    sign = 1.0 if which == "smallest" else -1.0
    lam, X, res, it, converged = _lobpcg(ops, _start_block(ops, m), nev, sign, tol * scale,
                                         maxiter)
    if not converged:
        with agreed(comm):
            raise IterationError(
                "hodge_eigenpairs: %d of %d pairs converged in %d iterations (largest "
                "residual %.3e, tolerance %.3e); raise maxiter or tol"
                % (int(np.sum(res[:nev] <= tol * scale)), nev, it, float(np.max(res[:nev])),
                   tol * scale))
    vecs = [DistVector(ops.layout, X[j].copy()) for j in range(nev)]
    vals = lam[:nev].copy()
    zero = int(np.sum(np.abs(vals) <= max(tol, 1e-10) * scale * 10)) \
        if which == "smallest" else 0
    return Eigenpairs(vals, vecs, res[:nev].copy(), it, converged, zero)


def _shifted(L: DistCSR, shift: float) -> DistCSR:
    """``L + shift I``, positive definite on the harmonic space (what the
    preconditioner of the smallest pairs is built on). Collective."""
    lay = L.row_layout
    d = np.full(lay.local_size, shift)
    rows = L.local_rows().tocoo()
    i = np.arange(lay.start, lay.stop, dtype=np.int64)
    return DistCSR.from_coo(np.concatenate((rows.row.astype(np.int64) + lay.start, i)),
                            np.concatenate((rows.col.astype(np.int64), i)),
                            np.concatenate((rows.data, d)), L.shape, L.comm, layout=lay,
                            col_layout=lay)


class _BlockOperators:
    """The operator, the preconditioner and the reductions of a block of
    vectors (rows of a local array: this rank's entries of each vector).
    Collective on ``L.comm`` for every call."""

    def __init__(self, L: DistCSR, M):
        self.L, self.M = L, M
        self.layout = L.row_layout
        self.comm = L.comm
        self.xv, self.yv = DistVector.zeros(self.layout), DistVector.zeros(self.layout)

    def apply_L(self, X):
        out = np.empty_like(X)
        for j in range(X.shape[0]):
            self.xv.local[:] = X[j]
            self.L.matvec(self.xv, out=self.yv)
            out[j] = self.yv.local
        return out

    def apply_M(self, R):
        if self.M is None:
            return R.copy()
        out = np.empty_like(R)
        for j in range(R.shape[0]):
            self.xv.local[:] = R[j]
            self.M.apply(self.xv, self.yv)
            out[j] = self.yv.local
        return out

    def gram(self, A, B):
        G = A @ B.T
        self.comm.Allreduce(MPI.IN_PLACE, G, op=MPI.SUM)
        return G

    def orthonormalize(self, V, against=None):
        """An orthonormal basis of ``V``'s span (after removing the span of
        ``against``), dropping directions that are numerically dependent;
        None if nothing is left."""
        import scipy.linalg as sla
        for _ in range(2 if against is not None else 1):     # twice is enough
            if against is not None:
                V = V - self.gram(V, against) @ against
        G = self.gram(V, V)
        w, Q = sla.eigh(0.5 * (G + G.T))
        keep = w > 1e-12 * max(float(w[-1]), np.finfo(float).tiny)
        if not np.any(keep):
            return None
        return (Q[:, keep] / np.sqrt(w[keep])).T @ V


def _start_block(ops: _BlockOperators, m: int):
    """``m`` orthonormal start vectors, deterministic in the global index."""
    lay = ops.layout
    idx = np.arange(lay.start, lay.stop, dtype=np.float64)
    X = np.array([np.sin((j + 1) * 0.731 * idx + 0.5 * j) + 0.1 * np.cos(0.117 * (j + 3) * idx)
                  for j in range(m)])
    X = ops.orthonormalize(X)
    if X is None or X.shape[0] < m:
        X = np.eye(m, lay.global_size)[:, lay.start:lay.stop].copy()
        X = ops.orthonormalize(X)
    return X


def _lobpcg(ops: _BlockOperators, X, nev: int, sign: float, atol: float, maxiter: int):
    """LOBPCG with soft locking from the block ``X``: ``(eigenvalues, block,
    residual norms, iterations, converged)``, a pair converged when its
    residual is at most ``atol``; ``sign`` -1 for the largest. Collective."""
    import scipy.linalg as sla
    m = X.shape[0]
    gram = ops.gram
    AX = ops.apply_L(X)
    lam, C = sla.eigh(sign * gram(X, AX))
    X, AX = C.T @ X, C.T @ AX
    lam = sign * lam
    P = None
    it = 0
    res = np.full(m, np.inf)
    converged = False
    for it in range(1, maxiter + 1):
        R = AX - lam[:, None] * X
        res = np.sqrt(np.maximum(np.diag(gram(R, R)), 0.0))
        done = res <= atol
        if np.all(done[:nev]):
            converged = True
            break
        active = np.flatnonzero(~done)
        W = ops.orthonormalize(ops.apply_M(R[active]), X)
        if W is None:
            W = ops.orthonormalize(R[active], X)
            if W is None:
                break
        AW = ops.apply_L(W)
        blocks, ablocks = [X, W], [AX, AW]
        if P is not None:
            Pn = ops.orthonormalize(P, np.vstack((X, W)))
            if Pn is not None:
                # P's products from the same linear combination
                blocks.append(Pn)
                ablocks.append(ops.apply_L(Pn))
        S = np.vstack(blocks)
        AS = np.vstack(ablocks)
        GA = gram(S, AS)
        GA = 0.5 * (GA + GA.T)
        GB = gram(S, S)
        GB = 0.5 * (GB + GB.T)
        try:
            theta, Z = sla.eigh(sign * GA, GB)
        except sla.LinAlgError:
            theta, Z = sla.eigh(sign * GA)
        Z = Z[:, :m]
        lam = sign * theta[:m]
        # new directions: the part of the update outside the current X
        Zp = Z.copy()
        Zp[:m] = 0.0
        P = Zp.T @ S
        X, AX = Z.T @ S, Z.T @ AS
    if not converged:
        R = AX - lam[:, None] * X
        res = np.sqrt(np.maximum(np.diag(gram(R, R)), 0.0))
        converged = bool(np.all(res[:nev] <= atol))
    return lam, X, res, it, converged
