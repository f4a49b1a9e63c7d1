"""Prolongator smoothing: the serial formula ``(I - omega/rho D^-1 A_F) T``, and
the unsmoothed option that keeps the tentative prolongator."""

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

import dmsolve.gallery as gallery
from amg_cases import amg_solve, hierarchy_pieces
from mpitest import assert_allclose_collective, assert_collective
from preconditioners.amg.smooth import smooth_prolongator

COMM = MPI.COMM_WORLD


@pytest.mark.parametrize("theta", [0.0, 0.3], ids=["theta0", "theta0.3"])
def test_smoothed_prolongator_equals_serial_formula(theta):
    """smooth_prolongator equals the serial formula (I - omega/rho D^-1 A_F) T."""
    A = gallery.anisotropic_diffusion(17, COMM, epsilon=0.1)
    S, agg, count, T, Bc = hierarchy_pieces(A, theta=theta)
    P, rho = smooth_prolongator(A, T, omega=4.0 / 3.0, theta=theta)
    Ag, Tg = A.to_scipy().tocsr(), T.to_scipy()
    # serial: weak couplings lumped onto the diagonal, then one Jacobi step
    coo = Ag.tocoo()
    d = Ag.diagonal()
    weak = (coo.row != coo.col) & (np.abs(coo.data) < theta * np.sqrt(np.abs(d[coo.row] * d[coo.col])))
    F = sp.csr_matrix((np.where(weak, 0, coo.data), (coo.row, coo.col)), shape=Ag.shape)
    F = F + sp.diags(np.bincount(coo.row[weak], weights=coo.data[weak],
                                 minlength=d.size).astype(float))
    Df = F.diagonal()
    rho_true = np.abs(np.linalg.eigvals((sp.diags(1 / Df) @ F).toarray())).max()
    assert_collective(COMM, 0.9 * rho_true <= rho <= 1.0 + 1e-12 * rho_true + rho_true,
                      "rho %g vs %g" % (rho, rho_true))
    ref = Tg - (4.0 / 3.0 / rho) * (sp.diags(1 / Df) @ F @ Tg)
    assert_allclose_collective(P.to_scipy().toarray(), ref.toarray(), rtol=1e-12, atol=1e-14)


def test_unsmoothed_aggregation_keeps_the_tentative_prolongator():
    """smooth="none" keeps the tentative prolongator."""
    A = gallery.poisson2d(40, COMM)
    M, info = amg_solve(A, smooth="none", max_coarse=20, min_rows_per_rank=1)
    _, _, _, T, _ = hierarchy_pieces(A)
    assert_allclose_collective(M.levels[0].P.to_scipy().toarray(), T.to_scipy().toarray(),
                               rtol=0)
    _, smoothed = amg_solve(A, max_coarse=20, min_rows_per_rank=1)
    assert_collective(COMM, info.converged and info.iterations > smoothed.iterations,
                      "unsmoothed %d vs smoothed %d iterations (%s)"
                      % (info.iterations, smoothed.iterations, info.reason))
