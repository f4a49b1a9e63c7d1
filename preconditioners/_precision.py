"""Mixed precision: the ``precision`` option of amg, cheby, jacobi, bjacobi and asm.

``precision="single"`` keeps the preconditioner's data (matrices, factors,
diagonals) in float32 inside a float64 Krylov method, which still computes
every residual, inner product and stopping test in float64.
"""

from __future__ import annotations

import numpy as np

from dmsolve.validate import check_choice

__all__ = ["PRECISIONS", "check_precision", "Float32Work"]

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
