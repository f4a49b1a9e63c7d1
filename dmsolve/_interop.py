"""What dmsolve takes from mpi4py and scipy beyond their everyday API, in one place:
MPI datatypes of numpy dtypes, and scipy's accumulating sparse products.
"""

from __future__ import annotations

import numpy as np
import scipy
from mpi4py import MPI
from mpi4py.util.dtlib import from_numpy_dtype

# ``A @ x`` allocates its result, and ``y += A @ x`` makes a second pass over
# y. scipy's csr_matvec/csc_matvec add ``A @ x`` into a given y with no
# temporary, which the per-iteration products (DistCSR.matvec/rmatvec, the
# off-process block, the reverse halo's accumulate) need to allocate nothing.
# scipy has no public function for it, so a scipy without them fails here,
# at import, rather than in the first product.
# Their ``*_matvecs`` siblings multiply a block of vectors stored row by row:
# a complex128 vector viewed as float64 is such a block of two (real and
# imaginary parts), so a real matrix multiplies a complex vector with no
# complex copy of the matrix (which sparsetools would make on every call).
try:
    from scipy.sparse._sparsetools import csc_matvec, csc_matvecs, csr_matvec, csr_matvecs
except ImportError as e:
    raise ImportError(
        "dmsolve needs scipy.sparse._sparsetools.csr_matvec(s) and csc_matvec(s) (scipy's "
        "sparse products that accumulate into y), which scipy %s does not provide: %s"
        % (scipy.__version__, e)) from e

__all__ = ["mpi_datatype", "csr_matvec", "csc_matvec", "csr_add", "csc_add", "allgatherv"]


def csr_add(n_row: int, n_col: int, indptr, indices, data, x: np.ndarray,
            y: np.ndarray) -> None:
    """``y += B @ x`` for the CSR arrays of ``B`` (``n_row x n_col``), in place.

    ``data``, ``x`` and ``y`` all real (float64) or all complex (complex128),
    or ``data`` real and ``x``, ``y`` complex: then the product runs on the
    float64 views of ``x`` and ``y`` as two real vectors at once. Not collective.
    """
    if data.dtype == y.dtype:
        csr_matvec(n_row, n_col, indptr, indices, data, x, y)
    else:
        csr_matvecs(n_row, n_col, 2, indptr, indices, data, x.view(np.float64),
                    y.view(np.float64))


def csc_add(n_row: int, n_col: int, indptr, indices, data, x: np.ndarray,
            y: np.ndarray) -> None:
    """``y += B @ x`` for the CSC arrays of ``B`` (``n_row x n_col``; a CSR
    matrix's arrays give its transpose), in place, with the dtypes of
    :func:`csr_add`. Not collective."""
    if data.dtype == y.dtype:
        csc_matvec(n_row, n_col, indptr, indices, data, x, y)
    else:
        csc_matvecs(n_row, n_col, 2, indptr, indices, data, x.view(np.float64),
                    y.view(np.float64))

_DATATYPES: dict[str, MPI.Datatype] = {}


def mpi_datatype(dtype) -> MPI.Datatype:
    """The MPI datatype of a numpy scalar ``dtype``. Not collective.

    Built by :func:`mpi4py.util.dtlib.from_numpy_dtype` on first use and
    kept for the life of the process (a handful, one per dtype), so that
    buffers of a dtype always travel with the same datatype. The byte order
    is not part of the key: ranks exchange raw bytes between buffers of the
    same dtype.
    """
    char = np.dtype(dtype).char
    datatype = _DATATYPES.get(char)
    if datatype is None:
        datatype = _DATATYPES[char] = from_numpy_dtype(np.dtype(char))
    return datatype


def allgatherv(comm: MPI.Comm, a: np.ndarray, root: int | None = None) -> np.ndarray | None:
    """Every rank's ``a`` (1-D, one dtype on every rank) concatenated in rank
    order, on every rank (or on ``root`` only; None elsewhere). Collective on
    ``comm``."""
    counts = np.array(comm.allgather(a.size), dtype=np.int64)
    displs = np.concatenate(([0], np.cumsum(counts)[:-1]))
    mt = mpi_datatype(a.dtype)
    if root is None:
        out = np.empty(int(counts.sum()), dtype=a.dtype)
        comm.Allgatherv([a, mt], [out, (counts, displs), mt])
        return out
    out = np.empty(int(counts.sum()), dtype=a.dtype) if comm.Get_rank() == root else None
    comm.Gatherv([a, mt], [out, (counts, displs), mt] if out is not None else None, root=root)
    return out
