"""The door of every Krylov method (make_system / check_system): shapes,
layouts, communicators, dtypes, tolerances and preconditioners checked once,
with the same exception on every rank; scipy's inputs (global matrices,
numpy vectors, scipy preconditioners, x0="Mb", infinite tolerances) taken as
scipy takes them; a zero x0 costing no product."""

import re

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from mpi4py import MPI

import dmsolve
import preconditioners
from bad_inputs import check_bad_input, on_last_rank, other_size, self_vector
from dmsolve import DistCSR, DistVector, KSPMonitor, Layout, gallery, krylov, solve
from dmsolve.krylov import CheckedSystem, check_system
from krylov_cases import METHODS, complex_rhs, distribute, empty_last_layout, hermitian, laplacian
from mpitest import (Checks, assert_allclose_collective, assert_collective,
                     assert_raises_collective, same_on_all_ranks)

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


# -- scipy's inputs at the door -------------------------------------------------------

def _scipy_system(n=13):
    """A symmetric positive definite, diagonally varying tridiagonal system, the same on
    every rank (13 rows: no rank count divides them)."""
    d = 2.0 + np.arange(n) / n
    A = sp.diags([-np.ones(n - 1), d, -np.ones(n - 1)], [-1, 0, 1], format="csr")
    b = np.cos(np.arange(n) + 0.5)
    return A, b, spla.spsolve(A.tocsc(), b)


def _scipy_forms(A):
    return {"csr": A, "dense": A.toarray(), "linear-operator": spla.aslinearoperator(A)}


@pytest.mark.parametrize("form", ["csr", "dense", "linear-operator"])
@pytest.mark.parametrize("method", METHODS)
def test_methods_take_scipy_inputs(method, form):
    """Every method takes a global scipy matrix, array or LinearOperator with numpy
    vectors, and returns scipy's solution as a numpy array on every rank; x0 and b are
    left unchanged."""
    A, b, ref = _scipy_system()
    x0 = np.full(b.shape, 0.25)
    b_before, x0_before = b.copy(), x0.copy()
    x, info = getattr(dmsolve, method)(_scipy_forms(A)[form], b, x0, rtol=1e-10)
    with Checks(COMM) as checks:
        checks.add(isinstance(x, np.ndarray) and x.shape == b.shape and x.dtype == np.float64,
                   "x is a float64 numpy array shaped like b", type(x).__name__)
        checks.add(info.converged, "converged", info.reason)
        checks.add(np.allclose(x, ref, rtol=1e-8, atol=0), "spsolve's x",
                   np.abs(x - ref).max())
        checks.add(np.array_equal(b, b_before) and np.array_equal(x0, x0_before),
                   "b and x0 unchanged")
        checks.add(same_on_all_ranks(COMM, x.tobytes()), "the same x on every rank")


@pytest.mark.parametrize("form", ["sparse", "dense", "linear-operator", "callable"])
@pytest.mark.parametrize("method", METHODS)
def test_scipy_preconditioners_with_global_inputs(method, form):
    """A scipy LinearOperator, sparse matrix, array or plain callable on numpy vectors as M
    gives the iterations of the same Jacobi preconditioner given as a DistCSR, and
    scipy's solution."""
    A, b, ref = _scipy_system()
    D = sp.diags(1.0 / A.diagonal(), format="csr")
    M = {"sparse": D, "dense": D.toarray(), "linear-operator": spla.aslinearoperator(D),
         "callable": lambda r: D @ r}[form]
    f = getattr(dmsolve, method)
    x, info = f(A, b, rtol=1e-10, M=M)
    Ad = DistCSR.from_global(A, COMM)
    _, expected = f(Ad, DistVector.from_global(b, Ad.row_layout), rtol=1e-10,
                    M=DistCSR.from_global(D, COMM))
    with Checks(COMM) as checks:
        checks.add(info.converged and info.iterations == expected.iterations,
                   "the iterations of the distributed Jacobi preconditioner",
                   (info.iterations, expected.iterations))
        checks.add(np.allclose(x, ref, rtol=1e-8, atol=0), "spsolve's x")


@pytest.mark.parametrize("form", ["sparse", "linear-operator"])
def test_scipy_preconditioner_with_a_distributed_matrix(form):
    """A scipy matrix or LinearOperator as M with a DistCSR A (on a layout that is not the
    block one) acts on A's rows: x is a DistVector, the iterations those of the same M
    as a DistCSR."""
    A, b, ref = _scipy_system()
    D = sp.diags(1.0 / A.diagonal(), format="csr")
    lay = empty_last_layout(A.shape[0], COMM) if COMM.size > 1 else None
    Ad = DistCSR.from_global(A, COMM, layout=lay, col_layout=lay)
    bd = DistVector.from_global(b, Ad.row_layout)
    M = D if form == "sparse" else spla.aslinearoperator(D)
    x, info = dmsolve.cg(Ad, bd, rtol=1e-10, M=M)
    _, expected = dmsolve.cg(Ad, bd, rtol=1e-10,
                             M=DistCSR.from_global(D, COMM, layout=lay, col_layout=lay))
    assert_collective(COMM, isinstance(x, DistVector) and x.layout == Ad.row_layout)
    assert_collective(COMM, info.converged and info.iterations == expected.iterations,
                      "%s against %s" % (info, expected))
    assert_allclose_collective(x.gather(), ref, COMM, rtol=1e-8)


def test_numpy_callback_and_x0_mb():
    """With numpy vectors the callback receives the whole iterate as a numpy array on every
    rank; x0='Mb' starts from M b, as scipy's (one iteration fewer here than from zero)."""
    A, b, ref = _scipy_system()
    seen = []
    x, info = dmsolve.cg(A, b, rtol=1e-10, callback=lambda xk: seen.append(xk.copy()))
    with Checks(COMM) as checks:
        checks.add(len(seen) == info.iterations and all(isinstance(v, np.ndarray)
                                                        and v.shape == b.shape for v in seen),
                   "one numpy iterate per iteration")
        checks.add(np.array_equal(seen[-1], x), "the last iterate is x")
    D = sp.diags(1.0 / A.diagonal(), format="csr")
    first = []
    x, info = dmsolve.gmres(A, b, x0="Mb", M=D, rtol=1e-10, maxiter=1,
                            callback=lambda xk: first.append(xk.copy()), side="right")
    # one right-preconditioned GMRES step from x0 = M b minimises over x0 + span{M r0}
    x0 = D @ b
    r0 = b - A @ x0
    z = D @ r0
    step = np.dot(A @ z, r0) / np.dot(A @ z, A @ z)
    assert_allclose_collective(first[0], x0 + step * z, COMM, rtol=1e-10)
    assert_raises_collective(COMM, ValueError, dmsolve.cg, A, b, x0="M b", match="Mb")


@pytest.mark.mpi(min_size=2)
def test_ranks_passing_different_kinds_of_m_are_refused_everywhere():
    """A scipy M on some ranks and a callable on others is refused on every rank."""
    A, b, _ = _scipy_system()
    D = sp.diags(1.0 / A.diagonal(), format="csr")
    M = D if COMM.rank == 0 else (lambda r: D @ r)
    assert_raises_collective(COMM, ValueError, dmsolve.cg, A, b, M=M, match="different kinds")


# -- scipy's tolerances and a zero x0 ---------------------------------------------------

@pytest.mark.parametrize("method", METHODS)
def test_infinite_tolerance_is_met_at_once(method):
    """rtol=inf or atol=inf: the stopping test is met at once, as scipy's: x0 comes back
    converged after 0 iterations, with its true residual."""
    A, b = distribute("poisson2d")
    x0 = b.copy()
    x0.local *= 0.5
    f = getattr(dmsolve, method)
    for kw, reason in ((dict(atol=np.inf), "ATOL"), (dict(rtol=np.inf), "RTOL")):
        x, info = f(A, b, x0, **kw)
        assert_collective(COMM, info.converged and info.iterations == 0
                          and info.reason.name == reason, "%s %s" % (kw, info))
        assert_allclose_collective(x.gather(), x0.gather(), COMM, rtol=0)
        r = b.gather() - A.to_scipy() @ x0.gather()
        assert_allclose_collective(info.true_residual_norm, np.linalg.norm(r), COMM,
                                   rtol=1e-12)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("atol", [None, "legacy"])
def test_atol_none_or_legacy_is_a_value_error(method, atol):
    """atol=None and atol='legacy' raise ValueError on every rank, as scipy's solvers do."""
    A, b = distribute("poisson2d")
    assert_raises_collective(COMM, ValueError, getattr(dmsolve, method), A, b, atol=atol,
                             match="atol must be a non-negative real number")


class _Counted(dmsolve.DistLinearOperator):
    """A DistCSR that counts its products."""

    def __init__(self, A):
        super().__init__(A.row_layout, A.col_layout, self._count)
        self.A, self.products = A, 0

    def _count(self, x, out=None):
        self.products += 1
        return self.A.matvec(x, out=out)


@pytest.mark.parametrize("method", METHODS)
def test_zero_x0_is_no_x0(method):
    """An x0 of zeros costs no product for the first residual, as scipy's: the products,
    iterations, reductions and norms of the solve without x0; an x0 with one nonzero
    entry on one rank is used."""
    A, b = distribute("poisson2d")
    zeros = DistVector(b.layout, np.zeros_like(b.local))
    tiny = zeros.copy()
    if COMM.rank == COMM.size - 1 and tiny.local.size:
        tiny.local[-1] = 1e-300         # its square would underflow to 0
    runs = []
    for x0 in (None, zeros, tiny):
        op = _Counted(A)
        _, info = getattr(dmsolve, method)(op, b, x0, rtol=1e-8)
        runs.append((op.products, info.iterations, info.reductions,
                     list(info.residual_norms)))
    assert_collective(COMM, runs[0] == runs[1], "%s against %s" % (runs[0][:3], runs[1][:3]))
    assert_collective(COMM, runs[2][0] == runs[0][0] + 1, "a nonzero x0: %s" % (runs[2][:3],))
