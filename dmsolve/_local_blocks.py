"""The local blocks of a distributed CSR matrix: their canonical form, the
check of their storage format, and the product over an off-process block's
nonempty rows only (PETSc's compressed rows)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ._blocks import parallel_blocks, row_blocks
from ._interop import csr_add
from ._sell import FORMATS

__all__ = ["CompressedRows", "canonical_csr", "check_format", "csr_product"]

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

    def matvec_add(self, x: np.ndarray, y: np.ndarray, *, threads: int = 1) -> None:
        """``y += B @ x``, by blocks of the nonempty rows on ``threads``
        threads (each row as on one thread). Not collective."""
        k = threads
        rows = row_blocks(self.rows.size, k) if k > 1 else None
        if rows is None or rows.size <= 2:
            self._add_rows(0, self.rows.size, x, y)
        else:
            parallel_blocks(lambda r0, r1: self._add_rows(r0, r1, x, y), rows, k)

    def _add_rows(self, r0: int, r1: int, x: np.ndarray, y: np.ndarray) -> None:
        # nonempty rows r0 .. r1 - 1: gathered from y, accumulated, put back
        B, w, rows = self.matrix, self._work[r0:r1], self.rows[r0:r1]
        np.take(y, rows, out=w, mode="clip")          # "raise" would buffer
        csr_add(r1 - r0, B.shape[1], self.indptr[r0:r1 + 1], B.indices, B.data, x, w)
        np.put(y, rows, w, mode="clip")


def csr_product(B: sp.csr_matrix, x: np.ndarray, y: np.ndarray, threads: int = 1) -> None:
    """``y = B @ x`` with scipy's CSR kernels, by blocks of rows on
    ``threads`` threads (each row summed as on one thread). Not collective."""
    k = threads
    rows = row_blocks(B.shape[0], k) if k > 1 else None
    if rows is None or rows.size <= 2:
        y.fill(0)
        csr_add(B.shape[0], B.shape[1], B.indptr, B.indices, B.data, x, y)
        return

    def block(r0: int, r1: int) -> None:
        y[r0:r1] = 0
        csr_add(r1 - r0, B.shape[1], B.indptr[r0:r1 + 1], B.indices, B.data, x, y[r0:r1])

    parallel_blocks(block, rows, k)


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
