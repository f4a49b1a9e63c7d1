"""Smoothed-aggregation AMG as a preconditioner: the options (PyAMG's
descriptor form and the keyword shorthands), the iteration targets of CG +
AMG against pyamg at any rank count, null spaces, bad options and near null
spaces refused on every rank, and progress reports.

The cases whose ids end in ``-large`` (3D 64^3, 2D 512^2) take the longest
(select them with ``-k large``, skip them with ``-k "not large"`` when
iterating locally)."""

import numpy as np
import pytest
from mpi4py import MPI

import dmsolve
import dmsolve.gallery as gallery
import preconditioners
from amg_cases import amg_problem, amg_solve, saddle_point, serial_iterations
from bad_inputs import check_bad_input, make_pc
from dmsolve import DistCSR, DistVector, Layout
from dmsolve.krylov import cg
from mpitest import (Checks, assert_allclose_collective, assert_collective,
                     assert_raises_collective, same_on_all_ranks)

from threaded import small_blocks

COMM = MPI.COMM_WORLD


# pyamg 5.4.1 SA + CG iterations to 1e-8 (docs REFERENCES.md)
PYAMG = {"poisson2d-256": 11, "poisson2d-512": 10, "poisson3d-32": 9, "poisson3d-64": 10}


# -- options: PyAMG's descriptor form and the keyword shorthands ---------------------------

def _prolongators(M):
    # gathered on every rank: a level on a sub-communicator holds P on its ranks only
    return [M.gather_prolongator(k).toarray() for k in range(len(M.levels))]


def test_descriptor_form_gives_the_keyword_form_hierarchy():
    """PyAMG's descriptor form of the options builds the hierarchy the keyword form builds."""
    A = gallery.anisotropic_diffusion(32, COMM, epsilon=0.01)
    kw, info_kw = amg_solve(A, theta=0.08, omega=1.2, max_coarse=20)
    desc, info_desc = amg_solve(A, strength=("symmetric", {"theta": 0.08}),
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
    """The default options are recorded in descriptor form."""
    A = gallery.poisson2d(20, COMM)
    opts = preconditioners.make("amg", A, presmoother="sor", cycle="w").describe()["options"]
    want = {"strength": ("classical", {"theta": 0.3, "filter_levels": 1}),
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


# -- the iteration targets -------------------------------------------------------------------

CASES = [
    pytest.param("poisson2d-256", 1.4, id="poisson2d-256-cg-amg"),
    pytest.param("poisson3d-32", 1.6, id="poisson3d-32-cg-amg"),
    pytest.param("poisson2d-512", 1.4, id="poisson2d-512-cg-amg-large"),
    pytest.param("poisson3d-64", 1.6, id="poisson3d-64-cg-amg-large"),
]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name,max_complexity", CASES)
def test_cg_amg_poisson_targets(name, max_complexity):
    """CG + AMG reaches each Poisson problem's iteration target and operator complexity, within
    two iterations of pyamg's serial count."""
    A = amg_problem(name, COMM)
    M, info = amg_solve(A)
    oc = M.operator_complexity()
    assert_collective(COMM, info.converged and info.iterations <= 12,
                      "%s: %d iterations (%s)" % (name, info.iterations, info.reason))
    assert_collective(COMM, oc <= max_complexity, "%s: operator complexity %.3f" % (name, oc))
    # rank-count independence: within 2 of pyamg's serial count (or fewer)
    assert_collective(COMM, info.iterations <= PYAMG[name] + 2,
                      "%s: %d vs pyamg %d" % (name, info.iterations, PYAMG[name]))


@pytest.mark.parametrize("name", ["poisson2d-96", "poisson3d-20"])
def test_iterations_differ_by_at_most_two_from_serial(name):
    """CG + AMG takes at most two iterations more or fewer than at one rank."""
    A = amg_problem(name, COMM)
    _, info = amg_solve(A)
    serial = serial_iterations(name)
    assert_collective(COMM, abs(info.iterations - serial) <= 2,
                      "%s: %d ranks %d vs serial %d" % (name, COMM.size, info.iterations, serial))


def test_anisotropic_diffusion_256():
    """CG + AMG converges on anisotropic diffusion at 256^2."""
    A = gallery.anisotropic_diffusion(256, COMM, epsilon=1e-3, theta=0.0)
    M, info = amg_solve(A, theta=0.1)
    assert_collective(COMM, info.converged and info.iterations <= 25,
                      "%d iterations" % info.iterations)


@pytest.mark.parametrize("problem", ["graph-laplacian-80", "neumann-poisson2d-80"])
def test_singular_laplacian_with_nullspace(problem):
    """CG + AMG with the null space solves the singular Laplacian."""
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
    """Bad inputs to amg raise on every rank."""
    A = gallery.poisson2d(9, COMM)
    assert_raises_collective(COMM, ValueError, preconditioners.make, "amg", A, cycle="X")
    assert_raises_collective(COMM, ValueError, preconditioners.make, "amg", A,
                             presmoother="nope")
    R = DistCSR.from_local_rows(A.local_rows()[:, :40], A.row_layout, Layout.block(40, COMM))
    assert_raises_collective(COMM, ValueError, preconditioners.make, "amg", R)


# -- a zero diagonal ---------------------------------------------------------------

def test_amg_refuses_a_saddle_point_on_every_rank():
    """amg refuses a saddle-point matrix (zero diagonal) on every rank."""
    A = saddle_point(COMM)
    match = r"amg: the diagonal of A is zero or not finite in 30 rows, the first at global row 400"
    assert_raises_collective(COMM, ValueError, preconditioners.make, "amg", A, match=match)
    # through the solve (where GMRES reported CONVERGED_RTOL at a true residual of 0.3)
    b = gallery.rhs(A, "random")
    assert_raises_collective(COMM, ValueError, dmsolve.solve, A, b, method="gmres", pc="amg",
                             match=match)
    # whatever the smoother: the strength measure and prolongator smoothing divide too
    assert_raises_collective(COMM, ValueError, preconditioners.make, "amg", A,
                             presmoother="l1-jacobi", postsmoother="l1-jacobi", match=match)


# -- every option at the door ----------------------------------------------------------

def _local_ones(A, k):
    return np.ones((A.row_layout.local_size, k))


def _bad_b(kind, A):
    n = A.row_layout.local_size
    rng = np.random.default_rng(0)
    return {
        "nan": np.full((n, 1), np.nan),
        "zero-column": np.column_stack((np.ones(n), np.zeros(n))),
        "no-column": np.zeros((n, 0)),
        "complex": np.ones((n, 1)) * (1 + 1j),
        "string": "constant",
        "dependent": np.column_stack((np.ones(n), 2.0 * np.ones(n))),
        "empty-list": [],
        "bool": np.ones((n, 1), dtype=bool),
        "random-ok": rng.standard_normal((n, 2)),
    }[kind]


BAD_OPTIONS = [
    ("max_dense_coarse-negative", ValueError, "max_dense_coarse must", {"max_dense_coarse": -1}),
    ("max_dense_coarse-string", TypeError, "max_dense_coarse must", {"max_dense_coarse": "x"}),
    ("coarse_sweeps-zero", ValueError, "coarse_sweeps must", {"coarse_sweeps": 0}),
    ("coarse_sweeps-huge", ValueError, "coarse_sweeps must", {"coarse_sweeps": 10 ** 9}),
    ("coarse_sweeps-float", TypeError, "coarse_sweeps must", {"coarse_sweeps": 2.0}),
    ("jacobi-smoother-iterations-huge", ValueError, "smoother 'jacobi': iterations",
     {"presmoother": ("jacobi", {"iterations": 10 ** 9})}),
    ("gauss-seidel-iterations-huge", ValueError, "smoother 'gauss-seidel': iterations",
     {"postsmoother": ("gauss-seidel", {"iterations": 10 ** 9})}),
    ("chebyshev-smoother-degree-huge", ValueError, "smoother 'chebyshev': degree",
     {"presmoother": ("chebyshev", {"degree": 10 ** 9})}),
    ("l1-jacobi-iterations-huge", ValueError, "smoother 'l1-jacobi': iterations",
     {"presmoother": ("l1-jacobi", {"iterations": 10 ** 9})}),
    ("jacobi-smoother-omega-diverges", ValueError, "smoother 'jacobi': omega",
     {"presmoother": ("jacobi", {"omega": 2.5})}),
    ("prolongator-omega-huge", ValueError, "omega must be a real number in \\(0, 2\\]",
     {"omega": 1e300}),
    ("prolongator-omega-above-two", ValueError, "omega must be a real number in \\(0, 2\\]",
     {"smooth": ("jacobi", {"omega": 3.0})}),
    ("progress-not-callable", TypeError, "progress must be", {"progress": 3}),
]


@pytest.mark.parametrize("case,exc,match,opts", BAD_OPTIONS, ids=[c[0] for c in BAD_OPTIONS])
def test_bad_amg_options_refused_on_every_rank(case, exc, match, opts):
    """Each bad amg option is refused on every rank."""
    A = gallery.poisson2d(24, COMM)
    assert_raises_collective(COMM, exc, preconditioners.make, "amg", A, max_coarse=20,
                             match=match, **opts)


BAD_B = [("nan", ValueError, "B has non-finite entries"),
         ("zero-column", ValueError, "B's column 1 is zero"),
         ("no-column", ValueError, "B must have at least one column"),
         ("complex", TypeError, "B must hold real numbers"),
         ("string", TypeError, "B must be None, a DistVector"),
         ("empty-list", ValueError, "B must hold at least one vector"),
         ("bool", TypeError, "B must hold real numbers")]


@pytest.mark.parametrize("kind,exc,match", BAD_B, ids=[c[0] for c in BAD_B])
def test_bad_near_null_space_refused_on_every_rank(kind, exc, match):
    """Each bad near null space (NaN, zero column, wrong shape, ...) is refused on every rank."""
    A = gallery.poisson2d(24, COMM)
    assert_raises_collective(COMM, exc, preconditioners.make, "amg", A, B=_bad_b(kind, A),
                             match=match)


def test_dependent_candidates_refused_independent_ones_accepted():
    """Linearly dependent candidates are refused, independent ones accepted."""
    A = gallery.poisson2d(24, COMM)
    assert_raises_collective(COMM, ValueError, preconditioners.make, "amg", A,
                             B=_bad_b("dependent", A),
                             match="B's 2 columns are linearly dependent")
    M = preconditioners.make("amg", A, B=_bad_b("random-ok", A), max_coarse=20)
    assert_collective(COMM, len(M.describe()["levels"]) >= 2, "coarsened")


@pytest.mark.mpi(min_size=2)
def test_candidates_with_different_column_counts_refused():
    """Candidates with different column counts on different ranks are refused."""
    A = gallery.poisson2d(24, COMM)
    B = _local_ones(A, 1 if COMM.rank == 0 else 2)
    assert_raises_collective(COMM, ValueError, preconditioners.make, "amg", A, B=B,
                             match="B must have the same number of columns on every rank, "
                                   "got between 1 and 2")


@pytest.mark.mpi(min_size=2)
def test_progress_given_on_some_ranks_only_refused():
    """progress given on some ranks only is refused on every rank."""
    A = gallery.poisson2d(24, COMM)
    progress = (lambda *a: None) if COMM.rank == 0 else None
    assert_raises_collective(COMM, ValueError, preconditioners.make, "amg", A,
                             progress=progress, match="progress must be given on every rank")


# -- progress -------------------------------------------------------------------------

@pytest.mark.parametrize("opts", [{"max_coarse": 20}, {"max_levels": 1}],
                         ids=["hierarchy", "one-level-relaxed"])
def test_progress_reports_every_level_as_describe_does(opts):
    """progress reports every level as describe() does."""
    A = gallery.poisson2d(64 if opts.get("max_levels") != 1 else 50, COMM)
    seen = []
    M = preconditioners.make("amg", A, progress=lambda task, msg, s: seen.append((task, msg, s)),
                             **opts)
    d = M.describe()
    levels = d["levels"]
    want = ["level %d: %d rows, %d nonzeros" % (i, L["rows"], L["nnz"])
            for i, L in enumerate(levels[:-1])]
    want.append("level %d (coarsest, %s solve): %d rows, %d nonzeros"
                % (len(levels) - 1, d["coarse"]["solver"], levels[-1]["rows"],
                   levels[-1]["nnz"]))
    want.append("done: %d levels, operator complexity %.3f, grid complexity %.3f"
                % (len(levels), d["operator_complexity"], d["grid_complexity"]))
    messages = [m for _, m, _ in seen]
    seconds = [s for _, _, s in seen]
    with Checks(COMM) as checks:
        checks.add(messages == want, "reports", (messages, want))
        checks.add(all(t == "amg" for t, _, _ in seen), "task")
        checks.add(all(b >= a >= 0 for a, b in zip(seconds, seconds[1:]))
                   and seconds[-1] <= d["setup_seconds"], "seconds", (seconds, d["setup_seconds"]))
    assert_collective(COMM, same_on_all_ranks(COMM, messages), "the same reports on every rank")


def test_progress_true_prints_on_rank0_only(capsys):
    """progress=True prints on rank 0 only."""
    A = gallery.poisson2d(24, COMM)
    preconditioners.make("amg", A, max_coarse=20, progress=True)
    out = capsys.readouterr().out
    with Checks(COMM) as checks:
        if COMM.rank == 0:
            checks.add(out.startswith("amg: level 0: 576 rows, 2784 nonzeros ("), "printed", out)
        else:
            checks.add(out == "", "silent", out)


# -- bad input: the same exception on every rank -------------------------------------------

BAD_INPUTS = [
    ("amg-unknown-option", TypeError, "smoother_name",
     lambda e: preconditioners.make("amg", e.A, smoother_name="x")),
    ("amg-on-a-numpy-array", TypeError, "DistCSR",
     lambda e: preconditioners.make("amg", np.eye(3))),
    ("amg-theta-nan", ValueError, "theta", make_pc("amg", theta=float("nan"))),
    ("amg-theta-above-one", ValueError, "theta", make_pc("amg", theta=1.5)),
    ("amg-omega-negative", ValueError, "omega", make_pc("amg", omega=-5)),
    ("amg-max-levels-zero", ValueError, "max_levels", make_pc("amg", max_levels=0)),
    ("amg-max-coarse-zero", ValueError, "max_coarse", make_pc("amg", max_coarse=0)),
    ("amg-max-levels-not-an-integer", TypeError, "max_levels", make_pc("amg", max_levels=2.5)),
    ("amg-min-rows-per-rank-negative", ValueError, "min_rows_per_rank",
     make_pc("amg", min_rows_per_rank=-1)),
    ("amg-theta-as-keyword-and-in-strength", ValueError, "twice",
     make_pc("amg", theta=0.1, strength=("symmetric", {"theta": 0.2}))),
    ("amg-omega-as-keyword-and-in-smooth", ValueError, "twice",
     make_pc("amg", omega=1.0, smooth=("jacobi", {"omega": 1.2}))),
    ("amg-strength-theta-nan", ValueError, "theta",
     make_pc("amg", strength=("symmetric", {"theta": float("nan")}))),
    ("amg-unknown-strength-measure", ValueError, "unknown strength measure",
     make_pc("amg", strength="evolution")),
    ("amg-unknown-prolongator-smoother", ValueError, "unknown prolongator smoother",
     make_pc("amg", smooth="energy")),
    ("amg-strength-unknown-option", TypeError, "thta",
     make_pc("amg", strength=("symmetric", {"thta": 0.1}))),
    ("amg-unsmoothed-with-omega", TypeError, "none", make_pc("amg", smooth="none", omega=1.0)),
    ("amg-gauss-seidel-unknown-sweep", ValueError, "sweep",
     make_pc("amg", postsmoother=("gauss-seidel", {"sweep": "sideways"}))),
    ("amg-sor-omega-two", ValueError, "omega", make_pc("amg", presmoother=("sor", {"omega": 2.0}))),
    ("amg-jacobi-smoother-iterations-zero", ValueError, "iterations",
     make_pc("amg", presmoother=("jacobi", {"iterations": 0}))),
    ("amg-chebyshev-smoother-ratio-one", ValueError, "ratio",
     make_pc("amg", presmoother=("chebyshev", {"ratio": 1.0}))),
]


@pytest.mark.parametrize("exc, match, call", [c[1:] for c in BAD_INPUTS],
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_the_same_exception_on_every_rank(bad_input_env, request, exc, match,
                                                           call):
    """Each case of BAD_INPUTS raises the same exception type, with a message
    that matches, on every rank (or works, at one rank, where a COMM_SELF
    operand is valid)."""
    check_bad_input(bad_input_env, request, exc, match, call)


def test_setup_on_threads_builds_the_restrictions_transposed_copy(monkeypatch):
    """Set up on 2 threads, each prolongator keeps the transposed copy its
    threaded restriction multiplies with (built at set-up, not in the first
    cycle); on one thread it keeps none."""
    small_blocks(monkeypatch, rows=64)
    A = gallery.poisson3d(16, COMM)
    sizes = {}
    for k in (1, 2):
        with dmsolve.threads.using(k):
            M = preconditioners.make("amg", A, max_coarse=50)
            before = [L.P.local_nbytes for L in M.levels if L.active]
            M(gallery.rhs(A, "random"))
            sizes[k] = (before, [L.P.local_nbytes for L in M.levels if L.active])
    assert_collective(COMM, sizes[1][0] == sizes[1][1] and sizes[2][0] == sizes[2][1],
                      "no copy built in a cycle")
    fine = M.levels[0].P
    big = fine.col_layout.local_size >= 128
    assert_collective(COMM, (sizes[2][0][0] > sizes[1][0][0]) == big, str(sizes))
