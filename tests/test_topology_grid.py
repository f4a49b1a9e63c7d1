"""Grid with TTK's Freudenthal triangulation, global order and critical points,
against serial brute-force references, at any number of ranks."""

import numpy as np
import pytest
from mpi4py import MPI

from dmsolve import DistVector
from mpitest import assert_collective, assert_equal_collective, assert_raises_collective
from test_topology_ref import faces, grid_cells, reference_critical
from topology import Grid, component_table, critical_points, global_order, link_structure

COMM = MPI.COMM_WORLD
SHAPES = {"2d-7x9": (7, 9), "2d-2x3": (2, 3), "3d-5x6x7": (5, 6, 7), "3d-3x4x2": (3, 4, 2)}


def random_field(shape, seed, levels=4):
    """Integer-valued random field: many ties, so the id tie-break matters."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, levels, size=int(np.prod(shape))).astype(np.float64)


def test_link_structure_matches_explicit_cells():
    for shape, degree in (((5, 5), 6), ((5, 5, 5), 14)):
        cells = grid_cells(shape)
        edges = faces(cells, 1)
        centre = int(np.ravel_multi_index(tuple(n // 2 for n in shape[::-1]), shape[::-1]))
        nbrs = sorted(set(edges[edges[:, 0] == centre, 1]) | set(edges[edges[:, 1] == centre, 0]))
        offsets, link = link_structure(len(shape))
        strides = np.cumprod((1,) + shape[:-1])
        assert sorted(centre + offsets @ strides) == nbrs
        assert len(nbrs) == degree
        # link edges are the triangles through the centre
        tris = faces(cells, 2)
        mine = {tuple(sorted(set(t) - {centre})) for t in tris if centre in t}
        ids = centre + offsets @ strides
        assert {tuple(sorted((ids[a], ids[b]))) for a, b in link} == mine


def test_component_table_small_cases():
    t = component_table(3)
    assert t.size == 2 ** 14 and t[0] == 0 and t[1] == 1 and t[-1] == 1
    offsets, link = link_structure(2)
    t2 = component_table(2)
    # opposite neighbours (1,0) and (-1,0) are not joined in the link
    i, j = [int(np.flatnonzero((offsets == o).all(1))[0]) for o in ((1, 0), (-1, 0))]
    assert t2[(1 << i) | (1 << j)] == 2


@pytest.mark.parametrize("shape", list(SHAPES.values()), ids=list(SHAPES))
def test_grid_layout_and_ghosts(shape):
    g = Grid(shape, COMM)
    n = int(np.prod(shape))
    assert g.vertex_layout.global_size == n
    ids = g.ghosted_ids()
    got = g.ghosted(np.arange(g.vertex_layout.start, g.vertex_layout.stop, dtype=np.int64))
    assert_equal_collective(got, ids)
    fld = np.arange(n, dtype=np.float64)
    got = g.ghosted(DistVector.from_global(fld, g.vertex_layout).local)
    assert_equal_collective(got, fld[ids])
    # every owned vertex has its whole star among the ghosted vertices
    heads, tails = g.local_edges()
    e = np.unique(np.sort(np.stack((ids[heads], ids[tails]), 1), axis=1), axis=0)
    ref = faces(grid_cells(shape), 1)
    owned = g.vertex_layout.is_local(ref[:, 0]) | g.vertex_layout.is_local(ref[:, 1])
    have = {tuple(r) for r in e}
    assert_collective(COMM, all(tuple(r) in have for r in ref[owned]), "missing star edges")
    assert_collective(COMM, all(tuple(r) in {tuple(x) for x in ref} for r in e), "bad edges")


@pytest.mark.parametrize("shape", list(SHAPES.values()), ids=list(SHAPES))
def test_global_order_matches_lexsort(shape):
    g = Grid(shape, COMM)
    fld = random_field(shape, seed=3, levels=3)
    order = global_order(g.vertex_values(fld)).gather()
    ref = np.empty(fld.size, dtype=np.int64)
    ref[np.lexsort((np.arange(fld.size), fld))] = np.arange(fld.size)
    assert_equal_collective(order, ref)


@pytest.mark.parametrize("max_ranks", [0, 8], ids=["psort", "psrs"])
def test_global_order_both_sorts_with_ids_match_lexsort(monkeypatch, max_ranks):
    # PSRS_MAX_RANKS = 0 sends every communicator through rank_of (the path of
    # more than 8 ranks); permuted ids break the ties, as a METIS complex's do
    import topology.morse._order as order_mod
    monkeypatch.setattr(order_mod, "PSRS_MAX_RANKS", max_ranks)
    g = Grid((6, 5, 4), COMM)
    n = 120
    fld = random_field((6, 5, 4), seed=11, levels=3)
    ids = np.random.default_rng(5).permutation(n)
    vec = g.vertex_values(fld)
    lay = vec.layout
    got = global_order(vec, ids=ids[lay.start:lay.stop]).gather()
    ref = np.empty(n, dtype=np.int64)
    ref[np.lexsort((ids, fld))] = np.arange(n)
    assert_equal_collective(got, ref)
    for f in (np.zeros(n), np.arange(n, 0, -1, dtype=float)):
        got = global_order(g.vertex_values(f)).gather()
        ref = np.empty(n, dtype=np.int64)
        ref[np.lexsort((np.arange(n), f))] = np.arange(n)
        assert_equal_collective(got, ref)


def test_global_order_all_ties_and_unbalanced():
    g = Grid((4, 3, 9), COMM)
    n = 4 * 3 * 9
    for fld in (np.zeros(n), np.arange(n, 0, -1, dtype=float),
                np.where(np.arange(n) < 5, -1.0, 7.0)):
        got = global_order(g.vertex_values(fld)).gather()
        ref = np.empty(n, dtype=np.int64)
        ref[np.lexsort((np.arange(n), fld))] = np.arange(n)
        assert_equal_collective(got, ref)


CASES = [(name, shape, seed, levels) for name, shape in SHAPES.items()
         for seed, levels in ((0, 3), (1, 1000), (2, 2))]


@pytest.mark.parametrize("name,shape,seed,levels", CASES,
                         ids=["%s-seed%d-levels%d" % (c[0], c[2], c[3]) for c in CASES])
def test_critical_points_equal_bruteforce(name, shape, seed, levels):
    fld = random_field(shape, seed, levels)
    g = Grid(shape, COMM)
    ids, types = critical_points(g, fld).gather()
    rids, rtypes = reference_critical(grid_cells(shape), fld, fld.size)
    assert_equal_collective(ids, rids)
    assert_equal_collective(types, rtypes)


def test_critical_points_input_forms_agree():
    shape = (5, 6, 7)
    fld = random_field(shape, 7)
    g = Grid(shape, COMM)
    a = critical_points(g, fld).gather()
    b = critical_points(g, fld.reshape(shape[::-1])).gather()
    c = critical_points(g, DistVector.from_global(fld, g.vertex_layout)).gather()
    for other in (b, c):
        assert_equal_collective(other[0], a[0])
        assert_equal_collective(other[1], a[1])


def test_smooth_field_types():
    # a single Gaussian bump in the interior: one maximum, minima on the boundary
    nx, ny, nz = 9, 8, 7
    z, y, x = np.meshgrid(np.arange(nz), np.arange(ny), np.arange(nx), indexing="ij")
    fld = np.exp(-((x - 4.2) ** 2 + (y - 3.7) ** 2 + (z - 3.1) ** 2) / 4).ravel()
    cp = critical_points(Grid((nx, ny, nz), COMM), fld)
    counts = cp.counts()
    assert_collective(COMM, counts["maximum"] == 1, str(counts))
    ids, types = cp.gather()
    assert_equal_collective(ids[types == 3], [int(np.argmax(fld))])


def test_bad_inputs_raise_on_every_rank():
    g = Grid((4, 5), COMM)
    bad = np.zeros(20)
    bad[7] = np.nan
    assert_raises_collective(COMM, ValueError, critical_points, g, bad, match="finite")
    assert_raises_collective(COMM, ValueError, critical_points, g, np.zeros(19), match="shape")
    assert_raises_collective(COMM, ValueError, Grid, (1, 5), COMM, match="at least 2")
    assert_raises_collective(COMM, TypeError, Grid, (4, 5, 6, 7), COMM)
    local_only = np.zeros(20) if COMM.rank else np.zeros(21)
    assert_raises_collective(COMM, ValueError, critical_points, g, local_only)
