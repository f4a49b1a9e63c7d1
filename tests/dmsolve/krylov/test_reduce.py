"""The error rendezvous of a Krylov solve's reductions: a callback, a
preconditioner or an operator failing on one rank only is raised on every
rank, the last callback's failure included."""

import time

import numpy as np
import pytest
from mpi4py import MPI

import dmsolve
from bad_inputs import (WORLD, check_bad_input, pc_failing_on_last_rank, raise_on,
                        wrong_output_operator)
from dmsolve import DistLinearOperator, solve
from krylov_cases import METHODS, distribute
from mpitest import assert_collective, assert_raises_collective

COMM = MPI.COMM_WORLD


# -- errors on one rank only ----------------------------------------------------------

@pytest.mark.timeout(60)
@pytest.mark.parametrize("method", METHODS)
def test_callback_failing_on_one_rank_raises_everywhere(method):
    """A callback failing on one rank is raised on every rank, in every method."""
    A, b = distribute("poisson2d")
    last = COMM.Get_size() - 1
    calls = [0]

    def cb(xk):
        calls[0] += 1
        if COMM.Get_rank() == last and calls[0] == 2:
            raise ValueError("boom in callback")
    t0 = time.perf_counter()
    assert_raises_collective(COMM, ValueError, getattr(dmsolve, method), A, b, rtol=1e-10,
                             callback=cb, match="boom in callback")
    assert_collective(COMM, time.perf_counter() - t0 < 10.0)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("method", METHODS)
def test_preconditioner_failing_on_one_rank_raises_everywhere(method):
    """A preconditioner failing on one rank is raised on every rank, in every method."""
    A, b = distribute("poisson2d")
    calls = [0]

    class FlakyPC:
        def apply(self, r, out=None):
            calls[0] += 1
            if COMM.Get_rank() == 0 and calls[0] == 3:
                raise RuntimeError("boom in preconditioner")
            out = r.empty_like() if out is None else out
            np.multiply(r.local, 0.25, out=out.local)
            return out
    assert_raises_collective(COMM, RuntimeError, getattr(dmsolve, method), A, b,
                             rtol=1e-10, M=FlakyPC(), match="boom in preconditioner")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("method", ["cg", "gmres"])
def test_final_callback_failure_is_agreed(method):
    """A callback failing after the last reduction is still raised on every rank."""
    # the failure happens after the last reduction: the final agreement catches it
    A, b = distribute("poisson2d")

    def cb(xk):
        if COMM.Get_rank() == 0:
            raise KeyError("late")
    assert_raises_collective(COMM, KeyError, getattr(dmsolve, method), A, b, maxiter=1,
                             callback=cb)


@pytest.mark.timeout(60)
def test_operator_failing_on_one_rank_raises_everywhere():
    """An operator failing on one rank is raised on every rank."""
    A, b = distribute("poisson2d")
    calls = [0]

    def mv(x, out=None):
        y = A.matvec(x, out=out)
        calls[0] += 1
        if COMM.Get_rank() == COMM.Get_size() - 1 and calls[0] == 4:
            raise FloatingPointError("boom in matvec")
        return y
    op = DistLinearOperator(A.row_layout, A.col_layout, mv)
    for method in ("cg", "pipecg", "bicgstab"):
        calls[0] = 0
        assert_raises_collective(COMM, FloatingPointError, getattr(dmsolve, method), op, b,
                                 rtol=1e-10, match="boom in matvec")


# -- bad input: the same exception on every rank -------------------------------------------

BAD_INPUTS = [
    ("preconditioner-raises-on-last-rank", FloatingPointError, "overflow",
     lambda e: solve(e.A, e.b, M=pc_failing_on_last_rank)),
    ("operator-returns-wrong-size-on-last-rank", ValueError, "layout",
     lambda e: solve(wrong_output_operator(e), e.b)),
    ("callback-raises-on-last-rank", KeyError, "gone",
     lambda e: solve(e.A, e.b, callback=raise_on(WORLD.size - 1, KeyError("gone")))),
    ("monitor-raises-on-rank-0", ZeroDivisionError, "monitor",
     lambda e: solve(e.A, e.b, "gmres", monitor=raise_on(0, ZeroDivisionError("monitor")))),
]


@pytest.mark.parametrize("exc, match, call", [c[1:] for c in BAD_INPUTS],
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_the_same_exception_on_every_rank(bad_input_env, request, exc, match,
                                                           call):
    """Each case of BAD_INPUTS raises the same exception type, with a message
    that matches, on every rank (or works, at one rank, where a COMM_SELF
    operand is valid)."""
    check_bad_input(bad_input_env, request, exc, match, call)
