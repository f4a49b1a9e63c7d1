"""Assembling a DistCSR (``from_coo``, ``from_global``, ``from_local_rows``)
against scipy: any rank may give any row, entries are stored in float64 or
complex128, and bad input is raised with the same exception on every rank."""

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

from bad_inputs import check_bad_input
from dmsolve import DistCSR, DistVector, Layout
from mpitest import Checks, assert_allclose_collective, assert_raises_collective
from operands import real_matrix, uneven_layout


@pytest.mark.parametrize("shape", [(13, 13), (7, 11), (11, 3)], ids=["13x13", "7x11", "11x3"])
@pytest.mark.parametrize("mode", ["add", "insert"])
def test_from_coo_any_rank_any_row(comm, shape, mode):
    """from_coo assembles triplets that any rank gives for any row (duplicates summed) into
    scipy's matrix."""
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
    """from_coo assembles when every rank's entries belong to one other rank."""
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
    """from_coo's layouts, mode and check_finite are keyword-only."""
    # the triplets, the shape and the communicator are positional; the
    # layouts, mode and check_finite only by name
    lay = Layout.block(4, comm)
    args = (np.array([0]), np.array([0]), np.array([1.0]), (4, 4), comm)
    assert_raises_collective(comm, TypeError, DistCSR.from_coo, *args, lay)
    A = DistCSR.from_coo(*args, layout=lay, col_layout=lay, mode="insert", check_finite=True)
    assert_allclose_collective(A.to_scipy().toarray()[0, 0], 1.0)


# -- bad input: the same exception on every rank ---------------------------------------
def test_from_coo_out_of_range_on_one_rank(comm):
    """An index out of range on one rank is refused on every rank."""
    bad = comm.rank == comm.size - 1
    rows = np.array([0, 12 if bad else 1])
    assert_raises_collective(comm, ValueError, DistCSR.from_coo, rows, np.array([0, 1]),
                             np.ones(2), (10, 10), comm, match="out of range")
    cols = np.array([0, -1 if bad else 1])
    assert_raises_collective(comm, ValueError, DistCSR.from_coo, np.array([0, 1]), cols,
                             np.ones(2), (10, 10), comm)


def test_from_coo_non_integer_indices(comm):
    """Non-integer indices are refused."""
    rows = np.array([0.5, 1.0]) if comm.rank == 0 else np.array([0, 1])
    assert_raises_collective(comm, TypeError, DistCSR.from_coo, rows, np.array([0, 1]),
                             np.ones(2), (10, 10), comm, match="integers")


def test_from_coo_non_finite_values(comm):
    """Non-finite values are refused."""
    vals = np.array([1.0, np.nan if comm.rank == 0 else 2.0])
    assert_raises_collective(comm, ValueError, DistCSR.from_coo, np.array([0, 1]),
                             np.array([0, 1]), vals, (10, 10), comm, match="finite")


def test_from_coo_mismatched_lengths_and_shapes(comm):
    """Triplets of different lengths and bad shapes are refused."""
    assert_raises_collective(comm, ValueError, DistCSR.from_coo, np.array([0, 1]),
                             np.array([0]), np.ones(2), (10, 10), comm)
    assert_raises_collective(comm, TypeError, DistCSR.from_coo, np.array([0]), np.array([0]),
                             np.ones(1), (10.0, 10), comm)
    assert_raises_collective(comm, ValueError, DistCSR.from_coo, np.array([0]), np.array([0]),
                             np.ones(1), (10, 10), comm, mode="replace")


@pytest.mark.mpi(min_size=2)
def test_from_coo_shapes_differ_between_ranks(comm):
    """Shapes that differ between ranks are refused on every rank."""
    shape = (10, 11) if comm.rank == 0 else (10, 10)
    assert_raises_collective(comm, ValueError, DistCSR.from_coo, np.array([0]),
                             np.array([0]), np.ones(1), shape, comm, match="shapes")


def test_from_global_bad_input(comm):
    """from_global refuses what is not a 2-D matrix."""
    assert_raises_collective(comm, TypeError, DistCSR.from_global, [[1, 2]], comm)
    assert_raises_collective(comm, ValueError, DistCSR.from_global, sp.identity(5), comm,
                             layout=Layout.block(6, comm))


@pytest.mark.mpi(min_size=2)
def test_from_global_matrices_differ_between_ranks(comm):
    """Global matrices that differ between ranks are refused on every rank."""
    A = sp.identity(5 if comm.rank == 0 else 6, format="csr")
    assert_raises_collective(comm, ValueError, DistCSR.from_global, A, comm)


def test_from_local_rows_bad_input(comm):
    """from_local_rows refuses blocks of the wrong row count or shape."""
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
    """Column counts that differ between ranks are refused on every rank."""
    lay = Layout.block(8, comm)
    local = sp.csr_matrix((lay.local_size, 9 if comm.rank == comm.size - 1 else 8))
    assert_raises_collective(comm, ValueError, DistCSR.from_local_rows, local, lay)


# the dtypes scipy.sparse holds that are not the two stored ones
DTYPES = {"int64": np.int64, "int32": np.int32, "uint8": np.uint8, "bool": np.bool_,
          "float32": np.float32, "longdouble": np.longdouble, "complex64": np.complex64,
          "clongdouble": np.clongdouble}


def _matrix_of(dtype, m=13, n=13, seed=3):
    S = real_matrix(m, n, seed=seed)
    if np.dtype(dtype).kind == "c":
        S = S + 1j * real_matrix(m, n, seed=seed + 1)
    if np.dtype(dtype).kind in "iub":
        S = S * 5
    return sp.csr_matrix(S).astype(dtype)


def _build(constructor, M, dtype, comm):
    lay = Layout.block(M.shape[0], comm)
    s, e = lay.owned_range
    if constructor == "from_global":
        return DistCSR.from_global(M, comm)
    if constructor == "from_local_rows":
        return DistCSR.from_local_rows(M[s:e], lay)
    if constructor == "from_coo":
        C = M[s:e].tocoo()
        return DistCSR.from_coo(C.row + s, C.col, C.data, M.shape, comm)
    B = DistCSR.from_global(M.astype(np.complex128 if dtype.kind == "c" else np.float64), comm)
    return DistCSR(B.diag.astype(dtype), B.offd.astype(dtype), B.ghosts, B.row_layout,
                   B.col_layout)


@pytest.mark.parametrize("name", list(DTYPES), ids=list(DTYPES))
def test_every_constructor_stores_float64_or_complex128(comm, name):
    """Every constructor stores an integer, float32 or bool matrix as float64 (complex as
    complex128), with products to match."""
    dtype = np.dtype(DTYPES[name])
    M = _matrix_of(dtype)
    want = np.dtype(np.complex128 if dtype.kind == "c" else np.float64)
    ref = M.astype(want)
    x = (np.arange(M.shape[1]) % 4).astype(np.float64)
    xin = (x > 0).astype(np.float64) if dtype.kind == "b" else x
    for constructor in ("from_global", "from_local_rows", "from_coo", "constructor"):
        A = _build(constructor, M, dtype, comm)
        with Checks(comm) as checks:
            checks.add(A.dtype == want, constructor + ": stored dtype", A.dtype)
            checks.add(A.halo.dtype == want, constructor + ": halo dtype", A.halo.dtype)
            checks.add(A.diag.dtype == want and A.offd.dtype == want,
                       constructor + ": block dtypes")
        y = A @ DistVector.from_global(x.astype(dtype) if dtype.kind != "b" else x > 0,
                                       A.col_layout)
        assert_allclose_collective(y.gather(), ref @ xin, comm, rtol=1e-6, atol=1e-6,
                                   err_msg=constructor)
        assert_allclose_collective(abs(A.to_scipy() - ref).toarray(), 0.0, comm, atol=0,
                                   err_msg=constructor)


@pytest.mark.mpi(min_size=2)
def test_complex_entries_on_one_rank_make_the_matrix_complex_everywhere(comm):
    """Complex entries on one rank make the matrix complex on every rank."""
    M = _matrix_of(np.complex128)
    lay = Layout.block(M.shape[0], comm)
    s, e = lay.owned_range
    local = M[s:e] if comm.rank == 0 else sp.csr_matrix(M[s:e].real)
    A = DistCSR.from_local_rows(local, lay)
    with Checks(comm) as checks:
        checks.add(A.dtype == np.complex128 and A.halo.dtype == np.complex128, "dtype",
                   (A.dtype, A.halo.dtype))
    ref = sp.vstack([M[:lay.range_of(0)[1]], M[lay.range_of(0)[1]:].real]).tocsr()
    x = np.linspace(-1, 1, M.shape[1]) * (1 - 0.5j)
    y = A @ DistVector.from_global(x, A.col_layout)
    assert_allclose_collective(y.gather(), ref @ x, comm, rtol=1e-12, atol=1e-12)


# -- bad input: the same exception on every rank -------------------------------------------

BAD_INPUTS = [
    ("matrix-local-rows-wrong-count-on-last-rank", ValueError, "rows",
     lambda e: DistCSR.from_local_rows(
         sp.csr_matrix((e.A.row_layout.local_size + (e.rank == e.size - 1), e.n)),
         e.A.row_layout)),
    ("matrix-coo-index-out-of-range", ValueError, "out of range",
     lambda e: DistCSR.from_coo(np.array([0, e.n]), np.array([0, 0]), np.array([1.0, 1.0]),
                                (e.n, e.n), e.comm)),
    ("matrix-from-3d-array", ValueError, "2-D",
     lambda e: DistCSR.from_global(np.ones((2, 2, 2)), e.comm)),
    ("matrix-local-rows-nan-on-rank-0", ValueError, "finite",
     lambda e: DistCSR.from_local_rows(sp.csr_matrix(np.full(
         (e.A.row_layout.local_size, e.n), np.nan if e.rank == 0 else 1.0)), e.A.row_layout)),
    ("matrix-coo-nan", ValueError, "finite",
     lambda e: DistCSR.from_coo(np.array([0]), np.array([0]), np.array([np.nan]),
                                (e.n, e.n), e.comm)),
]


@pytest.mark.parametrize("exc, match, call", [c[1:] for c in BAD_INPUTS],
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_the_same_exception_on_every_rank(bad_input_env, request, exc, match,
                                                           call):
    """Each case of BAD_INPUTS raises the same exception type, with a message
    that matches, on every rank (or works, at one rank, where a COMM_SELF
    operand is valid)."""
    check_bad_input(bad_input_env, request, exc, match, call)
