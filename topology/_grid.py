"""Regular grids with TTK's implicit Freudenthal triangulation, cut into slabs.

No simplex is ever stored: the neighbours and link of a vertex are fixed
offsets, and each rank holds its slab of vertex planes plus one ghost plane
on each side, so the star of every owned vertex is complete.
"""

from __future__ import annotations

import functools
import itertools
import numbers

import numpy as np
from mpi4py import MPI

from dmsolve import DistVector, Layout, agree
from dmsolve.bsp import NeighborExchange

__all__ = ["Grid", "freudenthal_cells", "link_structure", "component_table"]

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


class Grid:
    """A 2D or 3D regular grid of vertices with TTK's Freudenthal triangulation.

    Vertex ``(x, y[, z])`` has global id ``x + y*nx (+ z*nx*ny)``. Ranks own
    contiguous slabs of planes along the last axis (rows in 2D, z-planes in
    3D), so the vertex layout is a contiguous block of ids per rank, and each
    rank keeps one ghost plane on each side. A rank may own no plane.

    Parameters
    ----------
    shape : tuple of int
        ``(nx, ny)`` or ``(nx, ny, nz)``, each at least 2.
    comm : MPI.Comm

    Notes
    -----
    Collective on ``comm`` (plans the ghost-plane exchange). A vertex field
    given as a numpy array must be flat in id order, or have numpy shape
    ``shape[::-1]`` (``(nz, ny, nx)``), whose C-order ravel is id order.

    References
    ----------
    .. [1] H. Freudenthal, "Simplizialzerlegungen von beschraenkter
       Flachheit", Annals of Mathematics 43(3), 1942.
    .. [2] J. Tierny et al., "The Topology ToolKit", IEEE TVCG 24(1), 2018;
       E. Le Guillou et al., "TTK is Getting MPI-Ready", IEEE TVCG 2024.
    """

    def __init__(self, shape, comm: MPI.Comm):
        if not isinstance(comm, MPI.Comm):
            raise TypeError("comm must be an mpi4py MPI.Comm, got %s" % type(comm).__name__)
        exc = None
        try:
            shape = tuple(shape)
            if len(shape) not in (2, 3) or not all(
                    isinstance(s, numbers.Integral) and not isinstance(s, bool) for s in shape):
                raise TypeError("shape must be 2 or 3 integers, got %r" % (shape,))
            if min(shape) < 2:
                raise ValueError("every grid dimension must be at least 2, got %r" % (shape,))
        except (TypeError, ValueError) as e:
            exc = e
        agree(comm, exc)
        self.comm = comm
        self.shape = tuple(int(s) for s in shape)
        self.dimension = len(self.shape)
        self.plane_size = int(np.prod(self.shape[:-1]))
        nplanes = self.shape[-1]
        size, rank = comm.Get_size(), comm.Get_rank()
        base, extra = divmod(nplanes, size)
        counts = np.full(size, base, dtype=np.int64)
        counts[:extra] += 1
        planes = np.concatenate(([0], np.cumsum(counts)))
        #: (first, stop) owned plane on every rank
        self.plane_ranges = planes
        self.vertex_layout = Layout(planes * self.plane_size, comm)
        p0, p1 = int(planes[rank]), int(planes[rank + 1])
        if p1 > p0:
            g0, g1 = max(p0 - 1, 0), min(p1 + 1, nplanes)
        else:
            g0 = g1 = p0
        #: owned planes and ghosted planes of this rank
        self.owned_planes = (p0, p1)
        self.ghosted_planes = (g0, g1)
        ps = self.plane_size
        ghosts = np.concatenate((np.arange(g0 * ps, p0 * ps), np.arange(p1 * ps, g1 * ps)))
        self._halo = NeighborExchange.from_ghosts(self.vertex_layout, ghosts.astype(np.int64),
                                                  dtype=np.int64, name="grid-ghosts")
        self._nbelow = (p0 - g0) * ps

    # -- properties (never communicate) ----------------------------------------------
    @property
    def global_num_vertices(self) -> int:
        return int(np.prod(self.shape))

    @property
    def local_num_vertices(self) -> int:
        return self.vertex_layout.local_size

    def __repr__(self) -> str:
        return "Grid(shape=%s, planes %d:%d of %d)" % (self.shape, *self.owned_planes,
                                                      self.shape[-1])

    # -- fields -----------------------------------------------------------------------
    def vertex_values(self, values, name: str = "values") -> DistVector:
        """``values`` as a float64 DistVector on :attr:`vertex_layout`.

        Accepts a DistVector on the vertex layout, or the full global array on
        every rank (flat, or numpy shape ``shape[::-1]``). Non-finite values
        are refused. Collective on ``comm``; raises the same ``ValueError`` or
        ``TypeError`` on every rank.
        """
        return as_vertex_vector(values, self.vertex_layout, name,
                                grid_shape=self.shape[::-1])

    def ghosted(self, owned: np.ndarray) -> np.ndarray:
        """This rank's owned entries plus the ghost planes, in id order.

        Collective among neighbouring ranks.
        """
        owned = np.ascontiguousarray(owned)
        halo = self._halo
        if halo.dtype != owned.dtype:
            halo = self._halo_for(owned.dtype)
        ghost = halo.exchange(owned)
        return np.concatenate((ghost[:self._nbelow], owned, ghost[self._nbelow:]))

    def _halo_for(self, dtype):
        # A second plan for another dtype, built on first use by every rank
        # that calls ghosted() with it (all ranks do: ghosted is collective).
        cache = self.__dict__.setdefault("_halos", {})
        key = np.dtype(dtype).str
        if key not in cache:
            h = self._halo
            cache[key] = NeighborExchange(self.comm, h.send_ranks, np.split(
                h.send_index, np.cumsum(h.send_counts)[:-1]) if h.send_counts.size else [],
                h.recv_ranks, h.recv_counts, dtype=dtype, name="grid-ghosts")
        return cache[key]

    def ghosted_ids(self) -> np.ndarray:
        """Global ids of the owned and ghost vertices, ascending. Not collective."""
        g0, g1 = self.ghosted_planes
        return np.arange(g0 * self.plane_size, g1 * self.plane_size, dtype=np.int64)

    def coordinates(self, ids) -> np.ndarray:
        """Grid coordinates ``(x, y[, z])`` of global ids, shape (n, dim). Not collective."""
        ids = np.asarray(ids, dtype=np.int64)
        out = np.empty(ids.shape + (self.dimension,), dtype=np.int64)
        rest = ids
        for axis, n in enumerate(self.shape):
            out[..., axis] = rest % n
            rest = rest // n
        return out

    def local_edges(self) -> tuple[np.ndarray, np.ndarray]:
        """Edges of the triangulation among the ghosted vertices, as pairs of
        positions in :meth:`ghosted_ids`. Not collective.

        Built from the positive half of the neighbour offsets; the grid itself
        stays implicit (this is the one explicit list, for union-find).
        """
        g0, g1 = self.ghosted_planes
        dims = self.shape[:-1] + (g1 - g0,)
        n = int(np.prod(dims))
        idx = np.arange(n, dtype=np.int64).reshape(dims[::-1])
        offsets, _ = link_structure(self.dimension)
        heads, tails = [], []
        for off in offsets:
            if tuple(off[::-1]) <= (0,) * self.dimension:
                continue  # each edge once: keep offsets lexicographically after 0
            src = [slice(max(0, -o), d - max(0, o)) for o, d in zip(off[::-1], dims[::-1])]
            dst = [slice(max(0, o), d - max(0, -o)) for o, d in zip(off[::-1], dims[::-1])]
            heads.append(idx[tuple(src)].ravel())
            tails.append(idx[tuple(dst)].ravel())
        if not heads:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate(heads), np.concatenate(tails)

    def owned_positions(self) -> np.ndarray:
        """Positions of the owned vertices in :meth:`ghosted_ids`. Not collective."""
        return np.arange(self._nbelow, self._nbelow + self.local_num_vertices)

    def boundary_mask(self, ids) -> np.ndarray:
        """Whether each global id lies on the grid's boundary. Not collective."""
        c = self.coordinates(ids)
        n = np.array(self.shape)
        return np.any((c == 0) | (c == n - 1), axis=-1)


def as_vertex_vector(values, layout: Layout, name: str = "values",
                     grid_shape=None, dtype=np.float64) -> DistVector:
    """Check and convert a vertex (or simplex) field to a DistVector on ``layout``.

    Collective on ``layout.comm``; the same error on every rank.
    """
    exc = None
    out = None
    try:
        if isinstance(values, DistVector):
            if values.layout != layout:
                raise ValueError("%s is a DistVector of global size %d on another layout; "
                                 "expected global size %d" % (name, values.global_size,
                                                              layout.global_size))
            if values.dtype.kind not in "fiub":
                raise TypeError("%s must be real numbers, got %s" % (name, values.dtype))
            local = values.local.astype(dtype, copy=False)
        else:
            arr = np.asarray(values)
            if arr.dtype.kind not in "fiub":
                raise TypeError("%s must be real numbers, got dtype %s" % (name, arr.dtype))
            if grid_shape is not None and arr.ndim == len(grid_shape):
                if arr.shape != tuple(grid_shape):
                    raise ValueError("%s has shape %s; expected %s or (%d,)"
                                     % (name, arr.shape, tuple(grid_shape), layout.global_size))
                arr = arr.reshape(-1)
            if arr.ndim != 1 or arr.shape[0] != layout.global_size:
                raise ValueError("%s has shape %s; expected (%d,)"
                                 % (name, arr.shape, layout.global_size))
            local = np.array(arr[layout.start:layout.stop], dtype=dtype)
        if local.dtype.kind == "f" and not np.all(np.isfinite(local)):
            raise ValueError("%s must be finite (found NaN or inf)" % name)
        out = DistVector(layout, local)
    except (TypeError, ValueError) as e:
        exc = e
    agree(layout.comm, exc)
    return out
