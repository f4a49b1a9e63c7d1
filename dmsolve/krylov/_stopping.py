"""The stopping test of a Krylov solve, ``||r|| <= max(rtol*||b||, atol)``, with
the residual history, the monitor and the failure tests (NaN, divergence, maxiter)."""

from __future__ import annotations

import math
from typing import Callable

from ._info import ConvergedReason

__all__ = ["StoppingTest", "DEFAULT_DIVTOL"]

#: PETSc's default divergence tolerance, relative to the initial residual norm.
DEFAULT_DIVTOL = 1e4


class StoppingTest:
    """Records one residual norm per iteration and says when to stop.

    Parameters
    ----------
    rtol, atol, divtol, maxiter
        Checked at the door (:func:`~dmsolve.krylov.check_system`).
    norm_type : str
        The norm the method tests (:data:`~dmsolve.krylov._info.NORM_TYPES`).
    monitor : callable or None
        ``monitor(iteration, rnorm)``, called through ``guard``.
    guard : callable
        ``guard(func, *args)`` calls user code with its errors held for the
        next reduction (:meth:`Reducer.guard`).

    Attributes
    ----------
    norms : list of float
        The tested norm of iterations ``0, 1, ...`` (``info.residual_norms``).
    bnorm : float or None
        ``||b||`` in the tested norm; None until the method has measured it.
    rnorm0 : float or None
        The first norm tested: the reference of the divergence test.

    Notes
    -----
    Not collective: every number it sees is a reduced one, the same on
    every rank.
    """

    def __init__(self, rtol: float, atol: float, divtol: float | None, maxiter: int,
                 norm_type: str, monitor: Callable | None, guard: Callable):
        self.rtol, self.atol, self.divtol, self.maxiter = rtol, atol, divtol, maxiter
        self.norm_type = norm_type
        self.monitor = monitor
        self._guard = guard
        self.norms: list[float] = []
        self.bnorm: float | None = None
        self.rnorm0: float | None = None

    def relative(self) -> float:
        """``rtol*||b||``, 0 when ``||b||`` is (also for ``rtol = inf``, which
        would make it NaN). Not collective."""
        return self.rtol * self.bnorm if self.bnorm else 0.0

    def tolerance(self) -> float:
        """``max(rtol*||b||, atol)``, the right side of the stopping test. Not collective."""
        return max(self.relative(), self.atol)

    def converged_reason(self) -> ConvergedReason:
        """Which converged reason a norm that meets the test gives: ``RTOL``
        when ``rtol*||b||`` is the larger side, else ``ATOL``. Not collective."""
        return ConvergedReason.RTOL if self.relative() >= self.atol \
            else ConvergedReason.ATOL

    def test(self, it: int, rnorm: float) -> ConvergedReason | None:
        """Record ``rnorm`` for iteration ``it`` and return why to stop, or None.

        ``||r|| <= max(rtol*||b||, atol)`` converges; a NaN or infinite norm,
        ``||r|| >= divtol*||r0||`` and ``it >= maxiter`` stop with failure.
        Not collective (``rnorm`` is the same on every rank).
        """
        self.norms.append(rnorm)
        if self.monitor is not None:
            self._guard(self.monitor, it, rnorm)
        if not math.isfinite(rnorm):
            return ConvergedReason.NANORINF
        if rnorm <= self.tolerance():
            return self.converged_reason()
        if self.rnorm0 is None:
            self.rnorm0 = rnorm
        elif self.divtol is not None and rnorm >= self.divtol * self.rnorm0:
            return ConvergedReason.DIVTOL
        if it >= self.maxiter:
            return ConvergedReason.MAXITER
        return None
