"""The parts a diagram is assembled from: the block sort of the pairs
(sorted_block) gives every rank its block of the lexsort of all pairs."""

import numpy as np
import pytest
from mpi4py import MPI

from dmsolve import Layout
from mpitest import assert_collective
from topology.persistence import sorted_block

COMM = MPI.COMM_WORLD


@pytest.mark.parametrize("case", ["packed", "wide", "one-rank-empty"])
def test_sorted_block_is_the_lexsort_of_all_pairs(case):
    """The diagram's block sort (the key columns packed into one int64 when
    their ranges allow, else psort/lexsort of three columns) gives every
    rank its block of the lexsort of all ranks' pairs, ties in rank order."""
    rng = np.random.default_rng(3 + COMM.rank)
    n = 0 if case == "one-rank-empty" and COMM.rank == COMM.size - 1 else 50 + 7 * COMM.rank
    big = 2 ** 40 if case == "wide" else 20
    parts = [(d, rng.random(n), rng.random(n), rng.integers(0, big, n),
              rng.integers(-1, big, n)) for d in range(3)]
    got = sorted_block(COMM, parts)
    rows = [np.column_stack((np.full(n, d), bv, dv, b, de)) for d, b, de, bv, dv in parts]
    every = np.concatenate(COMM.allgather(np.concatenate(rows)))
    every = every[np.lexsort((every[:, 2], every[:, 1], every[:, 0]))]
    lay = Layout.block(every.shape[0], COMM)
    want = every[lay.start:lay.stop]
    mine = np.column_stack((got["dim"], got["birth_vertex"], got["death_vertex"],
                            got["birth"], got["death"]))
    assert_collective(COMM, mine.shape == want.shape and np.array_equal(mine, want),
                      "block of the lexsort")
