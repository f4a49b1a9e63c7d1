"""Registered neighbour exchanges (dmsolve.bsp.NeighborExchange): halo
exchanges built from ghost lists or given explicitly, forward and reverse,
on layouts with an empty rank, and bad ghost lists refused on every rank.

Every test runs on both exchanges of BSP.sync (dense and sparse, forced
through DMSOLVE_BSP_EXCHANGE, which BSP reads at construction)."""

import numpy as np
import pytest
from mpi4py import MPI

from dmsolve import Layout
from dmsolve.bsp import Ledger, NeighborExchange
from mpitest import assert_collective, assert_equal_collective, assert_raises_collective

pytestmark = pytest.mark.timeout(60)
COMM = MPI.COMM_WORLD


@pytest.fixture(autouse=True, params=["dense", "sparse"])
def exchange(request, monkeypatch):
    """The exchange every BSP built in the test uses."""
    monkeypatch.setenv("DMSOLVE_BSP_EXCHANGE", request.param)
    return request.param


# -- neighbour exchange --------------------------------------------------------------

def ghost_layouts():
    size = COMM.size
    # block layout with an odd size, and one where rank 1 (if any) owns nothing
    ranges = np.concatenate(([0], np.cumsum([9 if r != 1 else 0 for r in range(size)])))
    return {"block29": Layout.block(29, COMM), "empty-rank": Layout(ranges, COMM)}


def random_ghosts(layout, seed):
    rank = COMM.rank
    if rank == 0:
        return np.zeros(0, dtype=np.int64)             # a rank with no ghosts
    rng = np.random.default_rng(seed + rank)
    others = np.setdiff1d(np.arange(layout.global_size), np.arange(*layout.owned_range))
    if others.size == 0:
        return np.zeros(0, dtype=np.int64)
    return np.sort(rng.choice(others, size=rng.integers(1, others.size + 1), replace=False))


EXCHANGE_CASES = [(lay, m, dt) for lay in ("block29", "empty-rank") for m in ("p2p", "graph")
                  for dt in ("float64", "int32", "complex128")]


@pytest.mark.parametrize("layout_name,method,dtype", EXCHANGE_CASES,
                         ids=["-".join(c) for c in EXCHANGE_CASES])
def test_neighbor_exchange_from_ghosts(layout_name, method, dtype):
    """A neighbour exchange built from ghost lists delivers each ghost's owned value, forward
    and in reverse (accumulated), reusing its buffers, on a block layout and on one with an
    empty rank; the ledger counts its calls."""
    layout = ghost_layouts()[layout_name]
    rank, size = COMM.rank, COMM.size
    ghosts = random_ghosts(layout, seed=len(layout_name))
    ledger = Ledger(COMM)
    ex = NeighborExchange.from_ghosts(layout, ghosts, dtype=dtype, method=method,
                                      ledger=ledger, name="ghosts")
    try:
        start, stop = layout.owned_range
        recvbuf, sendbuf = ex.recvbuf, ex.sendbuf
        for it in range(3):            # repeated exchanges reuse the same buffers
            owned = (np.arange(start, stop) * 3 + 7 * it).astype(dtype)
            got = ex.exchange(owned)
            assert_collective(COMM, got is recvbuf and ex.recvbuf is recvbuf
                              and ex.sendbuf is sendbuf, "exchange allocated new buffers")
            assert_equal_collective(got, (ghosts * 3 + 7 * it).astype(dtype))
        all_ghosts = COMM.allgather(ghosts)
        owners = layout.owner(ghosts) if ghosts.size else ghosts
        assert_equal_collective(ex.recv_ranks, np.unique(owners))
        expected_senders = [r for r, g in enumerate(all_ghosts)
                            if np.any((g >= start) & (g < stop))]
        assert_equal_collective(ex.send_ranks, expected_senders)

        # reverse: every ghost holder sends (its rank + 1) * ghost id to the owner
        rev = ex.reverse()
        assert_collective(COMM, ex.reverse() is rev, "reverse pattern not cached")
        target = np.ones(stop - start, dtype=dtype)
        for _ in range(2):
            contrib = ((rank + 1) * ghosts).astype(dtype)
            rev.exchange(contrib)
            rev.accumulate(target)
        want = np.ones(stop - start, dtype=np.int64)
        for r, g in enumerate(all_ghosts):
            mine = g[(g >= start) & (g < stop)]
            np.add.at(want, mine - start, 2 * (r + 1) * mine)
        assert_equal_collective(target, want.astype(dtype))
        s = ledger.summary()["exchanges"]
        assert_collective(COMM, s["ghosts"]["calls"] == 3 and s["ghosts:reverse"]["calls"] == 2,
                          "ledger exchanges %r" % s)
    finally:
        ex.free()
    assert_collective(COMM, ex._graph is None and ex._reverse is None, "free() left state")


def test_neighbor_exchange_start_finish_and_explicit_pattern():
    """An explicitly given pattern exchanges by start/finish on both methods; a bad method and
    positional options are refused."""
    # ring: each rank sends its two last entries to the next rank
    rank, size = COMM.rank, COMM.size
    nxt, prv = (rank + 1) % size, (rank - 1) % size
    for method in ("p2p", "graph"):
        ex = NeighborExchange(COMM, [nxt], [[3, 4]], [prv], [2], dtype=np.complex128,
                              method=method)
        vals = np.arange(5) + 10j * rank
        ex.start(vals)
        got = ex.finish()
        assert_equal_collective(got, np.array([3, 4]) + 10j * prv)
        assert_equal_collective(ex.neighbours, np.union1d([nxt], [prv]))
        ex.free()
    with pytest.raises(ValueError, match="method"):
        NeighborExchange(COMM, [], [], [], [], method="rma")
    # the pattern is positional, its options keyword-only
    with pytest.raises(TypeError, match="positional"):
        NeighborExchange(COMM, [], [], [], [], np.float64)


def test_from_ghosts_rejects_bad_ghost_lists_everywhere():
    """A ghost out of range or owned by the rank itself, on one rank only, is refused on every
    rank."""
    layout = Layout.block(20, COMM)
    empty = np.zeros(0, dtype=np.int64)
    last = COMM.rank == COMM.size - 1
    assert_raises_collective(COMM, IndexError, NeighborExchange.from_ghosts, layout,
                             np.array([25]) if last else empty)
    owned_by_me = np.array([layout.start]) if last else empty
    assert_raises_collective(COMM, ValueError, NeighborExchange.from_ghosts, layout,
                             owned_by_me, match="other ranks")


@pytest.mark.mpi(min_size=2)
def test_from_ghosts_rejects_unsorted_ghosts_everywhere():
    """Unsorted ghosts on one rank are refused on every rank."""
    layout = Layout.block(20, COMM)
    others = [i for i in range(20) if not layout.is_local(i)]
    unsorted = np.array(others[:2][::-1]) if COMM.rank == 0 else np.zeros(0, dtype=np.int64)
    assert_raises_collective(COMM, ValueError, NeighborExchange.from_ghosts, layout,
                             unsorted, match="sorted")
