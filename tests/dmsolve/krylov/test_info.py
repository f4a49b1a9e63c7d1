"""SolveInfo, what a Krylov solve returns beside x: its fields and their
values."""

import numpy as np
from mpi4py import MPI

import dmsolve
import preconditioners
from dmsolve import SolveInfo
from krylov_cases import distribute
from mpitest import assert_collective

COMM = MPI.COMM_WORLD


def test_solve_info_fields():
    """SolveInfo: its norm type (left and right GMRES), timings, reason and residual
    norms."""
    A, b = distribute("poisson2d")
    _, info = dmsolve.gmres(A, b, M=preconditioners.make("jacobi", A))
    assert_collective(COMM, isinstance(info, SolveInfo) and info.norm_type == "preconditioned")
    assert_collective(COMM, info.setup_seconds >= 0 and info.solve_seconds > 0)
    assert_collective(COMM, info.check() is info and info.reason.petsc_name == "CONVERGED_RTOL")
    assert_collective(COMM, isinstance(info.residual_norms, np.ndarray))
    _, info = dmsolve.gmres(A, b, M=preconditioners.make("jacobi", A),
                            side="right")
    assert_collective(COMM, info.norm_type == "unpreconditioned")
