"""The local blocks of a distributed CSR matrix: their canonical form, the
check of their storage format, and the product over an off-process block's
nonempty rows only (PETSc's compressed rows)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ._interop import csr_add
from ._sell import FORMATS

__all__ = ["CompressedRows", "canonical_csr", "check_format"]

_INT32_MAX = np.iinfo(np.int32).max


class CompressedRows:
    """``y += B @ x`` over the nonempty rows of a CSR ``B`` only (PETSc's
    compressed rows). An off-process block has entries in the few boundary
    rows; a product over all its rows would read ``indptr`` and read and
    write all of ``y`` once more.

    The rows' values are gathered from ``y``, accumulated by scipy's
    ``csr_matvec`` and put back, through preallocated work: nothing is
    allocated per product. ``B``'s indices and data arrays are shared, so
    scaling ``B.data`` in place carries over. ``dtype`` is the dtype of ``x``
    and ``y`` (complex with a real ``B`` works: the real and imaginary parts
    are multiplied together). Not collective.
    """

    def __init__(self, B: sp.csr_matrix, dtype=np.float64):
        self.matrix = B
        self.rows = np.flatnonzero(np.diff(B.indptr))     # intp: take/put convert others
        self.indptr = np.append(B.indptr[self.rows], B.indptr[-1]).astype(B.indptr.dtype)
        self._work = np.empty(self.rows.size, dtype=np.result_type(B.dtype, dtype))

    def matvec_add(self, x: np.ndarray, y: np.ndarray) -> None:
        """``y += B @ x``. Not collective."""
        B, w = self.matrix, self._work
        np.take(y, self.rows, out=w, mode="clip")          # "raise" would buffer
        csr_add(self.rows.size, B.shape[1], self.indptr, B.indices, B.data, x, w)
        np.put(y, self.rows, w, mode="clip")


def check_format(local_format) -> None:
    """Raise ``ValueError`` unless ``local_format`` is one of ``FORMATS``. Not collective."""
    if not isinstance(local_format, str) or local_format not in FORMATS:
        raise ValueError("local_format must be one of %s, got %r"
                         % (", ".join(map(repr, FORMATS)), local_format))


def canonical_csr(m, dtype: np.dtype) -> sp.csr_matrix:
    """``m`` as a CSR matrix of ``dtype`` with summed duplicates and sorted
    indices, int32 indices when they fit. Not collective."""
    m = sp.csr_matrix(m)
    if m.dtype != dtype:
        m = m.astype(dtype)
    m.sum_duplicates()
    m.sort_indices()
    # int32 indices when they fit, like scipy (memory and matvec bandwidth)
    if m.nnz <= _INT32_MAX and max(m.shape) <= _INT32_MAX:
        if m.indices.dtype != np.int32:
            m.indices = m.indices.astype(np.int32)
            m.indptr = m.indptr.astype(np.int32)
    return m
