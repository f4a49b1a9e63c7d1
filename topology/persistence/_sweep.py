"""The sublevel sweep behind D0, D(d-1) and merge trees, with no rank holding
the global forest.

Every vertex points to its lowest neighbour; pointer jumping labels it with
the minimum of its descent basin, and where basins meet, label-vertex edges
say so. The elder rule over these edges, taken in sweep order, gives the
pairs. Each rank runs it over its own edges and decides every merge it can
decide alone; what it cannot decide goes up a binary tree of ranks, and each
internal node of the tree is led by a different rank. The answers for the
merge-tree arcs come back down the same tree.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from dmsolve.bsp import sorted_unique, stable_argsort
from dmsolve.jit import njit

from ._elder import APEX, Sweep, distributed_elder

__all__ = ["Sweep", "sweep", "GridSweepGraph", "ComplexSweepGraph", "APEX"]

_UNKNOWN = np.iinfo(np.int64).min
_BIG = np.iinfo(np.int64).max


def sweep(domain, key_owned: np.ndarray, *, apex: bool = False, tree: bool = False,
          ledger=None) -> Sweep:
    """Elder-rule merges of the sublevel sets ``{key <= t}`` of the vertex graph.

    ``key_owned`` is a permutation of ``0 .. n-1`` restricted to the owned
    vertices. With ``apex``, a virtual vertex older than all others is joined
    to every boundary vertex (the cone over the boundary used for D(d-1)).
    With ``tree``, the root each dying basin merges into and the highest
    vertex of each final component are found too (for merge-tree arcs).

    Notes
    -----
    Collective on ``domain.comm``. Steps:

    1. Labels (ghost exchanges until every descent path is resolved) and the
       label-vertex edges where basins meet, on each rank.
    2. Where each label is used: the lowest and highest rank holding a vertex
       of its basin or an edge to it (two supersteps, at the block owner of
       the label's key). A label is *sealed* in a range of ranks that holds
       all of them.
    3. The elder rule over each rank's edges in key order, then over the
       edges the children of each node of a binary tree of ranks could not
       decide (one superstep per level, ``ceil(log2 p)``). At a merge of
       components, one whose labels are all sealed has a known root; if
       another component's root here is older, it dies here, whatever the
       other ranks hold. A merge of two components that may reach outside
       the range (or of such a component with the oldest sealed one) goes
       up as one edge per component, from a label of it to the vertex.
       Every decision is the serial elder rule's, so the pairs do not
       depend on the number of ranks.
    4. With ``tree``, the roots of the components that deaths merge into,
       asked up the tree as intervals of time per component label and
       answered as step functions on the way down (``ceil(log2 p)`` more
       supersteps), and the highest vertex of each final component (one
       superstep).

    Each internal node of the tree is led by a different rank, so a rank
    receives at most the undecided edges of two ranges of ranks: for a
    slab decomposition, the basins that touch the range's two faces.

    References
    ----------
    .. [1] D. Morozov, G. Weber, "Distributed merge trees", PPoPP 2013
       (deciding locally what the boundary does not affect).
    .. [2] E. Le Guillou, M. Fortin, J. Tierny, "Distributed discrete Morse
       sandwich", IEEE TPDS 2026.
    """
    comm = domain.comm
    st = domain.kernels.sweep_graph(key_owned, apex)
    lab_owned = st.labels()
    lo, hi = st.entries()
    n = int(domain.vertex_layout.global_size)
    labels = sorted_unique(np.concatenate((lab_owned, lo, st.minima()))).astype(np.int64)
    res = distributed_elder(comm, n, lo, hi, labels, key_owned=st.key_owned,
                            lab_owned=lab_owned, tree=tree, ledger=ledger)
    res.minima = np.asarray(st.minima_, np.int64)
    return res


# -- labels and edges on one rank -----------------------------------------------------------
class GridSweepGraph:
    """Pointer jumping and basin entries on a grid slab, in a padded array so
    that every neighbour offset is a constant flat shift (pads never win).

    The grid's kind gives the graph: ``offsets`` of a vertex's neighbours
    (x, y[, z]) and ``lower_links(graph)``, the number of components of each
    owned vertex's lower link in that graph (from ``graph.PK``, ``opos``,
    ``strides`` and the lower-neighbour masks ``lower``). Not collective
    to build; :meth:`labels` exchanges ghosts.
    """

    def __init__(self, grid, key_owned, apex: bool, offsets: np.ndarray, lower_links):
        self.domain = grid
        self.lower_links = lower_links
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
        strides = np.array(idx.strides[::-1]) // idx.itemsize      # (x, y[, z]) strides
        self.delta = offsets @ strides
        self.strides = strides
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
        L = self.lower_links(self)
        cand = opos[(L >= 2) | self.bnd]
        cand = cand[stable_argsort(PK[cand])]
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


class ComplexSweepGraph:
    """The same on a SimplicialComplex: half-edges out of owned vertices.
    Not collective to build; :meth:`labels` exchanges ghosts."""

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

