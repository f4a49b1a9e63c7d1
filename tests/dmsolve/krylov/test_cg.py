"""Conjugate gradients (dmsolve.krylov.cg): the iteration count of scipy's CG
on the same system, and an indefinite matrix reported as such."""

import pytest
import scipy.sparse.linalg as spla
from mpi4py import MPI

import dmsolve
from bad_inputs import check_bad_input
from dmsolve import ConvergedReason, ConvergenceError, cg
from krylov_cases import distribute, problem
from mpitest import assert_collective, assert_raises_collective

COMM = MPI.COMM_WORLD


# -- agreement with scipy and between rank counts -------------------------------------

def _scipy_count(solver, Ag, bg, **kw):
    count = [0]

    def cb(*_):
        count[0] += 1
    solver(Ag, bg, callback=cb, **kw)
    return count[0]


def test_cg_iterations_match_scipy():
    """CG takes scipy's iteration count on the same system and stopping test."""
    Ag, bg = problem("poisson2d")
    A, b = distribute("poisson2d")
    _, info = dmsolve.cg(A, b, rtol=1e-8)
    ref = _scipy_count(spla.cg, Ag, bg, rtol=1e-8, atol=0.0)
    assert_collective(COMM, abs(info.iterations - ref) <= 1,
                      "cg %d vs scipy %d" % (info.iterations, ref))


@pytest.mark.parametrize("method", ["cg", "pipecg"])
def test_cg_on_indefinite_matrix_reports_indefinite_mat(method):
    """CG on an indefinite matrix reports INDEFINITE_MAT on every rank."""
    A, b = distribute("indefinite")
    b.fill(1.0)
    x, info = getattr(dmsolve, method)(A, b, rtol=1e-8)
    assert_collective(COMM, info.reason is ConvergedReason.INDEFINITE_MAT, str(info))
    assert_collective(COMM, not info.converged)
    assert_raises_collective(COMM, ConvergenceError, getattr(dmsolve, method), A, b,
                             raise_on_failure=True)


# -- bad input: the same exception on every rank -------------------------------------------

BAD_INPUTS = [
    ("cg-positional-tolerance", TypeError, "positional", lambda e: cg(e.A, e.b, None, 1e-5)),
    ("cg-pc-given-as-a-name", TypeError, "pc=", lambda e: cg(e.A, e.b, M="jacobi")),
]


@pytest.mark.parametrize("exc, match, call", [c[1:] for c in BAD_INPUTS],
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_the_same_exception_on_every_rank(bad_input_env, request, exc, match,
                                                           call):
    """Each case of BAD_INPUTS raises the same exception type, with a message
    that matches, on every rank (or works, at one rank, where a COMM_SELF
    operand is valid)."""
    check_bad_input(bad_input_env, request, exc, match, call)
