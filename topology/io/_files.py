"""Mesh and image I/O for topology: meshio for triangle/tetrahedron meshes and
VTU output (array names as TTK writes them), a ``.pvtu`` with one ``.vtu``
piece per rank for data too large for one rank, numpy ``.npy`` for images.

Every failure is agreed on: a file that cannot be read or written raises
``OSError`` naming it, malformed content ``ValueError``, on every rank."""

from __future__ import annotations

import os

import numpy as np
from mpi4py import MPI

from dmsolve import DistVector, agree
from dmsolve.io import atomic_path, check_writable
from dmsolve.validate import agreed, check_choice

from ..core import RESERVED, check_domain, check_pvtu_path, vtk_type, write_parallel
from ..domains import PARTITIONS, Grid, SimplicialComplex

__all__ = ["read_mesh", "read_image", "write_vtu", "write_pvtu", "CRITICAL_TYPE"]

#: TTK's point-data name for critical types
CRITICAL_TYPE = "CriticalType"
_CELLS = {"line": 1, "triangle": 2, "tetra": 3}


def _check_comm(comm) -> None:
    if not isinstance(comm, MPI.Comm):
        raise TypeError("comm must be an mpi4py MPI.Comm, got %s" % type(comm).__name__)


def _check_path(path) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError("path must be a path (str or os.PathLike), got %s"
                        % type(path).__name__)
    path = os.fspath(path)
    if not isinstance(path, str) or not path:
        raise ValueError("path must be a non-empty str path, got %r" % (path,))
    return path


def read_mesh(path, comm: MPI.Comm, *, partition: str = "block") -> SimplicialComplex:
    """Read a triangle or tetrahedral mesh with meshio into a SimplicialComplex.

    Rank 0 reads the file and scatters the points (a contiguous block per
    rank, as ``local_points``) and the cells (every ``size``-th); no other
    rank holds the whole mesh. ``partition`` is passed on to
    :class:`SimplicialComplex` (any of :data:`PARTITIONS`: the mesh has
    points). Collective on ``comm``; a file meshio
    cannot read (missing, unknown format, truncated or corrupt: whatever
    meshio raises), or one without line/triangle/tetra cells, raises the
    same ``OSError``/``ValueError`` on every rank, and so does an unknown
    ``partition`` (before the file is read).
    """
    import meshio
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
    # each rank gets its block of the points and its share of the cells (a
    # scatter: only rank 0, which read the file, holds the whole mesh)
    size = comm.Get_size()
    shares = None
    if comm.Get_rank() == 0:
        points, cells = data
        lay = np.linspace(0, points.shape[0], size + 1).astype(np.int64)
        shares = [(points[lay[r]:lay[r + 1]], [c[r::size] for c in cells])
                  for r in range(size)]
    local_points, cells = comm.scatter(shares, root=0)
    return SimplicialComplex(cells, comm, local_points=local_points, partition=partition)


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


def _check_fields(domain, point_data, cell_data) -> int:
    """The door checks of :func:`write_vtu` and :func:`write_pvtu`: the
    field dicts and every field's type, length and layout; returns the
    number of top cells. Not collective (call it in ``agreed``)."""
    top = domain.dimension
    for name, data in (("point_data", point_data), ("cell_data", cell_data)):
        if data is not None and not isinstance(data, dict):
            raise TypeError("%s must be a dict of name -> values, got %s"
                            % (name, type(data).__name__))
    ncells = domain.global_num_cells
    for name, v in (point_data or {}).items():
        _field(domain, name, v, 0, domain.global_num_vertices, "point_data")
    for name, v in (cell_data or {}).items():
        if domain.top_cell_layout() is None and isinstance(v, DistVector):
            raise ValueError("cell_data[%r]: a Grid has no cell layout; give a global "
                             "array of %d values" % (name, ncells))
        _field(domain, name, v, top, ncells, "cell_data")
    return ncells


def write_vtu(path, domain, point_data: dict | None = None,
              cell_data: dict | None = None) -> None:
    """Write ``domain`` with point data (and cell data on a complex's top
    cells) to a VTU file for ParaView, on rank 0.

    Values may be DistVectors (gathered to rank 0, in global-id order) or
    global arrays with one row per point (cell). For a :class:`Grid` the
    Freudenthal cells (squares or cubes on a cubical grid) are generated on
    rank 0 for the file only, and cell data must be global arrays (one row
    per triangle or tetrahedron, square or cube).
    Collective on ``domain.comm``; rank 0 checks that the path can be
    written before anything is gathered.

    Every field and the whole mesh pass through rank 0: this is for small
    data. :func:`write_pvtu` writes one piece per rank instead, with no
    gathering.

    Raises
    ------
    TypeError
        If ``domain`` is not a Grid or SimplicialComplex, or ``point_data``
        or ``cell_data`` is not a dict of str names (on every rank).
    ValueError
        On every rank, if a field has the wrong length or layout.
    OSError
        On every rank, if the file cannot be written (the file is written
        to a temporary moved into place: a failed write leaves the
        previous file as it was, and no temporary).
    """
    import meshio
    check_domain(domain)
    comm = domain.comm
    top = domain.dimension
    with agreed(comm):
        path = _check_path(path)
        _check_fields(domain, point_data, cell_data)
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
            with atomic_path(path) as tmp:
                meshio.Mesh(points, [(kind, cells)], point_data=pd,
                            cell_data={k: [v] for k, v in cd.items()}).write(
                                tmp, file_format="vtu")
        except Exception as e:  # noqa: BLE001 - whatever meshio raises is agreed on
            exc = OSError("cannot write %s: %s: %s" % (path, type(e).__name__, e))
    agree(comm, exc)


def _local_piece(domain):
    """This rank's piece: ``(sel, cells, cell_ids, kind)``, with ``sel`` the
    positions in ``domain.ghosted_ids()`` of the piece's points (the owned
    vertices and every vertex of an owned top cell, ascending), ``cells`` the
    owned top cells as rows of piece point numbers (vertices in the order
    :func:`write_vtu` writes them) and ``cell_ids`` their global ids. Not
    collective."""
    own = domain.owned_positions()
    cellpos, cell_ids = domain.local_top_cells()
    kind = domain.mesh_cell_type
    sel = np.union1d(own, cellpos.ravel()).astype(np.int64)
    return sel, np.searchsorted(sel, cellpos), cell_ids, kind


def _piece_points(domain, gids: np.ndarray) -> np.ndarray:
    """Coordinates of vertices by global id as :func:`write_vtu` writes them
    (a complex without points: zeros, as its ``mesh()``). Not collective."""
    if domain.has_points:
        return domain.vertex_coordinates(gids)
    return np.zeros((gids.size, 3))


def _signature(point_data, cell_data) -> list:
    """``(where, name, VTK type, components, is a DistVector)`` of every
    field, sorted: what must agree across ranks. Not collective."""
    out = []
    for where, data in (("point", point_data), ("cell", cell_data)):
        for name, v in (data or {}).items():
            dist = isinstance(v, DistVector)
            a = v.local if dist else np.asarray(v)
            out.append((where, name, vtk_type(a.dtype), 1 if a.ndim == 1 else int(a.shape[1]),
                        dist))
    return sorted(out)


def write_pvtu(path, domain, point_data: dict | None = None,
               cell_data: dict | None = None) -> None:
    """Write ``domain`` with point data (and cell data on its top cells) as a
    parallel VTU for ParaView: one ``.vtu`` piece per rank and a ``.pvtu``
    index, with no rank holding more than its own share.

    Layout: for ``path = "out/field.pvtu"`` rank ``r`` writes
    ``out/field/field_r.vtu`` (the piece names of VTK's
    ``vtkXMLPUnstructuredGridWriter``, in the subdirectory its
    ``UseSubdirectory`` option makes), and rank 0 writes the index
    ``out/field.pvtu``: a ``PUnstructuredGrid`` declaring every array's
    name, type and components and naming each piece (``Source`` relative to
    the index). Files are VTK XML, arrays base64-encoded binary,
    uncompressed.

    Piece ``r`` holds rank ``r``'s top cells (a complex's owned top
    simplices; a Grid's Freudenthal cells, or squares or cubes, whose
    origin corner lies in one of its owned planes, generated locally) and the points it needs: the
    owned vertices and the ghost vertices of those cells, whose values come
    from the domain's ghost exchange. Every top cell is in exactly one
    piece; a ghost vertex is in several, marked ``vtkGhostType`` = 1
    (DUPLICATEPOINT) in all but its owner's. Each piece has TTK's and VTK's
    matching arrays ``GlobalPointIds`` (global vertex ids) and
    ``GlobalCellIds`` (the row of the cell in :func:`write_vtu`'s file:
    the global simplex id on a complex, the cell's index in the Freudenthal
    triangulation or the cubical complex on a Grid). A rank without cells or vertices writes an
    empty piece. Cells and values are those :func:`write_vtu` writes, cut
    into pieces.

    Parameters
    ----------
    path : str or os.PathLike
        The index file; must end in ``.pvtu``.
    domain : Grid or SimplicialComplex
    point_data, cell_data : dict of str -> values, optional
        Point values: DistVectors on ``domain.vertex_layout`` or global
        arrays of one row per vertex (shape (n,) or (n, c), indexed by
        global vertex id; each rank takes the rows of its points). Cell
        values on a complex: DistVectors on ``domain.simplex_layout(top)``
        or global arrays indexed by global simplex id; on a Grid global
        arrays in :func:`write_vtu`'s cell order. Real or boolean numbers
        (booleans are written as UInt8). The names ``GlobalPointIds``,
        ``GlobalCellIds`` and ``vtkGhostType`` are the writer's.

    Notes
    -----
    Collective on ``domain.comm``: the checks below, one ghost exchange per
    DistVector point field (among neighbouring ranks), and four small
    agreements (the piece directory, the pieces, their moves into place,
    the index). Memory and traffic per rank are those of its piece. Rank 0
    checks that ``path`` can be written before anything is written. Every
    file is written to a temporary beside it; the pieces are moved into
    place only once all are written, and the index after them: a write
    that fails on any rank (a full disk) leaves the previous pieces and
    index as they were, and no temporary.

    Raises
    ------
    TypeError
        On every rank, if ``domain`` is not a Grid or SimplicialComplex, a
        field dict is not a dict, a name is not a non-empty str, ``path`` is
        not a path, or a DistVector holds non-real numbers.
    ValueError
        On every rank, if ``path`` does not end in ``.pvtu``, a field has
        the wrong length or layout, uses a reserved name, or the ranks pass
        different field names, kinds, types or widths.
    OSError
        On every rank, if ``path`` cannot be written, the piece directory
        cannot be made, or any rank cannot write its piece (or rank 0 the
        index).
    """
    check_domain(domain)
    comm = domain.comm
    sig = None
    with agreed(comm):
        path = check_pvtu_path(path)
        _check_fields(domain, point_data, cell_data)
        for what, data in (("point_data", point_data), ("cell_data", cell_data)):
            for name, v in (data or {}).items():
                if name in RESERVED:
                    raise ValueError("%s[%r]: %s are the names of the arrays write_pvtu adds "
                                     "itself" % (what, name, ", ".join(RESERVED)))
                if isinstance(v, DistVector) and v.dtype.kind not in "fiub":
                    raise TypeError("%s[%r] must hold real numbers, got a DistVector of %s"
                                    % (what, name, v.dtype))
        sig = _signature(point_data, cell_data)
    # the same fields on every rank: the index is rank 0's, and the ghost
    # exchanges below are matched by order
    sig0 = comm.bcast(sig, root=0)
    with agreed(comm):
        if sig != sig0:
            raise ValueError("point_data and cell_data must name the same fields, of the same "
                             "kind (DistVector or array), type and width, on every rank; rank "
                             "0 has %s" % ([a[:4] for a in sig0],))
    check_writable(path, comm)

    sel, cells, cell_ids, kind = _local_piece(domain)
    gids = domain.global_ids(0)[sel]
    is_owned = np.zeros(domain.global_ids(0).size, dtype=bool)
    is_owned[domain.owned_positions()] = True
    pd, cd = {}, {}
    for where, name, _, _, dist in sig:
        v = (point_data if where == "point" else cell_data)[name]
        if where == "point" and dist:
            local = v.local.astype(np.uint8) if v.dtype.kind == "b" else v.local
            pd[name] = domain.ghosted(local)[sel]
        elif where == "point":
            pd[name] = np.asarray(v)[gids]
        else:
            cd[name] = v.local if dist else np.asarray(v)[cell_ids]
    points = _piece_points(domain, gids)

    write_parallel(comm, path, points, kind, cells, pd, cd, point_ids=gids, cell_ids=cell_ids,
                   ghost=~is_owned[sel],
                   point_arrays=[a[1:4] for a in sig if a[0] == "point"],
                   cell_arrays=[a[1:4] for a in sig if a[0] == "cell"])
