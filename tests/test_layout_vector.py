"""Layout arithmetic and DistVector operations against numpy on gathered data."""

import numpy as np
import pytest
from mpi4py import MPI

from dmsolve import DistVector, Layout, block_range, block_ranges
from mpitest import (assert_allclose_collective, assert_collective, assert_equal_collective,
                     assert_raises_collective, same_on_all_ranks)


@pytest.mark.parametrize("n", [0, 1, 7, 13, 101])
@pytest.mark.parametrize("size", [1, 2, 3, 4, 7])
def test_block_range_partitions(n, size):
    ranges = block_ranges(n, size)
    assert ranges[0] == 0 and ranges[-1] == n
    for r in range(size):
        assert block_range(n, size, r) == (ranges[r], ranges[r + 1])
    counts = np.diff(ranges)
    assert counts.max() - counts.min() <= 1


def test_block_range_rejects_bad_arguments():
    with pytest.raises(ValueError):
        block_range(10, 2, 2)
    with pytest.raises(ValueError):
        block_ranges(-1, 2)


def test_layout_owner_with_empty_ranks(comm):
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
    assert_raises_collective(comm, ValueError, Layout.from_local_size,
                             -1 if comm.rank == comm.size - 1 else 3, comm)
    assert_raises_collective(comm, TypeError, Layout.from_local_size,
                             2.5 if comm.rank == 0 else 3, comm)


def test_layout_equality(comm):
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


@pytest.mark.parametrize("n", [0, 7, 13, 101])
def test_scatter_gather_round_trip_exact(comm, n):
    rng = np.random.default_rng(42)
    x = rng.standard_normal(n)
    lay = Layout.block(n, comm)
    v = DistVector.from_global(x, lay)
    assert_equal_collective(v.gather(), x)
    root = comm.size - 1
    g = v.gather(root=root)
    assert_collective(comm, (g is None) == (comm.rank != root))
    assert_equal_collective(g if comm.rank == root else x, x)
    w = DistVector.from_global(x, comm)
    assert_equal_collective(w.gather(), x)


def test_vector_arithmetic_matches_numpy(comm):
    rng = np.random.default_rng(1)
    n = 101
    a, b = rng.standard_normal(n), rng.standard_normal(n)
    lay = Layout.block(n, comm)
    x, y = DistVector.from_global(a, lay), DistVector.from_global(b, lay)
    assert_allclose_collective(x.dot(y), a @ b, rtol=1e-13)
    assert_allclose_collective(x.norm(), np.linalg.norm(a), rtol=1e-13)
    assert_allclose_collective(x.norm(1), np.abs(a).sum(), rtol=1e-13)
    assert_allclose_collective(x.norm(np.inf), np.abs(a).max())
    assert_allclose_collective(x.sum(), a.sum(), rtol=1e-13)
    z = x.copy().axpy(2.5, y)
    assert_allclose_collective(z.gather(), a + 2.5 * b)
    z = x.copy().aypx(-0.5, y)
    assert_allclose_collective(z.gather(), -0.5 * a + b)
    z = x.copy().axpby(3.0, y, 2.0)
    assert_allclose_collective(z.gather(), 3 * b + 2 * a)
    z = x.zeros_like().waxpy(2.0, x, y)
    assert_allclose_collective(z.gather(), 2 * a + b)
    z = x.copy().scale(-2.0)
    assert_allclose_collective(z.gather(), -2 * a)
    z = x.zeros_like().pointwise_mult(x, y)
    assert_allclose_collective(z.gather(), a * b)
    assert_allclose_collective((x + y - 2 * x).gather(), b - a)
    assert_allclose_collective((-x / 2.0).gather(), -a / 2)
    c = DistVector.from_global(a.astype(np.complex128) * 1j, lay)
    assert_allclose_collective(c.dot(c), (a * a).sum(), rtol=1e-13)
    assert_collective(comm, x.all_finite())


def test_vector_copy_is_deep(comm):
    lay = Layout.block(13, comm)
    x = DistVector.full(lay, 1.0)
    y = x.copy()
    y.fill(3.0)
    assert_equal_collective(x.gather(), np.ones(13))


def test_vector_layout_mismatch_raises_everywhere(comm):
    x = DistVector.zeros(Layout.block(13, comm))
    y = DistVector.zeros(Layout.block(14, comm))
    assert_raises_collective(comm, ValueError, x.axpy, 1.0, y, match="layout")
    assert_raises_collective(comm, ValueError, x.dot, y)
    assert_raises_collective(comm, TypeError, x.axpy, 1.0, np.zeros(13))


@pytest.mark.mpi(min_size=2)
def test_vector_from_other_communicator_raises_everywhere(comm):
    other = comm.Dup()
    try:
        x = DistVector.zeros(Layout.block(13, comm))
        sub = comm.Split(comm.rank % 2, comm.rank)
        y = DistVector.zeros(Layout(np.array(Layout.block(13, comm).ranges), other))
        # a congruent duplicate is accepted: it has the same group and order
        x.axpy(1.0, y)
        z = DistVector.zeros(Layout.block(13, sub))
        assert_raises_collective(comm, ValueError, x.axpy, 1.0, z)
        sub.Free()
    finally:
        other.Free()


def test_from_global_wrong_length_on_one_rank_raises_everywhere(comm):
    lay = Layout.block(10, comm)
    x = np.zeros(11 if comm.rank == comm.size - 1 else 10)
    assert_raises_collective(comm, ValueError, DistVector.from_global, x, lay)


def test_local_part_wrong_length_raises():
    lay = Layout.block(5, MPI.COMM_SELF)
    with pytest.raises(ValueError, match="expected"):
        DistVector(lay, np.zeros(4))
    with pytest.raises(TypeError):
        DistVector("not a layout")


def test_reductions_identical_on_every_rank(comm):
    rng = np.random.default_rng(3)
    x = DistVector.from_global(rng.standard_normal(1001), comm)
    assert same_on_all_ranks(comm, x.norm())
    assert same_on_all_ranks(comm, x.dot(x))


@pytest.mark.parametrize("dtype", [np.float32, np.complex128, np.int32, np.int64, np.bool_,
                                   ">f8"], ids=str)
def test_gather_keeps_every_dtype(comm, dtype):
    # the MPI datatype of each dtype comes from mpi4py's public dtlib
    x = (np.arange(13) % 3 == 0) if dtype is np.bool_ else \
        (np.arange(13) * (1 + 1j if dtype is np.complex128 else 1)).astype(dtype)
    v = DistVector.from_global(x, Layout.block(13, comm))
    g = v.gather()
    assert_equal_collective(g, x)
    assert_collective(comm, g.dtype == np.dtype(dtype), "gathered as %s" % g.dtype)
    root = v.gather(root=0)
    assert_equal_collective(root if comm.rank == 0 else x, x)
