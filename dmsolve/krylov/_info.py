"""What a Krylov solve reports: :class:`SolveInfo`, the :class:`ConvergedReason`
enum (PETSc's ``KSPConvergedReason``) and :class:`ConvergenceError`."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np

__all__ = ["ConvergedReason", "SolveInfo", "ConvergenceError", "NORM_TYPES"]

#: Which residual norm a method monitors and tests.
NORM_TYPES = ("unpreconditioned", "preconditioned", "natural")


class ConvergedReason(enum.Enum):
    """Why a Krylov solve stopped, named after PETSc's ``KSPConvergedReason``.

    The value of each member is PETSc's name (``"CONVERGED_RTOL"``, ...), the
    string a :class:`~dmsolve.krylov.KSPMonitor` prints. Not collective.

    ``FALSE_CONVERGENCE`` (``"DIVERGED_FALSE_CONVERGENCE"``, not converged):
    the method's own norm (preconditioned, natural, or a recurrence or
    Arnoldi estimate) met the stopping test, but the true residual
    ``||b - A x||`` did not, even after the method restarted from its
    iterate (see ``info.true_residual_norm``). Typically the preconditioner
    is singular or inconsistent (it maps part of the residual to zero), or
    the tolerance is below the accuracy the recurrence can attain.
    """

    RTOL = "CONVERGED_RTOL"
    ATOL = "CONVERGED_ATOL"
    HAPPY_BREAKDOWN = "CONVERGED_HAPPY_BREAKDOWN"
    MAXITER = "DIVERGED_ITS"
    DIVTOL = "DIVERGED_DTOL"
    BREAKDOWN = "DIVERGED_BREAKDOWN"
    INDEFINITE_PC = "DIVERGED_INDEFINITE_PC"
    INDEFINITE_MAT = "DIVERGED_INDEFINITE_MAT"
    NANORINF = "DIVERGED_NANORINF"
    FALSE_CONVERGENCE = "DIVERGED_FALSE_CONVERGENCE"

    @property
    def converged(self) -> bool:
        """Whether this reason means success. Not collective."""
        return self.value.startswith("CONVERGED")

    @property
    def petsc_name(self) -> str:
        """PETSc's spelling, e.g. ``"DIVERGED_ITS"``. Not collective."""
        return self.value


class ConvergenceError(RuntimeError):
    """A Krylov solve stopped without converging.

    Raised by :meth:`SolveInfo.check` (and by the solvers when called with
    ``raise_on_failure=True``) on every rank, since every rank holds the same
    :class:`SolveInfo`. The report is in :attr:`info`. Constructing it is not
    collective.
    """

    def __init__(self, info: "SolveInfo"):
        self.info = info
        super().__init__("%s did not converge: %s after %d iterations "
                         "(residual norm %.3e, %s)"
                         % (info.method, info.reason.petsc_name, info.iterations,
                            info.final_residual_norm, info.norm_type))


@dataclass
class SolveInfo:
    """The outcome of a Krylov solve, identical on every rank.

    Attributes
    ----------
    converged : bool
        Whether the stopping test was met (``reason.converged``).
    reason : ConvergedReason
        Why the iteration stopped.
    iterations : int
        Number of iterations performed (0 when the initial guess already
        satisfied the stopping test).
    residual_norms : numpy.ndarray
        The monitored residual norm at iterations ``0 .. iterations``
        (``iterations + 1`` entries), in the norm named by ``norm_type``.
        For GMRES these are the Arnoldi estimates, as in PETSc.
    norm_type : str
        ``"unpreconditioned"`` (``||b - A x||``), ``"preconditioned"``
        (``||M (b - A x)||``) or ``"natural"`` (``sqrt(r^T M r)``).
    method : str
        Name of the Krylov method.
    rtol, atol : float
        The tolerances of the stopping test ``||r|| <= max(rtol*||b||, atol)``.
    bnorm : float
        ``||b||`` in ``norm_type``, the reference of the relative tolerance.
    setup_seconds, solve_seconds : float
        Wall-clock time of the set-up (checks, work vectors, null space,
        preconditioner construction in :func:`dmsolve.solve`) and of the
        iterations, measured on each rank (they may differ slightly).
    reductions : int
        Number of global reductions (``Allreduce``/``Iallreduce``, including
        the set-up and the final error agreement) the solve performed.
    true_residual_norm : float
        ``||b - A x||_2`` of the returned ``x``, computed from ``x`` (one
        product and one reduction) at the end of every solve: at a claimed
        convergence it decided the verdict, at any other exit it says how far
        the iterate is. ``b`` is the right-hand side of the system solved
        (without its null-space part when ``nullspace`` removed it; see
        ``extra["nullspace_removed"]``). ``0.0`` for ``b = 0``; NaN when not
        computed: after ``NANORINF``, and from backends that do not
        compute it (``backend="petsc"``).
    extra : dict
        Further reports: ``"checkpoint"``, ``"pc"``, ``"nullspace_removed"``
        (``||b - P b|| / ||b||``, the part of ``b`` in the null space, for
        the methods that remove it: a large value means the system was
        inconsistent and the projected system was solved) and
        ``"truth_restarts"`` (how many times the method restarted because
        the true residual failed the test at a claimed convergence).

    Notes
    -----
    Not collective: a plain record, and none of its methods communicates.
    """

    converged: bool
    reason: ConvergedReason
    iterations: int
    residual_norms: np.ndarray
    norm_type: str
    method: str = ""
    rtol: float = 0.0
    atol: float = 0.0
    bnorm: float = 0.0
    setup_seconds: float = 0.0
    solve_seconds: float = 0.0
    reductions: int = 0
    extra: dict = field(default_factory=dict)
    true_residual_norm: float = float("nan")

    @property
    def final_residual_norm(self) -> float:
        """The last monitored residual norm. Not collective."""
        return float(self.residual_norms[-1]) if len(self.residual_norms) else float("nan")

    def check(self) -> "SolveInfo":
        """Raise :class:`ConvergenceError` unless the solve converged.

        Not collective (the info is the same on every rank, so every rank
        raises). Returns ``self`` so that ``x, info = ...; info.check()``
        and ``info = solve(...)[1].check()`` both read well.

        Raises
        ------
        ConvergenceError
            If ``converged`` is false.
        """
        if not self.converged:
            raise ConvergenceError(self)
        return self

    def __str__(self) -> str:
        return ("%s: %s in %d iterations, %s residual norm %.3e (||b|| %.3e), "
                "true residual norm %.3e, setup %.3g s, solve %.3g s, %d reductions"
                % (self.method, self.reason.petsc_name, self.iterations, self.norm_type,
                   self.final_residual_norm, self.bnorm, self.true_residual_norm,
                   self.setup_seconds, self.solve_seconds, self.reductions))
