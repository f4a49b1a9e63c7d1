"""Topology under edge cases (issue 14): empty complexes and ranks without
vertices, pinched complexes, Hodge on a grid, the axis order of grid fields,
progress reports of persistence and merge trees, and bad input refused at
the door on every rank."""

import os

import numpy as np
import pytest
from mpi4py import MPI

import gudhi_ref
from dmsolve import DistVector
from mpitest import (Checks, assert_allclose_collective, assert_collective,
                     assert_equal_collective, assert_raises_collective, on_rank0)
from test_topology_ref import grid_cells, reference_critical
from topology import (Grid, SimplicialComplex, betti_numbers, boundary_matrix,
                      connected_components, critical_points, discrete_gradient,
                      hodge_decomposition, hodge_laplacian, merge_tree, persistence_diagram)
from topology.io import read_image, read_mesh, write_vtu

COMM = MPI.COMM_WORLD
SELF = MPI.COMM_SELF


def _mine(rows):
    """This rank's share of a list of simplices (any split gives the same complex)."""
    return rows[COMM.rank::COMM.size]


def _same_diagram(dg, ref, dim):
    dg = dg.gather()
    for d in range(dim + 1):
        fin, ess = ref[d]
        assert_allclose_collective(dg.finite(d), fin, COMM, err_msg="D%d" % d)
        assert_allclose_collective(dg.essential(d), ess, COMM, err_msg="D%d essential" % d)


# -- 5. empty complexes and ranks that own no vertex --------------------------------------------

def test_every_entry_point_on_an_empty_complex():
    cx = SimplicialComplex([np.zeros((0, 3), np.int64)], COMM)
    empty = np.zeros(0)
    with Checks(COMM) as checks:
        cp = critical_points(cx, empty)
        checks.add(cp.gather()[0].size == 0 and sum(cp.counts().values()) == 0, "critical points")
        mt = merge_tree(cx, empty).gather()
        checks.add(mt.node_ids.size == 0 and mt.arcs.shape == (0, 2), "merge tree")
        checks.add(merge_tree(cx, empty, "split").gather().node_ids.size == 0, "split tree")
        checks.add(discrete_gradient(cx, empty).critical_counts() == [0], "gradient")
        checks.add(connected_components(cx).global_size == 0, "components")
        checks.add(betti_numbers(cx) == [0], "betti")
        checks.add(hodge_laplacian(cx, 0).shape == (0, 0), "laplacian")
        checks.add(boundary_matrix(cx, 1).shape == (0, 0), "boundary")
        hd = hodge_decomposition(cx, empty)
        checks.add(hd.energies == {"gradient": 0.0, "curl": 0.0, "harmonic": 0.0, "total": 0.0},
                   "hodge", hd.energies)
    assert_raises_collective(COMM, ValueError, persistence_diagram, cx, empty,
                             match="got dimension 0 \\(an empty complex\\)")


def test_ranks_without_vertices_match_one_rank():
    # one triangle fan with 3 + 2 vertices: at 4 ranks some rank owns one or none,
    # and a single triangle (3 vertices) leaves the fourth rank without any
    for tris in (np.array([[0, 1, 2]]), np.array([[0, 1, 2], [0, 2, 3], [0, 3, 4]])):
        n = int(tris.max()) + 1
        f = np.array([0.3, 0.1, 0.7, 0.2, 0.9])[:n]
        cx = SimplicialComplex([_mine(tris)], COMM)
        ref = SimplicialComplex([tris], SELF)
        got, want = critical_points(cx, f).gather(), critical_points(ref, f).gather()
        assert_equal_collective(got[0], want[0])
        assert_equal_collective(got[1], reference_critical(tris, f, n)[1])
        for kind in ("join", "split"):
            a, b = merge_tree(cx, f, kind).gather(), merge_tree(ref, f, kind)
            assert_equal_collective(a.node_ids, b.node_ids)
            assert_equal_collective(a.arcs, b.arcs)
        assert_equal_collective(discrete_gradient(cx, f).critical_counts(),
                                discrete_gradient(ref, f).critical_counts())
        assert_equal_collective(connected_components(cx).gather(), np.zeros(n, np.int64))
        assert_equal_collective(betti_numbers(cx), [1, 0, 0])
        _same_diagram(persistence_diagram(cx, f),
                      gudhi_ref.diagram(gudhi_ref.complex_simplices(ref), f), 2)


# -- 6. pinched complexes: ValueError before any work, the same at every rank count --------------

def _octahedron(shift=0, apex=0):
    o = np.array([[0, 1, 2], [0, 2, 3], [0, 3, 4], [0, 4, 1],
                  [5, 1, 2], [5, 2, 3], [5, 3, 4], [5, 4, 1]])
    return np.where(o == 0, apex, o + shift)


def _torus(nx=5, ny=4):
    cells = []
    for y in range(ny):
        for x in range(nx):
            a, b = x + y * nx, (x + 1) % nx + y * nx
            c, d = x + ((y + 1) % ny) * nx, (x + 1) % nx + ((y + 1) % ny) * nx
            cells += [[a, b, c], [b, c, d]]
    return np.array(cells, dtype=np.int64)


PINCHED = {
    # two spheres sharing vertex 0 (gave RuntimeError after the whole computation)
    "two-spheres": (np.concatenate([_octahedron(), _octahedron(shift=5)]),
                    r"vertex 0 is pinched \(its link is not connected\)"),
    # two triangles sharing vertex 3 only
    "bowtie": (np.array([[0, 1, 3], [2, 3, 4]]), r"vertex 3 is pinched"),
    "tets-at-a-vertex": (np.array([[0, 1, 2, 3], [3, 4, 5, 6]]), r"vertex 3 is pinched"),
    "tets-at-an-edge": (np.array([[0, 1, 2, 3], [0, 1, 4, 5]]),
                        r"edge \(0, 1\) is pinched"),
    # a cone over a torus: the apex's link is a connected closed surface, not a sphere
    "cone-over-a-torus": (np.column_stack((np.full(40, 20), _torus())),
                          r"the link of vertex 20 is neither a sphere nor a disk"),
}


@pytest.mark.parametrize("name", sorted(PINCHED))
@pytest.mark.parametrize("partition", ["block", "metis"])
def test_pinched_complex_is_a_value_error(name, partition):
    cells, match = PINCHED[name]
    cx = SimplicialComplex([_mine(cells)], COMM, partition=partition)
    f = np.random.default_rng(0).random(cx.num_vertices)
    assert_raises_collective(COMM, ValueError, persistence_diagram, cx, f,
                             match="not a manifold: " + match)
    # critical points do not need a manifold
    got = critical_points(cx, f).gather()
    assert_equal_collective(got[1], reference_critical(cells, f, cx.num_vertices)[1])


# -- 7. Hodge theory on a grid: through its triangulation as a complex ----------------------------

def test_hodge_on_a_grid_refers_to_to_complex():
    g = Grid((5, 4), COMM)
    assert_raises_collective(COMM, TypeError, hodge_decomposition, g, np.ones(10),
                             match="SimplicialComplex.*grid.to_complex\\(\\)")
    assert_raises_collective(COMM, ValueError, g.to_complex, partition="rcb",
                             match="unknown partition")


@pytest.mark.parametrize("shape", [(5, 4), (4, 3, 3)])
def test_grid_to_complex_is_the_freudenthal_triangulation(shape):
    g = Grid(shape, COMM)
    cx = g.to_complex()
    want = gudhi_ref.grid_simplices(shape)
    for k in range(len(shape) + 1):
        got = cx.simplices(k) if k else cx.simplices(0)
        assert_equal_collective(got, want[k], err_msg="k=%d" % k)
    assert_equal_collective(betti_numbers(cx), [1] + [0] * len(shape))
    # a flow on the grid's edges: the box has no harmonic part
    m = cx.simplex_layout(1).global_size
    flow = np.random.default_rng(2).standard_normal(m)
    hd = hodge_decomposition(cx, flow, rtol=1e-10)
    total = hd.gradient.gather() + hd.curl.gather() + hd.harmonic.gather()
    assert_allclose_collective(total, flow, COMM, rtol=0, atol=1e-12)
    assert_collective(COMM, hd.energies["harmonic"] < 1e-14 * hd.energies["total"],
                      str(hd.energies))
    # vertex fields index the complex like the grid
    f = np.random.default_rng(3).random(g.global_num_vertices)
    assert_equal_collective(critical_points(cx, f).gather()[1], critical_points(g, f).gather()[1])


# -- 8. the axis order of 2-D / 3-D fields on a grid ---------------------------------------------

@pytest.mark.parametrize("shape", [(5, 5), (4, 5, 4), (4, 6), (3, 4, 5)],
                         ids=["square", "palindrome-3d", "rect", "box"])
def test_field_axis_order_is_explicit(shape):
    g = Grid(shape, COMM)
    rng = np.random.default_rng(4)
    flat = rng.permutation(g.global_num_vertices).astype(float)   # no ties
    image = flat.reshape(shape[::-1])                 # values[z, y, x]
    ij = image.T                                      # values[x, y, z]
    xyz, zyx = "xyz"[:len(shape)], "xyz"[:len(shape)][::-1]
    want = reference_critical(grid_cells(shape), flat, flat.size)
    for arr, axes in ((ij, xyz), (image, zyx), (flat, None)):
        ids, types = critical_points(g, arr, axes=axes).gather()
        assert_equal_collective(ids, want[0], err_msg=str(axes))
        assert_equal_collective(types, want[1], err_msg=str(axes))
    # any permutation: values[y, x(, z)]
    perm = "yx" if len(shape) == 2 else "yxz"
    arr = np.transpose(ij, [xyz.index(a) for a in perm])
    assert_equal_collective(critical_points(g, arr, axes=perm).gather()[1], want[1])
    ref = gudhi_ref.diagram(gudhi_ref.grid_simplices(shape), flat)
    _same_diagram(persistence_diagram(g, ij, axes=xyz), ref, len(shape))
    assert_equal_collective(merge_tree(g, ij, axes=xyz).gather().arcs,
                            merge_tree(g, flat).gather().arcs)
    assert_equal_collective(discrete_gradient(g, ij, axes=xyz).critical_counts(),
                            discrete_gradient(g, flat).critical_counts())
    t = float(np.median(flat))
    assert_equal_collective(connected_components(g, ij, t, axes=xyz).gather(),
                            connected_components(g, flat, t).gather())
    if tuple(shape) == tuple(shape[::-1]):
        # the two orders look alike: never guessed
        for arr in (image, ij):
            assert_raises_collective(COMM, ValueError, critical_points, g, arr,
                                     match="reads the same .* axes=")
    else:
        assert_equal_collective(critical_points(g, image).gather()[1], want[1])
        assert_raises_collective(COMM, ValueError, critical_points, g, ij,
                                 match="pass axes=%r" % xyz)


def test_bad_axes_are_refused():
    g2, g3 = Grid((4, 4), COMM), Grid((3, 4, 5), COMM)
    f2, f3 = np.zeros((4, 4)), np.zeros((5, 4, 3))
    cx = SimplicialComplex([_mine(np.array([[0, 1, 2]]))], COMM)
    for call, exc, match in (
            (lambda: critical_points(g2, f2, axes="xx"), ValueError, "permutation|axes must"),
            (lambda: critical_points(g2, f2, axes="xyz"), ValueError, "2 axes"),
            (lambda: critical_points(g2, f2, axes=1), TypeError, "axes must be None or a str"),
            (lambda: critical_points(g3, f3, axes="xyz"), ValueError, r"shape \(3, 4, 5\)"),
            (lambda: critical_points(g3, np.zeros((60, 1)), axes=None), ValueError, "3-D"),
            (lambda: critical_points(cx, np.zeros(3), axes="xy"), ValueError, "Grid"),
            (lambda: persistence_diagram(g2, f2, axes="YX"), ValueError, "axes must")):
        assert_raises_collective(COMM, exc, call, match=match)


# -- 9. progress reports --------------------------------------------------------------------------

class Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, task, message, seconds):
        self.calls.append((task, message, seconds))


def _phases(rec):
    return [m.split(":")[0].split(" of ")[0] for _, m, _ in rec.calls]


@pytest.mark.parametrize("shape", [(6, 5), (5, 4, 6)])
def test_persistence_progress_reports_each_phase(shape):
    g = Grid(shape, COMM)
    f = np.random.default_rng(5).random(g.global_num_vertices)
    rec = Recorder()
    dg = persistence_diagram(g, f, progress=rec)
    want = ["global order", "D0", "D%d" % (len(shape) - 1)]
    if len(shape) == 3:     # a 3D grid: every dimension from the Morse complex
        want = ["global order", "discrete gradient", "D0", "D1", "D2"]
    r = dg.report
    with Checks(COMM) as checks:
        checks.add(_phases(rec) == want, "phases", _phases(rec))
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
    _same_diagram(dg, gudhi_ref.diagram(gudhi_ref.grid_simplices(shape), f), len(shape))


def test_progress_on_a_complex_merge_tree_and_printing(capsys):
    cells = _octahedron()
    cx = SimplicialComplex([_mine(cells)], COMM)
    f = np.random.default_rng(6).random(6)
    rec = Recorder()
    dg = persistence_diagram(cx, f, progress=rec)
    assert_equal_collective(_phases(rec), ["global order", "D0", "D1", "essential classes"])
    assert_collective(COMM, rec.calls[-1][1] == "essential classes: %d of D1"
                      % dg.report[1]["essential"], rec.calls[-1][1])
    rec = Recorder()
    mt = merge_tree(cx, f, progress=rec)
    assert_equal_collective(_phases(rec), ["global order", "sweep"])
    assert_collective(COMM, rec.calls[1][1] == "sweep: %d arcs, 1 components" % mt.counts["arcs"],
                      rec.calls[1][1])
    assert_collective(COMM, all(t == "merge_tree" for t, _, _ in rec.calls))
    capsys.readouterr()
    persistence_diagram(cx, f, progress=True)
    out = capsys.readouterr().out.splitlines()
    if COMM.rank == 0:
        ok = len(out) == 4 and out[0].startswith("persistence: global order of 6 vertices (")
    else:
        ok = out == []
    assert_collective(COMM, ok, repr(out))


def test_bad_progress_and_a_failing_callback():
    g = Grid((4, 5), COMM)
    f = np.arange(20.0)
    for call in (persistence_diagram, merge_tree):
        assert_raises_collective(COMM, TypeError, call, g, f, progress="yes",
                                 match="progress must be None, True or a callable")

    def fails_on_last_rank(task, message, seconds):
        if COMM.rank == COMM.size - 1 and message.startswith("D0"):
            raise ValueError("callback refuses %s" % message.split(":")[0])
    assert_raises_collective(COMM, ValueError, persistence_diagram, g, f,
                             progress=fails_on_last_rank, match="callback refuses D0")


# -- 10. bad input at the door, the same on every rank ----------------------------------------------

def test_bad_topology_input_is_refused_on_every_rank(shared_tmp_path):
    g = Grid((4, 5), COMM)
    f = np.arange(20.0)
    nan = f.copy()
    nan[7] = np.nan
    d = shared_tmp_path
    dg = persistence_diagram(g, f)
    cases = [
        (lambda: persistence_diagram(np.zeros(4), f), TypeError, "Grid or SimplicialComplex"),
        (lambda: merge_tree("grid", f), TypeError, "Grid or SimplicialComplex"),
        (lambda: discrete_gradient(None, f), TypeError, "Grid or SimplicialComplex"),
        (lambda: merge_tree(g, f, kind=3), TypeError, "kind must be a string"),
        (lambda: persistence_diagram(g, f, min_persistence="0.1"), TypeError, "min_persistence"),
        (lambda: persistence_diagram(g, f, min_persistence=True), TypeError, "min_persistence"),
        (lambda: merge_tree(g, nan), ValueError, "finite"),
        (lambda: discrete_gradient(g, nan), ValueError, "finite"),
        (lambda: discrete_gradient(g, f[:-1]), ValueError, r"shape \(19,\)"),
        (lambda: write_vtu(str(d / "a.vtu"), g, point_data={"f": f[:-1]}), ValueError,
         r"point_data\['f'\] must be real numbers of shape \(20,\)"),
        (lambda: write_vtu(str(d / "a.vtu"), g, point_data={3: f}), TypeError, "names"),
        (lambda: write_vtu(str(d / "a.vtu"), g, cell_data={"c": g.vertex_values(f)}),
         ValueError, "a Grid has no cell layout"),
        (lambda: write_vtu(str(d / "no" / "a.vtu"), g, point_data={"f": f}), OSError,
         "cannot open path"),
        (lambda: write_vtu(None, g), TypeError, "path"),
        (lambda: dg.write_csv(None), TypeError, "path"),
        (lambda: dg.write_csv(str(d / "no" / "a.csv")), OSError, "cannot open path"),
        (lambda: dg.write_csv(str(d)), OSError, "Is a directory"),
        (lambda: dg.write_vtu(str(d / "p.vtu"), Grid((4, 5, 2), COMM)), ValueError,
         "dimension 3, the diagram 2"),
        (lambda: dg.write_vtu(str(d / "p.vtu"), "grid"), TypeError, "Grid or SimplicialComplex"),
        (lambda: dg.write_vtu(str(d / "no" / "p.vtu"), g), OSError, "cannot open path"),
        (lambda: Grid((-3, 4), COMM), ValueError, "at least 2"),
        (lambda: read_mesh(None, COMM), TypeError, "path"),
        (lambda: Grid(None, COMM), TypeError, "shape must be 2 or 3 integers, got None"),
        (lambda: Grid((10 ** 6,) * 3, COMM), ValueError, r"needs about .* GB per rank"),
        (lambda: SimplicialComplex([np.array([[0, 1, 10 ** 12]])], COMM), ValueError,
         r"vertex ids up to 1000000000000 needs about"),
        (lambda: discrete_gradient(g, f).critical_cells(-1), ValueError, r"d must be .*\[0, 2\]"),
        (lambda: discrete_gradient(g, f).pairs(2), ValueError, r"d must be .*\[0, 1\]"),
        (lambda: g.to_complex().simplices(-1), ValueError, "k must be an integer >= 0"),
    ]
    for call, exc, match in cases:
        assert_raises_collective(COMM, exc, call, match=match)
    # the valid writes still work
    write_vtu(str(d / "ok.vtu"), g, point_data={"f": f},
              cell_data={"c": np.arange(24.0)})
    dg.write_csv(str(d / "ok.csv"))
    rows = on_rank0(COMM, lambda: open(str(d / "ok.csv")).read().splitlines())
    kept = sum(r["kept"] + r["essential"] for r in dg.report.values())
    assert_collective(COMM, len(rows) == 1 + kept == 1 + dg.gather().pairs["dim"].size,
                      str(rows[:3]))


def test_damaged_images_and_meshes(shared_tmp_path):
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
        import meshio
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
