"""The end of a Krylov solve: the true residual of the returned ``x``, the late
error agreement, and the :class:`SolveInfo` every rank returns."""

from __future__ import annotations

import numpy as np

from .._vector import DistVector
from ._info import ConvergedReason, SolveInfo

__all__ = ["finish", "zero_rhs"]


def finish(s, reason: ConvergedReason, iterations: int,
           **extra) -> tuple[DistVector, SolveInfo]:
    """Measure the true residual unless the truth test just did, agree on
    late errors, build the :class:`SolveInfo`, report it.

    ``s`` is the solve (:class:`~dmsolve.krylov._system.System`); ``extra``
    goes into ``info.extra``. Collective (one reduction, plus one matvec and
    one reduction for the true residual when it is not known). Returns
    ``(x, info)``, ``x`` a DistVector, or a numpy array on every rank when
    ``b`` was given as one (``s.numpy_out``); raises
    :class:`ConvergenceError` on every rank instead
    with ``raise_on_failure=True`` and no convergence.
    """
    true_rnorm = s.truth.final(reason)
    extra = {**s.extra, "truth_restarts": s.truth.restarts, **extra}
    # numba's compilation (first calls of jitted user code or kernels) is
    # not work of the solve: reported apart, left out of both timings
    work, compiling = s.watch.split()
    setup = s.setup_seconds if s.started is None else s.started[0]
    extra.setdefault("compile_seconds", compiling)
    stop = s.stop
    info = SolveInfo(
        converged=reason.converged, reason=reason, iterations=int(iterations),
        residual_norms=np.array(stop.norms, dtype=float), norm_type=stop.norm_type,
        method=s.method, rtol=stop.rtol, atol=stop.atol,
        bnorm=float(stop.bnorm) if stop.bnorm is not None else float("nan"),
        setup_seconds=setup, solve_seconds=work - setup,
        reductions=s.red.reductions + 1, extra=extra,
        true_residual_norm=float(true_rnorm))
    if s.checkpoints is not None:
        info.extra["checkpoint"] = s.checkpoints.report()
    if stop.monitor is not None and hasattr(stop.monitor, "finish"):
        s.red.guard(stop.monitor.finish, info)
    s.red.reduce(0)                 # the final agreement (counted above)
    if s.raise_on_failure:
        info.check()
    if s.numpy_out:
        # scipy's inputs, scipy's output: the global x on every rank
        return s.x.gather(), info
    return s.x, info


def zero_rhs(s) -> tuple[DistVector, SolveInfo]:
    """``b = 0``: return ``x = 0`` after 0 iterations (as scipy does).

    Collective (through :func:`finish`)."""
    s.x.fill(0.0)
    stop = s.stop
    stop.bnorm = 0.0 if stop.bnorm is None else stop.bnorm
    s.begin()
    stop.norms.append(0.0)
    if stop.monitor is not None:
        s.red.guard(stop.monitor, 0, 0.0)
    s.truth.last = (len(stop.norms), 0.0)      # b - A 0 = 0 exactly
    return finish(s, ConvergedReason.ATOL, 0)
