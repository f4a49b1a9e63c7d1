"""The Partition object and ``partition()``: numberings that are contiguous
permutations, exact redistribution round trips, the partitioner registry, and
bad inputs and option types raised on every rank."""

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

from bad_inputs import check_bad_input, other_size
from dmsolve import DistCSR, DistVector, Layout, Registry, gallery, partition as part
from mpitest import (Checks, assert_allclose_collective, assert_collective, assert_equal_collective,
                     assert_raises_collective)
from operands import random_partition, scrambled_poisson2d

COMM = MPI.COMM_WORLD


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
    """Each partitioner's new numbering is a permutation that gives every part contiguous
    indices."""
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
    """Redistributing matrices and vectors to a partition and back gives them bit for bit."""
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


def test_bad_inputs_raise_everywhere():
    """Bad inputs to the partition functions raise on every rank."""
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
    """The partitioner registry names every partitioner and partition() looks them up."""
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
    """Partitioner options of the wrong type raise on every rank."""
    A = gallery.poisson1d(10, COMM)
    assert_raises_collective(COMM, kind, call, A)


def test_partition_counts_need_no_size_by_nparts_table():
    """A partition into any number of parts needs no table of size x nparts."""
    layout = Layout.block(23, COMM)
    rng = np.random.default_rng(COMM.rank)
    p = part.Partition(layout, rng.integers(0, 5, layout.local_size), nparts=5)
    parts = p.parts()
    new = p.new_index()
    want = np.empty(23, dtype=np.int64)
    want[np.argsort(parts, kind="stable")] = np.arange(23)
    assert_equal_collective(new, want)
    assert_equal_collective(p.part_sizes, np.bincount(parts, minlength=5))


# -- bad input: the same exception on every rank -------------------------------------------

BAD_INPUTS = [
    ("partition-local-parts-wrong-length", ValueError, "local_parts",
     lambda e: part.Partition(e.A.row_layout,
                                   np.zeros(e.A.row_layout.local_size + 1, dtype=int))),
    ("partition-part-out-of-range", ValueError, "nparts",
     lambda e: part.Partition(e.A.row_layout,
                                   np.full(e.A.row_layout.local_size, e.size))),
    ("redistribute-vector-wrong-layout", ValueError, "layout",
     lambda e: part.redistribute(other_size(e), part.block_partition(e.A))),
    ("partition-unknown-method", ValueError, "unknown partitioner",
     lambda e: part.partition(e.A, "nope")),
    ("redistribute-a-numpy-array", TypeError, "DistCSR or a DistVector",
     lambda e: part.redistribute(np.ones(3), part.block_partition(e.A))),
]


@pytest.mark.parametrize("exc, match, call", [c[1:] for c in BAD_INPUTS],
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_the_same_exception_on_every_rank(bad_input_env, request, exc, match,
                                                           call):
    """Each case of BAD_INPUTS raises the same exception type, with a message
    that matches, on every rank (or works, at one rank, where a COMM_SELF
    operand is valid)."""
    check_bad_input(bad_input_env, request, exc, match, call)


def test_redistribute_round_trip_when_ranks_own_nothing(comm):
    """Redistributing a vector of 2 entries (at 3 and 4 ranks some ranks own
    nothing) and back gives the same entries."""
    A = gallery.poisson1d(2, comm)
    x = DistVector.from_global(np.array([3.0, -4.0]), A.row_layout)
    p = part.block_partition(A)
    y = part.redistribute(x, p, inverse=False)
    assert_allclose_collective(part.redistribute(y, p, inverse=True).gather(),
                               [3.0, -4.0], comm)
