"""Meshes, fields and bookkeeping shared by several topology test files: the
complexes and fields the analyses are run on, the raw fields of out-of-core
grids, and small readers of what a complex holds."""

import itertools
import os

import meshio
import numpy as np
from mpi4py import MPI
from scipy.spatial import Delaunay

import gudhi_ref
from mpitest import assert_allclose_collective, on_rank0
from topology import Grid, RawField, SimplicialComplex
from topology_reference import grid_cells

COMM = MPI.COMM_WORLD


# -- complexes -----------------------------------------------------------------------------------
def delaunay(n, dim, seed):
    """``n`` random points in the unit cube of dimension ``dim`` and their
    Delaunay simplices."""
    rng = np.random.default_rng(seed)
    pts = rng.random((n, dim))
    return pts, Delaunay(pts).simplices.astype(np.int64)


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


def holed_block(shape):
    """Grid tetrahedra minus a column through the middle: a solid torus, one
    tunnel (an essential 1-class). Vertices renumbered 0..n-1."""
    tets = grid_cells(shape)
    nx, ny = shape[0], shape[1]
    cx = (tets % nx).mean(1)
    cy = ((tets // nx) % ny).mean(1)
    keep = ~((cx > 2) & (cx < nx - 3) & (cy > 2) & (cy < ny - 3))
    _, inv = np.unique(tets[keep], return_inverse=True)
    return inv.reshape(-1, 4).astype(np.int64)


def holed_grid_mesh(shape, drop):
    """Freudenthal simplices of a grid minus those whose cell passes ``drop``,
    renumbered, with vertex coordinates."""
    cells = grid_cells(shape)
    strides = np.cumprod((1,) + tuple(shape[:-1]))
    centre = [np.floor(((cells // s) % m).mean(1)) for s, m in zip(strides, shape)]
    cells = cells[~drop(*centre)]
    u, inv = np.unique(cells, return_inverse=True)
    pts = np.column_stack([(u // s) % m for s, m in zip(strides, shape)]).astype(np.float64)
    return inv.reshape(cells.shape).astype(np.int64), pts


#: Triangles and tetrahedra with holes, with coordinates, for the partitioners
HOLED_GRID_MESHES = {
    "tri": lambda: holed_grid_mesh((11, 9), lambda x, y: (x >= 3) & (x < 6) & (y >= 3) & (y < 5)),
    "tet": lambda: holed_grid_mesh((7, 6, 5), lambda x, y, z: (x == 3) & (y == 2)),
}


def complex_on_rank0(tets):
    """A complex whose simplices are all given by rank 0."""
    return SimplicialComplex(tets if COMM.rank == 0 else np.zeros((0, tets.shape[1]), np.int64),
                             COMM)


def _with_points(cells, strides):
    """Renumbered cells and the grid coordinates of their vertices."""
    u, inv = np.unique(cells, return_inverse=True)
    pts = np.column_stack([(u // s) % m for s, m in strides]).astype(np.float64)
    return inv.reshape(cells.shape).astype(np.int64), pts


def partition_meshes():
    """A holed triangulated rectangle (random diagonals) and a cube of
    tetrahedra with a cavity and a tunnel, renumbered, with coordinates."""
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


# -- the fields and domains of the persistence diagrams and merge trees --------------------------
DIAGRAM_MESHES = {"tri-holes": tri_holes, "torus": torus, "tet-cavity": tet_cavity,
                  "tet-delaunay": lambda: delaunay(150, 3, seed=3)[1]}


def diagram_field(n, kind, seed=5, coords=None):
    """Random values, integer values (ties), or a smooth field rounded so
    that ties appear along level sets."""
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
    return g, diagram_field(n, kind, coords=g.coordinates(np.arange(n)))


def make_mesh(name, kind):
    cells = DIAGRAM_MESHES[name]()
    cx = SimplicialComplex([cells[COMM.rank::COMM.size]], COMM)
    return cx, diagram_field(cx.num_vertices, kind, coords=np.column_stack(
        [np.arange(cx.num_vertices) % 7, np.arange(cx.num_vertices) // 7]))


# -- the fields and meshes of the discrete gradient and its Morse complex ------------------------
def gradient_field(kind, shape, seed=0):
    """Vertex values in id order: integer values with many ties ('ties',
    'ties3'), noise, or a smooth field."""
    n = int(np.prod(shape))
    rng = np.random.default_rng(seed)
    if kind == "ties":              # integer values: many ties, the id tie-break matters
        return rng.integers(0, 4, size=n).astype(np.float64)
    if kind == "ties3":
        return rng.integers(0, 3, size=n).astype(np.float64)
    if kind == "noise":
        return rng.random(n)
    axes = np.meshgrid(*[np.linspace(0, 3, s) for s in shape[::-1]], indexing="ij")
    if len(shape) == 2:
        y, x = axes
        return (np.sin(2 * x) * np.cos(3 * y)).ravel()
    z, y, x = axes
    return (np.sin(2 * x) * np.cos(3 * y) + np.sin(2.5 * z)).ravel()


GRADIENT_MESHES = {"holed-8x8x5": lambda: holed_block((8, 8, 5)),
                   "holed-9x10x6": lambda: holed_block((9, 10, 6)),
                   "delaunay-300": lambda: delaunay(300, 3, seed=2)[1]}


# -- cubical grids -------------------------------------------------------------------------------
# (shape (nx, ny[, nz]), kind): thin boxes put one or two planes on a rank at 3-4 ranks
CUBICAL_CASES = {"2d-9x7-noise": ((9, 7), "noise"), "2d-12x10-ties": ((12, 10), "ties"),
                 "2d-6x13-smooth": ((6, 13), "smooth"),
                 "3d-6x5x7-noise": ((6, 5, 7), "noise"), "3d-7x6x5-ties": ((7, 6, 5), "ties"),
                 "3d-9x8x10-noise": ((9, 8, 10), "noise"),
                 "3d-8x7x9-smooth": ((8, 7, 9), "smooth"),
                 "3d-5x5x4-ties": ((5, 5, 4), "ties")}


def cubical_field(shape, kind, seed=0) -> np.ndarray:
    """A field in numpy image order (shape[::-1]); 'ties' has few distinct values."""
    rng = np.random.default_rng(seed + sum(shape))
    grids = np.meshgrid(*[np.arange(n) / n for n in shape[::-1]], indexing="ij")
    smooth = np.sin(6.1 * grids[-1]) * np.cos(5.3 * grids[-2]) + 0.3 * grids[0]
    if kind == "smooth":
        return smooth
    if kind == "noise":
        return smooth + 2 * rng.random(smooth.shape)
    return np.round(3 * (smooth + rng.random(smooth.shape)))


def image_axes(shape):
    """The axes of a field in numpy image order."""
    return "yx" if len(shape) == 2 else "zyx"


# -- the fields of bench_persistence.py's references ---------------------------------------------
# (nx, ny, nz): a cube, and a box with odd sides that differ, so that an axis mix-up shows
BENCH_SHAPES = {"16x16x16": (16, 16, 16), "13x11x7": (13, 11, 7)}
BENCH_CASES = [(s, k, "%s-%s" % (name, k))
               for name, s in BENCH_SHAPES.items() for k in ("smooth", "noisy", "ties")]


def bench_field(shape, kind: str) -> np.ndarray:
    """Vertex values in vertex-id order (x fastest), as bench_persistence's fields;
    'ties' rounds the noisy one to a few levels, so that most values are shared."""
    nx, ny, nz = shape
    z, y, x = np.meshgrid(np.arange(nz) / nz, np.arange(ny) / ny, np.arange(nx) / nx,
                          indexing="ij")
    f = np.sin(6.1 * x) * np.cos(5.3 * y) * np.sin(4.7 * z + 1) + 0.01 * np.cos(37 * (x + y + z))
    if kind in ("noisy", "ties"):
        f = f + 0.5 * np.random.default_rng(7).random(f.shape)
    if kind == "ties":
        f = np.round(4 * f) / 4
    return np.ascontiguousarray(f.ravel())


def finite_nonzero(pairs) -> np.ndarray:
    """(birth, death) rows with a finite death above the birth, sorted."""
    p = np.asarray(pairs, dtype=np.float64).reshape(-1, 2)
    p = p[np.isfinite(p[:, 1]) & (p[:, 1] > p[:, 0])]
    return p[np.lexsort((p[:, 1], p[:, 0]))]


# -- out-of-core grids ---------------------------------------------------------------------------
def virtual_slabs(shape, v):
    """``v`` slabs per rank, ``"planes"`` for one-plane slabs (the last rank's
    may hold more), and 1 where the ranks' slabs are too thin for ``v``."""
    if v == "planes":
        v = shape[-1] // COMM.size
    return v if shape[-1] // COMM.size >= v else 1


def raw_field(tmp_path, shape, seed, ties):
    """Rank 0 writes a random float32 field (integer values if ``ties``) to
    a raw file in rank 0's ``tmp_path``; every rank returns the
    :class:`RawField` and the values as float64. Collective."""
    rng = np.random.default_rng(seed)
    f = rng.integers(0, 5, size=shape[::-1]) if ties else rng.random(shape[::-1])
    path = os.path.join(str(COMM.bcast(str(tmp_path) if COMM.rank == 0 else None)),
                        "f%d.raw" % seed)
    if COMM.rank == 0:
        f.astype(np.float32).tofile(path)
    COMM.Barrier()
    return RawField(path, shape), f.astype(np.float32).astype(np.float64)


def trees_equal(a, b):
    """Whether two gathered merge trees have the same nodes and arcs."""
    return all(np.array_equal(x, y) for x, y in ((a.node_ids, b.node_ids),
                                                 (a.node_values, b.node_values),
                                                 (a.node_types, b.node_types), (a.arcs, b.arcs)))


# -- the complex of the signal-processing tests --------------------------------------------------
def surface_with_open_triangles(nx=7, ny=6, opened=(3, 17, 30, 44)):
    """A triangulated rectangle with some triangles left open (their edges
    kept): beta = (1, len(opened), 0), and the open triangles are the only
    3-cliques that are not triangles (the candidates of infer_triangles)."""
    tris = grid_cells((nx, ny))
    keep = np.array([t for i, t in enumerate(tris) if i not in opened])
    edges = np.array([e for i in opened for e in itertools.combinations(tris[i], 2)])
    return keep, edges, tris[list(opened)]


def open_surface(partition, **kw):
    """The complex of :func:`surface_with_open_triangles` under ``partition``,
    and its open triangles."""
    tris, edges, opened = surface_with_open_triangles(**kw)
    cx = SimplicialComplex([tris[COMM.rank::COMM.size], edges[COMM.rank::COMM.size]], COMM,
                           partition=partition)
    return cx, opened


def flow_of(cx, seed):
    """A random flow on the edges of ``cx``, by global edge id."""
    return np.random.default_rng(seed).standard_normal(cx.simplex_layout(1).global_size)


def rel(a, b):
    """The relative error ``||a - b|| / ||b||``."""
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b)) / np.linalg.norm(b))


# -- progress reports ----------------------------------------------------------------------------
class Recorder:
    """A progress callback that keeps every ``(task, message, seconds)``."""

    def __init__(self):
        self.calls = []

    def __call__(self, task, message, seconds):
        self.calls.append((task, message, seconds))


def phases(rec):
    """The phase named by each message a :class:`Recorder` received."""
    return [m.split(":")[0].split(" of ")[0] for _, m, _ in rec.calls]


# -- what a complex holds ------------------------------------------------------------------------
def global_rows(cx, k):
    """Local k-simplices of ``cx`` written with global vertex ids, and their global ids."""
    rows, _ = cx.local_simplices(k)
    gv = cx.global_ids(0)[np.searchsorted(cx.ghosted_ids(), rows)]
    return np.sort(gv, axis=1), cx.global_ids(k)


def arrays_of(obj, name=""):
    """(name, array) of every numpy array among an object's attributes
    (through dicts, lists and tuples)."""
    if isinstance(obj, np.ndarray):
        yield name, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from arrays_of(v, "%s[%r]" % (name, k))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from arrays_of(v, "%s[%d]" % (name, i))


def uneven_rows(n):
    """This rank's rows of n points numbered in rank order, in uneven blocks
    (rank 0 gets none beyond one rank, the last rank the most), so that the
    given rows are not the block layout's."""
    w = np.arange(COMM.size, dtype=np.int64) + (1 if COMM.size == 1 else 0)
    cuts = np.concatenate(([0], np.cumsum(w) * n // w.sum()))
    return int(cuts[COMM.rank]), int(cuts[COMM.rank + 1])


def my_share(rows):
    """This rank's share of a list of simplices (any split gives the same complex)."""
    return rows[COMM.rank::COMM.size]


def mixed_complex():
    """Two triangles, a dangling edge, a tetrahedron and an isolated vertex 12."""
    tris = np.array([[0, 1, 2], [1, 2, 3]])
    edges = np.array([[3, 4]])
    tets = np.array([[5, 8, 6, 7]])
    other = np.array([[9, 10], [10, 11]])
    return [tris, edges, tets, other, np.array([[12]])], 13


def octahedron(shift=0, apex=0):
    """The eight triangles of an octahedron (a sphere), its vertices shifted
    by ``shift`` but for vertex 0, which becomes ``apex``."""
    o = np.array([[0, 1, 2], [0, 2, 3], [0, 3, 4], [0, 4, 1],
                  [5, 1, 2], [5, 2, 3], [5, 3, 4], [5, 4, 1]])
    return np.where(o == 0, apex, o + shift)


#: Grid shapes, 2D and 3D, thin ones included
GRID_SHAPES = {"2d-7x9": (7, 9), "2d-2x3": (2, 3), "3d-5x6x7": (5, 6, 7), "3d-3x4x2": (3, 4, 2)}


def random_field(shape, seed, levels=4):
    """Integer-valued random field: many ties, so the id tie-break matters."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, levels, size=int(np.prod(shape))).astype(np.float64)


def write_delaunay_mesh(path, n, seed):
    """Rank 0 writes the Delaunay triangulation of ``n`` random points to
    ``path``; every rank returns the points and triangles. Collective."""
    pts = np.random.default_rng(seed).random((n, 2))
    tris = Delaunay(pts).simplices
    on_rank0(COMM, meshio.write, path,
             meshio.Mesh(np.column_stack((pts, 0 * pts[:, 0])), [("triangle", tris)]))
    return pts, tris


def assert_same_diagram(dg, ref, dim):
    """The gathered diagram ``dg`` has the finite pairs and essential classes
    of ``ref`` (a :func:`gudhi_ref.diagram`) in dimensions 0..``dim``. Collective."""
    dg = dg.gather()
    for d in range(dim + 1):
        fin, ess = ref[d]
        assert_allclose_collective(dg.finite(d), fin, COMM, err_msg="D%d" % d)
        assert_allclose_collective(dg.essential(d), ess, COMM, err_msg="D%d essential" % d)
