"""Complex systems through the Krylov methods, against scipy at 1-4 ranks.

CG, pipelined CG and MINRES solve Hermitian systems (the inner products
conjugate their first argument, ``np.vdot``), GMRES, FGMRES and BiCGStab
general complex ones, with no preconditioner, jacobi, bjacobi and asm. A
complex ``A``, a complex ``b`` or a complex ``x0`` makes the solve complex.
What cannot take a complex system (amg, cheby, gemslr, checkpoints) is a
TypeError at the door on every rank.
"""

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import dmsolve
import preconditioners
from dmsolve import ConvergedReason, DistCSR, DistLinearOperator, DistVector, krylov
from dmsolve import checkpoint as ck
from mpitest import assert_allclose_collective, assert_collective, assert_raises_collective

HERMITIAN_METHODS = ["cg", "pipecg", "minres", "gmres", "fgmres", "bicgstab"]
GENERAL_METHODS = ["gmres", "fgmres", "bicgstab"]
PCS = [None, "jacobi", "bjacobi", "asm"]
RTOL = 1e-9


def laplacian(n):
    T = sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1])
    return sp.csr_matrix(sp.kron(T, sp.eye(n)) + sp.kron(sp.eye(n), T))


def hermitian(n=14, seed=1):
    """Hermitian positive definite: a 2D Laplacian plus i times a sparse
    skew-symmetric real matrix (Hermitian, with no real symmetry)."""
    L = laplacian(n)
    N = L.shape[0]
    S = sp.random(N, N, density=3.0 / N, random_state=seed)
    return sp.csr_matrix(L + 0.3j * (S - S.T) + 0.5 * sp.eye(N))


def general(n=14, seed=2):
    """Nonsymmetric, non-Hermitian: a Laplacian with a complex diagonal shift
    and a random real perturbation."""
    L = laplacian(n)
    N = L.shape[0]
    R = sp.random(N, N, density=2.0 / N, random_state=seed)
    return sp.csr_matrix(L + 0.4j * sp.diags(np.linspace(0.1, 1.0, N)) + 0.2 * R)


def complex_rhs(N, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(N) + 1j * rng.standard_normal(N)


def make_pc(pc, A, method):
    if pc is None:
        return None
    if pc == "asm" and method in ("cg", "pipecg", "minres"):
        return preconditioners.make("asm", A, restricted=False)   # symmetric variant
    return preconditioners.make(pc, A)


def check_solution(comm, A, b, x, info, what):
    """x is complex, converged, with a true relative residual at the
    tolerance (up to TRUTH_SLACK in a preconditioned norm) and the solution
    of scipy's direct solver."""
    ref = spla.spsolve(sp.csc_matrix(A), b)
    xg = x.gather()
    assert_collective(comm, x.dtype == np.complex128, "%s: x has dtype %s" % (what, x.dtype))
    assert_collective(comm, info.converged and info.reason in (ConvergedReason.RTOL,
                                                                ConvergedReason.ATOL),
                      "%s: %s after %d" % (what, info.reason, info.iterations))
    true = np.linalg.norm(b - A @ xg) / np.linalg.norm(b)
    slack = 1.0 if info.norm_type == "unpreconditioned" else krylov._truth.TRUTH_SLACK
    assert_collective(comm, true <= RTOL * slack, "%s: true residual %.2e" % (what, true))
    assert_collective(comm, abs(info.true_residual_norm / np.linalg.norm(b) - true)
                      <= 1e-6 * max(true, 1e-300) + 1e-15,
                      "%s: reported %.3e, measured %.3e" % (what, info.true_residual_norm
                                                           / np.linalg.norm(b), true))
    err = np.linalg.norm(xg - ref) / np.linalg.norm(ref)
    assert_collective(comm, err <= 1e-6, "%s: error %.2e against spsolve" % (what, err))


@pytest.mark.parametrize("pc", PCS, ids=str)
@pytest.mark.parametrize("method", HERMITIAN_METHODS)
def test_hermitian_system_matches_spsolve(comm, method, pc):
    Ag = hermitian()
    b = complex_rhs(Ag.shape[0])
    A = DistCSR.from_global(Ag, comm)
    assert_collective(comm, A.dtype == np.complex128)
    x, info = getattr(krylov, method)(A, DistVector.from_global(b, A.row_layout),
                                      rtol=RTOL, M=make_pc(pc, A, method), maxiter=2000)
    check_solution(comm, Ag, b, x, info, "%s+%s" % (method, pc))


@pytest.mark.parametrize("pc", PCS, ids=str)
@pytest.mark.parametrize("method", GENERAL_METHODS)
def test_general_complex_system_matches_spsolve(comm, method, pc):
    Ag = general()
    b = complex_rhs(Ag.shape[0], seed=5)
    A = DistCSR.from_global(Ag, comm)
    x, info = getattr(krylov, method)(A, DistVector.from_global(b, A.row_layout),
                                      rtol=RTOL, M=make_pc(pc, A, method), maxiter=2000)
    check_solution(comm, Ag, b, x, info, "%s+%s" % (method, pc))


@pytest.mark.parametrize("orthog", ["cgs", "cgs2", "mgs"])
def test_gmres_complex_with_every_orthogonalisation_and_restarts(comm, orthog):
    Ag = general(12)
    b = complex_rhs(Ag.shape[0], seed=3)
    A = DistCSR.from_global(Ag, comm)
    x, info = krylov.gmres(A, DistVector.from_global(b, A.row_layout), rtol=RTOL,
                           restart=7, orthog=orthog, maxiter=3000)
    check_solution(comm, Ag, b, x, info, "gmres/%s" % orthog)
    assert_collective(comm, info.iterations > 7, "no restart exercised")


@pytest.mark.parametrize("method", ["cg", "gmres", "bicgstab"])
def test_iteration_counts_follow_scipy(comm, method):
    # the same Krylov space and the same stopping test: scipy's complex
    # solvers take the same number of iterations, up to rounding (+-1)
    Ag = hermitian(12)
    b = complex_rhs(Ag.shape[0], seed=7)
    count = [0]

    def cb(*_):
        count[0] += 1

    kw = {"restart": 1000} if method == "gmres" else {}
    if method == "gmres":
        kw["callback_type"] = "pr_norm"
    getattr(spla, method)(Ag, b, rtol=1e-8, atol=0.0, maxiter=1000, callback=cb, **kw)
    A = DistCSR.from_global(Ag, comm)
    _, info = getattr(krylov, method)(A, DistVector.from_global(b, A.row_layout), rtol=1e-8,
                                      **({"restart": 1000} if method == "gmres" else {}))
    assert_collective(comm, info.converged and abs(info.iterations - count[0]) <= 1,
                      "%s: %d iterations, scipy %d" % (method, info.iterations, count[0]))


@pytest.mark.parametrize("method", ["cg", "gmres", "bicgstab", "minres"])
def test_real_matrix_with_complex_rhs(comm, method):
    # a real A and a complex b: a complex solve, x = A^{-1} Re b + i A^{-1} Im b
    Ag = sp.csr_matrix(laplacian(12) + 0.5 * sp.eye(144))
    b = complex_rhs(144, seed=11)
    A = DistCSR.from_global(Ag, comm)
    assert_collective(comm, A.dtype == np.float64)
    x, info = getattr(krylov, method)(A, DistVector.from_global(b, A.row_layout), rtol=RTOL,
                                      M=preconditioners.make("jacobi", A))
    check_solution(comm, Ag, b, x, info, method)


@pytest.mark.parametrize("method", ["gmres", "bicgstab"])
def test_complex_matrix_with_real_rhs_and_complex_x0(comm, method):
    Ag = general(10)
    N = Ag.shape[0]
    b = np.random.default_rng(4).standard_normal(N)
    A = DistCSR.from_global(Ag, comm)
    bv = DistVector.from_global(b, A.row_layout)
    assert_collective(comm, bv.dtype == np.float64)
    x0 = DistVector.from_global(1j * np.ones(N), A.row_layout)
    x, info = getattr(krylov, method)(A, bv, x0, rtol=RTOL)
    check_solution(comm, Ag, b, x, info, method)
    assert_collective(comm, np.all(x0.local == 1j), "x0 modified")
    # a real A and b with a complex x0 is a complex solve too
    Ar = DistCSR.from_global(sp.csr_matrix(laplacian(10)), comm)
    x, info = getattr(krylov, method)(Ar, bv, x0, rtol=RTOL)
    check_solution(comm, laplacian(10), b, x, info, method + "/complex-x0")


def test_solve_takes_scipy_complex_inputs(comm):
    # the scipy way: the same global matrix and numpy b on every rank
    Ag = hermitian(10)
    b = complex_rhs(Ag.shape[0], seed=2)
    x, info = dmsolve.solve(Ag, b, "cg", "jacobi", rtol=RTOL, comm=comm)
    ref = spla.spsolve(sp.csc_matrix(Ag), b)
    assert_allclose_collective(x, ref, comm, rtol=1e-6)
    assert_collective(comm, info.converged)
    # and a complex scipy LinearOperator
    op = spla.aslinearoperator(Ag)
    assert_collective(comm, op.dtype.kind == "c")
    x, info = dmsolve.solve(op, b, "gmres", rtol=RTOL, comm=comm)
    assert_allclose_collective(x, ref, comm, rtol=1e-6)


def test_complex_distlinearoperator(comm):
    Ag = general(9)
    A = DistCSR.from_global(Ag, comm)
    op = DistLinearOperator(A.row_layout, A.col_layout, A.matvec, dtype=np.complex128)
    b = complex_rhs(Ag.shape[0], seed=9)
    x, info = krylov.bicgstab(op, DistVector.from_global(b, A.row_layout), rtol=RTOL)
    check_solution(comm, Ag, b, x, info, "operator")


def test_hermitian_null_space(comm):
    # a gauge-transformed graph Laplacian D^H L D (D a diagonal of phases) is
    # Hermitian positive semi-definite with null vector conj(d)
    n = 10
    L = laplacian(n).tolil()
    L.setdiag(0)
    L = sp.csr_matrix(L)
    L = sp.csr_matrix(sp.diags(-np.asarray(L.sum(axis=1)).ravel()) + L)     # Neumann: L 1 = 0
    N = L.shape[0]
    d = np.exp(1j * np.linspace(0.0, 3.0, N))
    D = sp.diags(d)
    Ag = sp.csr_matrix(D.conj() @ L @ D)
    q = d.conj()
    assert np.linalg.norm(Ag @ q) < 1e-12
    rng = np.random.default_rng(1)
    xs = rng.standard_normal(N) + 1j * rng.standard_normal(N)
    b = Ag @ xs                                     # consistent
    A = DistCSR.from_global(Ag, comm)
    qv = DistVector.from_global(q, A.row_layout)
    for method in ("cg", "minres", "gmres"):
        x, info = getattr(krylov, method)(A, DistVector.from_global(b, A.row_layout),
                                          rtol=RTOL, nullspace=qv, maxiter=2000)
        xg = x.gather()
        true = np.linalg.norm(b - Ag @ xg) / np.linalg.norm(b)
        assert_collective(comm, info.converged and true <= RTOL * 1.01,
                          "%s: %s, true residual %.2e" % (method, info.reason, true))
        if method != "gmres":       # cg and minres iterate in the complement of q
            along = abs(np.vdot(q, xg)) / (np.linalg.norm(q) * np.linalg.norm(xg))
            assert_collective(comm, along < 1e-8, "%s: x along q %.2e" % (method, along))
    # and a vector that is not in the null space is refused
    bad = DistVector.from_global(np.ones(N, dtype=complex), A.row_layout)
    assert_raises_collective(comm, ValueError, krylov.cg, A,
                             DistVector.from_global(b, A.row_layout), nullspace=bad,
                             match="not in the null space")


@pytest.mark.parametrize("method", ["cg", "minres"])
def test_symmetry_check_needs_hermitian(comm, method):
    # complex symmetric (A^T = A) but not Hermitian: check=True refuses it
    Ag = sp.csr_matrix(laplacian(8) * (1.0 + 0.5j))
    A = DistCSR.from_global(Ag, comm)
    b = DistVector.from_global(complex_rhs(64), A.row_layout)
    assert_raises_collective(comm, ValueError, getattr(krylov, method), A, b, check=True,
                             match="symmetric")
    H = DistCSR.from_global(hermitian(8), comm)
    _, info = getattr(krylov, method)(H, DistVector.from_global(complex_rhs(64), H.row_layout),
                                      check=True, rtol=1e-8)
    assert_collective(comm, info.converged, str(info.reason))


def test_minres_shifted_hermitian_indefinite(comm):
    Ag = hermitian(10)
    N = Ag.shape[0]
    shift = 1.3              # inside the spectrum: A - shift I is indefinite
    b = complex_rhs(N, seed=6)
    A = DistCSR.from_global(Ag, comm)
    x, info = krylov.minres(A, DistVector.from_global(b, A.row_layout), shift=shift,
                            rtol=RTOL, maxiter=3000)
    As = sp.csr_matrix(Ag - shift * sp.eye(N))
    check_solution(comm, As, b, x, info, "minres shifted")


@pytest.mark.parametrize("name", ["amg", "cheby", "gemslr"])
def test_real_only_preconditioners_refused_for_a_complex_solve(comm, name):
    # built on a real A, applied in a complex solve (complex b): refused at
    # the door, before any iteration, on every rank
    Ar = DistCSR.from_global(sp.csr_matrix(laplacian(8) + 0.1 * sp.eye(64)), comm)
    M = preconditioners.make(name, Ar)
    b = DistVector.from_global(complex_rhs(64), Ar.row_layout)
    method = "gmres" if name == "gemslr" else "cg"
    assert_raises_collective(comm, TypeError, getattr(krylov, method), Ar, b, M=M,
                             match="real systems only")
    assert_raises_collective(comm, TypeError, dmsolve.solve, Ar, b, "gmres", name,
                             match="real systems only")
    # built on a complex A: refused by the preconditioner itself
    Ac = DistCSR.from_global(hermitian(8), comm)
    assert_raises_collective(comm, TypeError, dmsolve.solve, Ac, b, "gmres", name)


def test_checkpoint_of_a_complex_solve_is_refused(comm, shared_tmp_path):
    A = DistCSR.from_global(hermitian(8), comm)
    b = DistVector.from_global(complex_rhs(64), A.row_layout)
    cp = ck.Checkpointer(str(shared_tmp_path / "cx"), every=2)
    assert_raises_collective(comm, TypeError, krylov.cg, A, b, checkpoint=cp,
                             match="checkpoints hold real systems only")
    assert_raises_collective(comm, TypeError, dmsolve.solve, A, b, "gmres",
                             checkpoint=str(shared_tmp_path / "cx2"), checkpoint_every=2,
                             match="checkpoints hold real systems only")


def test_other_dtypes_still_refused(comm):
    A = DistCSR.from_global(hermitian(6), comm)
    b = DistVector.from_global(complex_rhs(36), A.row_layout)
    bad = DistVector(b.layout, np.array(["x"] * b.layout.local_size))
    assert_raises_collective(comm, TypeError, krylov.gmres, A, bad,
                             match="real and complex vectors")
