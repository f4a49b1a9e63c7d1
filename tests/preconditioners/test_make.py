"""Preconditioners made by name (``preconditioners.make``): the registry and
descriptors, keyword-only options, the apply contract (``out``, call, linear
operator, no allocation), set-up errors and bad options raised on every rank,
the ``symmetric`` claim, and complex systems (served, or refused at the door)."""

import numpy as np
import pytest
import scipy.linalg as sla
import scipy.sparse as sp
from mpi4py import MPI
from scipy.sparse.linalg import spilu, splu

import dmsolve
import dmsolve.gallery as gallery
import preconditioners
from dmsolve import DistCSR, DistVector
from mpitest import (Checks, assert_allclose_collective, assert_collective,
                     assert_raises_collective, same_on_all_ranks)
from operands import dominant, vector


# -- preconditioners -------------------------------------------------------------------

def ilu0_reference(B: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
    """ILU(0) by the textbook IKJ loop (Saad, Algorithm 10.4) on a dense copy,
    updates restricted to the pattern: unit lower L, upper U."""
    n = B.shape[0]
    pattern = np.zeros((n, n), dtype=bool)
    C = B.tocoo()
    pattern[C.row, C.col] = True
    LU = B.toarray().astype(np.complex128)
    for i in range(1, n):
        for k in range(i):
            if pattern[i, k]:
                LU[i, k] /= LU[k, k]
                for j in range(k + 1, n):
                    if pattern[i, j]:
                        LU[i, j] -= LU[i, k] * LU[k, j]
    return np.tril(LU, -1) + np.eye(n), np.triu(LU)


def local_solve_reference(sub, B: sp.csr_matrix, b: np.ndarray) -> np.ndarray:
    if B.shape[0] == 0:
        return b.copy()
    if sub == "lu":
        return splu(B.tocsc()).solve(b)
    if sub == "ilut":
        return spilu(B.tocsc(), drop_tol=1e-4, fill_factor=10.0).solve(b)
    L, U = ilu0_reference(B)
    return sla.solve_triangular(U, sla.solve_triangular(L, b, lower=True))


def schwarz_reference(M, ranges, r, overlap, sub, restricted):
    """Additive Schwarz, serially: each rank's rows grown by ``overlap``
    layers of the matrix graph, solved there; the owned part kept (restricted)
    or every part added back."""
    out = np.zeros(M.shape[0], dtype=np.complex128)
    for p in range(len(ranges) - 1):
        s, e = ranges[p], ranges[p + 1]
        ids = np.arange(s, e)
        for _ in range(overlap):
            ids = np.union1d(ids, M[ids].indices)
        z = local_solve_reference(sub, sp.csr_matrix(M[ids][:, ids]), r[ids])
        if restricted:
            out[s:e] = z[np.searchsorted(ids, np.arange(s, e))]
        else:
            out[ids] += z
    return out


def apply_all(M, A, r):
    out = M.apply(DistVector.from_global(r, A.row_layout))
    return out.gather()


PCS = {
    "jacobi": ("jacobi", {}),
    "bjacobi-ilu0": ("bjacobi", {"sub": "ilu0"}),
    "bjacobi-ilut": ("bjacobi", {"sub": "ilut"}),
    "bjacobi-lu": ("bjacobi", {"sub": "lu"}),
    "asm-0-lu": ("asm", {"overlap": 0, "sub": "lu"}),
    "asm-1-lu": ("asm", {"overlap": 1, "sub": "lu"}),
    "asm-2-ilu0": ("asm", {"overlap": 2, "sub": "ilu0"}),
    "asm-1-ilut": ("asm", {"overlap": 1, "sub": "ilut"}),
    "asm-1-lu-classical": ("asm", {"overlap": 1, "sub": "lu", "restricted": False}),
    "asm-2-ilu0-classical": ("asm", {"overlap": 2, "sub": "ilu0", "restricted": False}),
}


def pc_reference(name, opts, M, ranges, r):
    if name == "jacobi":
        return r / M.diagonal()
    if name == "bjacobi":
        return schwarz_reference(M, ranges, r, 0, opts["sub"], True)
    return schwarz_reference(M, ranges, r, opts["overlap"], opts["sub"],
                             opts.get("restricted", True))


@pytest.mark.parametrize("case", list(PCS), ids=list(PCS))
def test_complex_preconditioners_match_serial_references(comm, case):
    """Preconditioners that take complex systems match their serial references."""
    name, opts = PCS[case]
    n = 41
    M = dominant(n, seed=21)
    A = DistCSR.from_global(M, comm)
    P = preconditioners.make(name, A, **opts)
    ranges = A.row_layout.ranges
    for kind in ("complex", "real"):
        r = vector(n, 7, kind)
        got = apply_all(P, A, r)
        assert_collective(comm, got.dtype == np.complex128, "M r dtype %s" % got.dtype)
        assert_allclose_collective(got, pc_reference(name, opts, M, ranges,
                                                     r.astype(np.complex128)),
                                   comm, rtol=1e-11, atol=1e-12, err_msg=kind + " r")
    out = DistVector.zeros(A.row_layout, np.complex128)
    r = DistVector.from_global(vector(n, 8, "complex"), A.row_layout)
    assert_collective(comm, P.apply(r, out) is out)
    assert_raises_collective(comm, TypeError, P.apply, r, DistVector.zeros(A.row_layout),
                             match="complex")


@pytest.mark.parametrize("case", list(PCS), ids=list(PCS))
def test_real_preconditioners_apply_to_complex_vectors_by_linearity(comm, case):
    """Preconditioners built on a real A apply to complex vectors by linearity."""
    name, opts = PCS[case]
    n = 41
    A = DistCSR.from_global(dominant(n, seed=22, kind="real"), comm)
    P = preconditioners.make(name, A, **opts)
    r = vector(n, 9, "complex")
    re, im = apply_all(P, A, r.real.copy()), apply_all(P, A, r.imag.copy())
    got = apply_all(P, A, r)
    assert_collective(comm, got.dtype == np.complex128, "M r dtype %s" % got.dtype)
    assert_allclose_collective(got, re + 1j * im, comm, rtol=1e-13, atol=1e-14)


REAL_ONLY = {"amg": {}, "cheby": {}, "gemslr": {"nlev": 2}}


@pytest.mark.parametrize("name", list(REAL_ONLY))
def test_real_only_preconditioners_refuse_complex_at_the_door(comm, name):
    """Preconditioners for real systems only refuse a complex A at the door, on every rank."""
    n = 60
    A = DistCSR.from_global(dominant(n, seed=23), comm)
    assert_raises_collective(comm, TypeError, preconditioners.make, name, A,
                             **REAL_ONLY[name],
                             match="%s supports real matrices; for complex systems use "
                                   "jacobi, bjacobi or asm" % name)
    R = DistCSR.from_global(dominant(n, seed=23, kind="real"), comm)
    P = preconditioners.make(name, R, **REAL_ONLY[name])
    r = DistVector.from_global(vector(n, 3, "complex"), R.row_layout)
    assert_raises_collective(comm, TypeError, P.apply, r,
                             match="%s supports real vectors" % name)
    rr = DistVector.from_global(vector(n, 3, "real"), R.row_layout)
    assert_collective(comm, np.all(np.isfinite(P.apply(rr).local)))


COMM = MPI.COMM_WORLD


# -- interface -------------------------------------------------------------------------

def test_registry_names_and_descriptors():
    """The registry names every preconditioner and takes ``(name, options)`` descriptors."""
    for name in ("none", "jacobi", "bjacobi", "asm", "cheby", "amg"):
        assert name in preconditioners.available()
    A = gallery.poisson2d(13, COMM)
    M = preconditioners.make(("asm", {"overlap": 2}), A, sub="lu")
    d = M.describe()
    assert d["name"] == "asm" and d["overlap"] == 2 and d["sub"] == "lu"
    assert d["setup_seconds"] >= 0
    assert_raises_collective(COMM, ValueError, preconditioners.make, "nope", A,
                             match="unknown preconditioner")
    assert_raises_collective(COMM, TypeError, preconditioners.make, ("asm", 3), A)


@pytest.mark.parametrize("cls, args", [
    (preconditioners.Chebyshev, (3,)),
    (preconditioners.SmoothedAggregation, (None, 0.1)),
    (preconditioners.GeMSLR, (2,)),
], ids=["cheby", "amg", "gemslr"])
def test_options_after_the_matrix_are_keyword_only(cls, args):
    """Options are given by name (as make passes them); a positional one
    raises TypeError on every rank before anything is built."""
    A = gallery.poisson2d(13, COMM)
    assert_raises_collective(COMM, TypeError, cls, A, *args, match="positional")


@pytest.mark.parametrize("name,opts", [("none", {}), ("jacobi", {"omega": 0.7}),
                                       ("bjacobi", {}), ("asm", {"overlap": 1}),
                                       ("asm", {"overlap": 1, "restricted": False}),
                                       ("cheby", {"degree": 3}), ("amg", {})],
                         ids=["none", "jacobi", "bjacobi", "ras", "asm", "cheby", "amg"])
def test_apply_out_call_and_linear_operator(name, opts):
    """apply with and without ``out``, the call and the linear operator give the same result."""
    A = gallery.poisson2d(23, COMM)
    M = preconditioners.make(name, A, **opts)
    r = gallery.rhs(A, "random")
    r_copy = r.local.copy()
    out = DistVector.zeros(A.row_layout)
    y = M.apply(r, out=out)
    assert y is out
    assert_allclose_collective(M(r).local, out.local, rtol=1e-13)
    assert_allclose_collective(M.as_linear_operator().matvec(r).local, out.local, rtol=1e-13)
    assert_allclose_collective(r.local, r_copy, rtol=0)         # r not mutated
    # linear: M(2r) = 2 M(r)
    assert_allclose_collective(M.apply(r * 2.0).local, 2 * out.local, rtol=1e-10, atol=1e-12)


# -- set-up errors on every rank -------------------------------------------------------------

def _matrix_with_bad_row(kind):
    """A 2D Poisson matrix whose last global row is broken (owned by the last
    rank only): the other ranks must raise too."""
    A = gallery.poisson2d(9, COMM)
    loc = A.local_rows().tolil()
    n = A.shape[0]
    start, stop = A.row_layout.owned_range
    if start <= n - 1 < stop:
        i = n - 1 - start
        if kind == "zero":
            loc[i, n - 1] = 0.0
        else:
            loc[i, :] = 0.0
    loc = loc.tocsr()
    loc.eliminate_zeros()
    if kind == "nan":
        loc.data[loc.indptr[-1] - 1:] = np.nan if start <= n - 1 < stop else loc.data[-1:]
    return DistCSR.from_local_rows(loc, A.row_layout, check_finite=False)


@pytest.mark.parametrize("name,opts", [("jacobi", {}), ("bjacobi", {"sub": "ilu0"}),
                                       ("bjacobi", {"sub": "lu"}), ("asm", {"sub": "ilu0"}),
                                       ("cheby", {})],
                         ids=["jacobi", "bjacobi-ilu0", "bjacobi-lu", "asm-ilu0", "cheby"])
def test_zero_pivot_is_an_error_on_every_rank(name, opts):
    """A zero pivot in the last rank's rows is an error on every rank."""
    A = _matrix_with_bad_row("row")
    assert_raises_collective(COMM, ValueError, preconditioners.make, name, A, **opts,
                             match="pivot|diagonal|singular")


@pytest.mark.parametrize("sub", ["ilu0", "lu"])
def test_nonfinite_entry_is_an_error_on_every_rank(sub):
    """A non-finite entry in the last rank's rows is an error on every rank."""
    A = _matrix_with_bad_row("nan")
    assert_raises_collective(COMM, ValueError, preconditioners.make, "bjacobi", A, sub=sub,
                             match="non-finite")


def test_bad_options_raise_everywhere():
    """Bad options of bjacobi, asm and cheby raise on every rank."""
    A = gallery.poisson2d(9, COMM)
    assert_raises_collective(COMM, ValueError, preconditioners.make, "bjacobi", A, sub="qr")
    assert_raises_collective(COMM, ValueError, preconditioners.make, "asm", A, overlap=-1)
    assert_raises_collective(COMM, ValueError, preconditioners.make, "cheby", A, degree=0)


# -- apply allocates nothing -----------------------------------------------------------

@pytest.mark.parametrize("name,opts", [
    ("jacobi", {}), ("bjacobi", {"sub": "ilu0"}), ("bjacobi", {"sub": "ilut"}),
    ("bjacobi", {"sub": "lu"}), ("asm", {"overlap": 1}), ("cheby", {}),
    ("amg", {}), ("amg", {"presmoother": "jacobi", "postsmoother": "jacobi"}),
])
def test_apply_allocates_no_vector(name, opts):
    """After a warm-up call, ``M.apply(r, out)`` allocates less than a quarter of
    one local vector (numpy reports its buffers to tracemalloc)."""
    import tracemalloc
    A = gallery.poisson2d(96, COMM)
    M = preconditioners.make(name, A, **opts)
    r = gallery.rhs(A, "random")
    out = r.zeros_like()
    M.apply(r, out)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for _ in range(3):
            M.apply(r, out)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert_collective(COMM, peak < 2 * r.local_size,
                      "%s apply allocated %d bytes (local vector: %d bytes)"
                      % (name, peak, 8 * r.local_size))


GEMSLR = dict(nlev=3, ncomp=4, ilu_droptol=1e-3, ilu_max_row_nnz=50)


# -- options accepted silently, or looping ---------------------------------------------

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
    """Each bad option (too large, out of range, of the wrong type) is refused on every rank."""
    A = gallery.poisson2d(12, COMM)
    assert_raises_collective(COMM, exc, preconditioners.make, name, A, match=match, **opts)


# -- the symmetric attribute ------------------------------------------------------------

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
    """A preconditioner that claims to be symmetric is, numerically."""
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
    """The symmetric claim is the same at any rank count."""
    # the claim of a nonsymmetric preconditioner stays False on one rank,
    # where restricted Schwarz has no overlap and happens to be symmetric
    A = _symmetric_matrix(MPI.COMM_SELF)
    M = preconditioners.make(name, A, **opts)
    assert_collective(COMM, M.symmetric is False, "%s on one rank: %s" % (name, M.symmetric))


def test_symmetric_is_a_property_of_every_preconditioner():
    """Every preconditioner says whether it is symmetric, as a property."""
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
