"""Distributed linear operators (DistLinearOperator): a dtype, complex
operators, and an operator whose matvec takes no ``out``, inside a solve."""

import numpy as np
from mpi4py import MPI

import dmsolve
from dmsolve import DistCSR, DistLinearOperator, DistVector, aslinearoperator, krylov
from krylov_cases import RTOL, check_solution, complex_rhs, distribute, general, reference
from mpitest import Checks, assert_allclose_collective, assert_collective, assert_raises_collective
from operands import complex_matrix, vector

COMM = MPI.COMM_WORLD


# -- operators, preconditioners by name, monitors -----------------------------------

def test_generic_operator_without_out():
    """An operator whose matvec takes no ``out`` works in a solve."""
    A, b = distribute("convdiff")
    op = DistLinearOperator(A.row_layout, A.col_layout, lambda x: A @ x)
    assert_collective(COMM, dmsolve.aslinearoperator(A) is A)
    x, info = dmsolve.gmres(op, b, rtol=1e-10, maxiter=500)
    assert_collective(COMM, info.converged)
    assert_allclose_collective(x.gather(), reference("convdiff"), rtol=1e-6, atol=1e-12)


def test_complex_distlinearoperator(comm):
    """A complex DistLinearOperator solves to spsolve's answer."""
    Ag = general(9)
    A = DistCSR.from_global(Ag, comm)
    op = DistLinearOperator(A.row_layout, A.col_layout, A.matvec, dtype=np.complex128)
    b = complex_rhs(Ag.shape[0], seed=9)
    x, info = krylov.bicgstab(op, DistVector.from_global(b, A.row_layout), rtol=RTOL)
    check_solution(comm, Ag, b, x, info, "operator")


def test_linear_operators_carry_a_dtype(comm):
    """Linear operators carry the dtype of what they compute."""
    A = DistCSR.from_global(complex_matrix(9, 9, seed=2), comm)
    op = DistLinearOperator(A.row_layout, A.col_layout, A.matvec, dtype=np.complex128)

    class Wrapped:                      # an operator whose matvec takes no out
        row_layout, col_layout, dtype = A.row_layout, A.col_layout, A.dtype

        def matvec(self, x):
            return A.matvec(x)

    with Checks(comm) as checks:
        checks.add(op.dtype == np.complex128, "given dtype")
        checks.add(all(v.dtype == np.complex128 for v in op.create_vectors()), "vectors")
        checks.add(DistLinearOperator(A.row_layout, A.col_layout, A.matvec).dtype
                   == np.float64, "default float64")
        checks.add(aslinearoperator(Wrapped()).dtype == np.complex128, "aslinearoperator")
    assert_raises_collective(comm, TypeError, DistLinearOperator, A.row_layout, A.col_layout,
                             A.matvec, dtype=np.float32, match="float64 or complex128")
    x = DistVector.from_global(vector(9, 4, "complex"), A.col_layout)
    assert_allclose_collective(op.matvec(x).gather(), A.to_scipy() @ vector(9, 4, "complex"),
                               comm, rtol=1e-13)
