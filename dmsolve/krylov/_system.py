"""The entry of every Krylov method, as scipy's ``make_system``: the checks at the
door, agreed across ranks, then the set-up of the state the methods share."""

from __future__ import annotations

import math

import numpy as np

from .. import _repro
from .._compile import Stopwatch
from .._errors import agree
from .._interop_inputs import (distribute_system, global_preconditioner, is_global_operator,
                               is_scipy_preconditioner)
from .._layout import Layout
from .._vector import DistVector
from ._check import CheckedSolve, check_solve
from ._checkpoints import Checkpoints
from ._fused_kernels import axpy_plain
from ._info import NORM_TYPES
from ._linalg import axpy, gemv_sub, gemv_sub_rows
from ._nullspace import NullSpace
from ._reduce import ExactReducer, Reducer
from ._stopping import StoppingTest
from ._symmetry import verify_symmetry
from ._truth import Truth

__all__ = ["make_system", "System"]


def make_system(method: str, A, b, x0, *, rtol, atol, maxiter, M, callback, nullspace,
                monitor, divtol, norm_type, raise_on_failure, project_rhs: bool,
                norm_types=NORM_TYPES, slots: int = 8, checkpoint=None, check=None,
                symmetric: bool = False, check_symmetry=False,
                reproducible=False) -> "System":
    """Check the arguments of a Krylov solve and set it up.

    The arguments are those of :func:`dmsolve.krylov.cg`, and: ``method``,
    the name in messages and reports; ``project_rhs``, remove the null
    space from ``b`` (the methods for symmetric ``A``); ``norm_types``, the
    norms the method can test; ``slots``, the inner products one reduction
    holds; ``check``, the method's own checks (a callable raising
    TypeError/ValueError); ``symmetric``, the method needs a symmetric
    preconditioner; ``check_symmetry``, the user's ``check=``.

    ``A``, ``b``, ``x0``, ``M`` and ``nullspace`` may be global (numpy/scipy)
    objects, the same on every rank, as scipy takes them: they are
    distributed first (:func:`dmsolve._interop_inputs.distribute_system`),
    and when ``b`` is a numpy array the solve returns ``x`` as one
    (``System.numpy_out``) and the callback receives the iterate as one. A
    scipy ``M`` with a distributed ``A`` becomes a distributed operator on
    ``A``'s layout. ``x0="Mb"`` starts from ``M b`` (``b`` without ``M``),
    as scipy's.

    Collective on the operator's communicator: the checks at the door
    (:func:`~dmsolve.krylov._check.check_solve`, after ``check()``) are
    agreed across ranks, so every rank raises the same exception; then the
    null space is orthonormalised and tested, ``A`` and ``M`` are tested for
    symmetry on request, ``||b||`` is computed, the checkpoint to resume
    from is read and the monitor started.
    """
    watch = Stopwatch()
    mb = isinstance(x0, str)
    if mb:
        if x0 != "Mb":
            raise ValueError("%s: x0 must be None, 'Mb' or a vector, got %r" % (method, x0))
        x0 = None
    numpy_out = False
    if is_global_operator(A):
        # scipy's inputs, the same on every rank: distributed in block rows
        g = distribute_system(A, b, x0, M, nullspace)
        A, b, x0, M, nullspace, numpy_out = g.A, g.b, g.x0, g.M, g.nullspace, g.numpy_out
        if numpy_out and callable(callback):
            callback = _numpy_callback(callback)
    elif is_scipy_preconditioner(M) and isinstance(getattr(A, "row_layout", None), Layout):
        M = global_preconditioner(M, A, numpy_callable=False)
    comm = None
    for owner in (A, b):
        lay = getattr(owner, "row_layout", None) or getattr(owner, "layout", None)
        if isinstance(lay, Layout):
            comm = lay.comm
            break
    if comm is None:
        raise TypeError("%s: A must be a distributed operator and b a DistVector, "
                        "got %s and %s" % (method, type(A).__name__, type(b).__name__))
    exc = door = None
    try:
        if check is not None:
            check()         # the method's own options, agreed with the rest
        door = check_solve(method, A, b, x0, M, rtol=rtol, atol=atol, maxiter=maxiter,
                           divtol=divtol, callback=callback, monitor=monitor,
                           nullspace=nullspace, norm_type=norm_type, norm_types=norm_types,
                           symmetric=symmetric, check_symmetry=check_symmetry,
                           checkpoint=checkpoint, reproducible=reproducible)
    except (TypeError, ValueError) as e:
        exc = e
    agree(comm, exc)
    s = System(method, comm, door, b, x0, watch=watch, slots=slots,
               reproducible=reproducible, raise_on_failure=raise_on_failure)
    s.numpy_out = numpy_out
    s.red.reductions += 1                       # the agreement above
    # a layout whose ranges differ between ranks would make every product
    # read uninitialised memory: checked once per layout (no-op once agreed)
    s.A.row_layout.verify()
    s.A.col_layout.verify()

    removed = None
    if door.system.nullspace is not None:
        s.nullspace = NullSpace.build(door.system.nullspace, s)
        if project_rhs:
            s.b = s.b.copy()
            s.nullspace.project(s.b)
            c = s.nullspace.c
            removed = float(s.dot(c, c).real)  # ||b - P b||^2 (Q orthonormal)
    s.trivial_pc = s.pc is None and s.nullspace is None
    if mb:
        # scipy's x0="Mb": start from M b (b itself without M)
        s.precondition(s.b, s.x)
        s.x0_is_zero = False
    if check_symmetry:
        verify_symmetry(s)

    s.red.put(0, s.b.local, s.b.local)
    slots = 1
    if not s.x0_is_zero:
        # a zero x0 (scipy's tests pass 0*b) saves the product of the first
        # residual, as scipy saves it: its entries that are not zero, counted
        # exactly (a norm of tiny entries would underflow) in the same reduction
        nonzero = (s.x.local != 0).astype(np.float64)
        s.red.put(1, nonzero, nonzero)
        slots = 2
    sums = s.red.reduce(slots)
    s.b2norm = math.sqrt(sums[0].real)
    if slots == 2 and sums[1].real == 0:
        s.x0_is_zero = True
    if removed is not None:
        whole = math.sqrt(s.b2norm ** 2 + removed)
        s.extra["nullspace_removed"] = math.sqrt(removed) / whole if whole else 0.0
    s.stop.bnorm = s.b2norm if s.stop.norm_type == "unpreconditioned" else None
    if checkpoint is not None:
        s.checkpoints = Checkpoints(s, checkpoint)
        s.checkpoints.start(M)
    s.setup_seconds, _ = watch.split()
    monitor = s.stop.monitor
    if monitor is not None and hasattr(monitor, "start"):
        s.red.guard(monitor.start, method, comm)
    return s


def _numpy_callback(callback):
    """``callback`` called with the whole iterate as a numpy array on every
    rank, as scipy calls it (one ``Allgatherv`` per call)."""
    def gathered(x: DistVector):
        return callback(x.gather())
    return gathered


class System:
    """The state of one Krylov solve that every method shares, and its
    guarded user calls.

    Built by :func:`make_system`, after the checks at the door. The parts:

    - ``red``: the reductions and the error rendezvous (:class:`Reducer`,
      :class:`ExactReducer` in reproducible mode);
    - ``stop``: the stopping test and the residual history
      (:class:`StoppingTest`);
    - ``truth``: the true residual at a claimed convergence (:class:`Truth`);
    - ``nullspace``: the null-space projector (:class:`NullSpace`) or None;
    - ``checkpoints``: the checkpoint glue (:class:`Checkpoints`) or None.

    Attributes
    ----------
    method : str
    comm : MPI.Comm
    A : distributed operator
        The checked operator (canonical in reproducible mode).
    b : DistVector
        The right-hand side in the working field (without its null-space
        part for the methods that remove it).
    x : DistVector
        The iterate, a new vector (``x0`` copied in).
    x0_is_zero : bool
        ``x`` is the zero initial guess (``r = b`` without a product): no
        ``x0``, or one whose entries are all zero.
    numpy_out : bool
        ``b`` was a numpy array: the solve returns ``x.gather()``.
    b2norm : float
        ``||b||_2``.
    layout : Layout
        The layout of every work vector (``A.col_layout``).
    dtype : numpy dtype
        The working field, float64 or complex128.
    pc : callable or None
        ``pc(r, out)`` applying ``M``.
    trivial_pc : bool
        No ``M`` and no null space: ``precondition`` is a copy.
    repro : bool
        Reproducible mode: the methods avoid sums whose rounding depends on
        the partition (fused lane sums).
    shift : float
        The solve is with ``A - shift I`` (MINRES); 0 otherwise.
    extra : dict
        Reports for ``info.extra``.

    Notes
    -----
    Not collective to construct; the per-iteration calls allocate nothing.
    """

    def __init__(self, method: str, comm, door: CheckedSolve, b: DistVector, x0, *,
                 watch: Stopwatch, slots: int, reproducible: bool, raise_on_failure):
        checked = door.system
        self.method = method
        self.comm = comm
        self.dtype = door.dtype
        self.complex = self.dtype.kind == "c"
        #: a reduced number as a Python scalar of the working field
        self.scalar = complex if self.complex else float
        #: reproducible mode: exact reductions, canonical products (_repro)
        self.repro = bool(reproducible)
        if self.repro:
            self.A = _repro.canonical(checked.A)
            self.red = ExactReducer(comm, self.dtype, slots)
            #: ``y += alpha x`` entry by entry, rounded as numpy rounds it
            self.axpy, self.gemv_sub = axpy_plain, gemv_sub_rows
        else:
            self.A = checked.A
            self.red = Reducer(comm, self.dtype, slots)
            self.axpy, self.gemv_sub = axpy, gemv_sub
        self.dot = self.red.dot
        self.pc = door.pc
        self.raise_on_failure = bool(raise_on_failure)
        self.stop = StoppingTest(checked.rtol, checked.atol, checked.divtol, checked.maxiter,
                                 door.norm_type, checked.monitor, self.red.guard)
        self._callback = checked.callback
        self.callbacks = 0
        # Work vectors live on the column layout (== row layout, checked).
        self.layout = self.A.col_layout
        self.x0_is_zero = x0 is None
        self.numpy_out = False                  # set by make_system
        self.x = self.vector()
        if x0 is not None:
            np.copyto(self.x.local, x0.local)
        self.b = b if b.dtype == self.dtype else DistVector(b.layout, b.local.astype(self.dtype))
        self.shift = 0.0
        self.truth = Truth(self)
        self.nullspace: NullSpace | None = None
        self.checkpoints: Checkpoints | None = None
        self.trivial_pc = self.pc is None       # and no null space (make_system)
        self.b2norm = float("nan")              # measured by make_system
        self.extra: dict = {}
        self.watch = watch
        self.setup_seconds = 0.0
        self.started = None                     # the watch's split at begin()

    # -- work vectors --------------------------------------------------------------------
    def vector(self) -> DistVector:
        """A zero work vector on the solve's layout. Not collective."""
        return DistVector(self.layout, np.zeros(self.layout.local_size, dtype=self.dtype))

    # -- user code, guarded (see Reducer) --------------------------------------------------
    def matvec(self, x: DistVector, out: DistVector) -> DistVector:
        """``out = A x``. Collective if ``A.matvec`` is (see :meth:`Reducer.guard`)."""
        red = self.red
        red.enter()
        try:
            y = self.A.matvec(x, out=out)
            if y is not out:
                out.set(y)
        except BaseException as e:  # noqa: BLE001 - re-raised on every rank by the reducer
            red.hold(e)
        return out

    def apply_pc(self, r: DistVector, out: DistVector) -> DistVector:
        """``out = M r`` alone (no null-space projection), guarded. Collective
        if ``M`` is."""
        y = self.red.guard(self.pc, r, out)
        if y is not None and y is not out:
            out.set(y)
        return out

    def precondition(self, r: DistVector, out: DistVector) -> DistVector:
        """``out = P M r`` (``P`` the null-space projector). Collective."""
        if self.pc is None:
            np.copyto(out.local, r.local)
        else:
            red = self.red
            red.enter()
            try:
                y = self.pc(r, out)
                if y is not out:
                    out.set(y)
            except BaseException as e:  # noqa: BLE001 - re-raised on every rank
                red.hold(e)
        if self.nullspace is not None:
            self.nullspace.project(out)
        return out

    def callback(self, x: DistVector) -> None:
        """Call the user's callback with the current iterate, guarded.

        Collective exactly when the callback is (see :meth:`Reducer.guard`)."""
        if self._callback is not None:
            self.callbacks += 1
            self.red.guard(self._callback, x)

    @property
    def has_callback(self) -> bool:
        """Whether the user gave a callback (no communication)."""
        return self._callback is not None

    # -- residuals and norms ---------------------------------------------------------------
    def residual(self, r: DistVector, work: DistVector, shift: float = 0.0) -> DistVector:
        """``r = b - (A - shift I) x`` into ``r``, with ``work`` for the product;
        ``r = b`` while ``x`` is the zero initial guess.

        Collective (one matvec) unless ``x`` is the zero initial guess.
        """
        if self.x0_is_zero:
            np.copyto(r.local, self.b.local)
        else:
            self.matvec(self.x, work)
            if shift:
                self.axpy(-shift, self.x.local, work.local)
            np.subtract(self.b.local, work.local, out=r.local)
        return r

    def reference_norm(self, work: DistVector) -> None:
        """Compute ``||b||`` in the tested norm (``||P M b||`` or
        ``sqrt(b^T P M b)``) using ``work``. Collective; no-op when known."""
        stop = self.stop
        if stop.bnorm is not None:
            return
        self.precondition(self.b, work)
        other = work if stop.norm_type == "preconditioned" else self.b
        self.red.put(0, work.local, other.local)
        stop.bnorm = math.sqrt(abs(self.red.reduce(1)[0].real))

    def begin(self) -> None:
        """Mark the start of the iterations (for the timings). Not collective."""
        self.started = self.watch.split()
