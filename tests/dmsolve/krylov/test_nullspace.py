"""The null space of a Krylov solve (dmsolve.krylov NullSpace): iterates kept
orthogonal to it, its vectors checked at the door, the part of b it removes
reported, and a right-hand side in it not taken for convergence; real and
Hermitian systems, against numpy on the gathered system."""

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

import dmsolve
from bad_inputs import check_bad_input, other_size
from dmsolve import ConvergedReason, DistCSR, DistVector, gallery, krylov, solve
from krylov_cases import METHODS, RTOL, constants, distribute, laplacian, reference
from mpitest import Checks, assert_allclose_collective, assert_collective, assert_raises_collective

COMM = MPI.COMM_WORLD


def test_nullspace_keeps_iterates_orthogonal():
    """With a null space, every iterate stays orthogonal to it and x is the minimum-norm
    solution."""
    A, b = distribute("neumann")
    ones = constants(A)
    for method in ("cg", "pipecg", "minres", "gmres", "fgmres", "bicgstab"):
        x, info = getattr(dmsolve, method)(A, b, rtol=1e-8, nullspace=[ones], maxiter=500)
        assert_collective(COMM, info.converged, "%s %s" % (method, info))
        assert_collective(COMM, abs(x.sum()) <= 1e-8 * x.norm() * A.shape[0],
                          "%s: sum %g" % (method, x.sum()))
    # an inconsistent b (constant shift) is made consistent for symmetric methods
    b2 = b.copy()
    b2.local += 0.5
    x, info = dmsolve.cg(A, b2, rtol=1e-10, nullspace=ones)
    assert_collective(COMM, info.converged)
    assert_allclose_collective(x.gather(), reference("neumann"), rtol=1e-6, atol=1e-9)


def test_nullspace_checks():
    """Null-space vectors of the wrong layout or linearly dependent ones are refused."""
    A, b = distribute("neumann")
    ones = constants(A)
    assert_raises_collective(COMM, ValueError, dmsolve.cg, A, b,
                             nullspace=[ones, ones.copy()], match="dependent")
    assert_raises_collective(COMM, ValueError, dmsolve.cg, A, b, nullspace=[])


# -- the null space is tested -------------------------------------------------------

def _neumann(comm, nx=9, ny=11):
    def path(n):
        T = sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1]).tolil()
        T[0, 0] = T[n - 1, n - 1] = 1.0
        return sp.csr_matrix(T)
    S = sp.csr_matrix(sp.kron(sp.eye(ny), path(nx)) + sp.kron(path(ny), sp.eye(nx)))
    return DistCSR.from_global(S, comm), S


@pytest.mark.parametrize("method", METHODS)
def test_vector_not_in_the_null_space_is_refused(method):
    """A vector that is not in A's null space is refused on every rank, not taken for
    convergence."""
    # the constants are not in the null space of the Dirichlet Laplacian:
    # projecting them out would claim CONVERGED_RTOL with a true residual of 1.0
    A = gallery.poisson2d(12, COMM)
    b = gallery.rhs(A, "random", seed=1)
    ones = DistVector.full(A.col_layout, 1.0)
    assert_raises_collective(COMM, ValueError, getattr(dmsolve, method), A, b,
                             nullspace=ones, match=r"nullspace vector 0 is not in the null "
                             r"space of A: \|\|A q\|\| / \(\|\|A v\|\| / \|\|v\|\|\) = \d")
    # the second vector of a basis is named
    An, _ = _neumann(COMM)
    bn = gallery.rhs(An, "random", seed=1)
    lay = An.col_layout
    ramp = DistVector(lay, np.arange(lay.start, lay.stop, dtype=float))
    assert_raises_collective(COMM, ValueError, getattr(dmsolve, method), An, bn,
                             nullspace=[DistVector.full(lay, 1.0), ramp],
                             match="nullspace vector 1 is not")


def test_nullspace_ratio_is_rank_independent_and_correct():
    """The ratio the refusal quotes is the serial ||A q|| / (||A v|| / ||v||), at any rank count."""
    # the ratio in the message is ||A q|| / (||A v|| / ||v||), computed here serially
    A = gallery.poisson2d(12, COMM)
    b = gallery.rhs(A, "random", seed=1)
    e = assert_raises_collective(COMM, ValueError, dmsolve.cg, A, b,
                                 nullspace=DistVector.full(A.col_layout, 1.0))
    got = float(str(e).split(" = ")[1].split()[0])
    S = A.to_scipy()
    n = S.shape[0]
    q = np.ones(n) / np.sqrt(n)
    gi = np.arange(n, dtype=float)
    v = np.sin(0.6180339887 * gi + 0.5)
    want = np.linalg.norm(S @ q) / (np.linalg.norm(S @ v) / np.linalg.norm(v))
    assert_allclose_collective(got, want, rtol=1e-3)


def test_nullspace_removed_part_of_b_is_reported():
    """The part of b the null space removes is reported in the SolveInfo."""
    A, S = _neumann(COMM)
    n = S.shape[0]
    rng = np.random.default_rng(5)
    bg = S @ rng.standard_normal(n) + 0.5          # inconsistent: a constant added
    b = DistVector.from_global(bg, A.row_layout)
    ones = DistVector.full(A.col_layout, 1.0)
    want = np.linalg.norm(np.full(n, bg.mean())) / np.linalg.norm(bg)
    for method in ("cg", "pipecg", "minres"):
        x, info = getattr(dmsolve, method)(A, b, rtol=1e-10, nullspace=ones, maxiter=500)
        assert_collective(COMM, info.converged, "%s %s" % (method, info))
        assert_allclose_collective(info.extra["nullspace_removed"], want, rtol=1e-10,
                                   err_msg=method)
        # what was solved is the projected system
        xg = x.gather()
        assert_allclose_collective(np.linalg.norm(bg - bg.mean() - S @ xg)
                                   / np.linalg.norm(bg), 0.0, atol=1e-9, err_msg=method)
    # a consistent b loses (almost) nothing
    bc = DistVector.from_global(bg - bg.mean(), A.row_layout)
    _, info = dmsolve.cg(A, bc, rtol=1e-10, nullspace=ones)
    assert_collective(COMM, info.extra["nullspace_removed"] < 1e-12, str(info.extra))


# -- a breakdown that is not a happy one ----------------------------------------------

@pytest.mark.parametrize("method", METHODS)
def test_rhs_in_the_null_space_is_not_convergence(method):
    """A right-hand side in the null space is not reported as convergence with x = 0."""
    # for b in the null space MINRES meets Lanczos beta = 0 at iteration 1, and
    # the eps-clamped rotation zeroes phibar: that is not RTOL with x = 0
    A, _ = _neumann(COMM)
    b = DistVector.full(A.row_layout, 1.0)
    x, info = getattr(dmsolve, method)(A, b, rtol=1e-8)
    with Checks(COMM) as checks:
        checks.add(not info.converged, "not converged", str(info))
        checks.add(info.reason in (ConvergedReason.BREAKDOWN, ConvergedReason.INDEFINITE_MAT),
                   "breakdown", str(info))
        checks.add(info.iterations <= 1, "stops at once", info.iterations)
    assert_allclose_collective(info.true_residual_norm, np.sqrt(A.shape[0]), rtol=1e-12)


def test_hermitian_null_space(comm):
    """A Hermitian positive semi-definite system with a complex null vector is solved
    orthogonally to it."""
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


# -- bad input: the same exception on every rank -------------------------------------------

BAD_INPUTS = [
    ("nullspace-wrong-size", ValueError, "nullspace",
     lambda e: solve(e.A, e.b, nullspace=other_size(e))),
    ("nullspace-zero-vector", ValueError, "linearly dependent",
     lambda e: solve(e.A, e.b, nullspace=DistVector.zeros(e.A.row_layout))),
]


@pytest.mark.parametrize("exc, match, call", [c[1:] for c in BAD_INPUTS],
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_the_same_exception_on_every_rank(bad_input_env, request, exc, match,
                                                           call):
    """Each case of BAD_INPUTS raises the same exception type, with a message
    that matches, on every rank (or works, at one rank, where a COMM_SELF
    operand is valid)."""
    check_bad_input(bad_input_env, request, exc, match, call)
