"""Distributed linear operators defined by a matvec function.

Anything with ``row_layout``, ``col_layout`` and ``matvec(x, out=None)`` is a
distributed operator to the solvers; :class:`DistLinearOperator` builds one
from plain functions and :func:`aslinearoperator` normalises the rest.
"""

from __future__ import annotations

import inspect
from typing import Callable

import numpy as np

from ._layout import Layout
from ._vector import DistVector

__all__ = ["DistLinearOperator", "aslinearoperator"]


def _takes_out(func) -> bool:
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False
    return "out" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


class DistLinearOperator:
    """A distributed linear operator ``y = A x`` given by functions.

    Parameters
    ----------
    row_layout : Layout
        Layout of ``y = A x`` (the rows of ``A``).
    col_layout : Layout
        Layout of ``x`` (the columns of ``A``).
    matvec : callable
        ``matvec(x)`` or ``matvec(x, out)`` returning ``A x`` as a
        :class:`DistVector` on ``row_layout``. It must be called on every
        rank of the communicator (it may communicate).
    rmatvec : callable, optional
        The same for ``A^T`` (from ``row_layout`` to ``col_layout``).
    dtype : numpy dtype, optional
        The operator's scalar type, float64 (default) or complex128, as
        scipy's ``LinearOperator.dtype``: what solvers and
        :meth:`create_vectors` go by.

    Notes
    -----
    Constructing the operator is not collective; :meth:`matvec` is collective
    on ``comm`` whenever the wrapped function is.
    """

    def __init__(self, row_layout: Layout, col_layout: Layout, matvec: Callable,
                 rmatvec: Callable | None = None, dtype=np.float64):
        for name, lay in (("row_layout", row_layout), ("col_layout", col_layout)):
            if not isinstance(lay, Layout):
                raise TypeError("%s must be a dmsolve.Layout, got %s"
                                % (name, type(lay).__name__))
        if not row_layout.same_comm(col_layout):
            raise ValueError("row_layout and col_layout live on different communicators")
        if not callable(matvec):
            raise TypeError("matvec must be callable")
        if rmatvec is not None and not callable(rmatvec):
            raise TypeError("rmatvec must be callable or None")
        dtype = np.dtype(dtype)
        if dtype not in (np.dtype(np.float64), np.dtype(np.complex128)):
            raise TypeError("dtype must be float64 or complex128, got %s" % dtype)
        self.dtype = dtype
        self.row_layout = row_layout
        self.col_layout = col_layout
        self._matvec = matvec
        self._rmatvec = rmatvec
        self._matvec_out = _takes_out(matvec)
        self._rmatvec_out = rmatvec is not None and _takes_out(rmatvec)

    @property
    def comm(self):
        return self.row_layout.comm

    @property
    def shape(self) -> tuple[int, int]:
        return (self.row_layout.global_size, self.col_layout.global_size)

    def create_vectors(self) -> tuple[DistVector, DistVector]:
        """``(x, y)``: zero vectors of :attr:`dtype` on the column and row layouts.
        Not collective."""
        return (DistVector(self.col_layout, dtype=self.dtype),
                DistVector(self.row_layout, dtype=self.dtype))

    def matvec(self, x: DistVector, out: DistVector | None = None) -> DistVector:
        """``A x``, written into ``out`` when given. Collective on ``comm``."""
        return self._apply(self._matvec, self._matvec_out, x, out, self.row_layout)

    def rmatvec(self, x: DistVector, out: DistVector | None = None) -> DistVector:
        """``A^T x``, written into ``out`` when given. Collective on ``comm``.

        Raises
        ------
        NotImplementedError
            If the operator was built without ``rmatvec``.
        """
        if self._rmatvec is None:
            raise NotImplementedError("this DistLinearOperator has no rmatvec")
        return self._apply(self._rmatvec, self._rmatvec_out, x, out, self.col_layout)

    @staticmethod
    def _apply(func, takes_out, x, out, layout) -> DistVector:
        y = func(x, out=out) if (takes_out and out is not None) else func(x)
        if not isinstance(y, DistVector):
            raise TypeError("the operator's function returned %s, not a DistVector"
                            % type(y).__name__)
        if out is not None and y is not out:
            out.set(y)
            return out
        if y.layout != layout:
            raise ValueError("the operator's function returned a vector of global "
                             "size %d on the wrong layout" % y.global_size)
        return y

    def __matmul__(self, x: DistVector) -> DistVector:
        return self.matvec(x)

    def __repr__(self) -> str:
        return "DistLinearOperator(shape=%s)" % (self.shape,)


def aslinearoperator(A) -> DistLinearOperator:
    """Return ``A`` as an object with ``row_layout``, ``col_layout`` and
    ``matvec(x, out=None)``.

    ``A`` may already be such an operator (a :class:`DistLinearOperator`, a
    ``DistCSR``, ...), in which case it is returned unchanged when its
    ``matvec`` accepts ``out`` and wrapped otherwise. Not collective.

    Raises
    ------
    TypeError
        If ``A`` has no ``row_layout``, ``col_layout`` or ``matvec``.
    """
    if isinstance(A, DistLinearOperator):
        return A
    row = getattr(A, "row_layout", None)
    col = getattr(A, "col_layout", None)
    mv = getattr(A, "matvec", None)
    if not isinstance(row, Layout) or not isinstance(col, Layout) or not callable(mv):
        raise TypeError("A must be a distributed operator (row_layout, col_layout and "
                        "matvec(x, out=None)), got %s" % type(A).__name__)
    if _takes_out(mv):
        return A
    rmv = getattr(A, "rmatvec", None)
    kind = np.dtype(getattr(A, "dtype", np.float64)).kind
    return DistLinearOperator(row, col, mv, rmv if callable(rmv) else None,
                              dtype=np.complex128 if kind == "c" else np.float64)
