"""Rows of vertex ids (simplices, cells) as sorted tables: one int64 key per
row where the ids allow, so that lookups are plain sorts and binary searches.
Not collective."""

from __future__ import annotations

import numpy as np

__all__ = ["row_keys", "unique_rows", "search_rows", "find_rows", "lookup"]


def row_keys(rows: np.ndarray, n: int | None):
    """One int64 key per row in lexicographic order (ids below ``n``; None:
    the largest id plus one), or None when the rows are too wide for it."""
    k1 = rows.shape[1]
    if n is None:
        n = int(rows.max()) + 1 if rows.size else 1
    n = max(n, 1)
    if float(n) ** k1 >= 2.0 ** 62:
        return None
    key = np.zeros(rows.shape[0], dtype=np.int64)
    for j in range(k1):
        key = key * n + rows[:, j]
    return key


def unique_rows(rows: np.ndarray, n: int | None) -> np.ndarray:
    """The distinct rows, sorted lexicographically."""
    rows = np.asarray(rows, dtype=np.int64)
    if rows.shape[0] == 0:
        return rows.reshape(0, rows.shape[1] if rows.ndim == 2 else 0)
    key = row_keys(rows, n)
    if key is None:
        return np.unique(rows, axis=0)
    _, first = np.unique(key, return_index=True)
    return rows[first]


def search_rows(sorted_rows: np.ndarray, query: np.ndarray, n: int) -> np.ndarray:
    """Positions of the ``query`` rows in ``sorted_rows`` (every one present)."""
    query = np.asarray(query, dtype=np.int64).reshape(-1, sorted_rows.shape[1])
    if query.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    ks = row_keys(sorted_rows, n)
    if ks is not None:
        return np.searchsorted(ks, row_keys(query, n)).astype(np.int64)
    both = np.concatenate((sorted_rows, query))
    _, inv = np.unique(both, axis=0, return_inverse=True)
    inv = inv.ravel()
    where = np.full(int(inv.max()) + 1, -1, dtype=np.int64)
    where[inv[:sorted_rows.shape[0]]] = np.arange(sorted_rows.shape[0])
    return where[inv[sorted_rows.shape[0]:]]


def find_rows(sorted_rows: np.ndarray, query: np.ndarray, n: int) -> np.ndarray:
    """Positions of the ``query`` rows in ``sorted_rows``, -1 where absent."""
    out = np.full(query.shape[0], -1, dtype=np.int64)
    if sorted_rows.shape[0] == 0 or query.shape[0] == 0:
        return out
    pos = np.minimum(search_rows(sorted_rows, query, n), sorted_rows.shape[0] - 1)
    pos = np.where(pos < 0, 0, pos)
    hit = np.all(sorted_rows[pos] == query, axis=1)
    out[hit] = pos[hit]
    return out


def lookup(keys: np.ndarray, order: np.ndarray | None, values: np.ndarray,
           query: np.ndarray) -> np.ndarray:
    """``values[i]`` where ``keys[i] == q`` for each query ``q`` (any shape),
    -1 where ``q`` is not among the keys; ``order`` sorts ``keys`` (None:
    they are sorted)."""
    q = np.asarray(query, dtype=np.int64)
    sk = keys if order is None else keys[order]
    out = np.full(q.shape, -1, dtype=np.int64)
    if sk.size == 0 or q.size == 0:
        return out
    pos = np.minimum(np.searchsorted(sk, q), sk.size - 1)
    hit = sk[pos] == q
    at = pos[hit] if order is None else order[pos[hit]]
    out[hit] = values[at]
    return out
