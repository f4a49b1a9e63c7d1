"""The files the command line reads and writes besides the matrix and the
right-hand side: the nodes' coordinates (``--coordinates``) and the solution
(``--output``)."""

from __future__ import annotations

import os

import numpy as np
import scipy.io

from . import gallery, io
from ._errors import agree

__all__ = ["read_coordinates", "load_coordinates", "write_solution"]


def read_coordinates(comm, path: str) -> np.ndarray:
    """The ``(nodes, d)`` coordinates in ``path``, on every rank. Collective
    on ``comm``: rank 0 reads and checks them, then broadcasts them (or its
    error, raised on every rank)."""
    X, exc = None, None
    if comm.Get_rank() == 0:
        try:
            X = load_coordinates(path)
        except (OSError, ValueError, TypeError) as e:
            # the base kind: a subclass (UnicodeDecodeError) may need other arguments
            kind = next(k for k in (OSError, TypeError, ValueError) if isinstance(e, k))
            exc = kind("--coordinates %r: %s" % (path, e))
    agree(comm, exc)
    return comm.bcast(X, root=0)


def load_coordinates(path: str) -> np.ndarray:
    """Read a coordinates file by its extension and check it. Not collective."""
    ext = os.path.splitext(path)[1].lower()
    if ext == ".npy":
        X = np.load(path, allow_pickle=False)
    elif ext == ".mtx":
        X = scipy.io.mmread(path)
        X = X.toarray() if hasattr(X, "toarray") else X
    else:
        X = np.loadtxt(path, ndmin=2)
    X = np.asarray(X)
    if X.dtype.kind not in "fiu":
        raise TypeError("coordinates must be real numbers, got dtype %s" % X.dtype)
    X = X.reshape(-1, 1) if X.ndim == 1 else X
    if X.ndim != 2 or X.shape[1] not in gallery.RIGID_BODY_MODES:
        raise ValueError("need one row per node and 1, 2 or 3 columns, got shape %s"
                         % (X.shape,))
    if not np.all(np.isfinite(X)):
        raise ValueError("the coordinates are not all finite")
    return np.ascontiguousarray(X, dtype=np.float64)


def write_solution(comm, x, path: str) -> None:
    """Write ``x`` as the extension of ``path`` says, each rank writing its
    own entries: Matrix Market (:func:`dmsolve.io.write_vector`) or numpy's
    ``.npy`` (:func:`dmsolve.io.write_npy`). Collective on ``comm``."""
    if path.lower().endswith(".mtx"):
        io.write_vector(path, x)
    else:
        io.write_npy(path, x)
