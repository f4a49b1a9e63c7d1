"""Distributed dense vectors: a :class:`Layout` plus this rank's numpy slice."""

from __future__ import annotations

import numbers

import numpy as np
from mpi4py import MPI

from ._blocks import lane_total, run_lanes
from ._errors import agree
from ._interop import mpi_datatype
from ._layout import Layout
from ._vector_kernels import abs_sum_lanes, dot_lanes
from .threads import resolve

__all__ = ["DistVector"]


class DistVector:
    """A vector distributed by a :class:`Layout`.

    Parameters
    ----------
    layout : Layout
        Which rank owns which entries.
    local : array_like, optional
        This rank's entries, ``layout.local_size`` of them. Used without a
        copy when it is already a contiguous 1-D array of ``dtype``.
        Zeros when omitted.
    dtype : numpy dtype, optional
        Default float64, or the dtype of ``local``.

    Notes
    -----
    Constructing a vector is not collective. Element-wise operations
    (:meth:`axpy`, :meth:`scale`, ...) are not collective; reductions
    (:meth:`dot`, :meth:`norm`, :meth:`sum`) and :meth:`gather` are
    collective on ``layout.comm``.

    Layout checks compare the replicated ownership tables, so every rank
    reaches the same verdict and raises the same error without talking to
    the others. The dtype (real or complex) must be the same on every rank,
    as the layout.

    A DistVector is not a numpy array: ``np.asarray(x)`` raises
    ``TypeError`` (use :meth:`gather` for the global array, :attr:`local`
    for this rank's part). Element-wise numpy functions (``np.sqrt(x)``,
    ``np.add(x, 1)``, ``np.float64(2) * x``) work on the local parts and
    return a DistVector; combining a DistVector with a numpy array, and
    numpy reductions, raise ``TypeError``.
    """

    __slots__ = ("layout", "local")
    __array_priority__ = 100

    def __init__(self, layout: Layout, local=None, dtype=None):
        if not isinstance(layout, Layout):
            raise TypeError("layout must be a dmsolve.Layout, got %s"
                            % type(layout).__name__)
        n = layout.local_size
        if local is None:
            local = np.zeros(n, dtype=np.float64 if dtype is None else dtype)
        else:
            local = np.ascontiguousarray(local, dtype=dtype)
            if local.ndim != 1 or local.shape[0] != n:
                raise ValueError("local part has shape %s, expected (%d,) on rank %d"
                                 % (local.shape, n, layout.rank))
        self.layout = layout
        self.local = local

    # -- constructors -----------------------------------------------------------
    @classmethod
    def zeros(cls, layout: Layout, dtype=np.float64) -> "DistVector":
        """A vector of zeros. Not collective."""
        return cls(layout, np.zeros(layout.local_size, dtype=dtype))

    @classmethod
    def full(cls, layout: Layout, value, dtype=np.float64) -> "DistVector":
        """A vector with every entry ``value``. Not collective."""
        return cls(layout, np.full(layout.local_size, value, dtype=dtype))

    @classmethod
    def from_global(cls, x, layout) -> "DistVector":
        """Keep this rank's part of a global array given on every rank.

        Parameters
        ----------
        x : array_like, shape (N,)
            The same global array on every rank.
        layout : Layout or MPI.Comm
            The layout, or a communicator for a block layout.

        Collective on ``layout.comm``: a wrong length on some rank only is
        agreed on, and a layout that is not yet :attr:`~Layout.agreed` is
        verified (:meth:`Layout.verify`). Call it on every rank.

        Raises
        ------
        ValueError
            On every rank, for a wrong length on some rank, or a layout whose
            ranges differ between ranks.
        """
        if isinstance(layout, MPI.Comm):
            comm = layout
            x = np.asarray(x)
            n = comm.allreduce(int(x.shape[0]) if x.ndim == 1 else -1, op=MPI.MAX)
            layout = Layout.block(max(n, 0), comm)._trusted()     # an agreed size
        if not isinstance(layout, Layout):
            raise TypeError("layout must be a Layout or an MPI.Comm")
        layout.verify()
        x = np.asarray(x)
        exc = None
        if x.ndim != 1 or x.shape[0] != layout.global_size:
            exc = ValueError("global array has shape %s, expected (%d,)"
                             % (x.shape, layout.global_size))
        agree(layout.comm, exc)
        start, stop = layout.owned_range
        return cls(layout, np.array(x[start:stop]))

    # -- properties (never communicate) -----------------------------------
    @property
    def comm(self) -> MPI.Comm:
        return self.layout.comm

    @property
    def dtype(self):
        return self.local.dtype

    @property
    def global_size(self) -> int:
        return self.layout.global_size

    @property
    def local_size(self) -> int:
        return self.layout.local_size

    @property
    def shape(self) -> tuple[int]:
        return (self.layout.global_size,)

    # -- checks -------------------------------------------------------------------
    def _check(self, other: "DistVector", name: str = "other") -> None:
        if not isinstance(other, DistVector):
            raise TypeError("%s must be a DistVector, got %s"
                            % (name, type(other).__name__))
        if other.layout is not self.layout and other.layout != self.layout:
            if not self.layout.same_comm(other.layout):
                raise ValueError("%s lives on another communicator" % name)
            raise ValueError("%s has a different layout (global sizes %d and %d)"
                             % (name, other.global_size, self.global_size))

    # -- copies ----------------------------------------------------------------
    def copy(self) -> "DistVector":
        """A deep copy. Not collective."""
        return DistVector(self.layout, self.local.copy())

    def astype(self, dtype) -> "DistVector":
        """A copy with entries of ``dtype``. Not collective."""
        return DistVector(self.layout, self.local.astype(dtype))

    def conj(self) -> "DistVector":
        """The entrywise complex conjugate (a copy). Not collective."""
        return DistVector(self.layout, np.conj(self.local))

    conjugate = conj

    def zeros_like(self) -> "DistVector":
        """A vector of zeros with the same layout and dtype. Not collective."""
        return DistVector(self.layout, np.zeros_like(self.local))

    def empty_like(self) -> "DistVector":
        """An uninitialised vector with the same layout. Not collective."""
        return DistVector(self.layout, np.empty_like(self.local))

    def set(self, other: "DistVector") -> "DistVector":
        """Copy ``other``'s entries into this vector. Not collective."""
        self._check(other)
        np.copyto(self.local, other.local)
        return self

    def fill(self, value) -> "DistVector":
        """Set every entry to ``value``. Not collective."""
        self.local.fill(value)
        return self

    # -- in-place BLAS-1 (not collective) -----------------------------------
    def axpy(self, alpha, x: "DistVector") -> "DistVector":
        """``self += alpha * x`` in place. Not collective."""
        self._check(x, "x")
        if alpha == 1:
            self.local += x.local
        elif alpha == -1:
            self.local -= x.local
        elif alpha != 0:
            _axpy_inplace(alpha, x.local, self.local)
        return self

    def aypx(self, alpha, x: "DistVector") -> "DistVector":
        """``self = alpha * self + x`` in place. Not collective."""
        self._check(x, "x")
        self.local *= alpha
        self.local += x.local
        return self

    def axpby(self, alpha, x: "DistVector", beta) -> "DistVector":
        """``self = alpha * x + beta * self`` in place. Not collective."""
        self._check(x, "x")
        self.local *= beta
        return self.axpy(alpha, x)

    def waxpy(self, alpha, x: "DistVector", y: "DistVector") -> "DistVector":
        """``self = alpha * x + y`` in place. Not collective."""
        self._check(x, "x")
        self._check(y, "y")
        np.multiply(x.local, alpha, out=self.local)
        self.local += y.local
        return self

    def scale(self, alpha) -> "DistVector":
        """``self *= alpha`` in place. Not collective."""
        self.local *= alpha
        return self

    def pointwise_mult(self, x: "DistVector", y: "DistVector") -> "DistVector":
        """``self = x * y`` entry by entry, in place. Not collective."""
        self._check(x, "x")
        self._check(y, "y")
        np.multiply(x.local, y.local, out=self.local)
        return self

    # -- reductions (collective) ---------------------------------------------
    def local_dot(self, other: "DistVector", *, threads: int | None = None):
        """This rank's part of ``dot(self, other)``, on ``threads`` threads
        (see :meth:`dot`). Not collective."""
        self._check(other)
        return local_vdot(self.local, other.local, threads)

    def dot(self, other: "DistVector", *, threads: int | None = None):
        """Inner product ``sum(conj(self) * other)``. Collective.

        On ``threads`` threads (default :func:`dmsolve.get_num_threads`), two
        or more, a float64 or complex128 rank's part is summed in fixed lanes
        (:func:`dmsolve.threads.lane_bounds`): the same bits at any such
        thread count and on every run; one thread sums as ``np.vdot``.
        """
        return self.comm.allreduce(self.local_dot(other, threads=threads), op=MPI.SUM)

    def norm(self, ord=2, *, threads: int | None = None) -> float:
        """Vector norm (``2``, ``1`` or ``np.inf``). Collective. The 2- and
        1-norms sum on ``threads`` threads as :meth:`dot` does."""
        loc = self.local
        if ord == 2:
            return float(np.sqrt(self.comm.allreduce(
                float(local_vdot(loc, loc, threads).real), op=MPI.SUM)))
        if ord == 1:
            return float(self.comm.allreduce(float(_abs_sum(loc, threads)), op=MPI.SUM))
        if ord in (np.inf, "inf"):
            mx = float(np.abs(loc).max()) if loc.size else 0.0
            return float(self.comm.allreduce(mx, op=MPI.MAX))
        raise ValueError("ord must be 1, 2 or inf, got %r" % (ord,))

    def sum(self):
        """Sum of all entries. Collective."""
        return self.comm.allreduce(self.local.sum(), op=MPI.SUM)

    def all_finite(self) -> bool:
        """Whether every entry on every rank is finite. Collective."""
        ok = bool(np.all(np.isfinite(self.local)))
        return bool(self.comm.allreduce(ok, op=MPI.LAND))

    def gather(self, root: int | None = None) -> np.ndarray | None:
        """The global array, on every rank (or only on ``root``). Collective.

        Raises
        ------
        ValueError
            On every rank, if the layout's ranges differ between ranks (checked
            once per layout: :meth:`Layout.verify`).
        """
        self.layout.verify()
        counts = self.layout.local_sizes
        displs = self.layout.ranges[:-1]
        out = None
        if root is None or self.comm.Get_rank() == root:
            out = np.empty(self.global_size, dtype=self.local.dtype)
        mpitype = mpi_datatype(self.local.dtype)
        sendbuf = [self.local, mpitype]
        if root is None:
            self.comm.Allgatherv(sendbuf, [out, (counts, displs), mpitype])
        else:
            self.comm.Gatherv(sendbuf, [out, (counts, displs), mpitype] if out is not None
                              else None, root=root)
        return out

    # -- operators (allocate; for convenience, not for hot loops) ------------
    def _binary(self, other, op):
        if isinstance(other, DistVector):
            self._check(other)
            return DistVector(self.layout, op(self.local, other.local))
        if isinstance(other, numbers.Number):
            return DistVector(self.layout, op(self.local, other))
        if isinstance(other, np.ndarray):
            raise TypeError(_ARRAY_MIX % "an arithmetic operator")
        return NotImplemented

    # -- numpy: never an object array ------------------------------------------------
    def __array__(self, dtype=None, copy=None):
        raise TypeError("a DistVector holds only this rank's entries, so numpy cannot "
                        "convert it: use x.gather() for the global array (collective) or "
                        "x.local for this rank's part")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        # element-wise ufuncs of DistVectors (one layout) and scalars act on
        # the local parts; anything that would need the global array refuses
        name = getattr(ufunc, "__name__", str(ufunc))
        if method != "__call__" or ufunc.nout != 1:
            raise TypeError("numpy.%s.%s is not supported on a DistVector: use the "
                            "collective x.sum(), x.norm(), x.dot(y), or x.gather() for the "
                            "global array, or x.local for this rank's part" % (name, method))
        args = [self._ufunc_operand(a, name) for a in inputs]
        out = kwargs.pop("out", None)
        for k, v in list(kwargs.items()):
            kwargs[k] = self._ufunc_operand(v, name)
        if out is not None:
            o = out[0] if isinstance(out, tuple) else out
            if not isinstance(o, DistVector):
                raise TypeError("numpy.%s: out must be a DistVector, got %s"
                                % (name, type(o).__name__))
            self._check(o, "out")
            ufunc(*args, out=o.local, **kwargs)
            return o
        return DistVector(self.layout, ufunc(*args, **kwargs))

    def _ufunc_operand(self, a, name: str):
        if isinstance(a, DistVector):
            self._check(a)
            return a.local
        if isinstance(a, np.ndarray):
            if a.ndim == 0:
                return a[()]
            raise TypeError(_ARRAY_MIX % ("numpy." + name))
        return a

    def __add__(self, other):
        return self._binary(other, np.add)

    __radd__ = __add__

    def __sub__(self, other):
        return self._binary(other, np.subtract)

    def __rsub__(self, other):
        return self._binary(other, lambda a, b: np.subtract(b, a))

    def __mul__(self, other):
        return self._binary(other, np.multiply)

    __rmul__ = __mul__

    def __truediv__(self, other):
        return self._binary(other, np.divide)

    def __neg__(self):
        return DistVector(self.layout, -self.local)

    def __iadd__(self, other):
        if isinstance(other, DistVector):
            return self.axpy(1.0, other)
        self.local += other
        return self

    def __isub__(self, other):
        if isinstance(other, DistVector):
            return self.axpy(-1.0, other)
        self.local -= other
        return self

    def __imul__(self, other):
        if isinstance(other, DistVector):
            self._check(other)
            self.local *= other.local
        else:
            self.local *= other
        return self

    def __len__(self) -> int:
        return self.global_size

    def __repr__(self) -> str:
        return "DistVector(global_size=%d, local=%d:%d, dtype=%s)" % (
            self.global_size, *self.layout.owned_range, self.local.dtype)


_ARRAY_MIX = ("cannot combine a DistVector with a numpy array in %s (the DistVector is "
              "distributed, the array is not): distribute the array with "
              "DistVector.from_global(array, x.layout), or work on x.local, this rank's part")


_LANE_DTYPES = (np.dtype(np.float64), np.dtype(np.complex128))


def local_vdot(a: np.ndarray, b: np.ndarray, threads: int | None = None):
    """``np.vdot(a, b)``; on two or more threads (float64 or complex128
    arrays), summed in fixed lanes by blocks of lanes, the same bits at any
    such thread count. Not collective."""
    k = resolve(threads)
    if k == 1 or a.dtype not in _LANE_DTYPES or b.dtype not in _LANE_DTYPES:
        return np.vdot(a, b)
    partial = run_lanes(lambda bounds, l0, l1, part: dot_lanes(a, b, bounds, l0, l1, part),
                        a.shape[0], k, dtype=np.result_type(a.dtype, b.dtype))
    return lane_total(partial)


def _abs_sum(a: np.ndarray, threads: int | None):
    # sum(|a|), in fixed lanes on two or more threads (as local_vdot)
    k = resolve(threads)
    if k == 1 or a.dtype not in _LANE_DTYPES:
        return np.abs(a).sum()
    return lane_total(run_lanes(lambda bounds, l0, l1, part: abs_sum_lanes(
        a, bounds, l0, l1, part), a.shape[0], k))


def _axpy_inplace(alpha, x: np.ndarray, y: np.ndarray) -> None:
    # BLAS axpy updates y in place with no temporary the size of the vector
    if y.size == 0:
        return          # (scipy's BLAS wrappers refuse empty arrays: a rank may own nothing)
    if y.dtype == x.dtype and y.dtype.char in "fdFD" and y.flags.c_contiguous:
        axpy = _AXPY.get(y.dtype.char)
        if axpy is None:
            from scipy.linalg.blas import get_blas_funcs
            axpy = _AXPY[y.dtype.char] = get_blas_funcs("axpy", dtype=y.dtype)
        axpy(x, y, a=alpha)
    else:
        y += alpha * x


_AXPY: dict = {}
