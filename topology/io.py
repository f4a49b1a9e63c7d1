"""Mesh and image I/O for topology: meshio for triangle/tetrahedron meshes and
VTU output (array names as TTK writes them), numpy ``.npy`` for images.

Every failure is agreed on: a file that cannot be read or written raises
``OSError`` naming it, malformed content ``ValueError``, on every rank."""

from __future__ import annotations

import meshio
import numpy as np
from mpi4py import MPI

from dmsolve import DistVector, agree
from dmsolve.io import check_writable
from dmsolve.validate import agreed, check_choice

from ._complex import PARTITIONS, SimplicialComplex
from ._domain import check_domain
from ._grid import Grid, freudenthal_cells

__all__ = ["read_mesh", "read_image", "write_vtu", "CRITICAL_TYPE"]

#: TTK's point-data name for critical types
CRITICAL_TYPE = "CriticalType"
_CELLS = {"line": 1, "triangle": 2, "tetra": 3}


def _check_comm(comm) -> None:
    if not isinstance(comm, MPI.Comm):
        raise TypeError("comm must be an mpi4py MPI.Comm, got %s" % type(comm).__name__)


def _check_path(path) -> str:
    import os
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError("path must be a path (str or os.PathLike), got %s"
                        % type(path).__name__)
    path = os.fspath(path)
    if not isinstance(path, str) or not path:
        raise ValueError("path must be a non-empty str path, got %r" % (path,))
    return path


def read_mesh(path, comm: MPI.Comm, *, partition: str = "block") -> SimplicialComplex:
    """Read a triangle or tetrahedral mesh with meshio into a SimplicialComplex.

    Rank 0 reads the file and broadcasts points and cells; each rank then
    passes its share of the cells. ``partition`` is passed on to
    :class:`SimplicialComplex` ("block", "metis" or "rcb": the mesh has
    points). Collective on ``comm``; a file meshio
    cannot read (missing, unknown format, truncated or corrupt: whatever
    meshio raises), or one without line/triangle/tetra cells, raises the
    same ``OSError``/``ValueError`` on every rank, and so does an unknown
    ``partition`` (before the file is read).
    """
    _check_comm(comm)
    with agreed(comm):
        path = _check_path(path)
        partition = check_choice("partition", partition, PARTITIONS)
    exc = None
    data = None
    if comm.Get_rank() == 0:
        try:
            try:
                mesh = meshio.read(path)
            except (Exception, SystemExit) as e:  # noqa: BLE001 - meshio may even sys.exit
                raise OSError("meshio cannot read %s: %s: %s" % (path, type(e).__name__, e)) \
                    from e
            try:
                cells = [np.asarray(b.data, dtype=np.int64) for b in mesh.cells
                         if b.type in _CELLS]
                points = np.asarray(mesh.points, dtype=np.float64)
            except (TypeError, ValueError) as e:
                raise ValueError("%s: cells or points are not numeric arrays: %s"
                                 % (path, e)) from e
            if not cells:
                raise ValueError("%s has no line, triangle or tetra cells (found %s)"
                                 % (path, sorted({b.type for b in mesh.cells})))
            data = (points, cells)
        except (OSError, ValueError) as e:
            exc = e
        except Exception as e:  # noqa: BLE001 - agreed, never left on rank 0 alone
            exc = ValueError("%s: %s: %s" % (path, type(e).__name__, e))
    agree(comm, exc)
    points, cells = comm.bcast(data, root=0)
    rank, size = comm.Get_rank(), comm.Get_size()
    return SimplicialComplex([c[rank::size] for c in cells], comm, points=points,
                             partition=partition)


def read_image(path, comm: MPI.Comm) -> tuple[Grid, DistVector]:
    """A 2D or 3D ``.npy`` image as ``(Grid, values)``.

    The array's numpy shape is ``(ny, nx)`` or ``(nz, ny, nx)`` (C order is
    vertex id order). Every rank memory-maps the file and keeps its slab.
    Collective on ``comm``; a file numpy cannot open raises the same
    ``OSError`` on every rank; a file that is not a ``.npy`` array (or a
    truncated one), an array of another dimension, with a side below 2, of
    non-real dtype or with non-finite values, raises the same ``ValueError``
    (``TypeError`` for the dtype).
    """
    _check_comm(comm)
    with agreed(comm):
        path = _check_path(path)
    exc = None
    arr = None
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
        if not isinstance(arr, np.ndarray):
            raise ValueError("%s holds %s, not one array" % (path, type(arr).__name__))
        if arr.ndim not in (2, 3):
            raise ValueError("image %s must be 2-D or 3-D, got shape %s" % (path, arr.shape))
        if min(arr.shape) < 2:
            raise ValueError("image %s has shape %s; every side must be at least 2"
                             % (path, arr.shape))
        if arr.dtype.kind not in "fiub":
            raise TypeError("image %s must hold real numbers, got dtype %s" % (path, arr.dtype))
    except (OSError, ValueError, TypeError) as e:
        if isinstance(e, OSError) and getattr(e, "errno", None) is not None:
            exc = OSError("cannot read image %s: %s" % (path, e.strerror or e))
        elif isinstance(e, (ValueError, TypeError)) and path in str(e):
            exc = e
        else:
            exc = ValueError("%s is not a readable .npy array: %s" % (path, e))
    except Exception as e:  # noqa: BLE001 - EOFError on an empty file, ...
        exc = ValueError("%s is not a readable .npy array: %s: %s"
                         % (path, type(e).__name__, e))
    # the same verdict on every rank, also if only some ranks failed
    agree(comm, exc)
    grid = Grid(arr.shape[::-1], comm)
    lay = grid.vertex_layout
    mine = None
    with agreed(comm):
        try:
            plane = int(np.prod(arr.shape[1:]))
            mine = np.array(arr[lay.start // plane:lay.stop // plane],
                            dtype=np.float64).reshape(-1)
        except Exception as e:  # noqa: BLE001 - a short file maps but cannot be read
            raise ValueError("%s cannot be read as an image: %s: %s"
                             % (path, type(e).__name__, e)) from e
    return grid, grid.vertex_values(DistVector(lay, mine), name="image %s" % path)


def _field(domain, name, v, k: int, count: int, what: str):
    """A point or cell field, checked: a DistVector on the domain's layout of
    dimension ``k`` or a global array of ``count`` rows. Not collective."""
    if not isinstance(name, str) or not name:
        raise TypeError("%s names must be non-empty strings, got %r" % (what, name))
    if isinstance(v, DistVector):
        lay = domain.vertex_layout if k == 0 else domain.simplex_layout(k)
        if v.layout != lay:
            raise ValueError("%s[%r] is a DistVector of global size %d not on the domain's "
                             "%s layout (global size %d)" % (what, name, v.global_size,
                                                            "vertex" if k == 0 else
                                                            "%d-simplex" % k, lay.global_size))
        return
    a = np.asarray(v)
    if a.dtype.kind not in "fiub" or a.ndim not in (1, 2) or a.shape[0] != count:
        raise ValueError("%s[%r] must be real numbers of shape (%d,) or (%d, c), got dtype %s "
                         "shape %s" % (what, name, count, count, a.dtype, a.shape))


def write_vtu(path, domain, point_data: dict | None = None,
              cell_data: dict | None = None) -> None:
    """Write ``domain`` with point data (and cell data on a complex's top
    cells) to a VTU file for ParaView, on rank 0.

    Values may be DistVectors (gathered to rank 0, in global-id order) or
    global arrays with one row per point (cell). For a :class:`Grid` the
    Freudenthal cells are generated on rank 0 for the file only, and cell
    data must be global arrays (one row per triangle or tetrahedron).
    Collective on ``domain.comm``; rank 0 checks that the path can be
    written before anything is gathered.

    Raises
    ------
    TypeError
        If ``domain`` is not a Grid or SimplicialComplex, or ``point_data``
        or ``cell_data`` is not a dict of str names (on every rank).
    ValueError
        On every rank, if a field has the wrong length or layout.
    OSError
        On every rank, if the file cannot be written.
    """
    check_domain(domain)
    comm = domain.comm
    top = domain.dimension
    with agreed(comm):
        path = _check_path(path)
        for name, data in (("point_data", point_data), ("cell_data", cell_data)):
            if data is not None and not isinstance(data, dict):
                raise TypeError("%s must be a dict of name -> values, got %s"
                                % (name, type(data).__name__))
        ncells = (int(np.prod([n - 1 for n in domain.shape])) * len(freudenthal_cells(top))
                  if isinstance(domain, Grid) else domain.simplex_layout(top).global_size)
        for name, v in (point_data or {}).items():
            _field(domain, name, v, 0, domain.global_num_vertices, "point_data")
        for name, v in (cell_data or {}).items():
            if isinstance(domain, Grid) and isinstance(v, DistVector):
                raise ValueError("cell_data[%r]: a Grid has no cell layout; give a global "
                                 "array of %d values" % (name, ncells))
            _field(domain, name, v, top, ncells, "cell_data")
    check_writable(path, comm)

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
                        cell_data={k: [v] for k, v in cd.items()}).write(path,
                                                                         file_format="vtu")
        except Exception as e:  # noqa: BLE001 - whatever meshio raises is agreed on
            exc = OSError("cannot write %s: %s: %s" % (path, type(e).__name__, e))
    agree(comm, exc)
