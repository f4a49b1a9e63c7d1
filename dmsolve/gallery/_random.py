"""Random problems, the same at any rank count: a random sparse SPD matrix
and the Laplacian of a given graph.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from .._layout import Layout
from .._matrix import DistCSR
from ..bsp import sorted_unique
from ..validate import check_int, check_real
from ._common import MAX_ROWS, _checks, _doc, _hash, _uniform

__all__ = ["random_spd", "graph_laplacian"]

def _add_diagonal(offdiag, diag_extra: float, comm):
    """``offdiag + diag(rowsum|offdiag| + diag_extra)`` from this rank's rows.

    The row sums are taken over sorted columns, so they do not depend on the
    order in which the off-diagonal entries arrived. Collective on ``comm``.
    """
    local = sp.csr_matrix(offdiag.local_rows())
    local.sum_duplicates()
    layout = offdiag.row_layout
    start = layout.start
    absrow = sp.csr_matrix((np.abs(local.data), local.indices, local.indptr),
                           shape=local.shape)
    d = absrow @ np.ones(local.shape[1]) + diag_extra
    diag = sp.csr_matrix((d, (np.arange(layout.local_size),
                              np.arange(start, start + layout.local_size))),
                         shape=local.shape)
    out = (local + diag).tocsr()
    out.sort_indices()
    return DistCSR.from_local_rows(out, layout)


@_doc
def random_spd(n: int, comm: MPI.Comm, density: float = 0.01, seed: int = 0,
               shift: float = 1.0):
    """Random sparse symmetric positive definite matrix, the same at any rank count.

    Row ``i`` draws ``ceil(density * (n - 1) / 2)`` upper-triangular columns
    ``j > i`` and values uniform in ``[-1, 1)`` from a counter-based hash of
    ``(seed, i, k)``; the mirrored entries go to their owners through
    ``DistCSR.from_coo``. The diagonal is the absolute row sum of the
    off-diagonal entries plus ``shift``, so the matrix is strictly
    diagonally dominant with a positive diagonal, hence SPD with smallest
    eigenvalue at least ``shift``. About ``density * n`` off-diagonal entries
    per row (fewer near the end, where draws collide). Collective on ``comm``.

    Parameters
    ----------
    n : int
        Order, positive.
    %(comm)s
    density : float, optional
        Target fraction of off-diagonal nonzeros per row, in ``(0, 1]``.
    seed : int, optional
        Non-negative seed; the matrix is a function of ``(n, density, seed)``.
    shift : float, optional
        Diagonal dominance margin, positive.

    Returns
    -------
    DistCSR

    Raises
    ------
    TypeError, ValueError
        On every rank, for a bad ``n``, ``density``, ``seed`` or ``shift``.
    """
    with _checks(comm):
        nn, m, sd, sh = _random_spd_params(n, density, seed, shift)

    layout = Layout.block(nn, comm)
    start, stop = layout.owned_range
    rows = np.repeat(np.arange(start, stop, dtype=np.int64), m)
    k = np.tile(np.arange(m, dtype=np.int64), stop - start)
    span = nn - 1 - rows
    keep = span > 0
    rows, k, span = rows[keep], k[keep], span[keep]
    cols = rows + 1 + (_hash(sd, rows, k) % span.astype(np.uint64)).astype(np.int64)
    # one value per distinct (i, j), independent of which draw produced it
    key = sorted_unique(rows * nn + cols)
    rows, cols = key // nn, key % nn
    vals = 2.0 * _uniform(sd + 1, rows, cols) - 1.0
    nz = vals != 0.0
    rows, cols, vals = rows[nz], cols[nz], vals[nz]
    offdiag = DistCSR.from_coo(np.concatenate((rows, cols)), np.concatenate((cols, rows)),
                               np.concatenate((vals, vals)), (nn, nn), comm,
                               layout=layout)
    return _add_diagonal(offdiag, sh, comm)


def _random_spd_params(n, density, seed, shift):
    """``(n, draws per row, seed, shift)`` of :func:`random_spd`, checked. Pure function."""
    nn = check_int("n", n, low=1)
    dens = check_real("density", density, low=0.0, high=1.0, low_open=True)
    sd = check_int("seed", seed, low=0)
    sh = check_real("shift", shift, low=0.0, low_open=True)
    if nn > MAX_ROWS:
        raise ValueError("n = %d is more than the 2**62 rows that 64-bit indices can "
                         "number" % nn)
    return nn, int(np.ceil(dens * (nn - 1) / 2)), sd, sh


# -- graph Laplacians ----------------------------------------------------------------

@_doc
def graph_laplacian(edges, n: int, comm: MPI.Comm, weights=None):
    """Laplacian ``D - W`` of an undirected graph given as a distributed edge list.

    Each rank passes any subset of the edges (an edge may be given by any
    rank, in either direction); repeated edges add their weights; self-loops
    are ignored (they cancel in ``D - W``). The degree is summed over sorted
    columns after assembly, so every row sums to zero up to rounding and the
    matrix does not depend on the rank count when the weights are.
    Collective on ``comm``.

    Parameters
    ----------
    edges : array_like of int, shape (m, 2)
        This rank's edges ``(u, v)`` with ``0 <= u, v < n``; ``m`` may be 0.
    n : int
        Number of vertices, positive.
    %(comm)s
    weights : array_like of float, shape (m,), optional
        Finite edge weights; default 1.

    Returns
    -------
    DistCSR
        Symmetric; positive semidefinite for non-negative weights.

    Raises
    ------
    TypeError, ValueError
        On every rank, if any rank passes a bad ``n``, malformed or
        out-of-range edges, or weights of the wrong shape or non-finite.
    """
    with _checks(comm):
        nn = check_int("n", n, low=1)
        e = np.asarray(edges)
        if e.size == 0:
            e = np.zeros((0, 2), dtype=np.int64)
        if e.ndim != 2 or e.shape[1] != 2:
            raise ValueError("edges must have shape (m, 2), got %s" % (e.shape,))
        if not np.issubdtype(e.dtype, np.integer):
            raise TypeError("edges must be integers, got dtype %s" % e.dtype)
        e = e.astype(np.int64)
        if e.size and (e.min() < 0 or e.max() >= nn):
            raise ValueError("edges must be vertex ids in [0, n) = [0, %d)" % nn)
        if weights is None:
            w = np.ones(e.shape[0])
        else:
            w = np.asarray(weights, dtype=np.float64)
            if w.shape != (e.shape[0],):
                raise ValueError("weights must have shape (%d,) like the edges, got %s"
                                 % (e.shape[0], w.shape))
            if not np.all(np.isfinite(w)):
                raise ValueError("weights must be finite")
    keep = e[:, 0] != e[:, 1]
    u, v, w = e[keep, 0], e[keep, 1], w[keep]
    layout = Layout.block(nn, comm)
    adj = DistCSR.from_coo(np.concatenate((u, v)), np.concatenate((v, u)),
                           np.concatenate((-w, -w)), (nn, nn), comm, layout=layout)
    local = sp.csr_matrix(adj.local_rows())
    local.sum_duplicates()
    d = -(local @ np.ones(nn))
    start = layout.start
    diag = sp.csr_matrix((d, (np.arange(layout.local_size),
                              np.arange(start, layout.stop))), shape=local.shape)
    out = (local + diag).tocsr()
    out.sort_indices()
    return DistCSR.from_local_rows(out, layout)
