"""Partition quality (edge cut, balance, halo) against a serial count on the
gathered matrix."""

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from dmsolve import partition as part
from mpitest import assert_collective, assert_equal_collective
from operands import random_partition, scrambled_poisson2d

COMM = MPI.COMM_WORLD


def test_quality_against_serial_count():
    """partition_quality's edge cut, balance and halo equal a serial count on the gathered
    matrix."""
    A, S = scrambled_poisson2d(7)
    p = random_partition(A.row_layout, seed=4)
    q = part.partition_quality(A, p)
    owner = p.parts()
    C = sp.coo_matrix(S)
    cut = (owner[C.row] != owner[C.col]) & (C.row != C.col)
    pairs = {(min(i, j), max(i, j)) for i, j in zip(C.row[cut], C.col[cut])}
    assert_collective(COMM, q.edge_cut == len(pairs), "%d != %d" % (q.edge_cut, len(pairs)))
    ghosts = [len({j for i, j in zip(C.row[cut], C.col[cut]) if owner[i] == r})
              for r in range(COMM.size)]
    neighbours = [len({owner[j] for i, j in zip(C.row[cut], C.col[cut]) if owner[i] == r})
                  for r in range(COMM.size)]
    assert_equal_collective(q.ghosts, ghosts)
    assert_equal_collective(q.neighbours, neighbours)
    assert_equal_collective(q.rows, np.bincount(owner, minlength=COMM.size))
    assert_equal_collective(q.nnz, np.bincount(owner[C.row], minlength=COMM.size))
    table = q.format()
    assert_collective(COMM, "edge cut %d" % len(pairs) in table and
                      len(table.splitlines()) == COMM.size + 2, table)
    # the quality of the current layout agrees with the matrix's own halo
    q0 = part.partition_quality(A)
    mine = (A.ghosts.size, len(A.halo.neighbours))  # symmetric pattern: in = out
    got = (q0.ghosts[COMM.rank], q0.neighbours[COMM.rank])
    assert_collective(COMM, mine == got, "%s != %s" % (mine, got))
