"""The Galerkin coarse operator ``R A P`` with ``R = P^T``, as distributed SpGEMMs.

``A P`` takes the ghost rows of ``P`` through the BSP layer. The local
products and the transpose run on the process's threads
(:mod:`dmsolve.spgemm`, scipy's values to the bit). ``P^T (A P)`` is
formed from each rank's rows: the rows of the result that belong to this
rank's own coarse unknowns (the columns of ``P``'s diagonal block) stay here;
the partial rows of ghost coarse unknowns (``P``'s off-process columns, only
near the rank boundary) are sent to their owners in one BSP superstep and
added there, like PETSc's ``MatPtAP``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from dmsolve import DistCSR
from dmsolve.bsp import BSP
from dmsolve.spgemm import matmat, transpose

from .._dist import matmat_local

__all__ = ["galerkin_product", "galerkin_rows"]


def galerkin_product(A: DistCSR, P: DistCSR) -> DistCSR:
    """``P^T A P`` distributed like ``P``'s columns.

    Collective on ``A.comm``: one ghost-row fetch (two supersteps), one
    superstep for the partial rows of ghost coarse unknowns, and the
    result's construction.
    """
    lay = P.col_layout
    return DistCSR.from_local_rows(galerkin_rows(A, P), lay, lay, check_finite=False)


def galerkin_rows(A: DistCSR, P: DistCSR) -> sp.csr_matrix:
    """This rank's rows of ``P^T A P`` (the rows of ``P.col_layout``), with
    global column ids, as scipy CSR; for building the result on another
    communicator (:func:`.coarse.sub_layout`).

    Collective on ``A.comm``: one ghost-row fetch (two supersteps) and one
    superstep for the partial rows of ghost coarse unknowns.
    """
    lay = P.col_layout
    AP = matmat_local(A, P)
    # P's local columns first, then its ghosts: rows of P^T in that order
    # the rows of P^T: P's local columns (this rank's coarse unknowns),
    # then its ghost columns; each block's product on its own
    own = matmat(transpose(P.diag), AP)
    ghost = matmat(transpose(P.offd), AP).tocoo()
    ctx = BSP(A.comm)
    tag = ctx.tags("rows", "cols", "vals")
    if ghost.nnz:
        dests = lay.owner(P.ghosts[ghost.row])
        ctx.send_rows(dests, P.ghosts[ghost.row].astype(np.int64), tag.rows)
        ctx.send_rows(dests, ghost.col.astype(np.int64), tag.cols)
        ctx.send_rows(dests, ghost.data, tag.vals)
    inbox = ctx.sync("galerkin")
    rows = inbox.concat(tag.rows, dtype=np.int64)
    if rows.size:
        cols = inbox.concat(tag.cols, dtype=np.int64)
        vals = inbox.concat(tag.vals, dtype=own.dtype)
        own = own + sp.csr_matrix((vals, (rows - lay.start, cols)), shape=own.shape)
    return own
