"""Critical points of a vertex scalar field, typed with TTK's codes.

A vertex is classified by the numbers of connected components of its lower
and upper link in the global ``(value, id)`` order; the domain counts them
(``link_components``: a :class:`Grid` from a table over all lower/upper
neighbour masks, a :class:`SimplicialComplex` from one connected-components
pass over the link graphs of all owned vertices at once).
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from dmsolve import DistVector

from ..core import check_domain, owned_global_ids
from ._order import global_order

__all__ = ["critical_points", "classify_vertices", "CriticalPoints", "classify", "MINIMUM",
           "SADDLE1",
           "SADDLE2", "MAXIMUM", "DEGENERATE", "REGULAR", "TYPE_NAMES"]

MINIMUM, SADDLE1, SADDLE2, MAXIMUM, DEGENERATE, REGULAR = 0, 1, 2, 3, 4, 5
TYPE_NAMES = {MINIMUM: "minimum", SADDLE1: "1-saddle", SADDLE2: "2-saddle",
              MAXIMUM: "maximum", DEGENERATE: "degenerate", REGULAR: "regular"}


class CriticalPoints:
    """Critical types of every vertex (TTK codes) and the global vertex order.

    Attributes
    ----------
    types : DistVector of int32 on the vertex layout, or None
        0 minimum, 1 1-saddle, 2 2-saddle, 3 maximum, 4 degenerate, 5 regular.
        None on a grid in out-of-core mode, where only the critical
        vertices are kept (:attr:`local_critical`).
    order : DistVector of int64, or None
        Position of each vertex in the ``(value, id)`` order (None in
        out-of-core mode, which never forms it).
    local_critical : tuple of arrays
        ``(global_ids, types)`` of this rank's critical vertices, by id.

    Notes
    -----
    Not collective to construct (:func:`critical_points` builds it).
    """

    def __init__(self, types: DistVector, order: DistVector, ids: np.ndarray | None = None):
        self.types = types
        self.order = order
        # global ids of the owned entries when they differ from the layout
        # index (a complex partitioned by METIS or RCB)
        self._ids = ids
        self._comm = types.comm if types is not None else None
        self._critical = None
        self._n = types.global_size if types is not None else 0

    @classmethod
    def sparse(cls, comm, n: int, ids: np.ndarray, types: np.ndarray) -> "CriticalPoints":
        """Only the critical vertices, ``ids`` ascending on each rank and
        rank by rank, of ``n`` vertices in all (out-of-core mode). Not
        collective."""
        out = cls(None, None)
        out._comm = comm
        out._n = int(n)
        out._critical = (np.asarray(ids, np.int64), np.asarray(types, np.int32))
        return out

    @property
    def comm(self):
        """The communicator of :attr:`types`."""
        return self._comm

    @property
    def local_critical(self) -> tuple[np.ndarray, np.ndarray]:
        """``(global_ids, types)`` of this rank's critical vertices (type != 5),
        sorted by id. Not collective."""
        if self._critical is not None:
            return self._critical
        t = self.types.local
        pick = np.flatnonzero(t != REGULAR)
        ids = (pick + self.types.layout.start).astype(np.int64) if self._ids is None \
            else self._ids[pick]
        return ids, t[pick].astype(np.int32)

    def gather(self) -> tuple[np.ndarray, np.ndarray]:
        """``(global_ids, types)`` of all critical vertices (type != 5), sorted
        by id, on every rank. Collective on ``comm``."""
        ids, types = self.local_critical
        parts = self.comm.allgather((ids, types))
        ids = np.concatenate([p[0] for p in parts])
        types = np.concatenate([p[1] for p in parts])
        if self._ids is None:
            return ids, types    # ranks own ascending id ranges: rank order is id order
        o = np.argsort(ids)
        return ids[o], types[o]

    def counts(self) -> dict[str, int]:
        """Number of vertices of each type, by TTK name. Collective on ``comm``."""
        if self._critical is None:
            total = np.bincount(self.types.local, minlength=6)[:6].astype(np.int64)
        else:
            total = np.bincount(self._critical[1], minlength=6)[:6].astype(np.int64)
        self.comm.Allreduce(MPI.IN_PLACE, total, op=MPI.SUM)
        if self._critical is not None:
            total[REGULAR] = self._n - (total.sum() - total[REGULAR])
        return {TYPE_NAMES[i]: int(total[i]) for i in range(6)}


def classify(lower: np.ndarray, upper: np.ndarray, dimension: int,
             on_boundary: np.ndarray | None = None,
             lower_on_boundary: np.ndarray | None = None,
             upper_on_boundary: np.ndarray | None = None) -> np.ndarray:
    """TTK critical type from lower/upper link component counts. Not collective.

    ``(0, 1)`` minimum, ``(1, 0)`` maximum, ``(1, 1)`` regular; in 2D (and
    below) ``(2, 1)``, ``(1, 2)``, ``(2, 2)`` are 1-saddles; in 3D ``(2, 1)``
    is a 1-saddle and ``(1, 2)`` a 2-saddle; anything else is degenerate.
    In 3D a boundary vertex with ``(1, 1)`` is a 1-saddle when only upper-link
    vertices lie on the boundary and a 2-saddle when only lower-link ones do
    (TTK's ``ScalarFieldCriticalPoints``).

    Examples
    --------
    >>> import topology
    >>> types = topology.classify([0, 1, 1, 2], [1, 0, 1, 1], 2)
    >>> print(types, [topology.TYPE_NAMES[int(t)] for t in types])
    [0 3 5 1] ['minimum', 'maximum', 'regular', '1-saddle']
    """
    L = np.asarray(lower)
    U = np.asarray(upper)
    t = np.full(L.shape, DEGENERATE, dtype=np.int32)
    t[(L == 0) & (U == 1)] = MINIMUM
    t[(L == 1) & (U == 0)] = MAXIMUM
    regular = (L == 1) & (U == 1)
    t[regular] = REGULAR
    if dimension <= 2:
        t[((L == 2) & (U == 1)) | ((L == 1) & (U == 2)) | ((L == 2) & (U == 2))] = SADDLE1
    else:
        t[(L == 2) & (U == 1)] = SADDLE1
        t[(L == 1) & (U == 2)] = SADDLE2
        if on_boundary is not None:
            b = regular & on_boundary
            lb, ub = lower_on_boundary, upper_on_boundary
            t[b & ub & ~lb] = SADDLE1
            t[b & lb & ~ub] = SADDLE2
    return t


def critical_points(domain, values, *, axes: str | None = None) -> CriticalPoints:
    """Classify every vertex of ``domain`` by the field ``values``.

    Parameters
    ----------
    domain : Grid or SimplicialComplex
    values : DistVector on ``domain.vertex_layout``, or the full global array
        on every rank. Must be finite.
    axes : str, optional
        On a Grid, the axis order of a 2-D/3-D ``values`` array: ``"zyx"``
        (``values[z, y, x]``, numpy image order) or ``"xyz"``
        (``values[x, y, z]``), ``"yx"``/``"xy"`` in 2D. Default: flat arrays
        in vertex id order, or numpy image order where the shape cannot be
        read the other way (see :class:`Grid`).

    Returns
    -------
    CriticalPoints
        ``.gather()`` gives ``(global_ids, types)`` of the critical vertices.

    Raises
    ------
    TypeError
        If ``domain`` is not a Grid or SimplicialComplex, or ``values`` are
        not real numbers (on every rank).
    ValueError
        On every rank, if ``values`` have the wrong size or are not finite,
        or a 2-D/3-D array's axis order is ambiguous without ``axes``.

    Notes
    -----
    Collective on ``domain.comm``: the global order (a sample sort), one
    ghost exchange of the order, and on a 3D complex one of boundary flags.
    On a grid in out-of-core mode, one virtual superstep instead: each
    virtual slab reads its planes and ghost planes and classifies them by
    their order there (the same comparisons), and the result keeps only
    the critical vertices (``types`` and ``order`` are None).
    Ties in value are broken by global vertex id, so the result does not
    depend on the number of ranks.

    References
    ----------
    .. [1] T. Banchoff, "Critical points and curvature for embedded
       polyhedral surfaces", Amer. Math. Monthly 77(5), 1970.
    .. [2] J. Tierny et al., "The Topology ToolKit", IEEE TVCG 24(1), 2018.

    Examples
    --------
    A 5 x 4 image with two basins, of minima 1 and 0:

    >>> import numpy as np
    >>> from mpi4py import MPI
    >>> import topology
    >>> comm = MPI.COMM_WORLD
    >>> image = np.array([[5, 4, 5, 6, 7],
    ...                   [4, 1, 3, 2, 6],
    ...                   [5, 3, 6, 0, 5],
    ...                   [6, 4, 5, 3, 6]], dtype=float)     # values[y, x]
    >>> grid = topology.Grid((5, 4), comm)
    >>> cp = topology.critical_points(grid, image, axes="yx")
    >>> print(cp.counts())
    {'minimum': 2, '1-saddle': 7, '2-saddle': 0, 'maximum': 5, 'degenerate': 0, 'regular': 6}
    >>> ids, types = cp.gather()
    >>> print(ids[types == 0], ids[types == 3])
    [ 6 13] [ 0  4 12 15 19]

    Vertex 6 is ``(x, y) = (1, 1)``, the minimum 1; 13 is ``(3, 2)``, the 0.
    Four of the maxima lie on the boundary, which TTK's rule calls a
    maximum when no neighbour is higher.
    """
    check_domain(domain)
    return domain.kernels.critical_points(values, axes)


def classify_vertices(domain, values, axes=None) -> CriticalPoints:
    """:func:`critical_points` of a domain held in memory: the global order,
    one ghost exchange of it, and each owned vertex's link components
    (``domain.link_components``). Collective on ``domain.comm``."""
    vec = domain.vertex_values(values, axes=axes)
    ids = owned_global_ids(domain)
    order = global_order(vec, ids=ids)
    lower, upper, on_boundary, lower_on_boundary, upper_on_boundary = \
        domain.link_components(domain.ghosted(order.local))
    types = classify(lower, upper, domain.dimension, on_boundary, lower_on_boundary,
                     upper_on_boundary)
    return CriticalPoints(DistVector(vec.layout, types), order, ids)
