"""Lower-star discrete gradient of a vertex field (Robins, Wood, Sheppard;
TTK's DiscreteGradient), on implicit Freudenthal grids and explicit complexes.

Every cell belongs to the lower star of its maximum vertex in the global
``(value, id)`` order, and the pairs of a lower star depend on that vertex's
star only, which the ghost layer completes: each rank pairs the cells of the
lower stars of the vertices it owns, and the result does not depend on the
number of ranks.
"""

from __future__ import annotations

import numpy as np

from dmsolve import DistVector, agree
from dmsolve.threads import parallel_for

from ..core import check_domain, owned_global_ids
from ..kernels import item_blocks
from ._gradient_base import Gradient
from ._lower_star import CRITICAL, DOWN, TO_VERTEX, lower_star_gradient
from ._order import global_order
from ._stars import Stars

#: The fewest owned vertices worth a block of lower stars of their own (a
#: star costs about a microsecond: a block, some milliseconds)
STAR_BLOCK = 1 << 12

__all__ = ["discrete_gradient", "gradient_from_order", "simplicial_gradient",
           "DiscreteGradient"]


class DiscreteGradient(Gradient):
    """The lower-star discrete gradient of a vertex field on a simplicial
    domain (a Freudenthal grid or a complex).

    Attributes
    ----------
    domain : Domain
    order : DistVector
        The global vertex order the gradient was built from.
    stars : Stars
        The star tables of the owned vertices.

    Notes
    -----
    Each rank holds the pairs of the lower stars of its owned vertices
    (``vp``, ``ep``, ``tp``, ``qp``: one code per star slot, see
    ``_lower_star``; ``tt`` the steps of the triangles). Not collective to
    construct (use the collective :func:`discrete_gradient`). The
    ``local_*`` methods are not collective; the others gather and are
    collective on ``comm``, as each says.
    """

    def __init__(self, domain, order: DistVector, stars: Stars, codes: tuple):
        super().__init__(domain, order)
        self.stars = stars
        self.vp, self.ep, self.tp, self.tt, self.qp = codes

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

    # -- what the gathered views of Gradient read (not collective)
    def cell_width(self, d: int) -> int:
        """Vertices of a d-cell: d + 1. Not collective."""
        return d + 1

    def local_counts(self) -> np.ndarray:
        """This rank's critical cells of each dimension. Not collective."""
        return np.array([self.local_critical(k)[0].size for k in range(self.dimension + 1)],
                        dtype=np.int64)

    def local_critical_rows(self, d: int) -> np.ndarray:
        """This rank's critical d-cells as sorted rows of global ids. Not collective."""
        i, s = self.local_critical(d)
        return np.sort(self.local_cells(d, i, s, global_ids=True), axis=1)

    def local_pairs(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        """This rank's gradient pairs of dimension d as sorted rows. Not collective."""
        S = self.stars
        codes, ptr = {0: (self.ep, S.eptr), 1: (self.tp, S.tptr), 2: (self.qp, S.qptr)}[d]
        i, s = self._slots(codes, ptr, lambda c: c >= DOWN) if d > 0 else \
            self._slots(codes, ptr, lambda c: c == TO_VERTEX)
        hi = self.local_cells(d + 1, i, s, global_ids=True)
        if d == 0:
            lo = hi[:, :1]
        else:
            lo = self.local_cells(d, i, codes[ptr[i] + s] - DOWN, global_ids=True)
        return np.sort(lo, axis=1), np.sort(hi, axis=1)


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
    Gradient
        ``.critical_counts()``, ``.critical_cells(d)``, ``.pairs(d)``: a
        :class:`DiscreteGradient` on a Freudenthal grid or a complex, a
        ``CubicalGradient`` on a cubical grid, whose cells are edges,
        squares and cubes (rows of 2, 4 and 8 vertex ids).

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

    Examples
    --------
    A 5 x 4 image with two basins, of minima 1 and 0, and a ring of 5s
    around the 6 in the middle:

    >>> import numpy as np
    >>> from mpi4py import MPI
    >>> import topology
    >>> comm = MPI.COMM_WORLD
    >>> image = np.array([[5, 4, 5, 6, 7],
    ...                   [4, 1, 3, 2, 6],
    ...                   [5, 3, 6, 0, 5],
    ...                   [6, 4, 5, 3, 6]], dtype=float)     # values[y, x]
    >>> grid = topology.Grid((5, 4), comm)
    >>> gradient = topology.discrete_gradient(grid, image, axes="yx")
    >>> c = gradient.critical_counts()
    >>> print(c, c[0] - c[1] + c[2])
    [2, 2, 1] 1

    Two critical vertices (the minima), two critical edges (the saddle
    where the basins meet, and the one that closes the ring) and one
    critical triangle (where the ring is filled): their alternating sum is
    1, the Euler characteristic of the rectangle. The cells, as rows of
    vertex ids:

    >>> print(gradient.critical_cells(0).ravel(), gradient.critical_cells(1).tolist())
    [ 6 13] [[7, 8], [16, 17]]
    >>> print(gradient.critical_cells(2).tolist())
    [[12, 16, 17]]
    """
    check_domain(domain)
    vec = domain.vertex_values(values, axes=axes)
    return domain.kernels.gradient(global_order(vec, ids=owned_global_ids(domain)))


def gradient_from_order(domain, order: DistVector) -> Gradient:
    """:func:`discrete_gradient` from a global order already computed
    (``global_order(vec, ids=owned_global_ids(domain))`` for a result that
    does not depend on the partition): the domain's kind builds it.
    Collective on ``domain.comm``."""
    return domain.kernels.gradient(order)


def simplicial_gradient(domain, order: DistVector, stars: Stars) -> DiscreteGradient:
    """The lower-star gradient of a simplicial domain from its star tables
    (built from the ghosted ``order``). Collective on ``domain.comm`` (one
    agreed check)."""
    S = stars
    # the kernel packs a star slot in 10 bits (grids: 14 / 36 / 24 slots)
    agree(domain.comm, ValueError("a vertex star has more than 1023 edges, triangles or "
                                  "tetrahedra") if max(S.emax, S.tmax, S.qmax) >= 1024 else None)
    n = S.n_owned
    vp = np.empty(n, np.int16)
    ep = np.empty(int(S.eptr[-1]), np.int16)
    tp = np.empty(int(S.tptr[-1]), np.int16)
    tt = np.empty(int(S.tptr[-1]), S.step_dtype)
    qp = np.empty(int(S.qptr[-1]), np.int16)
    # blocks of owned vertices on the rank's threads (each writes its own stars)
    cut = item_blocks(n, min_block=STAR_BLOCK)
    table = S.table()

    def stars(b):
        lower_star_gradient(table, vp, ep, tp, tt, qp, int(cut[b]), int(cut[b + 1]))
    if n:
        parallel_for(stars, cut.size - 1)
    return DiscreteGradient(domain, order, S, (vp, ep, tp, tt, qp))
