"""The METIS partitioner: a better cut than blocks on a scrambled matrix,
``metis_graph_parts`` as the call it runs, only a few shares gathered, and
large graphs handed to the multilevel partitioner."""

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

from bad_inputs import check_bad_input
from dmsolve import DistCSR, Layout, gallery, partition as part
from dmsolve.partition import _metis
from mpitest import (assert_collective, assert_equal_collective, assert_raises_collective,
                     same_on_all_ranks)
from operands import scrambled_poisson2d

COMM = MPI.COMM_WORLD


def test_metis_beats_block_on_scrambled_matrix():
    """METIS cuts a scrambled Poisson matrix far better than blocks of rows."""
    A, S = scrambled_poisson2d(16)
    qb = part.partition_quality(A, part.block_partition(A))
    qm = part.partition_quality(A, part.partition(A, "metis"))
    if COMM.size > 1:
        assert_collective(COMM, qm.edge_cut < qb.edge_cut / 2,
                          "metis cut %d, block cut %d" % (qm.edge_cut, qb.edge_cut))
        assert_collective(COMM, qm.ghosts.sum() < qb.ghosts.sum())
        assert_collective(COMM, qm.row_imbalance <= 1.1, "imbalance %g" % qm.row_imbalance)
    else:
        assert_collective(COMM, qm.edge_cut == qb.edge_cut == 0)
    assert_collective(COMM, same_on_all_ranks(COMM, qm.as_dict()))


def test_metis_graph_parts_is_what_metis_partition_runs():
    """metis_graph_parts on the gathered graph gives the parts metis_partition assigns."""
    A, S = scrambled_poisson2d(9)
    C = sp.coo_matrix(S)
    for nparts in (1, 3):
        serial = part.metis_graph_parts(C.row.astype(np.int64), C.col.astype(np.int64),
                                        S.shape[0], nparts, seed=1)
        assert_collective(COMM, serial.shape == (S.shape[0],) and serial.dtype == np.int64)
        assert_collective(COMM, set(np.unique(serial)) == set(range(nparts)))
        assert_equal_collective(part.metis_partition(A, nparts=nparts, seed=1).parts(), serial)


def test_metis_hands_large_graphs_to_multilevel():
    """METIS hands graphs above its gather limit to the multilevel partitioner."""
    A = gallery.poisson2d(30, COMM)
    routed = part.metis_partition(A, seed=2, gather_limit=100)
    if COMM.size > 1:
        want = part.multilevel_partition(A, seed=2)
    else:                                  # one rank: nothing to gather, the exact path
        want = part.metis_partition(A, seed=2)
    assert_equal_collective(routed.local_parts, want.local_parts)
    # below the limit (the default is 4 million entries) the exact METIS path
    S = A.to_scipy()
    ref = _metis.metis_graph_parts(*map(np.int64, sp.coo_matrix(S).nonzero()), 900,
                                   COMM.size, seed=2)
    assert_equal_collective(part.metis_partition(A, seed=2).parts(), ref)
    assert_raises_collective(COMM, ValueError, part.metis_partition, A, gather_limit=-1)


def test_metis_gathers_only_a_few_shares(monkeypatch):
    """The default gather limit is relative to the largest rank's share: a
    graph spread over more ranks than METIS_GATHER_SHARES goes multilevel
    (nothing of global size on rank 0), one already held by one rank is
    gathered (rank 0 holds no more than that rank does)."""
    S = gallery.poisson2d(30, MPI.COMM_SELF).to_scipy()
    ref = _metis.metis_graph_parts(*map(np.int64, sp.coo_matrix(S).nonzero()), 900,
                                   COMM.size, seed=2)
    monkeypatch.setattr(_metis, "METIS_GATHER_SHARES", 1)
    A = gallery.poisson2d(30, COMM)
    got = part.metis_partition(A, seed=2)
    if COMM.size > 1:             # 1 share < the whole: parallel path, as gather_limit=0 gives
        want = part.metis_partition(A, seed=2, gather_limit=0)
        assert_equal_collective(got.local_parts, want.local_parts)
    else:
        assert_equal_collective(got.parts(), ref)
    # every row on the last rank: the whole graph is one share, so it is gathered
    sizes = np.zeros(COMM.size, dtype=np.int64)
    sizes[-1] = 900
    lay = Layout.from_local_size(int(sizes[COMM.rank]), COMM)
    C = sp.coo_matrix(S)
    mine = C.row >= 0 if COMM.rank == COMM.size - 1 else C.row < 0
    B = DistCSR.from_coo(C.row[mine], C.col[mine], C.data[mine], S.shape, COMM, layout=lay)
    assert_equal_collective(part.metis_partition(B, seed=2).parts(), ref)


# -- bad input: the same exception on every rank -------------------------------------------

BAD_INPUTS = [
    ("metis-zero-parts", ValueError, "nparts", lambda e: part.metis_partition(e.A, nparts=0)),
]


@pytest.mark.parametrize("exc, match, call", [c[1:] for c in BAD_INPUTS],
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_the_same_exception_on_every_rank(bad_input_env, request, exc, match,
                                                           call):
    """Each case of BAD_INPUTS raises the same exception type, with a message
    that matches, on every rank (or works, at one rank, where a COMM_SELF
    operand is valid)."""
    check_bad_input(bad_input_env, request, exc, match, call)
