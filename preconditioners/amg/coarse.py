"""Coarse levels: gathering small levels onto fewer ranks, and the coarsest
level's solve: redundant and dense when it is small, relaxation when not."""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla
from mpi4py import MPI

from dmsolve import Layout, block_ranges
from dmsolve.bsp import BSP

__all__ = ["coarse_layout", "redistribute_rows", "CoarseSolver", "RelaxationCoarseSolver"]


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
    """A redundant dense solve at the coarsest level: every rank gathers the
    whole coarse matrix and keeps its own rows of the (pseudo-)inverse.

    The pseudo-inverse (from a symmetric eigendecomposition when the matrix
    is symmetric) also serves singular consistent problems (Neumann, graph
    Laplacians): it returns the minimum-norm solution. It is meant for small
    matrices only: the set-up holds a few dense ``n x n`` arrays and costs
    ``O(n^3)`` on every rank, so :class:`SmoothedAggregation` uses it up to
    ``max_dense_coarse`` rows and relaxes above (:class:`RelaxationCoarseSolver`).
    Set-up is collective on ``A.comm``; :meth:`solve` is collective (one
    ``Allgatherv``).
    """

    kind = "dense"

    def __init__(self, A):
        S = A.to_scipy().toarray()
        self.n = S.shape[0]
        self.layout = A.row_layout
        start, stop = self.layout.owned_range
        if self.n and np.allclose(S, S.T, rtol=1e-12, atol=0):
            w, V = np.linalg.eigh(S)
            tol = np.abs(w).max() * self.n * np.finfo(float).eps
            winv = np.where(np.abs(w) > tol, 1.0 / np.where(w == 0, 1, w), 0.0)
            # only this rank's rows of (V winv V^T) are needed: the n x n
            # inverse itself is never formed
            self._rows = (V[start:stop] * winv) @ V.T
        else:
            self._rows = sla.pinv(S)[start:stop] if self.n else np.zeros((0, 0))
        self._b = np.zeros(self.n)
        self._counts = self.layout.local_sizes.astype(np.int64)
        self._displs = self.layout.ranges[:-1].astype(np.int64)
        self.nnz = int(np.count_nonzero(S))

    @property
    def nbytes(self) -> int:
        """Bytes kept on this rank after set-up (its rows of the inverse and a
        gather buffer). Not collective."""
        return int(self._rows.nbytes + self._b.nbytes)

    def solve(self, b: np.ndarray, x: np.ndarray) -> None:
        """``x = A^+ b`` on this rank's rows (local arrays). Collective on
        ``A.comm`` (one ``Allgatherv`` of ``b``)."""
        self.layout.comm.Allgatherv([b, MPI.DOUBLE],
                                    [self._b, (self._counts, self._displs), MPI.DOUBLE])
        np.dot(self._rows, self._b, out=x)


class RelaxationCoarseSolver:
    """The coarsest level relaxed instead of solved: from a zero guess,
    ``sweeps`` applications of the level's presmoother, then ``sweeps`` of
    its postsmoother.

    For a coarsest level too large for :class:`CoarseSolver` (AMG that
    cannot coarsen: ``max_levels=1``, ``max_coarse`` at least the size of
    ``A``, a diagonal or otherwise uncoupled matrix). Storage is that of the
    smoothers, proportional to this rank's rows; with adjoint pre- and
    postsmoothers (:func:`preconditioners.smoothers.adjoint_smoother`) the
    operator is symmetric when ``A`` is. Construction is not collective (the
    smoothers are built by the caller); :meth:`solve` is collective among
    neighbouring ranks, as the smoothers are.
    """

    kind = "relax"

    def __init__(self, presmoother, postsmoother, sweeps: int):
        self.presmoother, self.postsmoother = presmoother, postsmoother
        self.sweeps = int(sweeps)
        self.nnz = 0

    @property
    def nbytes(self) -> int:
        """Bytes kept on this rank besides the smoothers' (which are
        proportional to this rank's rows): none. Not collective."""
        return 0

    def solve(self, b: np.ndarray, x: np.ndarray) -> None:
        """``x ~= A^-1 b`` by relaxation from zero. Collective among
        neighbouring ranks (the smoothers' halo exchanges)."""
        for k in range(self.sweeps):
            self.presmoother.smooth(b, x, zero_guess=(k == 0))
        for _ in range(self.sweeps):
            self.postsmoother.smooth(b, x, False)
