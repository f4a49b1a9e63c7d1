"""Preconditioners by name: ``make("jacobi", A, omega=0.8)`` or ``make(("amg", {...}), A)``.

Factories are registered with :func:`register`; options are keyword
arguments, so PyAMG-style ``(name, options)`` descriptors map onto ``make``.
"""

from __future__ import annotations

from typing import Callable

__all__ = ["register", "make", "available", "split_descriptor"]

_FACTORIES: dict[str, Callable] = {}


def register(name: str, factory: Callable | None = None):
    """Register ``factory(A, **options)`` under ``name``.

    Usable as a decorator (``@register("jacobi")``). Not collective; every
    rank must register the same names (module import does that).
    """
    if not isinstance(name, str) or not name:
        raise TypeError("preconditioner name must be a non-empty string")

    def add(f: Callable) -> Callable:
        if not callable(f):
            raise TypeError("factory for %r must be callable" % name)
        _FACTORIES[name.lower()] = f
        return f

    return add if factory is None else add(factory)


def available() -> list[str]:
    """Registered names, sorted. Not collective."""
    return sorted(_FACTORIES)


def split_descriptor(desc, what: str = "preconditioner") -> tuple[str, dict]:
    """``"name"`` or ``("name", {options})`` -> ``(name, options)``. Not collective."""
    if isinstance(desc, str):
        return desc, {}
    if isinstance(desc, (tuple, list)) and len(desc) == 2 and isinstance(desc[0], str):
        if not isinstance(desc[1], dict):
            raise TypeError("%s options must be a dict, as in ('jacobi', {'omega': 0.8}); "
                            "got %s" % (what, type(desc[1]).__name__))
        return desc[0], dict(desc[1])
    raise TypeError("%s must be a name or a (name, options) pair, got %r" % (what, desc))


def make(name, A, **options):
    """Build the preconditioner ``name`` for operator ``A``.

    Parameters
    ----------
    name : str or (str, dict)
        A registered name (see :func:`available`), or a ``(name, options)``
        descriptor; keyword ``options`` override the descriptor's.
    A : DistCSR
        The operator.

    Collective on ``A.comm`` (set-up communicates and agrees on errors).

    Raises
    ------
    ValueError
        If ``name`` is not registered (the same on every rank).
    TypeError
        If ``name`` is not a string or descriptor, or an option is not accepted.
    """
    name, opts = split_descriptor(name)
    opts.update(options)
    factory = _FACTORIES.get(name.lower())
    if factory is None:
        raise ValueError("unknown preconditioner %r; available: %s"
                         % (name, ", ".join(available())))
    return factory(A, **opts)
