"""meshio and .npy I/O: round trips, TTK array names, collective errors."""

import os

import meshio
import numpy as np
from mpi4py import MPI
from scipy.spatial import Delaunay

from dmsolve import DistVector
from mpitest import assert_equal_collective, assert_raises_collective, on_rank0
from test_topology_ref import reference_types
from topology import Grid, critical_points
from topology.io import read_image, read_mesh, write_vtu

COMM = MPI.COMM_WORLD


def _delaunay_mesh(path, n, seed):
    """Rank 0 writes the Delaunay triangulation of ``n`` random points to
    ``path``; every rank returns the points and triangles. Collective."""
    pts = np.random.default_rng(seed).random((n, 2))
    tris = Delaunay(pts).simplices
    on_rank0(COMM, meshio.write, path,
             meshio.Mesh(np.column_stack((pts, 0 * pts[:, 0])), [("triangle", tris)]))
    return pts, tris


def test_mesh_round_trip_and_image(shared_tmp_path):
    d = shared_tmp_path
    pts, tris = _delaunay_mesh(os.path.join(d, "m.vtu"), 30, seed=0)
    cx = read_mesh(os.path.join(d, "m.vtu"), COMM)
    assert_equal_collective(cx.simplices(2), np.unique(np.sort(tris, 1), axis=0))
    fld = np.random.default_rng(1).random(30)
    cp = critical_points(cx, fld)
    write_vtu(os.path.join(d, "out.vtu"), cx, point_data={"CriticalType": cp.types, "f": fld})
    back = read_mesh(os.path.join(d, "out.vtu"), COMM)
    assert_equal_collective(back.simplices(2), cx.simplices(2))
    # images: numpy shape (nz, ny, nx)
    img = np.random.default_rng(2).random((5, 4, 3))
    on_rank0(COMM, np.save, os.path.join(d, "img.npy"), img)
    grid, vals = read_image(os.path.join(d, "img.npy"), COMM)
    assert_equal_collective(grid.shape, (3, 4, 5))
    assert_equal_collective(vals.gather(), img.ravel())
    a = critical_points(grid, vals).gather()
    b = critical_points(Grid((3, 4, 5), COMM), img).gather()
    assert_equal_collective(a[0], b[0])


def test_unreadable_files_raise_on_every_rank(shared_tmp_path):
    d = shared_tmp_path
    if COMM.rank == 0:
        with open(os.path.join(d, "junk.vtu"), "w") as fh:
            fh.write("not a mesh")
    COMM.Barrier()
    assert_raises_collective(COMM, OSError, read_mesh, os.path.join(d, "junk.vtu"), COMM,
                             match="meshio cannot read")
    assert_raises_collective(COMM, OSError, read_image, os.path.join(d, "none.npy"), COMM)


def test_partitioned_mesh_writes_fields_in_global_id_order(shared_tmp_path):
    d = shared_tmp_path
    pts, tris = _delaunay_mesh(os.path.join(d, "m.vtu"), 40, seed=5)
    fld = np.random.default_rng(6).integers(0, 3, 40).astype(float)
    for partition in ("metis", "rcb"):
        cx = read_mesh(os.path.join(d, "m.vtu"), COMM, partition=partition)
        assert_equal_collective(cx.simplices(2), np.unique(np.sort(tris, 1), axis=0))
        cp = critical_points(cx, fld)
        ids = np.arange(cx.simplex_layout(2).global_size, dtype=float)
        cells = DistVector(cx.simplex_layout(2), cx.owned_global_ids(2).astype(float))
        out = os.path.join(d, "out-%s.vtu" % partition)
        write_vtu(out, cx, point_data={"CriticalType": cp.types, "f": fld},
                  cell_data={"id": cells})
        m = on_rank0(COMM, meshio.read, out)
        got = (m.point_data["CriticalType"], m.point_data["f"], m.cell_data["id"][0])
        assert_equal_collective(got[0], reference_types(tris, fld, 40))
        assert_equal_collective(got[1], fld)
        assert_equal_collective(got[2], ids)
