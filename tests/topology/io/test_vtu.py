"""VTU output of domains and fields: the single file of write_vtu (fields in
global id order under every partition) and the parallel .pvtu of
write_pvtu and PersistenceDiagram.write_pvtu, one piece per rank, read back
and matched against the single file; bad input refused on every rank."""

import base64
import os
import xml.etree.ElementTree as ET

import meshio
import numpy as np
import pytest
from mpi4py import MPI
from scipy.spatial import Delaunay

from bad_inputs import check_bad_input
from dmsolve import DistVector
from full_disk import assert_left_as_before, full_disk_mesh_write, full_disk_open, snapshot
from mpitest import (assert_collective, assert_equal_collective, assert_raises_collective,
                     on_rank0)
from topology import Grid, SimplicialComplex, critical_points, io as tio, persistence_diagram
from topology.core import _vtkxml as vtkxml, cube_cells as _cube_cells, grid_cells as _grid_cells
from topology.io import read_mesh, write_pvtu, write_vtu
from topology_cases import delaunay, uneven_rows, write_delaunay_mesh
from topology_reference import reference_types

COMM = MPI.COMM_WORLD
_NUMPY = {"Float32": "<f4", "Float64": "<f8", "Int8": "<i1", "UInt8": "<u1", "Int16": "<i2",
          "UInt16": "<u2", "Int32": "<i4", "UInt32": "<u4", "Int64": "<i8", "UInt64": "<u8"}


# -- reading the files back (rank 0) -------------------------------------------------------
def _decode(el):
    """A base64 DataArray of a UInt64 header: its values, (n,) or (n, components)."""
    raw = base64.b64decode(el.text.strip())
    nbytes = int(np.frombuffer(raw[:8], "<u8")[0])
    a = np.frombuffer(raw[8:8 + nbytes], _NUMPY[el.get("type")])
    ncomp = int(el.get("NumberOfComponents", "1"))
    return a if ncomp == 1 else a.reshape(-1, ncomp)


def read_piece(path):
    """A piece as a dict (points, cells, point_data, cell_data, types): the
    XML decoded here, and cross-checked against meshio.read when the piece
    has cells (meshio 5.3 cannot read a piece without any)."""
    piece = ET.parse(path).getroot().find("UnstructuredGrid/Piece")
    arrays = {}
    for part in ("PointData", "CellData", "Points", "Cells"):
        for el in piece.find(part).findall("DataArray"):
            arrays[part, el.get("Name")] = (_decode(el), el.get("type"),
                                            int(el.get("NumberOfComponents", "1")))
    out = {"points": arrays["Points", "Points"][0].reshape(-1, 3),
           "point_data": {n: a for (p, n), (a, _, _) in arrays.items() if p == "PointData"},
           "cell_data": {n: a for (p, n), (a, _, _) in arrays.items() if p == "CellData"},
           "types": {(p, n): (t, c) for (p, n), (_, t, c) in arrays.items()}}
    off = arrays["Cells", "offsets"][0]
    conn = arrays["Cells", "connectivity"][0]
    k = int(off[0]) if off.size else 0
    out["cells"] = conn.reshape(-1, k) if k else np.zeros((0, 0), np.int64)
    assert int(piece.get("NumberOfPoints")) == out["points"].shape[0]
    assert int(piece.get("NumberOfCells")) == off.size
    if off.size:
        m = meshio.read(path)
        np.testing.assert_array_equal(m.points, out["points"])
        assert len(m.cells) == 1
        np.testing.assert_array_equal(m.cells[0].data, out["cells"])
        for n, a in out["point_data"].items():
            np.testing.assert_array_equal(m.point_data[n], a)
        for n, a in out["cell_data"].items():
            np.testing.assert_array_equal(m.cell_data[n][0], a)
    return out


def read_pvtu(path):
    """``(index element, [pieces])`` of a .pvtu, every piece read."""
    root = ET.parse(path).getroot()
    assert root.get("type") == "PUnstructuredGrid", root.get("type")
    grid = root.find("PUnstructuredGrid")
    sources = [p.get("Source") for p in grid.findall("Piece")]
    base = os.path.dirname(path)
    return grid, sources, [read_piece(os.path.join(base, s)) for s in sources]


def check_index(path, point_names, cell_names, *, ghost=True):
    """The index parses, names every rank's piece in ParaView's layout and
    declares every array with the pieces' type and width; returns the pieces."""
    stem = os.path.basename(path)[:-len(".pvtu")]
    grid, sources, pieces = read_pvtu(path)
    assert sources == ["%s/%s_%d.vtu" % (stem, stem, r) for r in range(COMM.size)], sources
    want = {"PPointData": {"GlobalPointIds", *point_names} | ({"vtkGhostType"} if ghost else set()),
            "PCellData": {"GlobalCellIds", *cell_names}}
    for part, names in want.items():
        decl = {el.get("Name"): (el.get("type"), int(el.get("NumberOfComponents", "1")))
                for el in grid.find(part).findall("PDataArray")}
        assert set(decl) == names, (part, sorted(decl), sorted(names))
        for piece in pieces:
            for n, tc in decl.items():
                assert piece["types"][part[1:], n] == tc, (part, n, piece["types"][part[1:], n], tc)
    assert grid.find("PPoints/PDataArray").get("NumberOfComponents") == "3"
    return pieces


def check_union(pieces, ref, point_owner, cell_owner, extra_points=None):
    """The pieces cut ``ref`` (a meshio mesh of write_vtu's file): every point
    and value at its global id, every cell exactly once with the vertices
    and values of ref's row, piece ``r`` holding exactly the cells and
    (non-ghost) vertices that rank ``r`` owns, and only the ghosts its cells
    need."""
    ref_cells = ref.cells[0].data
    seen_cells, seen_own = [], []
    for r, p in enumerate(pieces):
        gid = p["point_data"]["GlobalPointIds"]
        ghost = p["point_data"]["vtkGhostType"]
        assert np.unique(gid).size == gid.size, "piece %d repeats a point" % r
        np.testing.assert_array_equal(p["points"], ref.points[gid])
        for n, a in ref.point_data.items():
            np.testing.assert_array_equal(p["point_data"][n], a[gid], err_msg=n)
        for n, a in (extra_points or {}).items():
            np.testing.assert_array_equal(p["point_data"][n], a[gid], err_msg=n)
        cid = p["cell_data"]["GlobalCellIds"]
        if cid.size:
            np.testing.assert_array_equal(gid[p["cells"]], ref_cells[cid])
        for n, a in ref.cell_data.items():
            np.testing.assert_array_equal(p["cell_data"][n], a[0][cid], err_msg=n)
        np.testing.assert_array_equal(np.sort(cid), np.flatnonzero(cell_owner == r))
        own = gid[ghost == 0]
        np.testing.assert_array_equal(np.sort(own), np.flatnonzero(point_owner == r))
        used = np.zeros(gid.size, bool)
        used[p["cells"].ravel()] = True
        assert np.all(used | (ghost == 0)), "piece %d has a ghost point no cell uses" % r
        assert set(np.unique(ghost)) <= {0, 1}
        seen_cells.append(cid)
        seen_own.append(own)
    np.testing.assert_array_equal(np.sort(np.concatenate(seen_cells)),
                                  np.arange(ref_cells.shape[0]))
    np.testing.assert_array_equal(np.sort(np.concatenate(seen_own)), np.arange(len(ref.points)))
    return True


def _owners(layout_of_gid):
    """Every rank's owned ids gathered into a global owner array (the test's
    own bookkeeping; write_pvtu never gathers). Collective."""
    parts = COMM.allgather(np.asarray(layout_of_gid, dtype=np.int64))
    n = sum(p.size for p in parts)
    owner = np.full(n, -1, dtype=np.int64)
    for r, p in enumerate(parts):
        owner[p] = r
    return owner


def _check(path, ref_path, point_names, cell_names, point_owner, cell_owner, extra=None):
    def run():
        pieces = check_index(path, point_names, cell_names)
        return check_union(pieces, meshio.read(ref_path), point_owner, cell_owner, extra)
    assert on_rank0(COMM, run)


# -- grids -----------------------------------------------------------------------------------
@pytest.mark.parametrize("complex", ["freudenthal", "cubical"])
@pytest.mark.parametrize("shape", [(5, 7), (4, 3, 5), (3, 2), (4, 3, 3)],
                         ids=["2d-5x7", "3d-4x3x5", "2d-3x2-idle-ranks", "3d-3-planes"])
def test_grid_pieces_cut_the_single_file(shared_tmp_path, shape, complex):
    """The pieces of a Freudenthal or cubical grid, idle ranks included, cut
    the single file: each rank's vertices and cells with the ghosts they need."""
    d = str(shared_tmp_path)
    g = Grid(shape, COMM, complex=complex)
    n = int(np.prod(shape))
    rng = np.random.default_rng(len(shape) * 10 + n)
    f = rng.random(n)
    labels = rng.integers(-5, 5, n).astype(np.int32)
    vec = np.column_stack((f, 2 * f, 3 * f))
    all_cells = _cube_cells(shape) if complex == "cubical" else _grid_cells(shape)
    ncells = len(all_cells)
    cells = rng.random(ncells)
    point_data = {"f": g.vertex_values(f), "labels": labels, "vec": vec}
    write_pvtu(os.path.join(d, "g.pvtu"), g, point_data=point_data, cell_data={"c": cells})
    write_vtu(os.path.join(d, "g.vtu"), g, point_data={"f": f, "labels": labels, "vec": vec},
              cell_data={"c": cells})
    point_owner = g.vertex_layout.owner(np.arange(n))
    # a cell belongs to the rank owning its origin plane, which holds the
    # cell's smallest vertex
    cell_owner = g.vertex_layout.owner(all_cells.min(axis=1))
    _check(os.path.join(d, "g.pvtu"), os.path.join(d, "g.vtu"), point_data, ["c"],
           point_owner, cell_owner)


def test_bool_and_integer_distvectors_are_exchanged(shared_tmp_path):
    """Bool and integer DistVectors reach the ghosts with the VTK types UInt8
    and Int64."""
    d = str(shared_tmp_path)
    g = Grid((4, 5, 6), COMM)
    n = 120
    flag = np.arange(n) % 3 == 0
    ints = np.arange(n, dtype=np.int64) * 7
    lay = g.vertex_layout
    pd = {"flag": DistVector(lay, flag[lay.start:lay.stop]),
          "ints": DistVector(lay, ints[lay.start:lay.stop])}
    write_pvtu(os.path.join(d, "b.pvtu"), g, point_data=pd)
    write_vtu(os.path.join(d, "b.vtu"), g)

    def run():
        pieces = check_index(os.path.join(d, "b.pvtu"), ["flag", "ints"], [])
        for p in pieces:
            assert p["types"]["PointData", "flag"] == ("UInt8", 1)
            assert p["types"]["PointData", "ints"] == ("Int64", 1)
        return check_union(pieces, meshio.read(os.path.join(d, "b.vtu")),
                           lay.owner(np.arange(n)), lay.owner(_grid_cells(g.shape).min(axis=1)),
                           {"flag": flag.astype(np.uint8), "ints": ints})
    assert on_rank0(COMM, run)


# -- complexes -------------------------------------------------------------------------------
def _delaunay(n, dim, seed):
    pts = np.random.default_rng(seed).random((n, dim))
    return pts, Delaunay(pts).simplices


@pytest.mark.parametrize("partition", ["block", "metis", "rcb"])
def test_complex_pieces_cut_the_single_file(shared_tmp_path, partition):
    """The pieces of a triangulated complex under every partition cut the
    single file, point and cell data in global id order."""
    d = str(shared_tmp_path)
    pts, tris = _delaunay(41, 2, seed=3)
    rank, size = COMM.rank, COMM.size
    cx = SimplicialComplex([tris[rank::size]], COMM, points=pts, partition=partition)
    fld = np.random.default_rng(4).random(41)
    ntri = cx.simplex_layout(2).global_size
    tri_ids = DistVector(cx.simplex_layout(2), cx.owned_global_ids(2).astype(float))
    area = np.random.default_rng(5).random(ntri)
    pair = np.column_stack((fld, -fld))
    write_pvtu(os.path.join(d, "c.pvtu"), cx,
               point_data={"f": cx.vertex_values(fld), "pair": pair},
               cell_data={"id": tri_ids, "area": area})
    write_vtu(os.path.join(d, "c.vtu"), cx, point_data={"f": fld, "pair": pair},
              cell_data={"id": np.arange(ntri, dtype=float), "area": area})
    _check(os.path.join(d, "c.pvtu"), os.path.join(d, "c.vtu"), ["f", "pair"], ["id", "area"],
           _owners(cx.owned_global_ids(0)), _owners(cx.owned_global_ids(2)))


def test_tetrahedra_and_a_complex_without_points(shared_tmp_path):
    """Tetrahedra, and a complex without points and with an unused vertex,
    are cut as the single file has them."""
    d = str(shared_tmp_path)
    pts, tets = _delaunay(30, 3, seed=8)
    cx = SimplicialComplex([tets[COMM.rank::COMM.size]], COMM, points=pts)
    fld = pts[:, 0] + pts[:, 2]
    write_pvtu(os.path.join(d, "t.pvtu"), cx, point_data={"f": cx.vertex_values(fld)})
    write_vtu(os.path.join(d, "t.vtu"), cx, point_data={"f": fld})
    _check(os.path.join(d, "t.pvtu"), os.path.join(d, "t.vtu"), ["f"], [],
           _owners(cx.owned_global_ids(0)), _owners(cx.owned_global_ids(3)))
    # no points (zeros, as write_vtu), and vertex 7 used by no triangle
    tris = np.array([[0, 1, 2], [1, 2, 3], [4, 5, 6], [5, 6, 8], [2, 3, 9]])
    cx = SimplicialComplex([tris[COMM.rank::COMM.size]], COMM)
    g = np.arange(10.0) ** 2
    write_pvtu(os.path.join(d, "n.pvtu"), cx, point_data={"g": g},
               cell_data={"t": cx.cochain(np.arange(5.0), 2)})
    write_vtu(os.path.join(d, "n.vtu"), cx, point_data={"g": g}, cell_data={"t": np.arange(5.0)})
    _check(os.path.join(d, "n.pvtu"), os.path.join(d, "n.vtu"), ["g"], ["t"],
           _owners(cx.owned_global_ids(0)), _owners(cx.owned_global_ids(2)))


# -- no gathering, small rank 0 ---------------------------------------------------------------
def test_no_rank_gathers_and_rank0_writes_its_share(shared_tmp_path, monkeypatch):
    """write_pvtu gathers nothing, rank 0's piece costs what the others do per
    cell, and the index is small."""
    d = str(shared_tmp_path)
    size = COMM.size
    g = Grid((6, 5, 3 * size + 1), COMM)
    n = g.global_num_vertices
    f = g.vertex_values(np.arange(n, dtype=float))

    def refuse(*args, **kwargs):
        raise AssertionError("write_pvtu gathered")
    for cls, name in ((DistVector, "gather"), (Grid, "mesh"), (Grid, "gather_global"),
                      (SimplicialComplex, "mesh"), (SimplicialComplex, "simplices"),
                      (SimplicialComplex, "gather_global")):
        monkeypatch.setattr(cls, name, refuse)
    write_pvtu(os.path.join(d, "s.pvtu"), g, point_data={"f": f})
    pts, tris = _delaunay(60, 2, seed=11)
    cx = SimplicialComplex([tris[COMM.rank::size]], COMM, points=pts)
    write_pvtu(os.path.join(d, "x.pvtu"), cx, point_data={"f": cx.vertex_values(pts[:, 0])},
               cell_data={"a": DistVector(cx.simplex_layout(2),
                                          np.ones(cx.simplex_layout(2).local_size))})
    monkeypatch.undo()
    def piece(r):
        path = os.path.join(d, "s", "s_%d.vtu" % r)
        cells = ET.parse(path).getroot().find("UnstructuredGrid/Piece").get("NumberOfCells")
        return os.path.getsize(path), int(cells)
    sizes = [piece(r) for r in range(size)] if COMM.rank == 0 else []
    index = os.path.getsize(os.path.join(d, "s.pvtu")) if COMM.rank == 0 else 0
    # rank 0's piece costs what the others' do per cell (its planes may be
    # one more: the layout's remainder), and the index is small
    per_cell = [b / c for b, c in sizes if c]
    ok = COMM.rank != 0 or ((size == 1 or per_cell[0] <= 1.1 * max(per_cell[1:]))
                            and index < 2048)
    assert_collective(COMM, ok, "piece (bytes, cells) %s, index %d bytes" % (sizes, index))
    # and at most twice a rank's share of all the pieces' bytes
    total = sum(b for b, _ in sizes)
    assert_collective(COMM, COMM.rank != 0 or size == 1 or sizes[0][0] <= 2.0 * total / size,
                      "piece 0 of %s, total %d bytes" % (sizes, total))


# -- persistence diagrams ------------------------------------------------------------------------
def _diagram_case(kind):
    if kind == "grid":
        g = Grid((7, 6), COMM)
        f = np.random.default_rng(21).random(42)
        return g, f, g.vertex_layout.owner(np.arange(42))
    pts, tris = _delaunay(50, 2, seed=22)
    cx = SimplicialComplex([tris[COMM.rank::COMM.size]], COMM, points=pts, partition="rcb")
    f = np.random.default_rng(23).random(50)
    return cx, f, _owners(cx.owned_global_ids(0))


@pytest.mark.parametrize("kind", ["grid", "complex-rcb"])
def test_diagram_pieces_cut_the_single_file(shared_tmp_path, kind):
    """A diagram's pieces are the blocks of its sorted pairs, every rank
    holding one, and together the single file's points."""
    d = str(shared_tmp_path)
    dom, f, _ = _diagram_case(kind)
    dg = persistence_diagram(dom, f)
    dg.write_pvtu(os.path.join(d, "pd.pvtu"), dom)
    dg.write_vtu(os.path.join(d, "pd.vtu"), dom)
    names = ["CriticalType", "PairIdentifier", "PairType", "Persistence", "IsFinite", "Scalar",
             "ttkVertexScalarField"]

    def run():
        pieces = check_index(os.path.join(d, "pd.pvtu"), names, [], ghost=False)
        ref = meshio.read(os.path.join(d, "pd.vtu"))
        seen = []
        last_pair = -1
        for r, p in enumerate(pieces):
            gid = p["point_data"]["GlobalPointIds"]
            np.testing.assert_array_equal(p["cell_data"]["GlobalCellIds"], gid)
            np.testing.assert_array_equal(p["points"], ref.points[gid])
            for n in names:
                np.testing.assert_array_equal(p["point_data"][n], ref.point_data[n][gid])
            if gid.size:
                np.testing.assert_array_equal(p["cells"].ravel(), np.arange(gid.size))
                # rank r writes block r of the sorted pairs: its pair ids follow rank r-1's
                pid = np.unique(p["point_data"]["PairIdentifier"])
                assert pid[0] == last_pair + 1 and np.array_equal(pid, np.arange(pid[0],
                                                                               pid[-1] + 1))
                last_pair = pid[-1]
            seen.append(gid)
        np.testing.assert_array_equal(np.sort(np.concatenate(seen)), np.arange(len(ref.points)))
        # the pairs are spread evenly (a distributed sort): every rank has a piece
        return len(ref.points) > 4 * COMM.size and all(x.size > 0 for x in seen)
    assert on_rank0(COMM, run)


# -- errors at the door and while writing ------------------------------------------------------
def test_bad_inputs_and_failed_writes_raise_on_every_rank(shared_tmp_path):
    """Bad paths, domains and fields, and a piece that cannot be written,
    raise on every rank and leave no index behind; a valid write still works."""
    d = str(shared_tmp_path)
    g = Grid((4, 5), COMM)
    f = np.arange(20.0)
    dg = persistence_diagram(g, f)
    if COMM.rank == 0:
        open(os.path.join(d, "blocked"), "w").close()      # where a piece directory goes
        os.makedirs(os.path.join(d, "p", "p_%d.vtu" % (COMM.size - 1)))  # the last rank's piece
    COMM.Barrier()
    lay = g.vertex_layout
    cases = [
        (lambda: write_pvtu(os.path.join(d, "a.vtu"), g), ValueError, r"\.pvtu file"),
        (lambda: write_pvtu(os.path.join(d, ".pvtu"), g), ValueError, r"\.pvtu file"),
        (lambda: write_pvtu(None, g), TypeError, "path"),
        (lambda: write_pvtu(os.path.join(d, "a.pvtu"), "grid"), TypeError,
         "Grid or SimplicialComplex"),
        (lambda: write_pvtu(os.path.join(d, "a.pvtu"), g, point_data={"f": f[:-1]}),
         ValueError, r"point_data\['f'\] must be real numbers of shape \(20,\)"),
        (lambda: write_pvtu(os.path.join(d, "a.pvtu"), g, point_data={3: f}), TypeError,
         "names"),
        (lambda: write_pvtu(os.path.join(d, "a.pvtu"), g, point_data=[f]), TypeError,
         "must be a dict"),
        (lambda: write_pvtu(os.path.join(d, "a.pvtu"), g, point_data={"GlobalPointIds": f}),
         ValueError, "names of the arrays write_pvtu adds"),
        (lambda: write_pvtu(os.path.join(d, "a.pvtu"), g,
                            cell_data={"c": g.vertex_values(f)}),
         ValueError, "a Grid has no cell layout"),
        (lambda: write_pvtu(os.path.join(d, "a.pvtu"), g, point_data={
            "z": DistVector(lay, (f + 1j)[lay.start:lay.stop])}), TypeError, "real numbers"),
        (lambda: write_pvtu(os.path.join(d, "no", "a.pvtu"), g, point_data={"f": f}), OSError,
         "cannot open path"),
        (lambda: write_pvtu(os.path.join(d, "blocked.pvtu"), g, point_data={"f": f}), OSError,
         "cannot make the piece directory"),
        (lambda: write_pvtu(os.path.join(d, "p.pvtu"), g, point_data={"f": f}), OSError,
         "cannot write piece .*p_%d.vtu" % (COMM.size - 1)),
        (lambda: dg.write_pvtu(os.path.join(d, "pd.vtu"), g), ValueError, r"\.pvtu file"),
        (lambda: dg.write_pvtu(os.path.join(d, "pd.pvtu"), Grid((4, 5, 2), COMM)), ValueError,
         "dimension 3, the diagram 2"),
        (lambda: dg.write_pvtu(os.path.join(d, "no", "pd.pvtu"), g), OSError,
         "cannot open path"),
        (lambda: dg.write_pvtu(os.path.join(d, "p.pvtu"), g), OSError, "cannot write piece"),
    ]
    if COMM.size > 1:
        # fields that differ between ranks: refused before any exchange
        cases.append((lambda: write_pvtu(os.path.join(d, "a.pvtu"), g,
                                         point_data={"f%d" % (COMM.rank % 2): f}),
                      ValueError, "same fields"))
        cases.append((lambda: write_pvtu(os.path.join(d, "a.pvtu"), g, point_data={
            "f": DistVector(lay, f[lay.start:lay.stop]) if COMM.rank == 0 else f}),
            ValueError, "same fields"))
    for call, exc, match in cases:
        assert_raises_collective(COMM, exc, call, match=match)
    # nothing written by the refused calls; no index after a failed piece
    left = sorted(os.listdir(d)) if COMM.rank == 0 else None
    assert_collective(COMM, COMM.rank != 0 or left == ["blocked", "p"], str(left))
    # and a valid write still works
    write_pvtu(os.path.join(d, "ok.pvtu"), g, point_data={"f": f})
    assert_collective(COMM, os.path.exists(os.path.join(d, "ok", "ok_%d.vtu" % COMM.rank)))


# -- the single file ------------------------------------------------------------------------
def test_partitioned_mesh_writes_fields_in_global_id_order(shared_tmp_path):
    """Under METIS and RCB write_vtu writes point and cell data in global id
    order: meshio reads back the reference's critical types and the field."""
    d = shared_tmp_path
    pts, tris = write_delaunay_mesh(os.path.join(d, "m.vtu"), 40, seed=5)
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


def test_write_vtu_refuses_bad_data_and_paths(shared_tmp_path):
    """Fields of the wrong shape or with names that are not strings, cell data
    on a grid, and paths that cannot be written are refused on every rank; a
    valid write still works."""
    g = Grid((4, 5), COMM)
    f = np.arange(20.0)
    d = shared_tmp_path
    cases = [
        (lambda: write_vtu(str(d / "a.vtu"), g, point_data={"f": f[:-1]}), ValueError,
         r"point_data\['f'\] must be real numbers of shape \(20,\)"),
        (lambda: write_vtu(str(d / "a.vtu"), g, point_data={3: f}), TypeError, "names"),
        (lambda: write_vtu(str(d / "a.vtu"), g, cell_data={"c": g.vertex_values(f)}),
         ValueError, "a Grid has no cell layout"),
        (lambda: write_vtu(str(d / "no" / "a.vtu"), g, point_data={"f": f}), OSError,
         "cannot open path"),
        (lambda: write_vtu(None, g), TypeError, "path"),
    ]
    for call, exc, match in cases:
        assert_raises_collective(COMM, exc, call, match=match)
    # the valid write still works
    write_vtu(str(d / "ok.vtu"), g, point_data={"f": f},
              cell_data={"c": np.arange(24.0)})


def test_local_points_pvtu_pieces_carry_the_points(tmp_path_factory):
    """The pieces of a complex built from points given per rank carry each
    point's coordinates at its global id."""
    pts, cells = delaunay(50, 2, seed=8)
    lo, hi = uneven_rows(pts.shape[0])
    cx = SimplicialComplex([cells[COMM.rank::COMM.size]], COMM, local_points=pts[lo:hi],
                           partition="rcb")
    d = COMM.bcast(str(tmp_path_factory.mktemp("lp")) if COMM.rank == 0 else None)
    write_pvtu(d + "/m.pvtu", cx)
    COMM.Barrier()
    piece = meshio.read("%s/m/m_%d.vtu" % (d, COMM.rank))
    gid = piece.point_data["GlobalPointIds"]
    assert_equal_collective(piece.points[:, :2], pts[gid])


# -- bad input: the same exception on every rank -------------------------------------------

BAD_INPUTS = [
    ("topology-write-vtu-point-data-a-list", TypeError, "point_data",
     lambda e: tio.write_vtu(os.path.join(e.dir, "x.vtu"), e.grid, point_data=[np.ones(16)])),
]


@pytest.mark.parametrize("exc, match, call", [c[1:] for c in BAD_INPUTS],
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_the_same_exception_on_every_rank(bad_input_env, request, exc, match,
                                                           call):
    """Each case of BAD_INPUTS raises the same exception type, with a message
    that matches, on every rank (or works, at one rank, where a COMM_SELF
    operand is valid)."""
    check_bad_input(bad_input_env, request, exc, match, call)


# -- a full disk ----------------------------------------------------------------------------

@pytest.mark.parametrize("what", ["vtu", "pvtu-piece-on-last-rank", "pvtu-index"])
def test_full_disk_leaves_the_previous_files_and_no_temporary(shared_tmp_path, monkeypatch,
                                                              what):
    """A write that fills the disk part-way (the VTU file, the last rank's piece, or the
    index) raises OSError on every rank and leaves every previous file byte for byte
    (pieces and index) and no temporary; the next write that succeeds replaces them."""
    d = str(shared_tmp_path)
    g = Grid((4, 5), COMM)
    f = np.arange(20.0)
    path = os.path.join(d, "a.vtu" if what == "vtu" else "a.pvtu")
    write = write_vtu if what == "vtu" else write_pvtu
    write(path, g, point_data={"f": f})
    before = snapshot(COMM, d)
    if what == "vtu":
        monkeypatch.setattr(meshio.Mesh, "write", full_disk_mesh_write)
    else:
        last = "_%d.vtu.tmp" % (COMM.size - 1)
        fills = ((lambda p: p.endswith(last) and COMM.rank == COMM.size - 1)
                 if what == "pvtu-piece-on-last-rank" else (lambda p: p.endswith(".pvtu.tmp")))
        monkeypatch.setattr(vtkxml, "open", full_disk_open(fills), raising=False)
    assert_raises_collective(COMM, OSError, write, path, g, point_data={"f": 2 * f},
                             match="No space left on device")
    monkeypatch.undo()
    assert_left_as_before(COMM, d, before)
    write(path, g, point_data={"f": 2 * f})
    after = snapshot(COMM, d)
    assert_equal_collective(sorted(after), sorted(before), COMM)
    assert_collective(COMM, all(after[k] != before[k] for k in before if k.endswith(".vtu")),
                      "every file rewritten")
