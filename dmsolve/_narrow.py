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

from ._narrow_kernels import narrow_matvec, narrow_rmatvec_add

__all__ = ["NarrowRows", "index_dtype"]


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
    def nbytes(self) -> int:
        """Bytes of the arrays a product reads. Not collective."""
        return int(self.indptr.nbytes + self.indices.nbytes + self.data.nbytes)

    @property
    def stored_nbytes(self) -> int:
        """Bytes held beside the CSR block it was made from (its values are
        that block's unless :meth:`astype` made them). Not collective."""
        return self.nbytes - (self.data.nbytes if self._shared else 0)

    def matvec(self, x: np.ndarray, y: np.ndarray) -> None:
        """``y = B @ x`` (every entry of ``y`` written). Not collective."""
        narrow_matvec(self.indptr, self.indices, self.data, x, y)

    def rmatvec_add(self, y: np.ndarray, x: np.ndarray) -> None:
        """``x += B^T y``. Not collective."""
        narrow_rmatvec_add(self.indptr, self.indices, self.data, y, x)

    def to_csr(self) -> sp.csr_matrix:
        """The block back as scipy CSR (int32 indices when they fit). Not collective."""
        idx = np.int32 if max(self.shape[1], self.nnz) < np.iinfo(np.int32).max else np.int64
        return sp.csr_matrix((self.data.copy(), self.indices.astype(idx),
                              self.indptr.astype(idx)), shape=self.shape)
