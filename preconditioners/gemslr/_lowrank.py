"""Stage 4 of GeMSLR: the low-rank correction of each level, from the dominant
Schur vectors of ``G_l = I - S_l M_{l+1}`` (thick-restart Arnoldi, ``_arnoldi``).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from dmsolve import agree

from ._arnoldi import KrylovSchurResult, krylov_schur

__all__ = ["start_vector", "low_rank_correction"]


def start_vector(ids: np.ndarray) -> np.ndarray:
    """Pseudo-random entries that depend on the original global id only, so the
    Arnoldi start (and the preconditioner) is the same at every rank count.
    Not collective."""
    h = (ids.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)) * np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(31)
    h *= np.uint64(0x94D049BB133111EB)
    h ^= h >> np.uint64(29)
    return (h >> np.uint64(11)).astype(np.float64) / float(2 ** 53) - 0.5


def low_rank_correction(g_operator: Callable[[np.ndarray, np.ndarray], None], comm,
                        ids: np.ndarray, level: int, *, rank: int, arnoldi_factor: float,
                        maxits: int, tol: float, tr_factor: float
                        ) -> tuple[KrylovSchurResult, np.ndarray]:
    """The Schur basis of ``G_l`` and ``H = (I - T)^{-1} - I`` for one level.

    With the Schur form ``G_l W = W T``,
    ``(I - G_l)^{-1} ~= I + W ((I - T)^{-1} - I) W^T``. Collective on
    ``comm``.

    Parameters
    ----------
    g_operator : callable ``(v, out)``
        ``out = G_l v`` on this rank's interface rows; collective on ``comm``.
    ids : int64 array
        Original global ids of this rank's interface rows (the Arnoldi start
        depends on them only).
    level : int
        For messages.
    rank, arnoldi_factor, maxits, tol, tr_factor
        GeMSLR's ``lr_rank``, ``lr_arnoldi_factor``, ``lr_maxits``,
        ``lr_tol_eig`` and ``lr_tr_factor`` (keyword only).

    Raises
    ------
    ValueError
        On every rank, if ``I - T`` is singular.
    """
    steps = max(int(np.ceil(arnoldi_factor * rank)), rank + 1)
    res = krylov_schur(g_operator, comm, ids.size, start_vector(ids), rank=rank, steps=steps,
                       maxits=maxits, tol=tol, tr_factor=tr_factor)
    k = res.rank
    Hc = np.zeros((k, k))
    exc = None
    if k:
        try:
            Hc = np.linalg.solve(np.eye(k) - res.T, np.eye(k)) - np.eye(k)
            if not np.all(np.isfinite(Hc)):
                raise np.linalg.LinAlgError("non-finite")
        except np.linalg.LinAlgError:
            exc = ValueError("gemslr: level %d: I - T of the low-rank correction "
                             "is singular (an eigenvalue 1 of E B^-1 F C^-1)" % level)
    agree(comm, exc)
    return res, Hc
