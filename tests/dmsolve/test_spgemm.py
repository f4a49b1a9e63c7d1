"""dmsolve.spgemm: the threaded sparse product (also of stacked blocks, and
with unsorted rows), transpose and ``T - diag(w) F`` against scipy's, to the
bit (indices, row pointers and the bits of every value), at 1, 2 and 4
threads, on rectangular matrices with empty rows and columns, unsorted and
duplicate entries, float32, complex and sums that cancel; and the refusal
of operands they do not take. Each rank checks its own matrices."""

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

import dmsolve.gallery as gallery
from dmsolve import spgemm, threads
from mpitest import assert_collective, assert_raises_collective

COMM = MPI.COMM_WORLD
THREADS = (1, 2, 4)


def bitwise_equal(C, R) -> bool:
    """``C`` (sorted rows) holds exactly scipy's ``R``: same structure once
    ``R``'s rows are sorted, and the same bits in every value."""
    R = sp.csr_matrix(R)
    R.sort_indices()
    return (C.shape == R.shape and C.has_sorted_indices
            and np.array_equal(C.indptr, R.indptr) and np.array_equal(C.indices, R.indices)
            and C.dtype == R.dtype
            and np.array_equal(C.data.view(np.uint8), R.data.view(np.uint8)))


def random_csr(m, n, density, seed, dtype=np.float64, empty_rows=()):
    rng = np.random.default_rng(seed)
    M = sp.random(m, n, density=density, format="csr", random_state=rng, dtype=dtype)
    M.data -= (0.5 + 0.5j) if np.iscomplexobj(M.data) else 0.5
    M = M.tolil()
    for r in empty_rows:
        M[r, :] = 0
    return M.tocsr()


def big_enough(m, n, seed):
    """A matrix with enough entries that the product splits into blocks
    (more than 2 * MIN_BLOCK_ENTRIES)."""
    return random_csr(m, n, 5 * spgemm.MIN_BLOCK_ENTRIES / (m * n), seed)


CASES = {
    "square": lambda: (random_csr(60, 60, 0.1, 0), random_csr(60, 60, 0.1, 1)),
    "rectangular": lambda: (random_csr(70, 30, 0.15, 2, empty_rows=(0, 5, 69)),
                            random_csr(30, 45, 0.2, 3, empty_rows=(7,))),
    "empty": lambda: (sp.csr_matrix((5, 4)), random_csr(4, 6, 0.5, 4)),
    "no-rows": lambda: (sp.csr_matrix((0, 4)), random_csr(4, 6, 0.5, 5)),
    "blocks": lambda: (big_enough(3000, 2000, 6), big_enough(2000, 2500, 7)),
    "float32": lambda: (random_csr(50, 40, 0.2, 8, np.float32),
                        random_csr(40, 30, 0.2, 9, np.float32)),
    "mixed": lambda: (random_csr(50, 40, 0.2, 10, np.float32), random_csr(40, 30, 0.2, 11)),
    "complex": lambda: (random_csr(50, 40, 0.2, 12, np.complex128),
                        random_csr(40, 30, 0.2, 13)),
    "complex64": lambda: (random_csr(50, 40, 0.2, 14, np.complex64),
                          random_csr(40, 30, 0.2, 15, np.complex64)),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("k", THREADS)
def test_matmat_is_scipys_product(case, k):
    """matmat(A, B) equals scipy's A @ B to the bit at every thread count."""
    A, B = CASES[case]()
    C = spgemm.matmat(A, B, threads=k)
    assert_collective(COMM, bitwise_equal(C, A @ B), "%s at %d threads" % (case, k))


@pytest.mark.parametrize("k", THREADS)
def test_matmat_sums_in_scipys_order(k):
    """Sums that depend on their order (1e16 + 1 - 1e16) and sums that
    cancel to zero (dropped, as scipy drops them) come out as scipy's."""
    A = sp.csr_matrix(np.array([[1e16, 1.0, -1e16, 0.0], [1.0, -1.0, 0.0, 0.0],
                                [0.0, 0.0, 0.0, 2.0]]))
    B = sp.csr_matrix(np.array([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0], [0.0, 3.0]]))
    C = spgemm.matmat(A, B, threads=k)
    R = A @ B
    assert_collective(COMM, bitwise_equal(C, R) and C[0, 0] == 0.0 and C[1, 0] == 0.0
                      and C.nnz == R.nnz, "order-dependent sums")


@pytest.mark.parametrize("k", THREADS)
def test_matmat_follows_stored_order(k):
    """Unsorted rows of A, with a duplicate entry: the sum follows A's
    stored order, as scipy's (a reversed row gives other bits)."""
    indptr = np.array([0, 4])
    indices = np.array([2, 0, 1, 0])
    data = np.array([-1e16, 1e16, 1.0, 3.0])
    A = sp.csr_matrix((data, indices, indptr), shape=(1, 3))
    B = sp.csr_matrix(np.ones((3, 1)))
    C = spgemm.matmat(A, B, threads=k)
    assert_collective(COMM, bitwise_equal(C, A @ B) and C[0, 0] == 4.0,
                      "stored order of an unsorted row")


def test_matmat_on_a_gallery_operator_is_thread_independent():
    """A 2D Poisson operator squared: the same arrays at 1, 2 and 4 threads
    (several blocks), and scipy's."""
    A = gallery.poisson2d(150, MPI.COMM_SELF).diag
    ref = A @ A
    ok = all(bitwise_equal(spgemm.matmat(A, A, threads=k), ref) for k in THREADS)
    with threads.using(2):        # the process default when threads is not given
        ok = ok and bitwise_equal(spgemm.matmat(A, A), ref)
    assert_collective(COMM, ok, "poisson2d squared")


@pytest.mark.parametrize("case", ["square", "rectangular", "empty", "blocks", "complex"])
@pytest.mark.parametrize("k", THREADS)
def test_transpose_is_scipys(case, k):
    """transpose(A) has the arrays of scipy's A.T.tocsr()."""
    A = CASES[case]()[0]
    T = spgemm.transpose(A, threads=k)
    R = A.T.tocsr()
    ok = (T.shape == R.shape and np.array_equal(T.indptr, R.indptr)
          and np.array_equal(T.indices, R.indices)
          and np.array_equal(T.data.view(np.uint8), R.data.view(np.uint8)))
    assert_collective(COMM, ok, "%s at %d threads" % (case, k))


@pytest.mark.parametrize("k", THREADS)
def test_transpose_keeps_duplicates_in_row_order(k):
    """Duplicates of A stay, listed by A's row as scipy's csr_tocsc does."""
    A = sp.csr_matrix((np.array([1.0, 2.0, 3.0, 4.0]), np.array([1, 1, 0, 1]),
                       np.array([0, 2, 4])), shape=(2, 2))
    T = spgemm.transpose(A, threads=k)
    R = A.T.tocsr()
    assert_collective(COMM, np.array_equal(T.indices, R.indices)
                      and np.array_equal(T.data, R.data) and T.nnz == 4, "duplicates")


def test_matmat_refuses_what_it_does_not_take():
    """Integer entries, dense operands and mismatched shapes are refused."""
    A = sp.csr_matrix(np.eye(3, dtype=np.int64))
    assert_raises_collective(COMM, TypeError, spgemm.matmat, A, A, match="int64")
    assert_raises_collective(COMM, TypeError, spgemm.matmat, np.eye(3), sp.eye(3),
                             match="scipy sparse")
    assert_raises_collective(COMM, ValueError, spgemm.matmat, sp.eye(3), sp.eye(4),
                             match="3 columns but B has 4 rows")
    assert_raises_collective(COMM, ValueError, spgemm.matmat, sp.eye(3), sp.eye(3),
                             threads=0)


def scipy_subtract_scaled(T, F, w):
    C = sp.csr_matrix(T - sp.diags(w) @ F)
    C.eliminate_zeros()
    return C


@pytest.mark.parametrize("k", THREADS)
def test_subtract_scaled_is_scipys(monkeypatch, k):
    """subtract_scaled(T, F, w) has the bits of scipy's T - diag(w) F
    without zeros: shared, T-only and F-only entries, rows whose weight is
    zero, entries that cancel and explicit zeros of F, split in blocks."""
    monkeypatch.setattr(spgemm, "MIN_BLOCK_ENTRIES", 16)
    T = random_csr(400, 90, 0.05, 20, empty_rows=(3, 399))
    F = random_csr(400, 90, 0.05, 21, empty_rows=(4, 399))
    F = (F + 0.5 * T).tocsr()                       # shared entries
    F.sort_indices()
    w = np.random.default_rng(22).random(400) - 0.5
    w[::7] = 0.0
    cancel = np.flatnonzero(np.diff(T.indptr) > 0)[:5]
    F = F.tolil()
    for r in cancel:                                # t - w f == 0 exactly
        j = T.indices[T.indptr[r]]
        w[r], F[r, j] = 1.0, T[r, j]
    F = F.tocsr()
    F.data[::11] = 0.0                              # explicit zeros
    C = spgemm.subtract_scaled(T, F, w, threads=k)
    R = scipy_subtract_scaled(T, F, w)
    assert_collective(COMM, bitwise_equal(C, R) and all(C[r].nnz < T[r].nnz + F[r].nnz
                                                         for r in cancel), "at %d threads" % k)


def test_subtract_scaled_takes_other_matrices_through_scipy():
    """Unsorted rows, duplicates and complex entries give scipy's result."""
    T = sp.csr_matrix((np.array([1.0, 2.0, 3.0]), np.array([2, 0, 0]), np.array([0, 2, 3])),
                      shape=(2, 3))
    F = sp.csr_matrix(np.array([[1.0, 0.0, 1.0], [0.0, 2.0, 0.0]]))
    w = np.array([2.0, -1.0])
    ok = bitwise_equal(spgemm.subtract_scaled(T, F, w), scipy_subtract_scaled(T, F, w))
    Tc = random_csr(30, 20, 0.2, 23, np.complex128)
    Fc = random_csr(30, 20, 0.2, 24)
    wc = np.linspace(-1, 1, 30)
    ok = ok and bitwise_equal(spgemm.subtract_scaled(Tc, Fc, wc),
                              scipy_subtract_scaled(Tc, Fc, wc))
    assert_collective(COMM, ok, "fallback differs from scipy")
    assert_raises_collective(COMM, ValueError, spgemm.subtract_scaled, T, F, np.ones(3),
                             match="w has shape")


@pytest.mark.parametrize("k", THREADS)
def test_block_matmat_is_the_product_of_the_stacks(k):
    """block_matmat([A1, A2], [B1, B2]) is scipy's hstack(A) @ vstack(B) to
    the bit (each row adds A1's entries, then A2's), also with one block,
    an empty second block and a block of no columns."""
    A1, A2 = big_enough(3000, 700, 30), random_csr(3000, 40, 0.05, 31, empty_rows=(0, 9))
    B1, B2 = big_enough(700, 500, 32), random_csr(40, 500, 0.1, 33)
    ok = bitwise_equal(spgemm.block_matmat([A1, A2], [B1, B2], threads=k),
                       sp.hstack([A1, A2], format="csr") @ sp.vstack([B1, B2], format="csr"))
    ok = ok and bitwise_equal(spgemm.block_matmat([A1], [B1], threads=k), A1 @ B1)
    E, F = sp.csr_matrix((3000, 0)), sp.csr_matrix((0, 500))
    ok = ok and bitwise_equal(spgemm.block_matmat([A1, E], [B1, F], threads=k), A1 @ B1)
    assert_collective(COMM, ok, "block product differs at %d threads" % k)


def test_block_matmat_refuses_blocks_that_do_not_fit():
    """Three blocks, or blocks of different row counts, are refused."""
    A, B = sp.eye(3, format="csr"), sp.eye(3, format="csr")
    assert_raises_collective(COMM, ValueError, spgemm.block_matmat, [A, A, A], [B, B, B],
                             match="one or two blocks")
    assert_raises_collective(COMM, ValueError, spgemm.block_matmat, [A, sp.eye(4, 3)], [B, B],
                             match="block 1")


def test_matmat_unsorted_rows_are_scipys_entries_at_any_thread_count():
    """sort=False: each row's entries are scipy's (the same bits) in the
    order the row met them, and the arrays are the same at 1, 2 and 4
    threads."""
    A, B = big_enough(3000, 2000, 40), big_enough(2000, 2500, 41)
    got = {k: spgemm.matmat(A, B, threads=k, sort=False) for k in THREADS}
    C = got[1].copy()
    C.sort_indices()
    ok = bitwise_equal(C, A @ B) and not got[1].has_sorted_indices
    ok = ok and all(np.array_equal(got[k].indices, got[1].indices)
                    and np.array_equal(got[k].data, got[1].data)
                    and np.array_equal(got[k].indptr, got[1].indptr) for k in THREADS)
    assert_collective(COMM, ok, "unsorted product")
