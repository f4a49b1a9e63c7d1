"""ProcessLowerStars on the cubical complex of a grid: the lower-star discrete
gradient kernel, every owned vertex's star handled by bit masks over its 27
cells (numba, not collective). See ``_cubical_cells`` for the cells' names
and the byte each one gets."""

from __future__ import annotations

import numpy as np

from dmsolve.jit import njit

from ..kernels import lowest_bit
from ._cubical_cells import AXMASK, CENTRE, CRITICAL, _axis_sign, _put

__all__ = ["lower_stars"]


@njit(cache=True, inline="always")
def _insert(keys, vals, n, key, val):  # pragma: no cover
    """Insert ``(key, val)`` into the first ``n`` entries of ``keys`` /
    ``vals``, kept sorted by key (an insertion sort's step); returns ``n + 1``."""
    j = n
    while j > 0 and keys[j - 1] > key:
        keys[j] = keys[j - 1]
        vals[j] = vals[j - 1]
        j -= 1
    keys[j] = key
    vals[j] = val
    return n + 1


@njit(cache=True, inline="always")
def _lose_facet(m, nunp, pos, oq):  # pragma: no cover
    """The star cells in mask ``m`` have each lost an unpaired facet; those
    left with one join pqOne ``oq`` (bits of their sorted positions ``pos``).
    Returns the new ``oq``."""
    while m:
        g = lowest_bit(m)
        m &= m - 1
        nunp[g] -= 1
        if nunp[g] == 1:
            oq |= np.int64(1) << pos[g]
    return oq


@njit(cache=True, nogil=True)
def lower_stars(O, g, C, dim, sub, fac, cof, z0, z1):  # pragma: no cover
    """ProcessLowerStars on the cubical complex, for the owned vertices of
    local planes ``z0:z1`` (within ``g.oz0:g.oz1``).

    Robins, Wood and Sheppard's algorithm with TTK's choices, as
    ``_lower_star.lower_star_gradient``: the steepest edge pairs with the
    vertex; the queues pop the cell whose other vertices' ranks (among the
    vertices the lower star uses), sorted descending and padded with zeros,
    are smallest. ``C`` gets each cell's pairing code and the step of the
    lower star at which it was paired or made critical (the vertex and its
    edge: 0), as :func:`_put` packs them. Not collective.

    Everything about one star is a bit mask over the 27 offsets ``k``: the
    lower neighbours, the star's cells (those whose other vertices are all
    lower), the cells assigned so far, each cell's facets and cofacets. A
    cell's key is the OR of ``1 << rank`` of its vertices (ranks are
    distinct, so the highest differing bit is the first differing rank:
    TTK's order with no sort per cell). The star's cells are sorted by key
    once, and each queue is a bit mask over those sorted positions: its
    minimum is the lowest set bit. No cell enters a queue twice (a cell
    joins pqOne when its last-but-one facet is assigned, and pqZero from
    pqOne or as an edge), so the masks pop what the heaps popped, in the
    same order.

    A vertex writes only the cells of its own lower star (each cell is in
    the lower star of its top vertex alone), so blocks of planes can run at
    once on several threads.
    """
    X, Y, Z = g.X, g.Y, g.Z
    DX, DY = g.DX, g.DY
    sv = np.empty(27, np.int64)      # vertex-array shift of each offset
    sd = np.empty(27, np.int64)      # doubled-array shift
    smask = np.zeros(27, np.int64)   # bit mask of each cell's other vertices
    cofm = np.zeros(27, np.int64)    # its cofacets through the centre
    facm = np.zeros(27, np.int64)    # its facets through the centre
    cup = np.zeros(27, np.int8)       # code of the higher cell of a pair, by offset c - f + CENTRE
    cdn = np.zeros(27, np.int8)       # code of the lower cell
    for k in range(27):
        dz, dy, dx = k // 9 - 1, (k // 3) % 3 - 1, k % 3 - 1
        sv[k] = (dz * Y + dy) * X + dx
        sd[k] = (dz * DY + dy) * DX + dx
        for t in range(7):
            if sub[k, t] < 0:
                break
            smask[k] |= np.int64(1) << sub[k, t]
        for t in range(6):
            if cof[k, t] >= 0:
                cofm[k] |= np.int64(1) << cof[k, t]
        for t in range(3):
            if fac[k, t] >= 0:
                facm[k] |= np.int64(1) << fac[k, t]
        if (dz != 0) + (dy != 0) + (dx != 0) == 1:
            a, sg = _axis_sign(k)
            cup[k] = 1 + 2 * a + (sg < 0)
            cdn[k] = 1 + 2 * a + (sg > 0)
    axmask = np.int64(AXMASK)
    no = np.zeros(27, np.int64)      # the neighbours' orders
    nunp = np.zeros(27, np.int64)    # unpaired facets through the centre, per star cell
    rbit = np.zeros(27, np.int64)    # 1 << the rank of each vertex the star uses
    ckey = np.zeros(27, np.int64)    # the star's cells by key: keys,
    cellat = np.empty(27, np.int64)  # offsets,
    pos = np.zeros(27, np.int64)     # and each offset's position
    lk = np.empty(27, np.int64)      # the used vertices by order: offsets
    lo = np.empty(27, np.int64)      # and orders
    for zl in range(z0, z1):
        zin = 0 < zl < Z - 1
        for y in range(Y):
            yin = zin and 0 < y < Y - 1
            for x in range(X):
                vi = (zl * Y + y) * X + x
                ov = O[vi]
                p = ((2 * zl) * DY + 2 * y) * DX + 2 * x
                inside = yin and 0 < x < X - 1
                lm = np.int64(0)             # bit mask of the lower neighbours
                for k in range(27):
                    if k == CENTRE:
                        continue
                    if not inside:
                        zz, yy, xx = zl + k // 9 - 1, y + (k // 3) % 3 - 1, x + k % 3 - 1
                        if zz < 0 or zz >= Z or yy < 0 or yy >= Y or xx < 0 or xx >= X:
                            continue
                    o = O[vi + sv[k]]
                    no[k] = o
                    lm |= np.int64(o < ov) << k
                le = lm & axmask             # the lower edges
                if le == 0:
                    _put(C, p, CRITICAL, 0)          # no lower edge: a minimum, nothing below
                    continue
                rest = le & (le - 1)
                if rest & (rest - 1) == 0:
                    # one or two lower edges: the steepest pairs with the
                    # vertex; the other pairs with the square of the two, if
                    # it is lower, else it is critical (what the queues do)
                    e1 = lowest_bit(le)
                    e2 = lowest_bit(rest) if rest != 0 else -1
                    if e2 >= 0 and no[e2] < no[e1]:
                        e1, e2 = e2, e1
                    _put(C, p, cdn[e1], 0)
                    _put(C, p + sd[e1], cup[e1], 0)
                    if e2 >= 0:
                        sq = e1 + e2 - CENTRE
                        if dim[sq] == 2 and (lm >> sq) & 1:
                            d = sq - e2 + CENTRE
                            _put(C, p + sd[sq], cup[d], 1)
                            _put(C, p + sd[e2], cdn[d], 1)
                        else:
                            _put(C, p + sd[e2], CRITICAL, 1)
                    continue
                # the lower star and the vertices it uses
                S = np.int64(0)
                used = np.int64(0)
                m = lm
                while m:
                    k = lowest_bit(m)
                    m &= m - 1
                    if (smask[k] & ~lm) == 0:
                        S |= np.int64(1) << k
                        used |= smask[k]
                # ranks of the used vertices among themselves: the same order
                # as among all lower neighbours, so the same keys' comparisons
                nl = 0
                m = used
                while m:
                    k = lowest_bit(m)
                    m &= m - 1
                    nl = _insert(lo, lk, nl, no[k], k)
                best = -1
                for j in range(nl):
                    k = lk[j]
                    rbit[k] = np.int64(1) << j
                    if best < 0 and dim[k] == 1:
                        best = k
                # the star's cells sorted by key; pqZero starts with the lower
                # edges but the steepest, as bits of their sorted positions
                nc = 0
                m = S
                while m:
                    k = lowest_bit(m)
                    m &= m - 1
                    key = np.int64(0)
                    mm = smask[k]
                    while mm:
                        key |= rbit[lowest_bit(mm)]
                        mm &= mm - 1
                    nunp[k] = dim[k] if dim[k] >= 2 else 0
                    nc = _insert(ckey, cellat, nc, key, k)
                zq = np.int64(0)
                for j in range(nc):
                    k = cellat[j]
                    pos[k] = j
                    if dim[k] == 1 and k != best:
                        zq |= np.int64(1) << j
                # the steepest edge pairs with the vertex
                _put(C, p, cdn[best], 0)
                _put(C, p + sd[best], cup[best], 0)
                PD = np.int64(1) << best      # assigned cells
                # pqOne (oq) and pqZero (zq): bits of sorted positions
                oq = _lose_facet(cofm[best] & S & ~PD, nunp, pos, np.int64(0))
                step = 1
                while True:
                    while oq:
                        i = lowest_bit(oq)
                        oq &= oq - 1
                        c = cellat[i]
                        if (PD >> c) & 1:
                            continue
                        if nunp[c] == 0:
                            zq |= np.int64(1) << i
                            continue
                        f = lowest_bit(facm[c] & ~PD)      # its one unpaired facet
                        d = c - f + CENTRE
                        _put(C, p + sd[c], cup[d], step)
                        _put(C, p + sd[f], cdn[d], step)
                        step += 1
                        PD |= (np.int64(1) << c) | (np.int64(1) << f)
                        # each is a cofacet of c or of f, never of both (dimensions)
                        oq = _lose_facet((cofm[c] | cofm[f]) & S & ~PD, nunp, pos, oq)
                    found = False
                    while zq:
                        i = lowest_bit(zq)
                        zq &= zq - 1
                        c = cellat[i]
                        if (PD >> c) & 1:
                            continue
                        _put(C, p + sd[c], CRITICAL, step)
                        step += 1
                        PD |= np.int64(1) << c
                        oq = _lose_facet(cofm[c] & S & ~PD, nunp, pos, oq)
                        found = True
                        break
                    if not found and oq == 0:
                        break
                m = S & ~PD                  # nothing is left (Robins et al.); stay safe
                while m:
                    k = lowest_bit(m)
                    m &= m - 1
                    _put(C, p + sd[k], CRITICAL, step)
