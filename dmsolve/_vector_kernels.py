"""Compiled lane sums of :class:`dmsolve.DistVector` reductions on threads.

A threaded inner product is summed in the fixed lanes of
:func:`dmsolve.threads.lane_bounds`: each lane in order (four partial sums
taking every fourth entry, added ``(s0 + s1) + (s2 + s3)``), the lane sums
then added in lane order by the caller. The lanes depend on the length
alone, so the sum is the same bits at any thread count of two or more.

Compiled on first call and cached on disk next to this module. Not
collective; nothing is allocated per call.
"""

from __future__ import annotations

from .jit import njit

__all__ = ["dot_lanes", "abs_sum_lanes"]


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _dot_range(a, b, lo, hi, zero):  # pragma: no cover
    # a[lo:hi]^H b[lo:hi] in four interleaved partial sums
    s0 = s1 = s2 = s3 = zero
    i = lo
    while i + 4 <= hi:
        s0 += a[i].conjugate() * b[i]
        s1 += a[i + 1].conjugate() * b[i + 1]
        s2 += a[i + 2].conjugate() * b[i + 2]
        s3 += a[i + 3].conjugate() * b[i + 3]
        i += 4
    while i < hi:
        s0 += a[i].conjugate() * b[i]
        i += 1
    return (s0 + s1) + (s2 + s3)


@njit(cache=True, nogil=True, boundscheck=False)
def dot_lanes(a, b, bounds, l0, l1, partial):  # pragma: no cover
    """``partial[l] = a[lo:hi]^H b[lo:hi]`` over lanes ``l0 .. l1 - 1``
    (``lo, hi = bounds[l], bounds[l + 1]``), in ``partial``'s dtype. Not collective."""
    zero = partial[0] * 0
    for lane in range(l0, l1):
        partial[lane] = _dot_range(a, b, bounds[lane], bounds[lane + 1], zero)


@njit(cache=True, nogil=True, boundscheck=False)
def abs_sum_lanes(a, bounds, l0, l1, partial):  # pragma: no cover
    """``partial[l] = sum(|a[lo:hi]|)`` over lanes ``l0 .. l1 - 1``, in
    order. Not collective."""
    for lane in range(l0, l1):
        s = 0.0
        for i in range(bounds[lane], bounds[lane + 1]):
            s += abs(a[i])
        partial[lane] = s
