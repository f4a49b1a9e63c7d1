"""Krylov solvers on distributed operators: CG, pipelined CG, GMRES, FGMRES,
BiCGStab and MINRES, with PETSc-style convergence reporting.

Every solver has scipy's signature, ``method(A, b, x0=None, *, rtol=1e-5,
atol=0.0, maxiter=None, M=None, callback=None, ...)``, takes scipy's inputs
too (a scipy matrix or ``LinearOperator`` and numpy vectors, the same on
every rank), returns ``(x, info)`` with ``info`` a :class:`SolveInfo` (and
``x`` a numpy array when ``b`` was one), and is collective on ``A.comm``. The
checks at their door (:func:`check_system`, :func:`check_gmres_options`) are
public so that other backends (``dmsolve.petsc``) refuse the same inputs.

How it is built, as scipy's iterative solvers (its ``_isolve`` package): a
thin shared entry, small parts, and one short loop per method.

- The entry, ``_system.make_system``: scipy's global inputs distributed
  (``dmsolve._interop_inputs``), the checks at the door (``_check``:
  shapes, layouts, communicators, dtypes, tolerances, ``x0``, ``M``,
  reproducible inputs), agreed across ranks, then the set-up of a
  ``System``: the work vectors, the null space, the symmetry test, ``||b||``.
  The ``System`` also makes the guarded user calls (``matvec``,
  ``precondition``, ``callback``).
- The parts, one job each: ``_reduce`` (fused, non-blocking reductions with
  the error rendezvous that tells every rank of another rank's failure;
  ``ExactReducer`` for ``reproducible=True``), ``_stopping`` (the stopping
  test, the residual history, the monitor), ``_truth`` (the true residual at
  a claimed convergence, restarts, ``FALSE_CONVERGENCE``), ``_nullspace``
  (the tested projector), ``_symmetry`` (``check=True``), ``_checkpoints``
  (the glue to :class:`dmsolve.checkpoint.Checkpointer`), ``_result`` (the
  final :class:`SolveInfo`), ``_linalg`` and ``_fused_kernels`` (local
  vector updates), ``_docs`` (the docstring sections every method shares).
- The methods: ``_cg``, ``_pipecg``, ``_minres``, ``_bicgstab``, ``_gmres``
  and ``_fgmres`` (both on the Arnoldi cycle of ``_arnoldi``). Each is the
  public function (door, resume, start) and a loop over a small dataclass
  of its vectors and scalars.

To add a method, write ``_name.py`` in that shape: ``s = make_system(...)``
(``project_rhs`` and ``symmetric`` as the method needs, ``check=`` for its
own options), ``zero_rhs(s)`` when ``s.b2norm == 0``, then a loop that
computes with ``s.matvec``, ``s.precondition`` and ``s.red.put``/``reduce``,
tests each iteration's norm with ``s.stop.test``, passes a claimed
convergence through ``s.truth.confirm``, calls ``s.callback`` and ends with
``finish(s, reason, iterations)``. Decorate it with ``_docs.document``,
export it here and register it in ``_solve.METHODS`` (or call
:func:`register_method` from outside the package).
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
