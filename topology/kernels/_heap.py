"""Binary min-heaps of int64 for the compiled kernels: the lower-star
gradient's queues and the V-path chains' expansion order.

Two forms: flat int64 values (:func:`push1`, :func:`pop1`), and int64 keys
carrying a row of three int64 that is moved with its key but never compared
(:func:`push3`, :func:`pop3`).
"""

from __future__ import annotations

from dmsolve.jit import njit

__all__ = ["push1", "pop1", "push3", "pop3"]


@njit(cache=True, inline="always")
def push1(H, n, v):  # pragma: no cover
    """Push ``v`` on the flat min-heap ``H[:n]`` of int64 (capacity is the
    caller's); returns the new size. Not collective."""
    c = n
    while c > 0:
        q = (c - 1) >> 1
        if H[q] <= v:
            break
        H[c] = H[q]
        c = q
    H[c] = v
    return n + 1


@njit(cache=True, inline="always")
def pop1(H, n):  # pragma: no cover
    """Pop the minimum of the flat heap ``H[:n]``; returns ``(value, new size)``.
    Not collective."""
    top = H[0]
    n -= 1
    v = H[n]
    c = 0
    while True:
        m = 2 * c + 1
        if m >= n:
            break
        if m + 1 < n and H[m + 1] < H[m]:
            m += 1
        if H[m] >= v:
            break
        H[c] = H[m]
        c = m
    H[c] = v
    return top, n


@njit(cache=True, inline="always")
def push3(HK, HE, n, key, r0, r1, r2):  # pragma: no cover
    """Push ``key`` with the row ``(r0, r1, r2)`` on the min-heap ``HK[:n]``
    (rows in ``HE``; capacity is the caller's); returns the new size. Not
    collective."""
    c = n
    while c > 0:
        q = (c - 1) >> 1
        if HK[q] <= key:
            break
        HK[c] = HK[q]
        HE[c, 0], HE[c, 1], HE[c, 2] = HE[q, 0], HE[q, 1], HE[q, 2]
        c = q
    HK[c] = key
    HE[c, 0], HE[c, 1], HE[c, 2] = r0, r1, r2
    return n + 1


@njit(cache=True, inline="always")
def pop3(HK, HE, n):  # pragma: no cover
    """Remove the smallest key of the heap ``HK[:n]`` of :func:`push3`: it
    and its row move to position ``n - 1``. Returns the new size. Not
    collective."""
    n -= 1
    k0, a0, b0, c0 = HK[0], HE[0, 0], HE[0, 1], HE[0, 2]
    key, r0, r1, r2 = HK[n], HE[n, 0], HE[n, 1], HE[n, 2]
    c = 0
    while True:
        m = 2 * c + 1
        if m >= n:
            break
        if m + 1 < n and HK[m + 1] < HK[m]:
            m += 1
        if HK[m] >= key:
            break
        HK[c] = HK[m]
        HE[c, 0], HE[c, 1], HE[c, 2] = HE[m, 0], HE[m, 1], HE[m, 2]
        c = m
    HK[c] = key
    HE[c, 0], HE[c, 1], HE[c, 2] = r0, r1, r2
    HK[n] = k0
    HE[n, 0], HE[n, 1], HE[n, 2] = a0, b0, c0
    return n
