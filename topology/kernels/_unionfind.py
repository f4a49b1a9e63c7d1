"""Union-find kernels, one per meaning (numba, not collective).

- :func:`find_root`: the root of an element of a forest that may be flattened,
  halving the path on the way (components whose shape does not matter).
- :func:`forest_root`: the root of an element of a forest that must keep its
  links as made (the elder rule reads a merge's time off its link).
- :func:`union_min`: join two sets under the smaller root index.
"""

from __future__ import annotations

from dmsolve.jit import njit

__all__ = ["find_root", "forest_root", "union_min", "add_distinct"]


@njit(cache=True)
def find_root(parent, x):  # pragma: no cover
    """Root of ``x``, halving the path."""
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


@njit(cache=True)
def forest_root(parent, x):  # pragma: no cover
    """Root of ``x`` with no path compression: the links stay as they were made."""
    while parent[x] != x:
        x = parent[x]
    return x


@njit(cache=True, inline="always")
def union_min(parent, a, b):  # pragma: no cover
    """Join the sets of ``a`` and ``b`` under the smaller of their roots."""
    ra, rb = find_root(parent, a), find_root(parent, b)
    if ra != rb:
        if ra < rb:
            parent[rb] = ra
        else:
            parent[ra] = rb


@njit(cache=True)
def add_distinct(roots, nr, r):  # pragma: no cover
    """Append ``r`` to the first ``nr`` entries of ``roots`` unless it is
    among them; returns the new count (the few roots met at one vertex)."""
    for t in range(nr):
        if roots[t] == r:
            return nr
    roots[nr] = r
    return nr + 1
