"""The ``"hilbert"`` partitioner: points ordered along a Hilbert space-filling curve
by the distributed sort, the curve cut into parts of equal counts.

The keys are computed locally (coordinates scaled by the global bounding box,
one ``Allreduce``); :func:`dmsolve.bsp.rank_of` gives every point its position
on the curve, and positions ``ranges[k] .. ranges[k+1] - 1`` form part ``k``.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from .._errors import raise_collective
from .._layout import Layout, block_ranges
from ..bsp import rank_of
from ..validate import agreed, check_int
from ._partition import Partition

__all__ = ["hilbert", "hilbert_keys", "hilbert_partition"]

#: bits per axis so that ``dim * bits <= 62`` (the keys are non-negative int64)
MAX_KEY_BITS = 62


def hilbert_keys(coords, lo, hi, bits: int | None = None) -> np.ndarray:
    """Hilbert curve index of each point inside the box ``[lo, hi]``.

    Not collective. The box is scaled isotropically (by its largest side, so
    that the curve's cells are cubes), each axis quantised to ``bits`` bits
    (default ``62 // dim``) and the cell's index along the ``dim``-dimensional
    Hilbert curve of order ``bits`` computed by Skilling's transpose
    algorithm [1]_. Consecutive cells along the curve are face neighbours.

    Parameters
    ----------
    coords : array_like of float, shape (n, dim)
        Finite points; ``dim`` from 1 to 62.
    lo, hi : array_like of float, shape (dim,)
        The box; points outside are clipped to it.
    bits : int, optional
        Bits per axis, ``1 <= bits <= 62 // dim``.

    Returns
    -------
    ndarray of int64, shape (n,)
        Keys in ``[0, 2**(dim * bits))``.

    References
    ----------
    .. [1] J. Skilling, Programming the Hilbert curve, AIP Conf. Proc. 707, 381 (2004).
    """
    X = np.asarray(coords, dtype=np.float64)
    if X.ndim == 1:
        X = X[:, None]
    n, dim = X.shape
    bits = MAX_KEY_BITS // max(dim, 1) if bits is None else int(bits)
    if not 1 <= bits <= MAX_KEY_BITS // max(dim, 1):
        raise ValueError("bits must lie in [1, %d] for dim %d, got %d"
                         % (MAX_KEY_BITS // max(dim, 1), dim, bits))
    lo = np.asarray(lo, dtype=np.float64).reshape(dim)
    hi = np.asarray(hi, dtype=np.float64).reshape(dim)
    side = float(np.max(hi - lo)) if dim else 0.0
    cells = float(1 << bits)
    scale = cells / side if side > 0 else 0.0
    q = np.floor((X - lo) * scale)
    q = np.clip(q, 0, cells - 1).astype(np.uint64)
    return _transpose_to_index(_axes_to_transpose([q[:, d].copy() for d in range(dim)],
                                                  bits), bits)


def _axes_to_transpose(x: list[np.ndarray], bits: int) -> list[np.ndarray]:
    # Skilling's AxestoTranspose, vectorised over the points
    dim = len(x)
    one = np.uint64(1)
    m = one << np.uint64(bits - 1)
    q = m
    while q > one:  # inverse undo
        p = q - one
        for i in range(dim):
            hit = (x[i] & q) != 0
            x[0] = np.where(hit, x[0] ^ p, x[0])
            t = np.where(hit, np.uint64(0), (x[0] ^ x[i]) & p)
            x[0] ^= t
            x[i] ^= t
        q >>= one
    for i in range(1, dim):  # Gray encode
        x[i] ^= x[i - 1]
    t = np.zeros_like(x[0]) if dim else np.zeros(0, np.uint64)
    q = m
    while q > one:
        t = np.where((x[dim - 1] & q) != 0, t ^ (q - one), t)
        q >>= one
    for i in range(dim):
        x[i] ^= t
    return x


def _transpose_to_index(x: list[np.ndarray], bits: int) -> np.ndarray:
    # interleave: bit b of axis 0 is the most significant of the group for b
    dim = len(x)
    key = np.zeros(x[0].shape if dim else (0,), dtype=np.uint64)
    for b in range(bits - 1, -1, -1):
        for i in range(dim):
            key = (key << np.uint64(1)) | ((x[i] >> np.uint64(b)) & np.uint64(1))
    return key.astype(np.int64)


def hilbert(coords, comm: MPI.Comm, nparts: int | None = None,
            bits: int | None = None) -> Partition:
    """Partition distributed points by cutting their Hilbert curve order into
    parts of equal counts.

    Each rank passes the coordinates of the points it owns (numbered as by
    ``Layout.from_local_size(len(coords), comm)``). The keys are
    :func:`hilbert_keys` in the global bounding box (one ``Allreduce``),
    ties broken by global index; :func:`~dmsolve.bsp.rank_of` gives each
    point its position ``k`` on the curve and the point goes to part
    ``owner of k in block_ranges(N, nparts)``: part sizes differ by at most
    one and do not depend on the rank count. Points given already in the
    curve's order (keys nondecreasing over the ranks) keep their global
    index as their position, without the sort: if the ranks also hold
    ``block_ranges(N, nparts)`` of them, nothing moves. Collective on
    ``comm``; O(local_n + N / size + size) memory and traffic per rank.

    Parameters
    ----------
    coords : array_like of float, shape (local_n, dim)
        This rank's points; ``local_n`` may be 0; ``dim`` the same on every
        rank that has points.
    comm : MPI.Comm
    nparts : int, optional
        Default ``comm.size``.
    bits : int, optional
        Bits per axis (default ``62 // dim``).

    Returns
    -------
    Partition
        On the layout ``Layout.from_local_size(local_n, comm)``.

    Raises
    ------
    TypeError, ValueError
        On every rank, for non-finite coordinates, a bad shape, ``nparts``
        or ``bits``.

    References
    ----------
    .. [1] J. R. Pilkington, S. B. Baden, Dynamic partitioning of non-uniform
       structured workloads with spacefilling curves, IEEE TPDS 7(3), 1996.
    """
    with agreed(comm):
        X = np.asarray(coords, dtype=np.float64)
        if X.ndim == 1:
            X = X[:, None]
        if X.ndim != 2:
            raise ValueError("coords must have shape (local_n, dim), got %s" % (X.shape,))
        if not np.all(np.isfinite(X)):
            raise ValueError("coords must be finite")
        nparts = check_int("nparts", comm.Get_size() if nparts is None else nparts, low=1)
        if bits is not None:
            bits = check_int("bits", bits, low=1)
    dim = comm.allreduce(X.shape[1] if X.shape[0] else -1, op=MPI.MAX)
    raise_collective(comm, X.shape[0] > 0 and X.shape[1] != dim, ValueError,
                     "coords have different dimensions on different ranks")
    dim = max(dim, 1)
    raise_collective(comm, dim > MAX_KEY_BITS or (bits is not None
                                                  and bits > MAX_KEY_BITS // dim),
                     ValueError, "bits must be at most %d for %d-dimensional points"
                     % (MAX_KEY_BITS // dim, dim))
    X = X.reshape(-1, dim)
    layout = Layout.from_local_size(X.shape[0], comm)
    # the global bounding box: one Allreduce of (-min, max)
    box = np.full(2 * dim, -np.inf)
    if X.shape[0]:
        box[:dim] = -X.min(axis=0)
        box[dim:] = X.max(axis=0)
    comm.Allreduce(MPI.IN_PLACE, box, op=MPI.MAX)
    lo, hi = -box[:dim], box[dim:]
    if layout.global_size == 0:
        lo = hi = np.zeros(dim)
    keys = hilbert_keys(X, lo, hi, bits)
    gids = np.arange(layout.start, layout.stop, dtype=np.int64)
    if _in_curve_order(keys, comm):
        pos = gids          # the curve's order is the input's: nothing to sort
    else:
        pos = rank_of(keys, comm, gids=gids)
    ranges = block_ranges(layout.global_size, nparts)
    parts = np.searchsorted(ranges, pos, side="right") - 1
    return Partition(layout, parts.astype(np.int64), nparts=nparts)


def _in_curve_order(keys: np.ndarray, comm: MPI.Comm) -> bool:
    """Whether the points are already in the curve's order over the ranks:
    keys nondecreasing within each rank and from one rank to the next (ties
    are then in global index order, as :func:`~dmsolve.bsp.rank_of` breaks
    them). Collective on ``comm``: an ``Exscan`` and an ``Allreduce`` of one
    word each, so an ordered input is partitioned without the sort's
    traffic."""
    ordered = bool(np.all(keys[1:] >= keys[:-1]))
    # the largest key on the ranks before this one (-1 if none: keys are >= 0)
    top = np.array([keys[-1] if keys.size else -1], dtype=np.int64)
    before = np.full(1, -1, dtype=np.int64)
    comm.Exscan(top, before, op=MPI.MAX)
    if comm.Get_rank() == 0:
        before[0] = -1          # Exscan leaves rank 0's buffer undefined
    if keys.size:
        ordered = ordered and int(keys[0]) >= int(before[0])
    return bool(comm.allreduce(ordered, op=MPI.LAND))


def hilbert_partition(A, coords, nparts: int | None = None,
                      bits: int | None = None) -> Partition:
    """Hilbert curve partition of ``A``'s rows, given their coordinates.

    The ``"hilbert"`` entry of :data:`~dmsolve.partition.PARTITIONERS`:
    ``partition(A, "hilbert", coords=xyz)`` with ``xyz`` the coordinates of
    this rank's rows of ``A``, one row per owned row. The same parts as
    :func:`hilbert` (``coords`` numbered by ``A.row_layout``). Collective on
    ``A.comm``.

    Parameters
    ----------
    A : DistCSR or Layout
        Its row layout is the one partitioned.
    coords : array_like of float, shape (A.row_layout.local_size, dim)
    nparts : int, optional
        Default ``comm.size``.
    bits : int, optional
        Bits per axis (default ``62 // dim``).

    Raises
    ------
    TypeError, ValueError
        On every rank, as :func:`hilbert`, and if ``coords`` does not have
        one row per owned row of ``A``.
    """
    layout = A if isinstance(A, Layout) else A.row_layout
    with agreed(layout.comm):
        local_n = np.shape(coords)[0] if np.ndim(coords) else -1
        if local_n != layout.local_size:
            raise ValueError("coords must have one row per owned row of A (%d), got shape %s"
                             % (layout.local_size, np.shape(coords)))
    return hilbert(coords, layout.comm, nparts, bits)
