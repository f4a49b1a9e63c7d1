"""V-paths: following the discrete gradient from cell to cell, and across ranks.

The kernels follow a path one cell at a time through this rank's lower stars
(sequential loops compiled with numba) and stop where the path enters a star
another rank owns; :func:`follow_paths` hands those paths to their owners in
BSP supersteps until none is left.
"""

from __future__ import annotations

import numpy as np

from dmsolve.bsp import BSP
from dmsolve.jit import njit

from ..kernels import grow, heap
from ._lower_star import CRITICAL, DOWN
from ._star_tables import GRID, edge_slot, nbr_pos, tet_cofacets, tet_slot, tri_nb

__all__ = ["follow_paths", "descend_vertices", "ascend_tets", "descend_edges",
           "triangle_cofacets"]


# -- the driver ---------------------------------------------------------------------------------
def follow_paths(comm, layout, advance, arrive, items, exits, *, label: str
                 ) -> tuple[list, int]:
    """Follow V-paths on every rank until no path is left anywhere.

    Parameters
    ----------
    comm : MPI.Comm
    layout : Layout
        The vertex layout: an exit row goes to the owner of its column 1.
    advance : callable
        ``advance(*items) -> (done, exit_rows)``: follows the paths of
        ``items`` through this rank's lower stars; ``done`` is what reached
        its end here, ``exit_rows`` (k, w) int64 rows ``(query, vertex, ...)``
        for the paths that continue in the star of ``vertex`` (a layout
        index) on its owner.
    arrive : callable
        ``arrive(rows) -> items``: the items of the exit rows received.
    items : tuple
        The items of the first superstep.
    exits : (k, w) int64
        Exit rows known before the first superstep, sent with its own.
    label : str
        The supersteps' label.

    Returns
    -------
    done : list
        What ``advance`` reported done, one entry per superstep.
    supersteps : int

    Notes
    -----
    Collective on ``comm``: one :meth:`dmsolve.bsp.BSP.run`, one superstep
    per rank boundary the longest path crosses, plus one. An exception in
    ``advance`` or ``arrive`` on one rank is raised on every rank at the end
    of that superstep.
    """
    width = exits.shape[1]
    done = []
    ctx = BSP(comm)
    tag = ctx.tags("paths")

    def compute(ctx, inbox):
        if ctx.step == 0:
            here, out = advance(*items)
            out = np.concatenate((exits, out)) if out.size else exits
        else:
            here, out = advance(*arrive(inbox.concat(tag.paths, dtype=np.int64,
                                                     shape=(width,))))
        done.append(here)
        dest = layout.owner(out[:, 1]) if out.size else np.zeros(0, np.int64)
        ctx.send_rows(dest, out, tag=tag.paths)

    steps = ctx.run(compute, label=label)
    return done, steps


# -- the kernels (not collective) ----------------------------------------------------------------
@njit(cache=True, nogil=True)
def descend_vertices(st, vp, qry, pos):  # pragma: no cover
    """Follow vertex-edge pairs down from owned positions ``pos``.

    Returns ``(done_q, done_min, exit_q, exit_vertex)``: the minimum (layout
    index) reached, or the first vertex another rank owns. Not collective.
    """
    mode, P, own, lix, doff, eptr, enb = st.mode, st.P, st.own, st.layout_index, st.doff, \
        st.eptr, st.enb
    m = qry.shape[0]
    rq = np.empty(m, np.int64)
    rg = np.empty(m, np.int64)
    xq = np.empty(m, np.int64)
    xg = np.empty(m, np.int64)
    nr = 0
    nx = 0
    for k in range(m):
        p = pos[k]
        i = own[p]
        while i >= 0 and vp[i] >= 0:
            p = nbr_pos(mode, P, doff, eptr, enb, i, vp[i])
            i = own[p]
        if i < 0:           # the path goes on in another rank's star
            xq[nx], xg[nx] = qry[k], lix[p]
            nx += 1
        else:               # a critical vertex: the minimum
            rq[nr], rg[nr] = qry[k], lix[p]
            nr += 1
    return rq[:nr], rg[:nr], xq[:nx], xg[:nx]


@njit(cache=True, nogil=True)
def _grid_tables(st):  # pragma: no cover
    """A grid's stencil, indexed: ``cof[a, b]`` the tets of the star on
    neighbour slots ``a`` and ``b`` as (slot, third slot) pairs, slots
    ascending, -1 padded; ``tet[a, b, c]`` the slot of the tet on ``a``,
    ``b``, ``c`` (any order), or -1. Empty on a complex. Not collective."""
    if st.mode != GRID:
        return np.zeros((0, 0, 4), np.int64), np.zeros((0, 0, 0), np.int64)
    ns = st.doff.shape[0]
    nq = st.qtab.shape[0]                   # the stencil's tets (every star lists all)
    cof = np.full((ns, ns, 4), -1, np.int64)
    tet = np.full((ns, ns, ns), -1, np.int64)
    for t in range(nq):
        x, y, z = st.qtab[t, 0], st.qtab[t, 1], st.qtab[t, 2]
        for a, b, c in ((x, y, z), (x, z, y), (y, x, z), (y, z, x), (z, x, y), (z, y, x)):
            tet[a, b, c] = t
            k = 0 if cof[a, b, 0] < 0 else 2
            cof[a, b, k], cof[a, b, k + 1] = t, c
    return cof, tet


@njit(cache=True, inline="always")
def _slot_of(doff, d):  # pragma: no cover
    """The stencil slot with offset ``d``, or -1: a scan with no early exit
    (no branch to mispredict)."""
    j = -1
    for s in range(doff.shape[0]):
        if doff[s] == d:
            j = s
    return j


@njit(cache=True, nogil=True)
def ascend_tets(st, qp, qmax, qry, pos, slot):  # pragma: no cover
    """Follow tetrahedron-triangle pairs up (the dual path from a cofacet of
    a 2-saddle) from tets given by owned position ``pos`` and star ``slot``.

    Returns ``(done_q, done_code, exit_q, exit_rows)``: the critical tet
    reached as ``layout_index(max vertex) * qmax + slot``, or -1 for the
    outside (the path leaves through the domain's boundary), or the vertex
    layout indices ``(max, a, b, c)`` of a tet whose maximum another rank
    owns. Not collective.

    On a grid the tet across a triangle and a tet's slot in the next star
    come from the stencil's index (:func:`_grid_tables`) instead of scans of
    the star.
    """
    mode, O, P, own, lix, doff, eptr, enb = st.mode, st.O, st.P, st.own, st.layout_index, \
        st.doff, st.eptr, st.enb
    tptr, ttab, qptr, qtab = st.tptr, st.ttab, st.qptr, st.qtab
    cof, tet = _grid_tables(st)
    grid = mode == GRID
    m = qry.shape[0]
    rq = np.empty(m, np.int64)
    rc = np.empty(m, np.int64)
    xq = np.empty(m, np.int64)
    xr = np.empty((m, 4), np.int64)
    nr = 0
    nx = 0
    for k in range(m):
        p = pos[k]
        t = slot[k]
        while True:
            i = own[p]
            code = qp[qptr[i] + t]
            if code == CRITICAL:
                rq[nr] = qry[k]
                rc[nr] = lix[p] * qmax + t
                nr += 1
                break
            ga, gb = tri_nb(mode, tptr, ttab, i, code - DOWN)
            if grid:
                # the tet across triangle (ga, gb) from t, from the stencil's index
                if cof[ga, gb, 0] == t:
                    other, w = cof[ga, gb, 2], cof[ga, gb, 3]
                else:
                    other, w = cof[ga, gb, 0], cof[ga, gb, 1]
            else:
                other, w, _, _ = tet_cofacets(mode, qptr, qtab, i, ga, gb, t)
            ps = nbr_pos(mode, P, doff, eptr, enb, i, w) if other >= 0 else -1
            # on a grid the star stencil also lists tets outside the domain:
            # their extra vertex is padding (layout index -1), so the path has left
            if other < 0 or lix[ps] < 0:
                rq[nr] = qry[k]
                rc[nr] = -1
                nr += 1
                break
            if O[ps] < O[p]:
                t = other
                continue
            # the next tet is in the lower star of its top vertex ps
            pa = nbr_pos(mode, P, doff, eptr, enb, i, ga)
            pb = nbr_pos(mode, P, doff, eptr, enb, i, gb)
            j = own[ps]
            if j < 0:
                xq[nx] = qry[k]
                xr[nx, 0], xr[nx, 1], xr[nx, 2], xr[nx, 3] = lix[ps], lix[p], lix[pa], lix[pb]
                nx += 1
                break
            if grid:
                # its slot in ps's star, from its other vertices' offsets
                a = _slot_of(doff, p - P[j])
                b = _slot_of(doff, pa - P[j])
                c = _slot_of(doff, pb - P[j])
                t = tet[a, b, c] if a >= 0 and b >= 0 and c >= 0 else -1
            else:
                t = tet_slot(st, j, p, pa, pb)
            p = ps
    return rq[:nr], rc[:nr], xq[:nx], xr[:nx]


@njit(cache=True, nogil=True)
def triangle_cofacets(st, qry, ii, slot):  # pragma: no cover
    """The two cofacet tets of critical triangles (owned index ``ii``, star
    ``slot``): as start items ``(q, pos, slot)`` when their top vertex is
    owned, as exit rows ``(q, max, a, b, c)`` (vertex layout indices)
    otherwise, and as outside results ``q`` when the triangle lies on the
    boundary. Not collective."""
    mode, O, P, own, lix, doff, eptr, enb = st.mode, st.O, st.P, st.own, st.layout_index, \
        st.doff, st.eptr, st.enb
    tptr, ttab, qptr, qtab = st.tptr, st.ttab, st.qptr, st.qtab
    m = qry.shape[0]
    sq = np.empty(2 * m, np.int64)
    sp = np.empty(2 * m, np.int64)
    ss = np.empty(2 * m, np.int64)
    oq = np.empty(2 * m, np.int64)
    xr = np.empty((2 * m, 5), np.int64)
    ns = no = nx = 0
    for k in range(m):
        i = ii[k]
        p = P[i]
        a, b = tri_nb(mode, tptr, ttab, i, slot[k])
        pa = nbr_pos(mode, P, doff, eptr, enb, i, a)
        pb = nbr_pos(mode, P, doff, eptr, enb, i, b)
        s1, w1, s2, w2 = tet_cofacets(mode, qptr, qtab, i, a, b, -1)
        found = 0
        for s, w in ((s1, w1), (s2, w2)):
            if s < 0:
                continue
            pw = nbr_pos(mode, P, doff, eptr, enb, i, w)
            if lix[pw] < 0:
                continue        # a stencil tet outside the grid (padding vertex)
            found += 1
            if O[pw] < O[p]:
                sq[ns], sp[ns], ss[ns] = qry[k], p, s
                ns += 1
                continue
            j = own[pw]
            if j < 0:
                xr[nx, 0], xr[nx, 1], xr[nx, 2], xr[nx, 3], xr[nx, 4] = \
                    qry[k], lix[pw], lix[p], lix[pa], lix[pb]
                nx += 1
                continue
            sq[ns], sp[ns], ss[ns] = qry[k], pw, tet_slot(st, j, p, pa, pb)
            ns += 1
        for _ in range(2 - found):
            oq[no] = qry[k]
            no += 1
    return sq[:ns], sp[:ns], ss[:ns], oq[:no], xr[:nx]


@njit(cache=True, nogil=True)
def descend_edges(st, ep, tt, emax, qry, pos, slot):  # pragma: no cover
    """Morse boundary (mod 2) of chains of edges, one chain per query.

    Items ``(qry, pos, slot)`` are edges of owned lower stars, grouped by
    query (``qry`` sorted). Each chain is pushed along the gradient: an edge
    paired with a triangle is replaced by the triangle's other two facets, an
    edge paired with a vertex vanishes, a critical edge is kept. Edges are
    expanded latest first in (vertex order, pairing step), which V-paths
    strictly decrease, so the copies of an edge arriving along different
    paths meet and cancel mod 2 before it is expanded.

    Returns ``(done_q, done_code, exit_q, exit_rows)``: critical edges
    reached as ``layout_index(max vertex) * emax + slot`` (with repetitions;
    parity decides), and edges ``(max, other)`` (vertex layout indices) of
    other ranks' stars. Not collective. On a grid an edge's slot in the
    next star comes from its offset with no early-exit scan.
    """
    mode, O, P, own, lix, doff, eptr, enb = st.mode, st.O, st.P, st.own, st.layout_index, \
        st.doff, st.eptr, st.enb
    tptr, ttab = st.tptr, st.ttab
    grid = mode == GRID
    m = qry.shape[0]
    rq = np.empty(max(m, 16), np.int64)
    rc = np.empty(max(m, 16), np.int64)
    xq = np.empty(16, np.int64)            # exits grow as needed (few: rank boundaries)
    xr = np.empty((16, 2), np.int64)
    nr = 0
    nx = 0
    # the heap: one key per edge, -(vertex order * 2**16 + pairing step) (an
    # edge's step is unique in its vertex's lower star, and below 2**15), with
    # the row (pos, slot, 0) moved along, never compared
    HK = np.empty(64, np.int64)
    HE = np.empty((64, 3), np.int64)
    add_p = np.empty(2, np.int64)       # the edges (position, slot) added to the chain next
    add_j = np.empty(2, np.int64)
    k = 0
    while k < m:
        q = qry[k]
        n = 0
        while True:
            if k < m and qry[k] == q:
                # seed the chain of this query
                add_p[0], add_j[0] = pos[k], slot[k]
                na = 1
                k += 1
            elif n > 0:
                # expand its latest edge, unless its copies cancel
                n = heap.pop3(HK, HE, n)
                key, p, j = HK[n], HE[n, 0], HE[n, 1]
                par = 1
                while n > 0 and HK[0] == key:
                    n = heap.pop3(HK, HE, n)
                    par ^= 1
                if par == 0:
                    continue
                i = own[p]
                a, b = tri_nb(mode, tptr, ttab, i, ep[eptr[i] + j])
                # facet (p, o) of the same lower star
                add_p[0], add_j[0] = p, b if a == j else a
                na = 1
                # facet (pa, pb) in the lower star of its top vertex
                pa = nbr_pos(mode, P, doff, eptr, enb, i, a)
                pb = nbr_pos(mode, P, doff, eptr, enb, i, b)
                if O[pa] < O[pb]:
                    pa, pb = pb, pa
                i2 = own[pa]
                if i2 < 0:
                    if nx == xq.shape[0]:
                        xq, xr = grow(xq, nx), grow(xr, nx)
                    xq[nx], xr[nx, 0], xr[nx, 1] = q, lix[pa], lix[pb]
                    nx += 1
                else:
                    add_p[1] = pa
                    add_j[1] = _slot_of(doff, pb - P[i2]) if grid else edge_slot(st, i2, pb)
                    na = 2
            else:
                break
            for r in range(na):
                p, j = add_p[r], add_j[r]
                i = own[p]
                c = ep[eptr[i] + j]
                if c == CRITICAL:
                    if nr == rq.shape[0]:
                        rq, rc = grow(rq, nr), grow(rc, nr)
                    rq[nr], rc[nr] = q, lix[p] * emax + j
                    nr += 1
                elif c >= 0:
                    if n == HK.shape[0]:
                        HK, HE = grow(HK, n), grow(HE, n)
                    n = heap.push3(HK, HE, n, -(O[p] * 65536 + tt[tptr[i] + c]), p, j, 0)
    return rq[:nr], rc[:nr], xq[:nx], xr[:nx]


