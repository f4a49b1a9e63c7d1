"""The geometry of regular grids that every stage shares: TTK's Freudenthal
cells, the neighbours and links of a vertex (Freudenthal and cubical), the
component counts of link subsets, and vertex ids of cells and coordinates.
Nothing here communicates."""

from __future__ import annotations

import functools
import itertools

import numpy as np

__all__ = ["freudenthal_cells", "link_structure", "cubical_structure", "component_table",
           "grid_cells", "cube_cells", "grid_coordinates"]

# Cube corners in TTK's naming, as (x, y, z) offsets from a = (x, y, z).
_CORNERS3 = {"a": (0, 0, 0), "b": (1, 0, 0), "c": (0, 1, 0), "d": (1, 1, 0),
             "e": (0, 0, 1), "f": (1, 0, 1), "g": (0, 1, 1), "h": (1, 1, 1)}
_TETS3 = ("abcg", "bcdg", "abeg", "befg", "bfgh", "bdgh")   # around diagonal b-g
_CORNERS2 = {"a": (0, 0), "b": (1, 0), "c": (0, 1), "d": (1, 1)}
_TRIS2 = ("abc", "bcd")                                      # diagonal b-c


def freudenthal_cells(dimension: int) -> np.ndarray:
    """Corner offsets of the top cells of one grid cell, shape (cells, dim+1, dim).

    TTK's triangulation: the quad abcd splits into abc and bcd; the cube into
    abcg, bcdg, abeg, befg, bfgh, bdgh. Not collective.

    Examples
    --------
    >>> import topology
    >>> print(topology.freudenthal_cells(2).tolist())      # abc, bcd
    [[[0, 0], [1, 0], [0, 1]], [[1, 0], [0, 1], [1, 1]]]
    >>> print(topology.freudenthal_cells(3).shape)
    (6, 4, 3)
    """
    if dimension == 2:
        corners, cells = _CORNERS2, _TRIS2
    elif dimension == 3:
        corners, cells = _CORNERS3, _TETS3
    else:
        raise ValueError("dimension must be 2 or 3, got %r" % (dimension,))
    return np.array([[corners[c] for c in cell] for cell in cells], dtype=np.int64)


@functools.lru_cache(maxsize=None)
def link_structure(dimension: int) -> tuple[np.ndarray, np.ndarray]:
    """Neighbour offsets of a vertex and the edges of its link.

    Returns ``(offsets, link_edges)``: ``offsets`` of shape (m, dim) in
    (x, y[, z]) order (m = 6 in 2D, 14 in 3D), and pairs of indices into
    ``offsets`` joined by an edge of the vertex's link in the infinite
    lattice. On the grid boundary the link is the subcomplex spanned by the
    neighbours that exist (the triangulation restricts to every cell), so
    the same structure serves every vertex. Not collective.
    """
    cells = freudenthal_cells(dimension)
    nbrs, edges = set(), set()
    for origin in itertools.product((-1, 0), repeat=dimension):
        for cell in cells + np.array(origin):
            rows = [tuple(v) for v in cell]
            zero = (0,) * dimension
            if zero not in rows:
                continue
            others = [v for v in rows if v != zero]
            nbrs.update(others)
            edges.update(tuple(sorted(p)) for p in itertools.combinations(others, 2))
    # order by (z, y, x) so that offsets walk memory forwards
    offsets = sorted(nbrs, key=lambda v: v[::-1])
    index = {v: i for i, v in enumerate(offsets)}
    link = sorted((index[a], index[b]) for a, b in edges)
    return np.array(offsets, dtype=np.int64), np.array(link, dtype=np.int64)


@functools.lru_cache(maxsize=None)
def cubical_structure(dimension: int, dual: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Neighbour offsets of a vertex of the cubical complex of a grid, and
    the edges of its link.

    ``dual=False``: the ``2 * dimension`` neighbours along the axes (the
    complex's edges); two of them are joined in the link when they span a
    square with the vertex (they lie on different axes). ``dual=True``: the
    ``3**dimension - 1`` neighbours sharing a square or cube with the
    vertex, joined when one cell holds both and the vertex (no coordinate
    of opposite signs). By Alexander duality the components of ``{f > t}``
    in the cubical filtration's complement are those of the dual graph.
    Offsets are (x, y[, z]), in (z, y, x) order. Not collective.
    """
    if dimension not in (2, 3):
        raise ValueError("dimension must be 2 or 3, got %r" % (dimension,))
    if dual:
        offsets = [v for v in itertools.product((-1, 0, 1), repeat=dimension) if any(v)]
    else:
        offsets = [tuple(s * (a == k) for k in range(dimension))
                   for a in range(dimension) for s in (-1, 1)]
    offsets = sorted(offsets, key=lambda v: v[::-1])
    link = []
    for i, j in itertools.combinations(range(len(offsets)), 2):
        u, w = np.array(offsets[i]), np.array(offsets[j])
        if dual:
            ok = not np.any(u * w < 0)
        else:
            ok = not np.any((u != 0) & (w != 0))
        if ok:
            link.append((i, j))
    return np.array(offsets, dtype=np.int64), np.array(link, dtype=np.int64).reshape(-1, 2)


@functools.lru_cache(maxsize=None)
def component_table(dimension: int) -> np.ndarray:
    """Number of connected components of the link subgraph spanned by each
    subset (bit mask) of a vertex's neighbours; ``uint8`` array of length
    ``2**m``. Computed once per process (2**14 masks in 3D). Not collective.
    """
    offsets, link = link_structure(dimension)
    m = len(offsets)
    masks = np.arange(2 ** m, dtype=np.int64)
    present = (masks[:, None] >> np.arange(m)) & 1 == 1
    # min-label propagation over the link edges, all masks at once
    label = np.where(present, np.arange(m), m)
    while True:
        old = label.copy()
        for a, b in link:
            both = present[:, a] & present[:, b]
            lo = np.minimum(label[:, a], label[:, b])
            label[both, a] = lo[both]
            label[both, b] = lo[both]
        if np.array_equal(old, label):
            break
    table = (present & (label == np.arange(m))).sum(axis=1).astype(np.uint8)
    table.setflags(write=False)
    return table


def grid_coordinates(shape, ids) -> np.ndarray:
    """Grid coordinates ``(x, y[, z])`` of global ids, shape (n, dim). Not collective."""
    ids = np.asarray(ids, dtype=np.int64)
    out = np.empty(ids.shape + (len(shape),), dtype=np.int64)
    rest = ids
    for axis, n in enumerate(shape):
        out[..., axis] = rest % n
        rest = rest // n
    return out



def grid_cells(shape, planes=None) -> np.ndarray:
    """Vertex ids of every Freudenthal top cell of a grid of ``shape`` (of
    the cells whose origin's last coordinate lies in ``range(*planes)``)."""
    cells = freudenthal_cells(len(shape))
    strides = np.cumprod((1,) + tuple(shape[:-1]))
    ranges = [np.arange(n - 1) for n in shape]
    if planes is not None:
        ranges[-1] = np.arange(planes[0], max(planes[0], planes[1]))
    origins = np.stack(np.meshgrid(*ranges, indexing="ij"), -1).reshape(-1, len(shape))
    ids = (origins[:, None, None, :] + cells[None]) @ strides
    return ids.reshape(-1, cells.shape[1]).astype(np.int64)


def cube_cells(shape, planes=None) -> np.ndarray:
    """Vertex ids of every square (2D) or cube (3D) of a grid of ``shape``
    (of those whose origin's last coordinate lies in ``range(*planes)``), in
    VTK's quad / hexahedron corner order, origins in x-major order."""
    dim = len(shape)
    corners = [(0, 0), (1, 0), (1, 1), (0, 1)]
    if dim == 3:
        corners = [c + (0,) for c in corners] + [c + (1,) for c in corners]
    strides = np.cumprod((1,) + tuple(shape[:-1]))
    ranges = [np.arange(n - 1) for n in shape]
    if planes is not None:
        ranges[-1] = np.arange(planes[0], max(planes[0], planes[1]))
    origins = np.stack(np.meshgrid(*ranges, indexing="ij"), -1).reshape(-1, dim)
    return ((origins[:, None, :] + np.array(corners)[None]) @ strides).astype(np.int64)

