"""Contiguous partitioners: blocks of nearly equal row counts (``"block"``) or
nonzero counts (``"nnz"``), in the current order of the rows.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

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

    Collective on ``A.comm``; gathers the row lengths (O(rows) per rank).
    """
    old = A.row_layout
    row_nnz = np.diff(sp.csr_matrix(A.local_rows()).indptr).astype(np.float64)
    weights = DistVector(old, row_nnz).gather()
    return _from_new_layout(old, Layout.from_weights(weights, old.comm))
