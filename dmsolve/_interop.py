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
try:
    from scipy.sparse._sparsetools import csc_matvec, csr_matvec
except ImportError as e:
    raise ImportError(
        "dmsolve needs scipy.sparse._sparsetools.csr_matvec and csc_matvec (scipy's "
        "sparse products that accumulate into y), which scipy %s does not provide: %s"
        % (scipy.__version__, e)) from e

__all__ = ["mpi_datatype", "csr_matvec", "csc_matvec"]

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
