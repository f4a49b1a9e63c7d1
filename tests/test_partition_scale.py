"""Partitioners that never gather the graph: the Hilbert curve on the distributed
sort and the multilevel (coarsen, METIS on the coarse graph, refine) scheme."""

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI
from scipy.spatial import Delaunay

from dmsolve import DistCSR, DistVector, Layout, gallery, partition as part
from dmsolve._layout import block_ranges
from dmsolve.partition import _metis, _multilevel
from mpitest import (Checks, assert_collective, assert_equal_collective,
                     assert_raises_collective)

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


def serial_cut(S: sp.csr_matrix, parts: np.ndarray) -> int:
    """METIS's edge cut of the symmetrised pattern of ``S``."""
    C = sp.triu(((abs(S) + abs(S.T)) != 0).astype(np.int8), k=1).tocoo()
    return int(np.count_nonzero(parts[C.row] != parts[C.col]))


def delaunay_laplacian(m, seed=3):
    pts = np.random.default_rng(seed).random((m, 2))
    tri = Delaunay(pts).simplices
    t = tri[COMM.rank::COMM.size]
    edges = np.concatenate((t[:, [0, 1]], t[:, [1, 2]], t[:, [0, 2]]))
    return gallery.graph_laplacian(edges, m, COMM), pts


# -- Hilbert keys --------------------------------------------------------------------------------
@pytest.mark.parametrize("dim,bits", [(2, 1), (2, 3), (2, 5), (3, 1), (3, 3), (1, 4)])
def test_hilbert_keys_walk_the_grid_cell_by_cell(dim, bits):
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


def test_hilbert_registered_and_checked_at_the_door():
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


# -- multilevel ------------------------------------------------------------------------------
def multilevel_cases():
    # big enough that the coarse graph (300 vertices) is 8-14x smaller: at
    # poisson3d(12) into 4 parts the cut is 1.2-1.4x METIS's (see bench/partition_quality.md)
    n2 = gallery.poisson2d(50, COMM)
    n3 = gallery.poisson3d(16, COMM)
    A, _ = delaunay_laplacian(2000)
    return {"poisson2d-50": n2, "poisson3d-16": n3, "delaunay-2000": A}


def test_multilevel_cut_and_balance_against_serial_metis():
    # 4 parts: nparts == size at 4 ranks, nparts != size below
    nparts = 4
    checks = Checks(COMM)
    for name, A in multilevel_cases().items():
        S = A.to_scipy()
        k = nparts
        p = part.multilevel_partition(A, nparts=nparts, coarse_size=300)
        got = p.parts()
        ref = _metis.metis_graph_parts(*map(np.int64, sp.coo_matrix(S).nonzero()),
                                       S.shape[0], k)
        cut, ref_cut = serial_cut(S, got), serial_cut(S, ref)
        sizes = np.bincount(got, minlength=k)
        checks.add(cut <= 1.3 * ref_cut, "%s: cut %d <= 1.3 x metis %d" % (name, cut, ref_cut))
        checks.add(sizes.max() <= 1.05 * S.shape[0] / k,
                   "%s: imbalance %.3f <= 1.05" % (name, sizes.max() * k / S.shape[0]))
        q = part.partition_quality(A, p)
        checks.add(q.edge_cut == cut, "%s: partition_quality's cut" % name)
    checks.assert_all()


def test_multilevel_gathers_only_the_coarse_graph(monkeypatch):
    A = gallery.poisson2d(60, COMM)              # 3600 vertices, coarse graph <= 200
    seen = []
    widths = []
    real = _multilevel.gather_to_root

    def spy(comm, arrays, wide):
        seen.extend(a.size for a in arrays)
        widths.append(wide)
        return real(comm, arrays, wide)

    def refuse(*args, **kwargs):
        raise AssertionError("the multilevel partitioner gathered the graph")
    monkeypatch.setattr(_multilevel, "gather_to_root", spy)
    monkeypatch.setattr(_metis, "gather_to_root", refuse)
    for cls, name in ((DistVector, "gather"), (DistCSR, "to_scipy"),
                      (part.Partition, "parts"), (part.Partition, "new_index")):
        monkeypatch.setattr(cls, name, refuse)
    p = part.partition(A, "multilevel", coarse_size=200)
    monkeypatch.undo()
    # gathers of vertex weights, degrees, adjacency, edge weights: each rank's
    # share, in 32-bit words (every value fits)
    vw, deg, adj = (COMM.allreduce(seen[i]) for i in range(3))
    assert_collective(COMM, not any(widths), "the coarse graph travelled as int64")
    assert_collective(COMM, len(seen) == 4 and vw <= 200, "coarse graph of %d vertices" % vw)
    assert_collective(COMM, 0 < adj <= 20 * vw, "coarse adjacency of %d entries" % adj)
    assert_collective(COMM, p.part_sizes.max() <= 1.05 * 3600 / COMM.size)


def test_multilevel_small_graph_is_metis_on_the_weights_and_checked():
    A = gallery.poisson2d(7, COMM)                 # below coarse_size: METIS directly
    p = part.partition(A, ("multilevel", {"seed": 1}))
    S = A.to_scipy()
    ref = _metis.metis_graph_parts(*map(np.int64, sp.coo_matrix(S).nonzero()), 49,
                                   COMM.size, seed=1)
    assert_equal_collective(p.parts(), ref)          # the same parts as "metis"
    rect = DistCSR.from_global(sp.random(10, 4, density=0.5, random_state=0, format="csr"),
                               COMM)
    assert_raises_collective(COMM, ValueError, part.multilevel_partition, rect)
    assert_raises_collective(COMM, ValueError, part.multilevel_partition, A, ubfactor=0.9)
    assert_raises_collective(COMM, TypeError, part.multilevel_partition, A, coarse_size=2.0)
    one = part.multilevel_partition(A, nparts=1)
    assert_collective(COMM, np.all(one.local_parts == 0))


def test_partition_counts_need_no_size_by_nparts_table():
    layout = Layout.block(23, COMM)
    rng = np.random.default_rng(COMM.rank)
    p = part.Partition(layout, rng.integers(0, 5, layout.local_size), nparts=5)
    parts = p.parts()
    new = p.new_index()
    want = np.empty(23, dtype=np.int64)
    want[np.argsort(parts, kind="stable")] = np.arange(23)
    assert_equal_collective(new, want)
    assert_equal_collective(p.part_sizes, np.bincount(parts, minlength=5))


def test_metis_hands_large_graphs_to_multilevel():
    A = gallery.poisson2d(30, COMM)
    routed = part.metis_partition(A, seed=2, gather_limit=100)
    if COMM.size > 1:
        want = part.multilevel_partition(A, seed=2)
    else:                                  # one rank: nothing to gather, the exact path
        want = part.metis_partition(A, seed=2)
    assert_equal_collective(routed.local_parts, want.local_parts)
    # below the limit (the default is 4 million entries) the exact METIS path
    S = A.to_scipy()
    ref = _metis.metis_graph_parts(*map(np.int64, sp.coo_matrix(S).nonzero()), 900,
                                   COMM.size, seed=2)
    assert_equal_collective(part.metis_partition(A, seed=2).parts(), ref)
    assert_raises_collective(COMM, ValueError, part.metis_partition, A, gather_limit=-1)


def test_metis_gathers_only_a_few_shares(monkeypatch):
    """The default gather limit is relative to the largest rank's share: a
    graph spread over more ranks than METIS_GATHER_SHARES goes multilevel
    (nothing of global size on rank 0), one already held by one rank is
    gathered (rank 0 holds no more than that rank does)."""
    S = gallery.poisson2d(30, MPI.COMM_SELF).to_scipy()
    ref = _metis.metis_graph_parts(*map(np.int64, sp.coo_matrix(S).nonzero()), 900,
                                   COMM.size, seed=2)
    monkeypatch.setattr(_metis, "METIS_GATHER_SHARES", 1)
    A = gallery.poisson2d(30, COMM)
    got = part.metis_partition(A, seed=2)
    if COMM.size > 1:             # 1 share < the whole: parallel path, as gather_limit=0 gives
        want = part.metis_partition(A, seed=2, gather_limit=0)
        assert_equal_collective(got.local_parts, want.local_parts)
    else:
        assert_equal_collective(got.parts(), ref)
    # every row on the last rank: the whole graph is one share, so it is gathered
    sizes = np.zeros(COMM.size, dtype=np.int64)
    sizes[-1] = 900
    lay = Layout.from_local_size(int(sizes[COMM.rank]), COMM)
    C = sp.coo_matrix(S)
    mine = C.row >= 0 if COMM.rank == COMM.size - 1 else C.row < 0
    B = DistCSR.from_coo(C.row[mine], C.col[mine], C.data[mine], S.shape, COMM, layout=lay)
    assert_equal_collective(part.metis_partition(B, seed=2).parts(), ref)


@pytest.mark.parametrize("empty_rank0", [False, True], ids=["blocks", "rank0-empty"])
def test_nnz_cuts_equal_from_weights_on_the_gathered_row_lengths(empty_rank0):
    n = 101
    rng = np.random.default_rng(5)
    S = sp.random(n, n, density=0.08, random_state=6, format="csr")
    S = S + sp.diags(rng.random(n) + 1.0)        # row lengths from 1 to ~20, uneven
    size = COMM.size
    ranges = (np.concatenate(([0], block_ranges(n, size - 1))) if empty_rank0 and size > 1
              else block_ranges(n, size))
    A = DistCSR.from_global(sp.csr_matrix(S), COMM, layout=Layout(ranges, COMM))
    p = part.nnz_partition(A)
    want = Layout.from_weights(np.diff(sp.csr_matrix(S).indptr), COMM)
    assert_equal_collective(p.new_layout.ranges, want.ranges)
    assert_equal_collective(p.parts(), want.owner(np.arange(n)))


@pytest.mark.parametrize("wide", [False, True], ids=["int32", "int64"])
def test_gather_to_root_is_the_concatenation_in_either_width(wide, monkeypatch):
    top = 2 ** 40 if wide else 2 ** 31 - 1
    mine = np.arange(COMM.rank + 1, dtype=np.int64) * 7 + COMM.rank
    mine[-1] = top - COMM.rank
    other = np.full(COMM.rank % 2, COMM.rank, np.int64)     # empty on even ranks
    sources = []
    real_inner = _multilevel.inner_comm

    class Spy:
        """The private communicator, noting whom each Recv names."""
        def __init__(self, comm):
            self.comm = comm

        def __getattr__(self, name):
            return getattr(self.comm, name)

        def Recv(self, buf, source, tag):
            sources.append(source)
            return self.comm.Recv(buf, source=source, tag=tag)
    monkeypatch.setattr(_multilevel, "inner_comm", lambda comm: Spy(real_inner(comm)))
    got = _multilevel.gather_to_root(COMM, (mine, other), wide)
    monkeypatch.undo()
    want = [np.concatenate(COMM.allgather(a)) for a in (mine, other)]
    if COMM.rank == 0:
        ok = all(g.dtype == np.int64 and np.array_equal(g, w) for g, w in zip(got, want))
    else:
        ok = got is None
    assert_collective(COMM, ok, "gather_to_root(wide=%s)" % wide)
    # up a binomial tree: rank 0 hears from exactly ceil(log2 p) others (a
    # linear gather: p - 1, or none through Recv), no rank from more
    peers = len(set(sources))
    levels = int(np.ceil(np.log2(COMM.size))) if COMM.size > 1 else 0
    assert_collective(COMM, peers == levels if COMM.rank == 0 else peers <= levels,
                      "%d peers" % peers)
