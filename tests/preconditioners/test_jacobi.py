"""Point Jacobi against its serial formula, on any number of threads."""

import pytest
from mpi4py import MPI

import dmsolve.gallery as gallery
import preconditioners
from bad_inputs import check_bad_input, make_pc, zero_diagonal_matrix
from dmsolve import DistVector, Layout, solve
from dmsolve import threads
from mpitest import assert_allclose_collective, assert_collective
from threaded import Posts, same_bits, small_blocks

COMM = MPI.COMM_WORLD


def test_jacobi_matches_serial():
    """Jacobi applies omega r / diag(A), as the serial formula does."""
    A = gallery.poisson3d(7, COMM)
    M = preconditioners.make("jacobi", A, omega=0.5)
    r = gallery.rhs(A, "random")
    S = A.to_scipy()
    assert_allclose_collective(M.apply(r).gather(), 0.5 * r.gather() / S.diagonal(), rtol=1e-15)


# -- bad input: the same exception on every rank -------------------------------------------

BAD_INPUTS = [
    ("jacobi-zero-diagonal-in-last-row", ValueError, "diagonal",
     lambda e: preconditioners.make("jacobi", zero_diagonal_matrix(e, 8))),
    ("solve-pc-jacobi-zero-diagonal-in-first-row", ValueError, "diagonal",
     lambda e: solve(zero_diagonal_matrix(e, 0), DistVector.full(
         Layout.block(9, e.comm), 1.0), pc="jacobi")),
    ("jacobi-omega-zero", ValueError, "omega", make_pc("jacobi", omega=0.0)),
    ("jacobi-omega-nan", ValueError, "omega", make_pc("jacobi", omega=float("nan"))),
    # reproducible mode runs in double precision, for every preconditioner alike
    ("jacobi-single-reproducible", ValueError, "reproducible=True runs in double precision",
     make_pc("jacobi", precision="single", reproducible=True)),
    ("jacobi-class-single-reproducible", ValueError, "precision='single' is not reproducible",
     lambda e: preconditioners.Jacobi(e.A, precision="single", reproducible=True)),
    ("solve-pc-jacobi-single-reproducible", ValueError, "double precision",
     lambda e: solve(e.A, e.b, pc=("jacobi", {"precision": "single"}), reproducible=True)),
]


@pytest.mark.parametrize("exc, match, call", [c[1:] for c in BAD_INPUTS],
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_the_same_exception_on_every_rank(bad_input_env, request, exc, match,
                                                           call):
    """Each case of BAD_INPUTS raises the same exception type, with a message
    that matches, on every rank (or works, at one rank, where a COMM_SELF
    operand is valid)."""
    check_bad_input(bad_input_env, request, exc, match, call)


@pytest.mark.parametrize("precision", ["double", "single"])
def test_threaded_jacobi_is_the_bits_of_one_thread(monkeypatch, precision):
    """The scaling by blocks of entries on 2 and 4 threads gives the bits of one."""
    small_blocks(monkeypatch, rows=64)
    A = gallery.poisson3d(14, COMM)
    M = preconditioners.make("jacobi", A, omega=0.7, precision=precision)
    r = gallery.rhs(A, "random")
    with threads.using(1):
        ref = M(r).local.copy()
    posts = Posts(monkeypatch)
    for k in (2, 4):
        with threads.using(k):
            assert_collective(COMM, same_bits(M(r).local, ref), "threads %d" % k)
    assert_collective(COMM, posts.count > 0 or A.row_layout.local_size < 128)
    S = A.to_scipy()
    assert_allclose_collective(M(r).gather(), 0.7 * r.gather() / S.diagonal(),
                               rtol=1e-6 if precision == "single" else 1e-15)
