"""One door for input checks: typed option checks with one wording, and
:func:`agreed`, which runs a block of checks on every rank and raises the
same exception on all of them if any rank failed.

Every entry point of dmsolve, preconditioners and topology validates through
these, as scipy's solvers do through ``make_system``::

    with agreed(A.comm):
        theta = check_real("theta", theta, low=0.0, high=1.0)
        max_levels = check_int("max_levels", max_levels, low=1)
"""

from __future__ import annotations

import math
import numbers
from contextlib import contextmanager

import numpy as np

from ._errors import agree
from ._registry import Registry

__all__ = ["check_int", "check_real", "check_bool", "check_choice", "agreed"]


def _interval(low, high, low_open: bool, high_open: bool) -> str:
    return "%s%s, %s%s" % ("(" if low_open or low is None else "[",
                           "-inf" if low is None else "%g" % low,
                           "inf" if high is None else "%g" % high,
                           ")" if high_open or high is None else "]")


def check_int(name: str, value, *, low: int | None = None, high: int | None = None,
              allow_none: bool = False) -> int | None:
    """``value`` as an ``int`` in ``[low, high]``. Not collective.

    Raises
    ------
    TypeError
        If ``value`` is not an integer (``bool`` is not one), or is None and
        ``allow_none`` is false.
    ValueError
        If it lies outside ``[low, high]``.
    """
    if value is None and allow_none:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        what = {0: "a non-negative integer", 1: "a positive integer"}.get(
            low if high is None else None, "an integer")
        raise TypeError("%s must be %s%s, got %s" % (name, what, " or None" if allow_none else "",
                                                     type(value).__name__))
    value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        if high is None and low in (0, 1):
            what = "a non-negative integer" if low == 0 else "a positive integer"
        elif high is None:
            what = "an integer >= %d" % low
        elif low is None:
            what = "an integer <= %d" % high
        else:
            what = "an integer in [%d, %d]" % (low, high)
        raise ValueError("%s must be %s, got %d" % (name, what, value))
    return value


def check_real(name: str, value, *, low: float | None = None, high: float | None = None,
               low_open: bool = False, high_open: bool = False,
               allow_none: bool = False) -> float | None:
    """``value`` as a finite ``float`` in the interval from ``low`` to ``high``.

    The ends are closed unless ``low_open``/``high_open``; NaN and infinities
    are always refused. Not collective.

    Raises
    ------
    TypeError
        If ``value`` is not a real number (``bool`` is not one).
    ValueError
        If it is not finite or lies outside the interval.
    """
    if value is None and allow_none:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError("%s must be a real number%s, got %s"
                        % (name, " or None" if allow_none else "", type(value).__name__))
    value = float(value)
    bad = not math.isfinite(value)
    if low is not None:
        bad |= value < low or (low_open and value == low)
    if high is not None:
        bad |= value > high or (high_open and value == high)
    if bad:
        if high is None and low == 0:
            what = "a positive real number" if low_open else "a non-negative real number"
        elif low is None and high is None:
            what = "a finite real number"
        else:
            what = "a real number in %s" % _interval(low, high, low_open, high_open)
        raise ValueError("%s must be %s, got %r" % (name, what, value))
    return value


def check_bool(name: str, value) -> bool:
    """``value`` as a ``bool`` (``True``/``False`` or numpy's). Not collective.

    Raises
    ------
    TypeError
        If ``value`` is anything else (``0``/``1`` included).
    """
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError("%s must be True or False, got %r" % (name, value))
    return bool(value)


def check_choice(name: str, value, choices) -> str:
    """``value`` as one of ``choices`` (a :class:`Registry` or names).

    Names follow the registry's rule: case and ``_``/``-`` do not matter.
    Returns the canonical name. Not collective.

    Raises
    ------
    TypeError
        If ``value`` is not a string.
    ValueError
        If it is not one of the choices; the message lists them.
    """
    if isinstance(choices, Registry):
        return choices.canonical(value)
    if not isinstance(value, str):
        raise TypeError("%s must be a string, got %s" % (name, type(value).__name__))
    table = {Registry.normalize(c): c for c in choices}
    key = Registry.normalize(value)
    if key not in table:
        raise ValueError("unknown %s %r; available: %s"
                         % (name, value, ", ".join(sorted(table.values()))))
    return table[key]


@contextmanager
def agreed(comm):
    """Run a block of checks on every rank; raise the same error on all of them.

    A ``ValueError``, ``TypeError`` (or any other exception) raised inside
    the block on some ranks is caught, and :func:`dmsolve.agree` raises it
    on every rank, saying which ranks failed. Collective on ``comm``: every
    rank must enter the block, and the block itself must not communicate.

    Examples
    --------
    >>> from mpi4py import MPI
    >>> from dmsolve.validate import agreed, check_real
    >>> comm = MPI.COMM_WORLD
    >>> with agreed(comm):
    ...     omega = check_real("omega", 1.5, low=0.0, high=2.0, low_open=True)
    >>> omega
    1.5

    A value refused on one rank raises the same error on every rank:

    >>> with agreed(comm):
    ...     check_real("omega", 3.0 if comm.rank == 0 else 1.0, high=2.0)
    Traceback (most recent call last):
    ...
    ValueError: omega must be a real number in (-inf, 2], got 3.0...
    """
    exc = None
    try:
        yield
    except Exception as e:        # noqa: BLE001 - every kind is agreed, then re-raised
        exc = e
    agree(comm, exc)
