"""What every lower-star discrete gradient answers, whatever its cells:
:class:`Gradient`, the base of the simplicial and the cubical gradients."""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from dmsolve import DistVector
from dmsolve.validate import agreed

__all__ = ["Gradient"]


class Gradient:
    """The lower-star discrete gradient of a vertex field on a domain.

    Each rank holds the pairs of the lower stars of its owned vertices.
    Subclasses say how a rank counts and lists its critical cells and pairs
    (:meth:`local_counts`, :meth:`local_critical_rows`, :meth:`local_pairs`);
    the gathered views below are the same for every kind of cell.

    Attributes
    ----------
    domain : Domain
    order : DistVector
        The global vertex order the gradient was built from.

    Notes
    -----
    Not collective to construct (use the collective
    :func:`topology.discrete_gradient`). The ``local_*`` methods are not
    collective; the others gather and are collective on ``comm``, as each
    says.
    """

    def __init__(self, domain, order: DistVector):
        self.domain = domain
        self.order = order

    @property
    def comm(self) -> MPI.Comm:
        return self.domain.comm

    @property
    def dimension(self) -> int:
        return self.domain.dimension

    def _check_d(self, d, top: int) -> None:
        if not isinstance(d, (int, np.integer)) or isinstance(d, bool) or not 0 <= d <= top:
            raise ValueError("d must be an integer in [0, %d], got %r" % (top, d))

    # -- what a kind of cell says (not collective)
    def cell_width(self, d: int) -> int:
        """Vertices of a d-cell. Not collective."""
        raise NotImplementedError

    def local_counts(self) -> np.ndarray:
        """This rank's critical cells of each dimension 0..d (int64). Not collective."""
        raise NotImplementedError

    def local_critical_rows(self, d: int) -> np.ndarray:
        """This rank's critical d-cells as rows of global vertex ids, each sorted.
        Not collective."""
        raise NotImplementedError

    def local_pairs(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        """This rank's gradient pairs (d-cell, (d+1)-cell) as rows of global
        vertex ids, each sorted. Not collective."""
        raise NotImplementedError

    # -- gathered views (collective)
    def critical_counts(self) -> list[int]:
        """Number of critical cells of each dimension 0..d, the same on every
        rank. Collective on ``comm``."""
        cnt = np.ascontiguousarray(self.local_counts(), dtype=np.int64)
        self.comm.Allreduce(MPI.IN_PLACE, cnt, op=MPI.SUM)
        return [int(c) for c in cnt]

    def critical_cells(self, d: int) -> np.ndarray:
        """All critical d-cells as rows of global vertex ids sorted ascending,
        rows in lexicographic order, on every rank. Collective on ``comm``;
        a ``d`` outside ``[0, dimension]`` raises ``ValueError`` on every rank."""
        with agreed(self.comm):
            self._check_d(d, self.dimension)
        w = self.cell_width(d)
        rows = self.local_critical_rows(d).reshape(-1, w)
        rows = np.concatenate(self.comm.allgather(rows)).reshape(-1, w)
        return rows[np.lexsort(rows.T[::-1])] if rows.size else rows

    def pairs(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        """All gradient pairs (d-cell, (d+1)-cell) as two arrays of sorted
        global vertex-id rows, on every rank. Collective on ``comm``; gathers
        the whole gradient of dimension d: meant for checks on small domains.
        A ``d`` outside ``[0, dimension - 1]`` raises ``ValueError`` on every
        rank."""
        with agreed(self.comm):
            self._check_d(d, self.dimension - 1)
        lo, hi = self.local_pairs(d)
        wl, wh = self.cell_width(d), self.cell_width(d + 1)
        lo = np.concatenate(self.comm.allgather(lo.reshape(-1, wl))).reshape(-1, wl)
        hi = np.concatenate(self.comm.allgather(hi.reshape(-1, wh))).reshape(-1, wh)
        o = np.lexsort(lo.T[::-1])
        return lo[o], hi[o]
