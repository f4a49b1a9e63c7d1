"""The stopping test of a Krylov solve, ``||r|| <= max(rtol*||b||, atol)``: the
ATOL reason, divergence tolerance, and NaN from a preconditioner reported."""

import numpy as np
from mpi4py import MPI

import dmsolve
from dmsolve import ConvergedReason, DistVector
from krylov_cases import distribute
from mpitest import assert_collective

COMM = MPI.COMM_WORLD


def test_nan_from_preconditioner_is_reported():
    """A preconditioner that returns NaN ends the solve with NANORINF on every rank."""
    A, b = distribute("poisson2d")

    def bad(r):
        return DistVector.full(r.layout, np.nan)
    for method in ("cg", "gmres", "bicgstab", "minres", "pipecg"):
        _, info = getattr(dmsolve, method)(A, b, M=bad)
        assert_collective(COMM, info.reason in (ConvergedReason.NANORINF,
                                                ConvergedReason.INDEFINITE_PC), str(info))
        assert_collective(COMM, not info.converged)


def test_divergence_tolerance():
    """A residual growing past divtol ends the solve with DIVTOL."""
    A, b = distribute("poisson2d")
    _, info = dmsolve.cg(A, b, divtol=0.0)
    assert_collective(COMM, info.reason is ConvergedReason.DIVTOL and info.iterations == 1)
    _, info = dmsolve.cg(A, b, divtol=None, maxiter=3)
    assert_collective(COMM, info.reason is ConvergedReason.MAXITER)


def test_atol_reason():
    """A solve stopped by atol reports ATOL."""
    A, b = distribute("poisson2d")
    _, info = dmsolve.cg(A, b, rtol=0.0, atol=1e-6 * np.sqrt(A.shape[0]))
    assert_collective(COMM, info.reason is ConvergedReason.ATOL and info.converged)
    _, info = dmsolve.cg(A, b, rtol=1e-6)
    assert_collective(COMM, info.reason is ConvergedReason.RTOL)
