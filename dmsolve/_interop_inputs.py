"""Global inputs of :func:`dmsolve.solve` and the Krylov methods: a scipy sparse
matrix, a dense array or a scipy ``LinearOperator`` with numpy vectors (and a
scipy-style preconditioner), given on every rank as scipy takes them, are
distributed in block rows; and the one wording of the one-line conversion, for
code that takes only distributed objects.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from ._errors import agree
from ._layout import Layout
from ._matrix import DistCSR
from ._operator import DistLinearOperator
from ._vector import DistVector

__all__ = ["conversion_hint", "distribute_inputs", "distribute_system", "GlobalInputs",
           "GlobalLinearOperator", "global_preconditioner", "is_global_operator",
           "is_scipy_preconditioner"]

# What each rank was given, as bits agreed across ranks (see _agree_kinds)
(_GLOBAL_A, _OPERATOR_A, _DIST_A, _NUMPY_B, _DIST_B, _NUMPY_X0,
 _SCIPY_M, _CALLABLE_M) = (1 << k for k in range(8))


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
    layout : Layout, optional
        The row (and, for a square operator, column) layout: that of the
        matrix it preconditions, say. Default: block rows.

    Notes
    -----
    Constructing it is collective on ``comm`` (the ranks agree on the shape);
    :meth:`matvec` and :meth:`rmatvec` are collective on ``comm``.
    """

    def __init__(self, op, comm: MPI.Comm, layout: Layout | None = None):
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
        if layout is not None and (shape[0] != shape[1] or shape[0] != layout.global_size):
            raise ValueError("the LinearOperator has shape %s but the layout it is given "
                             "has global size %d" % (shape, layout.global_size))
        rows = layout if layout is not None else Layout.block(shape[0], comm)
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
                 _NUMPY_X0: "a numpy x0", _SCIPY_M: "a scipy/numpy M",
                 _CALLABLE_M: "a plain callable M"}
        differ = [n for bit, n in names.items()
                  if (int(both[0]) & bit) != (int(~both[1]) & bit)]
        raise ValueError("the ranks passed different kinds of input to the solve: %s on "
                         "some ranks only" % ", ".join(differ))
    return mine


def _kind(A, b, x0, M=None) -> int:
    kind = _m_kind(M)
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


def is_global_operator(A) -> bool:
    """Whether ``A`` is a global (scipy/numpy) operator: a scipy sparse matrix,
    a 2-D array or a scipy ``LinearOperator``. Not collective."""
    return (_is_scipy_operator(A) or sp.issparse(A)
            or (isinstance(A, np.ndarray) and A.ndim == 2))


def is_scipy_preconditioner(M) -> bool:
    """Whether ``M`` is a scipy/numpy object :func:`global_preconditioner`
    converts whatever ``A`` is. Not collective."""
    return _m_kind(M) == _SCIPY_M


def _m_kind(M) -> int:
    """The kind of a preconditioner: a scipy/numpy object, a plain callable
    (no ``apply``/``matvec``: with a global ``A`` it takes numpy vectors, as
    scipy's ``M``), or anything else (0: used as it is)."""
    if is_global_operator(M):
        return _SCIPY_M
    if callable(M) and not any(callable(getattr(M, attr, None))
                               for attr in ("apply", "matvec")):
        return _CALLABLE_M
    return 0


def global_preconditioner(M, A, numpy_callable: bool):
    """``M`` as a preconditioner on ``A``'s layout: a scipy ``LinearOperator``
    becomes a :class:`GlobalLinearOperator`, a scipy sparse matrix or 2-D
    array a ``DistCSR`` with ``A``'s row layout, and, when
    ``numpy_callable`` (the system was given as numpy/scipy objects), a plain
    callable ``M(r) -> array`` on global numpy vectors a
    :class:`GlobalLinearOperator` too. Anything else is returned unchanged.

    Collective on ``A``'s communicator when it converts (the ranks must all
    pass the same kind of ``M``: :func:`distribute_system` agrees on it).
    """
    kind = _m_kind(M)
    layout = A.row_layout
    comm = layout.comm
    if kind == _SCIPY_M and not _is_scipy_operator(M):
        return DistCSR.from_global(M.tocsr() if sp.issparse(M) else M, comm,
                                   layout=layout, col_layout=layout)
    if kind == _CALLABLE_M and numpy_callable:
        import scipy.sparse.linalg as spla   # loaded on first use: see _is_scipy_operator
        n = layout.global_size
        M = spla.LinearOperator((n, n), matvec=M, dtype=getattr(A, "dtype", np.float64))
        kind = _SCIPY_M
    if kind == _SCIPY_M:
        return GlobalLinearOperator(M, comm, layout)
    return M


@dataclass
class GlobalInputs:
    """The inputs of a solve after :func:`distribute_system`.

    ``numpy_out``: ``b`` was a numpy array, so the solution goes back as
    one (``x.gather()`` on every rank), as scipy returns it. Not collective:
    a plain record.
    """

    A: Any
    b: Any
    x0: Any
    M: Any
    nullspace: Any
    numpy_out: bool


def distribute_system(A, b, x0=None, M=None, nullspace=None, comm=None) -> GlobalInputs:
    """The inputs of a Krylov solve, with global (numpy/scipy) ones distributed.

    A scipy sparse matrix or 2-D array ``A`` (the same on every rank) becomes
    ``DistCSR.from_global(A, comm)``; a scipy ``LinearOperator`` a
    :class:`GlobalLinearOperator`; a numpy ``b``, ``x0`` and ``nullspace``
    DistVectors in its block rows; ``M`` goes through
    :func:`global_preconditioner` (a plain callable is taken to act on numpy
    vectors only when ``A`` was global). Distributed inputs pass through
    unchanged.

    Collective on the communicator (``A``'s, else ``comm``, else
    ``MPI.COMM_WORLD``): one small ``Allreduce`` checks that every rank was
    given the same kinds of input.

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
    kind = _agree_kinds(comm, _kind(A, b, x0, M))
    if not kind & (_GLOBAL_A | _OPERATOR_A):
        # distributed (or unknown: the method's door refuses it) A
        for name, value, bit in (("b", b, _NUMPY_B), ("x0", x0, _NUMPY_X0)):
            if kind & _DIST_A and kind & bit:
                raise TypeError("A is distributed but " + conversion_hint(name, value))
        if kind & _DIST_A:
            M = global_preconditioner(M, A, numpy_callable=False)
        return GlobalInputs(A, b, x0, M, nullspace, False)
    if kind & _DIST_B:
        raise TypeError("A is a global %s but b is a DistVector; give A as "
                        "DistCSR.from_global(A, b.comm) (for a matrix), or b as "
                        "b.gather()" % ("LinearOperator" if kind & _OPERATOR_A else "matrix"))
    if kind & _OPERATOR_A:
        A = GlobalLinearOperator(A, comm)
    else:
        # from_global slices rows, which COO/DIA/DOK cannot (CSR stays uncopied)
        A = DistCSR.from_global(A.tocsr() if sp.issparse(A) else A, comm)
    numpy_out = bool(kind & _NUMPY_B)
    if numpy_out:
        b = DistVector.from_global(b, A.row_layout)
    if kind & _NUMPY_X0:
        x0 = DistVector.from_global(x0, A.col_layout)
    if nullspace is not None:
        nullspace = _as_vectors(nullspace, A.col_layout)
    M = global_preconditioner(M, A, numpy_callable=True)
    return GlobalInputs(A, b, x0, M, nullspace, numpy_out)


def _as_vectors(value, layout: Layout):
    """A numpy null space basis (one vector, a list of vectors, or the rows of
    a 2-D array) as DistVectors; anything else unchanged."""
    if isinstance(value, np.ndarray):
        value = [value] if value.ndim == 1 else list(value)
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, np.ndarray)
                                                          for v in value):
        return [DistVector.from_global(v, layout) for v in value]
    return value


def distribute_inputs(A, b, comm, options: dict, pc=None):
    """``(A, b, pc, finish)`` for :func:`dmsolve.solve`: global inputs distributed.

    :func:`distribute_system` on ``A``, ``b``, the preconditioner (``pc``,
    or ``options["M"]``) and ``options["x0"]`` and ``options["nullspace"]``
    (``options`` is changed in place). When ``b`` was a numpy array,
    ``finish(x, info)`` returns ``x`` as a numpy array on every rank, as
    scipy does; otherwise it returns its arguments. Distributed inputs pass
    through unchanged.

    Collective as :func:`distribute_system`.

    Raises
    ------
    TypeError, ValueError
        As :func:`distribute_system`.
    """
    in_options = pc is None and "M" in options
    g = distribute_system(A, b, options.get("x0"), options["M"] if in_options else pc,
                          options.get("nullspace"), comm)
    for name in ("x0", "nullspace"):
        if options.get(name) is not None:
            options[name] = getattr(g, name)
    if in_options:
        options["M"] = g.M
    else:
        pc = g.M

    def unchanged(x, info):
        return x, info

    def to_numpy(x, info):
        # what the user gave, and what scipy returns: the global x on every rank
        return x.gather(), info

    return g.A, g.b, pc, to_numpy if g.numpy_out else unchanged
