"""Recursive coordinate bisection: balanced and rank-count independent on a
grid, ties and empty ranks, and the registered partitioner is the direct
call."""

import numpy as np
import pytest
from mpi4py import MPI

from bad_inputs import check_bad_input
from dmsolve import Layout, partition as part
from mpitest import assert_collective, assert_equal_collective, assert_raises_collective
from operands import scrambled_poisson2d

COMM = MPI.COMM_WORLD


def test_rcb_grid_is_balanced_and_rank_count_independent():
    """RCB of a grid's points is balanced and the same at any rank count."""
    n = 13
    layout = Layout.block(n * n, COMM)
    idx = np.arange(layout.start, layout.stop)
    coords = np.column_stack((idx % n, idx // n)).astype(float)
    for nparts in (1, 3, 4, 5):
        p = part.rcb(coords, COMM, nparts=nparts)
        owner = p.parts()
        serial = part.rcb(np.column_stack((np.arange(n * n) % n, np.arange(n * n) // n))
                          .astype(float), MPI.COMM_SELF, nparts=nparts).parts()
        assert_equal_collective(owner, serial)
        sizes = np.bincount(owner, minlength=nparts)
        assert_collective(COMM, sizes.max() - sizes.min() <= 1, "sizes %s" % sizes)
    # with 4 parts of a square the cuts are the two median lines
    p4 = part.rcb(coords, COMM, nparts=4).parts().reshape(n, n)
    assert_collective(COMM, len(np.unique(p4[:6, :6])) == 1 and
                      len(np.unique(p4[7:, 7:])) == 1, str(p4))


def test_rcb_ties_and_empty_ranks():
    """RCB breaks ties by global index and handles ranks with no points."""
    # every point at the same place: ties broken by global index
    k = 5 if COMM.rank == 0 else 0
    p = part.rcb(np.zeros((k, 3)), COMM, nparts=2)
    assert_equal_collective(p.parts(), [0, 0, 1, 1, 1])


def test_rcb_registered_is_the_direct_call():
    """The registered rcb partitioner gives the direct call's parts."""
    A, _ = scrambled_poisson2d(7)
    coords = np.random.default_rng(5 + COMM.rank).random((A.row_layout.local_size, 3))
    for nparts in (None, 2, 5):
        direct = part.rcb(coords, COMM, nparts=nparts)
        named = part.partition(A, "rcb", coords=coords, nparts=nparts)
        assert_collective(COMM, named.old_layout == A.row_layout)
        assert_collective(COMM, named.nparts == direct.nparts)
        assert_equal_collective(named.local_parts, direct.local_parts)
        assert_equal_collective(named.local_new_index, direct.local_new_index)
    # one coordinate row per owned row of A, checked on every rank
    last = COMM.rank == COMM.size - 1
    short = coords[:-1] if last else coords            # every rank owns rows of A here
    assert_raises_collective(COMM, ValueError, part.partition, A, "rcb", coords=short,
                             match="one row per owned row")
    assert_raises_collective(COMM, TypeError, part.partition, A, "rcb")


# -- bad input: the same exception on every rank -------------------------------------------

BAD_INPUTS = [
    ("rcb-nan-coordinates-on-rank-0", ValueError, "finite",
     lambda e: part.rcb(np.full((e.A.row_layout.local_size, 2),
                                     np.nan if e.rank == 0 else 1.0), e.comm)),
]


@pytest.mark.parametrize("exc, match, call", [c[1:] for c in BAD_INPUTS],
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_the_same_exception_on_every_rank(bad_input_env, request, exc, match,
                                                           call):
    """Each case of BAD_INPUTS raises the same exception type, with a message
    that matches, on every rank (or works, at one rank, where a COMM_SELF
    operand is valid)."""
    check_bad_input(bad_input_env, request, exc, match, call)
