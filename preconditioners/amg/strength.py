"""Strength of connection: which couplings of a level matrix count for aggregation.

Aggregates never cross ranks, so the strength graph is built on each rank's
on-process block only; it is local and needs no communication.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from dmsolve import Registry
from dmsolve.validate import check_real

__all__ = ["STRENGTH", "SymmetricStrength", "symmetric_strength", "is_strong"]

#: Strength measures by name, as PyAMG's ``strength=("symmetric", {"theta": 0.08})``:
#: classes ``cls(**options)`` (the constructor checks the options) whose instances
#: are called as ``measure(A)`` and carry the threshold ``theta``.
STRENGTH = Registry("strength measure")


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


@STRENGTH.register("symmetric")
class SymmetricStrength:
    """The symmetric measure of :func:`symmetric_strength` with threshold ``theta``.

    ``theta`` in ``[0, 1]`` (default 0: every nonzero coupling is strong) also
    tells the prolongator smoothing which couplings to filter out
    (:func:`.smooth.filtered_matrix`). Construction checks it and is not
    collective.

    Raises
    ------
    TypeError, ValueError
        If ``theta`` is not a real number in ``[0, 1]``.
    """

    def __init__(self, theta: float = 0.0):
        self.theta = check_real("theta", theta, low=0.0, high=1.0)

    def __call__(self, A) -> sp.csr_matrix:
        """The strength graph of this rank's diagonal block of ``A``. Not collective."""
        return symmetric_strength(A, self.theta)

    def options(self) -> dict:
        """The options, as a descriptor's dict. Not collective."""
        return {"theta": self.theta}
