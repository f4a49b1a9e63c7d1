"""The tentative prolongator: orthonormal columns that reproduce the
candidates, ``fit_candidates`` on constants, and its bits against the
formulation that sorts rows by aggregate."""

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

import dmsolve.gallery as gallery
from amg_cases import hierarchy_pieces
from mpitest import assert_allclose_collective, assert_collective
from preconditioners.amg.tentative import fit_candidates

COMM = MPI.COMM_WORLD


def test_tentative_orthonormal_and_reproduces_candidates():
    """The tentative prolongator has orthonormal columns and reproduces the candidates."""
    A = gallery.poisson2d(21, COMM)
    n = A.row_layout.local_size
    x = np.arange(A.row_layout.start, A.row_layout.stop) % 21
    B = np.column_stack((np.ones(n), x.astype(float), np.sin(x)))   # 3 candidates
    S, agg, count, T, Bc = hierarchy_pieces(A, B=B)
    Tg = T.to_scipy()
    Bg = np.vstack(COMM.allgather(B))
    Bcg = np.vstack(COMM.allgather(Bc))
    G = (Tg.T @ Tg).toarray()
    assert_allclose_collective(G, np.eye(G.shape[0]), atol=1e-12)
    assert_allclose_collective(Tg @ Bcg, Bg, rtol=1e-12, atol=1e-12)


def test_fit_candidates_constant_case():
    """fit_candidates on constants gives each aggregate a normalised indicator column (none for
    an unaggregated node) and R the norms."""
    agg = np.array([0, 0, 1, 1, 1, -1])
    T, R = fit_candidates(agg, 2, np.ones((6, 1)))
    np.testing.assert_allclose(T.toarray(), [[2 ** -.5, 0], [2 ** -.5, 0], [0, 3 ** -.5],
                                             [0, 3 ** -.5], [0, 3 ** -.5], [0, 0]])
    np.testing.assert_allclose(R.ravel(), [2 ** .5, 3 ** .5])


def _fit_by_sorting(agg, count, B):
    """The formulation that sorts the rows by aggregate and assembles T
    through COO: the reference for the bits of fit_candidates."""
    n, k = B.shape
    rows = np.flatnonzero(agg >= 0)
    a = agg[rows]
    order = np.argsort(a, kind="stable")
    rows, a = rows[order], a[order]
    sizes = np.bincount(a, minlength=count)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    slot = np.arange(a.size) - starts[a]
    m = max(int(sizes.max()), k)
    blocks = np.zeros((count, m, k))
    blocks[a, slot] = B[rows]
    if k == 1:
        norms = np.sqrt(np.einsum("ijk,ijk->i", blocks, blocks))
        R = norms.reshape(count, 1, 1)
        Q = blocks / norms[:, None, None]
    else:
        Q, R = np.linalg.qr(blocks)
        s = np.sign(np.diagonal(R, axis1=1, axis2=2))
        s[s == 0] = 1
        Q, R = Q * s[:, None, :], R * s[:, :, None]
    T = sp.csr_matrix((Q[a, slot].reshape(-1), (np.repeat(rows, k),
                                               (a[:, None] * k + np.arange(k)).reshape(-1))),
                      shape=(n, count * k))
    return T, R.reshape(count * k, k)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_fit_candidates_equals_the_sorted_formulation(k):
    """fit_candidates (rows placed in their aggregates without a sort, T built
    as CSR directly) gives the bits of sorting the rows by aggregate and
    assembling T through COO, with unaggregated rows and uneven aggregates."""
    rng = np.random.default_rng(k)
    n, count = 500, 60
    agg = rng.integers(0, count, n)
    agg[agg == 7] = 8                   # aggregates of different sizes
    agg[rng.random(n) < 0.05] = -1      # rows left out
    agg[:count] = np.arange(count)      # every aggregate has a row
    B = np.column_stack([np.ones(n)] + [rng.random(n) for _ in range(k - 1)]) * rng.random((n, 1))
    T, R = fit_candidates(agg, count, B)
    Tr, Rr = _fit_by_sorting(agg, count, B)
    ok = (np.array_equal(T.indptr, Tr.indptr) and np.array_equal(T.indices, Tr.indices)
          and np.array_equal(T.data.view(np.uint8), Tr.data.view(np.uint8))
          and np.array_equal(R.view(np.uint8), Rr.view(np.uint8)))
    assert_collective(COMM, ok, "fit_candidates differs from the sorted formulation")
