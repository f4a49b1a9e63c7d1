"""Piece components by contraction up the binary tree of ranks: the
``method="tree"`` of :func:`dmsolve.bsp.piece_components`.

Each tree node merges the pieces its two halves link and passes up only the
links that leave its range of ranks; the answers come back down the same
tree. Every rank talks to its link neighbours once and to O(1) tree
neighbours per level: ``2 ceil(log2 p) + 1`` supersteps, no fan-in.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ._ranktree import rank_tree, tree_leader as leader
from ._unique import stable_argsort
from ._superstep import BSP

_SHIFT = 32
_MASK = (1 << _SHIFT) - 1


class _Node:
    """One tree node's contraction: ``items`` (pieces, or the reps its
    children passed up) merged by the links inside ranks ``[lo, hi)``.
    Not collective.

    ``members`` (sorted piece addresses ``a``, the item each belongs to and
    its sign relative to that item) say where every piece named by a link
    lives; ``links`` rows are ``(a, b, parity)`` with ``a`` a member.
    """

    def __init__(self, item_addr, item_key, member_a, member_item, member_sign, links, lo, hi):
        from scipy.sparse.csgraph import connected_components
        n = item_addr.size
        self.item_addr, self.item_key = item_addr, item_key
        ea, eb, epar = links.T
        ia_at = np.searchsorted(member_a, ea)
        ia, sa = member_item[ia_at], member_sign[ia_at]
        brank = eb >> _SHIFT
        inside = (brank >= lo) & (brank < hi)
        # both ends' items of the links inside: sign(a) = par sign(b), so
        # sign(item_a) = sa par sb sign(item_b)
        ib_at = np.searchsorted(member_a, eb[inside])
        u, v = ia[inside], member_item[ib_at]
        q = sa[inside] * epar[inside] * member_sign[ib_at]
        # the double cover: node i+ is i, i- is i + n; a link of parity q
        # joins i+ to j+ and i- to j- (q = 1) or i+ to j- and i- to j+
        # (q = -1). An odd cycle joins some i+ to its own i-.
        off = np.where(q > 0, 0, n)
        rows = np.concatenate((u, u + n))
        cols = np.concatenate((v + off, (v + n - off)))
        graph = sp.coo_matrix((np.ones(rows.size, np.int8), (rows, cols)), shape=(2 * n, 2 * n))
        _, lab = connected_components(graph.tocsr(), directed=False)
        self.clash = bool(np.any(lab[:n] == lab[n:]))
        base = np.minimum(lab[:n], lab[n:])
        # each component's root: its smallest item by (key, address)
        order = np.lexsort((item_addr, item_key))
        pos = np.empty(n, np.int64)
        pos[order] = np.arange(n)
        best = np.full(2 * n, n, np.int64)
        np.minimum.at(best, base, pos)
        self.root = order[best[base]] if n else np.zeros(0, np.int64)
        self.sign = np.where(lab[:n] == lab[self.root], 1, -1).astype(np.int64)
        # the links leaving [lo, hi): (a, rep, rep key, sign of a to rep, b, parity)
        out = ~inside
        r = self.root[ia[out]]
        self.up = np.stack((ea[out], item_addr[r], item_key[r], sa[out] * self.sign[ia[out]],
                            eb[out], epar[out]), axis=1)

    def finals(self, answers):
        """Each item's component root ``(address, key)`` and sign relative
        to it, given the parent's ``answers`` (rows ``(rep, root address,
        root key, sign)`` for the reps passed up; a rep not among them is
        its component's root)."""
        rep = self.item_addr[self.root]
        fa, fk, fs = rep.copy(), self.item_key[self.root].copy(), self.sign.copy()
        if answers.shape[0]:
            answers = answers[stable_argsort(answers[:, 0])]
            at = np.minimum(np.searchsorted(answers[:, 0], rep), answers.shape[0] - 1)
            hit = answers[at, 0] == rep
            fa[hit] = answers[at[hit], 1]
            fk[hit] = answers[at[hit], 2]
            fs[hit] *= answers[at[hit], 3]
        return fa, fk, fs


def _node_from_children(parts, lo, hi):
    """The internal node over ``[lo, hi)`` from the rows its children sent
    up. Not collective."""
    rows = np.concatenate(parts) if parts else np.zeros((0, 6), np.int64)
    reps, first = np.unique(rows[:, 1], return_index=True)
    mem_a, mfirst = np.unique(rows[:, 0], return_index=True)
    return _Node(reps, rows[first, 2], mem_a, np.searchsorted(reps, rows[mfirst, 1]),
                 rows[mfirst, 3], rows[:, [0, 4, 5]], lo, hi)


def tree_components(keys, links, comm, has_parity, limit, ledger, error):
    """:func:`piece_components` by contraction up the rank tree. Returns
    ``(root_key, root_addr, sign, consistent, rounds, supersteps)``.
    Collective on ``comm``."""
    p, me = comm.Get_size(), comm.Get_rank()
    m = keys.size
    addr = (np.int64(me) << _SHIFT) | np.arange(m, dtype=np.int64)
    ones = np.ones(m, np.int64)
    if p == 1:
        if np.any(links[:, 2] >= m):
            raise ValueError("piece_components: a link names piece %d of rank 0, which has %d"
                             % (links[links[:, 2] >= m, 2][0], m))
        leaf = _Node(addr, keys, addr, np.arange(m), ones,
                     np.stack((links[:, 0], links[:, 2], links[:, 3]), axis=1), 0, 1)
        fa, fk, fs = leaf.finals(np.zeros((0, 4), np.int64))
        return fk, fa, fs, not leaf.clash, 0, 0
    ctx = BSP(comm, ledger=ledger)
    # links announced to their remote ends; rows going up; answers coming down
    tag = ctx.tags("link", "up", "down")
    if error is not None:
        ctx._fail(error)
    # superstep 1: every link's remote end hears of it, so both ends know it
    lu, lr, lv, ls = links.T
    ctx.send_rows(lr, np.stack((lv, lu, ls), axis=1), tag.link)
    ctx.aggregate("start", "any", np.array([links.shape[0] > 0, has_parity, not has_parity]))
    inbox = ctx.sync("pieces:links")
    steps = 1
    start = inbox.aggregates["start"]
    if start[1] and start[2]:       # the same on every rank
        raise ValueError("piece_components: parity is given on some ranks only")
    if not start[0]:                # no links anywhere: every piece is a root
        return keys.copy(), addr, ones, True, 0, steps
    a, b, height, parent, leaf_parent = rank_tree(p)
    H = int(height.max())
    if limit is not None and limit < 1 + 2 * H:
        raise RuntimeError("piece_components did not finish within %d supersteps" % limit)
    got, src = inbox.concat_with_sources(tag.link, dtype=np.int64, shape=(3,))
    ok = (got[:, 0] >= 0) & (got[:, 0] < m)
    if not ok.all():    # raised by the next sync on every rank
        ctx._fail(ValueError("piece_components: a link names piece %d of rank %d, which has %d"
                             % (got[~ok, 0][0], me, m)))
        got, src = got[ok], src[ok]
    edges = np.unique(np.concatenate((
        np.stack((addr[lu], (lr << _SHIFT) | lv, ls), axis=1),
        np.stack((addr[got[:, 0]], (src << _SHIFT) | got[:, 1], got[:, 2]), axis=1))), axis=0)
    nodes = {"leaf": _Node(addr, keys, addr, np.arange(m), ones, edges, me, me + 1)}
    parent_of = {"leaf": int(leaf_parent[me])}
    span = {"leaf": (me, me + 1)}
    clash = nodes["leaf"].clash
    pending = ["leaf"]
    for h in range(1, H + 1):       # up: a node of height h merges its children's rows
        for kind in list(pending):
            if height[parent_of[kind]] == h:
                pending.remove(kind)
                ctx.send(parent_of[kind], nodes[kind].up, tag=tag.up)
        inbox = ctx.sync("pieces:up")
        steps += 1
        if me >= 1 and height[me] == h:
            lo, hi = int(a[me]), int(b[me])
            parts = [np.asarray(x, np.int64).reshape(-1, 6)
                     for c in (leader(lo, me), leader(me, hi))
                     for x in inbox.from_source(c, tag.up)]
            nodes["node"] = node = _node_from_children(parts, lo, hi)
            parent_of["node"], span["node"] = int(parent[me]), (lo, hi)
            clash |= node.clash
            pending.append("node")
    # the root of the tree has nothing left to pass up: its reps are roots
    finals = {kind: nodes[kind].finals(np.zeros((0, 4), np.int64)) for kind in pending}
    for h in range(H, 0, -1):       # down: a node of height h answers its children
        if me >= 1 and height[me] == h:
            fa, fk, fs = finals["node"]
            node = nodes["node"]
            owner = node.item_addr >> _SHIFT
            rows = np.stack((node.item_addr, fa, fk, fs), axis=1)
            lo, hi = span["node"]
            for c_lo, c_hi in ((lo, me), (me, hi)):
                part = rows[(owner >= c_lo) & (owner < c_hi)]
                ctx.send(leader(c_lo, c_hi), part, tag=tag.down)
        if h == 1 and has_parity:
            ctx.aggregate("clash", "any", np.array([clash]))
        inbox = ctx.sync("pieces:down")
        steps += 1
        for kind in nodes:
            if kind not in finals and height[parent_of[kind]] == h:
                got = [np.asarray(x, np.int64).reshape(-1, 4)
                       for x in inbox.from_source(parent_of[kind], tag.down)]
                finals[kind] = nodes[kind].finals(
                    np.concatenate(got) if got else np.zeros((0, 4), np.int64))
        if h == 1 and has_parity:
            clash = bool(inbox.aggregates["clash"][0])
    fa, fk, fs = finals["leaf"]
    return fk, fa, fs, not clash, H, steps
