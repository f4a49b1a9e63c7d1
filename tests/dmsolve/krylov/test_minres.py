"""MINRES (dmsolve.krylov.minres) with a shift: checked at the door, scipy's
answer on the gathered system, and shifted Hermitian indefinite systems."""

import scipy.sparse as sp
import scipy.sparse.linalg as spla
from mpi4py import MPI

import dmsolve
from dmsolve import DistCSR, DistVector, krylov
from krylov_cases import RTOL, check_solution, complex_rhs, distribute, hermitian, problem
from mpitest import assert_allclose_collective, assert_collective, assert_raises_collective

COMM = MPI.COMM_WORLD


def test_minres_shift_checked_at_the_door():
    """A bad MINRES shift is refused at the door, on every rank."""
    A, b = distribute("poisson2d")
    assert_raises_collective(COMM, ValueError, dmsolve.minres, A, b, shift=float("nan"),
                             match="shift must be a finite real number")
    assert_raises_collective(COMM, TypeError, dmsolve.minres, A, b, shift="0.5",
                             match="shift must be a real number")


def test_minres_shift_matches_scipy():
    """MINRES with a shift matches scipy's MINRES with the same shift."""
    Ag, bg = problem("poisson2d")
    A, b = distribute("poisson2d")
    x, info = dmsolve.minres(A, b, shift=1.5, rtol=1e-10, maxiter=1000)
    ref = spla.spsolve((Ag - 1.5 * sp.eye(Ag.shape[0])).tocsc(), bg)
    assert_collective(COMM, info.converged)
    assert_allclose_collective(x.gather(), ref, rtol=1e-6, atol=1e-10)


def test_minres_shifted_hermitian_indefinite(comm):
    """MINRES solves a shifted Hermitian indefinite system to spsolve's answer."""
    Ag = hermitian(10)
    N = Ag.shape[0]
    shift = 1.3              # inside the spectrum: A - shift I is indefinite
    b = complex_rhs(N, seed=6)
    A = DistCSR.from_global(Ag, comm)
    x, info = krylov.minres(A, DistVector.from_global(b, A.row_layout), shift=shift,
                            rtol=RTOL, maxiter=3000)
    As = sp.csr_matrix(Ag - shift * sp.eye(N))
    check_solution(comm, As, b, x, info, "minres shifted")
