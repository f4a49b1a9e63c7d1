"""Pipelined CG (dmsolve.krylov.pipecg): the iterates of CG, and a drifting
recursive residual replaced rather than claimed; never indefinite on an SPD
problem, indefinite matrices still reported."""

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

import dmsolve
from dmsolve import ConvergedReason, DistCSR, DistVector, gallery, solve
from krylov_cases import distribute, true_residual
from mpitest import assert_allclose_collective, assert_collective

COMM = MPI.COMM_WORLD


@pytest.mark.parametrize("name", ["varpoisson", "path101"])
def test_pipecg_matches_cg(name):
    """Pipelined CG's iterates and iteration count match CG's."""
    A, b = distribute(name)
    for pc in (None, "jacobi"):
        _, i1 = dmsolve.solve(A, b, method="cg", pc=pc, rtol=1e-8)
        _, i2 = dmsolve.solve(A, b, method="pipecg", pc=pc, rtol=1e-8)
        assert_collective(COMM, i1.converged and i2.converged)
        assert_collective(COMM, abs(i1.iterations - i2.iterations) <= 2,
                          "cg %d, pipecg %d" % (i1.iterations, i2.iterations))


@pytest.mark.parametrize("rtol", [1e-12, 1e-13])
def test_pipecg_drift_is_restarted_not_claimed(rtol):
    """When pipelined CG's recurrence residual drifts from the true one, it restarts rather
    than claims convergence."""
    # pipelined CG's recurrence residual drifts from the true one: at 1e-12 the
    # recurrence meets the test while the true relative residual is 4.7e-12
    A = gallery.poisson2d(64, COMM)
    b = gallery.rhs(A, "random", seed=0)
    x, info = dmsolve.pipecg(A, b, rtol=rtol)
    true = true_residual(A, b, x)
    bnorm = np.linalg.norm(b.gather())
    assert_collective(COMM, info.converged and true <= rtol * bnorm,
                      "%s, true %.3g" % (info, true / bnorm))
    assert_collective(COMM, len(info.residual_norms) == info.iterations + 1)


@pytest.mark.parametrize("pc", [None, "jacobi"])
@pytest.mark.parametrize("rtol", [1e-12, 1e-13])
def test_pipecg_on_spd_is_never_indefinite(pc, rtol):
    """Pipelined CG never reports INDEFINITE_MAT on an SPD problem at tight tolerances."""
    # at 1e-12 the recurrence's p^T A p can turn negative on an SPD problem:
    # the residual is replaced rather than DIVERGED_INDEFINITE_MAT reported
    A = gallery.anisotropic_diffusion(40, COMM)
    b = gallery.rhs(A, "random", seed=0)
    x, info = solve(A, b, "pipecg", pc, rtol=rtol)
    true = true_residual(A, b, x)
    bnorm = np.linalg.norm(b.gather())
    assert_collective(COMM, info.converged and true <= rtol * bnorm,
                      "%s, true %.3g, %s" % (info, true / bnorm, info.extra))
    # CG converges there too, and pipecg's answer agrees with it
    xc, ic = solve(A, b, "cg", pc, rtol=rtol)
    assert_collective(COMM, ic.converged, str(ic))
    xr = xc.gather()
    assert_allclose_collective(x.gather(), xr, rtol=0, atol=1e-8 * np.abs(xr).max())


def test_pipecg_indefinite_matrix_is_still_reported():
    """Pipelined CG still reports an indefinite matrix as indefinite."""
    # the direct measurement of p^T A p keeps the honest verdict on an
    # indefinite matrix (and the recurrence restarts only on an SPD one)
    S = gallery.poisson2d(11, COMM, ny=9).to_scipy()
    A = DistCSR.from_global(sp.csr_matrix(S - 1.5 * sp.eye(99)), COMM)
    b = DistVector.full(A.row_layout, 1.0)
    _, info = dmsolve.pipecg(A, b, rtol=1e-8)
    assert_collective(COMM, info.reason is ConvergedReason.INDEFINITE_MAT, str(info))
    assert_collective(COMM, info.extra["residual_replacements"] == 0, str(info.extra))
