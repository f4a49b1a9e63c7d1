"""Coarse levels: gathering small levels onto fewer ranks, and the redundant
direct solve at the coarsest level."""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla
from mpi4py import MPI

from dmsolve import Layout, block_ranges
from dmsolve.bsp import BSP

__all__ = ["coarse_layout", "redistribute_rows", "CoarseSolver"]


def coarse_layout(local_count: int, comm, min_rows_per_rank: int) -> tuple[Layout, int]:
    """The layout of the next level and this rank's first coarse id.

    Coarse unknowns are numbered rank by rank in the order they were made.
    When fewer than ``min_rows_per_rank`` would land on each rank, the level
    is gathered onto ``ceil(N / min_rows_per_rank)`` ranks (the first ones),
    the others owning nothing: the layout stays contiguous, so no
    renumbering is needed. Collective on ``comm`` (one ``allgather``).
    """
    counts = np.array(comm.allgather(int(local_count)), dtype=np.int64)
    first = int(counts[:comm.rank].sum())
    N = int(counts.sum())
    size = comm.Get_size()
    natural = np.concatenate(([0], np.cumsum(counts)))
    active = int(min(size, max(1, -(-N // max(1, min_rows_per_rank)))))
    if active == size and counts.min() >= min_rows_per_rank // 4:
        return Layout(natural, comm), first
    ranges = np.concatenate((block_ranges(N, active), np.full(size - active, N)))
    return Layout(ranges, comm), first


def redistribute_rows(values: np.ndarray, first: int, layout: Layout) -> np.ndarray:
    """Move rows ``first, first+1, ...`` (this rank's ``values``) to their owners
    in ``layout``; return this rank's owned rows in order.
    Collective on ``layout.comm`` (one BSP superstep)."""
    ids = first + np.arange(values.shape[0], dtype=np.int64)
    ctx = BSP(layout.comm)
    dests = layout.owner(ids) if ids.size else np.zeros(0, np.int64)
    ctx.send_rows(dests, ids, 1)
    ctx.send_rows(dests, np.ascontiguousarray(values), 2)
    inbox = ctx.sync("redistribute")
    got = inbox.concat(1, dtype=np.int64)
    vals = inbox.concat(2, dtype=values.dtype, shape=values.shape[1:])
    out = np.empty((layout.local_size,) + values.shape[1:], dtype=values.dtype)
    out[got - layout.start] = vals
    return out


class CoarseSolver:
    """A redundant dense solve at the coarsest level: every rank holds the whole
    coarse matrix and its (pseudo-)inverse.

    The pseudo-inverse (from a symmetric eigendecomposition when the matrix
    is symmetric) also serves singular consistent problems (Neumann, graph
    Laplacians): it returns the minimum-norm solution. Set-up is collective
    on ``A.comm``; :meth:`solve` is collective (one ``Allgatherv``).
    """

    def __init__(self, A):
        S = A.to_scipy().toarray()
        self.n = S.shape[0]
        self.layout = A.row_layout
        if self.n and np.allclose(S, S.T, rtol=1e-12, atol=0):
            w, V = np.linalg.eigh(S)
            tol = np.abs(w).max() * self.n * np.finfo(float).eps
            winv = np.where(np.abs(w) > tol, 1.0 / np.where(w == 0, 1, w), 0.0)
            self.inv = (V * winv) @ V.T
        else:
            self.inv = sla.pinv(S) if self.n else np.zeros((0, 0))
        start, stop = self.layout.owned_range
        self._rows = self.inv[start:stop]        # only this rank's rows are needed
        self._b = np.zeros(self.n)
        self._counts = self.layout.local_sizes.astype(np.int64)
        self._displs = self.layout.ranges[:-1].astype(np.int64)
        self.nnz = int(np.count_nonzero(S))

    def solve(self, b: np.ndarray, x: np.ndarray) -> None:
        """``x = A^+ b`` on this rank's rows (local arrays). Collective on
        ``A.comm`` (one ``Allgatherv`` of ``b``)."""
        self.layout.comm.Allgatherv([b, MPI.DOUBLE],
                                    [self._b, (self._counts, self._displs), MPI.DOUBLE])
        np.dot(self._rows, self._b, out=x)
