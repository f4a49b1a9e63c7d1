"""Flexible GMRES: right preconditioning by a preconditioner that may change
from one application to the next (inner Krylov solves, AMG with varying
cycles)."""

from __future__ import annotations

from ._arnoldi import arnoldi_solve
from ._docs import document
from ._gmres import check_gmres_options
from ._stopping import DEFAULT_DIVTOL
from ._system import make_system

__all__ = ["fgmres"]


@document
def fgmres(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None,
           nullspace=None, monitor=None, raise_on_failure=False, divtol=DEFAULT_DIVTOL,
           restart=30, orthog="cgs", checkpoint=None,
           reproducible=False):
    """Solve ``A x = b`` by flexible GMRES(``restart``), right preconditioned.

    Stops when ``||b - A x|| <= max(rtol*||b||, atol)`` (the Arnoldi
    estimate of the unpreconditioned residual; the true residual at each
    restart). ``M`` may be nonlinear or change between applications: the
    preconditioned vectors ``z_j = M v_j`` are stored and
    ``x = x0 + Z y``.

    Parameters
    ----------
    COMMON_PARAMETERS
    restart : int, optional
        Krylov vectors per cycle (default 30). FGMRES stores ``2*restart``
        vectors.
    orthog : {"cgs", "cgs2", "mgs"}, optional
        As in :func:`gmres`.

    COMMON_SECTIONS

    Right preconditioning only, as in PETSc's ``KSPFGMRES``.

    References
    ----------
    .. [1] Y. Saad, "A flexible inner-outer preconditioned GMRES algorithm",
       SIAM J. Sci. Comput. 14(2):461-469, 1993.
    .. [2] Y. Saad, *Iterative Methods for Sparse Linear Systems*, 2nd ed.,
       SIAM, 2003, Algorithm 9.6.

    Examples
    --------
    A preconditioner that is itself an iterative solve, a different linear
    map at every application: a loose inner GMRES on a nonsymmetric matrix.

    >>> import numpy as np
    >>> from mpi4py import MPI
    >>> import dmsolve
    >>> comm = MPI.COMM_WORLD
    >>> A = dmsolve.gallery.convection_diffusion(10, comm)
    >>> b = dmsolve.gallery.rhs(A, "random")
    >>> def inner(r):
    ...     return dmsolve.gmres(A, r, rtol=0.1)[0]
    >>> x, info = dmsolve.fgmres(A, b, rtol=1e-8, M=inner)
    >>> print(info.converged, info.reason, info.iterations)
    True ConvergedReason.RTOL 7
    >>> As, xs, bs = A.to_scipy(), x.gather(), b.gather()
    >>> print(np.linalg.norm(bs - As @ xs) <= 1e-8 * np.linalg.norm(bs))
    True
    """
    s = make_system("fgmres", A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, M=M,
                    reproducible=reproducible,
                    callback=callback, nullspace=nullspace, monitor=monitor, divtol=divtol,
                    norm_type="unpreconditioned", raise_on_failure=raise_on_failure,
                    project_rhs=False, checkpoint=checkpoint,
                    check=lambda: check_gmres_options(restart, orthog))
    return arnoldi_solve(s, restart, orthog, left=False, flexible=True)
