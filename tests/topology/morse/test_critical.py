"""Critical points (TTK's types from the lower and upper link components) on
grids and on simplicial complexes under every partition, against the serial
brute-force reference of explicit vertex links, and checks of that reference
by hand and against networkx."""

import itertools

import numpy as np
import pytest
from mpi4py import MPI

import topology
from bad_inputs import check_bad_input
from dmsolve import DistVector, Layout
from mpitest import assert_allclose_collective, assert_collective, assert_equal_collective
from topology import Grid, SimplicialComplex, critical_points
from topology_cases import GRID_SHAPES, delaunay, my_share, random_field
from topology_reference import UnionFind, grid_cells, reference_critical, reference_types

COMM = MPI.COMM_WORLD

CASES = [(name, shape, seed, levels) for name, shape in GRID_SHAPES.items()
         for seed, levels in ((0, 3), (1, 1000), (2, 2))]


@pytest.mark.parametrize("name,shape,seed,levels", CASES,
                         ids=["%s-seed%d-levels%d" % (c[0], c[2], c[3]) for c in CASES])
def test_critical_points_equal_bruteforce(name, shape, seed, levels):
    """On grids, with few levels (ties) or many, the critical vertices and
    their types are the reference's."""
    fld = random_field(shape, seed, levels)
    g = Grid(shape, COMM)
    ids, types = critical_points(g, fld).gather()
    rids, rtypes = reference_critical(grid_cells(shape), fld, fld.size)
    assert_equal_collective(ids, rids)
    assert_equal_collective(types, rtypes)


def test_smooth_field_types():
    """A single Gaussian bump in the interior has one maximum, at its top."""
    # a single Gaussian bump in the interior: one maximum, minima on the boundary
    nx, ny, nz = 9, 8, 7
    z, y, x = np.meshgrid(np.arange(nz), np.arange(ny), np.arange(nx), indexing="ij")
    fld = np.exp(-((x - 4.2) ** 2 + (y - 3.7) ** 2 + (z - 3.1) ** 2) / 4).ravel()
    cp = critical_points(Grid((nx, ny, nz), COMM), fld)
    counts = cp.counts()
    assert_collective(COMM, counts["maximum"] == 1, str(counts))
    ids, types = cp.gather()
    assert_equal_collective(ids[types == 3], [int(np.argmax(fld))])


@pytest.mark.parametrize("dim,levels", [(2, 3), (2, 1000), (3, 3), (3, 1000)],
                         ids=["tri-ties", "tri-distinct", "tet-ties", "tet-distinct"])
def test_critical_points_on_meshes_equal_bruteforce(dim, levels):
    """On Delaunay triangles and tetrahedra, with ties or without, the
    critical vertices and their types are the reference's."""
    n = 60 if dim == 2 else 35
    pts, cells = delaunay(n, dim, seed=10 + dim)
    fld = np.random.default_rng(levels).integers(0, levels, n).astype(float)
    cx = SimplicialComplex([my_share(cells)], COMM, points=pts)
    ids, types = critical_points(cx, fld).gather()
    rids, rtypes = reference_critical(cells, fld, n)
    assert_equal_collective(ids, rids)
    assert_equal_collective(types, rtypes)


def test_critical_points_complex_equals_grid():
    """A grid and its triangulation given as a complex have the same critical points."""
    shape = (4, 5, 3)
    cells = grid_cells(shape)
    fld = np.random.default_rng(5).integers(0, 3, int(np.prod(shape))).astype(float)
    a = critical_points(Grid(shape, COMM), fld).gather()
    b = critical_points(SimplicialComplex([my_share(cells)], COMM), fld).gather()
    assert_equal_collective(a[0], b[0])
    assert_equal_collective(a[1], b[1])


@pytest.mark.parametrize("partition", ["block", "metis", "multilevel", "rcb", "hilbert"])
def test_critical_points_do_not_depend_on_the_partition(partition):
    """Under every partition, from a global array or a DistVector in layout
    order, the critical points with ties are the reference's."""
    pts, cells = delaunay(60, 2, seed=31)
    n = 60
    fld = np.random.default_rng(7).integers(0, 4, n).astype(float)    # ties
    cx = SimplicialComplex([my_share(cells)], COMM, points=pts, partition=partition)
    ids, types = critical_points(cx, fld).gather()
    rids, rtypes = reference_critical(cells, fld, n)
    assert_equal_collective(ids, rids)
    assert_equal_collective(types, rtypes)
    cp = critical_points(cx, DistVector(cx.vertex_layout, fld[cx.owned_global_ids(0)]))
    assert_equal_collective(cp.gather()[1], rtypes)


# -- the reference itself ----------------------------------------------------------------------
def test_reference_types_by_hand():
    """The reference's type of the centre of a fan of triangles: a saddle
    for an alternating pattern, a minimum below rising values."""
    # a fan of triangles around vertex 0 (a disk): a saddle value pattern
    cells = [(0, 1, 2), (0, 2, 3), (0, 3, 4), (0, 4, 1)]
    values = [0.0, -1.0, 1.0, -1.0, 1.0]
    assert reference_types(cells, values, 5)[0] == 1       # (L, U) = (2, 2)
    values = [0.0, 1.0, 2.0, 3.0, 4.0]
    assert reference_types(cells, values, 5)[0] == 0


def test_reference_link_components_match_networkx():
    """The reference's union-find counts the components of a lower link as networkx does."""
    import networkx as nx
    rng = np.random.default_rng(1)
    shape = (4, 3, 3)
    cells = grid_cells(shape)
    values = rng.integers(0, 3, size=int(np.prod(shape))).astype(float)
    g = nx.Graph()
    for c in cells:
        g.add_edges_from(itertools.combinations(c, 2))
    v = 13  # an interior vertex (1, 1, 1) + ... ids within range
    low = [u for u in g[v] if (values[u], u) < (values[v], v)]
    sub = nx.Graph()
    sub.add_nodes_from(low)
    for c in cells:
        if v in c:
            rest = [u for u in c if u != v]
            sub.add_edges_from((a, b) for a, b in itertools.combinations(rest, 2)
                               if a in low and b in low)
    uf = UnionFind(low)
    for a, b in sub.edges:
        uf.union(a, b)
    assert uf.count() == nx.number_connected_components(sub)


# -- bad input: the same exception on every rank -------------------------------------------

BAD_INPUTS = [
    ("critical-points-values-wrong-length", ValueError, "shape",
     lambda e: topology.critical_points(e.grid, np.ones(15))),
    ("critical-points-complex-values", TypeError, "real",
     lambda e: topology.critical_points(e.grid, np.ones(16, dtype=complex))),
    ("critical-points-string-values", TypeError, "real",
     lambda e: topology.critical_points(e.grid, np.array(["a"] * 16))),
    ("critical-points-nan-values", ValueError, "finite",
     lambda e: topology.critical_points(e.grid, np.full(16, np.nan))),
    ("critical-points-values-on-comm-self", ValueError, "another layout",
     lambda e: topology.critical_points(e.grid, DistVector.zeros(Layout.block(16, MPI.COMM_SELF)))),
    ("critical-points-on-a-numpy-array", TypeError, "Grid or SimplicialComplex",
     lambda e: topology.critical_points(np.zeros((4, 4)), np.ones(16))),
]


@pytest.mark.parametrize("exc, match, call", [c[1:] for c in BAD_INPUTS],
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_the_same_exception_on_every_rank(bad_input_env, request, exc, match,
                                                           call):
    """Each case of BAD_INPUTS raises the same exception type, with a message
    that matches, on every rank (or works, at one rank, where a COMM_SELF
    operand is valid)."""
    check_bad_input(bad_input_env, request, exc, match, call)


def test_critical_points_when_a_rank_owns_no_plane(comm):
    """A 2 x 3 grid has 3 planes (at 4 ranks one rank owns none): its critical
    points are those found on one rank."""
    values = np.array([0.0, 5.0, 1.0, 4.0, 2.0, 3.0])
    cp = topology.critical_points(topology.Grid((2, 3), comm), values)
    ref = topology.critical_points(topology.Grid((2, 3), MPI.COMM_SELF), values)
    got, want = cp.gather(), ref.gather()
    assert_allclose_collective(np.concatenate(got), np.concatenate(want), comm)
