"""SimplicialComplex: its faces, global ids and ghost layer against serial
references under every partition, the translations between layout indices
and global ids without arrays of global size, and every analysis on an empty
complex and on ranks that own no vertex."""

import numpy as np
import pytest
from mpi4py import MPI

import gudhi_ref
import topology
from bad_inputs import check_bad_input
from dmsolve import DistVector
from mpitest import (Checks, assert_collective, assert_equal_collective,
                     assert_raises_collective)
from topology import (Grid, SimplicialComplex, betti_numbers, boundary_matrix,
                      connected_components, critical_points, discrete_gradient,
                      hodge_decomposition, hodge_laplacian, merge_tree, persistence_diagram)
from topology_cases import arrays_of, assert_same_diagram, delaunay, global_rows, my_share
from topology_reference import faces, grid_cells, reference_critical

COMM = MPI.COMM_WORLD
SELF = MPI.COMM_SELF


@pytest.mark.parametrize("dim", [2, 3], ids=["triangles", "tetrahedra"])
def test_faces_and_global_ids_match_serial(dim):
    """Every k-simplex, its global id and the closed star of every owned
    vertex are those of the serial face lists."""
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


@pytest.mark.parametrize("sort", ["packed", "rows"])
@pytest.mark.parametrize("partition", ["metis", "multilevel", "rcb", "hilbert"])
@pytest.mark.parametrize("dim", [2, 3], ids=["triangles", "tetrahedra"])
def test_partitions_keep_global_ids_and_ghost_layers(monkeypatch, dim, partition, sort):
    """Under a renumbering partition the simplices keep their global ids (found by one
    sort per dimension, of the simplices packed into int64 words or of their rows),
    each is owned once, owned vertices are the partitioner's parts, stars
    are whole, and fields are read by global id."""
    if sort == "rows":
        monkeypatch.setattr("topology.domains._complex.PACKED_ID_BITS", 0)
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
    for name, a in arrays_of(vars(cx)):
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


def test_every_entry_point_on_an_empty_complex():
    """An empty complex has empty answers in every analysis, and persistence
    refuses it on every rank."""
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
    """A complex with fewer vertices than ranks gives the answers of the same
    complex on one rank in every analysis."""
    # one triangle fan with 3 + 2 vertices: at 4 ranks some rank owns one or none,
    # and a single triangle (3 vertices) leaves the fourth rank without any
    for tris in (np.array([[0, 1, 2]]), np.array([[0, 1, 2], [0, 2, 3], [0, 3, 4]])):
        n = int(tris.max()) + 1
        f = np.array([0.3, 0.1, 0.7, 0.2, 0.9])[:n]
        cx = SimplicialComplex([my_share(tris)], COMM)
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
        assert_same_diagram(persistence_diagram(cx, f),
                            gudhi_ref.diagram(gudhi_ref.complex_simplices(ref), f), 2)


def test_simplices_refuses_a_negative_dimension():
    """``simplices(-1)`` is refused on every rank."""
    g = Grid((4, 5), COMM)
    assert_raises_collective(COMM, ValueError, lambda: g.to_complex().simplices(-1),
                             match="k must be an integer >= 0")


# -- bad input: the same exception on every rank -------------------------------------------

BAD_INPUTS = [
    ("complex-nan-points", ValueError, "finite",
     lambda e: topology.SimplicialComplex(np.array([[0, 1, 2]]), e.comm,
                                          points=np.full((3, 2), np.nan))),
    ("complex-degenerate-simplex-on-rank-0", ValueError, "degenerate",
     lambda e: topology.SimplicialComplex(np.array([[0, 0, 1]]) if e.rank == 0
                                          else np.zeros((0, 3), dtype=int), e.comm)),
    ("complex-unknown-partition", ValueError, "partition",
     lambda e: topology.SimplicialComplex(np.array([[0, 1, 2]]), e.comm, partition="nope")),
    ("complex-dimension-four", ValueError, "at most 3",
     lambda e: topology.SimplicialComplex(np.array([[0, 1, 2, 3, 4]]), e.comm)),
    ("complex-vertex-id-beyond-points", ValueError, "out of range",
     lambda e: topology.SimplicialComplex(np.array([[0, 1, 2]]), e.comm, points=np.zeros((2, 2)))),
    ("complex-partition-not-a-string", TypeError, "partition",
     lambda e: topology.SimplicialComplex(np.array([[0, 1, 2]]), e.comm, partition=None)),
]


@pytest.mark.parametrize("exc, match, call", [c[1:] for c in BAD_INPUTS],
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_the_same_exception_on_every_rank(bad_input_env, request, exc, match,
                                                           call):
    """Each case of BAD_INPUTS raises the same exception type, with a message
    that matches, on every rank (or works, at one rank, where a COMM_SELF
    operand is valid)."""
    check_bad_input(bad_input_env, request, exc, match, call)
