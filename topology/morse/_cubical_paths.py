"""V-paths of the cubical gradient (numba, not collective): down the
vertex-edge pairs to minima, down the edge-square pairs from the squares'
edges, and up the cube-square pairs to critical cubes. Each kernel takes a
batch of ``(query, position)`` items and returns the paths that ended here
(``done``) and those that leave this rank's slab (``exit``: the route
vertex whose owner goes on, and the cell's global doubled index)."""

from __future__ import annotations

import numpy as np

from dmsolve.jit import njit

from ..kernels import grow, heap
from ._cubical_cells import (CRITICAL, _code, _coords, _coords_signed, _leave, _step, _stride,
                             cell_code, cell_key)

__all__ = ["cubical_ascend_cubes", "cubical_descend_edges", "cubical_descend_vertices",
           "cubical_edge_ends", "cubical_square_sides"]


@njit(cache=True, nogil=True)
def cubical_ascend_cubes(O, g, C, qry, pos):  # pragma: no cover
    """Follow the V-paths up from cubes: each item ``(query, cube position)``
    ends at a critical cube (``done``: its filtration key), the outside of
    the grid (-1), or another rank.

    A cube paired with a square goes on to the square's other cofacet; a
    square of the grid has at most two, so the paths never branch. Returns
    ``(done_q, done_code, exit_q, exit_route, exit_cell)``. Not collective.

    A path carries its cube's doubled coordinates and moves them by two
    along the pairing's axis: no division per step.
    """
    X, Y, oz0, oz1, NZ = g.X, g.Y, g.oz0, g.oz1, g.NZ
    DX, DY = g.DX, g.DY
    DZ = g.DZ
    g0 = g.g0
    XY = X * Y
    n = qry.shape[0]
    rq = np.empty(n, np.int64)
    rc = np.empty(n, np.int64)
    xq = np.empty(n, np.int64)
    xv = np.empty(n, np.int64)
    xg = np.empty(n, np.int64)
    nr = 0
    nx = 0
    base = g0 * XY
    sdb = np.array([1, DX, DX * DY])                # doubled-grid stride per axis
    lo_v, hi_v = oz0 * XY, oz1 * XY                 # owned vertices
    for i in range(n):
        q = pos[i]
        cz, cy, cx = _coords_signed(q, DX, DY)
        rz, ry, rx = 1 + (cz & 1), 1 + (cy & 1), 1 + (cx & 1)   # a step keeps parities
        while True:
            if cz < 0 or cz >= DZ:
                xq[nx] = qry[i]
                xv[nx], xg[nx] = _leave(O, g, q, False)
                nx += 1
                break
            # the top vertex of the cube: the largest order of its corners
            # (the first corner u, then +x, +y, +z: _top's order, no division)
            u = ((cz >> 1) * Y + (cy >> 1)) * X + (cx >> 1)
            v = u
            best = O[u]
            for ez in range(rz):
                for ey in range(ry):
                    for ex in range(rx):
                        w = u + ez * XY + ey * X + ex
                        if O[w] > best:
                            best, v = O[w], w
            if v < lo_v or v >= hi_v:
                xq[nx] = qry[i]
                xv[nx], xg[nx] = base + v, q + 2 * g0 * DY * DX
                nx += 1
                break
            c = _code(C, q)
            if c == CRITICAL:
                rq[nr], rc[nr] = qry[i], cell_key(best, _step(C, q))
                nr += 1
                break
            a = (c - 1) >> 1
            s = 1 if (c - 1) & 1 else -1
            co = (cx if a == 0 else (cy if a == 1 else cz + 2 * g0)) + 2 * s
            top = DX - 1 if a == 0 else (DY - 1 if a == 1 else 2 * NZ - 2)
            if co < 0 or co > top:
                rq[nr], rc[nr] = qry[i], -1
                nr += 1
                break
            q += 2 * s * sdb[a]             # past the paired square, its other cofacet
            if a == 0:
                cx += 2 * s
            elif a == 1:
                cy += 2 * s
            else:
                cz += 2 * s
    return rq[:nr], rc[:nr], xq[:nx], xv[:nx], xg[:nx]


@njit(cache=True, nogil=True)
def cubical_descend_edges(O, g, C, qry, pos):  # pragma: no cover
    """Morse boundaries (mod 2) of chains of edges, one chain per query.

    Items ``(qry, edge position)`` grouped by query (``qry`` sorted). An
    edge paired with a square is replaced by the square's other three edges,
    one paired with its vertex vanishes, a critical one is kept. Edges are
    expanded latest first in (top order, step), which V-paths strictly
    decrease, so copies of an edge cancel mod 2 before it is expanded.
    Returns ``(done_q, done_code, exit_q, exit_route, exit_cell)``, critical
    edges with repetitions (parity decides). Not collective.

    Each edge travels with its first vertex and its axis, from which its
    top vertex and the square's other edges follow with no division, and
    the heap compares one key, ``-cell_key(top order, step)`` (an edge's step
    is unique in its top's lower star).
    """
    X, Y, oz0, oz1, g0 = g.X, g.Y, g.oz0, g.oz1, g.g0
    DX, DY = g.DX, g.DY
    base = g.base
    lo_v, hi_v = oz0 * X * Y, oz1 * X * Y          # owned vertices
    sdb = np.array([1, DX, DX * DY])                # doubled-grid stride per axis
    svb = np.array([1, X, X * Y])                   # vertex stride per axis
    kb = np.array([1, 3, 9])                        # star offset step per axis
    m = qry.shape[0]
    cap = max(m, 16)
    rq = np.empty(cap, np.int64)
    rc = np.empty(cap, np.int64)
    # exits start small (they grow as needed): only paths that reach another
    # rank's planes need them, and at size m they were a third of D1's peak
    xq = np.empty(16, np.int64)
    xv = np.empty(16, np.int64)
    xg = np.empty(16, np.int64)
    nr = 0
    nx = 0
    HK = np.empty(64, np.int64)             # -cell_key(top order, step)
    HE = np.empty((64, 3), np.int64)        # (position, first vertex, axis)
    add = np.empty((4, 3), np.int64)
    k = 0
    while k < m:
        qq = qry[k]
        n = 0
        while True:
            if k < m and qry[k] == qq:
                e = pos[k]
                cz, cy, cx = _coords(e, DX, DY)
                b = 0 if cx & 1 else (1 if cy & 1 else 2)
                add[0, 0] = e
                add[0, 1] = ((cz >> 1) * Y + (cy >> 1)) * X + (cx >> 1)
                add[0, 2] = b
                na = 1
                k += 1
            elif n > 0:
                n = heap.pop3(HK, HE, n)
                key, e, u, b = HK[n], HE[n, 0], HE[n, 1], HE[n, 2]
                par = 1
                while n > 0 and HK[0] == key:
                    n = heap.pop3(HK, HE, n)
                    par ^= 1
                if par == 0:
                    continue
                c = _code(C, e)
                a = (c - 1) >> 1
                s = 1 if (c - 1) & 1 else -1
                sa, sb = sdb[a], sdb[b]
                sq = e + s * sa                       # the square paired with e
                # its sides but e, in the order of the square's odd axes (a
                # and b): across b, the two edges along a at sq -+ sdb[b]
                # (first vertices ua and ua + svb[b]); across a, the edge
                # along b at sq + s * sa (first vertex u + s * svb[a])
                ua = u if s > 0 else u - svb[a]
                na = 0
                for ax in range(3):
                    if ax == b:
                        add[na, 0], add[na, 1], add[na, 2] = sq - sb, ua, a
                        add[na + 1, 0], add[na + 1, 1], add[na + 1, 2] = sq + sb, ua + svb[b], a
                        na += 2
                    elif ax == a:
                        add[na, 0], add[na, 1], add[na, 2] = sq + s * sa, u + s * svb[a], b
                        na += 1
            else:
                break
            for r in range(na):
                e, u, b = add[r, 0], add[r, 1], add[r, 2]
                w = u + svb[b]
                if O[w] > O[u]:
                    v, kk = w, 13 - kb[b]
                else:
                    v, kk = u, 13 + kb[b]
                if v < lo_v or v >= hi_v:
                    if nx == xq.shape[0]:
                        xq, xv, xg = grow(xq, nx), grow(xv, nx), grow(xg, nx)
                    xq[nx], xv[nx], xg[nx] = qq, base + v, e + 2 * g0 * DY * DX
                    nx += 1
                    continue
                c = _code(C, e)
                if c == CRITICAL:
                    if nr == rq.shape[0]:
                        rq, rc = grow(rq, nr), grow(rc, nr)
                    rq[nr], rc[nr] = qq, cell_code(base + v, kk)
                    nr += 1
                    continue
                if (c - 1) >> 1 == b:
                    continue                          # paired with its vertex
                if n == HK.shape[0]:
                    HK, HE = grow(HK, n), grow(HE, n)
                n = heap.push3(HK, HE, n, -cell_key(O[v], _step(C, e)), e, u, b)
    return rq[:nr], rc[:nr], xq[:nx], xv[:nx], xg[:nx]


@njit(cache=True, nogil=True)
def cubical_square_sides(g, pos):  # pragma: no cover
    """For squares at ``pos``: their two cofacet cube positions (-1 outside
    the grid), and their four edge positions. Not collective."""
    g0, NZ = g.g0, g.NZ
    DX, DY = g.DX, g.DY
    n = pos.shape[0]
    cubes = np.full((n, 2), -1, np.int64)
    edges = np.empty((n, 4), np.int64)
    for i in range(n):
        q = pos[i]
        cz, cy, cx = _coords(q, DX, DY)
        ne = 0
        for b in range(3):
            c = cx if b == 0 else (cy if b == 1 else cz + 2 * g0)
            top = DX - 1 if b == 0 else (DY - 1 if b == 1 else 2 * NZ - 2)
            sb = _stride(b, DX, DY)
            if c & 1:
                edges[i, ne] = q - sb
                edges[i, ne + 1] = q + sb
                ne += 2
            elif top > 0:
                if c - 1 >= 0:
                    cubes[i, 0] = q - sb
                if c + 1 <= top:
                    cubes[i, 1] = q + sb
    return cubes, edges




@njit(cache=True, nogil=True)
def cubical_edge_ends(g, pos):  # pragma: no cover
    """The two vertex positions of the edges at ``pos``. Not collective."""
    DX, DY = g.DX, g.DY
    out = np.empty((pos.shape[0], 2), np.int64)
    for i in range(pos.shape[0]):
        q = pos[i]
        cz, cy, cx = _coords(q, DX, DY)
        st = 1 if cx & 1 else (DX if cy & 1 else DX * DY)
        out[i, 0], out[i, 1] = q - st, q + st
    return out


@njit(cache=True, nogil=True)
def cubical_descend_vertices(O, g, C, qry, pos):  # pragma: no cover
    """Follow vertex-edge pairs down from vertex positions ``pos`` to a
    minimum (``done``: its key, ``cell_key(order, 0)``) or a vertex of another rank (exit).
    Returns ``(done_q, done_min, exit_q, exit_route, exit_cell)``. Not collective."""
    X, Y, oz0, oz1, g0 = g.X, g.Y, g.oz0, g.oz1, g.g0
    DX, DY = g.DX, g.DY
    base = g.base
    n = qry.shape[0]
    rq = np.empty(n, np.int64)
    rc = np.empty(n, np.int64)
    xq = np.empty(n, np.int64)
    xv = np.empty(n, np.int64)
    xg = np.empty(n, np.int64)
    nr = 0
    nx = 0
    for i in range(n):
        q = pos[i]
        while True:
            cz, cy, cx = _coords(q, DX, DY)
            vz = cz >> 1
            v = (vz * Y + (cy >> 1)) * X + (cx >> 1)
            if vz < oz0 or vz >= oz1:
                xq[nx], xv[nx], xg[nx] = qry[i], base + v, q + 2 * g0 * DY * DX
                nx += 1
                break
            c = _code(C, q)
            if c == CRITICAL:
                rq[nr], rc[nr] = qry[i], cell_key(O[v], 0)
                nr += 1
                break
            a = (c - 1) >> 1
            s = 1 if (c - 1) & 1 else -1
            q += 2 * s * _stride(a, DX, DY)          # across the edge to its other vertex
    return rq[:nr], rc[:nr], xq[:nx], xv[:nx], xg[:nx]
