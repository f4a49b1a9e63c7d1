"""How a DistCSR's blocks are built from what its user has: this rank's rows,
a global matrix on every rank, or triplets from any rank (one BSP superstep).

Each builder checks its input on every rank, agrees on errors, and returns
the :class:`Blocks` the :class:`dmsolve.DistCSR` constructor takes. Triplet
files larger than memory are assembled in :mod:`dmsolve._coo_files`.
"""

from __future__ import annotations

import numbers
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from ._errors import agree
from ._layout import Layout
from .bsp import BSP

__all__ = ["Blocks", "local_rows", "global_rows", "coo_rows", "split_rows", "check_coo"]


class Blocks(NamedTuple):
    """The arguments of the DistCSR constructor. Not collective."""

    diag: sp.csr_matrix
    offd: sp.csr_matrix
    ghosts: np.ndarray
    row_layout: Layout
    col_layout: Layout


def local_rows(held: list, row_layout: Layout, col_layout: Layout | None = None,
               check_finite: bool = True) -> Blocks:
    """The blocks of :meth:`DistCSR.from_local_rows <dmsolve.DistCSR.from_local_rows>`
    from ``held = [local]``, a list this function empties: the caller's
    matrix is let go once it is converted to CSR, as :func:`coo_rows` does.
    Collective on ``row_layout.comm``."""
    local, = held
    held.clear()
    comm = row_layout.comm
    row_layout.verify()
    if col_layout is not None:
        col_layout.verify()
    exc = None
    ncols = -1
    try:
        if not sp.issparse(local):
            raise TypeError("local rows must be a scipy sparse matrix, got %s"
                            % type(local).__name__)
        local = sp.csr_matrix(local)
        if local.shape[0] != row_layout.local_size:
            raise ValueError("local rows have %d rows, but the row layout gives "
                             "this rank %d" % (local.shape[0], row_layout.local_size))
        if local.dtype.kind not in "fciub":
            raise TypeError("matrix entries must be numeric, got %s" % local.dtype)
        if check_finite and not np.all(np.isfinite(local.data)):
            raise ValueError("matrix entries must be finite (found NaN or inf)")
        ncols = local.shape[1]
    except (TypeError, ValueError) as e:
        exc = e
    agree(comm, exc)
    widths = comm.allgather(ncols)
    if col_layout is None:
        n = max(widths)
        col_layout = (row_layout if n == row_layout.global_size
                      else Layout.block(n, comm)._trusted())
    exc = None
    if any(w != col_layout.global_size for w in widths):
        exc = ValueError("local rows have %s columns on the ranks; the column layout "
                         "has %d" % (sorted(set(widths)), col_layout.global_size))
    elif not col_layout.same_comm(row_layout):
        exc = ValueError("row and column layouts live on different communicators")
    agree(comm, exc)
    return Blocks(*split_rows(local, col_layout), row_layout, col_layout)


def global_rows(A, comm: MPI.Comm, layout: Layout | None = None,
                col_layout: Layout | None = None) -> Blocks:
    """The blocks of :meth:`DistCSR.from_global <dmsolve.DistCSR.from_global>`.
    Collective on ``comm``."""
    for lay in (layout, col_layout):
        if lay is not None:
            lay.verify()
    exc = None
    shape = (-1, -1)
    try:
        if not sp.issparse(A) and not isinstance(A, np.ndarray):
            raise TypeError("A must be a scipy sparse matrix or a 2-D array, got %s"
                            % type(A).__name__)
        if A.ndim != 2:
            raise ValueError("A must be 2-D, got %d dimensions" % A.ndim)
        shape = tuple(int(s) for s in A.shape)
    except (TypeError, ValueError) as e:
        exc = e
    agree(comm, exc)
    shapes = comm.allgather(shape)
    exc = None
    if any(s != shapes[0] for s in shapes):
        exc = ValueError("ranks passed global matrices of different shapes: %s"
                         % sorted(set(shapes)))
    elif layout is not None and layout.global_size != shape[0]:
        exc = ValueError("layout has %d rows, A has %d" % (layout.global_size, shape[0]))
    agree(comm, exc)
    if layout is None:
        layout = Layout.block(shape[0], comm)._trusted()    # agreed shape
    start, stop = layout.owned_range
    local = sp.csr_matrix(A[start:stop]) if sp.issparse(A) else sp.csr_matrix(
        np.asarray(A)[start:stop])
    if col_layout is None and shape[1] == shape[0]:
        col_layout = layout
    return local_rows([local], layout, col_layout)


def coo_rows(triplets: list, shape, comm: MPI.Comm, *, layout: Layout | None = None,
             col_layout: Layout | None = None, mode: str = "add",
             check_finite: bool = True) -> Blocks:
    """The blocks of :meth:`DistCSR.from_coo <dmsolve.DistCSR.from_coo>`
    from ``triplets = [rows, cols, vals]``, a list this function empties:
    the caller's arrays are let go as soon as they are converted, so that a
    caller's temporaries do not stay alive beside their copies. Collective
    on ``comm`` (one BSP superstep)."""
    rows, cols, vals = triplets
    triplets.clear()
    for lay in (layout, col_layout):
        if lay is not None:
            lay.verify()
    exc = None
    try:
        rows, cols, vals, shape = check_coo(rows, cols, vals, shape, mode, check_finite)
    except (TypeError, ValueError) as e:
        exc = e
        rows = cols = np.zeros(0, dtype=np.int64)
        vals = np.zeros(0)
    agree(comm, exc)
    shapes = comm.allgather(shape)
    exc = None
    if any(s != shapes[0] for s in shapes):
        exc = ValueError("ranks passed different shapes: %s" % sorted(set(shapes)))
    elif layout is not None and layout.global_size != shape[0]:
        exc = ValueError("layout has %d rows, shape has %d" % (layout.global_size, shape[0]))
    elif col_layout is not None and col_layout.global_size != shape[1]:
        exc = ValueError("col_layout has %d columns, shape has %d"
                         % (col_layout.global_size, shape[1]))
    agree(comm, exc)
    dtypes = comm.allgather(vals.dtype.str)
    dtype = np.result_type(*[np.dtype(d) for d in dtypes])
    if layout is None:
        layout = Layout.block(shape[0], comm)._trusted()     # agreed shape
    if col_layout is None:
        col_layout = (layout if shape[0] == shape[1]
                      else Layout.block(shape[1], comm)._trusted())
    width = max(shape[1], 1)
    keys = rows * width + cols
    ctx = BSP(comm)
    tag = ctx.tags("entries")
    ctx.send_keyed(tag.entries, keys, vals.astype(dtype, copy=False),
                   lambda k: layout.owner(k // width),
                   op="sum" if mode == "add" else "last")
    inbox = ctx.sync("from_coo")
    ukeys, uvals = inbox.reduced(tag.entries, "sum" if mode == "add" else "last",
                                 dtype=dtype)
    lr = ukeys // width - layout.start
    lc = ukeys % width
    local = sp.csr_matrix((uvals, (lr, lc)), shape=(layout.local_size, shape[1]))
    return Blocks(*split_rows(local, col_layout), layout, col_layout)


def split_rows(local: sp.csr_matrix, col_layout: Layout):
    """Rows with global columns split into the diag/offd blocks and the ghost
    list. Not collective."""
    local = sp.csr_matrix(local)
    local.sum_duplicates()          # and sorts each row's columns
    cstart, cstop = col_layout.owned_range
    n = local.shape[0]
    cols = local.indices.astype(np.int64, copy=False)
    own = (cols >= cstart) & (cols < cstop)
    # each block keeps the entries of a row in their (sorted) order: its row
    # pointers count them, and no conversion through COO re-sorts them
    before = np.concatenate(([0], np.cumsum(own, dtype=np.int64)))[local.indptr]
    diag = sp.csr_matrix((local.data[own], cols[own] - cstart, before),
                         shape=(n, cstop - cstart))
    ghosts, inv = np.unique(cols[~own], return_inverse=True)
    offd = sp.csr_matrix((local.data[~own], inv.ravel(), local.indptr - before),
                         shape=(n, ghosts.size))
    return diag, offd, ghosts.astype(np.int64)


def check_coo(rows, cols, vals, shape, mode, check_finite):
    """The triplets as int64 indices and numeric values, and ``shape`` as a
    pair of ints, after checking them. Not collective."""
    if mode not in ("add", "insert"):
        raise ValueError("mode must be 'add' or 'insert', got %r" % (mode,))
    if not (isinstance(shape, tuple) or isinstance(shape, list)) or len(shape) != 2 or \
            not all(isinstance(s, numbers.Integral) and not isinstance(s, bool) for s in shape):
        raise TypeError("shape must be a pair of integers, got %r" % (shape,))
    shape = (int(shape[0]), int(shape[1]))
    if min(shape) < 0:
        raise ValueError("shape must be non-negative, got %s" % (shape,))
    if shape[0] * max(shape[1], 1) >= 2**62:
        raise ValueError("shape %s is too large for 64-bit (row, col) keys" % (shape,))
    rows, cols, vals = np.asarray(rows), np.asarray(cols), np.asarray(vals)
    for name, a in (("rows", rows), ("cols", cols)):
        if a.size and a.dtype.kind not in "iu":
            raise TypeError("%s must be integers, got dtype %s" % (name, a.dtype))
    if vals.size and vals.dtype.kind not in "fciub":
        raise TypeError("vals must be numeric, got dtype %s" % vals.dtype)
    if not (rows.ndim == cols.ndim == vals.ndim == 1) or not (rows.size == cols.size == vals.size):
        raise ValueError("rows, cols and vals must be 1-D of equal length, got %s, %s, %s"
                         % (rows.shape, cols.shape, vals.shape))
    rows = rows.astype(np.int64)
    cols = cols.astype(np.int64)
    if rows.size and (rows.min() < 0 or rows.max() >= shape[0]):
        raise ValueError("row index out of range [0, %d)" % shape[0])
    if cols.size and (cols.min() < 0 or cols.max() >= shape[1]):
        raise ValueError("column index out of range [0, %d)" % shape[1])
    if vals.dtype.kind in "iub":
        vals = vals.astype(np.float64)
    if check_finite and vals.size and not np.all(np.isfinite(vals)):
        raise ValueError("vals must be finite (found NaN or inf)")
    return rows, cols, vals, shape
