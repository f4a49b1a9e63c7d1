"""The Galerkin coarse operator ``R A P`` with ``R = P^T``, as distributed SpGEMMs.

``A P`` takes the ghost rows of ``P`` through the BSP layer. The local
products and the transpose run on the process's threads
(:mod:`dmsolve.spgemm`, scipy's values to the bit). ``P^T (A P)`` is
formed from each rank's rows: the rows of the result that belong to this
rank's own coarse unknowns stay here; the partial rows of the other coarse
unknowns (only near the rank boundary) are sent to their owners in one BSP
superstep and added there, like PETSc's ``MatPtAP``. When the coarse level
is gathered onto fewer ranks, "own" means the unknowns this rank made (its
aggregates): their rows are finished where they were made, then moved whole
to the ranks of the gathered level (one more superstep), so a gathering
rank receives finished rows, never partial rows of all its senders.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from dmsolve import DistCSR, Layout
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


def galerkin_rows(A: DistCSR, P: DistCSR, made: Layout | None = None) -> sp.csr_matrix:
    """This rank's rows of ``P^T A P`` (the rows of ``P.col_layout``), with
    global column ids, as scipy CSR; for building the result on another
    communicator (:func:`.coarse.sub_layout`).

    ``made``: the coarse unknowns' layout as the ranks made them
    (:func:`.coarse.made_layout`), when ``P.col_layout`` gathers them onto
    fewer ranks. The rows are then summed on ``made`` (each rank finishes
    its own aggregates' rows) and moved whole to ``P.col_layout``. None, or
    the same ranges as ``P.col_layout``: summed on ``P.col_layout`` directly.

    Collective on ``A.comm``: one ghost-row fetch (two supersteps), one
    superstep for the partial rows of ghost coarse unknowns, and with a
    ``made`` layout other than ``P.col_layout`` one to move the finished rows.
    """
    if made is not None and not np.array_equal(made.ranges, P.col_layout.ranges):
        return _moved_rows(_finished_rows(A, P, made), made.start, P.col_layout)
    lay = P.col_layout
    AP = matmat_local(A, P)
    # P's local columns first, then its ghosts: rows of P^T in that order
    # the rows of P^T: P's local columns (this rank's coarse unknowns),
    # then its ghost columns; each block's product on its own
    own = matmat(transpose(P.diag), AP)
    ghost = matmat(transpose(P.offd), AP).tocoo()
    return _add_partial_rows(A.comm, lay, own, P.ghosts[ghost.row].astype(np.int64), ghost)


def _finished_rows(A: DistCSR, P: DistCSR, made: Layout) -> sp.csr_matrix:
    """This rank's rows of ``P^T A P`` in the layout ``made`` (the coarse
    unknowns this rank made), global column ids. Collective on ``A.comm``:
    the ghost-row fetch of ``A P`` and one superstep for the partial rows of
    the neighbours' coarse unknowns."""
    AP = matmat_local(A, P)
    Pl = P.local_rows()
    # the coarse unknowns P touches here, compressed: the rows of P^T
    used = np.unique(Pl.indices).astype(np.int64)
    Pc = sp.csr_matrix((Pl.data, np.searchsorted(used, Pl.indices), Pl.indptr),
                       shape=(Pl.shape[0], used.size))
    PtAP = matmat(transpose(Pc), AP)
    mine = (used >= made.start) & (used < made.stop)
    sel = PtAP[np.flatnonzero(mine)]
    lens = np.zeros(made.local_size, dtype=np.int64)
    lens[used[mine] - made.start] = np.diff(sel.indptr)
    indptr = np.concatenate(([0], np.cumsum(lens)))
    own = sp.csr_matrix((sel.data, sel.indices, indptr), shape=(made.local_size, P.shape[1]))
    ghost = PtAP[np.flatnonzero(~mine)].tocoo()
    return _add_partial_rows(A.comm, made, own, used[~mine][ghost.row], ghost)


def _add_partial_rows(comm, layout: Layout, own: sp.csr_matrix, gids: np.ndarray,
                      ghost: sp.coo_matrix) -> sp.csr_matrix:
    """``own`` (this rank's rows of ``layout``) plus the partial rows of the
    other ranks: ``ghost``'s entries, their rows the global ids ``gids``, go
    to the owners of those rows. Collective on ``comm``: one superstep."""
    ctx = BSP(comm)
    tag = ctx.tags("rows", "cols", "vals")
    if ghost.nnz:
        dests = layout.owner(gids)
        ctx.send_rows(dests, gids, tag.rows)
        ctx.send_rows(dests, ghost.col.astype(np.int64), tag.cols)
        ctx.send_rows(dests, ghost.data, tag.vals)
    inbox = ctx.sync("galerkin")
    rows = inbox.concat(tag.rows, dtype=np.int64)
    if rows.size:
        cols = inbox.concat(tag.cols, dtype=np.int64)
        vals = inbox.concat(tag.vals, dtype=own.dtype)
        own = own + sp.csr_matrix((vals, (rows - layout.start, cols)), shape=own.shape)
    return own


def _moved_rows(rows: sp.csr_matrix, first: int, layout: Layout) -> sp.csr_matrix:
    """Rows ``first, first+1, ...`` (this rank's finished ``rows``) moved whole
    to their owners in ``layout``; this rank's rows of ``layout``. Collective
    on ``layout.comm``: one BSP superstep."""
    ids = first + np.arange(rows.shape[0], dtype=np.int64)
    lens = np.diff(rows.indptr).astype(np.int64)
    ctx = BSP(layout.comm)
    tag = ctx.tags("ids", "lens", "cols", "vals")
    if ids.size:
        dests = layout.owner(ids)
        ctx.send_rows(dests, ids, tag.ids)
        ctx.send_rows(dests, lens, tag.lens)
        entry_dests = np.repeat(dests, lens)
        ctx.send_rows(entry_dests, rows.indices.astype(np.int64), tag.cols)
        ctx.send_rows(entry_dests, rows.data, tag.vals)
    inbox = ctx.sync("galerkin:gather")
    got = inbox.concat(tag.ids, dtype=np.int64)
    got_lens = inbox.concat(tag.lens, dtype=np.int64)
    cols = inbox.concat(tag.cols, dtype=np.int64)
    vals = inbox.concat(tag.vals, dtype=rows.dtype)
    # every row has one sender: placing them by id sums nothing
    local = np.repeat(got - layout.start, got_lens)
    return sp.csr_matrix((vals, (local, cols)), shape=(layout.local_size, rows.shape[1]))
