"""Problems the Krylov tests share: small scipy systems (the reference is the
gathered system), complex ones, and the true residual of a returned x."""

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from mpi4py import MPI

import dmsolve
from dmsolve import ConvergedReason, DistCSR, DistVector, Layout, krylov
from mpitest import assert_collective

COMM = MPI.COMM_WORLD
METHODS = ["cg", "pipecg", "gmres", "fgmres", "bicgstab", "minres"]


def path_matrix(n, neumann=False):
    T = sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1],
                 format="csr")
    if neumann:
        T = T.tolil()
        T[0, 0] = T[n - 1, n - 1] = 1.0
    return sp.csr_matrix(T)


def poisson2d(nx, ny):
    return sp.csr_matrix(sp.kron(sp.eye(ny), path_matrix(nx)) + sp.kron(path_matrix(ny), sp.eye(nx)))


def convdiff(n, wind=0.4):
    # upwind convection in x plus diffusion: nonsymmetric M-matrix
    D = sp.diags([-np.ones(n - 1), np.ones(n)], [-1, 0], format="csr")
    return sp.csr_matrix(poisson2d(n, n) + wind * sp.kron(sp.eye(n), D))


def neumann2d(nx, ny):
    # singular, null space = constants (graph Laplacian of the grid)
    return sp.csr_matrix(sp.kron(sp.eye(ny), path_matrix(nx, True))
                         + sp.kron(path_matrix(ny, True), sp.eye(nx)))


PROBLEMS = {
    "poisson2d": lambda: poisson2d(12, 11),                    # 132 rows
    # SPD with a varying diagonal, so that Jacobi is more than a scaling
    "varpoisson": lambda: sp.csr_matrix(poisson2d(12, 11)
                                        + sp.diags(np.linspace(0.0, 20.0, 132) ** 2 / 10)),
    "convdiff": lambda: convdiff(13),                          # 169 rows
    "indefinite": lambda: sp.csr_matrix(poisson2d(11, 9) - 1.5 * sp.eye(99)),
    "neumann": lambda: neumann2d(9, 11),                       # 99 rows, singular
    "path101": lambda: path_matrix(101),
}


_CACHE = {}


def problem(name):
    if name not in _CACHE:
        Ag = PROBLEMS[name]()
        n = Ag.shape[0]
        rng = np.random.default_rng(1234)
        if name == "neumann":
            bg = Ag @ rng.standard_normal(n)          # consistent
        else:
            bg = rng.standard_normal(n)
        _CACHE[name] = (Ag, bg)
    return _CACHE[name]


def reference(name):
    Ag, bg = problem(name)
    if name == "neumann":
        return np.linalg.lstsq(Ag.toarray(), bg, rcond=None)[0]   # minimum norm
    return spla.spsolve(Ag.tocsc(), bg)


def empty_last_layout(n, comm):
    """Block layout over all ranks but the last, which owns nothing."""
    p = comm.Get_size()
    if p == 1:
        return Layout.block(n, comm)
    inner = dmsolve.block_ranges(n, p - 1)
    return Layout(np.concatenate([inner, [n]]), comm)


def distribute(name, comm=COMM, layout=None):
    Ag, bg = problem(name)
    A = DistCSR.from_global(Ag, comm, layout=layout)
    b = DistVector.from_global(bg, A.row_layout)
    return A, b


def constants(A):
    return DistVector.full(A.col_layout, 1.0)


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


def true_residual(A, b, x, shift=0.0):
    """``||b - (A - shift I) x||_2`` from the gathered system (numpy)."""
    S = A.to_scipy()
    xg = x.gather()
    return float(np.linalg.norm(b.gather() - S @ xg + shift * xg))
