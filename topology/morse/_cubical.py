"""The lower-star discrete gradient of a vertex field on a grid's cubical
complex: each rank pairs the cells of the lower stars of its owned vertices
(``_cubical_lower_star``) on the doubled grid of its ghosted planes
(``_cubical_cells``), one byte per cell."""

from __future__ import annotations

import itertools

import numpy as np

from dmsolve import DistVector
from dmsolve.threads import parallel_for, parallel_map

from ..kernels import item_blocks, run_blocks
from ._cubical_cells import (CRITICAL, SLOTS, CubeGeometry, cells_of, code_vertex, cube_geometry,
                             star_tables)
from ._cubical_lower_star import lower_stars
from ._gradient_base import Gradient

__all__ = ["CubicalGradient", "cubical_gradient"]


class CubicalGradient(Gradient):
    """The lower-star discrete gradient of a vertex field on a cubical grid.

    Each rank holds the pairs of the lower stars of its owned vertices, one
    byte per cell of its doubled grid for the pairing code and step
    (``C``), with the ghosted vertex order (``O``) and the slab's
    :class:`CubeGeometry` (``geometry``). The same methods as
    :class:`topology.DiscreteGradient`; cells are reported as rows of global
    vertex ids (2, 4 and 8 vertices for edges, squares and cubes), sorted
    ascending. Not collective to construct (use the collective
    :func:`topology.discrete_gradient`); the ``local_*`` methods are not
    collective, the others are, as each says.
    """

    def __init__(self, grid, order: DistVector, geometry: CubeGeometry, O: np.ndarray,
                 C: np.ndarray):
        super().__init__(grid, order)
        self.geometry = geometry
        self.O, self.C = O, C
        self._crit = None

    def _critical(self):
        """``(positions, codes, dimensions, keys)`` of every critical cell of
        this rank, found once. Not collective."""
        if self._crit is None:
            # by blocks of cells: a mask of the whole doubled grid (8 bytes per
            # vertex) would be the gradient phase's largest temporary
            # (numpy releases the GIL in these passes: the blocks run on the
            # rank's threads, and are joined in order)
            step = 1 << 20
            C = self.C

            def scan(b):
                a = b * step
                return np.flatnonzero(C[a:a + step] & 7 == CRITICAL + 1) + a
            pos = np.concatenate(parallel_map(scan, -(-C.size // step))
                                 or [np.zeros(0, np.int64)])
            code, dim, key = run_blocks(cells_of, (self.O, self.geometry, C), (pos,),
                                        min_block=1 << 14)
            self._crit = (pos, code, dim, key)
        return self._crit

    def forget_critical(self) -> None:
        """Drop the critical cells found by :meth:`local_critical` (as large as
        the Morse complex) once their copies are all that is read on. Not
        collective."""
        self._crit = None

    def local_critical(self, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(local positions, global codes, filtration keys)`` of this rank's
        critical d-cells. Not collective; ``ValueError`` unless ``0 <= d <=
        dimension``."""
        self._check_d(d, self.dimension)
        pos, code, dim, key = self._critical()
        m = dim == d
        return pos[m], code[m], key[m]

    def local_cells(self, codes: np.ndarray) -> np.ndarray:
        """Global vertex ids of the cells with these codes (rows, ascending),
        for cells of one dimension. Not collective."""
        codes = np.asarray(codes, np.int64)
        g = self.geometry
        v, k = code_vertex(codes), codes % SLOTS
        delta = star_tables()[4][k]                           # (dz, dy, dx)
        xyz = np.column_stack((v % g.X, (v // g.X) % g.Y, v // (g.X * g.Y)))
        d_xyz = delta[:, ::-1]
        rows = []
        for e in itertools.product((0, 1), repeat=3):
            c = xyz + d_xyz * np.array(e)
            rows.append((c[:, 2] * g.Y + c[:, 1]) * g.X + c[:, 0])
        ids = np.sort(np.stack(rows, axis=1), axis=1) if rows else np.zeros((0, 1), np.int64)
        out = [np.unique(r) for r in ids]
        width = max((len(r) for r in out), default=1)
        return np.array(out, np.int64).reshape(-1, width)

    # -- what the gathered views of Gradient read (not collective)
    def cell_width(self, d: int) -> int:
        """Vertices of a d-cell: 2**d. Not collective."""
        return 2 ** d

    def local_counts(self) -> np.ndarray:
        """This rank's critical cells of each dimension. Not collective."""
        dim = self._critical()[2]
        return np.bincount(dim, minlength=4)[:self.dimension + 1].astype(np.int64)

    def local_critical_rows(self, d: int) -> np.ndarray:
        """This rank's critical d-cells as sorted rows of global ids. Not collective."""
        _, code, _ = self.local_critical(d)
        return self.local_cells(code)

    def local_pairs(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        """This rank's gradient pairs of dimension d as sorted rows. Not collective."""
        g = self.geometry
        V = (self.C & 7).astype(np.int64) - 1           # the pairing codes
        pos = np.flatnonzero(V > 0)
        code, dim, _ = cells_of(self.O, g, self.C, pos) if pos.size else (pos,) * 3
        m = dim == d + 1
        hi_pos, hi_code = pos[m], code[m]
        c = V[hi_pos]
        axis, sign = (c - 1) >> 1, np.where((c - 1) & 1, 1, -1)
        stride = np.array([1, g.DX, g.DX * g.DY])[axis]
        lo_pos = hi_pos + sign * stride
        # keep the pairs whose partner is a facet (the higher cell points down)
        if lo_pos.size:
            lo_code, lo_dim, _ = cells_of(self.O, g, self.C, lo_pos)
            keep = lo_dim == d
        else:
            lo_code, keep = lo_pos, np.zeros(0, bool)
        return self.local_cells(lo_code[keep]), self.local_cells(hi_code[keep])


def cubical_gradient(grid, order: DistVector) -> CubicalGradient:
    """The discrete gradient of a cubical grid from the global order.
    Collective on ``grid.comm`` (one ghost exchange)."""
    g = cube_geometry(grid)
    local = np.ascontiguousarray(order.local, np.int64)
    # one rank has no ghost planes, and the kernels only read the order: no copy
    O = local if grid.comm.Get_size() == 1 else np.ascontiguousarray(grid.ghosted(local))
    C = np.zeros(g.DZ * g.DY * g.DX, np.uint8)      # every cell UNKNOWN (see _put)
    dim, sub, fac, cof, _ = star_tables()
    # blocks of owned planes on the rank's threads: each vertex writes only
    # its own lower star's cells, so the bytes do not depend on the blocks
    cut = g.oz0 + item_blocks(g.oz1 - g.oz0, min_block=1)

    def planes(b):
        lower_stars(O, g, C, dim, sub, fac, cof, int(cut[b]), int(cut[b + 1]))
    parallel_for(planes, cut.size - 1)
    return CubicalGradient(grid, order, g, O, C)
