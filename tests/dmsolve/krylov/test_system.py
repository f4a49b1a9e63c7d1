"""The door of every Krylov method (make_system / check_system): shapes,
layouts, communicators, dtypes, tolerances and preconditioners checked once,
with the same exception on every rank."""

import re

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

import dmsolve
import preconditioners
from bad_inputs import check_bad_input, on_last_rank, other_size, self_vector
from dmsolve import DistCSR, DistVector, KSPMonitor, Layout, gallery, krylov, solve
from dmsolve.krylov import CheckedSystem, check_system
from krylov_cases import METHODS, complex_rhs, distribute, empty_last_layout, hermitian, laplacian
from mpitest import assert_allclose_collective, assert_collective, assert_raises_collective

COMM = MPI.COMM_WORLD


# -- checks at the door -------------------------------------------------------------

@pytest.mark.parametrize("method", METHODS)
def test_door_checks(method):
    """Each bad argument is refused at the door of every method, with the same exception on
    every rank."""
    f = getattr(dmsolve, method)
    A, b = distribute("poisson2d")
    n = A.shape[0]
    other = DistVector(Layout.block(n + 1, COMM))
    assert_raises_collective(COMM, ValueError, f, A, other, match="b has global size")
    assert_raises_collective(COMM, ValueError, f, A, b, other, match="x0 has global size")
    assert_raises_collective(COMM, TypeError, f, A, b.local)
    assert_raises_collective(COMM, TypeError, f, b, b)
    assert_raises_collective(COMM, ValueError, f, A, b, rtol=-1.0)
    assert_raises_collective(COMM, TypeError, f, A, b, rtol="1e-5")
    assert_raises_collective(COMM, TypeError, f, A, b, maxiter=2.5)
    assert_raises_collective(COMM, TypeError, f, A, b, M=42)
    # a NaN on one rank only is seen by every rank
    bad = b.copy()
    if COMM.Get_rank() == COMM.Get_size() - 1 and bad.local.size:
        bad.local[0] = np.nan
    assert_raises_collective(COMM, ValueError, f, A, bad, match="NaN")
    # a layout with the same size but other ownership ranges
    if COMM.Get_size() > 1:
        lay = empty_last_layout(n, COMM)
        assert_raises_collective(COMM, ValueError, f, A, DistVector(lay), match="ranges")


def test_check_system_is_the_door_of_every_method():
    """check_system completes the options (maxiter, monitor, null space), and each of its
    refusals is the exception and message the method itself raises."""
    A, b = distribute("poisson2d")
    n = A.shape[0]
    s = check_system("cg", A, b, rtol=0.5, atol=0, maxiter=None, divtol=None, monitor=True,
                     nullspace=b)
    assert_collective(COMM, isinstance(s, CheckedSystem) and s.A is A and s.maxiter == 10 * n
                      and s.rtol == 0.5 and isinstance(s.atol, float) and s.divtol is None
                      and isinstance(s.monitor, KSPMonitor) and s.nullspace == [b], str(s))
    s = check_system("cg", A, b, rtol=1e-5, atol=0.0, maxiter=7, divtol=1e4, monitor=False)
    assert_collective(COMM, s.monitor is None and s.nullspace is None and s.maxiter == 7)
    # each refusal is the same exception and message as the method's own (which
    # agrees it across ranks, and then says where it was raised)
    bad = [{"rtol": float("nan")}, {"atol": -1.0}, {"divtol": "big"}, {"maxiter": -3},
           {"callback": 3}, {"monitor": "loud"}, {"nullspace": []}]
    base = {"rtol": 1e-5, "atol": 0.0, "maxiter": None, "divtol": 1e4}
    for kw in bad:
        try:
            check_system("cg", A, b, **{**base, **kw})
        except (TypeError, ValueError) as e:
            door = e
        else:
            door = None
        mine = assert_raises_collective(COMM, type(door), dmsolve.cg, A, b, **kw)
        text = re.sub(r" \[raised on ranks? [\d,]+\]$", "", str(mine))
        assert_collective(COMM, text == str(door), "%s: %r vs %r" % (kw, mine, door))


@pytest.mark.parametrize("name", ["amg", "cheby", "gemslr"])
def test_real_only_preconditioners_refused_for_a_complex_solve(comm, name):
    """Preconditioners built for real systems are refused in a complex solve, at the door, on
    every rank."""
    # built on a real A, applied in a complex solve (complex b): refused at
    # the door, before any iteration, on every rank
    Ar = DistCSR.from_global(sp.csr_matrix(laplacian(8) + 0.1 * sp.eye(64)), comm)
    M = preconditioners.make(name, Ar)
    b = DistVector.from_global(complex_rhs(64), Ar.row_layout)
    method = "gmres" if name == "gemslr" else "cg"
    assert_raises_collective(comm, TypeError, getattr(krylov, method), Ar, b, M=M,
                             match="real systems only")
    assert_raises_collective(comm, TypeError, dmsolve.solve, Ar, b, "gmres", name,
                             match="real systems only")
    # built on a complex A: refused by the preconditioner itself
    Ac = DistCSR.from_global(hermitian(8), comm)
    assert_raises_collective(comm, TypeError, dmsolve.solve, Ac, b, "gmres", name)


def test_other_dtypes_still_refused(comm):
    """Integer, string and other non-float dtypes are refused at the door."""
    A = DistCSR.from_global(hermitian(6), comm)
    b = DistVector.from_global(complex_rhs(36), A.row_layout)
    bad = DistVector(b.layout, np.array(["x"] * b.layout.local_size))
    assert_raises_collective(comm, TypeError, krylov.gmres, A, bad,
                             match="real and complex vectors")


# -- bad input: the same exception on every rank -------------------------------------------

BAD_INPUTS = [
    ("solve-b-wrong-global-size", ValueError, "global size", lambda e: solve(e.A, other_size(e))),
    ("solve-x0-wrong-global-size", ValueError, "x0", lambda e: solve(e.A, e.b, x0=other_size(e))),
    ("solve-b-not-a-distvector", TypeError, "DistVector", lambda e: solve(e.A, np.ones(e.n))),
    ("solve-rectangular-matrix", ValueError, "square",
     lambda e: solve(DistCSR.from_global(sp.random(e.n, e.n + 2, 0.3, format="csr",
                                                   random_state=0), e.comm), e.b)),
    ("solve-complex-rhs-with-amg", TypeError, "real systems only",
     lambda e: solve(e.A, DistVector(e.b.layout, e.b.local.astype(complex)), pc="amg")),
    ("solve-string-rhs", TypeError, "real and complex",
     lambda e: solve(e.A, DistVector(e.b.layout, np.array(["b"] * e.b.layout.local_size)))),
    ("solve-maxiter-float", TypeError, "maxiter", lambda e: solve(e.A, e.b, maxiter=3.5)),
    ("solve-rhs-nan-on-one-rank", ValueError, "NaN",
     lambda e: solve(e.A, DistVector(e.b.layout, on_last_rank(e, e.b.local, np.nan)))),
    ("solve-x0-inf-on-one-rank", ValueError, "x0",
     lambda e: solve(e.A, e.b, x0=DistVector(e.b.layout, on_last_rank(e, e.b.local, np.inf)))),
    ("solve-rtol-nan", ValueError, "rtol", lambda e: solve(e.A, e.b, rtol=float("nan"))),
    ("solve-rhs-on-comm-self", ValueError, "communicator", lambda e: solve(e.A, self_vector(e))),
    ("solve-x0-on-comm-self", ValueError, "communicator",
     lambda e: solve(e.A, e.b, x0=self_vector(e))),
    ("solve-negative-rtol", ValueError, "rtol", lambda e: solve(e.A, e.b, rtol=-1.0)),
    ("solve-negative-divtol", ValueError, "divtol", lambda e: solve(e.A, e.b, divtol=-1.0)),
    ("solve-bad-norm-type", ValueError, "norm_type", lambda e: solve(e.A, e.b, norm_type="max")),
    ("solve-callback-not-callable", TypeError, "callback", lambda e: solve(e.A, e.b, callback=3)),
    ("solve-monitor-not-callable", TypeError, "monitor", lambda e: solve(e.A, e.b, monitor="loud")),
]


@pytest.mark.parametrize("exc, match, call", [c[1:] for c in BAD_INPUTS],
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_the_same_exception_on_every_rank(bad_input_env, request, exc, match,
                                                           call):
    """Each case of BAD_INPUTS raises the same exception type, with a message
    that matches, on every rank (or works, at one rank, where a COMM_SELF
    operand is valid)."""
    check_bad_input(bad_input_env, request, exc, match, call)


def test_comm_self_operands_work_at_one_rank_only_when_congruent(bad_input_env):
    """The counterpart of the wrong-communicator cases: on a communicator
    congruent with the matrix's the same solve succeeds and gives scipy's
    answer."""
    env = bad_input_env
    if env.size > 1:
        sub = env.comm.Split(0, env.rank)       # congruent with COMM_WORLD
        try:
            A = gallery.poisson2d(6, sub)
            b = gallery.rhs(gallery.poisson2d(6, env.comm), "random", seed=1)
            x = solve(A, b, rtol=1e-12)[0].gather()
        finally:
            sub.Free()
    else:
        x = solve(env.A, DistVector(Layout.block(env.n, MPI.COMM_SELF), env.b.local),
                  rtol=1e-12)[0].gather()
    ref = np.linalg.solve(env.A.to_scipy().toarray(), env.b.gather())
    assert_allclose_collective(x, ref, env.comm, rtol=1e-9)
