"""gudhi's lower-star persistence on exactly our triangulations: the serial
reference for the persistence tests and the benchmark.

The SimplexTree is filled one dimension at a time, each simplex at the
maximum of its vertex values, so every face is already present with its own
value when a coface is inserted (gudhi only ever lowers a filtration value
on insertion). Zero-length pairs are dropped; essential classes have death
``inf``.
"""

import itertools

import numpy as np


def grid_top_cells(shape):
    """Top simplices (sorted vertex ids) of TTK's Freudenthal triangulation
    of a grid, from topology.freudenthal_cells."""
    from topology import freudenthal_cells
    cells = freudenthal_cells(len(shape))
    strides = np.cumprod((1,) + tuple(shape[:-1]))
    origins = np.stack(np.meshgrid(*[np.arange(n - 1) for n in shape], indexing="ij"),
                       -1).reshape(-1, len(shape))
    ids = (origins[:, None, None, :] + cells[None]) @ strides
    return np.sort(ids.reshape(-1, cells.shape[1]), axis=1).astype(np.int64)


def faces(tops, k):
    """All k-faces (sorted unique rows) of the sorted top simplices."""
    parts = [tops[:, list(c)] for c in itertools.combinations(range(tops.shape[1]), k + 1)]
    return np.unique(np.concatenate(parts), axis=0)


def grid_simplices(shape):
    tops = grid_top_cells(shape)
    return [faces(tops, k) for k in range(len(shape) + 1)]


def complex_simplices(cx):
    """Every simplex of a SimplicialComplex, by dimension (collective)."""
    return [cx.simplices(k) for k in range(cx.dimension + 1)]


def lower_star_tree(simplices, values):
    import gudhi
    values = np.asarray(values, dtype=np.float64)
    st = gudhi.SimplexTree()
    for rows in simplices:
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size == 0:
            continue
        st.insert_batch(np.ascontiguousarray(rows.T), values[rows].max(axis=1))
    return st


def diagram(simplices, values):
    """{dim: (sorted (k, 2) finite pairs with death > birth, sorted essential births)}."""
    st = lower_star_tree(simplices, values)
    st.compute_persistence(persistence_dim_max=True, min_persistence=-1.0)
    out = {}
    top = len(simplices) - 1
    for d in range(top + 1):
        iv = np.asarray(st.persistence_intervals_in_dimension(d), dtype=np.float64).reshape(-1, 2)
        fin = np.isfinite(iv[:, 1])
        f = iv[fin]
        f = f[f[:, 1] > f[:, 0]]
        f = f[np.lexsort((f[:, 1], f[:, 0]))]
        out[d] = (f, np.sort(iv[~fin, 0]))
    return out
