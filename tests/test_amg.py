"""Smoothed-aggregation AMG: each stage against a serial reference, and the
convergence targets of issue 4 at any rank count.

The cases whose ids end in ``-large`` (3D 64^3, 2D 512^2) are required by the
issue; they take the longest (select them with ``-k large``, skip them with
``-k "not large"`` when iterating locally).
"""

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

import dmsolve.gallery as gallery
import preconditioners
from dmsolve import DistCSR, DistVector, Layout
from dmsolve.krylov import cg
from mpitest import (assert_allclose_collective, assert_collective, assert_raises_collective,
                     on_rank0)
from preconditioners.amg.aggregate import standard_aggregation
from preconditioners.amg.coarse import coarse_layout
from preconditioners.amg.galerkin import galerkin_product
from preconditioners.amg.smooth import smooth_prolongator
from preconditioners.amg.strength import symmetric_strength
from preconditioners.amg.tentative import fit_candidates, tentative_prolongator

COMM = MPI.COMM_WORLD

# pyamg 5.4.1 SA + CG iterations to 1e-8 (docs REFERENCES.md)
PYAMG = {"poisson2d-256": 11, "poisson2d-512": 10, "poisson3d-32": 9, "poisson3d-64": 10}


def _problem(name, comm):
    kind, n = name.rsplit("-", 1)
    return getattr(gallery, kind)(int(n), comm)


def _amg_solve(A, **options):
    M = preconditioners.make("amg", A, **options)
    b = gallery.rhs(A, "random")
    x, info = cg(A, b, rtol=1e-8, M=M, maxiter=100)
    return M, info


def _serial_iterations(name, **options):
    """CG + amg iterations on COMM_SELF (computed on rank 0, broadcast)."""
    def serial():
        _, info = _amg_solve(_problem(name, MPI.COMM_SELF), **options)
        return info.iterations

    return on_rank0(COMM, serial)


# -- the stages against serial references -------------------------------------------------

def _hierarchy_pieces(A, theta=0.0, B=None):
    S = symmetric_strength(A, theta)
    agg, count = standard_aggregation(S)
    Bl = np.ones((A.row_layout.local_size, 1)) if B is None else B
    clay, first = coarse_layout(count * Bl.shape[1], COMM, 1)
    T, Bc = tentative_prolongator(A.row_layout, agg, count, Bl, clay, first)
    return S, agg, count, T, Bc


def test_aggregation_one_rank_matches_pyamg():
    import pyamg
    A = gallery.poisson2d(37, MPI.COMM_SELF)
    S = symmetric_strength(A, 0.0)
    agg, count = standard_aggregation(S)
    C = pyamg.strength.symmetric_strength_of_connection(A.to_scipy(), 0.0)
    AggOp, _ = pyamg.aggregation.standard_aggregation(C)
    assert count == AggOp.shape[1]
    ref = np.asarray(AggOp.tocsr().indices)
    # the same partition into aggregates, possibly numbered differently
    pairs = set(zip(agg.tolist(), ref.tolist()))
    assert len(pairs) == count


def test_aggregates_cover_and_stay_on_rank():
    A = gallery.poisson3d(9, COMM)
    S, agg, count, T, Bc = _hierarchy_pieces(A)
    ok = agg.size == 0 or (agg.min() >= 0 and np.array_equal(np.unique(agg), np.arange(count)))
    assert_collective(COMM, ok, "every node in exactly one local aggregate")
    # T's columns are this rank's coarse unknowns only
    assert_collective(COMM, T.offd.nnz == 0, "aggregates do not cross ranks")


def test_tentative_orthonormal_and_reproduces_candidates():
    A = gallery.poisson2d(21, COMM)
    n = A.row_layout.local_size
    x = np.arange(A.row_layout.start, A.row_layout.stop) % 21
    B = np.column_stack((np.ones(n), x.astype(float), np.sin(x)))   # 3 candidates
    S, agg, count, T, Bc = _hierarchy_pieces(A, B=B)
    Tg = T.to_scipy()
    Bg = np.vstack(COMM.allgather(B))
    Bcg = np.vstack(COMM.allgather(Bc))
    G = (Tg.T @ Tg).toarray()
    assert_allclose_collective(G, np.eye(G.shape[0]), atol=1e-12)
    assert_allclose_collective(Tg @ Bcg, Bg, rtol=1e-12, atol=1e-12)


def test_fit_candidates_constant_case():
    agg = np.array([0, 0, 1, 1, 1, -1])
    T, R = fit_candidates(agg, 2, np.ones((6, 1)))
    np.testing.assert_allclose(T.toarray(), [[2 ** -.5, 0], [2 ** -.5, 0], [0, 3 ** -.5],
                                             [0, 3 ** -.5], [0, 3 ** -.5], [0, 0]])
    np.testing.assert_allclose(R.ravel(), [2 ** .5, 3 ** .5])


@pytest.mark.parametrize("theta", [0.0, 0.3], ids=["theta0", "theta0.3"])
def test_smoothed_prolongator_equals_serial_formula(theta):
    A = gallery.anisotropic_diffusion(17, COMM, epsilon=0.1)
    S, agg, count, T, Bc = _hierarchy_pieces(A, theta=theta)
    P, rho = smooth_prolongator(A, T, omega=4.0 / 3.0, theta=theta)
    Ag, Tg = A.to_scipy().tocsr(), T.to_scipy()
    # serial: weak couplings lumped onto the diagonal, then one Jacobi step
    coo = Ag.tocoo()
    d = Ag.diagonal()
    weak = (coo.row != coo.col) & (np.abs(coo.data) < theta * np.sqrt(np.abs(d[coo.row] * d[coo.col])))
    F = sp.csr_matrix((np.where(weak, 0, coo.data), (coo.row, coo.col)), shape=Ag.shape)
    F = F + sp.diags(np.bincount(coo.row[weak], weights=coo.data[weak],
                                 minlength=d.size).astype(float))
    Df = F.diagonal()
    rho_true = np.abs(np.linalg.eigvals((sp.diags(1 / Df) @ F).toarray())).max()
    assert_collective(COMM, 0.9 * rho_true <= rho <= 1.0 + 1e-12 * rho_true + rho_true,
                      "rho %g vs %g" % (rho, rho_true))
    ref = Tg - (4.0 / 3.0 / rho) * (sp.diags(1 / Df) @ F @ Tg)
    assert_allclose_collective(P.to_scipy().toarray(), ref.toarray(), rtol=1e-12, atol=1e-14)


def test_galerkin_product_equals_scipy():
    A = gallery.poisson3d(8, COMM)
    S, agg, count, T, Bc = _hierarchy_pieces(A)
    P, _ = smooth_prolongator(A, T)
    Ac = galerkin_product(A, P)
    Ag, Pg = A.to_scipy(), P.to_scipy()
    assert_allclose_collective(Ac.to_scipy().toarray(), (Pg.T @ Ag @ Pg).toarray(),
                               rtol=1e-12, atol=1e-13)
    assert_collective(COMM, Ac.row_layout == P.col_layout)


def test_galerkin_with_gathered_coarse_layout():
    # coarse unknowns moved onto fewer ranks than made them
    A = gallery.poisson2d(15, COMM)
    S = symmetric_strength(A, 0.0)
    agg, count = standard_aggregation(S)
    clay, first = coarse_layout(count, COMM, 10 ** 6)
    assert_collective(COMM, int(np.count_nonzero(clay.local_sizes)) == 1)
    T, _ = tentative_prolongator(A.row_layout, agg, count, np.ones((agg.size, 1)), clay, first)
    P, _ = smooth_prolongator(A, T)
    Ac = galerkin_product(A, P)
    Ag, Pg = A.to_scipy(), P.to_scipy()
    assert_allclose_collective(Ac.to_scipy().toarray(), (Pg.T @ Ag @ Pg).toarray(),
                               rtol=1e-12, atol=1e-13)


def test_cycle_is_symmetric_and_describe():
    A = gallery.poisson2d(40, COMM)
    M = preconditioners.make("amg", A, max_coarse=20)
    d = M.describe()
    assert d["name"] == "amg" and len(d["levels"]) >= 3
    assert d["levels"][0]["rows"] == 1600 and d["levels"][0]["nnz"] == A.global_nnz()
    assert 1.0 < d["operator_complexity"] < 1.5 and d["setup_seconds"] > 0
    u, v = gallery.rhs(A, "random", seed=1), gallery.rhs(A, "random", seed=2)
    # symmetric V-cycle: <u, M v> == <M u, v>
    assert_allclose_collective(u.dot(M(v)), M(u).dot(v), rtol=1e-10)
    assert_collective(COMM, u.dot(M(u)) > 0, "positive definite")


@pytest.mark.parametrize("smoother", [("jacobi", {}), ("l1-jacobi", {}),
                                      ("chebyshev", {"degree": 3}),
                                      ("gauss-seidel", {"sweep": "symmetric"}),
                                      ("sor", {"omega": 1.2})],
                         ids=["jacobi", "l1-jacobi", "chebyshev", "hybrid-gs", "sor"])
@pytest.mark.parametrize("cycle", ["V", "W"])
def test_smoothers_and_cycles_converge(smoother, cycle):
    A = gallery.poisson2d(64, COMM)
    _, info = _amg_solve(A, presmoother=smoother, postsmoother=smoother, cycle=cycle)
    limit = 12 if smoother[0] in ("gauss-seidel", "sor") else 25
    assert_collective(COMM, info.converged and info.iterations <= limit,
                      "%s %s-cycle: %d iterations" % (smoother[0], cycle, info.iterations))


@pytest.mark.parametrize("smoother", [("l1-jacobi", {}), ("chebyshev", {"degree": 3})],
                         ids=["l1-jacobi", "chebyshev"])
def test_rank_independent_smoothers_give_rank_independent_cycle_on_one_level_blocks(smoother):
    # with a 1D problem every rank's aggregates are intervals in both runs, and
    # these smoothers do not depend on the partition: counts must agree closely
    A = gallery.poisson2d(48, COMM)
    _, info = _amg_solve(A, presmoother=smoother, postsmoother=smoother)
    serial = _serial_iterations("poisson2d-48", presmoother=smoother, postsmoother=smoother)
    assert_collective(COMM, abs(info.iterations - serial) <= 2,
                      "%d ranks %d vs serial %d" % (COMM.size, info.iterations, serial))


# -- options: PyAMG's descriptor form and the keyword shorthands ---------------------------

def _prolongators(M):
    # gathered on every rank: a level on a sub-communicator holds P on its ranks only
    return [M.gather_prolongator(k).toarray() for k in range(len(M.levels))]


def test_descriptor_form_gives_the_keyword_form_hierarchy():
    A = gallery.anisotropic_diffusion(32, COMM, epsilon=0.01)
    kw, info_kw = _amg_solve(A, theta=0.08, omega=1.2, max_coarse=20)
    desc, info_desc = _amg_solve(A, strength=("symmetric", {"theta": 0.08}),
                                 smooth=("jacobi", {"omega": 1.2}), max_coarse=20)
    d_kw, d_desc = kw.describe(), desc.describe()
    assert_collective(COMM, d_kw["levels"] == d_desc["levels"],
                      "levels %s vs %s" % (d_kw["levels"], d_desc["levels"]))
    assert_collective(COMM, d_kw["options"] == d_desc["options"]
                      and d_kw["options"]["strength"] == ("symmetric", {"theta": 0.08})
                      and d_kw["options"]["smooth"] == ("jacobi", {"omega": 1.2}),
                      "options %s vs %s" % (d_kw["options"], d_desc["options"]))
    assert_collective(COMM, info_kw.iterations == info_desc.iterations,
                      "%d vs %d iterations" % (info_kw.iterations, info_desc.iterations))
    assert_allclose_collective(info_desc.residual_norms, info_kw.residual_norms, rtol=0)
    P_kw, P_desc = _prolongators(kw), _prolongators(desc)
    for a, b in zip(P_kw, P_desc):
        assert_allclose_collective(b, a, rtol=0)
    # and both forms take effect: theta changes the levels, omega the prolongator
    default = preconditioners.make("amg", A, max_coarse=20)
    assert_collective(COMM, default.describe()["levels"] != d_kw["levels"],
                      "theta=0.08 gave the default hierarchy")
    P_theta = _prolongators(preconditioners.make("amg", A, theta=0.08, max_coarse=20))
    assert_collective(COMM, not np.allclose(P_theta[0], P_kw[0]),
                      "omega=1.2 gave the default prolongator")


def test_default_options_are_recorded_in_descriptor_form():
    A = gallery.poisson2d(20, COMM)
    opts = preconditioners.make("amg", A, presmoother="sor", cycle="w").describe()["options"]
    want = {"strength": ("symmetric", {"theta": 0.0}),
            "smooth": ("jacobi", {"omega": 4.0 / 3.0}),
            "aggregate": "standard",
            "presmoother": ("gauss-seidel", {"sweep": "symmetric", "omega": 1.0,
                                             "iterations": 1}),
            "postsmoother": ("chebyshev", {"degree": 2, "ratio": 11.0}),
            "cycle": "W", "max_levels": 10, "max_coarse": 300, "min_rows_per_rank": 2000,
            "precision": "double"}
    assert_collective(COMM, opts == want, "options %s" % (opts,))
    # the default smoothers: Chebyshev on GAMG's interval [0.1, 1.1] rho
    opts = preconditioners.make("amg", A).describe()["options"]
    assert_collective(COMM, opts["presmoother"] == opts["postsmoother"]
                      == ("chebyshev", {"degree": 2, "ratio": 11.0}), "options %s" % (opts,))


def test_unsmoothed_aggregation_keeps_the_tentative_prolongator():
    A = gallery.poisson2d(40, COMM)
    M, info = _amg_solve(A, smooth="none", max_coarse=20, min_rows_per_rank=1)
    _, _, _, T, _ = _hierarchy_pieces(A)
    assert_allclose_collective(M.levels[0].P.to_scipy().toarray(), T.to_scipy().toarray(),
                               rtol=0)
    _, smoothed = _amg_solve(A, max_coarse=20, min_rows_per_rank=1)
    assert_collective(COMM, info.converged and info.iterations > smoothed.iterations,
                      "unsmoothed %d vs smoothed %d iterations (%s)"
                      % (info.iterations, smoothed.iterations, info.reason))


# -- the targets of issue 4 ------------------------------------------------------------------

CASES = [
    pytest.param("poisson2d-256", 1.4, id="poisson2d-256-cg-amg"),
    pytest.param("poisson3d-32", 1.6, id="poisson3d-32-cg-amg"),
    pytest.param("poisson2d-512", 1.4, id="poisson2d-512-cg-amg-large"),
    pytest.param("poisson3d-64", 1.6, id="poisson3d-64-cg-amg-large"),
]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name,max_complexity", CASES)
def test_cg_amg_poisson_targets(name, max_complexity):
    A = _problem(name, COMM)
    M, info = _amg_solve(A)
    oc = M.operator_complexity()
    assert_collective(COMM, info.converged and info.iterations <= 12,
                      "%s: %d iterations (%s)" % (name, info.iterations, info.reason))
    assert_collective(COMM, oc <= max_complexity, "%s: operator complexity %.3f" % (name, oc))
    # rank-count independence: within 2 of pyamg's serial count (or fewer)
    assert_collective(COMM, info.iterations <= PYAMG[name] + 2,
                      "%s: %d vs pyamg %d" % (name, info.iterations, PYAMG[name]))


@pytest.mark.parametrize("name", ["poisson2d-96", "poisson3d-20"])
def test_iterations_differ_by_at_most_two_from_serial(name):
    A = _problem(name, COMM)
    _, info = _amg_solve(A)
    serial = _serial_iterations(name)
    assert_collective(COMM, abs(info.iterations - serial) <= 2,
                      "%s: %d ranks %d vs serial %d" % (name, COMM.size, info.iterations, serial))


def test_anisotropic_diffusion_256():
    A = gallery.anisotropic_diffusion(256, COMM, epsilon=1e-3, theta=0.0)
    M, info = _amg_solve(A, theta=0.1)
    assert_collective(COMM, info.converged and info.iterations <= 25,
                      "%d iterations" % info.iterations)


@pytest.mark.parametrize("problem", ["graph-laplacian-80", "neumann-poisson2d-80"])
def test_singular_laplacian_with_nullspace(problem):
    n = 80
    lay = Layout.block(n * n, COMM)
    v = np.arange(*lay.owned_range)
    right = v[v % n < n - 1]
    up = v[v + n < n * n]
    edges = np.concatenate((np.column_stack((right, right + 1)), np.column_stack((up, up + n))))
    w = None
    if problem.startswith("graph"):
        # a random-weighted graph Laplacian: weights from a hash of the edge
        w = 1.0 + (np.sin(edges[:, 0] * 12.9898 + edges[:, 1] * 78.233) * 43758.5453) % 1.0
    A = gallery.graph_laplacian(edges, n * n, COMM, weights=w)
    ones = DistVector.full(A.row_layout, 1.0)
    b = gallery.rhs(A, "random")
    b.local -= b.sum() / b.global_size                 # consistent right-hand side
    M = preconditioners.make("amg", A)
    x, info = cg(A, b, rtol=1e-8, M=M, nullspace=[ones], maxiter=100)
    r = b - A.matvec(x)
    assert_collective(COMM, info.converged and info.iterations <= 20,
                      "%s: %d iterations, %s" % (problem, info.iterations, info.reason))
    assert_collective(COMM, r.norm() <= 1e-7 * b.norm())


def test_amg_bad_input_raises_everywhere():
    A = gallery.poisson2d(9, COMM)
    assert_raises_collective(COMM, ValueError, preconditioners.make, "amg", A, cycle="X")
    assert_raises_collective(COMM, ValueError, preconditioners.make, "amg", A,
                             presmoother="nope")
    R = DistCSR.from_local_rows(A.local_rows()[:, :40], A.row_layout, Layout.block(40, COMM))
    assert_raises_collective(COMM, ValueError, preconditioners.make, "amg", R)
