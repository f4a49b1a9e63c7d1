"""Point Jacobi (diagonal scaling) and the identity preconditioner."""

from __future__ import annotations

import numpy as np

from dmsolve import DistVector, agree

from ._registry import register

__all__ = ["Jacobi", "Identity"]


class Jacobi:
    """``M r = omega * r / diag(A)``.

    Parameters
    ----------
    A : operator with ``diagonal()``
        ``DistCSR`` or any operator providing its diagonal as a DistVector.
    omega : float, optional
        Damping (default 1).

    Raises
    ------
    TypeError
        If ``A`` has no ``diagonal()``.
    ValueError
        If some diagonal entry is zero or not finite (agreed across ranks).

    Notes
    -----
    Construction is collective on ``A.comm`` (one agreement on the checks);
    :meth:`apply` is not collective and allocates nothing with ``out``.
    """

    def __init__(self, A, omega: float = 1.0):
        diag = getattr(A, "diagonal", None)
        if not callable(diag):
            raise TypeError("Jacobi needs an operator with diagonal(), got %s"
                            % type(A).__name__)
        d = diag()
        exc = None
        if not np.all(np.isfinite(d.local)) or np.any(d.local == 0):
            exc = ValueError("Jacobi: the diagonal of A has zero or non-finite entries")
        agree(d.comm, exc)
        self.layout = d.layout
        self.omega = float(omega)
        self.inv_diag = DistVector(d.layout, self.omega / d.local)

    def apply(self, r: DistVector, out: DistVector | None = None) -> DistVector:
        """``out = omega * r / diag(A)``. Not collective."""
        if out is None:
            out = r.empty_like()
        np.multiply(r.local, self.inv_diag.local, out=out.local)
        return out

    def __repr__(self) -> str:
        return "Jacobi(omega=%g)" % self.omega


class Identity:
    """``M r = r``. Not collective."""

    def __init__(self, A=None):
        pass

    def apply(self, r: DistVector, out: DistVector | None = None) -> DistVector:
        """A copy of ``r`` (into ``out``). Not collective."""
        if out is None:
            return r.copy()
        np.copyto(out.local, r.local)
        return out


register("jacobi", Jacobi)
register("none", Identity)
