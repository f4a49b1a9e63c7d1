"""Join and split trees of a vertex field, and the sweep that builds them.

The sweep is the distributed union-find behind D0 and D(d-1) of the
persistence diagram: every vertex points to its lowest neighbour, pointer
jumping labels each vertex with the minimum of its descent basin, the basins
meeting at a vertex become label-vertex edges, each rank keeps a minimum
spanning forest of its edges, the forests are merged across ranks in a
binary tree of BSP supersteps, and one elder-rule pass over the global forest
(size O(number of minima)) gives the pairs and the tree arcs.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI
from numba import njit

from dmsolve import DistVector, Progress
from dmsolve.bsp import BSP
from dmsolve.validate import agreed, check_choice

from ._complex import owned_global_ids
from ._domain import check_domain
from ._grid import Grid, component_table, link_structure
from ._order import global_order
from ._union_find import roots, union_find

__all__ = ["merge_tree", "MergeTree"]

#: key of the virtual outer vertex (older than every vertex)
APEX = -1
_UNKNOWN = np.iinfo(np.int64).min
_BIG = np.iinfo(np.int64).max
_TAG_LO, _TAG_HI, _TAG_LAB, _TAG_MAX = 31, 32, 33, 34


# -- the sweep ----------------------------------------------------------------------------
class Sweep:
    """Result of a sublevel sweep of the vertex graph in the order of ``key``,
    the same on every rank (all in key space: key = position in the sweep).

    Attributes
    ----------
    deaths : (k, 2) int64
        ``(born, dies_at)``: the basin of label ``born`` merges into an older
        one at vertex ``dies_at`` (elder rule).
    survivors : int64 array
        The oldest label of every final component (``APEX`` for the
        component of the outer vertex).
    arcs : (m, 2) int64
        Merge-tree arcs ``(lower node, upper node)``, roots included when
        ``tops`` were requested.

    Notes
    -----
    A plain result: not collective.
    """

    def __init__(self, deaths, survivors, arcs):
        self.deaths = deaths
        self.survivors = survivors
        self.arcs = arcs


def sweep(domain, key_owned: np.ndarray, *, apex: bool = False, tree: bool = False) -> Sweep:
    """Elder-rule merges of the sublevel sets ``{key <= t}`` of the vertex graph.

    ``key_owned`` is a permutation of ``0 .. n-1`` restricted to the owned
    vertices. With ``apex``, a virtual vertex older than all others is joined
    to every boundary vertex (the cone over the boundary used for D(d-1)).
    With ``tree``, each final component's highest vertex is added as the root
    of its merge tree. Collective on ``domain.comm``.
    """
    comm = domain.comm
    if domain.stencil is not None:
        st = _GridSweep(domain, key_owned, apex)
    else:
        st = _ComplexSweep(domain, key_owned, apex)
    lab_owned = st.labels()
    lo, hi = st.entries()
    lo, hi = _forest(lo, hi)
    # the labels (basin minima) and, for trees, the highest key of each basin
    labs = st.minima()
    tops = None
    if tree and lab_owned.size:
        u, inv = np.unique(lab_owned, return_inverse=True)
        tops = np.full(u.size, -1, dtype=np.int64)
        np.maximum.at(tops, inv, st.key_owned)
        labs = u
    elif tree:
        tops = np.zeros(0, np.int64)
        labs = np.zeros(0, np.int64)
    lo, hi, labs, tops = _merge_across_ranks(comm, lo, hi, labs, tops)
    result = None
    if comm.rank == 0:
        result = _elder(lo, hi, labs, tops)
    deaths, survivors, arcs = comm.bcast(result, root=0)
    return Sweep(deaths, survivors, arcs)


class _GridSweep:
    """Pointer jumping and basin entries on a grid slab, in a padded array so
    that every neighbour offset is a constant flat shift (pads never win)."""

    def __init__(self, grid: Grid, key_owned, apex: bool):
        self.domain = grid
        self.apex = apex
        self.key_owned = np.ascontiguousarray(key_owned, dtype=np.int64)
        key = grid.ghosted(self.key_owned)
        g0, g1 = grid.ghosted_planes
        p0, p1 = grid.owned_planes
        dims = (g1 - g0,) + tuple(grid.shape[:-1][::-1])
        Q = tuple(d + 2 for d in dims)
        self.Q = Q
        PK = np.full(Q, _BIG, dtype=np.int64)
        inner = tuple(slice(1, d + 1) for d in dims)
        PK[inner] = key.reshape(dims)
        self.PK = PK.reshape(-1)
        idx = np.arange(PK.size, dtype=np.int64).reshape(Q)
        region = [(1 + p0 - g0, 1 + p1 - g0)] + [(1, d + 1) for d in dims[1:]]
        self.opos = idx[tuple(slice(a, b) for a, b in region)].reshape(-1)
        self.gpos = idx[inner].reshape(-1)
        offsets, _ = link_structure(grid.dimension)
        strides = np.array(idx.strides[::-1]) // idx.itemsize      # (x, y[, z]) strides
        self.delta = offsets @ strides
        n_own = self.opos.size
        ids = np.arange(grid.vertex_layout.start, grid.vertex_layout.stop, dtype=np.int64)
        self.bnd = grid.boundary_mask(ids) if apex else np.zeros(n_own, bool)
        self.ptr = np.arange(PK.size, dtype=np.int64)
        self.lower = np.zeros(n_own, dtype=np.int64)
        _grid_descent(self.PK, self.opos, self.delta, self.bnd, self.ptr, self.lower)
        _compress(self.ptr, self.opos)

    def labels(self) -> np.ndarray:
        opos, ptr = self.opos, self.ptr
        PL = np.full(self.PK.size, _UNKNOWN, dtype=np.int64)
        root = ptr[opos]
        terminal = root == opos
        PL[opos[terminal]] = np.where(self.bnd[terminal], APEX, self.PK[opos[terminal]])
        self.PL = PL
        _resolve(self.domain, PL, opos, root, lambda owned: self._set_ghosts(owned))
        self.minima_ = self.PK[opos[terminal & ~self.bnd]]
        return PL[opos]

    def _set_ghosts(self, owned):
        self.PL[self.gpos] = self.domain.ghosted(owned)

    def minima(self) -> np.ndarray:
        m = self.minima_
        return np.concatenate(([APEX], m)) if self.apex and self.bnd.any() else m

    def entries(self):
        PK, PL, opos = self.PK, self.PL, self.opos
        if opos.size == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        L = component_table(self.domain.dimension)[self.lower]
        cand = opos[(L >= 2) | self.bnd]
        cand = cand[np.argsort(PK[cand], kind="stable")]
        return _grid_entries(PK, PL, cand, self.delta)


@njit(cache=True)
def _grid_descent(PK, opos, delta, bnd, ptr, lower):
    """Lowest neighbour (pointer) and lower-neighbour bit mask of every owned
    vertex; pads hold the largest key, so they are never lower."""
    for i in range(opos.size):
        p = opos[i]
        c = PK[p]
        best = c
        bp = p
        mask = 0
        for j in range(delta.size):
            q = p + delta[j]
            k = PK[q]
            if k < c:
                mask |= 1 << j
                if k < best:
                    best = k
                    bp = q
        lower[i] = mask
        ptr[p] = p if bnd[i] else bp


@njit(cache=True)
def _compress(ptr, starts):
    """Point every start straight at the root of its pointer chain."""
    for i in range(starts.size):
        p = starts[i]
        r = p
        while ptr[r] != r:
            r = ptr[r]
        while ptr[p] != r:
            nxt = ptr[p]
            ptr[p] = r
            p = nxt


@njit(cache=True)
def _grid_entries(PK, PL, cand, delta):
    """Label-vertex edges at the candidate vertices (in sweep order) whose
    lower neighbours lie in other basins than their own."""
    lo = np.empty(cand.size * (delta.size + 1), np.int64)
    hi = np.empty(cand.size * (delta.size + 1), np.int64)
    m = 0
    for i in range(cand.size):
        p = cand[i]
        c = PK[p]
        own = PL[p]
        start = m
        for j in range(delta.size):
            q = p + delta[j]
            if PK[q] < c and PL[q] != own:
                lo[m] = PL[q]
                hi[m] = c
                m += 1
        if m > start:
            lo[m] = own
            hi[m] = c
            m += 1
    return lo[:m], hi[:m]


class _ComplexSweep:
    """The same on a SimplicialComplex: half-edges out of owned vertices."""

    def __init__(self, cx, key_owned, apex: bool):
        self.domain = cx
        self.apex = apex
        self.key_owned = np.ascontiguousarray(key_owned, dtype=np.int64)
        K = cx.ghosted(self.key_owned)
        self.K = K
        n_loc = K.size
        opos = cx.owned_positions()
        self.opos = opos
        is_own = np.zeros(n_loc, bool)
        is_own[opos] = True
        E = cx.local_simplex_positions(1)
        src = np.concatenate((E[:, 0], E[:, 1]))
        dst = np.concatenate((E[:, 1], E[:, 0]))
        keep = is_own[src] & (K[dst] < K[src])
        self.src, self.dst = src[keep], dst[keep]          # lower half-edges
        o = np.lexsort((K[self.dst], self.src))
        s, d = self.src[o], self.dst[o]
        first = np.ones(s.size, bool)
        first[1:] = s[1:] != s[:-1]
        ptr = np.arange(n_loc, dtype=np.int64)
        ptr[s[first]] = d[first]
        self.bnd = np.zeros(n_loc, bool)
        if apex:
            self.bnd[opos] = cx.owned_boundary_vertices()
        ptr[self.bnd] = np.flatnonzero(self.bnd)
        _compress(ptr, opos)
        self.ptr = ptr

    def labels(self) -> np.ndarray:
        opos, ptr, K = self.opos, self.ptr, self.K
        PL = np.full(K.size, _UNKNOWN, dtype=np.int64)
        root = ptr[opos]
        terminal = root == opos
        PL[opos[terminal]] = np.where(self.bnd[opos[terminal]], APEX, K[opos[terminal]])
        self.PL = PL

        def set_ghosts(owned):
            PL[:] = self.domain.ghosted(owned)
        _resolve(self.domain, PL, opos, root, set_ghosts)
        self.minima_ = K[opos[terminal & ~self.bnd[opos]]]
        return PL[opos]

    def minima(self) -> np.ndarray:
        m = self.minima_
        return np.concatenate(([APEX], m)) if self.apex and self.bnd.any() else m

    def entries(self):
        K, PL = self.K, self.PL
        src, dst = self.src, self.dst
        c = PL[dst] != PL[src]
        s, d = src[c], dst[c]
        # a boundary vertex meets the outer vertex too: its own label is APEX
        lo = np.concatenate((PL[d], PL[s]))
        hi = np.concatenate((K[s], K[s]))
        return lo, hi


def _resolve(domain, PL, opos, root, set_ghosts) -> None:
    """Labels of vertices whose descent leaves the slab, from the ranks that
    own the path's continuation: ghost exchanges until every label is known
    (at most one round per rank boundary a descent path crosses)."""
    comm = domain.comm
    while True:
        set_ghosts(PL[opos])
        PL[opos] = PL[root]
        unknown = comm.allreduce(int(np.count_nonzero(PL[opos] == _UNKNOWN)), op=MPI.SUM)
        if unknown == 0:
            break
    set_ghosts(PL[opos])


def _forest(lo: np.ndarray, hi: np.ndarray):
    """Minimum spanning forest of label-vertex edges weighted by the vertex key
    (Kruskal: every edge at a vertex has that vertex's weight). Not collective."""
    if lo.size == 0:
        return lo, hi
    if np.any(hi[1:] < hi[:-1]):
        o = np.argsort(hi, kind="stable")
        lo, hi = lo[o], hi[o]
    n = int(hi.max()) + 2
    used = _union_sweep(lo, hi, n)[0] >= 0
    return lo[used], hi[used]


def _merge_across_ranks(comm, lo, hi, labs, tops):
    """Pairwise merging of the forests (and label tables) in log2(p) BSP
    supersteps; rank 0 ends with the global forest. Collective."""
    size, rank = comm.Get_size(), comm.Get_rank()
    step = 1
    while step < size:
        ctx = BSP(comm)
        if rank % (2 * step) == step:
            dest = rank - step
            ctx.send(dest, lo, tag=_TAG_LO)
            ctx.send(dest, hi, tag=_TAG_HI)
            ctx.send(dest, labs, tag=_TAG_LAB)
            if tops is not None:
                ctx.send(dest, tops, tag=_TAG_MAX)
        inbox = ctx.sync("persistence:merge-forests")
        if rank % (2 * step) == 0:
            lo = np.concatenate([lo, inbox.concat(_TAG_LO, dtype=np.int64)])
            hi = np.concatenate([hi, inbox.concat(_TAG_HI, dtype=np.int64)])
            lo, hi = _forest(lo, hi)
            more = inbox.concat(_TAG_LAB, dtype=np.int64)
            if tops is None:
                labs = np.concatenate([labs, more])
            else:
                labs = np.concatenate([labs, more])
                tops = np.concatenate([tops, inbox.concat(_TAG_MAX, dtype=np.int64)])
                u, inv = np.unique(labs, return_inverse=True)
                t = np.full(u.size, -1, dtype=np.int64)
                np.maximum.at(t, inv, tops)
                labs, tops = u, t
        step *= 2
    return lo, hi, labs, tops


def _elder(lo, hi, labs, tops):
    """Kruskal with the elder rule over the global forest. Not collective.

    Returns ``(deaths, survivors, arcs)`` in key space.
    """
    labs = np.unique(labs)
    o = np.argsort(hi, kind="stable")
    lo, hi = lo[o], hi[o]
    n = int(max(hi[-1] if hi.size else -1, labs[-1] if labs.size else -1)) + 2
    dead, kept, parent = _union_sweep(lo, hi, n)
    # an edge whose dying root is its own vertex only hangs that vertex
    # under a component; the others merge two components
    merge = (dead >= 0) & (dead != hi + 1)
    born, died = dead[merge] - 1, hi[merge]
    arc_lo, arc_hi, top = _merge_arcs(dead, kept, hi, n)
    root = roots(parent, labs + 1)
    survivors = labs[root == labs + 1]
    deaths = np.column_stack((born, died))
    arcs = np.column_stack((arc_lo, arc_hi))
    if tops is not None and labs.size:
        # the root arc of each component: its last node to its highest vertex
        hi_of = np.full(n, -1, dtype=np.int64)
        np.maximum.at(hi_of, root, tops)
        r = survivors + 1
        last = top[r]
        extra = (hi_of[r] != last) & (survivors != APEX)
        arcs = np.concatenate((arcs, np.column_stack((last[extra], hi_of[r][extra]))))
    return deaths, survivors, arcs


def _union_sweep(lo, hi, n):
    """Union-find over edges (label ``lo``, vertex ``hi``) sorted by ``hi``;
    node ``k`` lives at index ``k + 1`` (the outer vertex, key -1, at 0).

    The root of a component is its oldest label (smallest key): a vertex
    first hangs under the component of its first edge (the edge's dying root
    is the vertex itself), each further edge that reaches another component
    merges the younger root under the older one, and that younger label
    dies at the vertex. Returns :func:`union_find`'s ``(dead, kept,
    parent)``; the edges used (the forest) are those with ``dead >= 0``.
    Not collective.
    """
    return union_find(lo + 1, hi + 1, np.arange(n, dtype=np.int64))


@njit(cache=True)
def _merge_arcs(dead, kept, hi, n):  # pragma: no cover
    """The merge-tree arcs of a union sweep (:func:`_union_sweep`'s ``dead``
    and ``kept``): at every merge, from the last tree node of each of the two
    components to the merging vertex. Returns ``(arc_lo, arc_hi, top)`` in
    key space, ``top`` the last tree node of each root. Not collective."""
    top = np.arange(n, dtype=np.int64) - 1
    alo = np.empty(2 * dead.size, dtype=np.int64)
    ahi = np.empty(2 * dead.size, dtype=np.int64)
    na = 0
    for e in range(dead.size):
        b = dead[e]
        v = hi[e]
        if b < 0 or b == v + 1:
            continue
        a = kept[e]
        for t in (top[a], top[b]):
            if t != v:
                alo[na] = t
                ahi[na] = v
                na += 1
        top[a] = v
    return alo[:na], ahi[:na], top


# -- key <-> vertex ------------------------------------------------------------------------
def lookup(order: DistVector, values: DistVector, orders, ids=None
           ) -> tuple[np.ndarray, np.ndarray]:
    """Global ids and values of the vertices at the given order positions (an
    array equal on every rank). ``ids``: the global ids of the owned entries
    (default their layout indices). Collective on ``order.comm``."""
    orders = np.asarray(orders, dtype=np.int64)
    want = np.unique(orders)
    loc = order.local
    pos = np.searchsorted(want, loc)
    pos = np.minimum(pos, max(want.size - 1, 0))
    hit = np.flatnonzero(want[pos] == loc) if want.size else np.zeros(0, np.int64)
    gid = np.zeros(want.size, np.int64)
    val = np.zeros(want.size, np.float64)
    gid[pos[hit]] = hit + order.layout.start if ids is None else ids[hit]
    val[pos[hit]] = values.local[hit]
    comm = order.comm
    if comm.Get_size() > 1:
        comm.Allreduce(MPI.IN_PLACE, gid, op=MPI.SUM)
        comm.Allreduce(MPI.IN_PLACE, val, op=MPI.SUM)
    at = np.searchsorted(want, orders)
    return gid[at], val[at]


# -- merge trees -------------------------------------------------------------------------
class MergeTree:
    """A join or split tree: critical vertices and the arcs between them.

    Attributes
    ----------
    kind : str
        ``"join"`` (sublevel sets: leaves are minima, the root the highest
        vertex of each connected component) or ``"split"`` (superlevel sets:
        leaves are maxima, the root the lowest vertex).
    node_ids, node_values : arrays
        Global vertex ids and values of the nodes, in sweep order (ascending
        value for a join tree, descending for a split tree).
    node_types : int32 array
        ``0`` leaf, ``1`` saddle (where branches meet), ``2`` root.
    arcs : (m, 2) int64
        ``(from, to)`` global ids of the arcs, from the earlier node in the
        sweep to the later one.

    Notes
    -----
    The same on every rank; building it is collective, using it is not.
    """

    def __init__(self, kind, node_ids, node_values, node_types, arcs, sweep_rank):
        self.kind = kind
        self.node_ids = node_ids
        self.node_values = node_values
        self.node_types = node_types
        self.arcs = arcs
        self._rank = sweep_rank          # position of each node in the sweep

    def __repr__(self) -> str:
        c = np.bincount(self.node_types, minlength=3)
        return "MergeTree(%s: %d leaves, %d saddles, %d roots, %d arcs)" % (
            self.kind, c[0], c[1], c[2], len(self.arcs))

    def persistence_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """Pairs of the tree by the elder rule, read off the arcs alone.

        Returns ``(values, vertices)``: ``(k, 2)`` float arrays of
        ``(birth, death)`` values (join tree: minimum then saddle; split tree:
        saddle then maximum, so that birth <= death in both) and the
        matching ``(k, 2)`` int64 global ids. Every branch that meets an older
        one at a saddle dies there; the oldest leaf of each tree is
        essential and not listed. Not collective.
        """
        ids, rank = self.node_ids, self._rank
        pos = {int(g): i for i, g in enumerate(ids)}
        children: dict[int, list[int]] = {}
        for a, b in self.arcs.tolist():
            children.setdefault(pos[b], []).append(pos[a])
        oldest = {}
        pv, pi = [], []
        for i in np.argsort(rank).tolist():
            kids = children.get(i, [])
            if not kids:
                oldest[i] = i
                continue
            leaves = sorted((oldest[k] for k in kids), key=lambda j: rank[j])
            oldest[i] = leaves[0]
            for leaf in leaves[1:]:
                pi.append((ids[leaf], ids[i]))
                pv.append((self.node_values[leaf], self.node_values[i]))
        pv = np.array(pv, dtype=np.float64).reshape(-1, 2)
        pi = np.array(pi, dtype=np.int64).reshape(-1, 2)
        if self.kind == "split":
            pv, pi = pv[:, ::-1].copy(), pi[:, ::-1].copy()
        return pv, pi


def merge_tree(domain, values, kind: str = "join", *, axes: str | None = None,
               progress=None) -> MergeTree:
    """The join (``kind="join"``) or split (``kind="split"``) tree of a vertex field.

    Parameters
    ----------
    domain : Grid or SimplicialComplex
    values : DistVector on ``domain.vertex_layout`` or the global array
    kind : {"join", "split"}
    axes : str, optional
        The axis order of a 2-D/3-D ``values`` array on a Grid, as for
        :func:`critical_points`.
    progress : None, True or callable
        Report the phases (``"global order"``, ``"sweep"``) with their times,
        task ``"merge_tree"`` (see :class:`dmsolve.Progress`).

    Returns
    -------
    MergeTree
        Leaves (minima / maxima), saddles where components of the sub- /
        superlevel sets merge, one root per connected component, and the
        arcs, on every rank.

    Raises
    ------
    TypeError, ValueError
        On every rank: a domain that is not a Grid or SimplicialComplex, an
        unknown ``kind``, a bad ``axes`` or ``progress``, values as for
        :func:`critical_points`.

    Notes
    -----
    Collective on ``domain.comm``: the global order (a sample sort), a few
    ghost exchanges, and log2(p) supersteps merging minimum spanning forests
    of the basin graph. Ties are broken by global id (the ``(value, id)``
    order), so the tree does not depend on the number of ranks.

    References
    ----------
    .. [1] H. Carr, J. Snoeyink, U. Axen, "Computing contour trees in all
       dimensions", Computational Geometry 24(2), 2003.
    .. [2] E. Le Guillou, M. Fortin, J. Tierny, "Distributed discrete Morse
       sandwich", IEEE TPDS 2026.
    """
    check_domain(domain)
    with agreed(domain.comm):
        kind = check_choice("kind", kind, ("join", "split"))
        report = Progress(progress, domain.comm, "merge_tree")
    vec = domain.vertex_values(values, axes=axes)
    gids = owned_global_ids(domain)
    order = global_order(vec, ids=gids)
    n = vec.global_size
    report("global order of %d vertices", n)
    key = order.local if kind == "join" else n - 1 - order.local
    sw = sweep(domain, key, tree=True)
    report("sweep: %d arcs, %d components", sw.arcs.shape[0], sw.survivors.size)
    nodes = np.unique(sw.arcs.ravel())
    lonely = np.setdiff1d(sw.survivors, nodes)     # single-vertex components
    nodes = np.concatenate((nodes, lonely))
    nodes.sort()
    ordpos = nodes if kind == "join" else n - 1 - nodes
    ids, vals = lookup(order, vec, ordpos, gids)
    types = np.zeros(nodes.size, dtype=np.int32)
    if sw.arcs.size:
        has_up = np.isin(nodes, sw.arcs[:, 0])
        has_down = np.isin(nodes, sw.arcs[:, 1])
        types[has_down & has_up] = 1
        types[has_down & ~has_up] = 2
    pos = np.searchsorted(nodes, sw.arcs)
    arcs = ids[pos] if sw.arcs.size else np.zeros((0, 2), np.int64)
    return MergeTree(kind, ids, vals, types, arcs.reshape(-1, 2), nodes)
