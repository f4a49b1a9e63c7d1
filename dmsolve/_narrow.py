"""Compressed rows with narrow indices: the local product format of the
blocks that sliced ELL would pad (:mod:`dmsolve._sell`).

A CSR block whose column indices are stored in the narrowest unsigned type
that holds them: 16 bits for a block of at most 65536 columns (an AMG coarse
level's or prolongator's on-process block at a few ranks), else 32. A matvec
streams 10 bytes per entry instead of CSR's 12, through compiled loops that
add in scipy's order (:mod:`dmsolve._narrow_kernels`).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ._blocks import parallel_blocks, row_blocks
from ._narrow_kernels import (narrow_count_columns, narrow_matvec, narrow_matvec_rows,
                              narrow_rmatvec_add, narrow_transpose_fill, scatter_rows)

__all__ = ["NarrowRows", "ScatterTranspose", "index_dtype", "transposed_product",
           "transpose_nbytes"]


def index_dtype(bound: int) -> np.dtype:
    """The narrowest unsigned integer type holding ``0 .. bound - 1``
    (16, 32 or 64 bits). Not collective."""
    for t in (np.uint16, np.uint32):
        if bound <= int(np.iinfo(t).max) + 1:
            return np.dtype(t)
    return np.dtype(np.uint64)


class NarrowRows:
    """A local sparse block as CSR with unsigned, narrow indices, for products.

    Build one with :meth:`from_csr`. Attributes: ``shape``, ``nnz``,
    ``indptr`` (unsigned, 32 bits when ``nnz`` fits), ``indices`` (unsigned,
    :func:`index_dtype` of the column count) and ``data``. Not collective.
    """

    name = "narrow"

    def __init__(self, shape, indptr: np.ndarray, indices: np.ndarray, data: np.ndarray,
                 shared: bool = False):
        self.shape = (int(shape[0]), int(shape[1]))
        self.indptr, self.indices, self.data = indptr, indices, data
        self.nnz = int(data.size)
        self._shared = bool(shared)         # data is the CSR block's own array
        self._transpose = None              # ScatterTranspose, for threaded rmatvec

    @classmethod
    def from_csr(cls, B: sp.csr_matrix) -> "NarrowRows":
        """The narrow form of a real CSR block ``B`` (its entries in stored
        order, explicit zeros kept). ``B.data`` is shared, not copied: the
        copy costs only the narrow indices. Not collective."""
        return cls(B.shape, B.indptr.astype(index_dtype(B.nnz + 1)),
                   B.indices.astype(index_dtype(B.shape[1])), B.data, shared=True)

    def astype(self, dtype) -> "NarrowRows":
        """A copy with its values in ``dtype`` (float32 for mixed precision).
        Not collective."""
        return NarrowRows(self.shape, self.indptr.copy(), self.indices.copy(),
                          self.data.astype(dtype))

    @property
    def dtype(self) -> np.dtype:
        """The dtype of the values. Not collective."""
        return self.data.dtype

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays a product reads. Not collective."""
        return int(self.indptr.nbytes + self.indices.nbytes + self.data.nbytes)

    @property
    def stored_nbytes(self) -> int:
        """Bytes held beside the CSR block it was made from (its values are
        that block's unless :meth:`astype` made them). Not collective."""
        return self.nbytes - (self.data.nbytes if self._shared else 0) + transpose_nbytes(self)

    def matvec(self, x: np.ndarray, y: np.ndarray, *, threads: int = 1) -> None:
        """``y = B @ x`` (every entry of ``y`` written), on ``threads``
        threads by blocks of rows: every row is summed as on one thread, the
        same bits. Not collective."""
        k = threads
        rows = row_blocks(self.shape[0], k) if k > 1 else None
        if rows is None or rows.size <= 2:
            narrow_matvec(self.indptr, self.indices, self.data, x, y)
            return
        parallel_blocks(lambda r0, r1: narrow_matvec_rows(
            r0, r1, self.indptr, self.indices, self.data, x, y), rows, k)

    def rmatvec_add(self, y: np.ndarray, x: np.ndarray) -> None:
        """``x += B^T y``. Not collective."""
        narrow_rmatvec_add(self.indptr, self.indices, self.data, y, x)

    def rmatvec(self, y: np.ndarray, x: np.ndarray, *, threads: int = 1) -> None:
        """``x = B^T y``: see :func:`transposed_product`. Not collective."""
        transposed_product(self, y, x, threads)

    def scatter_count(self, counts: np.ndarray) -> None:
        """``counts[c] +=`` the number of terms :meth:`rmatvec_add` adds into
        ``x[c]``. Not collective."""
        narrow_count_columns(self.indices, counts)

    def scatter_fill(self, next_pos: np.ndarray, indices: np.ndarray, data: np.ndarray) -> None:
        """Place the terms of :meth:`rmatvec_add` by column in the order it
        adds them (see :class:`ScatterTranspose`). Not collective."""
        narrow_transpose_fill(self.indptr, self.indices, self.data, next_pos, indices, data)

    def to_csr(self) -> sp.csr_matrix:
        """The block back as scipy CSR (int32 indices when they fit). Not collective."""
        idx = np.int32 if max(self.shape[1], self.nnz) < np.iinfo(np.int32).max else np.int64
        return sp.csr_matrix((self.data.copy(), self.indices.astype(idx),
                              self.indptr.astype(idx)), shape=self.shape)


def transposed_product(block, y: np.ndarray, x: np.ndarray, threads: int) -> None:
    """``x = B^T y`` for a ``SlicedEll`` or :class:`NarrowRows` ``block``: on
    one thread (or a block too small to split) a scatter into a zeroed
    ``x``; on more, its :class:`ScatterTranspose` (built on the first such
    product and kept on the block) by rows, the same bits. Not collective."""
    k = threads
    if k == 1 or row_blocks(block.shape[1], k).size <= 2:
        x.fill(0)
        block.rmatvec_add(y, x)
        return
    if block._transpose is None:
        block._transpose = ScatterTranspose.from_scatter(block)
    block._transpose.product(y, x, threads=k)


def transpose_nbytes(block) -> int:
    """Bytes of ``block``'s transposed copy, 0 while it has none. Not collective."""
    t = block._transpose
    return 0 if t is None else t.nbytes


class ScatterTranspose:
    """``B^T`` kept as compressed rows whose terms are in the order a scatter
    ``x += B^T y`` into a zeroed ``x`` adds them (:meth:`SlicedEll.rmatvec_add
    <dmsolve._sell.SlicedEll.rmatvec_add>`, :meth:`NarrowRows.rmatvec_add`):
    a product by rows of ``x``, which threads split without two of them
    writing one entry, and whose entries are the scatter's bits.

    Build one with :meth:`from_scatter`; it holds a copy of the block's
    values and narrow indices (the block's memory again). Not collective.
    """

    def __init__(self, shape, indptr: np.ndarray, indices: np.ndarray, data: np.ndarray):
        self.shape = (int(shape[0]), int(shape[1]))
        self.indptr, self.indices, self.data = indptr, indices, data

    @classmethod
    def from_scatter(cls, block) -> "ScatterTranspose":
        """The transposed copy of ``block`` (a ``SlicedEll`` or
        :class:`NarrowRows`): two passes of its terms in scatter order, a count
        per column and a stable placement. Not collective."""
        m, n = block.shape
        indptr = np.zeros(n + 1, np.int64)
        block.scatter_count(indptr[1:])
        np.cumsum(indptr, out=indptr)
        nnz = int(indptr[-1])
        indices = np.empty(nnz, index_dtype(m))
        data = np.empty(nnz, block.dtype)
        block.scatter_fill(indptr[:-1].copy(), indices, data)
        return cls((n, m), indptr.astype(index_dtype(nnz + 1)), indices, data)

    @property
    def nbytes(self) -> int:
        """Bytes of the copy. Not collective."""
        return int(self.indptr.nbytes + self.indices.nbytes + self.data.nbytes)

    def product(self, y: np.ndarray, x: np.ndarray, *, threads: int = 1) -> None:
        """``x = B^T y`` (every entry of ``x`` written; the bits of a scatter
        into a zeroed ``x``), by blocks of rows of ``x`` on ``threads``
        threads. Not collective."""
        k = threads
        rows = row_blocks(self.shape[0], k)
        parallel_blocks(lambda r0, r1: scatter_rows(r0, r1, self.indptr, self.indices,
                                                    self.data, y, x), rows, k)
