"""What D(d-1) of a complex needs of it, checked, and what its essential
classes are: a manifold (no (d-1)-simplex with more than two cofaces, no
dangling simplex, no pinched vertex or edge), and the essential (d-1)-classes
from the Euler characteristic of every vertex's lower star."""

from __future__ import annotations

import itertools

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from dmsolve import agree
from dmsolve.bsp import BSP, search_sorted

from ..core import search_rows
from ._parts import essential_part

__all__ = ["check_manifold", "euler_essential"]


def check_manifold(cx) -> None:
    """Refuse, with the same ValueError on every rank, a complex on which
    the duality behind D(d-1) fails: a (d-1)-simplex with more than two
    cofaces, a (d-1)-simplex or vertex in no d-simplex, or a pinched vertex
    or edge (see :func:`_pinched`). The message names the smallest global
    vertex id of the first kind of defect found, so it does not depend on the
    partition. Collective on ``cx.comm`` (one small ``Allreduce``)."""
    d = cx.dimension
    none = np.iinfo(np.int64).max
    n = max(cx.num_vertices, 1)
    # per defect kind: the smallest (encoded) global vertex ids where it occurs
    worst = np.full(5, none, dtype=np.int64)

    def note(kind, gids):
        gids = np.asarray(gids, dtype=np.int64)
        if gids.size:
            worst[kind] = min(worst[kind], int(gids.min()))

    tops, _ = cx.local_simplices(d)
    facets, _ = cx.local_simplices(d - 1)
    count = np.zeros(facets.shape[0], dtype=np.int64)
    for cols in itertools.combinations(range(d + 1), d):
        np.add.at(count, search_rows(facets, tops[:, cols], cx.num_vertices), 1)
    owned = np.arange(facets.shape[0])[cx.owned_slice(d - 1)] if d - 1 >= 1 \
        else cx.owned_positions()
    gfacet = np.sort(cx.layout_to_global(facets[owned]), axis=1)
    note(0, gfacet[count[owned] > 2, 0])
    note(1, gfacet[count[owned] < 1, 0])
    used = np.zeros(cx.ghosted_ids().size, bool)
    used[cx.local_simplex_positions(d).ravel()] = True
    note(1, cx.owned_global_ids(0)[~used[cx.owned_positions()]])
    link, wrong_chi, edges = _pinched(cx)
    note(2, link)
    note(3, wrong_chi)
    if edges.size:
        note(4, edges[:, 0] * n + edges[:, 1])
    cx.comm.Allreduce(MPI.IN_PLACE, worst, op=MPI.MIN)
    kind = int(np.flatnonzero(worst != none)[0]) if np.any(worst != none) else None
    if kind is None:
        return
    v = int(worst[kind])
    msg = {
        0: "the complex is not a manifold: a %d-simplex at vertex %d has more than two "
           "%d-simplex cofaces (persistence needs at most 2)" % (d - 1, v, d),
        1: "the complex is not pure: vertex %d lies in a simplex that is in no %d-simplex"
           % (v, d),
        2: "the complex is not a manifold: vertex %d is pinched (its link is not connected)"
           % v,
        3: "the complex is not a manifold: the link of vertex %d is neither a sphere nor a "
           "disk (Euler characteristic)" % v,
        4: "the complex is not a manifold: edge (%d, %d) is pinched (its link is not "
           "connected)" % divmod(v, n),
    }[kind]
    raise ValueError(msg + "; persistence_diagram of a complex needs a %d-manifold, "
                     "possibly with boundary" % d)


def _components_per(owner: np.ndarray, a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    """Number of connected components among the nodes of each ``owner``
    value (nodes ``0 .. len(owner)-1``, edges ``a - b`` within one owner)."""
    from scipy.sparse.csgraph import connected_components as _cc
    nn = owner.size
    if nn == 0:
        return np.zeros(n, dtype=np.int64)
    g = sp.coo_matrix((np.ones(a.size, np.int8), (a, b)), shape=(nn, nn))
    ncomp, label = _cc(g, directed=False)
    first = np.full(ncomp, -1, dtype=np.int64)
    first[label[::-1]] = np.arange(nn - 1, -1, -1)
    return np.bincount(owner[first], minlength=n)


def _pinched(cx):
    """Pinched vertices and edges of a pure complex whose (d-1)-simplices have
    at most two cofaces. Not collective: the closed star of an owned vertex
    is complete on its rank.

    In such a complex the link of a vertex is a graph of degree <= 2 (2D)
    or a pseudo-surface (3D), and the complex is a manifold with boundary
    exactly when every vertex link is connected and, in 3D, every edge
    link is connected (the vertex links are then surfaces) and every vertex
    link has the Euler characteristic of a disk (1, on the boundary) or a
    sphere (2, inside). Returns the global ids of the owned vertices whose
    link is not connected, of those whose link's Euler characteristic is
    wrong, and the sorted global vertex pairs of the owned edges whose link
    is not connected.
    """
    d = cx.dimension
    n_loc = cx.ghosted_ids().size
    opos = cx.owned_positions()
    is_own = np.zeros(n_loc, dtype=bool)
    is_own[opos] = True
    gid = cx.global_ids(0)
    E = cx.local_simplex_positions(1)
    T = cx.local_simplex_positions(2)
    # vertex links: nodes are the half-edges v -> u out of owned v, joined
    # through the triangles (v, u, w)
    src = np.concatenate((E[:, 0], E[:, 1]))
    dst = np.concatenate((E[:, 1], E[:, 0]))
    keep = is_own[src]
    src, dst = src[keep], dst[keep]
    key = src * n_loc + dst
    o = np.argsort(key)
    src, key = src[o], key[o]
    a, b = [], []
    for i in range(3):
        v, u, w = T[:, i], T[:, (i + 1) % 3], T[:, (i + 2) % 3]
        m = is_own[v]
        a.append(search_sorted(key, v[m] * n_loc + u[m]))
        b.append(search_sorted(key, v[m] * n_loc + w[m]))
    comps = _components_per(src, np.concatenate(a), np.concatenate(b), n_loc)[opos]
    link = gid[opos][comps > 1]
    wrong_chi = np.zeros(0, np.int64)
    edges = np.zeros((0, 2), np.int64)
    if d == 3:
        Q = cx.local_simplex_positions(3)
        chi = np.zeros(n_loc, dtype=np.int64)
        for rows, sign in ((E, 1), (T, -1), (Q, 1)):
            chi += sign * np.bincount(rows.ravel(), minlength=n_loc)
        want = np.where(cx.owned_boundary_vertices(), 1, 2)
        wrong_chi = gid[opos][(chi[opos] != want) & (comps == 1)]
        edges = _pinched_edges(cx)
    return link, wrong_chi, edges


def _pinched_edges(cx) -> np.ndarray:
    """Sorted global vertex pairs of the owned edges of a tetrahedral complex
    whose link (the triangles around the edge, joined through its
    tetrahedra) is not connected. Not collective."""
    nv = cx.num_vertices
    erows, _ = cx.local_simplices(1)
    trows, _ = cx.local_simplices(2)
    qrows, _ = cx.local_simplices(3)
    nt = max(trows.shape[0], 1)
    # nodes: (edge, triangle) incidences, keyed edge * nt + triangle
    inc_e, inc_t = [], []
    for pair in ((0, 1), (0, 2), (1, 2)):
        inc_e.append(search_rows(erows, trows[:, pair], nv))
        inc_t.append(np.arange(trows.shape[0], dtype=np.int64))
    ie, it = np.concatenate(inc_e), np.concatenate(inc_t)
    key = np.sort(ie * nt + it)
    a, b = [], []
    for i, j in itertools.combinations(range(4), 2):
        k, l = [c for c in range(4) if c not in (i, j)]
        e = search_rows(erows, qrows[:, [i, j]], nv)
        t1 = search_rows(trows, np.sort(qrows[:, [i, j, k]], axis=1), nv)
        t2 = search_rows(trows, np.sort(qrows[:, [i, j, l]], axis=1), nv)
        a.append(search_sorted(key, e * nt + t1))
        b.append(search_sorted(key, e * nt + t2))
    owner = key // nt
    comps = _components_per(owner, np.concatenate(a), np.concatenate(b), erows.shape[0])
    bad = np.flatnonzero(comps > 1)
    own = cx.owned_slice(1)
    bad = bad[(bad >= own.start) & (bad < own.stop)]
    return np.sort(cx.layout_to_global(erows[bad]), axis=1).reshape(-1, 2)


def euler_essential(cx, vec, gids, order, parts):
    """Essential (d-1)-classes of a complex from the Euler characteristic of
    every vertex's lower star: each pair counts at the owners of its two
    vertices (one superstep), and each owner finds its own classes.
    Collective."""
    d = cx.dimension
    lay = vec.layout
    ordg = cx.ghosted(order.local)
    opos = cx.owned_positions()
    rank_of = np.full(ordg.size, -1, dtype=np.int64)
    rank_of[opos] = np.arange(opos.size)
    chi = np.ones(opos.size, dtype=np.int64)
    for k in range(1, d + 1):
        rows = cx.local_simplex_positions(k)
        if rows.size == 0:
            continue
        top = rows[np.arange(rows.shape[0]), np.argmax(ordg[rows], axis=1)]
        r = rank_of[top]
        chi += (-1) ** k * np.bincount(r[r >= 0], minlength=opos.size)
    # counts per (vertex, dimension, birth or death), at the vertex's owner
    idx, col = [], []
    for dim, _, death, _, _, bidx, didx in parts:
        fin = np.isfinite(np.asarray(death, np.float64))
        idx.extend((np.asarray(bidx, np.int64), np.asarray(didx, np.int64)[fin]))
        col.extend((np.full(len(bidx), 2 * dim), np.full(int(fin.sum()), 2 * dim + 1)))
    idx, col = np.concatenate(idx), np.concatenate(col)
    ctx = BSP(cx.comm)
    tag = ctx.tags("euler")
    ctx.send_keyed(tag.euler, idx * (2 * d + 2) + col, np.ones(idx.size, np.int64),
                   lambda key: lay.owner(key // (2 * d + 2)), op="sum")
    keys, cnt = ctx.sync("persistence:euler").reduced(tag.euler, "sum", dtype=np.int64)
    table = np.zeros((lay.local_size, 2 * d + 2), np.int64)
    table[keys // (2 * d + 2) - lay.start, keys % (2 * d + 2)] = cnt
    bal = chi.copy()                          # chi - sum_{k != d-1} (-1)^k dbeta_k
    for k in range(d + 1):
        if k != d - 1:
            bal -= (-1) ** k * (table[:, 2 * k] - table[:, 2 * k + 1])
    ess = (-1) ** (d - 1) * bal - table[:, 2 * (d - 1)] + table[:, 2 * (d - 1) + 1]
    exc = None
    if ess.size and ess.min() < 0:
        exc = RuntimeError("inconsistent Euler balance at vertex %d: the complex is probably "
                           "not a manifold (pinched vertex)" % gids[np.argmin(ess)])
    agree(cx.comm, exc)
    at = np.repeat(np.flatnonzero(ess > 0), ess[ess > 0])
    return essential_part(d - 1, gids[at], at + lay.start, vec.local[at])
