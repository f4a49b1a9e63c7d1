"""GeMSLR's rows placed on their owners by a dmsolve Partition."""

import numpy as np
from mpi4py import MPI

import dmsolve.gallery as gallery
import preconditioners
from dmsolve import Layout
from dmsolve.partition import Partition
from mpitest import assert_collective, assert_equal_collective

COMM = MPI.COMM_WORLD
SMALL = dict(nlev=3, ncomp=4, ilu_droptol=1e-3, ilu_max_row_nnz=50)


def _small(shift=0.2, comm=COMM):
    # 11 x 9 x 13 = 1287 rows: no rank count divides it evenly
    return gallery.shifted_laplacian(11, comm, shift=shift, ny=9, nz=13)


def test_rows_are_placed_by_a_partition():
    """The GeMSLR owners are a dmsolve Partition of A's rows: subdomain j of K on
    rank j * size // K, the last level in contiguous blocks; each rank keeps its
    own rows only."""
    A = _small()
    M = preconditioners.make("gemslr", A, lr_rank=0, **SMALL)
    p = M.partition
    assert isinstance(p, Partition)
    assert_collective(COMM, p.old_layout == A.row_layout and p.new_layout == M.N[0])
    levels, last = M.ordering()
    K = M.nparts
    want = np.empty(A.shape[0], dtype=np.int64)
    for subs in levels:
        for j, ids in enumerate(subs):
            want[ids] = j * COMM.size // K
    want[last] = Layout.block(last.size, COMM).owner(np.arange(last.size))
    assert_equal_collective(p.parts(), want)
    # this rank's interface rows of level 0 (their original ids) are its part of the
    # levels 1, 2, ..., subdomain by subdomain, then its block of the last level
    expect = [levels[l][j] for l in range(1, len(levels)) for j in range(K)
              if j * COMM.size // K == COMM.rank]
    assert_equal_collective(M.correction(0)[0],
                            np.concatenate(expect + [last[want[last] == COMM.rank]]))
    # nothing of the global size is kept: every array holds this rank's rows at most
    # (or the redundant last level)
    bound = max(A.row_layout.local_size, M.N[0].local_size, M.X[-1].global_size)
    big = [k for k, v in vars(M).items() if isinstance(v, np.ndarray) and v.size > bound]
    assert_collective(COMM, not big, "arrays of the global size: %s" % big)
