"""Bit-set kernels (numba, not collective): the lowest set bit of a word, and
a two-level set of small keys whose smallest member pops in two bit scans."""

from __future__ import annotations

import numpy as np

from dmsolve.jit import njit, numba_attribute

# LLVM's cttz: numba exposes it only here (its own bit helpers use it)
trailing_zeros = numba_attribute("numba.cpython.unsafe.numbers", "trailing_zeros")

__all__ = ["lowest_bit", "set_add", "set_pop"]


@njit(cache=True, inline="always")
def lowest_bit(x):  # pragma: no cover
    """Index of the lowest set bit of ``x > 0`` (LLVM's cttz)."""
    return trailing_zeros(x)


@njit(cache=True, inline="always")
def set_add(W, s, key):  # pragma: no cover
    """Add ``key`` (< 4096) to the bit set of words ``W`` whose non-empty
    words are the bits of ``s``; returns the new ``s``."""
    W[key >> 6] |= np.int64(1) << (key & 63)
    return s | (np.int64(1) << (key >> 6))


@njit(cache=True, inline="always")
def set_pop(W, s):  # pragma: no cover
    """Remove the smallest key of the bit set ``(W, s)`` (``s`` not 0);
    returns ``(key, new s)``."""
    w = trailing_zeros(s)
    x = W[w]
    b = trailing_zeros(x)
    x &= x - 1
    W[w] = x
    if x == 0:
        s &= s - 1
    return (w << 6) | b, s
