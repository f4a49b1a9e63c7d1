"""Persistence diagrams of lower-star filtrations (persistence_diagram,
PersistenceDiagram) against gudhi's SimplexTree built on exactly our
triangulations (tests/gudhi_ref.py) and against Oineus, on grids and
meshes, with ties, under every partition and at any rank count: the pairs
and their report, the distributed blocks, progress reports, the CSV and VTU
output, and bad input refused on every rank."""

import os
import warnings

import gudhi
import meshio
import numpy as np
import pytest
from mpi4py import MPI

import gudhi_ref
from dmsolve import DistVector
from full_disk import assert_left_as_before, full_disk_mesh_write, full_disk_open, snapshot
from mpitest import (Checks, assert_collective, assert_equal_collective,
                     assert_raises_collective, on_rank0)
from topology import Grid, SimplicialComplex, critical_points, persistence_diagram
from topology.core import _vtkxml as vtkxml
from topology.persistence import _diagram as diagram_module
from topology_cases import (BENCH_CASES, DIAGRAM_MESHES, Recorder, assert_same_diagram,
                            bench_field, finite_nonzero, make_grid, make_mesh, my_share,
                            octahedron, partition_meshes, phases)

COMM = MPI.COMM_WORLD


def reference(domain, f):
    """gudhi's diagram of the lower-star filtration of ``f`` on ``domain``."""
    simplices = (gudhi_ref.grid_simplices(domain.shape) if isinstance(domain, Grid)
                 else gudhi_ref.complex_simplices(domain))
    return gudhi_ref.diagram(simplices, f)


def assert_same_as_gudhi(dg, ref, dimension):
    """The gathered ``dg`` has exactly the pairs and essential classes of ``ref``."""
    for d in range(dimension + 1):
        assert_equal_collective(dg.finite(d), ref[d][0], err_msg="finite D%d" % d)
        assert_equal_collective(dg.essential(d), ref[d][1], err_msg="essential D%d" % d)


# (9, 3) and (9, 8, 3): at 4 ranks one rank owns no plane
GRID_CASES = [((13, 11), "random"), ((17, 9), "ties"), ((24, 19), "smooth"), ((9, 3), "random"),
              ((7, 6, 9), "random"), ((8, 7, 6), "ties"), ((10, 9, 11), "smooth"),
              ((9, 8, 3), "ties")]
MESH_CASES = [(m, k) for m in DIAGRAM_MESHES for k in ("random", "ties")]


def _gathered(x, width=None):
    out = np.concatenate(COMM.allgather(np.asarray(x)))
    return out.reshape(-1, width) if width else out


# -- diagrams against gudhi -----------------------------------------------------------------
@pytest.mark.parametrize("shape,kind", GRID_CASES,
                         ids=["%s-%s" % ("x".join(map(str, s)), k) for s, k in GRID_CASES])
def test_grid_diagram_equals_gudhi(shape, kind):
    """Grid diagrams are gudhi's, and every pair is a pair of vertices with
    the stated values."""
    g, f = make_grid(shape, kind)
    dg = persistence_diagram(g, f).gather()
    assert_equal_collective(len(dg.missing), 0, err_msg=str(dg.missing))
    assert_same_as_gudhi(dg, reference(g, f), len(shape))
    # the pairs are real pairs of vertices with the stated values
    p = dg.pairs
    fin = np.isfinite(p["death"])
    assert_equal_collective(f[p["birth_vertex"]], p["birth"])
    assert_equal_collective(f[p["death_vertex"][fin]], p["death"][fin])


@pytest.mark.parametrize("name,kind", MESH_CASES, ids=["%s-%s" % c for c in MESH_CASES])
def test_mesh_diagram_equals_gudhi(name, kind):
    """Diagrams of surfaces and solids with holes are gudhi's, nothing missing."""
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


# -- threshold and report ------------------------------------------------------------------------
@pytest.mark.parametrize("threshold", [0.0, 0.05, 0.3])
def test_min_persistence_report(threshold):
    """The pairs kept above ``min_persistence`` and the report's counts are
    gudhi's; a negative or NaN threshold is refused on every rank."""
    g, f = make_grid((9, 10, 8), "random")
    dg = persistence_diagram(g, f, min_persistence=threshold).gather()
    st = gudhi_ref.lower_star_tree(gudhi_ref.grid_simplices(g.shape), f)
    st.compute_persistence(persistence_dim_max=True, min_persistence=threshold)
    for d in range(4):
        iv = np.asarray(st.persistence_intervals_in_dimension(d)).reshape(-1, 2)
        fin = iv[np.isfinite(iv[:, 1])]
        if d not in dg.dims:                # a grid (a ball) has no top-dimensional class
            assert_equal_collective(len(iv), 0, err_msg="gudhi's D%d of a grid" % d)
            continue
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


@pytest.mark.parametrize("complex_", ["cubical", "freudenthal"])
def test_a_2d_grid_diagram_has_dimensions_0_and_1(complex_):
    """A 2-D image's diagram reports dimensions 0 and 1, as gudhi's
    CubicalComplex does (``dims``, ``report``, ``describe()``, ``repr``),
    with gudhi's counts in each; a closed surface (an octahedron) keeps its
    essential dimension-2 class."""
    f = np.random.default_rng(7).random((9, 11))          # numpy order [y, x]
    g = Grid(f.shape[::-1], COMM, complex=complex_)
    dg = persistence_diagram(g, f, axes="yx")
    cc = gudhi.CubicalComplex(vertices=f)
    ref = cc.persistence(homology_coeff_field=2, min_persistence=-1.0)
    gudhi_dims = sorted({d for d, _ in ref})
    assert_equal_collective(gudhi_dims, [0, 1])
    for shown in (dg, dg.gather()):
        assert_equal_collective(shown.dims, (0, 1))
        assert_equal_collective(sorted(shown.report), [0, 1])
        text = shown.describe() + repr(shown)
        assert_collective(COMM, "D2" not in text and "D1" in text, text)
    if complex_ == "cubical":
        whole = dg.gather()
        for d in (0, 1):
            iv = np.asarray(cc.persistence_intervals_in_dimension(d)).reshape(-1, 2)
            fin = iv[np.isfinite(iv[:, 1]) & (iv[:, 1] > iv[:, 0])]
            assert_equal_collective(whole.report[d]["nonzero"], len(fin), err_msg="D%d" % d)
            assert_equal_collective(whole.report[d]["essential"],
                                    int(np.count_nonzero(~np.isfinite(iv[:, 1]))))
    sphere = SimplicialComplex([my_share(octahedron())], COMM)
    ds = persistence_diagram(sphere, np.arange(6, dtype=float))
    assert_equal_collective(ds.dims, (0, 1, 2))
    assert_equal_collective(ds.report[2]["essential"], 1)


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
    """The CSV rows and the VTU points (with TTK's array names and critical
    types) read back as the diagram's pairs."""
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
def test_diagram_errors():
    """A complex that is not a manifold, a field of the wrong size or with a
    NaN are refused on every rank; a complete diagram warns of nothing."""
    fin = np.array([[0, 1, 2], [0, 1, 3], [0, 1, 4]])     # an edge with three triangles
    cx = SimplicialComplex([fin[COMM.rank::COMM.size]], COMM)
    assert_raises_collective(COMM, ValueError, persistence_diagram, cx, np.arange(5.0),
                             match="manifold")
    g = Grid((4, 5), COMM)
    assert_raises_collective(COMM, ValueError, persistence_diagram, g, np.arange(19.0))
    bad = np.arange(20.0)
    bad[3] = np.nan
    assert_raises_collective(COMM, ValueError, persistence_diagram, g, bad)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dg = persistence_diagram(g, np.arange(20.0)).gather()   # complete: no warning
    assert_equal_collective(dg.essential(0), [0.0])


# -- partitions: METIS and RCB renumber vertices internally; results must not move ------
@pytest.mark.parametrize("name", ["tri", "tet"])
def test_partition_independent_diagrams(name):
    """With integer values (ties everywhere), the raw pairs with their birth and
    death vertex ids are the same under block, METIS and RCB partitions, the
    same as a serial run, and the diagrams equal gudhi's."""
    cells, pts = partition_meshes()[name]
    f = np.random.default_rng(7).integers(0, 4, pts.shape[0]).astype(np.float64)
    serial = SimplicialComplex([cells], MPI.COMM_SELF, pts)
    want = persistence_diagram(serial, f).raw_pairs
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


def test_dual_paths_that_leave_through_the_grid_boundary():
    """The demo's smooth field on a 24x20x16 grid: a 2-saddle's dual path reaches
    a boundary triangle whose second stencil tet lies outside the grid (a padding
    vertex). That tet must count as the outside, not as a tet of the star (taking it
    for one reads codes out of bounds; NUMBA_BOUNDSCHECK=1 catches that)."""
    shape = (24, 20, 16)
    g = Grid(shape, COMM)
    z, y, x = np.meshgrid(*[np.linspace(0, 1, s) for s in shape[::-1]], indexing="ij")
    f = (np.sin(4 * x) * np.cos(3 * y) + np.sin(5 * z) + 0.3 * np.cos(7 * x * y)).ravel()
    dg = persistence_diagram(g, f).gather()
    assert_same_as_gudhi(dg, reference(g, f), 3)


# -- the distributed diagram ---------------------------------------------------------------
def test_distributed_diagram_blocks_gather_and_refusals():
    """Each rank holds its block of the sorted pairs; gather() (everywhere or
    on one root) gives the serial diagram, and the whole-diagram properties
    of a distributed diagram are refused until it is gathered."""
    shape = (8, 7, 3 * COMM.size + 2)
    g = Grid(shape, COMM)
    f = np.random.default_rng(11).random(int(np.prod(shape)))
    dg = persistence_diagram(g, f)
    whole = dg.gather()
    ref = persistence_diagram(Grid(shape, MPI.COMM_SELF), f)
    raw = dg.local_raw_pairs
    keys = np.column_stack((raw["dim"], raw["birth_vertex"], raw["death_vertex"]))
    total = sum(r["pairs"] + r["essential"] for r in dg.report.values())
    with Checks(COMM) as c:
        for k in ref.raw_pairs:
            c.add(np.array_equal(whole.raw_pairs[k], ref.raw_pairs[k]), "gathered " + k)
            c.add(np.array_equal(_gathered(raw[k]), ref.raw_pairs[k]),
                  "blocks in rank order are the sorted diagram: " + k)
        c.add(np.all(np.diff(keys[:, 0]) >= 0), "sorted by dim")
        c.add(whole.report == ref.report and dg.report == ref.report, "report")
        # one block each: nobody holds the whole diagram
        c.add(raw["dim"].size <= -(-total // COMM.size), "a block of the pairs",
              (raw["dim"].size, total))
        c.add(whole.complete and (dg.complete == (COMM.size == 1)), "complete flags")
        at0 = dg.gather(root=0)
        c.add((at0 is not None) == (COMM.rank == 0), "gather(root=0) only on rank 0")
        if COMM.rank == 0:
            c.add(all(np.array_equal(at0.raw_pairs[k], ref.raw_pairs[k]) for k in ref.raw_pairs),
                  "gather(root=0)")
    if COMM.size > 1:
        for call in (lambda: dg.pairs, lambda: dg.raw_pairs, lambda: dg.finite(0),
                     lambda: dg.essential(0)):
            assert_raises_collective(COMM, RuntimeError, call, match="gather")
        assert_raises_collective(COMM, ValueError, dg.gather, root=COMM.size)
    assert_collective(COMM, "distributed" in repr(dg) or COMM.size == 1, repr(dg))


# -- progress reports ------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(6, 5), (5, 4, 6)])
def test_persistence_progress_reports_each_phase(shape):
    """A progress callback hears every phase in order, on every rank alike,
    with growing times and the report's pair counts."""
    g = Grid(shape, COMM)
    f = np.random.default_rng(5).random(g.global_num_vertices)
    rec = Recorder()
    dg = persistence_diagram(g, f, progress=rec)
    want = ["global order", "D0", "D%d" % (len(shape) - 1)]
    if len(shape) == 3:     # a 3D grid: every dimension from the Morse complex
        want = ["global order", "discrete gradient", "D0", "D1", "D2"]
    r = dg.report
    with Checks(COMM) as checks:
        checks.add(phases(rec) == want, "phases", phases(rec))
        checks.add(all(t == "persistence" for t, _, _ in rec.calls), "task")
        secs = [s for _, _, s in rec.calls]
        checks.add(all(isinstance(s, float) and s >= 0 for s in secs)
                   and secs == sorted(secs), "seconds", secs)
        msgs = dict((m.split(":")[0], m) for _, m, _ in rec.calls)
        checks.add(msgs["D0"] == "D0: %d pairs, %d essential"
                   % (r[0]["pairs"], r[0]["essential"]), "D0 counts", msgs["D0"])
        d = len(shape) - 1
        checks.add(msgs["D%d" % d] == "D%d: %d pairs" % (d, r[d]["pairs"]), "top counts")
        if len(shape) == 3:
            checks.add(msgs["D1"] == "D1: %d pairs, %d essential"
                       % (r[1]["pairs"], r[1]["essential"]), "D1 counts", msgs["D1"])
    assert_collective(COMM, COMM.allgather([m for _, m, _ in rec.calls])
                      == [[m for _, m, _ in rec.calls]] * COMM.size, "same messages")
    assert_same_diagram(dg, gudhi_ref.diagram(gudhi_ref.grid_simplices(shape), f), len(shape))


def test_persistence_progress_on_a_complex_and_printing(capsys):
    """On a complex the phases end with the essential classes; with
    ``progress=True`` rank 0 prints one line per phase and the others nothing."""
    cells = octahedron()
    cx = SimplicialComplex([my_share(cells)], COMM)
    f = np.random.default_rng(6).random(6)
    rec = Recorder()
    dg = persistence_diagram(cx, f, progress=rec)
    assert_equal_collective(phases(rec), ["global order", "D0", "D1", "essential classes"])
    assert_collective(COMM, rec.calls[-1][1] == "essential classes: %d of D1"
                      % dg.report[1]["essential"], rec.calls[-1][1])
    capsys.readouterr()
    persistence_diagram(cx, f, progress=True)
    out = capsys.readouterr().out.splitlines()
    if COMM.rank == 0:
        ok = len(out) == 4 and out[0].startswith("persistence: global order of 6 vertices (")
    else:
        ok = out == []
    assert_collective(COMM, ok, repr(out))


def test_bad_persistence_progress_and_a_failing_callback():
    """A progress that is not a callable is a TypeError, and a callback that
    raises on one rank raises on every rank."""
    g = Grid((4, 5), COMM)
    f = np.arange(20.0)
    assert_raises_collective(COMM, TypeError, persistence_diagram, g, f, progress="yes",
                             match="progress must be None, True or a callable")

    def fails_on_last_rank(task, message, seconds):
        if COMM.rank == COMM.size - 1 and message.startswith("D0"):
            raise ValueError("callback refuses %s" % message.split(":")[0])
    assert_raises_collective(COMM, ValueError, persistence_diagram, g, f,
                             progress=fails_on_last_rank, match="callback refuses D0")


# -- bad input at the door ---------------------------------------------------------------------
def test_diagram_refuses_bad_options_and_paths(shared_tmp_path):
    """A threshold that is not a number, CSV and VTU paths that cannot be
    written and a domain that does not fit the diagram are refused on every
    rank; a valid CSV still has one row per kept pair."""
    g = Grid((4, 5), COMM)
    f = np.arange(20.0)
    d = shared_tmp_path
    dg = persistence_diagram(g, f)
    cases = [
        (lambda: persistence_diagram(g, f, min_persistence="0.1"), TypeError, "min_persistence"),
        (lambda: persistence_diagram(g, f, min_persistence=True), TypeError, "min_persistence"),
        (lambda: dg.write_csv(None), TypeError, "path"),
        (lambda: dg.write_csv(str(d / "no" / "a.csv")), OSError, "cannot open path"),
        (lambda: dg.write_csv(str(d)), OSError, "Is a directory"),
        (lambda: dg.write_vtu(str(d / "p.vtu"), Grid((4, 5, 2), COMM)), ValueError,
         "dimension 3, the diagram 2"),
        (lambda: dg.write_vtu(str(d / "p.vtu"), "grid"), TypeError, "Grid or SimplicialComplex"),
        (lambda: dg.write_vtu(str(d / "no" / "p.vtu"), g), OSError, "cannot open path"),
    ]
    for call, exc, match in cases:
        assert_raises_collective(COMM, exc, call, match=match)
    # the valid write still works
    dg.write_csv(str(d / "ok.csv"))
    rows = on_rank0(COMM, lambda: open(str(d / "ok.csv")).read().splitlines())
    kept = sum(r["kept"] + r["essential"] for r in dg.report.values())
    assert_collective(COMM, len(rows) == 1 + kept == 1 + dg.gather().pairs["dim"].size,
                      str(rows[:3]))


# -- another reference: Oineus ------------------------------------------------------------------
@pytest.mark.parametrize("shape, kind", [pytest.param(s, k, id=i) for s, k, i in BENCH_CASES])
def test_oineus_freudenthal_is_ours(shape, kind):
    """Oineus's lower star on the x-reversed array is our Freudenthal diagram
    (at this run's ranks): the same finite pairs D0-D2 and essential classes.
    It is the reference of bench/bench_persistence.py --references."""
    oineus = pytest.importorskip("oineus")
    nx, ny, nz = shape
    f = bench_field(shape, kind)
    dg = persistence_diagram(Grid(shape, COMM), f).gather()
    arr = np.ascontiguousarray(f.reshape(nz, ny, nx)[:, :, ::-1])
    ref = oineus.compute_diagrams_ls(arr, max_dim=2)
    for d in range(3):
        r = np.asarray(ref.in_dimension(d), dtype=np.float64).reshape(-1, 2)
        assert_equal_collective(finite_nonzero(dg.finite(d)), finite_nonzero(r),
                                err_msg="finite D%d" % d)
        assert_equal_collective(np.sort(dg.essential(d)), np.sort(r[np.isinf(r[:, 1]), 0]),
                                err_msg="essential D%d" % d)
    # the check has teeth: without the reversal the triangulations differ
    if kind == "noisy":
        plain = oineus.compute_diagrams_ls(np.ascontiguousarray(f.reshape(nz, ny, nx)), max_dim=2)
        same = all(np.array_equal(finite_nonzero(dg.finite(d)),
                                  finite_nonzero(plain.in_dimension(d))) for d in range(3))
        assert_equal_collective(same, False, err_msg="unreversed Oineus matched")


@pytest.mark.parametrize("what", ["csv", "vtu", "pvtu-piece-on-last-rank"])
def test_full_disk_leaves_the_previous_file_and_no_temporary(shared_tmp_path, monkeypatch,
                                                             what):
    """A diagram write that fills the disk part-way (the CSV or VTU file on rank 0, the
    last rank's piece) raises OSError on every rank, leaves the previous files byte for
    byte and no temporary; the next write that succeeds replaces them."""
    g, f = make_grid((7, 6), "smooth")
    old = persistence_diagram(g, f, min_persistence=0.0)
    new = persistence_diagram(g, 2 * f, min_persistence=0.0)
    d = str(shared_tmp_path)
    path = os.path.join(d, "d." + what.split("-")[0])
    write = {"csv": lambda dg: dg.write_csv(path), "vtu": lambda dg: dg.write_vtu(path, g),
             "pvtu": lambda dg: dg.write_pvtu(path, g)}[what.split("-")[0]]
    write(old)
    before = snapshot(COMM, d)
    if what == "csv":
        monkeypatch.setattr(diagram_module, "open", full_disk_open(), raising=False)
    elif what == "vtu":
        monkeypatch.setattr(meshio.Mesh, "write", full_disk_mesh_write)
    else:
        last = "_%d.vtu.tmp" % (COMM.size - 1)
        monkeypatch.setattr(vtkxml, "open", full_disk_open(
            lambda p: p.endswith(last) and COMM.rank == COMM.size - 1), raising=False)
    assert_raises_collective(COMM, OSError, write, new, match="No space left on device")
    monkeypatch.undo()
    assert_left_as_before(COMM, d, before)
    write(new)
    after = snapshot(COMM, d)
    assert_equal_collective(sorted(after), sorted(before), COMM)
    assert_collective(COMM, after[os.path.basename(path)] != before[os.path.basename(path)]
                      or what.startswith("pvtu"), "the file rewritten")
