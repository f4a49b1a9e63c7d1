"""VTK XML unstructured grids written by hand: one ``.vtu`` piece per rank and
the ``.pvtu`` index that names them (ParaView's parallel format).

Arrays are base64 "binary" (a UInt64 byte count, then the little-endian
values), uncompressed: what VTK's readers and meshio both read. Only
:func:`write_parallel` communicates (four small agreements); the callers,
:func:`topology.io.write_pvtu` and :meth:`topology.PersistenceDiagram.write_pvtu`,
check their inputs and the path first.
"""

from __future__ import annotations

import base64
import os

import numpy as np
from mpi4py import MPI

from dmsolve import agree
from dmsolve.io import commit_temporary, discard, temporary_path

__all__ = ["VTK_CELL_TYPES", "vtk_type", "check_pvtu_path", "piece_paths", "write_piece", "write_index",
           "write_parallel", "GLOBAL_POINT_IDS", "GLOBAL_CELL_IDS", "GHOST_TYPE", "RESERVED"]

#: VTK cell type codes of the cells dmsolve writes
VTK_CELL_TYPES = {"vertex": 1, "line": 3, "triangle": 5, "quad": 9, "tetra": 10, "hexahedron": 12}

#: VTK's names (vtkGenerateGlobalIds, TTK-MPI) for the arrays that match pieces
GLOBAL_POINT_IDS = "GlobalPointIds"
GLOBAL_CELL_IDS = "GlobalCellIds"
#: vtkDataSetAttributes::GhostArrayName(); 1 is DUPLICATEPOINT
GHOST_TYPE = "vtkGhostType"
DUPLICATE_POINT = 1
RESERVED = (GLOBAL_POINT_IDS, GLOBAL_CELL_IDS, GHOST_TYPE)

_TYPES = {"f4": "Float32", "f8": "Float64", "i1": "Int8", "u1": "UInt8", "i2": "Int16",
          "u2": "UInt16", "i4": "Int32", "u4": "UInt32", "i8": "Int64", "u8": "UInt64"}


def vtk_type(dtype) -> str:
    """VTK's name of a numpy dtype (bool is written as UInt8; float16 and
    long double as Float64). Not collective."""
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return "UInt8"
    if dt.kind == "f" and dt.itemsize not in (4, 8):
        return "Float64"
    return _TYPES["%s%d" % (dt.kind, dt.itemsize)]


def _numpy_type(vtype: str) -> np.dtype:
    code = {v: k for k, v in _TYPES.items()}[vtype]
    return np.dtype("<" + code)


def check_pvtu_path(path) -> str:
    """``path`` as a str naming a ``.pvtu`` file. Not collective (call it in
    ``agreed``).

    Raises
    ------
    TypeError
        If ``path`` is not a str or os.PathLike.
    ValueError
        If it is empty or does not end in ``.pvtu``.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError("path must be a path (str or os.PathLike), got %s"
                        % type(path).__name__)
    path = os.fspath(path)
    if not isinstance(path, str) or not path.endswith(".pvtu") \
            or os.path.basename(path) == ".pvtu":
        raise ValueError("path must name a .pvtu file (the index; the pieces go in a "
                         "directory beside it), got %r" % (path,))
    return path


def piece_paths(path: str, size: int) -> tuple[str, list[str]]:
    """``(directory of the pieces, [Source of piece r for r < size])``: piece
    ``r`` of ``dir/stem.pvtu`` is ``dir/stem/stem_r.vtu``, its Source in the
    index ``stem/stem_r.vtu`` (relative to the index). Not collective."""
    head, tail = os.path.split(path)
    stem = tail[:-len(".pvtu")]
    return os.path.join(head, stem), ["%s/%s_%d.vtu" % (stem, stem, r) for r in range(size)]


def _data_array(name: str, a: np.ndarray, ncomp: int, *, id_type: bool = False) -> str:
    from xml.sax.saxutils import quoteattr
    a = np.ascontiguousarray(a, dtype=_numpy_type(vtk_type(a.dtype)))
    raw = a.tobytes()
    blob = base64.b64encode(np.uint64(len(raw)).astype("<u8").tobytes() + raw).decode("ascii")
    return ('<DataArray type="%s" Name=%s%s%s format="binary">\n%s\n</DataArray>\n'
            % (vtk_type(a.dtype), quoteattr(name), _components(ncomp),
               ' IdType="1"' if id_type else "", blob))


def _components(ncomp: int) -> str:
    # VTK's default is one component; meshio reads an explicit 1 as a column
    return "" if ncomp == 1 else ' NumberOfComponents="%d"' % ncomp


def _columns(a: np.ndarray) -> int:
    return 1 if a.ndim == 1 else int(a.shape[1])


def write_piece(path: str, points: np.ndarray, cell_type: str, cells: np.ndarray,
                point_data: dict, cell_data: dict, *, point_ids: np.ndarray,
                cell_ids: np.ndarray, ghost: np.ndarray | None) -> None:
    """Write one ``.vtu`` piece: ``points`` (n, 3), ``cells`` (m, k) of local
    point numbers, the named arrays, and the global point and cell ids (and
    ``vtkGhostType`` if ``ghost`` is given). Not collective."""
    npts, ncells = points.shape[0], cells.shape[0]
    k = cells.shape[1] if cells.ndim == 2 else 1
    pd = {GLOBAL_POINT_IDS: point_ids.astype(np.int64)}
    if ghost is not None:
        pd[GHOST_TYPE] = np.where(ghost, DUPLICATE_POINT, 0).astype(np.uint8)
    with open(path, "w", encoding="ascii") as f:
        f.write('<?xml version="1.0"?>\n<VTKFile type="UnstructuredGrid" version="1.0" '
                'byte_order="LittleEndian" header_type="UInt64">\n<UnstructuredGrid>\n'
                '<Piece NumberOfPoints="%d" NumberOfCells="%d">\n' % (npts, ncells))
        f.write('<PointData GlobalIds="%s">\n' % GLOBAL_POINT_IDS)
        for name, a in list(pd.items()) + list(point_data.items()):
            f.write(_data_array(name, a, _columns(a), id_type=name == GLOBAL_POINT_IDS))
        f.write('</PointData>\n<CellData GlobalIds="%s">\n' % GLOBAL_CELL_IDS)
        f.write(_data_array(GLOBAL_CELL_IDS, cell_ids.astype(np.int64), 1, id_type=True))
        for name, a in cell_data.items():
            f.write(_data_array(name, a, _columns(a)))
        f.write("</CellData>\n<Points>\n")
        f.write(_data_array("Points", points.astype(np.float64), 3))
        f.write("</Points>\n<Cells>\n")
        f.write(_data_array("connectivity", cells.astype(np.int64).ravel(), 1))
        f.write(_data_array("offsets", k * np.arange(1, ncells + 1, dtype=np.int64), 1))
        f.write(_data_array("types", np.full(ncells, VTK_CELL_TYPES[cell_type], np.uint8), 1))
        f.write("</Cells>\n</Piece>\n</UnstructuredGrid>\n</VTKFile>\n")


def write_index(path: str, sources: list[str], point_arrays, cell_arrays, *,
                ghost: bool) -> None:
    """Write the ``.pvtu`` index: a PUnstructuredGrid declaring ``point_arrays``
    and ``cell_arrays`` (lists of ``(name, vtk type, components)``, the
    global-id and ghost arrays added here) and one ``<Piece Source=...>`` per
    entry of ``sources``. Not collective."""
    from xml.sax.saxutils import quoteattr
    def decl(name, vtype, ncomp, id_type=False):
        return ('<PDataArray type="%s" Name=%s%s%s/>\n'
                % (vtype, quoteattr(name), _components(ncomp), ' IdType="1"' if id_type else ""))
    with open(path, "w", encoding="utf-8") as f:
        f.write('<?xml version="1.0"?>\n<VTKFile type="PUnstructuredGrid" version="1.0" '
                'byte_order="LittleEndian" header_type="UInt64">\n'
                '<PUnstructuredGrid GhostLevel="0">\n')
        f.write('<PPointData GlobalIds="%s">\n' % GLOBAL_POINT_IDS)
        f.write(decl(GLOBAL_POINT_IDS, "Int64", 1, True))
        if ghost:
            f.write(decl(GHOST_TYPE, "UInt8", 1))
        for a in point_arrays:
            f.write(decl(*a))
        f.write('</PPointData>\n<PCellData GlobalIds="%s">\n' % GLOBAL_CELL_IDS)
        f.write(decl(GLOBAL_CELL_IDS, "Int64", 1, True))
        for a in cell_arrays:
            f.write(decl(*a))
        f.write('</PCellData>\n<PPoints>\n<PDataArray type="Float64" Name="Points" '
                'NumberOfComponents="3"/>\n</PPoints>\n')
        for s in sources:
            f.write("<Piece Source=%s/>\n" % quoteattr(s))
        f.write("</PUnstructuredGrid>\n</VTKFile>\n")


def write_parallel(comm: MPI.Comm, path: str, points, cell_type, cells, point_data: dict,
                   cell_data: dict, *, point_ids, cell_ids, ghost, point_arrays,
                   cell_arrays) -> None:
    """Every rank writes its piece (:func:`write_piece`) and rank 0 the index
    (:func:`write_index`), each to a temporary beside its file
    (:func:`dmsolve.io.temporary_path`); once every rank's writes are
    agreed, the pieces are moved into place, then the index. ``path`` has
    been checked (ends in ``.pvtu``, writable) and ``point_arrays`` /
    ``cell_arrays`` agreed. Collective on ``comm``: four agreements (the
    piece directory made by rank 0, the writes, the pieces' moves, the
    index's); a failure on any rank raises the same ``OSError`` on every
    rank. A write that fails (a full disk) leaves every previous piece and
    the previous index as they were, and every temporary is removed."""
    rank = comm.Get_rank()
    piece_dir, sources = piece_paths(path, comm.Get_size())
    exc = None
    if rank == 0:
        try:
            os.makedirs(piece_dir, exist_ok=True)
        except OSError as e:
            exc = OSError("cannot make the piece directory %r of %s: %s"
                          % (piece_dir, path, e.strerror or e))
    agree(comm, exc)
    mine = os.path.join(os.path.dirname(path), sources[rank])
    # (temporary, file) of this rank's writes; a device is written in place
    files = [(temporary_path(mine) or mine, mine)]
    if rank == 0:
        files.append((temporary_path(path) or path, path))
    exc = None
    try:
        write_piece(files[0][0], points, cell_type, cells, point_data, cell_data,
                    point_ids=point_ids, cell_ids=cell_ids, ghost=ghost)
    except Exception as e:  # noqa: BLE001 - agreed, whatever the file system says
        exc = OSError("cannot write piece %s of %s: %s: %s" % (mine, path, type(e).__name__, e))
    if rank == 0 and exc is None:
        try:
            write_index(files[1][0], sources, point_arrays, cell_arrays,
                        ghost=ghost is not None)
        except Exception as e:  # noqa: BLE001 - agreed, never on rank 0 alone
            exc = OSError("cannot write %s: %s: %s" % (path, type(e).__name__, e))
    _agree_or_discard(comm, exc, files)
    # the piece on every rank, then the index on rank 0: one agreement each,
    # so the index never names a piece that was not moved into place
    for step in range(2):
        exc = None
        if step < len(files) and files[step][0] != files[step][1]:
            try:
                commit_temporary(files[step][0])
            except OSError as e:
                exc = OSError("cannot write %s of %s: %s"
                              % (files[step][1], path, e.strerror or e))
        _agree_or_discard(comm, exc, files)


def _agree_or_discard(comm: MPI.Comm, exc: Exception | None, files) -> None:
    """:func:`dmsolve.agree` on ``exc``; if any rank failed, this rank's
    temporaries of ``files`` (``(temporary, file)`` pairs; none for a device
    written in place) are removed first. Collective on ``comm``."""
    try:
        agree(comm, exc)
    except BaseException:
        for tmp, name in files:
            if tmp != name:
                discard(tmp)
        raise
