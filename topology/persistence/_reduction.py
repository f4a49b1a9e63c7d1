"""Distributed Z/2 column reduction (the standard persistence algorithm) and
the GF(2) rank of a distributed sparse matrix, with no rank gathering the matrix.

Rows are owned by contiguous ranges; a column is reduced on the rank owning
its lowest row and travels (one BSP superstep per hop) until it becomes that
row's pivot or zero. DIPHA's scheme [1]_, with the swap rule of [2]_.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from dmsolve import agree, block_ranges
from dmsolve.bsp import BSP, search_sorted, sorted_unique, stable_argsort
from dmsolve.jit import njit, numba_attribute
from dmsolve.threads import parallel_map, resolve, row_blocks

__all__ = ["Reduction", "reduce_z2", "gf2_rank"]

# numba's typed lists, for the kernels below
types = numba_attribute("numba", "types")
List = numba_attribute("numba.typed", "List")


@njit(cache=True)
def _symdiff(a, b):  # pragma: no cover
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


@dataclass(kw_only=True, repr=False)
class Reduction:
    """What :func:`reduce_z2` leaves on one rank. Not collective to read.

    Attributes
    ----------
    pair_rows, pair_cols, pair_labels : int64 arrays
        The pairs ``(row, column)`` whose row lies in this rank's row range:
        ``row`` is the lowest entry of reduced column ``column`` (the
        persistence pair (birth row, death column)); ``pair_labels`` carries
        each column's label. Sorted by row.
    zero_cols, zero_labels : int64 arrays
        Columns that reduced to zero and ended on this rank (sorted by column).
    low : int64 array or None
        With ``lows=True``: for each input column of this rank, in input
        order, the lowest row of its reduced column, or -1 if it reduced to zero.
    row_range : (int, int)
        This rank's rows.
    supersteps : int
        Synchronisations made (the same on every rank).
    received_columns : int
        Columns this rank received from other ranks.
    additions : int
        Column additions made on this rank.
    """

    pair_rows: np.ndarray
    pair_cols: np.ndarray
    pair_labels: np.ndarray
    zero_cols: np.ndarray
    zero_labels: np.ndarray
    low: np.ndarray | None
    row_range: tuple
    supersteps: int
    received_columns: int
    additions: int

    def __repr__(self) -> str:
        return "Reduction(rows %d:%d, %d pairs, %d zero columns here, %d supersteps)" % (
            self.row_range[0], self.row_range[1], self.pair_rows.size, self.zero_cols.size,
            self.supersteps)


@njit(cache=True)
def _list_array(values):  # pragma: no cover
    """A numba typed List of int64 as a numpy array (``np.array()`` on it
    reads the items one by one from Python)."""
    out = np.empty(len(values), np.int64)
    for i in range(len(values)):
        out[i] = values[i]
    return out


@njit(cache=True)
def _new_store():  # pragma: no cover
    """The empty pivot store of :func:`_reduce_batch`: columns, ids, labels,
    origins. Made here because typed lists made from Python compile their
    constructors in every process (numba caches only compiled kernels)."""
    return (List.empty_list(types.int64[:]), List.empty_list(types.int64),
            List.empty_list(types.int64), List.empty_list(types.int64))


@njit(cache=True, nogil=True)
def _reduce_batch(ptr, rows, ids, labels, origin, row_lo, row_hi, slot, store,
                  store_id, store_label, store_origin):  # pragma: no cover
    """Reduce columns (in the given order) against this rank's pivots.

    ``slot[r - row_lo]`` is the index in ``store`` of row r's pivot column,
    or -1. A column whose lowest row is outside ``[row_lo, row_hi)`` is
    returned (to travel); a column meeting a pivot of larger id takes its
    place and the evicted pivot goes on (only earlier columns are ever added
    to later ones, so the pairs are those of the serial algorithm).
    Returns the leaving columns in CSR form with their ids, labels and
    origins, the zero columns' (id, label, origin) and the additions made.
    """
    out_cols = List.empty_list(types.int64[:])
    out_meta = List.empty_list(types.int64[:])
    zero_meta = List.empty_list(types.int64[:])
    adds = 0
    for c in range(ptr.shape[0] - 1):
        col = rows[ptr[c]:ptr[c + 1]].copy()
        cid, lab, org = ids[c], labels[c], origin[c]
        while True:
            if col.shape[0] == 0:
                z = np.empty(3, np.int64)
                z[0], z[1], z[2] = cid, lab, org
                zero_meta.append(z)
                break
            low = col[-1]
            if low < row_lo or low >= row_hi:
                m = np.empty(3, np.int64)
                m[0], m[1], m[2] = cid, lab, org
                out_meta.append(m)
                out_cols.append(col)
                break
            k = slot[low - row_lo]
            if k < 0:
                slot[low - row_lo] = len(store)
                store.append(col)
                store_id.append(cid)
                store_label.append(lab)
                store_origin.append(org)
                break
            adds += 1
            if store_id[k] < cid:
                col = _symdiff(col, store[k])
            else:
                # the later column was the pivot so far: the earlier one takes
                # its row, and the later one is reduced by it and goes on
                old, oid, olab, oorg = store[k], store_id[k], store_label[k], store_origin[k]
                store[k], store_id[k], store_label[k], store_origin[k] = col, cid, lab, org
                col = _symdiff(old, col)
                cid, lab, org = oid, olab, oorg
    n = len(out_cols)
    optr = np.zeros(n + 1, np.int64)
    for i in range(n):
        optr[i + 1] = optr[i] + out_cols[i].shape[0]
    orows = np.empty(optr[n], np.int64)
    ometa = np.empty((n, 3), np.int64)
    for i in range(n):
        orows[optr[i]:optr[i + 1]] = out_cols[i]
        ometa[i] = out_meta[i]
    zmeta = np.empty((len(zero_meta), 3), np.int64)
    for i in range(len(zero_meta)):
        zmeta[i] = zero_meta[i]
    return optr, orows, ometa, zmeta, adds


#: The fewest rows worth a part of their own in :class:`_Pivots`: below
#: this, the rounds between parts cost more than the threads save.
PART_ROWS = 1 << 12
#: Parts per thread: the upper rows' columns take more additions, and a
#: thread that finishes its part takes another (a round waits for its slowest).
PARTS_PER_THREAD = 2


class _Pivots:
    """The pivots of this rank's rows ``lo:hi``, in parts of consecutive rows
    that reduce at once (one part on one thread, else :data:`PARTS_PER_THREAD`
    per thread, none shorter than :data:`PART_ROWS`): the rank's rows are
    distributed over its threads as the rows are over the ranks, and the
    same swap rule makes the pairs the serial algorithm's whatever the parts
    (only :attr:`Reduction.additions` may differ). Not collective."""

    def __init__(self, lo: int, hi: int):
        k = resolve(None)
        self.cut = lo + row_blocks(hi - lo, 1 if k == 1 else PARTS_PER_THREAD * k, PART_ROWS)
        self.slot = np.full(hi - lo, -1, np.int64)
        self.stores = [_new_store() for _ in range(self.cut.size - 1)]

    def reduce(self, batch) -> tuple:
        """:func:`_reduce_batch` of the columns ``batch`` (sorted by id)
        against this rank's pivots: ``(optr, orows, ometa, zmeta, adds)``,
        the columns leaving the rank and the zero columns. With several
        parts, rounds: every part reduces the columns whose lowest row it
        holds, on the rank's threads, and the columns leaving a part for a
        lower one (reducing only lowers a column's lowest row) are its next
        round's, until none moves between parts."""
        cut, lo = self.cut, int(self.cut[0])
        if len(self.stores) == 1:
            return _reduce_batch(*batch, lo, int(cut[-1]), self.slot, *self.stores[0])
        ptr, rows, ids, labels, origin = batch
        incoming = [[] for _ in self.stores]
        leaving, zeros, adds = [], [], 0
        self._route((ptr, rows, np.column_stack((ids, labels, origin))), incoming, leaving)
        while any(incoming):
            work = [j for j, got in enumerate(incoming) if got]
            batches = [_sorted_batch(incoming[j]) for j in work]

            def part(b):
                j = work[b]
                a, z = int(cut[j]), int(cut[j + 1])
                return _reduce_batch(*batches[b], a, z, self.slot[a - lo:z - lo],
                                     *self.stores[j])
            done = parallel_map(part, len(work))
            incoming = [[] for _ in self.stores]
            for optr, orows, ometa, zmeta, n in done:
                zeros.append(zmeta)
                adds += n
                self._route((optr, orows, ometa), incoming, leaving)
        optr, orows, ometa = _joined(leaving)
        zm = np.concatenate(zeros) if zeros else np.zeros((0, 3), np.int64)
        return optr, orows, ometa, zm, adds

    def _route(self, cols, incoming, leaving) -> None:
        """Append the columns ``(ptr, rows, meta)`` to the list of the part
        that holds their lowest row (an empty column: the first part, which
        finds it zero), or to ``leaving``."""
        ptr, rows, meta = cols
        if meta.shape[0] == 0:
            return
        cnt = np.diff(ptr)
        low = np.where(cnt > 0, rows[np.maximum(ptr[1:] - 1, 0)] if rows.size else 0,
                       self.cut[0])
        dest = np.searchsorted(self.cut, low, side="right") - 1
        dest[low >= self.cut[-1]] = -1
        for j in sorted_unique(dest).tolist():
            sel = np.flatnonzero(dest == j)
            piece = (np.concatenate(([0], np.cumsum(cnt[sel]))).astype(np.int64),
                     _gather_columns(ptr, rows, sel), meta[sel])
            (leaving if j < 0 else incoming[j]).append(piece)

    def pivots(self) -> tuple:
        """``(rows, ids, labels, origins)`` of the stored pivots, by row."""
        lo = int(self.cut[0])
        out = []
        for j, (_, sid, slab, sorg) in enumerate(self.stores):
            a, z = int(self.cut[j]) - lo, int(self.cut[j + 1]) - lo
            prow = np.flatnonzero(self.slot[a:z] >= 0)
            k = self.slot[a:z][prow]
            out.append((prow + a + lo,) + tuple(_list_array(x)[k] if k.size else
                                                np.zeros(0, np.int64) for x in (sid, slab, sorg)))
        return tuple(np.concatenate(c) for c in zip(*out))


def _joined(pieces) -> tuple:
    """One ``(ptr, rows, meta)`` of the columns of several, in their order."""
    if not pieces:
        return np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros((0, 3), np.int64)
    cnt = np.concatenate([np.diff(p[0]) for p in pieces])
    return (np.concatenate(([0], np.cumsum(cnt))).astype(np.int64),
            np.concatenate([p[1] for p in pieces]), np.concatenate([p[2] for p in pieces]))


def _sorted_batch(pieces) -> tuple:
    """The columns of several ``(ptr, rows, meta)`` as one batch of
    :func:`_reduce_batch`, sorted by id."""
    ptr, rows, meta = _joined(pieces)
    o = stable_argsort(meta[:, 0])
    cnt = np.diff(ptr)[o]
    nptr = np.concatenate(([0], np.cumsum(cnt))).astype(np.int64)
    meta = meta[o]
    return (nptr, _gather_columns(ptr, rows, o), meta[:, 0].copy(), meta[:, 1].copy(),
            meta[:, 2].copy())


def _check_columns(ptr, rows, ids, labels, nrows):
    ptr = np.asarray(ptr)
    rows = np.asarray(rows)
    ids = np.asarray(ids)
    if ptr.ndim != 1 or ptr.size < 1 or ptr.dtype.kind not in "iu":
        raise ValueError("ptr must be a 1-D integer array of length (local columns + 1)")
    ncol = ptr.size - 1
    if ids.shape != (ncol,) or ids.dtype.kind not in "iu":
        raise ValueError("ids must be one integer per column: %d columns, ids of shape %s"
                         % (ncol, ids.shape))
    if rows.ndim != 1 or (rows.size and rows.dtype.kind not in "iu"):
        raise ValueError("rows must be a 1-D integer array")
    if ptr[0] != 0 or ptr[-1] != rows.size or np.any(np.diff(ptr) < 0):
        raise ValueError("ptr must rise from 0 to len(rows)")
    if rows.size and (rows.min() < 0 or rows.max() >= nrows):
        raise ValueError("rows must lie in [0, nrows) = [0, %d)" % nrows)
    ptr = ptr.astype(np.int64)
    rows = rows.astype(np.int64)
    inner = np.ones(rows.size, bool)
    inner[ptr[:-1][ptr[:-1] < rows.size]] = False       # first entry of each column
    if rows.size > 1 and np.any(np.diff(rows)[inner[1:]] <= 0):
        raise ValueError("the rows of each column must be strictly increasing")
    if ids.size > 1 and sorted_unique(ids).size != ids.size:
        raise ValueError("column ids must be distinct")
    if labels is None:
        labels = ids
    labels = np.asarray(labels)
    if labels.shape != (ncol,) or labels.dtype.kind not in "iu":
        raise ValueError("labels must be one integer per column")
    return ptr, rows, ids.astype(np.int64), labels.astype(np.int64)


def _gather_columns(ptr, rows, sel) -> np.ndarray:
    """The rows of columns ``sel`` of the CSC-like ``(ptr, rows)``, one
    after the other: ``np.concatenate([rows[ptr[i]:ptr[i + 1]] for i in
    sel])`` without a Python loop. Not collective."""
    cnt = ptr[sel + 1] - ptr[sel]
    start = np.cumsum(cnt) - cnt
    return rows[np.repeat(ptr[sel] - start, cnt) + np.arange(int(cnt.sum()))]


def _arrived(head, flat) -> tuple:
    """The columns of a superstep's heads ``(id, label[, origin], length)``
    and their rows ``flat`` (in head order) as one batch of
    :func:`_reduce_batch`, sorted by id; origin -1 where the heads carry
    none. Not collective."""
    hptr = np.concatenate(([0], np.cumsum(head[:, -1]))).astype(np.int64)
    o = stable_argsort(head[:, 0])
    cnt = head[o, -1]
    nptr = np.concatenate(([0], np.cumsum(cnt))).astype(np.int64)
    src = np.repeat(hptr[:-1][o] - nptr[:-1], cnt) + np.arange(nptr[-1])
    origin = head[o, 2].copy() if head.shape[1] == 4 else np.full(o.size, -1, np.int64)
    return (nptr, flat[src].astype(np.int64), head[o, 0].copy(), head[o, 1].copy(), origin)


def reduce_z2(ptr, rows, ids, nrows: int, comm: MPI.Comm, *, labels=None,
              row_ranges=None, lows: bool = False, ledger=None) -> Reduction:
    """Distributed Z/2 column reduction (standard algorithm, no twist).

    Parameters
    ----------
    ptr, rows : int arrays
        This rank's columns in CSR form: column ``c`` has the rows
        ``rows[ptr[c]:ptr[c+1]]``, strictly increasing, in ``[0, nrows)``.
        Any rank may hold no column; columns need not be in blocks.
    ids : int array
        Each column's global index in the filtration order (distinct over all
        ranks): a column is only ever added to a column of larger id.
    nrows : int
        Global number of rows (the same on every rank).
    comm : MPI.Comm
    labels : int array, optional
        One int64 carried with each column (default: its id), returned with
        the pairs and zero columns.
    row_ranges : int array of length ``comm.size + 1``, optional
        Rank ``r`` owns the pivots of rows ``row_ranges[r]:row_ranges[r+1]``
        (the same on every rank). Default: even blocks of ``nrows``.
    lows : bool
        Also send each column's final lowest row back to its input rank
        (one more superstep): :attr:`Reduction.low`.
    ledger : dmsolve.bsp.Ledger, optional

    Returns
    -------
    Reduction

    Raises
    ------
    ValueError
        On every rank, if any rank's columns are malformed or ``nrows`` or
        ``row_ranges`` differ between ranks.

    Notes
    -----
    Collective on ``comm``. Each rank first reduces its own columns against
    the pivots of its own rows; a column whose lowest row belongs to rank
    ``j`` is sent there, where it is reduced further against rank ``j``'s
    pivots. Reducing only lowers a column's lowest row, so after its first
    hop a column only moves to lower-numbered ranks: at most ``p`` hops, one
    superstep each, and the loop ends when no rank sends a column (halt
    vote). When a column meets a pivot of a larger id, the two swap roles,
    so a column is only ever added to a later one: the reduced matrix is
    ``D V`` with ``V`` upper triangular and the pairs are exactly those of
    the serial standard algorithm (checked by the test suite), whatever
    the distribution. Each rank stores only the pivots of its rows plus
    the columns in transit.

    A column moves only to the owner of its new lowest row, never through
    the ranks in between; as its lowest row only falls, it is received at
    most once by each rank from the owner of its first lowest row down to
    that of its last. A move carries the column's rows and three words (id,
    label, length; four with ``lows``, which adds the input rank), so the
    bytes a rank receives are those of the columns whose lowest rows pass
    through its range.

    References
    ----------
    .. [1] U. Bauer, M. Kerber, J. Reininghaus, "Distributed computation of
       persistent homology", ALENEX 2014 (DIPHA).
    .. [2] U. Bauer, M. Kerber, J. Reininghaus, "Clear and compress: computing
       persistent homology in chunks", TopoInVis 2013.
    """
    p, me = comm.Get_size(), comm.Get_rank()
    exc = None
    try:
        if not isinstance(nrows, (int, np.integer)) or nrows < 0:
            raise ValueError("nrows must be a non-negative int, got %r" % (nrows,))
        ptr, rows, ids, labels = _check_columns(ptr, rows, ids, labels, int(nrows))
        if row_ranges is None:
            ranges = block_ranges(int(nrows), p)
        else:
            ranges = np.asarray(row_ranges, dtype=np.int64)
            if ranges.shape != (p + 1,) or ranges[0] != 0 or ranges[-1] != nrows \
                    or np.any(np.diff(ranges) < 0):
                raise ValueError("row_ranges must rise from 0 to nrows in comm.size + 1 steps")
    except (ValueError, TypeError) as e:
        exc = e
    agree(comm, exc)
    # the same on every rank: the elementwise minimum of (v, -v) is (v, -v)
    # everywhere (one Allreduce of 2p + 4 words, not an Allgather of p^2)
    mine = np.concatenate(([int(nrows)], ranges)).astype(np.int64)
    both = np.concatenate((mine, -mine))
    low = np.empty_like(both)
    comm.Allreduce(both, low, op=MPI.MIN)
    agree(comm, None if np.all(low == both) else
          ValueError("nrows and row_ranges must be the same on every rank"))
    lo, hi = int(ranges[me]), int(ranges[me + 1])
    pivots = _Pivots(lo, hi)
    ctx = BSP(comm, ledger=ledger)
    tag = ctx.tags("head", "rows", "back")
    order = stable_argsort(ids)
    counts = np.diff(ptr)[order]
    cptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    starts = ptr[:-1][order]
    crow = rows[np.repeat(starts - cptr[:-1], counts) + np.arange(cptr[-1])] if rows.size \
        else np.zeros(0, np.int64)
    batch = (cptr, crow, ids[order], labels[order], np.full(ids.size, me, np.int64))
    zeros, received, additions, steps = [], 0, 0, 0
    # a column's input rank travels with it only when its low goes back there
    meta = [0, 1, 2] if lows else [0, 1]
    width = len(meta) + 1
    while True:
        optr, orows, ometa, zmeta, adds = pivots.reduce(batch)
        additions += adds
        zeros.append(zmeta)
        if ometa.shape[0]:
            dest = np.searchsorted(ranges, orows[optr[1:] - 1], side="right") - 1
            # heads (id, label[, origin], length) and the rows, both in dest order
            ctx.send_rows(dest, np.column_stack((ometa[:, meta], np.diff(optr))),
                          tag=tag.head)
            o = stable_argsort(dest)
            for d in sorted_unique(dest):
                ctx.send(int(d), _gather_columns(optr, orows, o[dest[o] == d]), tag=tag.rows)
        ctx.vote(ometa.shape[0] > 0)
        inbox = ctx.sync("reduce_z2:columns")
        steps += 1
        if not inbox.any_active:
            break
        head = inbox.concat(tag.head, dtype=np.int64, shape=(width,))
        received += head.shape[0]
        batch = _arrived(head, inbox.concat(tag.rows, dtype=np.int64))
    prow, pcol, plab, porg = pivots.pivots()   # one stored pivot per row that has one
    zm = np.concatenate(zeros) if zeros else np.zeros((0, 3), np.int64)
    zo = stable_argsort(zm[:, 0])
    zm = zm[zo]
    low = None
    if lows:
        back = np.concatenate((np.column_stack((pcol, prow)),
                               np.column_stack((zm[:, 0], np.full(zm.shape[0], -1, np.int64)))))
        ctx.send_rows(np.concatenate((porg, zm[:, 2])), back, tag=tag.back)
        got = ctx.sync("reduce_z2:lows").concat(tag.back, dtype=np.int64, shape=(2,))
        steps += 1
        srt = np.argsort(ids)
        low = np.empty(ids.size, np.int64)
        low[srt[search_sorted(ids[srt], got[:, 0])]] = got[:, 1]
    return Reduction(pair_rows=prow, pair_cols=pcol, pair_labels=plab,
                     zero_cols=zm[:, 0].copy(), zero_labels=zm[:, 1].copy(), low=low,
                     row_range=(lo, hi), supersteps=steps, received_columns=received,
                     additions=additions)


def gf2_rank(ptr, rows, nrows: int, comm: MPI.Comm, *, ids=None, ledger=None) -> int:
    """Rank over GF(2) of a sparse matrix whose columns are spread over ``comm``.

    ``ptr``, ``rows``: this rank's columns in CSR form (rows strictly
    increasing per column, in ``[0, nrows)``; entries mod 2 already taken).
    ``ids``: distinct global column indices (default: consecutive in rank
    order). The rank is the number of nonzero reduced columns of
    :func:`reduce_z2`, which is independent of the column order.

    Collective on ``comm``; the same int on every rank. No rank holds more
    than the pivots of its share of rows plus the columns in transit.
    """
    n = np.asarray(ptr).size - 1
    if ids is None:
        start = comm.exscan(n) if comm.Get_size() > 1 else 0
        ids = np.arange(start or 0, (start or 0) + n, dtype=np.int64)
    red = reduce_z2(ptr, rows, ids, nrows, comm, ledger=ledger)
    return int(comm.allreduce(int(red.pair_rows.size), op=MPI.SUM))
