"""Mixed precision: the ``precision`` option of amg, cheby, jacobi, bjacobi and asm.

``precision="single"`` keeps the preconditioner's data (matrices, factors,
diagonals) in float32 inside a float64 Krylov method, which still computes
every residual, inner product and stopping test in float64. Reproducible
mode refuses it for every preconditioner (:func:`refuse_single_reproducible`).
"""

from __future__ import annotations

import numpy as np

from dmsolve.validate import check_choice

__all__ = ["PRECISIONS", "check_precision", "refuse_single_reproducible", "Float32Work"]

#: The values of every ``precision`` option.
PRECISIONS = ("double", "single")


def check_precision(who: str, precision, A) -> bool:
    """``precision`` checked; True for ``"single"``. Not collective: call it
    inside the caller's ``agreed`` block (``A``'s dtype is the same on every
    rank, so the complex check fails alike on all of them).

    Raises
    ------
    ValueError
        ``precision`` is not one of :data:`PRECISIONS`.
    TypeError
        ``"single"`` for a complex ``A``.
    """
    precision = check_choice("precision", precision, PRECISIONS)
    if precision == "single" and np.dtype(A.dtype).kind == "c":
        raise TypeError("%s precision='single' is for real matrices; A is complex" % who)
    return precision == "single"


def refuse_single_reproducible(who: str, single: bool, reproducible: bool) -> None:
    """Refuse ``precision="single"`` with ``reproducible=True``. Not collective:
    call it inside the caller's ``agreed`` block (both are arguments, alike on
    every rank).

    Reproducible mode promises the same bits of a solve at any rank count,
    and it keeps every link of the chain exact or rounded once, in double
    precision (docs/reproducible.md). A float32 copy of the preconditioner's
    data is a second rounding that no part of that promise covers, so every
    preconditioner refuses it alike, whether or not its float32 arithmetic
    happens to be independent of the partition (jacobi's entrywise scaling
    is; the float32 copies of amg and cheby do not sum in canonical order).

    Raises
    ------
    ValueError
        ``single`` and ``reproducible`` are both true.
    """
    if single and reproducible:
        raise ValueError("%s: reproducible=True runs in double precision; "
                         "precision='single' is not reproducible" % who)


class Float32Work:
    """Two float32 work vectors of ``n`` entries, for a preconditioner whose
    application runs in float32 (amg's cycle, cheby's recurrence): the float64
    ``r`` is rounded into one, the float32 result comes back in ``out``.
    Not collective; allocates nothing per application."""

    def __init__(self, n: int):
        self.b = np.zeros(n, np.float32)
        self.x = np.zeros(n, np.float32)

    def run(self, apply32, r: np.ndarray, out: np.ndarray) -> None:
        """``out = apply32(float32(r))``, where ``apply32(b, x)`` writes ``x``.
        Collective exactly when ``apply32`` is."""
        np.copyto(self.b, r, casting="same_kind")
        apply32(self.b, self.x)
        np.copyto(out, self.x)
