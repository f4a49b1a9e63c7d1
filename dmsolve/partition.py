"""Partitioning: who should own which row, how good that is, and moving data there.

A :class:`Partition` assigns every global index of a layout to a part (a
rank); :func:`redistribute` moves a matrix or vector to the new owners and
back, exactly.

Partitioners (looked up by name in :data:`PARTITIONERS`)
---------------------------------------------------------
- ``"block"``: contiguous blocks of nearly equal row counts.
- ``"nnz"``: contiguous blocks of nearly equal nonzero counts.
- ``"metis"``: METIS k-way partition of the symmetrised graph of the
  matrix, via ``pymetis``. The graph is gathered to rank 0, which runs
  serial METIS and scatters the parts: rank 0 must hold the whole
  adjacency structure (about ``12 * nnz`` bytes) and the run time is serial.
  That is fine up to some 10^7 nonzeros; beyond that ParMETIS is the tool.
- :func:`rcb`: recursive coordinate bisection of distributed coordinates;
  fully distributed (each bisection finds an exact weighted median by
  bisection on the bit patterns of the coordinates, one small
  ``allreduce`` per step).

Numbering
---------
The new numbering keeps parts contiguous and, inside a part, the old order:
old index ``i`` in part ``p`` gets new index ``new_layout.start(p) + (number
of indices of part p that are smaller than i)``. With ``new_index[old] =
new``, the redistributed matrix is ``B[new_index[i], new_index[j]] =
A[i, j]``, i.e. ``B = A[inv][:, inv]`` with ``inv = argsort(new_index)``.
Nothing of size ``global_size`` is replicated: each rank keeps the part and
the new index of the indices it owns.
"""

from __future__ import annotations

import dataclasses
import numbers

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from ._errors import agree
from ._layout import Layout
from ._vector import DistVector

__all__ = [
    "Partition", "PartitionQuality", "PARTITIONERS", "partition",
    "block_partition", "nnz_partition", "metis_partition", "rcb",
    "partition_quality", "redistribute",
]


# -- data movement ------------------------------------------------------------

def _exchange(comm: MPI.Comm, dests: np.ndarray, *arrays: np.ndarray) -> list[np.ndarray]:
    """Send element ``i`` of every array to rank ``dests[i]``; one superstep.

    Returns the received arrays, concatenated in source order and, within a
    source, in send order. Collective on ``comm``.
    """
    from .bsp import BSP

    ctx = BSP(comm)
    dests = np.asarray(dests, dtype=np.int64)
    for tag, a in enumerate(arrays):
        ctx.send_rows(dests, np.ascontiguousarray(a), tag=tag)
    inbox = ctx.sync("partition.exchange")
    return [inbox.concat(tag, dtype=a.dtype, shape=a.shape[1:])
            for tag, a in enumerate(arrays)]


def _fetch(layout: Layout, local_values: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """``values[indices]`` of a distributed array (``local_values`` on ``layout``).

    Two supersteps: requests to the owners, answers back. Collective on
    ``layout.comm``.
    """
    comm = layout.comm
    indices = np.asarray(indices, dtype=np.int64)
    owners = layout.owner(indices) if indices.size else np.zeros(0, dtype=np.int64)
    order = np.argsort(owners, kind="stable")
    req_idx, req_src = _exchange_with_sources(comm, owners[order], indices[order])
    answers = local_values[req_idx - layout.start]
    got = _exchange(comm, req_src, answers)[0]
    out = np.empty(indices.size, dtype=local_values.dtype)
    out[order] = got  # answers come back grouped by owner in request order
    return out


def _exchange_with_sources(comm, dests, values):
    from .bsp import BSP

    ctx = BSP(comm)
    ctx.send_rows(np.asarray(dests, dtype=np.int64), np.ascontiguousarray(values), tag=0)
    inbox = ctx.sync("partition.fetch")
    data, src = inbox.concat_with_sources(0, dtype=values.dtype)
    return data, src


# -- the partition object ---------------------------------------------------------

class Partition:
    """An assignment of every index of ``old_layout`` to a part.

    Parameters
    ----------
    old_layout : Layout
        The current distribution of the index space.
    local_parts : array_like of int, shape (old_layout.local_size,)
        The part of each index this rank owns, in ``[0, nparts)``.
    nparts : int, optional
        Number of parts; default ``comm.size``. Redistribution needs
        ``nparts == comm.size`` (part ``p`` goes to rank ``p``).

    Notes
    -----
    Collective on ``old_layout.comm`` (one ``allgather`` of the part
    counts, and the argument checks are agreed). Attributes:
    ``local_parts``, ``local_new_index`` (new global index of each owned
    index), ``part_sizes`` (replicated) and ``new_layout`` (when
    ``nparts == comm.size``). See the module docstring for the numbering.
    """

    def __init__(self, old_layout: Layout, local_parts, nparts: int | None = None):
        if not isinstance(old_layout, Layout):
            raise TypeError("old_layout must be a Layout, got %s" % type(old_layout).__name__)
        comm = old_layout.comm
        size = comm.Get_size()
        exc = None
        try:
            if nparts is None:
                nparts = size
            if isinstance(nparts, bool) or not isinstance(nparts, numbers.Integral) \
                    or nparts < 1:
                raise ValueError("nparts must be a positive integer, got %r" % (nparts,))
            parts = np.asarray(local_parts)
            if parts.shape != (old_layout.local_size,):
                raise ValueError("local_parts must have shape (local_size,) = (%d,), got %s"
                                 % (old_layout.local_size, parts.shape))
            if parts.size and not np.issubdtype(parts.dtype, np.integer):
                raise TypeError("local_parts must be integers, got dtype %s" % parts.dtype)
            parts = parts.astype(np.int64)
            if parts.size and (parts.min() < 0 or parts.max() >= nparts):
                raise ValueError("parts must lie in [0, nparts) = [0, %d)" % nparts)
        except (TypeError, ValueError) as e:
            exc, parts = e, np.zeros(0, dtype=np.int64)
        agree(comm, exc)
        self.old_layout = old_layout
        self.nparts = int(nparts)
        self.local_parts = parts
        self.local_parts.setflags(write=False)

        counts = np.bincount(parts, minlength=self.nparts).astype(np.int64)
        all_counts = np.empty((size, self.nparts), dtype=np.int64)
        comm.Allgather(counts, all_counts)
        self.part_sizes = all_counts.sum(axis=0)
        starts = np.concatenate(([0], np.cumsum(self.part_sizes)))
        before = all_counts[:comm.Get_rank()].sum(axis=0)  # earlier ranks, same part
        # stable order by part keeps the old order inside each part
        order = np.argsort(parts, kind="stable")
        rank_in_part = np.arange(parts.size) - np.concatenate(([0], np.cumsum(counts)))[
            parts[order]]
        new_index = np.empty(parts.size, dtype=np.int64)
        new_index[order] = starts[parts[order]] + before[parts[order]] + rank_in_part
        self.local_new_index = new_index
        self.local_new_index.setflags(write=False)
        self._part_ranges = starts
        self._inverse: Partition | None = None

    @classmethod
    def _explicit(cls, old_layout: Layout, local_parts: np.ndarray,
                  local_new_index: np.ndarray, part_ranges: np.ndarray) -> "Partition":
        # A partition with a given numbering (the inverse of another one).
        self = cls.__new__(cls)
        self.old_layout = old_layout
        self.nparts = part_ranges.size - 1
        self.local_parts = np.asarray(local_parts, dtype=np.int64)
        self.local_parts.setflags(write=False)
        self.local_new_index = np.asarray(local_new_index, dtype=np.int64)
        self.local_new_index.setflags(write=False)
        self.part_sizes = np.diff(part_ranges)
        self._part_ranges = np.asarray(part_ranges, dtype=np.int64)
        self._inverse = None
        return self

    # -- properties (never communicate) -----------------------------------
    @property
    def comm(self) -> MPI.Comm:
        return self.old_layout.comm

    @property
    def new_layout(self) -> Layout:
        """The layout after redistribution: rank ``p`` owns part ``p``."""
        if self.nparts != self.comm.Get_size():
            raise ValueError("a partition into %d parts has no layout on %d ranks"
                             % (self.nparts, self.comm.Get_size()))
        return Layout(self._part_ranges, self.comm)

    # -- collective helpers ------------------------------------------------------
    def parts(self) -> np.ndarray:
        """The part of every global index (old numbering), on every rank.

        Collective on ``comm``; O(global_size) memory per rank.
        """
        return DistVector(self.old_layout, self.local_parts).gather()

    def new_index(self) -> np.ndarray:
        """``new_index[old] = new`` for every global index, on every rank.

        Collective on ``comm``; O(global_size) memory per rank.
        """
        return DistVector(self.old_layout, self.local_new_index).gather()

    def inverse(self) -> "Partition":
        """The partition that moves data from ``new_layout`` back to ``old_layout``.

        Collective on ``comm`` (the first time; then cached).
        """
        if self._inverse is None:
            new = self.new_layout
            comm = self.comm
            old_index = np.arange(self.old_layout.start, self.old_layout.stop, dtype=np.int64)
            got_new, got_old = _exchange(comm, self.local_parts, self.local_new_index,
                                         old_index)
            old_of_new = np.empty(new.local_size, dtype=np.int64)
            old_of_new[got_new - new.start] = got_old
            owners = self.old_layout.owner(old_of_new) if old_of_new.size else \
                np.zeros(0, dtype=np.int64)
            # The inverse numbering is given, not derived: inside one old
            # owner, new order and old order differ in general.
            inv = Partition._explicit(new, owners, old_of_new, self.old_layout.ranges)
            inv._inverse = self
            self._inverse = inv
        return self._inverse

    def restore(self, obj):
        """Move a redistributed matrix or vector back to ``old_layout``.

        Collective on ``comm``. Same as ``redistribute(obj, self, inverse=True)``.
        """
        return redistribute(obj, self, inverse=True)

    def __repr__(self) -> str:
        return "Partition(nparts=%d, global_size=%d, part_sizes=%s)" % (
            self.nparts, self.old_layout.global_size, self.part_sizes.tolist())


# -- redistribution ------------------------------------------------------------------

def redistribute(obj, partition: Partition, inverse: bool = False):
    """Move a DistCSR or DistVector to the owners given by ``partition``.

    Collective on ``partition.comm``. Rows (and, for a matrix, columns too:
    a symmetric permutation) are renumbered as described in the module
    docstring, so ``redistribute(redistribute(A, p), p, inverse=True)``
    returns ``A`` exactly (same layout, same entries, explicit zeros kept).

    Parameters
    ----------
    obj : DistCSR or DistVector
        Distributed by ``partition.old_layout`` (``partition.new_layout``
        when ``inverse``). A matrix must be square with equal row and
        column layouts.
    partition : Partition
        With ``nparts == comm.size``.
    inverse : bool, optional
        Move back from the new to the old distribution.

    Returns
    -------
    DistCSR or DistVector
        On ``partition.new_layout`` (``old_layout`` when ``inverse``).

    Raises
    ------
    TypeError, ValueError
        On every rank, for an object of another kind or layout.
    """
    from ._matrix import DistCSR

    if not isinstance(partition, Partition):
        raise TypeError("partition must be a Partition, got %s" % type(partition).__name__)
    p = partition.inverse() if inverse else partition
    new = p.new_layout  # raises on every rank when nparts != size
    src = p.old_layout
    if isinstance(obj, DistVector):
        if obj.layout != src:
            raise ValueError("the vector's layout (global size %d) is not the "
                             "partition's %s layout" % (obj.global_size,
                                                        "new" if inverse else "old"))
        idx, vals = _exchange(p.comm, p.local_parts, p.local_new_index, obj.local)
        out = np.empty(new.local_size, dtype=obj.local.dtype)
        out[idx - new.start] = vals
        return DistVector(new, out)
    if isinstance(obj, DistCSR):
        if obj.row_layout != src or obj.col_layout != src:
            raise ValueError("the matrix must be square with row and column layouts "
                             "equal to the partition's %s layout"
                             % ("new" if inverse else "old"))
        local = sp.csr_matrix(obj.local_rows())
        row_len = np.diff(local.indptr)
        cols = local.indices.astype(np.int64)
        ucols, where = np.unique(cols, return_inverse=True)
        new_cols = _fetch(src, p.local_new_index, ucols)[where.ravel()]
        new_rows = np.repeat(p.local_new_index, row_len)
        dests = np.repeat(p.local_parts, row_len)
        r, c, v = _exchange(p.comm, dests, new_rows, new_cols, local.data)
        # no (row, col) pair repeats, so the COO -> CSR conversion adds nothing
        out = sp.csr_matrix((v, (r - new.start, c)), shape=(new.local_size, obj.shape[1]))
        out.sort_indices()
        return DistCSR.from_local_rows(out, new)
    raise TypeError("redistribute takes a DistCSR or a DistVector, got %s"
                    % type(obj).__name__)


# -- partitioners ----------------------------------------------------------------

def _layout_of(obj) -> Layout:
    from ._matrix import DistCSR

    if isinstance(obj, DistCSR):
        return obj.row_layout
    if isinstance(obj, DistVector):
        return obj.layout
    if isinstance(obj, Layout):
        return obj
    raise TypeError("expected a DistCSR, DistVector or Layout, got %s" % type(obj).__name__)


def _from_new_layout(old: Layout, target: Layout) -> Partition:
    idx = np.arange(old.start, old.stop, dtype=np.int64)
    parts = target.owner(idx) if idx.size else np.zeros(0, dtype=np.int64)
    return Partition(old, parts)


def block_partition(obj) -> Partition:
    """Contiguous blocks of nearly equal size (``Layout.block``).

    Collective on the object's ``comm``.

    Parameters
    ----------
    obj : DistCSR, DistVector or Layout
    """
    old = _layout_of(obj)
    return _from_new_layout(old, Layout.block(old.global_size, old.comm))


def nnz_partition(A) -> Partition:
    """Contiguous blocks of nearly equal nonzero counts (``Layout.from_weights``).

    Collective on ``A.comm``; gathers the row lengths (O(rows) per rank).
    """
    old = A.row_layout
    row_nnz = np.diff(sp.csr_matrix(A.local_rows()).indptr).astype(np.float64)
    weights = DistVector(old, row_nnz).gather()
    return _from_new_layout(old, Layout.from_weights(weights, old.comm))


def metis_partition(A, nparts: int | None = None, seed: int = 0) -> Partition:
    """METIS k-way partition of the symmetrised graph of ``A`` (via pymetis).

    Collective on ``A.comm``. The graph (pattern of ``A + A^T`` without the
    diagonal) is gathered to rank 0, partitioned by serial METIS and the
    parts scattered back: see the module docstring for the limits.

    Parameters
    ----------
    A : DistCSR
        Square matrix.
    nparts : int, optional
        Default ``comm.size``.
    seed : int, optional
        METIS random seed; the result is deterministic for a given seed.

    References
    ----------
    .. [1] G. Karypis, V. Kumar, A fast and high quality multilevel scheme for
       partitioning irregular graphs, SIAM J. Sci. Comput. 20(1), 1998.
    """
    comm = A.comm
    rank, size = comm.Get_rank(), comm.Get_size()
    nparts = size if nparts is None else nparts
    exc = None
    if A.shape[0] != A.shape[1]:
        exc = ValueError("metis_partition needs a square matrix, got shape %s" % (A.shape,))
    elif isinstance(nparts, bool) or not isinstance(nparts, numbers.Integral) or nparts < 1:
        exc = ValueError("nparts must be a positive integer, got %r" % (nparts,))
    agree(comm, exc)
    layout = A.row_layout
    n = layout.global_size
    local = sp.csr_matrix(A.local_rows())
    row_len = np.diff(local.indptr).astype(np.int64)
    rows = np.repeat(np.arange(layout.start, layout.stop, dtype=np.int64), row_len)
    cols = local.indices.astype(np.int64)
    g_rows = _gatherv(comm, rows)
    g_cols = _gatherv(comm, cols)
    parts_all = None
    if rank == 0:
        exc = None
        try:
            parts_all = _metis_serial(g_rows, g_cols, n, int(nparts), seed)
        except Exception as e:  # noqa: BLE001 - agreed below, raised everywhere
            exc = RuntimeError("METIS failed: %s" % e)
    else:
        exc = None
    agree(comm, exc)
    counts = layout.local_sizes
    parts = np.empty(layout.local_size, dtype=np.int64)
    comm.Scatterv([parts_all, (counts, layout.ranges[:-1]), MPI.INT64_T] if rank == 0
                  else None, [parts, MPI.INT64_T], root=0)
    return Partition(layout, parts, nparts=int(nparts))


def _gatherv(comm, a: np.ndarray) -> np.ndarray | None:
    counts = np.array(comm.gather(a.size, root=0) or [0], dtype=np.int64)
    out = None
    if comm.Get_rank() == 0:
        out = np.empty(int(counts.sum()), dtype=np.int64)
        displs = np.concatenate(([0], np.cumsum(counts)[:-1]))
        comm.Gatherv([a, MPI.INT64_T], [out, (counts, displs), MPI.INT64_T], root=0)
    else:
        comm.Gatherv([a, MPI.INT64_T], None, root=0)
    return out


def _metis_serial(rows, cols, n: int, nparts: int, seed: int) -> np.ndarray:
    if nparts == 1 or n == 0:
        return np.zeros(n, dtype=np.int64)
    import pymetis

    off = rows != cols
    G = sp.csr_matrix((np.ones(int(off.sum()), dtype=np.int8), (rows[off], cols[off])),
                      shape=(n, n))
    G = (G + G.T).tocsr()
    G.sort_indices()
    opts = pymetis.Options(seed=int(seed))
    xadj, adjncy = G.indptr.astype(np.int64), G.indices.astype(np.int64)
    if hasattr(pymetis, "CSRAdjacency"):  # pymetis >= 2025.2
        graph = {"adjacency": pymetis.CSRAdjacency(adj_starts=xadj, adjacent=adjncy)}
    else:
        graph = {"xadj": xadj, "adjncy": adjncy}
    _, parts = pymetis.part_graph(nparts, options=opts, **graph)
    return np.asarray(parts, dtype=np.int64)


def _float_key(x: np.ndarray) -> np.ndarray:
    """Order-preserving map of finite float64 to uint64."""
    b = (np.asarray(x, dtype=np.float64) + 0.0).view(np.uint64)  # -0.0 -> 0.0
    neg = (b >> np.uint64(63)).astype(bool)
    return np.where(neg, ~b, b | np.uint64(1 << 63))


def _kth_threshold(comm, keys: np.ndarray, group: np.ndarray, active: np.ndarray,
                   target: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per group ``g``, the smallest ``t`` in ``[lo, hi]`` with ``#{key <= t} >= target``.

    ``keys`` are uint64; ``group`` indexes ``target``/``lo``/``hi``; only
    groups with ``active`` take part. Bisection on the integers, one
    ``Allreduce`` of the per-group counts per step (at most 64 steps).
    Collective on ``comm``.
    """
    ng = target.size
    lo, hi = lo.copy(), hi.copy()
    while True:
        todo = active & (lo < hi)
        if not comm.allreduce(bool(todo.any()), op=MPI.LOR):
            return hi
        mid = lo + (hi - lo) // np.uint64(2)
        below = keys <= mid[group]
        count = np.bincount(group[below], minlength=ng).astype(np.int64)
        total = np.empty_like(count)
        comm.Allreduce(count, total, op=MPI.SUM)
        enough = total >= target
        hi = np.where(todo & enough, mid, hi)
        lo = np.where(todo & ~enough, mid + np.uint64(1), lo)


def rcb(coords, comm: MPI.Comm, nparts: int | None = None) -> Partition:
    """Recursive coordinate bisection of distributed points.

    Each rank passes the coordinates of the points it owns (in the order
    of a ``Layout.from_local_size(len(coords), comm)`` numbering). A group
    of points destined for ``k`` parts is cut across its longest extent so
    that the lower side gets ``floor(count * (k // 2) / k)`` points, ties
    broken by global index, until every group is one part. The cut is exact
    and does not depend on the rank count. Collective on ``comm``.

    Parameters
    ----------
    coords : array_like of float, shape (local_n, dim)
        This rank's points; ``local_n`` may be 0.
    comm : MPI.Comm
    nparts : int, optional
        Default ``comm.size``.

    Returns
    -------
    Partition
        On the layout ``Layout.from_local_size(local_n, comm)``.

    Raises
    ------
    TypeError, ValueError
        On every rank, for non-finite coordinates, a bad shape or ``nparts``.

    References
    ----------
    .. [1] M. J. Berger, S. H. Bokhari, A partitioning strategy for nonuniform
       problems on multiprocessors, IEEE Trans. Computers C-36(5), 1987.
    """
    exc, X = None, np.zeros((0, 1))
    try:
        X = np.asarray(coords, dtype=np.float64)
        if X.ndim == 1:
            X = X[:, None]
        if X.ndim != 2:
            raise ValueError("coords must have shape (local_n, dim), got %s" % (X.shape,))
        if not np.all(np.isfinite(X)):
            raise ValueError("coords must be finite")
    except (TypeError, ValueError) as e:
        exc, X = e, np.zeros((0, 1))
    agree(comm, exc)
    dims = comm.allgather(X.shape[1] if X.shape[0] else -1)
    dim = max(dims)
    agree(comm, ValueError("coords have different dimensions on different ranks")
          if X.shape[0] and X.shape[1] != dim else None)
    if dim < 0:
        dim = 1
        X = X.reshape(0, 1)
    size = comm.Get_size()
    nparts = size if nparts is None else nparts
    bad = isinstance(nparts, bool) or not isinstance(nparts, numbers.Integral) or nparts < 1
    agree(comm, ValueError("nparts must be a positive integer, got %r" % (nparts,))
          if bad else None)
    nparts = int(nparts)
    layout = Layout.from_local_size(X.shape[0], comm)
    gid = np.arange(layout.start, layout.stop, dtype=np.int64).astype(np.uint64)

    p0 = np.zeros(X.shape[0], dtype=np.int64)   # group = parts [p0, p1)
    p1 = np.full(X.shape[0], nparts, dtype=np.int64)
    keys = [_float_key(X[:, d]) for d in range(dim)]
    g_p1 = np.zeros(nparts, dtype=np.int64)  # per group (indexed by p0): its p1
    g_p1[0] = nparts
    while True:
        split = (g_p1 - np.arange(nparts)) > 1  # groups still to cut
        if not split.any():
            break
        group = p0
        # extent of each group along each axis, to choose the cut axis
        big = np.uint64(np.iinfo(np.uint64).max)
        kmin = np.full((dim, nparts), big, dtype=np.uint64)
        kmax = np.zeros((dim, nparts), dtype=np.uint64)
        for d in range(dim):
            np.minimum.at(kmin[d], group, keys[d])
            np.maximum.at(kmax[d], group, keys[d])
        gmin = np.empty_like(kmin)
        gmax = np.empty_like(kmax)
        comm.Allreduce(kmin, gmin, op=MPI.MIN)
        comm.Allreduce(kmax, gmax, op=MPI.MAX)
        count = np.bincount(group, minlength=nparts).astype(np.int64)
        gcount = np.empty_like(count)
        comm.Allreduce(count, gcount, op=MPI.SUM)
        lo_f = np.empty((dim, nparts))
        hi_f = np.empty((dim, nparts))
        for d in range(dim):
            lo_f[d] = _key_to_float(gmin[d])
            hi_f[d] = _key_to_float(gmax[d])
        with np.errstate(invalid="ignore", over="ignore"):
            extent = np.where(gcount > 0, hi_f - lo_f, -1.0)
        axis = np.argmax(extent, axis=0)  # first axis among equal extents
        k = g_p1 - np.arange(nparts)
        target = np.where(split, gcount * (k // 2) // np.maximum(k, 1), 0)
        key = np.choose(axis[group], keys) if X.shape[0] else np.zeros(0, np.uint64)
        lo = gmin[axis, np.arange(nparts)]
        hi = gmax[axis, np.arange(nparts)]
        active = split & (target > 0)
        t = _kth_threshold(comm, key, group, active, target, np.minimum(lo, hi), hi)
        # points strictly below the threshold key go left; ties split by gid
        below = key < t[group]
        nbelow = np.bincount(group[below], minlength=nparts).astype(np.int64)
        gbelow = np.empty_like(nbelow)
        comm.Allreduce(nbelow, gbelow, op=MPI.SUM)
        tie = key == t[group]
        need = target - gbelow
        tie_active = active & (need > 0)
        gid_key = np.where(tie, gid, np.uint64(np.iinfo(np.uint64).max))
        tg = _kth_threshold(comm, gid_key, group, tie_active, need,
                            np.zeros(nparts, dtype=np.uint64),
                            np.full(nparts, layout.global_size, dtype=np.uint64))
        left = below | (tie & tie_active[group] & (gid <= tg[group]))
        left &= active[group]
        mid_part = np.arange(nparts) + k // 2
        cut = split[group]
        new_p0 = np.where(cut & ~left, mid_part[group], p0)
        new_p1 = np.where(cut & left, mid_part[group], p1)
        # update the per-group table
        g_new = g_p1.copy()
        for g in np.flatnonzero(split):
            g_new[g] = g + k[g] // 2
            g_new[g + k[g] // 2] = g_p1[g]
        p0, p1, g_p1 = new_p0, new_p1, g_new
    return Partition(layout, p0, nparts=nparts)


def _key_to_float(u: np.ndarray) -> np.ndarray:
    u = np.asarray(u, dtype=np.uint64)
    top = (u >> np.uint64(63)).astype(bool)
    b = np.where(top, u & ~np.uint64(1 << 63), ~u)
    return b.view(np.float64)


# -- quality ---------------------------------------------------------------------

@dataclasses.dataclass
class PartitionQuality:
    """Quality of a partition of a matrix's rows (replicated on every rank).

    Attributes
    ----------
    nparts : int
    edge_cut : int
        Edges ``{i, j}`` (``i != j``, ``a_ij != 0`` or ``a_ji != 0`` stored)
        whose ends lie in different parts: METIS's edge cut of the
        symmetrised graph.
    rows, nnz : ndarray
        Rows and stored entries per part.
    ghosts : ndarray
        Distinct off-part columns referenced by each part's rows (the halo
        a matvec receives).
    neighbours : ndarray
        Distinct parts owning those columns.
    """

    nparts: int
    edge_cut: int
    rows: np.ndarray
    nnz: np.ndarray
    ghosts: np.ndarray
    neighbours: np.ndarray

    @property
    def row_imbalance(self) -> float:
        """``max(rows) / mean(rows)``; 1 is perfect."""
        return _imbalance(self.rows)

    @property
    def nnz_imbalance(self) -> float:
        """``max(nnz) / mean(nnz)``; 1 is perfect."""
        return _imbalance(self.nnz)

    def as_dict(self) -> dict:
        """Plain Python values, for JSON or logging."""
        return {"nparts": self.nparts, "edge_cut": self.edge_cut,
                "row_imbalance": self.row_imbalance, "nnz_imbalance": self.nnz_imbalance,
                "rows": self.rows.tolist(), "nnz": self.nnz.tolist(),
                "ghosts": self.ghosts.tolist(), "neighbours": self.neighbours.tolist()}

    def format(self) -> str:
        """A table, one line per part, then the totals. Not collective."""
        lines = ["%5s %10s %12s %8s %10s" % ("part", "rows", "nnz", "ghosts", "neighbours")]
        for p in range(self.nparts):
            lines.append("%5d %10d %12d %8d %10d" % (p, self.rows[p], self.nnz[p],
                                                     self.ghosts[p], self.neighbours[p]))
        lines.append("edge cut %d, row imbalance %.3f, nnz imbalance %.3f" % (
            self.edge_cut, self.row_imbalance, self.nnz_imbalance))
        return "\n".join(lines)


def _imbalance(counts: np.ndarray) -> float:
    mean = counts.mean() if counts.size else 0.0
    return float(counts.max() / mean) if mean > 0 else 1.0


def partition_quality(A, partition: Partition | None = None) -> PartitionQuality:
    """Edge cut, balance, ghosts and neighbours of a partition of ``A``'s rows.

    Collective on ``A.comm``. Without ``partition``, the quality of ``A``'s
    current distribution. Works for any ``nparts`` without moving the
    matrix: the parts of referenced columns are fetched from their owners
    and per-part sets are reduced on rank ``part % size``.

    Parameters
    ----------
    A : DistCSR
        Square, with ``col_layout == row_layout == partition.old_layout``.
    partition : Partition, optional

    Returns
    -------
    PartitionQuality
        The same on every rank.
    """
    layout = A.row_layout
    if partition is None:
        partition = Partition(layout, np.full(layout.local_size, layout.rank))
    exc = None
    if A.shape[0] != A.shape[1] or A.col_layout != layout \
            or partition.old_layout != layout:
        exc = ValueError("partition_quality needs a square matrix whose row and column "
                         "layouts are the partition's old layout")
    agree(A.comm, exc)
    comm, size, nparts = A.comm, A.comm.Get_size(), partition.nparts
    local = sp.csr_matrix(A.local_rows())
    row_len = np.diff(local.indptr)
    rows = np.repeat(np.arange(layout.start, layout.stop, dtype=np.int64), row_len)
    cols = local.indices.astype(np.int64)
    ucols, where = np.unique(cols, return_inverse=True)
    col_part = _fetch(layout, partition.local_parts, ucols)[where.ravel()]
    row_part = np.repeat(partition.local_parts, row_len)

    nrows = np.bincount(partition.local_parts, minlength=nparts).astype(np.int64)
    nnz = np.bincount(row_part, minlength=nparts).astype(np.int64)
    off = (row_part != col_part) & (rows != cols)
    # ghosts: distinct (part, column) pairs, reduced on rank part % size
    rp, cc, cp = row_part[off], cols[off], col_part[off]
    g_part, g_col, g_cpart = _exchange(comm, rp % size, rp, cc, cp)
    ghosts = np.zeros(nparts, dtype=np.int64)
    neighbours = np.zeros(nparts, dtype=np.int64)
    if g_part.size:
        pairs = np.unique(np.stack((g_part, g_col)), axis=1)
        ghosts += np.bincount(pairs[0], minlength=nparts)
        nb = np.unique(np.stack((g_part, g_cpart)), axis=1)
        neighbours += np.bincount(nb[0], minlength=nparts)
    # edge cut: distinct unordered cut pairs, reduced on the owner of the smaller end
    lo, hi = np.minimum(rows[off], cols[off]), np.maximum(rows[off], cols[off])
    dest = layout.owner(lo) if lo.size else np.zeros(0, dtype=np.int64)
    e_lo, e_hi = _exchange(comm, dest, lo, hi)
    cut = np.unique(np.stack((e_lo, e_hi)), axis=1).shape[1] if e_lo.size else 0

    totals = np.concatenate((nrows, nnz, ghosts, neighbours, [cut])).astype(np.int64)
    comm.Allreduce(MPI.IN_PLACE, totals, op=MPI.SUM)
    return PartitionQuality(nparts=nparts, edge_cut=int(totals[-1]),
                            rows=totals[:nparts], nnz=totals[nparts:2 * nparts],
                            ghosts=totals[2 * nparts:3 * nparts],
                            neighbours=totals[3 * nparts:4 * nparts])


#: Partitioners by name: ``PARTITIONERS[name](A, **options) -> Partition``.
PARTITIONERS = {
    "block": block_partition,
    "nnz": nnz_partition,
    "metis": metis_partition,
}


def partition(A, method: str = "metis", **options) -> Partition:
    """Partition ``A``'s rows with the partitioner named ``method``.

    Collective on ``A.comm``. ``method`` is a key of :data:`PARTITIONERS`.
    """
    try:
        fn = PARTITIONERS[method]
    except KeyError:
        raise ValueError("unknown partitioner %r; choose from %s"
                         % (method, ", ".join(sorted(PARTITIONERS)))) from None
    return fn(A, **options)
