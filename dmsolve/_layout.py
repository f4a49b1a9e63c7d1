"""Ownership of a global index space by the ranks of a communicator.

A :class:`Layout` holds the same table of ownership ranges on every rank, so
that any rank can find the owner of any global index without communicating.
"""

from __future__ import annotations

import hashlib

import numpy as np
from mpi4py import MPI

from ._errors import agree

__all__ = ["Layout", "block_range", "block_ranges", "verify_layouts"]


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

    Nothing checks here that the ranks passed the same ``ranges``: that takes
    communication. :meth:`verify` does (one small ``allreduce``, once per
    layout), and every collective that meets a layout for the first time
    calls it: the :class:`~dmsolve.DistCSR` constructor, the halo plans,
    :meth:`DistVector.gather <dmsolve.DistVector.gather>` and
    :meth:`DistVector.from_global <dmsolve.DistVector.from_global>`.
    :attr:`agreed` tells whether it has been done (or was not needed:
    :meth:`from_local_size` builds the ranges from an ``allgather``).
    """

    __slots__ = ("comm", "ranges", "_rank", "_agreed")

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
        self._agreed = False

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
        return cls(ranges, comm)._trusted()

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

    def _trusted(self) -> "Layout":
        # the ranges were computed from collectively agreed data (an
        # allgather, an agreed global size): no need to verify them
        self._agreed = True
        return self

    # -- agreement (collective once) ---------------------------------------
    def verify(self) -> "Layout":
        """Check that every rank holds the same ownership ranges; return ``self``.

        Collective on ``comm`` the first time (one ``allreduce`` of four
        64-bit words: the maximum of a hash of the ranges and of its
        complement, and the same for the global size); not collective once
        :attr:`agreed` is true. Call it on every rank, as any collective.

        Raises
        ------
        ValueError
            On every rank, if the ranks passed different ``ranges`` (the
            message gives the global sizes seen, the same on every rank).
        """
        if not self._agreed:
            verify_layouts([self])
        return self

    # -- properties (never communicate) -----------------------------------
    @property
    def agreed(self) -> bool:
        """Whether the ranges are known to be the same on every rank
        (:meth:`verify` passed, or a collective constructor built them)."""
        return self._agreed

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


_WORDS = 4     # per layout in verify_layouts: hash, ~hash, size, ~size
_ALL_ONES = np.uint64(0xFFFFFFFFFFFFFFFF)


def _layout_words(layout: Layout) -> np.ndarray:
    h = int.from_bytes(hashlib.blake2b(layout.ranges.tobytes(), digest_size=8).digest(),
                       "little")
    w = np.array([h, 0, layout.global_size, 0], dtype=np.uint64)
    w[1::2] = ~w[0::2]
    return w


def verify_layouts(layouts, flags=(), names=None) -> np.ndarray:
    """Check in one ``allreduce`` that each layout has the same ranges on
    every rank, and take the maximum of some small non-negative ``flags``
    over the ranks on the way. Marks the layouts :attr:`Layout.agreed`.

    The maximum of a 64-bit hash of the ranges and the maximum of its
    complement (that is, the minimum) are equal only if every rank has the
    same hash; the global size travels the same way, for the message.

    Parameters
    ----------
    layouts : sequence of Layout
        On one communicator (the first one's is used). Hashed whether or not
        they are already agreed, so that the call has the same shape on every
        rank however each rank's layout objects were made.
    flags : sequence of int, optional
        Reduced by maximum (for instance "some rank has complex entries").
    names : sequence of str, optional
        How the messages name the layouts (``"layout"`` by default).

    Returns
    -------
    numpy.ndarray of uint64
        The maxima of ``flags`` over the ranks.

    Raises
    ------
    ValueError
        On every rank, if some layout's ranges differ between ranks.

    Notes
    -----
    Collective on the layouts' communicator.
    """
    layouts = list(layouts)
    flags = [int(f) for f in flags]
    comm = layouts[0].comm
    buf = np.zeros(len(flags) + _WORDS * len(layouts), dtype=np.uint64)
    buf[:len(flags)] = flags
    for i, lay in enumerate(layouts):
        buf[len(flags) + _WORDS * i:len(flags) + _WORDS * (i + 1)] = _layout_words(lay)
    out = np.empty_like(buf)
    comm.Allreduce(buf, out, op=MPI.MAX)
    for i, lay in enumerate(layouts):
        h, nh, n, nn = out[len(flags) + _WORDS * i:len(flags) + _WORDS * (i + 1)]
        if h != (nh ^ _ALL_ONES):
            what = names[i] if names else "layout"
            lo, hi = int(nn ^ _ALL_ONES), int(n)
            sizes = ("global sizes %d to %d" % (lo, hi) if lo != hi
                     else "the same global size %d" % hi)
            raise ValueError("%s: the ranks hold different ownership ranges (%s); a Layout "
                             "must be built with the same ranges on every rank"
                             % (what, sizes))
    for lay in layouts:
        lay._agreed = True
    return out[:len(flags)]


def _as_size(value, name: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError("%s must be an integer, got %s" % (name, type(value).__name__))
    if value < 0:
        raise ValueError("%s must be non-negative, got %d" % (name, value))
    return int(value)
