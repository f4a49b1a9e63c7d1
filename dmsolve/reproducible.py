"""Reproducible mode's public pieces: exact sums and canonical products.

``reproducible=True`` on :func:`dmsolve.solve`, the Krylov methods and
``preconditioners.make`` uses them (docs/reproducible.md). The exact sums
compile their numba kernels on first use (cached on disk).

- :func:`exact_sum`, :func:`exact_dot`: the correctly rounded sum of the
  entries (of the rounded products), as ``math.fsum``; not collective.
- :func:`exact_dots`: several global inner products, exactly rounded, in one
  ``Allreduce``; collective.
- :func:`canonical`: a :class:`CanonicalCSR`, the matrix whose products sum
  every row in canonical column order; :func:`keys_of`: a matrix's rows'
  canonical keys (``A.origin`` or the global ids).
- :data:`REPRODUCIBLE_PCS` and :func:`check_pc_name`: the preconditioners
  that have a reproducible mode.
"""

from __future__ import annotations

from . import _reprosum
from ._repro import (REPRODUCIBLE_PCS, CanonicalCSR, canonical, check_inputs, check_pc_name,
                     keys_of)

__all__ = ["exact_sum", "exact_dot", "exact_dots", "canonical", "CanonicalCSR", "keys_of",
           "check_inputs", "check_pc_name", "REPRODUCIBLE_PCS"]


def exact_sum(x) -> float:
    """The correctly rounded sum of the float64 entries of ``x`` (as
    ``math.fsum``), in any order; ``-0.0`` if every entry is ``-0.0``, as
    IEEE addition gives it, and ``0.0`` for no entries. Not collective."""
    return _reprosum.exact_sum(x)


def exact_dot(x, y) -> float:
    """The correctly rounded sum of the rounded products ``x[i] * y[i]``.
    Not collective."""
    return _reprosum.exact_dot(x, y)


def exact_dots(comm, pairs) -> list[float]:
    """``[sum over ranks of x^T y for (x, y) in pairs]``, each exactly
    rounded, the same at any number of ranks; one ``Allreduce``. Collective
    on ``comm``."""
    return _reprosum.exact_dots(comm, pairs)
