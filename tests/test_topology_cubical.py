"""Cubical grids (issue 20): Grid(..., complex="cubical") against gudhi's
CubicalComplex(vertices=...) (the V-construction), scipy's ndimage labels and
a serial union-find, at any number of ranks."""

import itertools

import numpy as np
import pytest
import scipy.ndimage as ndi
from mpi4py import MPI

from mpitest import assert_collective, assert_equal_collective, assert_raises_collective
from topology import (Grid, connected_components, critical_points, discrete_gradient, merge_tree,
                      persistence_diagram)

gudhi = pytest.importorskip("gudhi")

COMM = MPI.COMM_WORLD

# (shape (nx, ny[, nz]), kind): thin boxes put one or two planes on a rank at 3-4 ranks
CASES = {"2d-9x7-noise": ((9, 7), "noise"), "2d-12x10-ties": ((12, 10), "ties"),
         "2d-6x13-smooth": ((6, 13), "smooth"),
         "3d-6x5x7-noise": ((6, 5, 7), "noise"), "3d-7x6x5-ties": ((7, 6, 5), "ties"),
         "3d-9x8x10-noise": ((9, 8, 10), "noise"), "3d-8x7x9-smooth": ((8, 7, 9), "smooth"),
         "3d-5x5x4-ties": ((5, 5, 4), "ties")}


def field(shape, kind, seed=0) -> np.ndarray:
    """A field in numpy image order (shape[::-1]); 'ties' has few distinct values."""
    rng = np.random.default_rng(seed + sum(shape))
    grids = np.meshgrid(*[np.arange(n) / n for n in shape[::-1]], indexing="ij")
    smooth = np.sin(6.1 * grids[-1]) * np.cos(5.3 * grids[-2]) + 0.3 * grids[0]
    if kind == "smooth":
        return smooth
    if kind == "noise":
        return smooth + 2 * rng.random(smooth.shape)
    return np.round(3 * (smooth + rng.random(smooth.shape)))


def gudhi_pairs(f) -> dict:
    """gudhi's finite pairs with death > birth and essential births, per dimension."""
    cc = gudhi.CubicalComplex(vertices=f)
    cc.compute_persistence(homology_coeff_field=2, min_persistence=-1.0)
    out = {}
    for d in range(f.ndim):
        p = np.asarray(cc.persistence_intervals_in_dimension(d), np.float64).reshape(-1, 2)
        fin = p[np.isfinite(p[:, 1]) & (p[:, 1] > p[:, 0])]
        out[d] = (fin[np.lexsort((fin[:, 1], fin[:, 0]))], np.sort(p[~np.isfinite(p[:, 1]), 0]))
    return out


def axes(shape):
    return "yx" if len(shape) == 2 else "zyx"


@pytest.mark.parametrize("case", sorted(CASES))
def test_diagram_equals_gudhi_cubical(case):
    """Pair for pair, every dimension, ties included, at any number of ranks."""
    shape, kind = CASES[case]
    f = field(shape, kind)
    g = Grid(shape, COMM, complex="cubical")
    dg = persistence_diagram(g, f, axes=axes(shape)).gather()
    ref = gudhi_pairs(f)
    for d in range(len(shape)):
        assert_equal_collective(dg.finite(d), ref[d][0], err_msg="D%d of %s" % (d, case))
        assert_equal_collective(dg.essential(d), ref[d][1], err_msg="essential D%d" % d)
    if kind == "noise":
        assert_collective(COMM, len(ref[1][0]) >= 3, "too easy: %d D1 pairs" % len(ref[1][0]))
    assert_collective(COMM, dg.missing == [], str(dg.missing))


def test_cubical_differs_from_freudenthal():
    """The two complexes are different filtrations: on noise their diagrams differ
    (else the complex= switch would be a no-op that the tests above cannot see)."""
    shape = (7, 6, 5)
    f = field(shape, "noise")
    a = persistence_diagram(Grid(shape, COMM, complex="cubical"), f, axes="zyx").gather()
    b = persistence_diagram(Grid(shape, COMM), f, axes="zyx").gather()
    assert_collective(COMM, a.report != b.report, "%s == %s" % (a.report, b.report))


def cubical_cells(shape):
    """Every cell of the cubical complex of a grid as a sorted tuple of vertex ids."""
    strides = np.cumprod((1,) + tuple(shape[:-1]))
    dim = len(shape)
    cells = {k: set() for k in range(dim + 1)}
    for origin in itertools.product(*[range(n) for n in shape]):
        for span in itertools.product((0, 1), repeat=dim):
            if any(o + s >= n for o, s, n in zip(origin, span, shape)):
                continue
            verts = [np.dot(np.array(origin) + np.array(e), strides)
                     for e in itertools.product(*[(0, 1) if s else (0,) for s in span])]
            cells[sum(span)].add(tuple(sorted(int(v) for v in verts)))
    return cells


@pytest.mark.parametrize("case", ["2d-9x7-noise", "3d-6x5x7-noise", "3d-5x5x4-ties"])
def test_gradient_is_a_valid_acyclic_matching(case):
    """V pairs a cell with a facet in the same lower star, every cell is paired
    or critical exactly once, V-paths are acyclic, and sum (-1)^d c_d = 1."""
    shape, kind = CASES[case]
    f = field(shape, kind)
    G = discrete_gradient(Grid(shape, COMM, complex="cubical"), f, axes=axes(shape))
    order = G.order.gather()
    counts = G.critical_counts()
    assert_collective(COMM, sum((-1) ** k * c for k, c in enumerate(counts)) == 1, str(counts))
    cells = cubical_cells(shape)
    msg = None
    seen = {k: [tuple(r) for r in G.critical_cells(k)] for k in range(len(shape) + 1)}
    pairs = [G.pairs(k) for k in range(len(shape))]
    try:
        for k, (lo, hi) in enumerate(pairs):
            for a, b in zip(map(tuple, lo), map(tuple, hi)):
                assert set(a) < set(b) and len(b) == 2 * len(a), (a, b)
                assert a in cells[k] and b in cells[k + 1], (a, b)
                assert max(a, key=order.__getitem__) == max(b, key=order.__getitem__), (a, b)
                seen[k].append(a)
                seen[k + 1].append(b)
        for k in seen:
            assert len(seen[k]) == len(set(seen[k])), "a %d-cell twice" % k
            assert set(seen[k]) == cells[k], "%d-cells missing" % k
        for k in range(1, len(shape)):
            lo, hi = pairs[k]
            pair_of = dict(zip(map(tuple, lo), map(tuple, hi)))
            facets = {b: [c for c in cells[k] if set(c) < set(b)] for b in pair_of.values()}
            state = {}

            def visit(a):
                state[a] = 1
                for nxt in facets[pair_of[a]]:
                    if nxt == a or nxt not in pair_of:
                        continue
                    assert state.get(nxt) != 1, "closed V-path through %s" % (nxt,)
                    if nxt not in state:
                        visit(nxt)
                state[a] = 2
            for a in pair_of:
                if a not in state:
                    visit(a)
    except AssertionError as e:
        msg = str(e)
    assert_collective(COMM, msg is None, msg)


def test_critical_cells_do_not_depend_on_ranks():
    shape = (7, 6, 8)
    f = field(shape, "noise")
    G = discrete_gradient(Grid(shape, COMM, complex="cubical"), f, axes="zyx")
    G1 = discrete_gradient(Grid(shape, MPI.COMM_SELF, complex="cubical"), f, axes="zyx")
    for d in range(4):
        assert_equal_collective(G.critical_cells(d), G1.critical_cells(d), err_msg="d=%d" % d)
    assert_collective(COMM, sum(G.critical_counts()) > 40, str(G.critical_counts()))


@pytest.mark.parametrize("case", ["2d-12x10-ties", "3d-9x8x10-noise"])
@pytest.mark.parametrize("sublevel", [True, False])
def test_components_follow_the_grid_edges(case, sublevel):
    """Labels are scipy.ndimage.label's (4-/6-connectivity) components, named by
    their smallest vertex id."""
    shape, kind = CASES[case]
    f = field(shape, kind)
    t = float(np.median(f))
    g = Grid(shape, COMM, complex="cubical")
    lab = connected_components(g, f, t, sublevel=sublevel, axes=axes(shape)).gather()
    inside = f <= t if sublevel else f >= t
    ref, n = ndi.label(inside)            # the cross structuring element: the grid's edges
    ref = ref.ravel()
    want = np.full(ref.size, -1, np.int64)
    for c in range(1, n + 1):
        ids = np.flatnonzero(ref == c)
        want[ids] = ids.min()
    assert_equal_collective(lab, want)
    assert_collective(COMM, n >= 3, "too easy: %d components" % n)


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
def test_join_and_split_trees(case):
    """The join tree's pairs are the serial elder rule's over the grid's
    edges, and the split tree's are the join tree's of -f."""
    shape, kind = CASES[case]
    f = field(shape, kind)
    g = Grid(shape, COMM, complex="cubical")
    for kind_ in ("join", "split"):
        tree = merge_tree(g, f, kind=kind_, axes=axes(shape)).gather()
        _, ids = tree.persistence_pairs()
        got = sorted(map(tuple, ids.tolist()))
        if kind_ == "split":                 # (saddle, maximum) -> (maximum, saddle)
            got = sorted((b, a) for a, b in got)
        want = serial_join_pairs(f, shape, reverse=kind_ == "split")
        assert_equal_collective(np.array(got).reshape(-1, 2), np.array(want).reshape(-1, 2),
                                err_msg=kind_)
    assert_collective(COMM, len(want) >= 3, "too easy")


@pytest.mark.parametrize("case", ["2d-9x7-noise", "3d-9x8x10-noise", "3d-7x6x5-ties"])
def test_critical_points_agree_with_the_diagram(case):
    """Minima are the D0 births; every D0 death is a join saddle and every
    D(d-1) birth a split saddle; every finite D(d-1) death is a maximum."""
    shape, kind = CASES[case]
    f = field(shape, kind)
    g = Grid(shape, COMM, complex="cubical")
    ids, types = critical_points(g, f, axes=axes(shape)).gather()
    dg = persistence_diagram(g, f, axes=axes(shape)).gather()
    raw = dg.raw_pairs
    d = len(shape)
    kind_of = dict(zip(ids.tolist(), types.tolist()))
    d0 = raw["dim"] == 0
    births = set(raw["birth_vertex"][d0].tolist())
    minima = {i for i, t in kind_of.items() if t == 0}
    assert_collective(COMM, minima == births, "minima %s births %s" % (len(minima), len(births)))
    fin = np.isfinite(raw["death"])
    deaths = set(raw["death_vertex"][d0 & fin & (raw["death"] > raw["birth"])].tolist())
    split = (raw["dim"] == d - 1) & fin & (raw["death"] > raw["birth"])
    ok = all(kind_of.get(v) in (1, 4) for v in deaths)
    ok &= all(kind_of.get(v) in (d - 1, 4) for v in raw["birth_vertex"][split].tolist())
    ok &= all(kind_of.get(v) == 3 for v in raw["death_vertex"][split].tolist())
    assert_collective(COMM, ok, "critical types disagree with the diagram")


def test_bad_input_is_refused_on_every_rank():
    assert_raises_collective(COMM, ValueError, Grid, (4, 5), COMM, complex="simplicial",
                             match="unknown complex")
    assert_raises_collective(COMM, TypeError, Grid, (4, 5), COMM, complex=3)
    assert_raises_collective(COMM, ValueError, Grid, (4, 5, 6), COMM, complex="cubical",
                             virtual=1, match="Freudenthal")
    g = Grid((4, 5, 6), COMM, complex="cubical")
    assert_raises_collective(COMM, ValueError, persistence_diagram, g, np.zeros(4 * 5 * 5))
    assert_raises_collective(COMM, ValueError, persistence_diagram, g, np.zeros((4, 5, 6)))
    assert_raises_collective(COMM, ValueError, discrete_gradient, g, np.zeros(7))
    assert_raises_collective(COMM, ValueError, g.to_complex, match="cubical")
    assert_collective(COMM, g.cubical and "cubical" in repr(g), repr(g))


def test_mesh_cells_are_squares_and_cubes():
    for shape, kind, corners in (((4, 3), "quad", 4), ((3, 4, 2), "hexahedron", 8)):
        g = Grid(shape, COMM, complex="cubical")
        out = g.mesh(root=0)
        if COMM.rank == 0:
            points, k, cells = out
            n = int(np.prod([s - 1 for s in shape]))
            ok = k == kind and cells.shape == (n, corners) and points.shape[0] == np.prod(shape)
            ok &= len({tuple(sorted(c)) for c in cells.tolist()}) == n
        else:
            ok = out is None
        assert_collective(COMM, ok, "mesh of %s" % (shape,))
