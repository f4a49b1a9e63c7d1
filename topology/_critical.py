"""Critical points of a vertex scalar field, typed with TTK's codes.

A vertex is classified by the numbers of connected components of its lower
and upper link in the global ``(value, id)`` order. On a :class:`Grid` the
counts come from a table over all lower/upper neighbour masks; on a
:class:`SimplicialComplex` from one connected-components pass over the
link graphs of all owned vertices at once.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components as _cc

from mpi4py import MPI

from dmsolve import DistVector

from ._complex import owned_global_ids
from ._grid import Grid, component_table, link_structure
from ._order import global_order

__all__ = ["critical_points", "CriticalPoints", "classify", "MINIMUM", "SADDLE1",
           "SADDLE2", "MAXIMUM", "DEGENERATE", "REGULAR", "TYPE_NAMES"]

MINIMUM, SADDLE1, SADDLE2, MAXIMUM, DEGENERATE, REGULAR = 0, 1, 2, 3, 4, 5
TYPE_NAMES = {MINIMUM: "minimum", SADDLE1: "1-saddle", SADDLE2: "2-saddle",
              MAXIMUM: "maximum", DEGENERATE: "degenerate", REGULAR: "regular"}


class CriticalPoints:
    """Critical types of every vertex (TTK codes) and the global vertex order.

    Attributes
    ----------
    types : DistVector of int32 on the vertex layout
        0 minimum, 1 1-saddle, 2 2-saddle, 3 maximum, 4 degenerate, 5 regular.
    order : DistVector of int64
        Position of each vertex in the ``(value, id)`` order.
    """

    def __init__(self, types: DistVector, order: DistVector, ids: np.ndarray | None = None):
        self.types = types
        self.order = order
        # global ids of the owned entries when they differ from the layout
        # index (a complex partitioned by METIS or RCB)
        self._ids = ids

    @property
    def comm(self):
        return self.types.comm

    def gather(self) -> tuple[np.ndarray, np.ndarray]:
        """``(global_ids, types)`` of all critical vertices (type != 5), sorted
        by id, on every rank. Collective on ``comm``."""
        t = self.types.local
        pick = np.flatnonzero(t != REGULAR)
        ids = (pick + self.types.layout.start).astype(np.int64) if self._ids is None \
            else self._ids[pick]
        parts = self.comm.allgather((ids, t[pick].astype(np.int32)))
        ids = np.concatenate([p[0] for p in parts])
        types = np.concatenate([p[1] for p in parts])
        if self._ids is None:
            return ids, types    # ranks own ascending id ranges: rank order is id order
        o = np.argsort(ids)
        return ids[o], types[o]

    def counts(self) -> dict[str, int]:
        """Number of vertices of each type, by TTK name. Collective on ``comm``."""
        total = np.bincount(self.types.local, minlength=6)[:6].astype(np.int64)
        self.comm.Allreduce(MPI.IN_PLACE, total, op=MPI.SUM)
        return {TYPE_NAMES[i]: int(total[i]) for i in range(6)}


def classify(lower: np.ndarray, upper: np.ndarray, dimension: int,
             on_boundary: np.ndarray | None = None,
             lower_on_boundary: np.ndarray | None = None,
             upper_on_boundary: np.ndarray | None = None) -> np.ndarray:
    """TTK critical type from lower/upper link component counts. Not collective.

    ``(0, 1)`` minimum, ``(1, 0)`` maximum, ``(1, 1)`` regular; in 2D (and
    below) ``(2, 1)``, ``(1, 2)``, ``(2, 2)`` are 1-saddles; in 3D ``(2, 1)``
    is a 1-saddle and ``(1, 2)`` a 2-saddle; anything else is degenerate.
    In 3D a boundary vertex with ``(1, 1)`` is a 1-saddle when only upper-link
    vertices lie on the boundary and a 2-saddle when only lower-link ones do
    (TTK's ``ScalarFieldCriticalPoints``).
    """
    L = np.asarray(lower)
    U = np.asarray(upper)
    t = np.full(L.shape, DEGENERATE, dtype=np.int32)
    t[(L == 0) & (U == 1)] = MINIMUM
    t[(L == 1) & (U == 0)] = MAXIMUM
    regular = (L == 1) & (U == 1)
    t[regular] = REGULAR
    if dimension <= 2:
        t[((L == 2) & (U == 1)) | ((L == 1) & (U == 2)) | ((L == 2) & (U == 2))] = SADDLE1
    else:
        t[(L == 2) & (U == 1)] = SADDLE1
        t[(L == 1) & (U == 2)] = SADDLE2
        if on_boundary is not None:
            b = regular & on_boundary
            lb, ub = lower_on_boundary, upper_on_boundary
            t[b & ub & ~lb] = SADDLE1
            t[b & lb & ~ub] = SADDLE2
    return t


def critical_points(domain, values) -> CriticalPoints:
    """Classify every vertex of ``domain`` by the field ``values``.

    Parameters
    ----------
    domain : Grid or SimplicialComplex
    values : DistVector on ``domain.vertex_layout``, or the full global array
        on every rank. Must be finite.

    Returns
    -------
    CriticalPoints
        ``.gather()`` gives ``(global_ids, types)`` of the critical vertices.

    Notes
    -----
    Collective on ``domain.comm``: the global order (a sample sort), one
    ghost exchange of the order, and on a 3D complex one of boundary flags.
    Ties in value are broken by global vertex id, so the result does not
    depend on the number of ranks.

    References
    ----------
    .. [1] T. Banchoff, "Critical points and curvature for embedded
       polyhedral surfaces", Amer. Math. Monthly 77(5), 1970.
    .. [2] J. Tierny et al., "The Topology ToolKit", IEEE TVCG 24(1), 2018.
    """
    vec = domain.vertex_values(values)
    ids = owned_global_ids(domain)
    order = global_order(vec, ids=ids)
    ghosted = domain.ghosted(order.local)
    if isinstance(domain, Grid):
        types = _grid_types(domain, ghosted)
    else:
        types = _complex_types(domain, ghosted)
    return CriticalPoints(DistVector(vec.layout, types), order, ids)


# -- implicit grid: table look-up --------------------------------------------------------
def _grid_types(grid: Grid, order: np.ndarray) -> np.ndarray:
    dim = grid.dimension
    g0, g1 = grid.ghosted_planes
    p0, p1 = grid.owned_planes
    n_own = grid.local_num_vertices
    if n_own == 0:
        return np.zeros(0, dtype=np.int32)
    dims = (g1 - g0,) + tuple(grid.shape[:-1][::-1])       # numpy (z, y, x) order
    # pad by one with -1 ("no vertex") so that every offset is a plain slice
    P = np.full(tuple(d + 2 for d in dims), -1, dtype=np.int64)
    P[tuple(slice(1, d + 1) for d in dims)] = order.reshape(dims)
    region = [(1 + p0 - g0, 1 + p1 - g0)] + [(1, d + 1) for d in dims[1:]]
    C = P[tuple(slice(a, b) for a, b in region)]
    offsets, _ = link_structure(dim)
    lower = np.zeros(C.shape, dtype=np.uint16)
    upper = np.zeros(C.shape, dtype=np.uint16)
    tmp = np.empty(C.shape, dtype=bool)
    for j, off in enumerate(offsets):
        S = P[tuple(slice(a + o, b + o) for (a, b), o in zip(region, off[::-1]))]
        bit = np.uint16(1 << j)
        np.greater(S, C, out=tmp)
        upper[tmp] |= bit
        np.less(S, C, out=tmp)
        tmp &= S >= 0
        lower[tmp] |= bit
    table = component_table(dim)
    L = table[lower.ravel()]
    U = table[upper.ravel()]
    if dim < 3:
        return classify(L, U, dim)
    ids = np.arange(grid.vertex_layout.start, grid.vertex_layout.stop, dtype=np.int64)
    # boundary of the owned slab from one mask per axis (no coordinates)
    z = np.arange(p0, p1)
    onb = np.zeros(C.shape, dtype=bool)
    onb |= ((z == 0) | (z == grid.shape[2] - 1))[:, None, None]
    onb[:, [0, -1], :] = True
    onb[:, :, [0, -1]] = True
    onb = onb.ravel()
    cand = np.flatnonzero(onb & (L == 1) & (U == 1))
    lb = np.zeros(n_own, dtype=bool)
    ub = np.zeros(n_own, dtype=bool)
    if cand.size:
        local = np.unravel_index(cand, C.shape)
        at = np.ravel_multi_index(tuple(c + a for c, (a, _) in zip(local, region)), P.shape)
        centre = P.ravel()[at]
        coords = grid.coordinates(ids[cand])
        n = np.array(grid.shape)
        for off in offsets:
            shift = int(np.ravel_multi_index(tuple(np.array(off[::-1]) + 1), P.shape)) - \
                int(np.ravel_multi_index((1,) * dim, P.shape))
            nb = P.ravel()[at + shift]
            nc = coords + off
            nb_b = np.any((nc == 0) | (nc == n - 1), axis=1)
            lb[cand] |= (nb >= 0) & (nb < centre) & nb_b
            ub[cand] |= (nb > centre) & nb_b
    return classify(L, U, dim, onb, lb, ub)


# -- explicit complex: one connected-components pass over all link graphs ------------------
def _complex_types(cx, order: np.ndarray) -> np.ndarray:
    n_loc = order.size
    own_pos = cx.owned_positions()
    n_own = own_pos.size
    is_own = np.zeros(n_loc, dtype=bool)
    is_own[own_pos] = True
    E = cx.local_simplex_positions(1)
    T = cx.local_simplex_positions(2) if cx.dimension >= 2 else np.zeros((0, 3), np.int64)
    # half-edges v -> u out of owned vertices v: the link vertices of v
    src = np.concatenate((E[:, 0], E[:, 1]))
    dst = np.concatenate((E[:, 1], E[:, 0]))
    keep = is_own[src]
    src, dst = src[keep], dst[keep]
    key = src * n_loc + dst
    o = np.argsort(key)
    src, dst, key = src[o], dst[o], key[o]
    # link edges u - w of v, one per triangle (v, u, w) with v owned
    a, b = [], []
    for i in range(3):
        v, u, w = T[:, i], T[:, (i + 1) % 3], T[:, (i + 2) % 3]
        m = is_own[v]
        a.append(np.searchsorted(key, v[m] * n_loc + u[m]))
        b.append(np.searchsorted(key, v[m] * n_loc + w[m]))
    a = np.concatenate(a) if a else np.zeros(0, np.int64)
    b = np.concatenate(b) if b else np.zeros(0, np.int64)
    is_lower = order[dst] < order[src]
    same = is_lower[a] == is_lower[b]   # lower-lower or upper-upper link edges
    nh = src.size
    g = sp.coo_matrix((np.ones(int(same.sum())), (a[same], b[same])), shape=(nh, nh))
    ncomp, label = _cc(g, directed=False)
    # every component lies in one vertex's link and on one side
    first = np.full(ncomp, -1, dtype=np.int64)
    first[label[::-1]] = np.arange(nh - 1, -1, -1)
    comp_src = src[first]
    comp_lower = is_lower[first]
    rank_of = np.full(n_loc, -1, dtype=np.int64)
    rank_of[own_pos] = np.arange(n_own)
    L = np.bincount(rank_of[comp_src[comp_lower]], minlength=n_own)
    U = np.bincount(rank_of[comp_src[~comp_lower]], minlength=n_own)
    if cx.dimension < 3:
        return classify(L, U, cx.dimension)
    onb_own = cx.owned_boundary_vertices()
    onb = cx.ghosted(onb_own.astype(np.int64)).astype(bool)
    lb = np.zeros(n_loc, dtype=bool)
    ub = np.zeros(n_loc, dtype=bool)
    np.logical_or.at(lb, src, is_lower & onb[dst])
    np.logical_or.at(ub, src, ~is_lower & onb[dst])
    return classify(L, U, 3, onb_own, lb[own_pos], ub[own_pos])
