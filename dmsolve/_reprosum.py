"""Exact sums of float64 numbers: the same bits whatever the order and the partition.

A float64 number is an integer mantissa ``M < 2**53`` times ``2**(s - 1074)``
with ``0 <= s <= 2046``. Its exact value is deposited, as three signed
32-bit pieces, into a fixed-point accumulator of :data:`NBINS` int64 bins,
bin ``b`` worth ``2**(32 b - 1074)``: no rounding happens anywhere, so the
accumulator holds the exact sum of the numbers deposited, and adding two
accumulators bin by bin (``MPI.SUM`` on int64) is exact and associative.
The float64 result is rounded once, to nearest, from the exact total
(Python's integer division is correctly rounded). The sum therefore
depends neither on the order of the numbers nor on how they are split
between ranks: it is the exactly rounded sum of the (rounded) products,
as an exact superaccumulator (Kulisch; ExBLAS, Collange et al. 2015)
computes it.

Overflow: a bin takes at most ``2**33`` per deposit, so a rank may deposit
``2**29`` numbers (half a billion) per accumulator before
:func:`normalize`; :func:`normalize` brings every bin but the top into
``[0, 2**32)``, so ``2**30`` ranks can add their accumulators. Infinities
and NaNs are counted in three extra slots and give the IEEE result (NaN
for ``inf - inf``). Two more slots keep the sign of a zero total as IEEE
addition gives it: ``-0.0`` when every term is ``-0.0``, else ``+0.0``.

The kernels are compiled by numba on their first call and cached next to
this module. Not collective.
"""

from __future__ import annotations

import math

import numpy as np
from mpi4py import MPI

from .jit import njit

__all__ = ["NBINS", "WIDTH", "CHUNK", "accumulators", "dot_into", "sum_into", "dots_into",
           "dot2_into", "update_dot_into", "normalize", "to_float", "exact_sum", "exact_dot", "canonical_rows", "canonical_sell",
           "SLICE", "exact_dots", "merge_rows_by_key", "slice_slots", "fill_slices",
           "slot_runs"]

#: Fixed-point bins per accumulator (64 for the exponent range, 3 for the
#: pieces of the largest numbers, 1 for a carry).
NBINS = 68
#: int64 words per accumulator: the bins, then counts of +inf, -inf and NaN,
#: then of chunks holding a term that is not ``-0.0`` and of ``-0.0`` terms in
#: chunks of zeros only (the sign of a zero total).
WIDTH = NBINS + 5
#: Slots of the sign of a zero total (see :data:`WIDTH`).
_NOT_NEGZERO = NBINS + 3
_NEGZERO = NBINS + 4
_MASK = (1 << 32) - 1


def accumulators(k: int) -> np.ndarray:
    """``k`` zero accumulators, shape ``(k, WIDTH)`` int64. Not collective."""
    return np.zeros((k, WIDTH), dtype=np.int64)


#: Entries per chunk: each exponent's bucket adds at most CHUNK mantissas
#: (< 2**53 each) before it is flushed into the bins, so it stays < 2**62.
CHUNK = 512


@njit(cache=True, nogil=True, boundscheck=False)
def _flush(acc, bucket, lo, hi):  # pragma: no cover
    """Move the buckets ``lo..hi`` (signed mantissa sums ``v``, each worth
    ``v * 2**(e - 1075)``) into the bins of ``acc`` exactly; zero them."""
    for e in range(lo, hi + 1):
        v = bucket[e]
        if v == 0:
            continue
        bucket[e] = 0
        s = e - 1
        b = s >> 5
        r = s & 31
        a = -v if v < 0 else v            # < 2**62
        t0 = (a & 0xFFFFFFFF) << r        # < 2**63
        t1 = (a >> 32) << r               # < 2**61
        p0 = t0 & 0xFFFFFFFF
        p1 = (t0 >> 32) + (t1 & 0xFFFFFFFF)
        p2 = t1 >> 32
        if v < 0:
            acc[b] -= p0
            acc[b + 1] -= p1
            acc[b + 2] -= p2
        else:
            acc[b] += p0
            acc[b + 1] += p1
            acc[b + 2] += p2


@njit(cache=True, nogil=True, boundscheck=False)
def _special(acc, vals, m):  # pragma: no cover
    """Count the infinities and NaNs among ``vals[:m]``."""
    for i in range(m):
        v = vals[i]
        if v != v:
            acc[NBINS + 2] += 1
        elif v == np.inf:
            acc[NBINS] += 1
        elif v == -np.inf:
            acc[NBINS + 1] += 1


@njit(cache=True, nogil=True, boundscheck=False)
def _zeros(acc, vals, m):  # pragma: no cover
    """Count the ``-0.0`` and the ``+0.0`` among ``vals[:m]``, all zeros."""
    bits = vals.view(np.int64)
    neg = 0
    for i in range(m):
        neg += bits[i] < 0
    acc[_NEGZERO] += neg
    acc[_NOT_NEGZERO] += m - neg


@njit(cache=True, nogil=True, boundscheck=False)
def _deposit_chunk(acc, vals, m, bucket):  # pragma: no cover
    """Deposit ``vals[:m]`` (m <= CHUNK): each mantissa, signed, goes into the
    bucket of its exponent (no branch on the data), then the buckets touched
    are flushed into ``acc``."""
    bits = vals.view(np.int64)
    lo = 2047
    hi = 0
    special = False
    for i in range(m):
        w = bits[i]
        ex = (w >> 52) & 0x7FF
        normal = ex != 0
        e = ex if normal else 1           # a subnormal is m * 2**(1 - 1075)
        man = (w & 0xFFFFFFFFFFFFF) | (np.int64(normal) << 52)
        sgn = w >> 63                     # 0 or -1
        bucket[e] += (man ^ sgn) - sgn
        lo = min(lo, e)
        hi = max(hi, e)
        special |= ex == 0x7FF
    if special:
        bucket[0x7FF] = 0
        _special(acc, vals, m)
    _flush(acc, bucket, lo, min(hi, 0x7FE))


@njit(inline="always", boundscheck=False)
def _range_bits(vals, m):  # pragma: no cover
    # the largest |v| and the smallest nonzero |v| as IEEE bits (integers
    # order finite |v| alike); the smallest is 2**63 - 1 if all are zero
    bits = vals.view(np.int64)
    top = 0
    low = 0x7FFFFFFFFFFFFFFF
    for i in range(m):
        b = bits[i] & 0x7FFFFFFFFFFFFFFF
        top = max(top, b)
        low = min(low, b if b != 0 else 0x7FFFFFFFFFFFFFFF)
    return top, low


@njit(inline="always", boundscheck=False)
def _extract2(vals, m, s1, s2, q):  # pragma: no cover
    # v = q[0] + q[1] exactly, for numbers at most 2**32 below the largest
    for i in range(m):
        v = vals[i]
        a = (v + s1) - s1
        v = v - a
        q[0, i] = a
        q[1, i] = v


@njit(inline="always", boundscheck=False)
def _extract(vals, m, s1, s2, s3, q):  # pragma: no cover
    # v = q[0] + q[1] + q[2] + rest, each step error-free; the rest stays in
    # vals; returns whether any rest is not zero
    rest = 0
    bits = vals.view(np.int64)
    for i in range(m):
        v = vals[i]
        a = (v + s1) - s1
        v = v - a
        b = (v + s2) - s2
        v = v - b
        c = (v + s3) - s3
        q[0, i] = a
        q[1, i] = b
        q[2, i] = c
        vals[i] = v - c
        rest |= bits[i] & 0x7FFFFFFFFFFFFFFF
    return rest != 0


# fastmath lets the additions be reordered (and run in SIMD lanes): every
# partial sum of these parts is exact (see _fast_chunk), so any order gives
# the same number; the parts are finite
@njit(cache=True, nogil=True, fastmath=True, boundscheck=False)
def _exact_total(q, m):  # pragma: no cover
    s = 0.0
    for i in range(m):
        s += q[i]
    return s


@njit(cache=True, nogil=True, boundscheck=False)
def _fast_chunk(acc, vals, m, bucket, q, buf):  # pragma: no cover
    """Deposit ``vals[:m]`` (``m <= CHUNK``) exactly, mostly without the buckets.

    With every ``|v| < 2**e``, three error-free extractions (Rump, Ogita &
    Oishi 2008) split each ``v`` into parts on the grids of ``u1 =
    2**(e-42)``, ``u2 = 2**(e-85)`` and ``u3 = 2**(e-128)`` plus a rest:
    ``(v + s) - s`` with ``s = 1.5 * 2**k`` rounds ``v`` to a multiple of
    ``2**(k-52)`` exactly, and ``v`` minus it is exact. A part has at most
    43 bits on its grid, so 512 of them and every partial sum are exact in
    float64, in any order. The three totals then go to the buckets, and so
    does any rest (only numbers below ``2**(e-75)`` leave one). A chunk with
    an infinity, a NaN or an extreme exponent takes the bucket path for
    every number."""
    top, low = _range_bits(vals, m)
    if top == 0:
        _zeros(acc, vals, m)
        return
    # a term that is not a zero: a zero total is +0.0, as IEEE addition gives
    acc[_NOT_NEGZERO] += 1
    e = (top >> 52) - 1022                # max |v| < 2**e
    if e > 1000 or e < -900:              # inf, NaN, near overflow or underflow
        _deposit_chunk(acc, vals, m, bucket)
        return
    if (low >> 52) - 1022 >= e - 31:
        # every nonzero |v| is 2**(e-32) or more, so its last bit is
        # 2**(e-84) or more: after one part on the grid of 2**(e-42) the rest
        # of each is below 2**(e-43) on the grid of 2**(e-84), 41 bits, and
        # the rests add up exactly too (two parts, no third, no buckets)
        _extract2(vals, m, math.ldexp(1.5, e + 10), 0.0, q)
        buf[0] = _exact_total(q[0], m)
        buf[1] = _exact_total(q[1], m)
        _deposit_chunk(acc, buf, 2, bucket)
        return
    rest = _extract(vals, m, math.ldexp(1.5, e + 10), math.ldexp(1.5, e - 33),
                    math.ldexp(1.5, e - 76), q)
    buf[0] = _exact_total(q[0], m)
    buf[1] = _exact_total(q[1], m)
    buf[2] = _exact_total(q[2], m)
    _deposit_chunk(acc, buf, 3, bucket)
    if rest:
        _deposit_chunk(acc, vals, m, bucket)


@njit(cache=True, nogil=True, boundscheck=False)
def dot_into(x, y, acc):  # pragma: no cover
    """Deposit the products ``x[i] * y[i]`` (each rounded to float64) in ``acc``."""
    n = x.shape[0]
    vals = np.empty(CHUNK, dtype=np.float64)
    buf = np.empty(3, dtype=np.float64)
    q = np.empty((3, CHUNK), dtype=np.float64)
    bucket = np.zeros(2048, dtype=np.int64)
    for start in range(0, n, CHUNK):
        m = min(CHUNK, n - start)
        for i in range(m):
            vals[i] = x[start + i] * y[start + i]
        _fast_chunk(acc, vals, m, bucket, q, buf)


@njit(cache=True, nogil=True, boundscheck=False)
def sum_into(x, acc):  # pragma: no cover
    """Deposit the entries of ``x`` in ``acc``."""
    n = x.shape[0]
    vals = np.empty(CHUNK, dtype=np.float64)
    bucket = np.zeros(2048, dtype=np.int64)
    buf = np.empty(3, dtype=np.float64)
    q = np.empty((3, CHUNK), dtype=np.float64)
    for start in range(0, n, CHUNK):
        m = min(CHUNK, n - start)
        vals[:m] = x[start:start + m]
        _fast_chunk(acc, vals, m, bucket, q, buf)


@njit(cache=True, nogil=True, boundscheck=False)
def dots_into(V, w, acc):  # pragma: no cover
    """Deposit ``V[j, i] * w[i]`` in ``acc[j]`` for every row ``j`` of ``V``."""
    n = w.shape[0]
    vals = np.empty(CHUNK, dtype=np.float64)
    buf = np.empty(3, dtype=np.float64)
    q = np.empty((3, CHUNK), dtype=np.float64)
    bucket = np.zeros(2048, dtype=np.int64)
    for j in range(V.shape[0]):
        a = acc[j]
        for start in range(0, n, CHUNK):
            m = min(CHUNK, n - start)
            for i in range(m):
                vals[i] = V[j, start + i] * w[start + i]
            _fast_chunk(a, vals, m, bucket, q, buf)


@njit(cache=True, nogil=True, boundscheck=False)
def dot2_into(a, b, c, d, acc0, acc1):  # pragma: no cover
    """Deposit ``a[i] * b[i]`` in ``acc0`` and ``c[i] * d[i]`` in ``acc1`` in
    one pass over the four arrays (some may be the same): the two inner
    products of an iteration cost one read of each vector, not two. Each
    accumulator gets exactly what :func:`dot_into` would deposit."""
    n = a.shape[0]
    v0 = np.empty(CHUNK, dtype=np.float64)
    v1 = np.empty(CHUNK, dtype=np.float64)
    buf = np.empty(3, dtype=np.float64)
    q = np.empty((3, CHUNK), dtype=np.float64)
    bucket = np.zeros(2048, dtype=np.int64)
    for start in range(0, n, CHUNK):
        m = min(CHUNK, n - start)
        for i in range(m):
            v0[i] = a[start + i] * b[start + i]
            v1[i] = c[start + i] * d[start + i]
        _fast_chunk(acc0, v0, m, bucket, q, buf)
        _fast_chunk(acc1, v1, m, bucket, q, buf)


@njit(cache=True, nogil=True, boundscheck=False)
def update_dot_into(alpha, p, q, x, r, acc):  # pragma: no cover
    """``x += alpha p; r -= alpha q`` entry by entry (each product rounded
    before its sum, as numpy rounds them), depositing the new ``r[i] * r[i]``
    in ``acc`` chunk by chunk while the chunk is in cache: CG's update and
    its exact ``r^T r`` in one pass over memory."""
    n = r.shape[0]
    vals = np.empty(CHUNK, dtype=np.float64)
    buf = np.empty(3, dtype=np.float64)
    parts = np.empty((3, CHUNK), dtype=np.float64)
    bucket = np.zeros(2048, dtype=np.int64)
    for start in range(0, n, CHUNK):
        m = min(CHUNK, n - start)
        for i in range(m):
            k = start + i
            x[k] += alpha * p[k]
            rk = r[k] - alpha * q[k]
            r[k] = rk
            vals[i] = rk * rk
        _fast_chunk(acc, vals, m, bucket, parts, buf)


@njit(cache=True, nogil=True, boundscheck=False)
def normalize(acc):  # pragma: no cover
    """Carry every bin but the top into ``[0, 2**32)``, in place, keeping the
    value: before an accumulator is added to others. Rows of a 2-D array
    are normalised one by one."""
    for j in range(acc.shape[0]):
        carry = 0
        for b in range(NBINS - 1):
            t = acc[j, b] + carry
            carry = t >> 32                # floor division: t - (carry << 32) >= 0
            acc[j, b] = t & 0xFFFFFFFF
        acc[j, NBINS - 1] += carry


def to_float(acc: np.ndarray) -> float:
    """The exact total of one accumulator, rounded once to the nearest float64
    (ties to even); ``inf``, ``-inf``, NaN and the sign of a zero as IEEE
    arithmetic gives them (``-0.0`` only if every term is ``-0.0``).
    Not collective."""
    pinf, ninf, nan = (int(v) for v in acc[NBINS:NBINS + 3])
    if nan or (pinf and ninf):
        return math.nan
    if pinf:
        return math.inf
    if ninf:
        return -math.inf
    total = 0
    for b in range(NBINS - 1, -1, -1):
        total = (total << 32) + int(acc[b])
    if total == 0:
        return -0.0 if acc[_NEGZERO] and not acc[_NOT_NEGZERO] else 0.0
    try:
        return total / (1 << 1074)
    except OverflowError:
        return math.inf if total > 0 else -math.inf


def exact_sum(x) -> float:
    """The correctly rounded sum of the float64 entries of ``x`` (as
    ``math.fsum``; ``-0.0`` if every entry is ``-0.0``, as IEEE addition
    gives it, and ``0.0`` for no entries). Not collective."""
    acc = accumulators(1)
    sum_into(np.ascontiguousarray(x, dtype=np.float64), acc[0])
    return to_float(acc[0])


def exact_dot(x, y) -> float:
    """The correctly rounded sum of the rounded products ``x[i] * y[i]``.
    Not collective."""
    acc = accumulators(1)
    dot_into(np.ascontiguousarray(x, dtype=np.float64),
             np.ascontiguousarray(y, dtype=np.float64), acc[0])
    return to_float(acc[0])


@njit(cache=True, nogil=True, boundscheck=False)
def canonical_rows(indptr, indices, data, x, y):  # pragma: no cover
    """``y[i] = sum_j data[j] * x[indices[j]]`` over row ``i``'s entries in
    their stored order, from 0: one fixed order per row (the caller stores
    the rows sorted by canonical column key). Indices are unsigned; long rows
    run faster here than in :func:`canonical_sell` (the next rows' chains
    overlap in the processor), short ones slower."""
    for i in range(y.shape[0]):
        s = 0.0
        for j in range(np.uint64(indptr[i]), np.uint64(indptr[i + 1])):
            s += data[j] * x[np.uint64(indices[j])]
        y[i] = s


def exact_dots(comm, pairs) -> list[float]:
    """``[sum over ranks of x^T y for (x, y) in pairs]``, each exactly
    rounded, in one ``Allreduce`` of int64 accumulators. Collective on
    ``comm``."""
    acc = accumulators(len(pairs))
    for j, (x, y) in enumerate(pairs):
        dot_into(x, y, acc[j])
    normalize(acc)
    out = np.empty_like(acc)
    comm.Allreduce(acc, out, op=MPI.SUM)
    return [to_float(out[j]) for j in range(len(pairs))]


#: Rows per slice of :func:`canonical_sell`.
SLICE = 64
_USLICE = np.uint64(SLICE)


@njit(cache=True, nogil=True, boundscheck=False)
def _gather_slot(acc, data, idx, x, g, o):  # pragma: no cover
    # one slot that is not a run: column j is x[j] below len(x), else
    # g[j - len(x)]; out of line, so that the run loop's code stays lean
    # (inlined, it cost the whole product 12%)
    n = np.uint64(x.shape[0])
    for r in range(_USLICE):
        j = np.uint64(idx[o + r])
        v = x[j] if j < n else g[j - n]
        acc[r] += data[o + r] * v


@njit(cache=True, nogil=True, boundscheck=False)
def canonical_sell(s0, s1, nrows, start, width, run, rows, permuted, data, idx, x, g, y,
                   acc):  # pragma: no cover
    """The products of :func:`canonical_rows`, bit for bit, from slices of
    :data:`SLICE` rows stored slot by slot: place ``r`` of slice ``s``
    computes row ``rows[s*SLICE + r]`` of ``y`` (row ``s*SLICE + r`` unless
    ``permuted``) and adds the entry of its slot ``j`` at ``data[start[s] +
    j*SLICE + r]``, slots in the order of the row's entries. Each row's chain
    is its own, from 0 (a slice's chains run side by side, in ``acc``).
    Column ``c`` is ``x[c]`` below ``len(x)``, else ``g[c - len(x)]`` (the
    ghosts, then a 1): an empty slot is ``-0.0`` times that 1, and adding
    ``-0.0`` changes no number (not even the sign of a zero). ``run[k]`` is
    the first column of slot ``k`` when its columns are consecutive and in
    ``x`` (read without a gather), else -1; indices are unsigned (numba then
    adds no wraparound test). Computes slices ``s0`` to ``s1 - 1``."""
    # every index is unsigned (a signed lane index mixed with the unsigned
    # offsets keeps the run loop from being vectorised: 3x slower)
    C = _USLICE
    one = np.uint64(1)
    for s in range(s0, s1):
        o = np.uint64(start[s])
        for r in range(C):
            acc[r] = 0.0
        k = o // C
        for _ in range(width[s]):
            c = run[k]
            if c >= 0:
                cu = np.uint64(c)
                for r in range(C):
                    acc[r] += data[o + r] * x[cu + r]
            else:
                _gather_slot(acc, data, idx, x, g, o)
            o += C
            k += one
        first = np.uint64(s) * C
        m = min(C, np.uint64(nrows) - first)
        if permuted:
            for r in range(m):
                y[rows[first + r]] = acc[r]
        else:
            for r in range(m):
                y[first + r] = acc[r]


@njit(cache=True, nogil=True, boundscheck=False)
def merge_rows_by_key(dptr, dkey, optr, okey, out_ptr, out_pos, out_key):  # pragma: no cover
    """Merge each row's entries of two CSR blocks and sort them by key.

    Row ``i`` takes the entries ``dptr[i]:dptr[i+1]`` of the first block
    (keys ``dkey``), then those of the second (keys ``okey``), and orders
    them by key, equal keys in that order (a stable sort: what
    ``np.lexsort((keys, rows))`` gives over the two blocks one after the
    other). ``out_pos[k]`` is where entry ``k`` of the merged
    row came from: ``j`` for the first block's entry ``j``, ``dptr[-1] + j``
    for the second's. ``out_ptr`` (``nrows + 1``) and ``out_key`` are
    filled too; the caller takes the columns and values through ``out_pos``.
    Rows are short, so an insertion sort (stable) runs in place."""
    nd = dptr[dptr.shape[0] - 1]
    k = 0
    out_ptr[0] = 0
    for i in range(dptr.shape[0] - 1):
        first = k
        for j in range(dptr[i], dptr[i + 1]):
            out_pos[k] = j
            out_key[k] = dkey[j]
            k += 1
        for j in range(optr[i], optr[i + 1]):
            out_pos[k] = nd + j
            out_key[k] = okey[j]
            k += 1
        for a in range(first + 1, k):
            key = out_key[a]
            pos = out_pos[a]
            b = a - 1
            while b >= first and out_key[b] > key:
                out_key[b + 1] = out_key[b]
                out_pos[b + 1] = out_pos[b]
                b -= 1
            out_key[b + 1] = key
            out_pos[b + 1] = pos
        out_ptr[i + 1] = k


@njit(cache=True, nogil=True, boundscheck=False)
def slice_slots(indptr, perm, col_keys, row_keys, slot, width, aligned):  # pragma: no cover
    """The slots of :func:`canonical_sell`'s slices: place ``p`` of slice
    ``p // SLICE`` computes row ``perm[p]``. An entry's offset is its
    column's key (``col_keys``, one per entry) minus its row's key. A slice
    whose distinct offsets are no more than its longest row is *aligned*:
    an entry's slot is the rank of its offset among the slice's distinct
    offsets; otherwise the entry's place in its row. Fills ``slot`` (per
    entry), ``width`` (slots per slice) and ``aligned`` (per slice)."""
    m = perm.shape[0]
    for s in range(width.shape[0]):
        lo = s * SLICE
        hi = min(m, lo + SLICE)
        count = 0
        longest = 0
        for p in range(lo, hi):
            i = perm[p]
            count += indptr[i + 1] - indptr[i]
            longest = max(longest, indptr[i + 1] - indptr[i])
        uniq = np.empty(count, dtype=np.int64)
        k = 0
        for p in range(lo, hi):
            i = perm[p]
            for j in range(indptr[i], indptr[i + 1]):
                uniq[k] = col_keys[j] - row_keys[i]
                k += 1
        uniq.sort()
        nu = 0
        for t in range(count):
            if t == 0 or uniq[t] != uniq[nu - 1]:
                uniq[nu] = uniq[t]
                nu += 1
        al = nu <= longest
        aligned[s] = al
        width[s] = nu if al else longest
        for p in range(lo, hi):
            i = perm[p]
            for j in range(indptr[i], indptr[i + 1]):
                if al:
                    slot[j] = np.searchsorted(uniq[:nu], col_keys[j] - row_keys[i])
                else:
                    slot[j] = j - indptr[i]


@njit(cache=True, nogil=True, boundscheck=False)
def fill_slices(indptr, perm, slot, start, data, indices, sdata, sidx):  # pragma: no cover
    """Put entry ``j`` of row ``perm[p]`` at ``start[s] + slot[j] * SLICE + r``
    (``p = s * SLICE + r``) of ``sdata`` and ``sidx``."""
    for p in range(perm.shape[0]):
        i = perm[p]
        base = start[p // SLICE] + p % SLICE
        for j in range(indptr[i], indptr[i + 1]):
            d = base + slot[j] * SLICE
            sdata[d] = data[j]
            sidx[d] = indices[j]


@njit(cache=True, nogil=True, boundscheck=False)
def slot_runs(sidx, one, n_owned, run):  # pragma: no cover
    """``run[g]``: the first column ``c`` of slot ``g`` (entries
    ``sidx[g*SLICE:(g+1)*SLICE]``) when every real entry (not ``one``, the
    padding) of place ``r`` is column ``c + r`` and ``c .. c + SLICE - 1``
    are owned columns (below ``n_owned``); else -1."""
    for g in range(run.shape[0]):
        base = g * SLICE
        lo = np.int64(0)
        hi = np.int64(0)
        real = False
        for r in range(SLICE):
            v = np.int64(sidx[base + r])
            if v != one:
                d = v - r
                if not real:
                    lo = d
                    hi = d
                    real = True
                else:
                    lo = min(lo, d)
                    hi = max(hi, d)
        ok = real and lo == hi and lo >= 0 and lo + SLICE <= n_owned
        run[g] = lo if ok else -1
