"""Contiguous partitioners: ``nnz`` balances nonzeros, and its cuts equal those
computed from the gathered row lengths."""

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

from dmsolve import DistCSR, Layout, partition as part
from dmsolve._layout import block_ranges
from mpitest import assert_collective, assert_equal_collective

COMM = MPI.COMM_WORLD


def test_nnz_partition_balances_nonzeros():
    """The nnz partitioner balances nonzeros on a matrix whose rows differ widely in length."""
    # rows with very different lengths: arrow matrix
    n = 40
    S = sp.lil_matrix((n, n))
    S.setdiag(1.0)
    S[:, 0] = 1.0
    S[0, :] = 1.0
    A = DistCSR.from_global(S.tocsr(), COMM)
    qn = part.partition_quality(A, part.nnz_partition(A))
    qb = part.partition_quality(A, part.block_partition(A))
    assert_collective(COMM, qn.nnz_imbalance <= qb.nnz_imbalance,
                      "%g > %g" % (qn.nnz_imbalance, qb.nnz_imbalance))


@pytest.mark.parametrize("empty_rank0", [False, True], ids=["blocks", "rank0-empty"])
def test_nnz_cuts_equal_from_weights_on_the_gathered_row_lengths(empty_rank0):
    """The nnz partitioner's cuts equal those computed from the gathered row lengths as weights."""
    n = 101
    rng = np.random.default_rng(5)
    S = sp.random(n, n, density=0.08, random_state=6, format="csr")
    S = S + sp.diags(rng.random(n) + 1.0)        # row lengths from 1 to ~20, uneven
    size = COMM.size
    ranges = (np.concatenate(([0], block_ranges(n, size - 1))) if empty_rank0 and size > 1
              else block_ranges(n, size))
    A = DistCSR.from_global(sp.csr_matrix(S), COMM, layout=Layout(ranges, COMM))
    p = part.nnz_partition(A)
    want = Layout.from_weights(np.diff(sp.csr_matrix(S).indptr), COMM)
    assert_equal_collective(p.new_layout.ranges, want.ranges)
    assert_equal_collective(p.parts(), want.owner(np.arange(n)))
