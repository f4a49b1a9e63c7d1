"""``check=True``: test at set-up that ``A`` and ``M`` are symmetric (Hermitian),
as scipy's ``minres(check=True)``, with the same verdict at any rank count."""

from __future__ import annotations

import math

import numpy as np

from ._linalg import index_vectors

__all__ = ["verify_symmetry", "asymmetry", "SYMMETRY_RTOL"]

#: ``check=True``: ``|y^T A x - x^T A y| <= SYMMETRY_RTOL * (||A x|| ||y|| +
#: ||A y|| ||x||)`` (and the same for ``M``) for fixed vectors of the global index.
SYMMETRY_RTOL = math.sqrt(np.finfo(float).eps)


def verify_symmetry(s) -> None:
    """Compare ``y^H A x`` with ``conj(x^H A y)`` (and the same for ``M``) for
    two fixed vectors of the global index.

    ``s`` is the solve (:class:`~dmsolve.krylov._system.System`). Collective:
    two products, two preconditioner applications and one reduction.

    Raises
    ------
    ValueError
        On every rank (the verdict uses reduced numbers only), naming the
        operator that is not symmetric.
    """
    x, y = index_vectors(s.layout, s.dtype)
    ops = [("A", s.matvec)]
    if s.pc is not None:
        ops.append(("M", s.apply_pc))
    ax, ay = s.vector(), s.vector()
    red = s.red
    red.reserve(6 * len(ops))
    for i, (_, op) in enumerate(ops):
        op(x, ax)
        op(y, ay)
        pairs = ((y, ax), (x, ay), (ax, ax), (ay, ay), (x, x), (y, y))
        for j, (u, v) in enumerate(pairs):
            red.put(6 * i + j, u.local, v.local)
    out = red.reduce(6 * len(ops))
    for i, (name, _) in enumerate(ops):
        yax, xay = out[6 * i], out[6 * i + 1]
        axx, ayy, xx, yy = (float(t.real) for t in out[6 * i + 2: 6 * i + 6])
        scale = math.sqrt(axx * yy) + math.sqrt(ayy * xx)
        # Hermitian: y^H A x = conj(x^H A y) (symmetric for real data)
        gap = abs(yax - np.conj(xay))
        if not gap <= SYMMETRY_RTOL * scale:
            raise ValueError(
                "%s needs a symmetric %s (check=True): |y^T %s x - x^T %s y| = %.3e "
                "is %.3e of ||%s x|| ||y|| + ||%s y|| ||x|| for fixed vectors x, y; "
                "use method='gmres', 'fgmres' or 'bicgstab' for a nonsymmetric %s"
                % (s.method, "matrix A" if name == "A" else "preconditioner M",
                   name, name, gap, gap / scale if scale else math.inf, name, name,
                   "matrix" if name == "A" else "preconditioner"))


def asymmetry(apply, layout, dtype=np.float64) -> float:
    """``|y^H A x - conj(x^H A y)| / (||A x|| ||y|| + ||A y|| ||x||)`` for the
    fixed vectors of :func:`verify_symmetry`: the number that ``check=True``
    compares with :data:`SYMMETRY_RTOL`, for an operator outside a solve.

    ``apply(v)`` returns ``A v`` (a ``DistVector`` on ``layout``), e.g.
    ``A.matvec``. Collective: two applications and a few reductions. The
    result is the same on every rank.
    """
    x, y = index_vectors(layout, dtype)
    ax, ay = apply(x), apply(y)
    gap = abs(y.dot(ax) - np.conj(x.dot(ay)))
    scale = ax.norm() * y.norm() + ay.norm() * x.norm()
    if scale == 0:
        return 0.0 if gap == 0 else math.inf
    return float(gap / scale)
