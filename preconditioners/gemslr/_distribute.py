"""Stage 2 of GeMSLR: move the rows to their GeMSLR owners
(:func:`dmsolve.partition.redistribute`), order them by level, and cut the
blocks ``B_l``, ``E_l``, ``F_l``, ``C_l`` and the last level ``A_L``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.sparse as sp

from dmsolve import DistCSR, DistVector, Layout
from dmsolve.bsp import NeighborExchange
from dmsolve.partition import fetch, redistribute

from ._order import Ordering

__all__ = ["Level", "Blocks", "Permutation", "distribute"]


class Level:
    """One level ``A_l = [B F; E C]`` on this rank (l < last)."""

    __slots__ = ("nB", "off", "sub_bounds", "blocks", "solvers", "E", "F", "C", "W", "Hc",
                 "zB", "yC", "tB", "tC", "tC2", "s_loc", "s_glob", "lr",
                 "n_iface", "n_interior", "n_sub")


class Permutation:
    """Moves a vector between ``A``'s row layout and this rank's rows in the
    GeMSLR order, with a neighbour exchange planned once.

    Parameters
    ----------
    old : Layout
        ``A``'s row layout.
    old_ids : int64 array
        The original global id of each of this rank's GeMSLR rows.

    Notes
    -----
    Set-up is collective on ``old.comm``; so are :meth:`forward` and
    :meth:`backward`, which allocate nothing.
    """

    def __init__(self, old: Layout, old_ids: np.ndarray):
        owned = old.is_local(old_ids)
        self._keep_dst = np.flatnonzero(owned)
        self._keep_src = old_ids[owned] - old.start
        remote = np.flatnonzero(~owned)
        rorder = np.argsort(old_ids[remote], kind="stable")
        self._recv_dst = remote[rorder]
        self._fwd = NeighborExchange.from_ghosts(old, old_ids[self._recv_dst])
        self._bwd = self._fwd.reverse()
        moved = np.ones(old.local_size, dtype=bool)
        moved[self._keep_src] = False
        self._moved = np.flatnonzero(moved)
        self._keep_buf = np.zeros(self._keep_dst.size)
        self._send_buf = np.zeros(self._recv_dst.size)

    def forward(self, r: np.ndarray, x: np.ndarray) -> None:
        """``x`` (GeMSLR rows) = ``r`` (``A``'s rows). Collective."""
        self._fwd.start(r)
        try:
            np.take(r, self._keep_src, out=self._keep_buf)
            x[self._keep_dst] = self._keep_buf
        finally:            # never leave the exchange active, whatever raised
            x[self._recv_dst] = self._fwd.finish()

    def backward(self, y: np.ndarray, out: np.ndarray) -> None:
        """``out`` (``A``'s rows) = ``y`` (GeMSLR rows). Collective."""
        np.take(y, self._recv_dst, out=self._send_buf)
        self._bwd.start(self._send_buf)
        try:
            np.take(y, self._keep_dst, out=self._keep_buf)
            out[self._keep_src] = self._keep_buf
            out[self._moved] = 0.0
        finally:            # never leave the exchange active, whatever raised
            self._bwd.finish()
        self._bwd.accumulate(out)


@dataclasses.dataclass
class Blocks:
    """What :func:`distribute` builds on each rank.

    ``levels[l]`` holds ``B_l`` (per subdomain, local), ``E_l``, ``F_l``,
    ``C_l`` (distributed) and the work vectors, which are views of ``x`` and
    ``y`` (this rank's rows in the GeMSLR order: level 0 interiors, level 1
    interiors, ..., its block of the last level; ``off[l]`` is where level
    ``l`` starts). ``X[l]``: layout of level ``l``'s interiors (``X[L]``: the
    last level); ``N[l]``: layout of the levels ``>= l``.
    """

    levels: list[Level]
    last: DistCSR
    X: list[Layout]
    N: list[Layout]
    off: np.ndarray
    old_ids: np.ndarray
    x: np.ndarray
    y: np.ndarray
    permutation: Permutation


def _gemslr_rows(A: DistCSR, ordering: Ordering) -> tuple[sp.csr_matrix, np.ndarray, Layout]:
    """This rank's GeMSLR rows of ``A`` with GeMSLR global columns, their
    original ids, and the layout of the GeMSLR numbering. Collective on ``A.comm``."""
    p = ordering.partition
    old = p.old_layout
    moved = redistribute(A, p)
    group = redistribute(DistVector(old, ordering.local_group), p).local
    old_ids = redistribute(DistVector(old, np.arange(old.start, old.stop, dtype=np.int64)),
                           p).local
    new = p.new_layout
    # redistribute keeps the original order inside a rank; GeMSLR orders by group first
    order = np.argsort(group, kind="stable")
    position = np.empty(order.size, dtype=np.int64)
    position[order] = np.arange(order.size, dtype=np.int64)
    rows = sp.csr_matrix(moved.local_rows())[order]
    cols, where = np.unique(rows.indices.astype(np.int64), return_inverse=True)
    gemslr_cols = fetch(new, new.start + position, cols)[where.ravel()]
    rows = sp.csr_matrix((rows.data, gemslr_cols, rows.indptr), shape=rows.shape)
    rows.sort_indices()
    return rows, old_ids[order], new


def distribute(A: DistCSR, ordering: Ordering, keep_C: bool) -> Blocks:
    """Move ``A`` to the GeMSLR owners and cut it into the level blocks.

    Collective on ``A.comm``. ``keep_C``: build ``C_l`` (needed by the
    low-rank corrections only).
    """
    comm = A.comm
    rank = comm.Get_rank()
    cnt = ordering.counts
    L = ordering.num_levels - 1
    rows, old_ids, new = _gemslr_rows(A, ordering)
    # offsets of the levels inside each rank's rows
    offs = np.zeros((cnt.shape[0], L + 2), dtype=np.int64)
    np.cumsum(cnt, axis=1, out=offs[:, 1:])
    X = [Layout(np.concatenate(([0], np.cumsum(cnt[:, l]))), comm) for l in range(L + 1)]
    N = [Layout(np.concatenate(([0], np.cumsum(cnt[:, l:].sum(axis=1)))), comm)
         for l in range(L + 1)]
    # owner, position in the owner's rows and level of every stored column
    M = rows.tocoo()
    col_rank = new.owner(M.col) if M.nnz else np.zeros(0, dtype=np.int64)
    col_pos = M.col - new.ranges[col_rank]
    col_level = (col_pos[:, None] >= offs[col_rank, 1:]).sum(axis=1)

    def block(r0, r1, lev_lo, lev_hi, layouts, lcol):
        # rows r0:r1 (local), columns of level in [lev_lo, lev_hi], numbered in layouts[lcol]
        keep = (M.row >= r0) & (M.row < r1) & (col_level >= lev_lo) & (col_level <= lev_hi)
        r = col_rank[keep]
        cols = layouts[lcol].ranges[r] + col_pos[keep] - offs[r, lcol]
        return sp.csr_matrix((M.data[keep], (M.row[keep] - r0, cols)),
                             shape=(r1 - r0, layouts[lcol].global_size))

    off = offs[rank]
    nloc = int(off[-1])
    x, y = np.zeros(nloc), np.zeros(nloc)
    owner = ordering.sub_owner
    levels = []
    for l in range(L):
        lv = Level()
        lv.off = int(off[l])
        lv.nB = int(cnt[rank, l])
        b0, b1 = int(off[l]), int(off[l + 1])
        # B: this rank's interiors (uncoupled across subdomains by construction)
        Bloc = block(b0, b1, l, l, X, l)
        Bloc = sp.csr_matrix(Bloc[:, X[l].start:X[l].stop])
        sizes = ordering.sub_sizes[l][owner == rank]
        bounds = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        lv.sub_bounds = bounds
        lv.blocks = [sp.csr_matrix(Bloc[s:e, s:e]) for s, e in zip(bounds[:-1], bounds[1:])]
        lv.solvers = []
        lv.F = DistCSR.from_local_rows(block(b0, b1, l + 1, L, N, l + 1),
                                       X[l], N[l + 1], check_finite=False)
        lv.E = DistCSR.from_local_rows(block(b1, nloc, l, l, X, l),
                                       N[l + 1], X[l], check_finite=False)
        lv.C = DistCSR.from_local_rows(block(b1, nloc, l + 1, L, N, l + 1),
                                       N[l + 1], N[l + 1], check_finite=False) \
            if keep_C else None
        lv.zB = DistVector(X[l], y[b0:b1])
        lv.yC = DistVector(N[l + 1], y[b1:])
        lv.tB = DistVector(X[l], np.zeros(lv.nB))
        lv.tC = DistVector(N[l + 1], np.zeros(nloc - b1))
        lv.tC2 = None
        lv.W = np.zeros((0, nloc - b1))
        lv.Hc = np.zeros((0, 0))
        lv.lr = None
        lv.n_interior = X[l].global_size
        lv.n_iface = N[l + 1].global_size
        lv.n_sub = int(np.count_nonzero(ordering.sub_sizes[l]))
        levels.append(lv)
    bL = int(off[L])
    last = DistCSR.from_local_rows(block(bL, nloc, L, L, X, L), X[L], X[L], check_finite=False)
    return Blocks(levels=levels, last=last, X=X, N=N, off=off, old_ids=old_ids, x=x, y=y,
                  permutation=Permutation(A.row_layout, old_ids))
