"""DistCSR against scipy on the gathered matrix: products, assembly, structure."""

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

from dmsolve import DistCSR, DistVector, Layout
from mpitest import (assert_allclose_collective, assert_collective, assert_equal_collective,
                     assert_raises_collective)


def uneven_layout(n, comm):
    """A layout in which rank 0 owns nothing and the rest is uneven."""
    size = comm.size
    if size == 1:
        return Layout.block(n, comm)
    counts = np.zeros(size, dtype=np.int64)
    rest = np.array_split(np.arange(n), size - 1)
    counts[1:] = [len(r) for r in rest]
    return Layout(np.concatenate(([0], np.cumsum(counts))), comm)


def random_matrix(m, n, density=0.3, seed=0, empty_rows=(), empty_cols=()):
    A = sp.random(m, n, density=density, random_state=seed, format="lil")
    for i in empty_rows:
        A[i, :] = 0
    for j in empty_cols:
        A[:, j] = 0
    return sp.csr_matrix(A)


CASES = {
    "square-13": dict(m=13, n=13),
    "square-101-empty-rows-cols": dict(m=101, n=101, empty_rows=(0, 50, 100), empty_cols=(3, 99)),
    "wide-7x11": dict(m=7, n=11),
    "tall-11x3": dict(m=11, n=3),
    "one-row": dict(m=1, n=5),
    "empty-0x4": dict(m=0, n=4),
}


def _layouts(kind, A, comm):
    m, n = A.shape
    if kind == "block":
        return None, None
    return uneven_layout(m, comm), Layout.block(n, comm)


@pytest.mark.parametrize("fmt", ["auto", "sell"])     # small blocks: auto is CSR
@pytest.mark.parametrize("layouts", ["block", "uneven"])
@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_matvec_rmatvec_match_scipy(comm, case, layouts, fmt):
    spec = dict(CASES[case])
    m, n = spec.pop("m"), spec.pop("n")
    A = random_matrix(m, n, seed=7, **spec)
    row_layout, col_layout = _layouts(layouts, A, comm)
    dA = DistCSR.from_global(A, comm, layout=row_layout, col_layout=col_layout)
    dA.set_local_format(fmt)
    assert_collective(comm, dA.product_format == ("sell" if fmt == "sell" else "csr"))
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(n), rng.standard_normal(m)
    dx = DistVector.from_global(x, dA.col_layout)
    dy = DistVector.from_global(y, dA.row_layout)
    scale = max(np.abs(A).sum(), 1.0) if A.nnz else 1.0
    assert_allclose_collective(dA.matvec(dx).gather(), A @ x, rtol=1e-14, atol=1e-14 * scale)
    assert_allclose_collective((dA @ dx).gather(), A @ x, rtol=1e-14, atol=1e-14 * scale)
    assert_allclose_collective(dA.rmatvec(dy).gather(), A.T @ y, rtol=1e-14,
                               atol=1e-14 * scale)
    out = dA.create_vectors()[1]
    res = dA.matvec(dx, out=out)
    assert_collective(comm, res is out)
    assert_equal_collective((dA.to_scipy() != A).nnz, 0)
    assert_equal_collective((dA.transpose().to_scipy() != A.T).nnz, 0)
    assert_collective(comm, dA.global_nnz() == A.nnz)


def test_matvec_repeated_reuses_buffers(comm):
    A = random_matrix(40, 40, seed=3)
    dA = DistCSR.from_global(A, comm)
    x, y = dA.create_vectors()
    x.local[:] = 1.0
    dA.matvec(x, out=y)
    recv = dA.halo.recvbuf
    send = dA.halo.sendbuf
    for _ in range(3):
        dA.matvec(x, out=y)
    assert_collective(comm, dA.halo.recvbuf is recv and dA.halo.sendbuf is send)
    assert_allclose_collective(y.gather(), A @ np.ones(40), rtol=1e-14)


@pytest.mark.parametrize("shape", [(13, 13), (7, 11), (11, 3)], ids=["13x13", "7x11", "11x3"])
@pytest.mark.parametrize("mode", ["add", "insert"])
def test_from_coo_any_rank_any_row(comm, shape, mode):
    rng = np.random.default_rng(100 + comm.rank)
    k = 40
    rows = rng.integers(0, shape[0], k)
    cols = rng.integers(0, shape[1], k)
    vals = rng.standard_normal(k)
    dA = DistCSR.from_coo(rows, cols, vals, shape, comm, layout=uneven_layout(shape[0], comm),
                          mode=mode)
    R = np.concatenate(comm.allgather(rows))
    C = np.concatenate(comm.allgather(cols))
    V = np.concatenate(comm.allgather(vals))
    if mode == "add":
        ref = sp.coo_matrix((V, (R, C)), shape=shape).toarray()
    else:
        ref = np.zeros(shape)
        ref[R, C] = V  # numpy fancy assignment: the last duplicate wins
    got = dA.to_scipy().toarray()
    assert_allclose_collective(got, ref, rtol=1e-14, atol=1e-14 * np.abs(V).sum())


def test_from_coo_all_entries_to_one_other_rank(comm):
    # every rank contributes only to the last rank's rows, with heavy duplication
    n = 10
    lay = Layout.block(n, comm)
    start, stop = lay.range_of(comm.size - 1)
    rows = np.repeat(np.arange(start, stop), 5)
    cols = np.zeros_like(rows)
    dA = DistCSR.from_coo(rows, cols, np.ones(rows.size), (n, n), comm)
    ref = np.zeros((n, n))
    ref[start:stop, 0] = 5 * comm.size
    assert_allclose_collective(dA.to_scipy().toarray(), ref)


def test_from_coo_options_are_keyword_only(comm):
    # the triplets, the shape and the communicator are positional; the
    # layouts, mode and check_finite only by name
    lay = Layout.block(4, comm)
    args = (np.array([0]), np.array([0]), np.array([1.0]), (4, 4), comm)
    assert_raises_collective(comm, TypeError, DistCSR.from_coo, *args, lay)
    A = DistCSR.from_coo(*args, layout=lay, col_layout=lay, mode="insert", check_finite=True)
    assert_allclose_collective(A.to_scipy().toarray()[0, 0], 1.0)


def test_diagonal_row_sums_and_scale(comm):
    A = random_matrix(13, 13, seed=11, density=0.4) + sp.identity(13)
    dA = DistCSR.from_global(A, comm, layout=uneven_layout(13, comm))
    assert_allclose_collective(dA.diagonal().gather(), A.diagonal())
    assert_allclose_collective(dA.row_sums().gather(), np.asarray(A.sum(axis=1)).ravel(),
                               rtol=1e-14)
    assert_allclose_collective(dA.row_sums(absolute=True).gather(),
                               np.asarray(abs(A).sum(axis=1)).ravel(), rtol=1e-14)
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, 13)
    dx = DistVector.from_global(x, dA.col_layout)
    assert_allclose_collective(dA.matvec(dx).gather(), A @ x, rtol=1e-14)
    left, right = rng.uniform(1, 2, 13), rng.uniform(1, 2, 13)
    dA.scale(DistVector.from_global(left, dA.row_layout),
             DistVector.from_global(right, dA.col_layout))
    ref = sp.diags(left) @ A @ sp.diags(right)
    assert_allclose_collective(dA.to_scipy().toarray(), ref.toarray(), rtol=1e-14)
    # a matvec after scaling in place sees the new values (off-process rows included)
    assert_allclose_collective(dA.matvec(dx).gather(), ref @ x, rtol=1e-14)


def test_rectangular_diagonal(comm):
    A = random_matrix(11, 7, seed=2, density=0.6)
    dA = DistCSR.from_global(A, comm)
    d = np.zeros(11)
    d[:7] = A.diagonal()
    assert_allclose_collective(dA.diagonal().gather(), d)


def test_local_rows_and_block(comm):
    A = random_matrix(13, 13, seed=4)
    dA = DistCSR.from_global(A, comm)
    s, e = dA.row_layout.owned_range
    assert_allclose_collective(dA.local_rows().toarray(), A[s:e].toarray())
    cs, ce = dA.col_layout.owned_range
    assert_allclose_collective(dA.local_block().toarray(), A[s:e, cs:ce].toarray())


def test_memory_within_bound_of_scipy(comm):
    n = 20
    T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], (n, n))
    I = sp.identity(n)
    A = (sp.kron(sp.kron(I, I), T) + sp.kron(sp.kron(I, T), I) + sp.kron(sp.kron(T, I), I)).tocsr()
    dA = DistCSR.from_global(A, comm)
    s, e = dA.row_layout.owned_range
    mine = A[s:e]
    ref = mine.data.nbytes + mine.indices.nbytes + mine.indptr.nbytes
    ghost_buffers = dA.halo.sendbuf.nbytes + dA.halo.recvbuf.nbytes + \
        dA.halo.send_index.nbytes + dA.ghosts.nbytes
    assert_collective(comm, dA.local_nbytes <= 1.3 * ref + ghost_buffers,
                      "DistCSR holds %d bytes, scipy %d" % (dA.local_nbytes, ref))


# -- bad input: the same exception on every rank ---------------------------------------
def test_from_coo_out_of_range_on_one_rank(comm):
    bad = comm.rank == comm.size - 1
    rows = np.array([0, 12 if bad else 1])
    assert_raises_collective(comm, ValueError, DistCSR.from_coo, rows, np.array([0, 1]),
                             np.ones(2), (10, 10), comm, match="out of range")
    cols = np.array([0, -1 if bad else 1])
    assert_raises_collective(comm, ValueError, DistCSR.from_coo, np.array([0, 1]), cols,
                             np.ones(2), (10, 10), comm)


def test_from_coo_non_integer_indices(comm):
    rows = np.array([0.5, 1.0]) if comm.rank == 0 else np.array([0, 1])
    assert_raises_collective(comm, TypeError, DistCSR.from_coo, rows, np.array([0, 1]),
                             np.ones(2), (10, 10), comm, match="integers")


def test_from_coo_non_finite_values(comm):
    vals = np.array([1.0, np.nan if comm.rank == 0 else 2.0])
    assert_raises_collective(comm, ValueError, DistCSR.from_coo, np.array([0, 1]),
                             np.array([0, 1]), vals, (10, 10), comm, match="finite")


def test_from_coo_mismatched_lengths_and_shapes(comm):
    assert_raises_collective(comm, ValueError, DistCSR.from_coo, np.array([0, 1]),
                             np.array([0]), np.ones(2), (10, 10), comm)
    assert_raises_collective(comm, TypeError, DistCSR.from_coo, np.array([0]), np.array([0]),
                             np.ones(1), (10.0, 10), comm)
    assert_raises_collective(comm, ValueError, DistCSR.from_coo, np.array([0]), np.array([0]),
                             np.ones(1), (10, 10), comm, mode="replace")


@pytest.mark.mpi(min_size=2)
def test_from_coo_shapes_differ_between_ranks(comm):
    shape = (10, 11) if comm.rank == 0 else (10, 10)
    assert_raises_collective(comm, ValueError, DistCSR.from_coo, np.array([0]),
                             np.array([0]), np.ones(1), shape, comm, match="shapes")


def test_from_global_bad_input(comm):
    assert_raises_collective(comm, TypeError, DistCSR.from_global, [[1, 2]], comm)
    assert_raises_collective(comm, ValueError, DistCSR.from_global, sp.identity(5), comm,
                             layout=Layout.block(6, comm))


@pytest.mark.mpi(min_size=2)
def test_from_global_matrices_differ_between_ranks(comm):
    A = sp.identity(5 if comm.rank == 0 else 6, format="csr")
    assert_raises_collective(comm, ValueError, DistCSR.from_global, A, comm)


def test_from_local_rows_bad_input(comm):
    lay = Layout.block(8, comm)
    local = sp.csr_matrix((lay.local_size + (1 if comm.rank == 0 else 0), 8))
    assert_raises_collective(comm, ValueError, DistCSR.from_local_rows, local, lay)
    data = sp.identity(8, format="csr")[lay.start:lay.stop] * np.inf
    if lay.local_size == 0:
        data = sp.csr_matrix((0, 8))
    if comm.allreduce(lay.local_size > 0, op=MPI.LOR):
        assert_raises_collective(comm, ValueError, DistCSR.from_local_rows, data, lay,
                                 match="finite")


@pytest.mark.mpi(min_size=2)
def test_from_local_rows_column_counts_differ_between_ranks(comm):
    lay = Layout.block(8, comm)
    local = sp.csr_matrix((lay.local_size, 9 if comm.rank == comm.size - 1 else 8))
    assert_raises_collective(comm, ValueError, DistCSR.from_local_rows, local, lay)


def test_matvec_wrong_vectors(comm):
    A = DistCSR.from_global(random_matrix(7, 11, seed=1), comm)
    x_wrong = DistVector.zeros(Layout.block(7, comm))
    assert_raises_collective(comm, ValueError, A.matvec, x_wrong, match="layout")
    assert_raises_collective(comm, TypeError, A.matvec, np.zeros(11))


@pytest.mark.mpi(min_size=2)
def test_matvec_vector_on_a_reordered_communicator(comm):
    A = DistCSR.from_global(random_matrix(7, 11, seed=1), comm)
    sub = comm.Split(0, comm.size - 1 - comm.rank)
    try:
        x_other = DistVector.zeros(Layout.block(11, sub))
        assert_raises_collective(comm, ValueError, A.matvec, x_other)
    finally:
        sub.Free()


def test_matvec_and_rmatvec_allocate_no_vector():
    """With ``out`` given, matvec/rmatvec (halo exchange included) allocate less
    than a quarter of a local vector after a warm-up call."""
    import tracemalloc
    from dmsolve import gallery
    A = gallery.poisson2d(96, MPI.COMM_WORLD)
    x, y = A.create_vectors()
    x.local[:] = 1.0
    A.matvec(x, out=y)
    A.rmatvec(y, out=x)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for _ in range(3):
            A.matvec(x, out=y)
            A.rmatvec(y, out=x)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert_collective(MPI.COMM_WORLD, peak < 2 * x.local_size,
                      "matvec/rmatvec allocated %d bytes" % peak)
