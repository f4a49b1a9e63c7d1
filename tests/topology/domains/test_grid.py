"""The grid kinds: the Freudenthal grid's layout, ghost layer and
triangulation as a complex, the cubical grid's mesh, and the shapes, complexes
and out-of-core options each kind refuses on every rank."""

import os

import numpy as np
import pytest
from mpi4py import MPI

import gudhi_ref
import topology
from bad_inputs import check_bad_input
from dmsolve import DistVector
from mpitest import (assert_allclose_collective, assert_collective, assert_equal_collective,
                     assert_raises_collective)
from topology import (Grid, betti_numbers, critical_points, discrete_gradient,
                      hodge_decomposition, persistence_diagram)
from topology_cases import GRID_SHAPES, raw_field
from topology_reference import faces, grid_cells

COMM = MPI.COMM_WORLD


@pytest.mark.parametrize("shape", list(GRID_SHAPES.values()), ids=list(GRID_SHAPES))
def test_grid_layout_and_ghosts(shape):
    """The ghosted vertices carry the owned values of their neighbours, and
    every owned vertex has its whole star among the local edges."""
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


@pytest.mark.parametrize("shape", [(5, 4), (4, 3, 3)])
def test_grid_to_complex_is_the_freudenthal_triangulation(shape):
    """``Grid.to_complex()`` has the simplices of the Freudenthal
    triangulation, the Betti numbers of a box, a Hodge decomposition without
    harmonic part, and the grid's vertex numbering."""
    g = Grid(shape, COMM)
    cx = g.to_complex()
    want = gudhi_ref.grid_simplices(shape)
    for k in range(len(shape) + 1):
        got = cx.simplices(k) if k else cx.simplices(0)
        assert_equal_collective(got, want[k], err_msg="k=%d" % k)
    assert_equal_collective(betti_numbers(cx), [1] + [0] * len(shape))
    # a flow on the grid's edges: the box has no harmonic part
    m = cx.simplex_layout(1).global_size
    flow = np.random.default_rng(2).standard_normal(m)
    hd = hodge_decomposition(cx, flow, rtol=1e-10)
    total = hd.gradient.gather() + hd.curl.gather() + hd.harmonic.gather()
    assert_allclose_collective(total, flow, COMM, rtol=0, atol=1e-12)
    assert_collective(COMM, hd.energies["harmonic"] < 1e-14 * hd.energies["total"],
                      str(hd.energies))
    # vertex fields index the complex like the grid
    f = np.random.default_rng(3).random(g.global_num_vertices)
    assert_equal_collective(critical_points(cx, f).gather()[1], critical_points(g, f).gather()[1])


def test_grid_refuses_thin_and_four_dimensional_shapes():
    """A side of one vertex and a fourth axis are refused on every rank."""
    assert_raises_collective(COMM, ValueError, Grid, (1, 5), COMM, match="at least 2")
    assert_raises_collective(COMM, TypeError, Grid, (4, 5, 6, 7), COMM)


def test_grid_refuses_negative_missing_and_huge_shapes():
    """A negative side, no shape, and a grid too large for the ranks' memory
    are refused on every rank."""
    cases = [
        (lambda: Grid((-3, 4), COMM), ValueError, "at least 2"),
        (lambda: Grid(None, COMM), TypeError, "shape must be 2 or 3 integers, got None"),
        (lambda: Grid((10 ** 6,) * 3, COMM), ValueError, r"needs about .* GB per rank"),
    ]
    for call, exc, match in cases:
        assert_raises_collective(COMM, exc, call, match=match)


def test_cubical_grid_refuses_bad_input():
    """Unknown complexes, a cubical out-of-core grid, fields of the wrong
    shape and a triangulation of the cubical grid are refused on every rank."""
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


def test_cubical_mesh_cells_are_squares_and_cubes():
    """The cubical grid's mesh is one quad or hexahedron per grid cell, on rank 0."""
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


def test_out_of_core_grid_refuses_bad_budgets_and_slabs(tmp_path):
    """A memory budget too small, a spill directory that does not exist and
    more slabs than planes are refused on every rank, and no spill directory
    is left behind."""
    raw, _ = raw_field(tmp_path, (6, 5, 7), 5, False)
    assert_raises_collective(COMM, ValueError, Grid, (64, 64, 64), COMM, memory_budget="1KiB")
    assert_raises_collective(COMM, ValueError, Grid, (6, 5, 7), COMM, virtual=1,
                             spill_dir=raw.path + ".nodir")
    assert_raises_collective(COMM, ValueError, Grid, (6, 5, 7), COMM, virtual=99)
    left = [n for n in os.listdir(os.path.dirname(raw.path)) if n.startswith("dmsolve-bsp")]
    assert left == []


# -- bad input: the same exception on every rank -------------------------------------------

BAD_INPUTS = [
    ("grid-four-dimensions", TypeError, "2 or 3", lambda e: topology.Grid((2, 2, 2, 2), e.comm)),
    ("grid-comm-not-a-comm", TypeError, "MPI.Comm", lambda e: topology.Grid((4, 4), "world")),
    ("grid-dimension-one", ValueError, "at least 2", lambda e: topology.Grid((1, 4), e.comm)),
]


@pytest.mark.parametrize("exc, match, call", [c[1:] for c in BAD_INPUTS],
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_the_same_exception_on_every_rank(bad_input_env, request, exc, match,
                                                           call):
    """Each case of BAD_INPUTS raises the same exception type, with a message
    that matches, on every rank (or works, at one rank, where a COMM_SELF
    operand is valid)."""
    check_bad_input(bad_input_env, request, exc, match, call)
