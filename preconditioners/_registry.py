"""Preconditioners by name: ``make("jacobi", A, omega=0.8)`` or ``make(("amg", {...}), A)``.

The table itself is :data:`dmsolve.PRECONDITIONERS` (the lower layer owns
the registry, as PETSc's ``PCRegister`` does); this package fills it on
import, and :func:`make` builds from it.
"""

from __future__ import annotations

from typing import Callable

from dmsolve import PRECONDITIONERS, Registry
from dmsolve.reproducible import check_pc_name
from dmsolve.validate import check_bool

__all__ = ["register", "make", "available", "check_options"]


def register(name: str, factory: Callable | None = None, **kwargs):
    """Register ``factory(A, **options)`` under ``name`` in :data:`dmsolve.PRECONDITIONERS`.

    Usable as a decorator (``@register("jacobi")``); ``replace=True``
    overrides an existing name. Not collective; every rank must register the
    same names (module import does that).
    """
    if factory is None:
        return PRECONDITIONERS.register(name, **kwargs)
    return PRECONDITIONERS.register(name, factory, **kwargs)


def available() -> list[str]:
    """Registered names, sorted. Not collective."""
    return PRECONDITIONERS.names()


def make(name, A, **options):
    """Build the preconditioner ``name`` for operator ``A``.

    Parameters
    ----------
    name : str or (str, dict)
        A registered name (see :func:`available`), or a ``(name, options)``
        descriptor; keyword ``options`` override the descriptor's.
    A : DistCSR
        The operator.
    **options
        The preconditioner's options; ``reproducible=True`` (jacobi, cheby,
        amg) builds one whose application gives the same bits for any
        partition (see :func:`dmsolve.solve`); the others raise ValueError.

    Collective on ``A.comm`` (set-up communicates and agrees on errors).

    Raises
    ------
    ValueError
        If ``name`` is not registered (the same on every rank).
    TypeError
        If ``name`` is not a string or descriptor, or an option is not accepted.

    Examples
    --------
    Smoothed-aggregation AMG, by name and as a ``(name, options)`` descriptor,
    as the preconditioner of CG on the 2-D Poisson problem:

    >>> from mpi4py import MPI
    >>> import dmsolve
    >>> import preconditioners
    >>> A = dmsolve.gallery.poisson2d(40, MPI.COMM_WORLD)
    >>> b = dmsolve.DistVector.full(A.row_layout, 1.0)
    >>> M = preconditioners.make("amg", A)
    >>> x, info = dmsolve.cg(A, b, rtol=1e-8, M=M)
    >>> info.converged, info.iterations < 20
    (True, True)
    >>> M = preconditioners.make(("cheby", {"degree": 3}), A)
    >>> x, info = dmsolve.cg(A, b, rtol=1e-8, M=M)
    >>> info.converged
    True
    """
    canon, factory, opts = PRECONDITIONERS.resolve(name)
    opts.update(options)
    if "reproducible" in opts:
        # a rank-independent check: raised alike on every rank
        if check_bool("reproducible", opts.pop("reproducible")):
            check_pc_name(canon)    # bjacobi, asm, gemslr have no reproducible mode
            opts["reproducible"] = True
    return factory(A, **opts)


def check_options(registry: Registry, desc) -> tuple[str, dict]:
    """``name`` or ``(name, options)`` -> ``(canonical name, checked options)``
    for a registry of classes with a static ``check_options(**options) -> dict``
    (the smoothers, the local solvers): the door that checks a descriptor
    before anything is built, every default filled in. Not collective.

    Raises
    ------
    TypeError, ValueError
        For an unknown name, an unknown option or a bad option value.
    """
    name, cls, opts = registry.resolve(desc)
    try:
        return name, cls.check_options(**opts)
    except (TypeError, ValueError) as e:    # the message says whose option it is
        raise type(e)("%s %r: %s" % (registry.kind, name, e)) from None
