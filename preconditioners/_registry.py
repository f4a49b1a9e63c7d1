"""Preconditioners by name: ``make("jacobi", A, omega=0.8)``.

Factories are registered with :func:`register`; options are keyword
arguments, so ``("jacobi", {"omega": 0.8})`` pairs map onto ``make``.
"""

from __future__ import annotations

from typing import Callable

__all__ = ["register", "make", "available"]

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


def make(name: str, A, **options):
    """Build the preconditioner ``name`` for operator ``A``.

    Collective on ``A.comm`` when the factory is (set-up may communicate).

    Raises
    ------
    ValueError
        If ``name`` is not registered (the same on every rank).
    TypeError
        If ``name`` is not a string or an option is not accepted.
    """
    if not isinstance(name, str):
        raise TypeError("preconditioner name must be a string, got %s"
                        % type(name).__name__)
    factory = _FACTORIES.get(name.lower())
    if factory is None:
        raise ValueError("unknown preconditioner %r; available: %s"
                         % (name, ", ".join(available())))
    return factory(A, **options)
