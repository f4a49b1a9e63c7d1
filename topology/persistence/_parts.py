"""The parts of a persistence diagram, each computed where its data lives:
D0 and D(d-1) by the two sweeps, D1 of 3D data from the Morse complex's
saddle pairs, a 3D grid's whole diagram from its Morse complex, and the
distributed sort that turns the parts into the diagram's blocks. A part is
``(dim, birth, death, birth_vertex, death_vertex, birth_index,
death_index)`` (values, global ids, vertex layout indices)."""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from dmsolve.bsp import psort, stable_argsort

from ..core import KeyTable, fetch_rows, owned_global_ids
from ..morse import global_order
from ._saddles import persistence_pairs_all
from ._sweep import APEX, sweep

__all__ = ["in_memory_parts", "sweep_parts", "saddle_parts", "morse_parts", "sorted_block",
           "essential_part", "total"]


def in_memory_parts(domain, values, axes, report, *, whole_morse: bool = False,
                    check=None, essential=None):
    """The parts of the diagram of a domain held in memory. Collective on
    ``domain.comm``.

    The domain's kind says how: with ``whole_morse`` (3D grids) every
    dimension comes from the Morse complex (:func:`morse_parts`); else D0
    and D(d-1) from the sweeps, D1 of 3D data from the saddle pairs. A
    complex passes ``check(domain)`` (the manifold test, before anything is
    computed) and ``essential(domain, vec, gids, order, parts)`` (the
    essential (d-1)-classes a non-ball has).
    """
    vec = domain.vertex_values(values, axes=axes)
    d = domain.dimension
    comm = domain.comm
    if check is not None:
        check(domain)
    gids = owned_global_ids(domain)
    order = global_order(vec, ids=gids)
    n = vec.global_size
    report("global order of %d vertices", n)
    if whole_morse:
        # the whole diagram from the Morse complex (no sweeps)
        return morse_parts(domain, vec, gids, order, report)
    parts, gids = sweep_parts(domain, vec, gids, order, report)
    if d == 3:
        parts.extend(saddle_parts(domain, vec, gids, order, report))
    if essential is not None:
        ess = essential(domain, vec, gids, order, parts)
        parts.append(ess)
        report("essential classes: %d of D%d", total(comm, ess[1].size), d - 1)
    return parts


def sweep_parts(domain, vec, gids, order, report):
    """D0 and D(d-1) by the sweep of the vertex graph and the reversed sweep
    of the graph coned over the boundary, named by a key table of the sweep
    positions. Returns ``(parts, gids)`` (the global ids of the owned
    vertices, the layout indices when the domain is not renumbered).
    Collective on ``domain.comm``."""
    comm, d, n = domain.comm, domain.dimension, vec.global_size
    s0 = sweep(domain, order.local)
    report("D0: %d pairs, %d essential", total(comm, len(s0.deaths)),
           total(comm, len(s0.survivors)))
    sd = sweep(domain, n - 1 - order.local, apex=True)
    report("D%d: %d pairs", d - 1, total(comm, len(sd.deaths)))
    # name every position of the two sweeps: (global id, layout index, value)
    lay = vec.layout
    index = np.arange(lay.start, lay.stop, dtype=np.int64)
    gids = index if gids is None else gids
    table = KeyTable(order.local, gids, index, vec.local, n, comm)
    top_ess = sd.survivors[sd.survivors != APEX]
    want = np.concatenate((s0.deaths.ravel(), s0.survivors,
                           n - 1 - sd.deaths.ravel(), n - 1 - top_ess))
    gid, idx, val = table.lookup(want)
    parts = []
    a = 0

    def take(k, shape=(-1,)):
        nonlocal a
        out = tuple(x[a:a + k].reshape(shape) for x in (gid, idx, val))
        a += k
        return out

    g, i, v = take(s0.deaths.size, (-1, 2))
    parts.append((0, v[:, 0], v[:, 1], g[:, 0], g[:, 1], i[:, 0], i[:, 1]))
    parts.append(essential_part(0, *take(s0.survivors.size)))
    g, i, v = take(sd.deaths.size, (-1, 2))
    # (born = maximum, dies_at = saddle) of the reversed sweep: (saddle, maximum)
    parts.append((d - 1, v[:, 1], v[:, 0], g[:, 1], g[:, 0], i[:, 1], i[:, 0]))
    parts.append(essential_part(d, *take(top_ess.size)))
    return parts, gids


def saddle_parts(domain, vec, gids, order, report):
    """D1 of 3D data (finite pairs and essential classes) from the Morse
    complex, left where the reduction found them. Collective on ``domain.comm``."""
    res = persistence_pairs_all(domain, order, progress=report, gather=False)
    pairs, essential = res.pairs[1], res.essential[1]
    lay = domain.vertex_layout
    table = np.column_stack((gids, vec.local.view(np.int64)))
    rows = fetch_rows(lay, table, np.concatenate((pairs.ravel(), essential)))
    g, v = rows[:, 0], rows[:, 1].copy().view(np.float64)
    k = pairs.size
    pg, pv, pi = g[:k].reshape(-1, 2), v[:k].reshape(-1, 2), pairs
    report("D1: %d pairs, %d essential", total(domain.comm, pairs.shape[0]),
           total(domain.comm, essential.size))
    return [(1, pv[:, 0], pv[:, 1], pg[:, 0], pg[:, 1], pi[:, 0], pi[:, 1]),
            essential_part(1, g[k:], essential, v[k:])]


def morse_parts(grid, vec, gids, order, report):
    """D0, D1, D2 of a 3D grid from the Morse complex of its discrete
    gradient (the grid's ``kernels.morse_pairs``), as diagram parts. A grid
    is a ball: its only essential class is D0's. Collective on
    ``grid.comm``."""
    pairs, minima = grid.kernels.morse_pairs(order, report)
    lay = grid.vertex_layout
    want = np.concatenate([pairs[d].ravel() for d in range(3)] + [minima])
    if gids is None:
        # the global ids are the layout indices: only the values travel (a
        # table of ids and values was two words per vertex of the grid)
        g = want
        v = fetch_rows(lay, vec.local.view(np.int64).reshape(-1, 1), want)[:, 0].view(np.float64)
    else:
        rows = fetch_rows(lay, np.column_stack((gids, vec.local.view(np.int64))), want)
        g, v = rows[:, 0], rows[:, 1].copy().view(np.float64)
    parts, a = [], 0
    for d in range(3):
        k = pairs[d].size
        pg, pv, pi = g[a:a + k].reshape(-1, 2), v[a:a + k].reshape(-1, 2), pairs[d]
        parts.append((d, pv[:, 0], pv[:, 1], pg[:, 0], pg[:, 1], pi[:, 0], pi[:, 1]))
        found = total(grid.comm, pairs[d].shape[0])
        if d == 0:
            report("D0: %d pairs, %d essential", found, total(grid.comm, minima.size))
        elif d == 1:
            report("D1: %d pairs, 0 essential", found)
        else:
            report("D2: %d pairs", found)
        a += k
    parts.append(essential_part(0, g[a:], minima, v[a:]))
    return parts


def total(comm, k: int) -> int:
    return int(comm.allreduce(int(k), op=MPI.SUM)) if comm.Get_size() > 1 else int(k)


def essential_part(dim, g, i, v):
    k = v.size
    return (dim, v, np.full(k, np.inf), g, np.full(k, -1, np.int64), i, np.full(k, -1, np.int64))


def sorted_block(comm, parts) -> dict:
    """The pairs of all ranks sorted by ``(dim, birth_vertex, death_vertex)``
    with a distributed sort: this rank's block of the whole diagram. Parts
    are ``(dim, birth, death, birth_vertex, death_vertex, ...)`` tuples.
    Collective on ``comm``."""
    dims, b, dd, bv, dv = [], [], [], [], []
    for dim, birth, death, bvert, dvert, *_ in parts:
        birth = np.asarray(birth, np.float64)
        dims.append(np.full(birth.size, dim, dtype=np.int64))
        b.append(birth)
        dd.append(np.asarray(death, np.float64))
        bv.append(np.asarray(bvert, np.int64))
        dv.append(np.asarray(dvert, np.int64))
    cols = [np.concatenate(dims), np.concatenate(bv), np.concatenate(dv)]
    vals = np.column_stack((np.concatenate(b), np.concatenate(dd)))
    # the three key columns packed into one int64 in the same order when their
    # ranges over all ranks allow: one stable argsort (or a one-column psort)
    # instead of a lexsort of three (half the time at 10^6 pairs), packed and
    # unpacked in place (no more memory than the lexsort's)
    big, small = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    lo = np.array([c.min() if c.size else big for c in cols], np.int64)
    hi = np.array([c.max() if c.size else small for c in cols], np.int64)
    if comm.Get_size() > 1:
        comm.Allreduce(MPI.IN_PLACE, lo, op=MPI.MIN)
        comm.Allreduce(MPI.IN_PLACE, hi, op=MPI.MAX)
    span = [int(h) - int(l) + 1 for l, h in zip(lo, hi)]
    if min(span) >= 1 and span[0] * span[1] * span[2] < 2 ** 62:
        packed = cols[0] - lo[0]
        for c in (1, 2):
            packed *= span[c]
            packed += cols[c]
            packed -= lo[c]
        del cols
        if comm.Get_size() > 1:
            out = psort(packed, comm, payload=vals)
            packed, vals = out.keys, out.payload
            del out
        else:
            o = stable_argsort(packed)
            packed, vals = packed[o], vals[o]
            del o
        dvert = np.remainder(packed, span[2])
        dvert += lo[2]
        packed //= span[2]
        bvert = np.remainder(packed, span[1])
        bvert += lo[1]
        packed //= span[1]
        packed += lo[0]
        return {"dim": packed, "birth": vals[:, 0].copy(), "death": vals[:, 1].copy(),
                "birth_vertex": bvert, "death_vertex": dvert}
    keys = np.column_stack(cols)
    del cols
    if comm.Get_size() > 1:
        out = psort(keys, comm, payload=vals)
        keys, vals = out.keys, out.payload
    else:
        o = np.lexsort((keys[:, 2], keys[:, 1], keys[:, 0]))
        keys, vals = keys[o], vals[o]
    return {"dim": keys[:, 0].copy(), "birth": vals[:, 0].copy(), "death": vals[:, 1].copy(),
            "birth_vertex": keys[:, 1].copy(), "death_vertex": keys[:, 2].copy()}
