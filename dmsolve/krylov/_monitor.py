"""PETSc-style convergence monitor: prints residual norms on rank 0.

Library code never prints; a solve prints only when a monitor is passed.
"""

from __future__ import annotations

import sys
from typing import TextIO

from ..validate import check_int

__all__ = ["KSPMonitor"]


class KSPMonitor:
    """Print ``-ksp_monitor`` / ``-ksp_converged_reason`` lines on rank 0.

    A solver calls :meth:`start` once, the monitor itself once per iteration
    (``monitor(iteration, rnorm)``, iteration 0 being the initial residual)
    and :meth:`finish` with the final :class:`SolveInfo`. The lines are
    PETSc's::

          0 KSP Residual norm 1.000000000000e+00
          1 KSP Residual norm 2.345678901234e-01
        Linear solve converged due to CONVERGED_RTOL iterations 1

    Parameters
    ----------
    stream : file-like, optional
        Where rank 0 writes (default ``sys.stdout``, looked up at print time).
    prefix : str, optional
        Text put before every line (PETSc indents the lines of inner solves).
    converged_reason : bool, optional
        Whether :meth:`finish` prints the final line (default True).
    record : bool, optional
        Keep ``(iteration, rnorm)`` pairs in :attr:`history` on every rank
        (every iteration's, whatever ``every`` is).
    every : int, optional
        Print iterations ``0, every, 2*every, ...`` and the last one
        (default 1: every iteration; ``monitor=k`` in a solve is
        ``KSPMonitor(every=k)``).

    Notes
    -----
    Not collective: nothing communicates; ranks other than 0 of the solve's
    communicator print nothing. The monitored norm is the method's
    (see ``SolveInfo.norm_type``). The last iteration's line, when
    ``every`` skipped it, is printed by :meth:`finish`.

    Raises
    ------
    TypeError
        ``every`` is not an integer (``True`` is not one).
    ValueError
        ``every < 1``.
    """

    def __init__(self, stream: TextIO | None = None, prefix: str = "",
                 converged_reason: bool = True, record: bool = False, every: int = 1):
        self.stream = stream
        self.prefix = prefix
        self.converged_reason = converged_reason
        self.record = record
        self.every = check_int("every", every, low=1)
        self.history: list[tuple[int, float]] = []
        self._root = True
        self._skipped = None      # the last (iteration, rnorm) not printed

    def start(self, method: str, comm) -> None:
        """Called by the solver before iteration 0. Not collective."""
        self._root = comm.Get_rank() == 0
        self.history = []
        self._skipped = None

    def __call__(self, iteration: int, rnorm: float) -> None:
        """Report one residual norm. Not collective."""
        if self.record:
            self.history.append((iteration, float(rnorm)))
        if iteration % self.every == 0:
            self._skipped = None
            if self._root:
                self._line(iteration, rnorm)
        else:
            self._skipped = (iteration, rnorm)

    def finish(self, info) -> None:
        """Report the last iteration (if ``every`` skipped it) and the
        outcome of the solve. Not collective."""
        if self._skipped is not None:
            if self._root:
                self._line(*self._skipped)
            self._skipped = None
        if self._root and self.converged_reason:
            verb = "converged" if info.converged else "did not converge"
            self._write("Linear solve %s due to %s iterations %d"
                        % (verb, info.reason.petsc_name, info.iterations))

    def _line(self, iteration: int, rnorm: float) -> None:
        self._write("%3d KSP Residual norm %14.12e" % (iteration, rnorm))

    def _write(self, line: str) -> None:
        stream = self.stream if self.stream is not None else sys.stdout
        stream.write(self.prefix + line + "\n")
        stream.flush()
