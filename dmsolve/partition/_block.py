"""Contiguous partitioners: blocks of nearly equal row counts (``"block"``) or
nonzero counts (``"nnz"``), in the current order of the rows.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from .._layout import Layout
from .._matrix import DistCSR
from .._vector import DistVector
from ._partition import Partition

__all__ = ["block_partition", "nnz_partition"]


def _layout_of(obj) -> Layout:
    if isinstance(obj, DistCSR):
        return obj.row_layout
    if isinstance(obj, DistVector):
        return obj.layout
    if isinstance(obj, Layout):
        return obj
    raise TypeError("expected a DistCSR, DistVector or Layout, got %s" % type(obj).__name__)


def _from_new_layout(old: Layout, target: Layout) -> Partition:
    idx = np.arange(old.start, old.stop, dtype=np.int64)
    parts = target.owner(idx) if idx.size else np.zeros(0, dtype=np.int64)
    return Partition(old, parts)


def block_partition(obj) -> Partition:
    """Contiguous blocks of nearly equal size (``Layout.block``).

    Collective on the object's ``comm``.

    Parameters
    ----------
    obj : DistCSR, DistVector or Layout
    """
    old = _layout_of(obj)
    return _from_new_layout(old, Layout.block(old.global_size, old.comm))


def nnz_partition(A) -> Partition:
    """Contiguous blocks of nearly equal nonzero counts (``Layout.from_weights``).

    Collective on ``A.comm``: an ``Exscan`` and two ``Allreduce`` of at most
    ``comm.size`` words, O(local rows + size) memory per rank. The cuts are
    those of ``Layout.from_weights`` on the gathered row lengths (row ``i``
    starts part ``k`` where the nonzeros before it first reach ``k / size``
    of the total), found without gathering them.
    """
    old = A.row_layout
    comm, size = old.comm, old.comm.Get_size()
    row_nnz = np.diff(sp.csr_matrix(A.local_rows()).indptr).astype(np.int64)
    # the global prefix sums cum[start + 1 .. stop] of the row lengths
    mine = np.array([row_nnz.sum()], dtype=np.int64)
    offset = np.zeros(1, dtype=np.int64)
    comm.Exscan(mine, offset, op=MPI.SUM)
    if comm.Get_rank() == 0:
        offset[:] = 0
    total = np.empty(1, dtype=np.int64)
    comm.Allreduce(mine, total, op=MPI.SUM)
    cum = (offset[0] + np.cumsum(row_nnz)).astype(np.float64)  # integers: exact
    targets = float(total[0]) * np.arange(1, size) / size
    # searchsorted(cum_global, t, "left") = number of entries of cum below t
    # (cum_global[0] = 0 is on rank 0)
    below = np.searchsorted(cum, targets, side="left").astype(np.int64)
    if comm.Get_rank() == 0:
        below += targets > 0
    cuts = np.empty_like(below)
    comm.Allreduce(below, cuts, op=MPI.SUM)
    ranges = np.concatenate(([0], cuts, [old.global_size])).astype(np.int64)
    return _from_new_layout(old, Layout(np.maximum.accumulate(ranges), comm))
