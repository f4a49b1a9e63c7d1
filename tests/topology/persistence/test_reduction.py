"""Distributed Z/2 column reduction (reduce_z2, gf2_rank) against the serial
standard algorithm, with columns spread unevenly (an empty rank, everything on
one rank, lows crossing many ranks), on random matrices, on the boundary
matrices of complexes and on the saddle-saddle matrices of noisy and plateau
grids; and where the columns travel: only to the owners of their lowest rows,
each move the column's rows and a fixed header (counted by a Ledger)."""

import itertools

import numpy as np
import pytest
from mpi4py import MPI
from numba import njit, types
from numba.typed import List

import gudhi_ref
from mpitest import assert_collective, assert_equal_collective, assert_raises_collective
import topology.persistence._saddles as saddles
from dmsolve import block_ranges
from dmsolve.bsp import Ledger
from dmsolve.threads import using
from topology import Grid, global_order
from topology.persistence import persistence_pairs_all
from topology.persistence._reduction import PART_ROWS, _symdiff, gf2_rank, reduce_z2
from topology_cases import gradient_field, tet_cavity, torus, tri_holes

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
    """GF(2) rank by Gaussian elimination with Python ints as bit sets: a
    serial computation independent of the column reduction."""
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
    """Pairs, zero columns, lows, labels and the rank of random matrices,
    empty and one-by-one ones included, are the serial algorithm's under
    every spread of the columns, within p + 2 supersteps."""
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
    """The filtration boundary matrices of surfaces and solids reduce as
    serially, every pair with its birth row before its death column."""
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


@pytest.mark.parametrize("threads", [1, 2, 4])
@pytest.mark.parametrize("kind", ["rows-on-one", "blocks", "reversed"])
def test_parts_on_threads_equal_serial(kind, threads):
    """With the rows of a rank in parts that reduce at once on its threads
    (several parts of PART_ROWS rows or more), the pairs, zero columns, lows
    and labels are still the serial algorithm's; banded columns make most
    columns travel from part to part (and from rank to rank)."""
    nrow = 3 * P * PART_ROWS + 7
    rng = np.random.default_rng(5)
    top = rng.integers(1, nrow, nrow // 2)
    cols = [np.unique(rng.integers(max(t - 3 * PART_ROWS // 2, 0), t, 3)).astype(np.int64)
            for t in top.tolist()]
    with using(threads):
        red = check_reduction(cols, nrow, kind)
    crossed = COMM.allreduce(red.additions) > len(cols) // 4
    assert_collective(COMM, crossed, "too easy: %d additions" % red.additions)


# -- where the columns travel ----------------------------------------------------------------
def owner_of(ranges, rows):
    return np.searchsorted(ranges, rows, side="right") - 1


def columns_received(ledger) -> int:
    """Bytes this rank received in the reduction's column moves."""
    return int(sum(row[3] for label, row in ledger.steps if label == "reduce_z2:columns"))


@pytest.mark.parametrize("lows", [False, True], ids=["pairs", "lows"])
def test_reduced_columns_move_once_to_their_pivot_owner(lows):
    """Columns with distinct lowest rows need no addition: each one that
    starts away from the owner of its lowest row goes straight there, once (no
    rank in between sees it), in one superstep, and a rank receives exactly
    those columns' rows plus a header of three words each (id, label, length;
    four with ``lows``, which also carries the input rank), besides the BSP
    messages' framing."""
    nrow = 40 * P + 3
    rng = np.random.default_rng(8)
    low = rng.permutation(nrow)
    cols = [np.append(np.unique(rng.integers(0, t, rng.integers(0, 5))) if t else [], t)
            .astype(np.int64) for t in low.tolist()]
    mine, _ = spread("random", len(cols), nrow, seed=3)
    ptr, rows = local_csr(cols, mine)
    ledger = Ledger(COMM)
    red = reduce_z2(ptr, rows, mine, nrow, COMM, lows=lows, ledger=ledger)
    ranges = block_ranges(nrow, P)
    owner = owner_of(ranges, low)
    start = np.full(len(cols), -1)
    for r, ids in enumerate(COMM.allgather(mine)):
        start[ids] = r
    come = np.flatnonzero((owner == ME) & (start != ME))
    width = 4 if lows else 3
    # plus the BSP layer's framing: two messages (heads, rows) from each sender
    framing = (8 * (4 + 2) + 8 * (4 + 1)) * np.unique(start[come]).size
    want = 8 * sum(width + cols[c].size for c in come.tolist()) + framing
    assert_equal_collective(red.received_columns, come.size, err_msg="columns received")
    assert_equal_collective(columns_received(ledger), want, err_msg="bytes received")
    assert_equal_collective(red.additions, 0)
    moved = bool(np.any(owner != start))
    assert_equal_collective(red.supersteps, (2 if moved else 1) + lows)
    assert_equal_collective(np.sort(red.pair_rows), np.sort(low[owner == ME]))


def travel_bound(cols, nrows, mine, ranges):
    """The most columns each rank can receive if a column moves only to the
    owner of its current lowest row: its lowest row only falls, so it visits
    the ranks from the owner of its first lowest row down to that of its last
    (of the serial reduction; rank 0 for a zero column), each once, and is
    never received where it starts."""
    ref_r, ref_c, _ = serial_pairs(cols, nrows)
    last = np.zeros(len(cols), np.int64)
    last[ref_c] = owner_of(ranges, ref_r)
    first = np.array([owner_of(ranges, c[-1]) if c.size else -1 for c in cols], np.int64)
    start = np.full(len(cols), -1)
    for r, ids in enumerate(COMM.allgather(mine)):
        start[ids] = r
    r = np.arange(P)[:, None]
    seen = (last <= r) & (r <= first) & ~((r == first) & (first == start))
    return seen.sum(axis=1)


def check_travel(cols, nrows, kind, seed=0):
    """check_reduction, and every rank received no more columns than
    travel_bound allows, each move a header of three words and its rows."""
    red = check_reduction(cols, nrows, kind, seed)
    mine, ranges = spread(kind, len(cols), nrows, seed)
    ranges = block_ranges(nrows, P) if ranges is None else np.asarray(ranges)
    bound = travel_bound(cols, nrows, mine, ranges)
    assert_collective(COMM, red.received_columns <= bound[ME],
                      "%d columns received, at most %d can reach this rank"
                      % (red.received_columns, bound[ME]))
    ptr, rows = local_csr(cols, mine)
    ledger = Ledger(COMM)
    again = reduce_z2(ptr, rows, mine, nrows, COMM, row_ranges=ranges, ledger=ledger)
    got = columns_received(ledger)
    # every move carries at least its header and its lowest row
    assert_collective(COMM, got >= 8 * 4 * again.received_columns and
                      (got == 0) == (again.received_columns == 0),
                      "%d bytes for %d columns" % (got, again.received_columns))
    return red


def banded_columns(nrow, ncol, seed, width):
    """Columns whose entries lie in a band below a random top row: each one
    meets many earlier columns' pivots on its way down, across ranks."""
    rng = np.random.default_rng(seed)
    top = rng.integers(1, nrow, ncol)
    return [np.unique(np.append(rng.integers(max(t - width, 0), t, 4), t)).astype(np.int64)
            for t in top.tolist()]


@pytest.mark.parametrize("kind", ["random", "one-rank", "reversed", "empty-rank"])
def test_unresolved_columns_travel_only_to_owners_of_their_lows(kind):
    """A matrix where most columns leave their first rank unresolved and move
    on: the pairs are the serial algorithm's, and no rank receives a column
    whose lowest rows never lay in its range."""
    nrow = 60 * P + 7
    cols = banded_columns(nrow, 2 * nrow, 4, nrow // 3)
    red = check_travel(cols, nrow, kind)
    if P >= 3 and kind in ("one-rank", "reversed"):
        moves = COMM.allreduce(red.received_columns)
        assert_collective(COMM, moves > len(cols), "only %d moves of %d columns"
                          % (moves, len(cols)))


@pytest.mark.parametrize("kind", ["random", "blocks", "reversed"])
@pytest.mark.parametrize("name", list(TOPS))
def test_complex_columns_travel_only_to_owners_of_their_lows(name, kind):
    """The boundary matrices of complexes: each rank receives only the
    columns whose lowest rows pass through its range."""
    cols, n = filtration_boundary(TOPS[name]())
    check_travel(cols, n, kind)


def saddle_matrix(shape, kind, seed):
    """The saddle-saddle (D1) matrix of a 3D grid's Morse complex as the
    serial persistence_pairs_all reduces it: columns (walls) in filtration
    order, rows the positive critical edges' filtration positions."""
    got = {}

    def spy(ptr, rows, ids, nrows, comm, **kw):
        got.update(ptr=ptr, rows=rows, ids=ids, nrows=nrows)
        return reduce_z2(ptr, rows, ids, nrows, comm, **kw)
    grid = Grid(shape, MPI.COMM_SELF)
    order = global_order(grid.vertex_values(gradient_field(kind, shape, seed)))
    old, saddles.reduce_z2 = saddles.reduce_z2, spy
    try:
        persistence_pairs_all(grid, order)
    finally:
        saddles.reduce_z2 = old
    ptr, rows = got["ptr"], got["rows"]
    cols = [rows[ptr[c]:ptr[c + 1]].astype(np.int64) for c in np.argsort(got["ids"]).tolist()]
    return cols, int(got["nrows"])


SADDLES = {"noise-9x8x10": ((9, 8, 10), "noise"), "ties-10x9x8": ((10, 9, 8), "ties"),
           "ties3-8x8x8": ((8, 8, 8), "ties3")}


@pytest.mark.parametrize("kind", ["random", "blocks", "reversed", "rows-on-one"])
@pytest.mark.parametrize("case", list(SADDLES))
def test_saddle_matrices_equal_serial(case, kind):
    """The D1 matrices of noisy and plateau grids (integer values, many ties)
    reduce as serially under every spread, each column only travelling to
    the owners of its lowest rows."""
    shape, field = SADDLES[case]
    cols, n = saddle_matrix(shape, field, seed=2)
    assert_collective(COMM, sum(c.size > 0 for c in cols) > 20, "too few columns")
    check_travel(cols, n, kind)


def test_bad_input_raises_on_every_rank():
    """Rows out of order or beyond nrows on one rank, and ranks that disagree
    on nrows, raise on every rank."""
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
