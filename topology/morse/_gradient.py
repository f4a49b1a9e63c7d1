"""Lower-star discrete gradient of a vertex field (Robins, Wood, Sheppard;
TTK's DiscreteGradient), on implicit Freudenthal grids and explicit complexes.

Every cell belongs to the lower star of its maximum vertex in the global
``(value, id)`` order, and the pairs of a lower star depend on that vertex's
star only, which the ghost layer completes: each rank pairs the cells of the
lower stars of the vertices it owns, and the result does not depend on the
number of ranks.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np
from mpi4py import MPI

from dmsolve import DistVector, agree
from dmsolve.validate import agreed

from ..domains._complex import ghosted_global_ids, owned_global_ids
from ..core._protocol import check_domain
from ..domains._grid import Grid, freudenthal_cells, link_structure
from ._lower_star import CRITICAL, DOWN, TO_VERTEX, lower_star_gradient
from ._order import global_order
from ._star_tables import COMPLEX, GRID, StarTable

__all__ = ["discrete_gradient", "DiscreteGradient"]


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
    partition). Building it is collective on ``domain.comm`` (a complex
    agrees on its largest star with one ``Allreduce``; a grid communicates
    nothing); the lookups are not collective.
    """

    def __init__(self, domain, ghosted_order: np.ndarray):
        self.domain = domain
        if domain.stencil is not None:
            self._grid(domain, ghosted_order)
        else:
            self._complex(domain, ghosted_order)
        self.n_owned = self.P.size

    def _grid(self, grid: Grid, order: np.ndarray):
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
        self.mode = GRID
        n = self.P.size
        self.eptr = np.arange(n + 1, dtype=np.int64) * len(offsets)
        self.tptr = np.arange(n + 1, dtype=np.int64) * len(tris)
        self.qptr = np.arange(n + 1, dtype=np.int64) * len(tets)
        self.enb = np.zeros(0, np.int64)
        self.ttab, self.qtab, self.qface = tris, tets, faces
        self.pdims = pdims
        self.g0 = g0
        self.emax, self.tmax, self.qmax = len(offsets), len(tris), max(len(tets), 1)

    def _complex(self, cx, order: np.ndarray):
        ids = cx.ghosted_ids()
        nloc = ids.size
        self.mode = COMPLEX
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

    # -- lookups (not collective)
    def positions(self, lix) -> np.ndarray:
        """Positions of vertex layout indices that this rank holds. Not collective."""
        lix = np.asarray(lix, dtype=np.int64)
        if self.mode == COMPLEX:
            return np.searchsorted(self.layout_index, lix)
        grid = self.domain
        c = grid.coordinates(lix)[..., ::-1].copy()           # numpy order
        c[..., 0] -= self.g0
        c += 1
        return np.ravel_multi_index(tuple(np.moveaxis(c, -1, 0)), self.pdims).astype(np.int64)

    def nbr(self, i, j) -> np.ndarray:
        """Positions of neighbour slots ``j`` of owned vertices ``i``. Not collective."""
        if self.mode == GRID:
            return self.P[i] + self.doff[j]
        return self.enb[self.eptr[i] + j]

    def tri(self, i, t) -> np.ndarray:
        """Neighbour slots (k, 2) of triangle slots ``t`` of owned vertices ``i``.
        Not collective."""
        return self.ttab[t] if self.mode == GRID else self.ttab[self.tptr[i] + t]

    def tet(self, i, t) -> np.ndarray:
        """Neighbour slots (k, 3) of tetrahedron slots ``t`` of owned vertices
        ``i``. Not collective."""
        return self.qtab[t] if self.mode == GRID else self.qtab[self.qptr[i] + t]

    def table(self) -> StarTable:
        """The tables as the one record the kernels take (no copies). Not collective."""
        return StarTable(self.mode, self.O, self.P, self.own, self.layout_index, self.doff,
                         self.eptr, self.enb, self.tptr, self.ttab, self.qptr, self.qtab,
                         self.qface)


class DiscreteGradient:
    """The lower-star discrete gradient of a vertex field on a domain.

    Attributes
    ----------
    domain : Grid or SimplicialComplex
    order : DistVector
        The global vertex order the gradient was built from.

    Notes
    -----
    Each rank holds the pairs of the lower stars of its owned vertices
    (``vp``, ``ep``, ``tp``, ``qp``: one code per star slot, see
    ``_lower_star``). Not collective to construct (use the collective
    :func:`discrete_gradient`). The ``local_*`` methods are not collective;
    the others gather and are collective on ``comm``, as each says.
    """

    def __init__(self, domain, order: DistVector, stars: Stars, vp, ep, tp, tt, qp):
        self.domain = domain
        self.order = order
        self.stars = stars
        self.vp, self.ep, self.tp, self.tt, self.qp = vp, ep, tp, tt, qp

    @property
    def comm(self):
        return self.domain.comm

    @property
    def dimension(self) -> int:
        return self.domain.dimension

    # -- local views (not collective)
    def _slots(self, codes: np.ndarray, ptr: np.ndarray, select) -> tuple[np.ndarray, np.ndarray]:
        """(owned vertex index, star slot) of the slots whose code passes ``select``."""
        k = np.flatnonzero(select(codes))
        i = np.searchsorted(ptr, k, side="right") - 1
        return i, k - ptr[i]

    def _cell_positions(self, d: int, i, s) -> list:
        """Star positions of the vertices of cells (owned vertex index ``i``,
        slot ``s``), the maximum vertex first: one array per vertex."""
        S = self.stars
        p = S.P[i]
        if d == 0:
            return [p]
        if d == 1:
            return [p, S.nbr(i, s)]
        nb = S.tri(i, s) if d == 2 else S.tet(i, s)
        return [p] + [S.nbr(i, nb[:, r]) for r in range(d)]

    def local_cells(self, d: int, i, s, *, global_ids: bool = False) -> np.ndarray:
        """Vertex layout indices (k, d+1) of cells given by owned vertex index
        and slot, the maximum vertex first; global vertex ids if
        ``global_ids``. Not collective."""
        table = self.stars.global_id if global_ids else self.stars.layout_index
        cols = self._cell_positions(d, i, s)
        return np.stack([table[c] for c in cols], axis=1).reshape(-1, d + 1)

    def local_keys(self, d: int, i, s) -> np.ndarray:
        """Filtration keys (k, d+1): the orders of the cell's vertices, sorted
        descending (compare rows lexicographically). Not collective."""
        cols = self._cell_positions(d, i, s)
        k = np.stack([self.stars.O[c] for c in cols], axis=1).reshape(-1, d + 1)
        return -np.sort(-k, axis=1)

    def _check_d(self, d, top: int) -> None:
        if not isinstance(d, (int, np.integer)) or isinstance(d, bool) or not 0 <= d <= top:
            raise ValueError("d must be an integer in [0, %d], got %r" % (top, d))

    def local_critical(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        """(owned vertex index, star slot) of this rank's critical d-cells. Not collective.

        Raises ``ValueError`` unless ``0 <= d <= dimension``."""
        self._check_d(d, self.dimension)
        if d == 0:
            i = np.flatnonzero(self.vp == CRITICAL)
            return i, np.zeros_like(i)
        codes, ptr = {1: (self.ep, self.stars.eptr), 2: (self.tp, self.stars.tptr),
                      3: (self.qp, self.stars.qptr)}.get(d, (None, None))
        if codes is None:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return self._slots(codes, ptr, lambda c: c == CRITICAL)

    # -- gathered views (collective)
    def critical_counts(self) -> list[int]:
        """Number of critical cells of each dimension 0..d, the same on every
        rank. Collective on ``comm``."""
        d = self.dimension
        cnt = np.array([self.local_critical(k)[0].size for k in range(d + 1)], dtype=np.int64)
        self.comm.Allreduce(MPI.IN_PLACE, cnt, op=MPI.SUM)
        return [int(c) for c in cnt]

    def critical_cells(self, d: int) -> np.ndarray:
        """All critical d-cells as rows of global vertex ids sorted ascending,
        rows in lexicographic order, on every rank. Collective on ``comm``;
        a ``d`` outside ``[0, dimension]`` raises ``ValueError`` on every rank."""
        with agreed(self.comm):
            self._check_d(d, self.dimension)
        i, s = self.local_critical(d)
        rows = np.sort(self.local_cells(d, i, s, global_ids=True), axis=1)
        rows = np.concatenate(self.comm.allgather(rows)).reshape(-1, d + 1)
        return rows[np.lexsort(rows.T[::-1])] if rows.size else rows

    def pairs(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        """All gradient pairs (d-cell, (d+1)-cell) as two arrays of sorted
        global vertex-id rows, on every rank. Collective on ``comm``; gathers the
        whole gradient of dimension d: meant for checks on small domains. A
        ``d`` outside ``[0, dimension - 1]`` raises ``ValueError`` on every rank."""
        with agreed(self.comm):
            self._check_d(d, self.dimension - 1)
        S = self.stars
        codes, ptr = {0: (self.ep, S.eptr), 1: (self.tp, S.tptr), 2: (self.qp, S.qptr)}.get(
            d, (None, None))
        if codes is None:
            empty = (np.zeros((0, d + 1), np.int64), np.zeros((0, d + 2), np.int64))
            return empty
        i, s = self._slots(codes, ptr, lambda c: c >= DOWN) if d > 0 else \
            self._slots(codes, ptr, lambda c: c == TO_VERTEX)
        hi = self.local_cells(d + 1, i, s, global_ids=True)
        if d == 0:
            lo = hi[:, :1]
        else:
            lo = self.local_cells(d, i, codes[ptr[i] + s] - DOWN, global_ids=True)
        lo, hi = np.sort(lo, axis=1), np.sort(hi, axis=1)
        lo = np.concatenate(self.comm.allgather(lo)).reshape(-1, d + 1)
        hi = np.concatenate(self.comm.allgather(hi)).reshape(-1, d + 2)
        o = np.lexsort(lo.T[::-1])
        return lo[o], hi[o]


def discrete_gradient(domain, values, *, axes: str | None = None) -> DiscreteGradient:
    """The lower-star discrete gradient of a vertex field.

    Parameters
    ----------
    domain : Grid or SimplicialComplex
    values : DistVector on ``domain.vertex_layout`` or the full global array
    axes : str, optional
        The axis order of a 2-D/3-D ``values`` array on a Grid, as for
        :func:`critical_points`.

    Returns
    -------
    DiscreteGradient
        ``.critical_counts()``, ``.critical_cells(d)``, ``.pairs(d)``; on a
        cubical grid a ``CubicalGradient`` with the same methods, whose cells
        are edges, squares and cubes (rows of 2, 4 and 8 vertex ids).

    Raises
    ------
    TypeError, ValueError
        On every rank, as for :func:`critical_points`.

    Notes
    -----
    Collective on ``domain.comm``: the global order (a sample sort) and one
    ghost exchange of it; the pairing itself is local. Each vertex's lower
    star (the cells whose maximum vertex, in the ``(value, id)`` order, it
    is) is processed by ProcessLowerStars with TTK's choices (the steepest
    edge pairs with the vertex; cells compared by their lower vertices'
    orders sorted descending). Ties in value are broken by global vertex id
    and cells are reported in global ids, so under a METIS or RCB partition
    of a complex the result is the same as under blocks. The cells' Euler
    characteristic is preserved: ``sum (-1)^d critical_counts()[d] ==
    chi(domain)``.

    References
    ----------
    .. [1] V. Robins, P. J. Wood, A. P. Sheppard, "Theory and algorithms for
       constructing discrete Morse complexes from grayscale digital images",
       IEEE TPAMI 33(8), 2011.
    .. [2] J. Tierny et al., "The Topology ToolKit", IEEE TVCG 24(1), 2018
       (DiscreteGradient::processLowerStars).
    """
    check_domain(domain)
    vec = domain.vertex_values(values, axes=axes)
    return gradient_from_order(domain, global_order(vec, ids=owned_global_ids(domain)))


def gradient_from_order(domain, order: DistVector) -> DiscreteGradient:
    """:func:`discrete_gradient` from a global order already computed
    (``global_order(vec, ids=owned_global_ids(domain))`` for a result that
    does not depend on the partition). Collective on ``domain.comm`` (one ghost exchange
    and one agreed check)."""
    if getattr(domain, "cubical", False):
        from ._cubical import cubical_gradient
        return cubical_gradient(domain, order)
    ghosted = domain.ghosted(np.ascontiguousarray(order.local, dtype=np.int64))
    S = Stars(domain, ghosted)
    # the kernel packs a star slot in 10 bits (grids: 14 / 36 / 24 slots)
    agree(domain.comm, ValueError("a vertex star has more than 1023 edges, triangles or "
                                  "tetrahedra") if max(S.emax, S.tmax, S.qmax) >= 1024 else None)
    n = S.n_owned
    vp = np.empty(n, np.int16)
    ep = np.empty(int(S.eptr[-1]), np.int16)
    tp = np.empty(int(S.tptr[-1]), np.int16)
    # tt counts pairing steps within one lower star: at most 38 on a grid
    # (14 edges, 36 triangles, 24 tets), so one byte there
    tt = np.empty(int(S.tptr[-1]), np.int8 if S.mode == GRID else np.int16)
    qp = np.empty(int(S.qptr[-1]), np.int16)
    if n:
        lower_star_gradient(S.table(), vp, ep, tp, tt, qp)
    return DiscreteGradient(domain, order, S, vp, ep, tp, tt, qp)
