"""The Hilbert partitioner: keys that walk the grid cell by cell, scale
isotropically and clip, and the same order as a serial sort of the same keys."""

import numpy as np
import pytest
from mpi4py import MPI

from dmsolve import gallery, partition as part
from dmsolve._layout import block_ranges
from mpitest import assert_collective, assert_equal_collective, assert_raises_collective

COMM = MPI.COMM_WORLD


# -- serial references -------------------------------------------------------------------------
def xy2d(order: int, x: int, y: int) -> int:
    """The classic serial Hilbert index of cell (x, y) of a 2**order grid
    (Wikipedia's xy2d, with the axes in Skilling's convention)."""
    n = 1 << order
    d, s = 0, n // 2
    while s > 0:
        rx = 1 if (x & s) > 0 else 0
        ry = 1 if (y & s) > 0 else 0
        d += s * s * ((3 * rx) ^ ry)
        if ry == 0:
            if rx == 1:
                x, y = n - 1 - x, n - 1 - y
            x, y = y, x
        s //= 2
    return d


def grid_cells(dim, bits):
    g = np.stack(np.meshgrid(*[np.arange(2 ** bits)] * dim, indexing="ij"), -1)
    return g.reshape(-1, dim).astype(float)


# -- Hilbert keys --------------------------------------------------------------------------------
@pytest.mark.parametrize("dim,bits", [(2, 1), (2, 3), (2, 5), (3, 1), (3, 3), (1, 4)])
def test_hilbert_keys_walk_the_grid_cell_by_cell(dim, bits):
    """Hilbert keys order the cells of a grid along the curve, each next cell a neighbour, as
    the classic serial index does."""
    g = grid_cells(dim, bits)
    k = part.hilbert_keys(g + 0.5, np.zeros(dim), np.full(dim, 2.0 ** bits), bits=bits)
    assert np.array_equal(np.sort(k), np.arange(g.shape[0]))       # a bijection
    walk = g[np.argsort(k)]
    assert np.all(np.abs(np.diff(walk, axis=0)).sum(axis=1) == 1)  # face neighbours
    # nested: the first 2**dim-th of the curve fills one sub-cube
    first = walk[: g.shape[0] >> dim]
    assert np.ptp(first, axis=0).max() == 2 ** (bits - 1) - 1 if bits > 1 else True
    if dim == 2:
        ref = [xy2d(bits, int(x), int(y)) for x, y in g]
        assert np.array_equal(k, ref)


def test_hilbert_keys_scale_isotropically_and_clip():
    """Hilbert keys scale all axes alike and clip points outside the box."""
    lo, hi = np.array([0.0, 0.0]), np.array([4.0, 1.0])     # the long side sets the scale
    k = part.hilbert_keys(np.array([[3.9, 0.9], [-1.0, 5.0]]), lo, hi, bits=2)
    ref = part.hilbert_keys(np.array([[3.0, 0.0], [0.0, 3.0]]), np.zeros(2), np.full(2, 4.0),
                            bits=2)
    assert np.array_equal(k, ref)
    assert part.hilbert_keys(np.zeros((3, 3)), np.zeros(3), np.ones(3)).dtype == np.int64
    with pytest.raises(ValueError, match="bits"):
        part.hilbert_keys(np.zeros((1, 3)), np.zeros(3), np.ones(3), bits=21)


# -- the Hilbert partition ------------------------------------------------------------------
def my_points(total, dim, seed, empty_rank0=False):
    pts = np.random.default_rng(seed).random((total, dim)) * [3.0, 1.0, 2.0][:dim]
    pts[::7] = pts[3]                                # repeated points: ties by global index
    size = COMM.size
    if empty_rank0 and size > 1:
        ranges = np.concatenate(([0], block_ranges(total, size - 1)))
    else:
        ranges = block_ranges(total, size)
    return pts, pts[ranges[COMM.rank]:ranges[COMM.rank + 1]]


@pytest.mark.parametrize("dim,total,nparts,empty", [
    (2, 101, None, False), (3, 257, None, True), (2, 13, 5, False), (3, 1000, 7, False)],
    ids=["2d-101", "3d-257-empty-rank0", "2d-13-nparts5", "3d-1000-nparts7"])
def test_hilbert_matches_the_serial_sort_of_the_same_keys(dim, total, nparts, empty):
    """The Hilbert partition is the serial sort of the same keys, cut into balanced parts."""
    allpts, mine = my_points(total, dim, seed=dim + total, empty_rank0=empty)
    p = part.hilbert(mine, COMM, nparts=nparts)
    k = nparts or COMM.size
    keys = part.hilbert_keys(allpts, allpts.min(axis=0), allpts.max(axis=0))
    order = np.lexsort((np.arange(total), keys))        # by key, ties by global index
    ranges = block_ranges(total, k)
    want = np.empty(total, dtype=np.int64)
    want[order] = np.searchsorted(ranges, np.arange(total), side="right") - 1
    assert_equal_collective(p.parts(), want)
    assert_equal_collective(p.part_sizes, np.diff(ranges))     # exactly equal shares


@pytest.mark.parametrize("empty", [False, True], ids=["blocks", "empty-rank0"])
def test_hilbert_of_points_in_curve_order_skips_the_sort(monkeypatch, empty):
    """Points given in the curve's order (ties included) keep their global index as their
    position without a sort, and a rank holding its block of them keeps them all; one point
    out of order on any rank takes the sort again, with the same parts as the serial one."""
    total, dim = 301, 3
    allpts, _ = my_points(total, dim, seed=5)
    keys = part.hilbert_keys(allpts, allpts.min(axis=0), allpts.max(axis=0))
    allpts = allpts[np.lexsort((np.arange(total), keys))]      # the curve's order
    ranges = block_ranges(total, COMM.size)
    if empty and COMM.size > 1:
        ranges = np.concatenate(([0], block_ranges(total, COMM.size - 1)))
    mine = allpts[ranges[COMM.rank]:ranges[COMM.rank + 1]]

    def no_sort(*args, **kwargs):
        raise AssertionError("rank_of called on points already in the curve's order")

    with monkeypatch.context() as m:
        m.setattr("dmsolve.partition._hilbert.rank_of", no_sort)
        p = part.hilbert(mine, COMM)
    want = np.searchsorted(block_ranges(total, COMM.size), np.arange(total), side="right") - 1
    assert_equal_collective(p.parts(), want)
    if not empty:
        assert_collective(COMM, bool(np.all(p.local_parts == COMM.rank)), "a point moved")
    # the last rank's points reversed: every rank sorts, and the parts are the serial ones
    last = COMM.size - 1
    swapped = allpts.copy()
    swapped[ranges[last]:ranges[last + 1]] = swapped[ranges[last]:ranges[last + 1]][::-1]
    k2 = part.hilbert_keys(swapped, allpts.min(axis=0), allpts.max(axis=0))
    order = np.lexsort((np.arange(total), k2))
    want2 = np.empty(total, dtype=np.int64)
    want2[order] = np.searchsorted(block_ranges(total, COMM.size), np.arange(total),
                                   side="right") - 1
    p2 = part.hilbert(swapped[ranges[COMM.rank]:ranges[COMM.rank + 1]], COMM)
    assert_equal_collective(p2.parts(), want2)


def test_hilbert_registered_and_checked_at_the_door():
    """The Hilbert partitioner is registered, and bad coordinates are refused on every rank."""
    A = gallery.poisson2d(9, COMM)
    i = np.arange(A.row_layout.start, A.row_layout.stop)
    xy = np.column_stack((i % 9, i // 9)).astype(float)
    named = part.partition(A, "Hilbert", coords=xy, nparts=3)
    direct = part.hilbert(xy, COMM, nparts=3)
    assert_equal_collective(named.local_parts, direct.local_parts)
    assert_collective(COMM, named.old_layout == A.row_layout)
    bad = xy.copy()
    if COMM.rank == COMM.size - 1 and bad.size:
        bad[0, 0] = np.nan
    assert_raises_collective(COMM, ValueError, part.partition, A, "hilbert", coords=bad,
                             match="finite")
    assert_raises_collective(COMM, ValueError, part.partition, A, "hilbert", coords=xy[:-1]
                             if COMM.rank == 0 else xy, match="one row per owned row")
    assert_raises_collective(COMM, TypeError, part.partition, A, "hilbert")
    assert_raises_collective(COMM, ValueError, part.hilbert, xy, COMM, bits=40,
                             match="bits")
    three = np.zeros((xy.shape[0], 3 if COMM.rank == 0 else 2))
    if COMM.size > 1:
        assert_raises_collective(COMM, ValueError, part.hilbert, three, COMM,
                                 match="dimensions")
