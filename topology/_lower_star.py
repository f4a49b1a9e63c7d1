"""The lower-star discrete gradient kernel (ProcessLowerStars).

The cells of one lower star are visited with two priority queues: a
sequential loop, compiled with numba, over this rank's star tables
(``_star_tables``). Each star slot gets a pairing code (below).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import _heap as heap
from ._star_tables import GRID, nbr_pos, tet_nb, tri_nb

__all__ = ["lower_star_gradient", "NOT_LOWER", "CRITICAL", "TO_VERTEX", "DOWN"]

NOT_LOWER = -2      #: slot not in the lower star of its vertex
CRITICAL = -1       #: critical cell
TO_VERTEX = -3      #: edge paired with its maximum vertex
DOWN = 16384        #: code DOWN + j: paired with facet slot j (else up: coface slot)


@njit(cache=True)
def lower_star_gradient(st, vp, ep, tp, tt, qp):  # pragma: no cover
    """The lower-star discrete gradient of every owned vertex, in place.

    Robins, Wood and Sheppard's ProcessLowerStars with TTK's choices: the
    steepest edge pairs with the vertex, ``pqOne`` and ``pqZero`` pop the
    cell whose lower vertices' orders, sorted descending, are smallest
    (lexicographically, a facet before its cofacets). ``tt`` receives the
    step at which each triangle is paired with an edge (V-paths go back in
    (vertex order, step)).

    Keys are built from the ranks of the lower neighbours among themselves
    (the same comparisons as the orders), packed with the cell into one
    int64 heap entry: ``key * 4096 + dim * 1024 + index``. Not collective.
    """
    mode, O, P, doff = st.mode, st.O, st.P, st.doff
    eptr, enb, tptr, ttab, qptr, qtab, qface = st.eptr, st.enb, st.tptr, st.ttab, st.qptr, \
        st.qtab, st.qface
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
    srt = np.empty(me, np.int64)
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
        ox = O[P[i]]
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
        # rank of each lower neighbour among the lower neighbours, plus one:
        # an insertion sort of their indices by order
        for a in range(nl):
            b = a
            while b > 0 and le_o[srt[b - 1]] > le_o[a]:
                srt[b] = srt[b - 1]
                b -= 1
            srt[b] = a
        for a in range(nl):
            le_r[srt[a]] = a + 1
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
                for k in range(3):
                    lq_f[nq, k] = tmap[qface[t if mode == GRID else q0 + t, k]]
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
                n0 = heap.push1(H0, n0, (le_r[k] * M * M) * 4096 + 1024 + k)
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
                            n1 = heap.push1(H1, n1, lt_k[b] * 4096 + 2048 + b)
                elif cd == 2:
                    for kk in range(ntcof[ca]):
                        b = tcof[ca, kk]
                        f0, f1, f2 = lq_f[b, 0], lq_f[b, 1], lq_f[b, 2]
                        if (lt_pd[f0] == 0) + (lt_pd[f1] == 0) + (lt_pd[f2] == 0) == 1:
                            n1 = heap.push1(H1, n1, lq_k[b] * 4096 + 3072 + b)
            # next event: pop pqOne, else a critical cell from pqZero
            dim_c = 0
            while n1 > 0:
                v, n1 = heap.pop1(H1, n1)
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
                    n0 = heap.push1(H0, n0, v)
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
                v, n0 = heap.pop1(H0, n0)
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
