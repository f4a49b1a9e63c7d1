"""Complex numbers in the core and the preconditioners that support them.

DistCSR and DistVector against scipy/numpy on the gathered objects: products
of every real/complex pairing (``matvec``, ``rmatvec`` = ``A^T``, ``hmatvec``
= ``A^H``), the structure calls, and jacobi, bjacobi and asm applied to
complex vectors against serial references. amg, cheby and gemslr refuse a
complex matrix (and a complex vector) with TypeError at the door.
"""

import tracemalloc

import numpy as np
import pytest
import scipy.linalg as sla
import scipy.sparse as sp
from scipy.sparse.linalg import spilu, splu

import preconditioners
from dmsolve import DistCSR, DistLinearOperator, DistVector, Layout, aslinearoperator
from dmsolve.io import read_matrix, read_vector, write_matrix, write_vector
from dmsolve.partition import partition, redistribute
from mpitest import (Checks, assert_allclose_collective, assert_collective,
                     assert_raises_collective)


def uneven_layout(n, comm):
    """Rank 0 owns nothing (at 2+ ranks), the others uneven blocks."""
    if comm.size == 1:
        return Layout.block(n, comm)
    counts = np.zeros(comm.size, dtype=np.int64)
    counts[1:] = [len(r) for r in np.array_split(np.arange(n), comm.size - 1)]
    return Layout(np.concatenate(([0], np.cumsum(counts))), comm)


def real_matrix(m, n, seed=0, density=0.3):
    return sp.random(m, n, density=density, random_state=seed, format="csr")


def complex_matrix(m, n, seed=0, density=0.3):
    R = real_matrix(m, n, seed, density)
    return sp.csr_matrix(R + 1j * R.multiply(sp.random(m, n, density=1.0,
                                                       random_state=seed + 50)) - 0.5j * R)


def dominant(n, seed=0, kind="complex", density=0.12):
    """Diagonally dominant (nonzero pivots everywhere), structurally symmetric."""
    R = real_matrix(n, n, seed, density)
    R = R + R.T
    if kind == "complex":
        S = sp.csr_matrix(R + 1j * sp.random(n, n, density=1.0, random_state=seed + 9)
                          .multiply(R != 0))
        d = 1.0 + np.asarray(abs(S).sum(axis=1)).ravel()
        return sp.csr_matrix(S + sp.diags(d * (1.0 + 0.5j)))
    d = 1.0 + np.asarray(abs(R).sum(axis=1)).ravel()
    return sp.csr_matrix(R + sp.diags(d))


def vector(n, seed, kind):
    rng = np.random.default_rng(seed)
    v = rng.standard_normal(n)
    return v + 1j * rng.standard_normal(n) if kind == "complex" else v


SHAPES = {"square-13": (13, 13), "square-101": (101, 101), "wide-7x11": (7, 11),
          "tall-11x3": (11, 3), "empty-0x4": (0, 4)}
PAIRS = {"real-A-complex-x": ("real", "complex"), "complex-A-real-x": ("complex", "real"),
         "complex-A-complex-x": ("complex", "complex"), "real-A-complex64-x": ("real", "c8")}


# -- products ----------------------------------------------------------------------

@pytest.mark.parametrize("layouts", ["block", "uneven"])
@pytest.mark.parametrize("pair", list(PAIRS), ids=list(PAIRS))
@pytest.mark.parametrize("shape", list(SHAPES), ids=list(SHAPES))
def test_products_of_real_and_complex_operands_match_scipy(comm, shape, pair, layouts):
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


def test_complex_vectors_reduce_like_numpy(comm):
    lay = uneven_layout(23, comm)
    g, h = vector(23, 1, "complex"), vector(23, 2, "complex")
    x, y = DistVector.from_global(g, lay), DistVector.from_global(h, lay)
    with Checks(comm) as checks:
        # conjugate-linear in the first argument, as np.vdot
        checks.add(np.isclose(x.dot(y), np.vdot(g, h), rtol=1e-13), "dot", x.dot(y))
        checks.add(np.isclose(y.dot(x), np.vdot(h, g), rtol=1e-13), "dot swapped")
        for ord_ in (1, 2, np.inf):
            nrm = x.norm(ord_)
            checks.add(isinstance(nrm, float) and np.isclose(nrm, np.linalg.norm(g, ord_),
                                                             rtol=1e-13), "norm %s" % ord_, nrm)
        checks.add(np.isclose(x.sum(), g.sum(), rtol=1e-13), "sum")
        checks.add(x.conj().dtype == np.complex128, "conj dtype")
    assert_allclose_collective(x.conj().gather(), np.conj(g), comm, rtol=0)
    assert_allclose_collective(DistVector.from_global(g.real, lay).astype(complex).gather(),
                               g.real, comm, rtol=0)
    z = x.copy().axpy(2.0 - 1.0j, y)
    assert_allclose_collective(z.gather(), g + (2.0 - 1.0j) * h, comm, rtol=1e-14)


def test_complex_matrix_structure_matches_scipy(comm):
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


def test_complex_through_matrix_market_and_redistribution(comm, shared_tmp_path):
    M = complex_matrix(21, 21, seed=12) + sp.identity(21)
    A = DistCSR.from_global(sp.csr_matrix(M), comm)
    g = vector(21, 6, "complex")
    x = DistVector.from_global(g, A.col_layout)
    write_matrix(shared_tmp_path / "A.mtx", A)
    write_vector(shared_tmp_path / "x.mtx", x)
    B = read_matrix(shared_tmp_path / "A.mtx", comm)
    y = read_vector(shared_tmp_path / "x.mtx", comm)
    with Checks(comm) as checks:
        checks.add(B.dtype == np.complex128 and y.dtype == np.complex128, "dtypes read")
    assert_allclose_collective(B.to_scipy().toarray(), M.toarray(), comm, rtol=0)
    assert_allclose_collective(y.gather(), g, comm, rtol=0)
    p = partition(A, "nnz")
    Ap, xp = redistribute(A, p), redistribute(x, p)
    # A^H x on the new distribution, moved back, is A^H x
    assert_allclose_collective(p.restore(Ap.hmatvec(xp)).gather(), M.conj().T @ g, comm,
                               rtol=1e-13)
    assert_allclose_collective(p.restore(Ap).to_scipy().toarray(), M.toarray(), comm, rtol=0)


# -- preconditioners -------------------------------------------------------------------

def ilu0_reference(B: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
    """ILU(0) by the textbook IKJ loop (Saad, Algorithm 10.4) on a dense copy,
    updates restricted to the pattern: unit lower L, upper U."""
    n = B.shape[0]
    pattern = np.zeros((n, n), dtype=bool)
    C = B.tocoo()
    pattern[C.row, C.col] = True
    LU = B.toarray().astype(np.complex128)
    for i in range(1, n):
        for k in range(i):
            if pattern[i, k]:
                LU[i, k] /= LU[k, k]
                for j in range(k + 1, n):
                    if pattern[i, j]:
                        LU[i, j] -= LU[i, k] * LU[k, j]
    return np.tril(LU, -1) + np.eye(n), np.triu(LU)


def local_solve_reference(sub, B: sp.csr_matrix, b: np.ndarray) -> np.ndarray:
    if B.shape[0] == 0:
        return b.copy()
    if sub == "lu":
        return splu(B.tocsc()).solve(b)
    if sub == "ilut":
        return spilu(B.tocsc(), drop_tol=1e-4, fill_factor=10.0).solve(b)
    L, U = ilu0_reference(B)
    return sla.solve_triangular(U, sla.solve_triangular(L, b, lower=True))


def schwarz_reference(M, ranges, r, overlap, sub, restricted):
    """Additive Schwarz, serially: each rank's rows grown by ``overlap``
    layers of the matrix graph, solved there; the owned part kept (restricted)
    or every part added back."""
    out = np.zeros(M.shape[0], dtype=np.complex128)
    for p in range(len(ranges) - 1):
        s, e = ranges[p], ranges[p + 1]
        ids = np.arange(s, e)
        for _ in range(overlap):
            ids = np.union1d(ids, M[ids].indices)
        z = local_solve_reference(sub, sp.csr_matrix(M[ids][:, ids]), r[ids])
        if restricted:
            out[s:e] = z[np.searchsorted(ids, np.arange(s, e))]
        else:
            out[ids] += z
    return out


def apply_all(M, A, r):
    out = M.apply(DistVector.from_global(r, A.row_layout))
    return out.gather()


PCS = {
    "jacobi": ("jacobi", {}),
    "bjacobi-ilu0": ("bjacobi", {"sub": "ilu0"}),
    "bjacobi-ilut": ("bjacobi", {"sub": "ilut"}),
    "bjacobi-lu": ("bjacobi", {"sub": "lu"}),
    "asm-0-lu": ("asm", {"overlap": 0, "sub": "lu"}),
    "asm-1-lu": ("asm", {"overlap": 1, "sub": "lu"}),
    "asm-2-ilu0": ("asm", {"overlap": 2, "sub": "ilu0"}),
    "asm-1-ilut": ("asm", {"overlap": 1, "sub": "ilut"}),
    "asm-1-lu-classical": ("asm", {"overlap": 1, "sub": "lu", "restricted": False}),
    "asm-2-ilu0-classical": ("asm", {"overlap": 2, "sub": "ilu0", "restricted": False}),
}


def pc_reference(name, opts, M, ranges, r):
    if name == "jacobi":
        return r / M.diagonal()
    if name == "bjacobi":
        return schwarz_reference(M, ranges, r, 0, opts["sub"], True)
    return schwarz_reference(M, ranges, r, opts["overlap"], opts["sub"],
                             opts.get("restricted", True))


@pytest.mark.parametrize("case", list(PCS), ids=list(PCS))
def test_complex_preconditioners_match_serial_references(comm, case):
    name, opts = PCS[case]
    n = 41
    M = dominant(n, seed=21)
    A = DistCSR.from_global(M, comm)
    P = preconditioners.make(name, A, **opts)
    ranges = A.row_layout.ranges
    for kind in ("complex", "real"):
        r = vector(n, 7, kind)
        got = apply_all(P, A, r)
        assert_collective(comm, got.dtype == np.complex128, "M r dtype %s" % got.dtype)
        assert_allclose_collective(got, pc_reference(name, opts, M, ranges,
                                                     r.astype(np.complex128)),
                                   comm, rtol=1e-11, atol=1e-12, err_msg=kind + " r")
    out = DistVector.zeros(A.row_layout, np.complex128)
    r = DistVector.from_global(vector(n, 8, "complex"), A.row_layout)
    assert_collective(comm, P.apply(r, out) is out)
    assert_raises_collective(comm, TypeError, P.apply, r, DistVector.zeros(A.row_layout),
                             match="complex")


@pytest.mark.parametrize("case", list(PCS), ids=list(PCS))
def test_real_preconditioners_apply_to_complex_vectors_by_linearity(comm, case):
    name, opts = PCS[case]
    n = 41
    A = DistCSR.from_global(dominant(n, seed=22, kind="real"), comm)
    P = preconditioners.make(name, A, **opts)
    r = vector(n, 9, "complex")
    re, im = apply_all(P, A, r.real.copy()), apply_all(P, A, r.imag.copy())
    got = apply_all(P, A, r)
    assert_collective(comm, got.dtype == np.complex128, "M r dtype %s" % got.dtype)
    assert_allclose_collective(got, re + 1j * im, comm, rtol=1e-13, atol=1e-14)


REAL_ONLY = {"amg": {}, "cheby": {}, "gemslr": {"nlev": 2}}


@pytest.mark.parametrize("name", list(REAL_ONLY))
def test_real_only_preconditioners_refuse_complex_at_the_door(comm, name):
    n = 60
    A = DistCSR.from_global(dominant(n, seed=23), comm)
    assert_raises_collective(comm, TypeError, preconditioners.make, name, A,
                             **REAL_ONLY[name],
                             match="%s supports real matrices; for complex systems use "
                                   "jacobi, bjacobi or asm" % name)
    R = DistCSR.from_global(dominant(n, seed=23, kind="real"), comm)
    P = preconditioners.make(name, R, **REAL_ONLY[name])
    r = DistVector.from_global(vector(n, 3, "complex"), R.row_layout)
    assert_raises_collective(comm, TypeError, P.apply, r,
                             match="%s supports real vectors" % name)
    rr = DistVector.from_global(vector(n, 3, "real"), R.row_layout)
    assert_collective(comm, np.all(np.isfinite(P.apply(rr).local)))


def test_linear_operators_carry_a_dtype(comm):
    A = DistCSR.from_global(complex_matrix(9, 9, seed=2), comm)
    op = DistLinearOperator(A.row_layout, A.col_layout, A.matvec, dtype=np.complex128)

    class Wrapped:                      # an operator whose matvec takes no out
        row_layout, col_layout, dtype = A.row_layout, A.col_layout, A.dtype

        def matvec(self, x):
            return A.matvec(x)

    with Checks(comm) as checks:
        checks.add(op.dtype == np.complex128, "given dtype")
        checks.add(all(v.dtype == np.complex128 for v in op.create_vectors()), "vectors")
        checks.add(DistLinearOperator(A.row_layout, A.col_layout, A.matvec).dtype
                   == np.float64, "default float64")
        checks.add(aslinearoperator(Wrapped()).dtype == np.complex128, "aslinearoperator")
    assert_raises_collective(comm, TypeError, DistLinearOperator, A.row_layout, A.col_layout,
                             A.matvec, dtype=np.float32, match="float64 or complex128")
    x = DistVector.from_global(vector(9, 4, "complex"), A.col_layout)
    assert_allclose_collective(op.matvec(x).gather(), A.to_scipy() @ vector(9, 4, "complex"),
                               comm, rtol=1e-13)
