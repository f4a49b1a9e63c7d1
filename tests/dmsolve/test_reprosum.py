"""The fused kernels of the exact sums (``dmsolve._reprosum``): two inner products in
one pass and CG's update with its exact ``r^T r``, against ``math.fsum`` and numpy;
the canonical sliced product against the plain loop over each row."""

import math

import numpy as np
import pytest
import scipy.sparse as sp

import dmsolve.gallery as gallery
from dmsolve import DistCSR, Layout
from dmsolve._reprosum import (accumulators, canonical_rows, dot2_into, dot_into,
                               merge_rows_by_key, normalize, to_float, update_dot_into)
from dmsolve.krylov._reduce import ExactReducer
from dmsolve.reproducible import canonical, exact_dots
from mpitest import Checks


def spread(rng, n: int, low: int = -300, high: int = 300) -> np.ndarray:
    """Random float64 over many binades, a tenth of them zero."""
    x = np.ldexp(rng.random(n) + 0.5, rng.integers(low, high, n)) * rng.choice([-1.0, 1.0], n)
    x[rng.random(n) < 0.1] = 0.0
    return x


def same_acc(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two accumulators hold the same exact value (normalised copies equal)."""
    a, b = a.copy().reshape(1, -1), b.copy().reshape(1, -1)
    normalize(a)
    normalize(b)
    return np.array_equal(a, b)


@pytest.mark.parametrize("n", [0, 1, 511, 512, 3 * 512 + 37])
def test_dot2_into_is_two_exact_dots(comm, n):
    """dot2_into deposits what dot_into deposits for each pair: both correctly
    rounded (math.fsum of the rounded products), the arrays distinct or shared."""
    rng = np.random.default_rng(n)
    a, b, c, d = (spread(rng, n) for _ in range(4))
    with Checks(comm) as checks:
        for name, (p, q, u, v) in {"distinct": (a, b, c, d), "shared": (a, b, a, a),
                                   "same pair": (a, b, a, b)}.items():
            acc = accumulators(2)
            dot2_into(p, q, u, v, acc[0], acc[1])
            ref = accumulators(2)
            dot_into(p, q, ref[0])
            dot_into(u, v, ref[1])
            checks.add(same_acc(acc[0], ref[0]) and same_acc(acc[1], ref[1]), name)
            got = (to_float(acc[0]), to_float(acc[1]))
            want = (math.fsum(p * q), math.fsum(u * v))
            checks.add(got == want, name + ": fsum", (got, want))


@pytest.mark.parametrize("n", [0, 7, 512, 2 * 512 + 301])
def test_update_dot_into_updates_as_numpy_and_sums_exactly(comm, n):
    """update_dot_into gives x + alpha p and r - alpha q with numpy's bits (the
    product rounded before the sum) and deposits the exact sum of the new r * r."""
    rng = np.random.default_rng(100 + n)
    p, q, x, r = (spread(rng, n, -40, 40) for _ in range(4))
    alpha = 0.7312345678901234
    x2, r2 = x.copy(), r.copy()
    acc = accumulators(1)
    update_dot_into(alpha, p, q, x2, r2, acc[0])
    want_x, want_r = x + alpha * p, r - alpha * q
    with Checks(comm) as checks:
        checks.add(np.array_equal(x2.view(np.int64), want_x.view(np.int64)), "x bits")
        checks.add(np.array_equal(r2.view(np.int64), want_r.view(np.int64)), "r bits")
        got, want = to_float(acc[0]), math.fsum(want_r * want_r)
        checks.add(got == want, "r^T r", (got, want))


@pytest.mark.parametrize("shape", ["pair", "shared r", "same pair", "from update"])
def test_exact_reducer_put2_is_exact_dots(comm, shape):
    """ExactReducer.put2 (and its cg_update's r^T r) reduce to the exact global
    inner products of exact_dots, at any rank count."""
    rng = np.random.default_rng(7 + comm.rank)
    n = 1000 + 37 * comm.rank
    a, b, c, d = (spread(rng, n, -30, 30) for _ in range(4))
    red = ExactReducer(comm, np.float64, 2)
    rr = None
    if shape == "pair":
        pairs = (a, b, c, d)
    elif shape == "shared r":
        pairs = (a, b, a, a)
    elif shape == "same pair":
        pairs = (a, b, a, b)
    else:
        p, q = spread(rng, n, -30, 30), spread(rng, n, -30, 30)
        rr = red.cg_update(0.5, p, q, b.copy(), a)       # a becomes a - q / 2
        pairs = (a, b, a, a)
    red.put2(0, *pairs, rr=rr)
    got = list(red.reduce(2)[:2])
    want = exact_dots(comm, [(pairs[0], pairs[1]), (pairs[2], pairs[3])])
    with Checks(comm) as checks:
        checks.add(got == want, shape, (got, want))


def irregular(n: int, seed: int) -> sp.csr_matrix:
    """A random square sparse matrix with rows of 1 to 30 entries and a diagonal."""
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, 30, n)
    rows = np.repeat(np.arange(n), lens)
    cols = rng.integers(0, n, rows.size)
    A = sp.csr_matrix((rng.standard_normal(rows.size), (rows, cols)), shape=(n, n))
    return (A + sp.eye(n)).tocsr()


@pytest.mark.parametrize("problem", ["poisson3d", "poisson2d", "irregular"])
def test_canonical_product_is_the_plain_row_loop(comm, problem):
    """The canonical product (sliced, runs and gathers, overlapped with the halo)
    gives the bits of the plain loop over each canonical row, on a stencil and on
    an irregular matrix, with ghosts at more than one rank."""
    if problem == "poisson3d":
        A = gallery.poisson3d(13, comm)
    elif problem == "poisson2d":
        A = gallery.poisson2d(101, comm)
    else:
        S = irregular(1013, 3)
        lay = Layout.block(S.shape[0], comm)
        A = DistCSR.from_local_rows(S[lay.start:lay.stop], lay, lay)
    C = canonical(A)
    x = gallery.rhs(A, "random", seed=2)
    y = C.matvec(x)
    n = A.col_layout.local_size
    ext = np.concatenate((x.local, np.array(A.halo.exchange(x.local)), [1.0]))
    M = C.local_canonical()
    want = np.empty(n)
    canonical_rows(M.indptr, M.indices, M.data, ext, want)
    with Checks(comm) as checks:
        checks.add(np.array_equal(y.local.view(np.int64), want.view(np.int64)), "bits")
        ref = (M @ ext[:-1])
        checks.add(np.allclose(y.local, ref, rtol=1e-12, atol=1e-12), "value")



@pytest.mark.parametrize("seed", range(3))
def test_merge_rows_by_key_is_a_stable_lexsort(comm, seed):
    """merge_rows_by_key orders each row's entries of two blocks as the stable
    np.lexsort((keys, rows)) of the blocks one after the other, equal keys
    included."""
    rng = np.random.default_rng(seed)
    m = 57
    blocks = []
    for _ in range(2):
        lens = rng.integers(0, 40, m)
        ptr = np.concatenate(([0], np.cumsum(lens))).astype(np.int64)
        blocks.append((ptr, rng.integers(0, 60, ptr[-1]).astype(np.int64)))   # repeated keys
    (dptr, dkey), (optr, okey) = blocks
    ptr = np.empty(m + 1, dtype=np.int64)
    pos = np.empty(dptr[-1] + optr[-1], dtype=np.int64)
    key = np.empty_like(pos)
    merge_rows_by_key(dptr, dkey, optr, okey, ptr, pos, key)
    rows = np.concatenate((np.repeat(np.arange(m), np.diff(dptr)),
                           np.repeat(np.arange(m), np.diff(optr))))
    keys = np.concatenate((dkey, okey))
    order = np.lexsort((keys, rows))
    with Checks(comm) as checks:
        checks.add(np.array_equal(pos, order), "order")
        checks.add(np.array_equal(key, keys[order]), "keys")
        want_ptr = np.concatenate(([0], np.cumsum(np.bincount(rows, minlength=m))))
        checks.add(np.array_equal(ptr, want_ptr), "indptr")
