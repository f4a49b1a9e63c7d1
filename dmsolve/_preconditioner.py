"""The preconditioner protocol: set up once from a distributed operator, apply many times.

It lives in dmsolve's core, next to :data:`dmsolve.PRECONDITIONERS`, so that
the Krylov methods and the packages above share one definition.
"""

from __future__ import annotations

import numpy as np

from ._compile import Stopwatch
from ._layout import Layout
from ._operator import DistLinearOperator
from ._vector import DistVector

__all__ = ["Preconditioner"]


class Preconditioner:
    """Base class: ``M = Sub(A, **options)`` sets up, ``M.apply(r, out)`` applies.

    Subclasses implement ``_apply(r_local, out_local)`` on this rank's numpy
    slices (communicating with neighbours if they must) and fill
    :meth:`_describe`. The set-up time is recorded by :meth:`_timed_setup`.

    Notes
    -----
    :meth:`apply` is collective on ``comm`` exactly when the subclass says so
    in its docstring; it allocates nothing when ``out`` is given.
    """

    name = "base"

    def __init__(self, A):
        layout = getattr(A, "row_layout", None)
        if not isinstance(layout, Layout):
            raise TypeError("%s needs a distributed operator (a DistCSR), got %s"
                            % (self.name, type(A).__name__))
        self.A = A
        self.layout = layout
        self.setup_seconds = 0.0
        self._watch = Stopwatch()

    # -- properties (never communicate) -----------------------------------------
    @property
    def comm(self):
        return self.layout.comm

    def _done(self) -> None:
        """Record the set-up time (numba's compilation left out); subclasses
        call this at the end of ``__init__``."""
        self.setup_seconds = self._watch.seconds()

    # -- application ------------------------------------------------------------
    def apply(self, r: DistVector, out: DistVector | None = None) -> DistVector:
        """``out = M r``. Allocates nothing when ``out`` is given.

        Collective on ``comm`` if the preconditioner communicates (see the
        class docstring).
        """
        if not isinstance(r, DistVector):
            raise TypeError("r must be a DistVector, got %s" % type(r).__name__)
        if r.layout is not self.layout and r.layout != self.layout:
            raise ValueError("r has global size %d, the preconditioner's operator has %d rows"
                             % (r.global_size, self.layout.global_size))
        if out is None:
            out = DistVector(self.layout, np.empty(self.layout.local_size))
        self._apply(r.local, out.local)
        return out

    def __call__(self, r: DistVector, out: DistVector | None = None) -> DistVector:
        return self.apply(r, out)

    def _apply(self, r: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover
        raise NotImplementedError

    def as_linear_operator(self) -> DistLinearOperator:
        """``M`` as a distributed linear operator (``matvec`` = :meth:`apply`). Not collective."""
        return DistLinearOperator(self.layout, self.layout, self.apply)

    # -- summary --------------------------------------------------------------------
    def describe(self) -> dict:
        """What was built: name, options, set-up seconds, and subclass details.

        Not collective (every figure in it was agreed at set-up).
        """
        d = {"name": self.name, "rows": self.layout.global_size,
             "setup_seconds": self.setup_seconds}
        d.update(self._describe())
        return d

    def _describe(self) -> dict:
        return {}

    def __repr__(self) -> str:
        return "%s(rows=%d)" % (type(self).__name__, self.layout.global_size)
