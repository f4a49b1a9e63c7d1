"""D1 of 3D data out of core: the Morse complex of the lower-star gradient
built slab by slab, its V-paths followed across slabs, then reduced.

Each virtual slab computes the discrete gradient of the lower stars of its
own vertices from its planes and one ghost plane on each side: a lower star
depends on the star of its vertex only, so these pairs are those of the
in-memory gradient. On its first turn a slab lists its critical cells
(named as the in-memory complex names them: top vertex and star slot, keyed
by the ``(value, id)`` of their vertices) and starts the V-paths of the
Morse complex from them: down from the ends of each critical edge to the
minima (D0), up from the cofacets of each critical triangle to the critical
tetrahedra or the outside (D2), and down from the edges of each critical
triangle to the critical edges (D1, mod 2). The kernels of the in-memory
complex (:func:`topology.morse.descend_vertices`, ``ascend_tets``,
``descend_edges``) follow a path until it enters the lower star of a vertex
of another slab; the path is then sent to that slab, which reads its gradient
back from a spill file (written on its first turn) on its next turn and
follows the paths it received, until no path is left anywhere. Only one
slab's gradient is in memory at a time; the
paths' ends and the critical cells are the Morse complex, far smaller than
the field for a field that is not noise.

The pairs then come from the Morse complex as in memory
(:func:`topology.persistence.pairs_from_paths`): the D0 and D2 elder rules
decide which critical edges create a 1-cycle and which critical triangles
are walls, and the walls' boundaries are reduced by
:func:`topology.persistence.reduce_z2`.

References
----------
P. Guillou, J. Vidal and J. Tierny, "Discrete Morse Sandwich: fast
computation of persistence diagrams for scalar data", IEEE TVCG 29(4), 2023.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
from mpi4py import MPI

from dmsolve.bsp import BSP, isin_sorted, sorted_unique, stable_argsort

from ..morse import (DiscreteGradient, GridStars, ascend_tets, descend_edges, descend_vertices, locate_edges,
                     locate_tets, simplicial_gradient, triangle_cofacets)
from ..persistence import essential_part, pairs_from_paths, total
from ._slabs import _context, _slab_bounds

__all__ = ["ooc_saddle_parts", "value_keys", "key_values"]

#: the int64 that flips every bit of a negative float's pattern but the sign
_FLIP = np.int64(0x7FFFFFFFFFFFFFFF)

#: widths of the path rows each kind sends: (query, vertex) for D0, (query,
#: max, a, b, c) of a tet for D2, (query, max, other) of an edge for D1
_WIDTH = {"d0": 2, "d2": 5, "d1": 3}


def value_keys(values) -> np.ndarray:
    """int64 keys in the order of float ``values`` (``-0.0`` as ``0.0``):
    the bit patterns, negative ones with their magnitude bits flipped. Not
    collective."""
    bits = (np.asarray(values, np.float64) + 0.0).view(np.int64)
    return np.where(bits < 0, bits ^ _FLIP, bits)


def key_values(keys) -> np.ndarray:
    """The floats of :func:`value_keys`. Not collective."""
    keys = np.asarray(keys, np.int64)
    return np.where(keys < 0, keys ^ _FLIP, keys).view(np.float64)


class _SlabView:
    """What :class:`topology.morse.GridStars` reads of a grid, for one
    virtual slab: its own planes ``[a, b)`` and one ghost plane on each side.
    Not collective."""

    comm = MPI.COMM_SELF

    def __init__(self, grid, a: int, b: int):
        nz = grid.shape[-1]
        self.grid = grid
        self.shape, self.dimension, self.plane_size = grid.shape, grid.dimension, grid.plane_size
        self.owned_planes = (a, b)
        self.ghosted_planes = (max(a - 1, 0), min(b + 1, nz))

    def ghosted_ids(self) -> np.ndarray:
        g0, g1 = self.ghosted_planes
        return np.arange(g0 * self.plane_size, g1 * self.plane_size, dtype=np.int64)

    def coordinates(self, ids) -> np.ndarray:
        return self.grid.coordinates(ids)


class SlabGradient:
    """The lower-star gradient of one virtual slab's own vertices, from its
    planes and their ghost planes (read from ``source``), with the star tables
    the path kernels take. ``saved``: the arrays of :meth:`arrays` of an
    earlier turn (the gradient is not computed again). Not collective."""

    #: the names of :meth:`arrays`: the vertex order of the read planes and the codes
    SAVED = ("order", "vp", "ep", "tp", "tt", "qp")

    def __init__(self, grid, source, a: int, b: int, saved: dict | None = None):
        view = _SlabView(grid, a, b)
        g0, g1 = view.ghosted_planes
        vals = source.read(g0, g1)
        if saved is None:
            seq = stable_argsort(vals)         # the (value, id) order of the read planes
            order = np.empty(seq.size, np.int64)
            order[seq] = np.arange(seq.size)
            del seq
        else:
            order = saved["order"]
        self.S = S = GridStars(view, order)
        self.order = order
        if saved is None:
            self.G = simplicial_gradient(view, None, S)
        else:
            self.G = DiscreteGradient(view, None, S, tuple(saved[k] for k in self.SAVED[1:]))
        self.st = S.table()
        self.base = g0 * grid.plane_size
        self.vkey = value_keys(vals)
        self.mult = (1, S.emax, S.tmax, S.qmax)

    def arrays(self) -> dict:
        """What a later turn needs to rebuild this gradient without computing it."""
        G = self.G
        return dict(zip(self.SAVED, (self.order, G.vp, G.ep, G.tp, G.tt, G.qp)))

    def cell_positions(self, d: int, i, s) -> np.ndarray:
        """Positions (k, d+1) of the vertices of cells (own index ``i``, slot
        ``s``), the top vertex first."""
        S = self.S
        p = S.P[i]
        if d == 0:
            cols = [p]
        elif d == 1:
            cols = [p, S.nbr(i, s)]
        else:
            nb = S.tri(i, s) if d == 2 else S.tet(i, s)
            nb = nb.reshape(-1, d)
            cols = [p] + [S.nbr(i, nb[:, r]) for r in range(d)]
        return np.stack(cols, axis=1).reshape(-1, d + 1)

    def critical(self, d: int):
        """``(i, s, rows)`` of the slab's critical d-cells: rows ``(code, top,
        key...)``, the key the ``(value key, id)`` of the cell's vertices in
        descending order (rows compare as the cells do in the filtration)."""
        S = self.S
        i, s = self.G.local_critical(d)
        pos = self.cell_positions(d, i, s)
        o = np.argsort(-S.O[pos], axis=1)
        pos = np.take_along_axis(pos, o, axis=1)
        gid = S.layout_index[pos]
        key = np.empty((pos.shape[0], 2 * (d + 1)), np.int64)
        key[:, 0::2] = self.vkey[gid - self.base]
        key[:, 1::2] = gid
        top = S.layout_index[S.P[i]]
        return i, s, np.column_stack((top * self.mult[d] + s, top, key))

    # -- the starts of the paths (the first turn)
    def start_d0(self, code, i, s):
        S = self.S
        q = np.concatenate((code * 2, code * 2 + 1))
        pos = np.concatenate((S.P[i], S.nbr(i, s)))
        return self.advance_d0(q, pos)

    def start_d2(self, code, i, s):
        sq, sp, ss, oq, xr = triangle_cofacets(self.st, code, i, s)
        done, exits = self.advance_d2(sq, sp, ss)
        done = np.concatenate((np.column_stack((oq, np.full(oq.size, -1, np.int64))), done))
        return done, np.concatenate((xr, exits))

    def start_d1(self, code, i, s):
        S, st = self.S, self.st
        nb, top, oth, mine = S.triangle_edges(i, s)
        q = np.concatenate((code, code, code[mine]))
        pos = np.concatenate((S.P[i], S.P[i], top[mine]))
        slot = np.concatenate((nb[:, 0], nb[:, 1], locate_edges(st, top[mine], oth[mine])))
        xr = np.column_stack((code[~mine], S.layout_index[top[~mine]],
                              S.layout_index[oth[~mine]]))
        done, exits = self.advance_d1(q, pos, slot)
        return done, np.concatenate((xr, exits))

    # -- following paths through the slab: (done rows, exit rows)
    def advance_d0(self, q, pos):
        rq, rg, xq, xg = descend_vertices(self.st, self.G.vp, q, pos)
        return np.column_stack((rq, rg)), np.column_stack((xq, xg))

    def advance_d2(self, q, pos, slot):
        rq, rc, xq, x4 = ascend_tets(self.st, self.G.qp, self.S.qmax, q, pos, slot)
        return np.column_stack((rq, rc)), np.column_stack((xq, x4))

    def advance_d1(self, q, pos, slot):
        # a query's edges in one run, where their copies cancel mod 2
        o = stable_argsort(q)
        rq, rc, xq, x2 = descend_edges(self.st, self.G.ep, self.G.tt, self.S.emax, q[o],
                                       pos[o], slot[o])
        return np.column_stack((rq, rc)), np.column_stack((xq, x2))

    # -- paths arriving from other slabs
    def arrive(self, kind: str, rows):
        S, st = self.S, self.st
        q = rows[:, 0].copy()
        if kind == "d0":
            return self.advance_d0(q, S.positions(rows[:, 1]))
        if kind == "d2":
            pos4 = S.positions(rows[:, 1:]).reshape(-1, 4)
            return self.advance_d2(q, pos4[:, 0].copy(), locate_tets(st, pos4))
        p2 = S.positions(rows[:, 1:]).reshape(-1, 2)
        pos = p2[:, 0].copy()
        return self.advance_d1(q, pos, locate_edges(st, pos, p2[:, 1]))


def _append(state, name, rows, width):
    rows = np.asarray(rows, np.int64).reshape(-1, width)
    state[name] = np.concatenate((state[name], rows)) if name in state else rows


def ooc_morse_paths(grid, source, report):
    """This rank's share of the Morse complex of a 3D out-of-core grid:
    ``(crit, d0, d2, d1, mult)``, the critical cells of each dimension as
    ``dict(code, top, key)`` and the ends of the V-paths of each kind (see
    the module's docstring). Collective on ``grid.comm``: one virtual
    superstep per slab boundary the longest path crosses, plus one."""
    bounds = _slab_bounds(grid)
    starts = np.array([a for a, _ in bounds], np.int64)
    ps = grid.plane_size
    mult = [None]

    def dest(rows):
        return np.searchsorted(starts, rows[:, 1] // ps, side="right") - 1

    def turn(vp, state, inbox):
        a, b = bounds[vp]
        got = {}
        if ctx.step > 0:
            got = {k: inbox.concat(tags[k], dtype=np.int64, shape=(w,))
                   for k, w in _WIDTH.items()}
            got = {k: r for k, r in got.items() if r.size}
        if a == b or (ctx.step > 0 and not got):
            return
        path = os.path.join(spill, "slab%d-%%s.npy" % vp)
        saved = None
        if ctx.step > 0:
            # .npy files, not one .npz: a zip's checksums cost more than the reads
            saved = {k: np.load(path % k) for k in SlabGradient.SAVED}
        slab = SlabGradient(grid, source, a, b, saved)
        mult[0] = slab.mult
        out = {}
        if ctx.step == 0:
            cells = [slab.critical(d) for d in range(4)]
            for d, (_, _, rows) in enumerate(cells):
                state["crit%d" % d] = rows
            out["d0"] = slab.start_d0(cells[1][2][:, 0], cells[1][0], cells[1][1])
            for k, start in (("d2", slab.start_d2), ("d1", slab.start_d1)):
                out[k] = start(cells[2][2][:, 0], cells[2][0], cells[2][1])
        else:
            out = {k: slab.arrive(k, rows) for k, rows in got.items()}
        for k, (done, exits) in out.items():
            _append(state, k, done, 2)
            if exits.size:
                exits = exits.astype(np.int64)
                d = dest(exits)
                for t in np.unique(d):
                    ctx.send(int(t), np.ascontiguousarray(exits[d == t]), tags[k])
        # kept on disk for the slab's next turns with paths: paths that wander
        # across slabs come back many times, and reading the codes back costs
        # less than pairing the lower stars again (the state's spill file would
        # be read on every turn, with paths or without)
        if saved is None:
            for k, arr in slab.arrays().items():
                np.save(path % k, arr)

    with _context(grid) as ctx, tempfile.TemporaryDirectory(prefix="dmsolve-morse-",
                                                            dir=grid.spill_dir) as spill:
        t = ctx.tags(*_WIDTH)
        tags = {k: getattr(t, k) for k in _WIDTH}
        for vp in ctx.processors:
            ctx.set_state(vp)
        steps = ctx.run_supersteps(turn, label="morse paths")
        report("D1: V-paths followed across slabs in %d supersteps", steps)
        states = [ctx.state(vp) for vp in ctx.processors]
    crit = {}
    for d in range(4):
        rows = [s["crit%d" % d] for s in states if "crit%d" % d in s]
        rows = np.concatenate(rows) if rows else np.zeros((0, 2 + 2 * (d + 1)), np.int64)
        crit[d] = dict(code=rows[:, 0].copy(), top=rows[:, 1].copy(),
                       key=np.ascontiguousarray(rows[:, 2:]))
    ends = []
    for k in ("d0", "d2", "d1"):
        rows = [s[k] for s in states if k in s]
        rows = np.concatenate(rows) if rows else np.zeros((0, 2), np.int64)
        ends.append((rows[:, 0].copy(), rows[:, 1].copy()))
    # every slab's stencil is the grid's: the same star slots everywhere
    m = grid.comm.allgather(mult[0])
    mult = next((x for x in m if x is not None), (1, 14, 36, 24))
    return crit, ends[0], ends[1], ends[2], tuple(int(x) for x in mult)


def _routed_walls(d1):
    """``wall_paths`` for :func:`pairs_from_paths`: the D1 path ends
    ``(triangle code, edge code)`` sent to the owner of the triangle and kept
    where the triangle is a wall. Collective."""
    def wall_paths(mc, wall):
        ctx = BSP(mc.comm)
        tag = ctx.tags("walls")
        tq, ec = d1
        ctx.send_rows(mc.layout.owner(tq // mc.mult[2]), np.column_stack((tq, ec)),
                      tag=tag.walls)
        got = ctx.sync("ooc:walls").concat(tag.walls, dtype=np.int64, shape=(2,))
        keep = isin_sorted(got[:, 0], sorted_unique(mc.crit[2]["code"][wall]))
        return [(got[keep, 0].copy(), got[keep, 1].copy())]
    return wall_paths


def _values_at(comm, layout, gid, val, query) -> np.ndarray:
    """The values of vertices ``query`` from the ranks owning them, whose
    ``(gid, val)`` tables (``gid`` sorted, unique) hold them. Collective
    on ``comm``: two supersteps."""
    ctx = BSP(comm)
    tag = ctx.tags("ask", "answer")
    rank = comm.Get_rank()
    idx = np.arange(query.size, dtype=np.int64)
    ctx.send_rows(layout.owner(query), np.column_stack((query, idx, np.full(query.size, rank,
                                                                               np.int64))),
                  tag=tag.ask)
    got = ctx.sync("ooc:values").concat(tag.ask, dtype=np.int64, shape=(3,))
    at = np.searchsorted(gid, got[:, 0])
    ctx.send_rows(got[:, 2], np.column_stack((got[:, 1], val[at].view(np.int64))),
                  tag=tag.answer)
    back = ctx.sync("ooc:values").concat(tag.answer, dtype=np.int64, shape=(2,))
    out = np.empty(query.size, np.float64)
    out[back[:, 0]] = back[:, 1].view(np.float64)
    return out


def ooc_saddle_parts(grid, source, report) -> list:
    """D1 of a 3D out-of-core grid (finite pairs and essential classes) as
    diagram parts ``(1, birth, death, birth_vertex, death_vertex)``, from the
    Morse complex built slab by slab. Collective on ``grid.comm``."""
    comm = grid.comm
    crit, d0, d2, d1, mult = ooc_morse_paths(grid, source, report)
    # the value of every critical edge's and triangle's top vertex, by id
    tops = np.concatenate((crit[1]["top"], crit[2]["top"]))
    vals = key_values(np.concatenate((crit[1]["key"][:, 0], crit[2]["key"][:, 0])))
    gid, first = np.unique(tops, return_index=True)
    val = vals[first]
    res = pairs_from_paths(comm, grid.vertex_layout, crit, mult, d0, d2, _routed_walls(d1),
                           gather=False)
    pairs, essential = res.pairs[1], res.essential[1]
    v = _values_at(comm, grid.vertex_layout, gid, val,
                   np.concatenate((pairs.ravel(), essential)).astype(np.int64))
    k = pairs.size
    pv = v[:k].reshape(-1, 2)
    report("D1: %d pairs, %d essential", total(comm, pairs.shape[0]), total(comm, essential.size))
    ess = essential_part(1, essential, essential, v[k:])
    return [(1, pv[:, 0], pv[:, 1], pairs[:, 0], pairs[:, 1]), ess[:5]]
