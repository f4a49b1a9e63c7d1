"""Multigrid cycles: symmetric V and W cycles and their description, every
smoother and cycle converging, rank-independent smoothers giving a
rank-independent cycle, and the same bits on any number of threads."""

import pytest
from mpi4py import MPI

import dmsolve.gallery as gallery
import preconditioners
from amg_cases import amg_solve, serial_iterations
from dmsolve import threads
from mpitest import assert_allclose_collective, assert_collective
from threaded import Posts, same_bits, small_blocks

COMM = MPI.COMM_WORLD


def test_cycle_is_symmetric_and_describe():
    """The V and W cycles are symmetric, and describe() says what they are."""
    A = gallery.poisson2d(40, COMM)
    M = preconditioners.make("amg", A, max_coarse=20)
    d = M.describe()
    assert d["name"] == "amg" and len(d["levels"]) >= 3
    assert d["levels"][0]["rows"] == 1600 and d["levels"][0]["nnz"] == A.global_nnz()
    assert 1.0 < d["operator_complexity"] < 1.5 and d["setup_seconds"] > 0
    u, v = gallery.rhs(A, "random", seed=1), gallery.rhs(A, "random", seed=2)
    # symmetric V-cycle: <u, M v> == <M u, v>
    assert_allclose_collective(u.dot(M(v)), M(u).dot(v), rtol=1e-10)
    assert_collective(COMM, u.dot(M(u)) > 0, "positive definite")


@pytest.mark.parametrize("smoother", [("jacobi", {}), ("l1-jacobi", {}),
                                      ("chebyshev", {"degree": 3}),
                                      ("gauss-seidel", {"sweep": "symmetric"}),
                                      ("sor", {"omega": 1.2})],
                         ids=["jacobi", "l1-jacobi", "chebyshev", "hybrid-gs", "sor"])
@pytest.mark.parametrize("cycle", ["V", "W"])
def test_smoothers_and_cycles_converge(smoother, cycle):
    """Every smoother and cycle converges on Poisson."""
    A = gallery.poisson2d(64, COMM)
    _, info = amg_solve(A, presmoother=smoother, postsmoother=smoother, cycle=cycle)
    limit = 12 if smoother[0] in ("gauss-seidel", "sor") else 25
    assert_collective(COMM, info.converged and info.iterations <= limit,
                      "%s %s-cycle: %d iterations" % (smoother[0], cycle, info.iterations))


@pytest.mark.parametrize("smoother", [("l1-jacobi", {}), ("chebyshev", {"degree": 3})],
                         ids=["l1-jacobi", "chebyshev"])
def test_rank_independent_smoothers_give_rank_independent_cycle_on_one_level_blocks(smoother):
    """Smoothers that do not depend on the partition give iteration counts close to the serial
    ones."""
    # with a 1D problem every rank's aggregates are intervals in both runs, and
    # these smoothers do not depend on the partition: counts must agree closely
    A = gallery.poisson2d(48, COMM)
    _, info = amg_solve(A, presmoother=smoother, postsmoother=smoother)
    serial = serial_iterations("poisson2d-48", presmoother=smoother, postsmoother=smoother)
    assert_collective(COMM, abs(info.iterations - serial) <= 2,
                      "%d ranks %d vs serial %d" % (COMM.size, info.iterations, serial))


@pytest.mark.parametrize("precision", ["double", "single"])
def test_threaded_cycle_is_the_bits_of_one_thread(monkeypatch, precision):
    """A V-cycle on 2, 3 and 4 threads (smoothers, residuals and products by
    blocks of rows, the restriction through the prolongator's transposed
    copy) gives the bits of one thread."""
    small_blocks(monkeypatch, rows=64)
    A = gallery.poisson3d(18, COMM)
    M = preconditioners.make("amg", A, max_coarse=50, precision=precision)
    r = gallery.rhs(A, "random")
    with threads.using(1):
        ref = M(r).local.copy()
    posts = Posts(monkeypatch)
    for k in (2, 3, 4):
        with threads.using(k):
            assert_collective(COMM, same_bits(M(r).local, ref), "threads %d" % k)
    assert_collective(COMM, posts.count > 0)
