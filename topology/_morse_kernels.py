"""Compiled loops of the discrete gradient and of the Morse complex traversals.

ProcessLowerStars visits the cells of one lower star with two priority
queues, and the V-path traversals follow the gradient one cell at a time:
both are sequential, so they are plain loops compiled with numba. Every
kernel works on this rank's star tables only (not collective).

A *star table* describes the star of every owned vertex: on a grid a fixed
stencil (14 neighbours, 36 triangles, 24 tetrahedra around a vertex in 3D;
6, 6, 0 in 2D) applied at the vertex's position in the padded ghosted
array; on an explicit complex CSR lists. Cells are named by their maximum
vertex (in the global order) and their slot in that vertex's star, so the
lower star of a vertex owns each of its cells exactly once. ``O[pos]`` is
the global order at a position (-1 for padding).
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.typed import List

NOT_LOWER = -2      #: slot not in the lower star of its vertex
CRITICAL = -1       #: critical cell
TO_VERTEX = -3      #: edge paired with its maximum vertex
DOWN = 16384        #: code DOWN + j: paired with facet slot j (else up: coface slot)


# -- star tables ------------------------------------------------------------------------------
@njit(cache=True, inline="always")
def nbr_pos(mode, P, doff, eptr, enb, i, j):  # pragma: no cover
    if mode == 0:
        return P[i] + doff[j]
    return enb[eptr[i] + j]


@njit(cache=True, inline="always")
def tri_nb(mode, tptr, ttab, i, t):  # pragma: no cover
    if mode == 0:
        return ttab[t, 0], ttab[t, 1]
    k = tptr[i] + t
    return ttab[k, 0], ttab[k, 1]


@njit(cache=True, inline="always")
def tet_nb(mode, qptr, qtab, i, t):  # pragma: no cover
    if mode == 0:
        return qtab[t, 0], qtab[t, 1], qtab[t, 2]
    k = qptr[i] + t
    return qtab[k, 0], qtab[k, 1], qtab[k, 2]


@njit(cache=True)
def find_nbr(mode, P, doff, eptr, enb, i, pos):  # pragma: no cover
    for j in range(eptr[i + 1] - eptr[i]):
        if nbr_pos(mode, P, doff, eptr, enb, i, j) == pos:
            return j
    return -1


@njit(cache=True)
def find_tri(mode, tptr, ttab, i, a, b):  # pragma: no cover
    if a > b:
        a, b = b, a
    for t in range(tptr[i + 1] - tptr[i]):
        u, v = tri_nb(mode, tptr, ttab, i, t)
        if u > v:
            u, v = v, u
        if u == a and v == b:
            return t
    return -1


@njit(cache=True)
def find_tet(mode, qptr, qtab, i, a, b, c):  # pragma: no cover
    for t in range(qptr[i + 1] - qptr[i]):
        u, v, w = tet_nb(mode, qptr, qtab, i, t)
        if (u == a or v == a or w == a) and (u == b or v == b or w == b) and \
                (u == c or v == c or w == c):
            return t
    return -1


# -- a small binary min-heap on rows (k1, k2, k3, payload) --------------------------------------
@njit(cache=True, inline="always")
def _less(H, a, b):  # pragma: no cover
    for c in range(3):
        if H[a, c] != H[b, c]:
            return H[a, c] < H[b, c]
    return False


@njit(cache=True)
def heap_push(H, n, k1, k2, k3, v):  # pragma: no cover
    if n == H.shape[0]:
        G = np.empty((2 * n + 16, 4), dtype=np.int64)
        G[:n] = H[:n]
        H = G
    H[n, 0], H[n, 1], H[n, 2], H[n, 3] = k1, k2, k3, v
    c = n
    while c > 0:
        p = (c - 1) // 2
        if _less(H, c, p):
            for k in range(4):
                H[c, k], H[p, k] = H[p, k], H[c, k]
            c = p
        else:
            break
    return H, n + 1


@njit(cache=True)
def heap_pop(H, n):  # pragma: no cover
    """Remove the top row (copied to row ``n - 1``); returns the new size."""
    n -= 1
    for k in range(4):
        H[0, k], H[n, k] = H[n, k], H[0, k]
    c = 0
    while True:
        l = 2 * c + 1
        if l >= n:
            break
        m = l
        if l + 1 < n and _less(H, l + 1, l):
            m = l + 1
        if _less(H, m, c):
            for k in range(4):
                H[c, k], H[m, k] = H[m, k], H[c, k]
            c = m
        else:
            break
    return n


# -- ProcessLowerStars ---------------------------------------------------------------------------
@njit(cache=True, inline="always")
def _hpush(H, n, v):  # pragma: no cover
    """Push ``v`` on the int64 min-heap ``H[:n]`` (capacity is the caller's)."""
    c = n
    H[c] = v
    while c > 0:
        p = (c - 1) >> 1
        if H[c] < H[p]:
            H[c], H[p] = H[p], H[c]
            c = p
        else:
            break
    return n + 1


@njit(cache=True, inline="always")
def _hpop(H, n):  # pragma: no cover
    """Pop the minimum of ``H[:n]``; returns ``(value, new size)``."""
    top = H[0]
    n -= 1
    H[0] = H[n]
    c = 0
    while True:
        l = 2 * c + 1
        if l >= n:
            break
        m = l
        if l + 1 < n and H[l + 1] < H[l]:
            m = l + 1
        if H[m] < H[c]:
            H[c], H[m] = H[m], H[c]
            c = m
        else:
            break
    return top, n


@njit(cache=True)
def lower_star_gradient(mode, O, P, doff, eptr, enb, tptr, ttab, qptr, qtab, qface,
                        vp, ep, tp, tt, qp):  # pragma: no cover
    """The lower-star discrete gradient of every owned vertex, in place.

    Robins, Wood and Sheppard's ProcessLowerStars with TTK's choices: the
    steepest edge pairs with the vertex, ``pqOne`` and ``pqZero`` pop the
    cell whose lower vertices' orders, sorted descending, are smallest
    (lexicographically, a facet before its cofacets). ``tt`` receives the
    step at which each triangle is paired with an edge (V-paths go back in
    (vertex order, step)).

    Keys are built from the ranks of the lower neighbours among themselves
    (the same comparisons as the orders), packed with the cell into one
    int64 heap entry: ``key * 4096 + dim * 1024 + index``.
    """
    n = P.shape[0]
    me = 1
    mt = 1
    mq = 1
    for i in range(n):
        me = max(me, eptr[i + 1] - eptr[i])
        mt = max(mt, tptr[i + 1] - tptr[i])
        mq = max(mq, qptr[i + 1] - qptr[i])
    emap = np.empty(me, np.int64)
    tmap = np.empty(mt, np.int64)
    le_j = np.empty(me, np.int64)
    le_o = np.empty(me, np.int64)
    le_r = np.empty(me, np.int64)
    le_pd = np.empty(me, np.int64)
    lt_t = np.empty(mt, np.int64)
    lt_k = np.empty(mt, np.int64)
    lt_f = np.empty((mt, 2), np.int64)
    lt_pd = np.empty(mt, np.int64)
    lq_t = np.empty(mq, np.int64)
    lq_k = np.empty(mq, np.int64)
    lq_f = np.empty((mq, 3), np.int64)
    lq_pd = np.empty(mq, np.int64)
    ecof = np.empty((me, mt), np.int64)       # lower triangles on each lower edge
    necof = np.empty(me, np.int64)
    tcof = np.empty((mt, max(mq, 1)), np.int64)  # lower tets on each lower triangle
    ntcof = np.empty(mt, np.int64)
    cap = 2 * me + 4 * mt + 6 * mq + 16
    H0 = np.empty(cap, np.int64)
    H1 = np.empty(cap, np.int64)
    for i in range(n):
        p = P[i]
        ox = O[p]
        e0, t0, q0 = eptr[i], tptr[i], qptr[i]
        ne, nt_all, nq_all = eptr[i + 1] - e0, tptr[i + 1] - t0, qptr[i + 1] - q0
        nl = 0
        for j in range(ne):
            o = O[nbr_pos(mode, P, doff, eptr, enb, i, j)]
            if o >= 0 and o < ox:
                emap[j] = nl
                le_j[nl] = j
                le_o[nl] = o
                le_pd[nl] = 0
                nl += 1
            else:
                emap[j] = -1
                ep[e0 + j] = NOT_LOWER
        # rank of each lower neighbour among the lower neighbours, plus one
        for a in range(nl):
            r = 1
            for b in range(nl):
                if le_o[b] < le_o[a]:
                    r += 1
            le_r[a] = r
        M = nl + 1
        nt = 0
        for t in range(nt_all):
            a, b = tri_nb(mode, tptr, ttab, i, t)
            if emap[a] >= 0 and emap[b] >= 0:
                tmap[t] = nt
                lt_t[nt] = t
                ra, rb = le_r[emap[a]], le_r[emap[b]]
                lt_k[nt] = (max(ra, rb) * M + min(ra, rb)) * M
                lt_f[nt, 0], lt_f[nt, 1] = emap[a], emap[b]
                lt_pd[nt] = 0
                ntcof[nt] = 0
                nt += 1
            else:
                tmap[t] = -1
                tp[t0 + t] = NOT_LOWER
                tt[t0 + t] = -1
        nq = 0
        for t in range(nq_all):
            a, b, c = tet_nb(mode, qptr, qtab, i, t)
            if emap[a] >= 0 and emap[b] >= 0 and emap[c] >= 0:
                lq_t[nq] = t
                ra, rb, rc = le_r[emap[a]], le_r[emap[b]], le_r[emap[c]]
                hi = max(ra, max(rb, rc))
                lo = min(ra, min(rb, rc))
                lq_k[nq] = (hi * M + ra + rb + rc - hi - lo) * M + lo
                if mode == 0:
                    for k in range(3):
                        lq_f[nq, k] = tmap[qface[t, k]]
                else:
                    for k in range(3):
                        lq_f[nq, k] = tmap[qface[q0 + t, k]]
                lq_pd[nq] = 0
                for k in range(3):
                    f = lq_f[nq, k]
                    tcof[f, ntcof[f]] = nq
                    ntcof[f] += 1
                nq += 1
            else:
                qp[q0 + t] = NOT_LOWER
        if nl == 0:
            vp[i] = CRITICAL
            continue
        for k in range(nl):
            necof[k] = 0
        for b in range(nt):
            for k in range(2):
                f = lt_f[b, k]
                ecof[f, necof[f]] = b
                necof[f] += 1
        d = 0
        for k in range(1, nl):
            if le_o[k] < le_o[d]:
                d = k
        vp[i] = le_j[d]
        ep[e0 + le_j[d]] = TO_VERTEX
        le_pd[d] = 1
        step = 1
        n0 = 0
        n1 = 0
        for k in range(nl):
            if k != d:
                n0 = _hpush(H0, n0, (le_r[k] * M * M) * 4096 + 1024 + k)
        # the cells whose unpaired facets drop to one when a cell is paired
        # (insertCofacets) are pushed on pqOne: start with delta's
        dim_c, a_c = 1, d
        extra_dim, extra_a = 0, -1
        while True:
            for rep in range(2):
                cd, ca = (dim_c, a_c) if rep == 0 else (extra_dim, extra_a)
                if cd == 1:
                    for kk in range(necof[ca]):
                        b = ecof[ca, kk]
                        if (le_pd[lt_f[b, 0]] == 0) + (le_pd[lt_f[b, 1]] == 0) == 1:
                            n1 = _hpush(H1, n1, lt_k[b] * 4096 + 2048 + b)
                elif cd == 2:
                    for kk in range(ntcof[ca]):
                        b = tcof[ca, kk]
                        f0, f1, f2 = lq_f[b, 0], lq_f[b, 1], lq_f[b, 2]
                        if (lt_pd[f0] == 0) + (lt_pd[f1] == 0) + (lt_pd[f2] == 0) == 1:
                            n1 = _hpush(H1, n1, lq_k[b] * 4096 + 3072 + b)
            # next event: pop pqOne, else a critical cell from pqZero
            dim_c = 0
            while n1 > 0:
                v, n1 = _hpop(H1, n1)
                code = v & 4095
                dm, a = code >> 10, code & 1023
                if (dm == 2 and lt_pd[a]) or (dm == 3 and lq_pd[a]):
                    continue  # already the partner of a cofacet: keep V a matching
                cnt = 0
                f = -1
                if dm == 2:
                    for k in range(2):
                        if le_pd[lt_f[a, k]] == 0:
                            cnt += 1
                            f = lt_f[a, k]
                else:
                    for k in range(3):
                        if lt_pd[lq_f[a, k]] == 0:
                            cnt += 1
                            f = lq_f[a, k]
                if cnt == 0:
                    n0 = _hpush(H0, n0, v)
                    continue
                if dm == 2:
                    le_pd[f] = 1
                    lt_pd[a] = 1
                    ep[e0 + le_j[f]] = lt_t[a]
                    tp[t0 + lt_t[a]] = DOWN + le_j[f]
                    tt[t0 + lt_t[a]] = step
                else:
                    lt_pd[f] = 1
                    lq_pd[a] = 1
                    tp[t0 + lt_t[f]] = lq_t[a]
                    qp[q0 + lq_t[a]] = DOWN + lt_t[f]
                step += 1
                dim_c, a_c, extra_dim, extra_a = dm, a, dm - 1, f
                break
            if dim_c:
                continue
            extra_dim = 0
            while n0 > 0:
                v, n0 = _hpop(H0, n0)
                code = v & 4095
                dm, a = code >> 10, code & 1023
                if (dm == 1 and le_pd[a]) or (dm == 2 and lt_pd[a]) or (dm == 3 and lq_pd[a]):
                    continue
                if dm == 1:
                    le_pd[a] = 1
                    ep[e0 + le_j[a]] = CRITICAL
                elif dm == 2:
                    lt_pd[a] = 1
                    tp[t0 + lt_t[a]] = CRITICAL
                    tt[t0 + lt_t[a]] = step
                else:
                    lq_pd[a] = 1
                    qp[q0 + lq_t[a]] = CRITICAL
                step += 1
                dim_c, a_c = dm, a
                break
            if dim_c == 0:
                break
        # nothing is left unpaired (Robins et al., Lemma); stay safe anyway
        for k in range(nl):
            if le_pd[k] == 0:
                ep[e0 + le_j[k]] = CRITICAL
        for k in range(nt):
            if lt_pd[k] == 0:
                tp[t0 + lt_t[k]] = CRITICAL
        for k in range(nq):
            if lq_pd[k] == 0:
                qp[q0 + lq_t[k]] = CRITICAL


# -- V-path traversals -----------------------------------------------------------------------------
@njit(cache=True)
def descend_vertices(mode, P, own, gid, doff, eptr, enb, vp, qry, pos):  # pragma: no cover
    """Follow vertex-edge pairs down from owned positions ``pos``.

    Returns ``(done_q, done_min, exit_q, exit_gid)``: the minimum (global
    id) reached, or the first vertex another rank owns.
    """
    m = qry.shape[0]
    rq = np.empty(m, np.int64)
    rg = np.empty(m, np.int64)
    xq = np.empty(m, np.int64)
    xg = np.empty(m, np.int64)
    nr = 0
    nx = 0
    for k in range(m):
        p = pos[k]
        while True:
            i = own[p]
            if i < 0:
                xq[nx] = qry[k]
                xg[nx] = gid[p]
                nx += 1
                break
            c = vp[i]
            if c < 0:
                rq[nr] = qry[k]
                rg[nr] = gid[p]
                nr += 1
                break
            p = nbr_pos(mode, P, doff, eptr, enb, i, c)
    return rq[:nr], rg[:nr], xq[:nx], xg[:nx]


@njit(cache=True)
def tet_cofacets(mode, qptr, qtab, i, a, b, skip):  # pragma: no cover
    """The tets of vertex i's star that contain neighbours a and b, other
    than slot ``skip``: up to two ``(slot, third neighbour)``."""
    s1, w1, s2, w2 = -1, -1, -1, -1
    for t2 in range(qptr[i + 1] - qptr[i]):
        if t2 == skip:
            continue
        x, y, z = tet_nb(mode, qptr, qtab, i, t2)
        hit = 0
        s = -1
        if x == a or x == b:
            hit += 1
        else:
            s = x
        if y == a or y == b:
            hit += 1
        else:
            s = y
        if z == a or z == b:
            hit += 1
        else:
            s = z
        if hit == 2:
            if s1 < 0:
                s1, w1 = t2, s
            else:
                s2, w2 = t2, s
    return s1, w1, s2, w2


@njit(cache=True)
def ascend_tets(mode, O, P, own, gid, doff, eptr, enb, tptr, ttab, qptr, qtab, qp, qmax,
                qry, pos, slot):  # pragma: no cover
    """Follow tetrahedron-triangle pairs up (the dual path from a cofacet of
    a 2-saddle) from tets given by owned position ``pos`` and star ``slot``.

    Returns ``(done_q, done_code, exit_q, exit_rows)``: the critical tet
    reached as ``gid(max vertex) * qmax + slot``, or -1 for the outside (the
    path leaves through the domain's boundary), or the vertex ids
    ``(max, a, b, c)`` of a tet whose maximum another rank owns.
    """
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
                rc[nr] = gid[p] * qmax + t
                nr += 1
                break
            ga, gb = tri_nb(mode, tptr, ttab, i, code - DOWN)
            other, w, _, _ = tet_cofacets(mode, qptr, qtab, i, ga, gb, t)
            ps = nbr_pos(mode, P, doff, eptr, enb, i, w) if other >= 0 else -1
            # on a grid the star stencil also lists tets outside the domain:
            # their extra vertex is padding with gid -1, so the path has left
            if other < 0 or gid[ps] < 0:
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
                xr[nx, 0], xr[nx, 1], xr[nx, 2], xr[nx, 3] = gid[ps], gid[p], gid[pa], gid[pb]
                nx += 1
                break
            t = find_tet(mode, qptr, qtab, j, find_nbr(mode, P, doff, eptr, enb, j, p),
                         find_nbr(mode, P, doff, eptr, enb, j, pa),
                         find_nbr(mode, P, doff, eptr, enb, j, pb))
            p = ps
    return rq[:nr], rc[:nr], xq[:nx], xr[:nx]


@njit(cache=True)
def descend_edges(mode, O, P, own, gid, doff, eptr, enb, tptr, ttab, ep, tt, emax,
                  qry, pos, slot):  # pragma: no cover
    """Morse boundary (mod 2) of chains of edges, one chain per query.

    Items ``(qry, pos, slot)`` are edges of owned lower stars, grouped by
    query (``qry`` sorted). Each chain is pushed along the gradient: an edge
    paired with a triangle is replaced by the triangle's other two facets, an
    edge paired with a vertex vanishes, a critical edge is kept. Edges are
    expanded latest first in (vertex order, pairing step), which V-paths
    strictly decrease, so the copies of an edge arriving along different
    paths meet and cancel mod 2 before it is expanded.

    Returns ``(done_q, done_code, exit_q, exit_rows)``: critical edges
    reached as ``gid(max vertex) * emax + slot`` (with repetitions; parity
    decides), and edges ``(max, other)`` (vertex ids) of other ranks' stars.
    """
    m = qry.shape[0]
    rq = np.empty(max(m, 16), np.int64)
    rc = np.empty(max(m, 16), np.int64)
    xq = np.empty(max(m, 16), np.int64)
    xr = np.empty((max(m, 16), 2), np.int64)
    nr = 0
    nx = 0
    H = np.empty((64, 4), np.int64)
    k = 0
    while k < m:
        q = qry[k]
        n = 0
        # seed the chain of this query
        while k < m and qry[k] == q:
            p, j = pos[k], slot[k]
            i = own[p]
            c = ep[eptr[i] + j]
            if c == CRITICAL:
                if nr == rq.shape[0]:
                    rq, rc = _grow1(rq, nr), _grow1(rc, nr)
                rq[nr], rc[nr] = q, gid[p] * emax + j
                nr += 1
            elif c >= 0:
                H, n = heap_push(H, n, -O[p], -tt[tptr[i] + c], p, j)
            k += 1
        while n > 0:
            n = heap_pop(H, n)
            k1, k2, p, j = H[n, 0], H[n, 1], H[n, 2], H[n, 3]
            par = 1
            while n > 0 and H[0, 0] == k1 and H[0, 1] == k2:
                n = heap_pop(H, n)
                par ^= 1
            if par == 0:
                continue
            i = own[p]
            t = ep[eptr[i] + j]
            a, b = tri_nb(mode, tptr, ttab, i, t)
            o = b if a == j else a
            # facet (p, o) of the same lower star
            c = ep[eptr[i] + o]
            if c == CRITICAL:
                if nr == rq.shape[0]:
                    rq, rc = _grow1(rq, nr), _grow1(rc, nr)
                rq[nr], rc[nr] = q, gid[p] * emax + o
                nr += 1
            elif c >= 0:
                H, n = heap_push(H, n, -O[p], -tt[tptr[i] + c], p, o)
            # facet (pa, pb) in the lower star of its top vertex
            pa = nbr_pos(mode, P, doff, eptr, enb, i, a)
            pb = nbr_pos(mode, P, doff, eptr, enb, i, b)
            if O[pa] < O[pb]:
                pa, pb = pb, pa
            i2 = own[pa]
            if i2 < 0:
                if nx == xq.shape[0]:
                    xq, xr = _grow1(xq, nx), _grow2(xr, nx)
                xq[nx], xr[nx, 0], xr[nx, 1] = q, gid[pa], gid[pb]
                nx += 1
                continue
            j2 = find_nbr(mode, P, doff, eptr, enb, i2, pb)
            c = ep[eptr[i2] + j2]
            if c == CRITICAL:
                if nr == rq.shape[0]:
                    rq, rc = _grow1(rq, nr), _grow1(rc, nr)
                rq[nr], rc[nr] = q, gid[pa] * emax + j2
                nr += 1
            elif c >= 0:
                H, n = heap_push(H, n, -O[pa], -tt[tptr[i2] + c], pa, j2)
    return rq[:nr], rc[:nr], xq[:nx], xr[:nx]


@njit(cache=True)
def _grow1(a, n):  # pragma: no cover
    b = np.empty(2 * a.shape[0], a.dtype)
    b[:n] = a[:n]
    return b


@njit(cache=True)
def _grow2(a, n):  # pragma: no cover
    b = np.empty((2 * a.shape[0], a.shape[1]), a.dtype)
    b[:n] = a[:n]
    return b


@njit(cache=True)
def symdiff(a, b):  # pragma: no cover
    """Symmetric difference of two sorted unique int64 arrays (Z2 column sum)."""
    out = np.empty(a.shape[0] + b.shape[0], np.int64)
    i = j = n = 0
    while i < a.shape[0] and j < b.shape[0]:
        if a[i] < b[j]:
            out[n] = a[i]
            i += 1
            n += 1
        elif b[j] < a[i]:
            out[n] = b[j]
            j += 1
            n += 1
        else:
            i += 1
            j += 1
    while i < a.shape[0]:
        out[n] = a[i]
        i += 1
        n += 1
    while j < b.shape[0]:
        out[n] = b[j]
        j += 1
        n += 1
    return out[:n]


@njit(cache=True)
def reduce_columns(ptr, rows, nrows):  # pragma: no cover
    """Z2 column reduction (standard algorithm) of sparse columns given in
    CSR form (row indices sorted ascending, columns in filtration order).

    Returns ``pivot_col``: for every row the column whose reduced lowest
    entry it is, or -1; and ``zero``: whether each column reduced to 0.
    """
    ncol = ptr.shape[0] - 1
    pivot = np.full(nrows, -1, np.int64)
    zero = np.zeros(ncol, np.bool_)
    red = List.empty_list(types.int64[:])
    for c in range(ncol):
        col = rows[ptr[c]:ptr[c + 1]].copy()
        while col.shape[0] > 0:
            low = col[-1]
            k = pivot[low]
            if k < 0:
                pivot[low] = c
                break
            col = symdiff(col, red[k])
        red.append(col)
        if col.shape[0] == 0:
            zero[c] = True
    return pivot, zero


@njit(cache=True)
def triangle_cofacets(mode, O, P, own, gid, doff, eptr, enb, tptr, ttab, qptr, qtab,
                      qry, ii, slot):  # pragma: no cover
    """The two cofacet tets of critical triangles (owned index ``ii``, star
    ``slot``): as start items ``(q, pos, slot)`` when their top vertex is
    owned, as exit rows ``(q, max, a, b, c)`` (vertex ids) otherwise, and as
    outside results ``q`` when the triangle lies on the boundary."""
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
            if gid[pw] < 0:
                continue        # a stencil tet outside the grid (padding vertex)
            found += 1
            if O[pw] < O[p]:
                sq[ns], sp[ns], ss[ns] = qry[k], p, s
                ns += 1
                continue
            j = own[pw]
            if j < 0:
                xr[nx, 0], xr[nx, 1], xr[nx, 2], xr[nx, 3], xr[nx, 4] = \
                    qry[k], gid[pw], gid[p], gid[pa], gid[pb]
                nx += 1
                continue
            sq[ns], sp[ns] = qry[k], pw
            ss[ns] = find_tet(mode, qptr, qtab, j, find_nbr(mode, P, doff, eptr, enb, j, p),
                              find_nbr(mode, P, doff, eptr, enb, j, pa),
                              find_nbr(mode, P, doff, eptr, enb, j, pb))
            ns += 1
        for _ in range(2 - found):
            oq[no] = qry[k]
            no += 1
    return sq[:ns], sp[:ns], ss[:ns], oq[:no], xr[:nx]


@njit(cache=True)
def locate_tets(mode, P, own, doff, eptr, enb, qptr, qtab, rows):  # pragma: no cover
    """Star slots of tets given as owned top position and three more positions."""
    out = np.empty(rows.shape[0], np.int64)
    for k in range(rows.shape[0]):
        j = own[rows[k, 0]]
        out[k] = find_tet(mode, qptr, qtab, j,
                          find_nbr(mode, P, doff, eptr, enb, j, rows[k, 1]),
                          find_nbr(mode, P, doff, eptr, enb, j, rows[k, 2]),
                          find_nbr(mode, P, doff, eptr, enb, j, rows[k, 3]))
    return out


@njit(cache=True)
def locate_edges(mode, P, own, doff, eptr, enb, top, other):  # pragma: no cover
    """Star slots of edges given as owned top position and other position."""
    out = np.empty(top.shape[0], np.int64)
    for k in range(top.shape[0]):
        out[k] = find_nbr(mode, P, doff, eptr, enb, own[top[k]], other[k])
    return out


@njit(cache=True)
def union_find_deaths(a, b, age):  # pragma: no cover
    """Elder-rule union-find over edges ``(a[k], b[k])`` taken in order.

    Nodes are born with ``age`` (smaller is elder). Returns, per edge, the
    node whose component dies when the edge merges two (the younger root),
    or -1 when both ends are already connected.
    """
    n = age.shape[0]
    parent = np.arange(n)
    out = np.full(a.shape[0], -1, np.int64)
    for k in range(a.shape[0]):
        x = a[k]
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        y = b[k]
        while parent[y] != y:
            parent[y] = parent[parent[y]]
            y = parent[y]
        if x == y:
            continue
        if age[x] < age[y]:
            x, y = y, x
        out[k] = x          # x is the younger root
        parent[x] = y
    return out
