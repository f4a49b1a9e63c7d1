"""Sliced ELL with run slots (dmsolve._sell) against scipy's CSR products, and
the choice between it and CSR."""

import numpy as np
import pytest
import scipy.sparse as sp

import dmsolve.gallery as gallery
from dmsolve import DistCSR, DistVector, Layout
from dmsolve._sell import MAX_AUTO_BYTES, SlicedEll, choose_format, csr_nbytes
from mpitest import assert_allclose_collective, assert_collective, assert_raises_collective
from operands import random_matrix
from threaded import Posts, same_bits, small_blocks


def poisson3d(n):
    T = sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1])
    eye = sp.identity(n)
    return sp.csr_matrix(sp.kron(sp.kron(T, eye), eye) + sp.kron(sp.kron(eye, T), eye)
                         + sp.kron(sp.kron(eye, eye), T))


def ragged(n, seed=0):
    """Rows of 0 to 40 entries, random columns, some rows empty."""
    rng = np.random.default_rng(seed)
    lens = rng.integers(0, 41, n)
    lens[rng.random(n) < 0.1] = 0
    rows = np.repeat(np.arange(n), lens)
    cols = rng.integers(0, n, rows.size)
    A = sp.csr_matrix((rng.standard_normal(rows.size), (rows, cols)), shape=(n, n))
    A.sum_duplicates()
    A.sort_indices()
    return A


def banded_rect(m, n, seed=0):
    """Diagonals that run off the matrix's edges (run slots near the border
    must fall back to gathered slots)."""
    rng = np.random.default_rng(seed)
    A = sp.diags([rng.standard_normal(min(m, n)) for _ in range(5)], [-70, -1, 0, 3, 65],
                 shape=(m, n), format="csr")
    A.sort_indices()
    return A


LOCAL = {
    "poisson-12": lambda: poisson3d(12),
    "ragged-1000": lambda: ragged(1000),
    "banded-300x200": lambda: banded_rect(300, 200),
    "banded-150x400": lambda: banded_rect(150, 400),
    "one-row": lambda: sp.csr_matrix(np.array([[1.0, 0.0, 2.0]])),
    "empty-0x5": lambda: sp.csr_matrix((0, 5)),
    "empty-5x0": lambda: sp.csr_matrix((5, 0)),
    "zeros-70x70": lambda: sp.csr_matrix((70, 70)),
}


@pytest.mark.parametrize("name", list(LOCAL))
def test_sliced_ell_products_match_scipy(name):
    """Sliced ELL products equal scipy's CSR products on stencil, ragged and banded blocks."""
    B = LOCAL[name]()
    S = SlicedEll.from_csr(B)
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal(B.shape[1]), rng.standard_normal(B.shape[0])
    out = np.full(B.shape[0], np.nan)           # every row must be written
    S.matvec(x, out)
    scale = max(abs(B).sum(), 1.0)
    np.testing.assert_allclose(out, B @ x, rtol=1e-14, atol=1e-14 * scale)
    acc = rng.standard_normal(B.shape[1])
    want = acc + B.T @ y
    S.rmatvec_add(y, acc)
    np.testing.assert_allclose(acc, want, rtol=1e-14, atol=1e-14 * scale)
    back = S.to_csr()
    assert back.shape == B.shape and (back != B).nnz == 0


def test_stencil_is_run_slots_with_fewer_bytes_than_csr():
    """A stencil block is stored in run slots, in fewer bytes than CSR."""
    B = poisson3d(24)
    S = SlicedEll.from_csr(B)
    # everything but the chunks at the grid's two ends is a run slot
    assert S.run_fraction > 0.95
    # 8 bytes per value plus 1/16 for the run's column: 0.70x CSR's 12 bytes + indptr
    assert S.nbytes < 0.70 * csr_nbytes(B)
    # padding: the boundary rows' missing neighbours (2.5% at 24^3)
    assert S.vals.size < 1.03 * B.nnz


def test_auto_keeps_csr_where_padding_is_large():
    """The automatic format keeps CSR where sliced ELL would pad too much."""
    # a few dense rows among short ones: the chunks holding them pad every lane
    n = 4096
    B = sp.lil_matrix((n, n))
    B.setdiag(1.0)
    for r in range(0, n, 64):
        B[r, :500] = 1.0
    B = sp.csr_matrix(B)
    assert choose_format(B, "auto") is None
    S = choose_format(B, "sell")            # asked for: converted all the same
    assert S is not None and S.nbytes > MAX_AUTO_BYTES * csr_nbytes(B)
    assert choose_format(poisson3d(12), "auto") is not None
    assert choose_format(poisson3d(6), "auto") is None       # 216 rows: too small to bother
    assert choose_format(poisson3d(12).astype(complex), "sell") is None
    assert choose_format(poisson3d(12), "csr") is None


def test_distcsr_in_sell_takes_a_complex_vector_by_csr(comm):
    """A DistCSR in sliced ELL multiplies a complex vector through its CSR."""
    # (real vectors in sell: test_matrix's products run at both local formats)
    A = random_matrix(101, 101, seed=7)
    dA = DistCSR.from_global(A, comm)
    dA.set_local_format("sell")
    rng = np.random.default_rng(0)
    z = rng.standard_normal(101) + 1j * rng.standard_normal(101)
    dz = DistVector.from_global(z, dA.col_layout)
    scale = np.abs(A).sum()
    assert_allclose_collective(dA.matvec(dz).gather(), A @ z, rtol=1e-14, atol=1e-14 * scale)
    assert_allclose_collective(dA.rmatvec(dz).gather(), A.T @ z, rtol=1e-14,
                               atol=1e-14 * scale)


@pytest.mark.parametrize("problem", ["poisson3d", "convdiff3d"])
def test_gallery_auto_is_sell_and_matches_csr(comm, problem):
    """Gallery matrices pick sliced ELL automatically and multiply like CSR."""
    n = 18                                  # 5832 rows: >= 1024 per rank at 4 ranks
    A = gallery.PROBLEMS[problem](n, comm)
    ref = A.to_scipy(root=None)
    assert_collective(comm, A.product_format == "sell", "auto did not choose sell")
    rng = np.random.default_rng(2)
    x = rng.standard_normal(ref.shape[1])
    dx = DistVector.from_global(x, A.col_layout)
    got = A.matvec(dx).gather()
    assert_allclose_collective(got, ref @ x, rtol=1e-13, atol=1e-13 * abs(ref).sum())
    assert_allclose_collective(A.rmatvec(dx).gather(), ref.T @ x, rtol=1e-13,
                               atol=1e-13 * abs(ref).sum())
    # the copy is counted in the rank's bytes; 0.68-0.70x of the CSR arrays
    # measured (1944 rows per rank at 3 ranks: the slab's end planes gather)
    sell = A.product_nbytes
    assert_collective(comm, sell < 0.72 * csr_nbytes(A.diag))
    assert_collective(comm, A.local_nbytes > csr_nbytes(A.diag) + sell)


def test_scale_and_set_local_format_rebuild_the_copy(comm):
    """scale() and set_local_format() rebuild the sliced ELL copy."""
    A = poisson3d(14)
    dA = DistCSR.from_global(A, comm)
    dA.set_local_format("sell")
    rng = np.random.default_rng(3)
    x = rng.standard_normal(A.shape[0])
    d = rng.random(A.shape[0]) + 0.5
    dx = DistVector.from_global(x, dA.col_layout)
    dA.matvec(dx)                            # builds the copy
    dd = DistVector.from_global(d, dA.row_layout)
    dA.scale(left=dd, right=dd)
    want = (sp.diags(d) @ A @ sp.diags(d)) @ x
    assert_allclose_collective(dA.matvec(dx).gather(), want, rtol=1e-13, atol=1e-13)
    # an in-place change of diag's entries, then the documented rebuild
    dA.diag.data *= 2.0
    dA.offd.data *= 2.0
    dA.set_local_format()
    assert_allclose_collective(dA.matvec(dx).gather(), 2 * want, rtol=1e-13, atol=1e-13)
    c = dA.copy()
    assert_collective(comm, c.local_format == "sell")


def test_bad_local_format_is_refused_on_every_rank(comm):
    """A bad local format is refused on every rank."""
    A = poisson3d(4)
    lay = Layout.block(A.shape[0], comm)
    dA = DistCSR.from_global(A, comm, layout=lay)
    assert_raises_collective(comm, ValueError, dA.set_local_format, "ell", match="local_format")
    assert_raises_collective(comm, ValueError, DistCSR, dA.diag, dA.offd, dA.ghosts, lay, lay,
                             local_format=3, match="local_format")


@pytest.mark.parametrize("make", [lambda: poisson3d(11), lambda: ragged(3001, seed=5),
                                  lambda: banded_rect(2000, 1800, seed=2)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_threaded_products_are_the_bits_of_one_thread(monkeypatch, make, dtype):
    # blocks of whole chunks (matvec) and the transposed copy (rmatvec): every
    # entry summed in the one-thread order, at 2, 3 and 4 threads
    small_blocks(monkeypatch, rows=128)
    posts = Posts(monkeypatch)
    B = make().astype(dtype)
    S = SlicedEll.from_csr(B)
    rng = np.random.default_rng(3)
    x = rng.standard_normal(B.shape[1]).astype(dtype)
    y = rng.standard_normal(B.shape[0]).astype(dtype)
    ref, rref = np.empty(B.shape[0], dtype), np.zeros(B.shape[1], dtype)
    S.matvec(x, ref, threads=1)
    S.rmatvec_add(y, rref)
    assert S._transpose is None
    for k in (1, 2, 3, 4):
        out, rout = np.full(B.shape[0], np.nan, dtype), np.full(B.shape[1], np.nan, dtype)
        S.matvec(x, out, threads=k)
        S.rmatvec(y, rout, threads=k)
        assert same_bits(out, ref), k
        assert same_bits(rout, rref), k
    assert S._transpose is not None and S.stored_nbytes > S.nbytes
    assert posts.count >= 2 * 3             # every threaded call split its work
    np.testing.assert_allclose(ref, B @ x, rtol=1e-4 if dtype == np.float32 else 1e-12,
                               atol=1e-4 if dtype == np.float32 else 1e-12)
