"""The Chebyshev polynomial preconditioner: its options checked at the door,
with the same exception on every rank, and the same bits on any number of
threads."""

import numpy as np
import pytest
from mpi4py import MPI

import dmsolve.gallery as gallery
import preconditioners
from bad_inputs import check_bad_input, make_pc
from dmsolve import threads
from mpitest import assert_collective
from threaded import Posts, same_bits, small_blocks


# -- bad input: the same exception on every rank -------------------------------------------

BAD_INPUTS = [
    ("cheby-degree-zero", ValueError, "degree",
     lambda e: preconditioners.make("cheby", e.A, degree=0)),
    ("cheby-bounds-reversed", ValueError, "lower < upper",
     lambda e: preconditioners.make("cheby", e.A, lower=2.0, upper=1.0)),
    ("cheby-ratio-below-one", ValueError, "ratio", make_pc("cheby", ratio=0.5)),
    ("cheby-steps-zero", ValueError, "steps", make_pc("cheby", steps=0)),
    ("cheby-safety-below-one", ValueError, "safety", make_pc("cheby", safety=0.5)),
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
def test_threaded_application_is_the_bits_of_one_thread(monkeypatch, precision):
    """Chebyshev's vector updates and matvecs by blocks of rows on 2 and 4
    threads give the bits of one thread."""
    comm = MPI.COMM_WORLD
    small_blocks(monkeypatch, rows=64)
    A = gallery.poisson3d(16, comm)
    M = preconditioners.make("cheby", A, degree=3, precision=precision)
    r = gallery.rhs(A, "random")
    with threads.using(1):
        ref = M(r).local.copy()
    posts = Posts(monkeypatch)
    for k in (2, 4):
        with threads.using(k):
            assert_collective(comm, same_bits(M(r).local, ref), "threads %d" % k)
    assert_collective(comm, posts.count > 0 or A.row_layout.local_size < 128)
    assert_collective(comm, bool(np.all(np.isfinite(ref))))
