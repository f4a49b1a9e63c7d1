"""The cubical complex of a grid: lower-star discrete gradient, D1 of 3D data
from its Morse complex, and the link counts that type critical points.

Cells live on the doubled grid (Khalimsky coordinates): the cell with
doubled coordinates ``c`` has the vertices ``c // 2`` and ``(c + 1) // 2``
along every axis, so its dimension is the number of odd coordinates and its
facets are ``c -+ 1`` along an odd one. A cell enters the filtration at the
largest value of its vertices (the V-construction) and belongs to the lower
star of its maximum vertex in the global ``(value, id)`` order. Cell ``2v +
delta`` (``delta`` in ``{-1, 0, 1}^3``) is named globally by the code
``v * 32 + k``, ``k = (dz+1)*9 + (dy+1)*3 + (dx+1)`` (``k = 13``: the vertex).

Each rank works on the doubled grid of its ghosted planes, with one int8
pairing code and one int8 pairing step per cell: 16 bytes per vertex in 3D.
A 2D grid ``(nx, ny)`` is handled as the 3D grid ``(1, nx, ny)``.
"""

from __future__ import annotations

import functools
import itertools
import time

import numpy as np
from mpi4py import MPI
from numba import njit

from dmsolve import DistVector
from dmsolve.bsp import BSP

from . import _heap as heap
from ._dist_reduction import reduce_z2
from ._vpaths import follow_paths

__all__ = ["CubicalGradient", "cubical_gradient", "cubical_saddle_pairs",
           "cubical_link_components"]

UNKNOWN = -1        #: pairing code of a cell outside this rank's lower stars
CRITICAL = 0        #: pairing code of a critical cell; 1 + 2*axis + (sign > 0): the partner
_CENTRE = 13
_TAG_UP, _TAG_DOWN, _TAG_R1, _TAG_R2, _TAG_R3 = 81, 82, 83, 84, 85


@functools.lru_cache(maxsize=None)
def _tables():
    """Static tables over the 27 offsets ``k`` of a vertex's star (not collective):
    ``dim``, ``sub`` (the vertex offsets of the cell other than the centre),
    ``fac`` (facets through the centre), ``cof`` (cofacets through the
    centre), ``delta`` (dz, dy, dx), each list padded with -1."""
    deltas = list(itertools.product((-1, 0, 1), repeat=3))

    def index(d):
        return (d[0] + 1) * 9 + (d[1] + 1) * 3 + (d[2] + 1)

    dim = np.zeros(27, np.int64)
    sub = np.full((27, 7), -1, np.int64)
    fac = np.full((27, 3), -1, np.int64)
    cof = np.full((27, 6), -1, np.int64)
    for d in deltas:
        k = index(d)
        nz = [a for a in range(3) if d[a]]
        dim[k] = len(nz)
        subs = [e for e in itertools.product(*[(0, d[a]) if d[a] else (0,) for a in range(3)])
                if any(e)]
        sub[k, :len(subs)] = [index(e) for e in subs]
        if len(nz) >= 2:
            fac[k, :len(nz)] = [index(tuple(0 if b == a else d[b] for b in range(3)))
                                for a in nz]
        cofs = [index(tuple(s if b == a else d[b] for b in range(3)))
                for a in range(3) if not d[a] for s in (-1, 1)]
        cof[k, :len(cofs)] = cofs
    return dim, sub, fac, cof, np.array(deltas, np.int64)


class _Slab:
    """This rank's ghosted planes as a 3D box ``(Z, Y, X)`` of vertices and its
    doubled grid ``(2Z-1, 2Y-1, 2X-1)``; owned planes ``oz0:oz1`` (local).
    Not collective."""

    def __init__(self, grid):
        shape = grid.shape if grid.dimension == 3 else (1,) + tuple(grid.shape)
        self.X, self.Y = int(shape[0]), int(shape[1])
        self.NZ = int(shape[2])                       # global planes
        g0, g1 = grid.ghosted_planes
        p0, p1 = grid.owned_planes
        self.g0 = g0
        self.Z = g1 - g0
        self.oz0, self.oz1 = p0 - g0, p1 - g0
        self.DX, self.DY = 2 * self.X - 1, 2 * self.Y - 1
        self.DZ = max(2 * self.Z - 1, 0)
        self.base = g0 * self.X * self.Y              # global id of local vertex 0
        self.geom = np.array([self.X, self.Y, self.Z, self.oz0, self.oz1, self.g0, self.NZ],
                             np.int64)


# -- compiled helpers (not collective) ----------------------------------------------------------
@njit(cache=True, inline="always")
def _coords(q, DX, DY):  # pragma: no cover
    """Doubled (cz, cy, cx) of local cell position ``q``."""
    cx = q % DX
    r = q // DX
    return r // DY, r % DY, cx


@njit(cache=True)
def _top(O, q, X, Y, DX, DY):  # pragma: no cover
    """(local vertex index, star offset k, dimension) of the top vertex of the cell at ``q``."""
    cz, cy, cx = _coords(q, DX, DY)
    best = -1
    bv = -1
    bz = by = bx = 0
    for ez in range(2 if cz & 1 else 1):
        for ey in range(2 if cy & 1 else 1):
            for ex in range(2 if cx & 1 else 1):
                vz, vy, vx = (cz >> 1) + ez, (cy >> 1) + ey, (cx >> 1) + ex
                v = (vz * Y + vy) * X + vx
                if O[v] > best:
                    best, bv, bz, by, bx = O[v], v, vz, vy, vx
    k = (cz - 2 * bz + 1) * 9 + (cy - 2 * by + 1) * 3 + (cx - 2 * bx + 1)
    return bv, k, (cz & 1) + (cy & 1) + (cx & 1)


@njit(cache=True, inline="always")
def _stride(a, DX, DY):  # pragma: no cover
    return 1 if a == 0 else (DX if a == 1 else DX * DY)


@njit(cache=True)
def _lower_stars(O, geom, V, T, dim, sub, fac, cof):  # pragma: no cover
    """ProcessLowerStars on the cubical complex, for every owned vertex.

    Robins, Wood and Sheppard's algorithm with TTK's choices, as
    ``_lower_star.lower_star_gradient``: the steepest edge pairs with the
    vertex; the queues pop the cell whose other vertices' ranks (among the
    lower neighbours), sorted descending and padded with zeros, are
    smallest. ``V`` gets each cell's pairing code, ``T`` the step of the
    lower star at which it was paired or made critical (the vertex and its
    edge: 0). Not collective.
    """
    X, Y, Z, oz0, oz1 = geom[0], geom[1], geom[2], geom[3], geom[4]
    DX, DY = 2 * X - 1, 2 * Y - 1
    sv = np.empty(27, np.int64)      # vertex-array shift of each offset
    sd = np.empty(27, np.int64)      # doubled-array shift
    for k in range(27):
        dz, dy, dx = k // 9 - 1, (k // 3) % 3 - 1, k % 3 - 1
        sv[k] = (dz * Y + dy) * X + dx
        sd[k] = (dz * DY + dy) * DX + dx
    low = np.zeros(27, np.bool_)
    inls = np.zeros(27, np.bool_)
    pd = np.zeros(27, np.bool_)
    rank = np.zeros(27, np.int64)
    lk = np.empty(27, np.int64)
    lo = np.empty(27, np.int64)
    r7 = np.empty(7, np.int64)
    H0 = np.empty((1024, 1), np.int64)
    H1 = np.empty((1024, 1), np.int64)
    for zl in range(oz0, oz1):
        for y in range(Y):
            for x in range(X):
                vi = (zl * Y + y) * X + x
                ov = O[vi]
                p = ((2 * zl) * DY + 2 * y) * DX + 2 * x
                nl = 0
                for k in range(27):
                    low[k] = False
                    if k == 13:
                        continue
                    zz, yy, xx = zl + k // 9 - 1, y + (k // 3) % 3 - 1, x + k % 3 - 1
                    if 0 <= zz < Z and 0 <= yy < Y and 0 <= xx < X:
                        o = O[vi + sv[k]]
                        if o < ov:
                            low[k] = True
                            # insertion by order: lk/lo sorted ascending
                            j = nl
                            while j > 0 and lo[j - 1] > o:
                                lo[j] = lo[j - 1]
                                lk[j] = lk[j - 1]
                                j -= 1
                            lo[j] = o
                            lk[j] = k
                            nl += 1
                for j in range(nl):
                    rank[lk[j]] = j + 1
                nedge = 0
                best = -1
                for k in range(27):
                    pd[k] = False
                    inls[k] = False
                    if k == 13 or not low[k]:
                        continue          # every vertex of a lower cell is lower
                    ok = True
                    for j in range(7):
                        s = sub[k, j]
                        if s < 0:
                            break
                        if not low[s]:
                            ok = False
                            break
                    inls[k] = ok
                    if ok and dim[k] == 1:
                        nedge += 1
                        if best < 0 or rank[k] < rank[best]:
                            best = k
                if nedge == 0:
                    V[p] = CRITICAL
                    T[p] = 0
                    continue
                # the steepest edge pairs with the vertex
                a, sg = _axis_sign(best)
                V[p] = 1 + 2 * a + (sg > 0)
                V[p + sd[best]] = 1 + 2 * a + (sg < 0)
                T[p] = 0
                T[p + sd[best]] = 0
                pd[best] = True
                n0 = 0
                n1 = 0
                for k in range(27):
                    if inls[k] and dim[k] == 1 and k != best:
                        H0[n0, 0] = _entry(k, dim, sub, rank, r7)
                        heap.sift_up(H0, n0)
                        n0 += 1
                n1 = _push_cofacets(best, H1, n1, inls, pd, dim, sub, fac, cof, rank, r7)
                step = 1
                while True:
                    while n1 > 0:
                        n1 = heap.pop(H1, n1)
                        c = H1[n1, 0] & 31
                        if pd[c]:
                            continue
                        cnt = 0
                        f = -1
                        for j in range(3):
                            g = fac[c, j]
                            if g >= 0 and not pd[g]:
                                cnt += 1
                                f = g
                        if cnt == 0:
                            H0[n0, 0] = H1[n1, 0]
                            heap.sift_up(H0, n0)
                            n0 += 1
                            continue
                        # pair c with its one unpaired facet f (they differ along one axis)
                        a, sg = _axis_sign(c - f + 13)
                        V[p + sd[c]] = 1 + 2 * a + (sg < 0)
                        V[p + sd[f]] = 1 + 2 * a + (sg > 0)
                        T[p + sd[c]] = step
                        T[p + sd[f]] = step
                        step += 1
                        pd[c] = True
                        pd[f] = True
                        n1 = _push_cofacets(c, H1, n1, inls, pd, dim, sub, fac, cof, rank, r7)
                        n1 = _push_cofacets(f, H1, n1, inls, pd, dim, sub, fac, cof, rank, r7)
                    found = False
                    while n0 > 0:
                        n0 = heap.pop(H0, n0)
                        c = H0[n0, 0] & 31
                        if pd[c]:
                            continue
                        pd[c] = True
                        V[p + sd[c]] = CRITICAL
                        T[p + sd[c]] = step
                        step += 1
                        n1 = _push_cofacets(c, H1, n1, inls, pd, dim, sub, fac, cof, rank, r7)
                        found = True
                        break
                    if not found and n1 == 0:
                        break
                for k in range(27):       # nothing is left (Robins et al.); stay safe
                    if inls[k] and not pd[k]:
                        V[p + sd[k]] = CRITICAL
                        T[p + sd[k]] = step


@njit(cache=True, inline="always")
def _axis_sign(k):  # pragma: no cover
    """Axis (0 x, 1 y, 2 z) and sign of a star offset with one nonzero coordinate."""
    dz, dy, dx = k // 9 - 1, (k // 3) % 3 - 1, k % 3 - 1
    if dx != 0:
        return 0, dx
    if dy != 0:
        return 1, dy
    return 2, dz


@njit(cache=True, inline="always")
def _entry(k, dim, sub, rank, r7):  # pragma: no cover
    """Heap entry of star cell ``k``: its vertices' ranks sorted descending,
    padded with zeros, base 27 (7 digits), then dimension and ``k``."""
    m = 0
    for j in range(7):
        s = sub[k, j]
        if s < 0:
            break
        r = rank[s]
        i = m
        while i > 0 and r7[i - 1] < r:
            r7[i] = r7[i - 1]
            i -= 1
        r7[i] = r
        m += 1
    key = 0
    for j in range(7):
        key = key * 27 + (r7[j] if j < m else 0)
    return (key * 4 + dim[k]) * 32 + k


@njit(cache=True, inline="always")
def _push_cofacets(c, H, n, inls, pd, dim, sub, fac, cof, rank, r7):  # pragma: no cover
    """Push the unpaired lower cofacets of ``c`` with one unpaired facet."""
    for j in range(6):
        g = cof[c, j]
        if g < 0:
            break
        if not inls[g] or pd[g]:
            continue
        cnt = 0
        for i in range(3):
            f = fac[g, i]
            if f >= 0 and not pd[f]:
                cnt += 1
        if cnt == 1:
            H[n, 0] = _entry(g, dim, sub, rank, r7)
            heap.sift_up(H, n)
            n += 1
    return n


@njit(cache=True)
def _cells_of(O, geom, T, pos):  # pragma: no cover
    """(global code, dimension, filtration key) of the cells at local positions
    ``pos`` (cells of owned lower stars): code ``top * 32 + k``, key
    ``order(top) * 32 + step``. Not collective."""
    X, Y, g0 = geom[0], geom[1], geom[5]
    DX, DY = 2 * X - 1, 2 * Y - 1
    base = g0 * X * Y
    n = pos.shape[0]
    code = np.empty(n, np.int64)
    d = np.empty(n, np.int64)
    key = np.empty(n, np.int64)
    for i in range(n):
        v, k, dm = _top(O, pos[i], X, Y, DX, DY)
        code[i] = (base + v) * 32 + k
        d[i] = dm
        key[i] = O[v] * 32 + T[pos[i]]
    return code, d, key


@njit(cache=True)
def _from_global(geom, g):  # pragma: no cover
    """Local doubled positions of cells given by global doubled index."""
    X, Y, g0 = geom[0], geom[1], geom[5]
    DX, DY = 2 * X - 1, 2 * Y - 1
    out = np.empty(g.shape[0], np.int64)
    for i in range(g.shape[0]):
        out[i] = g[i] - 2 * g0 * DY * DX
    return out


@njit(cache=True, inline="always")
def _leave(O, geom, q, cz_ok):  # pragma: no cover
    """Exit row fields ``(route vertex, global doubled index)`` of the local
    cell at ``q``: routed to the owner of its top vertex when the cell lies
    in this rank's doubled grid (``cz_ok``), else to the owner of its first
    vertex (whose ghost planes hold the whole cell)."""
    X, Y, g0 = geom[0], geom[1], geom[5]
    DX, DY = 2 * X - 1, 2 * Y - 1
    base = g0 * X * Y
    if cz_ok:
        v, k, dm = _top(O, q, X, Y, DX, DY)
        route = base + v
    else:
        cz, cy, cx = _coords_signed(q, DX, DY)
        route = base + ((cz >> 1) * Y + (cy >> 1)) * X + (cx >> 1)
    return route, q + 2 * g0 * DY * DX


@njit(cache=True, inline="always")
def _coords_signed(q, DX, DY):  # pragma: no cover
    """Doubled (cz, cy, cx) of a local position that may lie outside the
    local doubled grid along z (negative or past its end)."""
    plane = DX * DY
    cz = q // plane
    r = q - cz * plane
    return cz, r // DX, r % DX


@njit(cache=True)
def _ascend(O, geom, V, qry, pos):  # pragma: no cover
    """Follow the V-paths up from cubes: each item ``(query, cube position)``
    ends at a critical cube, the outside of the grid (-1), or another rank.

    A cube paired with a square goes on to the square's other cofacet; a
    square of the grid has at most two, so the paths never branch. Returns
    ``(done_q, done_code, exit_q, exit_route, exit_cell)``. Not collective.
    """
    X, Y, Z, oz0, oz1, NZ = geom[0], geom[1], geom[2], geom[3], geom[4], geom[6]
    DX, DY = 2 * X - 1, 2 * Y - 1
    DZ = 2 * Z - 1
    g0 = geom[5]
    n = qry.shape[0]
    rq = np.empty(n, np.int64)
    rc = np.empty(n, np.int64)
    xq = np.empty(n, np.int64)
    xv = np.empty(n, np.int64)
    xg = np.empty(n, np.int64)
    nr = 0
    nx = 0
    base = g0 * X * Y
    for i in range(n):
        q = pos[i]
        while True:
            cz, cy, cx = _coords_signed(q, DX, DY)
            if cz < 0 or cz >= DZ:
                xq[nx] = qry[i]
                xv[nx], xg[nx] = _leave(O, geom, q, False)
                nx += 1
                break
            v, k, dm = _top(O, q, X, Y, DX, DY)
            vz = v // (X * Y)
            if vz < oz0 or vz >= oz1:
                xq[nx] = qry[i]
                xv[nx], xg[nx] = base + v, q + 2 * g0 * DY * DX
                nx += 1
                break
            c = V[q]
            if c == CRITICAL:
                rq[nr], rc[nr] = qry[i], (base + v) * 32 + k
                nr += 1
                break
            a = (c - 1) >> 1
            s = 1 if (c - 1) & 1 else -1
            st = _stride(a, DX, DY)
            f = q + s * st                  # the square paired with this cube
            nq = f + s * st                 # its other cofacet
            co = (cx if a == 0 else (cy if a == 1 else cz + 2 * g0)) + 2 * s
            top = DX - 1 if a == 0 else (DY - 1 if a == 1 else 2 * NZ - 2)
            if co < 0 or co > top:
                rq[nr], rc[nr] = qry[i], -1
                nr += 1
                break
            q = nq
    return rq[:nr], rc[:nr], xq[:nx], xv[:nx], xg[:nx]


@njit(cache=True)
def _grow(a, n):  # pragma: no cover
    b = np.empty((2 * a.shape[0],) + a.shape[1:], a.dtype)
    b[:n] = a[:n]
    return b


@njit(cache=True)
def _descend(O, geom, V, T, qry, pos):  # pragma: no cover
    """Morse boundaries (mod 2) of chains of edges, one chain per query.

    Items ``(qry, edge position)`` grouped by query (``qry`` sorted). An
    edge paired with a square is replaced by the square's other three edges,
    one paired with its vertex vanishes, a critical one is kept. Edges are
    expanded latest first in (top order, step), which V-paths strictly
    decrease, so copies of an edge cancel mod 2 before it is expanded.
    Returns ``(done_q, done_code, exit_q, exit_route, exit_cell)``, critical
    edges with repetitions (parity decides). Not collective.
    """
    X, Y, oz0, oz1, g0 = geom[0], geom[1], geom[3], geom[4], geom[5]
    DX, DY = 2 * X - 1, 2 * Y - 1
    base = g0 * X * Y
    m = qry.shape[0]
    cap = max(m, 16)
    rq = np.empty(cap, np.int64)
    rc = np.empty(cap, np.int64)
    xq = np.empty(cap, np.int64)
    xv = np.empty(cap, np.int64)
    xg = np.empty(cap, np.int64)
    nr = 0
    nx = 0
    H = np.empty((64, 3), np.int64)        # rows (-top order, -step, position)
    add = np.empty(3, np.int64)
    k = 0
    while k < m:
        qq = qry[k]
        n = 0
        while True:
            if k < m and qry[k] == qq:
                add[0] = pos[k]
                na = 1
                k += 1
            elif n > 0:
                n = heap.pop(H, n)
                k1, k2, e = H[n, 0], H[n, 1], H[n, 2]
                par = 1
                while n > 0 and H[0, 0] == k1 and H[0, 1] == k2:
                    n = heap.pop(H, n)
                    par ^= 1
                if par == 0:
                    continue
                c = V[e]
                a = (c - 1) >> 1
                s = 1 if (c - 1) & 1 else -1
                sq = e + s * _stride(a, DX, DY)      # the square paired with e
                # its edges: -+1 along each of its two odd axes, but e
                cz, cy, cx = _coords(sq, DX, DY)
                na = 0
                for b in range(3):
                    odd = (cx if b == 0 else (cy if b == 1 else cz)) & 1
                    if odd:
                        sb = _stride(b, DX, DY)
                        for t in (sq - sb, sq + sb):
                            if t != e:
                                add[na] = t
                                na += 1
            else:
                break
            for r in range(na):
                e = add[r]
                v, kk, dm = _top(O, e, X, Y, DX, DY)
                vz = v // (X * Y)
                if vz < oz0 or vz >= oz1:
                    if nx == xq.shape[0]:
                        xq, xv, xg = _grow(xq, nx), _grow(xv, nx), _grow(xg, nx)
                    xq[nx], xv[nx], xg[nx] = qq, base + v, e + 2 * g0 * DY * DX
                    nx += 1
                    continue
                c = V[e]
                if c == CRITICAL:
                    if nr == rq.shape[0]:
                        rq, rc = _grow(rq, nr), _grow(rc, nr)
                    rq[nr], rc[nr] = qq, (base + v) * 32 + kk
                    nr += 1
                    continue
                a = (c - 1) >> 1
                s = 1 if (c - 1) & 1 else -1
                cz, cy, cx = _coords(e, DX, DY)
                coord = cx if a == 0 else (cy if a == 1 else cz)
                if coord & 1:
                    continue                          # paired with its vertex
                if n == H.shape[0]:
                    H = _grow(H, n)
                H[n, 0], H[n, 1], H[n, 2] = -O[v], -T[e], e
                heap.sift_up(H, n)
                n += 1
    return rq[:nr], rc[:nr], xq[:nx], xv[:nx], xg[:nx]


@njit(cache=True)
def _square_sides(geom, pos):  # pragma: no cover
    """For squares at ``pos``: their two cofacet cube positions (-1 outside
    the grid), and their four edge positions. Not collective."""
    X, Y, g0, NZ = geom[0], geom[1], geom[5], geom[6]
    DX, DY = 2 * X - 1, 2 * Y - 1
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


# -- the gradient --------------------------------------------------------------------------------
class CubicalGradient:
    """The lower-star discrete gradient of a vertex field on a cubical grid.

    Each rank holds the pairs of the lower stars of its owned vertices, one
    int8 code and one int8 step per cell of its doubled grid. The same
    methods as :class:`topology.DiscreteGradient`; cells are reported as
    rows of global vertex ids (2, 4 and 8 vertices for edges, squares and
    cubes), sorted ascending. Not collective to construct (use the
    collective :func:`topology.discrete_gradient`); the ``local_*`` methods
    are not collective, the others are, as each says.
    """

    def __init__(self, grid, order: DistVector, O: np.ndarray, V: np.ndarray, T: np.ndarray):
        self.domain = grid
        self.order = order
        self.slab = _Slab(grid)
        self.O, self.V, self.T = O, V, T

    @property
    def comm(self):
        return self.domain.comm

    @property
    def dimension(self) -> int:
        return self.domain.dimension

    def _check_d(self, d, top: int) -> None:
        if not isinstance(d, (int, np.integer)) or isinstance(d, bool) or not 0 <= d <= top:
            raise ValueError("d must be an integer in [0, %d], got %r" % (top, d))

    def local_critical(self, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(local positions, global codes, filtration keys)`` of this rank's
        critical d-cells. Not collective; ``ValueError`` unless ``0 <= d <=
        dimension``."""
        self._check_d(d, self.dimension)
        pos = np.flatnonzero(self.V == CRITICAL)
        code, dim, key = _cells_of(self.O, self.slab.geom, self.T, pos) if pos.size else \
            (pos, pos, pos)
        m = dim == d
        return pos[m], code[m], key[m]

    def local_cells(self, codes: np.ndarray) -> np.ndarray:
        """Global vertex ids of the cells with these codes (rows, ascending),
        for cells of one dimension. Not collective."""
        codes = np.asarray(codes, np.int64)
        s = self.slab
        v, k = codes // 32, codes % 32
        delta = _tables()[4][k]                               # (dz, dy, dx)
        xyz = np.column_stack((v % s.X, (v // s.X) % s.Y, v // (s.X * s.Y)))
        d_xyz = delta[:, ::-1]
        rows = []
        for e in itertools.product((0, 1), repeat=3):
            c = xyz + d_xyz * np.array(e)
            rows.append((c[:, 2] * s.Y + c[:, 1]) * s.X + c[:, 0])
        ids = np.sort(np.stack(rows, axis=1), axis=1) if rows else np.zeros((0, 1), np.int64)
        out = [np.unique(r) for r in ids]
        width = max((len(r) for r in out), default=1)
        return np.array(out, np.int64).reshape(-1, width)

    def critical_counts(self) -> list[int]:
        """Number of critical cells of each dimension 0..d, the same on every
        rank. Collective on ``comm``."""
        pos = np.flatnonzero(self.V == CRITICAL)
        _, dim, _ = _cells_of(self.O, self.slab.geom, self.T, pos) if pos.size else \
            (pos, pos, pos)
        cnt = np.bincount(dim, minlength=4)[:self.dimension + 1].astype(np.int64)
        self.comm.Allreduce(MPI.IN_PLACE, cnt, op=MPI.SUM)
        return [int(c) for c in cnt]

    def critical_cells(self, d: int) -> np.ndarray:
        """All critical d-cells as rows of global vertex ids sorted ascending,
        rows in lexicographic order, on every rank. Collective on ``comm``;
        a ``d`` outside ``[0, dimension]`` raises ``ValueError`` on every rank."""
        from dmsolve.validate import agreed
        with agreed(self.comm):
            self._check_d(d, self.dimension)
        _, code, _ = self.local_critical(d)
        rows = self.local_cells(code).reshape(-1, 2 ** d)
        rows = np.concatenate(self.comm.allgather(rows)).reshape(-1, 2 ** d)
        return rows[np.lexsort(rows.T[::-1])] if rows.size else rows

    def pairs(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        """All gradient pairs (d-cell, (d+1)-cell) as two arrays of sorted
        global vertex-id rows, on every rank. Collective on ``comm``; gathers
        the whole gradient of dimension d: meant for checks on small grids."""
        from dmsolve.validate import agreed
        with agreed(self.comm):
            self._check_d(d, self.dimension - 1)
        s = self.slab
        V = self.V
        pos = np.flatnonzero(V > 0)
        code, dim, _ = _cells_of(self.O, s.geom, self.T, pos) if pos.size else (pos,) * 3
        m = dim == d + 1
        hi_pos, hi_code = pos[m], code[m]
        c = V[hi_pos].astype(np.int64)
        axis, sign = (c - 1) >> 1, np.where((c - 1) & 1, 1, -1)
        stride = np.array([1, s.DX, s.DX * s.DY])[axis]
        lo_pos = hi_pos + sign * stride
        # keep the pairs whose partner is a facet (the higher cell points down)
        if lo_pos.size:
            lo_code, lo_dim, _ = _cells_of(self.O, s.geom, self.T, lo_pos)
            keep = lo_dim == d
        else:
            lo_code, keep = lo_pos, np.zeros(0, bool)
        lo = self.local_cells(lo_code[keep]).reshape(-1, 2 ** d)
        hi = self.local_cells(hi_code[keep]).reshape(-1, 2 ** (d + 1))
        lo = np.concatenate(self.comm.allgather(lo)).reshape(-1, 2 ** d)
        hi = np.concatenate(self.comm.allgather(hi)).reshape(-1, 2 ** (d + 1))
        o = np.lexsort(lo.T[::-1])
        return lo[o], hi[o]


def cubical_gradient(grid, order: DistVector) -> CubicalGradient:
    """The discrete gradient of a cubical grid from the global order.
    Collective on ``grid.comm`` (one ghost exchange)."""
    s = _Slab(grid)
    O = np.ascontiguousarray(grid.ghosted(np.ascontiguousarray(order.local, np.int64)))
    V = np.full(s.DZ * s.DY * s.DX, UNKNOWN, np.int8)
    T = np.zeros(V.size, np.int8)
    dim, sub, fac, cof, _ = _tables()
    if s.oz1 > s.oz0:
        _lower_stars(O, s.geom, V, T, dim, sub, fac, cof)
    return CubicalGradient(grid, order, O, V, T)


# -- D1 from the Morse complex -------------------------------------------------------------------
def cubical_saddle_pairs(grid, order: DistVector, progress=None):
    """D1 of a 3D cubical grid: ``(pairs, essential)``, the finite pairs as
    (birth, death) vertex layout indices left on the rank whose share of the
    reduction found them (no essential class: a grid is a ball).

    The steps of ``_saddles.morse_persistence`` on the cubical Morse
    complex: the co-boundaries of the critical squares (the critical cubes
    or the outside their ascending V-paths reach) reduced in reverse
    filtration order give the squares that create no 2-class (walls); their
    Morse boundaries (critical edges, mod 2) reduced in filtration order give
    the pairs. The rows are all critical edges (no D0 clearing): the pivot
    of a reduced column is never an edge that merged two components.
    Collective on ``grid.comm``.
    """
    from ._saddles import _agreed, _columns, _odd, _place
    comm = grid.comm
    layout = grid.vertex_layout
    t0 = time.perf_counter()
    G = cubical_gradient(grid, order)
    if progress:
        progress("discrete gradient: critical cells %s", G.critical_counts())
    O, V, T, geom = G.O, G.V, G.T, G.slab.geom
    crit = {d: G.local_critical(d) for d in (1, 2, 3)}
    stats = {"gradient_s": time.perf_counter() - t0}

    # -- the ascending paths: co-boundaries of the critical squares
    spos, scode, skey = crit[2]
    cubes, edges = _square_sides(geom, spos)
    start = cubes.ravel()
    sq = np.repeat(scode, 2)
    out = start < 0
    done = [(sq[out], np.full(int(out.sum()), -1, np.int64))]

    def up(q, pos):
        rq, rc, xq, xv, xg = _ascend(O, geom, V, q, pos)
        return (rq, rc), np.column_stack((xq, xv, xg))

    def arrive(rows):
        return rows[:, 0].copy(), _from_global(geom, rows[:, 2].copy())

    d2, _ = follow_paths(comm, layout, up, arrive, (sq[~out], start[~out]),
                         np.zeros((0, 3), np.int64), tag=_TAG_UP, label="cubical:maxima")
    done.extend(d2)
    tq, tc = (np.concatenate(c) for c in zip(*done))

    # -- filtration positions: edges forwards, squares and cubes backwards
    sup = [0]
    eplace, tplace, qplace = _place(comm, [crit[1][2].reshape(-1, 1), -skey.reshape(-1, 1),
                                           -crit[3][2].reshape(-1, 1)],
                                    [crit[1][1] // 32, scode // 32, crit[3][1] // 32], sup)

    # -- D2: squares (columns, reverse order) against cubes (rows 1.., reverse) and outside (0)
    ctx = BSP(comm)
    inside = tc >= 0
    ctx.send_rows(layout.owner(tc[inside] // 32), np.column_stack((tq[inside], tc[inside])),
                  tag=_TAG_R1)
    got = ctx.sync("cubical:d2-rows").concat(_TAG_R1, dtype=np.int64, shape=(2,))
    row = 1 + _agreed(comm, qplace.position_of, crit[3][1], got[:, 1])
    rows2 = np.concatenate((np.column_stack((got[:, 0], row)),
                            np.column_stack((tq[~inside], np.zeros(int((~inside).sum()),
                                                                   np.int64)))))
    ctx.send_rows(layout.owner(rows2[:, 0] // 32), rows2, tag=_TAG_R2)
    got = ctx.sync("cubical:d2-columns").concat(_TAG_R2, dtype=np.int64, shape=(2,))
    ptr, rows = _columns(_agreed(comm, tplace.local_index, scode, got[:, 0]), got[:, 1],
                         scode.size)
    qranges = np.concatenate(([0], qplace.ranges[1:] + 1))
    red2 = reduce_z2(ptr, rows, tplace.pos, qplace.global_size + 1, comm,
                     labels=scode // 32, row_ranges=qranges, lows=True)
    wall = red2.low < 0
    stats["d2_s"] = time.perf_counter() - t0

    # -- the walls' Morse boundaries
    widx = np.flatnonzero(wall)
    wq = np.repeat(scode[widx], 4)
    wp = edges[widx].ravel()

    def down(q, pos):
        o = np.argsort(q, kind="stable")
        rq, rc, xq, xv, xg = _descend(O, geom, V, T, q[o], pos[o])
        return (rq, rc), np.column_stack((xq, xv, xg))

    d1, _ = follow_paths(comm, layout, down, arrive, (wq, wp), np.zeros((0, 3), np.int64),
                         tag=_TAG_DOWN, label="cubical:walls")
    bq, be = (np.concatenate(c) for c in zip(*d1)) if d1 else (np.zeros(0, np.int64),) * 2

    # -- D1: walls (columns, filtration order) against the critical edges (rows)
    ctx.send_rows(layout.owner(be // 32), np.column_stack((bq, be)), tag=_TAG_R1)
    got = ctx.sync("cubical:d1-rows").concat(_TAG_R1, dtype=np.int64, shape=(2,))
    got = _odd(got)                     # every entry of an edge is here: mod 2 is exact
    eidx = _agreed(comm, eplace.local_index, crit[1][1], got[:, 1])
    ctx.send_rows(layout.owner(got[:, 0] // 32),
                  np.column_stack((got[:, 0], eplace.pos[eidx])), tag=_TAG_R2)
    got = ctx.sync("cubical:d1-columns").concat(_TAG_R2, dtype=np.int64, shape=(2,))
    col = np.full(wall.size, -1, np.int64)
    col[widx] = np.arange(widx.size)
    ptr, rows = _columns(col[_agreed(comm, tplace.local_index, scode, got[:, 0])], got[:, 1],
                         widx.size)
    nt = tplace.global_size
    red1 = reduce_z2(ptr, rows, nt - 1 - tplace.pos[widx], eplace.global_size, comm,
                     labels=scode[widx] // 32, row_ranges=eplace.ranges)
    pairs = np.column_stack((eplace.top_of(red1.pair_rows), red1.pair_labels)).astype(np.int64)
    stats["total_s"] = time.perf_counter() - t0
    return pairs.reshape(-1, 2), np.zeros(0, np.int64), stats


# -- link components over neighbour keys -----------------------------------------------------------
@functools.lru_cache(maxsize=None)
def link_graph(dimension: int, dual: bool):
    """The link graph whose components decide merges in a sweep of a cubical
    grid: ``(offsets, nodes, edges)``. ``offsets`` (x, y[, z]) are all
    ``3**d - 1`` neighbours; ``nodes`` index the graph's vertices among them
    (the axis neighbours, or all in the dual graph); ``edges`` rows ``(i,
    j, w)`` join nodes ``i`` and ``j`` when both are lower and, for ``w >=
    0``, so is neighbour ``w`` (the far corner of the square that joins two
    axis neighbours). Not collective."""
    from ._grid import cubical_structure
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
def link_counts(PK, opos, shift, nodes, edges):  # pragma: no cover
    """Number of components of the lower part of the link graph
    (:func:`link_graph`, neighbour ``j`` at position ``p + shift[j]``, lower
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
                _union(parent, a, b)
        cnt = 0
        for j in range(nodes.shape[0]):
            k = nodes[j]
            if low[k] and _find(parent, k) == k:
                cnt += 1
        out[i] = cnt
    return out


# -- critical points: link counts ----------------------------------------------------------------
def cubical_link_components(grid, ghosted_order: np.ndarray):
    """:meth:`Grid.link_components` of a cubical grid (see there). Not collective."""
    s = _Slab(grid)
    O = np.ascontiguousarray(ghosted_order, np.int64)
    n_own = (s.oz1 - s.oz0) * s.X * s.Y
    L = np.zeros(n_own, np.int64)
    U = np.zeros(n_own, np.int64)
    onb = np.zeros(n_own, bool)
    lb = np.zeros(n_own, bool)
    ub = np.zeros(n_own, bool)
    if n_own:
        dim, sub, _, _, _ = _tables()
        _links(O, s.geom, grid.dimension, dim, sub, L, U, onb, lb, ub)
    if grid.dimension < 3:
        return L, U, None, None, None
    return L, U, onb, lb, ub


@njit(cache=True)
def _links(O, geom, d, dim, sub, L, U, onb, lb, ub):  # pragma: no cover
    """Lower link components (lower axis neighbours, joined through lower
    squares), upper components (higher neighbours of the dual graph, joined
    when no coordinate has opposite signs) and the boundary flags of every
    owned vertex. Not collective."""
    X, Y, Z, oz0, oz1, g0, NZ = geom[0], geom[1], geom[2], geom[3], geom[4], geom[5], geom[6]
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
                    if k == 13:
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
                                        _union(parent, a, sub[k, j])
                cnt = 0
                for k in range(27):
                    if dim[k] == 1 and low[k]:
                        if _find(parent, k) == k:
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
                            _union(parent, k, k2)
                cnt = 0
                for k in range(27):
                    if up[k] and _find(parent, k) == k:
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


@njit(cache=True)
def _find(parent, x):  # pragma: no cover
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


@njit(cache=True, inline="always")
def _union(parent, a, b):  # pragma: no cover
    ra, rb = _find(parent, a), _find(parent, b)
    if ra != rb:
        if ra < rb:
            parent[rb] = ra
        else:
            parent[ra] = rb
