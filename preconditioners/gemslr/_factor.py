"""Stage 3 of GeMSLR: ILUT of every subdomain block ``B_l`` on its owner, and of
the last level, redundantly on every rank or block Jacobi.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from dmsolve import DistCSR, agree

from .._local import PivotError, local_solver
from ._distribute import Level

__all__ = ["LAST_LEVEL_SOLVERS", "ilut", "factor_subdomains", "factor_last_level"]

#: how the last level (the interface of the interfaces) is solved
LAST_LEVEL_SOLVERS = ("redundant", "bjacobi")


def ilut(M: sp.csr_matrix, droptol: float, max_row_nnz: int):
    """SuperLU's ILUTP of ``M`` with parGeMSLR's fill limit. Not collective.

    SuperLU has no per-row cap, so ``max_row_nnz`` bounds the fill ratio:
    ``fill_factor = max_row_nnz / (average row count of M)``.
    """
    avg = M.nnz / max(M.shape[0], 1)
    ff = max(1.0, max_row_nnz / max(avg, 1.0))
    return local_solver("ilut", M, drop_tol=droptol, fill_factor=ff)


def _global(e: PivotError, ids: np.ndarray | None, first: int) -> str:
    """``e``'s message with the original global row of local row ``i`` of the
    block, ``ids[first + i]``, when both are known."""
    if e.local_index is None or ids is None:
        return str(e)
    return e.at_global(int(ids[first + e.local_index]))


def factor_subdomains(comm, levels: list[Level], droptol: float, max_row_nnz: int,
                      old_ids: np.ndarray | None = None) -> int:
    """ILUT of this rank's subdomain blocks of every level (``lv.blocks`` ->
    ``lv.solvers``); returns the factors' nonzeros on this rank.

    ``old_ids`` (the original global id of each of this rank's GeMSLR rows)
    lets a failure name the original global row.

    Collective on ``comm``: a zero pivot or a singular block on any rank
    raises the same ``ValueError`` on every rank.
    """
    nnz, exc = 0, None
    try:
        for l, lv in enumerate(levels):
            for j, Bj in enumerate(lv.blocks):
                try:
                    lv.solvers.append(ilut(Bj, droptol, max_row_nnz))
                except PivotError as e:
                    raise PivotError("gemslr: level %d subdomain block %d: %s"
                                     % (l, j, _global(e, old_ids,
                                                      lv.off + int(lv.sub_bounds[j])))) \
                        from None
                nnz += lv.solvers[-1].nnz
            lv.blocks = None
    except (ValueError, TypeError) as e:
        exc = e
    agree(comm, exc)
    return nnz


def factor_last_level(AL: DistCSR, how: str, droptol: float, max_row_nnz: int,
                      old_ids: np.ndarray | None = None, first: int = 0):
    """ILUT of the last level: of all of it on every rank (``"redundant"``) or
    of this rank's diagonal block (``"bjacobi"``). Returns the solver and the
    nonzeros it adds on this rank (a redundant factor counts on rank 0 only).

    With ``"bjacobi"``, ``old_ids[first + i]`` (the original global id of
    local row ``i`` of the last level) lets a failure name the original
    global row; a redundant factor names the row of the last level.

    Collective on ``AL.comm``: a zero pivot or a singular matrix on any rank
    raises the same ``ValueError`` on every rank.
    """
    comm = AL.comm
    solver, nnz, exc = None, 0, None
    try:
        if how == "redundant":
            solver = ilut(AL.to_scipy(), droptol, max_row_nnz)
            nnz = solver.nnz if comm.Get_rank() == 0 else 0
        else:
            solver = ilut(AL.diag, droptol, max_row_nnz)
            nnz = solver.nnz
    except PivotError as e:
        if how == "redundant":
            exc = PivotError("gemslr: last level: %s" % e.at("last-level", e.local_index))
        else:
            exc = PivotError("gemslr: last level: %s" % _global(e, old_ids, first))
    except (ValueError, TypeError) as e:
        exc = e
    agree(comm, exc)
    return solver, nnz
