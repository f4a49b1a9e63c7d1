"""Moving matrix rows between ranks: ghost-row fetches and distributed SpGEMM.

Built on the BSP layer: a fetch is two supersteps (requests to the owners,
rows back), the way PETSc's ``MatGetBrowsOfAoCols`` feeds ``MatMatMult``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from dmsolve import DistCSR
from dmsolve.bsp import BSP
from dmsolve.spgemm import block_matmat as local_block_matmat
from dmsolve.spgemm import matmat as local_matmat

__all__ = ["fetch_rows", "matmat_local", "matmat", "rows_with_global_columns"]


def rows_with_global_columns(A: DistCSR) -> sp.csr_matrix:
    """This rank's rows of ``A`` as scipy CSR with global column ids, sorted.
    Not collective."""
    loc = A.local_rows()
    loc.sort_indices()
    return loc


def fetch_rows(A: DistCSR, ids: np.ndarray, local: sp.csr_matrix | None = None,
               label: str = "fetch_rows") -> sp.csr_matrix:
    """Rows ``ids`` (sorted global row ids, any owners) of ``A`` with global columns.

    Collective on ``A.comm``: two BSP supersteps, every rank must call it
    (with an empty ``ids`` if it needs nothing).

    Parameters
    ----------
    A : DistCSR
    ids : int64 array
        Sorted, unique global row ids.
    local : scipy CSR, optional
        ``rows_with_global_columns(A)`` if the caller already has it.

    Returns
    -------
    scipy.sparse.csr_matrix, shape (len(ids), A.shape[1])
    """
    comm = A.comm
    lay = A.row_layout
    ids = np.asarray(ids, dtype=np.int64)
    if local is None:
        local = rows_with_global_columns(A)
    ctx = BSP(comm)
    # requested rows; the rows' lengths, columns and values coming back
    tag = ctx.tags("requests", "lens", "cols", "vals")
    ctx.send_rows(lay.owner(ids) if ids.size else np.zeros(0, np.int64), ids, tag.requests)
    inbox = ctx.sync(label + ":requests")
    ip = local.indptr
    for src in inbox.sources(tag.requests):
        want = np.concatenate(inbox.from_source(src, tag.requests)) - lay.start
        lens = (ip[want + 1] - ip[want]).astype(np.int64)
        # positions of the wanted rows' entries, in row order
        starts = np.repeat(ip[want].astype(np.int64) - np.concatenate(([0], np.cumsum(lens)[:-1])),
                           lens) + np.arange(int(lens.sum()))
        ctx.send(src, lens, tag.lens)
        ctx.send(src, local.indices[starts].astype(np.int64), tag.cols)
        ctx.send(src, local.data[starts], tag.vals)
    inbox = ctx.sync(label + ":rows")
    lens = inbox.concat(tag.lens, dtype=np.int64)
    cols = inbox.concat(tag.cols, dtype=np.int64)
    vals = inbox.concat(tag.vals, dtype=local.dtype)
    indptr = np.zeros(ids.size + 1, dtype=np.int64)
    np.cumsum(lens, out=indptr[1:])
    return sp.csr_matrix((vals, cols, indptr), shape=(ids.size, A.shape[1]))


def matmat_local(A: DistCSR, B: DistCSR, B_local: sp.csr_matrix | None = None) -> sp.csr_matrix:
    """This rank's rows of ``A @ B`` with global columns (scipy CSR, sorted).

    ``B`` is distributed by rows like ``A``'s columns. The rows of ``B`` that
    ``A``'s off-process block touches (``A.ghosts``) are fetched through the
    BSP layer. The local product runs on the process's threads
    (:func:`dmsolve.spgemm.matmat`: scipy's values to the bit). Collective
    on ``A.comm``.
    """
    if B.row_layout != A.col_layout:
        raise ValueError("A @ B: B's rows are not distributed like A's columns")
    if B_local is None:
        B_local = rows_with_global_columns(B)
    ghost_rows = fetch_rows(B, A.ghosts, local=B_local, label="matmat")
    if A.offd.nnz:
        # one product of [diag offd] with [own rows; ghost rows], the stacks
        # never formed, rather than two and a sum of their results
        return local_block_matmat([A.diag, A.offd], [B_local, ghost_rows])
    return local_matmat(A.diag, B_local)


def matmat(A: DistCSR, B: DistCSR) -> DistCSR:
    """``A @ B`` as a DistCSR, rows like ``A``, columns like ``B``.
    Collective on ``A.comm``."""
    return DistCSR.from_local_rows(matmat_local(A, B), A.row_layout, B.col_layout,
                                   check_finite=False)

