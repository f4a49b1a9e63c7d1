"""Compiled loops of the reproducible hierarchy (:mod:`.reproducible`).

Row maxima over a strength graph (the distance-2 maximal independent set),
the position of a row's maximum, sums of sorted segments in their order,
and dense rows times a vector summed in column order. Not collective;
compiled on first use and cached next to this module.
"""

from __future__ import annotations

from dmsolve.jit import njit

__all__ = ["row_max", "row_argmax", "segment_sums", "dense_rows", "mis2_decide"]


@njit(cache=True, nogil=True, boundscheck=False)
def row_max(indptr, indices, ext, own, out):  # pragma: no cover
    """``out[i] = max(own[i], max over row i of ext[indices[j]])``."""
    for i in range(out.shape[0]):
        m = own[i]
        for j in range(indptr[i], indptr[i + 1]):
            v = ext[indices[j]]
            if v > m:
                m = v
        out[i] = m


@njit(cache=True, nogil=True, boundscheck=False)
def row_argmax(indptr, indices, ext, out):  # pragma: no cover
    """``out[i]``: the column (of ``ext``) of row ``i``'s largest non-negative
    ``ext`` value, the first in row order among equals; -1 if none."""
    for i in range(out.shape[0]):
        best = -1.0
        at = -1
        for j in range(indptr[i], indptr[i + 1]):
            c = indices[j]
            v = ext[c]
            if v > best:
                best = v
                at = c
        out[i] = at


@njit(cache=True, nogil=True, boundscheck=False)
def segment_sums(index, values, out):  # pragma: no cover
    """``out[index[k]] += values[k]`` in the order of ``k`` (one fixed order)."""
    for k in range(index.shape[0]):
        out[index[k]] += values[k]


@njit(cache=True, nogil=True, boundscheck=False)
def dense_rows(M, b, x):  # pragma: no cover
    """``x[i] = sum_j M[i, j] b[j]``, each row summed in column order from 0."""
    for i in range(M.shape[0]):
        s = 0.0
        for j in range(M.shape[1]):
            s += M[i, j] * b[j]
        x[i] = s


@njit(cache=True, nogil=True, boundscheck=False)
def row_best_aggregate(indptr, indices, agg_ext, prio_ext, take, out):  # pragma: no cover
    """For each row ``i`` with ``take[i]``: the position (in ``agg_ext``) of
    a neighbour in the aggregate that most of its neighbours belong to, the
    one of highest priority among equals; -1 if no neighbour has one."""
    for i in range(out.shape[0]):
        out[i] = -1
        if not take[i]:
            continue
        best_count = 0
        best_prio = -1.0
        for j in range(indptr[i], indptr[i + 1]):
            a = agg_ext[indices[j]]
            if a < 0:
                continue
            count = 0
            for k in range(indptr[i], indptr[i + 1]):
                if agg_ext[indices[k]] == a:
                    count += 1
            p = prio_ext[indices[j]]
            if count > best_count or (count == best_count and p > best_prio):
                best_count = count
                best_prio = p
                out[i] = indices[j]


@njit(cache=True, nogil=True, boundscheck=False)
def mis2_decide(state, prio, m2, limit):  # pragma: no cover
    """One round's decisions of the distance-2 independent set: an undecided
    row (state 1) whose ``state * limit + prio`` is ``m2``, the largest
    within distance 2, joins (state 2); one with a member within distance 2
    (``m2 >= 2 * limit``) leaves (state 0). Returns the rows still undecided."""
    left = 0
    for i in range(state.shape[0]):
        if state[i] != 1:
            continue
        if m2[i] == limit + prio[i]:
            state[i] = 2
        elif m2[i] >= 2 * limit:
            state[i] = 0
        else:
            left += 1
    return left
