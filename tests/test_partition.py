"""Partitions, their quality and exact redistribution round trips."""

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

from dmsolve import DistCSR, DistVector, Layout, Registry, gallery, partition as part
from mpitest import (Checks, assert_allclose_collective, assert_collective,
                     assert_equal_collective, assert_raises_collective, same_on_all_ranks)

COMM = MPI.COMM_WORLD


def scrambled_poisson2d(n, seed=0):
    """A 2D Poisson matrix in a random order: block rows then cut badly."""
    A = gallery.poisson2d(n, MPI.COMM_SELF).to_scipy()
    p = np.random.default_rng(seed).permutation(n * n)
    return DistCSR.from_global(A[p][:, p], COMM), A[p][:, p].tocsr()


def random_partition(layout, seed=1):
    rng = np.random.default_rng(seed + layout.rank)
    return part.Partition(layout, rng.integers(0, COMM.size, layout.local_size))


def make_partitions():
    A, _ = scrambled_poisson2d(7)
    coords = np.random.default_rng(2 + COMM.rank).random((A.row_layout.local_size, 2))
    return {
        "block": part.block_partition(A),
        "nnz": part.nnz_partition(A),
        "metis": part.metis_partition(A),
        "random": random_partition(A.row_layout),
        "rcb": part.rcb(coords, COMM),
    }, A


@pytest.mark.parametrize("name", ["block", "nnz", "metis", "random", "rcb"])
def test_numbering_is_contiguous_permutation(name):
    parts, A = make_partitions()
    p = parts[name]
    owner = p.parts()
    new_index = p.new_index()
    n = A.shape[0]
    assert_equal_collective(np.sort(new_index), np.arange(n))
    # part q occupies new_layout's range q, in the old order
    ranges = p.new_layout.ranges
    checks = Checks(COMM)
    for q in range(COMM.size):
        members = np.flatnonzero(owner == q)
        checks.add(np.array_equal(new_index[members], np.arange(ranges[q], ranges[q + 1])),
                   "part %d contiguous and order-preserving" % q, new_index[members])
    checks.assert_all()
    assert_equal_collective(p.part_sizes, np.bincount(owner, minlength=COMM.size))


@pytest.mark.parametrize("name", ["block", "nnz", "metis", "random", "rcb"])
def test_redistribute_round_trip_exact(name):
    parts, A = make_partitions()
    p = parts[name]
    S = A.to_scipy()
    # an explicit zero must survive the trip
    local = A.local_rows().tolil()
    if local.shape[0]:
        local[0, 0] = 0.0
    A = DistCSR.from_local_rows(sp.csr_matrix(local), A.row_layout)
    S = A.to_scipy()
    B = part.redistribute(A, p)
    inv = np.argsort(p.new_index())
    assert_collective(COMM, B.row_layout == p.new_layout)
    ref = S[inv][:, inv].tocsr()
    got = B.to_scipy()
    assert_equal_collective(got.toarray(), ref.toarray())
    assert_collective(COMM, got.nnz == ref.nnz, "stored entries %d != %d" % (got.nnz, ref.nnz))
    C = p.restore(B)
    assert_collective(COMM, C.row_layout == A.row_layout and C.col_layout == A.col_layout)
    for X, Y in ((C.local_rows(), A.local_rows()),):
        X, Y = sp.csr_matrix(X), sp.csr_matrix(Y)
        X.sort_indices()
        Y.sort_indices()
        assert_equal_collective(X.indptr, Y.indptr)
        assert_equal_collective(X.indices, Y.indices)
        assert_equal_collective(X.data, Y.data)
    x = gallery.rhs(A, kind="random", seed=3)
    y = part.redistribute(x, p)
    assert_equal_collective(y.gather(), x.gather()[inv])
    z = part.redistribute(y, p, inverse=True)
    assert_collective(COMM, z.layout == x.layout)
    assert_equal_collective(z.local, x.local)
    # the matvec commutes with the permutation (to rounding: the on/off-process
    # split, hence the order of the row sums, changes with the owners)
    Ax = (A @ x).gather()[inv]
    assert_allclose_collective((B @ y).gather(), Ax, rtol=1e-14,
                               atol=1e-14 * np.abs(Ax).max())


def test_metis_beats_block_on_scrambled_matrix():
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


def test_quality_against_serial_count():
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


def test_nnz_partition_balances_nonzeros():
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


def test_rcb_grid_is_balanced_and_rank_count_independent():
    n = 13
    layout = Layout.block(n * n, COMM)
    idx = np.arange(layout.start, layout.stop)
    coords = np.column_stack((idx % n, idx // n)).astype(float)
    for nparts in (1, 3, 4, 5):
        p = part.rcb(coords, COMM, nparts=nparts)
        owner = p.parts()
        serial = part.rcb(np.column_stack((np.arange(n * n) % n, np.arange(n * n) // n))
                          .astype(float), MPI.COMM_SELF, nparts=nparts).parts()
        assert_equal_collective(owner, serial)
        sizes = np.bincount(owner, minlength=nparts)
        assert_collective(COMM, sizes.max() - sizes.min() <= 1, "sizes %s" % sizes)
    # with 4 parts of a square the cuts are the two median lines
    p4 = part.rcb(coords, COMM, nparts=4).parts().reshape(n, n)
    assert_collective(COMM, len(np.unique(p4[:6, :6])) == 1 and
                      len(np.unique(p4[7:, 7:])) == 1, str(p4))


def test_rcb_ties_and_empty_ranks():
    # every point at the same place: ties broken by global index
    k = 5 if COMM.rank == 0 else 0
    p = part.rcb(np.zeros((k, 3)), COMM, nparts=2)
    assert_equal_collective(p.parts(), [0, 0, 1, 1, 1])


def test_bad_inputs_raise_everywhere():
    layout = Layout.block(10, COMM)
    last = COMM.rank == COMM.size - 1
    wrong = np.zeros(layout.local_size + (1 if last else 0), dtype=int)
    assert_raises_collective(COMM, ValueError, part.Partition, layout, wrong)
    bad = np.full(layout.local_size, COMM.size if last else 0)
    assert_raises_collective(COMM, ValueError, part.Partition, layout, bad)
    coords = np.full((2, 2), np.nan if last else 0.0)
    assert_raises_collective(COMM, ValueError, part.rcb, coords, COMM)
    assert_raises_collective(COMM, ValueError, part.rcb, np.zeros((2, 2)), COMM, nparts=0)
    A = gallery.poisson1d(10, COMM)
    other = DistVector(Layout.block(11, COMM))
    p = part.block_partition(A)
    assert_raises_collective(COMM, ValueError, part.redistribute, other, p)
    assert_raises_collective(COMM, TypeError, part.redistribute, np.zeros(3), p)
    assert_raises_collective(COMM, ValueError, part.partition, A, "scotch")
    rect = DistCSR.from_global(sp.random(10, 4, density=0.5, random_state=0, format="csr"), COMM)
    assert_raises_collective(COMM, ValueError, part.metis_partition, rect)
    if COMM.size > 1:
        q = part.Partition(layout, np.zeros(layout.local_size, int), nparts=COMM.size + 1)
        assert_raises_collective(COMM, ValueError, part.redistribute, A, q)


# -- the registry and the public helpers ---------------------------------------------

def test_partitioners_registry_and_names():
    assert isinstance(part.PARTITIONERS, Registry)
    assert part.PARTITIONERS.names() == ["block", "hilbert", "metis", "multilevel", "nnz", "rcb"]
    A, _ = scrambled_poisson2d(7)
    ref = part.metis_partition(A, seed=2)
    for method in ("METIS", ("metis", {"seed": 2})):
        p = part.partition(A, method, **({} if isinstance(method, tuple) else {"seed": 2}))
        assert_equal_collective(p.local_parts, ref.local_parts)
    assert_equal_collective(part.partition(A, "Block").local_parts,
                            part.block_partition(A).local_parts)
    with pytest.raises(ValueError, match="unknown partitioner 'scotch'; available: block, "
                       "hilbert, metis, multilevel, nnz, rcb"):
        part.partition(A, "scotch")
    # a name that differs across ranks fails on every rank, with no rank left waiting
    name = "metis" if COMM.rank == 0 else "metsi"
    if COMM.size > 1:
        assert_raises_collective(COMM, ValueError, part.partition, A, name)


def test_rcb_registered_is_the_direct_call():
    A, _ = scrambled_poisson2d(7)
    coords = np.random.default_rng(5 + COMM.rank).random((A.row_layout.local_size, 3))
    for nparts in (None, 2, 5):
        direct = part.rcb(coords, COMM, nparts=nparts)
        named = part.partition(A, "rcb", coords=coords, nparts=nparts)
        assert_collective(COMM, named.old_layout == A.row_layout)
        assert_collective(COMM, named.nparts == direct.nparts)
        assert_equal_collective(named.local_parts, direct.local_parts)
        assert_equal_collective(named.local_new_index, direct.local_new_index)
    # one coordinate row per owned row of A, checked on every rank
    last = COMM.rank == COMM.size - 1
    short = coords[:-1] if last else coords            # every rank owns rows of A here
    assert_raises_collective(COMM, ValueError, part.partition, A, "rcb", coords=short,
                             match="one row per owned row")
    assert_raises_collective(COMM, TypeError, part.partition, A, "rcb")


def test_exchange_and_fetch_against_serial():
    layout = Layout.block(13, COMM)
    rng = np.random.default_rng(7 + COMM.rank)
    # every rank sends 5 rows (value, and a 2-column payload) to random ranks
    dests = rng.integers(0, COMM.size, 5)
    vals = 100 * COMM.rank + np.arange(5)
    pay = np.column_stack((vals, -vals)).astype(np.float64)
    got_vals, got_pay = part.exchange(COMM, dests, vals, pay)
    all_dests = np.concatenate(COMM.allgather(dests))
    all_vals = np.concatenate(COMM.allgather(vals))
    want = all_vals[all_dests == COMM.rank]           # source order, then send order
    assert_equal_collective(got_vals, want)
    assert_equal_collective(got_pay, np.column_stack((want, -want)).astype(np.float64))
    # fetch: values[indices] of a distributed array, repeats and any order
    values = 10.0 * np.arange(layout.start, layout.stop)
    idx = rng.integers(0, 13, 9)
    assert_equal_collective(part.fetch(layout, values, idx), 10.0 * idx)
    assert_equal_collective(part.fetch(layout, values, np.zeros(0, np.int64)), np.zeros(0))


def test_metis_graph_parts_is_what_metis_partition_runs():
    A, S = scrambled_poisson2d(9)
    C = sp.coo_matrix(S)
    for nparts in (1, 3):
        serial = part.metis_graph_parts(C.row.astype(np.int64), C.col.astype(np.int64),
                                        S.shape[0], nparts, seed=1)
        assert_collective(COMM, serial.shape == (S.shape[0],) and serial.dtype == np.int64)
        assert_collective(COMM, set(np.unique(serial)) == set(range(nparts)))
        assert_equal_collective(part.metis_partition(A, nparts=nparts, seed=1).parts(), serial)


@pytest.mark.parametrize("kind,call", [
    (TypeError, lambda A: part.Partition(A.row_layout, np.zeros(A.row_layout.local_size, int),
                                         nparts=1.5)),
    (ValueError, lambda A: part.Partition(A.row_layout, np.zeros(A.row_layout.local_size, int),
                                          nparts=0)),
    (TypeError, lambda A: part.metis_partition(A, nparts="2")),
    (TypeError, lambda A: part.metis_partition(A, seed=0.5)),
    (ValueError, lambda A: part.metis_partition(A, nparts=0)),
    (TypeError, lambda A: part.rcb(np.zeros((2, 2)), COMM, nparts=True)),
], ids=["partition-nparts-float", "partition-nparts-0", "metis-nparts-str",
        "metis-seed-float", "metis-nparts-0", "rcb-nparts-bool"])
def test_option_types_raise_everywhere(kind, call):
    A = gallery.poisson1d(10, COMM)
    assert_raises_collective(COMM, kind, call, A)
