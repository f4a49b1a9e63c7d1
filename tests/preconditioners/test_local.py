"""Local factorisations (ILU(0), ILUT, LU): ILU(0) on the pattern, missing
diagonals and zero or singular pivots named by rank, block and global row,
and the options that reach the factorisation."""

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

import dmsolve.gallery as gallery
import preconditioners
from bad_inputs import check_bad_input, zero_pivot_matrix
from dmsolve import DistCSR, DistVector, Layout, solve
from mpitest import assert_allclose_collective, assert_collective, assert_raises_collective
from preconditioners._local import ILU0, check_local_solver, ilu0

COMM = MPI.COMM_WORLD


def test_ilu0_is_incomplete_lu_on_the_pattern():
    """ILU(0) is the textbook incomplete LU on the pattern."""
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
    """A missing diagonal entry is refused naming its row."""
    S = sp.csr_matrix(np.array([[1.0, 2.0], [3.0, 0.0]]))
    S.eliminate_zeros()
    with pytest.raises(ValueError, match="no diagonal entry\\) at local row 1"):
        ilu0(S)


def test_ilu0_zero_pivot_from_elimination():
    """A pivot that elimination makes zero is refused."""
    # [[1, 1], [1, 1]] has a nonzero diagonal but a zero second pivot
    S = sp.csr_matrix(np.array([[1.0, 1.0], [1.0, 1.0]]))
    with pytest.raises(ValueError, match="pivot"):
        ilu0(S)


def test_local_solver_options_are_checked_and_completed():
    """Local solver options are checked and completed with their defaults."""
    ilut = ("ilut", {"drop_tol": 1e-3, "fill_factor": 10.0})
    assert check_local_solver("ILUT", {"drop_tol": 1e-3}) == ilut
    assert check_local_solver("lu", None) == ("lu", {})
    with pytest.raises(TypeError, match="drop_tol"):
        check_local_solver("ilu0", {"drop_tol": 1e-3})
    with pytest.raises(ValueError, match="unknown local solver 'qr'; available: ilu0, ilut, lu"):
        check_local_solver("qr")


def test_ilut_options_reach_the_factorisation():
    """ILUT's options reach the factorisation."""
    A = gallery.poisson2d(24, COMM)
    loose = preconditioners.make("bjacobi", A, sub="ilut", sub_options={"drop_tol": 0.5})
    tight = preconditioners.make("bjacobi", A, sub="ilut", sub_options={"drop_tol": 0.0})
    nnz = COMM.allreduce(loose.solver.nnz), COMM.allreduce(tight.solver.nnz)
    assert_collective(COMM, nnz[0] < nnz[1], "factor nonzeros %d (0.5) vs %d (0.0)" % nnz)


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


# -- the local solvers --------------------------------------------------------------

@pytest.mark.parametrize("fill_factor", [1e6, 1e12, 1e300])
def test_ilut_huge_fill_factor_means_no_fill_limit(fill_factor):
    """A huge ILUT fill factor means no fill limit, not a failure."""
    # SuperLU multiplies fill_factor by nnz(A) in a 32-bit integer: a huge one
    # must not reach it (it would fail with "Not enough memory", printed from C)
    A = gallery.poisson2d(30, COMM)
    huge = preconditioners.make("bjacobi", A, sub="ilut",
                                sub_options={"fill_factor": fill_factor, "drop_tol": 0.0})
    full = preconditioners.make("bjacobi", A, sub="lu")
    r = gallery.rhs(A, "random")
    # ILUT with no dropping and no fill limit is the complete factorisation
    assert_allclose_collective(huge(r).local, full(r).local, rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("name,sub", [("bjacobi", "ilut"), ("bjacobi", "lu"), ("asm", "ilut"),
                                      ("asm", "lu"), ("bjacobi", "ilu0")])
def test_singular_block_names_the_rank_block_and_global_row(name, sub):
    """A singular block is refused naming the rank, block and global row."""
    A = _with_broken_last_row("empty")
    last = COMM.size - 1
    e = assert_raises_collective(COMM, ValueError, preconditioners.make, name, A, sub=sub,
                                 match=r"the block of rank %d \(\d+ rows\): .* at global "
                                       r"(row|column) 80" % last)
    assert_collective(COMM, ".c" not in str(e) and "line" not in str(e),
                      "no C file paths: %s" % e)


@pytest.mark.parametrize("sub", ["ilut", "lu"])
def test_numerically_singular_block_says_so_without_superlu_paths(sub):
    """A numerically singular block says so, without SuperLU's internal paths."""
    A = _with_broken_last_row("copy")
    e = assert_raises_collective(COMM, ValueError, preconditioners.make, "bjacobi", A, sub=sub,
                                 match=r"bjacobi\(sub='%s'\): the block of rank %d "
                                       r"\(\d+ rows\): .*singular" % (sub, COMM.size - 1))
    assert_collective(COMM, ".c" not in str(e) and "SRC" not in str(e),
                      "no C file paths: %s" % e)


# -- bad input: the same exception on every rank -------------------------------------------

BAD_INPUTS = [
    ("bjacobi-ilu0-zero-pivot", ValueError, "zero pivot",
     lambda e: solve(zero_pivot_matrix(e), DistVector.full(Layout.block(8, e.comm), 1.0),
                     "gmres", pc="bjacobi")),
]


@pytest.mark.parametrize("exc, match, call", [c[1:] for c in BAD_INPUTS],
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_the_same_exception_on_every_rank(bad_input_env, request, exc, match,
                                                           call):
    """Each case of BAD_INPUTS raises the same exception type, with a message
    that matches, on every rank (or works, at one rank, where a COMM_SELF
    operand is valid)."""
    check_bad_input(bad_input_env, request, exc, match, call)
