"""The Galerkin coarse operator ``R A P`` with ``R = P^T``, as distributed SpGEMMs.

``A P`` takes the ghost rows of ``P`` through the BSP layer; ``P^T (A P)``
is formed from each rank's rows and the partial sums are routed to the
owners of the coarse rows, where duplicates are added (a BSP combiner).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from dmsolve import DistCSR

from ._dist import matmat_local, rows_with_global_columns

__all__ = ["galerkin_product"]


def galerkin_product(A: DistCSR, P: DistCSR) -> DistCSR:
    """``P^T A P`` distributed like ``P``'s columns.

    Collective on ``A.comm``: one ghost-row fetch (two supersteps) and one
    assembly superstep.
    """
    P_loc = rows_with_global_columns(P)
    AP = matmat_local(A, P, B_local=P_loc)
    # compress P's columns to those this rank touches before transposing
    used, inv = np.unique(P_loc.indices, return_inverse=True)
    Pc = sp.csr_matrix((P_loc.data, inv.ravel(), P_loc.indptr),
                       shape=(P_loc.shape[0], used.size))
    C = (Pc.T.tocsr() @ AP).tocoo()
    rows = used[C.row].astype(np.int64)
    lay = P.col_layout
    return DistCSR.from_coo(rows, C.col.astype(np.int64), C.data, (lay.global_size,) * 2,
                            A.comm, layout=lay, col_layout=lay, check_finite=False)
