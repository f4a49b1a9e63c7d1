"""The checks at the door of a Krylov solve, shared by dmsolve's own methods
and by the PETSc backend, so that both refuse the same inputs in the same words."""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .._layout import Layout
from .._operator import aslinearoperator
from .._vector import DistVector
from ..validate import check_int, check_real
from ._monitor import KSPMonitor

__all__ = ["CheckedSystem", "check_system"]


@dataclass(frozen=True)
class CheckedSystem:
    """The inputs of one Krylov solve after :func:`check_system`.

    Attributes
    ----------
    A : distributed operator
        ``A`` through :func:`~dmsolve.aslinearoperator` (a ``DistCSR`` is
        itself), square with equal row and column layouts.
    rtol, atol : float
        Finite and non-negative.
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


def check_system(method: str, A, b, x0=None, *, rtol, atol, maxiter, divtol,
                 callback=None, monitor=None, nullspace=None) -> CheckedSystem:
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

    Returns
    -------
    CheckedSystem

    Raises
    ------
    TypeError
        ``A`` is not a distributed operator, a vector is not a DistVector or
        neither real nor complex, a tolerance is not a real number, ``maxiter`` not an
        integer, ``callback`` not callable, ``monitor`` neither a bool, an
        int nor callable.
    ValueError
        ``A`` not square with equal layouts, a vector on another layout or
        communicator, a negative or non-finite tolerance, a negative
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
    rtol = check_real("rtol", rtol, low=0.0)
    atol = check_real("atol", atol, low=0.0)
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
