"""What a :class:`SimplicialComplex` is built from, checked at the door: the
top simplices, the points (global or per rank) and the vertex partition,
looked up by name in :data:`PARTITIONS`."""

from __future__ import annotations

import itertools

import numpy as np
from mpi4py import MPI

from dmsolve import DistCSR, Layout, Registry, agree
from dmsolve.partition import exchange, hilbert, metis_partition, multilevel_partition, rcb
from dmsolve.validate import agreed, check_choice

from ..core import check_fits, unique_rows

__all__ = ["PARTITIONS", "GEOMETRIC_PARTITIONS", "MAX_DIMENSION", "read_input", "to_block"]

MAX_DIMENSION = 3

#: Vertex partitioners by name, ``partitioner(tops, points, n, comm)`` with
#: ``points`` this rank's rows of the block vertex layout
#: (``Layout.block(n)``; None without points): each
#: returns a ``dmsolve.partition.Partition`` of the block vertex layout, or
#: None to keep the blocks. Its own registry, not ``dmsolve.partition``'s
#: (those partition matrices; these take the top simplices and points).
PARTITIONS = Registry("partition")


@PARTITIONS.register("block")
def _block_partition(tops, pts, n, comm):
    return None


def _vertex_graph(tops, n, comm) -> DistCSR:
    """The vertex adjacency (edges of the given simplices) on the block layout."""
    heads, tails = [], []
    for k, rows in tops.items():
        for i, j in itertools.combinations(range(k + 1), 2):
            heads += [rows[:, i], rows[:, j]]
            tails += [rows[:, j], rows[:, i]]
    h = np.concatenate(heads) if heads else np.zeros(0, np.int64)
    t = np.concatenate(tails) if tails else np.zeros(0, np.int64)
    return DistCSR.from_coo(h, t, np.ones(h.size), (n, n), comm, mode="insert")


@PARTITIONS.register("metis")
def _metis_partition(tops, pts, n, comm):
    return metis_partition(_vertex_graph(tops, n, comm))


@PARTITIONS.register("multilevel")
def _multilevel_partition(tops, pts, n, comm):
    return multilevel_partition(_vertex_graph(tops, n, comm))


@PARTITIONS.register("rcb")
def _rcb_partition(tops, pts, n, comm):
    return rcb(pts, comm)


@PARTITIONS.register("hilbert")
def _hilbert_partition(tops, pts, n, comm):
    return hilbert(pts, comm)


#: The partitions that cut the vertices' coordinates (they need ``points``).
GEOMETRIC_PARTITIONS = ("rcb", "hilbert")


# -- helpers ------------------------------------------------------------------------------------
def _check_points(points, name="points"):
    if points is None:
        return None
    pts = np.asarray(points)
    if pts.dtype.kind not in "fiu":
        raise TypeError("%s must be real numbers, got dtype %s" % (name, pts.dtype))
    pts = pts.astype(np.float64)
    if pts.ndim != 2:
        raise ValueError("%s must be a 2-D array (n, d), got shape %s" % (name, pts.shape))
    if not np.all(np.isfinite(pts)):
        raise ValueError("%s must be finite (found NaN or inf)" % name)
    return pts


def _points_total(lpts, comm) -> int:
    """The number of vertices given as ``local_points`` over all ranks;
    ``ValueError`` on every rank if some rank gave none or the ranks' ``d``
    differ. Collective (one ``allgather`` of two words)."""
    shapes = comm.allgather(None if lpts is None else lpts.shape)
    exc = None
    if any(s is None for s in shapes):
        exc = ValueError("local_points must be given on every rank (an empty (0, d) array "
                         "for none); ranks %s gave none"
                         % [r for r, s in enumerate(shapes) if s is None])
    elif len({s[1] for s in shapes}) > 1:
        exc = ValueError("local_points must have the same number of columns on every "
                         "rank; got %s" % sorted({s[1] for s in shapes}))
    agree(comm, exc)
    return int(sum(s[0] for s in shapes))


def to_block(lpts, block: Layout) -> np.ndarray:
    """The rows of ``local_points`` (this rank's rows of a points array
    numbered in rank order) that the block layout gives this rank. Collective
    (one superstep; none when the two layouts coincide)."""
    comm = block.comm
    given = Layout.from_local_size(lpts.shape[0], comm)
    if np.array_equal(given.ranges, block.ranges):
        return lpts
    ids = np.arange(given.start, given.stop, dtype=np.int64)
    dest = block.owner(ids) if ids.size else np.zeros(0, np.int64)
    # rows arrive in source-rank order: ascending ids
    return exchange(comm, dest, lpts)[0].reshape(-1, lpts.shape[1])


def _check_simplices(simplices, n) -> dict[int, np.ndarray]:
    if isinstance(simplices, np.ndarray):
        simplices = [simplices]
    if not isinstance(simplices, (list, tuple)):
        raise TypeError("simplices must be a list of integer arrays, got %s"
                        % type(simplices).__name__)
    out: dict[int, list] = {}
    for a in simplices:
        a = np.asarray(a)
        if a.size == 0 and a.ndim <= 2:
            continue
        if a.dtype.kind not in "iu":
            raise TypeError("simplices must be integer vertex ids, got dtype %s" % a.dtype)
        if a.ndim != 2:
            raise ValueError("each simplex array must be 2-D (m, k+1), got shape %s"
                             % (a.shape,))
        k = a.shape[1] - 1
        if k > MAX_DIMENSION:
            raise ValueError("simplices of dimension %d given; at most %d supported"
                             % (k, MAX_DIMENSION))
        a = np.sort(a.astype(np.int64), axis=1)
        if a.min() < 0:
            raise ValueError("vertex id %d out of range: ids must be >= 0" % a.min())
        if n is not None and a.max() >= n:
            raise ValueError("vertex id %d out of range [0, %d) of the points" % (a.max(), n))
        if k and np.any(a[:, 1:] == a[:, :-1]):
            bad = a[np.any(a[:, 1:] == a[:, :-1], axis=1)][0]
            raise ValueError("degenerate simplex %s: a vertex is repeated" % bad.tolist())
        out.setdefault(k, []).append(a)
    tops = {}
    for k, parts in out.items():
        a = np.concatenate(parts)
        u = unique_rows(a, None)
        if u.shape[0] != a.shape[0]:
            srt = a[np.lexsort(a.T[::-1])]
            dup = srt[np.flatnonzero(np.all(srt[1:] == srt[:-1], axis=1))[0]]
            raise ValueError("simplex %s is listed more than once" % dup.tolist())
        tops[k] = a
    return tops


def read_input(simplices, comm, points, partition, local_points):
    """The door checks of :class:`SimplicialComplex`: ``(partition, tops,
    points, local_points, number of points)``, the top simplices by
    dimension. Collective on ``comm``; the same error on every rank."""
    tops: dict[int, np.ndarray] = {}
    pts = lpts = None
    with agreed(comm):
        partition = check_choice("partition", partition, PARTITIONS)
        if points is not None and local_points is not None:
            raise ValueError("give points (the global array) or local_points (this "
                             "rank's rows), not both")
        pts = _check_points(points)
        lpts = _check_points(local_points, "local_points")
    n_points = None if pts is None else pts.shape[0]
    if comm.allreduce(lpts is not None, op=MPI.LOR):    # every rank asks
        n_points = _points_total(lpts, comm)
    with agreed(comm):
        if partition in GEOMETRIC_PARTITIONS and n_points is None:
            raise ValueError("partition=%r cuts coordinates: give points" % partition)
        tops = _check_simplices(simplices, n_points)
    # the vertices are 0 .. max id: a stray huge id would make every rank
    # allocate its share of them (refused here, before anybody does)
    top_id = max((int(a.max()) for a in tops.values() if a.size), default=-1)
    top_id = comm.allreduce(top_id, op=MPI.MAX)
    with agreed(comm):
        if pts is None:
            check_fits("a complex with vertex ids up to %d" % top_id,
                       (top_id + 1) // comm.Get_size() + 1, 16)
    shapes = comm.allgather(None if pts is None else pts.shape)
    exc = None
    if lpts is None and any(s != shapes[0] for s in shapes):
        exc = ValueError("points must be the same global array on every rank; got "
                         "shapes %s" % sorted(set(map(str, shapes))))
    agree(comm, exc)
    return partition, tops, pts, lpts, n_points


