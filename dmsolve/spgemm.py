"""Sparse matrix products and transposes of local CSR blocks on the threads of a rank.

:func:`matmat` is scipy's ``A @ B``, :func:`transpose` scipy's
``A.T.tocsr()`` and :func:`subtract_scaled` scipy's ``T - sp.diags(w) @ F``,
with the same values to the bit (the same sums in the same order) and each
row's columns sorted (unless a caller that sorts anyway asks not to),
computed by blocks of rows on
:func:`dmsolve.threads.get_num_threads` threads (or a call's ``threads=``).
The results do not depend on the thread count. The AMG set-up (smoothed
prolongators, Galerkin products) and the Hodge Laplacians use them, since
scipy's product runs on one thread.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from . import threads as _threads
from ._spgemm_kernels import (copy_entries, matmat_rows, subtract_scaled_rows, transpose_count,
                              transpose_fill)

__all__ = ["matmat", "block_matmat", "transpose", "subtract_scaled", "MIN_BLOCK_ENTRIES"]

#: The fewest entries of ``A`` worth a block of rows of their own: about the
#: work that hides the cost of handing a block to another thread.
MIN_BLOCK_ENTRIES = 1 << 15

_INT32_MAX = int(np.iinfo(np.int32).max)


def _csr(M, name: str) -> sp.csr_matrix:
    if not sp.issparse(M):
        raise TypeError("%s must be a scipy sparse matrix, got %s" % (name, type(M).__name__))
    return M.tocsr()


def _value_dtype(*dtypes) -> np.dtype:
    dt = np.result_type(*dtypes)
    if dt not in (np.float32, np.float64, np.complex64, np.complex128):
        raise TypeError("sparse products take float32, float64, complex64 or complex128 "
                        "entries, got %s" % ", ".join(str(np.dtype(d)) for d in dtypes))
    return np.dtype(dt)


def _index_dtype(*bounds) -> np.dtype:
    return np.dtype(np.int32) if max(bounds, default=0) <= _INT32_MAX else np.dtype(np.int64)


def _row_cuts(indptr: np.ndarray, threads: int | None) -> np.ndarray:
    """Row boundaries of blocks with about equal numbers of entries, one per
    thread but none with fewer than :data:`MIN_BLOCK_ENTRIES` (the work of a
    product row grows with its entries). Not collective."""
    n = indptr.size - 1
    nnz = int(indptr[-1])
    parts = max(1, min(_threads.resolve(threads), nnz // MIN_BLOCK_ENTRIES, n))
    if parts == 1:
        return np.array([0, n], dtype=np.int64)
    cuts = np.searchsorted(indptr, _threads.split(nnz, parts), side="left").astype(np.int64)
    cuts[0], cuts[-1] = 0, n
    return np.maximum.accumulate(np.minimum(cuts, n))


def _unsigned(a: np.ndarray, idx: np.dtype) -> np.ndarray:
    """``a`` in ``idx`` seen as unsigned (no copy when already ``idx``): the
    kernels index by it without numba's test for negative indices."""
    return a.astype(idx, copy=False).view(np.dtype("u%d" % idx.itemsize))


def _arrays(M: sp.csr_matrix, idx: np.dtype, dtype: np.dtype | None = None):
    data = None if dtype is None else M.data.astype(dtype, copy=False)
    return _unsigned(M.indptr, idx), _unsigned(M.indices, idx), data


def _result(shape, indptr, indices, data, sorted_rows: bool = True) -> sp.csr_matrix:
    """A CSR matrix on the arrays, its index arrays of one dtype."""
    idx = _index_dtype(int(indptr[-1]), shape[1])
    C = sp.csr_matrix((data, indices.astype(idx, copy=False), indptr.astype(idx, copy=False)),
                      shape=shape, copy=False)
    if sorted_rows:
        C.has_sorted_indices = True
    return C


def matmat(A, B, threads: int | None = None, *, sort: bool = True) -> sp.csr_matrix:
    """``A @ B`` of two local sparse matrices, as scipy CSR with sorted columns.

    The same entries and values (to the bit) as scipy's ``A @ B``: each
    entry sums the products of ``A``'s row in stored order, from zero, and
    entries whose sum is zero are left out. Rows are computed in blocks on
    ``threads`` threads (:func:`dmsolve.threads.resolve`); the result does
    not depend on their number. Not collective.

    Parameters
    ----------
    A, B : scipy sparse matrices, shapes ``(m, n)`` and ``(n, p)``
        Entries float32, float64, complex64 or complex128 (the result's type
        is numpy's promotion of the two).
    threads : int, optional
    sort : bool
        Sort each row's columns (default). Without, a row lists its columns
        in the order it met them (the same at any thread count): for a
        caller that sorts anyway, e.g. through COO.

    Returns
    -------
    scipy.sparse.csr_matrix, shape ``(m, p)``

    Raises
    ------
    TypeError
        An operand is not a scipy sparse matrix, or its entries are of
        another type (integers, booleans).
    ValueError
        The inner dimensions differ.

    Examples
    --------
    >>> import numpy as np
    >>> import scipy.sparse as sp
    >>> from dmsolve.spgemm import matmat
    >>> A = sp.random(50, 40, density=0.1, format="csr", random_state=0)
    >>> B = sp.random(40, 30, density=0.1, format="csr", random_state=1)
    >>> C = matmat(A, B, threads=2)
    >>> bool(np.array_equal(C.toarray(), (A @ B).toarray()))
    True
    """
    return block_matmat([A], [B], threads, sort=sort)


def block_matmat(A_blocks, B_blocks, threads: int | None = None, *,
                 sort: bool = True) -> sp.csr_matrix:
    """``hstack(A_blocks) @ vstack(B_blocks)`` without forming the stacks.

    One or two blocks each (``A_k @ B_k`` must be defined, the ``A_k``
    with as many rows, the ``B_k`` with as many columns): e.g. a rank's
    diagonal and off-process blocks times its own rows of ``B`` and the
    ghost rows fetched. The result is :func:`matmat`'s of the stacked
    matrices (``sort`` as there), to the bit: each row adds ``A_1``'s
    entries, then ``A_2``'s. Not collective.

    Raises
    ------
    TypeError
        As :func:`matmat`.
    ValueError
        Not one or two blocks of each, or shapes that do not fit.
    """
    As = [_csr(M, "A_blocks[%d]" % k) for k, M in enumerate(A_blocks)]
    Bs = [_csr(M, "B_blocks[%d]" % k) for k, M in enumerate(B_blocks)]
    if not 1 <= len(As) == len(Bs) <= 2:
        raise ValueError("block_matmat takes one or two blocks of each factor, got %d and %d"
                         % (len(As), len(Bs)))
    m, p = As[0].shape[0], Bs[0].shape[1]
    for k, (A, B) in enumerate(zip(As, Bs)):
        if A.shape[1] != B.shape[0]:
            raise ValueError("A @ B: A has %d columns but B has %d rows"
                             % (sum(M.shape[1] for M in As), sum(M.shape[0] for M in Bs)))
        if A.shape[0] != m or B.shape[1] != p:
            raise ValueError("block %d: A_k has %d rows (not %d) or B_k %d columns (not %d)"
                             % (k, A.shape[0], m, B.shape[1], p))
    dtype = _value_dtype(*[M.dtype for M in As + Bs])
    idx = _index_dtype(*[b for M in As + Bs for b in (M.nnz,) + M.shape])
    if len(As) == 1:            # an empty second block: no row has entries in it
        As.append(sp.csr_matrix((m, 0), dtype=dtype))
        Bs.append(sp.csr_matrix((0, p), dtype=dtype))
    parts = [_arrays(M, idx, dtype) for M in (As[0], Bs[0], As[1], Bs[1])]
    args = tuple(a for part in parts for a in part)
    work = As[0].indptr.astype(np.int64) + As[1].indptr
    cuts = _row_cuts(work, threads)

    def rows(b):
        lo, hi = cuts[b], cuts[b + 1]
        # room for 1.5 entries per entry of A's rows: enough for the
        # products of the AMG set-up, which then never grow their arrays
        room = int(work[hi] - work[lo]) * 3 // 2
        return matmat_rows(*args, p, lo, hi, room, bool(sort))

    blocks = _threads.parallel_map(rows, cuts.size - 1, threads)
    indptr, indices, data = _joined(blocks, threads)
    return _result((m, p), indptr, indices.view(idx), data, sorted_rows=bool(sort))


def _joined(blocks: list, threads: int | None):
    """One CSR's arrays from blocks of rows, each ``(indptr from 0, indices,
    data)``: the entries copied into place on the threads. Not collective."""
    if len(blocks) == 1:
        return blocks[0]
    sizes = np.array([blk[0][-1] for blk in blocks], dtype=np.int64)
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    indptr = np.concatenate([blocks[0][0][:1]] + [blk[0][1:] + off
                                                  for blk, off in zip(blocks, offsets)])
    indices = np.empty(int(offsets[-1]), dtype=blocks[0][1].dtype)
    data = np.empty(int(offsets[-1]), dtype=blocks[0][2].dtype)
    _threads.parallel_for(lambda b: copy_entries(blocks[b][1], blocks[b][2], offsets[b],
                                                 indices, data), len(blocks), threads)
    return indptr, indices, data


def subtract_scaled(T, F, w: np.ndarray, threads: int | None = None) -> sp.csr_matrix:
    """``T - diag(w) @ F`` as scipy CSR with sorted columns, without zeros.

    The bits of scipy's ``T - sp.diags(w) @ F`` (zeros eliminated): each
    entry is ``t - w_i f``, ``t`` or ``-(w_i f)``, computed by blocks of
    rows on ``threads`` threads. For float64 ``T`` and ``F`` with sorted
    rows and no duplicates (others go through scipy). Not collective.

    Raises
    ------
    ValueError
        The shapes differ or ``w`` is not one value per row.
    """
    T, F = _csr(T, "T"), _csr(F, "F")
    w = np.asarray(w, dtype=np.float64)
    if T.shape != F.shape or w.shape != (T.shape[0],):
        raise ValueError("T - diag(w) F: T is %s, F is %s and w has shape %s"
                         % (T.shape, F.shape, w.shape))
    if not (T.dtype == F.dtype == np.float64 and T.has_canonical_format
            and F.has_canonical_format):
        C = sp.csr_matrix(T - sp.diags(w) @ F)
        C.eliminate_zeros()
        C.sort_indices()
        return C
    m, n = T.shape
    idx = _index_dtype(T.nnz + F.nnz, m, n)
    t_ptr, t_ind, _ = _arrays(T, idx)
    f_ptr, f_ind, _ = _arrays(F, idx)
    cuts = _row_cuts(T.indptr.astype(np.int64) + F.indptr, threads)
    blocks = _threads.parallel_map(
        lambda b: subtract_scaled_rows(t_ptr, t_ind, T.data, f_ptr, f_ind, F.data, w,
                                       cuts[b], cuts[b + 1]), cuts.size - 1, threads)
    indptr, indices, data = _joined(blocks, threads)
    return _result((m, n), indptr, indices.view(idx), data)


def transpose(A, threads: int | None = None) -> sp.csr_matrix:
    """``A.T`` as scipy CSR, the same arrays as scipy's ``A.T.tocsr()``.

    Each row of the result lists its entries by increasing column (the rows
    of ``A`` they come from), duplicates of ``A`` kept. Blocks of ``A``'s
    rows are scattered on ``threads`` threads into places fixed by the
    blocks' column counts, so the result does not depend on their number.
    Not collective.

    Raises
    ------
    TypeError
        ``A`` is not a scipy sparse matrix.

    Examples
    --------
    >>> import numpy as np
    >>> import scipy.sparse as sp
    >>> from dmsolve.spgemm import transpose
    >>> A = sp.random(30, 20, density=0.2, format="csr", random_state=0)
    >>> bool(np.array_equal(transpose(A, threads=2).toarray(), A.T.toarray()))
    True
    """
    A = _csr(A, "A")
    m, n = A.shape
    idx = _index_dtype(A.nnz, m, n)
    ptr, ind, val = _arrays(A, idx)
    val = A.data
    cuts = _row_cuts(A.indptr, threads)
    nblocks = cuts.size - 1
    counts = np.zeros((nblocks, n), dtype=np.int64)
    _threads.parallel_for(lambda b: transpose_count(ptr, ind, cuts[b], cuts[b + 1], counts[b]),
                          nblocks, threads)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts.sum(axis=0), out=indptr[1:])
    # block b's entries of column c go after those of the blocks before it
    starts = indptr[:-1] + np.cumsum(counts, axis=0) - counts
    indices = np.empty(A.nnz, dtype=_index_dtype(m))
    data = np.empty(A.nnz, dtype=A.dtype)
    _threads.parallel_for(lambda b: transpose_fill(ptr, ind, val, cuts[b], cuts[b + 1],
                                                   starts[b], indices, data),
                          nblocks, threads)
    return _result((n, m), indptr, indices, data)
