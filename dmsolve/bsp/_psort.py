"""A distributed sort on the BSP layer: exact splitters, one exchange, a merge.

:func:`psort` sorts ``(key, gid)`` pairs spread over the ranks so that rank
``r`` ends with block ``r`` of the global order (block sizes as
``Layout.block``); :func:`rank_of` sends every item's global position back
to the rank that holds it. Nothing of global size is held by any rank.

References
----------
E. Le Guillou et al., "TTK is Getting MPI-Ready", IEEE TVCG 2024 (psort).
H. Shi and J. Schaeffer, "Parallel sorting by regular sampling", JPDC 14(4),
1992. P. Sanders, "Parallel algorithms" lecture notes (exact multi-way
selection from weighted samples of the ranks' candidates).
"""

from __future__ import annotations

import hashlib
import time
from typing import NamedTuple

import numpy as np
from mpi4py import MPI

from .._errors import agree
from .._layout import block_ranges
from ._ledger import Ledger
from ._unique import stable_argsort
from ._superstep import BSP

__all__ = ["psort", "rank_of", "SortedBlock"]


class SortedBlock(NamedTuple):
    """This rank's block of a :func:`psort`: the items at global positions
    ``start .. start + len(keys) - 1`` of the sorted order. Not collective."""

    keys: np.ndarray             #: sorted keys, shape (m,) or (m, c)
    gids: np.ndarray             #: their global ids (int64, shape (m,))
    payload: object              #: payload rows in the same order (None if none given)
    start: int                   #: global position of the first item
    global_size: int             #: number of items over all ranks
    rounds: int                  #: rounds of the splitter search


def psort(keys, comm: MPI.Comm, *, gids=None, payload=None,
          ledger: Ledger | None = None) -> SortedBlock:
    """Sort ``(key, gid)`` pairs over the ranks of ``comm`` (a sample sort
    with exact splitters).

    Parameters
    ----------
    keys : array_like, shape (n,) or (n, c)
        This rank's keys, int (taken as int64) or float (float64); a 2-D
        array is ``n`` keys of ``c`` columns, ordered lexicographically by
        rows (column 0 first). Any rank may hold none (shape ``(0,)`` or
        ``(0, c)``). The dtype kind (integer or float) and ``c`` must be the
        same on every rank. NaN is refused.
    comm : MPI.Comm
    gids : int array, shape (n,), optional
        Global ids breaking ties between equal keys. Default: the item's
        position in the concatenation of all ranks' inputs in rank order
        (which makes the sort stable). Items with equal key and gid are
        ordered by rank, then by input order.
    payload : array or tuple of arrays, each of shape (n, ...), optional
        Columns carried along with the keys (numeric or bool, with the same
        dtype and trailing shape on every rank).
    ledger : Ledger, optional
        Where the supersteps are recorded (bytes and messages per rank).

    Returns
    -------
    SortedBlock
        ``(keys, gids, payload, start, global_size, rounds)``: this rank's
        block of the global order, ``Layout.block(global_size, comm)``'s
        block ``comm.rank`` (so at most ``ceil(N/p)`` items per rank, and
        counts differ by at most one), with payload rows in the same order.

    Raises
    ------
    TypeError, ValueError
        On every rank, if any rank passes keys that are not int or float,
        NaN keys, gids or payload rows of the wrong length or type, or if the
        ranks disagree on the key dtype kind, the number of key columns, or
        the payload's dtypes and shapes.

    Notes
    -----
    Collective on ``comm``. Steps:

    1. Local sort of the items by ``(key, gid, rank, index)`` (a strict
       total order, so every global position is one item). In the search an
       item travels as its key, gid and rank, and its position in its
       rank's sorted items (which orders it like the index, and which only
       its own rank needs).
    2. **Exact splitters** for each rank boundary ``j`` (global position
       ``s_j``, the block start of rank ``j``), all boundaries at once:

       - *Settling*: the ranks' first and last items (one ``Allgather``)
         bound every rank's positions; a rank whose items all lie on one
         side of a boundary never joins its search, and a boundary with one
         rank left is placed at once. For keys near their place (a
         block-partitioned mesh) that leaves two or three members a
         boundary; for keys spread over every block, every rank.
       - *Histogram round*, when the boundaries left have
         :data:`HISTOGRAM_MEMBERS` (4) members on average, or every rank:
         each member contributes its first and last items and
         :data:`HISTOGRAM_SAMPLES` (8) evenly spaced ones at a phase of its
         own (one ``Allgatherv`` of key and gid), every rank counts its items
         below every sample, and one ``Allreduce`` of the counts gives every
         sample its exact global position. A boundary then lies on a sample
         (found) or between two consecutive ones: for random keys about
         ``2N / (8p)`` candidates, a few on each rank. The exact counts are
         what make a small sample enough: with weighted samples alone the
         uncertainty adds up over the members.
       - *Leader rounds*: rank ``j`` leads boundary ``j``; each rank still
         holding candidates sends it one message a round, its interval and
         :data:`SAMPLES` (16) evenly spaced samples (all of them if fewer).
         The leader takes two pivots certain to bracket ``s_j`` (the count
         below a sample is known to within the members' sample spacing),
         every member counts its items below both and keeps those between:
         a round keeps fewer than ``4/SAMPLES`` of the candidates plus two.
         The leader sends each member its split as soon as the counts hit
         the target, one member is left, or every candidate is in hand.

       At most ``ceil(log_4 N) + 2`` rounds (the histogram counts as one),
       two supersteps each (the histogram's two collectives are recorded
       in the ledger as ``psort:samples`` and ``psort:histogram``);
       measured: 3 for 1000 random keys per rank at 4 to 64 ranks, 4-5 for
       2x10^4 (see bench/psort_rounds.md). Per rank, for spread keys, the
       histogram costs at most ``8 (c + 2)`` words per rank of ``comm``, and
       a leader receives one message from each member a round, but the
       members are few after the first leader round; for keys near their
       place a rank talks to the leaders of the blocks its keys fall in.
    3. **One exchange** (one ``Alltoallv`` of the BSP layer): rank ``r``
       sends each rank ``j`` its items between boundaries ``j`` and ``j+1``.
    4. **Merge** of the received sorted runs (a stable sort).

    Per-rank memory and traffic are O(n + N/p + p) rows, never O(N): the
    only replicated data are the ``p`` input counts, the ranks' first and
    last items (two ``Allgather`` calls) and, for spread keys, the histogram's
    ``10 p`` samples and counts.

    Examples
    --------
    >>> out = psort(np.array([3, 1, 2]) + comm.rank, comm)   # doctest: +SKIP
    >>> out.keys, out.gids, out.start                        # doctest: +SKIP
    """
    work = _prepare(keys, comm, gids, payload)
    return _sort(work, comm, ledger)


def rank_of(keys, comm: MPI.Comm, *, gids=None, ledger: Ledger | None = None) -> np.ndarray:
    """The global position of each local item in the order of :func:`psort`.

    Parameters are those of :func:`psort`. Returns an int64 array of shape
    ``(n,)``, aligned with this rank's ``keys``: the positions over all
    ranks are a permutation of ``0 .. N-1``, and equal ``(key, gid)`` pairs
    get consecutive positions (by rank, then input order).

    Collective on ``comm``: one :func:`psort` of the keys and gids alone,
    then one superstep in which each block's rank sends every source rank
    the positions of that source's items, in the order they came (so
    neither an item's origin nor its index travels, and a position is a
    4-byte offset in its block while blocks hold fewer than 2**31 items).
    O(n + N/p + p) memory and traffic per rank. At one rank, no superstep:
    the positions are the inverse of the local stable order.
    """
    work = _prepare(keys, comm, gids, None)
    if comm.Get_size() == 1:
        # one rank: the positions are the inverse of the local order, with
        # no exchange (a message to itself) and no merge of one sorted run
        k2 = work["keys"]
        order = _key_gid_order(k2.reshape(-1, 1) if k2.ndim == 1 else k2, work["gids"])
        out = np.empty(order.size, dtype=np.int64)
        out[order] = np.arange(order.size, dtype=np.int64)
        return out
    return _sort(work, comm, ledger, positions=True)


# -- the door ------------------------------------------------------------------------------
def _signature(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=7).digest(), "little")


def _prepare(keys, comm, gids, payload) -> dict:
    """Check the arguments (agreed over the ranks) and count the items.
    Collective on ``comm``: one agreement and one ``Allgather`` of a few words."""
    if not isinstance(comm, MPI.Comm):
        raise TypeError("comm must be an mpi4py MPI.Comm, got %s" % type(comm).__name__)
    exc = None
    k = g = None
    cols: list = []
    single = payload is not None and not isinstance(payload, (tuple, list))
    try:
        k = np.asarray(keys)
        if k.dtype.kind not in "iuf" or k.dtype.kind == "b":
            raise TypeError("keys must be integers or floats, got dtype %s" % k.dtype)
        if k.ndim not in (1, 2):
            raise ValueError("keys must be 1-D (n,) or 2-D (n, c), got shape %s" % (k.shape,))
        if k.ndim == 2 and k.shape[1] == 0:
            raise ValueError("2-D keys need at least one column, got shape %s" % (k.shape,))
        if k.dtype.kind == "u" and k.size and k.max() > np.iinfo(np.int64).max:
            raise ValueError("unsigned keys above 2**63-1 do not fit int64")
        k = k.astype(np.int64 if k.dtype.kind in "iu" else np.float64, copy=False)
        n = k.shape[0]
        if gids is not None:
            g = np.asarray(gids)
            if g.dtype.kind not in "iu":
                raise TypeError("gids must be integers, got dtype %s" % g.dtype)
            if g.shape != (n,):
                raise ValueError("gids must have shape (%d,) like the keys, got %s"
                                 % (n, g.shape))
            g = g.astype(np.int64, copy=False)
        if payload is not None:
            for a in ([payload] if single else list(payload)):
                a = np.asarray(a)
                if a.dtype.kind not in "biufc":
                    raise TypeError("payload columns must be numeric or bool, got dtype %s"
                                    % a.dtype)
                if a.ndim == 0 or a.shape[0] != n:
                    raise ValueError("each payload column needs one row per key (%d), got "
                                     "shape %s" % (n, a.shape))
                cols.append(a)
    except Exception as e:  # noqa: BLE001 - agreed, then raised on every rank
        exc = e
    agree(comm, exc)
    nan = bool(k.dtype.kind == "f" and np.isnan(k).any())
    sig = "%s/%d/%s" % (k.dtype.kind, 0 if k.ndim == 1 else k.shape[1],
                        ";".join("%s%s" % (a.dtype.str, a.shape[1:]) for a in cols))
    row = np.array([n, int(nan), _signature(sig)], dtype=np.int64)
    every = np.empty((comm.Get_size(), 3), dtype=np.int64)
    comm.Allgather(row, every)
    exc = None
    if every[:, 1].any():
        bad = np.flatnonzero(every[:, 1]).tolist()
        exc = ValueError("psort: keys contain NaN (on rank%s %s); NaN has no place in "
                         "the order" % ("s" if len(bad) > 1 else "",
                                        ", ".join(map(str, bad))))
    elif np.any(every[:, 2] != every[0, 2]):
        exc = ValueError("psort: ranks disagree on the key dtype kind, the number of key "
                         "columns or the payload's dtypes and shapes (this rank: %s)" % sig)
    if exc is not None:
        raise exc     # every rank saw the same rows: every rank raises this
    counts = every[:, 0]
    rank = comm.Get_rank()
    offset = int(counts[:rank].sum())
    if g is None:
        g = offset + np.arange(n, dtype=np.int64)
    return {"keys": k, "gids": g, "cols": cols, "single": single,
            "n": n, "counts": counts}


# -- the sort ------------------------------------------------------------------------------
def _sort(work: dict, comm: MPI.Comm, ledger, positions: bool = False):
    """psort's steps; with ``positions``, :func:`rank_of`'s answer instead
    of the block."""
    rank, size = comm.Get_rank(), comm.Get_size()
    k2 = work["keys"]
    k2 = k2.reshape(-1, 1) if k2.ndim == 1 else k2
    ncols = k2.shape[1]
    total = int(work["counts"].sum())
    # 1. local sort by (key columns, gid); lexsort is stable, so the input
    #    index orders equal pairs: the strict order (key, gid, rank, index)
    order = _key_gid_order(k2, work["gids"])
    K = k2[order]
    G = work["gids"][order]
    local = _Local(K, G, rank)
    # 2. exact splitters
    bounds = block_ranges(total, size)
    split, rounds = _splitters(local, bounds, work["counts"], comm, ledger)
    # 3. one exchange: the items between boundaries j and j+1 go to rank j
    ctx = BSP(comm, ledger=ledger)
    cols = [c[order] for c in work["cols"]]
    tag = ctx.tags("keys", "gids")
    col_tag = ctx.tags(*["col%d" % i for i in range(len(cols))])
    for j in range(size):
        a, b = int(split[j]), int(split[j + 1])
        if b > a:
            ctx.send(j, K[a:b], tag=tag.keys)
            ctx.send(j, G[a:b], tag=tag.gids)
            for t, c in zip(col_tag, cols):
                ctx.send(j, c[a:b], tag=t)
    inbox = ctx.sync("psort:exchange")
    del K, G, local
    rk = inbox.concat(tag.keys, dtype=k2.dtype, shape=(ncols,))
    rg = inbox.concat(tag.gids, dtype=np.int64)
    rc = [inbox.concat(t, dtype=c.dtype, shape=c.shape[1:]) for t, c in zip(col_tag, cols)]
    # 4. merge the sorted runs (stable: equal pairs stay in source order)
    merge = _key_gid_order(rk, rg)
    if positions:
        runs = inbox.messages(tag.keys)
        return _positions_back(runs, merge, order, split, bounds, comm, ledger)
    out_keys = rk[merge]
    if work["keys"].ndim == 1:
        out_keys = out_keys.reshape(-1)
    out_cols = [c[merge] for c in rc]
    payload = None
    if work["cols"]:
        payload = out_cols[0] if work["single"] else tuple(out_cols)
    return SortedBlock(np.ascontiguousarray(out_keys), rg[merge], payload,
                       int(bounds[rank]), total, rounds)


def _positions_back(runs, merge, order, split, bounds, comm: MPI.Comm, ledger) -> np.ndarray:
    """:func:`rank_of`'s last superstep: this rank's block positions of the
    ``runs`` it received (``(source, keys)`` pairs) go back to their sources
    in the order they came; each source knows which of its items it sent
    where. Collective on ``comm``."""
    # offsets in the block: 4 bytes while every block is below 2**31 items
    # (the same on every rank: bounds are global)
    wide = int(np.diff(bounds).max()) >= 2 ** 31
    offset = np.empty(merge.size, dtype=np.int64 if wide else np.int32)
    offset[merge] = np.arange(merge.size)
    ctx = BSP(comm, ledger=ledger)
    tag = ctx.tags("positions")
    at = 0
    for source, run in runs:
        ctx.send(source, offset[at:at + run.shape[0]], tag=tag.positions)
        at += run.shape[0]
    back = ctx.sync("psort:positions")
    out = np.empty(order.size, dtype=np.int64)
    for j, run in back.messages(tag.positions):
        out[order[split[j]:split[j + 1]]] = bounds[j] + run
    return out


def _key_gid_order(K: np.ndarray, G: np.ndarray) -> np.ndarray:
    """The stable order of the rows by (key columns, gid), as ``np.lexsort``.

    One key column whose ties already have ascending gids (a global order's
    ``(value, id)`` keys, or the sorted runs psort merges) is sorted by a
    stable argsort of the key alone, about twice as fast; the tie check
    costs one pass. Several columns with gids ascending in input order (a
    rank's own items) are sorted column by column, last first, each by a
    stable argsort (a radix sort over the columns: 0.19 -> 0.07 s for 1.5
    million rows of two columns). Not collective."""
    if K.shape[1] == 1:
        order = stable_argsort(K[:, 0])
        k, g = K[order, 0], G[order]
        if not np.any((k[1:] == k[:-1]) & (g[1:] < g[:-1])):
            return order
    elif K.shape[0] > 1 and np.all(G[1:] >= G[:-1]):
        # equal keys then stay in input order, which is gid order
        order = stable_argsort(K[:, -1])
        for c in range(K.shape[1] - 2, -1, -1):
            order = order[stable_argsort(K[order, c])]
        return order
    return np.lexsort((G,) + tuple(K[:, c] for c in range(K.shape[1] - 1, -1, -1)))


class _Local:
    """This rank's sorted items and the lexicographic search in them.

    An item travels in the search as its strict key ``(key row, gid, rank,
    position)``, ``position`` being its place in this rank's sorted items:
    within one rank, the positions of equal ``(key, gid)`` pairs are in the
    order of their input indices, so this is the order ``(key, gid, rank,
    index)``, and only the rank that owns an item needs its position."""

    def __init__(self, K, G, rank):
        self.K, self.G, self.rank = K, G, rank

    def count_less(self, lo: int, hi: int, key, ints) -> int:
        """Number of local items below the strict key (key, ints), given that
        the items before ``lo`` are below it and those from ``hi`` on are not
        (``ints``: gid, rank, position)."""
        if ints[1] == self.rank:        # one of mine: the items below it are its position
            return int(ints[2])
        a, b = lo, hi
        for c in range(self.K.shape[1]):
            col = self.K[a:b, c]
            a, b = (a + int(np.searchsorted(col, key[c], "left")),
                    a + int(np.searchsorted(col, key[c], "right")))
            if a == b:
                return a
        col = self.G[a:b]
        a, b = (a + int(np.searchsorted(col, ints[0], "left")),
                a + int(np.searchsorted(col, ints[0], "right")))
        return b if self.rank < ints[1] else a


def _splitters(local: _Local, bounds: np.ndarray, counts: np.ndarray, comm: MPI.Comm,
               ledger):
    """Local split positions ``split[0..p]`` such that the items below
    ``split[j]`` on all ranks are exactly the first ``bounds[j]`` of the
    global order. Collective on ``comm``; returns ``(split, rounds)``.

    Boundary ``j`` (0 < j < p) is led by rank ``j``. Every rank that still
    holds candidates for it (a *member*: its items ``lo[j] .. hi[j]-1``) sends
    the leader one message a round: ``[lo, hi]`` and :data:`SAMPLES` evenly
    spaced samples of its candidates, each standing for the items up to the
    next. From the samples the leader bounds the count below any key to
    within ``E`` (the members' largest weights, less one each) and takes two
    pivots that bracket the target for certain: the last sample estimated at
    or below it, and the first one at or above it even after ``E``. Members
    count below both and keep what lies between, so the target never leaves
    the bracket and a round keeps fewer than ``4/SAMPLES`` of the candidates
    plus two. A member left with nothing drops out with its final count.
    The leader places the boundary (one message per member with its split)
    when the counts hit the target, when one member remains, or when every
    member sent all its candidates (then it sorts them and counts off the
    target).

    Before the search, the ranks' first and last items (one ``Allgather``)
    bound every rank's positions in the global order (:func:`_position_bounds`):
    a rank whose items all lie below a boundary, or all at or above it, is
    settled for that boundary and never joins its search. For keys already
    near their place (a block-partitioned mesh, a slab's vertex order) that
    leaves a few members per boundary, so a rank talks to a few leaders, not
    to every rank. For keys spread over every block it settles nothing, and
    the first round is then a histogram (:func:`_histogram`): a regular sample
    of every rank's items is gathered by all, and one ``Allreduce`` of the
    ranks' counts below the samples gives each sample's exact global
    position, so that every boundary starts between two consecutive samples
    with no search messages at all; the members of what is left are few, and
    hold few candidates each.
    """
    rank, size = comm.Get_rank(), comm.Get_size()
    if ledger is None:            # the histogram's collectives are recorded too
        ledger = Ledger(comm)
    n = local.K.shape[0]
    total = int(bounds[-1])
    split = np.zeros(size + 1, dtype=np.int64)
    split[size] = n
    open_ = [j for j in range(1, size) if 0 < bounds[j] < total]
    for j in range(1, size):
        if bounds[j] >= total:
            split[j] = n
    if not open_:                 # the same on every rank: bounds are global
        return split, 0
    table, last_pos, first_pos = _position_bounds(local, counts, comm)
    nmembers, settled_below = _members(bounds, counts, last_pos, first_pos)
    # this rank's candidates for boundary j: its items lo[j] .. hi[j]-1, and
    # the items of all ranks below the members' candidates: below[j]
    lo = np.zeros(size + 1, dtype=np.int64)
    hi = np.full(size + 1, n, dtype=np.int64)
    below = settled_below.copy()
    for j in open_:
        if last_pos[rank] < bounds[j]:       # all of this rank's items are below j
            split[j] = lo[j] = n
        elif first_pos[rank] >= bounds[j]:   # all at or above j
            split[j] = hi[j] = 0
        elif nmembers[j] == 1:               # the others are settled: j is in my items
            split[j] = lo[j] = hi[j] = bounds[j] - settled_below[j]
    searched = [j for j in open_ if nmembers[j] > 1]
    if not searched:              # the same on every rank: the table is global
        return split, 0
    rounds = 0
    if _crowded(nmembers[searched], size):   # the same on every rank
        rounds = 1
        searched = _histogram(local, bounds, counts, table, last_pos, first_pos, searched,
                              lo, hi, below, split, comm, ledger)
        if not searched:
            return split, rounds
    ctx = BSP(comm, ledger=ledger)
    # member -> leader: its interval and samples; leader -> member: its
    # split, or two pivots
    tag = ctx.tags("candidates", "pivots")
    for j in searched:
        if lo[j] < hi[j]:
            _send_candidates(ctx, tag.candidates, local, j, int(lo[j]), int(hi[j]))
    inbox = ctx.sync("psort:candidates")
    leader = _Leader(int(bounds[rank]), int(below[rank]), local.K.shape[1], local.K.dtype,
                     tag) if rank in searched else None
    while True:
        rounds += 1
        # leaders -> their members: a split each, or two pivots
        searching = leader is not None and leader.decide(ctx, inbox)
        ctx.vote(searching)
        inbox = ctx.sync("psort:pivots")
        for j, msg in inbox.messages(tag.pivots):
            if msg[0] == _PLACE:
                split[j] = msg[1]
                continue
            # count below both pivots and keep the items between them
            a, b = int(lo[j]), int(hi[j])
            key1, key2 = _pivot_keys(msg, local.K.shape[1], local.K.dtype)
            new_lo = local.count_less(a, b, key1, msg[2:5])
            new_hi = local.count_less(new_lo, b, key2, msg[5:8]) if msg[1] else b
            lo[j], hi[j] = new_lo, new_hi
            if new_lo == new_hi:
                split[j] = new_lo   # the boundary lies past these items for good
            _send_candidates(ctx, tag.candidates, local, j, new_lo, new_hi)
        if not inbox.any_active:  # every open boundary was placed: the same on every rank
            break
        inbox = ctx.sync("psort:counts")
    return split, rounds


def _histogram(local: _Local, bounds, counts, table, last_pos, first_pos, searched, lo, hi,
               below, split, comm: MPI.Comm, ledger) -> list:
    """The first round of the search when its boundaries are crowded: the
    exact global position of a sample of the members' items.

    Every rank holding items on both sides of a searched boundary contributes
    its first and last items (already in ``table``) and
    :data:`HISTOGRAM_SAMPLES` evenly spaced ones at a phase of its own
    (:func:`_histogram_positions`; one ``Allgatherv`` of ``c + 1`` words
    each: the key and gid, the owner alone needs the position); every rank
    counts its items below every sample, and one ``Allreduce`` of the counts
    (int32 while ``N < 2**31``) gives each sample's global position. Each
    searched boundary then lies on a sample, or between two consecutive
    ones: ``lo``, ``hi``, ``below`` and ``split`` are updated in place, and
    the boundaries still to search are returned (the same on every rank).
    The two collectives are recorded in the ledger as supersteps
    (``psort:samples``, ``psort:histogram``). Collective on ``comm``."""
    size = comm.Get_size()
    n, ncols = local.K.shape
    width = ncols + 1
    t0 = time.perf_counter()
    # the senders: the ranks that are members of a searched boundary
    at = np.sort(bounds[searched])
    sender = (counts > 0) & (np.searchsorted(at, last_pos, "right")
                             > np.searchsorted(at, first_pos, "right"))
    nsamp = np.where(sender, np.minimum(counts, HISTOGRAM_SAMPLES), 0)
    rank = comm.Get_rank()
    pos = _histogram_positions(n, rank, size) if sender[rank] else np.zeros(0, np.int64)
    mine = np.empty((pos.size, width), dtype=np.int64)
    mine[:, :ncols] = np.ascontiguousarray(local.K[pos]).view(np.int64)
    mine[:, ncols] = local.G[pos]
    gathered = np.empty((int(nsamp.sum()), width), dtype=np.int64)
    t1 = time.perf_counter()
    comm.Allgatherv(mine, [gathered, nsamp * width, None, MPI.INT64_T])
    t2 = time.perf_counter()
    ledger.record_superstep("psort:samples", t1 - t0, t2 - t1, mine.nbytes,
                            gathered.nbytes - mine.nbytes, 0, 0)
    # the samples: the senders' first items, gathered ones and last items
    ends = np.flatnonzero(sender)
    rows = np.concatenate((table[ends, :width], gathered, table[ends, width:]))
    src = np.concatenate((ends, np.repeat(np.arange(size), nsamp), ends))
    place = np.full(src.size, -1, dtype=np.int64)   # the positions of my own samples
    if sender[rank]:
        place[src == rank] = np.concatenate(([0], pos, [n - 1]))
    keys = np.ascontiguousarray(rows[:, :ncols]).view(local.K.dtype)
    ints = np.column_stack((rows[:, ncols], src, place))
    below_here = _count_below(local, keys, ints)
    if int(bounds[-1]) < 2 ** 31:     # the same on every rank
        below_here = below_here.astype(np.int32)
    position = np.empty_like(below_here)
    t3 = time.perf_counter()
    comm.Allreduce(below_here, position, op=MPI.SUM)
    t4 = time.perf_counter()
    ledger.record_superstep("psort:histogram", t3 - t2, t4 - t3, position.nbytes,
                            position.nbytes, 0, 0)
    # a sample's global position is the count below it, so their order is
    # the samples' order (an item sampled twice, as first item and as a
    # sample, is there twice with the same counts, which does no harm)
    order = stable_argsort(position)
    position, below_here = position[order], below_here[order]
    target = bounds[searched]
    i = np.searchsorted(position, target, "right") - 1       # the last sample at or below
    left = np.where(i >= 0, below_here[np.maximum(i, 0)], 0)
    right = np.where(i + 1 < position.size,
                     below_here[np.minimum(i + 1, position.size - 1)], n)
    at_sample = (i >= 0) & (position[np.maximum(i, 0)] == target)
    rest = []
    for k, j in enumerate(searched):
        lo[j] = left[k]
        hi[j] = left[k] if at_sample[k] else right[k]
        below[j] = position[i[k]] if i[k] >= 0 else 0
        if lo[j] == hi[j]:
            split[j] = lo[j]
        if not at_sample[k]:
            rest.append(j)
    return rest


def _crowded(nmembers: np.ndarray, size: int) -> bool:
    """Whether the searched boundaries (``nmembers`` members each) start with
    a histogram round: when they have :data:`HISTOGRAM_MEMBERS` members on
    average, or every rank. Not collective."""
    return float(np.mean(nmembers)) >= min(HISTOGRAM_MEMBERS, size)


def _histogram_positions(m: int, rank: int, size: int) -> np.ndarray:
    """Positions of the :data:`HISTOGRAM_SAMPLES` evenly spaced samples of
    ``m`` sorted items (all of them when there are fewer), at a phase that
    depends on the rank: rank ``q`` samples its quantiles ``(k + (q + 1/2)
    / size) / HISTOGRAM_SAMPLES``, so that ranks whose keys are alike (random
    keys) sample different quantiles and the samples of all ranks, sorted,
    are about ``N / (size HISTOGRAM_SAMPLES)`` items apart, not clustered
    into ``HISTOGRAM_SAMPLES`` groups of ``size``."""
    s = HISTOGRAM_SAMPLES
    if m <= s:
        return np.arange(m, dtype=np.int64)
    phase = (2 * rank + 1) / (2 * size)
    return ((np.arange(s) + phase) * m / s).astype(np.int64)


def _count_below(local: _Local, keys: np.ndarray, ints: np.ndarray) -> np.ndarray:
    """This rank's number of items below each strict key ``(keys[i],
    ints[i])`` (``ints``: gid, rank, index): a vectorised search of the first
    key column, and a full one only for the keys it ties. Not collective."""
    col = local.K[:, 0]
    a = np.searchsorted(col, keys[:, 0], "left").astype(np.int64)
    b = np.searchsorted(col, keys[:, 0], "right")
    for i in np.flatnonzero(b > a):
        a[i] = local.count_less(int(a[i]), int(b[i]), keys[i], ints[i])
    return a


def _position_bounds(local: _Local, counts: np.ndarray, comm: MPI.Comm):
    """Bounds on every rank's positions in the global order, from the ranks'
    first and last items (one ``Allgather`` of ``2c + 2`` words per rank).

    Returns ``(table, last_pos, first_pos)``, the same on every rank:
    ``table[q]`` holds rank ``q``'s first and last items (key words and gid,
    twice; their positions are 0 and ``counts[q] - 1``), and rank ``q``'s
    last item is at a position at most ``last_pos[q]`` (the items of the
    ranks whose first item is not above it, less one), and its first item at
    a position at least ``first_pos[q]`` (the items of the ranks whose last
    item is below it). A rank without items gets ``-1`` and ``N``.
    Collective on ``comm``."""
    size = comm.Get_size()
    n, ncols = local.K.shape
    width = ncols + 1
    row = np.zeros(2 * width, dtype=np.int64)
    if n:
        for half, i in ((0, 0), (1, n - 1)):
            at = half * width
            row[at:at + ncols] = np.ascontiguousarray(local.K[i]).view(np.int64)
            row[at + ncols] = local.G[i]
    table = np.empty((size, 2 * width), dtype=np.int64)
    comm.Allgather(row, table)
    has = np.flatnonzero(counts > 0)
    last_pos = np.full(size, -1, dtype=np.int64)
    first_pos = np.full(size, int(counts.sum()), dtype=np.int64)
    if has.size == 0:
        return table, last_pos, first_pos
    # the 2m endpoints in the strict order (key, gid, rank, position); a
    # first item sorts before a last one with the same strict key (the same item)
    ends = np.concatenate((table[has, :width], table[has, width:]))
    keys = np.ascontiguousarray(ends[:, :ncols]).view(local.K.dtype)
    owner = np.concatenate((has, has))
    last = np.repeat([0, 1], has.size)
    order = np.lexsort((last, last * (counts[owner] - 1), owner, ends[:, ncols])
                       + tuple(keys[:, c] for c in range(ncols - 1, -1, -1)))
    w = counts[owner[order]]
    is_last = last[order] == 1
    firsts_upto = np.cumsum(np.where(is_last, 0, w))
    lasts_before = np.cumsum(np.where(is_last, w, 0)) - np.where(is_last, w, 0)
    last_pos[owner[order][is_last]] = firsts_upto[is_last] - 1
    first_pos[owner[order][~is_last]] = lasts_before[~is_last]
    return table, last_pos, first_pos


def _members(bounds, counts, last_pos, first_pos):
    """For each boundary ``j``: how many ranks may hold items on both sides
    of it (``first_pos < bounds[j] <= last_pos``; the others are settled), and
    how many items the ranks settled below it hold. Not collective; the same
    on every rank. O(p log p)."""
    size = counts.size
    member = counts > 0
    a = np.searchsorted(bounds, first_pos[member], "right")   # first j above first_pos
    b = np.searchsorted(bounds, last_pos[member], "right")    # j below b: bounds[j] <= last_pos
    diff = np.zeros(size + 2, dtype=np.int64)
    np.add.at(diff, a, 1)
    np.add.at(diff, b, -1)
    nmembers = np.cumsum(diff)[:size + 1]
    by_last = stable_argsort(last_pos)
    cum = np.concatenate(([0], np.cumsum(counts[by_last])))
    settled_below = cum[np.searchsorted(last_pos[by_last], bounds, "left")]
    return nmembers, settled_below


#: samples each member sends its leader per round (a round keeps fewer than
#: 4/SAMPLES of the candidates, plus two)
SAMPLES = 16
#: samples of every member's items in the histogram round, besides its first
#: and last item
HISTOGRAM_SAMPLES = 8
#: the histogram round is taken when the searched boundaries have at least
#: this many members on average, or every rank (keys spread over the blocks);
#: keys near their place (two or three members a boundary) skip it, as its
#: two collectives cost O(p) words per rank
HISTOGRAM_MEMBERS = 4
_SEARCH, _PLACE = 0, 1


def _sample_positions(m: int) -> np.ndarray:
    """Positions (from the interval's start) of the samples of an interval of
    ``m`` items, and ``m`` last: sample ``i`` stands for the items from its
    position up to the next one's."""
    k = min(SAMPLES, m)
    return (np.arange(k + 1, dtype=np.int64) * m) // k


def _send_candidates(ctx: BSP, tag: int, local: _Local, j: int, a: int, b: int) -> None:
    """Queue for the leader of boundary ``j`` one message with ``tag``:
    ``a, b`` (this rank's candidates are its items ``a .. b-1``), then the
    key words and gid of each of their samples, evenly spaced (all of them
    when there are at most :data:`SAMPLES`). The leader knows the source
    rank, and the samples' positions and weights follow from ``a`` and
    ``b``."""
    ncols = local.K.shape[1]
    at = a + _sample_positions(b - a)[:-1] if b > a else np.zeros(0, dtype=np.int64)
    msg = np.empty(2 + at.size * (ncols + 1), dtype=np.int64)
    msg[:2] = a, b
    rows = msg[2:].reshape(at.size, ncols + 1)
    rows[:, :ncols] = np.ascontiguousarray(local.K[at]).view(np.int64)
    rows[:, ncols] = local.G[at]
    ctx.send(j, msg, tag=tag)


def _pivot_keys(msg: np.ndarray, ncols: int, dtype):
    """The two pivot keys of a leader's search message."""
    keys = np.ascontiguousarray(msg[8:8 + 2 * ncols]).view(dtype)
    return keys[:ncols], keys[ncols:]


class _Leader:
    """A boundary leader's state: the target position, the items below the
    members' candidates on ranks that left the search (``base``), and the
    last round's members; ``tag``, the search's tags."""

    def __init__(self, target: int, below: int, ncols: int, dtype, tag):
        self.target, self.below, self.ncols, self.dtype = target, below, ncols, dtype
        self.tag = tag
        self.base = None
        self.done = False

    def decide(self, ctx: BSP, inbox) -> bool:
        """Read the members' messages and queue the next ones: a split for
        each member, or two pivots. Returns whether the search goes on."""
        if self.done:
            return False
        msgs = inbox.messages(self.tag.candidates)
        src = np.array([q for q, _ in msgs], dtype=np.int64)
        lo = np.array([int(a[0]) for _, a in msgs], dtype=np.int64)
        hi = np.array([int(a[1]) for _, a in msgs], dtype=np.int64)
        if self.base is None:           # the first round: below the members' lo
            self.base = self.below - int(lo.sum())
        below_lo = self.base + int(lo.sum())
        below_hi = self.base + int(hi.sum())
        left = lo < hi
        self.base += int(lo[~left].sum())  # members that dropped out keep their count
        t = self.target - below_lo
        if t == 0 or below_hi == self.target:
            self._place(ctx, src[left], lo[left] if t == 0 else hi[left])
            return False
        src, lo, hi = src[left], lo[left], hi[left]
        if src.size == 1:
            self._place(ctx, src, lo + t)
            return False
        keys, ints, owner = self._samples([a for (_, a), k in zip(msgs, left) if k], src,
                                          lo, hi)
        order = np.lexsort((ints[:, 3], ints[:, 2], ints[:, 1])
                           + tuple(keys[:, c] for c in range(self.ncols - 1, -1, -1)))
        w = ints[order, 0]
        if np.all(w == 1):                # every candidate is here: count off t of them
            taken = np.bincount(owner[order[:t]], minlength=src.size)
            self._place(ctx, src, lo + taken)
            return False
        # U: the weight of the samples strictly below each sample; the count
        # of candidates below it lies in [U - E, U]
        U = np.concatenate(([0], np.cumsum(w)[:-1]))
        heaviest = np.zeros(src.size, dtype=np.int64)
        np.maximum.at(heaviest, owner, ints[:, 0])
        E = int((heaviest - 1).sum())
        first = order[int(np.searchsorted(U, t, "right")) - 1]     # last with U <= t
        msg = np.zeros(8 + 2 * self.ncols, dtype=np.int64)
        msg[0] = _SEARCH
        msg[2:5] = ints[first, 1:]
        piv = np.zeros((2, self.ncols), dtype=self.dtype)
        piv[0] = keys[first]
        i = int(np.searchsorted(U - E, t, "left"))                 # first with U - E >= t
        if i < U.size:
            second = order[i]
            msg[1] = 1
            msg[5:8] = ints[second, 1:]
            piv[1] = keys[second]
        msg[8:] = piv.reshape(-1).view(np.int64)
        for dest in src:
            ctx.send(int(dest), msg, tag=self.tag.pivots)
        return True

    def _place(self, ctx: BSP, dests, splits) -> None:
        for dest, value in zip(dests, splits):
            ctx.send(int(dest), np.array([_PLACE, value], dtype=np.int64),
                     tag=self.tag.pivots)
        self.done = True

    def _samples(self, arrays, src, lo, hi):
        """The members' samples: keys, ``[weight, gid, rank, position]`` rows,
        and each sample's member (its index in ``src``)."""
        nc = self.ncols
        rows = [a[2:].reshape(-1, nc + 1) for a in arrays]
        keys = np.ascontiguousarray(np.concatenate([r[:, :nc] for r in rows])).view(
            self.dtype)
        ints, owner = [], []
        for k, (r, q, a, b) in enumerate(zip(rows, src, lo, hi)):
            at = _sample_positions(int(b - a))
            x = np.empty((r.shape[0], 4), dtype=np.int64)
            x[:, 0] = np.diff(at)
            x[:, 1] = r[:, nc]
            x[:, 2] = q
            x[:, 3] = a + at[:-1]
            ints.append(x)
            owner.append(np.full(r.shape[0], k, dtype=np.int64))
        return keys, np.concatenate(ints), np.concatenate(owner)
