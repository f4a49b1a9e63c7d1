"""Combining values of equal keys: the combiners of keyed messages and the
local reduce-by-key they run before messages leave a rank and at the owner.
"""

from __future__ import annotations

import numpy as np

from .._registry import Registry
from ._unique import sorted_unique, stable_argsort

__all__ = ["COMBINERS", "estimate_distinct_fraction", "reduce_by_key"]

#: Combiners of ``send_keyed`` by name: the ufunc whose ``reduceat`` combines
#: the values of equal keys; ``first``/``last`` keep the first/last value seen
#: (in source order, then send order).
COMBINERS = Registry("combiner")
for _name, _ufunc in [("sum", np.add), ("min", np.minimum), ("max", np.maximum),
                      ("prod", np.multiply), ("any", np.logical_or), ("all", np.logical_and),
                      ("first", None), ("last", None)]:
    COMBINERS.register(_name, _ufunc)
del _name, _ufunc


def estimate_distinct_fraction(keys: np.ndarray, sample: int = 1024, seed: int = 0) -> float:
    """Estimate (number of distinct keys) / (number of keys).

    Draws ``sample`` keys at random positions and averages ``1/m`` over
    them, ``m`` being each sampled key's multiplicity in the whole array: an
    unbiased estimate, since the distinct count is the sum over all keys of
    ``1/m``. Costs ``O(n log sample)``. Not collective.
    """
    n = keys.size
    if n <= sample:
        return sorted_unique(keys).size / max(n, 1)
    rng = np.random.default_rng(seed)
    picked = keys[rng.integers(0, n, size=sample)]
    uniq = sorted_unique(picked)
    pos = np.searchsorted(uniq, keys)
    pos[pos == uniq.size] = 0
    hit = uniq[pos] == keys
    mult = np.bincount(pos[hit], minlength=uniq.size)
    return float(np.mean(1.0 / mult[np.searchsorted(uniq, picked)]))


def reduce_by_key(keys: np.ndarray, values: np.ndarray, op: str = "sum"):
    """Sorted unique keys and the values combined per key with ``op``.

    Stable: for ``first``/``last``, order among equal keys is the input order.
    Not collective.
    """
    op = COMBINERS.canonical(op)
    keys = np.asarray(keys, dtype=np.int64)
    if keys.size == 0:
        return keys, values
    order = stable_argsort(keys)
    sk = keys[order]
    sv = values[order]
    starts = np.flatnonzero(np.concatenate(([True], sk[1:] != sk[:-1])))
    uk = sk[starts]
    if op == "first":
        return uk, sv[starts]
    if op == "last":
        ends = np.concatenate((starts[1:], [sk.size])) - 1
        return uk, sv[ends]
    ufunc = COMBINERS[op]
    if op in ("any", "all"):
        sv = sv.astype(np.bool_)
    return uk, ufunc.reduceat(sv, starts, axis=0)
