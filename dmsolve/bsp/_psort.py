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
from typing import NamedTuple

import numpy as np
from mpi4py import MPI

from .._errors import agree
from .._layout import block_ranges
from ._ledger import Ledger
# (the constants psort's docstring names stay importable from here)
from ._splitters import (ALL_CANDIDATES, HISTOGRAM_MEMBERS,  # noqa: F401
                         HISTOGRAM_SAMPLES, SAMPLE_SPACING, SAMPLES, Local, splitters)
from ._superstep import BSP
from ._unique import stable_argsort

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
         evenly spaced samples of it: all of it up to
         :data:`ALL_CANDIDATES` (64) items, else one sample per
         :data:`SAMPLE_SPACING` (16) items, at least :data:`SAMPLES` (16).
         The leader takes two pivots certain to bracket ``s_j`` (the count
         below a sample is known to within the members' sample spacing),
         every member counts its items below both and keeps those between:
         about ``2 SAMPLE_SPACING`` items a member when the members are few,
         and fewer than ``4/SAMPLES`` of the candidates plus two in any
         case. The leader sends each member its split as soon as the counts
         hit the target, one member is left, or every candidate is in hand.

       Rounds (the histogram counts as one), two supersteps each (the
       histogram's two collectives are recorded in the ledger as
       ``psort:samples`` and ``psort:histogram``): for a few members a
       boundary, two leader rounds whatever ``N`` (the second brings every
       candidate to the leader), and more members a boundary add rounds as
       ``log_4 p`` (the psort tests assert at most ``3 + ceil(log_4 p)``);
       never more than ``ceil(log_4 N) + 2``. Measured: 3 for random keys at 2 to
       4 ranks, from 2x10^3 to 3x10^4 keys per rank. Per rank, for spread
       keys, the histogram costs at most ``8 (c + 2)`` words per rank of
       ``comm``; a leader receives one message from each member a round,
       one sample per 16 candidates at most, but the
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
    >>> import numpy as np
    >>> from mpi4py import MPI
    >>> import dmsolve
    >>> comm = MPI.COMM_WORLD
    >>> data = np.array([5, 3, 9, 3, 7, 2, 8, 0, 6, 4])
    >>> mine = np.arange(comm.rank, data.size, comm.size)     # any share of the items
    >>> out = dmsolve.bsp.psort(data[mine], comm, gids=mine)  # gids: the global index
    >>> keys, ids = (np.concatenate(comm.allgather(a)) for a in (out.keys, out.gids))
    >>> print(keys, ids)                                      # rank r held block r
    [0 2 3 3 4 5 6 7 8 9] [7 5 1 3 9 0 8 4 6 2]
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
    Collective on ``comm``: one ``Allgather`` of a few words, and an
    agreement on the exception when a rank's arguments are wrong."""
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
    # one Allgather carries the counts, the checks and whether a rank failed
    # above; only then does a second collective agree on the exception
    row = np.array([0, 0, 0, 1], dtype=np.int64)
    if exc is None:
        nan = bool(k.dtype.kind == "f" and np.isnan(k).any())
        sig = "%s/%d/%s" % (k.dtype.kind, 0 if k.ndim == 1 else k.shape[1],
                            ";".join("%s%s" % (a.dtype.str, a.shape[1:]) for a in cols))
        row = np.array([n, int(nan), _signature(sig), 0], dtype=np.int64)
    every = np.empty((comm.Get_size(), 4), dtype=np.int64)
    comm.Allgather(row, every)
    if every[:, 3].any():       # the same on every rank: all agree, and all raise
        agree(comm, exc)
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
    local = Local(K, G, rank)
    # 2. exact splitters
    bounds = block_ranges(total, size)
    split, rounds = splitters(local, bounds, work["counts"], comm, ledger)
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
    stable argsort (a radix sort over the columns, faster than a lexsort of
    them). Not collective."""
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
