"""``check=True``: the symmetric (Hermitian) test of A and M at set-up, the same
verdict on any layout, and a nonsymmetric preconditioner refused under CG and
MINRES."""

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

import dmsolve
import preconditioners
from dmsolve import DistCSR, DistVector, Layout, Preconditioner, gallery, krylov, solve
from krylov_cases import complex_rhs, hermitian, laplacian
from mpitest import assert_allclose_collective, assert_collective, assert_raises_collective

COMM = MPI.COMM_WORLD


class Unsymmetric(Preconditioner):
    """A stand-in for a preconditioner that says it is not symmetric (as
    restricted additive Schwarz does); applies a scaling."""

    name = "stand-in"
    symmetric = False

    def __init__(self, A, restricted=None):
        super().__init__(A)
        if restricted is not None:
            self.name = "asm"
            self.restricted = restricted
        self._done()

    def _apply(self, r, out):
        np.multiply(r, 0.25, out=out)


# -- symmetry check on request ----------------------------------------------------------

@pytest.mark.parametrize("method", ["minres", "cg", "pipecg"])
def test_symmetry_check(method):
    """check=True accepts symmetric A and M and refuses nonsymmetric ones, on every rank."""
    f = getattr(dmsolve, method)
    A = gallery.convection_diffusion(12, COMM)
    b = gallery.rhs(A, "random", seed=1)
    assert_raises_collective(COMM, ValueError, f, A, b, check=True,
                             match=r"needs a symmetric matrix A \(check=True\)")
    S = gallery.poisson2d(12, COMM)
    x, info = f(S, b, check=True, rtol=1e-8)
    assert_collective(COMM, info.converged, str(info))
    # a nonsymmetric M: out = r + 0.5 * (r shifted by one row, on each rank)
    def skew(r):
        out = r.copy()
        out.local[1:] += 0.5 * r.local[:-1]
        return out
    assert_raises_collective(COMM, ValueError, f, S, b, M=skew, check=True,
                             match="needs a symmetric preconditioner M")
    # a symmetric one passes
    _, info = f(S, b, M=preconditioners.make("jacobi", S), check=True, rtol=1e-8)
    assert_collective(COMM, info.converged, str(info))
    assert_raises_collective(COMM, TypeError, f, S, b, check="yes", match="check")


@pytest.mark.mpi(min_size=2)
def test_symmetry_check_same_verdict_on_any_layout():
    """The symmetry check gives the serial verdict on any layout, a rank without rows included."""
    # the test vectors are functions of the global index: a rank without rows
    # and uneven blocks give the verdict of the serial check
    Ag = gallery.shifted_laplacian(7, MPI.COMM_SELF).to_scipy()
    n = Ag.shape[0]
    inner = dmsolve.block_ranges(n, COMM.size - 1)
    lay = Layout(np.concatenate([inner, [n]]), COMM)
    A = DistCSR.from_global(Ag, COMM, layout=lay)
    b = DistVector.full(A.row_layout, 1.0)
    e = assert_raises_collective(COMM, ValueError, dmsolve.minres, A, b, check=True)
    A1 = DistCSR.from_global(Ag, MPI.COMM_SELF)
    try:
        dmsolve.minres(A1, DistVector.full(A1.row_layout, 1.0), check=True)
    except ValueError as e1:
        serial = str(e1)
    gap = float(str(e).split(" = ")[1].split()[0])
    gap1 = float(serial.split(" = ")[1].split()[0])
    assert_allclose_collective(gap, gap1, rtol=1e-3)


# -- a nonsymmetric preconditioner under CG/MINRES ---------------------------------------

@pytest.mark.parametrize("method", ["cg", "pipecg", "minres"])
def test_nonsymmetric_preconditioner_is_refused(method):
    """A preconditioner that says it is not symmetric is refused under CG and MINRES."""
    A = gallery.poisson2d(12, COMM)
    b = gallery.rhs(A, "random", seed=1)
    assert_raises_collective(COMM, ValueError, getattr(dmsolve, method), A, b,
                             M=Unsymmetric(A), match=r"^%s needs a symmetric preconditioner; "
                             r"stand-in is not .*method='gmres', 'fgmres' or 'bicgstab'"
                             % method)
    assert_raises_collective(COMM, ValueError, solve, A, b, method, Unsymmetric(A, True),
                             match=r"asm with restricted=True is not: use "
                             r"pc=\('asm', \{'restricted': False\}\)")
    # the methods for nonsymmetric preconditioners take it
    for other in ("gmres", "fgmres", "bicgstab"):
        _, info = solve(A, b, other, Unsymmetric(A), rtol=1e-8, maxiter=2000)
        assert_collective(COMM, info.converged, "%s %s" % (other, info))


@pytest.mark.parametrize("method", ["cg", "minres"])
def test_symmetry_check_needs_hermitian(comm, method):
    """check=True refuses a complex symmetric matrix that is not Hermitian."""
    # complex symmetric (A^T = A) but not Hermitian: check=True refuses it
    Ag = sp.csr_matrix(laplacian(8) * (1.0 + 0.5j))
    A = DistCSR.from_global(Ag, comm)
    b = DistVector.from_global(complex_rhs(64), A.row_layout)
    assert_raises_collective(comm, ValueError, getattr(krylov, method), A, b, check=True,
                             match="symmetric")
    H = DistCSR.from_global(hermitian(8), comm)
    _, info = getattr(krylov, method)(H, DistVector.from_global(complex_rhs(64), H.row_layout),
                                      check=True, rtol=1e-8)
    assert_collective(comm, info.converged, str(info.reason))
