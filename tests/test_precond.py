"""Jacobi, block Jacobi, additive Schwarz and Chebyshev preconditioners, at any rank count."""

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

import dmsolve.gallery as gallery
import preconditioners
from dmsolve import DistCSR, DistVector
from dmsolve.krylov import cg, gmres, solve
from preconditioners._local import ILU0, check_local_solver, ilu0
from mpitest import assert_allclose_collective, assert_collective, assert_raises_collective

COMM = MPI.COMM_WORLD


def _iters(A, M, method=cg, rtol=1e-8, maxiter=3000):
    b = gallery.rhs(A, "random")
    x, info = method(A, b, rtol=rtol, M=M, maxiter=maxiter)
    assert_collective(COMM, info.converged, "%s did not converge: %s" % (M, info.reason))
    return info.iterations


# -- interface -------------------------------------------------------------------------

def test_registry_names_and_descriptors():
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


def test_jacobi_matches_serial():
    A = gallery.poisson3d(7, COMM)
    M = preconditioners.make("jacobi", A, omega=0.5)
    r = gallery.rhs(A, "random")
    S = A.to_scipy()
    assert_allclose_collective(M.apply(r).gather(), 0.5 * r.gather() / S.diagonal(), rtol=1e-15)


def test_ilu0_is_incomplete_lu_on_the_pattern():
    # dense reference ILU(0) (Saad, Alg. 10.4) on a small nonsymmetric matrix
    rng = np.random.default_rng(3)
    S = gallery.convection_diffusion(6, MPI.COMM_SELF).to_scipy()
    S = (S + sp.random(36, 36, density=0.05, random_state=4)).tocsr()
    W = S.toarray()
    pat = W != 0
    for i in range(1, 36):
        for k in range(i):
            if pat[i, k]:
                W[i, k] /= W[k, k]
                for j in range(k + 1, 36):
                    if pat[i, j]:
                        W[i, j] -= W[i, k] * W[k, j]
    L, U = ilu0(S)
    np.testing.assert_allclose(L.toarray(), np.tril(W, -1), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(U.toarray(), np.triu(W), rtol=1e-12, atol=1e-14)
    # the solver's split factors solve with the same L and U
    b = rng.standard_normal(36)
    ref = np.linalg.solve(np.triu(W), np.linalg.solve(np.tril(W, -1) + np.eye(36), b))
    out = np.empty(36)
    ILU0(S).solve(b, out)
    np.testing.assert_allclose(out, ref, rtol=1e-12)


def test_ilu0_missing_diagonal_is_named():
    S = sp.csr_matrix(np.array([[1.0, 2.0], [3.0, 0.0]]))
    S.eliminate_zeros()
    with pytest.raises(ValueError, match="no diagonal entry\\) at local row 1"):
        ilu0(S)


def test_asm_matches_serial_restricted_schwarz():
    A = gallery.poisson2d(11, COMM)
    S = A.to_scipy().tocsr()
    b = gallery.rhs(A, "random")
    bg = b.gather()
    R = A.row_layout.ranges
    for overlap, restricted in ((1, True), (2, True), (1, False)):
        M = preconditioners.make("asm", A, overlap=overlap, sub="lu", restricted=restricted)
        ref = np.zeros_like(bg)
        for p in range(COMM.size):
            own = np.arange(R[p], R[p + 1])
            ids = own
            for _ in range(overlap):
                ids = np.union1d(ids, S[ids].indices)
            sol = np.linalg.solve(S[ids][:, ids].toarray(), bg[ids])
            if restricted:
                ref[own] += sol[np.searchsorted(ids, own)]
            else:
                ref[ids] += sol
        assert_allclose_collective(M.apply(b).gather(), ref, rtol=1e-10, atol=1e-12)


# -- convergence ---------------------------------------------------------------------------

@pytest.mark.parametrize("problem", ["poisson2d-64", "poisson3d-16"])
def test_bjacobi_and_asm_reduce_cg_iterations(problem):
    A = gallery.poisson2d(64, COMM) if problem == "poisson2d-64" else gallery.poisson3d(16, COMM)
    plain = _iters(A, None)
    bj = _iters(A, preconditioners.make("bjacobi", A, sub="ilu0"))
    # CG needs a symmetric preconditioner: classical (not restricted) Schwarz
    asm = _iters(A, preconditioners.make("asm", A, overlap=1, restricted=False))
    cheb = _iters(A, preconditioners.make("cheby", A, degree=4))
    # the issue asks for fewer iterations; a 40% cut is the least we accept
    assert_collective(COMM, max(bj, asm, cheb) < 0.6 * plain,
                      "plain %d, bjacobi %d, asm %d, cheby %d" % (plain, bj, asm, cheb))


@pytest.mark.parametrize("problem", ["poisson2d-64", "poisson3d-16"])
def test_asm_overlap1_beats_bjacobi_gmres(problem):
    A = gallery.poisson2d(64, COMM) if problem == "poisson2d-64" else gallery.poisson3d(16, COMM)
    bj = _iters(A, preconditioners.make("bjacobi", A, sub="ilu0"), method=gmres)
    ras = _iters(A, preconditioners.make("asm", A, overlap=1, sub="ilu0"), method=gmres)
    if COMM.size == 1:   # one rank: no overlap exists, ASM is block Jacobi
        assert_collective(COMM, ras == bj, "asm %d, bjacobi %d" % (ras, bj))
    else:
        assert_collective(COMM, ras < bj, "asm %d, bjacobi %d" % (ras, bj))


def test_asm_overlap1_exact_solves_beats_bjacobi_cg():
    A = gallery.poisson2d(48, COMM)
    bj = _iters(A, preconditioners.make("bjacobi", A, sub="lu"))
    asm = _iters(A, preconditioners.make("asm", A, overlap=1, sub="lu", restricted=False))
    assert_collective(COMM, asm <= bj, "asm %d, bjacobi %d" % (asm, bj))


def test_gmres_asm_solves_convection_diffusion():
    A = gallery.convection_diffusion(48, COMM)
    b = gallery.rhs(A, "random")
    x, info = solve(A, b, method="gmres", pc=("asm", {"overlap": 1}), rtol=1e-8, maxiter=500)
    assert_collective(COMM, info.converged, str(info.reason))
    r = b - A.matvec(x)
    assert_collective(COMM, r.norm() <= 1e-7 * b.norm())
    plain = _iters(A, None, method=gmres, maxiter=5000)
    assert_collective(COMM, info.iterations < plain, "%d vs %d" % (info.iterations, plain))


def test_bjacobi_ilut_and_lu_with_gmres():
    A = gallery.convection_diffusion(32, COMM)
    for sub in ("ilut", "lu"):
        it = _iters(A, preconditioners.make("bjacobi", A, sub=sub), method=gmres)
        assert_collective(COMM, it < 60, "%s: %d" % (sub, it))


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
    A = _matrix_with_bad_row("row")
    assert_raises_collective(COMM, ValueError, preconditioners.make, name, A, **opts,
                             match="pivot|diagonal|singular")


@pytest.mark.parametrize("sub", ["ilu0", "lu"])
def test_nonfinite_entry_is_an_error_on_every_rank(sub):
    A = _matrix_with_bad_row("nan")
    assert_raises_collective(COMM, ValueError, preconditioners.make, "bjacobi", A, sub=sub,
                             match="non-finite")


def test_ilu0_zero_pivot_from_elimination():
    # [[1, 1], [1, 1]] has a nonzero diagonal but a zero second pivot
    S = sp.csr_matrix(np.array([[1.0, 1.0], [1.0, 1.0]]))
    with pytest.raises(ValueError, match="pivot"):
        ilu0(S)


def test_bad_options_raise_everywhere():
    A = gallery.poisson2d(9, COMM)
    assert_raises_collective(COMM, ValueError, preconditioners.make, "bjacobi", A, sub="qr")
    assert_raises_collective(COMM, ValueError, preconditioners.make, "asm", A, overlap=-1)
    assert_raises_collective(COMM, ValueError, preconditioners.make, "cheby", A, degree=0)


def test_local_solver_options_are_checked_and_completed():
    ilut = ("ilut", {"drop_tol": 1e-3, "fill_factor": 10.0})
    assert check_local_solver("ILUT", {"drop_tol": 1e-3}) == ilut
    assert check_local_solver("lu", None) == ("lu", {})
    with pytest.raises(TypeError, match="drop_tol"):
        check_local_solver("ilu0", {"drop_tol": 1e-3})
    with pytest.raises(ValueError, match="unknown local solver 'qr'; available: ilu0, ilut, lu"):
        check_local_solver("qr")


def test_ilut_options_reach_the_factorisation():
    A = gallery.poisson2d(24, COMM)
    loose = preconditioners.make("bjacobi", A, sub="ilut", sub_options={"drop_tol": 0.5})
    tight = preconditioners.make("bjacobi", A, sub="ilut", sub_options={"drop_tol": 0.0})
    nnz = COMM.allreduce(loose.solver.nnz), COMM.allreduce(tight.solver.nnz)
    assert_collective(COMM, nnz[0] < nnz[1], "factor nonzeros %d (0.5) vs %d (0.0)" % nnz)


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
