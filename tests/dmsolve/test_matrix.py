"""DistCSR against scipy on the gathered matrix: products (real, complex and
mixed, in float32 for ``single()``), structure, buffers reused, halo exchanges
never left active, and mismatched operands refused on every rank.

Cases that could hang or corrupt memory run in a child MPI job
(``run_mpi_job``), so that they fail by a non-zero exit or a timeout instead
of taking the suite with them."""

import textwrap
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

import dmsolve.gallery as gallery
from bad_inputs import check_bad_input, other_size, self_vector
from dmsolve import DistCSR, DistVector, Layout
from dmsolve.bsp import NeighborExchange
from mpitest import (Checks, assert_allclose_collective, assert_collective, assert_equal_collective,
                     assert_raises_collective, run_mpi_job)
from operands import complex_matrix, dominant, random_matrix, real_matrix, uneven_layout, vector
from threaded import Posts, same_bits, small_blocks


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
    """matvec and rmatvec equal scipy's products on uneven layouts, with empty rows and columns."""
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
    """Repeated matvecs reuse their buffers."""
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


def test_diagonal_row_sums_and_scale(comm):
    """diagonal, row sums and scale equal scipy's."""
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
    """The diagonal of a rectangular matrix equals scipy's."""
    A = random_matrix(11, 7, seed=2, density=0.6)
    dA = DistCSR.from_global(A, comm)
    d = np.zeros(11)
    d[:7] = A.diagonal()
    assert_allclose_collective(dA.diagonal().gather(), d)


def test_local_rows_and_block(comm):
    """local_rows and the local block hold this rank's rows."""
    A = random_matrix(13, 13, seed=4)
    dA = DistCSR.from_global(A, comm)
    s, e = dA.row_layout.owned_range
    assert_allclose_collective(dA.local_rows().toarray(), A[s:e].toarray())
    cs, ce = dA.col_layout.owned_range
    assert_allclose_collective(dA.local_block().toarray(), A[s:e, cs:ce].toarray())


def test_memory_within_bound_of_scipy(comm):
    """A DistCSR's local memory is within 1.3x scipy's for its rows, plus its halo buffers."""
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


def test_matvec_wrong_vectors(comm):
    """matvec refuses vectors of the wrong layout."""
    A = DistCSR.from_global(random_matrix(7, 11, seed=1), comm)
    x_wrong = DistVector.zeros(Layout.block(7, comm))
    assert_raises_collective(comm, ValueError, A.matvec, x_wrong, match="layout")
    assert_raises_collective(comm, TypeError, A.matvec, np.zeros(11))


@pytest.mark.mpi(min_size=2)
def test_matvec_vector_on_a_reordered_communicator(comm):
    """matvec refuses a vector on a communicator with the ranks in another order."""
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


def run_child(comm, code, nprocs=2, timeout=120):
    """Run ``code`` under ``mpiexec -n nprocs python -m mpi4py -c``; every rank
    gets ``(returncode, output)``. Collective on ``comm``."""
    rc, out, _ = run_mpi_job(comm, nprocs, ["-m", "mpi4py", "-c", textwrap.dedent(code)],
                             timeout=timeout)
    return rc, out


# -- stored dtype -----------------------------------------------------------------

_DTYPE_SEQUENCE = """
    import numpy as np, scipy.sparse as sp
    from mpi4py import MPI
    from dmsolve import DistCSR, DistVector
    comm = MPI.COMM_WORLD
    S = sp.random(13, 13, density=0.3, random_state=4, format="csr")
    x = (np.arange(13) % 3).astype(np.float64)
    for dt in (np.int64, np.float32, np.bool_):
        M = (S * 7).astype(dt)
        A = DistCSR.from_global(M, comm)
        assert A.dtype == np.float64 and A.halo.dtype == np.float64, A.dtype
        ref = M.astype(np.float64) @ x
        # a product with a vector of another dtype must not raise after the
        # halo has started (that would leave its persistent requests active)
        y = A @ DistVector.from_global(x.astype(dt), A.col_layout)
        assert y.dtype == np.float64
        own = M.astype(np.float64) @ x.astype(dt).astype(np.float64)
        assert np.allclose(y.gather(), own, rtol=1e-12, atol=1e-12), dt
        # ... after which every later product failed
        for _ in range(3):
            xv = DistVector.from_global(x, A.col_layout)
            assert np.allclose((A @ xv).gather(), ref, rtol=1e-12, atol=1e-12)
            assert np.allclose(A.rmatvec(xv).gather(), M.astype(np.float64).T @ x,
                               rtol=1e-12, atol=1e-12)
        assert not A.halo.active
    print("CHILD-OK", comm.rank, flush=True)
"""


@pytest.mark.timeout(200)
def test_integer_float32_bool_matrices_then_later_products_exit_cleanly(comm):
    """Products with integer, float32 and bool matrices, then later products, exit cleanly (in
    a child job)."""
    # a bad-dtype product, later products, then exit: a wrong halo buffer
    # would show as heap corruption at exit, so this runs in a child job
    rc, out = run_child(comm, _DTYPE_SEQUENCE)
    assert_collective(comm, rc == 0 and out.count("CHILD-OK") == 2,
                      "child job rc=%s:\n%s" % (rc, out[-3000:]))
    assert_collective(comm, "corrupt" not in out and "free()" not in out, out[-3000:])


# -- no halo exchange left active ---------------------------------------------------

def _read_only(v):
    v.local.setflags(write=False)
    return v


@pytest.mark.parametrize("product", ["matvec", "rmatvec"])
def test_an_exception_inside_a_product_leaves_no_exchange_active(comm, product):
    """An exception inside a product leaves no halo exchange active, and later products work."""
    M = real_matrix(23, 23, seed=5)
    A = DistCSR.from_global(M, comm)
    x = DistVector.from_global(np.arange(23.0), A.col_layout)
    # a read-only out passes every check at the door and fails while the
    # halo exchange is in flight
    bad = _read_only(DistVector.zeros(A.row_layout))
    assert_raises_collective(comm, ValueError, getattr(A, product), x, bad)
    with Checks(comm) as checks:
        checks.add(not A.halo.active, "forward exchange inactive")
        checks.add(A.halo._reverse is None or not A.halo.reverse().active,
                   "reverse exchange inactive")
    ref = M @ np.arange(23.0) if product == "matvec" else M.T @ np.arange(23.0)
    for _ in range(2):
        y = getattr(A, product)(x)
        assert_allclose_collective(y.gather(), ref, comm, rtol=1e-13, atol=1e-13)


def test_double_start_finish_without_start_and_free_while_active_are_clear_errors(comm):
    """Starting a halo exchange twice, finishing one not started or freeing one active are
    clear errors on every rank."""
    A = DistCSR.from_global(real_matrix(17, 17, seed=6), comm)
    x = DistVector.from_global(np.ones(17), A.col_layout)
    halo = A.halo
    halo.start(x.local)
    assert_raises_collective(comm, RuntimeError, halo.start, x.local,
                             match=r"active; call finish\(\) first")
    assert_raises_collective(comm, RuntimeError, halo.for_dtype(np.complex128).start,
                             x.local.astype(np.complex128), match="active")
    assert_raises_collective(comm, RuntimeError, halo.free, match="active")
    assert_raises_collective(comm, RuntimeError, halo.for_dtype(np.complex128).finish,
                             match=r"without start\(\)")
    halo.finish()
    assert_raises_collective(comm, RuntimeError, halo.finish, match=r"without start\(\)")
    assert_raises_collective(comm, TypeError, halo.start, x.local.astype(np.complex128),
                             match="for_dtype")
    assert_collective(comm, not halo.active)
    y = A @ x
    assert_allclose_collective(y.gather(), A.to_scipy() @ np.ones(17), comm, rtol=1e-13)


@pytest.mark.parametrize("method", ["p2p", "graph"])
def test_dtype_variant_of_a_pattern_exchanges_the_same_entries(comm, method):
    """A pattern's variant for another dtype exchanges the same entries, cached, with its
    reverse."""
    lay = Layout.block(19, comm)
    s, e = lay.owned_range
    ghosts = np.array([g for g in (0, 5, 9, 18) if not s <= g < e], dtype=np.int64)
    plan = NeighborExchange.from_ghosts(lay, ghosts, method=method)
    vals = np.arange(s, e) * (1.0 - 2.0j)
    var = plan.for_dtype(np.complex128)
    with Checks(comm) as checks:
        checks.add(plan.for_dtype(np.float64) is plan, "own dtype gives the plan")
        checks.add(plan.for_dtype(np.complex128) is var, "variant cached")
        got = var.exchange(vals).copy()
        checks.add(np.array_equal(got, ghosts * (1.0 - 2.0j)), "complex ghosts", got)
        got = plan.exchange(vals.real.copy()).copy()
        checks.add(np.array_equal(got, ghosts.astype(float)), "real ghosts after", got)
        back = var.reverse()
        checks.add(back is plan.reverse().for_dtype(np.complex128), "reverse of the variant")
    plan.free()


_BAD_VECTOR = """
    import numpy as np, scipy.sparse as sp
    from mpi4py import MPI
    from dmsolve import DistCSR, DistVector, Layout
    comm = MPI.COMM_WORLD
    n = 11
    A = DistCSR.from_global(sp.random(n, n, density=0.4, random_state=2, format="csr"), comm)
    ranges = A.col_layout.ranges.copy()
    if comm.rank == 1:
        ranges[1] -= 1          # rank 0 sees A's layout, rank 1 another one
    lay = Layout(ranges, comm)
    x = DistVector(lay, np.ones(lay.local_size))
    try:
        A @ x
    except ValueError as e:
        assert "different ownership ranges" in str(e), e
        print("REFUSED", comm.rank, flush=True)
    y = A @ DistVector.from_global(np.ones(n), A.col_layout)
    assert np.allclose(y.gather(), A.to_scipy() @ np.ones(n))
    print("CHILD-OK", comm.rank, flush=True)
"""


@pytest.mark.timeout(200)
def test_product_with_a_vector_whose_layout_differs_between_ranks_is_refused(comm):
    """A product with a vector whose layout differs between ranks is refused on every rank (in
    a child job)."""
    # neither may rank 0 compute with uninitialised memory nor rank 1 raise alone
    rc, out = run_child(comm, _BAD_VECTOR, timeout=90)
    assert_collective(comm, rc == 0 and out.count("REFUSED") == 2
                      and out.count("CHILD-OK") == 2, "child job rc=%s:\n%s" % (rc, out[-3000:]))


def test_distcsr_with_numpy_arrays_is_a_clear_error(comm):
    """A DistCSR multiplied by a numpy array is a clear error."""
    A = DistCSR.from_global(real_matrix(6, 6), comm)
    assert_raises_collective(comm, TypeError, lambda: A @ np.ones(6),
                             match=r"DistVector\.from_global")
    assert_raises_collective(comm, TypeError, A.matvec, np.ones(6), match="from_global")
    assert_raises_collective(comm, TypeError, lambda: np.ones(6) @ A, match="rmatvec")
    assert_raises_collective(comm, TypeError, np.asarray, A, match=r"to_scipy\(\)")


SHAPES = {"square-13": (13, 13), "square-101": (101, 101), "wide-7x11": (7, 11),
          "tall-11x3": (11, 3), "empty-0x4": (0, 4)}
PAIRS = {"real-A-complex-x": ("real", "complex"), "complex-A-real-x": ("complex", "real"),
         "complex-A-complex-x": ("complex", "complex"), "real-A-complex64-x": ("real", "c8")}


# -- products ----------------------------------------------------------------------

@pytest.mark.parametrize("layouts", ["block", "uneven"])
@pytest.mark.parametrize("pair", list(PAIRS), ids=list(PAIRS))
@pytest.mark.parametrize("shape", list(SHAPES), ids=list(SHAPES))
def test_products_of_real_and_complex_operands_match_scipy(comm, shape, pair, layouts):
    """Products of real and complex matrices and vectors, in every pairing, equal scipy's."""
    m, n = SHAPES[shape]
    akind, xkind = PAIRS[pair]
    M = complex_matrix(m, n, seed=3) if akind == "complex" else real_matrix(m, n, seed=3)
    rows, cols = ((None, None) if layouts == "block"
                  else (uneven_layout(m, comm), Layout.block(n, comm)))
    A = DistCSR.from_global(M, comm, layout=rows, col_layout=cols)
    x, y = vector(n, 1, "complex"), vector(m, 2, "complex")
    if xkind == "c8":
        x, y = x.astype(np.complex64), y.astype(np.complex64)
    elif xkind == "real":
        x, y = x.real.copy(), y.real.copy()
    dx, dy = DistVector.from_global(x, A.col_layout), DistVector.from_global(y, A.row_layout)
    tol = dict(rtol=1e-6 if xkind == "c8" else 1e-13, atol=1e-6 if xkind == "c8" else 1e-13)
    x, y = x.astype(np.complex128), y.astype(np.complex128)
    want = np.complex128
    for name, got, ref in (("matvec", A.matvec(dx), M @ x), ("A @ x", A @ dx, M @ x),
                           ("rmatvec", A.rmatvec(dy), M.T @ y),
                           ("hmatvec", A.hmatvec(dy), M.conj().T @ y)):
        assert_collective(comm, got.dtype == want, "%s dtype %s" % (name, got.dtype))
        assert_allclose_collective(got.gather(), ref, comm, err_msg=name, **tol)
    out_y, out_x = DistVector.zeros(A.row_layout, want), DistVector.zeros(A.col_layout, want)
    for _ in range(2):      # the second product reuses the buffers of the first
        assert_collective(comm, A.matvec(dx, out=out_y) is out_y)
        assert_collective(comm, A.rmatvec(dy, out=out_x) is out_x)
        assert_allclose_collective(out_y.gather(), M @ x, comm, err_msg="out=", **tol)
        assert_allclose_collective(out_x.gather(), M.T @ y, comm, err_msg="rmatvec out=",
                                   **tol)
    assert_collective(comm, not A.halo.active)


@pytest.mark.parametrize("pair", ["real-A-complex-x", "complex-A-real-x"])
def test_mixed_products_allocate_nothing_after_the_first(comm, pair):
    """Mixed real/complex products allocate nothing after the first."""
    akind, xkind = PAIRS[pair]
    n = 3000
    M = dominant(n, seed=4, kind=akind, density=0.002)
    A = DistCSR.from_global(M, comm)
    x = DistVector.from_global(vector(n, 1, xkind), A.col_layout)
    out = DistVector.zeros(A.row_layout, np.complex128)
    back = DistVector.zeros(A.col_layout, np.complex128)
    for _ in range(2):
        A.matvec(x, out=out), A.rmatvec(x, out=back), A.hmatvec(x, out=back)
    variant = A.halo.for_dtype(np.complex128)
    recv = variant.recvbuf
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        for _ in range(5):
            A.matvec(x, out=out)
            A.rmatvec(x, out=back)
            A.hmatvec(x, out=back)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    # one complex copy of a rank's part of the vector (or of the matrix's
    # values) is 16 bytes an entry: 12 KiB (4 ranks) to 48 KiB here, twice
    # the bound and more. Python's and numpy's own small objects after the
    # warm-up are a few KiB: 2.4-2.7 KiB on rank 0 of 4, in a plain script as
    # after the whole suite (120-byte objects from np.take's out= path in the
    # reverse halo), and they do not grow with the products (500 more: +4 KiB)
    with Checks(comm) as checks:
        checks.add(peak < 6144, "bytes allocated by 15 products", peak)
        checks.add(A.halo.for_dtype(np.complex128) is variant and variant.recvbuf is recv,
                   "the complex halo is built once")
    assert_allclose_collective(out.gather(), M @ vector(n, 1, xkind), comm, rtol=1e-12)


def test_a_real_out_for_a_complex_product_is_a_type_error(comm):
    """A real ``out`` for a complex product is a TypeError."""
    M = real_matrix(17, 17, seed=8)
    A = DistCSR.from_global(M, comm)
    x = DistVector.from_global(vector(17, 5, "complex"), A.col_layout)
    for product in (A.matvec, A.rmatvec, A.hmatvec):
        assert_raises_collective(comm, TypeError, product, x, DistVector.zeros(A.row_layout),
                                 match="real out cannot hold a complex result")
    C = DistCSR.from_global(complex_matrix(17, 17, seed=8), comm)
    xr = DistVector.from_global(vector(17, 5, "real"), C.col_layout)
    assert_raises_collective(comm, TypeError, C.matvec, xr, DistVector.zeros(C.row_layout),
                             match="real out cannot hold a complex result")
    with Checks(comm) as checks:
        checks.add(not A.halo.active and not C.halo.active, "no exchange left active")
    assert_allclose_collective((A @ x).gather(), M @ vector(17, 5, "complex"), comm,
                               rtol=1e-13, atol=1e-13)


def test_complex_matrix_structure_matches_scipy(comm):
    """A complex matrix's structure (diagonal, transpose, conjugate, ...) equals scipy's."""
    M = complex_matrix(19, 19, seed=11) + sp.diags(np.arange(1, 20) * (1 - 1j))
    M = sp.csr_matrix(M)
    A = DistCSR.from_global(M, comm, layout=uneven_layout(19, comm),
                            col_layout=uneven_layout(19, comm))
    dense = M.toarray()
    for name, got, ref in (("to_scipy", A.to_scipy(), dense),
                           ("transpose", A.transpose().to_scipy(), dense.T),
                           ("conjugate_transpose", A.conjugate_transpose().to_scipy(),
                            dense.conj().T),
                           ("conj", A.conj().to_scipy(), dense.conj()),
                           ("copy", A.copy().to_scipy(), dense)):
        assert_allclose_collective(got.toarray(), ref, comm, rtol=0, err_msg=name)
    assert_allclose_collective(A.diagonal().gather(), np.diag(dense), comm, rtol=0)
    assert_allclose_collective(A.row_sums().gather(), dense.sum(axis=1), comm, rtol=1e-14)
    assert_allclose_collective(A.row_sums(absolute=True).gather(), abs(dense).sum(axis=1),
                               comm, rtol=1e-14)
    left, right = vector(19, 3, "complex"), vector(19, 4, "complex")
    B = A.copy().scale(DistVector.from_global(left, A.row_layout),
                       DistVector.from_global(right, A.col_layout))
    assert_allclose_collective(B.to_scipy().toarray(), left[:, None] * dense * right[None, :],
                               comm, rtol=1e-14)
    R = DistCSR.from_global(sp.csr_matrix(M.real), comm)
    C = R.astype(np.complex128)
    assert_collective(comm, C.dtype == np.complex128 and C.halo.dtype == np.complex128)
    assert_raises_collective(comm, TypeError, R.scale,
                             DistVector.from_global(left, R.row_layout), match="astype")
    C.scale(DistVector.from_global(left, R.row_layout))
    assert_allclose_collective(C.to_scipy().toarray(), left[:, None] * M.real.toarray(),
                               comm, rtol=1e-14)


@pytest.mark.parametrize("fmt", ["sell", "csr"])
def test_single_matrix_products_round_to_float32(comm, fmt):
    """Products of single() copies equal scipy's in float32 rounding."""
    A = gallery.poisson3d(12, comm)
    A.set_local_format(fmt)
    S = A.single()
    assert_collective(comm, S.dtype == np.float32 and S.product_format == fmt
                      and S.copy().dtype == np.float32)
    ref = A.to_scipy()
    x = np.random.default_rng(0).standard_normal(ref.shape[0])
    x32 = DistVector.from_global(x.astype(np.float32), S.col_layout)
    y = S.matvec(x32)
    assert_collective(comm, y.dtype == np.float32)
    scale = abs(ref) @ abs(x)
    # each product and sum rounded to float32: a few units of 2^-24 per entry
    assert_allclose_collective(y.gather(), ref @ x, rtol=0, atol=1e-6 * scale.max())
    assert_allclose_collective(S.rmatvec(x32).gather(), ref.T @ x, rtol=0,
                               atol=1e-6 * scale.max())
    # half the bytes of the float64 matrix's arrays
    half = (S.diag.data.nbytes + S.offd.data.nbytes) * 2
    assert_collective(comm, half == A.diag.data.nbytes + A.offd.data.nbytes)


def test_single_refuses_complex_on_every_rank(comm):
    """single() refuses a complex matrix on every rank."""
    A = gallery.poisson3d(4, comm).astype(complex)
    assert_raises_collective(comm, TypeError, A.single, match="real matrices")
    lay = A.row_layout
    assert_raises_collective(comm, TypeError, DistCSR, A.diag, A.offd, A.ghosts, lay, lay,
                             single=True, match="real matrices")


def test_compact_single_copy_multiplies_alike_and_rebuilds_its_csr(comm):
    """A compact single() copy multiplies like the full one and rebuilds its CSR on request."""
    # single(compact=True) keeps a block multiplied in sliced ELL in that form only
    A = gallery.poisson3d(14, comm)                   # 2744 rows: sliced ELL where a rank has 256+
    S, C = A.single(), A.single(compact=True)
    sell = A.product_format == "sell"
    assert_raises_collective(comm, TypeError, A.single, compact="yes", match="compact")
    assert_collective(comm, C.compact == sell and not S.compact and C.product_format
                      == S.product_format, "compact %s on a %s block" % (C.compact,
                                                                        A.product_format))
    x = DistVector.from_global(np.random.default_rng(4).standard_normal(A.shape[0])
                               .astype(np.float32), A.col_layout)
    same = (np.array_equal(C.matvec(x).local, S.matvec(x).local)
            and np.array_equal(C.rmatvec(x).local, S.rmatvec(x).local))
    assert_collective(comm, same, "compact products differ")
    assert_collective(comm, C.local_nnz == S.local_nnz
                      and (not sell or C.local_nbytes < S.local_nbytes),
                      "%d / %d bytes" % (C.local_nbytes, S.local_nbytes))
    # the CSR view is rebuilt on access, and comes back to stay where it is changed
    assert_allclose_collective(C.to_scipy().toarray(), S.to_scipy().toarray(), comm,
                               rtol=0, atol=0)
    C.set_local_format("csr")
    assert_collective(comm, not C.compact and C.product_format == "csr")
    assert_allclose_collective(C.matvec(x).local, S.matvec(x).local, comm, rtol=1e-6,
                               atol=1e-6 * float(np.abs(S.matvec(x).local).max(initial=1.0)))


# -- bad input: the same exception on every rank -------------------------------------------

BAD_INPUTS = [
    ("matvec-wrong-size", ValueError, "global size", lambda e: e.A.matvec(other_size(e))),
    ("matvec-vector-on-comm-self", ValueError, "communicator",
     lambda e: e.A.matvec(self_vector(e))),
]


@pytest.mark.parametrize("exc, match, call", [c[1:] for c in BAD_INPUTS],
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_the_same_exception_on_every_rank(bad_input_env, request, exc, match,
                                                           call):
    """Each case of BAD_INPUTS raises the same exception type, with a message
    that matches, on every rank (or works, at one rank, where a COMM_SELF
    operand is valid)."""
    check_bad_input(bad_input_env, request, exc, match, call)


@pytest.mark.parametrize("fmt", ["auto", "sell", "narrow", "csr"])
@pytest.mark.parametrize("layouts", ["block", "uneven"])
@pytest.mark.parametrize("kind", ["real", "complex-x", "complex-matrix"])
def test_threaded_products_are_the_bits_of_one_thread(comm, monkeypatch, fmt, layouts, kind):
    """matvec and rmatvec on 2 and 4 threads (the on- and off-process blocks
    split into blocks of rows) give the bits of one thread."""
    small_blocks(monkeypatch, rows=48)
    posts = Posts(monkeypatch)
    A = random_matrix(1500, 1300, density=0.004, seed=11, empty_rows=(3, 700))
    A = A + sp.eye(1500, 1300, format="csr")
    if kind == "complex-matrix":
        A = A + 1j * random_matrix(1500, 1300, density=0.002, seed=12)
    row_layout, col_layout = _layouts(layouts, A, comm)
    dA = DistCSR.from_global(A, comm, layout=row_layout, col_layout=col_layout)
    dA.set_local_format(fmt)
    x = vector(1300, 1, "real" if kind == "real" else "complex")
    y = vector(1500, 2, "real" if kind == "real" else "complex")
    dx, dy = DistVector.from_global(x, dA.col_layout), DistVector.from_global(y, dA.row_layout)
    ref, rref = dA.matvec(dx, threads=1).local.copy(), dA.rmatvec(dy, threads=1).local.copy()
    for k in (2, 4):
        assert_collective(comm, same_bits(dA.matvec(dx, threads=k).local, ref), "matvec %d" % k)
        assert_collective(comm, same_bits(dA.rmatvec(dy, threads=k).local, rref),
                          "rmatvec %d" % k)
    assert_collective(comm, posts.count > 0 or dA.row_layout.local_size < 96)
    assert_allclose_collective(dA.matvec(dx, threads=2).gather(), A @ x, rtol=1e-13,
                               atol=1e-13)
    assert_allclose_collective(dA.rmatvec(dy, threads=2).gather(), A.T @ y, rtol=1e-13,
                               atol=1e-13)
