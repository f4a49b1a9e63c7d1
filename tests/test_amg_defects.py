"""AMG defects of issue 14: a zero diagonal is refused on every rank (the
saddle-point false convergence), AMG that cannot coarsen stays small and
cheap (a relaxed coarsest level instead of a dense N x N pseudo-inverse on
every rank), every option is checked at the door, and set-up progress is
reported on request."""

import os
import resource
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

import dmsolve
import dmsolve.gallery as gallery
import preconditioners
from dmsolve import DistCSR, DistVector
from dmsolve.krylov import cg
from mpitest import Checks, assert_collective, assert_raises_collective, same_on_all_ranks
from preconditioners.smoothers import make_smoother

COMM = MPI.COMM_WORLD


def _saddle_point(comm):
    """``[[L, B^T], [B, 0]]``: L the 2D Laplacian of 400 rows, B random sparse
    30 x 400 (the same on every rank), 30 zero-diagonal rows 400..429."""
    n = 20
    T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n))
    L = sp.kron(sp.eye(n), T) + sp.kron(T, sp.eye(n))
    B = sp.random(30, 400, density=0.05, random_state=1)
    K = sp.bmat([[L, B.T], [B, None]]).tocsr()
    return DistCSR.from_global(K, comm)


# -- 1. a zero diagonal ---------------------------------------------------------------

def test_amg_refuses_a_saddle_point_on_every_rank():
    A = _saddle_point(COMM)
    match = r"amg: the diagonal of A is zero or not finite in 30 rows, the first at global row 400"
    assert_raises_collective(COMM, ValueError, preconditioners.make, "amg", A, match=match)
    # through the solve (where GMRES reported CONVERGED_RTOL at a true residual of 0.3)
    b = gallery.rhs(A, "random")
    assert_raises_collective(COMM, ValueError, dmsolve.solve, A, b, method="gmres", pc="amg",
                             match=match)
    # whatever the smoother: the strength measure and prolongator smoothing divide too
    assert_raises_collective(COMM, ValueError, preconditioners.make, "amg", A,
                             presmoother="l1-jacobi", postsmoother="l1-jacobi", match=match)


def _with_empty_row(comm):
    """A 1D Laplacian of 13 rows whose row and column 6 are empty."""
    n = 13
    K = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n)).tolil()
    K[6, :] = 0.0
    K[:, 6] = 0.0
    K = K.tocsr()
    K.eliminate_zeros()
    return DistCSR.from_global(K, comm)


@pytest.mark.parametrize("smoother", ["jacobi", "chebyshev", "gauss-seidel", "l1-jacobi"])
def test_smoothers_refuse_a_zero_diagonal_but_leave_an_empty_row_alone(smoother):
    A = _saddle_point(COMM)
    if smoother == "l1-jacobi":        # divides by the row sums, which are not zero here
        make_smoother(smoother, A)
    else:
        assert_raises_collective(COMM, ValueError, make_smoother, smoother, A,
                                 match="smoother '%s': the diagonal of A is zero or not finite "
                                       "in 30 rows, the first at global row 400" % smoother)
    # an empty row (0 = b_i, as a coarse basis function in a semi-definite
    # A's null space gives) is no reason to refuse: the other rows are smoothed
    E = _with_empty_row(COMM)
    S = make_smoother(smoother, E)
    b = DistVector.full(E.row_layout, 1.0)
    x = b.zeros_like()
    S.smooth(b.local, x.local, zero_guess=True)
    xg = x.gather()
    with Checks(COMM) as checks:
        checks.add(xg[6] == 0.0, "the empty row is left alone", xg[6])
        checks.add(np.all(np.isfinite(xg)) and np.all(xg[np.arange(13) != 6] > 0),
                   "the other rows are smoothed", xg)
    # and a non-finite diagonal is refused even then
    lay = dmsolve.Layout.block(3, COMM)
    F = DistCSR.from_local_rows(sp.diags([1.0, np.inf, 1.0]).tocsr()[lay.start:lay.stop], lay,
                                check_finite=False)
    assert_raises_collective(COMM, ValueError, make_smoother, smoother, F,
                             match="not finite in 1 row, the first at global row 1")


# -- 2. AMG that cannot coarsen --------------------------------------------------------

def _max_local_rows(A):
    return int(A.row_layout.local_sizes.max())


@pytest.mark.parametrize("opts", [{"max_levels": 1}, {"max_coarse": 10 ** 9}],
                         ids=["max_levels-1", "max_coarse-above-N"])
def test_no_coarsening_relaxes_the_coarsest_level(opts):
    A = gallery.poisson2d(60, COMM)                   # 3600 rows > max_dense_coarse
    M = preconditioners.make("amg", A, **opts)
    d = M.describe()
    b = gallery.rhs(A, "random")
    x, info = cg(A, b, rtol=1e-8, M=M, maxiter=1000)
    rel = (b - A @ x).norm() / b.norm()
    with Checks(COMM) as checks:
        checks.add(len(d["levels"]) == 1, "one level", d["levels"])
        checks.add(d["coarse"] == {"solver": "relax", "rows": 3600, "stored_bytes_max_rank": 0,
                                   "max_dense_coarse": 2000, "sweeps": 2}, "coarse", d["coarse"])
        # the dense pseudo-inverse was 3600^2 * 8 bytes = 104 MB on every rank; now
        # A's CSR (some 64 bytes a row) and its sliced ELL copy (some 45)
        checks.add(d["hierarchy_bytes_max_rank"] <= 150 * _max_local_rows(A),
                   "hierarchy bytes", d["hierarchy_bytes_max_rank"])
        checks.add(M.symmetric is True, "Chebyshev relaxation is symmetric")
        checks.add(info.converged and rel <= 1e-8, "cg converges", (info.reason, rel))


def test_dense_coarse_solve_up_to_max_dense_coarse_rows():
    A = gallery.poisson2d(20, COMM)                   # 400 rows, no coarsening allowed
    dense = preconditioners.make("amg", A, max_levels=1, max_dense_coarse=400)
    relax = preconditioners.make("amg", A, max_levels=1, max_dense_coarse=399,
                                 coarse_sweeps=3)
    r = gallery.rhs(A, "random")
    # the dense solve is exact: M = A^-1
    err = (A @ dense(r) - r).norm() / r.norm()
    with Checks(COMM) as checks:
        checks.add(dense.describe()["coarse"]["solver"] == "dense", "dense at 400 rows")
        checks.add(dense.describe()["coarse"]["stored_bytes_max_rank"]
                   == 8 * 400 * (_max_local_rows(A) + 1), "only own rows of the inverse kept",
                   dense.describe()["coarse"])
        checks.add(err <= 1e-10, "dense coarse solve is exact", err)
        checks.add(relax.describe()["coarse"]["solver"] == "relax"
                   and relax.describe()["coarse"]["sweeps"] == 3, "relaxed at 399",
                   relax.describe()["coarse"])


def _address_space_limit(extra_bytes):
    """A soft address-space limit ``extra_bytes`` above what this process maps
    now, so that a set-up that tries to allocate tens of GB fails with
    MemoryError instead of taking the shared machine down. Returns the old
    limits (for ``resource.setrlimit``)."""
    old = resource.getrlimit(resource.RLIMIT_AS)
    if not os.path.exists("/proc/self/status"):       # not Linux: no limit
        return old
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    soft = vm + extra_bytes
    if old[1] != resource.RLIM_INFINITY:
        soft = min(soft, old[1])
    resource.setrlimit(resource.RLIMIT_AS, (soft, old[1]))
    return old


def test_diagonal_matrix_of_1e5_rows_stays_small_and_converges():
    # a diagonal matrix has no couplings to aggregate: the coarsest level is A
    # itself. A dense pseudo-inverse would take 10^10 entries (80 GB) per rank.
    n = 10 ** 5
    lay = dmsolve.Layout.block(n, COMM)
    i = np.arange(*lay.owned_range)
    d = 1.0 + (i % 7)
    A = DistCSR.from_local_rows(sp.csr_matrix((d, (i - lay.start, i)), shape=(i.size, n)), lay)
    preconditioners.make("amg", gallery.poisson2d(20, COMM))     # kernels compiled before
    old = _address_space_limit(2 * 2 ** 30)
    tracemalloc.start()
    error = None
    try:
        M = preconditioners.make("amg", A)
        peak = tracemalloc.get_traced_memory()[1]
    except MemoryError as e:        # the old dense coarse solve
        error, peak = "MemoryError: %s" % e, None
    finally:
        tracemalloc.stop()
        resource.setrlimit(resource.RLIMIT_AS, old)
    assert_collective(COMM, error is None, "set-up failed: %s" % error)
    desc = M.describe()
    b = gallery.rhs(A, "random")
    x, info = cg(A, b, rtol=1e-10, M=M, maxiter=10)
    rel = (b - A @ x).norm() / b.norm()
    local = _max_local_rows(A)
    with Checks(COMM) as checks:
        checks.add(desc["levels"] == [{"rows": n, "nnz": n, "ranks": COMM.size}], "levels",
                   desc["levels"])
        checks.add(desc["coarse"]["solver"] == "relax" and desc["coarse"]["rows"] == n
                   and desc["coarse"]["stored_bytes_max_rank"] == 0, "coarse", desc["coarse"])
        checks.add(desc["hierarchy_bytes_max_rank"] <= 40 * local, "hierarchy bytes",
                   desc["hierarchy_bytes_max_rank"])
        # everything the set-up allocated at once, smoothers included: O(local rows)
        checks.add(peak <= 200 * local, "set-up peak %d bytes for %d local rows" % (peak, local))
        # Gauss-Seidel is exact on a diagonal matrix
        checks.add(info.converged and info.iterations == 1 and rel <= 1e-10, "cg",
                   (info.reason, info.iterations, rel))


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
    A = gallery.poisson2d(24, COMM)
    assert_raises_collective(COMM, exc, preconditioners.make, "amg", A, B=_bad_b(kind, A),
                             match=match)


def test_dependent_candidates_refused_independent_ones_accepted():
    A = gallery.poisson2d(24, COMM)
    assert_raises_collective(COMM, ValueError, preconditioners.make, "amg", A,
                             B=_bad_b("dependent", A),
                             match="B's 2 columns are linearly dependent")
    M = preconditioners.make("amg", A, B=_bad_b("random-ok", A), max_coarse=20)
    assert_collective(COMM, len(M.describe()["levels"]) >= 2, "coarsened")


@pytest.mark.mpi(min_size=2)
def test_candidates_with_different_column_counts_refused():
    A = gallery.poisson2d(24, COMM)
    B = _local_ones(A, 1 if COMM.rank == 0 else 2)
    assert_raises_collective(COMM, ValueError, preconditioners.make, "amg", A, B=B,
                             match="B must have the same number of columns on every rank, "
                                   "got between 1 and 2")


@pytest.mark.mpi(min_size=2)
def test_progress_given_on_some_ranks_only_refused():
    A = gallery.poisson2d(24, COMM)
    progress = (lambda *a: None) if COMM.rank == 0 else None
    assert_raises_collective(COMM, ValueError, preconditioners.make, "amg", A,
                             progress=progress, match="progress must be given on every rank")


# -- 5. progress -------------------------------------------------------------------------

@pytest.mark.parametrize("opts", [{"max_coarse": 20}, {"max_levels": 1}],
                         ids=["hierarchy", "one-level-relaxed"])
def test_progress_reports_every_level_as_describe_does(opts):
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
    A = gallery.poisson2d(24, COMM)
    preconditioners.make("amg", A, max_coarse=20, progress=True)
    out = capsys.readouterr().out
    with Checks(COMM) as checks:
        if COMM.rank == 0:
            checks.add(out.startswith("amg: level 0: 576 rows, 2784 nonzeros ("), "printed", out)
        else:
            checks.add(out == "", "silent", out)
