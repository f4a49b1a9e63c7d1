"""Strength of connection: which couplings of a level matrix count for aggregation.

Aggregates never cross ranks, so the strength graph is built on each rank's
on-process block only; it is local and needs no communication.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["symmetric_strength", "is_strong"]


def is_strong(rows, cols, vals, diag_row, diag_col, theta: float) -> np.ndarray:
    """``|a_ij| >= theta * sqrt(|a_ii a_jj|)`` entry by entry, off the diagonal.
    Not collective."""
    off = rows != cols
    if theta <= 0:
        return off & (vals != 0)
    return off & (np.abs(vals) >= theta * np.sqrt(np.abs(diag_row * diag_col)))


def symmetric_strength(A, theta: float = 0.0) -> sp.csr_matrix:
    """The symmetric strength graph of this rank's diagonal block.

    Entry ``(i, j)`` (local numbering, ``i != j``) is kept when
    ``|a_ij| >= theta * sqrt(|a_ii a_jj|)`` (Vanek, Mandel & Brezina 1996);
    the values are ``|a_ij|``. ``theta = 0`` keeps every nonzero coupling, as
    PyAMG's default. Not collective.

    References
    ----------
    P. Vanek, J. Mandel, M. Brezina, "Algebraic multigrid by smoothed
    aggregation for second and fourth order elliptic problems", Computing
    56(3), 1996.
    """
    D = A.diag.tocoo()
    d = np.zeros(D.shape[0])
    on = D.row == D.col
    d[D.row[on]] = D.data[on]
    keep = is_strong(D.row, D.col, D.data, d[D.row], d[D.col], theta)
    S = sp.csr_matrix((np.abs(D.data[keep]), (D.row[keep], D.col[keep])), shape=D.shape)
    S.sort_indices()
    return S
