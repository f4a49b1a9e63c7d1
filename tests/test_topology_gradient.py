"""Lower-star discrete gradient and the persistence pairs of its Morse complex,
against explicit-simplex checks and gudhi's SimplexTree on the same
tetrahedra, identical at any number of ranks."""

import itertools

import gudhi
import numpy as np
import pytest
from mpi4py import MPI
from scipy.spatial import Delaunay

from dmsolve import DistVector, Layout
from mpitest import (assert_collective, assert_equal_collective, assert_raises_collective,
                     on_rank0)
from test_topology_ref import faces, grid_cells
from topology import Grid, SimplicialComplex, betti_numbers, discrete_gradient, global_order
from topology.core import owned_global_ids
from topology.persistence import persistence_pairs_all, saddle_saddle_pairs
from topology.morse import follow_paths

COMM = MPI.COMM_WORLD


# -- fields and meshes
def field(kind, shape, seed=0):
    n = int(np.prod(shape))
    rng = np.random.default_rng(seed)
    if kind == "ties":              # integer values: many ties, the id tie-break matters
        return rng.integers(0, 4, size=n).astype(np.float64)
    if kind == "ties3":
        return rng.integers(0, 3, size=n).astype(np.float64)
    if kind == "noise":
        return rng.random(n)
    axes = np.meshgrid(*[np.linspace(0, 3, s) for s in shape[::-1]], indexing="ij")
    if len(shape) == 2:
        y, x = axes
        return (np.sin(2 * x) * np.cos(3 * y)).ravel()
    z, y, x = axes
    return (np.sin(2 * x) * np.cos(3 * y) + np.sin(2.5 * z)).ravel()


def holed_block(shape):
    """Grid tetrahedra minus a column through the middle: a solid torus, one
    tunnel (an essential 1-class). Vertices renumbered 0..n-1."""
    tets = grid_cells(shape)
    nx, ny = shape[0], shape[1]
    cx = (tets % nx).mean(1)
    cy = ((tets // nx) % ny).mean(1)
    keep = ~((cx > 2) & (cx < nx - 3) & (cy > 2) & (cy < ny - 3))
    _, inv = np.unique(tets[keep], return_inverse=True)
    return inv.reshape(-1, 4).astype(np.int64)


def delaunay_ball(n, seed):
    pts = np.random.default_rng(seed).random((n, 3))
    return Delaunay(pts).simplices.astype(np.int64)


MESHES = {"holed-8x8x5": lambda: holed_block((8, 8, 5)),
          "holed-9x10x6": lambda: holed_block((9, 10, 6)),
          "delaunay-300": lambda: delaunay_ball(300, 2)}


def complex_of(tets):
    return SimplicialComplex(tets if COMM.rank == 0 else np.zeros((0, tets.shape[1]), np.int64),
                             COMM)


# -- references
def gudhi_diagrams(tops, values):
    """Lower-star diagrams of gudhi's SimplexTree on exactly these simplices:
    {dim: (k, 2) (birth, death)}, zero-length pairs dropped, inf deaths kept."""
    st = gudhi.SimplexTree()
    st.insert_batch(np.ascontiguousarray(tops.T), np.full(len(tops), values.min() - 1.0))
    for v, f in enumerate(values):
        st.assign_filtration([v], float(f))
    st.make_filtration_non_decreasing()
    st.compute_persistence(persistence_dim_max=True)
    out = {}
    for d in range(3):
        iv = np.asarray(st.persistence_intervals_in_dimension(d)).reshape(-1, 2)
        out[d] = sort_rows(iv[iv[:, 1] != iv[:, 0]])
    return out


def sort_rows(a):
    a = np.asarray(a, dtype=np.float64).reshape(-1, 2)
    return a[np.lexsort(a.T[::-1])]


def our_diagrams(res, values):
    out = {}
    for d in range(3):
        p = res.pairs[d]
        b, e = values[p[:, 0]], values[p[:, 1]]
        keep = b != e
        ess = values[res.essential[d]]
        out[d] = sort_rows(np.concatenate((np.column_stack((b[keep], e[keep])),
                                           np.column_stack((ess, np.full(ess.size, np.inf))))))
    return out


def euler(counts):
    return sum((-1) ** k * c for k, c in enumerate(counts))


# -- the gradient
GRIDS = {"2d-7x9-ties": ((7, 9), "ties"), "2d-13x5-smooth": ((13, 5), "smooth"),
         "3d-5x6x7-ties": ((5, 6, 7), "ties"), "3d-3x4x2-noise": ((3, 4, 2), "noise"),
         "3d-7x5x6-smooth": ((7, 5, 6), "smooth")}


def check_gradient(G, tops):
    """V is a matching of facet-cofacet pairs within one lower star; V-paths
    are acyclic; the critical cells are the rest."""
    values_order = G.order.gather()
    d = G.dimension
    all_cells = {k: {tuple(r) for r in faces(tops, k)} for k in range(d + 1)}
    seen = {k: [] for k in range(d + 1)}
    edges = []                       # the V-path digraph on (d, d+1) pairs
    for k in range(d):
        lo, hi = G.pairs(k)
        for a, b in zip(map(tuple, lo), map(tuple, hi)):
            assert set(a) < set(b) and len(b) == len(a) + 1, (a, b)
            assert a in all_cells[k] and b in all_cells[k + 1]
            # same lower star: the same maximum vertex
            assert max(a, key=lambda v: values_order[v]) == max(b, key=lambda v: values_order[v])
            seen[k].append(a)
            seen[k + 1].append(b)
        edges.append((k, lo, hi))
    for k in range(d + 1):
        crit = [tuple(r) for r in G.critical_cells(k)]
        cells = seen[k] + crit
        assert len(cells) == len(set(cells)), "a %d-cell is paired twice" % k
        assert set(cells) == all_cells[k], "%d-cells missing from V and the critical set" % k
    # acyclicity of V-paths between dimensions k and k+1
    for k, lo, hi in edges:
        if k == 0:
            continue
        pair_of = {a: b for a, b in zip(map(tuple, lo), map(tuple, hi))}
        succ = {}
        for a, b in pair_of.items():
            succ[a] = [f for f in itertools.combinations(b, k + 1) if f != a and f in pair_of]
        state = {}
        for s in pair_of:
            stack = [(s, iter(succ[s]))]
            state[s] = 1
            while stack:
                node, it = stack[-1]
                nxt = next(it, None)
                if nxt is None:
                    state[node] = 2
                    stack.pop()
                    continue
                assert state.get(nxt) != 1, "closed V-path through %s" % (nxt,)
                if nxt not in state:
                    state[nxt] = 1
                    stack.append((nxt, iter(succ[nxt])))


@pytest.mark.parametrize("case", list(GRIDS), ids=list(GRIDS))
def test_grid_gradient_valid_and_euler(case):
    shape, kind = GRIDS[case]
    g = Grid(shape, COMM)
    G = discrete_gradient(g, field(kind, shape, seed=1))
    counts = G.critical_counts()
    assert_collective(COMM, euler(counts) == 1, "Euler characteristic %s" % counts)
    ok, msg = True, ""
    try:
        check_gradient(G, grid_cells(shape))
    except AssertionError as e:
        ok, msg = False, str(e)
    assert_collective(COMM, ok, msg)
    # weak Morse inequalities: m_k >= b_k (a grid is contractible)
    assert_collective(COMM, counts[0] >= 1 and all(c >= 0 for c in counts), str(counts))


@pytest.mark.parametrize("shape,kind", [((11, 9, 13), "noisy"), ((12, 10, 9), "smooth"),
                                        ((9, 8, 10), "ties"), ((31, 27), "noisy"),
                                        ((24, 20), "smooth")])
def test_grid_lower_star_kernel_equals_the_general_kernel(shape, kind):
    """On a grid, lower_star_gradient takes the bit-mask kernel with its cache
    of finished stars; the general heap kernel (what complexes take) run on
    the same star tables gives the same codes and steps in every slot (the
    arrays start from the same random values, twice, so that a slot one
    kernel leaves unwritten and the other writes or replays is caught)."""
    from topology.morse import GridStars
    from topology.morse._lower_star import _general_lower_stars, lower_star_gradient

    rng = np.random.default_rng(3)
    n = int(np.prod(shape))
    x = np.linspace(0, 3, n)
    f = {"noisy": rng.random(n), "smooth": np.sin(x) + 0.3 * np.cos(7 * x),
         "ties": np.round(rng.random(n) * 4)}[kind]
    g = Grid(shape, COMM)
    lay = g.vertex_layout
    order = global_order(DistVector(lay, f[lay.start:lay.stop]))
    S = GridStars(g, g.ghosted(np.ascontiguousarray(order.local, np.int64)))
    sizes = [S.n_owned, int(S.eptr[-1]), int(S.tptr[-1]), int(S.tptr[-1]), int(S.qptr[-1])]
    types = [np.int16, np.int16, np.int16, np.int8, np.int16]
    out = {}
    for name, kernel in (("grid", lower_star_gradient), ("general", _general_lower_stars)):
        for seed in (0, 1):
            fill = np.random.default_rng(seed)
            arrs = [fill.integers(-100, 100, m).astype(t) for m, t in zip(sizes, types)]
            if S.n_owned:
                kernel(S.table(), *arrs)
            out[name, seed] = arrs
    same = all(np.array_equal(a, b) for seed in (0, 1)
               for a, b in zip(out["grid", seed], out["general", seed]))
    assert_collective(COMM, same, "the grid kernel differs from the general one")


@pytest.mark.parametrize("name", list(MESHES), ids=list(MESHES))
def test_mesh_gradient_morse_inequalities(name):
    tets = MESHES[name]()
    cx = complex_of(tets)
    values = field("ties", (tets.max() + 1,), seed=4)
    G = discrete_gradient(cx, values)
    counts = G.critical_counts()
    betti = betti_numbers(cx)
    chi = euler(cx.counts())
    assert_collective(COMM, euler(counts) == chi == euler(betti), "%s %s %s" % (counts, chi, betti))
    assert_collective(COMM, all(m >= b for m, b in zip(counts, betti)), "%s < %s" % (counts, betti))
    ok, msg = True, ""
    try:
        check_gradient(G, tets)
    except AssertionError as e:
        ok, msg = False, str(e)
    assert_collective(COMM, ok, msg)


def test_critical_cells_do_not_depend_on_ranks():
    shape = (9, 7, 11)
    values = field("ties3", shape, seed=2)
    G = discrete_gradient(Grid(shape, COMM), values)
    cells = [G.critical_cells(d) for d in range(4)]
    # the serial gradient of the same field, on one rank, is the reference
    def serial():
        Gs = discrete_gradient(Grid(shape, MPI.COMM_SELF), values)
        return [Gs.critical_cells(d) for d in range(4)]

    ref = on_rank0(COMM, serial)
    for d in range(4):
        assert_equal_collective(cells[d], ref[d], err_msg="critical %d-cells" % d)
    assert_collective(COMM, sum(c.shape[0] for c in cells) > 20, "too easy a case")


def test_gradient_errors():
    g = Grid((4, 4, 4), COMM)
    assert_raises_collective(COMM, ValueError, discrete_gradient, g, np.zeros(10))
    assert_raises_collective(COMM, ValueError, persistence_pairs_all, Grid((4, 5), COMM),
                             global_order(Grid((4, 5), COMM).vertex_values(np.zeros(20))))


# -- persistence from the Morse complex
PERSISTENCE = {"8x8x8-ties3": ((8, 8, 8), "ties3"), "6x7x8-ties": ((6, 7, 8), "ties"),
               "9x8x10-smooth": ((9, 8, 10), "smooth"), "12x11x10-noise": ((12, 11, 10), "noise"),
               "10x12x11-ties": ((10, 12, 11), "ties"), "5x4x3-ties": ((5, 4, 3), "ties")}


@pytest.mark.parametrize("case", list(PERSISTENCE), ids=list(PERSISTENCE))
def test_grid_diagrams_match_gudhi(case):
    shape, kind = PERSISTENCE[case]
    values = field(kind, shape, seed=1)
    g = Grid(shape, COMM)
    order = global_order(g.vertex_values(values))
    res = persistence_pairs_all(g, order)
    ours = our_diagrams(res, values)
    ref = gudhi_diagrams(grid_cells(shape), values) if COMM.rank == 0 else None
    ref = COMM.bcast(ref, root=0)
    for d in range(3):
        assert_equal_collective(ours[d], ref[d], err_msg="D%d of %s" % (d, case))
    assert_collective(COMM, len(ref[1]) > (0 if shape[2] < 4 else 3), "no D1 pair to compare")
    # the public D1 entry point returns the same pairs
    pairs, essential = saddle_saddle_pairs(g, order)
    assert_equal_collective(pairs, res.pairs[1])
    assert_collective(COMM, essential.size == 0, "essential D1 on a grid")
    # identical on every rank
    every = COMM.allgather(pairs)
    assert_collective(COMM, all(np.array_equal(e, pairs) for e in every), "ranks disagree")
    assert_collective(COMM, pairs.dtype == np.int64 and pairs.shape[1] == 2, str(pairs.dtype))
    o = np.lexsort((pairs[:, 1], pairs[:, 0]))
    assert_equal_collective(o, np.arange(pairs.shape[0]), err_msg="not sorted by (birth, death)")


@pytest.mark.parametrize("name", list(MESHES), ids=list(MESHES))
@pytest.mark.parametrize("kind", ["ties", "noise"])
def test_mesh_diagrams_match_gudhi(name, kind):
    tets = MESHES[name]()
    values = field(kind, (tets.max() + 1,), seed=5)
    cx = complex_of(tets)
    order = global_order(cx.vertex_values(values))
    res = persistence_pairs_all(cx, order)
    ours = our_diagrams(res, values)
    ref = gudhi_diagrams(tets, values) if COMM.rank == 0 else None
    ref = COMM.bcast(ref, root=0)
    for d in range(3):
        assert_equal_collective(ours[d], ref[d], err_msg="D%d of %s" % (d, name))
    tunnels = 1 if name.startswith("holed") else 0
    assert_collective(COMM, res.essential[1].size == tunnels, str(res.essential[1]))
    pairs, essential = saddle_saddle_pairs(cx, order)
    assert_equal_collective(essential, res.essential[1])


def test_morse_complex_counts_consistent_with_pairs():
    """Every critical cell is in exactly one pair or essential class (zero-
    persistence pairs kept): the Morse complex's cells are all accounted for."""
    shape = (10, 9, 8)
    values = field("noise", shape, seed=7)
    g = Grid(shape, COMM)
    res = persistence_pairs_all(g, global_order(g.vertex_values(values)), keep_zero=True)
    crit = res.stats["critical"]
    used = [0, 0, 0, 0]
    for d in range(3):
        used[d] += res.pairs[d].shape[0] + res.essential[d].size
        used[d + 1] += res.pairs[d].shape[0]
    assert_collective(COMM, used == crit, "%s vs %s" % (used, crit))


# -- partitions: METIS and RCB renumber vertices internally; results must not move
def _grid_mesh(shape, drop):
    """Freudenthal simplices of a grid minus those whose cell passes ``drop``,
    renumbered, with vertex coordinates."""
    cells = grid_cells(shape)
    strides = np.cumprod((1,) + tuple(shape[:-1]))
    centre = [np.floor(((cells // s) % m).mean(1)) for s, m in zip(strides, shape)]
    cells = cells[~drop(*centre)]
    u, inv = np.unique(cells, return_inverse=True)
    pts = np.column_stack([(u // s) % m for s, m in zip(strides, shape)]).astype(np.float64)
    return inv.reshape(cells.shape).astype(np.int64), pts


PARTITION_MESHES = {
    "tri": lambda: _grid_mesh((11, 9), lambda x, y: (x >= 3) & (x < 6) & (y >= 3) & (y < 5)),
    "tet": lambda: _grid_mesh((7, 6, 5), lambda x, y, z: (x == 3) & (y == 2)),
}


@pytest.mark.parametrize("name", list(PARTITION_MESHES))
def test_gradient_and_pairs_do_not_depend_on_partition(name):
    """Integer values (ties): the critical cells and gradient pairs in global
    vertex ids, and on tetrahedra the Morse pairs with their vertices, are the
    same under block, METIS and RCB partitions as in a serial run; the
    diagrams equal gudhi's."""
    tops, pts = PARTITION_MESHES[name]()
    values = np.random.default_rng(11).integers(0, 3, pts.shape[0]).astype(np.float64)
    serial = SimplicialComplex(tops, MPI.COMM_SELF, pts)
    G0 = discrete_gradient(serial, values)
    d = serial.dimension
    ref = gudhi_diagrams(tops, values) if (d == 3 and COMM.rank == 0) else None
    ref = COMM.bcast(ref, root=0)
    if d == 3:
        res0 = persistence_pairs_all(serial, global_order(serial.vertex_values(values)))
    for part in ("block", "metis", "multilevel", "rcb", "hilbert"):
        cx = SimplicialComplex(tops[COMM.rank::COMM.size], COMM, pts, partition=part)
        G = discrete_gradient(cx, values)
        assert_equal_collective(G.critical_counts(), G0.critical_counts(), err_msg=part)
        for k in range(d + 1):
            assert_equal_collective(G.critical_cells(k), G0.critical_cells(k),
                                    err_msg="%s critical %d-cells" % (part, k))
        for k in range(d):
            for a, b in zip(G.pairs(k), G0.pairs(k)):
                assert_equal_collective(a, b, err_msg="%s pairs %d" % (part, k))
        if d == 3:
            order = global_order(cx.vertex_values(values), ids=owned_global_ids(cx))
            res = persistence_pairs_all(cx, order)
            for k in range(3):
                assert_equal_collective(res.pairs[k], res0.pairs[k], err_msg="%s D%d" % (part, k))
                assert_equal_collective(res.essential[k], res0.essential[k],
                                        err_msg="%s essential D%d" % (part, k))
            ours = our_diagrams(res, values)
            for k in range(3):
                assert_equal_collective(ours[k], ref[k], err_msg="%s D%d vs gudhi" % (part, k))
            pairs, essential = saddle_saddle_pairs(cx, order)
            assert_equal_collective(pairs, res0.pairs[1], err_msg=part)
            assert_equal_collective(essential, res0.essential[1], err_msg=part)


@pytest.mark.parametrize("part", ["block", "rcb"])
def test_star_tables_name_vertices_by_layout_index_and_global_id(part):
    """``Stars.layout_index`` holds the owned vertices' layout indices (what
    messages between ranks use) and ``Stars.global_id`` their global ids
    (what results report), which differ under RCB."""
    tops, pts = PARTITION_MESHES["tet"]()
    cx = SimplicialComplex(tops[COMM.rank::COMM.size], COMM, pts, partition=part)
    S = discrete_gradient(cx, np.arange(pts.shape[0], dtype=np.float64)).stars
    lay = cx.vertex_layout
    own = np.arange(lay.start, lay.stop)
    ids = owned_global_ids(cx)          # None: the global ids are the layout indices
    assert_equal_collective(S.layout_index[S.P], own)
    assert_equal_collective(S.global_id[S.P], own if ids is None else ids)


def _hops():
    """Paths (query, hops left) that hop to the next rank until their hop
    count is spent: ``(advance, arrive)`` for :func:`follow_paths`."""

    def advance(q, hops):
        last = hops == 0
        nxt = (COMM.rank + 1) % COMM.size
        out = np.column_stack((q[~last], np.full(int((~last).sum()), nxt), hops[~last] - 1))
        return q[last], out.astype(np.int64)

    def arrive(rows):
        return rows[:, 0].copy(), rows[:, 2].copy()

    return advance, arrive


def test_follow_paths_hands_paths_from_rank_to_rank():
    """A path that crosses ``h`` rank boundaries ends ``h`` supersteps later,
    plus the last (silent) one; exit rows given up front start on their owner."""
    layout = Layout.block(COMM.size, COMM)          # vertex r is rank r's
    advance, arrive = _hops()
    h = 2 * COMM.size + 1
    items = (np.array([COMM.rank], np.int64), np.array([h], np.int64))
    # and one more path per rank, handed straight to the next rank
    exits = np.array([[100 + COMM.rank, (COMM.rank + 1) % COMM.size, 0]], np.int64)
    done, steps = follow_paths(COMM, layout, advance, arrive, items, exits, label="hops")
    done = np.sort(np.concatenate(done))
    prev = (COMM.rank - 1) % COMM.size
    assert_equal_collective(steps, h + 1)
    assert_equal_collective(done, np.sort([(COMM.rank - h) % COMM.size, 100 + prev]))


def test_follow_paths_error_on_one_rank_raises_on_every_rank():
    """An exception while following paths on one rank is raised on all, in
    the same superstep: no rank is left waiting."""
    layout = Layout.block(COMM.size, COMM)
    advance, arrive = _hops()

    def failing(q, hops):
        if COMM.rank == COMM.size - 1 and hops.size and hops.min() == 1:
            raise ValueError("broken path")
        return advance(q, hops)

    items = (np.array([COMM.rank], np.int64), np.array([3], np.int64))
    assert_raises_collective(COMM, ValueError, follow_paths, COMM, layout, failing, arrive,
                             items, np.zeros((0, 3), np.int64), label="hops",
                             match="broken path")
