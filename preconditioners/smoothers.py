"""Relaxation on one level, by name: ``jacobi``, ``l1-jacobi``, ``chebyshev``
(all independent of the rank count) and hybrid ``gauss-seidel``, alias ``sor``
(Gauss-Seidel on each rank's block, Jacobi across ranks).

A smoother is built once per level (``make_smoother((name, options), A)``)
and then called as ``smoother.smooth(b, x, zero_guess)`` on this rank's numpy
slices: collective among neighbours (halo exchanges), no allocation of
vectors, no inner products. Each class checks its options in
``check_options`` (a static method with the defaults), so that
:func:`check_smoother` can check a descriptor before any level exists, and
names the smoother whose error propagation is its ``A``-adjoint in
``adjoint(options)`` (:func:`adjoint_smoother`), so that a multigrid cycle
knows whether it is symmetric. Every smoother that divides by the diagonal
refuses a zero or non-finite one at set-up, on every rank
(:func:`._diagonal.checked_diagonal`).
"""

from __future__ import annotations

import numpy as np

from dmsolve import CompressedRows, Registry
from dmsolve.validate import check_choice, check_int, check_real

from ._cheby import ChebyshevKernel
from ._diagonal import checked_diagonal, refuse_rows
from ._eigen import lanczos_extremes
from ._kernels import sor_sweep, unsigned_index
from ._registry import check_options
from ._threads import ufunc_blocks

__all__ = ["SMOOTHERS", "make_smoother", "check_smoother", "register_smoother",
           "adjoint_smoother", "MAX_SWEEPS"]

#: The most sweeps (``iterations``, a Chebyshev ``degree``) a smoother takes:
#: smoothing saturates after a few, and a huge count would only look like a hang.
MAX_SWEEPS = 100

#: Smoother classes ``cls(A, **options)`` by name; each has a static
#: ``check_options(**options) -> dict``.
SMOOTHERS = Registry("smoother")


def register_smoother(name: str, *, aliases: tuple[str, ...] = ()):
    """Class decorator: register a smoother under ``name``. Not collective."""
    return SMOOTHERS.register(name, aliases=aliases)


def check_smoother(desc) -> tuple[str, dict]:
    """``name`` or ``(name, options)`` -> ``(canonical name, checked options)``,
    every default filled in (:func:`._registry.check_options`). Not collective.

    Raises
    ------
    TypeError, ValueError
        For an unknown name, an unknown option or a bad option value.
    """
    return check_options(SMOOTHERS, desc)


def make_smoother(desc, A, *, rho: float | None = None):
    """Build a smoother from ``name`` or ``(name, options)``. Collective on ``A.comm``
    (the agreed diagonal check and, for some smoothers, eigenvalue estimates).

    ``rho``, when given, is an estimate of ``rho(D^-1 A)`` already made (amg's
    prolongator smoothing makes one per level): the smoothers that need it
    (``jacobi`` without ``omega``, ``chebyshev``) take it instead of running a
    Lanczos iteration of their own.

    Raises
    ------
    ValueError
        On every rank, for a zero or non-finite diagonal entry in a row that
        is not empty (:func:`._diagonal.checked_diagonal`), or a bad option.
    """
    name, opts = check_smoother(desc)
    if rho is None:
        return SMOOTHERS[name](A, **opts)
    return SMOOTHERS[name](A, rho=rho, **opts)


def adjoint_smoother(desc) -> tuple[str, dict] | None:
    """The checked descriptor of the smoother whose error propagation is the
    ``A``-adjoint of ``desc``'s (for symmetric ``A``), or None if the class
    does not say (no ``adjoint`` static method). Not collective.

    A cycle with presmoother ``S`` and postsmoother ``adjoint_smoother(S)``
    is a symmetric operator when ``A`` is: Jacobi, l1-Jacobi, Chebyshev and
    symmetric Gauss-Seidel are their own adjoints, forward Gauss-Seidel is
    the adjoint of backward Gauss-Seidel.
    """
    name, opts = check_smoother(desc)
    adjoint = getattr(SMOOTHERS[name], "adjoint", None)
    return None if adjoint is None else check_smoother(adjoint(opts))


def _safe_inverse(d: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.where(d != 0, 1.0 / np.where(d == 0, 1.0, d), 0.0)


class _Residual:
    """Preallocated ``r = b - A x`` (one halo exchange)."""

    def __init__(self, A):
        self.A = A
        self.xv, self.yv = A.create_vectors()

    def residual(self, b, x, out):
        np.copyto(self.xv.local, x)
        self.A.matvec(self.xv, out=self.yv)
        ufunc_blocks(np.subtract, b, self.yv.local, out)


@register_smoother("jacobi")
class JacobiSmoother(_Residual):
    """Damped Jacobi ``x += omega D^-1 (b - A x)``.

    Options: ``omega`` in ``(0, 2)``, by default ``4/3 / rho(D^-1 A)`` from a
    short Lanczos estimate (the eigenvalues of ``D^-1 A`` average 1, so
    ``omega >= 2`` diverges on every such matrix); ``iterations`` sweeps in
    ``[1, MAX_SWEEPS]`` (default 1). Set-up is collective on ``A.comm`` (the
    agreed diagonal check, the estimate); :meth:`smooth` among neighbours
    (halo exchanges). Its own adjoint (a polynomial in ``D^-1 A``).
    """

    @staticmethod
    def check_options(omega: float | None = None, iterations: int = 1) -> dict:
        """The options, checked, defaults filled in. Not collective."""
        return {"omega": check_real("omega", omega, low=0.0, high=2.0, low_open=True,
                                    high_open=True, allow_none=True),
                "iterations": check_int("iterations", iterations, low=1, high=MAX_SWEEPS)}

    @staticmethod
    def adjoint(options: dict) -> tuple[str, dict]:
        """Itself. Not collective."""
        return "jacobi", dict(options)

    def __init__(self, A, rho: float | None = None, **options):
        o = self.check_options(**options)
        super().__init__(A)
        self.dinv = _safe_inverse(checked_diagonal(A, "smoother 'jacobi'",
                                                   allow_empty_rows=True))
        omega = o["omega"]
        if omega is None:
            if rho is None:
                _, rho = lanczos_extremes(A, np.abs(self.dinv), 10)
            omega = (4.0 / 3.0) / (1.1 * rho) if rho > 0 else 1.0
        self.omega = float(omega)
        self.scaled = self.omega * self.dinv
        self.iterations = o["iterations"]
        self._r = np.zeros(A.row_layout.local_size)

    def single(self, A32):
        """This smoother (the same weights) on ``A32``, the float32 copy of its
        matrix (:meth:`dmsolve.DistCSR.single`), for float32 vectors. Not
        collective."""
        new = object.__new__(type(self))
        _Residual.__init__(new, A32)
        new.omega, new.iterations = self.omega, self.iterations
        new.dinv = self.dinv.astype(np.float32)
        new.scaled = self.scaled.astype(np.float32)
        new._r = np.zeros(A32.row_layout.local_size, dtype=np.float32)
        return new

    def smooth(self, b, x, zero_guess=False):
        """Improve ``x`` towards ``A x = b`` (``x`` taken as 0 with ``zero_guess``).
        Collective among neighbours (halo exchanges)."""
        for it in range(self.iterations):
            if zero_guess and it == 0:
                ufunc_blocks(np.multiply, self.scaled, b, x)
                continue
            self.residual(b, x, self._r)
            ufunc_blocks(np.multiply, self._r, self.scaled, self._r)
            ufunc_blocks(np.add, x, self._r, x)


@register_smoother("l1-jacobi")
class L1JacobiSmoother(JacobiSmoother):
    """l1-Jacobi: ``x += D_l1^-1 (b - A x)`` with ``D_l1 = sum_j |a_ij|`` over the
    whole row, convergent for any SPD ``A`` with no eigenvalue estimate
    (Baker, Falgout, Kolev & Yang 2011).

    Option: ``iterations`` in ``[1, MAX_SWEEPS]`` (default 1). A zero row
    sum is an empty row, left alone. Set-up is collective on ``A.comm`` (the
    agreed check that the row sums are finite); :meth:`smooth` is collective
    among neighbours (halo exchanges). Its own adjoint.
    """

    @staticmethod
    def check_options(iterations: int = 1) -> dict:
        """The options, checked, defaults filled in. Not collective."""
        return {"iterations": check_int("iterations", iterations, low=1, high=MAX_SWEEPS)}

    @staticmethod
    def adjoint(options: dict) -> tuple[str, dict]:
        """Itself. Not collective."""
        return "l1-jacobi", dict(options)

    def __init__(self, A, rho: float | None = None, **options):
        # rho: unused (the l1 row sums need no estimate)
        o = self.check_options(**options)
        _Residual.__init__(self, A)
        self.omega = 1.0
        sums = A.row_sums(absolute=True).local
        refuse_rows(A.row_layout, ~np.isfinite(sums),
                    "smoother 'l1-jacobi': the absolute row sums of A are not finite")
        self.dinv = _safe_inverse(sums)
        self.scaled = self.dinv
        self.iterations = o["iterations"]
        self._r = np.zeros(A.row_layout.local_size)


@register_smoother("chebyshev")
class ChebyshevSmoother:
    """Chebyshev polynomial of ``D^-1 A`` on ``[1.1 rho / ratio, 1.1 rho]``,
    ``degree`` matvecs per sweep and no inner products.

    Options: ``degree`` in ``[1, MAX_SWEEPS]`` (default 2), ``ratio > 1``
    (default 11: PETSc GAMG's interval ``[0.1, 1.1] rho``; PyAMG's
    ``[1/30, 1.1] rho`` is ``ratio=33``). Set-up is collective on ``A.comm``
    (the agreed diagonal check, a Lanczos estimate of ``rho``); :meth:`smooth`
    is collective among neighbours (the matvecs). Its own adjoint (a
    polynomial in ``D^-1 A``). It depends on no ordering of the rows: the
    same smoother at any number of ranks (hybrid Gauss-Seidel does not).
    """

    @staticmethod
    def check_options(degree: int = 2, ratio: float = 11.0) -> dict:
        """The options, checked, defaults filled in. Not collective."""
        return {"degree": check_int("degree", degree, low=1, high=MAX_SWEEPS),
                "ratio": check_real("ratio", ratio, low=1.0, low_open=True)}

    @staticmethod
    def adjoint(options: dict) -> tuple[str, dict]:
        """Itself. Not collective."""
        return "chebyshev", dict(options)

    def __init__(self, A, rho: float | None = None, **options):
        o = self.check_options(**options)
        dinv = _safe_inverse(checked_diagonal(A, "smoother 'chebyshev'",
                                              allow_empty_rows=True))
        if rho is None:
            _, rho = lanczos_extremes(A, np.abs(dinv), 10)
        hi = 1.1 * rho if rho > 0 else 1.0
        self.kernel = ChebyshevKernel(A, dinv, hi / o["ratio"], hi, o["degree"])

    def single(self, A32):
        """This smoother (the same interval and degree) on ``A32``, the float32
        copy of its matrix (:meth:`dmsolve.DistCSR.single`), for float32
        vectors. Not collective."""
        k = self.kernel
        new = object.__new__(type(self))
        new.kernel = ChebyshevKernel(A32, k.dinv.astype(np.float32), k.lower, k.upper, k.degree)
        return new

    def smooth(self, b, x, zero_guess=False):
        """Improve ``x`` towards ``A x = b`` (``x`` taken as 0 with ``zero_guess``).
        Collective among neighbours (the matvecs)."""
        self.kernel.run(b, x, zero_guess)


@register_smoother("gauss-seidel", aliases=("sor",))
class HybridGaussSeidel:
    """Hybrid Gauss-Seidel / SOR: a GS (SOR with ``omega``) sweep on each rank's
    diagonal block, with off-process values from the start of the sweep.

    ``sweep`` is ``forward``, ``backward`` or ``symmetric`` (forward then
    backward, a symmetric smoother for CG). One halo exchange per half sweep;
    the sweeps are compiled loops (:func:`._kernels.sor_sweep`, like PyAMG's
    ``gauss_seidel``) on the local rows, with no factorisation at set-up and
    no allocation when applied.

    Options: ``sweep`` (default ``symmetric``), ``omega`` in ``(0, 2)``
    (default 1, Gauss-Seidel), ``iterations`` in ``[1, MAX_SWEEPS]`` (default
    1). Set-up is collective on ``A.comm`` (the agreed diagonal check: a row
    without its diagonal would be skipped, leaving the smoother singular);
    :meth:`smooth` is collective among neighbours. The adjoint of a forward
    sweep is the backward sweep with the same options; a symmetric sweep is
    its own adjoint.
    """

    @staticmethod
    def check_options(sweep: str = "symmetric", omega: float = 1.0, iterations: int = 1) -> dict:
        """The options, checked, defaults filled in. Not collective."""
        return {"sweep": check_choice("sweep", sweep, ("forward", "backward", "symmetric")),
                "omega": check_real("omega", omega, low=0.0, high=2.0, low_open=True,
                                    high_open=True),
                "iterations": check_int("iterations", iterations, low=1, high=MAX_SWEEPS)}

    @staticmethod
    def adjoint(options: dict) -> tuple[str, dict]:
        """The sweep run the other way. Not collective."""
        o = dict(options)
        o["sweep"] = {"forward": "backward", "backward": "forward"}.get(o["sweep"], o["sweep"])
        return "gauss-seidel", o

    def __init__(self, A, rho: float | None = None, **options):
        # rho: unused (Gauss-Seidel needs no estimate)
        o = self.check_options(**options)
        self.A = A
        self.sweep = o["sweep"]
        self.omega = o["omega"]
        self.iterations = o["iterations"]
        D = A.diag
        D.sort_indices()
        diag = checked_diagonal(A, "smoother 'gauss-seidel'", allow_empty_rows=True)
        # where each row's strictly lower entries end and strictly upper ones
        # start, for the first sweep from a zero guess
        rows = np.repeat(np.arange(D.shape[0]), np.diff(D.indptr))
        below = np.bincount(rows[D.indices < rows], minlength=D.shape[0])
        above = np.bincount(rows[D.indices > rows], minlength=D.shape[0])
        indptr = unsigned_index(D.indptr)
        self._indices = unsigned_index(D.indices)
        self._starts, self._ends = indptr[:-1], indptr[1:]
        self._lo_end = (self._starts + below).astype(indptr.dtype)
        self._up_start = (self._ends - above).astype(indptr.dtype)
        # omega / a_ii; 0 leaves an empty row alone (the only rows
        # checked_diagonal lets through without a diagonal)
        self._dinv = self.omega * _safe_inverse(diag)
        # offd with its sign flipped, so that rhs -= offd @ g is an accumulation,
        # over the rows that have off-process entries only
        self._moffd = CompressedRows((-A.offd).tocsr())
        self._rhs = np.zeros(A.row_layout.local_size)

    def _half(self, b, x, forward, zero_guess):
        A, rhs, D = self.A, self._rhs, self.A.diag
        if zero_guess:
            first, last = ((self._starts, self._lo_end) if forward
                           else (self._up_start, self._ends))
            sor_sweep(first, last, self._indices, D.data, self._dinv, b, x, forward, True)
            return
        A.halo.start(x)             # packs the values sent now: the sweep may overwrite x
        try:
            if self._moffd.rows.size:
                np.copyto(rhs, b)
        finally:                    # never leave the exchange active, whatever raised
            ghost = A.halo.finish()
        if self._moffd.rows.size:
            self._moffd.matvec_add(ghost, rhs)
            b = rhs
        sor_sweep(self._starts, self._ends, self._indices, D.data, self._dinv, b, x, forward,
                    False)

    def smooth(self, b, x, zero_guess=False):
        """Improve ``x`` towards ``A x = b`` (``x`` taken as 0 with ``zero_guess``).
        Collective among neighbours (one halo exchange per half sweep)."""
        for it in range(self.iterations):
            z = zero_guess and it == 0
            if self.sweep in ("forward", "symmetric"):
                self._half(b, x, True, z)
                z = False
            if self.sweep in ("backward", "symmetric"):
                self._half(b, x, False, z)

