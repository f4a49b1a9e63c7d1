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

_REAL_ONLY = ("%s supports real %s; for complex systems use jacobi, bjacobi or asm")


class Preconditioner:
    """Base class: ``M = Sub(A, **options)`` sets up, ``M.apply(r, out)`` applies.

    Subclasses implement ``_apply(r_local, out_local)`` on this rank's numpy
    slices (communicating with neighbours if they must) and fill
    :meth:`_describe`. The set-up time is recorded by :meth:`_done`.
    A subclass says whether ``M`` is symmetric by setting ``_symmetric``
    (a class attribute or, when it depends on the options, in ``__init__``)
    or by overriding :attr:`symmetric`.

    Complex systems: a subclass that works on complex matrices and vectors
    sets the class attribute ``supports_complex = True`` (jacobi, bjacobi,
    asm and none do). For the others, the constructor refuses a complex
    matrix and :meth:`apply` a complex vector with ``TypeError``, rather than
    computing with the real parts only.

    Notes
    -----
    :meth:`apply` is collective on ``comm`` exactly when the subclass says so
    in its docstring; it allocates nothing when ``out`` is given.

    Raises
    ------
    TypeError
        On every rank (the matrix's dtype is agreed), for a complex ``A`` and
        a subclass without ``supports_complex``.
    """

    name = "base"
    #: what :attr:`symmetric` returns: True, False or None (not known)
    _symmetric: bool | None = None
    #: Whether the subclass computes with complex matrices and vectors.
    supports_complex = False

    def __init__(self, A):
        layout = getattr(A, "row_layout", None)
        if not isinstance(layout, Layout):
            raise TypeError("%s needs a distributed operator (a DistCSR), got %s"
                            % (self.name, type(A).__name__))
        dtype = getattr(A, "dtype", None)
        self.dtype = np.dtype(np.complex128 if dtype is not None and np.dtype(dtype).kind == "c"
                              else np.float64)
        if self.dtype.kind == "c" and not self.supports_complex:
            raise TypeError(_REAL_ONLY % (self.name, "matrices"))
        self.A = A
        self.layout = layout
        self.setup_seconds = 0.0
        self._watch = Stopwatch()
        self._rbuf = None

    # -- properties (never communicate) -----------------------------------------
    @property
    def comm(self):
        return self.layout.comm

    @property
    def symmetric(self) -> bool | None:
        """Whether ``M`` is a symmetric operator whenever ``A`` is symmetric.

        ``True``: it is (up to rounding), so CG, pipelined CG and MINRES may
        use it. ``False``: it is not in general (restricted Schwarz, ILUT,
        GeMSLR, a multigrid cycle whose postsmoother is not the adjoint of its
        presmoother), and those methods refuse it. ``None``: not known (the
        default, e.g. for a user's subclass that does not say). A function of
        the options only, so the same on every rank and at every rank count.
        Not collective.
        """
        return self._symmetric

    def _done(self) -> None:
        """Record the set-up time (numba's compilation left out); subclasses
        call this at the end of ``__init__``."""
        self.setup_seconds = self._watch.seconds()

    # -- application ------------------------------------------------------------
    def apply(self, r: DistVector, out: DistVector | None = None) -> DistVector:
        """``out = M r``. Allocates nothing when ``out`` is given.

        Collective on ``comm`` if the preconditioner communicates (see the
        class docstring).

        ``M r`` is complex128 when the matrix or ``r`` is complex (only for a
        preconditioner with ``supports_complex``), else float64; a real
        ``out`` cannot take a complex result. An ``r`` of another dtype
        (float32, complex64, a real ``r`` for a complex matrix) is copied
        into a kept buffer of the working dtype first.

        Raises
        ------
        TypeError
            ``r`` is not a DistVector, ``r`` is complex and the preconditioner
            supports real vectors only, or a complex result for a real ``out``.
        ValueError
            ``r`` on another layout.
        """
        if not isinstance(r, DistVector):
            raise TypeError("r must be a DistVector, got %s" % type(r).__name__)
        if r.layout is not self.layout and r.layout != self.layout:
            raise ValueError("r has global size %d, the preconditioner's operator has %d rows"
                             % (r.global_size, self.layout.global_size))
        cplx = self.dtype.kind == "c" or r.dtype.kind == "c"
        if cplx and not self.supports_complex:
            raise TypeError(_REAL_ONLY % (self.name, "vectors"))
        dtype = np.dtype(np.complex128 if cplx else np.float64)
        if out is None:
            out = DistVector(self.layout, np.empty(self.layout.local_size, dtype=dtype))
        elif cplx and out.dtype.kind != "c":
            raise TypeError("out has dtype %s, but M r is complex" % out.dtype)
        rl = r.local
        if rl.dtype != dtype:
            if self._rbuf is None or self._rbuf.dtype != dtype:
                self._rbuf = np.empty(self.layout.local_size, dtype=dtype)
            np.copyto(self._rbuf, rl)
            rl = self._rbuf
        self._apply(rl, out.local)
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
