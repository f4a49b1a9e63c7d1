"""Krylov solvers on distributed operators: CG, pipelined CG, GMRES, FGMRES,
BiCGStab and MINRES, with PETSc-style convergence reporting.

Every solver has scipy's signature, ``method(A, b, x0=None, *, rtol=1e-5,
atol=0.0, maxiter=None, M=None, callback=None, ...)``, returns ``(x, info)``
with ``info`` a :class:`SolveInfo`, and is collective on ``A.comm``. The
checks at their door (:func:`check_system`, :func:`check_gmres_options`) are
public so that other backends (``dmsolve.petsc``) refuse the same inputs.
"""

from ._bicgstab import bicgstab
from ._cg import cg
from ._check import CheckedSystem, check_system
from ._fgmres import fgmres
from ._gmres import check_gmres_options, gmres
from ._info import ConvergedReason, ConvergenceError, SolveInfo
from ._minres import minres
from ._monitor import KSPMonitor
from ._pipecg import pipecg
from ._solve import BACKENDS, METHODS, available_methods, register_method, solve

__all__ = [
    "cg", "pipecg", "gmres", "fgmres", "bicgstab", "minres",
    "solve", "register_method", "available_methods", "METHODS", "BACKENDS",
    "check_system", "CheckedSystem", "check_gmres_options",
    "SolveInfo", "ConvergedReason", "ConvergenceError", "KSPMonitor",
]
