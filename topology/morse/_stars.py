"""The star of every owned vertex as tables the compiled kernels read (see
``_star_tables``): on a Freudenthal grid a fixed stencil (positions in the
ghosted order padded by one vertex on every side), on a complex CSR lists of
the stars' edges, triangles and tetrahedra."""

from __future__ import annotations

import functools
import itertools

import numpy as np
from mpi4py import MPI

from ..core import freudenthal_cells, ghosted_global_ids, link_structure
from ._star_tables import COMPLEX, GRID, StarTable

__all__ = ["Stars", "GridStars", "ComplexStars", "stencil"]


# -- the grid stencil: the star of a vertex as fixed tables
@functools.lru_cache(maxsize=None)
def stencil(dimension: int):
    """``(offsets, tris, tets, tet_faces)`` of the star of a grid vertex.

    ``offsets`` (m, dim) are the neighbours (those of :func:`link_structure`),
    ``tris`` (36, 2) the pairs of neighbours spanning a triangle with the
    centre, ``tets`` (24, 3) the triples spanning a tetrahedron (3D), and
    ``tet_faces`` the rows of ``tris`` that are the faces of each tet through
    the centre. Not collective.
    """
    offsets, link = link_structure(dimension)
    index = {tuple(v): i for i, v in enumerate(offsets)}
    tets = set()
    if dimension == 3:
        for origin in itertools.product((-1, 0), repeat=3):
            for cell in freudenthal_cells(3) + np.array(origin):
                rows = [tuple(v) for v in cell]
                if (0, 0, 0) in rows:
                    tets.add(tuple(sorted(index[v] for v in rows if v != (0, 0, 0))))
    tets = np.array(sorted(tets), dtype=np.int64).reshape(-1, 3)
    tri_index = {tuple(sorted(r)): k for k, r in enumerate(link.tolist())}
    faces = np.array([[tri_index[(a, b)], tri_index[(a, c)], tri_index[(b, c)]]
                      for a, b, c in tets.tolist()], dtype=np.int64).reshape(-1, 3)
    return offsets, np.ascontiguousarray(link), tets, faces


class Stars:
    """Star tables of this rank's owned vertices (see ``_star_tables``).

    ``mode`` ``GRID``: positions index the ghosted order padded by one
    vertex (-1) on every side, so a neighbour is ``position + doff[j]``;
    ``COMPLEX``: positions index :meth:`ghosted_ids` and the stars are CSR
    lists sorted by vertex id. ``layout_index`` holds the vertices' layout
    indices (what messages between ranks name vertices by), ``global_id``
    their global ids (what results report; the same under a block
    partition). :class:`GridStars` and :class:`ComplexStars` build them;
    the lookups are not collective.
    """

    #: dtype of the pairing steps of triangles (``tt``): at most 38 steps in
    #: a grid's lower star (14 edges, 36 triangles, 24 tets), so one byte there
    step_dtype = np.int16

    def __init__(self, domain):
        self.domain = domain

    # -- lookups (not collective)
    def positions(self, lix) -> np.ndarray:
        """Positions of vertex layout indices that this rank holds. Not collective."""
        raise NotImplementedError

    def nbr(self, i, j) -> np.ndarray:
        """Positions of neighbour slots ``j`` of owned vertices ``i``. Not collective."""
        raise NotImplementedError

    def tri(self, i, t) -> np.ndarray:
        """Neighbour slots (k, 2) of triangle slots ``t`` of owned vertices ``i``.
        Not collective."""
        raise NotImplementedError

    def tet(self, i, t) -> np.ndarray:
        """Neighbour slots (k, 3) of tetrahedron slots ``t`` of owned vertices
        ``i``. Not collective."""
        raise NotImplementedError

    def triangle_edges(self, i, t):
        """The far edges of triangles ``t`` of owned vertices ``i`` (the edge
        of each triangle opposite its vertex): ``(nb, top, oth, mine)``, the
        (k, 2) neighbour slots of the edge's ends, the positions of its
        higher and lower end in the vertex order, and whether this rank owns
        the higher end. Not collective."""
        nb = self.tri(i, t).reshape(-1, 2)
        pa, pb = self.nbr(i, nb[:, 0]), self.nbr(i, nb[:, 1])
        swap = self.O[pa] < self.O[pb]
        top = np.where(swap, pb, pa)
        oth = np.where(swap, pa, pb)
        return nb, top, oth, self.own[top] >= 0

    def table(self) -> StarTable:
        """The tables as the one record the kernels take (no copies). Not collective."""
        return StarTable(self.mode, self.O, self.P, self.own, self.layout_index, self.doff,
                         self.eptr, self.enb, self.tptr, self.ttab, self.qptr, self.qtab,
                         self.qface)


class GridStars(Stars):
    """The stars of a Freudenthal grid's owned vertices: one stencil, positions
    in the ghosted order padded by one vertex (-1) on every side. Built from
    the ghosted vertex order; not collective."""

    mode = GRID
    step_dtype = np.int8

    def __init__(self, grid, order: np.ndarray):
        super().__init__(grid)
        dim = grid.dimension
        g0, g1 = grid.ghosted_planes
        p0, p1 = grid.owned_planes
        dims = (g1 - g0,) + tuple(grid.shape[:-1][::-1])        # numpy order
        pdims = tuple(d + 2 for d in dims)
        O = np.full(pdims, -1, dtype=np.int64)
        inner = tuple(slice(1, d + 1) for d in dims)
        O[inner] = order.reshape(dims)
        lix = np.full(pdims, -1, dtype=np.int64)
        lix[inner] = grid.ghosted_ids().reshape(dims)
        flat = np.arange(O.size, dtype=np.int64).reshape(pdims)
        owned = (slice(1 + p0 - g0, 1 + p1 - g0),) + inner[1:]
        self.P = np.ascontiguousarray(flat[owned].ravel()) if p1 > p0 else np.zeros(0, np.int64)
        self.O = O.ravel()
        self.layout_index = lix.ravel()
        self.global_id = self.layout_index
        self.own = np.full(O.size, -1, dtype=np.int64)
        self.own[self.P] = np.arange(self.P.size)
        offsets, tris, tets, faces = stencil(dim)
        strides = np.cumprod((1,) + pdims[::-1][:-1])           # x, y[, z] strides
        self.doff = (offsets @ strides).astype(np.int64)
        n = self.P.size
        self.eptr = np.arange(n + 1, dtype=np.int64) * len(offsets)
        self.tptr = np.arange(n + 1, dtype=np.int64) * len(tris)
        self.qptr = np.arange(n + 1, dtype=np.int64) * len(tets)
        self.enb = np.zeros(0, np.int64)
        self.ttab, self.qtab, self.qface = tris, tets, faces
        self.pdims = pdims
        self.g0 = g0
        self.emax, self.tmax, self.qmax = len(offsets), len(tris), max(len(tets), 1)
        self.n_owned = self.P.size

    def positions(self, lix) -> np.ndarray:
        lix = np.asarray(lix, dtype=np.int64)
        c = self.domain.coordinates(lix)[..., ::-1].copy()     # numpy order
        c[..., 0] -= self.g0
        c += 1
        return np.ravel_multi_index(tuple(np.moveaxis(c, -1, 0)), self.pdims).astype(np.int64)

    def nbr(self, i, j) -> np.ndarray:
        return self.P[i] + self.doff[j]

    def tri(self, i, t) -> np.ndarray:
        return self.ttab[t]

    def tet(self, i, t) -> np.ndarray:
        return self.qtab[t]


class ComplexStars(Stars):
    """The stars of a complex's owned vertices: CSR lists sorted by vertex id,
    positions in ``ghosted_ids()``. Built from the ghosted vertex order;
    collective on ``cx.comm`` (one ``Allreduce`` of the largest star)."""

    mode = COMPLEX

    def __init__(self, cx, order: np.ndarray):
        super().__init__(cx)
        ids = cx.ghosted_ids()
        nloc = ids.size
        self.O = np.ascontiguousarray(order, dtype=np.int64)
        self.layout_index = ids
        self.global_id = ghosted_global_ids(cx)
        self.P = cx.owned_positions().astype(np.int64)
        self.own = np.full(nloc, -1, dtype=np.int64)
        self.own[self.P] = np.arange(self.P.size)
        self.doff = np.zeros(0, np.int64)
        own = self.own
        n = self.P.size
        E = cx.local_simplex_positions(1) if cx.dimension >= 1 else np.zeros((0, 2), np.int64)
        src = np.concatenate((E[:, 0], E[:, 1]))
        dst = np.concatenate((E[:, 1], E[:, 0]))
        keep = own[src] >= 0
        src, dst = own[src[keep]], dst[keep]
        key = src * nloc + dst
        o = np.argsort(key)
        src, dst, key = src[o], dst[o], key[o]
        self.enb = dst
        self.eptr = np.concatenate(([0], np.cumsum(np.bincount(src, minlength=n)))).astype(np.int64)

        def local(c, v):   # neighbour index of position v in the star of owned index c
            return np.searchsorted(key, c * nloc + v) - self.eptr[c]

        def star(k):
            if cx.dimension < k:
                return np.zeros(n + 1, np.int64), np.zeros((0, k), np.int64)
            S = cx.local_simplex_positions(k)
            cs, rows = [], []
            for c in range(k + 1):
                centre = own[S[:, c]]
                m = centre >= 0
                others = np.delete(S[m], c, axis=1)
                cs.append(centre[m])
                rows.append(np.stack([local(centre[m], others[:, r]) for r in range(k)], 1))
            cs = np.concatenate(cs)
            rows = np.sort(np.concatenate(rows), axis=1)
            o = np.lexsort(tuple(rows[:, r] for r in range(k - 1, -1, -1)) + (cs,))
            cs, rows = cs[o], rows[o]
            ptr = np.concatenate(([0], np.cumsum(np.bincount(cs, minlength=n)))).astype(np.int64)
            return ptr, np.ascontiguousarray(rows, dtype=np.int64)

        self.tptr, self.ttab = star(2)
        self.qptr, self.qtab = star(3)
        # faces of each tet through the centre, as triangle slots of the same star
        ne_max = int(np.diff(self.eptr).max()) + 1 if n else 1
        tcent = np.repeat(np.arange(n), np.diff(self.tptr))
        tkey = (tcent * ne_max + self.ttab[:, 0]) * ne_max + self.ttab[:, 1] if self.ttab.size \
            else np.zeros(0, np.int64)
        qcent = np.repeat(np.arange(n), np.diff(self.qptr))
        face = np.zeros((self.qtab.shape[0], 3), np.int64)
        for k, (a, b) in enumerate(((0, 1), (0, 2), (1, 2))):
            fk = (qcent * ne_max + self.qtab[:, a]) * ne_max + self.qtab[:, b]
            face[:, k] = np.searchsorted(tkey, fk) - self.tptr[qcent]
        self.qface = face
        comm = cx.comm
        mx = np.array([np.diff(p).max() if n else 0 for p in (self.eptr, self.tptr, self.qptr)],
                      dtype=np.int64)
        comm.Allreduce(MPI.IN_PLACE, mx, op=MPI.MAX)
        self.emax, self.tmax, self.qmax = (max(int(v), 1) for v in mx)
        self.n_owned = self.P.size

    def positions(self, lix) -> np.ndarray:
        return np.searchsorted(self.layout_index, np.asarray(lix, dtype=np.int64))

    def nbr(self, i, j) -> np.ndarray:
        return self.enb[self.eptr[i] + j]

    def tri(self, i, t) -> np.ndarray:
        return self.ttab[self.tptr[i] + t]

    def tet(self, i, t) -> np.ndarray:
        return self.qtab[self.qptr[i] + t]
