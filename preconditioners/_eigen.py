"""Extreme eigenvalues of the Jacobi-scaled operator ``D^-1 A`` by a few Lanczos steps."""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from dmsolve.reproducible import canonical, exact_dots, keys_of

__all__ = ["lanczos_extremes", "start_vector"]


def start_vector(layout, keys: np.ndarray | None = None) -> np.ndarray:
    """A pseudo-random start vector that depends on the global index only
    (on ``keys``, the rows' canonical keys, when given), so estimates are the
    same at every rank count. Not collective."""
    i = (np.arange(layout.start, layout.stop, dtype=np.uint64) if keys is None
         else np.asarray(keys).astype(np.uint64))
    h = (i + np.uint64(0x9E3779B97F4A7C15)) * np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(31)
    h *= np.uint64(0x94D049BB133111EB)
    h ^= h >> np.uint64(29)
    return (h >> np.uint64(11)).astype(np.float64) / float(2 ** 53) + 0.5


def lanczos_extremes(A, dinv: np.ndarray | None = None, steps: int = 10,
                     reproducible: bool = False) -> tuple[float, float]:
    """Smallest and largest Ritz values of ``D^-1 A`` after ``steps`` Lanczos steps.

    Runs Lanczos on the symmetric ``D^-1/2 A D^-1/2`` (similar to ``D^-1 A``);
    ``dinv`` is this rank's ``1/diag(A)`` (positive), or None for ``A`` itself.
    The largest Ritz value approaches ``rho(D^-1 A)`` from below; callers
    scale it up (e.g. by 1.1) for a safe upper bound.

    ``reproducible`` (implied by a canonical ``A``): exact reductions, a
    start vector of the canonical keys and ``A``'s canonical products
    (:mod:`dmsolve.reproducible`), so the estimates are the same bits for any
    partition.

    Collective on ``A.comm``: ``steps`` matvecs and ``2*steps`` reductions.
    """
    import scipy.linalg as sla
    comm = A.comm
    lay = A.row_layout
    if reproducible or getattr(A, "reproducible", False):
        A = canonical(A)
        v = start_vector(lay, keys_of(A))

        def dot(a, b):
            return exact_dots(comm, [(a, b)])[0]
    else:
        v = start_vector(lay)

        def dot(a, b):
            return comm.allreduce(float(a @ b), op=MPI.SUM)
    s = np.sqrt(dinv) if dinv is not None else np.ones(lay.local_size)
    x, y = A.create_vectors()
    nrm = np.sqrt(dot(v, v))
    if nrm == 0:
        return 0.0, 0.0
    v /= nrm
    v_old = np.zeros_like(v)
    alphas, betas = [], []
    beta = 0.0
    for _ in range(max(1, min(int(steps), lay.global_size))):
        np.multiply(s, v, out=x.local)
        A.matvec(x, out=y)
        w = s * y.local
        alpha = dot(w, v)
        w -= alpha * v + beta * v_old
        beta_new = np.sqrt(max(dot(w, w), 0.0))
        alphas.append(alpha)
        if beta_new <= 1e-12 * abs(alpha):
            break
        betas.append(beta_new)
        v_old, v = v, w / beta_new
        beta = beta_new
    k = len(alphas)
    ritz = sla.eigvalsh_tridiagonal(np.array(alphas), np.array(betas[:k - 1])) \
        if k > 1 else np.array(alphas)
    return float(ritz.min()), float(ritz.max())
