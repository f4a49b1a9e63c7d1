"""The problem gallery equals serial scipy/pyamg references at any rank count;
its size estimates count what it builds, its near-null-space builders give
pyamg's rigid-body modes, and bad arguments are refused on every rank."""

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI
from pyamg.gallery import diffusion_stencil_2d, poisson, stencil_grid

from bad_inputs import check_bad_input
import dmsolve
from dmsolve import gallery
from mpitest import (Checks, assert_allclose_collective, assert_collective, assert_equal_collective,
                     assert_raises_collective, same_on_all_ranks)

COMM = MPI.COMM_WORLD


def canonical(M):
    M = sp.csr_matrix(M)
    M.sum_duplicates()
    M.sort_indices()
    return M


def assert_same_sparse(A, B):
    """Same shape, pattern and values, bit for bit (no explicit zeros allowed)."""
    A, B = canonical(A), canonical(B)
    assert_collective(COMM, A.shape == B.shape, "shapes %s != %s" % (A.shape, B.shape))
    assert_equal_collective(A.indptr, B.indptr, err_msg="indptr")
    assert_equal_collective(A.indices, B.indices, err_msg="indices")
    assert_equal_collective(A.data, B.data, err_msg="values")


def serial(fn, *args, **kw):
    """The same matrix built on one rank (the rank-count independence reference)."""
    return fn(*args, comm=MPI.COMM_SELF, **kw).to_scipy()


# -- stencil problems against pyamg (which numbers the last axis fastest) -----------

POISSON_CASES = [
    pytest.param(lambda: gallery.poisson1d(7, COMM), lambda: poisson((7,)), id="poisson1d-7"),
    pytest.param(lambda: gallery.poisson1d(1, COMM), lambda: poisson((1,)), id="poisson1d-1"),
    pytest.param(lambda: gallery.poisson2d(7, COMM), lambda: poisson((7, 7)), id="poisson2d-7"),
    pytest.param(lambda: gallery.poisson2d(13, COMM, ny=5), lambda: poisson((5, 13)),
                 id="poisson2d-13x5"),
    pytest.param(lambda: gallery.poisson3d(5, COMM), lambda: poisson((5, 5, 5)),
                 id="poisson3d-5"),
    pytest.param(lambda: gallery.poisson3d(4, COMM, ny=3, nz=7), lambda: poisson((7, 3, 4)),
                 id="poisson3d-4x3x7"),
]


@pytest.mark.parametrize("build, reference", POISSON_CASES)
def test_poisson_matches_pyamg(build, reference):
    """The Poisson matrices equal pyamg's, bit for bit."""
    assert_same_sparse(build().to_scipy(), reference())


@pytest.mark.parametrize("epsilon, theta", [(1e-3, 0.0), (0.1, np.pi / 6), (1.0, 0.3),
                                            (1e-2, -2.0)],
                         ids=["eps1e-3-theta0", "eps0.1-pi6", "iso-0.3", "eps1e-2-neg"])
def test_anisotropic_matches_pyamg_fd_stencil(epsilon, theta):
    """anisotropic_diffusion equals pyamg's finite-difference stencil."""
    S = diffusion_stencil_2d(epsilon=epsilon, theta=theta, type="FD")
    # pyamg's stencil is indexed [x, y]; its grid numbers the last axis fastest
    ref = stencil_grid(S.T, (5, 7), format="csr")
    A = gallery.anisotropic_diffusion(7, COMM, epsilon=epsilon, theta=theta, ny=5)
    assert_same_sparse(A.to_scipy(), ref)
    square = stencil_grid(S.T, (13, 13), format="csr")
    assert_same_sparse(gallery.anisotropic_diffusion(13, COMM, epsilon, theta).to_scipy(),
                       square)


def test_anisotropic_theta0_is_weighted_poisson():
    """anisotropic_diffusion at theta = 0 is a weighted Poisson matrix."""
    A = gallery.anisotropic_diffusion(7, COMM, epsilon=0.25).to_scipy()
    Tx = poisson((7,))
    I = sp.identity(7)
    ref = sp.kron(I, Tx) + 0.25 * sp.kron(Tx, I)  # x fastest: Tx acts within a row
    assert_same_sparse(A, ref)


def _upwind_reference(n, dim, wind, nu):
    h = 1.0 / (n + 1)
    T = poisson((n,))
    I = sp.identity(n, format="csr")
    ops = []
    for d in range(dim):
        w = wind[d]
        # backward difference for w > 0, forward for w < 0, times h*|w|
        D = (sp.diags([1.0, -1.0], [0, -1], shape=(n, n)) if w > 0 else
             sp.diags([1.0, -1.0], [0, 1], shape=(n, n))) * (h * abs(w))
        one = nu * T + D
        factors = [I] * dim
        factors[d] = one
        M = factors[dim - 1]
        for f in reversed(factors[:dim - 1]):
            M = sp.kron(M, f, format="csr")
        ops.append(M)
    return ops


@pytest.mark.parametrize("dim, n, wind", [(2, 7, (1.0, 0.5)), (2, 13, (-1.0, 2.0)),
                                          (3, 5, (1.0, 0.5, 0.25))],
                         ids=["2d-7", "2d-13-negwind", "3d-5"])
def test_convection_diffusion_is_upwind(dim, n, wind):
    """convection_diffusion is the upwind discretisation of its reference."""
    nu = 0.05
    A = gallery.convection_diffusion(n, COMM, dim=dim, wind=wind, diffusion=nu).to_scipy()
    ref = sp.csr_matrix(sum(_upwind_reference(n, dim, wind, nu)))
    ref.eliminate_zeros()  # kron stores the zeros of its blocks
    # the sum of Kronecker terms adds the diagonal in another order: compare
    # pattern exactly and values to rounding
    A, ref = canonical(A), canonical(ref)
    assert_equal_collective(A.indices, ref.indices)
    assert_equal_collective(A.indptr, ref.indptr)
    np_ok = np.allclose(A.data, ref.data, rtol=1e-14, atol=0)
    assert_collective(COMM, np_ok, "values differ from the Kronecker reference")
    assert_collective(COMM, abs(A - A.T).max() > 0, "convection-diffusion should be nonsymmetric")
    # M-matrix sign pattern and weak row diagonal dominance
    off = A - sp.diags(A.diagonal())
    assert_collective(COMM, off.data.max() < 0 and A.diagonal().min() > 0)
    assert_collective(COMM, np.all(np.asarray(A.sum(axis=1)).ravel() >= -1e-15))


def test_shifted_laplacian_signs_and_values():
    """shifted_laplacian has the signs and values of its formula."""
    s, alpha = 0.2, (0.01, -0.01, 0.0)
    n = 5
    A = gallery.shifted_laplacian(n, COMM, shift=s, alpha=alpha).to_scipy().tocsr()
    i = 2 + 2 * n + 2 * n * n  # interior point (2, 2, 2)
    row = A[[i], :].toarray().ravel()
    expect = np.zeros(n ** 3)
    expect[i] = 6.0 - s
    for d, stride in enumerate((1, n, n * n)):
        expect[i + stride] = -1.0 + alpha[d]
        expect[i - stride] = -1.0 - alpha[d]
    assert_equal_collective(row, expect)
    # with alpha = 0 it is the 3D Poisson matrix shifted
    A0 = gallery.shifted_laplacian(n, COMM, shift=s, alpha=(0, 0, 0)).to_scipy()
    assert_same_sparse(A0, canonical(poisson((n, n, n)) - s * sp.identity(n ** 3)))


def test_shifted_laplacian_indefinite_for_positive_shift():
    """shifted_laplacian is indefinite for a shift past the smallest eigenvalue."""
    # smallest eigenvalue of the unshifted operator: 6 (1 - cos(pi / (n + 1))) = 1.15
    n = 4
    A = gallery.shifted_laplacian(n, COMM, shift=2.0, alpha=(0, 0, 0)).to_scipy()
    ev = np.linalg.eigvalsh(A.toarray())
    assert_collective(COMM, ev.min() < 0 < ev.max(), "expected an indefinite matrix")


def test_random_spd_rank_count_independent_and_spd():
    """random_spd is the same at any rank count, and SPD."""
    for n in (1, 13, 40):
        A = gallery.random_spd(n, COMM, density=0.2, seed=3).to_scipy()
        assert_same_sparse(A, serial(gallery.random_spd, n, density=0.2, seed=3))
        assert_collective(COMM, same_on_all_ranks(COMM, canonical(A).data))
        assert_collective(COMM, abs(A - A.T).max() == 0 if A.nnz else True, "not symmetric")
        ev = np.linalg.eigvalsh(A.toarray())
        assert_collective(COMM, ev.min() >= 1.0 - 1e-12, "smallest eigenvalue %g" % ev.min())
    other = gallery.random_spd(40, COMM, density=0.2, seed=4).to_scipy()
    assert_collective(COMM, abs(other - A).max() > 0, "seed has no effect")


def test_graph_laplacian_from_distributed_edges():
    """graph_laplacian from edges spread over the ranks is scipy's Laplacian."""
    n = 13
    rng = np.random.default_rng(5)
    edges = rng.integers(0, n, size=(40, 2))
    weights = rng.integers(1, 4, size=40).astype(float)
    mine = np.arange(40) % COMM.size == COMM.rank  # each edge given by one rank
    L = gallery.graph_laplacian(edges[mine], n, COMM, weights=weights[mine]).to_scipy()
    keep = edges[:, 0] != edges[:, 1]
    e, w = edges[keep], weights[keep]
    W = sp.coo_matrix((np.r_[w, w], (np.r_[e[:, 0], e[:, 1]], np.r_[e[:, 1], e[:, 0]])),
                      shape=(n, n)).tocsr()
    ref = sp.diags(np.asarray(W.sum(axis=1)).ravel()) - W
    assert_same_sparse(L, canonical(ref))
    assert_equal_collective(np.asarray(L.sum(axis=1)).ravel(), np.zeros(n))


def test_graph_laplacian_edge_given_twice_by_different_ranks():
    """An edge given twice by different ranks counts once."""
    edges = np.array([[0, 1]]) if COMM.rank in (0, COMM.size - 1) else np.zeros((0, 2), int)
    L = gallery.graph_laplacian(edges, 3, COMM).to_scipy().toarray()
    k = 2.0 if COMM.size > 1 else 1.0
    assert_equal_collective(L, np.array([[k, -k, 0], [-k, k, 0], [0, 0, 0]]))


@pytest.mark.parametrize("name", sorted(gallery.PROBLEMS))
def test_registry_rank_count_independent(name):
    """Every registered problem is the same at any rank count."""
    n = {"poisson1d": 13, "random_spd": 13}.get(name, 5)
    A = gallery.PROBLEMS[name](n, COMM).to_scipy()
    B = gallery.PROBLEMS[name](n, MPI.COMM_SELF).to_scipy()
    assert_same_sparse(A, B)
    assert_collective(COMM, A.shape[0] > 0 and A.nnz > 0)


def test_rows_are_built_locally_in_blocks():
    """A gallery matrix is in block rows: each rank holds the rows of its block_range."""
    A = gallery.poisson2d(7, COMM)
    from dmsolve import block_range
    start, stop = block_range(49, COMM.size, COMM.rank)
    assert_collective(COMM, A.row_layout.owned_range == (start, stop))
    assert_collective(COMM, A.local_rows().shape == (stop - start, 49))


@pytest.mark.parametrize("kind", ["ones", "random"])
def test_rhs_rank_count_independent(kind):
    """rhs() gives the same vector at any rank count."""
    A = gallery.poisson1d(13, COMM)
    b = gallery.rhs(A, kind=kind, seed=2).gather()
    ref = gallery.rhs(gallery.poisson1d(13, MPI.COMM_SELF), kind=kind, seed=2).local
    assert_equal_collective(b, ref)
    assert_collective(COMM, b.min() >= -1 and b.max() <= 1)
    if kind == "random":
        assert_collective(COMM, np.unique(b).size == 13)


BAD = [
    pytest.param(ValueError, gallery.poisson1d, (-3,), {}, id="negative-n"),
    pytest.param(ValueError, gallery.poisson2d, (0,), {}, id="zero-n"),
    pytest.param(TypeError, gallery.poisson3d, (2.5,), {}, id="float-n"),
    pytest.param(ValueError, gallery.poisson3d, (3,), {"nz": -1}, id="negative-nz"),
    pytest.param(ValueError, gallery.anisotropic_diffusion, (4,), {"epsilon": np.nan},
                 id="nan-epsilon"),
    pytest.param(ValueError, gallery.convection_diffusion, (4,), {"dim": 4}, id="dim4"),
    pytest.param(ValueError, gallery.convection_diffusion, (4,), {"wind": (1.0,)},
                 id="short-wind"),
    pytest.param(ValueError, gallery.convection_diffusion, (4,), {"diffusion": 0.0},
                 id="zero-diffusion"),
    pytest.param(ValueError, gallery.shifted_laplacian, (4,), {"alpha": (0.1, 0.2)},
                 id="short-alpha"),
    pytest.param(ValueError, gallery.random_spd, (10,), {"density": 1.5}, id="density"),
    pytest.param(ValueError, gallery.random_spd, (10,), {"seed": -1}, id="seed"),
]


@pytest.mark.parametrize("exc, fn, args, kwargs", BAD)
def test_bad_arguments_raise_on_every_rank(exc, fn, args, kwargs):
    """Each bad argument raises on every rank."""
    assert_raises_collective(COMM, exc, fn, *args, COMM, **kwargs)


def test_bad_n_on_one_rank_only_raises_everywhere():
    """A bad n on one rank raises on every rank."""
    n = -1 if COMM.rank == COMM.size - 1 else 5
    assert_raises_collective(COMM, ValueError, gallery.poisson2d, n, COMM)


def test_bad_edges_on_one_rank_raise_everywhere():
    """Bad edges on one rank raise on every rank."""
    bad = COMM.rank == COMM.size - 1
    edges = np.array([[0, 9]]) if bad else np.array([[0, 1]])
    assert_raises_collective(COMM, ValueError, gallery.graph_laplacian, edges, 5, COMM,
                             match="edges")
    shaped = np.zeros((2, 3), int) if bad else np.zeros((1, 2), int)
    assert_raises_collective(COMM, ValueError, gallery.graph_laplacian, shaped, 5, COMM)
    w = np.ones(2) if bad else np.ones(1)
    assert_raises_collective(COMM, ValueError, gallery.graph_laplacian,
                             np.array([[0, 1]]), 5, COMM, weights=w)


def test_bad_rhs_kind():
    """An unknown rhs kind is refused."""
    A = gallery.poisson1d(5, COMM)
    assert_raises_collective(COMM, ValueError, gallery.rhs, A, kind="zeros")


# -- sizes before building -------------------------------------------------------------

SIZE_CASES = [("poisson1d", 13, {}), ("poisson2d", 7, {}), ("poisson2d", 7, {"ny": 3}),
              ("poisson3d", 4, {"ny": 3, "nz": 5}), ("anisotropic2d", 6, {}),
              ("anisotropic2d", 6, {"theta": 0.4}), ("convdiff2d", 7, {}),
              ("convdiff3d", 4, {"wind": (0.0, 1.0, 0.0)}), ("shifted3d", 4, {}),
              ("shifted3d", 3, {"alpha": (0.0, 0.0, 0.0), "ny": 2}),
              ("random-spd", 101, {}), ("random-spd", 60, {"density": 0.3, "seed": 4})]


@pytest.mark.parametrize("name, n, opts", SIZE_CASES,
                         ids=["%s-%d-%s" % (c[0], c[1], "-".join(c[2]) or "defaults")
                              for c in SIZE_CASES])
def test_problem_size_counts_what_is_built(comm, name, n, opts):
    """problem_size counts the rows and nonzeros (or a tight bound on them) each
    problem builds, and the build memory; an option the problem lacks is refused."""
    size = gallery.problem_size(name, n, **opts)
    A = gallery.PROBLEMS[name](n, comm, **opts)
    nnz = A.global_nnz()
    with Checks(comm) as checks:
        checks.add(size.rows == A.shape[0], "rows", (size.rows, A.shape[0]))
        if size.exact:
            checks.add(size.nnz == nnz, "nonzeros exactly", (size.nnz, nnz))
        else:       # a bound, and not a loose one
            checks.add(nnz <= size.nnz <= 1.2 * nnz, "nonzeros bounded", (size.nnz, nnz))
        checks.add(size.build_bytes(comm.size) >= size.nnz / comm.size * 8,
                   "build memory at least the values", size.build_bytes(comm.size))
    assert_raises_collective(comm, TypeError, gallery.problem_size, name, n, nosuch=1,
                             match="its options")


# -- bad input: the same exception on every rank -------------------------------------------

BAD_INPUTS = [
    ("gallery-size-float", TypeError, "positive integer", lambda e: gallery.poisson2d(3.5, e.comm)),
    ("gallery-epsilon-nan", ValueError, "epsilon",
     lambda e: gallery.anisotropic_diffusion(4, e.comm, epsilon=float("nan"))),
    ("gallery-comm-none", TypeError, "MPI.Comm", lambda e: gallery.poisson2d(4, None)),
    ("gallery-size-zero", ValueError, "positive", lambda e: gallery.poisson2d(0, e.comm)),
    ("gallery-rhs-unknown-kind", ValueError, "kind", lambda e: gallery.rhs(e.A, "zeros")),
    ("gallery-rhs-negative-seed", ValueError, "seed",
     lambda e: gallery.rhs(e.A, "random", seed=-1)),
    ("gallery-rhs-of-a-numpy-array", TypeError, "row_layout", lambda e: gallery.rhs(np.eye(3))),
]


@pytest.mark.parametrize("exc, match, call", [c[1:] for c in BAD_INPUTS],
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_the_same_exception_on_every_rank(bad_input_env, request, exc, match,
                                                           call):
    """Each case of BAD_INPUTS raises the same exception type, with a message
    that matches, on every rank (or works, at one rank, where a COMM_SELF
    operand is valid)."""
    check_bad_input(bad_input_env, request, exc, match, call)


# -- near null spaces: block constants and rigid-body modes ------------------------

def _elasticity_nodes(N):
    """pyamg's ``linear_elasticity((N, N))``: the matrix, its rigid-body modes
    and the coordinates of its (interior) nodes, in its node order."""
    from pyamg.gallery import linear_elasticity
    A, B = linear_elasticity((N, N), format="csr")
    X = N + 1
    grid = np.mgrid[0:X + 1, 0:X + 1]
    pts = np.column_stack((grid[0].T.ravel(), grid[1].T.ravel())).astype(float)
    inside = np.zeros((X + 1, X + 1), bool)
    inside[1:-1, 1:-1] = True
    return sp.csr_matrix(A), B, pts[inside.ravel()]


def test_rigid_body_modes_are_pyamgs_for_elasticity():
    """The 2-D modes from the coordinates are pyamg's rigid-body modes of its
    elasticity problem, at any rank count (a rank may hold half a node)."""
    A, B, xy = _elasticity_nodes(7)
    layout = dmsolve.Layout.block(A.shape[0], COMM)
    modes = gallery.rigid_body_modes(xy + 10.0, layout)     # moved: the centroid is taken off
    got = np.column_stack([m.gather() for m in modes])
    assert_allclose_collective(got, B, COMM, atol=1e-12)


def test_rigid_body_modes_in_3d_are_the_translations_and_rotations():
    """In 3-D: the three translations and the rotations w x (p - c) about the
    three axes, each node's three unknowns together; in 1-D the constants."""
    rng = np.random.default_rng(3)
    p = rng.random((7, 3))
    layout = dmsolve.Layout.block(21, COMM)
    got = np.column_stack([m.gather() for m in gallery.rigid_body_modes(p, layout)])
    c = p - p.mean(axis=0)
    want = [np.tile(np.eye(3)[j], 7) for j in range(3)]
    want += [np.cross(w, c).ravel() for w in (np.eye(3)[2], np.eye(3)[0], np.eye(3)[1])]
    assert_allclose_collective(got, np.column_stack(want), COMM, atol=1e-14)
    one = gallery.rigid_body_modes(np.arange(5.0), dmsolve.Layout.block(5, COMM))
    assert_allclose_collective(np.column_stack([m.gather() for m in one]), np.ones((5, 1)), COMM)


def test_block_constants_mark_each_component():
    """``block_constants(layout, k)`` is 1 on component j's rows of vector j."""
    layout = dmsolve.Layout.block(12, COMM)
    got = np.column_stack([v.gather() for v in gallery.block_constants(layout, 3)])
    assert_allclose_collective(got, np.kron(np.ones((4, 1)), np.eye(3)), COMM)


@pytest.mark.parametrize("coordinates, rows, match", [
    (np.zeros((5, 2)), 9, "5 nodes in 2-D have 10 unknowns"),
    (np.zeros((3, 4)), 12, "d = 1, 2 or 3"),
    (np.array([[0.0, np.inf]]), 2, "finite"),
], ids=["rows", "dimension", "infinite"])
def test_rigid_body_modes_bad_coordinates(coordinates, rows, match):
    """Coordinates that do not fit the rows are refused on every rank."""
    layout = dmsolve.Layout.block(rows, COMM)
    assert_raises_collective(COMM, ValueError, gallery.rigid_body_modes, coordinates, layout,
                             match=match)
    assert_raises_collective(COMM, TypeError, gallery.rigid_body_modes,
                             np.array([["a", "b"]]), dmsolve.Layout.block(2, COMM),
                             match="real numbers")


@pytest.mark.parametrize("rows, block_size, match", [
    (7, 2, "does not divide the 7 rows"), (6, 0, "positive")], ids=["divides", "zero"])
def test_block_constants_bad_block_size(rows, block_size, match):
    """A block size that does not divide the rows is refused on every rank."""
    assert_raises_collective(COMM, ValueError, gallery.block_constants,
                             dmsolve.Layout.block(rows, COMM), block_size, match=match)
