"""The tentative prolongator: orthonormal columns that reproduce the
candidates, and ``fit_candidates`` on constants."""

import numpy as np
from mpi4py import MPI

import dmsolve.gallery as gallery
from amg_cases import hierarchy_pieces
from mpitest import assert_allclose_collective
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
