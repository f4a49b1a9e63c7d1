"""The lower-star discrete gradient kernel (ProcessLowerStars).

The cells of one lower star are visited with two priority queues: a
sequential loop, compiled with numba, over this rank's star tables
(``_star_tables``). Each star slot gets a pairing code (below).
"""

from __future__ import annotations

import numpy as np

from dmsolve.jit import njit

from ..kernels import heap, lowest_bit, set_add, set_pop
from ._star_tables import GRID, nbr_pos, tet_nb, tri_nb

__all__ = ["lower_star_gradient", "NOT_LOWER", "CRITICAL", "TO_VERTEX", "DOWN"]

NOT_LOWER = -2      #: slot not in the lower star of its vertex
CRITICAL = -1       #: critical cell
TO_VERTEX = -3      #: edge paired with its maximum vertex
DOWN = 16384        #: code DOWN + j: paired with facet slot j (else up: coface slot)

# The grid kernel's cache of whole lower stars: 2**14 entries, tried on
# windows of 4096 vertices (see _grid_lower_stars)
_CACHE_BITS = 14
_WINDOW = 4096
_HASH = np.int64(-7046029254386353131)      # 0x9E3779B97F4A7C15, Fibonacci hashing


@njit(cache=True, nogil=True)
def lower_star_gradient(st, vp, ep, tp, tt, qp, i0, i1):  # pragma: no cover
    """The lower-star discrete gradient of owned vertices ``i0:i1``, in place.

    Robins, Wood and Sheppard's ProcessLowerStars with TTK's choices: the
    steepest edge pairs with the vertex, ``pqOne`` and ``pqZero`` pop the
    cell whose lower vertices' orders, sorted descending, are smallest
    (lexicographically, a facet before its cofacets). ``tt`` receives the
    step at which each triangle is paired with an edge or made critical
    (V-paths go back in (vertex order, step)); a triangle paired with a
    tetrahedron keeps its ``tt`` entry. A grid goes through
    ``_grid_lower_stars``, a complex through ``_general_lower_stars``: the
    same pairs and steps. Not collective.

    A vertex writes only its own star's slots (and reads no other's), so
    ranges of vertices can run at once on several threads.
    """
    if st.mode == GRID and st.doff.shape[0] < 16:
        _grid_lower_stars(st.O, st.P, st.doff, st.ttab, st.qtab, st.qface, vp, ep, tp, tt, qp,
                          i0, i1)
    else:
        _general_lower_stars(st, vp, ep, tp, tt, qp, i0, i1)


@njit(cache=True, nogil=True)
def _grid_lower_stars(O, P, doff, ttab, qtab, qface, vp, ep, tp, tt, qp, i0,
                      i1):  # pragma: no cover
    """:func:`lower_star_gradient` on a grid, whose stencil (14 neighbours,
    36 triangles, 24 tetrahedra in 3D) fits in 64-bit masks and whose ranks
    fit in 4 bits. Not collective.

    The same algorithm as ``_general_lower_stars`` with the star held in
    bit masks over its slots, since the cost there was mispredicted branches
    and per-cell bookkeeping, not memory:

    - the lower neighbours get ranks 1..14 among themselves, and a cell's
      key is its ranks sorted descending, 4 bits each (``hi << 8 | mid << 4
      | lo``, 0 for none): the same order as the general kernel's keys;
    - each cell enters ``pqOne`` once (when its unpaired facets drop to one)
      and ``pqZero`` once, so both queues are sets: a bit set of the 4096
      keys, two levels of 64-bit words, popped with count-trailing-zeros;
    - the pairing of a lower star depends only on which neighbours are lower
      and their ranks, 4 bits per slot in one int64 signature, and on
      smooth fields most stars repeat one of a few thousand signatures: a
      direct-mapped cache of finished stars replays them. It is tried in
      windows of vertices and skipped while it hits less than a quarter of
      the time (noisy fields), where its stores cost more than it saves.
      A replayed star is the star computed, so the cache (one per call)
      changes the time only, never the pairs.
    """
    ne, ntr, nqt = doff.shape[0], ttab.shape[0], qtab.shape[0]
    one = np.int64(1)
    # the stencil as masks: triangles' and tets' neighbours, tets' faces,
    # the tets on each triangle, the triangle of each pair of neighbours
    tri_of = np.full((ne, ne), -1, np.int64)
    enbm = np.zeros(ne, np.int64)     # neighbours sharing a triangle with slot j
    temk = np.zeros(ntr, np.int64)
    qvm = np.zeros(max(nqt, 1), np.int64)
    qfm = np.zeros(max(nqt, 1), np.int64)
    tqm = np.zeros(ntr, np.int64)
    for t in range(ntr):
        a, b = ttab[t, 0], ttab[t, 1]
        tri_of[a, b] = t
        tri_of[b, a] = t
        enbm[a] |= one << b
        enbm[b] |= one << a
        temk[t] = (one << a) | (one << b)
    for q in range(nqt):
        for k in range(3):
            qvm[q] |= one << qtab[q, k]
            qfm[q] |= one << qface[q, k]
            tqm[qface[q, k]] |= one << q
    ls = np.empty(ne + 1, np.int64)       # lower neighbours' slots and orders
    ol = np.empty(ne + 1, np.int64)
    rk = np.zeros(ne, np.int64)
    H0 = np.zeros(64, np.int64)           # pqZero, pqOne: empty after every star
    H1 = np.zeros(64, np.int64)
    cell_at = np.zeros(4096, np.int64)    # key -> cell (dim * 64 + slot) in this star
    nc = 1 << _CACHE_BITS
    c_sig = np.full(nc, -1, np.int64)
    c_ttw = np.zeros(nc, np.int64)        # triangles whose tt the star writes
    c_row = np.zeros((nc, 1 + ne + 2 * ntr + nqt), np.int16)
    skip = 0
    hits = 0
    tried = 0
    for i in range(i0, i1):
        p = P[i]
        ox = O[p]
        e0, t0, q0 = i * ne, i * ntr, i * nqt
        L = np.int64(0)
        nl = 0
        for j in range(ne):
            o = O[p + doff[j]]
            low = (o >= 0) & (o < ox)
            ls[nl] = j
            ol[nl] = o
            nl += low
            L |= np.int64(low) << j
        LT = np.int64(0)
        for t in range(ntr):
            LT |= np.int64((L & temk[t]) == temk[t]) << t
        LQ = np.int64(0)
        for q in range(nqt):
            LQ |= np.int64((L & qvm[q]) == qvm[q]) << q
        # write every slot as not lower and overwrite the lower ones below:
        # cheaper than a loop over the slots that are not (it mispredicts)
        for j in range(ne):
            ep[e0 + j] = NOT_LOWER
        for t in range(ntr):
            tp[t0 + t] = NOT_LOWER
            tt[t0 + t] = tt[t0 + t] if (LT >> t) & 1 else -1
        for q in range(nqt):
            qp[q0 + q] = NOT_LOWER
        if L == 0:
            vp[i] = CRITICAL
            continue
        d = 0
        sig = np.int64(0)
        for a in range(nl):
            oa = ol[a]
            r = 1
            for b in range(nl):
                r += ol[b] < oa
            rk[ls[a]] = r
            sig |= r << (4 * ls[a])
            d = ls[a] if r == 1 else d
        if i % _WINDOW == 0:
            if skip > 0:
                skip -= 1
            elif 4 * hits < tried:
                skip = 15
            hits = 0
            tried = 0
        h = ((sig * _HASH) >> (64 - _CACHE_BITS)) & (nc - 1)
        if skip == 0:
            tried += 1
            if c_sig[h] == sig:
                hits += 1
                row = c_row[h]
                w = c_ttw[h]
                vp[i] = row[0]
                for j in range(ne):
                    ep[e0 + j] = row[1 + j]
                for t in range(ntr):
                    tp[t0 + t] = row[1 + ne + t]
                    tt[t0 + t] = row[1 + ne + ntr + t] if (w >> t) & 1 else tt[t0 + t]
                for q in range(nqt):
                    qp[q0 + q] = row[1 + ne + 2 * ntr + q]
                continue
        vp[i] = d
        ep[e0 + d] = TO_VERTEX
        PE = one << d          # paired edges, triangles, tets; tt written
        PT = np.int64(0)
        PQ = np.int64(0)
        TTW = np.int64(0)
        step = 1
        s0 = np.int64(0)
        s1 = np.int64(0)
        x = L & ~PE
        while x:
            j = lowest_bit(x)
            key = rk[j] << 8
            cell_at[key] = 64 + j
            s0 = set_add(H0, s0, key)
            x &= x - 1
        ce, ct = d, -1       # the edge and the triangle whose cofacets go on pqOne next
        while True:
            if ce >= 0:
                # triangles on edge ce whose other edge is lower and unpaired
                x = enbm[ce] & L & ~PE
                while x:
                    o = lowest_bit(x)
                    ra, rb = rk[ce], rk[o]
                    key = (max(ra, rb) << 8) | (min(ra, rb) << 4)
                    cell_at[key] = 128 + tri_of[ce, o]
                    s1 = set_add(H1, s1, key)
                    x &= x - 1
            if ct >= 0:
                # lower tets on triangle ct with one unpaired face
                x = tqm[ct] & LQ
                while x:
                    q = lowest_bit(x)
                    um = qfm[q] & ~PT
                    if um != 0 and (um & (um - 1)) == 0:
                        ra, rb, rc = rk[qtab[q, 0]], rk[qtab[q, 1]], rk[qtab[q, 2]]
                        hi = max(ra, max(rb, rc))
                        lo = min(ra, min(rb, rc))
                        key = (hi << 8) | ((ra + rb + rc - hi - lo) << 4) | lo
                        cell_at[key] = 192 + q
                        s1 = set_add(H1, s1, key)
                    x &= x - 1
            # next event: pop pqOne, else a critical cell from pqZero
            ce, ct = -1, -1
            while s1:
                key, s1 = set_pop(H1, s1)
                c = cell_at[key]
                a = c & 63
                if c >> 6 == 2:
                    if (PT >> a) & 1:
                        continue  # already the partner of a cofacet: keep V a matching
                    um = temk[a] & ~PE
                    if um == 0:
                        s0 = set_add(H0, s0, key)
                        continue
                    f = lowest_bit(um)
                    PE |= one << f
                    PT |= one << a
                    ep[e0 + f] = a
                    tp[t0 + a] = DOWN + f
                    tt[t0 + a] = step
                    TTW |= one << a
                    ce, ct = f, a
                else:
                    if (PQ >> a) & 1:
                        continue
                    um = qfm[a] & ~PT
                    if um == 0:
                        s0 = set_add(H0, s0, key)
                        continue
                    f = lowest_bit(um)
                    PT |= one << f
                    PQ |= one << a
                    tp[t0 + f] = a
                    qp[q0 + a] = DOWN + f
                    ct = f
                step += 1
                break
            if ce >= 0 or ct >= 0:
                continue
            popped = False
            while s0:
                key, s0 = set_pop(H0, s0)
                c = cell_at[key]
                a = c & 63
                dm = c >> 6
                if dm == 1:
                    if (PE >> a) & 1:
                        continue
                    PE |= one << a
                    ep[e0 + a] = CRITICAL
                    ce = a
                elif dm == 2:
                    if (PT >> a) & 1:
                        continue
                    PT |= one << a
                    tp[t0 + a] = CRITICAL
                    tt[t0 + a] = step
                    TTW |= one << a
                    ct = a
                else:
                    if (PQ >> a) & 1:
                        continue
                    PQ |= one << a
                    qp[q0 + a] = CRITICAL
                step += 1
                popped = True
                break
            if not popped:
                break
        # nothing is left unpaired (Robins et al., Lemma); stay safe anyway
        x = L & ~PE
        while x:
            ep[e0 + lowest_bit(x)] = CRITICAL
            x &= x - 1
        x = LT & ~PT
        while x:
            tp[t0 + lowest_bit(x)] = CRITICAL
            x &= x - 1
        x = LQ & ~PQ
        while x:
            qp[q0 + lowest_bit(x)] = CRITICAL
            x &= x - 1
        if skip == 0:
            row = c_row[h]
            row[0] = vp[i]
            for j in range(ne):
                row[1 + j] = ep[e0 + j]
            for t in range(ntr):
                row[1 + ne + t] = tp[t0 + t]
                row[1 + ne + ntr + t] = tt[t0 + t]
            for q in range(nqt):
                row[1 + ne + 2 * ntr + q] = qp[q0 + q]
            c_ttw[h] = TTW
            c_sig[h] = sig


@njit(cache=True, nogil=True)
def _general_lower_stars(st, vp, ep, tp, tt, qp, i0, i1):  # pragma: no cover
    """:func:`lower_star_gradient` on any star tables, with binary heaps.

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
    for i in range(i0, i1):
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
