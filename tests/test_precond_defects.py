"""Preconditioner defects of issue 14: local factorisations that crashed in
SuperLU or leaked its C file paths, options accepted silently or looping
forever, the ``symmetric`` attribute of every preconditioner checked
numerically, and GeMSLR's set-up progress."""

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

import dmsolve
import dmsolve.gallery as gallery
import preconditioners
from dmsolve import DistCSR, DistVector
from mpitest import (Checks, assert_allclose_collective, assert_collective,
                     assert_raises_collective, same_on_all_ranks)

COMM = MPI.COMM_WORLD
GEMSLR = dict(nlev=3, ncomp=4, ilu_droptol=1e-3, ilu_max_row_nnz=50)


def _with_broken_last_row(kind):
    """A 2D Poisson matrix of 81 rows whose last global row (owned by the last
    rank only) is empty (``"empty"``) or a copy of the row before it
    (``"copy"``: singular with no empty row or column)."""
    K = gallery.poisson2d(9, MPI.COMM_SELF).to_scipy().tolil()
    if kind == "empty":
        K[80, :] = 0.0
    else:
        K[80, :] = K[79, :]
    K = K.tocsr()
    K.eliminate_zeros()
    return DistCSR.from_global(K, COMM)


# -- 3. the local solvers --------------------------------------------------------------

@pytest.mark.parametrize("fill_factor", [1e6, 1e12, 1e300])
def test_ilut_huge_fill_factor_means_no_fill_limit(fill_factor):
    # SuperLU multiplies fill_factor by nnz(A) in a 32-bit integer: it failed
    # with "Not enough memory" (printed from C) instead of factoring
    A = gallery.poisson2d(30, COMM)
    huge = preconditioners.make("bjacobi", A, sub="ilut",
                                sub_options={"fill_factor": fill_factor, "drop_tol": 0.0})
    full = preconditioners.make("bjacobi", A, sub="lu")
    r = gallery.rhs(A, "random")
    # ILUT with no dropping and no fill limit is the complete factorisation
    assert_allclose_collective(huge(r).local, full(r).local, rtol=1e-8, atol=1e-12)


def test_gemslr_huge_row_fill_limit_builds():
    A = gallery.shifted_laplacian(6, COMM, shift=0.1, ny=5, nz=7)
    M = preconditioners.make("gemslr", A, nlev=2, ncomp=2, ilu_max_row_nnz=10 ** 12)
    d = M.describe()
    assert_collective(COMM, d["fill_ilu"] > 0 and np.all(np.isfinite(M(gallery.rhs(A)).local)),
                      "gemslr with ilu_max_row_nnz=1e12: %s" % d["fill_ilu"])


@pytest.mark.parametrize("name,sub", [("bjacobi", "ilut"), ("bjacobi", "lu"), ("asm", "ilut"),
                                      ("asm", "lu"), ("bjacobi", "ilu0")])
def test_singular_block_names_the_rank_block_and_global_row(name, sub):
    A = _with_broken_last_row("empty")
    last = COMM.size - 1
    e = assert_raises_collective(COMM, ValueError, preconditioners.make, name, A, sub=sub,
                                 match=r"the block of rank %d \(\d+ rows\): .* at global "
                                       r"(row|column) 80" % last)
    assert_collective(COMM, ".c" not in str(e) and "line" not in str(e),
                      "no C file paths: %s" % e)


@pytest.mark.parametrize("sub", ["ilut", "lu"])
def test_numerically_singular_block_says_so_without_superlu_paths(sub):
    A = _with_broken_last_row("copy")
    e = assert_raises_collective(COMM, ValueError, preconditioners.make, "bjacobi", A, sub=sub,
                                 match=r"bjacobi\(sub='%s'\): the block of rank %d "
                                       r"\(\d+ rows\): .*singular" % (sub, COMM.size - 1))
    assert_collective(COMM, ".c" not in str(e) and "SRC" not in str(e),
                      "no C file paths: %s" % e)


def test_gemslr_singular_subdomain_names_the_global_row():
    # an empty row in a subdomain block: its original global id is named
    K = gallery.shifted_laplacian(6, MPI.COMM_SELF, shift=0.1, ny=5, nz=7).to_scipy().tolil()
    K[0, :] = 0.0
    K[:, 0] = 0.0
    K = K.tocsr()
    K.eliminate_zeros()
    A = DistCSR.from_global(K, COMM)
    assert_raises_collective(COMM, ValueError, preconditioners.make, "gemslr", A, nlev=2,
                             ncomp=2, match=r"gemslr: .* at global (row|column) 0\b")


# -- 6. options accepted silently, or looping ---------------------------------------------

BAD = [
    ("cheby-degree-huge", "cheby", ValueError, "degree must be an integer in \\[1, 1000\\]",
     {"degree": 10 ** 9}),
    ("cheby-steps-huge", "cheby", ValueError, "steps must be an integer in \\[1, 1000\\]",
     {"steps": 10 ** 9}),
    ("gemslr-lr_rank-huge", "gemslr", ValueError, "lr_rank must be an integer in \\[0, 1000\\]",
     {"lr_rank": 10 ** 9}),
    ("gemslr-lr_maxits-huge", "gemslr", ValueError, "lr_maxits must be an integer in",
     {"lr_maxits": 10 ** 12}),
    ("gemslr-seed-beyond-int32", "gemslr", ValueError, "seed must be an integer in",
     {"seed": 2 ** 40}),
    ("gemslr-progress-not-callable", "gemslr", TypeError, "progress must be",
     {"progress": "yes"}),
]


@pytest.mark.parametrize("case,name,exc,match,opts", BAD, ids=[c[0] for c in BAD])
def test_bad_options_refused_on_every_rank(case, name, exc, match, opts):
    A = gallery.poisson2d(12, COMM)
    assert_raises_collective(COMM, exc, preconditioners.make, name, A, match=match, **opts)


@pytest.mark.timeout(120)
def test_asm_huge_overlap_stops_when_nothing_is_left_to_add():
    # each layer was a collective fetch, 10^12 of them
    A = gallery.poisson2d(12, COMM)
    huge = preconditioners.make("asm", A, overlap=10 ** 12, sub="lu")
    whole = preconditioners.make("asm", A, overlap=30, sub="lu")   # > the graph's diameter
    r = gallery.rhs(A, "random")
    assert_allclose_collective(huge(r).local, whole(r).local, rtol=1e-12, atol=1e-14)
    # with the whole graph in every rank's overlap, RAS is the exact inverse
    assert_allclose_collective((A @ huge(r)).local, r.local, rtol=1e-8, atol=1e-10)


def test_gemslr_more_parts_than_rows_is_one_level():
    A = gallery.shifted_laplacian(6, COMM, shift=0.1, ny=5, nz=7)       # 210 rows
    huge = preconditioners.make("gemslr", A, ncomp=10 ** 12)
    d = huge.describe()
    assert_collective(COMM, d["nlev"] == 1 and d["ncomp"] == 210, "%s" % d)


def test_smoother_option_errors_name_the_smoother():
    A = gallery.poisson2d(24, COMM)
    assert_raises_collective(COMM, ValueError, preconditioners.make, "amg", A,
                             presmoother=("sor", {"omega": 2.0}),
                             match="smoother 'gauss-seidel': omega must be")


# -- 4. the symmetric attribute ------------------------------------------------------------

GS_FORWARD = ("gauss-seidel", {"sweep": "forward"})
GS_BACKWARD = ("gauss-seidel", {"sweep": "backward"})

# (id, name, options, claim, nonsymmetry shows at one rank): every registered
# preconditioner with the option sets the suite uses, and the arrangements
# that make a cycle nonsymmetric
SYMMETRY = [
    ("none", "none", {}, True, True),
    ("jacobi", "jacobi", {"omega": 0.7}, True, True),
    ("cheby", "cheby", {"degree": 3}, True, True),
    ("cheby-4", "cheby", {"degree": 4}, True, True),
    ("bjacobi-ilu0", "bjacobi", {"sub": "ilu0"}, True, True),
    ("bjacobi-lu", "bjacobi", {"sub": "lu"}, True, True),
    ("bjacobi-ilut", "bjacobi", {"sub": "ilut"}, False, True),
    ("ras-overlap1", "asm", {"overlap": 1}, False, False),
    ("ras-overlap2-lu", "asm", {"overlap": 2, "sub": "lu"}, False, False),
    ("ras-overlap0", "asm", {"overlap": 0}, True, True),
    ("asm-ilu0", "asm", {"overlap": 1, "restricted": False}, True, True),
    ("asm-lu", "asm", {"overlap": 1, "sub": "lu", "restricted": False}, True, True),
    ("asm-ilut", "asm", {"overlap": 1, "sub": "ilut", "restricted": False}, False, True),
    ("amg", "amg", {}, True, True),
    ("amg-W", "amg", {"cycle": "W", "max_coarse": 20}, True, True),
    ("amg-jacobi", "amg", {"presmoother": "jacobi", "postsmoother": "jacobi"}, True, True),
    ("amg-l1-jacobi", "amg", {"presmoother": "l1-jacobi", "postsmoother": "l1-jacobi"},
     True, True),
    ("amg-chebyshev", "amg", {"presmoother": ("chebyshev", {"degree": 3}),
                              "postsmoother": ("chebyshev", {"degree": 3})}, True, True),
    ("amg-sor", "amg", {"presmoother": ("sor", {"omega": 1.2}),
                        "postsmoother": ("sor", {"omega": 1.2})}, True, True),
    ("amg-unsmoothed", "amg", {"smooth": "none", "max_coarse": 20}, True, True),
    ("amg-forward-backward", "amg", {"presmoother": GS_FORWARD, "postsmoother": GS_BACKWARD},
     True, True),
    ("amg-forward-forward", "amg", {"presmoother": GS_FORWARD, "postsmoother": GS_FORWARD},
     False, True),
    ("amg-jacobi-l1", "amg", {"presmoother": "jacobi", "postsmoother": "l1-jacobi"},
     False, True),
    ("amg-jacobi-iterations", "amg", {"presmoother": ("jacobi", {"iterations": 2}),
                                      "postsmoother": "jacobi"}, False, True),
    ("amg-relaxed-forward-backward", "amg", {"max_levels": 1, "max_dense_coarse": 10,
                                             "presmoother": GS_FORWARD,
                                             "postsmoother": GS_BACKWARD}, True, True),
    ("amg-relaxed-forward-forward", "amg", {"max_levels": 1, "max_dense_coarse": 10,
                                            "presmoother": GS_FORWARD,
                                            "postsmoother": GS_FORWARD}, False, True),
    ("gemslr", "gemslr", GEMSLR, False, True),
    ("gemslr-no-low-rank", "gemslr", dict(GEMSLR, lr_rank=0), False, True),
    ("gemslr-bjacobi-last", "gemslr", dict(GEMSLR, last_level="bjacobi"), False, True),
]


def _symmetric_matrix(comm):
    """``D L D``: a 2D Laplacian of 900 rows (sparse, so overlap 2 does not
    cover the matrix) scaled symmetrically by a varying positive diagonal (so
    no preconditioner is symmetric by accident of a constant stencil); the
    same at every rank count."""
    A = gallery.poisson2d(30, comm)
    i = np.arange(*A.row_layout.owned_range)
    d = DistVector(A.row_layout, 1.0 + 0.5 * np.sin(1.7 * i))
    return A.scale(left=d, right=d)


def _asymmetry(M, A):
    u, v = gallery.rhs(A, "random", seed=1), gallery.rhs(A, "random", seed=2)
    Mv, Mu = M(v), M(u)
    return abs(u.dot(Mv) - v.dot(Mu)) / (u.norm() * Mv.norm())


def _symmetry_params():
    out = []
    for case, name, opts, claim, at_one_rank in SYMMETRY:
        marks = [] if claim or at_one_rank else [pytest.mark.mpi(min_size=2)]
        out.append(pytest.param(name, opts, claim, id=case, marks=marks))
    return out


@pytest.mark.parametrize("name,opts,claim", _symmetry_params())
def test_symmetric_claim_holds_numerically(name, opts, claim):
    A = _symmetric_matrix(COMM)
    M = preconditioners.make(name, A, **opts)
    asym = _asymmetry(M, A)
    with Checks(COMM) as checks:
        checks.add(M.symmetric is claim, "claim", M.symmetric)
        if claim:
            checks.add(asym <= 1e-12, "claimed symmetric, x^T M y - y^T M x = %.2e" % asym)
        else:
            checks.add(asym >= 1e-8, "claimed nonsymmetric, x^T M y - y^T M x = %.2e" % asym)
    assert_collective(COMM, same_on_all_ranks(COMM, M.symmetric), "the same on every rank")


@pytest.mark.parametrize("name,opts", [("asm", {"overlap": 1}), ("gemslr", GEMSLR)],
                         ids=["ras", "gemslr"])
def test_symmetric_claim_does_not_depend_on_the_rank_count(name, opts):
    # the claim of a nonsymmetric preconditioner stays False on one rank,
    # where restricted Schwarz has no overlap and happens to be symmetric
    A = _symmetric_matrix(MPI.COMM_SELF)
    M = preconditioners.make(name, A, **opts)
    assert_collective(COMM, M.symmetric is False, "%s on one rank: %s" % (name, M.symmetric))


def test_symmetric_is_a_property_of_every_preconditioner():
    # every registered preconditioner is in SYMMETRY, and says it as a
    # property (no communication); a subclass that does not say is unknown
    covered = {name for _, name, _, _, _ in SYMMETRY}
    classes = [dmsolve.PRECONDITIONERS[n] for n in preconditioners.available()]
    assert_collective(COMM, covered == set(preconditioners.available()),
                      "%s vs %s" % (sorted(covered), preconditioners.available()))
    assert_collective(COMM, all(isinstance(getattr(c, "symmetric", None), property)
                                or isinstance(getattr(c, "symmetric", None), bool)
                                for c in classes), "symmetric is a property")

    class Scaled(dmsolve.Preconditioner):
        name = "scaled"

        def __init__(self, A):
            super().__init__(A)
            self._done()

        def _apply(self, r, out):
            out[:] = 0.5 * r

    class Said(Scaled):
        symmetric = True

    A = gallery.poisson2d(8, COMM)
    assert_collective(COMM, Scaled(A).symmetric is None and Said(A).symmetric is True,
                      "unknown by default, a class attribute overrides")


# -- 5. GeMSLR progress --------------------------------------------------------------------

def test_gemslr_progress_reports_each_stage_and_level_as_describe_does():
    A = gallery.shifted_laplacian(11, COMM, shift=0.2, ny=9, nz=13)
    seen = []
    M = preconditioners.make("gemslr", A, progress=lambda t, m, s: seen.append((t, m, s)),
                             **GEMSLR)
    d = M.describe()
    h = d["hierarchy"]
    want = ["order: %d levels, %d subdomains per level" % (d["nlev"], d["ncomp"])]
    want += ["level %d: %d rows, %d subdomains, %d interior, %d interface"
             % (L["level"], L["rows"], L["subdomains"], L["interior"], L["interface"])
             for L in h[:-1]]
    want.append("level %d (last): %d rows" % (h[-1]["level"], h[-1]["rows"]))
    want.append("factor: %d ILUT nonzeros, %.3f of nnz(A)"
                % (round(d["fill_ilu"] * A.global_nnz()), d["fill_ilu"]))
    want += ["low rank level %d: rank %d, %d converged, %d restarts, %d Arnoldi steps"
             % (L["level"], L["rank"], L["converged"], L["restarts"], L["arnoldi_steps"])
             for L in reversed(h[:-1])]
    want.append("done: %d levels" % d["nlev"])
    messages = [m for _, m, _ in seen]
    seconds = [s for _, _, s in seen]
    with Checks(COMM) as checks:
        checks.add(messages == want, "reports", (messages, want))
        checks.add(all(t == "gemslr" for t, _, _ in seen), "task")
        checks.add(all(b >= a >= 0 for a, b in zip(seconds, seconds[1:])), "seconds", seconds)
    assert_collective(COMM, same_on_all_ranks(COMM, messages), "the same reports on every rank")
