"""SimplicialComplex (faces, global ids, ghost layer, input errors), critical
points on non-grid meshes and connected components, against serial references."""

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI
from scipy.sparse.csgraph import connected_components as cc
from scipy.spatial import Delaunay

from dmsolve import DistVector, Registry
from mpitest import assert_collective, assert_equal_collective, assert_raises_collective
from test_topology_ref import faces, grid_cells, reference_critical
from topology import (PARTITIONS, Domain, Grid, SimplicialComplex, connected_components,
                      critical_points, global_order)

COMM = MPI.COMM_WORLD


def delaunay(n, dim, seed):
    rng = np.random.default_rng(seed)
    pts = rng.random((n, dim))
    return pts, Delaunay(pts).simplices.astype(np.int64)


def my_share(cells):
    return cells[COMM.rank::COMM.size]


def mixed_complex():
    """Two triangles, a dangling edge, a tetrahedron and an isolated vertex 12."""
    tris = np.array([[0, 1, 2], [1, 2, 3]])
    edges = np.array([[3, 4]])
    tets = np.array([[5, 8, 6, 7]])
    other = np.array([[9, 10], [10, 11]])
    return [tris, edges, tets, other, np.array([[12]])], 13


def reference_components(n, edges, keep=None):
    keep = np.ones(n, bool) if keep is None else keep
    e = edges[keep[edges[:, 0]] & keep[edges[:, 1]]]
    g = sp.coo_matrix((np.ones(len(e)), (e[:, 0], e[:, 1])), shape=(n, n))
    _, lab = cc(g, directed=False)
    first = np.full(lab.max() + 1, n)
    np.minimum.at(first, lab, np.arange(n))
    return np.where(keep, first[lab], -1)


@pytest.mark.parametrize("dim", [2, 3], ids=["triangles", "tetrahedra"])
def test_faces_and_global_ids_match_serial(dim):
    pts, cells = delaunay(40, dim, seed=dim)
    cx = SimplicialComplex([my_share(cells)], COMM, points=pts)
    assert cx.dimension == dim
    for k in range(dim + 1):
        ref = faces(cells, k) if k else np.arange(40).reshape(-1, 1)
        assert_equal_collective(cx.simplices(k), ref)
        assert_collective(COMM, cx.simplex_layout(k).global_size == len(ref))
        rows, gids = cx.local_simplices(k)
        assert_equal_collective(ref[gids], rows)
    # the closed star of every owned vertex is here
    tops, _ = cx.local_simplices(dim)
    owned = cx.vertex_layout.is_local(cells).any(axis=1)
    have = {tuple(r) for r in tops}
    assert_collective(COMM, all(tuple(sorted(c)) in have for c in cells[owned]), "star")


def test_union_of_overlapping_inputs_and_mixed_dimensions():
    parts, n = mixed_complex()
    # every rank passes everything: the union is the same complex
    a = SimplicialComplex(parts, COMM)
    b = SimplicialComplex([p[COMM.rank::COMM.size] for p in parts] if COMM.size > 1 else parts,
                          COMM)
    assert a.num_vertices == n and a.dimension == 3
    for k in range(4):
        assert_equal_collective(a.simplices(k), b.simplices(k))
    ref1 = faces([tuple(r) for p in parts[:-1] for r in p], 1)
    assert_equal_collective(a.simplices(1), ref1)
    assert_equal_collective(a.simplices(3), [[5, 6, 7, 8]])


def test_bad_input_raises_on_every_rank():
    pts = np.random.default_rng(0).random((6, 2))
    good = np.array([[0, 1, 2]])
    mine = COMM.rank == COMM.size - 1    # the error sits on one rank only
    cases = [
        ([np.array([[0, 1, 7]])], pts, "out of range"),
        ([np.array([[0, -1, 2]])], None, "out of range"),
        ([np.array([[0, 1, 1]])], None, "degenerate"),
        ([np.array([[0, 1, 2], [2, 1, 0]])], None, "more than once"),
        ([np.array([[0, 1, 2, 3, 4]])], None, "dimension 4"),
        ([np.array([[0.5, 1, 2]])], None, "integer"),
    ]
    for simplices, p, match in cases:
        assert_raises_collective(COMM, (ValueError, TypeError), SimplicialComplex,
                                 simplices if mine else [good], COMM, points=p, match=match)
    bad = pts.copy()
    bad[3, 1] = np.inf
    assert_raises_collective(COMM, ValueError, SimplicialComplex, [good], COMM,
                             points=bad if mine else pts, match="finite")
    cx = SimplicialComplex([good], COMM, points=pts)
    vals = np.zeros(6)
    vals[5] = np.nan
    assert_raises_collective(COMM, ValueError, critical_points, cx, vals, match="finite")


@pytest.mark.parametrize("dim,levels", [(2, 3), (2, 1000), (3, 3), (3, 1000)],
                         ids=["tri-ties", "tri-distinct", "tet-ties", "tet-distinct"])
def test_critical_points_on_meshes_equal_bruteforce(dim, levels):
    n = 60 if dim == 2 else 35
    pts, cells = delaunay(n, dim, seed=10 + dim)
    fld = np.random.default_rng(levels).integers(0, levels, n).astype(float)
    cx = SimplicialComplex([my_share(cells)], COMM, points=pts)
    ids, types = critical_points(cx, fld).gather()
    rids, rtypes = reference_critical(cells, fld, n)
    assert_equal_collective(ids, rids)
    assert_equal_collective(types, rtypes)


def test_critical_points_complex_equals_grid():
    shape = (4, 5, 3)
    cells = grid_cells(shape)
    fld = np.random.default_rng(5).integers(0, 3, int(np.prod(shape))).astype(float)
    a = critical_points(Grid(shape, COMM), fld).gather()
    b = critical_points(SimplicialComplex([my_share(cells)], COMM), fld).gather()
    assert_equal_collective(a[0], b[0])
    assert_equal_collective(a[1], b[1])


def test_components_of_complex():
    parts, n = mixed_complex()
    cx = SimplicialComplex([p[COMM.rank::COMM.size] for p in parts], COMM)
    labels = connected_components(cx).gather()
    edges = faces([tuple(r) for p in parts[:-1] for r in p], 1)
    assert_equal_collective(labels, reference_components(n, edges))
    assert_equal_collective(labels[[0, 4, 5, 8, 9, 11, 12]], [0, 0, 5, 5, 9, 9, 12])


@pytest.mark.parametrize("shape", [(7, 9), (5, 6, 7)], ids=["2d", "3d"])
def test_level_set_components_on_grid(shape):
    g = Grid(shape, COMM)
    n = int(np.prod(shape))
    rng = np.random.default_rng(2)
    fld = rng.random(n)
    edges = faces(grid_cells(shape), 1)
    assert_equal_collective(connected_components(g).gather(), np.zeros(n, dtype=np.int64))
    for thr, sub in ((0.45, True), (0.6, False)):
        got = connected_components(g, fld, thr, sublevel=sub).gather()
        keep = fld <= thr if sub else fld >= thr
        assert_equal_collective(got, reference_components(n, edges, keep))


def test_level_set_components_snake_across_ranks():
    # a serpentine sublevel set that crosses the slab boundaries many times
    nx, ny = 5, 16
    fld = np.ones((ny, nx))
    fld[:, 0] = 0
    for y in range(0, ny, 2):
        fld[y, :] = 0
    fld[1::4, 0] = 1
    fld[3::4, -1] = 0
    fld = fld.ravel()
    edges = faces(grid_cells((nx, ny)), 1)
    got = connected_components(Grid((nx, ny), COMM), DistVector.from_global(
        fld, Grid((nx, ny), COMM).vertex_layout), 0.5).gather()
    assert_equal_collective(got, reference_components(nx * ny, edges, fld <= 0.5))
    assert_raises_collective(COMM, ValueError, connected_components, Grid((3, 3), COMM),
                             np.zeros(9))


def _comb(nx, ny):
    """A comb across the boundary of rows 0-5 (rank 0) and 6-11 (rank 1):
    teeth on the even columns of rows 3-9, joined in pairs by a bridge on row
    3 (columns 4k..4k+2) and, shifted by one tooth, on row 9 (4k+2..4k+4).
    With one ghost row, rank 0 sees the lower bridges only and rank 1 the
    upper ones: a chain of about nx/2 pieces going back and forth between
    two ranks."""
    fld = np.ones((ny, nx))
    fld[3:10, 0::2] = 0
    for x in range(0, nx - 2, 4):
        fld[3, x:x + 3] = 0
        fld[9, x + 2:x + 5] = 0
    return fld.ravel()


def test_components_of_a_comb_chaining_two_ranks_take_log_supersteps(monkeypatch):
    from dmsolve.bsp import Ledger
    nx, ny = 121, 6 * max(COMM.size, 2)
    # a chain of nx // 2 = 60 pieces at 2 ranks and more
    fld = _comb(nx, ny)
    steps = []
    record = Ledger.record_superstep
    monkeypatch.setattr(Ledger, "record_superstep",
                        lambda self, *a, **k: (steps.append(a[0]), record(self, *a, **k)))
    g = Grid((nx, ny), COMM)
    got = connected_components(g, fld, 0.5).gather()
    monkeypatch.undo()
    edges = faces(grid_cells((nx, ny)), 1)
    assert_equal_collective(got, reference_components(nx * ny, edges, fld <= 0.5))
    assert_collective(COMM, np.all(got[fld <= 0.5] == 3 * nx), "one component")
    # one superstep of links, then the union-find up and down the rank tree,
    # 2 ceil(log2 p) + 1 whatever the chain (min-label propagation took
    # about one per piece of the chain; hooking at most 4 log2(chain))
    bound = 1 + (2 * np.ceil(np.log2(COMM.size)) + 1 if COMM.size > 1 else 0)
    assert_collective(COMM, len(steps) <= bound and (COMM.size == 1) == (len(steps) == 0),
                      "%d supersteps, bound %.1f" % (len(steps), bound))
    if COMM.size > 1:
        assert_raises_collective(COMM, RuntimeError, connected_components, g, fld, 0.5,
                                 max_steps=2, match="within 2 supersteps")
        got = connected_components(g, fld, 0.5, max_steps=int(bound)).gather()
        assert_collective(COMM, np.all(got[fld <= 0.5] == 3 * nx), "within max_steps")


# -- partitions: METIS and coordinate bisection renumber internally, global ids stay ----------
def global_rows(cx, k):
    """Local k-simplices of ``cx`` written with global vertex ids, and their global ids."""
    rows, _ = cx.local_simplices(k)
    gv = cx.global_ids(0)[np.searchsorted(cx.ghosted_ids(), rows)]
    return np.sort(gv, axis=1), cx.global_ids(k)


@pytest.mark.parametrize("partition", ["metis", "multilevel", "rcb", "hilbert"])
@pytest.mark.parametrize("dim", [2, 3], ids=["triangles", "tetrahedra"])
def test_partitions_keep_global_ids_and_ghost_layers(dim, partition):
    n = 60 if dim == 2 else 35
    pts, cells = delaunay(n, dim, seed=20 + dim)
    cx = SimplicialComplex([my_share(cells)], COMM, points=pts, partition=partition)
    block = SimplicialComplex([my_share(cells)], COMM, points=pts)
    assert cx.partition == partition
    for k in range(dim + 1):
        ref = faces(cells, k) if k else np.arange(n).reshape(-1, 1)
        assert_equal_collective(cx.simplices(k), ref)
        assert_equal_collective(cx.simplex_layout(k).global_size, len(ref))
        rows, gids = global_rows(cx, k)
        assert_equal_collective(ref[gids], rows)
        # every simplex is owned exactly once; owned ids are what gather_global places
        owned = np.concatenate(COMM.allgather(cx.owned_global_ids(k)))
        assert_equal_collective(np.sort(owned), np.arange(len(ref)))
        lay = cx.simplex_layout(k)
        probe = DistVector(lay, cx.owned_global_ids(k).astype(np.float64))
        assert_equal_collective(cx.gather_global(probe, k), np.arange(len(ref), dtype=float))
    # owned vertices are the partitioner's parts, not id blocks (beyond one rank)
    mine = cx.owned_global_ids(0)
    assert_collective(COMM, mine.size == cx.vertex_layout.local_size)
    if COMM.size > 1:
        moved = COMM.allreduce(int(np.any(mine != np.arange(*block.vertex_layout.owned_range))
                                   if mine.size == block.vertex_layout.local_size else 1))
        assert_collective(COMM, moved > 0, "partition equals the id blocks")
    # the closed star of every owned vertex is here
    tops, _ = global_rows(cx, dim)
    have = {tuple(r) for r in tops}
    star = np.isin(cells, mine).any(axis=1)
    assert_collective(COMM, all(tuple(sorted(c)) in have for c in cells[star]), "star")
    # global arrays are read by global id, DistVectors by layout index
    fld = np.random.default_rng(1).random(n)
    v = cx.vertex_values(fld)
    assert_equal_collective(v.local, fld[mine])
    assert_equal_collective(cx.vertex_values(v).local, fld[mine])


def _arrays(obj, name=""):
    """(name, array) of every numpy array among an object's attributes
    (through dicts, lists and tuples)."""
    if isinstance(obj, np.ndarray):
        yield name, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _arrays(v, "%s[%r]" % (name, k))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _arrays(v, "%s[%d]" % (name, i))


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("partition", ["metis", "multilevel", "rcb", "hilbert"])
def test_renumbering_keeps_no_global_size_array(partition):
    """Under METIS or RCB no rank keeps a per-vertex (or per-simplex) array of
    global size: the translations are a directory of the owned vertices plus
    the held ones. Layout <-> global translation is local for held vertices,
    refused for others, and collective (``global_ids_of``) for replicated ones."""
    shape = (12, 3 * COMM.size)
    pts = np.stack(np.meshgrid(*[np.arange(m, dtype=float) for m in shape], indexing="ij"),
                   -1).transpose(1, 0, 2).reshape(-1, 2)
    cells = grid_cells(shape)
    n = pts.shape[0]
    cx = SimplicialComplex([my_share(cells)], COMM, points=pts, partition=partition)
    counts = cx.counts()
    big = []
    for name, a in _arrays(vars(cx)):
        if name in ("['points']",) or a.ndim == 0:
            continue
        k = 0
        for tag in ("_local", "_gids", "_global"):
            for kk in range(1, cx.dimension + 1):
                if name.startswith("['%s'][%d]" % (tag, kk)):
                    k = kk
        if a.shape[0] >= counts[k]:
            big.append("%s %s" % (name, a.shape))
    assert_collective(COMM, not big, "global-size arrays: %s" % big)
    held = cx.ghosted_ids()
    gids = cx.global_ids(0)
    assert_equal_collective(cx.layout_to_global(held), gids)
    assert_equal_collective(cx.global_to_layout(gids), held)
    missing = np.setdiff1d(np.arange(n), held)
    refused = True                      # a local call: only ranks missing some check it
    if missing.size:
        try:
            cx.layout_to_global(missing[:1])
            refused = False
        except ValueError as e:
            refused = "not held" in str(e)
    assert_collective(COMM, refused, "an index this rank does not hold was translated")
    everyone = np.arange(n)[::-1]
    owner_gid = np.concatenate(COMM.allgather(cx.owned_global_ids(0)))   # in layout order
    assert_equal_collective(cx.global_ids_of(everyone), owner_gid[everyone])


@pytest.mark.parametrize("partition", ["block", "metis", "multilevel", "rcb", "hilbert"])
def test_results_do_not_depend_on_the_partition(partition):
    pts, cells = delaunay(60, 2, seed=31)
    n = 60
    fld = np.random.default_rng(7).integers(0, 4, n).astype(float)    # ties
    cx = SimplicialComplex([my_share(cells)], COMM, points=pts, partition=partition)
    ids, types = critical_points(cx, fld).gather()
    rids, rtypes = reference_critical(cells, fld, n)
    assert_equal_collective(ids, rids)
    assert_equal_collective(types, rtypes)
    cp = critical_points(cx, DistVector(cx.vertex_layout, fld[cx.owned_global_ids(0)]))
    assert_equal_collective(cp.gather()[1], rtypes)
    edges = faces(cells, 1)
    for thr in (0.5, 2.5):
        got = cx.gather_global(connected_components(cx, fld, thr))
        assert_equal_collective(got, reference_components(n, edges, fld <= thr))
    lab = cx.gather_global(connected_components(cx))
    assert_equal_collective(lab, reference_components(n, edges))


def test_partition_errors_raise_on_every_rank():
    pts, cells = delaunay(20, 2, seed=3)
    for geometric in ("rcb", "hilbert"):
        assert_raises_collective(COMM, ValueError, SimplicialComplex, [my_share(cells)], COMM,
                                 partition=geometric, match="give points")
    assert_raises_collective(COMM, ValueError, SimplicialComplex, [my_share(cells)], COMM,
                             points=pts, partition="spectral", match="partition")


# -- the Domain protocol: a grid and the same triangulation given explicitly --------------
def _gathered(comm, owned_ids, local):
    """Rows of ``local`` (one per owned vertex) in global vertex id order, everywhere."""
    ids = np.concatenate(comm.allgather(np.asarray(owned_ids)))
    vals = np.concatenate(comm.allgather(np.asarray(local)))
    return vals[np.argsort(ids)]


@pytest.mark.parametrize("partition", ["block", "metis", "multilevel", "rcb", "hilbert"])
@pytest.mark.parametrize("shape", [(5, 4), (4, 3, 5)], ids=["2d", "3d"])
def test_grid_and_complex_answer_the_domain_protocol_alike(shape, partition):
    grid = Grid(shape, COMM)
    pts = grid.coordinates(np.arange(grid.global_num_vertices)).astype(float)
    cx = SimplicialComplex([my_share(grid_cells(shape))], COMM, points=pts, partition=partition)
    assert_collective(COMM, isinstance(grid, Domain) and isinstance(cx, Domain), "protocol")
    assert_collective(COMM, grid.stencil is not None and cx.stencil is None, "stencil")
    assert_collective(COMM, grid.is_ball and not cx.is_ball, "is_ball")
    assert_collective(COMM, cx.renumbered == (partition != "block") and not grid.renumbered,
                      "renumbered")
    # numbering: global ids and layout indices translate both ways
    for d in (grid, cx):
        ghost = d.global_ids(0)
        assert_equal_collective(d.layout_to_global(d.ghosted_ids()), ghost)
        assert_equal_collective(d.global_to_layout(ghost), d.ghosted_ids())
        assert_equal_collective(ghost[d.owned_positions()], d.owned_global_ids(0))
        assert_collective(COMM, d.local_num_vertices == d.vertex_layout.local_size, "local")
    # the same answers, vertex by vertex, in global id order
    fld = np.random.default_rng(7).integers(0, 5, grid.global_num_vertices).astype(float)
    per_vertex = []
    for d in (grid, cx):
        order = global_order(d.vertex_values(fld), ids=d.owned_global_ids(0))
        lower, upper, onb, lb, ub = d.link_components(d.ghosted(order.local))
        cols = [lower, upper, d.owned_boundary_vertices()]
        if len(shape) == 3:
            # the link flags matter (and a grid computes them) only for the
            # regular-looking boundary vertices that they may make saddles
            cand = onb & (lower == 1) & (upper == 1)
            cols += [onb, lb & cand, ub & cand]
        else:
            assert_collective(COMM, onb is None and lb is None and ub is None, "2D flags")
        per_vertex.append(_gathered(COMM, d.owned_global_ids(0),
                                    np.stack([np.asarray(c, np.int64) for c in cols], 1)))
    assert_equal_collective(per_vertex[0], per_vertex[1])
    some = np.arange(0, grid.global_num_vertices, 3)
    assert_equal_collective(grid.vertex_coordinates(some), cx.vertex_coordinates(some))
    assert_collective(COMM, grid.vertex_coordinates(some).shape == (some.size, 3), "3 columns")
    # the written mesh: same points, same cells (as sets of sorted rows)
    meshes = [d.mesh(root=0) for d in (grid, cx)]
    if COMM.rank == 0:
        (p0, k0, c0), (p1, k1, c1) = meshes
        same = (k0 == k1 and np.array_equal(p0, p1)
                and np.array_equal(faces(c0, len(shape)), faces(c1, len(shape))))
    else:
        same = meshes == [None, None]
    assert_collective(COMM, same, "mesh")


def test_partition_registry_names_and_errors():
    pts, cells = delaunay(20, 2, seed=3)
    assert_collective(COMM, isinstance(PARTITIONS, Registry)
                      and PARTITIONS.names() == ["block", "hilbert", "metis", "multilevel", "rcb"], "registry")
    # the registry's one rule for names: case and _/- do not matter
    cx = SimplicialComplex([my_share(cells)], COMM, points=pts, partition="RCB")
    assert_collective(COMM, cx.partition == "rcb", "canonical name")
    ref = SimplicialComplex([my_share(cells)], COMM, points=pts, partition="rcb")
    assert_equal_collective(cx.owned_global_ids(0), ref.owned_global_ids(0))
    assert_raises_collective(COMM, ValueError, SimplicialComplex, [my_share(cells)], COMM,
                             points=pts, partition="spectral",
                             match="unknown partition 'spectral'; available: block, hilbert, metis, multilevel, rcb")
    assert_raises_collective(COMM, TypeError, SimplicialComplex, [my_share(cells)], COMM,
                             points=pts, partition=3, match="partition")
