"""The elder rule over label-time entries, with no rank holding the global
forest: each rank runs it over its own entries and decides every merge it
can decide alone; what it cannot decide goes up a binary tree of ranks,
each internal node led by a different rank. The answers for merge-tree arcs
come back down the same tree."""

from __future__ import annotations

import numpy as np

from dmsolve import Layout
from dmsolve.bsp import BSP, rank_tree, search_sorted, sorted_unique, stable_argsort, tree_leader
from dmsolve.jit import njit

from ..kernels import forest_root

__all__ = ["Sweep", "elder", "distributed_elder", "APEX"]

#: key of the virtual outer vertex (older than every vertex)
APEX = -1
_UNKNOWN = np.iinfo(np.int64).min
_BIG = np.iinfo(np.int64).max
#: the time "after every vertex" (a query for a component's final root)
_END = _BIG - 1
#: kept root not known on this rank yet (a query went up the tree)
_ASKED = -2


# -- what a sweep leaves on one rank ------------------------------------------------------
class Sweep:
    """What :func:`sweep` leaves on one rank, in key space (key = position in
    the sweep). Not collective to read.

    Attributes
    ----------
    deaths : (k, 2) int64
        ``(born, dies_at)`` pairs decided on this rank: the basin of label
        ``born`` merges into an older one at vertex ``dies_at`` (elder rule).
        Every pair of the sweep is on exactly one rank.
    kept : int64 array or None
        With ``tree``: for each death, the root of the component it merges
        into (the oldest label of the merged component), i.e. the branch of
        the merge tree that goes on through ``dies_at``.
    survivors : int64 array
        The oldest label of final components decided on this rank (``APEX``
        for the component of the outer vertex); every final component is on
        exactly one rank.
    tops : (m, 2) int64 or None
        With ``tree``: ``(root, top)`` for the final components whose root
        key lies in this rank's block of ``Layout.block(n)``: ``top`` is the
        highest vertex of the component.
    minima : int64 array
        The keys of this rank's own minima (the labels born here; the apex
        not included).
    supersteps : int
        BSP supersteps made (the same on every rank).
    rows_up, rows_in : int
        Rows (undecided edges, open labels, questions) this rank sent up the
        rank tree, and received from below: what the boundary of its
        ranges costs it.
    """

    def __init__(self, deaths, kept, survivors, tops, supersteps, rows_up, rows_in):
        self.deaths = deaths
        self.kept = kept
        self.survivors = survivors
        self.tops = tops
        self.supersteps = supersteps
        self.rows_up = rows_up
        self.rows_in = rows_in


# -- the elder rule over a range of ranks ----------------------------------------------------
@njit(cache=True)
def _elder_range(lo, hi, key, islabel, isopen):  # pragma: no cover
    """The elder rule over edges ``(lo[i], hi[i])`` (node indices, sorted by
    ``hi``; node indices sorted by key) within a range of ranks.

    A component is *open* when it holds an open label (one used outside the
    range); its root here may then not be its root over all ranks. At the
    merges of the components at a vertex ``v``: with none open, all but the
    oldest die; otherwise every sealed component younger than the oldest
    one here dies (some component is older), and if two or more remain
    (open ones, and the oldest if sealed), one edge per remaining component
    goes up, from its smallest open label (or its root, if sealed) to ``v``.

    Returns the deaths ``(born, at, kept, rep)`` (``kept`` is ``_ASKED``
    and ``rep`` the merged component's smallest open label when the merged
    component is open), the edges sent up ``(rep, at)``, and the forest:
    ``parent``, the time each node stopped being a root (``link``), the
    history of each root's ``(minkey, open, orep)`` and the final values.
    Union by size without path compression keeps the forest O(log n) deep,
    so the component of any node at any time is a short walk.
    Not collective.
    """
    n = key.shape[0]
    m = lo.shape[0]
    parent = np.arange(n)
    size = np.ones(n, np.int64)
    link = np.full(n, _BIG, np.int64)
    minkey = np.full(n, _BIG, np.int64)
    orep = np.full(n, _BIG, np.int64)
    opn = np.zeros(n, np.bool_)
    for i in range(n):
        if islabel[i]:
            minkey[i] = key[i]
            if isopen[i]:
                opn[i] = True
                orep[i] = key[i]
    init_min = minkey.copy()
    init_open = opn.copy()
    init_orep = orep.copy()
    emitted = np.zeros(n, np.bool_)
    d_born = np.empty(m, np.int64)
    d_at = np.empty(m, np.int64)
    d_kept = np.empty(m, np.int64)
    d_rep = np.empty(m, np.int64)
    nd = 0
    e_rep = np.empty(m, np.int64)
    e_at = np.empty(m, np.int64)
    ne = 0
    h_node = np.empty(m, np.int64)
    h_time = np.empty(m, np.int64)
    h_min = np.empty(m, np.int64)
    h_open = np.empty(m, np.bool_)
    h_orep = np.empty(m, np.int64)
    nh = 0
    buf = np.empty(max(m, 1), np.int64)
    i = 0
    while i < m:
        v = hi[i]
        t = key[v]
        k = 0
        j = i
        while j < m and hi[j] == v:
            r = forest_root(parent, lo[j])
            new = True
            for q in range(k):
                if buf[q] == r:
                    new = False
                    break
            if new:
                buf[k] = r
                k += 1
            j += 1
        first = nd
        emit = False
        if k >= 2:
            oldest = buf[0]
            anyopen = opn[buf[0]]
            for q in range(1, k):
                r = buf[q]
                if minkey[r] < minkey[oldest]:
                    oldest = r
                anyopen = anyopen or opn[r]
            nunc = 0
            for q in range(k):
                r = buf[q]
                if r != oldest and not opn[r]:
                    d_born[nd] = minkey[r]
                    d_at[nd] = t
                    d_kept[nd] = _ASKED if anyopen else minkey[oldest]
                    d_rep[nd] = _BIG
                    nd += 1
                else:
                    nunc += 1
            if anyopen and nunc >= 2:
                emit = True
                for q in range(k):
                    r = buf[q]
                    if r == oldest or opn[r]:
                        e_rep[ne] = orep[r] if opn[r] else minkey[r]
                        e_at[ne] = t
                        ne += 1
        # union of the components and v, by size
        R = buf[0]
        for q in range(1, k):
            if size[buf[q]] > size[R]:
                R = buf[q]
        before_min, before_open, before_orep = minkey[R], opn[R], orep[R]
        for q in range(k):
            r = buf[q]
            if r == R:
                continue
            parent[r] = R
            link[r] = t
            size[R] += size[r]
            if minkey[r] < minkey[R]:
                minkey[R] = minkey[r]
            if orep[r] < orep[R]:
                orep[R] = orep[r]
            opn[R] = opn[R] or opn[r]
            emitted[R] = emitted[R] or emitted[r]
        parent[v] = R
        link[v] = t
        size[R] += 1
        if emit:
            emitted[R] = True
        if minkey[R] != before_min or opn[R] != before_open or orep[R] != before_orep:
            h_node[nh] = R
            h_time[nh] = t
            h_min[nh] = minkey[R]
            h_open[nh] = opn[R]
            h_orep[nh] = orep[R]
            nh += 1
        for dd in range(first, nd):
            if d_kept[dd] == _ASKED:
                d_rep[dd] = orep[R]
        i = j
    deaths = np.empty((nd, 4), np.int64)
    deaths[:, 0] = d_born[:nd]
    deaths[:, 1] = d_at[:nd]
    deaths[:, 2] = d_kept[:nd]
    deaths[:, 3] = d_rep[:nd]
    up = np.empty((ne, 2), np.int64)
    up[:, 0] = e_rep[:ne]
    up[:, 1] = e_at[:ne]
    hist = (h_node[:nh], h_time[:nh], h_min[:nh], h_open[:nh], h_orep[:nh])
    init = (init_min, init_open, init_orep)
    final = (minkey, opn, orep, emitted)
    return deaths, up, parent, link, hist, init, final


@njit(cache=True)
def _walk(parent, link, init_min, init_open, init_orep, hptr, h_time, h_min, h_open, h_orep,
          qx, qt0, qt1):  # pragma: no cover
    """The states ``(minkey, open, orep)`` of the component of node ``qx[q]``
    over the times ``[qt0[q], qt1[q]]``: rows ``(q, from_time, minkey, open,
    orep)`` in time order per query (a state holds until the next row).
    ``hptr`` indexes each node's history rows (sorted by node, then time).
    Not collective."""
    cap = 4 * qx.shape[0] + 16
    out = np.empty((cap, 5), np.int64)
    no = 0
    for q in range(qx.shape[0]):
        a = qx[q]
        t = qt0[q]
        t1 = qt1[q]
        while parent[a] != a and link[a] <= t:
            a = parent[a]
        while True:
            seg_end = t1 if link[a] > t1 else link[a] - 1
            s_min, s_open, s_orep = init_min[a], init_open[a], init_orep[a]
            h = hptr[a]
            while h < hptr[a + 1] and h_time[h] <= t:
                s_min, s_open, s_orep = h_min[h], h_open[h], h_orep[h]
                h += 1
            rows = 1
            hh = h
            while hh < hptr[a + 1] and h_time[hh] <= seg_end:
                rows += 1
                hh += 1
            if no + rows > cap:
                cap = 2 * (no + rows)
                grown = np.empty((cap, 5), np.int64)
                grown[:no] = out[:no]
                out = grown
            out[no, 0] = q
            out[no, 1] = t
            out[no, 2] = s_min
            out[no, 3] = 1 if s_open else 0
            out[no, 4] = s_orep
            no += 1
            while h < hh:
                out[no, 0] = q
                out[no, 1] = h_time[h]
                out[no, 2] = h_min[h]
                out[no, 3] = 1 if h_open[h] else 0
                out[no, 4] = h_orep[h]
                no += 1
                h += 1
            if link[a] > t1:
                break
            t = link[a]
            a = parent[a]
            while parent[a] != a and link[a] <= t:
                a = parent[a]
    return out[:no]


@njit(cache=True)
def _step_at(gptr, g_time, g_root, group, t):  # pragma: no cover
    """Values at times ``t`` of the step functions ``group`` (rows
    ``gptr[g]:gptr[g+1]`` of ``(g_time, g_root)``, sorted by time, the first
    at or before every time asked). Not collective."""
    out = np.empty(t.shape[0], np.int64)
    for i in range(t.shape[0]):
        a, b = gptr[group[i]], gptr[group[i] + 1]
        j = a + np.searchsorted(g_time[a:b], t[i], side="right") - 1
        out[i] = g_root[j]
    return out


class _Range:
    """The elder rule over one node of the rank tree (a range of ranks): its
    edges, records and queries in; what goes up; and, with ``tree``, how to
    answer the queries once the range's own questions are answered.
    Not collective."""

    def __init__(self, edges, records, queries, lo_rank, hi_rank, label_index=None):
        # edges (rep, at, smin, smax); records (label, smin, smax); queries (x, t0, t1).
        # With ``label_index``, ``records`` are the distinct labels ascending and
        # every edge's label is among them, at this index (the leaf knows it).
        m = edges.shape[0]
        if label_index is None:
            # the distinct labels and each edge's among them, by one stable sort
            # (a label's span is that of its first row, edges first)
            every = np.concatenate((edges[:, 0], records[:, 0]))
            o = stable_argsort(every)
            s = every[o]
            new = np.empty(s.size, bool)
            new[:1] = True
            np.not_equal(s[1:], s[:-1], out=new[1:])
            lab = s[new]
            first = o[new]
            inv = np.empty(s.size, np.int64)
            inv[o] = np.cumsum(new) - 1
            label_index = inv[:m]
            span = np.concatenate((edges[:, 2:4], records[:, 1:3]))[first]
            del every, o, s, new, inv
        else:
            lab, span = records[:, 0], records[:, 1:3]
        self._lab, self._span = lab, span
        x = queries[:, 0]
        bad = np.ones(x.size, bool)
        if lab.size:
            bad = lab[np.minimum(np.searchsorted(lab, x), lab.size - 1)] != x
        if bad.any():
            raise RuntimeError("sweep: queried labels %s are in no edge or record of ranks "
                               "[%d, %d)" % (sorted_unique(x[bad])[:4], lo_rank, hi_rank))
        # the times (vertices) and each edge's, by one stable sort of the edges
        eo = stable_argsort(edges[:, 1])
        t = edges[eo, 1]
        new = np.empty(m, bool)
        new[:1] = True
        np.not_equal(t[1:], t[:-1], out=new[1:])
        verts = t[new]
        # nodes: labels and times merged in key order (a label before an equal time)
        lpos = np.arange(lab.size) + np.searchsorted(verts, lab, side="left")
        vpos = np.arange(verts.size) + np.searchsorted(lab, verts, side="right")
        key = np.empty(lab.size + verts.size, np.int64)
        key[lpos], key[vpos] = lab, verts
        self.key = key
        islabel = np.zeros(key.size, bool)
        islabel[lpos] = True
        isopen = np.zeros(key.size, bool)
        isopen[lpos] = (span[:, 0] < lo_rank) | (span[:, 1] >= hi_rank)
        deaths, up, parent, link, hist, init, final = _elder_range(
            lpos[label_index[eo]], vpos[np.cumsum(new) - 1], key, islabel, isopen)
        del eo, t, new
        self.parent, self.link, self.init, self.final = parent, link, init, final
        ho = stable_argsort(hist[0])          # each node's rows stay in time order
        self.hist = tuple(h[ho] for h in hist[1:])
        self.hptr = np.searchsorted(hist[0][ho], np.arange(key.size + 1))
        self.deaths = deaths
        minkey, opn, orep, emitted = final
        roots = np.flatnonzero(parent == np.arange(key.size))
        roots = roots[minkey[roots] < _BIG]
        self.survivors = minkey[roots[~opn[roots]]]
        # up: the undecided edges with their labels' spans, and the one open
        # label of each open component that sent no edge up
        self.up_edges = np.column_stack((up, self._spans(up[:, 0]))).astype(np.int64)
        rec = orep[roots[opn[roots] & ~emitted[roots]]]
        self.up_records = np.column_stack((rec, self._spans(rec))).astype(np.int64)
        self.queries = queries
        asked = deaths[:, 2] == _ASKED
        self.point_x = deaths[asked, 3]
        self.point_t = deaths[asked, 1]

    def _spans(self, labels):
        return self._span[search_sorted(self._lab, labels)].reshape(-1, 2)

    def final_roots(self, keys):
        """``(minkey, open, orep)`` of the final components of the given
        label keys (all present here). Not collective."""
        idx = search_sorted(self.key, keys)
        r = _roots_of(self.parent, idx)
        minkey, opn, orep, _ = self.final
        return minkey[r], opn[r], orep[r]

    def plan(self):
        """Split the questions into what is known here and what goes up.

        The questions are ``self.queries`` (intervals from the children) and
        the point questions ``(point_x, point_t)``: the root of the open
        component of label ``x`` at time ``t``. Returns the intervals to send
        up, ``(x, t0, t1)``, one per label asked, and keeps what
        :meth:`answer` needs. Not collective.
        """
        q = self.queries
        if q.shape[0]:
            i_min, i_open, i_orep = self.init
            pieces = _walk(self.parent, self.link, i_min, i_open, i_orep, self.hptr,
                           self.hist[0], self.hist[1], self.hist[2], self.hist[3],
                           search_sorted(self.key, q[:, 0]), q[:, 1].copy(), q[:, 2].copy())
        else:
            pieces = np.zeros((0, 5), np.int64)
        # sealed pieces answer themselves; the first open piece starts a
        # stretch open to the end of the interval (a component never closes)
        qi = pieces[:, 0]
        is_open = pieces[:, 3] == 1
        first_open = np.full(q.shape[0], pieces.shape[0], np.int64)
        idx = np.flatnonzero(is_open)
        if idx.size:
            uq, at = np.unique(qi[idx], return_index=True)
            first_open[uq] = idx[at]
        sealed = np.arange(pieces.shape[0]) < first_open[qi]
        self._sealed = pieces[sealed][:, [0, 1, 2]]
        has = np.flatnonzero(first_open < pieces.shape[0])
        sx = pieces[first_open[has], 4]
        s0 = pieces[first_open[has], 1]
        s1 = q[has, 2]
        # the open stretches and the point questions, one interval per label
        all_x = np.concatenate((sx, self.point_x))
        all_t0 = np.concatenate((s0, self.point_t))
        all_t1 = np.concatenate((s1, self.point_t))
        gx, ginv = np.unique(all_x, return_inverse=True)
        ginv = ginv.ravel()
        g0 = np.full(gx.size, _BIG, np.int64)
        g1 = np.full(gx.size, -1, np.int64)
        np.minimum.at(g0, ginv, all_t0)
        np.maximum.at(g1, ginv, all_t1)
        self._stretch = (has, ginv[:has.size], s0, s1)
        self._point_group = ginv[has.size:]
        return np.column_stack((gx, g0, g1)).astype(np.int64)

    def answer(self, steps):
        """Answers from the step functions of the intervals sent up.

        ``steps``: rows ``(interval, from_time, root)`` sorted by interval
        then time. Returns ``(rows, points)``: the step functions answering
        ``self.queries``, rows ``(query, from_time, root)`` sorted the same
        way, and the roots at the point questions. Not collective.
        """
        has, grp, t0, t1 = self._stretch
        steps = np.asarray(steps, np.int64).reshape(-1, 3)
        ng = max(int(grp.max()) + 1 if grp.size else 0,
                 int(self._point_group.max()) + 1 if self._point_group.size else 0)
        gptr = np.searchsorted(steps[:, 0], np.arange(ng + 1))
        g_time, g_root = steps[:, 1].copy(), steps[:, 2].copy()
        points = _step_at(gptr, g_time, g_root, self._point_group, self.point_t)
        rows = [self._sealed]
        if has.size:
            # each stretch: the value at its start, then the steps inside it
            rows.append(np.column_stack((has, t0, _step_at(gptr, g_time, g_root, grp, t0))))
            cnt = gptr[grp + 1] - gptr[grp]
            rep = np.repeat(np.arange(has.size), cnt)
            src = gptr[grp][rep] + np.arange(int(cnt.sum())) - \
                np.repeat(np.concatenate(([0], np.cumsum(cnt)[:-1])), cnt)
            inside = (g_time[src] > t0[rep]) & (g_time[src] <= t1[rep])
            rows.append(np.column_stack((has[rep[inside]], g_time[src[inside]],
                                         g_root[src[inside]])))
        out = np.concatenate(rows).astype(np.int64)
        o = np.lexsort((out[:, 1], out[:, 0]))
        return out[o], points


@njit(cache=True)
def _roots_of(parent, nodes):  # pragma: no cover
    """Roots of ``nodes`` in the final forest. Not collective."""
    out = np.empty(nodes.shape[0], np.int64)
    for i in range(nodes.shape[0]):
        out[i] = forest_root(parent, nodes[i])
    return out


def _label_spans(comm, n, labels, ledger):
    """``(lowest, highest)`` rank using each label (rows for ``labels``):
    every rank sends the labels it uses to the block owner of the key, which
    answers with the extremes. Two supersteps. Collective on ``comm``."""
    lay = Layout.block(max(n, 1), comm)
    real = labels[labels >= 0]
    ctx = BSP(comm, ledger=ledger)
    tag = ctx.tags("ask", "answer")
    ctx.send_rows(lay.owner(real), real, tag=tag.ask)
    inbox = ctx.sync("sweep:spans")
    got, src = inbox.concat_with_sources(tag.ask, dtype=np.int64)
    if got.size:
        u, inv = np.unique(got, return_inverse=True)
        inv = inv.ravel()
        lo = np.full(u.size, _BIG, np.int64)
        hi = np.full(u.size, -1, np.int64)
        np.minimum.at(lo, inv, src)
        np.maximum.at(hi, inv, src)
        ctx.send_rows(src, np.column_stack((got, lo[inv], hi[inv])), tag=tag.answer)
    ans = ctx.sync("sweep:spans").concat(tag.answer, dtype=np.int64, shape=(3,))
    ans = ans[stable_argsort(ans[:, 0])]
    span = np.empty((labels.size, 2), np.int64)
    span[labels < 0] = (0, comm.Get_size() - 1)                 # the apex: everywhere
    span[labels >= 0] = ans[search_sorted(ans[:, 0], real), 1:]
    return span


def _rows_from(inbox, src: int, tag: int, width: int) -> np.ndarray:
    """The rows rank ``src`` sent under ``tag`` (none: an empty array)."""
    parts = inbox.from_source(src, tag)
    if not parts:
        return np.zeros((0, width), np.int64)
    return np.concatenate([np.asarray(x, np.int64).reshape(-1, width) for x in parts])


def _local_tops(lab_owned, key_owned):
    """The labels of this rank's vertices and the highest key of each."""
    if lab_owned.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    lab, inv = np.unique(lab_owned, return_inverse=True)
    top = np.full(lab.size, -1, np.int64)
    np.maximum.at(top, inv.ravel(), key_owned)
    return lab, top


def elder(comm, n, lo, hi, own_labels):
    """Elder-rule pairs of label-time entries ``(lo, hi)`` (keys below ``n``;
    the apex -1 older than all): ``(deaths, survivors)``, deaths as rows
    ``(born, dies_at)``; ``own_labels`` are labels this rank must know even
    without an entry (its own births). The distributed elder rule of
    :func:`sweep` (steps 2-3; at one rank a union-find), whose entries of one
    time must all be on one rank. Label and time keys must not collide.
    Collective on ``comm``."""
    labels = sorted_unique(np.concatenate((lo, own_labels)))
    sw = distributed_elder(comm, n, lo, hi, labels)
    return sw.deaths.reshape(-1, 2), sw.survivors[sw.survivors != APEX]


@njit(cache=True)
def _union_find(lab, hi, nlab):  # pragma: no cover
    """The elder rule over entries ``(label index, time)`` sorted by time
    (label indices ordered by age): at each time the components of its
    labels merge, the oldest root survives. Returns ``(born, at, roots)``
    (label indices of the deaths, their times, the final roots)."""
    parent = np.arange(nlab)
    born = np.empty(lab.size, np.int64)
    at = np.empty(lab.size, np.int64)
    nd = 0
    i = 0
    while i < lab.size:
        j = i
        old = nlab
        while j < lab.size and hi[j] == hi[i]:
            r = lab[j]
            while parent[r] != r:
                parent[r] = parent[parent[r]]
                r = parent[r]
            lab[j] = r
            old = min(old, r)
            j += 1
        for t in range(i, j):
            r = lab[t]
            while parent[r] != r:
                r = parent[r]
            if r != old:
                born[nd], at[nd] = r, hi[i]
                nd += 1
                parent[r] = old
        i = j
    roots = np.flatnonzero(parent == np.arange(nlab))
    return born[:nd], at[:nd], roots


def distributed_elder(comm, n, lo, hi, labels, *, key_owned=None, lab_owned=None,
                      tree: bool = False, ledger=None, serial: bool = True) -> Sweep:
    """Steps 2-4 of :func:`sweep`. At one rank without ``tree`` (and with
    ``serial``, which tests turn off to compare), a union-find over the
    entries in time order (:func:`_union_find`) instead of the rank tree's
    one range: the same deaths in the same order, and the same survivors.
    Collective on ``comm``."""
    p, me = comm.Get_size(), comm.Get_rank()
    if p == 1 and not tree and serial:
        o = stable_argsort(hi)
        born, at, root = _union_find(search_sorted(labels, lo[o]),
                                     np.ascontiguousarray(hi[o], np.int64), labels.size)
        return Sweep(np.column_stack((labels[born], at)).astype(np.int64).reshape(-1, 2),
                     None, labels[root].astype(np.int64), None, 0, 0, 0)
    steps = 0
    if p > 1:
        span = _label_spans(comm, n, labels, ledger)
        steps += 2
    else:
        span = np.zeros((labels.size, 2), np.int64)
    at = search_sorted(labels, lo)                 # every entry's label is in labels
    edges = np.column_stack((lo, hi, span[at])).reshape(-1, 4)
    records = np.column_stack((labels, span)).reshape(-1, 3)
    leaf = _Range(edges.astype(np.int64), records.astype(np.int64),
                  np.zeros((0, 3), np.int64), me, me + 1, label_index=at)
    if tree:
        # the final root of each of this rank's labels: for the highest vertex
        # of every final component
        top_lab, top_key = _local_tops(lab_owned, key_owned)
        f_min, f_open, f_orep = leaf.final_roots(top_lab)
        n_asked = leaf.point_x.size
        leaf.point_x = np.concatenate((leaf.point_x, f_orep[f_open]))
        leaf.point_t = np.concatenate((leaf.point_t, np.full(int(f_open.sum()), _END, np.int64)))
    a, b, height, parent, leaf_parent = rank_tree(p)
    ranges = {"leaf": leaf}
    parent_of = {"leaf": int(leaf_parent[me])}
    split = {}
    H = int(height.max()) if p > 1 else 0
    pending = ["leaf"]                    # ranges whose results have not gone up
    rows_up = rows_in = 0
    for h in range(1, H + 1):
        ctx = BSP(comm, ledger=ledger)
        tag = ctx.tags("edges", "records", "queries")
        local = {}
        for kind in list(pending):
            par = parent_of[kind]
            if height[par] != h:
                continue
            pending.remove(kind)
            R = ranges[kind]
            q = R.plan() if tree else np.zeros((0, 3), np.int64)
            if par == me:
                local[kind] = (R.up_edges, R.up_records, q)
            else:
                rows_up += R.up_edges.shape[0] + R.up_records.shape[0] + q.shape[0]
                ctx.send(int(par), R.up_edges, tag=tag.edges)
                ctx.send(int(par), R.up_records, tag=tag.records)
                ctx.send(int(par), q, tag=tag.queries)
        inbox = ctx.sync("sweep:up")
        steps += 1
        if me >= 1 and height[me] == h:
            parts = []
            for c_lo, c_hi in ((a[me], me), (me, b[me])):
                src = tree_leader(c_lo, c_hi)
                if src == me:
                    parts.append(next(iter(local.values())))
                else:
                    parts.append((_rows_from(inbox, src, tag.edges, 4),
                                  _rows_from(inbox, src, tag.records, 3),
                                  _rows_from(inbox, src, tag.queries, 3)))
                    rows_in += sum(x.shape[0] for x in parts[-1])
            node = _Range(np.concatenate((parts[0][0], parts[1][0])),
                          np.concatenate((parts[0][1], parts[1][1])),
                          np.concatenate((parts[0][2], parts[1][2])), int(a[me]), int(b[me]))
            split["node"] = parts[0][2].shape[0]
            ranges["node"] = node
            parent_of["node"] = int(parent[me])
            pending.append("node")
    deaths = [R.deaths for R in ranges.values()]
    survivors = [R.survivors for R in ranges.values()]
    kept = tops = None
    if tree:
        answers = {}
        for kind in pending:             # the root of the rank tree: nothing open
            q = ranges[kind].plan()
            if q.shape[0]:
                raise RuntimeError("sweep: %d questions left at the root" % q.shape[0])
            answers[kind] = ranges[kind].answer(np.zeros((0, 3), np.int64))
        for h in range(H, 0, -1):
            ctx = BSP(comm, ledger=ledger)
            tag = ctx.tags("answers")
            to_self = None
            if me >= 1 and height[me] == h:
                rows = answers["node"][0]
                cut = split["node"]
                for side, (c_lo, c_hi) in enumerate(((a[me], me), (me, b[me]))):
                    part = rows[rows[:, 0] < cut] if side == 0 else rows[rows[:, 0] >= cut]
                    part = part.copy()
                    if side == 1:
                        part[:, 0] -= cut
                    dst = tree_leader(c_lo, c_hi)
                    if dst == me:
                        to_self = part
                    else:
                        ctx.send(int(dst), part, tag=tag.answers)
            inbox = ctx.sync("sweep:down")
            steps += 1
            for kind in ranges:
                if kind in answers or height[parent_of[kind]] != h:
                    continue
                par = parent_of[kind]
                got = to_self if par == me else _rows_from(inbox, int(par), tag.answers, 3)
                answers[kind] = ranges[kind].answer(got)
        kept = []
        for kind, R in ranges.items():
            k = R.deaths[:, 2].copy()
            asked = np.flatnonzero(k == _ASKED)
            k[asked] = answers[kind][1][:asked.size]
            kept.append(k)
        # the highest vertex of each final component, at the block owner of its root
        final = np.where(f_open, 0, f_min)
        final[f_open] = answers["leaf"][1][n_asked:]
        lay = Layout.block(max(n, 1), comm)
        ctx = BSP(comm, ledger=ledger)
        tag = ctx.tags("tops")
        ok = final >= 0
        ctx.send_keyed(tag.tops, final[ok], top_key[ok], lay, op="max")
        tk, tv = ctx.sync("sweep:tops").reduced(tag.tops, "max", dtype=np.int64)
        steps += 1
        tops = np.column_stack((tk, tv)).astype(np.int64).reshape(-1, 2)
        kept = np.concatenate(kept)
    d = np.concatenate(deaths)
    return Sweep(d[:, :2].copy(), kept, np.concatenate(survivors), tops, steps, rows_up, rows_in)
