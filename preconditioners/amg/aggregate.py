"""Aggregation: grouping each rank's nodes into aggregates on its strength graph.

Standard (greedy) aggregation as in PyAMG's ``standard_aggregation``; the
aggregates of a rank never contain another rank's nodes.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from dmsolve import Registry

from .._kernels import aggregate_pass1, aggregate_pass3

__all__ = ["standard_aggregation", "AGGREGATIONS"]


def standard_aggregation(S: sp.csr_matrix) -> tuple[np.ndarray, int]:
    """Greedy aggregation of the graph ``S`` (local numbering, no diagonal).

    Pass 1 makes an aggregate of every node whose neighbours are all still
    free (the node and its neighbours); pass 2 adds each remaining node to
    the aggregate of a pass-1 neighbour; pass 3 makes new aggregates of
    what is left. Isolated nodes (no strong neighbour) stay unaggregated
    (id -1), so their rows of the tentative prolongator are zero. The same
    three passes and visiting order as PyAMG, so one rank reproduces PyAMG's
    aggregates exactly. Not collective.

    Returns
    -------
    aggregate : int64 array
        Aggregate id of each node, or -1.
    count : int
        Number of aggregates.

    References
    ----------
    P. Vanek, J. Mandel, M. Brezina, Computing 56(3), 1996, section 3.
    """
    n = S.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64), 0
    ip, ix = S.indptr, S.indices
    isolated = -n - 1
    # pass 1 is sequential (each choice depends on the ones before): a compiled loop
    agg = np.zeros(n, dtype=np.int64)
    nxt = aggregate_pass1(ip, ix, agg) + 1
    # pass 2 (vectorised): free nodes join the pass-1 aggregate of their
    # first neighbour in column order that has one
    free = np.flatnonzero(agg == 0)
    if free.size:
        Sf = S[free]
        cand = agg[Sf.indices]
        good = cand > 0
        rows = np.repeat(np.arange(free.size), np.diff(Sf.indptr))
        first = np.full(free.size, -1, dtype=np.int64)
        gr = rows[good]
        # the first good entry per row: reverse assignment keeps the earliest
        first[gr[::-1]] = cand[good][::-1]
        hit = first > 0
        agg[free[hit]] = -first[hit]
    count = nxt - 1
    # pass 3: what is left starts new aggregates with its still-free neighbours
    if (agg == 0).any():
        count = aggregate_pass3(ip, ix, agg, count)
    out = np.abs(agg) - 1
    out[agg == isolated] = -1
    return out, int(count)


#: Aggregation methods by name.
AGGREGATIONS = Registry("aggregation")
AGGREGATIONS.register("standard", standard_aggregation)
