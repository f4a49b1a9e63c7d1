"""Relaxation smoothers by name: a zero diagonal refused, an empty row left
alone, option errors that name the smoother."""

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

import dmsolve
import dmsolve.gallery as gallery
import preconditioners
from amg_cases import saddle_point
from dmsolve import DistCSR, DistVector
from mpitest import Checks, assert_raises_collective
from preconditioners.smoothers import make_smoother
from threaded import Posts, same_bits, small_blocks

COMM = MPI.COMM_WORLD


def test_smoother_option_errors_name_the_smoother():
    """An option error names the smoother."""
    A = gallery.poisson2d(24, COMM)
    assert_raises_collective(COMM, ValueError, preconditioners.make, "amg", A,
                             presmoother=("sor", {"omega": 2.0}),
                             match="smoother 'gauss-seidel': omega must be")


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
    """Smoothers refuse a zero diagonal but leave an empty row alone."""
    A = saddle_point(COMM)
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


@pytest.mark.parametrize("desc", ["jacobi", "l1-jacobi", ("chebyshev", {"degree": 3})])
@pytest.mark.parametrize("zero_guess", [True, False])
def test_threaded_smoothing_is_the_bits_of_one_thread(monkeypatch, desc, zero_guess):
    """Jacobi, l1-Jacobi and Chebyshev sweeps (two of them) by blocks of rows
    on 2, 3 and 4 threads give the bits of one thread."""
    comm = MPI.COMM_WORLD
    small_blocks(monkeypatch, rows=64)
    A = gallery.poisson3d(14, comm)
    S = make_smoother(desc, A)
    b = gallery.rhs(A, "random").local
    x0 = gallery.rhs(A, "random", seed=3).local
    results = []
    for k in (1, 2, 3, 4):
        x = x0.copy()
        with dmsolve.threads.using(k):
            S.smooth(b, x, zero_guess)
            S.smooth(b, x, False)
        results.append(x)
    posts = Posts(monkeypatch)
    with dmsolve.threads.using(2):
        S.smooth(b, x0.copy(), zero_guess)
    checks = Checks(comm)
    checks.add(all(same_bits(x, results[0]) for x in results[1:]), "same bits")
    checks.add(posts.count > 0 or b.size < 128, "work split")
    checks.assert_all()
