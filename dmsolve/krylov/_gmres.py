"""Restarted GMRES, left or right preconditioned."""

from __future__ import annotations

import numpy as np

from ._arnoldi import ORTHOG, arnoldi_solve
from ._docs import document
from ._stopping import DEFAULT_DIVTOL
from ._system import make_system

__all__ = ["gmres", "check_gmres_options"]


@document
def gmres(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None,
          nullspace=None, monitor=None, raise_on_failure=False, divtol=DEFAULT_DIVTOL,
          restart=30, side="left", orthog="cgs", checkpoint=None,
          reproducible=False):
    """Solve ``A x = b`` by restarted GMRES(``restart``).

    Stops when ``||r|| <= max(rtol*||b||, atol)``, where with ``side="left"``
    (PETSc's default) ``r = M (b - A x)`` and ``||b||`` means ``||M b||``,
    and with ``side="right"`` ``r = b - A x``. Without ``M`` both are the
    unpreconditioned residual. The norms are the Arnoldi estimates
    ``|g_{j+1}|``; at each restart the true residual is recomputed, and a
    convergence the estimate claims is confirmed from ``x`` (see Notes).

    Parameters
    ----------
    COMMON_PARAMETERS
    restart : int, optional
        Krylov vectors per cycle (default 30, as PETSc).
    side : {"left", "right"}, optional
        Preconditioning side.
    orthog : {"cgs", "cgs2", "mgs"}, optional
        ``"cgs"`` (default, as PETSc): classical Gram-Schmidt, one fused
        reduction for the projections and one for the norm. ``"cgs2"``:
        classical Gram-Schmidt reorthogonalised when the
        Daniel-Gragg-Kaufman-Stewart test asks for it (the vector lost more
        than ``1 - 1/sqrt(2)`` of its norm), one reduction per iteration, two
        when reorthogonalising; robust for hard problems, but on
        diagonally dominant matrices it reorthogonalises nearly always, which
        doubles the memory traffic of the orthogonalisation. ``"mgs"``:
        modified Gram-Schmidt (``j + 2`` reductions at inner iteration
        ``j``).

    COMMON_SECTIONS

    The ``callback`` receives the current iterate, which GMRES does not
    otherwise form: with a callback every iteration solves the small
    least-squares problem and updates a copy of ``x`` (and, for right
    preconditioning, applies ``M`` once more). Use ``monitor`` to watch the
    norms cheaply. When the Krylov space becomes invariant (happy breakdown)
    without meeting the tolerance, the solve stops with ``BREAKDOWN``. With
    ``nullspace`` the null space is removed from each preconditioned vector
    (for the right-hand side of a nonsymmetric ``A``, remove the null space
    of ``A^T`` yourself). With left preconditioning the true residual norm
    ``||b - A x||`` travels in the reduction of ``||M (b - A x)||`` at each
    restart, so a convergence met there is confirmed for free. A checkpoint
    is written every ``checkpoint_every`` iterations: at a restart boundary it
    holds ``x``; inside a cycle it holds the current iterate ``x + V y`` (one
    small triangular solve; with right preconditioning one more application
    of ``M``) as ``x``, and the cycle's state (its start, the basis
    ``V`` (and ``Z``), the rotated Hessenberg matrix and the rotations) so that
    a resumed solve on the same layout continues the cycle exactly; elsewhere,
    or with another ``restart``, it restarts from the saved iterate.

    References
    ----------
    .. [1] Y. Saad and M. H. Schultz, "GMRES: a generalized minimal residual
       algorithm for solving nonsymmetric linear systems", SIAM J. Sci.
       Stat. Comput. 7(3), 1986.
    .. [2] Y. Saad, *Iterative Methods for Sparse Linear Systems*, 2nd ed.,
       SIAM, 2003, Algorithms 6.9 and 9.4-9.5.
    .. [3] J. W. Daniel, W. B. Gragg, L. Kaufman and G. W. Stewart,
       "Reorthogonalization and stable algorithms for updating the
       Gram-Schmidt QR factorization", Math. Comp. 30(136), 1976.

    Examples
    --------
    Upwind convection-diffusion on a 10 x 10 grid, a nonsymmetric matrix:

    >>> import numpy as np
    >>> from mpi4py import MPI
    >>> import dmsolve
    >>> comm = MPI.COMM_WORLD
    >>> A = dmsolve.gallery.convection_diffusion(10, comm)
    >>> b = dmsolve.gallery.rhs(A, "random")
    >>> x, info = dmsolve.gmres(A, b, rtol=1e-8)
    >>> print(info.converged, info.reason, info.iterations)
    True ConvergedReason.RTOL 25
    >>> As, xs, bs = A.to_scipy(), x.gather(), b.gather()
    >>> print(np.linalg.norm(bs - As @ xs) <= 1e-8 * np.linalg.norm(bs))
    True

    A shorter cycle stores fewer vectors and needs more iterations:

    >>> x, info = dmsolve.gmres(A, b, rtol=1e-8, restart=10)
    >>> print(info.converged, info.iterations)
    True 45
    """
    left = side == "left" and M is not None and not (isinstance(M, str) and M == "none")
    s = make_system("gmres", A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, M=M,
                    reproducible=reproducible,
                    callback=callback, nullspace=nullspace, monitor=monitor, divtol=divtol,
                    norm_type="preconditioned" if left else "unpreconditioned",
                    raise_on_failure=raise_on_failure, project_rhs=False,
                    checkpoint=checkpoint,
                    check=lambda: check_gmres_options(restart, orthog, side))
    return arnoldi_solve(s, restart, orthog, left=left, flexible=False)


def check_gmres_options(restart, orthog, side: str = "right") -> None:
    """Check the options of :func:`gmres` and :func:`fgmres` (rank-independent).

    Shared with ``solve(..., backend="petsc")``. Not collective.

    Raises
    ------
    ValueError
        ``restart`` is not a positive integer, ``orthog`` not one of
        ``"cgs"``, ``"cgs2"``, ``"mgs"``, or ``side`` not ``"left"`` or
        ``"right"``.
    """
    if side not in ("left", "right"):
        raise ValueError("side must be 'left' or 'right', got %r" % (side,))
    if isinstance(restart, (bool, np.bool_)) or not isinstance(restart, (int, np.integer)) \
            or restart < 1:
        raise ValueError("restart must be a positive integer, got %r" % (restart,))
    if orthog not in ORTHOG:
        raise ValueError("orthog must be one of %s, got %r" % (", ".join(ORTHOG), orthog))
