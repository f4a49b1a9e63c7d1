"""Connected components of a grid in out-of-core mode, slab by slab on the
virtual processors of :class:`dmsolve.bsp.VirtualBSP`.

Each virtual processor labels the components (*pieces*) of its planes and
the plane above with a union-find over the Freudenthal edges, naming each
piece by its smallest vertex id. A piece that touches neither interface
plane is a whole component, and its name is final. The rest are summarised
by the interface vertices and their pieces' names; adjacent summaries share
the vertices of their common plane, and gluing them (the pieces meeting at
a shared vertex are one) goes up the binary tree of virtual processors.
The new names travel back down the same tree, and a last turn per slab
renames its vertices and writes them out: ``2 ceil(log2(p v)) + 2``
supersteps, one slab and a few planes in memory at a time.

A name is a vertex id, so two pieces of different slabs with the same name
share that vertex and are one component: a shared name is a gluing too.
"""

from __future__ import annotations

import os

import numpy as np
import scipy.sparse as sp

from dmsolve import DistVector
from dmsolve.bsp import sorted_unique
from dmsolve.jit import njit
from dmsolve.validate import agreed

from ..core import RawField, link_structure
from ._slabs import PlaneSource, _context, _slab_bounds, chunk_step, chunk_xyz

__all__ = ["ooc_components"]


@njit(cache=True)
def _label_chunk(keep, nx, ny, nz, offs):  # pragma: no cover
    """Per vertex of a chunk of ``nz`` planes, the chunk position of the
    smallest vertex of its piece (-1 where ``keep`` is False); union by the
    smaller root, so a root is its piece's first vertex."""
    m = keep.size
    parent = np.full(m, -1, np.int64)
    plane = nx * ny
    for p in range(m):
        if not keep[p]:
            continue
        parent[p] = p
        x, y, z = chunk_xyz(p, nx, plane)
        for k in range(offs.shape[0]):
            u = chunk_step(x, y, z, offs[k], nx, ny, nz)
            if u < 0 or u >= p or not keep[u]:
                continue
            ru = u
            while parent[ru] != ru:
                parent[ru] = parent[parent[ru]]
                ru = parent[ru]
            rp = p
            while parent[rp] != rp:
                rp = parent[rp]
            if ru < rp:
                parent[rp] = ru
            elif rp < ru:
                parent[ru] = rp
    for p in range(m):
        if parent[p] >= 0:
            r = p
            while parent[r] != r:
                r = parent[r]
            parent[p] = r
    return parent


def _offsets(grid):
    offsets, _ = link_structure(grid.dimension)
    if grid.dimension == 2:
        offs = np.column_stack((offsets[:, 0], np.zeros(len(offsets), np.int64), offsets[:, 1]))
        return np.ascontiguousarray(offs, dtype=np.int64), grid.shape[0], 1
    return np.ascontiguousarray(offsets, dtype=np.int64), grid.shape[0], grid.shape[1]


def _boundary(names, gid0, ps, planes):
    """``(vertex id, name)`` rows of the kept vertices of the chunk planes
    ``planes`` (chunk plane indices)."""
    rows = []
    for z in planes:
        blk = names[z * ps:(z + 1) * ps]
        k = np.flatnonzero(blk >= 0)
        rows.append(np.column_stack((gid0 + z * ps + k, blk[k])))
    return np.concatenate(rows) if rows else np.zeros((0, 2), np.int64)


def _glue(lower, upper, ps, lo, hi, mid, nz):
    """Glue two adjacent summaries at plane ``mid``; the new summary keeps
    plane ``lo`` (if above 0) and plane ``hi - 1``'s successor plane ``hi``
    (if below ``nz``). Returns ``(summary, lower_map, upper_map)``, the maps
    as ``(old names, new names)``; a new name is the smallest old name of
    the pieces it joins (the smallest vertex id of the joined pieces)."""
    from scipy.sparse.csgraph import connected_components as _cc
    names = sorted_unique(np.concatenate((lower[:, 1], upper[:, 1])))
    n = names.size
    # the two sides' rows of plane mid, matched by vertex id
    lm = lower[lower[:, 0] // ps == mid]
    um = upper[upper[:, 0] // ps == mid]
    lm, um = lm[np.argsort(lm[:, 0])], um[np.argsort(um[:, 0])]
    if not np.array_equal(lm[:, 0], um[:, 0]):
        raise RuntimeError("the summaries of plane %d do not match" % mid)
    a = np.searchsorted(names, lm[:, 1])
    b = np.searchsorted(names, um[:, 1])
    g = sp.coo_matrix((np.ones(a.size, np.int8), (a, b)), shape=(n, n))
    _, comp = _cc(g, directed=False)
    least = np.full(comp.max() + 1 if n else 0, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(least, comp, names)
    new = least[comp]                       # names are sorted: the new name of names[i]

    def rename(rows):
        return np.column_stack((rows[:, 0], new[np.searchsorted(names, rows[:, 1])]))

    keep = []
    if lo > 0:
        keep.append(rename(lower[lower[:, 0] // ps == lo]))
    if hi < nz:
        keep.append(rename(upper[upper[:, 0] // ps == hi]))
    summary = np.concatenate(keep) if keep else np.zeros((0, 2), np.int64)

    def side(rows):
        old = sorted_unique(rows[:, 1])
        return np.column_stack((old, new[np.searchsorted(names, old)]))

    return summary, side(lower), side(upper)


def _compose(child_map, parent_map):
    """``child_map`` (old, mid names) followed by ``parent_map`` (mid,
    final names; a mid name it lacks is final)."""
    if parent_map.shape[0] == 0 or child_map.shape[0] == 0:
        return child_map
    o = np.argsort(parent_map[:, 0])
    keys, vals = parent_map[o, 0], parent_map[o, 1]
    at = np.minimum(np.searchsorted(keys, child_map[:, 1]), keys.size - 1)
    hit = keys[at] == child_map[:, 1]
    out = child_map.copy()
    out[hit, 1] = vals[at[hit]]
    return out


def _rename(names, final):
    """Apply the (old, new) pairs ``final`` to the names (the rest stay)."""
    if final.shape[0] == 0:
        return names
    o = np.argsort(final[:, 0])
    keys, vals = final[o, 0], final[o, 1]
    at = np.minimum(np.searchsorted(keys, names), keys.size - 1)
    hit = keys[at] == names
    out = names.copy()
    out[hit] = vals[at[hit]]
    return out


def ooc_components(grid, values, threshold, sublevel, axes, out):
    """:func:`connected_components` of a grid in out-of-core mode.

    Returns a DistVector of labels (``out`` None) or the :class:`RawField`
    of int64 labels written to ``out``. Collective on ``grid.comm``.
    """
    comm = grid.comm
    source = None if values is None else PlaneSource(grid, values, axes)
    if out is not None:
        with agreed(comm):
            path = os.fspath(out)
            parent = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(parent) or not os.access(parent, os.W_OK):
                raise ValueError("out=%r: %s is not a writable directory" % (out, parent))
        if comm.Get_rank() == 0:
            with open(path, "wb") as f:
                f.truncate(grid.global_num_vertices * 8)
        comm.Barrier()
    bounds = _slab_bounds(grid)
    nz, ps = grid.shape[-1], grid.plane_size
    nvp = len(bounds)
    levels = int(np.ceil(np.log2(nvp))) if nvp > 1 else 0
    offs, nx, ny = _offsets(grid)
    # supersteps: 0 the slabs, 1..levels the gluing up, then the names back
    # down (levels + 1 .. 2 levels), and the last renames and writes
    last = 2 * levels + 1

    def turn(vp, state, inbox):
        step = ctx.step
        a, b = bounds[vp]
        if step == 0:
            top = min(b + 1, nz)
            if source is None:
                keep = np.ones((top - a) * ps, np.bool_)
            else:
                vals = source.read(a, top)
                keep = vals <= threshold if sublevel else vals >= threshold
                del vals
            root = _label_chunk(keep, nx, ny, top - a, offs)
            names = np.where(root >= 0, a * ps + root, -1)
            planes = ([0] if a > 0 else []) + ([top - a - 1] if b < nz else [])
            state["summary"] = _boundary(names, a * ps, ps, planes)
            state["names"] = names[:(b - a) * ps]
        elif step <= levels:
            half = 2 ** (step - 1)
            if vp % (2 * half) == 0 and vp + half < nvp:
                hi_vp = min(vp + 2 * half, nvp) - 1
                upper = inbox.concat(tag.summary, dtype=np.int64, shape=(2,))
                summary, lmap, umap = _glue(state["summary"], upper, ps, a, bounds[hi_vp][1],
                                            bounds[vp + half][0], nz)
                state["summary"] = summary
                state["lower%d" % step], state["upper%d" % step] = lmap, umap
        else:
            got = inbox.concat(tag.names, dtype=np.int64, shape=(2,))
            if got.shape[0]:                # from the glue one level up (none: no renames)
                state["final"] = got
            s = last - step                 # the level whose names go down
            if s >= 1:
                half = 2 ** (s - 1)
                if vp % (2 * half) == 0 and vp + half < nvp:
                    final = state.pop("final", np.zeros((0, 2), np.int64))
                    state["final"] = _compose(state.pop("lower%d" % s), final)
                    ctx.send(vp + half, _compose(state.pop("upper%d" % s), final), tag.names)
            else:
                names = state.pop("names")
                labels = _rename(names, state.pop("final", np.zeros((0, 2), np.int64)))
                if out is not None:
                    fd = os.open(path, os.O_WRONLY)
                    try:
                        os.pwrite(fd, labels.astype("<i8").tobytes(), a * ps * 8)
                    finally:
                        os.close(fd)
                else:
                    state["labels"] = labels
        span = 2 ** step
        if step < levels and vp % (2 * span) == span:
            ctx.send(vp - span, state.pop("summary"), tag.summary)

    with _context(grid) as ctx:
        tag = ctx.tags("summary", "names")
        for vp in ctx.processors:
            ctx.set_state(vp)
        for step in range(last + 1):
            ctx.superstep(turn, "components %d" % step)
        if out is None:
            parts = [ctx.state(vp)["labels"] for vp in ctx.processors]
    if out is not None:
        comm.Barrier()
        return RawField(path, grid.shape, "int64")
    labels = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    return DistVector(grid.vertex_layout, labels.astype(np.int64))
