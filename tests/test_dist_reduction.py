"""Distributed Z/2 column reduction (reduce_z2, gf2_rank) against the serial
standard algorithm, with columns spread unevenly (an empty rank, everything on
one rank, lows crossing many ranks), and Betti numbers against gudhi with no
matrix gathered on rank 0."""

import itertools
import os
import sys

import gudhi
import numpy as np
import pytest
from mpi4py import MPI
from numba import njit, types
from numba.typed import List

import gudhi_ref
from mpitest import assert_collective, assert_equal_collective, assert_raises_collective
from test_topology_persistence import tet_cavity, torus, tri_holes
from topology import SimplicialComplex, betti_numbers
from topology.persistence._reduction import _symdiff, gf2_rank, reduce_z2

COMM = MPI.COMM_WORLD
P, ME = COMM.size, COMM.rank


# -- serial references ----------------------------------------------------------------------
@njit
def reduce_columns(ptr, rows, nrows):
    """Z2 column reduction (standard algorithm) of sparse columns given in
    CSR form (row indices sorted ascending, columns in filtration order).

    Returns ``pivot_col``: for every row the column whose reduced lowest
    entry it is, or -1; and ``zero``: whether each column reduced to 0.
    Not collective.
    """
    ncol = ptr.shape[0] - 1
    pivot = np.full(nrows, -1, np.int64)
    zero = np.zeros(ncol, np.bool_)
    red = List.empty_list(types.int64[:])
    for c in range(ncol):
        col = rows[ptr[c]:ptr[c + 1]].copy()
        while col.shape[0] > 0:
            low = col[-1]
            k = pivot[low]
            if k < 0:
                pivot[low] = c
                break
            col = _symdiff(col, red[k])
        red.append(col)
        if col.shape[0] == 0:
            zero[c] = True
    return pivot, zero


def serial_pairs(cols, nrows):
    """Pairs (row, column) and zero columns of the serial standard algorithm."""
    ptr = np.concatenate(([0], np.cumsum([c.size for c in cols]))).astype(np.int64)
    rows = np.concatenate(list(cols) + [np.zeros(0, np.int64)]).astype(np.int64)
    piv, zero = reduce_columns(ptr, rows, nrows)
    r = np.flatnonzero(piv >= 0)
    return r, piv[r], np.flatnonzero(zero)


def rank_gf2_bitsets(cols) -> int:
    """GF(2) rank by Gaussian elimination with Python ints as bit sets (the
    serial computation betti_numbers made on rank 0 before)."""
    pivots, rank = {}, 0
    for c in cols:
        v = 0
        for r in c.tolist():
            v ^= 1 << r
        while v:
            top = v.bit_length() - 1
            if top not in pivots:
                pivots[top] = v
                rank += 1
                break
            v ^= pivots[top]
    return rank


def random_columns(ncol, nrow, seed, per_col=4):
    rng = np.random.default_rng(seed)
    return [np.unique(rng.integers(0, nrow, rng.integers(0, per_col + 1))).astype(np.int64)
            for _ in range(ncol)]


def filtration_boundary(tops):
    """Boundary matrix (columns by filtration index) of all faces of ``tops``
    in the order (dimension, lexicographic): a square matrix."""
    by_dim = [gudhi_ref.faces(tops, k) for k in range(tops.shape[1])]
    index, n = {}, 0
    for simplices in by_dim:
        for s in simplices:
            index[tuple(s)] = n
            n += 1
    cols = []
    for simplices in by_dim:
        for s in simplices:
            cols.append(np.array(sorted(index[f] for f in itertools.combinations(s, len(s) - 1))
                                 if len(s) > 1 else [], np.int64))
    return cols, n


# -- distributions: column -> rank, and row ranges ------------------------------------------
def spread(kind, ncol, nrows, seed=0):
    rng = np.random.default_rng(seed + 17)
    ranges = None
    if kind == "random":
        owner = rng.integers(0, P, ncol)
    elif kind == "blocks":
        owner = np.minimum(np.arange(ncol) * P // max(ncol, 1), P - 1)
    elif kind == "one-rank":            # every column on the last rank
        owner = np.full(ncol, P - 1)
    elif kind == "empty-rank":          # rank 0 holds no column, and no row
        owner = 1 + rng.integers(0, max(P - 1, 1), ncol) if P > 1 else np.zeros(ncol, int)
        ranges = np.concatenate(([0], np.linspace(0, nrows, P).round().astype(np.int64)))
        if P == 1:
            ranges = np.array([0, nrows])
    elif kind == "reversed":            # columns on the rank owning the top rows: lows cross
        owner = P - 1 - np.minimum(np.arange(ncol) * P // max(ncol, 1), P - 1)
    elif kind == "rows-on-one":         # one rank owns every pivot row
        owner = rng.integers(0, P, ncol)
        ranges = np.array([0] * P + [nrows]) if P > 1 else np.array([0, nrows])
    else:
        raise ValueError(kind)
    return np.flatnonzero(owner == ME), ranges


def local_csr(cols, mine):
    ptr = np.concatenate(([0], np.cumsum([cols[i].size for i in mine]))).astype(np.int64)
    rows = np.concatenate([cols[i] for i in mine] + [np.zeros(0, np.int64)]).astype(np.int64)
    return ptr, rows


def check_reduction(cols, nrows, kind, seed=0):
    ref_r, ref_c, ref_z = serial_pairs(cols, nrows)
    mine, ranges = spread(kind, len(cols), nrows, seed)
    ptr, rows = local_csr(cols, mine)
    labels = 1000 + 3 * mine
    red = reduce_z2(ptr, rows, mine, nrows, COMM, labels=labels, row_ranges=ranges, lows=True)
    lo, hi = red.row_range
    ok = bool(np.all((red.pair_rows >= lo) & (red.pair_rows < hi)))
    assert_collective(COMM, ok, "a pair outside its rank's rows")
    pr = np.concatenate(COMM.allgather(red.pair_rows))
    pc = np.concatenate(COMM.allgather(red.pair_cols))
    pl = np.concatenate(COMM.allgather(red.pair_labels))
    o = np.argsort(pr)
    assert_equal_collective(pr[o], ref_r, err_msg="pivot rows (%s)" % kind)
    assert_equal_collective(pc[o], ref_c, err_msg="pivot columns (%s)" % kind)
    assert_equal_collective(pl[o], 1000 + 3 * ref_c, err_msg="labels (%s)" % kind)
    z = np.concatenate(COMM.allgather(red.zero_cols))
    zl = np.concatenate(COMM.allgather(red.zero_labels))
    o = np.argsort(z)
    assert_equal_collective(z[o], ref_z, err_msg="zero columns (%s)" % kind)
    assert_equal_collective(zl[o], 1000 + 3 * ref_z)
    low_ref = np.full(len(cols), -1, np.int64)
    low_ref[ref_c] = ref_r
    assert_equal_collective(red.low, low_ref[mine], err_msg="lows (%s)" % kind)
    # at most p hops after the local pass, one superstep each, plus the lows
    assert_collective(COMM, red.supersteps <= P + 2, "%d supersteps" % red.supersteps)
    rank = gf2_rank(ptr, rows, nrows, COMM, ids=mine)
    assert_equal_collective(rank, ref_r.size)
    assert_equal_collective(rank, rank_gf2_bitsets(cols))
    return red


KINDS = ["random", "blocks", "one-rank", "empty-rank", "reversed", "rows-on-one"]
RANDOM = [(0, 0), (1, 1), (13, 7), (101, 37), (250, 60), (60, 250)]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("ncol,nrow", RANDOM, ids=["%dx%d" % s for s in RANDOM])
def test_random_matrices_equal_serial(ncol, nrow, kind):
    for seed in range(3):
        check_reduction(random_columns(ncol, max(nrow, 1), seed), max(nrow, 1), kind, seed)


TOPS = {
    "tri-holes": lambda: tri_holes(9, 8),
    "torus": lambda: torus(6, 5),
    "tet-grid": lambda: gudhi_ref.grid_top_cells((3, 4, 3)),
    "tet-cavity": lambda: tet_cavity(6),
}


@pytest.mark.parametrize("kind", ["blocks", "random", "reversed", "empty-rank"])
@pytest.mark.parametrize("name", list(TOPS))
def test_complex_boundary_matrices_equal_serial(name, kind):
    cols, n = filtration_boundary(TOPS[name]())
    red = check_reduction(cols, n, kind)
    # a square filtration matrix: every pair has birth row < death column
    assert_collective(COMM, bool(np.all(red.pair_rows < red.pair_cols)), "row >= column")


def test_lows_cross_every_rank():
    """A chain whose lowest rows sit on the last rank and whose reduction
    walks them down one rank at a time: the hops are counted."""
    n = 8 * P
    # column j (j >= 1) = {j-1, j}: all on the last rank, reduced against nothing
    cols = [np.array([0], np.int64)] + [np.array([j - 1, j], np.int64) for j in range(1, n)]
    cols.append(np.arange(n, dtype=np.int64))     # reduces through every rank's pivots
    check_reduction(cols, n, "one-rank")
    check_reduction(cols, n, "reversed")


def test_bad_input_raises_on_every_rank():
    ptr = np.array([0, 2]) if ME == P - 1 else np.array([0])
    rows = np.array([3, 1]) if ME == P - 1 else np.zeros(0, np.int64)
    ids = np.array([0]) if ME == P - 1 else np.zeros(0, np.int64)
    assert_raises_collective(COMM, ValueError, reduce_z2, ptr, rows, ids, 5, COMM,
                             match="strictly increasing")
    rows = np.array([1, 7]) if ME == P - 1 else np.zeros(0, np.int64)
    assert_raises_collective(COMM, ValueError, reduce_z2, ptr, rows, ids, 5, COMM,
                             match="nrows")
    if P > 1:       # ranks that disagree on nrows
        assert_raises_collective(COMM, ValueError, reduce_z2, np.array([0]),
                                 np.zeros(0, np.int64), np.zeros(0, np.int64), 5 + (ME == 0),
                                 COMM, match="same on every")


# -- Betti numbers --------------------------------------------------------------------------
def sphere_surface(n=4):
    """The boundary triangles of a tetrahedralised cube: a sphere, beta = (1, 0, 1)."""
    tets = gudhi_ref.grid_top_cells((n, n, n))
    tris = gudhi_ref.faces(tets, 2)
    allt = np.concatenate([tets[:, list(c)] for c in itertools.combinations(range(4), 3)])
    u, cnt = np.unique(allt, axis=0, return_counts=True)
    boundary = u[cnt == 1]
    assert set(map(tuple, boundary)) <= set(map(tuple, tris))
    _, inv = np.unique(boundary, return_inverse=True)
    return inv.reshape(boundary.shape).astype(np.int64)


def annulus(nx=10, ny=4):
    """A strip closed in x: beta = (1, 1, 0)."""
    cells = []
    for y in range(ny - 1):
        for x in range(nx):
            a, b = x + y * nx, (x + 1) % nx + y * nx
            c, d = a + nx, b + nx
            cells += [[a, b, c], [b, c, d]]
    return np.sort(np.array(cells, dtype=np.int64), axis=1)


BETTI = {"torus": (lambda: torus(9, 7), [1, 2, 1]),
         "sphere": (sphere_surface, [1, 0, 1]),
         "annulus": (annulus, [1, 1, 0]),
         "tet-cavity": (lambda: tet_cavity(7), [1, 1, 1, 0]),
         "tri-holes": (tri_holes, [1, 2, 0])}


def gudhi_betti(tops):
    st = gudhi.SimplexTree()
    for t in tops:
        st.insert([int(v) for v in t])
    st.compute_persistence(homology_coeff_field=2, persistence_dim_max=True)
    b = st.betti_numbers()
    return b + [0] * (tops.shape[1] - len(b))


@pytest.mark.parametrize("partition", ["block", "metis"])
@pytest.mark.parametrize("name", list(BETTI))
def test_betti_numbers_equal_gudhi(name, partition, monkeypatch):
    make, known = BETTI[name]
    tops = make()
    assert_equal_collective(gudhi_betti(tops), known, err_msg="gudhi")
    cx = SimplicialComplex([tops[ME::P]], COMM, partition=partition)

    def gathered(*a, **k):
        raise AssertionError("betti_numbers gathered a matrix")
    # the old path gathered B_k with to_scipy(root=0): it must not be taken
    from dmsolve import DistCSR
    monkeypatch.setattr(DistCSR, "to_scipy", gathered)
    assert_equal_collective(betti_numbers(cx), known)


def test_betti_rank0_receives_its_share():
    """Bytes received by each rank during betti_numbers (bench/_counting.py):
    rank 0 receives no more than the busiest other rank plus a fixed slack."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
    from _counting import TALLY, CountingComm
    # not freed: dmsolve keeps inner communicators keyed by this one
    comm = CountingComm(COMM.Dup())
    tops = gudhi_ref.grid_top_cells((6, 6, 4 * P))
    cx = SimplicialComplex([tops[ME::P]], comm)
    nbytes = 8 * 3 * gudhi_ref.faces(tops, 2).shape[0]     # B_2 as int64 rows
    TALLY.reset()
    b = betti_numbers(cx)
    recv = COMM.allgather(TALLY.bytes_recv)
    assert_equal_collective(b, [1, 0, 0, 0])
    others = max(recv[1:]) if P > 1 else 0
    assert_collective(COMM, recv[0] <= others + 64 * 1024,
                      "rank 0 received %d bytes, the others at most %d" % (recv[0], others))
    if P > 1:
        # what gathering B_2 alone would have brought to rank 0
        assert_collective(COMM, recv[0] < nbytes * (P - 1) / P, "%d >= %d" % (recv[0], nbytes))


# -- the Morse complex's reductions ---------------------------------------------------------
@pytest.mark.parametrize("shape", [(7, 6, 9), (9, 8, 3)], ids=["7x6x9", "9x8x3"])
def test_morse_persistence_reduced_without_rank0(shape):
    """persistence_pairs_all on a noisy grid: the same pairs as on one rank,
    no gather to a root, and rank 0 receives no more than the other ranks
    (plus a fixed slack: the allgathered pairs are the same for all)."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
    from _counting import TALLY, CountingComm
    from topology import Grid, global_order
    from topology.persistence import persistence_pairs_all
    values = np.random.default_rng(11).random(int(np.prod(shape)))
    serial = persistence_pairs_all(Grid(shape, MPI.COMM_SELF),
                                   global_order(Grid(shape, MPI.COMM_SELF).vertex_values(values)),
                                   keep_zero=True)
    comm = CountingComm(COMM.Dup())       # not freed: dmsolve keys inner comms by it
    g = Grid(shape, comm)
    order = global_order(g.vertex_values(values))
    TALLY.reset()
    res = persistence_pairs_all(g, order, keep_zero=True)
    recv = COMM.allgather(TALLY.bytes_recv)
    calls = set(TALLY.by_call)
    for d in range(3):
        assert_equal_collective(res.pairs[d], serial.pairs[d], err_msg="D%d" % d)
        assert_equal_collective(res.essential[d], serial.essential[d], err_msg="ess D%d" % d)
    assert_equal_collective(res.stats["critical"], serial.stats["critical"])
    # not boundary_entries: the raw count of V-path ends depends on the
    # partition (65 vs 63 on 9x8x3 at 3 ranks, on main too); mod 2 it does not
    for k in ("boundary_nonzeros", "d1_columns", "d1_rows"):
        assert_equal_collective(res.stats[k], serial.stats[k], err_msg=k)
    assert_collective(COMM, res.pairs[1].shape[0] > 0, "no D1 pair")
    rooted = calls & {"gather", "Gather", "Gatherv", "reduce", "Reduce"}
    assert_collective(COMM, not rooted, "rooted collectives: %s" % sorted(rooted))
    others = max(recv[1:]) if P > 1 else 0
    assert_collective(COMM, recv[0] <= 1.5 * others + 64 * 1024,
                      "rank 0 received %d bytes, the others at most %d" % (recv[0], others))
