"""Merge trees (merge_tree, MergeTree): join and split trees of grids,
cubical grids and meshes against the diagram's D0 pairs and a serial elder
rule, the same under every partition and at any rank count, each rank
holding its block of the nodes; progress reports and bad options."""

import numpy as np
import pytest
from mpi4py import MPI

from dmsolve import Layout
from mpitest import (Checks, assert_collective, assert_equal_collective,
                     assert_raises_collective)
from topology import Grid, SimplicialComplex, critical_points, merge_tree, persistence_diagram
from topology_cases import (CUBICAL_CASES, Recorder, cubical_field, image_axes, make_grid,
                            make_mesh, my_share, octahedron, partition_meshes, phases)

COMM = MPI.COMM_WORLD


@pytest.mark.parametrize("case", ["grid2", "grid3", "tri-holes", "torus"])
def test_merge_trees(case):
    """The join tree's pairs are the diagram's D0 pairs, its arcs climb in
    value, it is a forest with the minima as leaves, and the split tree of f
    is the join tree of -f read backwards."""
    if case.startswith("grid"):
        dom, f = make_grid((15, 12) if case == "grid2" else (7, 8, 6), "ties")
    else:
        dom, f = make_mesh(case, "random")
    dg = persistence_diagram(dom, f).gather()
    jt = merge_tree(dom, f, kind="join").gather()
    pv, pi = jt.persistence_pairs()
    keep = pv[:, 1] > pv[:, 0]
    pv = pv[keep]
    assert_equal_collective(pv[np.lexsort((pv[:, 1], pv[:, 0]))], dg.finite(0))
    # the tree's pairs are the diagram's vertex pairs, and arcs climb in value
    raw = dg.raw_pairs
    d0 = raw["dim"] == 0
    fin0 = d0 & np.isfinite(raw["death"])
    mine = pi[np.lexsort((pi[:, 1], pi[:, 0]))]
    theirs = np.column_stack((raw["birth_vertex"][fin0], raw["death_vertex"][fin0]))
    assert_equal_collective(mine, theirs[np.lexsort((theirs[:, 1], theirs[:, 0]))])
    val = dict(zip(jt.node_ids.tolist(), jt.node_values.tolist()))
    climbs = all(val[a] <= val[b] for a, b in jt.arcs.tolist())
    # a forest: arcs = nodes - components; leaves are the minima
    ncomp = int(np.count_nonzero(d0 & ~np.isfinite(raw["death"])))
    assert_collective(COMM, climbs, "join-tree arcs must go up in value")
    assert_equal_collective(len(jt.arcs), len(jt.node_ids) - ncomp)
    cp = critical_points(dom, f).counts()
    assert_equal_collective(int(np.count_nonzero(jt.node_types == 0)), cp["minimum"])
    # split tree of f = join tree of -f, read backwards
    st = merge_tree(dom, f, kind="split").gather()
    sv, _ = st.persistence_pairs()
    neg = persistence_diagram(dom, -f).gather().finite(0)
    sv = sv[sv[:, 1] > sv[:, 0]]
    want = -neg[:, ::-1]
    assert_equal_collective(sv[np.lexsort((sv[:, 1], sv[:, 0]))],
                            want[np.lexsort((want[:, 1], want[:, 0]))])
    assert_equal_collective(int(np.count_nonzero(st.node_types == 0)), cp["maximum"])


@pytest.mark.parametrize("name", ["tri", "tet"])
def test_partition_independent_merge_trees(name):
    """With integer values (ties everywhere), both merge trees are the same
    under block, METIS and RCB partitions as in a serial run."""
    cells, pts = partition_meshes()[name]
    f = np.random.default_rng(7).integers(0, 4, pts.shape[0]).astype(np.float64)
    serial = SimplicialComplex([cells], MPI.COMM_SELF, pts)
    trees = {k: merge_tree(serial, f, kind=k) for k in ("join", "split")}
    for part in ("block", "metis", "multilevel", "rcb", "hilbert"):
        cx = SimplicialComplex([cells[COMM.rank::COMM.size]], COMM, pts, partition=part)
        for kind, ref in trees.items():
            t = merge_tree(cx, f, kind=kind).gather()
            msg = "%s %s tree" % (part, kind)
            assert_equal_collective(t.node_ids, ref.node_ids, err_msg=msg)
            assert_equal_collective(t.node_values, ref.node_values, err_msg=msg)
            assert_equal_collective(t.node_types, ref.node_types, err_msg=msg)
            assert_equal_collective(t.arcs, ref.arcs, err_msg=msg)
            assert_equal_collective(t.persistence_pairs()[1], ref.persistence_pairs()[1],
                                    err_msg=msg)


def test_distributed_merge_tree_blocks_and_gather():
    """Each rank holds the nodes of its block of sweep positions with one arc
    up from each; gather() gives the serial tree, and the whole-tree
    properties of a distributed tree are refused until it is gathered."""
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


# -- cubical grids: trees of the grid's edge graph ----------------------------------------
def serial_join_pairs(f, shape, reverse=False):
    """Elder-rule pairs (birth id, death id) of the sublevel sets of the grid's
    edge graph, by a union-find in (value, id) order (``reverse``: the
    superlevel sets, in the reverse order)."""
    flat = f.ravel()
    order = np.lexsort((np.arange(flat.size), flat))
    if reverse:
        order = order[::-1]
    rank = np.empty(flat.size, np.int64)
    rank[order] = np.arange(flat.size)
    strides = np.cumprod((1,) + tuple(shape[:-1]))
    coords = np.stack(np.unravel_index(np.arange(flat.size), shape[::-1])[::-1], 1)
    parent = {}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x
    pairs = []
    for v in order.tolist():
        parent[v] = v
        roots = set()
        for a in range(len(shape)):
            for s in (-1, 1):
                c = coords[v].copy()
                c[a] += s
                if 0 <= c[a] < shape[a]:
                    u = int(np.dot(c, strides))
                    if u in parent:
                        roots.add(find(u))
        if roots:
            roots = sorted(roots, key=rank.__getitem__)
            for r in roots[1:]:
                pairs.append((r, v))
                parent[r] = roots[0]
            parent[v] = roots[0]
    return sorted(pairs)


@pytest.mark.parametrize("case", ["2d-9x7-noise", "3d-7x6x5-ties", "3d-9x8x10-noise"])
def test_cubical_join_and_split_trees(case):
    """The join tree's pairs are the serial elder rule's over the grid's
    edges, and the split tree's are the join tree's of -f."""
    shape, kind = CUBICAL_CASES[case]
    f = cubical_field(shape, kind)
    g = Grid(shape, COMM, complex="cubical")
    for kind_ in ("join", "split"):
        tree = merge_tree(g, f, kind=kind_, axes=image_axes(shape)).gather()
        _, ids = tree.persistence_pairs()
        got = sorted(map(tuple, ids.tolist()))
        if kind_ == "split":                 # (saddle, maximum) -> (maximum, saddle)
            got = sorted((b, a) for a, b in got)
        want = serial_join_pairs(f, shape, reverse=kind_ == "split")
        assert_equal_collective(np.array(got).reshape(-1, 2), np.array(want).reshape(-1, 2),
                                err_msg=kind_)
    assert_collective(COMM, len(want) >= 3, "too easy")


# -- progress reports and bad options ---------------------------------------------------------------
def test_merge_tree_progress_on_a_complex():
    """A progress callback hears the global order and the sweep, with the
    tree's arc count."""
    cells = octahedron()
    cx = SimplicialComplex([my_share(cells)], COMM)
    f = np.random.default_rng(6).random(6)
    rec = Recorder()
    mt = merge_tree(cx, f, progress=rec)
    assert_equal_collective(phases(rec), ["global order", "sweep"])
    assert_collective(COMM, rec.calls[1][1] == "sweep: %d arcs, 1 components" % mt.counts["arcs"],
                      rec.calls[1][1])
    assert_collective(COMM, all(t == "merge_tree" for t, _, _ in rec.calls))


def test_bad_merge_tree_progress():
    """A progress that is not a callable is a TypeError on every rank."""
    g = Grid((4, 5), COMM)
    f = np.arange(20.0)
    assert_raises_collective(COMM, TypeError, merge_tree, g, f, progress="yes",
                             match="progress must be None, True or a callable")


def test_merge_tree_refuses_an_unknown_kind():
    """A kind other than join or split is a ValueError on every rank."""
    g = Grid((4, 5), COMM)
    assert_raises_collective(COMM, ValueError, merge_tree, g, np.arange(20.0), kind="contour")


def test_merge_tree_refuses_a_kind_that_is_not_a_string():
    """A kind that is not a string is a TypeError on every rank."""
    g = Grid((4, 5), COMM)
    f = np.arange(20.0)
    assert_raises_collective(COMM, TypeError, lambda: merge_tree(g, f, kind=3),
                             match="kind must be a string")
