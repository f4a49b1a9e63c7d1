"""The Galerkin coarse operator ``P^T A P`` against scipy, on the level's layout
and on a gathered coarse layout."""

import numpy as np
from mpi4py import MPI

import dmsolve.gallery as gallery
from amg_cases import hierarchy_pieces
from mpitest import assert_allclose_collective, assert_collective
from preconditioners.amg.aggregate import standard_aggregation
from preconditioners.amg.coarse import coarse_layout
from preconditioners.amg.galerkin import galerkin_product
from preconditioners.amg.smooth import smooth_prolongator
from preconditioners.amg.strength import symmetric_strength
from preconditioners.amg.tentative import tentative_prolongator

COMM = MPI.COMM_WORLD


def test_galerkin_product_equals_scipy():
    """galerkin_product equals scipy's P^T A P."""
    A = gallery.poisson3d(8, COMM)
    S, agg, count, T, Bc = hierarchy_pieces(A)
    P, _ = smooth_prolongator(A, T)
    Ac = galerkin_product(A, P)
    Ag, Pg = A.to_scipy(), P.to_scipy()
    assert_allclose_collective(Ac.to_scipy().toarray(), (Pg.T @ Ag @ Pg).toarray(),
                               rtol=1e-12, atol=1e-13)
    assert_collective(COMM, Ac.row_layout == P.col_layout)


def test_galerkin_with_gathered_coarse_layout():
    """galerkin_product onto a coarse layout on fewer ranks equals scipy's P^T A P."""
    # coarse unknowns moved onto fewer ranks than made them
    A = gallery.poisson2d(15, COMM)
    S = symmetric_strength(A, 0.0)
    agg, count = standard_aggregation(S)
    clay, first = coarse_layout(count, COMM, 10 ** 6)
    assert_collective(COMM, int(np.count_nonzero(clay.local_sizes)) == 1)
    T, _ = tentative_prolongator(A.row_layout, agg, count, np.ones((agg.size, 1)), clay, first)
    P, _ = smooth_prolongator(A, T)
    Ac = galerkin_product(A, P)
    Ag, Pg = A.to_scipy(), P.to_scipy()
    assert_allclose_collective(Ac.to_scipy().toarray(), (Pg.T @ Ag @ Pg).toarray(),
                               rtol=1e-12, atol=1e-13)
