"""Local sorting primitives faster than their numpy spellings on large arrays.

- :func:`sorted_unique`: numpy 2.3 and later answer a plain ``np.unique(a)``
  (no ``return_*``) from a hash table, which on many distinct int64 values is
  two orders of magnitude slower than sorting: 1.5 s against 17 ms for 1.4
  million random int64 here (numpy 2.4.6), and the sweeps, the BSP layer and
  matrix assembly call it on arrays of that size.
- :func:`stable_argsort`: ``np.argsort(a, kind="stable")`` is a timsort (a
  radix sort only for 8- and 16-bit keys); ``np.sort`` of int64 is a SIMD
  quicksort, ten times faster. Integer keys are packed with their index into
  one int64, whose values are distinct, so any sort of them is stable.
- :func:`search_sorted`: ``np.searchsorted`` of many unsorted queries misses
  the cache at every step of every binary search; sorted queries walk the
  haystack in order (0.32 s against 0.05 s with the sort, for a million
  queries into 700,000 keys).

:func:`isin_sorted` is ``np.isin`` against a sorted set, by :func:`search_sorted`.
All give exactly numpy's answer.
"""

from __future__ import annotations

import numpy as np

from ._merge_kernel import merge_search

__all__ = ["sorted_unique", "stable_argsort", "search_sorted", "isin_sorted"]

#: Below this many entries the numpy spellings are used as they are.
_SMALL = 4096


def sorted_unique(a) -> np.ndarray:
    """``np.unique(a)`` (sorted distinct values, flattened) by one sort for
    integer and boolean arrays; other dtypes go to ``np.unique``. Not collective."""
    a = np.asarray(a)
    if a.dtype.kind not in "iub":
        return np.unique(a)
    s = np.sort(a, axis=None)
    if s.size < 2:
        return s
    keep = np.empty(s.size, dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def _packed_order(a: np.ndarray, lo: int, bits: int) -> np.ndarray:
    """The stable order of integer ``a`` whose values minus ``lo`` are below
    ``2**(63 - bits)``, ``bits`` enough for the largest index: values and
    indices packed into one int64 and sorted, in place (two arrays of
    ``a.size`` int64 at most). Not collective."""
    packed = a.astype(np.int64)                 # a copy
    packed -= lo
    packed <<= bits
    packed |= np.arange(a.size, dtype=np.int64)
    packed.sort()
    packed &= (np.int64(1) << bits) - 1
    return packed


def stable_argsort(a) -> np.ndarray:
    """``np.argsort(a, kind="stable")`` of a 1-D integer, boolean or float
    array, faster on large arrays; the same int64 indices. Not collective.

    Integer keys whose span times the size fits in 63 bits are packed with
    their index and sorted by ``np.sort``. Other integer keys and floats
    (mapped to int64 in the same order, ``-0.0`` equal to ``0.0``) take an
    unstable argsort, which is the stable order when no two keys are equal;
    with ties (or NaNs) they go to numpy's stable sort. At most three
    arrays of ``a.size`` int64 are alive at once, as with numpy's timsort
    and its buffer.
    """
    a = np.asarray(a)
    if a.ndim != 1 or a.size < _SMALL or a.dtype.kind not in "iubf" \
            or (a.dtype.kind != "f" and a.dtype.itemsize <= 2):
        return np.argsort(a, kind="stable")        # small, or numpy's radix sort
    bits = max(int(a.size - 1).bit_length(), 1)
    if a.dtype.kind == "f":
        if np.isnan(a).any():
            return np.argsort(a, kind="stable")
        key = np.add(a, 0.0, dtype=np.float64).view(np.int64)    # -0.0 + 0.0 is 0.0
        flip = key >> 63                        # negative floats: reverse their bits' order
        flip &= np.int64(0x7FFFFFFFFFFFFFFF)
        key ^= flip
        del flip
    elif a.dtype.kind == "u" and a.dtype.itemsize == 8 and int(a.max()) >= 2 ** 63:
        return np.argsort(a, kind="stable")
    else:
        lo, hi = int(a.min()), int(a.max())
        if (hi - lo).bit_length() + bits <= 63:
            return _packed_order(a, lo, bits)
        key = a.astype(np.int64)
    order = np.argsort(key)
    key.sort()
    tie = np.equal(key[1:], key[:-1])
    if not tie.any():
        return order
    del key, order, tie
    return np.argsort(a, kind="stable")


def search_sorted(haystack, queries, side: str = "left") -> np.ndarray:
    """``np.searchsorted(haystack, queries, side)`` of a sorted 1-D array,
    faster for many integer queries: they are sorted first (packed with
    their index, as in :func:`stable_argsort`), searched in order and the
    answers put back. Mixed dtypes compare as numpy compares them, in
    ``np.result_type`` of the two (float64 for int64 with uint64). Not
    collective."""
    haystack, queries = np.asarray(haystack), np.asarray(queries)
    if queries.ndim != 1 or queries.size < _SMALL or haystack.size < _SMALL \
            or queries.dtype.kind not in "iu" or haystack.dtype.kind not in "iu" \
            or np.result_type(haystack.dtype, queries.dtype).kind not in "iu":
        return np.searchsorted(haystack, queries, side=side)
    bits = max(int(queries.size - 1).bit_length(), 1)
    lo, hi = int(queries.min()), int(queries.max())
    # the packed keys are int64: queries of 2**63 and more (uint64) do not fit
    if (hi - lo).bit_length() + bits > 63 or hi >= 2 ** 63:
        return np.searchsorted(haystack, queries, side=side)
    packed = queries.astype(np.int64)           # a copy
    packed -= lo
    packed <<= bits
    packed |= np.arange(queries.size, dtype=np.int64)
    packed.sort()
    at = packed & ((np.int64(1) << bits) - 1)
    packed >>= bits
    packed += lo
    out = np.empty(queries.size, np.int64)
    if haystack.dtype == np.int64 and haystack.size <= 8 * queries.size:
        # one merge of the two sorted arrays beats a binary search per query
        out[at] = merge_search(haystack, packed, side == "right")
    else:
        out[at] = np.searchsorted(haystack, packed.astype(queries.dtype, copy=False), side=side)
    return out


def isin_sorted(a, sorted_set) -> np.ndarray:
    """``np.isin(a, sorted_set)`` for a sorted 1-D ``sorted_set`` (e.g. from
    :func:`sorted_unique`), by :func:`search_sorted`: no sort of the set and
    none of numpy's hash tables. Not collective."""
    a, sorted_set = np.asarray(a), np.asarray(sorted_set)
    if sorted_set.size == 0:
        return np.zeros(a.shape, bool)
    flat = a.reshape(-1)
    i = search_sorted(sorted_set, flat)
    np.minimum(i, sorted_set.size - 1, out=i)
    return (sorted_set[i] == flat).reshape(a.shape)
