"""The :class:`Partition` object (who owns which index after a move, and the
new numbering) and :func:`redistribute`, which moves matrices and vectors there.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from .._layout import Layout
from .._matrix import DistCSR, keys_of
from .._vector import DistVector
from ..validate import agreed, check_int
from ._exchange import exchange, fetch

__all__ = ["Partition", "redistribute"]

# -- the partition object ---------------------------------------------------------

class Partition:
    """An assignment of every index of ``old_layout`` to a part.

    Parameters
    ----------
    old_layout : Layout
        The current distribution of the index space.
    local_parts : array_like of int, shape (old_layout.local_size,)
        The part of each index this rank owns, in ``[0, nparts)``.
    nparts : int, optional
        Number of parts; default ``comm.size``. Redistribution needs
        ``nparts == comm.size`` (part ``p`` goes to rank ``p``).

    Notes
    -----
    Collective on ``old_layout.comm`` (an ``Exscan`` and an ``Allreduce``
    of the ``nparts`` part counts, and the argument checks are agreed). Attributes:
    ``local_parts``, ``local_new_index`` (new global index of each owned
    index), ``part_sizes`` (replicated) and ``new_layout`` (when
    ``nparts == comm.size``).

    The new numbering keeps parts contiguous and, inside a part, the old
    order: old index ``i`` in part ``p`` gets new index
    ``new_layout.start(p) + (number of indices of part p that are smaller
    than i)``. With ``new_index[old] = new``, the redistributed matrix is
    ``B[new_index[i], new_index[j]] = A[i, j]``, i.e. ``B = A[inv][:, inv]``
    with ``inv = argsort(new_index)``. Nothing of size ``global_size`` is
    replicated: each rank keeps the part and the new index of the indices
    it owns.
    """

    def __init__(self, old_layout: Layout, local_parts, nparts: int | None = None):
        if not isinstance(old_layout, Layout):
            raise TypeError("old_layout must be a Layout, got %s" % type(old_layout).__name__)
        comm = old_layout.comm
        size = comm.Get_size()
        with agreed(comm):
            nparts = check_int("nparts", size if nparts is None else nparts, low=1)
            parts = np.asarray(local_parts)
            if parts.shape != (old_layout.local_size,):
                raise ValueError("local_parts must have shape (local_size,) = (%d,), got %s"
                                 % (old_layout.local_size, parts.shape))
            if parts.size and not np.issubdtype(parts.dtype, np.integer):
                raise TypeError("local_parts must be integers, got dtype %s" % parts.dtype)
            parts = parts.astype(np.int64)
            if parts.size and (parts.min() < 0 or parts.max() >= nparts):
                raise ValueError("parts must lie in [0, nparts) = [0, %d)" % nparts)
        self.old_layout = old_layout
        self.nparts = int(nparts)
        self.local_parts = parts
        self.local_parts.setflags(write=False)

        counts = np.bincount(parts, minlength=self.nparts).astype(np.int64)
        # O(nparts) per rank: the counts of earlier ranks by a prefix sum and the
        # totals by a sum (not a size x nparts table on every rank)
        before = np.zeros(self.nparts, dtype=np.int64)    # earlier ranks, same part
        comm.Exscan(counts, before, op=MPI.SUM)
        if comm.Get_rank() == 0:
            before[:] = 0  # Exscan leaves rank 0's buffer undefined
        self.part_sizes = np.empty_like(counts)
        comm.Allreduce(counts, self.part_sizes, op=MPI.SUM)
        starts = np.concatenate(([0], np.cumsum(self.part_sizes)))
        # stable order by part keeps the old order inside each part
        order = np.argsort(parts, kind="stable")
        rank_in_part = np.arange(parts.size) - np.concatenate(([0], np.cumsum(counts)))[
            parts[order]]
        new_index = np.empty(parts.size, dtype=np.int64)
        new_index[order] = starts[parts[order]] + before[parts[order]] + rank_in_part
        self.local_new_index = new_index
        self.local_new_index.setflags(write=False)
        self._part_ranges = starts
        self._inverse: Partition | None = None

    @classmethod
    def _explicit(cls, old_layout: Layout, local_parts: np.ndarray,
                  local_new_index: np.ndarray, part_ranges: np.ndarray) -> "Partition":
        # A partition with a given numbering (the inverse of another one).
        self = cls.__new__(cls)
        self.old_layout = old_layout
        self.nparts = part_ranges.size - 1
        self.local_parts = np.asarray(local_parts, dtype=np.int64)
        self.local_parts.setflags(write=False)
        self.local_new_index = np.asarray(local_new_index, dtype=np.int64)
        self.local_new_index.setflags(write=False)
        self.part_sizes = np.diff(part_ranges)
        self._part_ranges = np.asarray(part_ranges, dtype=np.int64)
        self._inverse = None
        return self

    # -- properties (never communicate) -----------------------------------
    @property
    def comm(self) -> MPI.Comm:
        """The communicator of ``old_layout``."""
        return self.old_layout.comm

    @property
    def new_layout(self) -> Layout:
        """The layout after redistribution: rank ``p`` owns part ``p``."""
        if self.nparts != self.comm.Get_size():
            raise ValueError("a partition into %d parts has no layout on %d ranks"
                             % (self.nparts, self.comm.Get_size()))
        return Layout(self._part_ranges, self.comm)

    # -- collective helpers ------------------------------------------------------
    def parts(self) -> np.ndarray:
        """The part of every global index (old numbering), on every rank.

        Collective on ``comm``; O(global_size) memory per rank.
        """
        return DistVector(self.old_layout, self.local_parts).gather()

    def new_index(self) -> np.ndarray:
        """``new_index[old] = new`` for every global index, on every rank.

        Collective on ``comm``; O(global_size) memory per rank.
        """
        return DistVector(self.old_layout, self.local_new_index).gather()

    def inverse(self) -> "Partition":
        """The partition that moves data from ``new_layout`` back to ``old_layout``.

        Collective on ``comm`` (the first time; then cached).
        """
        if self._inverse is None:
            new = self.new_layout
            comm = self.comm
            old_index = np.arange(self.old_layout.start, self.old_layout.stop, dtype=np.int64)
            got_new, got_old = exchange(comm, self.local_parts, self.local_new_index,
                                         old_index)
            old_of_new = np.empty(new.local_size, dtype=np.int64)
            old_of_new[got_new - new.start] = got_old
            owners = self.old_layout.owner(old_of_new) if old_of_new.size else \
                np.zeros(0, dtype=np.int64)
            # The inverse numbering is given, not derived: inside one old
            # owner, new order and old order differ in general.
            inv = Partition._explicit(new, owners, old_of_new, self.old_layout.ranges)
            inv._inverse = self
            self._inverse = inv
        return self._inverse

    def restore(self, obj):
        """Move a redistributed matrix or vector back to ``old_layout``.

        Collective on ``comm``. Same as ``redistribute(obj, self, inverse=True)``.
        """
        return redistribute(obj, self, inverse=True)

    def __repr__(self) -> str:
        return "Partition(nparts=%d, global_size=%d, part_sizes=%s)" % (
            self.nparts, self.old_layout.global_size, self.part_sizes.tolist())


# -- redistribution ------------------------------------------------------------------

def redistribute(obj, partition: Partition, inverse: bool = False):
    """Move a DistCSR or DistVector to the owners given by ``partition``.

    Collective on ``partition.comm``. Rows (and, for a matrix, columns too:
    a symmetric permutation) are renumbered as described in
    :class:`Partition`, so ``redistribute(redistribute(A, p), p,
    inverse=True)`` returns ``A`` exactly (same layout, same entries, explicit zeros kept).

    Parameters
    ----------
    obj : DistCSR or DistVector
        Distributed by ``partition.old_layout`` (``partition.new_layout``
        when ``inverse``). A matrix must be square with equal row and
        column layouts.
    partition : Partition
        With ``nparts == comm.size``.
    inverse : bool, optional
        Move back from the new to the old distribution.

    Returns
    -------
    DistCSR or DistVector
        On ``partition.new_layout`` (``old_layout`` when ``inverse``).

    Raises
    ------
    TypeError, ValueError
        On every rank, for an object of another kind or layout.
    """
    if not isinstance(partition, Partition):
        raise TypeError("partition must be a Partition, got %s" % type(partition).__name__)
    p = partition.inverse() if inverse else partition
    new = p.new_layout  # raises on every rank when nparts != size
    src = p.old_layout
    if isinstance(obj, DistVector):
        if obj.layout != src:
            raise ValueError("the vector's layout (global size %d) is not the "
                             "partition's %s layout" % (obj.global_size,
                                                        "new" if inverse else "old"))
        idx, vals = exchange(p.comm, p.local_parts, p.local_new_index, obj.local)
        out = np.empty(new.local_size, dtype=obj.local.dtype)
        out[idx - new.start] = vals
        return DistVector(new, out)
    if isinstance(obj, DistCSR):
        if obj.row_layout != src or obj.col_layout != src:
            raise ValueError("the matrix must be square with row and column layouts "
                             "equal to the partition's %s layout"
                             % ("new" if inverse else "old"))
        local = sp.csr_matrix(obj.local_rows())
        row_len = np.diff(local.indptr)
        cols = local.indices.astype(np.int64)
        ucols, where = np.unique(cols, return_inverse=True)
        new_cols = fetch(src, p.local_new_index, ucols)[where.ravel()]
        new_rows = np.repeat(p.local_new_index, row_len)
        dests = np.repeat(p.local_parts, row_len)
        r, c, v = exchange(p.comm, dests, new_rows, new_cols, local.data)
        # no (row, col) pair repeats, so the COO -> CSR conversion adds nothing
        out = sp.csr_matrix((v, (r - new.start, c)), shape=(new.local_size, obj.shape[1]))
        out.sort_indices()
        moved = DistCSR.from_local_rows(out, new)
        # the rows' canonical keys travel with them (reproducible mode sums
        # in their order, so that any partition gives the same bits)
        idx, keys = exchange(p.comm, p.local_parts, p.local_new_index, keys_of(obj))
        origin = np.empty(new.local_size, dtype=np.int64)
        origin[idx - new.start] = keys
        moved.origin = origin
        return moved
    raise TypeError("redistribute takes a DistCSR or a DistVector, got %s"
                    % type(obj).__name__)
