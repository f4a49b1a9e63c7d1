"""The checks at the door of a Krylov solve, as scipy's ``make_system``: those
shared by dmsolve's own methods and the PETSc backend (:func:`check_system`,
so that both refuse the same inputs in the same words), then those of our
methods only (:func:`check_solve`)."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .. import _repro
from .._layout import Layout
from .._operator import _takes_out, aslinearoperator
from .._vector import DistVector
from ..checkpoint import Checkpointer
from ..validate import check_bool, check_int, check_real
from ._monitor import KSPMonitor

__all__ = ["CheckedSystem", "check_system", "CheckedSolve", "check_solve",
           "wrap_preconditioner"]


@dataclass(frozen=True)
class CheckedSystem:
    """The inputs of one Krylov solve after :func:`check_system`.

    Attributes
    ----------
    A : distributed operator
        ``A`` through :func:`~dmsolve.aslinearoperator` (a ``DistCSR`` is
        itself), square with equal row and column layouts.
    rtol, atol : float
        Non-negative; finite, or ``+inf`` with ``infinite_tolerances``.
    divtol : float or None
        Finite and non-negative, or None (no divergence test).
    maxiter : int
        Non-negative; ``10 * N`` when None was given.
    callback : callable or None
    monitor : callable or None
        ``True`` became a :class:`KSPMonitor`, an int ``k``
        ``KSPMonitor(every=k)``, ``False`` None.
    nullspace : list of DistVector or None
        The basis as a list, each vector on ``A.col_layout``.

    Notes
    -----
    Not collective: a plain record.
    """

    A: Any
    rtol: float
    atol: float
    divtol: float | None
    maxiter: int
    callback: Callable | None
    monitor: Callable | None
    nullspace: list[DistVector] | None


def _check_vector(method: str, name: str, v, layout: Layout) -> None:
    if not isinstance(v, DistVector):
        raise TypeError("%s must be a DistVector, got %s" % (name, type(v).__name__))
    if v.layout != layout:
        if not v.layout.same_comm(layout):
            raise ValueError("%s: %s lives on another communicator than A" % (method, name))
        raise ValueError("%s: %s has global size %d but A's layout has %d (or the "
                         "ownership ranges differ)" % (method, name, v.global_size,
                                                       layout.global_size))
    if v.dtype.kind not in "fiuc":
        raise TypeError("%s has dtype %s; the Krylov methods support real and complex "
                        "vectors" % (name, v.dtype))


def _check_monitor(monitor):
    if monitor is None or monitor is False:
        return None
    if monitor is True:             # a bool is not a count here
        return KSPMonitor()
    if isinstance(monitor, numbers.Integral) and not isinstance(monitor, np.bool_):
        return KSPMonitor(every=check_int("monitor", monitor, low=1))
    if not callable(monitor):
        raise TypeError("monitor must be None, True, an int k >= 1 (every k-th iteration), "
                        "a KSPMonitor or a callable monitor(iteration, rnorm), got %s"
                        % type(monitor).__name__)
    return monitor


def _check_tolerance(name: str, value, infinite: bool) -> float:
    """``rtol`` or ``atol`` as a non-negative float; ``+inf`` too when
    ``infinite`` (then the stopping test is met at once, as scipy's).
    ``atol=None`` and ``atol="legacy"``, which scipy once took and now
    refuses with ValueError, are refused alike. Not collective."""
    if name == "atol" and (value is None or (isinstance(value, str) and value == "legacy")):
        raise ValueError("atol must be a non-negative real number, got %r (scipy's former "
                         "atol=None and atol='legacy' are no longer taken; give a number)"
                         % (value,))
    if infinite and isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)) \
            and value == math.inf:
        return math.inf
    return check_real(name, value, low=0.0)


def check_system(method: str, A, b, x0=None, *, rtol, atol, maxiter, divtol,
                 callback=None, monitor=None, nullspace=None,
                 infinite_tolerances: bool = False) -> CheckedSystem:
    """Check the arguments every Krylov solve shares, as scipy's ``make_system``.

    The one door of :func:`dmsolve.krylov.cg` and its siblings and of
    ``solve(..., backend="petsc")``: the same input is refused by both with
    the same exception and message.

    Parameters
    ----------
    method : str
        The method's name, put before layout messages (``"cg: b has ..."``).
    A, b, x0, rtol, atol, maxiter, divtol, callback, monitor, nullspace
        As in :func:`dmsolve.krylov.cg`.
    infinite_tolerances : bool, optional
        Take ``rtol`` or ``atol`` equal to ``+inf`` (a stopping test met at
        once, as scipy's): dmsolve's own methods do; the PETSc backend,
        whose KSP takes finite tolerances only, does not.

    Returns
    -------
    CheckedSystem

    Raises
    ------
    TypeError
        ``A`` is not a distributed operator, a vector is not a DistVector or
        neither real nor complex, a tolerance is not a real number (but
        ``atol=None`` and ``"legacy"``: ValueError, as scipy), ``maxiter`` not an
        integer, ``callback`` not callable, ``monitor`` neither a bool, an
        int nor callable.
    ValueError
        ``A`` not square with equal layouts, a vector on another layout or
        communicator, ``atol`` None or ``"legacy"``, a negative or NaN
        tolerance, an infinite one (unless ``infinite_tolerances``), a negative
        ``maxiter``, an int ``monitor`` below 1, an empty null space, or
        NaN/infinite entries in ``b`` or ``x0``. The finiteness test is the
        only one whose answer can differ between ranks, and it comes last.

    Notes
    -----
    Not collective: it raises on the ranks where a check fails, so callers
    agree on the outcome (:func:`dmsolve.validate.agreed`) before anything
    communicates.
    """
    A = aslinearoperator(A)
    if A.row_layout != A.col_layout:
        raise ValueError("%s: A must be square with equal row and column layouts "
                         "(global shape %d x %d)" % (method, A.row_layout.global_size,
                                                    A.col_layout.global_size))
    _check_vector(method, "b", b, A.row_layout)
    if x0 is not None:
        _check_vector(method, "x0", x0, A.col_layout)
    rtol = _check_tolerance("rtol", rtol, infinite_tolerances)
    atol = _check_tolerance("atol", atol, infinite_tolerances)
    divtol = check_real("divtol", divtol, low=0.0, allow_none=True)
    maxiter = check_int("maxiter", maxiter, low=0, allow_none=True)
    if maxiter is None:
        maxiter = 10 * A.row_layout.global_size
    if callback is not None and not callable(callback):
        raise TypeError("callback must be callable or None")
    monitor = _check_monitor(monitor)
    vecs = None
    if nullspace is not None:
        vecs = [nullspace] if isinstance(nullspace, DistVector) else list(nullspace)
        if not vecs:
            raise ValueError("nullspace must hold at least one vector")
        for i, v in enumerate(vecs):
            _check_vector(method, "nullspace[%d]" % i, v, A.col_layout)
    for name, v in (("b", b), ("x0", x0)):
        if v is not None and not np.all(np.isfinite(v.local)):
            raise ValueError("%s has NaN or infinite entries" % name)
    return CheckedSystem(A, rtol, atol, divtol, maxiter, callback, monitor, vecs)


# -- the checks of dmsolve's own methods -------------------------------------------------

@dataclass(frozen=True)
class CheckedSolve:
    """The inputs of one of our Krylov methods after :func:`check_solve`.

    Attributes
    ----------
    system : CheckedSystem
    pc : callable or None
        ``pc(r, out)`` applying ``M`` (:func:`wrap_preconditioner`).
    norm_type : str
        The tested norm; ``"unpreconditioned"`` whenever there is no ``M``.
    dtype : numpy dtype
        The working field: complex128 when ``A``, ``b`` or ``x0`` is
        complex, else float64.

    Notes
    -----
    Not collective: a plain record.
    """

    system: CheckedSystem
    pc: Callable | None
    norm_type: str
    dtype: np.dtype


def check_solve(method: str, A, b, x0, M, *, rtol, atol, maxiter, divtol, callback,
                monitor, nullspace, norm_type: str, norm_types, symmetric: bool,
                check_symmetry, checkpoint, reproducible) -> CheckedSolve:
    """Check the arguments of one of our Krylov methods: :func:`check_system`,
    then ``M``, ``norm_type``, ``check``, ``checkpoint``, ``reproducible``
    and what a complex system cannot take.

    ``norm_types`` are the norms the method can test; ``symmetric``: the
    method needs a symmetric preconditioner (CG, pipelined CG, MINRES).

    Raises
    ------
    TypeError, ValueError
        As :func:`check_system`, or for a bad ``M``, ``norm_type``,
        ``checkpoint``, a nonsymmetric ``M`` where a symmetric one is needed,
        a complex system with what supports real ones only, inputs
        ``reproducible=True`` cannot take.

    Notes
    -----
    Not collective: raises on the ranks where a check fails (only the
    finiteness test of :func:`check_system` can differ between ranks), so the
    caller agrees on the outcome before anything communicates.
    """
    pc = wrap_preconditioner(M)
    if norm_type not in norm_types:
        raise ValueError("%s: norm_type must be one of %s, got %r"
                         % (method, ", ".join(norm_types), norm_type))
    if pc is None and norm_type in ("preconditioned", "natural"):
        norm_type = "unpreconditioned"   # all three coincide without M
    # the same door as solve(..., backend="petsc"); its last check is the
    # only rank-dependent one (finiteness)
    s = check_system(method, A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, divtol=divtol,
                     callback=callback, monitor=monitor, nullspace=nullspace,
                     infinite_tolerances=True)
    check_bool("check", check_symmetry)
    if symmetric:
        _check_symmetric_pc(method, M)
    if checkpoint is not None and not isinstance(checkpoint, Checkpointer):
        raise TypeError("checkpoint must be a dmsolve.checkpoint.Checkpointer or "
                        "None, got %s (solve() takes a path)" % type(checkpoint).__name__)
    # one working precision: float64, or complex128 for a complex A, b or x0
    # (reductions, Hessenberg matrices, BLAS calls too)
    dtype = _system_dtype(s.A, b, x0)
    if dtype.kind == "c":
        _check_complex(method, M, checkpoint)
    check_bool("reproducible", reproducible)
    if reproducible:
        _repro.check_inputs(method, s.A, M, dtype)
    return CheckedSolve(s, pc, norm_type, dtype)


def wrap_preconditioner(M):
    """Return ``f(r, out)`` applying ``M``, or None for no preconditioner.
    Not collective.

    Raises
    ------
    TypeError
        ``M`` is a name, or has neither ``apply`` nor ``matvec`` and is not
        callable.
    """
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
