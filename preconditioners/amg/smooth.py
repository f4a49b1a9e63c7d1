"""Prolongator smoothing: ``P = (I - omega/rho(D^-1 A_F) D^-1 A_F) T``, one Jacobi step.

``A_F`` is ``A`` with its weak couplings (by the strength measure) removed and
lumped onto the diagonal, so that ``A_F`` keeps ``A``'s row sums and the
smoothing still reproduces the near null space (Vanek, Mandel & Brezina 1996).
By name (:data:`PROLONGATOR_SMOOTHERS`): ``"jacobi"``, or ``"none"`` (``P = T``).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from dmsolve import DistCSR, Registry
from dmsolve.spgemm import subtract_scaled
from dmsolve.validate import check_real

from .._dist import matmat_local, rows_with_global_columns
from .._eigen import lanczos_extremes
from .strength import SymmetricStrength

__all__ = ["PROLONGATOR_SMOOTHERS", "JacobiProlongation", "NoProlongationSmoothing",
           "filtered_matrix", "smooth_prolongator"]

#: Prolongator smoothers by name, as PyAMG's ``smooth=("jacobi", {"omega": 4/3})``:
#: classes ``cls(**options)`` (the constructor checks the options) whose instances
#: are called as ``smoother(A, T, strength) -> (P, rho)`` with the level's strength
#: measure (:data:`.strength.STRENGTH`).
PROLONGATOR_SMOOTHERS = Registry("prolongator smoother")


def filtered_matrix(A: DistCSR, strength) -> DistCSR:
    """``A`` without the off-diagonal couplings the measure ``strength`` calls
    weak, their sum added to the diagonal.

    ``A`` itself when the measure keeps every nonzero (``strength.filters``
    false, e.g. the symmetric measure with ``theta = 0``) or calls no entry
    of ``A`` weak. Collective on ``A.comm`` (one halo exchange of the
    diagonal, a reduction, the new matrix's halo plan).
    """
    if not strength.filters:
        return A
    if not A.comm.allreduce(strength.has_weak(A), op=MPI.LOR):
        return A        # nothing to filter: spare the copy and its halo plan
    d = A.diagonal().local
    dg = A.halo.exchange(d.astype(A.halo.dtype, copy=False))
    loc = rows_with_global_columns(A)
    row = np.repeat(np.arange(d.size), np.diff(loc.indptr))
    start = A.row_layout.start
    gi = row + start
    gj = loc.indices.astype(np.int64)
    own = (gj >= start) & (gj < A.row_layout.stop)
    dj = np.empty(gj.size)
    dj[own] = d[gj[own] - start]
    if (~own).any():
        dj[~own] = dg[np.searchsorted(A.ghosts, gj[~own])]
    strong = strength.strong(gi, gj, loc.data, d[row], dj)
    weak = (gi != gj) & ~strong
    weak_rows = row[weak]
    lump = np.bincount(weak_rows, weights=loc.data[weak], minlength=d.size)
    keep = ~weak
    vals = loc.data[keep]
    on = (gi[keep] == gj[keep])
    vals[on] += lump[row[keep][on]]
    # the kept entries stay in their (sorted) order: CSR directly, no sort
    dropped = np.concatenate(([0], np.cumsum(np.bincount(weak_rows, minlength=d.size))))
    F = sp.csr_matrix((vals, gj[keep], loc.indptr - dropped), shape=loc.shape)
    return DistCSR.from_local_rows(F, A.row_layout, A.col_layout, check_finite=False)


def smooth_prolongator(A: DistCSR, T: DistCSR, omega: float = 4.0 / 3.0,
                       theta: float = 0.0, steps: int = 15,
                       strength=None) -> tuple[DistCSR, float]:
    """The Jacobi-smoothed prolongator and the estimate of ``rho(D^-1 A_F)`` used.

    ``A_F`` is filtered by the strength measure ``strength`` (default: the
    symmetric measure with threshold ``theta``).

    Collective on ``A.comm``: Lanczos reductions and a distributed product
    ``A_F T`` that fetches the ghost rows of ``T``.

    References
    ----------
    P. Vanek, J. Mandel, M. Brezina, Computing 56(3), 1996; PyAMG
    ``jacobi_prolongation_smoother``.
    """
    F = filtered_matrix(A, SymmetricStrength(theta) if strength is None else strength)
    d = F.diagonal().local
    with np.errstate(divide="ignore"):
        dinv = np.where(d != 0, 1.0 / d, 0.0)
    _, rho = lanczos_extremes(F, np.abs(dinv), steps)
    T_loc = rows_with_global_columns(T)
    FT = matmat_local(F, T, B_local=T_loc)
    scale = (omega / rho) if rho > 0 else 0.0
    P_loc = subtract_scaled(T_loc, FT, scale * dinv)
    if F is not A:
        F.free()
    return DistCSR.from_local_rows(P_loc, A.row_layout, T.col_layout, check_finite=False), rho


@PROLONGATOR_SMOOTHERS.register("jacobi")
class JacobiProlongation:
    """One Jacobi step on the tentative prolongator (:func:`smooth_prolongator`).

    ``omega`` in ``(0, 2]`` (default 4/3, as PyAMG) is divided by the
    estimate of ``rho(D^-1 A_F)``: beyond 2 the step amplifies the
    highest-energy components of ``T`` instead of damping them (and a huge
    weight overflows the coarse operators). Construction checks it and is
    not collective.

    Raises
    ------
    TypeError, ValueError
        If ``omega`` is not a real number in ``(0, 2]``.
    """

    def __init__(self, omega: float = 4.0 / 3.0):
        self.omega = check_real("omega", omega, low=0.0, high=2.0, low_open=True)

    def __call__(self, A: DistCSR, T: DistCSR, strength) -> tuple[DistCSR, float]:
        """``(P, rho)`` for the level ``A``; the couplings the measure
        ``strength`` calls weak are filtered out first. Collective on ``A.comm``."""
        return smooth_prolongator(A, T, omega=self.omega, strength=strength)

    def options(self) -> dict:
        """The options, as a descriptor's dict. Not collective."""
        return {"omega": self.omega}


@PROLONGATOR_SMOOTHERS.register("none")
class NoProlongationSmoothing:
    """No smoothing: ``P = T``, unsmoothed aggregation (PyAMG's ``smooth=None``).
    Takes no options; not collective."""

    def __call__(self, A: DistCSR, T: DistCSR, strength) -> tuple[DistCSR, float]:
        """``(T, 0.0)``: the tentative prolongator itself. Not collective."""
        return T, 0.0

    def options(self) -> dict:
        """No options. Not collective."""
        return {}
