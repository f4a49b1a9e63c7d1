"""Machinery shared by the Krylov methods: checks at the door, fused and
error-carrying reductions, the stopping test, the null-space projector.

Every method builds one :class:`Context` and then only calls its
allocation-free per-iteration methods (``matvec``, ``precondition``,
``reduce``, ``ireduce``/``wait``, ``test``, ``callback``).
"""

from __future__ import annotations

import math

import numpy as np
from mpi4py import MPI
from scipy.linalg.blas import get_blas_funcs

from .. import _errors, _repro
from .._compile import Stopwatch
from .._errors import agree, complete
from ..checkpoint import Checkpointer
from .._layout import Layout
from .._operator import _takes_out
from .._vector import DistVector
from ..validate import check_bool
from ._check import check_system
from ._info import NORM_TYPES, ConvergedReason, SolveInfo

__all__ = ["Context", "gemv_sub", "gemv_dot", "axpy", "DEFAULT_DIVTOL", "TRUTH_SLACK",
           "TRUTH_RESTARTS", "NULLSPACE_RTOL", "SYMMETRY_RTOL", "document"]

#: PETSc's default divergence tolerance, relative to the initial residual norm.
DEFAULT_DIVTOL = 1e4

#: At a claimed convergence in the preconditioned or natural norm, the true
#: ``||b - A x||_2`` may exceed ``max(rtol*||b||_2, atol)`` by this factor: the
#: norms differ by up to the condition number of ``M``. Measured on the gallery
#: (poisson2d/3d, varpoisson, anisotropic2d, random-spd, convdiff2d/3d,
#: shifted3d with shifts 0 and 0.2) with cg/pipecg/minres/gmres x jacobi,
#: bjacobi, asm, cheby, amg, gemslr at rtol 1e-5, 1e-8, 1e-10 on 1 and 3 ranks,
#: the ratio stayed below 30 but for left-preconditioned GMRES with cheby on
#: the indefinite shifted3d (up to 652, a polynomial near zero on part of the
#: spectrum). A singular or inconsistent preconditioner leaves a true relative
#: residual of O(1), i.e. a ratio of ``1/rtol``.
TRUTH_SLACK = 1e3

#: How many times a method restarts from its iterate (fresh residual, fresh
#: recurrence) when the true residual fails the test at a claimed convergence,
#: before it stops with ``FALSE_CONVERGENCE``.
TRUTH_RESTARTS = 3

#: A null-space vector ``q`` (orthonormalised) is accepted when
#: ``||A q|| <= NULLSPACE_RTOL * ||A v|| / ||v||`` for a fixed vector ``v`` of
#: the global index (PETSc's ``MatNullSpaceTest`` uses ``100 sqrt(eps)``).
NULLSPACE_RTOL = 100 * math.sqrt(np.finfo(float).eps)

#: ``check=True``: ``|y^T A x - x^T A y| <= SYMMETRY_RTOL * (||A x|| ||y|| +
#: ||A y|| ||x||)`` (and the same for ``M``) for fixed vectors of the global index.
SYMMETRY_RTOL = math.sqrt(np.finfo(float).eps)


def _index_vectors(layout: Layout, dtype) -> tuple[DistVector, DistVector]:
    """Two fixed, oscillating vectors of the global index (the same numbers at
    any rank count), for the checks at set-up. Not collective."""
    gi = np.arange(layout.start, layout.stop, dtype=np.float64)
    v = DistVector(layout, np.sin(0.6180339887 * gi + 0.5).astype(dtype))
    w = DistVector(layout, np.cos(0.4142135623 * gi + 0.2).astype(dtype))
    return v, w

_BLAS: dict = {}


def _blas(name: str, dtype):
    key = (name, np.dtype(dtype).char)
    f = _BLAS.get(key)
    if f is None:
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


def _wrap_pc(M):
    """Return ``f(r, out)`` applying ``M``, or None for no preconditioner."""
    if M is None or (isinstance(M, str) and M.lower() == "none"):
        return None
    if isinstance(M, str):
        raise TypeError("M must be a preconditioner object, not the name %r; use "
                        "dmsolve.solve(..., pc=%r) to build one by name" % (M, M))
    for attr in ("apply", "matvec"):
        f = getattr(M, attr, None)
        if callable(f):
            if _takes_out(f):
                return lambda r, out, f=f: f(r, out=out)
            return lambda r, out, f=f: f(r)
    if callable(M):
        if _takes_out(M):
            return lambda r, out: M(r, out=out)
        return lambda r, out: M(r)
    raise TypeError("M must have apply(r, out=None) or matvec(x, out=None), or be "
                    "callable, got %s" % type(M).__name__)


def _check_complex(method: str, M, checkpoint) -> None:
    """Refuse what cannot take a complex system. Not collective (rank-independent facts)."""
    if getattr(M, "supports_complex", None) is False:
        name = getattr(M, "name", None) or type(M).__name__
        raise TypeError("%s: the system is complex, but the preconditioner %s supports real "
                        "systems only; use jacobi, bjacobi or asm (or none)" % (method, name))
    if checkpoint is not None:
        raise TypeError("%s: checkpoints hold real systems only; this system is complex"
                        % method)


def _system_dtype(A, b, x0) -> np.dtype:
    """complex128 when ``A``, ``b`` or ``x0`` is complex, else float64. Not collective."""
    kinds = [np.dtype(getattr(A, "dtype", np.float64)).kind, b.dtype.kind]
    if x0 is not None:
        kinds.append(x0.dtype.kind)
    return np.dtype(np.complex128 if "c" in kinds else np.float64)


def _check_symmetric_pc(method: str, M) -> None:
    """Refuse a preconditioner that says it is not symmetric for a method that
    needs one (CG, pipelined CG, MINRES). Not collective (a rank-independent fact)."""
    if getattr(M, "symmetric", None) is not False:
        return          # True, or None: unknown (a callable, an operator), taken on trust
    name = getattr(M, "name", None) or type(M).__name__
    if name == "asm" and getattr(M, "restricted", False):
        what = "asm with restricted=True is not"
        fix = "pc=('asm', {'restricted': False})"
    else:
        what = "%s is not (its symmetric attribute is False)" % name
        fix = "a symmetric preconditioner"
    raise ValueError("%s needs a symmetric preconditioner; %s: use %s or method='gmres', "
                     "'fgmres' or 'bicgstab'" % (method, what, fix))


class Context:
    """The state of one Krylov solve that every method shares.

    Collective on the operator's communicator: the constructor performs the
    checks at the door (agreed across ranks: :func:`check_system`, then the
    method's own ``check()`` if given), orthonormalises the null space and
    computes ``||b||``.

    Errors raised by user code on some ranks only (the operator's
    ``matvec``, the preconditioner, the callback, the monitor) are caught
    and remembered; every reduction carries one extra slot, the number of
    ranks holding such an error, so the next reduction tells every rank,
    and all of them raise the same exception through
    :func:`dmsolve._errors.agree`. A final agreement at the end of the solve
    catches an error raised after the last reduction.

    A rank may fail before its user code communicated, and its neighbours
    then wait in that communication for good. So every reduction is a
    non-blocking ``Iallreduce``: the healthy ranks ``Wait``, a rank holding
    an error polls for :data:`dmsolve._errors.AGREE_GRACE` seconds and, if
    the others do not arrive, raises its exception alone (under ``python -m
    mpi4py`` the job aborts). For the same reason a rank holding an error
    must never block in communication before its next reduction: before
    a user call that follows another user call with no reduction in
    between, every rank posts a non-blocking barrier (``Ibarrier``); healthy
    ranks complete it at the next reduction, a failing rank polls it and
    goes on only when every rank has come that far.
    """

    def __init__(self, method: str, A, b, x0, *, rtol, atol, maxiter, M, callback,
                 nullspace, monitor, divtol, norm_type, raise_on_failure,
                 project_rhs: bool, norm_types=NORM_TYPES, slots: int = 8,
                 checkpoint=None, check=None, symmetric: bool = False,
                 check_symmetry=False, reproducible=False):
        self._watch = Stopwatch()
        self.method = method
        comm = None
        for owner in (A, b):
            lay = getattr(owner, "row_layout", None) or getattr(owner, "layout", None)
            if isinstance(lay, Layout):
                comm = lay.comm
                break
        if comm is None:
            raise TypeError("%s: A must be a distributed operator and b a DistVector, "
                            "got %s and %s" % (method, type(A).__name__, type(b).__name__))
        self.comm = comm
        self.reductions = 0
        exc = None
        try:
            if check is not None:
                check()         # the method's own options, agreed with the rest
            self._check(A, b, x0, rtol, atol, maxiter, M, callback, nullspace, monitor,
                        divtol, norm_type, norm_types)
            check_bool("check", check_symmetry)
            if symmetric:
                _check_symmetric_pc(method, M)
            if checkpoint is not None and not isinstance(checkpoint, Checkpointer):
                raise TypeError("checkpoint must be a dmsolve.checkpoint.Checkpointer or "
                                "None, got %s (solve() takes a path)"
                                % type(checkpoint).__name__)
            # one working precision: float64, or complex128 for a complex
            # A, b or x0 (reductions, Hessenberg matrices, BLAS calls too)
            self.dtype = _system_dtype(self.A, b, x0)
            if self.dtype.kind == "c":
                _check_complex(method, M, checkpoint)
            check_bool("reproducible", reproducible)
            if reproducible:
                _repro.check_inputs(method, self.A, M, self.dtype)
        except (TypeError, ValueError) as e:
            exc = e
        self.reductions += 1
        agree(comm, exc)
        #: reproducible mode: exact reductions, canonical products (_repro)
        self.repro = bool(reproducible)
        self._accs: dict = {}               # id(float buffer) -> its accumulators
        if self.repro:
            self.A = _repro.canonical(self.A)
            from .._reprosum import dot_into, dots_into   # numba: on the first solve
            from ._fused_kernels import axpy_plain
            self._dot_into, self._dots_into = dot_into, dots_into
            #: ``y += alpha x`` entry by entry, rounded as numpy rounds it
            self.axpy = axpy_plain
        else:
            self.axpy = axpy
        # a layout whose ranges differ between ranks would make every product
        # read uninitialised memory: checked once per layout (no-op once agreed)
        self.A.row_layout.verify()
        self.A.col_layout.verify()

        self.error: BaseException | None = None
        # user calls made, and how many of them every rank is known to have
        # finished (a reduction started after them has completed, or a barrier
        # was posted after them): a user call after an unsynchronised one is
        # preceded by a barrier. The rule uses only these counts, which are
        # the same on every rank, so every rank posts the same barriers.
        self._calls = 0
        self._synced = 0
        self._nbarriers = 0                 # barriers posted so far
        self._barriers: list = []           # (serial, request) not yet completed
        self._inflight: dict = {}           # id(request) -> (calls, barriers) at its start
        self.complex = self.dtype.kind == "c"
        #: local inner product ``a^H b`` (``np.vdot`` conjugates its first argument)
        self.dot = np.vdot if self.complex else np.dot
        #: a reduced number as a Python scalar of the working field
        self.scalar = complex if self.complex else float
        self._mpitype = MPI.C_DOUBLE_COMPLEX if self.complex else MPI.DOUBLE
        self._send = self.buffer(slots + 1)
        self._recv = self.buffer(slots + 1)
        self.raise_on_failure = bool(raise_on_failure)
        self.norms: list[float] = []
        self.callbacks = 0

        # Work vectors live on the column layout (== row layout, checked).
        self.layout = self.A.col_layout
        self.x0_is_zero = x0 is None
        self.x = self.vector()
        if x0 is not None:
            np.copyto(self.x.local, x0.local)
        self.b = b if b.dtype == self.dtype else DistVector(b.layout, b.local.astype(self.dtype))
        # the truth check at claimed convergence (see confirm)
        self.shift = 0.0                # MINRES solves with A - shift I
        self.truth_restarts = 0
        self._truth = None              # (iteration, ||b - A x||) last measured
        self._restarted_at = None       # iteration of the last truth restart
        self._truth_work = None
        self.extra: dict = {}

        self._Q = None
        removed = None
        if self._nullspace is not None:
            self._setup_nullspace(self._nullspace)
            if project_rhs:
                self.b = self.b.copy()
                self.project(self.b)
                removed = float(self.dot(self._c, self._c).real)  # ||b - P b||^2 (Q orthonormal)
        self.trivial_pc = self._pc is None and self._Q is None
        if check_symmetry:
            self._check_symmetry()

        self.put(0, self.b.local, self.b.local)
        self.b2norm = math.sqrt(self.reduce(1)[0].real)
        if removed is not None:
            whole = math.sqrt(self.b2norm ** 2 + removed)
            self.extra["nullspace_removed"] = math.sqrt(removed) / whole if whole else 0.0
        self.bnorm = self.b2norm if self.norm_type == "unpreconditioned" else None
        self.rnorm0 = None
        # None when off: the methods then pay one `is None` test per iteration
        self.checkpoint = checkpoint
        if checkpoint is not None:
            checkpoint.start(self, M)
        self.setup_seconds, _ = self._watch.split()
        self._begin = None
        if self.monitor is not None and hasattr(self.monitor, "start"):
            self.guard(self.monitor.start, method, comm)

    # -- door checks (rank-independent facts but finiteness, agreed anyway) ------
    def _check(self, A, b, x0, rtol, atol, maxiter, M, callback, nullspace, monitor,
               divtol, norm_type, norm_types):
        m = self.method
        self._pc = _wrap_pc(M)
        if norm_type not in norm_types:
            raise ValueError("%s: norm_type must be one of %s, got %r"
                             % (m, ", ".join(norm_types), norm_type))
        if self._pc is None and norm_type in ("preconditioned", "natural"):
            norm_type = "unpreconditioned"   # all three coincide without M
        self.norm_type = norm_type
        # the same door as solve(..., backend="petsc"); its last check is the
        # only rank-dependent one (finiteness)
        s = check_system(m, A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, divtol=divtol,
                         callback=callback, monitor=monitor, nullspace=nullspace)
        self.A, self.rtol, self.atol, self.divtol = s.A, s.rtol, s.atol, s.divtol
        self.maxiter, self._callback, self.monitor = s.maxiter, s.callback, s.monitor
        self._nullspace = s.nullspace

    # -- null space ----------------------------------------------------------------
    def _setup_nullspace(self, vecs: list[DistVector]):
        k = len(vecs)
        if self._send.size < k + 2:
            self.reserve(k + 1)
        Q = np.zeros((k, self.layout.local_size), dtype=self.dtype)
        for i, v in enumerate(vecs):
            q = Q[i]
            np.copyto(q, v.local)
            self.put(0, q, q)
            norm0 = math.sqrt(self.reduce(1)[0].real)
            for _ in range(2):          # classical Gram-Schmidt, twice
                if i:
                    self.put_rows(0, Q[:i], q)
                    self.reduce(i)
                    self.gemv_sub(Q[:i], self._recv[:i].astype(self.dtype), q)
            self.put(0, q, q)
            norm = math.sqrt(self.reduce(1)[0].real)
            if not norm > 1e-10 * norm0:
                # the norms are reduced values, the same on every rank
                raise ValueError("nullspace vectors are zero or linearly dependent "
                                 "(vector %d)" % i)
            q /= norm
        self._Q = Q
        self._c = np.zeros(k, dtype=self.dtype)
        self._test_nullspace()

    def _test_nullspace(self) -> None:
        # PETSc's MatNullSpaceTest: ||A q|| of each orthonormal q, relative to
        # ||A v|| / ||v|| for a fixed v of the global index (a scale of A that
        # does not depend on the rank count). k + 1 products, one reduction.
        Q = self._Q
        k = Q.shape[0]
        v, _ = _index_vectors(self.layout, self.dtype)
        av = self.vector()
        self.matvec(v, av)
        self.put(0, av.local, av.local)
        self.put(1, v.local, v.local)
        for i in range(k):
            self.matvec(DistVector(self.layout, Q[i]), av)
            self.put(2 + i, av.local, av.local)
        red = self.reduce(k + 2).real
        scale = math.sqrt(red[0] / red[1]) if red[1] > 0 else 0.0
        for i in range(k):
            aq = math.sqrt(red[2 + i])
            ratio = aq / scale if scale > 0 else (0.0 if aq == 0 else math.inf)
            if not ratio <= NULLSPACE_RTOL:
                # reduced values: the same verdict on every rank
                raise ValueError(
                    "%s: nullspace vector %d is not in the null space of A: ||A q|| / "
                    "(||A v|| / ||v||) = %.3e for q the orthonormalised vector and v a "
                    "fixed vector, above %.1e" % (self.method, i, ratio, NULLSPACE_RTOL))

    # -- symmetry (check=True) -------------------------------------------------------
    def _check_symmetry(self) -> None:
        # y^T A x against x^T A y (and the same for M) for fixed vectors of the
        # global index, as scipy's minres(check=True): two products (and two
        # preconditioner applications), one reduction
        x, y = _index_vectors(self.layout, self.dtype)
        ops = [("A", self.matvec)]
        if self._pc is not None:
            ops.append(("M", self._apply_pc))
        ax, ay = self.vector(), self.vector()
        self.reserve(6 * len(ops))
        for i, (_, op) in enumerate(ops):
            op(x, ax)
            op(y, ay)
            pairs = ((y, ax), (x, ay), (ax, ax), (ay, ay), (x, x), (y, y))
            for j, (u, v) in enumerate(pairs):
                self.put(6 * i + j, u.local, v.local)
        red = self.reduce(6 * len(ops))
        for i, (name, _) in enumerate(ops):
            yax, xay = red[6 * i], red[6 * i + 1]
            axx, ayy, xx, yy = (float(t.real) for t in red[6 * i + 2: 6 * i + 6])
            scale = math.sqrt(axx * yy) + math.sqrt(ayy * xx)
            # Hermitian: y^H A x = conj(x^H A y) (symmetric for real data)
            gap = abs(yax - np.conj(xay))
            if not gap <= SYMMETRY_RTOL * scale:
                raise ValueError(
                    "%s needs a symmetric %s (check=True): |y^T %s x - x^T %s y| = %.3e "
                    "is %.3e of ||%s x|| ||y|| + ||%s y|| ||x|| for fixed vectors x, y; "
                    "use method='gmres', 'fgmres' or 'bicgstab' for a nonsymmetric %s"
                    % (self.method, "matrix A" if name == "A" else "preconditioner M",
                       name, name, gap, gap / scale if scale else math.inf, name, name,
                       "matrix" if name == "A" else "preconditioner"))

    def _apply_pc(self, r: DistVector, out: DistVector) -> DistVector:
        # M alone (no null-space projection), guarded as precondition() is
        y = self.guard(self._pc, r, out)
        if y is not None and y is not out:
            out.set(y)
        return out

    def project(self, v: DistVector) -> None:
        """Remove the null-space components of ``v`` in place.

        Collective: one reduction of ``k`` numbers. No-op without a null space.
        """
        Q = self._Q
        if Q is None:
            return
        k = Q.shape[0]
        self.put_rows(0, Q, v.local)
        self.reduce(k)
        self._c[:] = self._recv[:k]
        self.gemv_sub(Q, self._c, v.local)

    # -- vectors and buffers ---------------------------------------------------------
    def vector(self) -> DistVector:
        """A zero work vector on the solve's layout. Not collective."""
        return DistVector(self.layout, np.zeros(self.layout.local_size, dtype=self.dtype))

    def buffer(self, size: int) -> np.ndarray:
        """A zero reduction buffer of the working field (for :meth:`ireduce`).
        Not collective."""
        return np.zeros(size, dtype=self.dtype)

    def reserve(self, slots: int) -> None:
        """Make the reduction buffers hold ``slots`` numbers. Not collective."""
        if self._send.size < slots + 1:
            self._send = self.buffer(slots + 1)
            self._recv = self.buffer(slots + 1)

    @property
    def send(self) -> np.ndarray:
        """The buffer whose first ``k`` entries :meth:`reduce` sums (no communication)."""
        return self._send

    # -- local inner products into reduction slots ----------------------------------------
    def put(self, i: int, a: np.ndarray, b: np.ndarray, send: np.ndarray | None = None) -> None:
        """This rank's part of ``a^H b`` into slot ``i`` of ``send`` (default
        :attr:`send`), for the next :meth:`reduce` (:meth:`ireduce`). In
        reproducible mode the part is an exact accumulator
        (:mod:`dmsolve._reprosum`) kept beside the buffer. Not collective."""
        send = self._send if send is None else send
        if not self.repro:
            send[i] = self.dot(a, b)
            return
        acc = self._acc(send)[i]
        acc.fill(0)
        self._dot_into(a, b, acc)

    def put_rows(self, i: int, V: np.ndarray, w: np.ndarray,
                 send: np.ndarray | None = None) -> None:
        """The parts of ``V[j]^H w`` into slots ``i + j`` (see :meth:`put`).
        Not collective."""
        send = self._send if send is None else send
        k = V.shape[0]
        if not self.repro:
            gemv_dot(V, w, send[i:i + k])
            return
        acc = self._acc(send)[i:i + k]
        acc.fill(0)
        self._dots_into(V, w, acc)

    def gemv_sub(self, V: np.ndarray, h: np.ndarray, w: np.ndarray, alpha=-1.0) -> None:
        """``w += alpha * V.T @ h`` (:func:`gemv_sub`); in reproducible mode one
        ``axpy`` per row in row order, so that an entry's value does not depend
        on where BLAS's blocking puts it. Not collective."""
        if not self.repro:
            gemv_sub(V, h, w, alpha)
            return
        for j in range(V.shape[0]):
            self.axpy(alpha * h[j], V[j], w)

    def _acc(self, send: np.ndarray) -> np.ndarray:
        acc = self._accs.get(id(send))
        if acc is None or acc.shape[0] < send.size:
            from .._reprosum import accumulators
            acc = self._accs[id(send)] = accumulators(send.size)
        return acc

    def _exact_start(self, k: int, send: np.ndarray, recv: np.ndarray):
        # the accumulators of send[:k] and the error flag, summed as int64
        from .._reprosum import normalize
        acc, racc = self._acc(send), self._acc(recv)
        normalize(acc[:k])
        acc[k].fill(0)
        acc[k, 0] = 0 if self.error is None else 1
        n = (k + 1) * acc.shape[1]
        return self.comm.Iallreduce([acc, n, MPI.INT64_T], [racc, n, MPI.INT64_T],
                                    op=MPI.SUM)

    def _exact_finish(self, k: int, recv: np.ndarray) -> None:
        from .._reprosum import to_float
        racc = self._acc(recv)
        for j in range(k):
            recv[j] = to_float(racc[j])
        recv[k] = float(racc[k, 0])

    # -- reductions --------------------------------------------------------------------
    def reduce(self, k: int) -> np.ndarray:
        """Sum ``send[:k]`` over all ranks, plus the error flag; return the
        receive buffer (read ``[:k]``). Collective; raises on every rank if
        any rank holds a user-code error.

        A non-blocking ``Iallreduce``: waited for on a healthy rank, polled
        for :data:`dmsolve._errors.AGREE_GRACE` seconds on a rank holding an
        error, which raises its error alone if the others do not arrive.
        """
        calls, mark = self._calls, self._nbarriers
        if self.repro:
            req = self._exact_start(k, self._send, self._recv)
        else:
            self._send[k] = 0.0 if self.error is None else 1.0
            req = self.comm.Iallreduce([self._send, k + 1, self._mpitype],
                                       [self._recv, k + 1, self._mpitype], op=MPI.SUM)
        self.reductions += 1
        self._complete(req, calls, mark)
        if self.repro:
            self._exact_finish(k, self._recv)
        if self._recv[k]:
            self._raise()
        return self._recv

    def ireduce(self, k: int, send: np.ndarray, recv: np.ndarray):
        """Start a non-blocking sum of ``send[:k]`` (plus the error flag) into
        ``recv``; finish it with :meth:`wait`. Collective."""
        self.reductions += 1
        if self.repro:
            req = self._exact_start(k, send, recv)
        else:
            send[k] = 0.0 if self.error is None else 1.0
            req = self.comm.Iallreduce([send, k + 1, self._mpitype],
                                       [recv, k + 1, self._mpitype], op=MPI.SUM)
        self._inflight[id(req)] = (self._calls, self._nbarriers)
        return req

    def wait(self, request, k: int, recv: np.ndarray) -> np.ndarray:
        """Complete :meth:`ireduce`; raise everywhere on a user-code error.

        Collective (completes the collective :meth:`ireduce` started)."""
        calls, mark = self._inflight.pop(id(request))
        self._complete(request, calls, mark)
        if self.repro:
            self._exact_finish(k, recv)
        if recv[k]:
            self._raise()
        return recv

    def check_errors(self) -> None:
        """Raise on every rank if any rank holds a user-code error.

        Collective: one reduction of the error flag. For a step that must
        not run on a state that failed user code left behind (a checkpoint
        write) or that communicates in a blocking way.
        """
        self.reduce(0)

    def _complete(self, req, calls: int, mark: int) -> None:
        # the request of a reduction started after `calls` user calls and
        # `mark` barriers
        if self.error is None:
            req.Wait()
        else:
            complete(req, self.error, _errors.AGREE_GRACE)
        # every rank started this reduction: every rank finished the user
        # calls and posted the barriers that came before it
        if calls > self._synced:
            self._synced = calls
        if self._barriers:
            self._drain(mark)

    def _drain(self, mark: int | None = None) -> None:
        """Complete the barriers posted before the ``mark``-th (all: None)."""
        done = [req for serial, req in self._barriers if mark is None or serial < mark]
        if done:
            MPI.Request.Waitall(done)
            del self._barriers[:len(done)]

    def _rendezvous(self) -> None:
        """A non-blocking barrier before a user call that follows an
        unsynchronised one (see the class notes). Collective."""
        req = self.comm.Ibarrier()
        self._synced = self._calls
        if self.error is None:
            self._barriers.append((self._nbarriers, req))
        else:
            # the others finished the user call this rank failed in, or
            # they wait in it for good: then raise alone
            complete(req, self.error, _errors.AGREE_GRACE)
        self._nbarriers += 1

    def _enter(self) -> None:
        """Book a user call about to be made. Collective when it posts a barrier."""
        if self._calls > self._synced:
            self._rendezvous()
        self._calls += 1

    def _raise(self):
        self.reductions += 1
        try:
            agree(self.comm, self.error)
        finally:
            # every rank reached this agreement, after posting every barrier
            self._drain()
        # agree() raised unless the flag lied; never continue silently
        raise RuntimeError("a rank reported an error it did not hold")  # pragma: no cover

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

    # -- user code, guarded --------------------------------------------------------
    def guard(self, func, *args):
        """Call user code; remember its exception for the next reduction.

        Collective exactly when ``func`` is, or when it follows other user
        code with no reduction in between (then a non-blocking barrier comes
        first; see the class notes)."""
        self._enter()
        try:
            return func(*args)
        except Exception as e:  # noqa: BLE001 - re-raised on every rank by agree()
            if self.error is None:
                self.error = e
            return None

    def matvec(self, x: DistVector, out: DistVector) -> DistVector:
        """``out = A x``. Collective if ``A.matvec`` is (see :meth:`guard`)."""
        self._enter()
        try:
            y = self.A.matvec(x, out=out)
            if y is not out:
                out.set(y)
        except Exception as e:  # noqa: BLE001
            if self.error is None:
                self.error = e
        return out

    def precondition(self, r: DistVector, out: DistVector) -> DistVector:
        """``out = P M r`` (``P`` the null-space projector). Collective."""
        if self._pc is None:
            np.copyto(out.local, r.local)
        else:
            self._enter()
            try:
                y = self._pc(r, out)
                if y is not out:
                    out.set(y)
            except Exception as e:  # noqa: BLE001
                if self.error is None:
                    self.error = e
        self.project(out)
        return out

    def callback(self, x: DistVector) -> None:
        """Call the user's callback with the current iterate, guarded.

        Collective exactly when the callback is (see :meth:`guard`)."""
        if self._callback is not None:
            self.callbacks += 1
            self.guard(self._callback, x)

    @property
    def has_callback(self) -> bool:
        """Whether the user gave a callback (no communication)."""
        return self._callback is not None

    # -- stopping test -----------------------------------------------------------------
    def begin(self) -> None:
        """Mark the start of the iterations (for the timings). Not collective."""
        self._begin = self._watch.split()

    def reference_norm(self, work: DistVector) -> None:
        """Compute ``||b||`` in the method's norm (``||P M b||`` or
        ``sqrt(b^T P M b)``) using ``work``. Collective; no-op when known."""
        if self.bnorm is not None:
            return
        self.precondition(self.b, work)
        other = work if self.norm_type == "preconditioned" else self.b
        self.put(0, work.local, other.local)
        self.bnorm = math.sqrt(abs(self.reduce(1)[0].real))

    def tolerance(self) -> float:
        """``max(rtol*||b||, atol)``, the right side of the stopping test. Not collective."""
        return max(self.rtol * self.bnorm, self.atol)

    def test(self, it: int, rnorm: float) -> ConvergedReason | None:
        """Record ``rnorm`` for iteration ``it`` and return why to stop, or None.

        ``||r|| <= max(rtol*||b||, atol)`` converges; a NaN or infinite norm,
        ``||r|| >= divtol*||r0||`` and ``it >= maxiter`` stop with failure.
        Not collective (``rnorm`` is the same on every rank).
        """
        self.norms.append(rnorm)
        if self.monitor is not None:
            self.guard(self.monitor, it, rnorm)
        if not math.isfinite(rnorm):
            return ConvergedReason.NANORINF
        if rnorm <= max(self.rtol * self.bnorm, self.atol):
            return ConvergedReason.RTOL if self.rtol * self.bnorm >= self.atol \
                else ConvergedReason.ATOL
        if self.rnorm0 is None:
            self.rnorm0 = rnorm
        elif self.divtol is not None and rnorm >= self.divtol * self.rnorm0:
            return ConvergedReason.DIVTOL
        if it >= self.maxiter:
            return ConvergedReason.MAXITER
        return None

    def converged_reason(self) -> ConvergedReason:
        """Which converged reason applies to an early exit at a tiny residual.

        Not collective."""
        return ConvergedReason.RTOL if self.rtol * self.bnorm >= self.atol \
            else ConvergedReason.ATOL

    # -- the truth at claimed convergence ---------------------------------------------
    def true_residual(self, r: DistVector, work: DistVector) -> float:
        """``r = b - (A - shift I) x`` from ``x`` (never from a recurrence), and
        return ``||r||_2``, remembered for ``info.true_residual_norm``.

        Collective: one matvec and one reduction.
        """
        self.matvec(self.x, work)
        if self.shift:
            self.axpy(-self.shift, self.x.local, work.local)
        np.subtract(self.b.local, work.local, out=r.local)
        self.put(0, r.local, r.local)
        t = math.sqrt(self.reduce(1)[0].real)
        self._truth = (len(self.norms), t)
        return t

    def truth_tolerance(self) -> float:
        """What ``||b - A x||_2`` must meet at a claimed convergence:
        ``max(rtol*||b||_2, atol)``, times :data:`TRUTH_SLACK` when the method
        tests a preconditioned or natural norm. Not collective."""
        tol = max(self.rtol * self.b2norm, self.atol)
        return tol if self.norm_type == "unpreconditioned" else TRUTH_SLACK * tol

    def confirm(self, reason, it: int, r: DistVector, work: DistVector | None, *,
                tnorm: float | None = None, can_restart: bool = True):
        """Check a claimed convergence against the true residual.

        ``reason`` is what the method's own test returned at iteration ``it``
        (None or a failure pass through untouched). A converged reason is
        kept when ``||b - A x||_2 <= truth_tolerance()``. Otherwise the method
        should restart from ``x``: None is returned and ``r`` holds the fresh
        residual ``b - A x``, at most :data:`TRUTH_RESTARTS` times and while
        ``it < maxiter``; after that ``FALSE_CONVERGENCE``. ``tnorm``: the
        method already holds ``r = b - A x`` and its norm (GMRES at a restart);
        ``can_restart=False``: ``r`` is already a fresh residual, so a restart
        would change nothing and a failure is ``FALSE_CONVERGENCE`` at once.

        Collective (one matvec and one reduction, none with ``tnorm``) when
        ``reason`` claims convergence, else not collective.
        """
        if reason is None or not reason.converged:
            return reason
        if tnorm is None:
            t = self.true_residual(r, work)
        else:
            t = float(tnorm)
            self._truth = (len(self.norms), t)
        if t <= self.truth_tolerance():
            return reason
        if not math.isfinite(t):
            return ConvergedReason.NANORINF
        if can_restart and self.truth_restarts < TRUTH_RESTARTS and it < self.maxiter:
            self.truth_restarts += 1
            self._restarted_at = len(self.norms)
            return None
        return ConvergedReason.FALSE_CONVERGENCE

    def retest(self, rnorm: float) -> ConvergedReason | None:
        """Test the method's norm of a fresh residual computed from ``x``
        without a new iteration (after a restart): not recorded in
        ``residual_norms`` (the iteration's norm already is) nor monitored.

        Right after :meth:`confirm` asked for a restart, meeting the test again
        means the method's norm cannot see the residual that the true norm
        sees (e.g. a singular preconditioner): ``FALSE_CONVERGENCE``. After
        another restart (pipelined CG's residual replacement) it is a
        converged reason, to be confirmed. Not collective.
        """
        if not math.isfinite(rnorm):
            return ConvergedReason.NANORINF
        if rnorm <= self.tolerance():
            if self._restarted_at == len(self.norms):
                return ConvergedReason.FALSE_CONVERGENCE
            return self.converged_reason()
        return None

    def _final_truth(self, reason) -> float:
        # ||b - A x|| of the returned x: the one confirm() measured when x has
        # not changed since (no iteration recorded since), else measured now
        if self._truth is not None and self._truth[0] == len(self.norms):
            return self._truth[1]
        if reason is ConvergedReason.NANORINF:
            return float("nan")     # x may hold NaN; the residual says nothing more
        if self._truth_work is None:
            self._truth_work = (self.vector(), self.vector())
        return self.true_residual(*self._truth_work)

    # -- the end -------------------------------------------------------------------------
    def zero_rhs(self):
        """``b = 0``: return ``x = 0`` after 0 iterations (as scipy does).

        Collective (through :meth:`finish`)."""
        self.x.fill(0.0)
        self.bnorm = 0.0 if self.bnorm is None else self.bnorm
        self.begin()
        self.norms.append(0.0)
        if self.monitor is not None:
            self.guard(self.monitor, 0, 0.0)
        self._truth = (len(self.norms), 0.0)      # b - A 0 = 0 exactly
        return self.finish(ConvergedReason.ATOL, 0)

    def finish(self, reason: ConvergedReason, iterations: int, **extra):
        """Measure the true residual unless :meth:`confirm` just did, agree on
        late errors, build the :class:`SolveInfo`, report it.

        Collective (one reduction, plus one matvec and one reduction for the
        true residual when it is not known). Returns ``(x, info)``.
        """
        true_rnorm = self._final_truth(reason)
        extra = {**self.extra, "truth_restarts": self.truth_restarts, **extra}
        # numba's compilation (first calls of jitted user code or kernels) is
        # not work of the solve: reported apart, left out of both timings
        work, compiling = self._watch.split()
        setup = self.setup_seconds if self._begin is None else self._begin[0]
        extra.setdefault("compile_seconds", compiling)
        info = SolveInfo(
            converged=reason.converged, reason=reason, iterations=int(iterations),
            residual_norms=np.array(self.norms, dtype=float), norm_type=self.norm_type,
            method=self.method, rtol=self.rtol, atol=self.atol,
            bnorm=float(self.bnorm) if self.bnorm is not None else float("nan"),
            setup_seconds=setup, solve_seconds=work - setup,
            reductions=self.reductions + 1, extra=extra,
            true_residual_norm=float(true_rnorm))
        if self.checkpoint is not None:
            info.extra["checkpoint"] = self.checkpoint.report()
        if self.monitor is not None and hasattr(self.monitor, "finish"):
            self.guard(self.monitor.finish, info)
        self.reduce(0)                  # the final agreement (counted above)
        if self.raise_on_failure:
            info.check()
        return self.x, info


COMMON_PARAMETERS = """\
    A : distributed operator
        ``DistCSR``, :class:`~dmsolve.DistLinearOperator` or anything with
        ``row_layout == col_layout`` and ``matvec(x, out=None)``.
    b : DistVector
        Right-hand side on ``A.row_layout``; finite. A complex ``A``, ``b``
        or ``x0`` makes the solve complex (see Notes).
    x0 : DistVector, optional
        Initial guess on ``A.col_layout`` (zeros by default). Never modified.
    rtol, atol : float, keyword-only
        Stopping test ``||r|| <= max(rtol*||b||, atol)`` with ``||.||`` the
        norm named by ``info.norm_type``; a convergence it claims is then
        confirmed with the true residual (see Notes). Defaults ``1e-5`` and
        ``0``.
    maxiter : int, optional
        Maximum number of iterations (default ``10 * N``).
    M : preconditioner, optional
        An approximation of ``A^{-1}``: an object with ``apply(r, out=None)``,
        an operator with ``matvec(x, out=None)``, or a callable ``M(r)``,
        each returning a DistVector.
    callback : callable, optional
        ``callback(xk)`` after every iteration with the current iterate
        (a work vector: copy it to keep it). Called ``info.iterations`` times.
    nullspace : DistVector or sequence of DistVector, optional
        A basis of the null space of ``A`` for singular consistent systems
        (e.g. the constant vector for a Neumann or graph Laplacian). It is
        orthonormalised once and tested, as PETSc's ``MatNullSpaceTest``:
        a vector ``q`` with ``||A q|| > NULLSPACE_RTOL * ||A v|| / ||v||``
        (``v`` a fixed vector of the global index; ``k + 1`` products at
        set-up) is refused with ValueError. It is removed from every
        preconditioned vector (as PETSc's ``MatNullSpaceRemove``), so the
        iterates stay in the complement of the null space. Each removal is
        one reduction. The methods that remove it from ``b`` report the
        removed part ``||b - P b|| / ||b||`` in
        ``info.extra["nullspace_removed"]``.
    monitor : KSPMonitor, True, int or callable, optional
        ``monitor(iteration, rnorm)`` at every iteration (``True`` for a
        :class:`KSPMonitor` printing on rank 0; an int ``k >= 1`` for one
        printing iterations ``0, k, 2k, ...`` and the last). Off by default.
    raise_on_failure : bool, optional
        Raise :class:`ConvergenceError` instead of returning when the solve
        does not converge.
    divtol : float or None, optional
        Stop with ``DIVTOL`` when ``||r|| >= divtol * ||r0||`` (default
        ``1e4`` as PETSc; None disables the test).
    checkpoint : dmsolve.checkpoint.Checkpointer, optional
        Write checkpoints and/or resume from one (see docs/checkpoint.md;
        :func:`dmsolve.solve` builds it from ``checkpoint=``,
        ``checkpoint_every=`` and ``resume=``). Off by default.
    reproducible : bool, optional
        True: the returned ``x``, the iteration count, the reason and the
        residual history are the same bits at any number of ranks and for
        any row partition (docs/reproducible.md). Every reduction is exact
        (an int64 superaccumulator, rounded once: still one ``Allreduce``),
        ``A``'s rows are summed in the order of their columns' canonical
        keys (:attr:`DistCSR.origin`, else the global ids), and vector
        updates avoid BLAS. ``A`` must be a float64 DistCSR and ``M`` none or
        a preconditioner built with ``reproducible=True`` (jacobi, cheby,
        amg); others raise ValueError, a complex system TypeError. Off by
        default."""

COMMON_RETURNS = """\
    x : DistVector
        The approximate solution on ``A.col_layout`` (a new vector).
    info : SolveInfo
        Convergence report, the same on every rank: ``converged``, ``reason``,
        ``iterations``, ``residual_norms``, ``norm_type``,
        ``true_residual_norm`` (``||b - A x||_2`` of the returned ``x``),
        timings and the number of global ``reductions``."""

COMMON_RAISES = """\
    TypeError
        A positional tolerance, or an argument of the wrong type.
    ValueError
        ``b`` or ``x0`` on the wrong layout or communicator, non-finite
        entries (agreed across ranks), bad tolerances, a preconditioner
        that is not reproducible with ``reproducible=True``.
    ConvergenceError
        With ``raise_on_failure=True``, if the solve did not converge.
    Exception
        An exception raised by ``A``, ``M``, ``callback`` or ``monitor`` on
        any rank is raised on every rank at the next reduction: the same
        type (sent pickled), its message followed by the failing ranks;
        :class:`~dmsolve.CollectiveError` if it cannot be pickled. If the
        other ranks never get there (they wait in a communication the
        failing rank skipped), the failing rank raises its own exception
        alone after :data:`dmsolve._errors.AGREE_GRACE` seconds."""

COMMON_NOTES = """\
    Collective on ``A.comm``. Errors in user code on one rank only are
    folded into the next reduction as an extra slot of its buffer, and all
    ranks then raise through :func:`dmsolve.agree`. Every reduction is a
    non-blocking ``Iallreduce``; a rank that holds an error polls it for
    ``AGREE_GRACE`` seconds (3) and, if the other ranks do not arrive
    because they wait in a communication of the operator, preconditioner or
    callback that the failing rank did not make, raises its exception alone,
    with a note saying so: under ``python -m mpi4py`` that aborts the job.
    Such a rank makes no further user call before the others have finished
    the one it failed in (a non-blocking barrier precedes a user call that
    follows another with no reduction in between). User code that itself
    uses non-blocking collectives on ``A.comm`` should use a duplicate of
    it, which theirs cannot pair up with.
    ``b = 0`` returns ``x = 0`` after 0 iterations; an ``x0`` that already
    satisfies the test returns after 0 iterations. A NaN or infinite
    residual norm stops with ``NANORINF``.

    At a claimed convergence (in the method's norm: unpreconditioned,
    preconditioned, natural, or a recurrence or Arnoldi estimate of one) the
    true residual ``r = b - A x`` is computed once from ``x`` (one product
    and one reduction). In the unpreconditioned norm it must meet the test
    itself; in a preconditioned or natural norm, a different norm, it must
    meet ``||r||_2 <= TRUTH_SLACK * max(rtol*||b||_2, atol)``. If it does
    not, the method restarts from ``x`` (fresh residual, fresh recurrence;
    the iteration count and ``residual_norms`` go on), at most
    ``TRUTH_RESTARTS`` times within ``maxiter``, and then stops with
    ``FALSE_CONVERGENCE`` (not converged), as it does at once when the
    fresh residual meets the method's test without the true one doing so
    (typically a singular or inconsistent preconditioner).
    ``info.true_residual_norm`` is ``||r||_2`` of the returned ``x``,
    measured at every exit but ``NANORINF`` (one product and one reduction
    at the end of a solve that did not claim convergence).
    ``info.setup_seconds`` and ``info.solve_seconds`` leave out numba's
    compilation (a first run's), which ``info.extra["compile_seconds"]``
    reports.

    Complex systems: when ``A`` (its ``dtype``), ``b`` or ``x0`` is complex,
    the solve runs in complex128, with inner products ``a^H b`` (``np.vdot``)
    and complex reductions; CG, pipelined CG and MINRES then need a
    Hermitian ``A`` and ``M`` (``check=True`` tests ``y^H A x = conj(x^H A
    y)``), GMRES, FGMRES and BiCGStab take any complex ``A``. jacobi,
    bjacobi and asm (and user preconditioners) apply; a preconditioner with
    ``supports_complex = False`` (amg, cheby, gemslr) and ``checkpoint=``
    are refused with TypeError at the door."""


# The Returns, Raises and Notes sections every method shares; the method's own
# notes follow COMMON_SECTIONS in its docstring.
COMMON_SECTIONS = """\
    Returns
    -------
%s

    Raises
    ------
%s

    Notes
    -----
%s""" % (COMMON_RETURNS, COMMON_RAISES, COMMON_NOTES)


def document(func):
    """Fill the shared numpydoc sections into ``func.__doc__``: the line
    ``COMMON_PARAMETERS`` in Parameters, and ``COMMON_SECTIONS`` (Returns,
    Raises and the first paragraph of Notes). Not collective."""
    if func.__doc__ is None:          # python -OO strips docstrings
        return func
    func.__doc__ = (func.__doc__
                    .replace("    COMMON_PARAMETERS", COMMON_PARAMETERS)
                    .replace("    COMMON_SECTIONS", COMMON_SECTIONS))
    return func
