"""Compressed rows with narrow indices (dmsolve._narrow) against scipy's CSR
products, and where DistCSR's automatic format takes them."""

import numpy as np
import pytest
import scipy.sparse as sp

from dmsolve import DistCSR, DistVector
from dmsolve._narrow import NarrowRows, ScatterTranspose, index_dtype
from dmsolve._sell import MIN_AUTO_ROWS, choose_format, product_block
from mpitest import assert_allclose_collective, assert_collective, assert_equal_collective
from operands import random_matrix
from threaded import Posts, same_bits, small_blocks


def ragged(m, n, seed=0):
    """Rows of 0 to 30 entries at random columns, some rows empty."""
    rng = np.random.default_rng(seed)
    lens = rng.integers(0, 31, m)
    lens[rng.random(m) < 0.1] = 0
    rows = np.repeat(np.arange(m), lens)
    cols = rng.integers(0, n, rows.size)
    A = sp.csr_matrix((rng.standard_normal(rows.size), (rows, cols)), shape=(m, n))
    A.sum_duplicates()
    A.sort_indices()
    return A


LOCAL = {
    "ragged-1000": lambda: ragged(1000, 1000),
    "wide-300x70000": lambda: ragged(300, 70000, seed=1),     # 32-bit indices
    "tall-5000x40": lambda: ragged(5000, 40, seed=2),
    "one-row": lambda: sp.csr_matrix(np.array([[1.0, 0.0, 2.0]])),
    "empty-0x5": lambda: sp.csr_matrix((0, 5)),
    "empty-5x0": lambda: sp.csr_matrix((5, 0)),
    "zeros-70x70": lambda: sp.csr_matrix((70, 70)),
}


@pytest.mark.parametrize("name", list(LOCAL))
def test_narrow_products_equal_scipy_bit_for_bit(name):
    """Narrow-index products give scipy's float64 results bit for bit (the same
    sums in the same order), and the block converts back to the same CSR."""
    B = LOCAL[name]()
    N = NarrowRows.from_csr(B)
    assert N.indices.dtype == index_dtype(B.shape[1])
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal(B.shape[1]), rng.standard_normal(B.shape[0])
    out = np.full(B.shape[0], np.nan)           # every row must be written
    N.matvec(x, out)
    np.testing.assert_array_equal(out, B @ x)
    acc = np.zeros(B.shape[1])
    N.rmatvec_add(y, acc)
    np.testing.assert_array_equal(acc, B.T @ y)
    back = N.to_csr()
    assert back.shape == B.shape and (back != B).nnz == 0


def test_index_width_and_bytes():
    """Indices take 16 bits up to 65536 columns, 32 bits above; the block then
    reads 10 bytes per entry against CSR's 12, and holds only its indices
    beside the CSR it shares values with."""
    assert index_dtype(65536) == np.uint16 and index_dtype(65537) == np.uint32
    assert index_dtype(2 ** 32) == np.uint32 and index_dtype(2 ** 32 + 1) == np.uint64
    B = ragged(6000, 6000)
    N = NarrowRows.from_csr(B)
    assert B.nnz > 65536 and N.indices.dtype == np.uint16 and N.indptr.dtype == np.uint32
    assert N.data is B.data
    assert N.nbytes == 10 * B.nnz + 4 * (B.shape[0] + 1)
    assert N.stored_nbytes == 2 * B.nnz + 4 * (B.shape[0] + 1)
    assert NarrowRows.from_csr(ragged(100, 100)).indptr.dtype == np.uint16
    S = N.astype(np.float32)
    assert S.data.dtype == np.float32 and S.stored_nbytes == S.nbytes


def test_float32_block_sums_in_float64():
    """A float32 block's rows are summed in float64 and rounded once: each
    entry of the product is within float32 rounding of its products' size."""
    B = ragged(600, 600, seed=3).astype(np.float32)
    N = NarrowRows.from_csr(B)
    x = np.random.default_rng(4).standard_normal(600).astype(np.float32)
    out = np.empty(600, np.float32)
    N.matvec(x, out)
    B64, x64 = B.astype(np.float64), x.astype(np.float64)
    exact = B64 @ x64
    size = abs(B64) @ abs(x64)
    eps = np.finfo(np.float32).eps
    assert np.all(np.abs(out - exact) <= eps * (np.abs(exact) + size))


def test_auto_takes_narrow_where_sell_pads():
    """Where "auto" keeps sliced ELL out (padding), products use narrow rows;
    small and complex blocks keep scipy's kernels."""
    B = ragged(4096, 4096)
    assert choose_format(B, "auto") is None
    assert isinstance(product_block(B, "auto"), NarrowRows)
    assert product_block(ragged(MIN_AUTO_ROWS - 1, 50), "auto") is None
    assert product_block(B, "csr") is None
    assert product_block(B.astype(complex), "auto") is None
    assert product_block(B.astype(complex), "narrow") is None
    assert isinstance(product_block(ragged(10, 10), "narrow"), NarrowRows)


@pytest.mark.parametrize("fmt", ["narrow", "auto"])
def test_distcsr_in_narrow_equals_csr(comm, fmt):
    """A DistCSR multiplying in narrow rows gives the CSR kernels' results, bit
    for bit, at any rank count; float32 copies agree to float32 rounding."""
    n = 1301
    A = random_matrix(n, n, density=0.02, seed=5)
    dA = DistCSR.from_global(A, comm)
    dA.set_local_format(fmt)
    ref = DistCSR.from_global(A, comm)
    ref.set_local_format("csr")
    assert_collective(comm, dA.product_format == "narrow" or dA.diag.shape[0] < MIN_AUTO_ROWS,
                      "format %s" % dA.product_format)
    rng = np.random.default_rng(6)
    x = DistVector.from_global(rng.standard_normal(n), dA.col_layout)
    assert_equal_collective(dA.matvec(x).local, ref.matvec(x).local)
    assert_equal_collective(dA.rmatvec(x).local, ref.rmatvec(x).local)
    s = dA.single(compact=True)
    x32 = DistVector(x.layout, x.local.astype(np.float32))
    scale = abs(A).sum()
    assert_allclose_collective(s.matvec(x32).gather(), A @ x.gather(), rtol=1e-5,
                               atol=1e-6 * scale)
    assert_allclose_collective(s.rmatvec(x32).gather(), A.T @ x.gather(), rtol=1e-5,
                               atol=1e-6 * scale)
    assert_collective(comm, (s.to_scipy() != A.astype(np.float32)).nnz == 0)


@pytest.mark.parametrize("shape", [(3000, 2500), (700, 70000)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_threaded_products_are_the_bits_of_one_thread(monkeypatch, shape, dtype):
    # rows split into blocks (matvec); the transposed copy holds each
    # column's terms in the scatter's order (rmatvec): the same bits
    small_blocks(monkeypatch, rows=100)
    posts = Posts(monkeypatch)
    B = ragged(*shape, seed=7).astype(dtype)
    N = NarrowRows.from_csr(B)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape[1]).astype(dtype)
    y = rng.standard_normal(shape[0]).astype(dtype)
    ref, rref = np.empty(shape[0], dtype), np.zeros(shape[1], dtype)
    N.matvec(x, ref, threads=1)
    N.rmatvec_add(y, rref)
    for k in (1, 2, 4):
        out, rout = np.full(shape[0], np.nan, dtype), np.full(shape[1], np.nan, dtype)
        N.matvec(x, out, threads=k)
        N.rmatvec(y, rout, threads=k)
        assert same_bits(out, ref) and same_bits(rout, rref), k
    assert posts.count > 0
    T = N._transpose
    assert isinstance(T, ScatterTranspose) and T.shape == (shape[1], shape[0])
    assert N.stored_nbytes == N.nbytes - N.data.nbytes + T.nbytes
    np.testing.assert_allclose(rref, B.T @ y, rtol=1e-3 if dtype == np.float32 else 1e-12,
                               atol=1e-3 if dtype == np.float32 else 1e-12)


def test_scatter_transpose_keeps_the_scatter_order_of_terms():
    """A column's terms in the transposed copy are in the scatter's order
    (rows 1, 3, 5), and summed so: a sum that cancels differently in another
    order gives the scatter's bits."""
    B = sp.csr_matrix((np.array([4.0, 1.0, -1e16, 1e16]),
                       (np.array([0, 1, 3, 5]), np.array([0, 2, 2, 2]))), shape=(6, 3))
    N = NarrowRows.from_csr(B)
    T = ScatterTranspose.from_scatter(N)
    assert T.shape == (3, 6) and T.indptr.tolist() == [0, 1, 1, 4]
    assert T.indices.tolist() == [0, 1, 3, 5] and T.data.tolist() == B.data.tolist()
    y = np.array([1.0, 3.0, 0.0, 1.0, 0.0, 1.0])
    x, ref = np.full(3, np.nan), np.zeros(3)
    T.product(y, x, threads=1)
    N.rmatvec_add(y, ref)
    assert x.tolist() == ref.tolist() == [4.0, 0.0, ((3.0 - 1e16) + 1e16)]
