"""Chebyshev polynomial preconditioner on the Jacobi-scaled operator: no inner products."""

from __future__ import annotations

import numpy as np

from dmsolve import Preconditioner
from dmsolve.reproducible import canonical
from dmsolve.validate import agreed, check_bool, check_int, check_real

from ._eigen import lanczos_extremes
from ._jacobi import checked_inverse_diagonal
from ._kernels import chebyshev_start, chebyshev_step
from ._precision import Float32Work, check_precision, refuse_single_reproducible
from ._registry import register
from ._threads import row_split, run_blocks

__all__ = ["Chebyshev", "ChebyshevKernel"]

#: The largest degree (and Lanczos step count) taken: each is a matvec per
#: application (per set-up), and a huge one would only look like a hang.
_MAX_DEGREE = 1000


class ChebyshevKernel:
    """``degree`` steps of the Chebyshev iteration for ``D^-1 A x = D^-1 b`` on
    the interval ``[lower, upper]`` (Saad, *Iterative Methods*, Alg. 12.1).

    Work vectors are allocated once here (not collective); :meth:`run`
    allocates nothing and performs ``degree`` (or ``degree - 1`` from a zero
    guess) matvecs, no inner products: it is collective among neighbouring
    ranks.
    """

    def __init__(self, A, dinv: np.ndarray, lower: float, upper: float, degree: int):
        self.A = A
        self.dinv = dinv
        self.degree = int(degree)
        self.lower, self.upper = float(lower), float(upper)
        self.theta = 0.5 * (self.upper + self.lower)
        self.delta = 0.5 * (self.upper - self.lower)
        self._xv, self._yv = A.create_vectors()
        self._d = self._xv.local          # the search direction lives in the matvec input
        self._r = np.zeros(A.row_layout.local_size, dtype=A.dtype)

    def run(self, b: np.ndarray, x: np.ndarray, zero_guess: bool) -> None:
        """Improve ``x`` in place towards ``A x = b`` (``x`` taken as 0 with
        ``zero_guess``). Collective among neighbouring ranks (the matvecs)."""
        A, dinv, d, r = self.A, self.dinv, self._d, self._r
        theta, delta = self.theta, self.delta
        Ad = self._yv.local
        if not zero_guess:
            np.copyto(d, x)
            A.matvec(self._xv, out=self._yv)
        sigma = theta / delta if delta > 0 else np.inf
        rho = 1.0 / sigma
        rows = row_split(r.shape[0])        # None: one thread, one block
        # r = b - A x (b from a zero guess); d = (r * dinv) / theta; x += d
        if rows is None:
            chebyshev_start(b, Ad, dinv, d, x, r, 1.0 / theta, zero_guess)
        else:
            run_blocks(lambda lo, hi: chebyshev_start(
                b[lo:hi], Ad[lo:hi], dinv[lo:hi], d[lo:hi], x[lo:hi], r[lo:hi], 1.0 / theta,
                zero_guess), rows)
        for _ in range(self.degree - 1):
            A.matvec(self._xv, out=self._yv)
            rho_new = 1.0 / (2.0 * sigma - rho)
            # r -= Ad; d = rho_new rho d + (2 rho_new / delta) dinv r; x += d
            a, c = rho_new * rho, 2.0 * rho_new / delta
            if rows is None:
                chebyshev_step(r, Ad, dinv, d, x, a, c)
            else:
                run_blocks(lambda lo, hi: chebyshev_step(
                    r[lo:hi], Ad[lo:hi], dinv[lo:hi], d[lo:hi], x[lo:hi], a, c), rows)
            rho = rho_new


class Chebyshev(Preconditioner):
    """Chebyshev polynomial in ``D^-1 A`` as a fixed (linear, symmetric) preconditioner.

    The interval ``[lower, upper]`` defaults to the Lanczos estimates of the
    extreme eigenvalues of ``D^-1 A`` (``upper`` scaled by ``safety``); they
    are computed once at set-up, so :meth:`apply` has no inner products.

    Parameters
    ----------
    A : DistCSR
        Symmetric positive definite.
    degree : int in [1, 1000]
        Matvecs per application (plus one scaling). This and the options
        after it are keyword only.
    lower, upper : float > 0, optional
        Eigenvalue bounds of ``D^-1 A``, ``lower < upper``; estimated when omitted.
    ratio : float > 1, optional
        If given, ``lower = upper / ratio`` (a smoother's interval).
    steps : int in [1, 1000]
        Lanczos steps for the estimates (at most the size of ``A`` are taken).
    safety : float >= 1
        Factor on the largest Ritz value (which lies below the largest eigenvalue).
    precision : {"double", "single"}
        ``"single"``: the recurrence runs on a float32 copy of ``A``
        (:meth:`dmsolve.DistCSR.single`) with float32 vectors, as amg's
        cycle does; ``r`` is rounded to float32 and the result returned in
        float64. The interval is estimated in float64. Real matrices only;
        refused with ``reproducible=True``.

    Raises
    ------
    ValueError, TypeError
        On every rank, for a bad option, a zero or non-finite diagonal entry,
        estimates that do not give ``0 < lower < upper``, or
        ``precision="single"`` with a complex ``A`` (TypeError).

    Notes
    -----
    Set-up is collective on ``A.comm`` (Lanczos reductions, error agreement);
    :meth:`apply` is collective among neighbours (matvecs only).
    :attr:`symmetric` is True: a polynomial in ``D^-1 A`` times ``D^-1``.
    """

    name = "cheby"
    _symmetric = True  # a polynomial in D^-1 A times D^-1

    def __init__(self, A, *, degree: int = 4, lower: float | None = None,
                 upper: float | None = None, ratio: float | None = None,
                 steps: int = 12, safety: float = 1.1, precision: str = "double",
                 reproducible: bool = False):
        super().__init__(A)
        with agreed(self.comm):
            degree = check_int("degree", degree, low=1, high=_MAX_DEGREE)
            lower = check_real("lower", lower, low=0.0, low_open=True, allow_none=True)
            upper = check_real("upper", upper, low=0.0, low_open=True, allow_none=True)
            ratio = check_real("ratio", ratio, low=1.0, low_open=True, allow_none=True)
            steps = check_int("steps", steps, low=1, high=_MAX_DEGREE)
            safety = check_real("safety", safety, low=1.0)
            single = check_precision("cheby", precision, A)
            self.reproducible = check_bool("reproducible", reproducible)
            refuse_single_reproducible("cheby", single, self.reproducible)
        self.precision = "single" if single else "double"
        dinv = checked_inverse_diagonal(A, "cheby")
        lo, hi = lower, upper
        if lo is None or hi is None:
            emin, emax = lanczos_extremes(A, np.abs(dinv), steps, self.reproducible)
            hi = safety * emax if hi is None else hi
            lo = (hi / ratio if ratio else max(emin, hi * 1e-4)) if lo is None else lo
        with agreed(self.comm):
            if not (0 < lo < hi) or not np.isfinite(hi):
                raise ValueError("cheby: need 0 < lower < upper, got [%r, %r] (is A "
                                 "positive definite?)" % (lo, hi))
        self._work32 = None
        if self.reproducible:
            A = canonical(A)
        if single:
            A = A.single(compact=True)
            dinv = dinv.astype(np.float32)
            self._work32 = Float32Work(A.row_layout.local_size)
        self.kernel = ChebyshevKernel(A, dinv, lo, hi, degree)
        self._done()

    def _apply(self, r, out):
        """Collective among neighbouring ranks: :meth:`apply` is."""
        if self._work32 is None:
            self.kernel.run(r, out, zero_guess=True)
        else:
            self._work32.run(self._run_from_zero, r, out)

    def _run_from_zero(self, b, x):
        self.kernel.run(b, x, zero_guess=True)

    def _describe(self):
        k = self.kernel
        # what the recurrence reads: the matrix (in float64 the caller's, in
        # float32 a copy of its own) and the inverse diagonal
        read = k.A.local_nbytes + k.dinv.nbytes
        stored = k.dinv.nbytes + (k.A.local_nbytes if self._work32 is not None else 0)
        return {"degree": k.degree, "lower": k.lower, "upper": k.upper,
                "precision": self.precision, "stored_bytes_local": int(stored),
                "operator_bytes_local": int(read)}


register("cheby", Chebyshev)
