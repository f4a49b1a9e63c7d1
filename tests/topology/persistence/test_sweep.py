"""The distributed sweep behind D0, D(d-1) and merge trees (sweep), against
a plain serial elder rule on the gathered vertex graph of grids and
complexes, and what each rank decides alone: each rank holds its block,
only what crosses ranks goes up the rank tree."""

import numpy as np
import pytest
from mpi4py import MPI

from dmsolve import DistVector, Layout
from mpitest import Checks
from topology import Grid, SimplicialComplex, freudenthal_cells, global_order
from topology.core import owned_global_ids
from topology.persistence import APEX, sweep

COMM = MPI.COMM_WORLD


# -- a serial reference: the elder rule vertex by vertex ------------------------------------------
def reference_sweep(edges, key, apex_vertices=None):
    """Sublevel sweep of a graph (``edges``: vertex pairs, ``key``: each
    vertex's position in the sweep) by the textbook elder rule: vertices in
    key order, each joins the components of its lower neighbours, the oldest
    (smallest root key) survives and every other dies there. With
    ``apex_vertices`` a virtual vertex older than all is joined to them.
    Returns ``(deaths, kept, survivors, tops)`` in key space: ``deaths``
    rows ``(born, at)``, ``kept`` the surviving root at each death, the
    final roots and ``(root, highest key)`` per component."""
    n = key.size
    vert = np.empty(n, np.int64)
    vert[key] = np.arange(n)
    nbrs = [[] for _ in range(n)]
    for a, b in edges:
        nbrs[a].append(b)
        nbrs[b].append(a)
    parent = list(range(n + 1))             # node n is the apex
    root_key = {n: APEX}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    on_apex = np.zeros(n, bool)
    if apex_vertices is not None:
        on_apex[apex_vertices] = True
    deaths, kept = [], []
    seen = np.zeros(n, bool)
    for k in range(n):
        v = vert[k]
        comps = {find(u) for u in nbrs[v] if seen[u]}
        if on_apex[v]:
            comps.add(find(n))
        seen[v] = True
        if not comps:
            root_key[v] = k
            continue
        oldest = min(comps, key=lambda c: root_key[c])
        for c in comps:
            if c != oldest:
                deaths.append((root_key[c], k))
                kept.append(root_key[oldest])
                parent[c] = oldest
        parent[v] = oldest
    top = {}
    for v in range(n):
        r = root_key[find(v)]
        top[r] = max(top.get(r, -1), key[v])
    survivors = sorted({root_key[find(v)] for v in range(n)} |
                       ({APEX} if on_apex.any() else set()))
    return (np.array(deaths, np.int64).reshape(-1, 2), np.array(kept, np.int64),
            np.array(survivors, np.int64), np.array(sorted(top.items()), np.int64).reshape(-1, 2))


def _gathered(x, width=None):
    out = np.concatenate(COMM.allgather(np.asarray(x)))
    return out.reshape(-1, width) if width else out


def _grid_case(shape, seed, kind):
    g = Grid(shape, COMM)
    n = int(np.prod(shape))
    rng = np.random.default_rng(seed)
    f = rng.random(n) if kind == "random" else np.round(4 * rng.random(n))   # ties
    order = global_order(g.vertex_values(f))
    # the edges of the Freudenthal triangulation, by global id
    edges = Grid(shape, MPI.COMM_SELF).to_complex().simplices(1)
    return g, order, edges, np.arange(n)


def _slab_tets(nx, ny, nz):
    cx, cy, cz = np.meshgrid(np.arange(nx - 1), np.arange(ny - 1), np.arange(nz - 1),
                             indexing="ij")
    base = np.stack((cx.ravel(), cy.ravel(), cz.ravel()), 1)
    corners = base[:, None, None, :] + freudenthal_cells(3)[None]
    vid = corners[..., 0] + nx * (corners[..., 1] + ny * corners[..., 2])
    return vid.reshape(-1, 4)


CASES = [((6, 5, 4), "random"), ((6, 5, 11), "ties"), ((9, 17), "random"), ((13, 7), "ties"),
         ("complex-rcb", "random"), ("complex-block", "ties")]


def _case(shape, kind, seed=3):
    if isinstance(shape, tuple):
        g, order, edges, _ = _grid_case(shape, seed, kind)
        n = int(np.prod(shape))
        bnd = np.flatnonzero(Grid(shape, MPI.COMM_SELF).boundary_mask(np.arange(n)))
        return g, order, edges, bnd, n
    nx, ny, nz = 4, 5, 3 + 2 * COMM.size
    tets = _slab_tets(nx, ny, nz)
    n = nx * ny * nz
    i = np.arange(n)
    pts = np.stack((i % nx, (i // nx) % ny, i // (nx * ny)), 1).astype(float)
    part = shape.split("-")[1]
    cx = SimplicialComplex([tets[COMM.rank::COMM.size]], COMM, points=pts, partition=part)
    rng = np.random.default_rng(seed)
    f = rng.random(n) if kind == "random" else np.round(4 * rng.random(n))
    order = global_order(cx.vertex_values(f), ids=owned_global_ids(cx))
    serial = SimplicialComplex([tets], MPI.COMM_SELF, points=pts)
    bnd = np.flatnonzero(serial.owned_boundary_vertices())
    return cx, order, serial.simplices(1), bnd, n


def _global_key(dom, order, n):
    """Each vertex's sweep position, indexed by global id (test bookkeeping)."""
    gids = owned_global_ids(dom)
    lay = order.layout
    ids = np.arange(lay.start, lay.stop) if gids is None else gids
    key = np.zeros(n, np.int64)
    key[ids] = order.local
    return COMM.allreduce(key, op=MPI.SUM)


@pytest.mark.parametrize("shape,kind", CASES, ids=["%s-%s" % (
    "x".join(map(str, s)) if isinstance(s, tuple) else s, k) for s, k in CASES])
@pytest.mark.parametrize("mode", ["join", "apex", "tree"])
def test_sweep_equals_the_serial_elder_rule(shape, kind, mode):
    """Deaths, survivors, minima and (with ``tree``) the kept branches and
    tops of each component are those of the serial elder rule, for sublevel
    sweeps, sweeps joined to a virtual apex, and trees."""
    dom, order, edges, bnd, n = _case(shape, kind)
    gkey = _global_key(dom, order, n)
    apex = mode == "apex"
    key_owned = n - 1 - order.local if apex else order.local
    gk = n - 1 - gkey if apex else gkey
    sw = sweep(dom, key_owned, apex=apex, tree=mode == "tree")
    deaths, kept, survivors, tops = reference_sweep(edges, gk, bnd if apex else None)
    got = _gathered(sw.deaths, 2)
    o = np.lexsort((got[:, 1], got[:, 0]))
    want = np.lexsort((deaths[:, 1], deaths[:, 0]))
    with Checks(COMM) as c:
        c.add(np.array_equal(got[o], deaths[want]), "deaths (each on exactly one rank)",
              (len(got), len(deaths)))
        c.add(np.array_equal(np.sort(_gathered(sw.survivors)), survivors), "survivors")
        if mode == "tree":
            c.add(np.array_equal(_gathered(sw.kept)[o], kept[want]), "kept branches")
            t = _gathered(sw.tops, 2)
            c.add(np.array_equal(t[np.argsort(t[:, 0])], tops), "tops")
            lay = Layout.block(n, COMM)
            c.add(np.all(lay.owner(sw.tops[:, 0]) == COMM.rank) if sw.tops.size else True,
                  "tops at the block owner of their root")
        c.add(np.array_equal(np.sort(_gathered(sw.minima)),
                             np.sort(np.setdiff1d(deaths[:, 0], [APEX]).tolist()
                                     + [s for s in survivors if s != APEX])),
              "minima: one per basin, on its owner")


def test_what_a_rank_decides_alone_stays_there():
    """Each rank's slab of 8 planes: a ridge plane at each end, a gutter plane
    inside each ridge, and four noisy planes between the gutters. Every noise
    basin dies inside its slab (into a gutter's component, which is older),
    and only the gutters' meetings (inside the slab and over the ridges) go up
    the rank tree: a few rows per rank, not one per merge. No rank receives
    rows from more than two ranges."""
    planes = 8
    nx, ny = 16, 14
    shape = (nx, ny, planes * COMM.size)
    g = Grid(shape, COMM)
    lay = g.vertex_layout
    ids = np.arange(lay.start, lay.stop)
    xyz = g.coordinates(ids)
    j = xyz[:, 2] % planes
    tilt = 1e-3 * (xyz[:, 0] + nx * xyz[:, 1])          # one minimum per gutter plane
    level = np.array([1.0, -1.0, 0.0, 0.0, 0.0, 0.0, -1.0, 1.0])[j]
    noise = np.random.default_rng([5, COMM.rank]).random(ids.size) * 0.3
    f = level + tilt + np.where((j >= 2) & (j <= 5), noise, 0.0)
    order = global_order(DistVector(lay, f))
    sw = sweep(g, order.local, tree=True)
    total = COMM.allreduce(len(sw.deaths), op=MPI.SUM)
    up = COMM.allreduce(sw.rows_up, op=MPI.SUM)
    most_in = COMM.allreduce(sw.rows_in, op=MPI.MAX)
    most_up = COMM.allreduce(sw.rows_up, op=MPI.MAX)
    with Checks(COMM) as c:
        c.add(total >= 20 * COMM.size, "many merges", total)
        c.add(up <= 10 * (COMM.size - 1), "rows sent up (the gutters only)", up)
        c.add(most_in <= 2 * most_up, "no rank receives more than two ranges' rows",
              (most_in, most_up))
