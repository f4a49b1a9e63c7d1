"""Layout arithmetic (``block_range``, Layout) against plain numpy, and layouts
whose ranges differ between ranks refused at every collective."""

import numpy as np
import pytest

import dmsolve
from bad_inputs import check_bad_input
from dmsolve import DistCSR, DistVector, Layout, block_range, block_ranges
from dmsolve.bsp import NeighborExchange
from mpitest import Checks, assert_collective, assert_equal_collective, assert_raises_collective
from operands import real_matrix


@pytest.mark.parametrize("n", [0, 1, 7, 13, 101])
@pytest.mark.parametrize("size", [1, 2, 3, 4, 7])
def test_block_range_partitions(n, size):
    """block_range cuts n into nearly equal contiguous blocks that cover it."""
    ranges = block_ranges(n, size)
    assert ranges[0] == 0 and ranges[-1] == n
    for r in range(size):
        assert block_range(n, size, r) == (ranges[r], ranges[r + 1])
    counts = np.diff(ranges)
    assert counts.max() - counts.min() <= 1


def test_block_range_rejects_bad_arguments():
    """block_range refuses negative sizes and ranks out of range."""
    with pytest.raises(ValueError):
        block_range(10, 2, 2)
    with pytest.raises(ValueError):
        block_ranges(-1, 2)


def test_layout_owner_with_empty_ranks(comm):
    """Layout.owner finds each index's rank when some ranks own nothing."""
    size = comm.size
    # rank 0 owns nothing, the last rank owns everything else but one
    counts = np.zeros(size, dtype=int)
    counts[-1] = 9
    if size > 2:
        counts[1] = 1
    ranges = np.concatenate(([0], np.cumsum(counts)))
    lay = Layout(ranges, comm)
    idx = np.arange(lay.global_size)
    owners = lay.owner(idx)
    expected = np.repeat(np.arange(size), counts)
    assert_equal_collective(owners, expected)
    assert_collective(comm, lay.local_size == counts[comm.rank])
    with pytest.raises(IndexError):
        lay.owner(lay.global_size)


def test_layout_from_local_size_and_weights(comm):
    """Layout.from_local_size and weighted layouts give the expected ranges."""
    lay = Layout.from_local_size(comm.rank + 1, comm)
    assert_collective(comm, lay.global_size == comm.size * (comm.size + 1) // 2)
    assert_collective(comm, lay.local_size == comm.rank + 1)
    w = np.r_[np.full(10, 10.0), np.ones(90)]
    lw = Layout.from_weights(w, comm)
    assert_collective(comm, lw.global_size == 100)
    sums = [w[lw.ranges[r]:lw.ranges[r + 1]].sum() for r in range(comm.size)]
    # balanced within one heaviest item of the ideal share
    assert_collective(comm, max(sums) <= w.sum() / comm.size + w.max())


def test_layout_from_local_size_bad_value_raises_everywhere(comm):
    """A bad local size on one rank raises on every rank."""
    assert_raises_collective(comm, ValueError, Layout.from_local_size,
                             -1 if comm.rank == comm.size - 1 else 3, comm)
    assert_raises_collective(comm, TypeError, Layout.from_local_size,
                             2.5 if comm.rank == 0 else 3, comm)


def test_layout_equality(comm):
    """Layouts are equal exactly when their ranges and communicators are."""
    a = Layout.block(13, comm)
    b = Layout.block(13, comm)
    c = Layout.block(14, comm)
    assert a == b and a != c
    other = comm.Dup()
    try:
        assert Layout.block(13, other) == a  # congruent communicator
        split = comm.Split(0, comm.size - 1 - comm.rank)
        if comm.size > 1:
            assert Layout.block(13, split) != a
        split.Free()
    finally:
        other.Free()


def skewed_layout(n, comm):
    """Block ranges on every rank but the last, which moves one index from
    rank 0 to rank 1: the same global size, different ownership ranges."""
    ranges = Layout.block(n, comm).ranges.copy()
    if comm.rank == comm.size - 1:
        ranges[1] -= 1
    return Layout(ranges, comm)


# -- layouts with different ranges on different ranks --------------------------------

def test_layout_verify_and_agreed_flag(comm):
    """verify() checks that every rank holds the same ranges, and marks the layout as agreed."""
    with Checks(comm) as checks:
        lay = Layout.block(10, comm)
        checks.add(not lay.agreed, "a layout from given ranges is not agreed yet")
        checks.add(lay.verify() is lay and lay.agreed, "verify() marks it agreed")
        checks.add(Layout.from_local_size(comm.rank + 1, comm).agreed,
                   "from_local_size builds agreed ranges")
        A = DistCSR.from_global(real_matrix(9, 9), comm)
        checks.add(A.row_layout.agreed and A.col_layout.agreed, "a matrix's layouts")
        v = DistVector.from_global(np.ones(9), comm)
        checks.add(v.layout.agreed, "from_global(x, comm)")


@pytest.mark.mpi(min_size=2)
def test_layout_with_different_ranges_is_refused_at_every_collective(comm):
    """A layout whose ranges differ between ranks is refused by every collective that uses it."""
    n = 4 * comm.size + 3
    M = real_matrix(n, n, seed=8)
    msg = "different ownership ranges"
    assert_raises_collective(comm, ValueError, skewed_layout(n, comm).verify, match=msg)
    assert_raises_collective(comm, ValueError, DistCSR.from_global, M, comm,
                             layout=skewed_layout(n, comm), match=msg)
    bad = skewed_layout(n, comm)
    s, e = bad.owned_range
    assert_raises_collective(comm, ValueError, DistCSR.from_local_rows, M[s:e], bad,
                             match=msg)
    C = M[s:e].tocoo()
    assert_raises_collective(comm, ValueError, DistCSR.from_coo, C.row + s, C.col, C.data,
                             M.shape, comm, layout=skewed_layout(n, comm), match=msg)
    good = Layout.block(n, comm)
    B = DistCSR.from_global(M, comm)
    assert_raises_collective(comm, ValueError, DistCSR, B.diag, B.offd, B.ghosts,
                             skewed_layout(n, comm), good, match=msg)
    ghosts = np.array([g for g in (0, n - 1) if not s <= g < e], dtype=np.int64)
    assert_raises_collective(comm, ValueError, NeighborExchange.from_ghosts,
                             skewed_layout(n, comm), ghosts, match=msg)
    assert_raises_collective(comm, ValueError, DistVector.from_global, np.ones(n),
                             skewed_layout(n, comm), match=msg)
    lay = skewed_layout(n, comm)
    v = DistVector(lay, np.ones(lay.local_size))
    assert_raises_collective(comm, ValueError, v.gather, match=msg)
    # the door of the Krylov methods: an operator of functions on a skewed layout
    lay = skewed_layout(n, comm)
    op = dmsolve.DistLinearOperator(lay, lay, lambda x: x.copy())
    b = DistVector(lay, np.ones(lay.local_size))
    assert_raises_collective(comm, ValueError, dmsolve.cg, op, b, match=msg)


# -- bad input: the same exception on every rank -------------------------------------------

BAD_INPUTS = [
    ("layout-ranges-wrong-count", ValueError, "comm.size \\+ 1",
     lambda e: Layout([0, 5] if e.size > 1 else [0, 5, 6], e.comm)),
    ("layout-negative-local-size-on-rank-0", ValueError, "non-negative",
     lambda e: Layout.from_local_size(-1 if e.rank == 0 else 3, e.comm)),
]


@pytest.mark.parametrize("exc, match, call", [c[1:] for c in BAD_INPUTS],
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_the_same_exception_on_every_rank(bad_input_env, request, exc, match,
                                                           call):
    """Each case of BAD_INPUTS raises the same exception type, with a message
    that matches, on every rank (or works, at one rank, where a COMM_SELF
    operand is valid)."""
    check_bad_input(bad_input_env, request, exc, match, call)
