"""The bookkeeping of a distributed Morse complex, shared by the simplicial
and the cubical pairings: filtration positions of the critical cells (a
distributed sort), the top vertex at a position, which cells are at no
death, and the cells' boundaries mod 2 as sorted rows or CSR columns."""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from dmsolve import Layout, agree, block_ranges
from dmsolve.bsp import BSP, isin_sorted, rank_of, search_sorted, sorted_unique, stable_argsort
from dmsolve.jit import njit

from ..core import fetch_rows

__all__ = ["Placed", "place_cells", "tops_at", "alive", "agreed_call", "odd_rows",
           "odd_column_rows", "z2_columns"]


class Placed:
    """Filtration positions of one dimension's critical cells: ``pos`` for
    this rank's cells, and the top vertex of each position in this rank's
    block ``ranges[rank]:ranges[rank+1]`` of positions. Not collective to use."""

    def __init__(self, pos, global_size, ranges, local_tops, rank):
        self.pos, self.global_size, self.ranges = pos, global_size, ranges
        self.local_tops, self.rank = local_tops, rank
        self._order = (None, None)

    def local_index(self, names, query):
        """Index in this rank's cells of each ``query`` among ``names`` (the
        sort of ``names`` is kept for the next call with the same array)."""
        if self._order[0] is not names:
            self._order = (names, stable_argsort(names))
        o = self._order[1]
        idx = o[np.minimum(search_sorted(names[o], query), max(names.size - 1, 0))] \
            if names.size else np.zeros(np.size(query), np.int64)
        if np.size(query) and (names.size == 0 or np.any(names[idx] != query)):
            raise RuntimeError("Morse complex: a cell reached by a V-path is not critical "
                               "on its owner (internal error)")
        return idx

    def forget(self) -> None:
        """Drop the sort of ``names`` kept by :meth:`local_index` (as large as
        the cells), once no more look-ups come."""
        self._order = (None, None)

    def position_of(self, names, query):
        return self.pos[self.local_index(names, query)]

    def top_of(self, positions):
        return self.local_tops[np.asarray(positions, np.int64) - self.ranges[self.rank]]


def place_cells(comm, keys, tops, sup) -> list[Placed]:
    """Positions of this rank's cells of each dimension in the order of their
    keys over all ranks, and the top vertices of the block of positions this
    rank owns. One :func:`dmsolve.bsp.rank_of` for all dimensions (keys
    prefixed by their dimension and padded to one width, so each
    dimension's positions are consecutive; the columns are packed into as few
    int64 as keep their order) and one superstep, after two
    ``allreduce`` of the keys' range. Collective on ``comm``."""
    width = 1 + max(k.shape[1] for k in keys)
    lo = min((int(k.min()) for k in keys if k.size), default=0)
    hi = max((int(k.max()) for k in keys if k.size), default=0)
    lo, hi = comm.allreduce(lo, op=MPI.MIN), comm.allreduce(hi, op=MPI.MAX)
    span = hi - lo + 1
    if span < 2 ** 62:
        # (dimension, key columns shifted to [0, span)) packed greedily into as
        # few int64 columns as keep the order: consecutive columns whose spans
        # multiply below 2**62. One-column keys give one int64 (one stable
        # argsort in psort, not a lexsort of three columns); a Freudenthal
        # grid's four-column keys give two.
        spans = [len(keys)] + [span] * (width - 1)
        groups, cur, prod = [], [], 1
        for c, sc in enumerate(spans):
            if cur and prod * sc >= 2 ** 62:
                groups.append(cur)
                cur, prod = [], 1
            cur.append(c)
            prod *= sc
        groups.append(cur)
        rows = []
        for d, k in enumerate(keys):
            r = np.zeros((k.shape[0], len(groups)), np.int64)
            for g, cols in enumerate(groups):
                for c in cols:
                    r[:, g] *= spans[c]
                    if c == 0:
                        r[:, g] += d
                    elif c - 1 < k.shape[1]:        # else padding: 0
                        r[:, g] += k[:, c - 1].astype(np.int64) - lo
            rows.append(r)
    else:
        rows = []
        for d, k in enumerate(keys):
            r = np.zeros((k.shape[0], width), np.int64)
            r[:, 0] = d
            r[:, 1:1 + k.shape[1]] = k
            rows.append(r)
    pos = rank_of(np.concatenate(rows), comm)
    counts = np.array([k.shape[0] for k in keys], np.int64)
    comm.Allreduce(MPI.IN_PLACE, counts, op=MPI.SUM)
    offsets = np.concatenate(([0], np.cumsum(counts)))
    p, r = comm.Get_size(), comm.Get_rank()
    ctx = BSP(comm)
    tags = ctx.tags(*("dimension%d" % d for d in range(len(keys))))
    split = np.cumsum([k.shape[0] for k in keys])[:-1]
    out = []
    for d, (dpos, top) in enumerate(zip(np.split(pos, split), tops)):
        dpos = dpos - offsets[d]
        ranges = block_ranges(int(counts[d]), p)
        ctx.send_rows(np.searchsorted(ranges, dpos, side="right") - 1,
                      np.column_stack((dpos, top)).astype(np.int64), tag=tags[d])
        out.append([dpos, int(counts[d]), ranges])
    inbox = ctx.sync("morse:place")
    sup[0] += 1
    placed = []
    for d, (dpos, total, ranges) in enumerate(out):
        got = inbox.concat(tags[d], dtype=np.int64, shape=(2,))
        t = np.empty(ranges[r + 1] - ranges[r], np.int64)
        t[got[:, 0] - ranges[r]] = got[:, 1]
        placed.append(Placed(dpos, total, ranges, t, r))
    return placed


def tops_at(comm, *asked) -> list:
    """The top vertex at each of several arrays of filtration positions,
    given as ``(place, positions)`` pairs, asked of the ranks holding their
    blocks. Collective on ``comm``: two supersteps per pair
    (:func:`topology.core.fetch_rows`)."""
    out = []
    for pl, pos in asked:
        pos = np.asarray(pos, np.int64)
        if comm.Get_size() == 1:
            out.append(pl.local_tops[pos])
        else:
            out.append(fetch_rows(Layout(pl.ranges, comm), pl.local_tops.reshape(-1, 1),
                                  pos)[:, 0])
    return out


def alive(comm, layout, pos, dead, tops) -> np.ndarray:
    """Whether each of this rank's cells (filtration positions ``pos``) is at
    no death: each death's position goes to the owner of its top vertex
    ``tops``. Collective on ``comm`` (one superstep)."""
    if comm.Get_size() == 1:
        return ~isin_sorted(pos, sorted_unique(dead))
    ctx = BSP(comm)
    tag = ctx.tags("deaths")
    ctx.send_rows(layout.owner(tops), np.asarray(dead, np.int64), tag=tag.deaths)
    got = ctx.sync("morse:deaths").concat(tag.deaths, dtype=np.int64)
    return ~isin_sorted(pos, sorted_unique(got))


def agreed_call(comm, f, *args):
    """``f(*args)``, its failure on any rank raised on every rank. Collective."""
    out = exc = None
    try:
        out = f(*args)
    except Exception as e:      # noqa: BLE001 - agreed, then raised everywhere
        exc = e
    agree(comm, exc)
    return out


def odd_rows(pairs):
    """The distinct rows of an (n, 2) int array that occur an odd number of
    times, in lexicographic order. Where the two columns' ranges allow, each
    row is one int64 key and one plain sort finds the runs (np.unique(axis=0)
    sorts a structured view, several times slower)."""
    return odd_column_rows(pairs[:, 0], pairs[:, 1])


def odd_column_rows(a, b):
    """:func:`odd_rows` of the rows ``(a[i], b[i])``, from the two columns (no
    array of the rows needed)."""
    if a.size == 0:
        return np.zeros((0, 2), np.int64)
    a0, b0 = int(a.min()), int(b.min())
    ra, rb = int(a.max()) - a0 + 1, int(b.max()) - b0 + 1
    if ra * rb < 2 ** 62:
        # one key per row, built and sorted in place (the boundaries of
        # noisy fields give millions of rows: no temporaries of their size)
        key = a.astype(np.int64)
        key -= a0
        key *= rb
        key += b
        key -= b0
        key.sort()
        k = key[:_odd_runs(key)]
        out = np.empty((k.size, 2), np.int64)
        np.floor_divide(k, rb, out=out[:, 0])
        out[:, 0] += a0
        np.remainder(k, rb, out=out[:, 1])
        out[:, 1] += b0
        return out
    s = np.column_stack((a, b))[np.lexsort((b.astype(np.int64), a.astype(np.int64)))]
    s = s.astype(np.int64)
    start = np.flatnonzero(np.concatenate(([True], np.any(s[1:] != s[:-1], axis=1))))
    cnt = np.diff(np.append(start, s.shape[0]))
    return s[start[cnt % 2 == 1]]


@njit(cache=True)
def _odd_runs(key):  # pragma: no cover
    """Move the values of the sorted ``key`` that occur an odd number of
    times to its front, in order; returns how many. One pass, in place (the
    numpy spelling took six passes and three temporaries). Not collective."""
    m = 0
    i = 0
    n = key.size
    while i < n:
        j = i + 1
        while j < n and key[j] == key[i]:
            j += 1
        if (j - i) & 1:
            key[m] = key[i]
            m += 1
        i = j
    return m


def z2_columns(col, row, ncols):
    """CSR columns (rows ascending) of the entries ``(col, row)`` mod 2."""
    e = odd_rows(np.column_stack((col, row)).astype(np.int64))     # sorted by (col, row)
    ptr = np.concatenate(([0], np.cumsum(np.bincount(e[:, 0], minlength=ncols))))
    return ptr.astype(np.int64), e[:, 1].copy()

