"""Out-of-core grid topology: critical points and the D0 / D(d-1) sweeps slab
by slab, on the virtual processors of :class:`dmsolve.bsp.VirtualBSP`.

A grid in out-of-core mode (``Grid(..., virtual=v)``) cuts each rank's slab
into ``v`` virtual slabs. In the first superstep each virtual processor
reads its planes and one ghost plane on each side (from a
:class:`RawField` or a vertex vector), classifies its vertices, and runs
the elder-rule sweep of the vertex graph over its planes and the plane
above, once upward (D0) and once downward over the graph coned over the
boundary (D(d-1), Alexander duality; the cone's apex is the oldest vertex).

A sweep of a piece of the graph settles every merge whose dying component
never touches the piece's *interface* (the planes it shares with other
pieces): such a component is a whole component of the global sublevel set,
and it dies globally where it dies locally, so its pair is final. The rest
of the piece is summarised by a *boundary tree*: the interface vertices,
the minima of the components that touch them, the merges between those,
and tree edges that give the same sublevel-set connectivity among these
nodes as the piece does (the merge tree reduced to them, Morozov and
Weber's local-global representation). Adjacent pieces are glued by
sweeping the union of their boundary trees, which share the vertices of
their common plane, and the new interface is the outer planes of the two.
The gluing goes up the binary tree of virtual processors: ``ceil(log2(p *
v))`` supersteps, after which no interface is left and every pair is final.

Only one virtual slab (and the boundary trees, a few planes each) is in
memory at a time; the staged trees and the pairs found go to the spill
files beyond the budget.

References
----------
D. Morozov and G. Weber, "Distributed merge trees", PPoPP 2013.
F. Dehne, W. Dittrich, D. Hutchinson and A. Maheshwari, "Bulk synchronous
parallel algorithms for the external memory model", Theory Comput. Syst.
35, 2002.
"""

from __future__ import annotations

import numpy as np

from dmsolve.bsp import BSP, stable_argsort
from dmsolve.jit import njit
from dmsolve.validate import agreed

from ..core import RawField, link_structure
from ..kernels import add_distinct, find_root
from ..morse import REGULAR, CriticalPoints, classify, slab_link_components

__all__ = ["ooc_critical_points", "ooc_pairs", "ooc_diagram_parts", "PlaneSource"]

#: global id of the cone's apex in the downward sweep
APEX_ID = -1


# -- the sweep kernels --------------------------------------------------------------------
@njit(inline="always")
def chunk_xyz(p, nx, plane):  # pragma: no cover
    """``(x, y, z)`` of chunk position ``p``."""
    z = p // plane
    rest = p - z * plane
    y = rest // nx
    return rest - y * nx, y, z


@njit(inline="always")
def chunk_step(x, y, z, off, nx, ny, nz):  # pragma: no cover
    """The chunk position of ``(x, y, z) + off``, or -1 outside the chunk."""
    xx = x + off[0]
    yy = y + off[1]
    zz = z + off[2]
    if xx < 0 or xx >= nx or yy < 0 or yy >= ny or zz < 0 or zz >= nz:
        return -1
    return (zz * ny + yy) * nx + xx


@njit(cache=True)
def _settle(v, roots, nr, isif_v, parent, cmin, att, iface, death, kept, up):  # pragma: no cover
    """The elder rule at node ``v`` (nodes in sweep order), whose lower
    neighbours lie in the components ``roots[:nr]``.

    A component dying at ``v`` without an interface node (``v`` included)
    gets its final pair (``death[min] = v``); one with an interface node is
    left to the gluing. Kept nodes (interface nodes, merges of two or more kept
    components, and the minimum of a component that meets a kept one) get
    ``kept``, and ``up[a] = v`` links kept node ``a`` to the kept node above
    it, so that the kept nodes stay connected as they are in the piece.
    """
    if nr == 0:
        parent[v] = v
        cmin[v] = v
        iface[v] = isif_v
        if isif_v:
            kept[v] = True
            att[v] = v
        else:
            att[v] = -1
        return
    o = roots[0]
    any_if = isif_v
    for t in range(nr):
        r = roots[t]
        if cmin[r] < cmin[o]:
            o = r
        if iface[r]:
            any_if = True
    nret = 0
    for t in range(nr):
        r = roots[t]
        if iface[r] or (r == o and any_if):
            nret += 1
    keep_v = isif_v or nret >= 2
    newatt = -1
    for t in range(nr):
        r = roots[t]
        # a component meeting an interface node is kept too (even if it dies
        # there): the rest of the grid may meet it there as well, and the
        # merge trees need every branch that ends at an interface node
        if r != o and not iface[r] and not isif_v:
            death[cmin[r]] = v                  # final: a whole component dies here
        if iface[r] or isif_v or (r == o and any_if):
            a = att[r]
            if a < 0:                           # a component seen only by its minimum
                a = cmin[r]
                kept[a] = True
            if keep_v:
                up[a] = v
            else:
                newatt = a
    if keep_v:
        kept[v] = True
        newatt = v
    for t in range(nr):
        parent[roots[t]] = o
    parent[v] = o
    iface[o] = any_if
    att[o] = newatt


@njit(cache=True)
def _sweep_grid(seq, nx, ny, nz, offs, z0, nz_all, lo_if, hi_if, apex, flat):  # pragma: no cover
    """The sweep over a chunk of ``nz`` planes of ``ny * nx`` vertices
    (``flat``: a 2D grid, whose planes are rows and whose ``y`` extent is
    1), visited in the order ``seq`` (chunk positions); ``offs`` are the
    neighbour offsets as (x, y, z). Interface: the chunk's first plane if
    ``lo_if``, its last if ``hi_if``. With ``apex``, node 0 is the cone's
    apex, joined to every boundary vertex of the grid (``z0``: the chunk's
    first plane; ``nz_all``: the grid's planes)."""
    m = seq.size
    sh = 1 if apex else 0
    n = m + sh
    node = np.empty(m, np.int64)
    for i in range(m):
        node[seq[i]] = i + sh
    parent = np.arange(n)
    cmin = np.arange(n)
    att = np.full(n, -1, np.int64)
    iface = np.zeros(n, np.bool_)
    death = np.full(n, -1, np.int64)
    kept = np.zeros(n, np.bool_)
    up = np.full(n, -1, np.int64)
    roots = np.empty(offs.shape[0] + 1, np.int64)
    if apex:
        _settle(0, roots, 0, True, parent, cmin, att, iface, death, kept, up)
    plane = nx * ny
    for i in range(m):
        p = seq[i]
        v = i + sh
        x, y, z = chunk_xyz(p, nx, plane)
        nr = 0
        for k in range(offs.shape[0]):
            q = chunk_step(x, y, z, offs[k], nx, ny, nz)
            if q < 0:
                continue
            u = node[q]
            if u < v:
                nr = add_distinct(roots, nr, find_root(parent, u))
        if apex:
            gz = z + z0
            if x == 0 or x == nx - 1 or gz == 0 or gz == nz_all - 1 or \
                    (not flat and (y == 0 or y == ny - 1)):
                nr = add_distinct(roots, nr, find_root(parent, 0))
        isif_v = (lo_if and z == 0) or (hi_if and z == nz - 1)
        _settle(v, roots, nr, isif_v, parent, cmin, att, iface, death, kept, up)
    return parent, cmin, death, kept, up


@njit(cache=True)
def _sweep_graph(indptr, indices, isif):  # pragma: no cover
    """The sweep over a graph in CSR form whose nodes are numbered in sweep
    order, with interface flags ``isif``."""
    n = isif.size
    parent = np.arange(n)
    cmin = np.arange(n)
    att = np.full(n, -1, np.int64)
    iface = np.zeros(n, np.bool_)
    death = np.full(n, -1, np.int64)
    kept = np.zeros(n, np.bool_)
    up = np.full(n, -1, np.int64)
    deg = 1
    for v in range(n):
        deg = max(deg, indptr[v + 1] - indptr[v])
    roots = np.empty(deg, np.int64)
    for v in range(n):
        nr = 0
        for e in range(indptr[v], indptr[v + 1]):
            u = indices[e]
            if u < v:
                nr = add_distinct(roots, nr, find_root(parent, u))
        _settle(v, roots, nr, isif[v], parent, cmin, att, iface, death, kept, up)
    return parent, cmin, death, kept, up


# -- pieces: pairs and boundary trees -------------------------------------------------------
def _piece(out, gid, val):
    """Final pairs, boundary tree and surviving minima of a sweep's output,
    named by global id (``gid``, ``val``: of the nodes in sweep order).

    Returns ``(pairs, tree, survivors)``: ``pairs`` as ``(ids (k, 2), values
    (k, 2))`` of ``(dying minimum, merge)``; ``tree`` as ``(nodes (k, 2)
    int64 of id and value bits, edges (k, 2) of ids)``; ``survivors`` as
    ``(ids, values)`` of the minima of the components left at the end."""
    parent, cmin, death, kept, up = out
    dying = np.flatnonzero(death >= 0)
    at = death[dying]
    pairs = (np.column_stack((gid[dying], gid[at])), np.column_stack((val[dying], val[at])))
    k = np.flatnonzero(kept)
    nodes = np.column_stack((gid[k], val[k].view(np.int64)))
    linked = k[up[k] >= 0]
    edges = np.column_stack((gid[linked], gid[up[linked]]))
    roots = cmin[np.flatnonzero(parent == np.arange(parent.size))]
    return pairs, (nodes, edges), (gid[roots], val[roots])


def tree_graph(trees, downward):
    """The union of trees ``[(nodes, edges)]`` (nodes as id and value bits,
    edges as id pairs; a node may be in several trees) as a graph whose
    nodes are numbered in sweep order: ``(gid, val, indptr, indices)``."""
    nodes = np.concatenate([t[0] for t in trees])
    edges = np.concatenate([t[1] for t in trees])
    ugid, first = np.unique(nodes[:, 0], return_index=True)
    val = nodes[first, 1].copy().view(np.float64)
    order = np.lexsort((-ugid, -val)) if downward else np.lexsort((ugid, val))
    gid, val = ugid[order], val[order]
    rank = np.empty(order.size, np.int64)
    rank[order] = np.arange(order.size)
    # a node's index in the sweep from its id (np.unique sorted the ids)
    a = rank[np.searchsorted(ugid, edges[:, 0])]
    b = rank[np.searchsorted(ugid, edges[:, 1])]
    rows, cols = np.concatenate((a, b)), np.concatenate((b, a))
    o = stable_argsort(rows)
    indptr = np.zeros(gid.size + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=gid.size), out=indptr[1:])
    return gid, val, indptr, np.ascontiguousarray(cols[o])


def _glue(trees, downward, plane_size, lo_plane, hi_plane):
    """Sweep the union of boundary trees; the interface is plane
    ``lo_plane`` and plane ``hi_plane`` (None: none) and the apex."""
    gid, val, indptr, indices = tree_graph(trees, downward)
    plane = gid // plane_size
    isif = gid == APEX_ID
    if lo_plane is not None:
        isif |= (plane == lo_plane) & (gid >= 0)
    if hi_plane is not None:
        isif |= (plane == hi_plane) & (gid >= 0)
    return _piece(_sweep_graph(indptr, indices, isif), gid, val)


class PlaneSource:
    """Where the virtual slabs read their planes: a :class:`RawField`, or
    this rank's ghosted values of a vertex vector. Not collective."""

    def __init__(self, grid, values, axes=None):
        self.grid = grid
        self.field = values if isinstance(values, RawField) else None
        self.ghosted = None
        if self.field is None:
            vec = grid.vertex_values(values, axes=axes)         # collective
            self.ghosted = grid.ghosted(vec.local)              # collective
        else:
            with agreed(grid.comm):
                if axes is not None:
                    raise ValueError("axes describes a field array; a RawField is in id order")
                values.check(grid.shape)

    def read(self, g0: int, g1: int) -> np.ndarray:
        """Planes ``g0 .. g1-1`` as float64. Not collective."""
        if self.field is not None:
            return self.field.read_planes(g0, g1)
        ps = self.grid.plane_size
        base = self.grid.ghosted_planes[0]
        return self.ghosted[(g0 - base) * ps:(g1 - base) * ps]


def _slab_bounds(grid):
    """(first, stop) plane of every virtual slab of every rank, in processor order."""
    v = grid.virtual
    out = []
    for r in range(grid.comm.Get_size()):
        p0, p1 = int(grid.plane_ranges[r]), int(grid.plane_ranges[r + 1])
        cuts = p0 + (np.arange(v + 1) * (p1 - p0)) // v
        out.extend(zip(cuts[:-1].tolist(), cuts[1:].tolist()))
    return out


def _context(grid, ledger=None):
    budget = grid.memory_budget
    return BSP(grid.comm, virtual=grid.virtual, spill_dir=grid.spill_dir,
               memory_budget=None if budget is None else budget // 2, ledger=ledger)


def _read_slab(grid, source, a, b):
    """Values, ghosted planes and the visiting order (stable sort: the
    ``(value, id)`` order) of slab ``[a, b)`` and its ghost planes."""
    nz = grid.shape[-1]
    g0, g1 = max(a - 1, 0), min(b + 1, nz)
    vals = source.read(g0, g1)
    seq = stable_argsort(vals)
    return vals, (g0, g1), seq


def _slab_critical(grid, vals, ghosted, seq, a, b):
    """``(ids, types)`` of the critical vertices of planes ``[a, b)``."""
    rank = np.empty(seq.size, np.int64)
    rank[seq] = np.arange(seq.size)
    L, U, onb, lb, ub = slab_link_components(grid.shape, ghosted, (a, b), rank)
    del rank
    types = classify(L, U, grid.dimension, onb, lb, ub)
    pick = np.flatnonzero(types != REGULAR)
    return pick + a * grid.plane_size, types[pick]


def _slab_sweeps(grid, vals, ghosted, seq, a, b):
    """The two sweeps of planes ``[a, b]`` (the slab and the plane above):
    ``[(pairs, tree, survivors)]`` for D0 and D(d-1)."""
    nz, ps = grid.shape[-1], grid.plane_size
    g0 = ghosted[0]
    top = min(b + 1, nz)
    off, m = (a - g0) * ps, (top - a) * ps
    sub = seq[(seq >= off) & (seq < off + m)] - off
    chunk = vals[off:off + m]
    gid0 = a * ps
    offsets, _ = link_structure(grid.dimension)
    if grid.dimension == 2:
        offs = np.column_stack((offsets[:, 0], np.zeros(len(offsets), np.int64), offsets[:, 1]))
        nx, ny = grid.shape[0], 1
    else:
        offs = offsets
        nx, ny = grid.shape[0], grid.shape[1]
    offs = np.ascontiguousarray(offs, dtype=np.int64)
    out = []
    for downward in (False, True):
        order = sub[::-1].copy() if downward else sub
        res = _sweep_grid(order, nx, ny, top - a, offs, a, nz, a > 0, b < nz, downward,
                          grid.dimension == 2)
        gid = gid0 + order
        val = chunk[order]
        if downward:
            gid = np.concatenate(([APEX_ID], gid))
            val = np.concatenate(([np.inf], val))
        out.append(_piece(res, gid, val))
        del res
    return out


# -- the analyses -------------------------------------------------------------------------
def ooc_critical_points(grid, values, axes=None) -> CriticalPoints:
    """:func:`critical_points` of a grid in out-of-core mode: one superstep,
    each virtual slab classified on its turn. Collective on ``grid.comm``."""
    source = PlaneSource(grid, values, axes)
    bounds = _slab_bounds(grid)

    def classify_slab(vp, state, inbox):
        a, b = bounds[vp]
        vals, ghosted, seq = _read_slab(grid, source, a, b)
        ids, types = _slab_critical(grid, vals, ghosted, seq, a, b)
        state["critical"] = np.column_stack((ids, types.astype(np.int64)))

    with _context(grid) as ctx:
        for vp in ctx.processors:
            ctx.set_state(vp)
        ctx.superstep(classify_slab, "critical points")
        rows = [ctx.state(vp)["critical"] for vp in ctx.processors]
    rows = np.concatenate(rows) if rows else np.zeros((0, 2), np.int64)
    return CriticalPoints.sparse(grid.comm, grid.global_num_vertices, rows[:, 0],
                                 rows[:, 1].astype(np.int32))


def ooc_pairs(grid, values, axes=None, report=None, ledger=None):
    """The D0 and D(d-1) pairs of a grid in out-of-core mode.

    Returns ``(pairs0, pairsd, essential0, source)``: this rank's final
    pairs as ``(ids (k, 2), values (k, 2))`` of ``(minimum, saddle)`` and
    ``(maximum, saddle)``, the essential minimum ``(ids, values)`` (on the
    rank of processor 0), and the plane source. Collective on
    ``grid.comm``: ``1 + ceil(log2(p * v))`` virtual supersteps.
    """
    source = PlaneSource(grid, values, axes)
    bounds = _slab_bounds(grid)
    nz, ps = grid.shape[-1], grid.plane_size
    nvp = len(bounds)
    levels = int(np.ceil(np.log2(nvp))) if nvp > 1 else 0

    def keep(state, k, res):
        (ids, vals), tree, survivors = res
        name = "pairs%d" % k
        if name in state:
            ids = np.concatenate((state[name + "_ids"], ids))
            vals = np.concatenate((state[name + "_vals"], vals))
        state[name + "_ids"], state[name + "_vals"] = ids, vals
        state[name] = np.zeros(0)       # a marker: pairs are kept
        state["nodes%d" % k], state["edges%d" % k] = tree
        state["survivors%d" % k] = np.column_stack((survivors[0],
                                                    survivors[1].view(np.int64)))

    def turn(vp, state, inbox):
        step = ctx.step
        if step == 0:
            a, b = bounds[vp]
            vals, ghosted, seq = _read_slab(grid, source, a, b)
            for k, res in enumerate(_slab_sweeps(grid, vals, ghosted, seq, a, b)):
                keep(state, k, res)
        else:
            half = 2 ** (step - 1)
            if vp % (2 * half) == 0 and vp + half < nvp:
                last = min(vp + 2 * half, nvp) - 1
                lo, hi = bounds[vp][0], bounds[last][1]
                for k, (tn, te) in enumerate(tags):
                    nodes = inbox.concat(tn, dtype=np.int64, shape=(2,))
                    edges = inbox.concat(te, dtype=np.int64, shape=(2,))
                    res = _glue([(state["nodes%d" % k], state["edges%d" % k]), (nodes, edges)],
                                k == 1, ps, lo if lo > 0 else None, hi if hi < nz else None)
                    keep(state, k, res)
        span = 2 ** step
        if step < levels and vp % (2 * span) == span:
            for k, (tn, te) in enumerate(tags):
                ctx.send(vp - span, state.pop("nodes%d" % k), tn)
                ctx.send(vp - span, state.pop("edges%d" % k), te)

    with _context(grid, ledger) as ctx:
        t = ctx.tags("nodes0", "edges0", "nodes1", "edges1")
        tags = ((t.nodes0, t.edges0), (t.nodes1, t.edges1))   # D0's, D(d-1)'s
        for vp in ctx.processors:
            ctx.set_state(vp)
        for step in range(levels + 1):
            ctx.superstep(turn, "slabs" if step == 0 else "glue %d" % step)
            if report is not None:
                report("%s", "out-of-core: slab sweeps" if step == 0 else
                       "out-of-core: glue level %d of %d" % (step, levels))
        out = [[], [], [], []]
        essential = (np.zeros(0, np.int64), np.zeros(0))
        for vp in ctx.processors:
            st = ctx.state(vp)
            out[0].append(st["pairs0_ids"])
            out[1].append(st["pairs0_vals"])
            out[2].append(st["pairs1_ids"])
            out[3].append(st["pairs1_vals"])
            if vp == 0:
                s = st["survivors0"]
                essential = (s[:, 0].copy(), s[:, 1].copy().view(np.float64))
    ids0, vals0, ids1, vals1 = (np.concatenate(x) if x else np.zeros((0, 2)) for x in out)
    return (ids0.astype(np.int64), vals0), (ids1.astype(np.int64), vals1), essential, source


def ooc_diagram_parts(grid, values, axes, report, ledger=None):
    """The parts of :func:`persistence_diagram` that the out-of-core sweeps
    give: ``[(dim, birth, death, birth_vertex, death_vertex)]`` and the
    plane source. Collective on ``grid.comm``."""
    d = grid.dimension
    (i0, v0), (i1, v1), (eg, ev), source = ooc_pairs(grid, values, axes, report, ledger)
    parts = [(0, v0[:, 0], v0[:, 1], i0[:, 0], i0[:, 1]),
             (0, ev, np.full(ev.size, np.inf), eg, np.full(eg.size, -1, np.int64)),
             # (maximum, saddle) of the downward sweep: the class (saddle, maximum)
             (d - 1, v1[:, 1], v1[:, 0], i1[:, 1], i1[:, 0])]
    return parts, source

