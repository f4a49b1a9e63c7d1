"""The Domain protocol: a grid and the same triangulation given as a
simplicial complex answer it alike under every partition, and the analyses
refuse what is not a domain on every rank."""

import numpy as np
import pytest
from mpi4py import MPI

from mpitest import assert_collective, assert_equal_collective, assert_raises_collective
from topology import (Domain, Grid, SimplicialComplex, discrete_gradient, global_order,
                      merge_tree, persistence_diagram)
from topology_cases import my_share
from topology_reference import faces, grid_cells

COMM = MPI.COMM_WORLD


def _gathered(comm, owned_ids, local):
    """Rows of ``local`` (one per owned vertex) in global vertex id order, everywhere."""
    ids = np.concatenate(comm.allgather(np.asarray(owned_ids)))
    vals = np.concatenate(comm.allgather(np.asarray(local)))
    return vals[np.argsort(ids)]


@pytest.mark.parametrize("partition", ["block", "metis", "multilevel", "rcb", "hilbert"])
@pytest.mark.parametrize("shape", [(5, 4), (4, 3, 5)], ids=["2d", "3d"])
def test_grid_and_complex_answer_the_domain_protocol_alike(shape, partition):
    """Numbering, link components, boundary flags, coordinates and the written
    mesh of a grid equal those of its triangulation given explicitly."""
    grid = Grid(shape, COMM)
    pts = grid.coordinates(np.arange(grid.global_num_vertices)).astype(float)
    cx = SimplicialComplex([my_share(grid_cells(shape))], COMM, points=pts, partition=partition)
    assert_collective(COMM, isinstance(grid, Domain) and isinstance(cx, Domain), "protocol")
    assert_collective(COMM, grid.stencil is not None and cx.stencil is None, "stencil")
    assert_collective(COMM, grid.is_ball and not cx.is_ball, "is_ball")
    assert_collective(COMM, cx.renumbered == (partition != "block") and not grid.renumbered,
                      "renumbered")
    # numbering: global ids and layout indices translate both ways
    for d in (grid, cx):
        ghost = d.global_ids(0)
        assert_equal_collective(d.layout_to_global(d.ghosted_ids()), ghost)
        assert_equal_collective(d.global_to_layout(ghost), d.ghosted_ids())
        assert_equal_collective(ghost[d.owned_positions()], d.owned_global_ids(0))
        assert_collective(COMM, d.local_num_vertices == d.vertex_layout.local_size, "local")
    # the same answers, vertex by vertex, in global id order
    fld = np.random.default_rng(7).integers(0, 5, grid.global_num_vertices).astype(float)
    per_vertex = []
    for d in (grid, cx):
        order = global_order(d.vertex_values(fld), ids=d.owned_global_ids(0))
        lower, upper, onb, lb, ub = d.link_components(d.ghosted(order.local))
        cols = [lower, upper, d.owned_boundary_vertices()]
        if len(shape) == 3:
            # the link flags matter (and a grid computes them) only for the
            # regular-looking boundary vertices that they may make saddles
            cand = onb & (lower == 1) & (upper == 1)
            cols += [onb, lb & cand, ub & cand]
        else:
            assert_collective(COMM, onb is None and lb is None and ub is None, "2D flags")
        per_vertex.append(_gathered(COMM, d.owned_global_ids(0),
                                    np.stack([np.asarray(c, np.int64) for c in cols], 1)))
    assert_equal_collective(per_vertex[0], per_vertex[1])
    some = np.arange(0, grid.global_num_vertices, 3)
    assert_equal_collective(grid.vertex_coordinates(some), cx.vertex_coordinates(some))
    assert_collective(COMM, grid.vertex_coordinates(some).shape == (some.size, 3), "3 columns")
    # the written mesh: same points, same cells (as sets of sorted rows)
    meshes = [d.mesh(root=0) for d in (grid, cx)]
    if COMM.rank == 0:
        (p0, k0, c0), (p1, k1, c1) = meshes
        same = (k0 == k1 and np.array_equal(p0, p1)
                and np.array_equal(faces(c0, len(shape)), faces(c1, len(shape))))
    else:
        same = meshes == [None, None]
    assert_collective(COMM, same, "mesh")


def test_analyses_refuse_what_is_not_a_domain():
    """An array, a string or None in place of a domain is a TypeError naming
    the domain kinds, on every rank."""
    f = np.arange(20.0)
    cases = [
        (lambda: persistence_diagram(np.zeros(4), f), TypeError, "Grid or SimplicialComplex"),
        (lambda: merge_tree("grid", f), TypeError, "Grid or SimplicialComplex"),
        (lambda: discrete_gradient(None, f), TypeError, "Grid or SimplicialComplex"),
    ]
    for call, exc, match in cases:
        assert_raises_collective(COMM, exc, call, match=match)
