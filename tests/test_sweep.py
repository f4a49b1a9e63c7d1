"""The distributed sweep behind D0, D(d-1) and merge trees, against a plain
serial elder rule on the gathered vertex graph, and the distributed diagrams
and trees built on it: each rank holds its block, gather() gives the whole."""

import numpy as np
import pytest
from mpi4py import MPI

from dmsolve import DistVector, Layout
from mpitest import (Checks, assert_collective, assert_equal_collective,
                     assert_raises_collective)
from topology import Grid, SimplicialComplex, freudenthal_cells, global_order, merge_tree
from topology import persistence_diagram
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


# -- the distributed diagram and tree ---------------------------------------------------------
def test_distributed_diagram_blocks_gather_and_refusals():
    shape = (8, 7, 3 * COMM.size + 2)
    g = Grid(shape, COMM)
    f = np.random.default_rng(11).random(int(np.prod(shape)))
    dg = persistence_diagram(g, f)
    whole = dg.gather()
    ref = persistence_diagram(Grid(shape, MPI.COMM_SELF), f)
    raw = dg.local_raw_pairs
    keys = np.column_stack((raw["dim"], raw["birth_vertex"], raw["death_vertex"]))
    total = sum(r["pairs"] + r["essential"] for r in dg.report.values())
    with Checks(COMM) as c:
        for k in ref.raw_pairs:
            c.add(np.array_equal(whole.raw_pairs[k], ref.raw_pairs[k]), "gathered " + k)
            c.add(np.array_equal(_gathered(raw[k]), ref.raw_pairs[k]),
                  "blocks in rank order are the sorted diagram: " + k)
        c.add(np.all(np.diff(keys[:, 0]) >= 0), "sorted by dim")
        c.add(whole.report == ref.report and dg.report == ref.report, "report")
        # one block each: nobody holds the whole diagram
        c.add(raw["dim"].size <= -(-total // COMM.size), "a block of the pairs",
              (raw["dim"].size, total))
        c.add(whole.complete and (dg.complete == (COMM.size == 1)), "complete flags")
        at0 = dg.gather(root=0)
        c.add((at0 is not None) == (COMM.rank == 0), "gather(root=0) only on rank 0")
        if COMM.rank == 0:
            c.add(all(np.array_equal(at0.raw_pairs[k], ref.raw_pairs[k]) for k in ref.raw_pairs),
                  "gather(root=0)")
    if COMM.size > 1:
        for call in (lambda: dg.pairs, lambda: dg.raw_pairs, lambda: dg.finite(0),
                     lambda: dg.essential(0)):
            assert_raises_collective(COMM, RuntimeError, call, match="gather")
        assert_raises_collective(COMM, ValueError, dg.gather, root=COMM.size)
    assert_collective(COMM, "distributed" in repr(dg) or COMM.size == 1, repr(dg))


def test_distributed_merge_tree_blocks_and_gather():
    shape = (9, 8, 2 * COMM.size + 3)
    n = int(np.prod(shape))
    g = Grid(shape, COMM)
    f = np.random.default_rng(12).random(n)
    serial = Grid(shape, MPI.COMM_SELF)
    for kind in ("join", "split"):
        t = merge_tree(g, f, kind)
        ref = merge_tree(serial, f, kind)
        whole = t.gather()
        lay = Layout.block(n, COMM)
        with Checks(COMM) as c:
            for name in ("node_ids", "node_values", "node_types", "arcs"):
                c.add(np.array_equal(getattr(whole, name), getattr(ref, name)), name)
            c.add(t.counts == ref.counts, "counts", (t.counts, ref.counts))
            c.add(np.all(lay.owner(t._rank) == COMM.rank) if t._rank.size else True,
                  "nodes of this rank's block of sweep positions")
            c.add(np.array_equal(t.local_arcs[:, 0], t.local_node_ids[t.local_node_types != 2]),
                  "one arc up from each local node but the roots, in node order")
        if COMM.size > 1:
            assert_raises_collective(COMM, RuntimeError, lambda: t.arcs, match="gather")
            assert_raises_collective(COMM, RuntimeError, t.persistence_pairs, match="gather")
        pv, _ = whole.persistence_pairs()
        assert_equal_collective(pv, ref.persistence_pairs()[0])


@pytest.mark.parametrize("ntimes", [40, 250], ids=["10-entries-a-time", "2-entries-a-time"])
def test_elder_at_one_rank_is_the_rank_tree(ntimes):
    """At one rank (without ``tree``) the elder rule is a union-find; the
    rank tree's one range gives the same deaths in the same order and the
    same survivors, the apex included."""
    from topology.persistence import distributed_elder
    rng = np.random.default_rng(5)
    labels = np.concatenate(([APEX], 2 * np.sort(rng.choice(500, 60, replace=False))))
    m = 400
    lo = labels[rng.integers(0, labels.size, m)]
    hi = 2 * rng.integers(0, ntimes, m) + 1          # times: odd keys, labels even
    got = [distributed_elder(MPI.COMM_SELF, 2000, lo, hi, labels, serial=s)
           for s in (True, False)]
    with Checks(COMM) as c:
        c.add(got[0].deaths.shape[0] > 10, "deaths happen", got[0].deaths.shape)
        c.add(np.array_equal(got[0].deaths, got[1].deaths), "deaths, in order")
        c.add(np.array_equal(got[0].survivors, got[1].survivors), "survivors")
        c.add(APEX in got[0].survivors, "the apex survives")
