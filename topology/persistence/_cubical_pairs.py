"""D0, D1 and D2 of a 3D cubical grid from the Morse complex of its discrete
gradient (Discrete Morse Sandwich on the cubical complex): V-paths followed
where the gradient lives, the elder rule at the owners of their ends, and
the walls' boundaries reduced where they live."""

from __future__ import annotations

import time

import numpy as np

from dmsolve import DistVector, Layout
from dmsolve.bsp import BSP, isin_sorted, sorted_unique, stable_argsort
from dmsolve.threads import parallel_map

from ..core import fetch_rows
from ..kernels import run_blocks
from ..morse import (SLOTS, code_vertex, cubical_ascend_cubes, cubical_descend_edges,
                     cubical_descend_vertices, cubical_edge_ends, cubical_from_global,
                     cubical_gradient, cubical_square_sides, follow_paths)
from ._elder import APEX, elder
from ._morse_complex import agreed_call, odd_column_rows, odd_rows, place_cells, z2_columns
from ._reduction import reduce_z2

__all__ = ["cubical_morse_pairs"]


# -- the diagram from the Morse complex --------------------------------------------------
def cubical_morse_pairs(grid, order: DistVector, progress=None):
    """D0, D1 and D2 of a 3D cubical grid from the Morse complex of its
    discrete gradient (Discrete Morse Sandwich on the cubical complex).

    Returns ``(pairs, minima, stats)``: ``pairs[d]`` the finite pairs of
    dimension ``d`` as (birth, death) vertex layout indices, and ``minima``
    the births of the essential 0-classes, each left on the rank whose share
    of the reduction found them (a grid is a ball: no other essential class).

    The steps of :func:`topology.persistence.morse_persistence` on the cubical complex:

    1. D0: each critical edge's two vertices flow down their vertex-edge
       pairs to minima; the elder rule over these (minimum, edge) entries
       (the distributed union-find of :func:`topology.persistence.sweep`, each
       critical edge a time of its own) gives the pairs, and the edges that
       kill no component (positive edges);
    2. D2: each critical square's cofacets flow up their cube-square pairs to
       a critical cube or out of the grid; the squares' coboundaries reduced
       in reverse filtration order (the outside a cube born last) give the
       pairs and the squares that create no 2-class (walls);
    3. D1: the walls' Morse boundaries (critical edges reached by the edge
       V-paths, mod 2), reduced in filtration order against the positive
       edges (an edge that merges components is never the pivot of a
       reduced column).

    A cell's filtration key is its top vertex's order, then the step of the
    lower star at which it was made critical: a refinement of the
    V-construction's filtration by value, so the pairs with death above
    birth are those of gudhi's ``CubicalComplex(vertices=...)``.
    Collective on ``grid.comm``; V-paths cross rank boundaries in BSP
    supersteps (:func:`topology.morse.follow_paths`).
    """
    comm = grid.comm
    layout = grid.vertex_layout
    t0 = time.perf_counter()
    G = cubical_gradient(grid, order)
    if progress:
        progress("discrete gradient: critical cells %s", G.critical_counts())
    O, C, geom = G.O, G.C, G.geometry
    crit = {0: G.local_critical(0)}        # finds the critical cells, once
    # numpy releases the GIL in the masks: the other dimensions' copies at once
    crit.update(zip((1, 2, 3), parallel_map(lambda b: G.local_critical(b + 1), 3)))
    G.forget_critical()                 # the split copies are all that is read on
    stats = {"gradient_s": time.perf_counter() - t0}
    empty3 = np.zeros((0, 3), np.int64)

    def arrive(rows):
        return rows[:, 0].copy(), cubical_from_global(geom, rows[:, 2].copy())

    # -- filtration positions: edges forwards, squares backwards (the D1 reduction's)
    sup = [0]
    eplace, tplace = place_cells(comm, [crit[1][2].reshape(-1, 1), -crit[2][2].reshape(-1, 1)],
                            [code_vertex(crit[d][1]) for d in (1, 2)], sup)
    ctx = BSP(comm)
    tag = ctx.tags("rows", "columns")

    # -- D0: the minima at both ends of every critical edge, then the elder
    # rule over (minimum, edge) entries at each edge's owner, every edge a
    # time of its own (keys order * SLOTS + step: minima at step 0)
    n = order.global_size
    epos, ecode, ekey = crit[1]

    def down_v(q, pos):
        rq, rc, xq, xv, xg = run_blocks(cubical_descend_vertices, (O, geom, C), (q, pos))
        return (rq, rc), np.column_stack((xq, xv, xg))

    d0, _ = follow_paths(comm, layout, down_v, arrive,
                         (np.repeat(ecode, 2), cubical_edge_ends(geom, epos).ravel()),
                         empty3, label="cubical:minima")
    deaths, survivors = _elder_at_owners(comm, layout, d0, (ecode, ekey), crit[0][2],
                                         n=SLOTS * n, place=eplace, ctx=ctx)
    names = _VertexAt(order, layout)            # built after the elder rule's peak
    at = names(np.concatenate((deaths.ravel() // SLOTS, survivors // SLOTS)))
    k = deaths.size
    pairs = {0: at[:k].reshape(-1, 2)}
    minima = at[k:]
    positive = _alive(comm, layout, ctx, ekey, deaths[:, 1], pairs[0][:, 1])
    # what D0 alone needed goes now, before D2 and D1 allocate theirs
    del d0, deaths, survivors, at, epos, ekey
    crit[0] = crit[1] = None
    stats["d0_s"] = time.perf_counter() - t0

    # -- D2: the critical cubes (or the outside, the apex) above each critical
    # square, then the elder rule in reverse order (keys SLOTS n - 1 - key)
    spos, scode, skey = crit[2]
    start = cubical_square_sides(geom, spos)[0].ravel()
    sq = np.repeat(scode, 2)
    out = start < 0
    done = [(sq[out], np.full(int(out.sum()), -1, np.int64))]

    def up(q, pos):
        rq, rc, xq, xv, xg = run_blocks(cubical_ascend_cubes, (O, geom, C), (q, pos))
        return (rq, rc), np.column_stack((xq, xv, xg))

    d2, _ = follow_paths(comm, layout, up, arrive, (sq[~out], start[~out]), empty3,
                         label="cubical:maxima")
    top = SLOTS * n - 1
    d2 = [(q, np.where(c >= 0, top - c, APEX)) for q, c in done + d2]
    deaths, _ = _elder_at_owners(comm, layout, d2, (scode, top - skey), top - crit[3][2],
                                 n=SLOTS * n, place=tplace, ctx=ctx)
    at = names((top - deaths.ravel()) // SLOTS)
    pairs[2] = at.reshape(-1, 2)[:, ::-1]
    wall = _alive(comm, layout, ctx, top - skey, deaths[:, 1], pairs[2][:, 0])
    del d2, done, deaths, at, start, sq, out, names, skey
    crit[2] = crit[3] = None
    stats["d2_s"] = time.perf_counter() - t0

    # -- D1: the walls' Morse boundaries, reduced against the positive edges
    widx = np.flatnonzero(wall)

    def down_e(q, pos):
        o = stable_argsort(q)
        q = q[o]
        # a query's items stay in one block, where their copies cancel before
        # they are expanded (split, the mod-2 sums would be the same, slower)
        rq, rc, xq, xv, xg = run_blocks(cubical_descend_edges, (O, geom, C), (q, pos[o]),
                                        groups=q)
        return (rq, rc), np.column_stack((xq, xv, xg))

    d1, _ = follow_paths(comm, layout, down_e, arrive,
                         (np.repeat(scode[widx], 4),
                          cubical_square_sides(geom, spos[widx])[1].ravel()),
                         empty3,
                         label="cubical:walls")
    del G, O, C, spos           # the gradient's arrays (16 bytes per vertex) are done with
    got = _wall_entries(comm, layout, ctx, tag.rows, d1)
    eidx = agreed_call(comm, eplace.local_index, ecode, got[:, 1])
    eplace.forget()
    keep = positive[eidx]
    ctx.send_rows(layout.owner(code_vertex(got[keep, 0])),
                  np.column_stack((got[keep, 0], eplace.pos[eidx[keep]])), tag=tag.columns)
    got = ctx.sync("cubical:d1-columns").concat(tag.columns, dtype=np.int64, shape=(2,))
    col = np.full(wall.size, -1, np.int64)
    col[widx] = np.arange(widx.size)
    ptr, rows = z2_columns(col[agreed_call(comm, tplace.local_index, scode, got[:, 0])], got[:, 1],
                         widx.size)
    tplace.forget()
    del got, col
    nt = tplace.global_size
    red1 = reduce_z2(ptr, rows, nt - 1 - tplace.pos[widx], eplace.global_size, comm,
                     labels=code_vertex(scode[widx]), row_ranges=eplace.ranges)
    pairs[1] = np.column_stack((eplace.top_of(red1.pair_rows), red1.pair_labels))
    stats["total_s"] = time.perf_counter() - t0
    pairs = {d: p.astype(np.int64).reshape(-1, 2) for d, p in pairs.items()}
    return pairs, minima.astype(np.int64), stats


class _VertexAt:
    """The vertex layout index at positions of the global order: the inverse
    permutation, spread over the ranks by blocks of positions (on one rank,
    none: each call finds its positions' vertices in one pass over the
    order). Building it is one superstep (each rank sends its vertices'
    ``(position, index)``; a :class:`topology.core.KeyTable` with the
    index alone); a call is two (:func:`topology.core.fetch_rows`).
    Collective on ``layout.comm`` to build and to call."""

    def __init__(self, order: DistVector, layout):
        self.comm = layout.comm
        self.blocks = Layout.block(order.global_size, self.comm)
        if self.comm.Get_size() == 1:
            # no inverse permutation of the whole grid: a call finds the
            # vertices at its positions in one pass over the order
            self.order, self.start = order.local, layout.start
            return
        index = np.arange(layout.start, layout.stop, dtype=np.int64)
        ctx = BSP(self.comm)
        tag = ctx.tags("inverse")
        ctx.send_rows(self.blocks.owner(order.local) if index.size else index,
                      np.column_stack((order.local, index)), tag=tag.inverse)
        got = ctx.sync("cubical:inverse-order").concat(tag.inverse, dtype=np.int64, shape=(2,))
        self.inverse = np.empty(self.blocks.local_size, np.int64)
        self.inverse[got[:, 0] - self.blocks.start] = got[:, 1]

    def __call__(self, keys) -> np.ndarray:
        keys = np.asarray(keys, np.int64)
        if self.comm.Get_size() == 1:
            want = np.zeros(self.order.size, bool)
            want[keys] = True
            hit = np.flatnonzero(want[self.order])      # the vertices at asked positions
            pos = self.order[hit]
            o = np.argsort(pos)                         # positions are distinct
            return hit[o][np.searchsorted(pos[o], keys)] + self.start
        return fetch_rows(self.blocks, self.inverse.reshape(-1, 1), keys)[:, 0]


def _wall_entries(comm, layout, ctx, tag, found) -> np.ndarray:
    """The ``(wall code, critical edge code)`` entries of the walls' Morse
    boundaries mod 2, each on the owner of its edge, sorted: ``found`` lists
    the edge V-paths' ends (emptied once read). On one rank every entry is
    found here. Collective on ``comm``."""
    bq, be = (np.concatenate(c) for c in zip(*found))
    found.clear()
    entries = odd_column_rows(bq, be)               # what cancels here need not travel
    del bq, be
    if comm.Get_size() == 1:
        return entries                              # odd and sorted already
    ctx.send_rows(layout.owner(code_vertex(entries[:, 1])), entries, tag=tag)
    del entries
    got = ctx.sync("cubical:d1-rows").concat(tag, dtype=np.int64, shape=(2,))
    return odd_rows(got)                # every entry of an edge is here: mod 2 is exact


def _elder_at_owners(comm, layout, found, cells, own_labels, *, n, place, ctx):
    """The elder rule over (label, cell) entries found by V-paths.

    ``found`` lists ``(cell code, label key)`` arrays (the V-paths' ends,
    wherever they were found); each entry goes to the cell's owner, which
    knows the cell's key among its ``cells = (codes, keys)`` (positions in
    ``place``). ``own_labels`` are the keys of this rank's labels (critical
    cells that start a class); keys are below ``n``. Returns ``(deaths,
    survivors)`` in key space, as :func:`elder`.
    Empties ``found`` once its entries are queued (they are the largest
    arrays of the call). Collective on ``comm``.
    """
    codes, keys = cells
    cols = [np.concatenate(c) for c in zip(*found)] if found else [np.zeros(0, np.int64)] * 2
    found.clear()
    rows = np.column_stack(cols)
    del cols
    tag = ctx.tags("entries")
    ctx.send_rows(layout.owner(code_vertex(rows[:, 0])), rows, tag=tag.entries)
    del rows
    got = ctx.sync("cubical:entries").concat(tag.entries, dtype=np.int64, shape=(2,))
    hi = keys[agreed_call(comm, place.local_index, codes, got[:, 0])]
    place.forget()
    lo = got[:, 1].copy()
    del got
    return elder(comm, n, lo, hi, own_labels)


def _alive(comm, layout, ctx, keys, dead_keys, dead_vertex) -> np.ndarray:
    """Whether each of this rank's cells (``keys``) is at no death: each death
    goes to the owner of its cell's top vertex. Collective on ``comm``."""
    tag = ctx.tags("deaths")
    ctx.send_rows(layout.owner(dead_vertex), np.asarray(dead_keys, np.int64), tag=tag.deaths)
    dead = ctx.sync("cubical:deaths").concat(tag.deaths, dtype=np.int64)
    return ~isin_sorted(keys, sorted_unique(dead))


