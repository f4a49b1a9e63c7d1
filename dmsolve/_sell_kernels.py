"""Compiled products of a :class:`dmsolve._sell.SlicedEll` block.

Compiled on the first product and cached on disk next to this module.

The loops are written for numba's code generator as measured here (3D
Poisson 100^3, one core, AMD EPYC with AVX-512): indices are unsigned (a
signed index costs a negative-index check per access), and the lane loop
``for i in range(CHUNK)`` has a constant trip count, which LLVM unrolls into
``CHUNK`` independent multiply-add chains held in ``acc``. LLVM does not turn
them into SIMD instructions (``vmulsd``/``vaddsd`` on one double each; neither
the loop nor the SLP vectoriser fires, with ``NUMBA_SLP_VECTORIZE=1`` either:
``acc`` may alias ``x`` and ``y`` for all LLVM can tell). What pays is the
memory side: a run slot reads ``CHUNK`` consecutive values of ``x`` with no
column index at all.

Not collective; nothing is allocated per call.
"""

from __future__ import annotations

import numpy as np

from .jit import njit

__all__ = ["CHUNK", "sell_layout", "sell_fill", "sell_matvec", "sell_matvec_chunks",
           "sell_rmatvec_add", "sell_count_columns", "sell_transpose_fill"]

#: Rows per chunk. Measured on 3D Poisson 100^3 (one core): 16 rows
#: 4.6 ms, 32 rows 3.6 ms, 64 rows 2.8 ms per product (scipy CSR 6.9 ms).
CHUNK = 64
_C = np.uint64(CHUNK)


@njit(cache=True, nogil=True)
def sell_layout(indptr, indices, ncols, run_offsets, nrun, ngather):  # pragma: no cover
    """Pass 1 of the conversion from CSR (sorted indices): for each chunk,
    its run slots' offsets ``col - row`` (ascending, into ``run_offsets``
    from position ``sum(nrun[:k])``; room for ``nnz`` of them), how many
    (``nrun[k]``) and how many gathered slots it needs (``ngather[k]``).
    An offset makes a run slot when at least 2/3 of the chunk's ``CHUNK``
    lanes have it and its run ``first .. first + CHUNK - 1`` of columns lies
    within ``[0, ncols)``. Returns the number of run offsets. Not collective."""
    n = indptr.shape[0] - 1
    C = CHUNK
    nchunks = (n + C - 1) // C
    total = 0
    for k in range(nchunks):
        r0 = k * C
        r1 = min(n, r0 + C)
        lo, hi = indptr[r0], indptr[r1]
        offs = np.empty(hi - lo, np.int64)
        for r in range(r0, r1):
            for e in range(indptr[r], indptr[r + 1]):
                offs[e - lo] = np.int64(indices[e]) - r
        offs.sort()
        start = total
        i = 0
        m = offs.shape[0]
        while i < m:
            j = i
            while j < m and offs[j] == offs[i]:
                j += 1
            first = r0 + offs[i]
            if 3 * (j - i) >= 2 * C and first >= 0 and first + C <= ncols:
                run_offsets[total] = offs[i]
                total += 1
            i = j
        nrun[k] = total - start
        # the entries left over, per row: the chunk's gathered slots
        width = 0
        for r in range(r0, r1):
            left = 0
            for e in range(indptr[r], indptr[r + 1]):
                d = np.int64(indices[e]) - r
                if _find(run_offsets, start, total, d) < 0:
                    left += 1
            width = max(width, left)
        ngather[k] = width
    return total


@njit(cache=True, nogil=True, inline="always")
def _find(sorted_values, lo, end, value):  # pragma: no cover
    """The position of ``value`` in ``sorted_values[lo:end]``, or -1 (a
    binary search)."""
    hi = end
    while lo < hi:
        mid = (lo + hi) // 2
        if sorted_values[mid] < value:
            lo = mid + 1
        else:
            hi = mid
    return lo if lo < end and sorted_values[lo] == value else -1


@njit(cache=True, nogil=True)
def sell_fill(indptr, indices, data, run_offsets, nrun, slot_ptr, run_col, gather_ptr,
              gather_col, vals):  # pragma: no cover
    """Pass 2: the slots of every chunk from the layout of :func:`sell_layout`
    (``vals`` and ``gather_col`` zeroed, ``run_col`` -1 on entry). Not collective."""
    n = indptr.shape[0] - 1
    C = CHUNK
    nchunks = slot_ptr.shape[0] - 1
    rstart = 0
    g = 0
    for k in range(nchunks):
        r0 = k * C
        s0 = slot_ptr[k]
        nr = nrun[k]
        for t in range(nr):
            run_col[s0 + t] = r0 + run_offsets[rstart + t]
        for s in range(s0 + nr, slot_ptr[k + 1]):
            gather_ptr[s] = g
            g += C
        for r in range(r0, min(n, r0 + C)):
            lane = r - r0
            j = 0
            for e in range(indptr[r], indptr[r + 1]):
                d = np.int64(indices[e]) - r
                t = _find(run_offsets, rstart, rstart + nr, d)    # the run slot of offset d
                if t >= 0:
                    vals[(s0 + t - rstart) * C + lane] = data[e]
                else:
                    s = s0 + nr + j
                    vals[s * C + lane] = data[e]
                    gather_col[gather_ptr[s] + lane] = indices[e]
                    j += 1
        rstart += nr


@njit(cache=True, nogil=True, boundscheck=False)
def sell_matvec(nrows, slot_ptr, run_col, gather_ptr, gather_col, vals, x, y,
                acc):  # pragma: no cover
    """``y = B @ x`` over the chunks of a sliced-ELL block (every row of
    ``y`` written). ``acc`` is work of ``CHUNK`` float64. Not collective."""
    sell_matvec_chunks(0, slot_ptr.shape[0] - 1, nrows, slot_ptr, run_col, gather_ptr,
                       gather_col, vals, x, y, acc)


@njit(cache=True, nogil=True, boundscheck=False)
def sell_rmatvec_add(nrows, slot_ptr, run_col, gather_ptr, gather_col, vals, y,
                     x):  # pragma: no cover
    """``x += B^T y`` over the chunks of a sliced-ELL block. Not collective."""
    nchunks = slot_ptr.shape[0] - 1
    for k in range(nchunks):
        r = np.uint64(k) * _C
        m = min(_C, np.uint64(nrows) - r)
        for s in range(slot_ptr[k], slot_ptr[k + 1]):
            o = np.uint64(s) * _C
            c = run_col[s]
            if c >= 0:
                cu = np.uint64(c)
                for i in range(m):
                    x[cu + i] += vals[o + i] * y[r + i]
            else:
                q = np.uint64(gather_ptr[s])
                for i in range(m):
                    x[np.uint64(gather_col[q + i])] += vals[o + i] * y[r + i]


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def sell_matvec_chunks(k0, k1, nrows, slot_ptr, run_col, gather_ptr, gather_col, vals, x, y,
                       acc):  # pragma: no cover
    """``y = B @ x`` over chunks ``k0 .. k1 - 1`` only (the rows of a block
    of a threaded product; :func:`sell_matvec` runs all of them): each row is
    summed in the same order whatever the block, so the rows of ``y`` are
    the same bits. ``acc`` is the block's own ``CHUNK`` float64.
    Not collective."""
    for k in range(k0, k1):
        for i in range(_C):
            acc[i] = 0.0
        for s in range(slot_ptr[k], slot_ptr[k + 1]):
            o = np.uint64(s) * _C
            c = run_col[s]
            if c >= 0:
                cu = np.uint64(c)
                for i in range(_C):
                    acc[i] += vals[o + i] * x[cu + i]
            else:
                q = np.uint64(gather_ptr[s])
                for i in range(_C):
                    acc[i] += vals[o + i] * x[np.uint64(gather_col[q + i])]
        r = np.uint64(k) * _C
        m = min(_C, np.uint64(nrows) - r)
        for i in range(m):
            y[r + i] = acc[i]


@njit(cache=True, nogil=True, boundscheck=False)
def sell_count_columns(nrows, slot_ptr, run_col, gather_ptr, gather_col,
                       counts):  # pragma: no cover
    """``counts[c] += 1`` for every term :func:`sell_rmatvec_add` adds into
    ``x[c]`` (padding lanes of real rows included). Not collective."""
    nchunks = slot_ptr.shape[0] - 1
    for k in range(nchunks):
        r = np.uint64(k) * _C
        m = min(_C, np.uint64(nrows) - r)
        for s in range(slot_ptr[k], slot_ptr[k + 1]):
            c = run_col[s]
            if c >= 0:
                for i in range(m):
                    counts[np.uint64(c) + i] += 1
            else:
                q = np.uint64(gather_ptr[s])
                for i in range(m):
                    counts[np.uint64(gather_col[q + i])] += 1


@njit(cache=True, nogil=True, boundscheck=False)
def sell_transpose_fill(nrows, slot_ptr, run_col, gather_ptr, gather_col, vals, next_pos,
                        out_indices, out_data):  # pragma: no cover
    """The terms of :func:`sell_rmatvec_add` placed by column in the order it
    adds them (a stable counting sort; ``next_pos`` as in
    :func:`dmsolve._narrow_kernels.narrow_transpose_fill`). Not collective."""
    nchunks = slot_ptr.shape[0] - 1
    for k in range(nchunks):
        r = np.uint64(k) * _C
        m = min(_C, np.uint64(nrows) - r)
        for s in range(slot_ptr[k], slot_ptr[k + 1]):
            o = np.uint64(s) * _C
            c = run_col[s]
            q = np.uint64(gather_ptr[s])
            for i in range(m):
                col = np.uint64(c) + i if c >= 0 else np.uint64(gather_col[q + i])
                p = next_pos[col]
                out_indices[p] = r + i
                out_data[p] = vals[o + i]
                next_pos[col] = p + 1
