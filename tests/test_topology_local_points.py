"""SimplicialComplex(local_points=...): each rank gives its rows of the points
(vertices numbered in rank order, as PETSc's DMPlexCreateFromCellListParallel),
and the complex equals the one built from the global array, with no array of
global size on any rank."""

import numpy as np
import pytest
from mpi4py import MPI

from mpitest import assert_collective, assert_equal_collective, assert_raises_collective
from test_topology_complex import _arrays, delaunay, global_rows
from test_topology_ref import grid_cells
from topology import SimplicialComplex, critical_points
from topology.io import write_pvtu

COMM = MPI.COMM_WORLD


def uneven_rows(n):
    """This rank's rows of n points numbered in rank order, in uneven blocks
    (rank 0 gets none beyond one rank, the last rank the most), so that the
    given rows are not the block layout's."""
    w = np.arange(COMM.size, dtype=np.int64) + (1 if COMM.size == 1 else 0)
    cuts = np.concatenate(([0], np.cumsum(w) * n // w.sum()))
    return int(cuts[COMM.rank]), int(cuts[COMM.rank + 1])


@pytest.mark.parametrize("partition", ["block", "metis", "multilevel", "rcb", "hilbert"])
@pytest.mark.parametrize("dim", [2, 3], ids=["triangles", "tetrahedra"])
def test_local_points_build_the_complex_the_global_array_builds(dim, partition):
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
    for name, a in _arrays(vars(cx)):
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


def test_local_points_pvtu_pieces_carry_the_points(tmp_path_factory):
    pts, cells = delaunay(50, 2, seed=8)
    lo, hi = uneven_rows(pts.shape[0])
    cx = SimplicialComplex([cells[COMM.rank::COMM.size]], COMM, local_points=pts[lo:hi],
                           partition="rcb")
    d = COMM.bcast(str(tmp_path_factory.mktemp("lp")) if COMM.rank == 0 else None)
    write_pvtu(d + "/m.pvtu", cx)
    COMM.Barrier()
    import meshio
    piece = meshio.read("%s/m/m_%d.vtu" % (d, COMM.rank))
    gid = piece.point_data["GlobalPointIds"]
    assert_equal_collective(piece.points[:, :2], pts[gid])


def test_local_points_errors_raise_on_every_rank():
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
