"""Persistence diagrams of 2-D images: the cubical complex of the pixel grid
filtered by the V-construction, cut into row slabs, each swept alone, with
only the events at the slabs' faces decided together."""

from __future__ import annotations

import functools

import numpy as np
from mpi4py import MPI

from dmsolve import Progress, block_ranges
from dmsolve.threads import resolve, using
from dmsolve.validate import agreed, check_real

from ..morse import cubical_link_graph
from ._diagram import PersistenceDiagram
from ._image_kernels import (NEIGHBOURS_8, candidate_labels, event_elder, float_keys, radix_order,
                             slab_labels, slab_scan, slab_sweep)

__all__ = ["image_persistence", "image_block", "row_ranges"]


def row_ranges(nrows: int, size: int) -> np.ndarray:
    """The ``size + 1`` offsets of the row slabs of an image of ``nrows`` rows
    on ``size`` ranks (the first ``nrows % size`` slabs one row taller), as
    :class:`topology.Grid` cuts its planes. Pure function. Not collective."""
    return block_ranges(nrows, size)


def image_persistence(image, comm: MPI.Comm, *, min_persistence: float = 0.0,
                      progress=None, threads: int | None = None) -> PersistenceDiagram:
    """The persistence diagram of a 2-D image: its cubical complex filtered
    by the V-construction, as gudhi's ``CubicalComplex(vertices=image)`` and
    CubicalRipser's ``computePH(image)`` compute it.

    Pixel ``image[i, j]`` is vertex ``j + i * ncols`` of the complex (row
    ``i``, column ``j``: the id of ``np.ravel_multi_index((i, j),
    image.shape)``). An edge joins two pixels next to each other in a row
    or a column, a square four pixels around a corner, and every cell
    enters at the largest value of its pixels. The diagram is the same as
    ``persistence_diagram(Grid((ncols, nrows), comm, complex="cubical"),
    image, axes="yx")``, pair for pair, on any number of ranks.

    Parameters
    ----------
    image : array_like, 2-D
        Real numbers (integers, booleans or floats; taken as float64), at
        least one pixel, all finite. Every rank passes the whole image;
        rank ``r`` reads only its slab of rows and the row on each side of
        it (:func:`row_ranges`).
    comm : MPI.Comm
    min_persistence : float
        Finite pairs are kept when ``death - birth > min_persistence``; all
        of them stay in :attr:`PersistenceDiagram.raw_pairs`.
    progress : None, True or callable
        Report ``"D0"`` and ``"D1"`` with their pair counts (see
        :class:`dmsolve.Progress`; task ``"persistence"``).
    threads : int, optional
        Threads per rank for this call (:func:`dmsolve.threads.using`;
        default :func:`dmsolve.get_num_threads`). A rank's two sweeps run one
        after the other on the calling thread at any count: each reads the
        whole slab in random order, and at once they contend for the cache.
        The diagram is the same, bit for bit, at any count.

    Returns
    -------
    PersistenceDiagram
        Dimensions 0 and 1, distributed in blocks sorted by ``(dim,
        birth_vertex, death_vertex)``; ``.gather()`` gives the whole diagram.
        D0 has one essential class per image (born at its lowest pixel); a
        D1 class is born at a saddle and dies at a maximum.

    Raises
    ------
    ValueError, TypeError
        On every rank: an image that is not 2-D, is empty, holds NaN or
        infinity (``ValueError``) or is not real numbers (``TypeError``),
        images of different shapes on different ranks, a negative or
        non-finite ``min_persistence``, a bad ``progress``, a ``threads``
        that is not a positive integer (``TypeError`` if it is not an integer).

    Notes
    -----
    Collective on ``comm``. Each rank sorts its rows (a radix sort of the
    values' bits, ties by pixel id) and sweeps them in that order, twice:
    the sublevel sets along the complex's edges (D0) and, by Alexander
    duality, the superlevel sets through shared squares, with the image's
    border joined to a vertex older than all (D1). A merge of components
    that touch no other rank's rows is decided by the elder rule where it
    happens; the merges of the others, and every pixel of a slab's first
    and last row, are *events* that rank 0 decides after one gather: the
    faces between slabs hold ``O(ncols)`` pixels, and the events are of
    that order, against the ``O(nrows * ncols / p)`` pixels each rank
    sweeps. The pairs end in one all-to-all that gives rank ``r`` block
    ``r`` of the sorted diagram.

    References
    ----------
    .. [1] H. Wagner, C. Chen, E. Vucini, "Efficient computation of
       persistent homology for cubical data", Topological Methods in Data
       Analysis and Visualization II, 2012 (the V-construction).
    .. [2] S. Kaji, T. Sudo, K. Ahara, "Cubical Ripser: software for
       computing persistent homology of image and volume data", 2020.
    .. [3] H. Edelsbrunner, D. Letscher, A. Zomorodian, "Topological
       persistence and simplification", Discrete Comput. Geom. 28, 2002.

    Examples
    --------
    A ring of 5s around a 6, and two basins (minima 1 and 0):

    >>> import numpy as np
    >>> from mpi4py import MPI
    >>> import topology
    >>> image = np.array([[5, 4, 5, 6, 7],
    ...                   [4, 1, 3, 2, 6],
    ...                   [5, 3, 6, 0, 5],
    ...                   [6, 4, 5, 3, 6]])
    >>> dg = topology.image_persistence(image, MPI.COMM_WORLD).gather()
    >>> print(dg.finite(0), dg.essential(0), dg.finite(1))
    [[1. 3.]] [0.] [[5. 6.]]

    Births and deaths are pixels, numbered row by row:

    >>> np.unravel_index(dg.pairs["death_vertex"][dg.pairs["dim"] == 1], image.shape)
    (array([2]), array([2]))
    """
    if not isinstance(comm, MPI.Comm):
        raise TypeError("comm must be an mpi4py MPI.Comm, got %s" % type(comm).__name__)
    rows = None
    with agreed(comm):
        min_persistence = check_real("min_persistence", min_persistence, low=0.0)
        report = Progress(progress, comm, "persistence")
        threads = resolve(threads)
        arr = np.asarray(image)
        shape = arr.shape
    _agree_shape(comm, shape)
    with agreed(comm):
        arr = _check_image(arr)
        nrows, ncols = shape
        cut = row_ranges(nrows, comm.Get_size())
        p0, p1 = int(cut[comm.Get_rank()]), int(cut[comm.Get_rank() + 1])
        g0, g1 = (max(p0 - 1, 0), min(p1 + 1, nrows)) if p1 > p0 else (p0, p0)
        rows = np.ascontiguousarray(arr[g0:g1], dtype=np.float64)
        if not np.isfinite(rows).all():
            raise ValueError("image must be finite (found NaN or inf)")
    with using(threads):
        block = image_block(comm, rows.reshape(-1), ncols, nrows, (g0, p0, p1, g1), report)
    return PersistenceDiagram(comm, 2, block, min_persistence, [], dims=range(2))


def _agree_shape(comm, shape) -> None:
    """Refuse images of different shapes on different ranks, on every rank.
    Collective on ``comm``."""
    if comm.Get_size() == 1:
        return
    shapes = comm.allgather(tuple(int(s) for s in shape))
    with agreed(comm):
        if any(s != shapes[0] for s in shapes):
            raise ValueError("every rank must pass the same image; got shapes %s"
                             % ", ".join(str(s) for s in shapes))


def _check_image(arr: np.ndarray) -> np.ndarray:
    """``arr`` if it is a non-empty 2-D array of real numbers. Not collective."""
    if arr.dtype.kind not in "fiub":
        raise TypeError("image must be real numbers, got dtype %s" % arr.dtype)
    if arr.ndim != 2:
        raise ValueError("image must be 2-D (rows, columns), got shape %s%s"
                         % (arr.shape, "; for a volume make a Grid((nx, ny, nz), comm, "
                            "complex='cubical')" if arr.ndim == 3 else ""))
    if arr.size == 0:
        raise ValueError("image is empty: shape %s" % (arr.shape,))
    return arr


def image_block(comm, values: np.ndarray, ncols: int, nrows: int, rows, report) -> dict:
    """This rank's block of the sorted diagram of an image.

    ``values`` are the float64 pixels of rows ``g0 .. g1-1`` in row order,
    where ``rows = (g0, p0, p1, g1)``: the rank owns rows ``p0 .. p1-1``
    and holds the row on each side of them (if any), and the ranks' slabs
    are contiguous and in rank order. Collective on ``comm``.
    """
    g0, p0, p1, g1 = rows
    W = ncols
    a, b = p0 - g0, p1 - g0
    sides = int(p0 > g0) | int(g1 > p1) << 1 | int(p0 == 0) << 2 | int(p1 == nrows) << 3
    # positions as int32 when they fit: the pointers are most of the memory traffic
    itype = np.int32 if values.size < 2 ** 31 - 1 else np.int64
    ptr0 = np.empty(values.size + 1, itype)
    ptr1 = np.empty(values.size + 1, itype)
    (nodes0, links0), (nodes1, links1) = _link_tables()
    cand0, term0, cand1, term1 = slab_scan(values, W, a, b, sides, links0, links1, ptr0, ptr1)
    first = g0 * W
    cols, events = [], []
    for reverse, ptr, cand, term, nodes in ((False, ptr0, cand0, term0, nodes0),
                                            (True, ptr1, cand1, term1, nodes1)):
        # labels in the sweep's order: the older a component, the smaller
        term = term[_sweep_order(values, term, itype)]
        if reverse:
            term = term[::-1]
            ptr[-1] = -1                # the apex: label 0
        slab_labels(ptr, a * W, b * W, term, int(reverse))
        tpix = np.concatenate(([-1], term)) if reverse else term
        pix, labels = candidate_labels(values, W, a, b, cand, _sweep_order(values, cand, itype),
                                       ptr, reverse, nodes, sides, 9 if reverse else 4)
        born, died, sealed, *ev = slab_sweep(values, W, a, b, pix, labels, ptr, tpix, reverse,
                                             nodes, sides)
        if not reverse:
            # (dim, birth, death, birth vertex, death vertex) of what this rank decided
            cols += [(0, values[born], values[died], born + first, died + first),
                     (0, values[sealed], np.full(sealed.size, np.inf), sealed + first,
                      np.full(sealed.size, -1, np.int64))]
        else:
            # a maximum's class (born at the saddle) dies at the maximum
            cols.append((1, values[died], values[born], died + first, born + first))
        events.append(ev)
    del ptr0, ptr1
    if comm.Get_size() > 1:
        cols += _decide_events(comm, values, first, *events, W, row_ranges(nrows, comm.Get_size()))
    block = _sorted_blocks(comm, cols, nrows * ncols)
    if report:
        fin = np.isfinite(block["death"])
        d0 = block["dim"] == 0
        c = np.array([np.count_nonzero(d0 & fin), np.count_nonzero(d0 & ~fin),
                      np.count_nonzero(~d0)], np.int64)
        if comm.Get_size() > 1:
            comm.Allreduce(MPI.IN_PLACE, c, op=MPI.SUM)
        report("D0: %d pairs, %d essential", c[0], c[1])
        report("D1: %d pairs", c[2])
    return block


def _sweep_order(values, pixels, itype) -> np.ndarray:
    """The order of ``pixels`` (ascending positions) by ``(value,
    position)``. Not collective."""
    return radix_order(float_keys(values[pixels]), np.empty(pixels.size, itype))


@functools.lru_cache(maxsize=None)
def _link_tables():
    """``(nodes, links)`` of the sublevel sweep (the axis neighbours, joined
    through the squares of the lower star) and of the superlevel sweep (the
    dual graph's 8 neighbours): ``nodes`` a mask of the graph's neighbours
    among :data:`NEIGHBOURS_8`, ``links[mask]`` the number of components of
    the link spanned by the neighbours in ``mask``
    (:func:`topology.morse.cubical_link_graph`). Not collective."""
    out = []
    for dual in (False, True):
        full, nodes, edges = cubical_link_graph(2, dual)
        links = np.zeros(256, np.int64)
        for mask in range(256):
            low = [(mask >> j) & 1 == 1 for j in range(8)]
            parent = list(range(8))

            def root(j):
                while parent[j] != j:
                    j = parent[j]
                return j
            for i, j, far in edges.tolist():
                if low[i] and low[j] and (far < 0 or low[far]):
                    parent[root(i)] = root(j)
            links[mask] = len({root(j) for j in nodes.tolist() if low[j]})
        out.append((sum(1 << j for j in nodes.tolist()), links))
    return tuple(out)


def _decide_events(comm, values, first, lo, hi, W, cut) -> list:
    """The pairs of the events the slabs could not decide, as diagram
    columns on the ranks that own their births. Collective on ``comm``:
    one gather of the events to rank 0, which decides them, and one
    scatter of the pairs."""
    def named(events):
        ev, ptr, parts = events
        gid = np.where(parts >= 0, parts + first, -1)
        return (ev + first, values[ev], np.diff(ptr), gid, values[np.maximum(parts, 0)])

    got = comm.gather((named(lo), named(hi)), root=0)
    out = None
    if comm.Get_rank() == 0:
        d0 = _event_pairs([g[0] for g in got], reverse=False)
        d1 = _event_pairs([g[1] for g in got], reverse=True)
        bg, bv, dg, dv, ess_g, ess_v = d0
        mg, mv, sg, sv, _, _ = d1             # a maximum's class dies at a saddle
        cols = [(0, bv, dv, bg, dg), (0, ess_v, np.full(ess_g.size, np.inf), ess_g,
                                      np.full(ess_g.size, -1, np.int64)),
                (1, sv, mv, sg, mg)]
        # each pair to the rank that owns its birth pixel
        out = [[] for _ in range(comm.Get_size())]
        for dim, birth, death, bvert, dvert in cols:
            owner = np.searchsorted(cut * W, bvert, side="right") - 1
            for r in range(comm.Get_size()):
                m = owner == r
                out[r].append((dim, birth[m], death[m], bvert[m], dvert[m]))
    return comm.scatter(out, root=0)


def _event_pairs(events, reverse: bool):
    """The elder rule over every slab's events (rank 0). Returns the
    pairs ``(born id, born value, died id, died value)`` and the births of
    the classes that never die (the apex's not included)."""
    ev_g = np.concatenate([e[0] for e in events])
    ev_v = np.concatenate([e[1] for e in events])
    counts = np.concatenate([e[2] for e in events])
    part_g = np.concatenate([e[3] for e in events])
    part_v = np.concatenate([e[4] for e in events])
    # the nodes: every pixel named, in the sweep's order
    gid = np.concatenate((ev_g, part_g))
    val = np.concatenate((ev_v, part_v))
    keep = gid >= 0
    gid, val = gid[keep], val[keep]
    o = np.lexsort((gid, val))
    gid, val = gid[o], val[o]
    first = np.ones(gid.size, bool)
    first[1:] = gid[1:] != gid[:-1]         # a pixel's copies are next to each other
    gid, val = gid[first], val[first]
    m = gid.size
    age = np.arange(m, dtype=np.int64)
    if reverse:
        age = m - 1 - age
    apex = m
    age = np.append(age, -1)
    # node of each pixel: its place in the sorted (value, id) list
    pos = np.argsort(gid)
    sg = gid[pos]

    def node(g):
        out = pos[np.searchsorted(sg, np.maximum(g, 0))]
        return np.where(g >= 0, out, apex)

    ev_n = node(ev_g)
    part_n = node(part_g)
    ptr = np.zeros(counts.size + 1, np.int64)
    np.cumsum(counts, out=ptr[1:])
    o = np.argsort(ev_n, kind="stable")
    if reverse:
        o = o[::-1]
    starts, stops = ptr[:-1][o], ptr[1:][o]
    nptr = np.zeros(o.size + 1, np.int64)
    np.cumsum(stops - starts, out=nptr[1:])
    # the participants of the events in that order
    idx = np.repeat(starts - nptr[:-1], stops - starts) + np.arange(nptr[-1])
    born, died, roots = event_elder(ev_n[o], nptr, part_n[idx], age)
    gid_x = np.append(gid, -1)
    val_x = np.append(val, np.inf)
    roots = roots[roots != apex]
    return (gid_x[born], val_x[born], gid_x[died], val_x[died], gid_x[roots], val_x[roots])


def _sorted_blocks(comm, cols, n: int) -> dict:
    """The rows ``(dim, birth, death, birth_vertex, death_vertex)`` of every
    rank, sorted by ``(dim, birth_vertex, death_vertex)``: this rank's block
    of ``block_ranges`` of the whole. Each rank's rows are the pairs born
    in its slab, so sorting them locally puts them in place; one
    all-to-all cuts the blocks. Collective on ``comm``."""
    dim = np.concatenate([np.full(c[1].size, c[0], np.int64) for c in cols])
    birth = np.concatenate([np.asarray(c[1], np.float64) for c in cols])
    death = np.concatenate([np.asarray(c[2], np.float64) for c in cols])
    bv = np.concatenate([np.asarray(c[3], np.int64) for c in cols])
    dv = np.concatenate([np.asarray(c[4], np.int64) for c in cols])
    if n < 2 ** 30:
        key = (dim * n + bv) * (n + 1) + (dv + 1)
        o = np.argsort(key)
    else:
        o = np.lexsort((dv, bv, dim))
    dim, birth, death, bv, dv = dim[o], birth[o], death[o], bv[o], dv[o]
    size = comm.Get_size()
    if size > 1:
        mine = np.array([np.count_nonzero(dim == 0), np.count_nonzero(dim == 1)], np.int64)
        counts = np.empty((size, 2), np.int64)
        comm.Allgather(mine, counts)
        before = np.concatenate(([0], np.cumsum(counts.sum(axis=0))[:-1]))
        offset = before + counts[:comm.Get_rank()].sum(axis=0)
        pos = np.where(dim == 0, offset[0], offset[1] - mine[0]) + np.arange(dim.size)
        cut = block_ranges(int(counts.sum()), size)
        dest = np.searchsorted(cut, pos, side="right") - 1
        rows = np.column_stack((pos, dim, birth.view(np.int64), death.view(np.int64), bv, dv))
        o = np.argsort(dest, kind="stable")
        rows = np.ascontiguousarray(rows[o])
        send = np.bincount(dest, minlength=size).astype(np.int64)
        recv = np.empty(size, np.int64)
        comm.Alltoall(send, recv)
        got = np.empty((int(recv.sum()), 6), np.int64)
        comm.Alltoallv([rows, send * 6], [got, recv * 6])
        placed = np.empty_like(got)
        placed[got[:, 0] - cut[comm.Get_rank()]] = got
        dim, bv, dv = placed[:, 1].copy(), placed[:, 4].copy(), placed[:, 5].copy()
        birth, death = placed[:, 2].view(np.float64).copy(), placed[:, 3].view(np.float64).copy()
    return {"dim": dim, "birth": birth, "death": death, "birth_vertex": bv, "death_vertex": dv}
