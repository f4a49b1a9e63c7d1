"""What the gallery's problems share: argument checks agreed across ranks,
docstring fields, and counter-based random numbers (the same at any rank
count).
"""

from __future__ import annotations

import math

import numpy as np
from mpi4py import MPI

from ..validate import agreed, check_int, check_real


# -- argument checks: through dmsolve.validate, agreed across ranks ---------

def _checks(comm):
    """``agreed(comm)``, once ``comm`` is known to be a communicator."""
    # Not agreed: a rank without a communicator cannot take part anyway.
    if not isinstance(comm, MPI.Comm):
        raise TypeError("comm must be an mpi4py MPI.Comm, got %s" % type(comm).__name__)
    return agreed(comm)


#: The most rows a gallery matrix may have: global indices are int64, and a
#: row count near 2**63 would overflow in ``x + y*nx + z*nx*ny``.
MAX_ROWS = 2 ** 62


def _grid(n, ny, nz, dim: int) -> tuple[int, ...]:
    nx = check_int("n", n, low=1)
    ny = nx if ny is None else check_int("ny", ny, low=1)
    nz = nx if nz is None else check_int("nz", nz, low=1)
    grid = (nx, ny, nz)[:dim]
    # Python integers: np.prod would wrap around silently for n = 10**8 in 3D
    if math.prod(grid) > MAX_ROWS:
        raise ValueError("a %s grid has %.3g points, more than the 2**62 rows that "
                         "64-bit indices can number" % ("x".join(map(str, grid)),
                                                         math.prod(grid)))
    return grid


def _doc(func):
    """Put the shared parameter descriptions (:data:`_PARAMS`) into ``func``'s
    docstring, at its ``%(name)s`` fields, as scipy's ``doccer`` does."""
    if func.__doc__:              # None under python -OO
        func.__doc__ = func.__doc__ % _PARAMS
    return func


#: Descriptions that several generators' docstrings share, by field name.
_PARAMS = {
    "comm": "comm : MPI.Comm\n        Communicator; rows are distributed in contiguous blocks.",
    "n_x": "n : int\n        Grid points in x (the fastest index), positive.",
    "ny": "ny : int, optional\n        Grid points in y; default ``n``.",
    "ny_nz": "ny, nz : int, optional\n        Grid points in y and z; default ``n``.",
    "bad_size": "TypeError, ValueError\n        On every rank, if a size is not a positive integer.",
}


def _real_vector(name: str, value, length: int) -> np.ndarray:
    """``length`` finite reals, each checked by :func:`check_real`."""
    if np.ndim(value) != 1 or len(value) != length:
        raise ValueError("%s must have %d entries, got shape %s"
                         % (name, length, np.shape(value)))
    return np.array([check_real("%s[%d]" % (name, i), v) for i, v in enumerate(value)])


# -- counter-based random numbers (rank-count independent) --------------------

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    # splitmix64 finaliser: uint64 arithmetic wraps, which is what we want
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def _hash(seed: int, *keys: np.ndarray) -> np.ndarray:
    """A 64-bit hash of ``(seed, *keys)``, element-wise. Pure function."""
    h = _mix(np.full(np.broadcast(*keys).shape if keys else (), seed,
                     dtype=np.uint64) * _GOLDEN + _GOLDEN)
    for k in keys:
        h = _mix(h ^ (np.asarray(k).astype(np.uint64) + _GOLDEN + (h << np.uint64(6))))
    return h


def _uniform(seed: int, *keys: np.ndarray) -> np.ndarray:
    """Uniform floats in ``[0, 1)`` from :func:`_hash` (53 random bits)."""
    return (_hash(seed, *keys) >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
