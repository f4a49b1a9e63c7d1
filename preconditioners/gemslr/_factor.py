"""Stage 3 of GeMSLR: ILUT of every subdomain block ``B_l`` on its owner, and of
the last level, redundantly on every rank or block Jacobi.
"""

from __future__ import annotations

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


def factor_subdomains(comm, levels: list[Level], droptol: float, max_row_nnz: int) -> int:
    """ILUT of this rank's subdomain blocks of every level (``lv.blocks`` ->
    ``lv.solvers``); returns the factors' nonzeros on this rank.

    Collective on ``comm``: a zero pivot on any rank raises the same
    ``ValueError`` on every rank.
    """
    nnz, exc = 0, None
    try:
        for l, lv in enumerate(levels):
            for j, Bj in enumerate(lv.blocks):
                try:
                    lv.solvers.append(ilut(Bj, droptol, max_row_nnz))
                except PivotError as e:
                    raise PivotError("gemslr: level %d subdomain block %d: %s"
                                     % (l, j, e)) from None
                nnz += lv.solvers[-1].nnz
            lv.blocks = None
    except (ValueError, TypeError) as e:
        exc = e
    agree(comm, exc)
    return nnz


def factor_last_level(AL: DistCSR, how: str, droptol: float, max_row_nnz: int):
    """ILUT of the last level: of all of it on every rank (``"redundant"``) or
    of this rank's diagonal block (``"bjacobi"``). Returns the solver and the
    nonzeros it adds on this rank (a redundant factor counts on rank 0 only).

    Collective on ``AL.comm``: a zero pivot on any rank raises the same
    ``ValueError`` on every rank.
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
        exc = PivotError("gemslr: last level: %s" % e)
    except (ValueError, TypeError) as e:
        exc = e
    agree(comm, exc)
    return solver, nnz
