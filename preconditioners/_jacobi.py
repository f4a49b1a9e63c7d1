"""Point Jacobi (diagonal scaling) and the identity preconditioner."""

from __future__ import annotations

import numpy as np

from dmsolve import Preconditioner
from dmsolve.validate import agreed, check_bool, check_real

from ._diagonal import refuse_rows
from ._precision import check_precision, refuse_single_reproducible
from ._registry import register
from ._threads import ufunc_blocks

__all__ = ["Jacobi", "Identity", "checked_inverse_diagonal"]


def checked_inverse_diagonal(A, who: str = "Jacobi") -> np.ndarray:
    """``1 / diag(A)`` on this rank's rows, refusing zero or non-finite entries.

    d = diag().local
    d = np.asarray(d, dtype=np.complex128 if d.dtype.kind == "c" else np.float64)
    refuse_rows(A.row_layout, ~np.isfinite(d) | (d == 0),
                "%s: the diagonal of A is zero or not finite" % who)
    """
    diag = getattr(A, "diagonal", None)
    if not callable(diag):
        raise TypeError("%s needs an operator with diagonal(), got %s"
                        % (who, type(A).__name__))
    d = diag().local
    d = np.asarray(d, dtype=np.complex128 if d.dtype.kind == "c" else np.float64)
    refuse_rows(A.row_layout, ~np.isfinite(d) | (d == 0),
                "%s: the diagonal of A is zero or not finite" % who)
    with np.errstate(divide="ignore"):
        return 1.0 / d


class Jacobi(Preconditioner):
    """``M r = omega * r / diag(A)``.

    Parameters
    ----------
    A : DistCSR
        Any operator providing ``diagonal()`` and ``row_layout``; real or
        complex.
    omega : float > 0, optional
        Damping (default 1).
    precision : {"double", "single"}
        ``"single"`` stores ``omega / diag(A)`` in float32 (half the bytes
        read per application); the product with ``r`` is still formed in
        float64. Real matrices only; refused with ``reproducible=True``.
    reproducible : bool, optional
        For ``reproducible=True`` solves (docs/reproducible.md): the
        scaling is entrywise, the same bits for any partition. Double
        precision only.

    Raises
    ------
    ValueError
        On every rank, if some diagonal entry is zero or not finite,
        ``omega`` is not a positive real number, ``precision`` is unknown,
        or ``precision="single"`` with ``reproducible=True``.
    TypeError
        On every rank, for ``precision="single"`` and a complex ``A``.

    Notes
    -----
    Construction is collective on ``A.comm`` (one agreement on the checks);
    :meth:`apply` is not collective and allocates nothing with ``out``.
    :attr:`symmetric` is True (a diagonal).
    """

    name = "jacobi"
    _symmetric = True  # a diagonal
    supports_complex = True

    def __init__(self, A, omega: float = 1.0, precision: str = "double",
                 reproducible: bool = False):
        super().__init__(A)
        with agreed(self.comm):
            self.omega = check_real("omega", omega, low=0.0, low_open=True)
            single = check_precision("jacobi", precision, A)
            #: a scaling entry by entry: the same bits for any partition
            self.reproducible = check_bool("reproducible", reproducible)
            refuse_single_reproducible("jacobi", single, self.reproducible)
        self.precision = "single" if single else "double"
        self.inv_diag = self.omega * checked_inverse_diagonal(A, "Jacobi")
        if single:
            self.inv_diag = self.inv_diag.astype(np.float32)
        self._done()

    def _apply(self, r, out):
        """Not collective."""
        ufunc_blocks(np.multiply, r, self.inv_diag, out)

    def _describe(self):
        return {"omega": self.omega, "precision": self.precision,
                "stored_bytes_local": int(self.inv_diag.nbytes)}

    def __repr__(self) -> str:
        return "Jacobi(omega=%g, precision=%r)" % (self.omega, self.precision)


class Identity(Preconditioner):
    """``M r = r``: no preconditioning. Neither set-up nor :meth:`apply` is
    collective; :attr:`symmetric` is True."""

    name = "none"
    _symmetric = True  # the identity
    supports_complex = True

    def __init__(self, A):
        super().__init__(A)
        self._done()

    def _apply(self, r, out):
        """Not collective."""
        np.copyto(out, r)


register("jacobi", Jacobi)
register("none", Identity)
