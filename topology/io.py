"""Mesh and image I/O for topology: meshio for triangle/tetrahedron meshes and
VTU output (array names as TTK writes them), numpy ``.npy`` for images."""

from __future__ import annotations

import meshio
import numpy as np
from mpi4py import MPI

from dmsolve import DistVector, agree
from dmsolve.validate import agreed, check_choice

from ._complex import PARTITIONS, SimplicialComplex
from ._domain import check_domain
from ._grid import Grid

__all__ = ["read_mesh", "read_image", "write_vtu", "CRITICAL_TYPE"]

#: TTK's point-data name for critical types
CRITICAL_TYPE = "CriticalType"
_CELLS = {"line": 1, "triangle": 2, "tetra": 3}


def read_mesh(path, comm: MPI.Comm, *, partition: str = "block") -> SimplicialComplex:
    """Read a triangle or tetrahedral mesh with meshio into a SimplicialComplex.

    Rank 0 reads the file and broadcasts points and cells; each rank then
    passes its share of the cells. ``partition`` is passed on to
    :class:`SimplicialComplex` ("block", "metis" or "rcb": the mesh has
    points). Collective on ``comm``; a file meshio
    cannot read, or one without line/triangle/tetra cells, raises the same
    ``OSError``/``ValueError`` on every rank, and so does an unknown
    ``partition`` (before the file is read).
    """
    if not isinstance(comm, MPI.Comm):
        raise TypeError("comm must be an mpi4py MPI.Comm, got %s" % type(comm).__name__)
    with agreed(comm):
        partition = check_choice("partition", partition, PARTITIONS)
    exc = None
    data = None
    if comm.Get_rank() == 0:
        try:
            try:
                mesh = meshio.read(path)
            except (Exception, SystemExit) as e:  # noqa: BLE001 - meshio may even sys.exit
                raise OSError("meshio cannot read %s: %s" % (path, e)) from e
            cells = [np.asarray(b.data, dtype=np.int64) for b in mesh.cells if b.type in _CELLS]
            if not cells:
                raise ValueError("%s has no line, triangle or tetra cells (found %s)"
                                 % (path, sorted({b.type for b in mesh.cells})))
            data = (np.asarray(mesh.points, dtype=np.float64), cells)
        except (OSError, ValueError) as e:
            exc = e
    agree(comm, exc)
    points, cells = comm.bcast(data, root=0)
    rank, size = comm.Get_rank(), comm.Get_size()
    return SimplicialComplex([c[rank::size] for c in cells], comm, points=points,
                             partition=partition)


def read_image(path, comm: MPI.Comm) -> tuple[Grid, DistVector]:
    """A 2D or 3D ``.npy`` image as ``(Grid, values)``.

    The array's numpy shape is ``(ny, nx)`` or ``(nz, ny, nx)`` (C order is
    vertex id order). Every rank memory-maps the file and keeps its slab.
    Collective on ``comm``; a file numpy cannot load, or an array of another
    dimension, raises the same ``OSError``/``ValueError`` on every rank.
    """
    if not isinstance(comm, MPI.Comm):
        raise TypeError("comm must be an mpi4py MPI.Comm, got %s" % type(comm).__name__)
    exc = None
    arr = None
    try:
        arr = np.load(path, mmap_mode="r")
        if arr.ndim not in (2, 3):
            raise ValueError("image %s must be 2-D or 3-D, got shape %s" % (path, arr.shape))
    except (OSError, ValueError) as e:
        exc = OSError(str(e)) if not isinstance(e, ValueError) else e
    agree(comm, exc)
    grid = Grid(arr.shape[::-1], comm)
    lay = grid.vertex_layout
    flat = arr.reshape(-1)
    mine = DistVector(lay, np.array(flat[lay.start:lay.stop], dtype=np.float64))
    return grid, grid.vertex_values(mine, name="image %s" % path)


def write_vtu(path, domain, point_data: dict | None = None,
              cell_data: dict | None = None) -> None:
    """Write ``domain`` with point data (and cell data on a complex's top
    cells) to a VTU file for ParaView, on rank 0.

    Values may be DistVectors (gathered to rank 0, in global-id order) or
    global arrays. For a :class:`Grid` the Freudenthal cells are generated
    on rank 0 for the file only. Collective on ``domain.comm``; a file that
    cannot be written raises the same ``OSError`` on every rank.

    Raises
    ------
    TypeError
        If ``domain`` is not a Grid or SimplicialComplex, or ``point_data``
        or ``cell_data`` is not a dict (on every rank).
    """
    check_domain(domain)
    comm = domain.comm
    with agreed(comm):
        for name, data in (("point_data", point_data), ("cell_data", cell_data)):
            if data is not None and not isinstance(data, dict):
                raise TypeError("%s must be a dict of name -> values, got %s"
                                % (name, type(data).__name__))
    top = domain.dimension

    def gathered(v, k):
        if not isinstance(v, DistVector):
            return np.asarray(v)
        return domain.gather_global(v, k, root=0)
    pd = {k: gathered(v, 0) for k, v in (point_data or {}).items()}
    cd = {k: gathered(v, top) for k, v in (cell_data or {}).items()}
    mesh = domain.mesh(root=0)
    exc = None
    if comm.Get_rank() == 0:
        points, kind, cells = mesh
        try:
            meshio.Mesh(points, [(kind, cells)], point_data=pd,
                        cell_data={k: [v] for k, v in cd.items()}).write(str(path),
                                                                         file_format="vtu")
        except (OSError, ValueError) as e:
            exc = OSError("cannot write %s: %s" % (path, e))
    agree(comm, exc)
