"""AMG aggregation: pyamg's aggregates at one rank, and aggregates that cover
every node and stay on its rank."""

import numpy as np
from mpi4py import MPI

import dmsolve.gallery as gallery
from amg_cases import hierarchy_pieces
from mpitest import assert_collective
from preconditioners.amg.aggregate import standard_aggregation
from preconditioners.amg.strength import symmetric_strength

COMM = MPI.COMM_WORLD


# -- the stages against serial references -------------------------------------------------


def test_aggregation_one_rank_matches_pyamg():
    """At one rank, standard aggregation gives pyamg's aggregates."""
    import pyamg
    A = gallery.poisson2d(37, MPI.COMM_SELF)
    S = symmetric_strength(A, 0.0)
    agg, count = standard_aggregation(S)
    C = pyamg.strength.symmetric_strength_of_connection(A.to_scipy(), 0.0)
    AggOp, _ = pyamg.aggregation.standard_aggregation(C)
    assert count == AggOp.shape[1]
    ref = np.asarray(AggOp.tocsr().indices)
    # the same partition into aggregates, possibly numbered differently
    pairs = set(zip(agg.tolist(), ref.tolist()))
    assert len(pairs) == count


def test_aggregates_cover_and_stay_on_rank():
    """Aggregates cover every node and stay on the node's rank."""
    A = gallery.poisson3d(9, COMM)
    S, agg, count, T, Bc = hierarchy_pieces(A)
    ok = agg.size == 0 or (agg.min() >= 0 and np.array_equal(np.unique(agg), np.arange(count)))
    assert_collective(COMM, ok, "every node in exactly one local aggregate")
    # T's columns are this rank's coarse unknowns only
    assert_collective(COMM, T.offd.nnz == 0, "aggregates do not cross ranks")
