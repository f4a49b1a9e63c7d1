"""Mesh and image I/O for topology: meshio for triangle/tetrahedron meshes and
VTU output (array names as TTK writes them), numpy ``.npy`` for images."""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from dmsolve import DistVector, agree

from ._complex import SimplicialComplex
from ._grid import Grid, freudenthal_cells

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
    ``OSError``/``ValueError`` on every rank.
    """
    exc = None
    data = None
    if comm.Get_rank() == 0:
        try:
            import meshio
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
    Collective on ``comm``.
    """
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
    on rank 0 for the file only. Collective on ``domain.comm``.
    """
    import meshio
    comm = domain.comm
    top = getattr(domain, "dimension", 0)

    def gathered(v, k):
        if not isinstance(v, DistVector):
            return np.asarray(v)
        if isinstance(domain, SimplicialComplex):
            return domain.gather_global(v, k, root=0)
        return v.gather(root=0)
    pd = {k: gathered(v, 0) for k, v in (point_data or {}).items()}
    cd = {k: gathered(v, top) for k, v in (cell_data or {}).items()}
    if isinstance(domain, Grid):
        cells = None
        if comm.Get_rank() == 0:
            cells = _grid_cells(domain.shape)
        kind = "triangle" if domain.dimension == 2 else "tetra"
        points = None
        if comm.Get_rank() == 0:
            c = domain.coordinates(np.arange(domain.global_num_vertices)).astype(np.float64)
            points = c if c.shape[1] == 3 else np.column_stack((c, np.zeros(len(c))))
    else:
        d = domain.dimension
        cells = domain.simplices(d)
        kind = {1: "line", 2: "triangle", 3: "tetra"}[d]
        points = domain.points
        if points is None:
            points = np.zeros((domain.num_vertices, 3))
        elif points.shape[1] == 2:
            points = np.column_stack((points, np.zeros(len(points))))
    exc = None
    if comm.Get_rank() == 0:
        try:
            mesh = meshio.Mesh(points, [(kind, cells)], point_data=pd,
                               cell_data={k: [v] for k, v in cd.items()})
            mesh.write(str(path), file_format="vtu")
        except (OSError, ValueError) as e:
            exc = OSError("cannot write %s: %s" % (path, e))
    agree(comm, exc)


def _grid_cells(shape) -> np.ndarray:
    cells = freudenthal_cells(len(shape))
    strides = np.cumprod((1,) + tuple(shape[:-1]))
    origins = np.stack(np.meshgrid(*[np.arange(n - 1) for n in shape], indexing="ij"),
                       -1).reshape(-1, len(shape))
    ids = (origins[:, None, None, :] + cells[None]) @ strides
    return ids.reshape(-1, cells.shape[1]).astype(np.int64)
