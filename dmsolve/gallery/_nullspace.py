"""Near-null-space bases from a problem's structure, for algebraic multigrid's
``B=``: the constants of each component of a block system, and rigid-body modes.

Both assume the unknowns of a node are stored together (interlaced), node by
node: row ``r`` is component ``r % block_size`` of node ``r // block_size``,
as PETSc's block size and PyAMG's BSR matrices number them.
"""

from __future__ import annotations

import numpy as np

from .._layout import Layout
from .._vector import DistVector

__all__ = ["block_constants", "rigid_body_modes", "RIGID_BODY_MODES"]

#: Rigid-body modes by space dimension: translations, then rotations.
RIGID_BODY_MODES = {1: 1, 2: 3, 3: 6}


def _check_block_size(layout: Layout, block_size) -> int:
    if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)):
        raise TypeError("block_size must be an int, got %s" % type(block_size).__name__)
    if block_size < 1:
        raise ValueError("block_size must be positive, got %d" % block_size)
    if layout.global_size % block_size:
        raise ValueError("block_size %d does not divide the %d rows"
                         % (block_size, layout.global_size))
    return int(block_size)


def block_constants(layout: Layout, block_size: int) -> list[DistVector]:
    """One vector per component: 1 on that component's rows, 0 elsewhere.

    The near null space of a system of ``block_size`` scalar equations per
    node (PyAMG's default for a BSR matrix, PETSc GAMG's for a matrix with a
    block size). Not collective.

    Parameters
    ----------
    layout : Layout
        The rows; ``block_size`` must divide their number.
    block_size : int
        Unknowns per node, interlaced.

    Returns
    -------
    list of DistVector
        ``block_size`` vectors on ``layout``.

    Raises
    ------
    TypeError, ValueError
        For a ``block_size`` that is not a positive int dividing the rows
        (the same on every rank).

    Examples
    --------
    >>> from mpi4py import MPI
    >>> from dmsolve import Layout
    >>> from dmsolve.gallery import block_constants
    >>> B = block_constants(Layout.block(6, MPI.COMM_SELF), 2)
    >>> [b.local.tolist() for b in B]
    [[1.0, 0.0, 1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0, 0.0, 1.0]]
    """
    bs = _check_block_size(layout, block_size)
    component = np.arange(layout.start, layout.stop) % bs
    return [DistVector(layout, (component == j).astype(np.float64)) for j in range(bs)]


def rigid_body_modes(coordinates, layout: Layout) -> list[DistVector]:
    """The rigid-body modes of a body whose nodes are at ``coordinates``.

    For displacement unknowns (``d`` per node, interlaced, in ``d = 1, 2, 3``
    dimensions): the ``d`` translations, then the rotations about the
    centroid of the nodes, ``(-y, x)`` in 2-D and ``(-y, x, 0)``,
    ``(0, -z, y)``, ``(z, 0, -x)`` in 3-D: 1, 3 or 6 vectors
    (:data:`RIGID_BODY_MODES`), as PETSc's ``MatNullSpaceCreateRigidBody``.
    They span the null space of a linear-elasticity operator without
    boundary conditions, and the near null space that smoothed-aggregation
    AMG needs for one with them (Vanek, Mandel & Brezina 1996).

    Not collective: every rank is given the same coordinates.

    Parameters
    ----------
    coordinates : array_like, shape (nodes, d)
        Every node's coordinates, the same array on every rank (a memory map
        of a ``.npy`` file will do: the centroid reads it once, the modes
        only this rank's nodes). One column is a 1-D body.
    layout : Layout
        The rows: ``d * nodes`` of them.

    Returns
    -------
    list of DistVector
        The modes on ``layout``, not normalised.

    Raises
    ------
    TypeError
        If the coordinates are not real numbers.
    ValueError
        If they are not a finite ``(nodes, d)`` array with ``d`` in 1, 2, 3,
        or ``layout`` does not have ``d * nodes`` rows (the same on every rank).

    References
    ----------
    P. Vanek, J. Mandel, M. Brezina, "Algebraic multigrid by smoothed
    aggregation for second and fourth order elliptic problems", Computing
    56(3), 1996.

    Examples
    --------
    Two nodes on the y axis, at -1 and 1: the rotation moves them right and
    left.

    >>> import numpy as np
    >>> from mpi4py import MPI
    >>> from dmsolve import Layout
    >>> from dmsolve.gallery import rigid_body_modes
    >>> xy = np.array([[0.0, -1.0], [0.0, 1.0]])
    >>> modes = rigid_body_modes(xy, Layout.block(4, MPI.COMM_SELF))
    >>> [m.local.tolist() for m in modes]
    [[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0], [1.0, 0.0, -1.0, 0.0]]
    """
    X = np.asanyarray(coordinates)
    if X.dtype.kind not in "fiu":
        raise TypeError("coordinates must be real numbers, got dtype %s" % X.dtype)
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2 or X.shape[1] not in RIGID_BODY_MODES:
        raise ValueError("coordinates must be a (nodes, d) array with d = 1, 2 or 3, got "
                         "shape %s" % (X.shape,))
    nodes, d = X.shape
    if layout.global_size != d * nodes:
        raise ValueError("%d nodes in %d-D have %d unknowns (%d per node, interlaced); the "
                         "matrix has %d rows" % (nodes, d, d * nodes, d, layout.global_size))
    centroid = np.asarray(X.mean(axis=0), dtype=np.float64) if nodes else np.zeros(d)
    if not np.all(np.isfinite(centroid)):
        raise ValueError("coordinates must be finite")
    rows = np.arange(layout.start, layout.stop)
    node, comp = rows // d, rows % d
    first, last = (int(node[0]), int(node[-1]) + 1) if rows.size else (0, 0)
    local = np.asarray(X[first:last], dtype=np.float64) - centroid
    P = local[node - first] if rows.size else np.zeros((0, d))
    modes = [(comp == j).astype(np.float64) for j in range(d)]
    if d == 2:
        x, y = P[:, 0], P[:, 1]
        modes.append(np.where(comp == 0, -y, x))
    elif d == 3:
        x, y, z = P[:, 0], P[:, 1], P[:, 2]
        modes.append(np.select([comp == 0, comp == 1], [-y, x], 0.0))
        modes.append(np.select([comp == 1, comp == 2], [-z, y], 0.0))
        modes.append(np.select([comp == 0, comp == 2], [z, -x], 0.0))
    return [DistVector(layout, m) for m in modes]
