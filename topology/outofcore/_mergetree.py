"""Join and split trees of a grid in out-of-core mode, slab by slab on the
virtual processors of :class:`dmsolve.bsp.VirtualBSP`.

Each virtual processor reduces its planes (and the plane above) to its
*local tree*: the minima, the merges, the interface vertices and the top
of each component, with an arc from each node to the next one up in its
component; this graph has the sublevel-set connectivity of the slab among
its nodes. Its boundary tree (``_slabs``) goes up the
binary tree of virtual processors as for the persistence pairs. On the way
back down, each glue hands each of its two halves the boundary tree of
*everything else* (Morozov and Weber's local-global representation): the
boundary tree of the rest above it glued with the other half's, reduced
to the half's interface planes. A slab's local tree glued with the
boundary tree of the rest of the grid has, at its own vertices, the
components of the whole grid: each merge is seen with the branch that goes
on through it (the oldest minimum of the merged component, elder rule).

As in memory (:func:`topology.merge_tree`), the tree is read off its
branches: ``(branch, node)`` rows for every leaf, merge and the top, one
distributed sort, and each arc joins consecutive nodes of a branch.
``2 ceil(log2(p v)) + 2`` virtual supersteps, then two sorts over the ranks.
"""

from __future__ import annotations

import numpy as np

from dmsolve.bsp import BSP, psort
from dmsolve.jit import njit

from ..kernels import add_distinct, find_root
from ..persistence import LEAF, ROOT, SADDLE, MergeTree
from ._slabs import (PlaneSource, _context, _glue, _read_slab, _slab_bounds, chunk_step,
                     chunk_xyz, tree_graph)
from ._components import _offsets

__all__ = ["ooc_merge_tree"]

_NONE = np.zeros((0, 2), np.int64)


@njit(cache=True)
def _local_tree(seq, nx, ny, nz, offs, lo_if, hi_if):  # pragma: no cover
    """The local tree of a chunk of ``nz`` planes visited in the order
    ``seq``: ``(nodes, arcs)`` as chunk positions, ``nodes`` in sweep order
    and ``arcs`` (from, to) from a node to the next node up in its
    component. Nodes: minima, merges, interface vertices (first plane if
    ``lo_if``, last if ``hi_if``) and the last vertex of each component."""
    m = seq.size
    node = np.empty(m, np.int64)            # chunk position -> sweep index
    for i in range(m):
        node[seq[i]] = i
    parent = np.arange(m)
    att = np.full(m, -1, np.int64)          # a root's latest node
    isnode = np.zeros(m, np.bool_)
    arc_a = np.empty(m, np.int64)
    arc_b = np.empty(m, np.int64)
    na = 0
    roots = np.empty(offs.shape[0] + 1, np.int64)
    plane = nx * ny
    for v in range(m):
        x, y, z = chunk_xyz(seq[v], nx, plane)
        nr = 0
        for k in range(offs.shape[0]):
            q = chunk_step(x, y, z, offs[k], nx, ny, nz)
            if q < 0:
                continue
            u = node[q]
            if u < v:
                nr = add_distinct(roots, nr, find_root(parent, u))
        here = nr != 1 or (lo_if and z == 0) or (hi_if and z == nz - 1)
        if here:
            isnode[v] = True
            for t in range(nr):
                arc_a[na] = att[roots[t]]
                arc_b[na] = v
                na += 1
        # the newest vertex is its component's root, so a root is the
        # component's last vertex: its top once the sweep is over
        att[v] = v if here else att[roots[0]]
        for t in range(nr):
            parent[roots[t]] = v
        parent[v] = v
    # the top of each component is a node
    for v in range(m):
        if parent[v] == v and not isnode[v]:
            isnode[v] = True
            arc_a[na] = att[v]
            arc_b[na] = v
            na += 1
    nodes = np.flatnonzero(isnode)
    arcs = np.empty((na, 2), np.int64)
    for i in range(na):
        arcs[i, 0] = seq[arc_a[i]]
        arcs[i, 1] = seq[arc_b[i]]
    return seq[nodes], arcs


@njit(cache=True)
def _branch_rows(indptr, indices, own):  # pragma: no cover
    """The elder rule over a graph whose nodes are in sweep order: rows
    ``(branch, node)`` (node indices) for the nodes flagged ``own``: a
    minimum opens its branch; at a merge every component but the oldest
    ends (its branch, the merge) and the oldest goes on (its branch, the
    merge)."""
    n = own.size
    parent = np.arange(n)
    cmin = np.arange(n)
    deg = 1
    for v in range(n):
        deg = max(deg, indptr[v + 1] - indptr[v])
    roots = np.empty(deg, np.int64)
    out = np.empty((2 * n + 2 * indices.size + 1, 2), np.int64)
    no = 0
    for v in range(n):
        nr = 0
        for e in range(indptr[v], indptr[v + 1]):
            u = indices[e]
            if u < v:
                nr = add_distinct(roots, nr, find_root(parent, u))
        if nr == 0:
            if own[v]:
                out[no, 0] = v
                out[no, 1] = v
                no += 1
            continue
        o = roots[0]
        for t in range(1, nr):
            if cmin[roots[t]] < cmin[o]:
                o = roots[t]
        if nr >= 2 and own[v]:
            for t in range(nr):
                out[no, 0] = cmin[roots[t]]
                out[no, 1] = v
                no += 1
        for t in range(nr):
            parent[roots[t]] = o
        parent[v] = o
    return out[:no]


def _order_key(values, downward):
    """int64 keys in sweep order of float64 values (``-0.0`` as ``0.0``)."""
    b = (np.asarray(values, np.float64) + 0.0).view(np.int64)
    k = np.where(b < 0, b ^ np.int64(0x7FFFFFFFFFFFFFFF), b)
    return ~k if downward else k


def _id_key(ids, downward):
    """Vertex ids as sort keys in sweep order (ties: ascending ids up, descending
    down); its own inverse."""
    return ~ids if downward else ids


def _leaf_rows(local, comp, downward, own_lo, own_hi):
    """``(branch id, node id, node value)`` rows of the nodes of ids in
    ``[own_lo, own_hi)`` of the local tree ``local`` glued with the boundary
    tree ``comp`` of the rest of the grid."""
    gid, val, indptr, indices = tree_graph([local, comp], downward)
    own = (gid >= own_lo) & (gid < own_hi)
    br = _branch_rows(indptr, indices, own)
    return np.column_stack((gid[br[:, 0]], gid[br[:, 1]], val[br[:, 1]].view(np.int64)))


def _tree_rows(grid, source, downward):
    """This rank's ``(branch, node, value bits)`` rows (one virtual
    superstep per level up and down the tree of virtual processors), and
    the ``(value, id)`` of the first and last vertex of the sweep over
    this rank's slabs. Collective on ``grid.comm``."""
    bounds = _slab_bounds(grid)
    nz, ps = grid.shape[-1], grid.plane_size
    nvp = len(bounds)
    levels = int(np.ceil(np.log2(nvp))) if nvp > 1 else 0
    last = 2 * levels + 1
    offs, nx, ny = _offsets(grid)
    ends = []

    def reduce_to(trees, lo, hi):
        _, tree, _ = _glue(trees, downward, ps, lo if lo > 0 else None,
                           hi if hi < nz else None)
        return tree

    def turn(vp, state, inbox):
        step = ctx.step
        a, b = bounds[vp]
        if step == 0:
            top = min(b + 1, nz)
            vals, ghosted, seq = _read_slab(grid, source, a, b)
            off = (a - ghosted[0]) * ps
            m = (top - a) * ps
            sub = seq[(seq >= off) & (seq < off + m)] - off
            chunk = vals[off:off + m]
            del vals, seq
            if downward:
                sub = sub[::-1].copy()
            own = sub[sub < (b - a) * ps]
            ends.append(((chunk[own[0]], a * ps + own[0]), (chunk[own[-1]], a * ps + own[-1])))
            pos, arcs = _local_tree(sub, nx, ny, top - a, offs, a > 0, b < nz)
            local = (np.column_stack((a * ps + pos, chunk[pos].view(np.int64))), a * ps + arcs)
            state["ln"], state["le"] = local
            # its boundary tree: interface planes a and b
            state["bn"], state["be"] = reduce_to([local], a, b)
        elif step <= levels:
            half = 2 ** (step - 1)
            if vp % (2 * half) == 0 and vp + half < nvp:
                hi = bounds[min(vp + 2 * half, nvp) - 1][1]
                upper = (inbox.concat(tag.nodes, dtype=np.int64, shape=(2,)),
                         inbox.concat(tag.edges, dtype=np.int64, shape=(2,)))
                lower = (state.pop("bn"), state.pop("be"))
                state["ln%d" % step], state["le%d" % step] = lower
                state["un%d" % step], state["ue%d" % step] = upper
                state["bn"], state["be"] = reduce_to([lower, upper], a, hi)
        else:
            got = inbox.concat(tag.child_nodes, dtype=np.int64, shape=(2,))
            if got.shape[0]:                # the rest of the grid, from the glue above
                state["cn"] = got
                state["ce"] = inbox.concat(tag.child_edges, dtype=np.int64, shape=(2,))
            s = last - step
            rest = (state.get("cn", _NONE), state.get("ce", _NONE))
            if s >= 1:
                half = 2 ** (s - 1)
                if vp % (2 * half) == 0 and vp + half < nvp:
                    hi = bounds[min(vp + 2 * half, nvp) - 1][1]
                    mid = bounds[vp + half][0]
                    lower = (state.pop("ln%d" % s), state.pop("le%d" % s))
                    upper = (state.pop("un%d" % s), state.pop("ue%d" % s))
                    cu = reduce_to([rest, lower], mid, hi)
                    ctx.send(vp + half, cu[0], tag.child_nodes)
                    ctx.send(vp + half, cu[1], tag.child_edges)
                    state["cn"], state["ce"] = reduce_to([rest, upper], a, mid)
            else:
                local = (state.pop("ln"), state.pop("le"))
                state.clear()
                state["rows"] = _leaf_rows(local, rest, downward, a * ps, b * ps)
        if step < levels and vp % (2 * 2 ** step) == 2 ** step:
            ctx.send(vp - 2 ** step, state.pop("bn"), tag.nodes)
            ctx.send(vp - 2 ** step, state.pop("be"), tag.edges)

    with _context(grid) as ctx:
        tag = ctx.tags("nodes", "edges", "child_nodes", "child_edges")
        for vp in ctx.processors:
            ctx.set_state(vp)
        for step in range(last + 1):
            ctx.superstep(turn, "merge tree %d" % step)
        rows = [ctx.state(vp)["rows"] for vp in ctx.processors]
    rows = np.concatenate(rows) if rows else np.zeros((0, 3), np.int64)
    return rows, ends


def _first_last(comm, ends, downward):
    """The first and last vertex ``(id, value)`` of the whole sweep."""
    every = [e for part in comm.allgather(ends) for e in part]
    key = (lambda e: (-e[0], -e[1])) if downward else (lambda e: e)
    first = min((e[0] for e in every), key=key)
    top = max((e[1] for e in every), key=key)
    return (first[1], first[0]), (top[1], top[0])


def ooc_merge_tree(grid, values, kind, axes, report) -> MergeTree:
    """:func:`merge_tree` of a grid in out-of-core mode. Collective on
    ``grid.comm``."""
    comm = grid.comm
    downward = kind == "split"
    source = PlaneSource(grid, values, axes)
    rows, ends = _tree_rows(grid, source, downward)
    report("out-of-core: local trees glued, %d branch rows", int(comm.allreduce(len(rows))))
    (root, _), (top, top_val) = _first_last(comm, ends, downward)
    if grid.vertex_layout.owner(np.array([top]))[0] == comm.Get_rank():
        rows = np.concatenate((rows, [[root, top, np.float64(top_val).view(np.int64)]]))
    # the branches in order: (branch, node in sweep order)
    okey = _order_key(rows[:, 2].copy().view(np.float64), downward)
    keys = np.column_stack((rows[:, 0], okey, _id_key(rows[:, 1], downward))).astype(np.int64)
    if comm.Get_size() > 1:
        srt = psort(keys, comm, payload=rows[:, 2].copy())
        keys, vbits = srt.keys.reshape(-1, 3), srt.payload
    else:
        o = np.lexsort((keys[:, 2], keys[:, 1], keys[:, 0]))
        keys, vbits = keys[o], rows[o, 2]
    keys, vbits = _unique_rows(comm, keys, vbits)
    nxt, prv = _neighbours(comm, keys)
    has_up = nxt[:, 0] == keys[:, 0]
    has_down = prv[:, 0] == keys[:, 0]
    flags = np.column_stack((has_up, has_down, np.where(has_up, nxt[:, 2], -1),
                             vbits)).astype(np.int64)
    # one row per node, at the owner of its vertex, then the nodes in sweep order
    ctx = BSP(comm)
    tag = ctx.tags("flags")
    flags[:, 2] = np.where(has_up, _id_key(flags[:, 2], downward), -1)
    ctx.send_keyed(tag.flags, _id_key(keys[:, 2], downward), flags, grid.vertex_layout,
                   op="max")
    ids, fl = ctx.sync("mergetree:nodes").reduced(tag.flags, "max", value_shape=(4,),
                                                  dtype=np.int64)
    fl = fl.reshape(-1, 4)
    vals = fl[:, 3].copy().view(np.float64)
    nkey = np.column_stack((_order_key(vals, downward), _id_key(ids, downward))).astype(np.int64)
    if comm.Get_size() > 1:
        srt = psort(nkey, comm, payload=fl)
        ids, fl, start = (_id_key(srt.keys.reshape(-1, 2)[:, 1], downward),
                          srt.payload.reshape(-1, 4), srt.start)
    else:
        o = np.lexsort((nkey[:, 1], nkey[:, 0]))
        ids, fl, start = ids[o], fl[o], 0
    up, down = fl[:, 0] == 1, fl[:, 1] == 1
    types = np.full(ids.size, LEAF, np.int32)
    types[down & up] = SADDLE
    types[down & ~up] = ROOT
    arcs = np.column_stack((ids[up], fl[up, 2])).astype(np.int64).reshape(-1, 2)
    return MergeTree(kind, comm, ids.astype(np.int64), fl[:, 3].copy().view(np.float64),
                     types, arcs, start + np.arange(ids.size, dtype=np.int64))


def _unique_rows(comm, keys, vbits):
    """Drop repeated rows (consecutive after the sort), here and across the
    ranks' blocks (a repeat whose first copy is on an earlier rank)."""
    keep = np.ones(keys.shape[0], bool)
    keep[1:] = np.any(keys[1:] != keys[:-1], axis=1)
    keys, vbits = keys[keep], vbits[keep]
    last = np.full(4, -1, np.int64)
    if keys.shape[0]:
        last[0], last[1:] = 1, keys[-1]
    every = np.array(comm.allgather(last)).reshape(-1, 4)
    me = comm.Get_rank()
    before = [r for r in range(me) if every[r, 0] == 1]
    if keys.shape[0] and before and np.array_equal(every[before[-1], 1:], keys[0]):
        keys, vbits = keys[1:], vbits[1:]
    return keys, vbits


def _neighbours(comm, keys):
    """The next and previous rows of each row in the global order (-1
    rows past the ends). Collective on ``comm`` (one allgather)."""
    m = keys.shape[0]
    ends = np.full(7, -1, np.int64)
    ends[0] = m
    if m:
        ends[1:4], ends[4:7] = keys[0], keys[-1]
    every = np.array(comm.allgather(ends)).reshape(-1, 7)
    me = comm.Get_rank()
    nxt = np.full((m, 3), -1, np.int64)
    prv = np.full((m, 3), -1, np.int64)
    if m:
        nxt[:-1], prv[1:] = keys[1:], keys[:-1]
        later = [r for r in range(me + 1, comm.Get_size()) if every[r, 0] > 0]
        if later:
            nxt[-1] = every[later[0], 1:4]
        earlier = [r for r in range(me) if every[r, 0] > 0]
        if earlier:
            prv[0] = every[earlier[-1], 4:7]
    return nxt, prv
