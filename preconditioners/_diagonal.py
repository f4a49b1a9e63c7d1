"""The one zero-diagonal check of every preconditioner and smoother that divides
by the diagonal (jacobi, cheby, amg and its smoothers), agreed across ranks."""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

__all__ = ["refuse_rows", "checked_diagonal"]


def refuse_rows(layout, bad: np.ndarray, what: str) -> None:
    """Raise ``ValueError(what + " in N rows, the first at global row R")`` on
    every rank if ``bad`` (a boolean mask of this rank's rows) is true anywhere.

    ``N`` and ``R`` are global (the count over all ranks and the smallest
    global row), so the message is the same on every rank. Collective on
    ``layout.comm``: one ``allreduce``, two when some row is bad.
    """
    comm = layout.comm
    rows = np.flatnonzero(bad)
    count = comm.allreduce(int(rows.size), op=MPI.SUM)
    if count == 0:
        return
    first = comm.allreduce(layout.start + int(rows[0]) if rows.size else layout.global_size,
                           op=MPI.MIN)
    raise ValueError("%s in %d row%s, the first at global row %d"
                     % (what, count, "" if count == 1 else "s", first))


def checked_diagonal(A, who: str, *, allow_empty_rows: bool = False) -> np.ndarray:
    """This rank's diagonal of the DistCSR ``A``, refusing zero or non-finite
    entries (:func:`refuse_rows`): ``who`` names the caller in the message.

    With ``allow_empty_rows`` a zero diagonal is accepted in a row with no
    nonzero entry at all: such a row of a coarse AMG level (a coarse basis
    function in the null space of a semi-definite ``A``) says ``0 = b_i``,
    and relaxation rightly leaves ``x_i`` alone. A zero diagonal in a row
    that couples to others (a saddle point's constraint rows) is refused
    either way: relaxation would skip the row and the preconditioner would
    be singular.

    Collective on ``A.comm``.

    Raises
    ------
    ValueError
        On every rank, naming the number of such rows and the first global row.
    """
    d = A.diagonal().local
    bad = ~np.isfinite(d) | (d == 0)
    if allow_empty_rows and bad.any():
        bad &= ~((d == 0) & (A.row_sums(absolute=True).local == 0))
    refuse_rows(A.row_layout, bad, "%s: the diagonal of A is zero or not finite" % who)
    return d
