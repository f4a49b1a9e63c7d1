"""The truth test: a convergence a Krylov method claims in its own norm is
confirmed with the true residual ``b - A x``, else the method restarts from
``x`` or stops with ``FALSE_CONVERGENCE``."""

from __future__ import annotations

import math
import weakref

import numpy as np

from .._vector import DistVector
from ._info import ConvergedReason

__all__ = ["Truth", "TRUTH_SLACK", "TRUTH_RESTARTS"]

#: At a claimed convergence in the preconditioned or natural norm, the true
#: ``||b - A x||_2`` may exceed ``max(rtol*||b||_2, atol)`` by this factor: the
#: norms differ by up to the condition number of ``M``. Measured on the gallery
#: (poisson2d/3d, varpoisson, anisotropic2d, random-spd, convdiff2d/3d,
#: shifted3d with shifts 0 and 0.2) with cg/pipecg/minres/gmres x jacobi,
#: bjacobi, asm, cheby, amg, gemslr at rtol 1e-5, 1e-8, 1e-10 on 1 and 3 ranks,
#: the ratio stayed below 30 but for left-preconditioned GMRES with cheby on
#: the indefinite shifted3d (up to 652, a polynomial near zero on part of the
#: spectrum). A singular or inconsistent preconditioner leaves a true relative
#: residual of O(1), i.e. a ratio of ``1/rtol``.
TRUTH_SLACK = 1e3

#: How many times a method restarts from its iterate (fresh residual, fresh
#: recurrence) when the true residual fails the test at a claimed convergence,
#: before it stops with ``FALSE_CONVERGENCE``.
TRUTH_RESTARTS = 3


class Truth:
    """The true residual of a solve's iterate, measured at a claimed
    convergence and at the end.

    Parameters
    ----------
    system : System
        The solve (:func:`~dmsolve.krylov._system.make_system`): its ``x``,
        ``b``, ``shift``, products, reducer and stopping test.

    Attributes
    ----------
    restarts : int
        Restarts asked for so far (``info.extra["truth_restarts"]``).
    last : tuple of (int, float) or None
        ``(len(norms), ||b - A x||_2)`` of the last measurement: still valid
        while no iteration was recorded since.

    Notes
    -----
    Not collective to construct.
    """

    def __init__(self, system):
        # a weak reference: the system owns this object, and a cycle would
        # keep the solve's vectors and preconditioner alive until the
        # garbage collector ran, not until the solve returned
        self._system = weakref.ref(system)
        self.restarts = 0
        self.last: tuple[int, float] | None = None
        self._restarted_at = None       # len(norms) at the last restart
        self._work = None

    @property
    def system(self):
        """The solve this truth test belongs to."""
        return self._system()

    def measure(self, r: DistVector, work: DistVector) -> float:
        """``r = b - (A - shift I) x`` from ``x`` (never from a recurrence), and
        return ``||r||_2``, remembered for ``info.true_residual_norm``.

        Collective: one matvec and one reduction.
        """
        s = self.system
        s.matvec(s.x, work)
        if s.shift:
            s.axpy(-s.shift, s.x.local, work.local)
        np.subtract(s.b.local, work.local, out=r.local)
        s.red.put(0, r.local, r.local)
        t = math.sqrt(s.red.reduce(1)[0].real)
        self.last = (len(s.stop.norms), t)
        return t

    def tolerance(self) -> float:
        """What ``||b - A x||_2`` must meet at a claimed convergence:
        ``max(rtol*||b||_2, atol)``, times :data:`TRUTH_SLACK` when the method
        tests a preconditioned or natural norm. Not collective."""
        stop = self.system.stop
        tol = max(stop.rtol * self.system.b2norm, stop.atol)
        return tol if stop.norm_type == "unpreconditioned" else TRUTH_SLACK * tol

    def confirm(self, reason, it: int, r: DistVector, work: DistVector | None, *,
                tnorm: float | None = None, can_restart: bool = True):
        """Check a claimed convergence against the true residual.

        ``reason`` is what the method's own test returned at iteration ``it``
        (None or a failure pass through untouched). A converged reason is
        kept when ``||b - A x||_2 <= tolerance()``. Otherwise the method
        should restart from ``x``: None is returned and ``r`` holds the fresh
        residual ``b - A x``, at most :data:`TRUTH_RESTARTS` times and while
        ``it < maxiter``; after that ``FALSE_CONVERGENCE``. ``tnorm``: the
        method already holds ``r = b - A x`` and its norm (GMRES at a restart);
        ``can_restart=False``: ``r`` is already a fresh residual, so a restart
        would change nothing and a failure is ``FALSE_CONVERGENCE`` at once.

        Collective (one matvec and one reduction, none with ``tnorm``) when
        ``reason`` claims convergence, else not collective.
        """
        if reason is None or not reason.converged:
            return reason
        stop = self.system.stop
        if tnorm is None:
            t = self.measure(r, work)
        else:
            t = float(tnorm)
            self.last = (len(stop.norms), t)
        if t <= self.tolerance():
            return reason
        if not math.isfinite(t):
            return ConvergedReason.NANORINF
        if can_restart and self.restarts < TRUTH_RESTARTS and it < stop.maxiter:
            self.restarts += 1
            self._restarted_at = len(stop.norms)
            return None
        return ConvergedReason.FALSE_CONVERGENCE

    def retest(self, rnorm: float) -> ConvergedReason | None:
        """Test the method's norm of a fresh residual computed from ``x``
        without a new iteration (after a restart): not recorded in
        ``residual_norms`` (the iteration's norm already is) nor monitored.

        Right after :meth:`confirm` asked for a restart, meeting the test again
        means the method's norm cannot see the residual that the true norm
        sees (e.g. a singular preconditioner): ``FALSE_CONVERGENCE``. After
        another restart (pipelined CG's residual replacement) it is a
        converged reason, to be confirmed. Not collective.
        """
        stop = self.system.stop
        if not math.isfinite(rnorm):
            return ConvergedReason.NANORINF
        if rnorm <= stop.tolerance():
            if self._restarted_at == len(stop.norms):
                return ConvergedReason.FALSE_CONVERGENCE
            return stop.converged_reason()
        return None

    def final(self, reason) -> float:
        """``||b - A x||_2`` of the returned ``x``: the one :meth:`confirm`
        measured when ``x`` has not changed since (no iteration recorded
        since), else measured now; NaN after ``NANORINF``.

        Collective (one matvec and one reduction) unless known."""
        s = self.system
        if self.last is not None and self.last[0] == len(s.stop.norms):
            return self.last[1]
        if reason is ConvergedReason.NANORINF:
            return float("nan")     # x may hold NaN; the residual says nothing more
        if self._work is None:
            self._work = (s.vector(), s.vector())
        return self.measure(*self._work)
