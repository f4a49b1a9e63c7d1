"""The binary tree over ranks that tree-shaped reductions climb (the
distributed sweep, piece components): each rank talks to O(1) others per
level and the tree has ``ceil(log2 p)`` levels."""

from __future__ import annotations

import numpy as np

__all__ = ["rank_tree", "tree_leader"]


def rank_tree(p: int):
    """The binary tree over ranks ``0 .. p-1`` by halving: for each split
    ``m`` in ``1 .. p-1`` the internal node ``[a, m) + [m, b)``, led by rank
    ``m``; leaf ``r`` is led by rank ``r``. Returns ``(a, b, height,
    parent)`` indexed by split (entry 0 unused) and ``leaf_parent`` (the
    split whose child leaf ``r`` is; -1 for ``p == 1``). The same on every
    rank; O(p). Not collective."""
    a = np.zeros(p, np.int64)
    b = np.zeros(p, np.int64)
    height = np.zeros(p, np.int64)
    parent = np.full(p, -1, np.int64)
    leaf_parent = np.full(p, -1, np.int64)
    if p == 1:
        return a, b, height, parent, leaf_parent
    stack = [(0, p, -1)]
    order = []
    while stack:
        lo, hi, par = stack.pop()
        if hi - lo == 1:
            leaf_parent[lo] = par
            continue
        m = (lo + hi) // 2
        a[m], b[m], parent[m] = lo, hi, par
        order.append(m)
        stack.append((lo, m, m))
        stack.append((m, hi, m))
    for m in reversed(order):       # children before parents
        for c_lo, c_hi in ((a[m], m), (m, b[m])):
            if c_hi - c_lo > 1:
                height[m] = max(height[m], height[(c_lo + c_hi) // 2] + 1)
            else:
                height[m] = max(height[m], 1)
    return a, b, height, parent, leaf_parent


def tree_leader(a, b):
    """The rank leading the tree node over ranks ``[a, b)``. Not collective."""
    return a if b - a == 1 else (a + b) // 2
