"""What a SimplicialComplex is built from, checked at the door: overlapping
and mixed-dimensional simplex lists, points given globally or per rank
(``local_points``), the vertex partitions by name, and bad input refused on
every rank."""

import numpy as np
import pytest
from mpi4py import MPI

from dmsolve import Registry
from mpitest import assert_collective, assert_equal_collective, assert_raises_collective
from topology import PARTITIONS, SimplicialComplex, critical_points
from topology_cases import (arrays_of, delaunay, global_rows, mixed_complex, my_share,
                            uneven_rows)
from topology_reference import faces, grid_cells

COMM = MPI.COMM_WORLD


def test_union_of_overlapping_inputs_and_mixed_dimensions():
    """Simplices of several dimensions, given by every rank or split between
    ranks, make the same complex: the union of the inputs."""
    parts, n = mixed_complex()
    # every rank passes everything: the union is the same complex
    a = SimplicialComplex(parts, COMM)
    b = SimplicialComplex([p[COMM.rank::COMM.size] for p in parts] if COMM.size > 1 else parts,
                          COMM)
    assert a.num_vertices == n and a.dimension == 3
    for k in range(4):
        assert_equal_collective(a.simplices(k), b.simplices(k))
    ref1 = faces([tuple(r) for p in parts[:-1] for r in p], 1)
    assert_equal_collective(a.simplices(1), ref1)
    assert_equal_collective(a.simplices(3), [[5, 6, 7, 8]])


def test_bad_simplices_and_points_raise_on_every_rank():
    """Vertex ids out of range, degenerate or repeated simplices, too high a
    dimension, non-integer ids and points that are not finite, given on one
    rank only, raise on every rank; so do values that are not finite."""
    pts = np.random.default_rng(0).random((6, 2))
    good = np.array([[0, 1, 2]])
    mine = COMM.rank == COMM.size - 1    # the error sits on one rank only
    cases = [
        ([np.array([[0, 1, 7]])], pts, "out of range"),
        ([np.array([[0, -1, 2]])], None, "out of range"),
        ([np.array([[0, 1, 1]])], None, "degenerate"),
        ([np.array([[0, 1, 2], [2, 1, 0]])], None, "more than once"),
        ([np.array([[0, 1, 2, 3, 4]])], None, "dimension 4"),
        ([np.array([[0.5, 1, 2]])], None, "integer"),
    ]
    for simplices, p, match in cases:
        assert_raises_collective(COMM, (ValueError, TypeError), SimplicialComplex,
                                 simplices if mine else [good], COMM, points=p, match=match)
    bad = pts.copy()
    bad[3, 1] = np.inf
    assert_raises_collective(COMM, ValueError, SimplicialComplex, [good], COMM,
                             points=bad if mine else pts, match="finite")
    cx = SimplicialComplex([good], COMM, points=pts)
    vals = np.zeros(6)
    vals[5] = np.nan
    assert_raises_collective(COMM, ValueError, critical_points, cx, vals, match="finite")


def test_vertex_ids_beyond_memory_are_refused():
    """Vertex ids whose tables would not fit in memory are refused on every rank."""
    assert_raises_collective(COMM, ValueError,
                             lambda: SimplicialComplex([np.array([[0, 1, 10 ** 12]])], COMM),
                             match=r"vertex ids up to 1000000000000 needs about")


def test_partition_errors_raise_on_every_rank():
    """Geometric partitions without points and unknown partitions raise on every rank."""
    pts, cells = delaunay(20, 2, seed=3)
    for geometric in ("rcb", "hilbert"):
        assert_raises_collective(COMM, ValueError, SimplicialComplex, [my_share(cells)], COMM,
                                 partition=geometric, match="give points")
    assert_raises_collective(COMM, ValueError, SimplicialComplex, [my_share(cells)], COMM,
                             points=pts, partition="spectral", match="partition")


def test_partition_registry_names_and_errors():
    """PARTITIONS is a registry whose names ignore case, and an unknown or
    non-string partition is refused with the list of names."""
    pts, cells = delaunay(20, 2, seed=3)
    assert_collective(COMM, isinstance(PARTITIONS, Registry)
                      and PARTITIONS.names() == ["block", "hilbert", "metis", "multilevel", "rcb"], "registry")
    # the registry's one rule for names: case and _/- do not matter
    cx = SimplicialComplex([my_share(cells)], COMM, points=pts, partition="RCB")
    assert_collective(COMM, cx.partition == "rcb", "canonical name")
    ref = SimplicialComplex([my_share(cells)], COMM, points=pts, partition="rcb")
    assert_equal_collective(cx.owned_global_ids(0), ref.owned_global_ids(0))
    assert_raises_collective(COMM, ValueError, SimplicialComplex, [my_share(cells)], COMM,
                             points=pts, partition="spectral",
                             match="unknown partition 'spectral'; available: block, hilbert, metis, multilevel, rcb")
    assert_raises_collective(COMM, TypeError, SimplicialComplex, [my_share(cells)], COMM,
                             points=pts, partition=3, match="partition")


# -- points given per rank ---------------------------------------------------------------------
# SimplicialComplex(local_points=...): each rank gives its rows of the points
# (vertices numbered in rank order, as PETSc's DMPlexCreateFromCellListParallel).
@pytest.mark.parametrize("partition", ["block", "metis", "multilevel", "rcb", "hilbert"])
@pytest.mark.parametrize("dim", [2, 3], ids=["triangles", "tetrahedra"])
def test_local_points_build_the_complex_the_global_array_builds(dim, partition):
    """Points given per rank in uneven blocks build the complex the global
    array builds: the same partition, ids, coordinates, mesh and analyses."""
    n = 80 if dim == 2 else 40
    pts, cells = delaunay(n, dim, seed=30 + dim)
    share = cells[COMM.rank::COMM.size]
    lo, hi = uneven_rows(n)
    ref = SimplicialComplex([share], COMM, points=pts, partition=partition)
    cx = SimplicialComplex([share], COMM, local_points=pts[lo:hi], partition=partition)
    assert_collective(COMM, cx.points is None and cx.has_points and ref.has_points)
    assert_equal_collective(cx.num_vertices, n)
    assert_equal_collective(cx.counts(), ref.counts())
    # the same partition, the same layout indices and global ids on every rank
    assert_equal_collective(cx.owned_global_ids(0), ref.owned_global_ids(0))
    for k in range(dim + 1):
        rows, gids = global_rows(cx, k)
        rrows, rgids = global_rows(ref, k)
        assert_equal_collective(rows, rrows)
        assert_equal_collective(gids, rgids)
    # every held vertex's coordinates, as the global array has them
    held = cx.global_ids(0)
    want = np.column_stack((pts[held], np.zeros((held.size, 3 - dim))))
    assert_equal_collective(cx.vertex_coordinates(held), want)
    assert_equal_collective(cx.vertex_coordinates(held), ref.vertex_coordinates(held))
    # the gathered mesh: every point at its global id
    mesh = cx.mesh(root=0)
    if COMM.rank == 0:
        np.testing.assert_array_equal(mesh[0][:, :dim], pts)
        np.testing.assert_array_equal(mesh[2], ref.mesh(root=0)[2])
    else:
        assert mesh is None and ref.mesh(root=0) is None
    # analyses see the same domain
    f = np.random.default_rng(4).random(n)
    a, b = critical_points(cx, f), critical_points(ref, f)
    assert_equal_collective(a.gather(), b.gather())


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("partition", ["block", "rcb", "hilbert"])
def test_local_points_leave_no_global_size_array(partition):
    """As test_renumbering_keeps_no_global_size_array, with the points too:
    no array of a global count of k-simplices (nor of vertices) on any rank."""
    shape = (12, 3 * COMM.size)
    pts = np.stack(np.meshgrid(*[np.arange(m, dtype=float) for m in shape], indexing="ij"),
                   -1).transpose(1, 0, 2).reshape(-1, 2)
    cells = grid_cells(shape)
    n = pts.shape[0]
    lo, hi = uneven_rows(n)
    cx = SimplicialComplex([cells[COMM.rank::COMM.size]], COMM, local_points=pts[lo:hi],
                           partition=partition)
    counts = cx.counts()
    big = []
    for name, a in arrays_of(vars(cx)):
        if a.ndim == 0:
            continue
        k = 0
        for tag in ("_local", "_gids", "_global"):
            for kk in range(1, cx.dimension + 1):
                if name.startswith("['%s'][%d]" % (tag, kk)):
                    k = kk
        if a.shape[0] >= counts[k]:
            big.append("%s %s" % (name, a.shape))
    assert_collective(COMM, not big, "global-size arrays: %s" % big)
    # a vertex this rank does not hold has no coordinates here
    held = cx.global_ids(0)
    other = np.setdiff1d(np.arange(n), held)
    assert_collective(COMM, other.size > 0, "every vertex held by one rank")
    with pytest.raises(ValueError, match="not held"):
        cx.vertex_coordinates(other[:1])
    assert_equal_collective(cx.vertex_coordinates(held)[:, :2], pts[held])


def test_local_points_errors_raise_on_every_rank():
    """Points given both ways, not finite, of different widths, missing on
    one rank, too few for the vertex ids or not numbers raise on every rank."""
    pts, cells = delaunay(30, 2, seed=9)
    lo, hi = uneven_rows(30)
    mine = pts[lo:hi]
    share = [cells[COMM.rank::COMM.size]]
    assert_raises_collective(COMM, ValueError, SimplicialComplex, share, COMM, points=pts,
                             local_points=mine, match="not both")
    last = COMM.rank == COMM.size - 1
    bad = mine.copy()
    if last and bad.size:
        bad[0, 0] = np.nan
    assert_raises_collective(COMM, ValueError, SimplicialComplex, share, COMM,
                             local_points=bad, match="finite")
    wide = np.column_stack((mine, np.zeros(len(mine)))) if last else mine
    if COMM.size > 1:
        assert_raises_collective(COMM, ValueError, SimplicialComplex, share, COMM,
                                 local_points=wide, match="same number of columns")
        assert_raises_collective(COMM, ValueError, SimplicialComplex, share, COMM,
                                 local_points=None if last else mine, match="every rank")
    # a vertex id beyond the points given over all ranks
    beyond = [np.array([[0, 1, 30]])] if last else share
    assert_raises_collective(COMM, ValueError, SimplicialComplex, beyond, COMM,
                             local_points=mine, match="out of range")
    assert_raises_collective(COMM, TypeError, SimplicialComplex, share, COMM,
                             local_points=mine.astype(str), match="real numbers")
