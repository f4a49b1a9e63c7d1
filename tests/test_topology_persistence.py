"""Persistence diagrams and merge trees of lower-star filtrations, against
gudhi's SimplexTree built on exactly our triangulations (tests/gudhi_ref.py),
on grids and meshes, with ties, at any rank count."""

import os
import warnings

import gudhi
import meshio
import numpy as np
import pytest
from mpi4py import MPI
from scipy.spatial import Delaunay

import gudhi_ref
from dmsolve import DistVector
from mpitest import (assert_collective, assert_equal_collective, assert_raises_collective,
                     on_rank0)
from topology import (Grid, SimplicialComplex, critical_points, merge_tree,
                      persistence_diagram)

COMM = MPI.COMM_WORLD


# -- domains and fields ---------------------------------------------------------------------
def renumber(cells):
    _, inv = np.unique(cells, return_inverse=True)
    return inv.reshape(cells.shape).astype(np.int64)


def tri_holes(nx=14, ny=11, seed=0):
    """A triangulated rectangle (random diagonals) with two rectangular holes."""
    rng = np.random.default_rng(seed)
    cells = []
    for y in range(ny - 1):
        for x in range(nx - 1):
            if (3 <= x < 6 and 3 <= y < 6) or (8 <= x < 11 and 4 <= y < 8):
                continue
            a, b, c, d = x + y * nx, x + 1 + y * nx, x + (y + 1) * nx, x + 1 + (y + 1) * nx
            cells += [[a, b, c], [b, c, d]] if rng.random() < 0.5 else [[a, b, d], [a, c, d]]
    return renumber(np.array(cells))


def torus(nx=9, ny=7):
    """A closed surface: beta = (1, 2, 1)."""
    cells = []
    for y in range(ny):
        for x in range(nx):
            a, b = x + y * nx, (x + 1) % nx + y * nx
            c, d = x + ((y + 1) % ny) * nx, (x + 1) % nx + ((y + 1) % ny) * nx
            cells += [[a, b, c], [b, c, d]]
    return np.array(cells, dtype=np.int64)


def tet_cavity(n=7):
    """Freudenthal tetrahedra of a cube minus an interior cube (a cavity) and a
    column (a tunnel): beta = (1, 1, 1)."""
    cells = gudhi_ref.grid_top_cells((n, n, n))
    cx = np.floor((cells % n).mean(1))
    cy = np.floor(((cells // n) % n).mean(1))
    cz = np.floor((cells // (n * n)).mean(1))
    cav = (cx == 2) & (cy == 2) & (cz == 2)
    tun = (cx == 4) & (cy == 4)
    return renumber(cells[~(cav | tun)])


def delaunay3(m=150, seed=3):
    pts = np.random.default_rng(seed).random((m, 3))
    return Delaunay(pts).simplices.astype(np.int64)


MESHES = {"tri-holes": tri_holes, "torus": torus, "tet-cavity": tet_cavity,
          "tet-delaunay": delaunay3}


def field(n, kind, seed=5, coords=None):
    rng = np.random.default_rng(seed)
    if kind == "random":
        return rng.random(n)
    if kind == "ties":
        return rng.integers(0, 4, n).astype(np.float64)
    # smooth, rounded so that ties appear along level sets
    c = coords.astype(np.float64)
    c = c / max(c.max(), 1)
    f = np.sin(5 * c[:, 0] + 1) * np.cos(4 * c[:, 1]) + 0.5 * np.sin(3 * c[:, -1] + 2)
    return np.round(f, 2)


def make_grid(shape, kind):
    g = Grid(shape, COMM)
    n = g.global_num_vertices
    return g, field(n, kind, coords=g.coordinates(np.arange(n)))


def make_mesh(name, kind):
    cells = MESHES[name]()
    cx = SimplicialComplex([cells[COMM.rank::COMM.size]], COMM)
    return cx, field(cx.num_vertices, kind, coords=np.column_stack(
        [np.arange(cx.num_vertices) % 7, np.arange(cx.num_vertices) // 7]))


def reference(domain, f):
    simplices = (gudhi_ref.grid_simplices(domain.shape) if isinstance(domain, Grid)
                 else gudhi_ref.complex_simplices(domain))
    return gudhi_ref.diagram(simplices, f)


def assert_same_as_gudhi(dg, ref, dimension):
    for d in range(dimension + 1):
        assert_equal_collective(dg.finite(d), ref[d][0], err_msg="finite D%d" % d)
        assert_equal_collective(dg.essential(d), ref[d][1], err_msg="essential D%d" % d)


# (9, 3) and (9, 8, 3): at 4 ranks one rank owns no plane
GRID_CASES = [((13, 11), "random"), ((17, 9), "ties"), ((24, 19), "smooth"), ((9, 3), "random"),
              ((7, 6, 9), "random"), ((8, 7, 6), "ties"), ((10, 9, 11), "smooth"),
              ((9, 8, 3), "ties")]


# -- diagrams against gudhi -----------------------------------------------------------------
@pytest.mark.parametrize("shape,kind", GRID_CASES,
                         ids=["%s-%s" % ("x".join(map(str, s)), k) for s, k in GRID_CASES])
def test_grid_diagram_equals_gudhi(shape, kind):
    g, f = make_grid(shape, kind)
    dg = persistence_diagram(g, f).gather()
    assert_equal_collective(len(dg.missing), 0, err_msg=str(dg.missing))
    assert_same_as_gudhi(dg, reference(g, f), len(shape))
    # the pairs are real pairs of vertices with the stated values
    p = dg.pairs
    fin = np.isfinite(p["death"])
    assert_equal_collective(f[p["birth_vertex"]], p["birth"])
    assert_equal_collective(f[p["death_vertex"][fin]], p["death"][fin])


MESH_CASES = [(m, k) for m in MESHES for k in ("random", "ties")]


@pytest.mark.parametrize("name,kind", MESH_CASES, ids=["%s-%s" % c for c in MESH_CASES])
def test_mesh_diagram_equals_gudhi(name, kind):
    cx, f = make_mesh(name, kind)
    dg = persistence_diagram(cx, f).gather()
    assert_equal_collective(len(dg.missing), 0, err_msg=str(dg.missing))
    assert_same_as_gudhi(dg, reference(cx, f), cx.dimension)


def test_distvector_input_and_rank_independence():
    """The same raw pairs from a DistVector, from the global array and from a
    serial run on COMM_SELF: the diagrams at every rank count are identical
    (bottleneck distance 0)."""
    shape = (9, 8, 7)
    g, f = make_grid(shape, "ties")
    lay = g.vertex_layout
    a = persistence_diagram(g, DistVector(lay, f[lay.start:lay.stop])).gather()
    b = persistence_diagram(g, f).gather()
    serial = persistence_diagram(Grid(shape, MPI.COMM_SELF), f)
    for k in a.raw_pairs:
        assert_equal_collective(a.raw_pairs[k], b.raw_pairs[k], err_msg=k)
        assert_equal_collective(a.raw_pairs[k], serial.raw_pairs[k], err_msg=k)
    dist = max(gudhi.bottleneck_distance(a.finite(d), serial.finite(d)) for d in range(4))
    # gudhi's exact bottleneck reports the smallest positive double for equal diagrams
    assert_collective(COMM, dist < 1e-300, "bottleneck distance %r" % dist)


# -- merge trees ------------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["grid2", "grid3", "tri-holes", "torus"])
def test_merge_trees(case):
    if case.startswith("grid"):
        dom, f = make_grid((15, 12) if case == "grid2" else (7, 8, 6), "ties")
    else:
        dom, f = make_mesh(case, "random")
    dg = persistence_diagram(dom, f).gather()
    jt = merge_tree(dom, f, kind="join").gather()
    pv, pi = jt.persistence_pairs()
    keep = pv[:, 1] > pv[:, 0]
    pv = pv[keep]
    assert_equal_collective(pv[np.lexsort((pv[:, 1], pv[:, 0]))], dg.finite(0))
    # the tree's pairs are the diagram's vertex pairs, and arcs climb in value
    raw = dg.raw_pairs
    d0 = raw["dim"] == 0
    fin0 = d0 & np.isfinite(raw["death"])
    mine = pi[np.lexsort((pi[:, 1], pi[:, 0]))]
    theirs = np.column_stack((raw["birth_vertex"][fin0], raw["death_vertex"][fin0]))
    assert_equal_collective(mine, theirs[np.lexsort((theirs[:, 1], theirs[:, 0]))])
    val = dict(zip(jt.node_ids.tolist(), jt.node_values.tolist()))
    climbs = all(val[a] <= val[b] for a, b in jt.arcs.tolist())
    # a forest: arcs = nodes - components; leaves are the minima
    ncomp = int(np.count_nonzero(d0 & ~np.isfinite(raw["death"])))
    assert_collective(COMM, climbs, "join-tree arcs must go up in value")
    assert_equal_collective(len(jt.arcs), len(jt.node_ids) - ncomp)
    cp = critical_points(dom, f).counts()
    assert_equal_collective(int(np.count_nonzero(jt.node_types == 0)), cp["minimum"])
    # split tree of f = join tree of -f, read backwards
    st = merge_tree(dom, f, kind="split").gather()
    sv, _ = st.persistence_pairs()
    neg = persistence_diagram(dom, -f).gather().finite(0)
    sv = sv[sv[:, 1] > sv[:, 0]]
    want = -neg[:, ::-1]
    assert_equal_collective(sv[np.lexsort((sv[:, 1], sv[:, 0]))],
                            want[np.lexsort((want[:, 1], want[:, 0]))])
    assert_equal_collective(int(np.count_nonzero(st.node_types == 0)), cp["maximum"])


# -- threshold and report ------------------------------------------------------------------------
@pytest.mark.parametrize("threshold", [0.0, 0.05, 0.3])
def test_min_persistence_report(threshold):
    g, f = make_grid((9, 10, 8), "random")
    dg = persistence_diagram(g, f, min_persistence=threshold).gather()
    st = gudhi_ref.lower_star_tree(gudhi_ref.grid_simplices(g.shape), f)
    st.compute_persistence(persistence_dim_max=True, min_persistence=threshold)
    for d in range(4):
        iv = np.asarray(st.persistence_intervals_in_dimension(d)).reshape(-1, 2)
        fin = iv[np.isfinite(iv[:, 1])]
        assert_equal_collective(dg.report[d]["kept"], len(fin), err_msg="D%d kept" % d)
        assert_equal_collective(dg.finite(d), fin[np.lexsort((fin[:, 1], fin[:, 0]))])
        r = dg.report[d]
        assert_collective(COMM, r["kept"] <= r["nonzero"] <= r["pairs"], str(r))
    assert_collective(COMM, gudhi is not None and str(threshold) in dg.describe()
                      or "%g" % threshold in dg.describe(), dg.describe())
    assert_collective(COMM, np.all(np.diff(dg.finite(0), axis=1) > threshold), "threshold")
    assert_raises_collective(COMM, ValueError, persistence_diagram, g, f, min_persistence=-1.0)
    assert_raises_collective(COMM, ValueError, persistence_diagram, g, f,
                             min_persistence=float("nan"))


# -- Morse and Euler ----------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["grid2", "grid3", "tri-holes", "torus", "tet-cavity"])
def test_critical_counts_and_euler(case):
    """Minima are the D0 births, interior maxima the D(d-1) deaths (and the
    top essential births), and the essential classes give the Euler
    characteristic of the domain."""
    if case.startswith("grid"):
        dom, f = make_grid((16, 13) if case == "grid2" else (9, 7, 8), "random")
        d = dom.dimension
        n = np.array(dom.shape)
        chi = 1
        onb = dom.boundary_mask(np.arange(dom.global_num_vertices))
        del n
    else:
        dom, f = make_mesh(case, "random")
        d = dom.dimension
        chi = sum((-1) ** k * c for k, c in enumerate(dom.counts()))
        b = np.zeros(dom.num_vertices, np.int64)
        b[dom.vertex_layout.start:dom.vertex_layout.stop] = dom.owned_boundary_vertices()
        onb = COMM.allreduce(b, op=MPI.SUM).astype(bool)
    dg = persistence_diagram(dom, f).gather()
    raw = dg.raw_pairs
    cp = critical_points(dom, f)
    ids, types = cp.gather()
    minima = np.sort(ids[types == 0])
    maxima = np.sort(ids[(types == 3) & ~onb[ids]])
    d0 = raw["dim"] == 0
    assert_equal_collective(np.sort(raw["birth_vertex"][d0]), minima)
    top = ((raw["dim"] == d - 1) & np.isfinite(raw["death"]))
    ends = np.concatenate((raw["death_vertex"][top], raw["birth_vertex"][raw["dim"] == d]))
    assert_equal_collective(np.sort(ends), maxima)
    ess = [len(dg.essential(k)) for k in range(d + 1)]
    assert_equal_collective(sum((-1) ** k * e for k, e in enumerate(ess)), chi)


# -- output -------------------------------------------------------------------------------------
def test_csv_and_vtu_round_trip(shared_tmp_path):
    g, f = make_grid((11, 9, 6), "smooth")
    dg = persistence_diagram(g, f, min_persistence=0.1)
    tmp = shared_tmp_path
    csv, vtu = os.path.join(tmp, "d.csv"), os.path.join(tmp, "d.vtu")
    dg.write_csv(csv)
    dg.write_vtu(vtu, g)
    table = on_rank0(COMM, np.genfromtxt, csv, delimiter=",", names=True)
    mesh = on_rank0(COMM, meshio.read, vtu)
    npts = len(mesh.points)
    types = {k: np.asarray(v) for k, v in mesh.point_data.items()}
    p = dg.gather().pairs
    fin = np.isfinite(p["death"])
    assert_equal_collective(np.atleast_1d(table["dimension"]).astype(int), p["dim"])
    assert_equal_collective(np.atleast_1d(table["birth"]), p["birth"])
    assert_equal_collective(np.atleast_1d(table["death"]), p["death"])
    assert_equal_collective(np.atleast_1d(table["death_vertex"]).astype(int), p["death_vertex"])
    assert_equal_collective(npts, p["dim"].size + int(fin.sum()))
    assert_equal_collective(sorted(types), sorted(["CriticalType", "PairIdentifier", "PairType",
                                                   "Persistence", "IsFinite", "Scalar",
                                                   "ttkVertexScalarField"]))
    vid = types["ttkVertexScalarField"]
    assert_equal_collective(types["Scalar"], f[vid])
    # births of D0 pairs are minima (0), their deaths 1-saddles (1)
    ct, pt = types["CriticalType"], types["PairType"]
    n = p["dim"].size
    assert_equal_collective(ct[:n][pt[:n] == 0], np.zeros(int((p["dim"] == 0).sum())))
    assert_collective(COMM, np.all(ct[n:][pt[n:] == 2] == 3), "D2 deaths are maxima")


# -- errors ---------------------------------------------------------------------------------------
def test_errors():
    fin = np.array([[0, 1, 2], [0, 1, 3], [0, 1, 4]])     # an edge with three triangles
    cx = SimplicialComplex([fin[COMM.rank::COMM.size]], COMM)
    assert_raises_collective(COMM, ValueError, persistence_diagram, cx, np.arange(5.0),
                             match="manifold")
    g = Grid((4, 5), COMM)
    assert_raises_collective(COMM, ValueError, merge_tree, g, np.arange(20.0), kind="contour")
    assert_raises_collective(COMM, ValueError, persistence_diagram, g, np.arange(19.0))
    bad = np.arange(20.0)
    bad[3] = np.nan
    assert_raises_collective(COMM, ValueError, persistence_diagram, g, bad)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dg = persistence_diagram(g, np.arange(20.0)).gather()   # complete: no warning
    assert_equal_collective(dg.essential(0), [0.0])


# -- partitions: METIS and RCB renumber vertices internally; results must not move ------
def _with_points(cells, strides):
    """Renumbered cells and the grid coordinates of their vertices."""
    u, inv = np.unique(cells, return_inverse=True)
    pts = np.column_stack([(u // s) % m for s, m in strides]).astype(np.float64)
    return inv.reshape(cells.shape).astype(np.int64), pts


def partition_meshes():
    tri = []
    rng = np.random.default_rng(1)
    nx, ny = 12, 10
    for y in range(ny - 1):
        for x in range(nx - 1):
            if 3 <= x < 6 and 3 <= y < 6:
                continue
            a, b, c, d = x + y * nx, x + 1 + y * nx, x + (y + 1) * nx, x + 1 + (y + 1) * nx
            tri += [[a, b, c], [b, c, d]] if rng.random() < 0.5 else [[a, b, d], [a, c, d]]
    n = 6
    cells = gudhi_ref.grid_top_cells((n, n, n))
    cx, cy = np.floor((cells % n).mean(1)), np.floor(((cells // n) % n).mean(1))
    cz = np.floor((cells // (n * n)).mean(1))
    drop = ((cx == 2) & (cy == 2) & (cz == 2)) | ((cx == 3) & (cy == 4))   # cavity, tunnel
    return {"tri": _with_points(np.array(tri), [(1, nx), (nx, ny)]),
            "tet": _with_points(cells[~drop], [(1, n), (n, n), (n * n, n)])}


@pytest.mark.parametrize("name", ["tri", "tet"])
def test_partition_independent_diagrams_and_trees(name):
    """With integer values (ties everywhere), the raw pairs with their birth and
    death vertex ids and both merge trees are the same under block, METIS and
    RCB partitions, the same as a serial run, and the diagrams equal gudhi's."""
    cells, pts = partition_meshes()[name]
    f = np.random.default_rng(7).integers(0, 4, pts.shape[0]).astype(np.float64)
    serial = SimplicialComplex([cells], MPI.COMM_SELF, pts)
    want = persistence_diagram(serial, f).raw_pairs
    trees = {k: merge_tree(serial, f, kind=k) for k in ("join", "split")}
    assert_same_as_gudhi(persistence_diagram(serial, f), reference(serial, f), serial.dimension)
    fin = np.isfinite(want["death"])
    assert_equal_collective(f[want["birth_vertex"]], want["birth"])
    assert_equal_collective(f[want["death_vertex"][fin]], want["death"][fin])
    for part in ("block", "metis", "multilevel", "rcb", "hilbert"):
        cx = SimplicialComplex([cells[COMM.rank::COMM.size]], COMM, pts, partition=part)
        dg = persistence_diagram(cx, f).gather()
        # equal to the serial pairs, hence to gudhi's diagram too
        for k in want:
            assert_equal_collective(dg.raw_pairs[k], want[k], err_msg="%s %s" % (part, k))
        for kind, ref in trees.items():
            t = merge_tree(cx, f, kind=kind).gather()
            msg = "%s %s tree" % (part, kind)
            assert_equal_collective(t.node_ids, ref.node_ids, err_msg=msg)
            assert_equal_collective(t.node_values, ref.node_values, err_msg=msg)
            assert_equal_collective(t.node_types, ref.node_types, err_msg=msg)
            assert_equal_collective(t.arcs, ref.arcs, err_msg=msg)
            assert_equal_collective(t.persistence_pairs()[1], ref.persistence_pairs()[1],
                                    err_msg=msg)


def test_dual_paths_that_leave_through_the_grid_boundary():
    """The demo's smooth field on a 24x20x16 grid: a 2-saddle's dual path reaches
    a boundary triangle whose second stencil tet lies outside the grid (a padding
    vertex). That tet must count as the outside, not as a tet of the star (it
    read codes out of bounds before; run under NUMBA_BOUNDSCHECK=1 to see)."""
    shape = (24, 20, 16)
    g = Grid(shape, COMM)
    z, y, x = np.meshgrid(*[np.linspace(0, 1, s) for s in shape[::-1]], indexing="ij")
    f = (np.sin(4 * x) * np.cos(3 * y) + np.sin(5 * z) + 0.3 * np.cos(7 * x * y)).ravel()
    dg = persistence_diagram(g, f).gather()
    assert_same_as_gudhi(dg, reference(g, f), 3)


@pytest.mark.parametrize("case", ["packed", "wide", "one-rank-empty"])
def test_sorted_block_is_the_lexsort_of_all_pairs(case):
    """The diagram's block sort (the key columns packed into one int64 when
    their ranges allow, else psort/lexsort of three columns) gives every
    rank its block of the lexsort of all ranks' pairs, ties in rank order."""
    from dmsolve import Layout
    from topology.persistence import sorted_block as _sorted_block
    rng = np.random.default_rng(3 + COMM.rank)
    n = 0 if case == "one-rank-empty" and COMM.rank == COMM.size - 1 else 50 + 7 * COMM.rank
    big = 2 ** 40 if case == "wide" else 20
    parts = [(d, rng.random(n), rng.random(n), rng.integers(0, big, n),
              rng.integers(-1, big, n)) for d in range(3)]
    got = _sorted_block(COMM, parts)
    rows = [np.column_stack((np.full(n, d), bv, dv, b, de)) for d, b, de, bv, dv in parts]
    every = np.concatenate(COMM.allgather(np.concatenate(rows)))
    every = every[np.lexsort((every[:, 2], every[:, 1], every[:, 0]))]
    lay = Layout.block(every.shape[0], COMM)
    want = every[lay.start:lay.stop]
    mine = np.column_stack((got["dim"], got["birth_vertex"], got["death_vertex"],
                            got["birth"], got["death"]))
    assert_collective(COMM, mine.shape == want.shape and np.array_equal(mine, want),
                      "block of the lexsort")
