"""Global inputs of :func:`dmsolve.solve`: a scipy sparse matrix, a dense
array or a scipy ``LinearOperator`` with numpy vectors, given on every rank as
scipy takes them, are distributed in block rows; and the one wording of the
one-line conversion, for code that takes only distributed objects.
"""

from __future__ import annotations

import sys
from typing import Callable

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from ._errors import agree
from ._layout import Layout
from ._matrix import DistCSR
from ._operator import DistLinearOperator
from ._vector import DistVector

__all__ = ["conversion_hint", "distribute_inputs", "GlobalLinearOperator"]

# What each rank was given, as bits agreed across ranks (see _agree_kinds)
_GLOBAL_A, _OPERATOR_A, _DIST_A, _NUMPY_B, _DIST_B, _NUMPY_X0 = (1 << k for k in range(6))


def _is_scipy_operator(value) -> bool:
    """Whether ``value`` is a scipy ``LinearOperator``. scipy.sparse.linalg
    (and scipy.linalg under it) is not imported for the question: if it is
    not loaded, no such operator exists."""
    spla = sys.modules.get("scipy.sparse.linalg")
    return spla is not None and isinstance(value, spla.LinearOperator)


def conversion_hint(name: str, value) -> str | None:
    """How to turn a global (numpy/scipy) ``value``, passed as argument
    ``name``, into the distributed object dmsolve takes; None when ``value``
    is not such a global object.

    One wording for every door that takes only distributed objects (the
    Krylov methods, the preconditioners): a TypeError there can end with it.
    Not collective.

    Examples
    --------
    >>> print(conversion_hint("b", np.ones(3)))         # doctest: +NORMALIZE_WHITESPACE
    b is a numpy array (a global vector); give DistVector.from_global(b, A.row_layout),
    the same array on every rank, or pass numpy/scipy A and b to dmsolve.solve,
    which distributes both
    """
    if _is_scipy_operator(value):
        return ("%s is a scipy LinearOperator; dmsolve.solve(A, b) takes it (each rank "
                "applies it to the gathered vector), or write a DistLinearOperator" % name)
    if sp.issparse(value) or (isinstance(value, np.ndarray) and value.ndim == 2):
        return ("%s is a global %s; give DistCSR.from_global(%s, comm), the same matrix on "
                "every rank (each rank keeps its block of rows), or pass numpy/scipy A and "
                "b to dmsolve.solve, which distributes both"
                % (name, "scipy sparse matrix" if sp.issparse(value) else "numpy array",
                   name))
    if isinstance(value, np.ndarray):
        return ("%s is a numpy array (a global vector); give DistVector.from_global(%s, "
                "A.row_layout), the same array on every rank, or pass numpy/scipy A and b "
                "to dmsolve.solve, which distributes both" % (name, name))
    return None


class GlobalLinearOperator(DistLinearOperator):
    """A scipy ``LinearOperator``, the same on every rank, as a distributed operator.

    Each product gathers ``x`` on every rank (``Allgatherv``), applies the
    scipy operator to the global vector and keeps this rank's block of rows:
    every rank holds global-size vectors, as the scipy operator the user gave
    does. An exception raised by the operator on some ranks is raised on all.

    Parameters
    ----------
    op : scipy.sparse.linalg.LinearOperator
        The same operator on every rank of ``comm``.
    comm : MPI.Comm

    Notes
    -----
    Constructing it is collective on ``comm`` (the ranks agree on the shape);
    :meth:`matvec` and :meth:`rmatvec` are collective on ``comm``.
    """

    def __init__(self, op, comm: MPI.Comm):
        exc = None
        shape = (-1, -1)
        try:
            shape = tuple(int(s) for s in op.shape)
            if len(shape) != 2:
                raise ValueError("A must be a 2-D LinearOperator, got shape %s" % (shape,))
        except (TypeError, ValueError) as e:
            exc = e
        agree(comm, exc)
        shapes = comm.allgather(shape)
        if any(s != shapes[0] for s in shapes):
            raise ValueError("ranks passed LinearOperators of different shapes: %s"
                             % sorted(set(shapes)))
        rows = Layout.block(shape[0], comm)
        cols = rows if shape[1] == shape[0] else Layout.block(shape[1], comm)
        # scipy's dtype, as DistLinearOperator takes it: complex stays complex
        kind = np.dtype(getattr(op, "dtype", None) or np.float64).kind
        super().__init__(rows, cols, self._forward, self._adjoint,
                         dtype=np.complex128 if kind == "c" else np.float64)
        self.op = op

    def _forward(self, x: DistVector, out: DistVector | None = None) -> DistVector:
        return self._global_apply(self.op.matvec, x, out, self.row_layout)

    def _adjoint(self, x: DistVector, out: DistVector | None = None) -> DistVector:
        return self._global_apply(self.op.rmatvec, x, out, self.col_layout)

    @staticmethod
    def _global_apply(func: Callable, x: DistVector, out, layout: Layout) -> DistVector:
        xg = x.gather()
        exc = y = None
        try:
            y = np.asarray(func(xg)).reshape(-1)
            if y.shape[0] != layout.global_size:
                raise ValueError("the LinearOperator returned %d entries, expected %d"
                                 % (y.shape[0], layout.global_size))
        except Exception as e:  # noqa: BLE001 - the user's code: agreed, then raised
            exc = e
        agree(layout.comm, exc)
        mine = y[layout.start:layout.stop]
        if out is None:
            return DistVector(layout, np.array(mine, dtype=np.result_type(mine, np.float64)))
        out.local[:] = mine
        return out


def _agree_kinds(comm: MPI.Comm, mine: int) -> int:
    """The kinds every rank was given; a ValueError on every rank if they differ."""
    both = np.array([mine, ~mine], dtype=np.int64)
    comm.Allreduce(MPI.IN_PLACE, both, op=MPI.BAND)
    if int(both[0]) != mine or int(both[1]) != ~mine:
        names = {_GLOBAL_A: "a global A", _OPERATOR_A: "a LinearOperator A",
                 _DIST_A: "a distributed A", _NUMPY_B: "a numpy b", _DIST_B: "a DistVector b",
                 _NUMPY_X0: "a numpy x0"}
        differ = [n for bit, n in names.items()
                  if (int(both[0]) & bit) != (int(~both[1]) & bit)]
        raise ValueError("the ranks passed different kinds of input to solve: %s on some "
                         "ranks only" % ", ".join(differ))
    return mine


def _kind(A, b, x0) -> int:
    kind = 0
    if _is_scipy_operator(A):
        kind |= _OPERATOR_A
    elif sp.issparse(A) or isinstance(A, np.ndarray):
        kind |= _GLOBAL_A
    elif hasattr(A, "row_layout"):
        kind |= _DIST_A
    if isinstance(b, np.ndarray):
        kind |= _NUMPY_B
    elif isinstance(b, DistVector):
        kind |= _DIST_B
    if isinstance(x0, np.ndarray):
        kind |= _NUMPY_X0
    return kind


def _as_vectors(value, layout: Layout):
    """A numpy null space basis (one vector, a list of vectors, or the rows of
    a 2-D array) as DistVectors; anything else unchanged."""
    if isinstance(value, np.ndarray):
        value = [value] if value.ndim == 1 else list(value)
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, np.ndarray)
                                                          for v in value):
        return [DistVector.from_global(v, layout) for v in value]
    return value


def distribute_inputs(A, b, comm, options: dict):
    """``(A, b, finish)`` for :func:`dmsolve.solve`: global inputs distributed.

    A scipy sparse matrix or 2-D array ``A`` (the same on every rank) becomes
    ``DistCSR.from_global(A, comm)``; a scipy ``LinearOperator`` a
    :class:`GlobalLinearOperator`; a numpy ``b``, ``x0`` and ``nullspace``
    (in ``options``, changed in place) DistVectors in its block rows. When
    ``b`` was a numpy array, ``finish(x, info)`` returns ``x`` as a numpy
    array on every rank, as scipy does; otherwise it returns its arguments.
    Distributed inputs pass through unchanged.

    Collective on the communicator: ``A``'s, else ``comm``, else
    ``MPI.COMM_WORLD`` (one small ``Allreduce`` that checks that every rank
    was given the same kinds of input).

    Raises
    ------
    TypeError
        A distributed ``A`` with a numpy ``b`` or ``x0``, or a global ``A``
        with a DistVector ``b`` (the message gives the one-line conversion);
        ``comm`` not a communicator.
    ValueError
        ``comm`` other than ``A``'s communicator; the ranks passed different
        kinds of input.
    """
    x0 = options.get("x0")
    if comm is not None and not isinstance(comm, MPI.Comm):
        raise TypeError("comm must be an mpi4py MPI.Comm, got %s" % type(comm).__name__)
    layout = getattr(A, "row_layout", None)
    if isinstance(layout, Layout):
        if comm is not None and MPI.Comm.Compare(comm, layout.comm) not in (MPI.IDENT,
                                                                            MPI.CONGRUENT):
            raise ValueError("comm is not A's communicator; comm= is for global "
                             "(numpy/scipy) A only")
        comm = layout.comm
    elif comm is None:
        # the communicator of an MPI program that hands over global objects
        comm = MPI.COMM_WORLD
    kind = _agree_kinds(comm, _kind(A, b, x0))

    def unchanged(x, info):
        return x, info

    if not kind & (_GLOBAL_A | _OPERATOR_A):
        # distributed (or unknown: the method's door refuses it) A
        for name, value, bit in (("b", b, _NUMPY_B), ("x0", x0, _NUMPY_X0)):
            if kind & _DIST_A and kind & bit:
                raise TypeError("A is distributed but " + conversion_hint(name, value))
        return A, b, unchanged
    if kind & _DIST_B:
        raise TypeError("A is a global %s but b is a DistVector; give A as "
                        "DistCSR.from_global(A, b.comm) (for a matrix), or b as "
                        "b.gather()" % ("LinearOperator" if kind & _OPERATOR_A else "matrix"))
    if kind & _OPERATOR_A:
        A = GlobalLinearOperator(A, comm)
    else:
        # from_global slices rows, which COO/DIA/DOK cannot (CSR stays uncopied)
        A = DistCSR.from_global(A.tocsr() if sp.issparse(A) else A, comm)
    numpy_b = bool(kind & _NUMPY_B)
    if numpy_b:
        b = DistVector.from_global(b, A.row_layout)
    if kind & _NUMPY_X0:
        options["x0"] = DistVector.from_global(x0, A.col_layout)
    if options.get("nullspace") is not None:
        options["nullspace"] = _as_vectors(options["nullspace"], A.col_layout)
    if not numpy_b:
        return A, b, unchanged

    def to_numpy(x, info):
        # what the user gave, and what scipy returns: the global x on every rank
        return x.gather(), info

    return A, b, to_numpy
