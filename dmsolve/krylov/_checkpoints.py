"""The glue between a Krylov solve and :class:`dmsolve.checkpoint.Checkpointer`:
what the checkpointer reads of the solve, and the calls the methods make."""

from __future__ import annotations

from .._vector import DistVector
from ..checkpoint import Checkpointer, ResumeState

__all__ = ["Checkpoints"]


class Checkpoints:
    """A :class:`~dmsolve.checkpoint.Checkpointer` bound to one solve.

    The methods call :meth:`resume` once, before their first iteration, and
    ``if ck.due(it): ck.save(it, vectors, **scalars)`` after an iteration.
    The checkpointer is handed this object as its ``ctx``: the attributes
    below are what it reads (and, on a resume, writes) of the solve.

    Parameters
    ----------
    system : System
        The solve (:func:`~dmsolve.krylov._system.make_system`).
    checkpointer : Checkpointer

    Notes
    -----
    Not collective to construct.
    """

    def __init__(self, system, checkpointer: Checkpointer):
        self._s = system
        self.checkpointer = checkpointer

    # -- what the methods call -----------------------------------------------------------
    def start(self, M) -> None:
        """Fingerprint ``A`` and ``b`` and read the checkpoint to resume from.
        Collective."""
        self.checkpointer.start(self, M)

    def resume(self, vectors: dict[str, DistVector], optional=(),
               **options) -> ResumeState | None:
        """Restore the saved vectors (by name) and the residual history; None
        when not resuming. ``optional``, ``options``: as
        :meth:`Checkpointer.resume`. Not collective."""
        return self.checkpointer.resume(self, vectors, optional, **options)

    def due(self, it: int) -> bool:
        """Whether iteration ``it`` should write. Not collective."""
        return self.checkpointer.due(it)

    def save(self, it: int, vectors: dict[str, DistVector], **scalars) -> None:
        """Write a checkpoint of iteration ``it``. Collective."""
        self.checkpointer.save(self, it, vectors, **scalars)

    def report(self) -> dict:
        """What the solve did with checkpoints (``info.extra["checkpoint"]``).
        Not collective."""
        return self.checkpointer.report()

    @property
    def resume_path(self) -> str | None:
        """The checkpoint resumed from (for messages). Not collective."""
        return self.checkpointer.resume_path

    # -- what the checkpointer reads -----------------------------------------------------
    @property
    def method(self) -> str:
        return self._s.method

    @property
    def comm(self):
        return self._s.comm

    @property
    def layout(self):
        return self._s.layout

    @property
    def b(self) -> DistVector:
        return self._s.b

    @property
    def b2norm(self) -> float:
        return self._s.b2norm

    def vector(self) -> DistVector:
        return self._s.vector()

    def matvec(self, x: DistVector, out: DistVector) -> DistVector:
        return self._s.matvec(x, out)

    @property
    def send(self):
        return self._s.red.send

    def reduce(self, k: int):
        return self._s.red.reduce(k)

    def check_errors(self) -> None:
        self._s.red.check_errors()

    @property
    def rtol(self) -> float:
        return self._s.stop.rtol

    @property
    def atol(self) -> float:
        return self._s.stop.atol

    @property
    def maxiter(self) -> int:
        return self._s.stop.maxiter

    @property
    def divtol(self) -> float | None:
        return self._s.stop.divtol

    @property
    def norm_type(self) -> str:
        return self._s.stop.norm_type

    @property
    def _Q(self):
        # the checkpointer records the null space's dimension as Q's rows
        ns = self._s.nullspace
        return None if ns is None else ns.Q

    # a resume restores the history and the reference norms
    @property
    def norms(self) -> list[float]:
        return self._s.stop.norms

    @property
    def bnorm(self) -> float | None:
        return self._s.stop.bnorm

    @bnorm.setter
    def bnorm(self, value) -> None:
        self._s.stop.bnorm = value

    @property
    def rnorm0(self) -> float | None:
        return self._s.stop.rnorm0

    @rnorm0.setter
    def rnorm0(self, value) -> None:
        self._s.stop.rnorm0 = value

    @property
    def x0_is_zero(self) -> bool:
        return self._s.x0_is_zero

    @x0_is_zero.setter
    def x0_is_zero(self, value: bool) -> None:
        self._s.x0_is_zero = value
