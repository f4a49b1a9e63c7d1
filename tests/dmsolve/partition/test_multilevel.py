"""The multilevel partitioner (coarsen in parallel, METIS on the coarse graph,
refine): cut and balance against serial METIS, only the coarse graph gathered,
and ``gather_to_root``."""

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI
from scipy.spatial import Delaunay

from dmsolve import DistCSR, DistVector, gallery, partition as part
from dmsolve.partition import _metis, _multilevel
from mpitest import Checks, assert_collective, assert_equal_collective, assert_raises_collective

COMM = MPI.COMM_WORLD


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


# -- multilevel ------------------------------------------------------------------------------
def multilevel_cases():
    # big enough that the coarse graph (300 vertices) is 8-14x smaller: at
    # poisson3d(12) into 4 parts the cut is 1.2-1.4x METIS's (see bench/partition_quality.md)
    n2 = gallery.poisson2d(50, COMM)
    n3 = gallery.poisson3d(16, COMM)
    A, _ = delaunay_laplacian(2000)
    return {"poisson2d-50": n2, "poisson3d-16": n3, "delaunay-2000": A}


def test_multilevel_cut_and_balance_against_serial_metis():
    """The multilevel partitioner's cut and balance are close to serial METIS's."""
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
    """The multilevel partitioner gathers only the coarse graph, never the whole one."""
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
    """On a small graph the multilevel partitioner is METIS on the weights, and its options are
    checked."""
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


@pytest.mark.parametrize("wide", [False, True], ids=["int32", "int64"])
def test_gather_to_root_is_the_concatenation_in_either_width(wide, monkeypatch):
    """gather_to_root gives root the concatenation of every rank's array, in 32- and 64-bit
    widths."""
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
