"""Elder-rule union-find: the kernel behind every merge of components here
(the sweeps of D0 and D(d-1), the Morse complex's D0 and D2).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["union_find", "find_root", "roots"]


@njit(cache=True)
def find_root(parent, x):  # pragma: no cover
    """The root of node ``x`` in the forest ``parent``, halving the path on
    the way. Not collective."""
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


@njit(cache=True)
def roots(parent, nodes):  # pragma: no cover
    """The roots of ``nodes`` in the forest ``parent``. Not collective."""
    out = np.empty(nodes.size, np.int64)
    for k in range(nodes.size):
        out[k] = find_root(parent, nodes[k])
    return out


@njit(cache=True)
def union_find(a, b, age):  # pragma: no cover
    """Elder-rule union-find over edges ``(a[k], b[k])`` taken in order.

    Nodes ``0 .. n-1`` are born with ``age`` (smaller is elder, all
    distinct); the root of a component is its eldest node. An edge that
    joins two components hangs the younger root under the elder one: that
    younger component dies there.

    Returns
    -------
    dead, kept : int64 arrays
        Per edge, the younger root (whose component dies) and the elder root
        (whose component goes on), or -1 for both when the edge's ends are
        already connected.
    parent : int64 array
        The final forest (:func:`roots` reads each node's component off it).

    Notes
    -----
    Not collective.
    """
    parent = np.arange(age.shape[0])
    dead = np.full(a.shape[0], -1, np.int64)
    kept = np.full(a.shape[0], -1, np.int64)
    for k in range(a.shape[0]):
        x = find_root(parent, a[k])
        y = find_root(parent, b[k])
        if x == y:
            continue
        if age[x] < age[y]:
            x, y = y, x
        dead[k] = x          # x is the younger root
        kept[k] = y
        parent[x] = y
    return dead, kept, parent
