"""The ``"multilevel"`` partitioner: coarsen the graph in parallel by heavy-edge
matching, partition the small coarse graph with METIS on one rank, project the
parts back and refine them in parallel by size-constrained boundary moves.

This is the ParMETIS scheme with its pieces made simple (no ParMETIS wheel
ships with MPI): no rank ever holds more than its share of the graph, plus
the coarse graph on rank 0 (a few thousand vertices, ``coarse_size``).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pymetis
import scipy.sparse as sp
from mpi4py import MPI

from .._errors import agree
from .._layout import Layout
from ..bsp import NeighborExchange
from ..bsp._comm import GATHER_TAG, inner_comm
from ..validate import agreed, check_int, check_real
from ._exchange import exchange, fetch
from ._partition import Partition

__all__ = ["multilevel_partition", "COARSE_SIZE"]

#: Coarsening stops at ``max(COARSE_SIZE, COARSE_PER_PART * nparts)`` vertices.
COARSE_SIZE = 2000
COARSE_PER_PART = 40
#: Matching rounds per level, and a level that shrinks the graph by less than
#: this factor ends the coarsening (the matching has stalled).
MATCH_ROUNDS = 6
STALL_RATIO = 0.92
#: METIS's imbalance allowance on the coarse graph, in thousandths (1.01): tighter
#: than the target, so that the refinement has room to move vertices.
COARSE_UFACTOR = 10
#: METIS tries this many partitions of the coarse graph and keeps the best (cheap: it is small).
COARSE_NCUTS = 4
#: Refinement rounds at coarse levels and at the finest level.
COARSE_REFINE_ROUNDS = 4
FINE_REFINE_ROUNDS = 10

_HASH_MASK = np.uint64((1 << 30) - 1)
_EW_CAP = (1 << 31) - 1


@dataclasses.dataclass
class _Graph:
    """One level: this rank's vertices ``layout.start .. stop - 1`` with their
    weights ``vw`` and adjacency (CSR ``indptr``, global ``adj``, weights ``ew``),
    symmetric over the ranks, no self loops, no repeated edges."""

    layout: Layout
    indptr: np.ndarray
    adj: np.ndarray
    ew: np.ndarray
    vw: np.ndarray

    def __post_init__(self):
        n = self.layout.local_size
        self.rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(self.indptr))
        start, stop = self.layout.start, self.layout.stop
        self.is_local = (self.adj >= start) & (self.adj < stop)
        self._lidx = self.adj[self.is_local] - start
        ghosts, inv = np.unique(self.adj[~self.is_local], return_inverse=True)
        self._ginv = inv.ravel()
        # planned once per level, exchanged a dozen times (only values travel)
        self.halo = NeighborExchange.from_ghosts(self.layout, ghosts, dtype=np.int64,
                                                 name="multilevel.halo")

    def neighbour_values(self, local_values: np.ndarray) -> np.ndarray:
        """``values[adj]`` of a vertex array (int64). Collective among the
        neighbours (one halo exchange)."""
        out = np.empty(self.adj.size, dtype=np.int64)
        out[self.is_local] = local_values[self._lidx]
        got = self.halo.exchange(np.ascontiguousarray(local_values, dtype=np.int64))
        out[~self.is_local] = got[self._ginv]
        return out

    def free(self) -> None:
        """Release the halo's persistent requests. Not collective."""
        self.halo.free()


def _csr(layout: Layout, rows: np.ndarray, cols: np.ndarray, w: np.ndarray,
         vw: np.ndarray) -> _Graph:
    # rows are local indices; repeated (row, col) pairs are summed
    n = layout.local_size
    order = np.lexsort((cols, rows))
    rows, cols, w = rows[order], cols[order], w[order]
    if rows.size:
        first = np.concatenate(([True], (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1])))
        starts = np.flatnonzero(first)
        w = np.add.reduceat(w, starts)
        rows, cols = rows[starts], cols[starts]
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    return _Graph(layout, indptr, cols.astype(np.int64), w.astype(np.int64),
                  np.asarray(vw, dtype=np.int64))


def _graph_of(A) -> _Graph:
    # the pattern of A + A^T without the diagonal, unit weights (as "metis")
    layout = A.row_layout
    local = sp.csr_matrix(A.local_rows())
    rows = np.repeat(np.arange(layout.start, layout.stop, dtype=np.int64),
                     np.diff(local.indptr))
    cols = local.indices.astype(np.int64)
    off = rows != cols
    rows, cols = rows[off], cols[off]
    dest = layout.owner(cols) if cols.size else np.zeros(0, dtype=np.int64)
    t_rows, t_cols = exchange(layout.comm, dest, cols, rows)
    R = np.concatenate((rows, t_rows)) - layout.start
    C = np.concatenate((cols, t_cols))
    G = _csr(layout, R, C, np.ones(R.size, dtype=np.int64),
             np.ones(layout.local_size, dtype=np.int64))
    G.ew[:] = 1  # a pattern: an entry stored both ways is one edge
    return G


def _edge_hash(a: np.ndarray, b: np.ndarray, salt: int) -> np.ndarray:
    # a symmetric pseudo-random 30-bit priority of the edge {a, b} (splitmix64)
    lo = np.minimum(a, b).astype(np.uint64)
    hi = np.maximum(a, b).astype(np.uint64)
    with np.errstate(over="ignore"):
        x = lo * np.uint64(0x9E3779B97F4A7C15) ^ (hi + np.uint64(salt) * np.uint64(0xD1B54A32D192ED03))
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return (x & _HASH_MASK).astype(np.int64)


def _match(G: _Graph, max_vw: int, salt: int) -> np.ndarray:
    """Heavy-edge matching by mutual proposals: the mate's global id of each
    local vertex, or -1. Collective. Each round every free vertex proposes
    to its free neighbour of highest priority (edge weight, then an edge on
    this rank, then a hash of the edge), and mutual proposals match."""
    comm = G.layout.comm
    n = G.layout.local_size
    gid = G.layout.start + np.arange(n, dtype=np.int64)
    u_gid = gid[G.rows]
    prio = (np.minimum(G.ew, _EW_CAP) << 31) | (G.is_local.astype(np.int64) << 30) \
        | _edge_hash(u_gid, G.adj, salt)
    allowed = G.vw[G.rows] + G.neighbour_values(G.vw) <= max_vw
    mate = np.full(n, -1, dtype=np.int64)
    for _ in range(MATCH_ROUNDS):
        free = mate < 0
        nbr_free = G.neighbour_values(free).astype(bool)
        cand = np.flatnonzero(allowed & free[G.rows] & nbr_free)
        prop = np.full(n, -1, dtype=np.int64)
        if cand.size:
            order = cand[np.lexsort((prio[cand], G.rows[cand]))]
            last = np.concatenate((G.rows[order][1:] != G.rows[order][:-1], [True]))
            prop[G.rows[order[last]]] = G.adj[order[last]]
        nbr_prop = G.neighbour_values(prop)
        mutual = (prop[G.rows] == G.adj) & (nbr_prop == u_gid)
        mate[G.rows[mutual]] = G.adj[mutual]
        counts = np.array([mutual.sum(), cand.size], dtype=np.int64)
        comm.Allreduce(MPI.IN_PLACE, counts, op=MPI.SUM)
        if counts[0] == 0 or counts[1] == 0:
            break
    return mate


def _coarsen(G: _Graph, max_vw: int, salt: int) -> tuple[np.ndarray, _Graph]:
    """Match and contract: ``(cmap, coarse graph)``, ``cmap`` the global
    coarse id of each local vertex. Collective."""
    comm = G.layout.comm
    n = G.layout.local_size
    start = G.layout.start
    gid = start + np.arange(n, dtype=np.int64)
    mate = _match(G, max_vw, salt)
    leader = (mate < 0) | (gid < mate)   # a pair is owned by its smaller end
    clayout = Layout.from_local_size(int(leader.sum()), comm)
    cmap = np.full(n, -1, dtype=np.int64)
    cmap[leader] = clayout.start + np.arange(clayout.local_size, dtype=np.int64)
    follower = ~leader
    near = follower & (mate >= start) & (mate < G.layout.stop)
    cmap[near] = cmap[mate[near] - start]
    far = follower & ~near
    cmap[far] = fetch(G.layout, cmap, mate[far])
    ccols = G.neighbour_values(cmap)
    crows = cmap[G.rows]
    keep = crows != ccols
    owner_e = clayout.owner(crows[keep]) if keep.any() else np.zeros(0, np.int64)
    r, c, w = exchange(comm, owner_e, crows[keep], ccols[keep], G.ew[keep])
    owner_v = clayout.owner(cmap) if n else np.zeros(0, np.int64)
    vi, vwt = exchange(comm, owner_v, cmap, G.vw)
    cvw = np.bincount(vi - clayout.start, weights=vwt,
                      minlength=clayout.local_size).astype(np.int64)
    return cmap, _csr(clayout, r - clayout.start, c, w, cvw)


def _gather_partition(G: _Graph, nparts: int, seed: int, coarse: bool) -> np.ndarray:
    """METIS parts of the (small) graph ``G``, computed on rank 0; this
    rank's entries. Collective: the graph gathered up a binomial tree, a
    Scatterv of the parts.
    Not ``coarse``: the input graph itself, partitioned exactly as
    ``metis_partition`` does (default options, no weights)."""
    comm = G.layout.comm
    rank = comm.Get_rank()
    lay = G.layout
    deg = np.diff(G.indptr)
    # 32-bit words when every value fits (ids, degrees and weights of a
    # coarse graph nearly always do): half the bytes rank 0 receives
    top = max((int(a.max()) for a in (G.vw, deg, G.adj, G.ew) if a.size), default=0)
    wide = comm.allreduce(top, op=MPI.MAX) > np.iinfo(np.int32).max
    gathered = gather_to_root(comm, (G.vw, deg, G.adj, G.ew), wide)
    g_vw, g_deg, g_adj, g_ew = gathered if gathered is not None else (None,) * 4
    parts_all, exc = None, None
    if rank == 0:
        try:
            parts_all = _metis_weighted(g_vw, g_deg, g_adj, g_ew, nparts, seed, coarse)
            parts_all = parts_all.astype(np.int32)
        except Exception as e:  # noqa: BLE001 - agreed below, raised everywhere
            exc = RuntimeError("METIS failed on the coarse graph: %s" % e)
    agree(comm, exc)
    parts = np.empty(lay.local_size, dtype=np.int32)
    comm.Scatterv([parts_all, (lay.local_sizes, lay.ranges[:-1]), MPI.INT32_T]
                  if rank == 0 else None, [parts, MPI.INT32_T], root=0)
    return parts.astype(np.int64)


def gather_to_root(comm, arrays, wide: bool) -> list[np.ndarray] | None:
    """Each array of ``arrays`` concatenated over the ranks in rank order, on
    rank 0 as int64 (None elsewhere), sent as int64 words when ``wide``,
    else as int32.

    Up a binomial tree (in round ``k`` rank ``r + 2^k`` sends what it holds
    to rank ``r``), so no rank receives from more than ``ceil(log2 p)``
    others: a linear ``Gatherv`` makes rank 0 pay MPI's per-peer receive
    buffers for every rank (7.6 MiB at 64 ranks here, for 200 KiB of
    graph). Point-to-point on the private duplicate of ``comm``. Collective
    on ``comm``."""
    dtype, mpitype = (np.int64, MPI.INT64_T) if wide else (np.int32, MPI.INT32_T)
    inner = inner_comm(comm)
    rank, size = inner.Get_rank(), inner.Get_size()
    parts = [np.ascontiguousarray(a, dtype=dtype) for a in arrays]
    k = 1
    while k < size:
        if rank & k:        # hand everything gathered so far down, and stop
            counts = np.array([a.size for a in parts], np.int64)
            inner.Send([counts, MPI.INT64_T], dest=rank - k, tag=GATHER_TAG)
            inner.Send([np.concatenate(parts), mpitype], dest=rank - k, tag=GATHER_TAG)
            return None
        if rank + k < size:  # ranks [rank + k, rank + 2k) follow this rank's in order
            counts = np.empty(len(parts), np.int64)
            inner.Recv([counts, MPI.INT64_T], source=rank + k, tag=GATHER_TAG)
            buf = np.empty(int(counts.sum()), dtype=dtype)
            inner.Recv([buf, mpitype], source=rank + k, tag=GATHER_TAG)
            theirs = np.split(buf, np.cumsum(counts)[:-1])
            parts = [np.concatenate((a, b)) for a, b in zip(parts, theirs)]
        k <<= 1
    return [a.astype(np.int64) for a in parts]


def _metis_weighted(vw, deg, adj, ew, nparts: int, seed: int, coarse: bool) -> np.ndarray:
    n = vw.size
    if nparts == 1 or n == 0:
        return np.zeros(n, dtype=np.int64)
    if coarse and (adj.size == 0 or n <= nparts):
        # no edges to cut (or a vertex per part at most): contiguous weight blocks
        cum = np.cumsum(vw) - vw
        return np.minimum(cum * nparts // max(int(vw.sum()), 1), nparts - 1).astype(np.int64)
    xadj = np.concatenate(([0], np.cumsum(deg))).astype(np.int64)
    if hasattr(pymetis, "CSRAdjacency"):  # pymetis >= 2025.2
        graph = {"adjacency": pymetis.CSRAdjacency(adj_starts=xadj, adjacent=adj)}
    else:
        graph = {"xadj": xadj, "adjncy": adj}
    if coarse:
        opts = pymetis.Options(seed=int(seed), ufactor=COARSE_UFACTOR, ncuts=COARSE_NCUTS)
        graph.update(vweights=vw.tolist(), eweights=ew.tolist())
    else:  # the same call as metis_graph_parts: the same parts as "metis"
        opts = pymetis.Options(seed=int(seed))
    _, parts = pymetis.part_graph(nparts, options=opts, **graph)
    return np.asarray(parts, dtype=np.int64)


def _refine(G: _Graph, part: np.ndarray, nparts: int, max_w: int, rounds: int) -> np.ndarray:
    """Size-constrained greedy boundary moves. Collective.

    A round moves each boundary vertex to the neighbouring part it is most
    connected to, if that cuts fewer edges (directions alternate between
    rounds, towards higher then lower part numbers, so that two neighbours
    do not swap), or, while a part weighs more than ``max_w``, out of it to
    the best neighbouring part with room. The room of a part (``max_w``
    less its weight) is shared among the ranks in proportion to what they
    ask (one ``Allreduce`` of 2 * nparts words), the best gains first."""
    comm = G.layout.comm
    part = part.copy()
    W = np.bincount(part, weights=G.vw, minlength=nparts).astype(np.int64)
    comm.Allreduce(MPI.IN_PLACE, W, op=MPI.SUM)
    quiet = 0
    for r in range(rounds):
        nbr_part = G.neighbour_values(part)
        balance = bool(W.max() > max_w)
        key = G.rows * nparts + nbr_part
        uk, inv = np.unique(key, return_inverse=True)
        conn = np.bincount(inv.ravel(), weights=G.ew).astype(np.int64)
        uu, qq = uk // nparts, uk % nparts
        pu = part[uu]
        own = np.zeros(part.size, dtype=np.int64)
        mine = qq == pu
        own[uu[mine]] = conn[mine]
        gain = conn - own[uu]
        if balance:
            ok = ~mine & (W[pu] > max_w) & (W[qq] + G.vw[uu] <= max_w)
        else:
            # a move that cuts fewer edges, or as many and evens the weights
            better = (gain > 0) | ((gain == 0) & (W[qq] + G.vw[uu] < W[pu]))
            ok = ~mine & better & ((qq > pu) if r % 2 == 0 else (qq < pu))
        ok &= W[qq] + G.vw[uu] <= max_w
        c = np.flatnonzero(ok)
        # the best move of each vertex: highest gain, then lowest part
        c = c[np.lexsort((qq[c], -gain[c], uu[c]))]
        if c.size:
            c = c[np.concatenate(([True], uu[c][1:] != uu[c][:-1]))]
        cu, cq, cg = uu[c], qq[c], gain[c]
        cw, cp = G.vw[cu], part[cu]
        ask = np.zeros(2 * nparts, dtype=np.int64)
        np.add.at(ask, cq, cw)
        np.add.at(ask, nparts + cp, cw)
        total = np.empty_like(ask)
        comm.Allreduce(ask, total, op=MPI.SUM)
        room_in = np.maximum(max_w - W, 0)
        share_in = _share(room_in, ask[:nparts], total[:nparts])
        if balance:
            room_out = np.maximum(W - max_w, 0)
            share_out = _share(room_out, ask[nparts:], total[nparts:])
        accept = _within(cq, cg, cw, share_in)
        if balance:
            accept &= _within(cp, cg, cw, share_out)
        part[cu[accept]] = cq[accept]
        delta = np.zeros(nparts + 1, dtype=np.int64)
        np.add.at(delta, cq[accept], cw[accept])
        np.subtract.at(delta, cp[accept], cw[accept])
        delta[nparts] = int(accept.sum())
        comm.Allreduce(MPI.IN_PLACE, delta, op=MPI.SUM)
        W += delta[:nparts]
        quiet = quiet + 1 if delta[nparts] == 0 and not balance else 0
        if quiet >= 2:
            break
    return part


def _share(room: np.ndarray, mine: np.ndarray, total: np.ndarray) -> np.ndarray:
    # this rank's share of each part's room, in proportion to what it asks
    with np.errstate(divide="ignore", invalid="ignore"):
        scaled = np.where(total > 0, room * mine // np.maximum(total, 1), 0)
    return np.where(total <= room, mine, scaled)


def _within(group: np.ndarray, gain: np.ndarray, w: np.ndarray, share: np.ndarray) -> np.ndarray:
    # moves accepted best gain first while the cumulative weight of each group fits
    if group.size == 0:
        return np.zeros(0, dtype=bool)
    order = np.lexsort((-gain, group))
    g, cw = group[order], np.cumsum(w[order])
    first = np.concatenate(([True], g[1:] != g[:-1]))
    base = np.maximum.accumulate(np.where(first, cw - w[order], 0))
    ok = np.empty(group.size, dtype=bool)
    ok[order] = cw - base <= share[g]
    return ok


def multilevel_partition(A, nparts: int | None = None, seed: int = 0, *,
                         coarse_size: int | None = None, ubfactor: float = 1.03) -> Partition:
    """Multilevel k-way partition of the symmetrised graph of ``A``, in parallel.

    The ``"multilevel"`` entry of :data:`~dmsolve.partition.PARTITIONERS`.
    Collective on ``A.comm``. The graph (pattern of ``A + A^T`` without the
    diagonal, unit weights, as ``"metis"``) is coarsened by heavy-edge
    matching (mutual proposals between neighbours, pairs across ranks
    allowed) until it has at most ``coarse_size`` vertices; that coarse graph
    is gathered to rank 0 and partitioned by METIS with vertex weights
    (aggregate sizes) and edge weights (summed); the parts are projected back
    level by level, each level refined by size-constrained greedy boundary
    moves so that no part exceeds ``ubfactor`` times the mean.

    Memory and traffic per rank: O(this rank's share of the graph + nparts),
    and rank 0 also holds the coarse graph. Supersteps grow with the number
    of levels, about ``log(n / coarse_size) / log(1.6)``.

    Parameters
    ----------
    A : DistCSR
        Square matrix.
    nparts : int, optional
        Default ``comm.size``.
    seed : int, optional
        Seeds METIS and the matching's tie-breaking hash; the result is a
        deterministic function of ``A``'s distribution and the arguments.
    coarse_size : int, optional
        Coarsening stops at this many vertices; default
        ``max(COARSE_SIZE, COARSE_PER_PART * nparts)``. A graph no larger is
        gathered to rank 0 and partitioned by METIS directly: the same parts
        as ``metis_partition``.
    ubfactor : float, optional
        Allowed ``max(part weight) / mean``, at least 1 (default 1.03).

    Raises
    ------
    ValueError, TypeError
        On every rank, for a non-square ``A`` or bad options.
    RuntimeError
        On every rank, if METIS fails on the coarse graph.

    References
    ----------
    .. [1] G. Karypis, V. Kumar, Parallel multilevel k-way partitioning scheme
       for irregular graphs, SIAM Review 41(2), 1999 (ParMETIS).
    .. [2] F. Manne, R. H. Bisseling, A parallel approximation algorithm for the
       weighted maximum matching problem, PPAM 2007 (locally dominant edges).
    """
    comm = A.comm
    with agreed(comm):
        if A.shape[0] != A.shape[1]:
            raise ValueError("multilevel_partition needs a square matrix, got shape %s"
                             % (A.shape,))
        nparts = check_int("nparts", comm.Get_size() if nparts is None else nparts, low=1)
        seed = check_int("seed", seed)
        coarse_size = check_int("coarse_size", coarse_size, low=1, allow_none=True)
        ubfactor = check_real("ubfactor", ubfactor, low=1.0)
    if coarse_size is None:
        coarse_size = max(COARSE_SIZE, COARSE_PER_PART * nparts)
    graphs = [_graph_of(A)]
    try:
        return _multilevel(A, graphs, nparts, seed, coarse_size, ubfactor)
    finally:
        for G in graphs:
            G.free()


def _multilevel(A, graphs: list, nparts: int, seed: int, coarse_size: int,
                ubfactor: float) -> Partition:
    # graphs[0] is the finest; every graph made is appended (freed by the caller)
    n = A.shape[0]
    G = graphs[0]
    cmaps: list[np.ndarray] = []   # cmaps[k]: graphs[k] -> graphs[k + 1]
    # a coarse vertex may weigh at most 1.5x the mean weight of the target
    # size, so that the coarse graph can still be balanced
    max_vw = max(1, int(1.5 * n / coarse_size))
    while G.layout.global_size > coarse_size:
        cmap, Gc = _coarsen(G, max_vw, seed * 1000003 + len(cmaps))
        graphs.append(Gc)
        shrunk = Gc.layout.global_size < G.layout.global_size
        if shrunk:
            cmaps.append(cmap)
        else:
            graphs.pop().free()
        G = graphs[-1]
        if not shrunk or Gc.layout.global_size > STALL_RATIO * graphs[-2].layout.global_size:
            break  # the matching has stalled: partition what we have
    max_w = max(int(np.floor(ubfactor * n / nparts)), -(-n // nparts))
    part = _gather_partition(G, nparts, seed, coarse=bool(cmaps))
    if cmaps:
        part = _refine(G, part, nparts, max_w, COARSE_REFINE_ROUNDS)
    for depth in range(len(cmaps) - 1, -1, -1):
        part = fetch(graphs[depth + 1].layout, part, cmaps[depth])
        graphs[depth + 1].free()
        G = graphs[depth]
        part = _refine(G, part, nparts, max_w,
                       FINE_REFINE_ROUNDS if depth == 0 else COARSE_REFINE_ROUNDS)
    return Partition(A.row_layout, part, nparts=nparts)
