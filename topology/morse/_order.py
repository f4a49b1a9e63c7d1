"""Global vertex order: ``(value, global id)`` ranks by a distributed sample sort.

The order is the simulation of simplicity TTK uses: ties in value are broken
by global vertex id, so the result is a total order independent of the ranks.

Up to :data:`PSRS_MAX_RANKS` ranks, regular sampling (PSRS): one pooled
sample of ``oversample * p`` items per rank, held by every rank, and two
supersteps; its pool is ``oversample * p**2`` items on every rank. From
there on, :func:`dmsolve.bsp.rank_of` (exact splitters found in rounds): each
rank holds its ``n/p`` share plus O(p) words. Both give the same numbers.
"""

from __future__ import annotations

import numpy as np

from dmsolve import DistVector
from dmsolve.bsp import BSP, rank_of, stable_argsort
from dmsolve.validate import agreed, check_int

__all__ = ["global_order"]

#: Largest communicator sorted by regular sampling (a pool of
#: ``oversample * p**2`` samples on every rank: 1,024 pairs at 8 ranks); larger
#: ones use psort's exact splitters, whose rounds cost about 2.4x the time at
#: 2-4 ranks but hold nothing that grows like p**2.
PSRS_MAX_RANKS = 8


def global_order(values: DistVector, *, ids: np.ndarray | None = None,
                 oversample: int = 16) -> DistVector:
    """The position of every vertex in the order of ``(value, global id)``.

    Parameters
    ----------
    values : DistVector
        A float vertex field; entry ``i`` belongs to the vertex with global id
        ``i`` unless ``ids`` says otherwise.
    ids : int array, shape (values.local_size,), optional
        The global ids of this rank's entries (a permutation of ``0 .. n-1``
        over all ranks), used to break ties; default the layout index, as
        for a block-partitioned complex or a grid. A complex partitioned by
        METIS or RCB passes its ``owned_global_ids()``, so that the order
        does not depend on the partition.
    oversample : int
        Regular samples taken per rank and per rank of the communicator.

    Returns
    -------
    DistVector of int64 on ``values.layout``: ``order[i]`` is the number of
    vertices ``j`` with ``(values[j], id[j]) < (values[i], id[i])``.

    Raises
    ------
    TypeError
        If ``values`` is not a DistVector; on every rank, if ``ids`` are not
        integers or ``oversample`` is not an integer.
    ValueError
        On every rank, if ``values`` are not finite, ``ids`` do not have one
        entry per local value, or ``oversample`` is below 1.

    Notes
    -----
    Collective on ``values.comm``. Up to :data:`PSRS_MAX_RANKS` ranks: one
    ``allgather`` of samples and two BSP supersteps (buckets to their ranks,
    ranks back to the owners). Each rank sorts locally, picks regular
    samples, the splitters are chosen from the pooled samples, every bucket
    is merged at its rank, and the exclusive prefix of bucket sizes turns
    local positions into global ones. On more ranks,
    :func:`dmsolve.bsp.rank_of` of the ``(value, id)`` pairs: no rank holds
    more than its share plus O(p) words (``oversample`` is then unused).

    References
    ----------
    .. [1] H. Shi and J. Schaeffer, "Parallel sorting by regular sampling",
       J. Parallel Distrib. Comput. 14(4), 1992.
    .. [2] H. Edelsbrunner and E. P. Muecke, "Simulation of simplicity",
       ACM Trans. Graph. 9(1), 1990.

    Examples
    --------
    >>> from mpi4py import MPI
    >>> import dmsolve, topology
    >>> x = dmsolve.DistVector.from_global([0.5, 0.1, 0.5, 0.3, 0.1], MPI.COMM_WORLD)
    >>> print(topology.global_order(x).gather())     # equal values: the lower id first
    [3 0 4 2 1]
    """
    if not isinstance(values, DistVector):
        raise TypeError("values must be a DistVector, got %s" % type(values).__name__)
    layout = values.layout
    comm = layout.comm
    with agreed(comm):
        oversample = check_int("oversample", oversample, low=1)
        v = np.ascontiguousarray(values.local, dtype=np.float64)
        if not np.all(np.isfinite(v)):
            raise ValueError("values must be finite (found NaN or inf)")
        if ids is not None:
            ids = np.asarray(ids)
            if ids.dtype.kind not in "iu":
                raise TypeError("ids must be integers, got dtype %s" % ids.dtype)
            if ids.shape != v.shape:
                raise ValueError("ids has shape %s; expected one global id per local "
                                 "value, (%d,)" % (ids.shape, v.size))
    size = comm.Get_size()
    start = layout.start
    n = v.size
    if ids is None:
        # a stable sort keeps ids ascending among equal values: (value, id) order
        perm = stable_argsort(v)
        gid = None
    else:
        gid = ids.astype(np.int64, copy=False)
        perm = np.lexsort((gid, v))
    out = np.empty(n, dtype=np.int64)
    if size > PSRS_MAX_RANKS:
        keyed = np.arange(start, start + n, dtype=np.int64) if gid is None else gid
        return DistVector(layout, rank_of(v, comm, gids=keyed).astype(np.int64, copy=False))
    if size == 1:
        # the inverse permutation, in chunks: an arange of the whole size was
        # the largest temporary of the order
        step = 1 << 18
        for a in range(0, n, step):
            out[perm[a:a + step]] = np.arange(a, min(a + step, n), dtype=np.int64)
        return DistVector(layout, out)
    sv = v[perm]
    sg = perm.astype(np.int64) + start if gid is None else gid[perm]
    # layout index, to route the answers home (the id itself without ``ids``)
    sl = sg if gid is None else perm.astype(np.int64) + start
    # regular samples, pooled on every rank; splitters at regular positions
    s = min(n, oversample * size)
    pick = (np.arange(s, dtype=np.int64) * n) // max(s, 1)
    samples = comm.allgather((sv[pick], sg[pick]))
    pv = np.concatenate([a for a, _ in samples])
    pg = np.concatenate([b for _, b in samples])
    if pv.size == 0:
        # no rank holds a value (an empty domain): no splitters to choose
        return DistVector(layout, out)
    o = np.lexsort((pg, pv))
    pv, pg = pv[o], pg[o]
    cut = (np.arange(1, size, dtype=np.int64) * pv.size) // size
    split_v, split_g = pv[cut], pg[cut]
    # bucket boundaries: first local position with (value, id) >= splitter
    lo = np.searchsorted(sv, split_v, side="left")
    hi = np.searchsorted(sv, split_v, side="right")
    bounds = np.empty(size + 1, dtype=np.int64)
    bounds[0], bounds[-1] = 0, n
    for i in range(size - 1):
        bounds[i + 1] = lo[i] + np.searchsorted(sg[lo[i]:hi[i]], split_g[i], side="left")
    ctx = BSP(comm)
    tag = ctx.tags("values", "gids", "back_gids", "back_orders", "positions")
    for r in range(size):
        a, b = bounds[r], bounds[r + 1]
        if b > a:
            ctx.send(r, sv[a:b], tag=tag.values)
            ctx.send(r, sg[a:b], tag=tag.gids)
            if gid is not None:
                ctx.send(r, sl[a:b], tag=tag.positions)
    inbox = ctx.sync("sample-sort:buckets")
    bv = inbox.concat(tag.values, dtype=np.float64)
    bg = inbox.concat(tag.gids, dtype=np.int64)
    if gid is None:
        # the buckets arrive in source order, each sorted by (value, id), and
        # sources own ascending id ranges: a stable sort by value alone is the
        # (value, id) order, and merges the sorted runs in linear time
        o = stable_argsort(bv)
        bg = bg[o]
    else:
        o = np.lexsort((bg, bv))
        bg = inbox.concat(tag.positions, dtype=np.int64)[o]
    first = comm.exscan(bg.size) or 0
    ranks = first + np.arange(bg.size, dtype=np.int64)
    owners = layout.owner(bg) if bg.size else np.zeros(0, dtype=np.int64)
    ctx.send_rows(owners, bg, tag=tag.back_gids)
    ctx.send_rows(owners, ranks, tag=tag.back_orders)
    inbox = ctx.sync("sample-sort:back")
    back_g = inbox.concat(tag.back_gids, dtype=np.int64)
    back_o = inbox.concat(tag.back_orders, dtype=np.int64)
    out[back_g - start] = back_o
    return DistVector(layout, out)
