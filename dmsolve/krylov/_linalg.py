"""Local vector kernels of the Krylov methods: BLAS updates on this rank's
entries, their reproducible variants, and fixed vectors for the set-up tests."""

from __future__ import annotations

import numpy as np

from .._layout import Layout
from .._vector import DistVector
from ._fused_kernels import axpy_plain

__all__ = ["axpy", "gemv_dot", "gemv_sub", "gemv_sub_rows", "index_vectors"]

_BLAS: dict = {}


def _blas(name: str, dtype):
    key = (name, np.dtype(dtype).char)
    f = _BLAS.get(key)
    if f is None:
        from scipy.linalg.blas import get_blas_funcs
        f = _BLAS[key] = get_blas_funcs(name, dtype=np.dtype(dtype))
    return f


def axpy(alpha, x: np.ndarray, y: np.ndarray) -> None:
    """``y += alpha * x`` in place on local arrays, no temporary. Not collective."""
    if y.size:
        _blas("axpy", y.dtype)(x, y, a=alpha)


def gemv_dot(V: np.ndarray, w: np.ndarray, out: np.ndarray) -> None:
    """``out[:] = conj(V) @ w`` for the rows of ``V`` (local part): the inner
    products of ``w`` with each row. Not collective."""
    if V.dtype.kind != "c":
        np.dot(V, w, out=out)
    elif V.shape[0] and V.shape[1]:
        # V.T is Fortran-ordered: zgemv with trans=2 reads conj(V) without a copy
        out[:] = _blas("gemv", V.dtype)(1.0, V.T, w, trans=2)
    else:
        out[:] = 0.0


def gemv_sub(V: np.ndarray, h: np.ndarray, w: np.ndarray, alpha=-1.0) -> None:
    """``w += alpha * V.T @ h`` in place (``V`` C-ordered rows). Not collective."""
    if w.size and V.shape[0]:
        # V.T is Fortran-ordered, so BLAS reads it without a copy and
        # overwrite_y updates w in place.
        _blas("gemv", w.dtype)(alpha, V.T, h, beta=1.0, y=w, overwrite_y=1)


def gemv_sub_rows(V: np.ndarray, h: np.ndarray, w: np.ndarray, alpha=-1.0) -> None:
    """:func:`gemv_sub` for reproducible mode: one plain ``axpy`` per row, in
    row order, so that an entry's value does not depend on where BLAS's
    blocking puts it. Not collective."""
    for j in range(V.shape[0]):
        axpy_plain(alpha * h[j], V[j], w)


def index_vectors(layout: Layout, dtype) -> tuple[DistVector, DistVector]:
    """Two fixed, oscillating vectors of the global index (the same numbers at
    any rank count), for the checks at set-up. Not collective."""
    gi = np.arange(layout.start, layout.stop, dtype=np.float64)
    v = DistVector(layout, np.sin(0.6180339887 * gi + 0.5).astype(dtype))
    w = DistVector(layout, np.cos(0.4142135623 * gi + 0.2).astype(dtype))
    return v, w
