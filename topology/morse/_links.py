"""Link components of the owned vertices under a vertex order: the numbers
of components of each vertex's lower and upper link, from which critical
points are typed, and the boundary flags TTK's 3D classification needs.

Freudenthal grids look up the component count of each mask of lower (upper)
neighbours in :func:`topology.core.component_table`; cubical grids join the
lower axis neighbours through the lower squares, and the upper neighbours of
the dual graph (:func:`topology.core.cubical_structure`). Not collective."""

from __future__ import annotations

import functools

import numpy as np

from dmsolve.jit import njit

from ..core import component_table, cubical_structure, grid_coordinates, link_structure
from ..kernels import find_root, union_min
from ._cubical_cells import CENTRE, cube_geometry, star_tables

__all__ = ["slab_link_components", "cubical_link_components", "cubical_link_graph",
           "cubical_link_counts"]


def slab_link_components(shape, ghosted, owned, ghosted_order: np.ndarray):
    """:meth:`Grid.link_components` of the planes ``owned = (p0, p1)`` of a
    grid of ``shape``, from the order (any numbers ordered as the global
    ``(value, id)`` order) of the planes ``ghosted = (g0, g1)``, which hold
    them and one more plane on each side where there is one. Not collective.
    """
    dim = len(shape)
    g0, g1 = ghosted
    p0, p1 = owned
    plane_size = int(np.prod(shape[:-1]))
    n_own = (p1 - p0) * plane_size
    if n_own == 0:
        none = np.zeros(0, dtype=np.int64)
        return none, none, None, None, None
    dims = (g1 - g0,) + tuple(shape[:-1][::-1])       # numpy (z, y, x) order
    # pad by one with -1 ("no vertex") so that every offset is a plain slice
    P = np.full(tuple(d + 2 for d in dims), -1, dtype=np.int64)
    P[tuple(slice(1, d + 1) for d in dims)] = ghosted_order.reshape(dims)
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
        return L, U, None, None, None
    ids = np.arange(p0 * plane_size, p1 * plane_size, dtype=np.int64)
    # boundary of the owned slab from one mask per axis (no coordinates)
    z = np.arange(p0, p1)
    onb = np.zeros(C.shape, dtype=bool)
    onb |= ((z == 0) | (z == shape[2] - 1))[:, None, None]
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
        coords = grid_coordinates(shape, ids[cand])
        n = np.array(shape)
        for off in offsets:
            shift = int(np.ravel_multi_index(tuple(np.array(off[::-1]) + 1), P.shape)) - \
                int(np.ravel_multi_index((1,) * dim, P.shape))
            nb = P.ravel()[at + shift]
            nc = coords + off
            nb_b = np.any((nc == 0) | (nc == n - 1), axis=1)
            lb[cand] |= (nb >= 0) & (nb < centre) & nb_b
            ub[cand] |= (nb > centre) & nb_b
    return L, U, onb, lb, ub


@functools.lru_cache(maxsize=None)
def cubical_link_graph(dimension: int, dual: bool):
    """The link graph whose components decide merges in a sweep of a cubical
    grid: ``(offsets, nodes, edges)``. ``offsets`` (x, y[, z]) are all
    ``3**d - 1`` neighbours; ``nodes`` index the graph's vertices among them
    (the axis neighbours, or all in the dual graph); ``edges`` rows ``(i,
    j, w)`` join nodes ``i`` and ``j`` when both are lower and, for ``w >=
    0``, so is neighbour ``w`` (the far corner of the square that joins two
    axis neighbours). Not collective."""
    full, _ = cubical_structure(dimension, dual=True)
    index = {tuple(v): i for i, v in enumerate(full.tolist())}
    graph, link = cubical_structure(dimension, dual)
    nodes = np.array([index[tuple(v)] for v in graph.tolist()], np.int64)
    edges = []
    for a, b in link.tolist():
        u, w = graph[a], graph[b]
        far = index[tuple(u + w)] if not dual else -1
        edges.append((nodes[a], nodes[b], far))
    return full, nodes, np.array(edges, np.int64).reshape(-1, 3)


@njit(cache=True)
def cubical_link_counts(PK, opos, shift, nodes, edges):  # pragma: no cover
    """Number of components of the lower part of the link graph
    (:func:`cubical_link_graph`, neighbour ``j`` at position ``p + shift[j]``, lower
    when its key is smaller) of every position in ``opos``. Not collective."""
    m = shift.shape[0]
    low = np.zeros(m, np.bool_)
    parent = np.empty(m, np.int64)
    out = np.empty(opos.shape[0], np.int64)
    for i in range(opos.shape[0]):
        p = opos[i]
        c = PK[p]
        for j in range(m):
            low[j] = PK[p + shift[j]] < c
            parent[j] = j
        for r in range(edges.shape[0]):
            a, b, w = edges[r, 0], edges[r, 1], edges[r, 2]
            if low[a] and low[b] and (w < 0 or low[w]):
                union_min(parent, a, b)
        cnt = 0
        for j in range(nodes.shape[0]):
            k = nodes[j]
            if low[k] and find_root(parent, k) == k:
                cnt += 1
        out[i] = cnt
    return out


def cubical_link_components(grid, ghosted_order: np.ndarray):
    """:meth:`Grid.link_components` of a cubical grid (see there). Not collective."""
    g = cube_geometry(grid)
    O = np.ascontiguousarray(ghosted_order, np.int64)
    n_own = (g.oz1 - g.oz0) * g.X * g.Y
    L = np.zeros(n_own, np.int64)
    U = np.zeros(n_own, np.int64)
    onb = np.zeros(n_own, bool)
    lb = np.zeros(n_own, bool)
    ub = np.zeros(n_own, bool)
    if n_own:
        dim, sub, _, _, _ = star_tables()
        _links(O, g, grid.dimension, dim, sub, L, U, onb, lb, ub)
    if grid.dimension < 3:
        return L, U, None, None, None
    return L, U, onb, lb, ub


@njit(cache=True)
def _links(O, g, d, dim, sub, L, U, onb, lb, ub):  # pragma: no cover
    """Lower link components (lower axis neighbours, joined through lower
    squares), upper components (higher neighbours of the dual graph, joined
    when no coordinate has opposite signs) and the boundary flags of every
    owned vertex. Not collective."""
    X, Y, Z, oz0, oz1, g0, NZ = g.X, g.Y, g.Z, g.oz0, g.oz1, g.g0, g.NZ
    low = np.zeros(27, np.bool_)
    up = np.zeros(27, np.bool_)
    bnd = np.zeros(27, np.bool_)
    parent = np.empty(27, np.int64)
    xlo = 1 if X == 1 else 0            # a 2D grid: no x axis
    i = 0
    for zl in range(oz0, oz1):
        for y in range(Y):
            for x in range(X):
                vi = (zl * Y + y) * X + x
                ov = O[vi]
                for k in range(27):
                    low[k] = False
                    up[k] = False
                    bnd[k] = False
                    parent[k] = k
                    if k == CENTRE:
                        continue
                    zz, yy, xx = zl + k // 9 - 1, y + (k // 3) % 3 - 1, x + k % 3 - 1
                    if 0 <= zz < Z and 0 <= yy < Y and 0 <= xx < X:
                        o = O[(zz * Y + yy) * X + xx]
                        low[k] = o < ov
                        up[k] = o > ov
                        gz = zz + g0
                        bnd[k] = gz == 0 or gz == NZ - 1 or yy == 0 or yy == Y - 1 or \
                            (xlo == 0 and (xx == 0 or xx == X - 1))
                gz = zl + g0
                onb[i] = gz == 0 or gz == NZ - 1 or y == 0 or y == Y - 1 or \
                    (xlo == 0 and (x == 0 or x == X - 1))
                # lower link: axis neighbours, joined by lower squares
                for k in range(27):
                    if dim[k] == 2 and low[k]:
                        ok = True
                        for j in range(3):
                            if not low[sub[k, j]]:
                                ok = False
                        if ok:
                            # join its two axis neighbours (not the diagonal)
                            a = -1
                            for j in range(3):
                                if dim[sub[k, j]] == 1:
                                    if a < 0:
                                        a = sub[k, j]
                                    else:
                                        union_min(parent, a, sub[k, j])
                cnt = 0
                for k in range(27):
                    if dim[k] == 1 and low[k]:
                        if find_root(parent, k) == k:
                            cnt += 1
                        if bnd[k]:
                            lb[i] = True
                L[i] = cnt
                for k in range(27):
                    parent[k] = k
                for k in range(27):
                    if not up[k]:
                        continue
                    if bnd[k]:
                        ub[i] = True
                    for k2 in range(k + 1, 27):
                        if up[k2] and _compatible(k, k2):
                            union_min(parent, k, k2)
                cnt = 0
                for k in range(27):
                    if up[k] and find_root(parent, k) == k:
                        cnt += 1
                U[i] = cnt
                i += 1


@njit(cache=True, inline="always")
def _compatible(a, b):  # pragma: no cover
    """Whether two star offsets lie in one cube with the centre (no
    coordinate of opposite signs)."""
    for div in (9, 3, 1):
        u = (a // div) % 3 - 1
        w = (b // div) % 3 - 1
        if u * w < 0:
            return False
    return True

