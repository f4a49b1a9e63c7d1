"""One spectral estimate per level: the prolongator smoothing's estimate of
``rho(D^-1 A)`` serves the level's smoothers, bounded against scipy's
``eigsh``; and the prolongator's product format."""

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI
from scipy.sparse.linalg import eigsh

import dmsolve.gallery as gallery
import preconditioners
from mpitest import assert_collective
from preconditioners._eigen import lanczos_extremes
from preconditioners.smoothers import make_smoother

COMM = MPI.COMM_WORLD


def _rho(S: sp.csr_matrix) -> float:
    """rho(D^-1 S) by eigsh on the similar D^-1/2 S D^-1/2."""
    s = 1.0 / np.sqrt(S.diagonal())
    H = sp.diags(s) @ S @ sp.diags(s)
    return float(eigsh(H, k=1, which="LA", return_eigenvectors=False, tol=1e-10)[0])


@pytest.mark.parametrize("problem,options,filtered", [
    ("poisson3d-12", {}, 0),                                # classical: nothing weak
    ("anisotropic2d-40", {"strength": "symmetric"}, 0),     # theta = 0
    ("anisotropic2d-40", {}, 1),                            # classical filters level 0
], ids=["poisson3d-12", "anisotropic2d-40-symmetric", "anisotropic2d-40"])
def test_smoothers_take_the_prolongator_estimate(problem, options, filtered):
    """Where the strength measure filtered nothing out of a level (the
    symmetric measure with theta = 0; the classical one on a Laplacian and
    below its ``filter_levels``), the level's Chebyshev interval is
    [1.1 rho / 11, 1.1 rho] for rho the prolongator smoothing's estimate,
    which lies within 10% below the true rho(D^-1 A) of the level (eigsh), so
    1.1 rho covers the spectrum. The first ``filtered`` levels were smoothed
    with a filtered matrix, and their smoothers estimate for themselves."""
    kind, n = problem.rsplit("-", 1)
    A = gallery.PROBLEMS[kind](int(n), COMM)
    M = preconditioners.make(("amg", {"max_coarse": 20, "min_rows_per_rank": 1, **options}), A)
    assert_collective(COMM, len(M.levels) >= 2, "only %d levels" % len(M.levels))
    for i, L in enumerate(M.levels):
        S = M.gather_operator(i)
        true = _rho(S)
        rho = M._level_info[i]["rho"]          # None on a rank idle there
        ok = True
        if L.active and i < filtered:
            _, own = lanczos_extremes(L.A, np.abs(1.0 / L.A.diagonal().local), 10)
            ok = L.presmoother.kernel.upper == 1.1 * own and rho != own
        elif L.active:
            ok = 0.9 * true <= rho <= true * (1 + 1e-10) and 1.1 * rho >= true
            k = L.presmoother.kernel
            ok = ok and k.upper == 1.1 * rho and np.isclose(k.lower, k.upper / 11.0, rtol=1e-15)
        assert_collective(COMM, ok, "level %d: rho %r, eigsh %r" % (i, rho, true))


def test_filtered_levels_estimate_their_own():
    """With theta > 0 the prolongator is smoothed with the filtered matrix, so
    each smoother estimates rho(D^-1 A) of the level itself (10 Lanczos steps)."""
    A = gallery.anisotropic_diffusion(30, COMM, epsilon=0.01)
    M = preconditioners.make(("amg", {"theta": 0.25, "max_coarse": 20,
                                      "min_rows_per_rank": 1}), A)
    L = M.levels[0]
    _, own = lanczos_extremes(L.A, np.abs(1.0 / L.A.diagonal().local), 10)
    assert_collective(COMM, L.presmoother.kernel.upper == 1.1 * own
                      and M._level_info[0]["rho"] != own,
                      "upper %r, own estimate %r, prolongator's %r"
                      % (L.presmoother.kernel.upper, own, M._level_info[0]["rho"]))


def test_make_smoother_takes_an_estimate():
    """make_smoother(..., rho=) uses the estimate given: Chebyshev's upper
    bound is 1.1 rho, Jacobi's weight 4/3 / (1.1 rho); Gauss-Seidel and
    l1-Jacobi need none and ignore it."""
    A = gallery.poisson2d(20, COMM)
    cheb = make_smoother(("chebyshev", {"degree": 3, "ratio": 20.0}), A, rho=1.5)
    assert_collective(COMM, cheb.kernel.upper == 1.1 * 1.5
                      and cheb.kernel.lower == 1.1 * 1.5 / 20.0 and cheb.kernel.degree == 3)
    jac = make_smoother("jacobi", A, rho=1.5)
    assert_collective(COMM, jac.omega == (4.0 / 3.0) / (1.1 * 1.5))
    fixed = make_smoother(("jacobi", {"omega": 0.5}), A, rho=1.5)
    assert_collective(COMM, fixed.omega == 0.5)
    for name in ("gauss-seidel", "l1-jacobi"):
        b = np.ones(A.row_layout.local_size)
        x, y = np.zeros_like(b), np.zeros_like(b)
        make_smoother(name, A, rho=1.5).smooth(b, x, True)
        make_smoother(name, A).smooth(b, y, True)
        assert_collective(COMM, np.array_equal(x, y), name)


def test_smoothed_prolongators_multiply_in_narrow_csr():
    """A smoothed prolongator multiplies in CSR with narrow indices (sliced ELL
    would only pad its rows); an unsmoothed one keeps the automatic format."""
    A = gallery.poisson3d(14, COMM)
    M = preconditioners.make(("amg", {"max_coarse": 20, "min_rows_per_rank": 1}), A)
    fmts = [L.P.product_format for L in M.levels if L.active]
    assert_collective(COMM, fmts and set(fmts) == {"narrow"}, "formats %s" % fmts)
    U = preconditioners.make(("amg", {"smooth": "none", "max_coarse": 20,
                                      "min_rows_per_rank": 1}), A)
    assert_collective(COMM, all(L.P.local_format == "auto" for L in U.levels if L.active))
