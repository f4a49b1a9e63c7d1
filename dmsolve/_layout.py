"""Ownership of a global index space by the ranks of a communicator.

A :class:`Layout` holds the same table of ownership ranges on every rank, so
that any rank can find the owner of any global index without communicating.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ._errors import agree

__all__ = ["Layout", "block_range", "block_ranges"]


def block_range(n: int, size: int, rank: int) -> tuple[int, int]:
    """Return ``(start, stop)`` of block ``rank`` of ``n`` items over ``size``.

    The first ``n % size`` blocks get one extra item, as in PETSc's
    ``PETSC_DECIDE``. Pure function; not collective.
    """
    if size < 1 or not 0 <= rank < size:
        raise ValueError("rank %r is not in range(%r)" % (rank, size))
    if n < 0:
        raise ValueError("n must be non-negative, got %r" % (n,))
    base, extra = divmod(n, size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def block_ranges(n: int, size: int) -> np.ndarray:
    """Return the ``size + 1`` offsets of the blocks of :func:`block_range`.

    Pure function; not collective.
    """
    if size < 1:
        raise ValueError("size must be positive, got %r" % (size,))
    if n < 0:
        raise ValueError("n must be non-negative, got %r" % (n,))
    base, extra = divmod(n, size)
    counts = np.full(size, base, dtype=np.int64)
    counts[:extra] += 1
    ranges = np.zeros(size + 1, dtype=np.int64)
    np.cumsum(counts, out=ranges[1:])
    return ranges


class Layout:
    """Contiguous ownership ranges of a global index space.

    Rank ``r`` owns global indices ``ranges[r]:ranges[r+1]``; a rank may own
    nothing. The table is replicated, so owner look-ups are local and every
    rank reaches the same verdict on layout checks.

    Parameters
    ----------
    ranges : array_like of int, length ``comm.size + 1``
        Non-decreasing offsets starting at 0. Must be the same on every rank.
    comm : MPI.Comm
        The communicator whose ranks own the ranges.

    Notes
    -----
    Not collective. Use :meth:`from_local_size` (collective) to build a layout
    from the number of entries each rank wants.
    """

    __slots__ = ("comm", "ranges", "_rank")

    def __init__(self, ranges, comm: MPI.Comm):
        if not isinstance(comm, MPI.Comm):
            raise TypeError("comm must be an mpi4py MPI.Comm, got %s"
                            % type(comm).__name__)
        ranges = np.array(ranges, dtype=np.int64).ravel()
        size = comm.Get_size()
        if ranges.shape != (size + 1,):
            raise ValueError("ranges must have comm.size + 1 = %d entries, got %d"
                             % (size + 1, ranges.size))
        if ranges[0] != 0 or np.any(np.diff(ranges) < 0):
            raise ValueError("ranges must start at 0 and be non-decreasing")
        ranges.setflags(write=False)
        self.comm = comm
        self.ranges = ranges
        self._rank = comm.Get_rank()

    # -- constructors -------------------------------------------------------
    @classmethod
    def block(cls, global_size: int, comm: MPI.Comm) -> "Layout":
        """Contiguous blocks of nearly equal size. Not collective."""
        global_size = _as_size(global_size, "global_size")
        return cls(block_ranges(global_size, comm.Get_size()), comm)

    @classmethod
    def from_local_size(cls, local_size: int, comm: MPI.Comm) -> "Layout":
        """Layout in which each rank owns ``local_size`` consecutive indices.

        Collective on ``comm``.
        """
        exc = None
        try:
            local_size = _as_size(local_size, "local_size")
        except (TypeError, ValueError) as e:
            exc, local_size = e, 0
        agree(comm, exc)
        counts = np.array(comm.allgather(local_size), dtype=np.int64)
        ranges = np.zeros(counts.size + 1, dtype=np.int64)
        np.cumsum(counts, out=ranges[1:])
        return cls(ranges, comm)

    @classmethod
    def from_weights(cls, weights, comm: MPI.Comm) -> "Layout":
        """Contiguous layout balancing the sum of per-index ``weights``.

        ``weights`` is the full global array, the same on every rank (e.g.
        the number of nonzeros per row, to balance a matrix by nonzeros).
        Not collective.
        """
        w = np.asarray(weights, dtype=np.float64).ravel()
        if w.size and (not np.all(np.isfinite(w)) or w.min() < 0):
            raise ValueError("weights must be finite and non-negative")
        size = comm.Get_size()
        cum = np.concatenate(([0.0], np.cumsum(w)))
        targets = cum[-1] * np.arange(1, size) / size
        cuts = np.searchsorted(cum, targets, side="left")
        ranges = np.concatenate(([0], cuts, [w.size])).astype(np.int64)
        return cls(np.maximum.accumulate(ranges), comm)

    # -- properties (never communicate) -----------------------------------
    @property
    def rank(self) -> int:
        return self._rank

    @property
    def size(self) -> int:
        return self.ranges.size - 1

    @property
    def global_size(self) -> int:
        return int(self.ranges[-1])

    @property
    def owned_range(self) -> tuple[int, int]:
        return int(self.ranges[self._rank]), int(self.ranges[self._rank + 1])

    @property
    def start(self) -> int:
        return int(self.ranges[self._rank])

    @property
    def stop(self) -> int:
        return int(self.ranges[self._rank + 1])

    @property
    def local_size(self) -> int:
        return int(self.ranges[self._rank + 1] - self.ranges[self._rank])

    @property
    def local_sizes(self) -> np.ndarray:
        """Number of indices owned by each rank."""
        return np.diff(self.ranges)

    # -- look-ups (pure) ---------------------------------------------------
    def range_of(self, rank: int) -> tuple[int, int]:
        """``(start, stop)`` owned by ``rank``. Not collective."""
        return int(self.ranges[rank]), int(self.ranges[rank + 1])

    def owner(self, index):
        """Rank owning each global ``index`` (scalar or array). Not collective.

        Raises
        ------
        IndexError
            If an index lies outside ``[0, global_size)``.
        """
        idx = np.asarray(index)
        if idx.size and (idx.min() < 0 or idx.max() >= self.global_size):
            raise IndexError("global index out of range [0, %d)" % self.global_size)
        own = np.searchsorted(self.ranges, idx, side="right") - 1
        return int(own) if own.ndim == 0 else own

    def is_local(self, index) -> np.ndarray:
        """Whether each global index is owned by this rank. Not collective."""
        idx = np.asarray(index)
        start, stop = self.owned_range
        return (idx >= start) & (idx < stop)

    # -- comparison ----------------------------------------------------------
    def same_comm(self, other: "Layout") -> bool:
        """Whether ``other`` lives on this communicator (or a congruent one).

        Not collective (``MPI_Comm_compare`` is local).
        """
        if self.comm is other.comm:
            return True
        return MPI.Comm.Compare(self.comm, other.comm) in (MPI.IDENT, MPI.CONGRUENT)

    def __eq__(self, other) -> bool:
        if self is other:
            return True
        if not isinstance(other, Layout):
            return NotImplemented
        return (self.ranges.shape == other.ranges.shape
                and bool(np.array_equal(self.ranges, other.ranges))
                and self.same_comm(other))

    def __ne__(self, other) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None  # mutable comm identity; layouts are compared, not hashed

    def __repr__(self) -> str:
        return "Layout(global_size=%d, ranks=%d, local=%d:%d)" % (
            self.global_size, self.size, *self.owned_range)


def _as_size(value, name: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError("%s must be an integer, got %s" % (name, type(value).__name__))
    if value < 0:
        raise ValueError("%s must be non-negative, got %d" % (name, value))
    return int(value)
