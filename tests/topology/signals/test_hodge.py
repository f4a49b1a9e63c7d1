"""Boundary matrices, Hodge Laplacians (on threads too, to the bits of scipy's
products), the Hodge decomposition of flows
(coherently oriented or not) and Betti numbers, against serial constructions
from sorted simplex lists and gudhi, under every partition, with no matrix
gathered on rank 0."""

import itertools
import sys

import gudhi
import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

import gudhi_ref
import topology
import topology.signals._hodge as hodge_module
from dmsolve import spgemm, threads
from bad_inputs import check_bad_input
from mpitest import (ROOT, assert_allclose_collective, assert_collective,
                     assert_equal_collective, assert_raises_collective)
from topology import (Grid, SimplicialComplex, betti_numbers, boundary_matrix,
                      hodge_decomposition, hodge_laplacian)
from topology.signals import coherent_orientation_signs
from topology_cases import tet_cavity, torus, tri_holes
from topology_reference import faces, grid_cells

COMM = MPI.COMM_WORLD
P, ME = COMM.size, COMM.rank


def serial_boundary(cells, k):
    hi, lo = faces(cells, k), faces(cells, k - 1)
    index = {tuple(r): i for i, r in enumerate(lo)}
    B = sp.lil_matrix((len(lo), len(hi)))
    for j, s in enumerate(hi):
        for i in range(k + 1):
            B[index[tuple(np.delete(s, i))], j] = (-1) ** i
    return B.tocsr()


def holey_surface(nx=9, ny=8, holes=((2, 2), (5, 4))):
    """A triangulated rectangle with square holes: beta = (1, len(holes), 0)."""
    tris = grid_cells((nx, ny))
    # removing the triangles around one interior vertex opens a hole
    centres = {hx + 1 + (hy + 1) * nx for hx, hy in holes}
    keep = np.array([t for t in tris if not centres & set(t)])
    used, keep = np.unique(keep, return_inverse=True)   # no isolated vertices
    return keep.reshape(-1, 3), used.size


def shell():
    """The boundary of a tetrahedron (a sphere) plus a solid tetrahedron."""
    sphere = np.array([[0, 1, 2], [0, 1, 3], [0, 2, 3], [1, 2, 3]])
    solid = np.array([[4, 5, 6, 7]])
    return [sphere, solid], 8


COMPLEXES = {
    "holey-surface": lambda: ([holey_surface()[0]], holey_surface()[1]),
    "grid-3d": lambda: ([grid_cells((3, 4, 3))], 36),
    "sphere+ball": shell,
}


def build(name):
    parts, n = COMPLEXES[name]()
    cx = SimplicialComplex([p[COMM.rank::COMM.size] for p in parts], COMM)
    cells = [tuple(r) for p in parts for r in p]
    return cx, cells, n


@pytest.mark.parametrize("name", list(COMPLEXES))
def test_boundary_matrices_and_laplacians_equal_serial(name):
    """B_k, B_k B_k+1 = 0 and the up, down and whole Laplacians are the
    serial ones."""
    cx, cells, n = build(name)
    for k in range(1, cx.dimension + 1):
        B = boundary_matrix(cx, k).to_scipy()
        ref = serial_boundary(cells, k)
        assert_allclose_collective(B.toarray(), ref.toarray(), atol=0)
    for k in range(1, cx.dimension):
        prod = boundary_matrix(cx, k).to_scipy() @ boundary_matrix(cx, k + 1).to_scipy()
        assert_collective(COMM, abs(prod).sum() == 0, "B_k B_k+1 != 0")
    for k in range(cx.dimension + 1):
        down = serial_boundary(cells, k) if k else None
        up = serial_boundary(cells, k + 1) if k < cx.dimension else None
        ref_up = (up @ up.T).toarray() if up is not None else 0
        ref_down = (down.T @ down).toarray() if down is not None else 0
        got_up = hodge_laplacian(cx, k, "up").to_scipy().toarray()
        got_down = hodge_laplacian(cx, k, "down").to_scipy().toarray()
        got = hodge_laplacian(cx, k).to_scipy().toarray()
        assert_allclose_collective(got_up, ref_up + 0 * got, atol=0)
        assert_allclose_collective(got_down, ref_down + 0 * got, atol=0)
        assert_allclose_collective(got, got_up + got_down, atol=0)


def test_betti_numbers():
    """Betti numbers of a holed surface, a box, a sphere beside a ball and a torus."""
    expected = {"holey-surface": [1, 2, 0], "grid-3d": [1, 0, 0, 0], "sphere+ball": [2, 0, 1, 0]}
    for name, beta in expected.items():
        cx, _, _ = build(name)
        assert_equal_collective(betti_numbers(cx), beta)
    # a torus: the 4x4 periodic grid split along one diagonal, beta = (1, 2, 1)
    v = lambda i, j: (i % 4) + 4 * (j % 4)
    torus = np.array([t for i in range(4) for j in range(4) for t in
                      ([v(i, j), v(i + 1, j), v(i, j + 1)],
                       [v(i + 1, j), v(i + 1, j + 1), v(i, j + 1)])])
    cx = SimplicialComplex([torus[COMM.rank::COMM.size]], COMM)
    assert_equal_collective(betti_numbers(cx), [1, 2, 1])


@pytest.mark.parametrize("pc", ["amg", "jacobi"])
def test_hodge_decomposition_on_surface_with_holes(pc):
    """The three parts are orthogonal and sum to the flow, the harmonic part
    is in the kernel of L1 and spans beta_1 dimensions, and a gradient flow
    is its own gradient part."""
    cx, cells, n = build("holey-surface")
    m = cx.simplex_layout(1).global_size
    f = np.random.default_rng(4).standard_normal(m)
    hd = hodge_decomposition(cx, f, rtol=1e-12, pc=pc)
    g, c, h = hd.gradient.gather(), hd.curl.gather(), hd.harmonic.gather()
    nf2 = float(f @ f)
    for a, b in ((g, c), (g, h), (c, h)):
        assert_collective(COMM, abs(a @ b) <= 1e-8 * nf2, "parts not orthogonal: %g" % (a @ b))
    e = hd.energies
    assert_allclose_collective(e["gradient"] + e["curl"] + e["harmonic"], nf2, rtol=1e-8)
    assert_allclose_collective(e["total"], nf2, rtol=1e-13)
    assert_allclose_collective(g + c + h, f, rtol=0, atol=1e-12 * np.sqrt(nf2))
    L1 = hodge_laplacian(cx, 1)
    Lh = L1.matvec(hd.harmonic).gather()
    assert_collective(COMM, np.linalg.norm(Lh) <= 1e-7 * np.sqrt(nf2), "L1 h not ~0")
    # the harmonic space has dimension beta_1: project random flows
    B1 = serial_boundary(cells, 1).toarray()
    B2 = serial_boundary(cells, 2).toarray()
    L1s = B1.T @ B1 + B2 @ B2.T
    assert_collective(COMM, int(np.sum(np.linalg.eigvalsh(L1s) < 1e-9)) == betti_numbers(cx)[1])
    H = []
    for seed in range(4):
        fs = np.random.default_rng(100 + seed).standard_normal(m)
        H.append(hodge_decomposition(cx, fs, rtol=1e-12, pc=pc).harmonic.gather())
    s = np.linalg.svd(np.array(H), compute_uv=False)
    assert_collective(COMM, int(np.sum(s > 1e-6 * s[0])) == 2, "harmonic dimension %s" % s)
    # a pure gradient flow has no curl or harmonic part
    pot = np.random.default_rng(9).standard_normal(n)
    hd = hodge_decomposition(cx, B1.T @ pot, rtol=1e-12, pc=pc)
    assert_allclose_collective(hd.gradient.gather(), B1.T @ pot, rtol=0, atol=1e-8)


# -- the curl system in coherently oriented form ------------------------------------------------
def mobius(n=8):
    """A Moebius strip: n squares in a band, the last glued back with a twist."""
    top = lambda i: i % n if (i // n) % 2 == 0 else n + i % n     # noqa: E731
    bot = lambda i: n + i % n if (i // n) % 2 == 0 else i % n     # noqa: E731
    tris = []
    for i in range(n):
        a, b, c, d = bot(i), bot(i + 1), top(i), top(i + 1)
        tris += [[a, b, c], [b, c, d]]
    return np.sort(np.array(tris), axis=1)


def grid_surface(m):
    return grid_cells((m, m))


def gathered_signs(cx):
    """Signs by global triangle id; fails unless owner and ghost copies agree."""
    sign = coherent_orientation_signs(cx)
    pairs = COMM.allgather((cx.global_ids(2), sign))
    out = np.zeros(cx.simplex_layout(2).global_size)
    for g, s in pairs:
        assert_collective(COMM, np.all((out[g] == 0) | (out[g] == s)), "copies disagree")
        out[g] = s
    return out


@pytest.mark.parametrize("name", ["holey-surface", "torus", "grid"])
def test_coherent_orientation_gives_an_m_matrix(name):
    """Coherent orientation signs agree between copies, make the curl
    system's couplings negative, and are those of one rank."""
    cells = {"holey-surface": lambda: holey_surface()[0], "grid": lambda: grid_surface(9),
             "torus": lambda: torus_cells()}[name]()
    cx = SimplicialComplex([cells[COMM.rank::COMM.size]], COMM)
    s = gathered_signs(cx)
    assert_collective(COMM, np.all(np.abs(s) == 1), "not +-1")
    B2 = serial_boundary([tuple(r) for r in cells], 2)
    A = (sp.diags(s) @ (B2.T @ B2) @ sp.diags(s)).tocoo()
    off = A.data[A.row != A.col]
    assert_collective(COMM, off.size > 0 and np.all(off < 0), "coupling of wrong sign")
    # the same signs on one rank: +1 on the smallest triangle of each piece
    one = SimplicialComplex([cells], MPI.COMM_SELF)
    assert_equal_collective(coherent_orientation_signs(one), s)


def test_orientation_on_a_moebius_strip_still_decomposes():
    """On a non-orientable strip the signs still agree between copies and the
    decomposition is the one without orientation."""
    cells = mobius()
    cx = SimplicialComplex([cells[COMM.rank::COMM.size]], COMM)
    gathered_signs(cx)       # consistent copies even with no coherent orientation
    m = cx.simplex_layout(1).global_size
    f = np.random.default_rng(3).standard_normal(m)
    a = hodge_decomposition(cx, f, rtol=1e-12)
    b = hodge_decomposition(cx, f, rtol=1e-12, orient=False)
    for part in ("gradient", "curl", "harmonic"):
        assert_allclose_collective(getattr(a, part).gather(), getattr(b, part).gather(),
                                   rtol=0, atol=1e-9 * np.sqrt(f @ f))
    assert_equal_collective(betti_numbers(cx), [1, 1, 0])   # GF(2): one 1-cycle, no 2-cycle


def test_orientation_cuts_curl_iterations():
    """Orienting the curl system cuts its AMG iterations at least 2.5 times,
    with the same curl part and a vector potential for the unscaled system."""
    # 40 x 40 grid: 11 AMG iterations oriented, 35-47 not (1-4 ranks); the
    # gap widens with the size (14 against 449 on the 1000 x 1000 benchmark)
    cells = grid_surface(40)
    cx = SimplicialComplex([cells[COMM.rank::COMM.size]], COMM)
    m = cx.simplex_layout(1).global_size
    f = np.random.default_rng(8).standard_normal(m)
    a = hodge_decomposition(cx, f, rtol=1e-10)
    b = hodge_decomposition(cx, f, rtol=1e-10, orient=False)
    ia, ib = a.infos["curl"].iterations, b.infos["curl"].iterations
    assert_collective(COMM, ia <= 15 and 2.5 * ia <= ib, "curl iterations %d vs %d" % (ia, ib))
    assert_collective(COMM, a.infos["gradient"].iterations <= 20, "gradient iterations")
    assert_allclose_collective(a.curl.gather(), b.curl.gather(), rtol=0,
                               atol=1e-8 * np.sqrt(f @ f))
    # w = S w': the vector potential solves the unscaled system
    B2 = boundary_matrix(cx, 2)
    assert_allclose_collective(B2.matvec(a.vector_potential).gather(), a.curl.gather(),
                               rtol=0, atol=1e-12 * np.sqrt(f @ f))


def torus_cells():
    v = lambda i, j: (i % 4) + 4 * (j % 4)     # noqa: E731
    return np.array([sorted(t) for i in range(4) for j in range(4) for t in
                     ([v(i, j), v(i + 1, j), v(i, j + 1)],
                      [v(i + 1, j), v(i + 1, j + 1), v(i, j + 1)])])


# -- partitions: the same decomposition, matrices in global order ----------------------------
@pytest.mark.parametrize("partition", ["metis", "rcb"])
def test_hodge_does_not_depend_on_the_partition(partition):
    """Under METIS and RCB the Betti numbers, the boundary matrices in global
    order and the decomposition are those of the block partition."""
    nx, ny = 9, 8
    cells, n = holey_surface(nx, ny)
    used = np.unique(np.array([t for t in grid_cells((nx, ny))
                               if not {3 + 3 * nx, 6 + 5 * nx} & set(t)]))
    pts = np.column_stack((used % nx, used // nx)).astype(float)
    share = [cells[COMM.rank::COMM.size]]
    cx = SimplicialComplex(share, COMM, points=pts, partition=partition)
    ref = SimplicialComplex(share, COMM, points=pts)
    assert_equal_collective(betti_numbers(cx), [1, 2, 0])
    tri = [tuple(r) for r in cells]
    for k in (1, 2):
        B = boundary_matrix(cx, k).to_scipy().toarray()
        rows = np.concatenate(COMM.allgather(cx.owned_global_ids(k - 1)))
        cols = np.concatenate(COMM.allgather(cx.owned_global_ids(k)))
        glob = np.zeros_like(B)
        glob[np.ix_(rows, cols)] = B
        assert_allclose_collective(glob, serial_boundary(tri, k).toarray(), atol=0)
    f = np.random.default_rng(5).standard_normal(cx.simplex_layout(1).global_size)
    a = hodge_decomposition(cx, f, rtol=1e-12)
    b = hodge_decomposition(ref, f, rtol=1e-12)
    for key in ("gradient", "curl", "harmonic", "total"):
        assert_allclose_collective(a.energies[key], b.energies[key], rtol=1e-9, atol=1e-12)
    for part in ("gradient", "curl", "harmonic"):
        assert_allclose_collective(cx.gather_global(getattr(a, part), 1),
                                   getattr(b, part).gather(), rtol=0, atol=1e-9)
    assert_allclose_collective(cx.gather_global(a.potential) - cx.gather_global(a.potential)[0],
                               b.potential.gather() - b.potential.gather()[0], rtol=0, atol=1e-8)


def test_default_tolerance_meets_the_accuracy_targets():
    """At the default tolerance the parts are orthogonal to 1e-8 relative,
    the energies sum to ||f||^2 and L1 h ~ 0."""
    cells, _ = holey_surface(30, 24, ((5, 5), (15, 10), (22, 17)))
    cx = SimplicialComplex([cells[COMM.rank::COMM.size]], COMM)
    f = np.random.default_rng(11).standard_normal(cx.simplex_layout(1).global_size)
    hd = hodge_decomposition(cx, f)
    nf2 = float(f @ f)
    g, c, h = hd.gradient, hd.curl, hd.harmonic
    for a, b in ((g, c), (g, h), (c, h)):
        assert_collective(COMM, abs(a.dot(b)) <= 1e-8 * nf2, "not orthogonal: %g" % a.dot(b))
    e = hd.energies
    assert_allclose_collective(e["gradient"] + e["curl"] + e["harmonic"], nf2, rtol=1e-8)
    Lh = hodge_laplacian(cx, 1).matvec(h).norm()
    assert_collective(COMM, Lh <= 1e-7 * np.sqrt(nf2), "L1 h = %g" % Lh)
    ref = hodge_decomposition(cx, f, rtol=1e-13)
    assert_allclose_collective(h.gather(), ref.harmonic.gather(), rtol=0,
                               atol=1e-6 * np.sqrt(nf2))


@pytest.mark.parametrize("limit", [10, 2])
def test_component_nullspace_sums_component_sizes_across_ranks(limit):
    """Three triangulated squares side by side but not touching, and isolated
    vertices: one indicator per component with an edge (three), each the
    serial component's vertices; none when more than ``limit``."""
    from scipy.sparse.csgraph import connected_components as cc
    from topology import connected_components
    from topology.signals._hodge import _component_nullspace
    cells = []
    for b in range(3):
        cells.append(grid_cells((4, 3)) + 12 * b)
    cells = np.concatenate(cells)
    n = 40                                     # vertices 36..39 isolated
    pts = np.column_stack((np.arange(n), np.zeros(n))).astype(float)
    cx = SimplicialComplex([cells[COMM.rank::COMM.size]], COMM, points=pts)
    ns = _component_nullspace(cx, connected_components(cx), limit)
    E = faces(cells, 1)
    G = sp.coo_matrix((np.ones(len(E)), (E[:, 0], E[:, 1])), shape=(n, n))
    _, lab = cc(G, directed=False)
    want = [np.flatnonzero(lab == c) for c in range(lab.max() + 1) if np.sum(lab == c) >= 2]
    got = [np.flatnonzero(cx.gather_global(v)) for v in ns]
    if limit >= 3:
        ok = len(got) == 3 and sorted(map(tuple, got)) == sorted(map(tuple, want))
    else:
        ok = got == []
    assert_collective(COMM, ok, "component indicators %s vs %s" % (got, want))


def test_hodge_on_a_grid_refers_to_to_complex():
    """Hodge theory of a grid is refused with a pointer to grid.to_complex(),
    and to_complex refuses an unknown partition, on every rank."""
    g = Grid((5, 4), COMM)
    assert_raises_collective(COMM, TypeError, hodge_decomposition, g, np.ones(10),
                             match="SimplicialComplex.*grid.to_complex\\(\\)")
    assert_raises_collective(COMM, ValueError, g.to_complex, partition="rcb",
                             match="unknown partition")


# -- Betti numbers --------------------------------------------------------------------------
def sphere_surface(n=4):
    """The boundary triangles of a tetrahedralised cube: a sphere, beta = (1, 0, 1)."""
    tets = gudhi_ref.grid_top_cells((n, n, n))
    tris = gudhi_ref.faces(tets, 2)
    allt = np.concatenate([tets[:, list(c)] for c in itertools.combinations(range(4), 3)])
    u, cnt = np.unique(allt, axis=0, return_counts=True)
    boundary = u[cnt == 1]
    assert set(map(tuple, boundary)) <= set(map(tuple, tris))
    _, inv = np.unique(boundary, return_inverse=True)
    return inv.reshape(boundary.shape).astype(np.int64)


def annulus(nx=10, ny=4):
    """A strip closed in x: beta = (1, 1, 0)."""
    cells = []
    for y in range(ny - 1):
        for x in range(nx):
            a, b = x + y * nx, (x + 1) % nx + y * nx
            c, d = a + nx, b + nx
            cells += [[a, b, c], [b, c, d]]
    return np.sort(np.array(cells, dtype=np.int64), axis=1)


BETTI = {"torus": (lambda: torus(9, 7), [1, 2, 1]),
         "sphere": (sphere_surface, [1, 0, 1]),
         "annulus": (annulus, [1, 1, 0]),
         "tet-cavity": (lambda: tet_cavity(7), [1, 1, 1, 0]),
         "tri-holes": (tri_holes, [1, 2, 0])}


def gudhi_betti(tops):
    st = gudhi.SimplexTree()
    for t in tops:
        st.insert([int(v) for v in t])
    st.compute_persistence(homology_coeff_field=2, persistence_dim_max=True)
    b = st.betti_numbers()
    return b + [0] * (tops.shape[1] - len(b))


@pytest.mark.parametrize("partition", ["block", "metis"])
@pytest.mark.parametrize("name", list(BETTI))
def test_betti_numbers_equal_gudhi(name, partition, monkeypatch):
    """Betti numbers of surfaces and solids under block and METIS partitions
    are gudhi's, computed without gathering a boundary matrix."""
    make, known = BETTI[name]
    tops = make()
    assert_equal_collective(gudhi_betti(tops), known, err_msg="gudhi")
    cx = SimplicialComplex([tops[ME::P]], COMM, partition=partition)

    def gathered(*a, **k):
        raise AssertionError("betti_numbers gathered a matrix")
    # betti_numbers must not gather B_k with to_scipy(root=0)
    from dmsolve import DistCSR
    monkeypatch.setattr(DistCSR, "to_scipy", gathered)
    assert_equal_collective(betti_numbers(cx), known)


def test_betti_rank0_receives_its_share():
    """Bytes received by each rank during betti_numbers (bench/_counting.py):
    rank 0 receives no more than the busiest other rank plus a fixed slack."""
    sys.path.insert(0, str(ROOT / "bench"))
    from _counting import TALLY, CountingComm
    # not freed: dmsolve keeps inner communicators keyed by this one
    comm = CountingComm(COMM.Dup())
    tops = gudhi_ref.grid_top_cells((6, 6, 4 * P))
    cx = SimplicialComplex([tops[ME::P]], comm)
    nbytes = 8 * 3 * gudhi_ref.faces(tops, 2).shape[0]     # B_2 as int64 rows
    TALLY.reset()
    b = betti_numbers(cx)
    recv = COMM.allgather(TALLY.bytes_recv)
    assert_equal_collective(b, [1, 0, 0, 0])
    others = max(recv[1:]) if P > 1 else 0
    assert_collective(COMM, recv[0] <= others + 64 * 1024,
                      "rank 0 received %d bytes, the others at most %d" % (recv[0], others))
    if P > 1:
        # what gathering B_2 alone would have brought to rank 0
        assert_collective(COMM, recv[0] < nbytes * (P - 1) / P, "%d >= %d" % (recv[0], nbytes))


# -- bad input: the same exception on every rank -------------------------------------------

BAD_INPUTS = [
    ("hodge-laplacian-of-a-grid", TypeError, "SimplicialComplex",
     lambda e: topology.hodge_laplacian(e.grid, 0)),
    ("hodge-laplacian-unknown-part", ValueError, "part",
     lambda e: topology.hodge_laplacian(topology.SimplicialComplex(np.array([[0, 1, 2]]), e.comm),
                                        0, "sideways")),
    ("hodge-decomposition-rtol-nan", ValueError, "rtol",
     lambda e: topology.hodge_decomposition(
         topology.SimplicialComplex(np.array([[0, 1, 2]]), e.comm), np.ones(3), rtol=np.nan)),
    ("hodge-decomposition-orient-not-a-bool", TypeError, "orient",
     lambda e: topology.hodge_decomposition(
         topology.SimplicialComplex(np.array([[0, 1, 2]]), e.comm), np.ones(3), orient="yes")),
]


@pytest.mark.parametrize("exc, match, call", [c[1:] for c in BAD_INPUTS],
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_the_same_exception_on_every_rank(bad_input_env, request, exc, match,
                                                           call):
    """Each case of BAD_INPUTS raises the same exception type, with a message
    that matches, on every rank (or works, at one rank, where a COMM_SELF
    operand is valid)."""
    check_bad_input(bad_input_env, request, exc, match, call)


def _local_arrays(L):
    return [L.diag.indptr, L.diag.indices, L.diag.data, L.offd.indptr, L.offd.indices,
            L.offd.data, L.ghosts]


@pytest.mark.parametrize("name", ["holey-surface", "grid-3d"])
def test_laplacians_are_the_same_at_any_thread_count(monkeypatch, name):
    """The Laplacians assembled on 1 and 2 threads (blocks of a few entries,
    so that the products split) have the arrays of those assembled with
    scipy's products, to the bit, on every rank."""
    cx, _, _ = build(name)
    monkeypatch.setattr(spgemm, "MIN_BLOCK_ENTRIES", 4)
    got = {}
    for k_threads in (1, 2):
        with threads.using(k_threads):
            got[k_threads] = [_local_arrays(hodge_laplacian(cx, k, part))
                              for k in range(cx.dimension + 1) for part in ("up", "down", "full")]
    monkeypatch.setattr(hodge_module, "matmat", lambda A, B, sort=True: sp.csr_matrix(A @ B))
    monkeypatch.setattr(hodge_module, "transpose", lambda A: A.T.tocsr())
    ref = [_local_arrays(hodge_laplacian(cx, k, part))
           for k in range(cx.dimension + 1) for part in ("up", "down", "full")]

    def same(xs, ys):
        return all(len(x) == len(y) and all(
            a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))
            for a, b in zip(x, y)) for x, y in zip(xs, ys))

    assert_collective(COMM, same(got[1], ref) and same(got[2], ref),
                      "%s: threaded Laplacians differ from scipy's" % name)
