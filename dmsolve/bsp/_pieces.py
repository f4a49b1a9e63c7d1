"""Connected components of "pieces" spread over the ranks, optionally with
relative signs: a distributed union-find by hooking and pointer jumping.

A piece is whatever a rank already merged locally (a component of its
ghosted part of a mesh, a coherently oriented patch of triangles); the
cross-rank links say which pieces touch. :func:`piece_components` finds the
global components in O(log) rounds of two supersteps where min-label
propagation needs one superstep per rank-to-rank hop.

References
----------
Y. Shiloach and U. Vishkin, "An O(log n) parallel connectivity algorithm",
J. Algorithms 3(1), 1982. Y. Zhang, A. Azad and Z. Hu, "FastSV: a
distributed-memory connected component algorithm with fast convergence",
SIAM PP 2020.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from mpi4py import MPI

from ._ledger import Ledger
from ._pieces_tree import tree_components
from ._superstep import BSP
from ._unique import sorted_unique

__all__ = ["piece_components", "PieceComponents"]

# a piece's address: rank << _SHIFT | index, so addresses order by (rank, index)
_SHIFT = 32
_MASK = (1 << _SHIFT) - 1
_INF = np.iinfo(np.int64).max


class PieceComponents(NamedTuple):
    """The components of this rank's pieces (see :func:`piece_components`).
    Not collective."""

    root_key: np.ndarray        #: int64 (m,): the smallest key of the piece's component
    root_rank: np.ndarray       #: int64 (m,): rank of the component's root piece
    root_index: np.ndarray      #: int64 (m,): its index on that rank
    sign: np.ndarray | None     #: int8 (m,): sign relative to the root piece (with parity)
    consistent: bool | None     #: every parity satisfied (with parity; same on every rank)
    rounds: int                 #: rounds of hooking and pointer jumping
    supersteps: int             #: BSP supersteps (2 per round; 1 if there are no links)


def piece_components(keys, link_local, link_rank, link_remote, comm: MPI.Comm, *,
                     parity=None, method: str = "hook", max_supersteps: int | None = None,
                     ledger: Ledger | None = None) -> PieceComponents:
    """Connected components of pieces linked across ranks (a distributed
    union-find by hooking and pointer jumping).

    Each rank has ``m`` pieces ``0 .. m-1`` (``m`` may be 0), each with an
    int64 key. Link ``t`` says that local piece ``link_local[t]`` is
    connected to piece ``link_remote[t]`` of rank ``link_rank[t]`` (usually
    another rank; this rank works too). A link needs to be given on one side
    only; duplicates are fine. With ``parity``, link ``t`` also says
    ``sign(local) = parity[t] * sign(remote)``.

    Parameters
    ----------
    keys : int array, shape (m,)
        The pieces' keys (any int64 values; ties are fine).
    link_local, link_rank, link_remote : int arrays, shape (n_links,)
        The links: local piece, remote rank, piece index on the remote rank.
    comm : MPI.Comm
    parity : int array of +1/-1, shape (n_links,), optional
        Relative signs of the links' ends. Give it on every rank or on none.
    method : {"hook", "tree"}
        ``"hook"`` (default): hooking and pointer jumping; ``"tree"``:
        contraction up the binary tree of ranks (see Notes for which suits
        what). The same on every rank; both give the same components, roots
        and (with consistent parities) signs.
    max_supersteps : int, optional
        Raise ``RuntimeError`` on every rank if the components are not found
        within this many supersteps (default: no bound; it always ends).
        The same on every rank. On one rank there are no supersteps.
    ledger : Ledger, optional
        Where the supersteps are recorded.

    Returns
    -------
    PieceComponents
        Per local piece: ``root_key``, the smallest key of its component,
        and ``root_rank``/``root_index``, the component's root piece: the
        smallest by ``(key, rank, index)``. With ``parity``: ``sign``, each
        piece's sign relative to the root piece (the root has +1), and
        ``consistent``, whether the signs satisfy every link (False when a
        component has a cycle of odd parity, e.g. a Moebius strip: then
        the signs are some deterministic choice for the given input, and
        some links are violated). Without: both None. Also the number of
        ``rounds`` and ``supersteps``.

    Raises
    ------
    TypeError
        If ``comm`` is not an ``MPI.Comm``; on every rank, if any rank's
        keys or links are not integer arrays.
    ValueError
        On every rank, if any rank's arrays have the wrong shapes, a link
        names a piece or rank that does not exist, a parity is not +-1,
        ``parity`` is given on some ranks only, or ``max_supersteps`` is
        below 1.
    RuntimeError
        On every rank, if ``max_supersteps`` is reached first.

    Notes
    -----
    Collective on ``comm``. Shiloach-Vishkin hooking and shortcutting [1]_
    with FastSV's min-label hooking [2]_, on pieces instead of vertices.
    A round is two supersteps, ``"pieces:links"`` (the links' ends learn
    each other's parents; ranks subscribe to the remote parents their
    pieces point at) and ``"pieces:hook"`` (parents tell their watchers
    their changed states; pieces hook their parents onto smaller ones), and
    the loop ends once every link joins pieces with one parent: each
    component is then a star whose root is its smallest piece (docs/bsp.md,
    "Components of pieces across ranks").

    The number of rounds grows like ``log2`` of the number of pieces a
    component chains. Measured for a path of ``L`` pieces zig-zagging over 4
    ranks, with increasing, decreasing, alternating and random keys: 10-14
    supersteps for ``L = 16``, 14-18 for ``L = 64``, 22-32 for ``L = 1024``
    (at most 3.5 ``log2 L``), where min-label propagation takes about ``L``.
    SV's unconditional hooking of stagnant stars, which gives the worst-case
    ``O(log n)`` bound, is left out, as in FastSV. Each round, a rank sends
    and receives O(its links + its pieces) rows of 2-4 words; a parent's
    rank hears from each watching rank once, when it subscribes, and sends
    it rows only when the parent's state changes, so the rank of a
    component's root talks to every rank of the component about once, not
    once per round. That fan-in is the one place where a rank talks to
    O(p) others (pointer jumping makes stars).

    ``method="tree"`` climbs the binary tree of ranks by halving (the
    distributed sweep's, ``dmsolve.bsp._ranktree``) instead: one superstep
    tells every link's remote end about it; then each tree node over ranks
    ``[lo, hi)`` merges the pieces its two halves passed up along the links
    inside ``[lo, hi)`` (components with signs as the connected components
    of the parity double cover, an odd cycle joining a piece to its own
    mirror) and passes up only the links that leave ``[lo, hi)``, each
    tagged with its end's current root; the roots come back down the same
    tree. Always ``2 ceil(log2 p) + 1`` supersteps (``rounds`` is the tree's
    height), whatever the chains, and each rank talks to its link
    neighbours once and to at most three tree neighbours per level: no
    fan-in. The price: a node receives every link that leaves its range of
    ranks, so it suits pieces of a mesh partitioned into compact parts
    (the links that leave a group of ranks are its surface), not links to
    random ranks (then the top nodes receive most of the links). ``"hook"``
    keeps every rank's traffic to its own links and pieces in any pattern.

    References
    ----------
    .. [1] Y. Shiloach and U. Vishkin, "An O(log n) parallel connectivity
       algorithm", J. Algorithms 3(1), 57-67, 1982.
    .. [2] Y. Zhang, A. Azad and Z. Hu, "FastSV: a distributed-memory connected
       component algorithm with fast convergence", SIAM PP 2020.

    Examples
    --------
    A chain over the ranks, piece 0 of rank ``r`` linked to piece 0 of
    rank ``r - 1``:

    >>> import numpy as np
    >>> from mpi4py import MPI
    >>> comm = MPI.COMM_WORLD
    >>> r = comm.rank
    >>> link = np.array([0] if r else [], dtype=np.int64)
    >>> out = piece_components(np.array([10 * r]), link, link + r - 1, link, comm)
    >>> out.root_key, out.root_rank
    (array([0]), array([0]))
    """
    if not isinstance(comm, MPI.Comm):
        raise TypeError("comm must be an mpi4py MPI.Comm, got %s" % type(comm).__name__)
    size = comm.Get_size()
    try:
        keys, links = _check(keys, link_local, link_rank, link_remote, parity, method,
                             max_supersteps, size)
        error = None
    except (TypeError, ValueError) as e:
        if size == 1:
            raise
        # raised by the first sync on every rank (BSP's misuse path; both
        # methods start with the same "pieces:links" superstep)
        error = e
        keys, links = np.zeros(0, np.int64), np.zeros((0, 4), np.int64)
        method = method if method in ("hook", "tree") else "hook"
    if method == "tree":
        fk, fa, fs, consistent, rounds, steps = tree_components(
            keys, links, comm, parity is not None, max_supersteps, ledger, error)
        return PieceComponents(fk, fa >> _SHIFT, fa & _MASK,
                               fs.astype(np.int8) if parity is not None else None,
                               bool(consistent) if parity is not None else None, rounds, steps)
    run = _Run(comm, keys, links, max_supersteps, ledger)
    if error is not None:
        run.ctx._fail(error)
    return run.solve(parity is not None)


def _check(keys, link_local, link_rank, link_remote, parity, method, max_supersteps, size):
    """The arguments as int64 arrays: keys and ``(local, rank, remote,
    parity)`` link rows, after checking them and the options. Not collective."""
    if method not in ("hook", "tree"):
        raise ValueError("method must be 'hook' or 'tree', got %r" % (method,))
    if max_supersteps is not None and (
            not isinstance(max_supersteps, (int, np.integer)) or isinstance(max_supersteps, bool)
            or max_supersteps < 1):
        raise ValueError("max_supersteps must be an integer >= 1 or None, got %r"
                         % (max_supersteps,))
    k = np.asarray(keys)
    if k.dtype.kind not in "iu" or k.ndim != 1:
        raise TypeError("keys must be a 1-D integer array, got dtype %s and shape %s"
                        % (k.dtype, k.shape))
    if k.dtype.kind == "u" and k.size and k.max() > _INF:
        raise ValueError("keys above 2**63 - 1 do not fit int64")
    if k.size > _MASK:
        raise ValueError("at most 2**32 - 1 pieces per rank, got %d" % k.size)
    cols = []
    for name, a in (("link_local", link_local), ("link_rank", link_rank),
                    ("link_remote", link_remote), ("parity", parity)):
        a = np.asarray(a if a is not None else np.ones(cols[0].size, np.int64))
        if a.dtype.kind not in "iu" or a.ndim != 1:
            raise TypeError("%s must be a 1-D integer array, got dtype %s and shape %s"
                            % (name, a.dtype, a.shape))
        if cols and a.size != cols[0].size:
            raise ValueError("%s has %d entries, link_local %d: one per link"
                             % (name, a.size, cols[0].size))
        cols.append(a.astype(np.int64, copy=False))
    lu, lr, lv, ls = cols
    if lu.size and (lu.min() < 0 or lu.max() >= k.size):
        raise ValueError("link_local must name local pieces in [0, %d)" % k.size)
    if lr.size and (lr.min() < 0 or lr.max() >= size):
        raise ValueError("link_rank must be a rank in [0, %d)" % size)
    if lv.size and (lv.min() < 0 or lv.max() > _MASK):
        raise ValueError("link_remote must be a piece index >= 0")
    if np.any(np.abs(ls) != 1):
        raise ValueError("parity must be +1 or -1")
    links = np.unique(np.stack((lu, lr, lv, ls), axis=1), axis=0) if lu.size \
        else np.zeros((0, 4), np.int64)
    return k.astype(np.int64, copy=False), links


def _row_in(rows, table):
    """Whether each row of ``rows`` (shape (r, 2)) is a row of ``table``. Not
    collective."""
    if rows.shape[0] == 0 or table.shape[0] == 0:
        return np.zeros(rows.shape[0], dtype=bool)
    key = lambda a: a[:, 0] * np.int64(1 << _SHIFT) + a[:, 1]    # noqa: E731 (index, rank)
    return np.isin(key(rows), key(table))


def _less(k1, a1, k2, a2):
    """Whether label ``(k1, a1)`` is below ``(k2, a2)``, elementwise. Not collective."""
    return (k1 < k2) | ((k1 == k2) & (a1 < a2))


def _smallest(group, rows, n):
    """Per group ``0 .. n-1`` the smallest ``(key, addr, parity)`` row of
    ``rows`` (shape (r, 3)); ``(_INF, _INF, 1)`` for an empty group. Not
    collective."""
    out = np.empty((n, 3), np.int64)
    out[:, :2] = _INF
    out[:, 2] = 1
    if group.size:
        o = np.lexsort((rows[:, 2], rows[:, 1], rows[:, 0], group))
        g = group[o]
        first = o[np.concatenate(([True], g[1:] != g[:-1]))]
        out[group[first]] = rows[first]
    return out


class _Run:
    """The state of one :func:`piece_components` call by hooking and
    pointer jumping. Not collective to build; :meth:`solve` is collective on
    ``comm``.

    Every piece ``u`` points at a parent ``f[u]``, a piece of its component
    (itself at first), with the parity of ``u`` relative to ``f[u]``;
    pieces are ordered by ``(key, rank, index)`` and a parent is never
    larger than its child, so the pointers form trees whose roots are their
    smallest pieces. A round is two supersteps:

    1. ``"pieces:links"``: each link sends its local end's parent (label and
       parity) to the rank of its remote end. Each rank subscribes to the
       remote parents its pieces have newly taken (one row per distinct
       parent) and cancels those no piece points at any more. In the first
       round the link rows also tell the remote end about the link, so
       both ends know it from then on.
    2. ``"pieces:hook"``: each piece with watchers sends them its state,
       the better of its own parent and its smallest neighbour's parent,
       if that changed since they last heard or they are new; each piece
       whose smallest neighbour's parent ``n[u]`` is below its own parent
       hooks that parent onto ``n[u]`` (one row per distinct parent: the
       smallest hook). The flag "some link joins pieces with different
       parents" is reduced in the same sync.

    After the second sync every piece takes the smallest of its parent, the
    hooks onto it, ``n[u]`` and its parent's state (shortcutting). The
    loop ends after the first round (but the first, in which links are not
    yet known on both ends) in which every link joins pieces with one
    parent: then each component has one parent, which lies in it and so is
    its own parent: every component is one star, whose root is its smallest
    piece. Without links anywhere it ends after the first superstep. The
    rounds do not depend on how the pieces are spread over the ranks when
    the keys are distinct (on one rank they are counted, with no superstep).
    """

    def __init__(self, comm, keys, links, max_supersteps, ledger):
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        ctx = BSP(comm, ledger=ledger)
        # the tags of a round's two supersteps: "pieces:links" carries the
        # neighbours' parents and (un)subscriptions, "pieces:hook" the
        # parents' changed states and the hooks onto parents
        self.tag = ctx.tags("link", "watch", "state", "hook")
        # on one rank every row stays here: no superstep at all
        self.ctx = ctx if self.size > 1 else None
        self.limit = max_supersteps
        self.steps = 0
        self.m = m = keys.size
        self.self_addr = (np.int64(self.rank) << _SHIFT) | np.arange(m, dtype=np.int64)
        # parent label (key, addr) and this piece's parity relative to it
        self.f = np.stack((keys, self.self_addr, np.ones(m, np.int64)), axis=1)
        self.links = links            # rows (local, rank, remote, parity)
        # the remote parents this rank watches (sorted addresses) and their
        # last known states; the (piece, rank) pairs watching this rank's
        # pieces, and the state each piece last sent them
        self.watched = np.zeros(0, np.int64)
        self.known = np.zeros((0, 3), np.int64)
        self.watchers = np.zeros((0, 2), np.int64)
        self.sent = np.full((m, 3), _INF, np.int64)

    # -- messages ------------------------------------------------------------------------
    def _post(self, dests, rows, tag):
        """Queue the rows for other ranks; return the ones for this rank."""
        mine = dests == self.rank
        if self.ctx is not None and not mine.all():
            self.ctx.send_rows(dests[~mine], rows[~mine], tag)
        return rows[mine]

    def _sync(self, label, flags=None):
        """One superstep (none on one rank); returns the inbox (or None) and
        the reduced flags."""
        if self.ctx is None:
            return None, flags
        if flags is not None:
            self.ctx.aggregate("flags", "any", flags)
        inbox = self.ctx.sync(label)
        self.steps += 1
        return inbox, (inbox.aggregates["flags"] if flags is not None else None)

    def _received(self, inbox, tag, width, local):
        """Rows with ``tag`` from the other ranks, then this rank's own, with
        their sources."""
        if inbox is None:
            data, src = np.zeros((0, width), np.int64), np.zeros(0, np.int64)
        else:
            data, src = inbox.concat_with_sources(tag, dtype=np.int64, shape=(width,))
        return (np.concatenate((data, local)),
                np.concatenate((src, np.full(local.shape[0], self.rank, np.int64))))

    def _over_budget(self) -> None:
        """Raise if the bound is reached (called when not done)."""
        if self.limit is not None and self.steps >= self.limit:
            # every rank counts the same supersteps and sees the same flags
            raise RuntimeError("piece_components did not finish within %d supersteps"
                               % self.limit)

    # -- the rounds --------------------------------------------------------------------------
    def solve(self, has_parity: bool) -> PieceComponents:
        m, rank = self.m, self.rank
        rounds = 0
        while True:
            rounds += 1
            first = rounds == 1
            f = self.f
            # superstep 1: the parents of the links' local ends go to the
            # remote ends; every piece asks its parent's rank about the parent
            lu, lr, lv, ls = self.links.T
            if first:   # (remote, local, parity, key): also announces the link
                rows = np.stack((lv, lu, ls, f[lu, 0]), axis=1)
            else:       # (remote, parent key, parent addr, parity of remote to it)
                rows = np.stack((lv, f[lu, 0], f[lu, 1], f[lu, 2] * ls), axis=1)
            link_mine = self._post(lr, rows, self.tag.link)
            remote_parent = (f[:, 1] >> _SHIFT) != rank
            self._watch(f[remote_parent, 1])
            if first:   # any links at all; parity given here, not given here
                start = np.array([self.links.shape[0] > 0, has_parity, not has_parity])
                if self.ctx is not None:
                    self.ctx.aggregate("start", "any", start)
            inbox, _ = self._sync("pieces:links")
            if first:
                if inbox is not None:
                    start = inbox.aggregates["start"]
                if start[1] and start[2]:       # the same on every rank
                    raise ValueError("piece_components: parity is given on some ranks only")
                if not start[0]:                # no links anywhere: every piece is a root
                    return self._result(has_parity, True, rounds)
            self._over_budget()
            bad = None
            got, src = self._received(inbox, self.tag.link, 4, link_mine)
            ok = (got[:, 0] >= 0) & (got[:, 0] < m)
            if not ok.all():
                bad = ("piece_components: a link names piece %d of rank %d, which has %d"
                       % (got[~ok, 0][0], rank, m))
                got, src = got[ok], src[ok]
            j = got[:, 0]
            if first:
                # the reverse links: from now on both ends know every link
                rev = np.stack((j, src, got[:, 1], got[:, 2]), axis=1)
                self.links = np.unique(np.concatenate((self.links, rev)), axis=0)
                cand = np.stack((got[:, 3], (src << _SHIFT) | got[:, 1], got[:, 2]), axis=1)
            else:
                cand = got[:, 1:]
            # n[u]: the smallest parent among u's neighbours, u's parity to it
            nb = _smallest(j, cand, m)
            below = _less(nb[:, 0], nb[:, 1], f[:, 0], f[:, 1])
            # a link whose ends have one parent but disagree on the parity
            clash = bool(np.any((cand[:, 0] == f[j, 0]) & (cand[:, 1] == f[j, 1])
                                & (cand[:, 2] != f[j, 2])))
            best = np.where(below[:, None], nb, f)      # what a parent answers
            lp = f[~remote_parent, 1] & _MASK          # parents on this rank
            # superstep 2: parents tell their watchers their new state;
            # pieces hook their parents onto n[u]
            self._tell(inbox, best)
            u = np.flatnonzero(below)
            hooks = np.stack((f[u, 1], nb[u, 0], nb[u, 1], f[u, 2] * nb[u, 2]), axis=1)
            if u.size:      # one hook per parent: the smallest
                o = np.lexsort((hooks[:, 3], hooks[:, 2], hooks[:, 1], hooks[:, 0]))
                hooks = hooks[o]
                hooks = hooks[np.concatenate(([True], hooks[1:, 0] != hooks[:-1, 0]))]
            dest = hooks[:, 0] >> _SHIFT
            hooks[:, 0] &= _MASK
            hook_mine = self._post(dest, hooks, self.tag.hook)
            if bad is not None:
                if self.ctx is None:
                    raise ValueError(bad)
                self.ctx._fail(ValueError(bad))     # raised by the sync on every rank
            # Done when no link joins pieces with different parents (once
            # both ends know every link): then a component has one parent
            # c, which lies in it, so f[c] = c and the tree is a star whose
            # root is its smallest piece (a parent is never above its child).
            flags = np.array([first or bool(below.any()), clash])
            inbox, flags = self._sync("pieces:hook", flags)
            if not flags[0]:
                return self._result(has_parity, not flags[1], rounds)
            self._over_budget()
            # the new parent: the smallest of f, n, the parent's answer, the hooks
            via_remote = self._states(inbox, f[remote_parent, 1])
            via_local = best[lp]
            rp = np.flatnonzero(remote_parent)
            lc = np.flatnonzero(~remote_parent)
            hk, _ = self._received(inbox, self.tag.hook, 4, hook_mine)
            group = np.concatenate((np.arange(m), rp, lc, hk[:, 0]))
            rows = np.concatenate((
                nb,
                np.stack((via_remote[:, 0], via_remote[:, 1], f[rp, 2] * via_remote[:, 2]), 1),
                np.stack((via_local[:, 0], via_local[:, 1], f[lc, 2] * via_local[:, 2]), 1),
                hk[:, 1:]))
            new = _smallest(group, rows, m)
            take = _less(new[:, 0], new[:, 1], f[:, 0], f[:, 1])
            self.f = np.where(take[:, None], new, f)

    # -- remote parents: watch, tell, read ---------------------------------------------------
    def _watch(self, parents) -> None:
        """Queue subscriptions to the remote parents not watched yet and
        cancellations for those no piece here points at any more."""
        want = sorted_unique(parents)
        new = np.setdiff1d(want, self.watched, assume_unique=True)
        gone = np.setdiff1d(self.watched, want, assume_unique=True)
        keep = np.isin(self.watched, want, assume_unique=True)
        known = np.full((want.size, 3), _INF, np.int64)
        known[np.searchsorted(want, self.watched[keep])] = self.known[keep]
        self.watched, self.known = want, known
        if self.ctx is not None:
            addr = np.concatenate((new, gone))
            rows = np.stack((addr & _MASK, np.repeat([1, -1], (new.size, gone.size))), axis=1)
            self.ctx.send_rows(addr >> _SHIFT, rows, self.tag.watch)

    def _tell(self, inbox, best) -> None:
        """Apply the (un)subscriptions received; queue each piece's state
        for its watchers if it changed since they last heard, or if they
        are new."""
        if inbox is not None:
            got, src = inbox.concat_with_sources(self.tag.watch, dtype=np.int64, shape=(2,))
        else:
            got, src = np.zeros((0, 2), np.int64), np.zeros(0, np.int64)
        pairs = np.stack((got[:, 0], src), axis=1)
        on = got[:, 1] > 0
        w = self.watchers
        if (~on).any():
            drop = _row_in(w, pairs[~on])
            w = w[~drop]
        new = pairs[on]
        w = np.concatenate((w, new))
        self.watchers = w
        changed = np.any(best != self.sent, axis=1)
        tell = changed[w[:, 0]]
        tell[w.shape[0] - new.shape[0]:] = True
        self.sent[w[:, 0]] = best[w[:, 0]]
        if self.ctx is not None and tell.any():
            t = w[tell]
            self.ctx.send_rows(t[:, 1], np.concatenate((t[:, :1], best[t[:, 0]]), axis=1),
                               self.tag.state)

    def _states(self, inbox, parents) -> np.ndarray:
        """The last known states of the remote ``parents``, after the
        news of this superstep."""
        if inbox is not None:
            got, src = inbox.concat_with_sources(self.tag.state, dtype=np.int64, shape=(4,))
            at = np.searchsorted(self.watched, (src << _SHIFT) | got[:, 0])
            self.known[at] = got[:, 1:]
        return self.known[np.searchsorted(self.watched, parents)]

    def _result(self, has_parity: bool, consistent: bool, rounds: int) -> PieceComponents:
        f = self.f
        return PieceComponents(f[:, 0].copy(), f[:, 1] >> _SHIFT, f[:, 1] & _MASK,
                               f[:, 2].astype(np.int8) if has_parity else None,
                               bool(consistent) if has_parity else None, rounds, self.steps)
