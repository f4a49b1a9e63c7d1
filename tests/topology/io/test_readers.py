"""Reading meshes (meshio) and images (.npy) into domains and fields: round
trips, and damaged or missing files refused on every rank with an error that
names the file's problem."""

import os

import meshio
import numpy as np
import pytest
from mpi4py import MPI

from bad_inputs import check_bad_input
from mpitest import assert_equal_collective, assert_raises_collective, on_rank0
from topology import Grid, critical_points, io as tio
from topology.io import read_image, read_mesh, write_vtu
from topology_cases import write_delaunay_mesh

COMM = MPI.COMM_WORLD


def test_mesh_round_trip_and_image(shared_tmp_path):
    """A mesh read with meshio, written with fields and read back is the same
    complex; an image is read as a grid of shape (nx, ny, nz) and its values."""
    d = shared_tmp_path
    pts, tris = write_delaunay_mesh(os.path.join(d, "m.vtu"), 30, seed=0)
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
    """A file that is not a mesh and a missing image raise OSError on every rank."""
    d = shared_tmp_path
    if COMM.rank == 0:
        with open(os.path.join(d, "junk.vtu"), "w") as fh:
            fh.write("not a mesh")
    COMM.Barrier()
    assert_raises_collective(COMM, OSError, read_mesh, os.path.join(d, "junk.vtu"), COMM,
                             match="meshio cannot read")
    assert_raises_collective(COMM, OSError, read_image, os.path.join(d, "none.npy"), COMM)


def test_damaged_images_and_meshes(shared_tmp_path):
    """Empty, complex, one-dimensional, thin, infinite and truncated images,
    missing files, cut meshes and unknown partitions raise on every rank,
    naming the problem; good files still read."""
    d = shared_tmp_path

    def make():
        open(os.path.join(d, "empty.npy"), "wb").close()
        np.save(os.path.join(d, "cplx.npy"), np.ones((3, 4), complex))
        np.save(os.path.join(d, "line.npy"), np.ones(5))
        np.save(os.path.join(d, "thin.npy"), np.ones((1, 5)))
        bad = np.ones((4, 5))
        bad[2, 3] = np.inf
        np.save(os.path.join(d, "inf.npy"), bad)
        np.save(os.path.join(d, "good.npy"), np.arange(60.0).reshape(5, 4, 3))
        raw = open(os.path.join(d, "good.npy"), "rb").read()
        open(os.path.join(d, "short.npy"), "wb").write(raw[: len(raw) - 100])
        pts = np.random.default_rng(0).random((10, 3))
        meshio.write(os.path.join(d, "m.vtu"),
                     meshio.Mesh(pts, [("triangle", np.array([[0, 1, 2], [1, 2, 3]]))]))
        raw = open(os.path.join(d, "m.vtu"), "rb").read()
        open(os.path.join(d, "cut.vtu"), "wb").write(raw[: len(raw) // 2])
    on_rank0(COMM, make)
    p = lambda name: os.path.join(d, name)  # noqa: E731
    for name, exc, match in (("empty.npy", ValueError, "not a readable .npy"),
                             ("cplx.npy", TypeError, "real numbers"),
                             ("line.npy", ValueError, "2-D or 3-D"),
                             ("thin.npy", ValueError, "at least 2"),
                             ("inf.npy", ValueError, "finite"),
                             ("short.npy", ValueError, "short.npy"),
                             ("none.npy", OSError, "cannot read image .*No such file")):
        assert_raises_collective(COMM, exc, read_image, p(name), COMM, match=match)
    grid, vals = read_image(p("good.npy"), COMM)
    assert_equal_collective(vals.gather(), np.arange(60.0))
    assert_raises_collective(COMM, OSError, read_mesh, p("cut.vtu"), COMM,
                             match="meshio cannot read")
    assert_raises_collective(COMM, ValueError, read_mesh, p("m.vtu"), COMM, partition="rcb2",
                             match="unknown partition")
    cx = read_mesh(p("m.vtu"), COMM)
    assert_equal_collective(cx.simplices(2), np.array([[0, 1, 2], [1, 2, 3]]))


def test_read_mesh_refuses_a_path_that_is_none():
    """A path of None is a TypeError on every rank."""
    assert_raises_collective(COMM, TypeError, lambda: read_mesh(None, COMM), match="path")


# -- bad input: the same exception on every rank -------------------------------------------

BAD_INPUTS = [
    ("topology-read-mesh-missing-file", OSError, "cannot read",
     lambda e: tio.read_mesh(os.path.join(e.dir, "none.vtu"), e.comm)),
    ("topology-read-mesh-unknown-format", OSError, "cannot read",
     lambda e: tio.read_mesh(e.garbage, e.comm)),
    ("topology-read-image-missing-file", OSError, "No such file",
     lambda e: tio.read_image(os.path.join(e.dir, "none.npy"), e.comm)),
    ("topology-read-mesh-unknown-partition", ValueError, "unknown partition",
     lambda e: tio.read_mesh(os.path.join(e.dir, "none.vtu"), e.comm, partition="nope")),
]


@pytest.mark.parametrize("exc, match, call", [c[1:] for c in BAD_INPUTS],
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_the_same_exception_on_every_rank(bad_input_env, request, exc, match,
                                                           call):
    """Each case of BAD_INPUTS raises the same exception type, with a message
    that matches, on every rank (or works, at one rank, where a COMM_SELF
    operand is valid)."""
    check_bad_input(bad_input_env, request, exc, match, call)
