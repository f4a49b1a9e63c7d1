"""Tests of the distributed sort (dmsolve.bsp.psort, rank_of) at any number of ranks.

The reference is numpy's lexsort of the keys gathered on every rank (in rank
order, so the default gids are the positions in that concatenation); each
rank checks its own block, the balance of the blocks, and the bytes it sent."""

import math

import numpy as np
import pytest
from mpi4py import MPI

from dmsolve import Layout
from dmsolve.bsp import Ledger, _psort, _splitters, psort, rank_of
from dmsolve.bsp._psort import SAMPLES, _key_gid_order
from mpitest import Checks, assert_raises_collective

pytestmark = pytest.mark.timeout(60)
COMM = MPI.COMM_WORLD
R, P = COMM.rank, COMM.size


def max_rounds(N: int) -> int:
    """The splitter search's bound: the histogram round and two leader rounds
    for a few members a boundary (the first leaves about 2 SAMPLE_SPACING
    candidates a member, the second sends them whole), whatever N; more
    members a boundary add rounds as log_4 p. Never more than the bound of
    a round that keeps fewer than 4/SAMPLES of the candidates plus two."""
    by_ranks = 3 + math.ceil(math.log(P, 4))
    by_size = math.ceil(math.log(max(N, 2)) / math.log(SAMPLES / 4)) + 2
    return min(by_ranks, by_size)


#: rounds for keys spread over every block (every rank a member of every
#: boundary): the histogram round and two leader rounds, at any N
SPREAD_ROUNDS = 3


def _keys(case: str, rng) -> np.ndarray:
    n = 101 + 37 * R                         # uneven counts
    if case == "int-ties":
        return rng.integers(-5, 5, n)
    if case == "int-wide":
        return rng.integers(-2**62, 2**62, n)
    if case == "float":
        return rng.normal(size=n)
    if case == "float-skew":                 # heavy tail: most keys near 0
        return rng.exponential(size=n) ** 6 * (-1) ** R
    if case == "all-equal":
        return np.full(n, 7, dtype=np.int64)
    if case == "one-rank-holds-all":
        return rng.integers(0, 50, 500 if R == 0 else 0)
    if case == "last-rank-holds-all":
        return rng.normal(size=300 if R == P - 1 else 0)
    if case == "empty":
        return np.zeros(0, dtype=np.int64)
    if case == "fewer-than-ranks":
        return np.array([3 - R], dtype=np.int64) if R < 2 else np.zeros(0, np.int64)
    if case == "sorted-blocks":              # already sorted, rank r above rank r-1
        return np.arange(n) + 1000 * R
    if case == "reverse-blocks":
        return np.arange(n)[::-1] - 1000 * R
    if case == "2-col":
        return rng.integers(0, 4, (n, 2))
    if case == "3-col":
        return rng.integers(0, 3, (n, 3))
    if case == "3-col-float":
        return np.round(rng.normal(size=(n, 3)), 1)
    if case == "simplex-tuples":             # sorted vertex triples, shared across ranks
        t = np.sort(rng.integers(0, 30, (n, 3)), axis=1)
        return t
    raise ValueError(case)


CASES = ["int-ties", "int-wide", "float", "float-skew", "all-equal", "one-rank-holds-all",
         "last-rank-holds-all", "empty", "fewer-than-ranks", "sorted-blocks",
         "reverse-blocks", "2-col", "3-col", "3-col-float", "simplex-tuples"]


def _reference(everything: np.ndarray, gids: np.ndarray) -> np.ndarray:
    """The order of (key row, gid) over all items; ties kept in input order."""
    k2 = everything.reshape(-1, 1) if everything.ndim == 1 else everything
    return np.lexsort((gids,) + tuple(k2[:, c] for c in range(k2.shape[1] - 1, -1, -1)))


@pytest.mark.parametrize("case", CASES)
def test_psort_matches_lexsort_of_the_gathered_keys(case):
    """psort gives each rank its block of numpy's lexsort of the gathered keys, balanced, for
    every kind of keys."""
    rng = np.random.default_rng(100 + R)
    keys = _keys(case, rng)
    n = keys.shape[0]
    pay_a = (np.arange(n) + 10**6 * R).astype(np.int64)
    first = keys if keys.ndim == 1 else keys[:, 0]
    pay_b = np.column_stack((first * 2.0, -np.arange(n, dtype=float)))
    out = psort(keys, COMM, payload=(pay_a, pay_b))
    every = np.concatenate(COMM.allgather(keys))
    N = every.shape[0]
    gids = np.arange(N)
    ref = _reference(every, gids)
    lay = Layout.block(N, COMM)
    mine = ref[lay.start:lay.stop]
    all_a = np.concatenate(COMM.allgather(pay_a))
    all_b = np.concatenate(COMM.allgather(pay_b))
    with Checks(COMM) as c:
        c.add(out.global_size == N and out.start == lay.start, "layout")
        c.add(out.keys.shape == (lay.local_size,) + keys.shape[1:], "shape", out.keys.shape)
        c.add(out.keys.dtype == (np.float64 if keys.dtype.kind == "f" else np.int64), "dtype")
        c.add(np.array_equal(out.keys, every[mine]), "keys")
        c.add(np.array_equal(out.gids, mine), "gids (stable order)")
        c.add(np.array_equal(out.payload[0], all_a[mine]), "payload 1-D")
        c.add(np.array_equal(out.payload[1], all_b[mine]), "payload 2-D")
        # balance: exactly Layout.block's counts, so max <= ceil(N/p)
        c.add(lay.local_size <= math.ceil(N / P), "balance")
        c.add(out.rounds <= max_rounds(N), "rounds", out.rounds)


@pytest.mark.parametrize("histogram", [False, True], ids=["leaders-only", "histogram"])
@pytest.mark.parametrize("case", ["int-ties", "float", "float-skew", "all-equal", "3-col",
                                  "one-rank-holds-all", "fewer-than-ranks", "simplex-tuples"])
def test_both_first_rounds_give_the_same_order(case, histogram, monkeypatch):
    """The search with and without the histogram round (taken by default
    only for crowded boundaries) finds the same exact splitters."""
    monkeypatch.setattr(_splitters, "_crowded", lambda nmembers, size: histogram)
    rng = np.random.default_rng(300 + R)
    keys = _keys(case, rng)
    out = psort(keys, COMM)
    every = np.concatenate(COMM.allgather(keys))
    N = every.shape[0]
    lay = Layout.block(N, COMM)
    with Checks(COMM) as c:
        c.add(np.array_equal(out.gids, _reference(every, np.arange(N))[lay.start:lay.stop]),
              "order")
        c.add(out.rounds <= max_rounds(N), "rounds", out.rounds)


@pytest.mark.parametrize("case", ["int-ties", "all-equal", "3-col", "one-rank-holds-all",
                                  "empty", "fewer-than-ranks"])
def test_rank_of_gives_global_positions(case):
    """rank_of gives each item its position in the global order."""
    rng = np.random.default_rng(7 + R)
    keys = _keys(case, rng)
    pos = rank_of(keys, COMM)
    every = np.concatenate(COMM.allgather(keys))
    N = every.shape[0]
    ref = _reference(every, np.arange(N))
    want = np.empty(N, dtype=np.int64)
    want[ref] = np.arange(N)
    off = sum(COMM.allgather(keys.shape[0])[:R])
    with Checks(COMM) as c:
        c.add(pos.dtype == np.int64 and pos.shape == (keys.shape[0],), "shape")
        c.add(np.array_equal(pos, want[off:off + keys.shape[0]]), "positions")


def test_gids_break_ties_then_rank_then_input_order():
    """Equal keys are ordered by gid, then by rank, then by input order."""
    rng = np.random.default_rng(R)
    n = 40 + 3 * R
    keys = rng.integers(0, 3, n)
    gids = rng.integers(0, 5, n)            # repeated (key, gid) pairs, also across ranks
    out = psort(keys, COMM, gids=gids, payload=np.column_stack((np.full(n, R), np.arange(n))))
    every_k = np.concatenate(COMM.allgather(keys))
    every_g = np.concatenate(COMM.allgather(gids))
    origin = np.concatenate(COMM.allgather(np.column_stack((np.full(n, R), np.arange(n)))))
    ref = np.lexsort((every_g, every_k))     # stable: rank order, then input order
    lay = Layout.block(every_k.size, COMM)
    mine = ref[lay.start:lay.stop]
    with Checks(COMM) as c:
        c.add(np.array_equal(out.keys, every_k[mine]), "keys")
        c.add(np.array_equal(out.gids, every_g[mine]), "gids")
        c.add(np.array_equal(out.payload, origin[mine]), "origin order")
    pos = rank_of(keys, COMM, gids=gids)
    want = np.empty(every_k.size, dtype=np.int64)
    want[ref] = np.arange(every_k.size)
    off = sum(COMM.allgather(n)[:R])
    with Checks(COMM) as c:
        c.add(np.array_equal(pos, want[off:off + n]), "rank_of with gids")


@pytest.mark.parametrize("gids", ["ascending", "nondecreasing", "random", "descending"])
@pytest.mark.parametrize("ncols", [1, 2, 3])
@pytest.mark.parametrize("n", [500, 20000])
def test_local_order_is_lexsorts_with_and_without_the_fast_paths(gids, ncols, n):
    """The stable argsort taken for one key column whose ties have ascending
    gids, the column-by-column stable sorts for several columns with gids
    ascending in input order, and the lexsort fallback otherwise, give
    lexsort's order (n = 20000: stable_argsort's packed and float paths)."""
    rng = np.random.default_rng(7)
    K = np.where(rng.random((n, ncols)) < 0.1, -0.0, rng.integers(-3, 3, (n, ncols)) * 1.0)
    if n > 500 and ncols > 1:
        K[:, 0] = rng.integers(0, 10 ** 6, n)            # a wide integer column too
    G = {"ascending": np.arange(n), "nondecreasing": np.sort(rng.integers(0, n // 4, n)),
         "random": rng.integers(0, 20, n), "descending": np.arange(n)[::-1]}[gids]
    G = G.astype(np.int64)
    ref = np.lexsort((G,) + tuple(K[:, c] for c in range(ncols - 1, -1, -1)))
    assert np.array_equal(_key_gid_order(K, G), ref)


def test_signed_zero_and_infinities_sort_like_numpy():
    """Signed zeros and infinities sort as numpy sorts them."""
    keys = np.array([np.inf, -0.0, 0.0, -np.inf, 1e-300, -1e300][R % 6:] * 3)
    out = psort(keys, COMM)
    every = np.concatenate(COMM.allgather(keys))
    ref = np.argsort(every, kind="stable")
    lay = Layout.block(every.size, COMM)
    with Checks(COMM) as c:
        c.add(np.array_equal(out.gids, ref[lay.start:lay.stop]), "order")


def test_nan_on_one_rank_is_refused_on_every_rank():
    """A NaN key on one rank is refused on every rank."""
    keys = np.arange(5, dtype=np.float64)
    if R == P - 1:
        keys[2] = np.nan
    assert_raises_collective(COMM, ValueError, psort, keys, COMM, match="NaN")
    assert_raises_collective(COMM, ValueError, rank_of, keys.reshape(-1, 1), COMM,
                             match="NaN")


@pytest.mark.mpi(min_size=2)
def test_disagreeing_ranks_are_refused_on_every_rank():
    """Ranks that disagree on the key columns or dtype are refused on every rank."""
    cols = np.zeros((4, 2 if R == 0 else 3), np.int64)
    assert_raises_collective(COMM, ValueError, psort, cols, COMM, match="disagree")
    kind = np.zeros(3, np.float64 if R == 0 else np.int64)
    assert_raises_collective(COMM, ValueError, psort, kind, COMM, match="disagree")
    pay = np.zeros(3, np.int32 if R == 0 else np.int64)
    assert_raises_collective(COMM, ValueError, psort, np.zeros(3), COMM, payload=pay,
                             match="disagree")


def test_bad_arguments_on_one_rank_are_raised_on_every_rank():
    """A bad argument on one rank is raised on every rank."""
    keys = np.array(["a", "b"]) if R == 0 else np.zeros(2)
    assert_raises_collective(COMM, TypeError, psort, keys, COMM, match="keys")
    gids = np.zeros(3 if R == P - 1 else 2, np.int64)
    assert_raises_collective(COMM, ValueError, psort, np.zeros(2), COMM, gids=gids,
                             match="gids")
    pay = np.zeros(1 if R == 0 else 2)
    assert_raises_collective(COMM, ValueError, psort, np.zeros(2), COMM, payload=pay,
                             match="payload")
    assert_raises_collective(COMM, ValueError, psort, np.zeros((2, 2, 2)), COMM,
                             match="1-D")


def test_traffic_and_memory_are_the_local_share_not_the_global_size():
    """Each rank sends its own items once and receives its block once; the
    splitter search adds O(p) rows per round. Nothing of global size moves."""
    rng = np.random.default_rng(R)
    n = 20000 + 1000 * R
    keys = rng.integers(0, 1000, (n, 2))
    pay = rng.normal(size=n)
    ledger = Ledger(COMM)
    out = psort(keys, COMM, payload=pay, ledger=ledger)
    N = COMM.allreduce(n)
    item = 8 * (2 + 1 + 1)                          # two key columns, gid, payload
    sent = sum(row[2] for _, row in ledger.steps)
    recv = sum(row[3] for _, row in ledger.steps)
    search = 1024 * P * (out.rounds + 2)            # O(p) rows per round, generously
    with Checks(COMM) as c:
        c.add(sent <= n * item + search, "sent", (sent, n * item))
        c.add(recv <= math.ceil(N / P) * item + search, "received", (recv, N * item))
        c.add(out.rounds <= max_rounds(N), "rounds", out.rounds)
        c.add(len(ledger.steps) == 2 * out.rounds + 1, "supersteps: 2 per round + 1",
              len(ledger.steps))
        if P > 1:
            c.add(recv < 0.75 * N * item, "no gather", recv)


@pytest.mark.parametrize("ncols", [1, 2])
def test_search_bytes_per_rank_are_a_few_words_per_rank_for_spread_keys(ncols):
    """Random keys put every rank on both sides of every boundary. A rank
    then sends and receives its own items once, plus at most 48 (c + 2)
    words per rank of the communicator for the whole splitter search and
    the message headers (c key columns; a search row is the key and a gid).
    Measured at 1-8 ranks: about 35 (c + 2) words per rank with the
    histogram round, 80-95 (c + 2) with leaders gathering 16 samples from
    every rank in every round (04bab36)."""
    rng = np.random.default_rng(R)
    n = 2000 + 100 * R
    keys = rng.normal(size=n) if ncols == 1 else rng.integers(0, 1000, (n, ncols))
    ledger = Ledger(COMM)
    out = psort(keys, COMM, ledger=ledger)
    N = COMM.allreduce(n)
    item = 8 * (ncols + 1)                          # key columns and gid
    allowance = 8 * 48 * (ncols + 2) * P
    sent = sum(row[2] for _, row in ledger.steps)
    recv = sum(row[3] for _, row in ledger.steps)
    with Checks(COMM) as c:
        c.add(sent <= n * item + allowance, "sent", (sent - n * item, allowance))
        c.add(recv <= math.ceil(N / P) * item + allowance, "received",
              (recv - math.ceil(N / P) * item, allowance))
        c.add(out.rounds <= max_rounds(N), "rounds", out.rounds)


@pytest.mark.parametrize("overlap", [0, 60])
def test_keys_near_their_place_keep_the_search_among_neighbours(overlap):
    """A rank whose first and last items put all of it on one side of a
    boundary never joins that boundary's search, so for keys near their place
    (rank r's keys overlap only its neighbours' ranges, as a block-partitioned
    mesh's simplices do) a rank's search talks to at most a few peers,
    however many ranks there are; with no overlap there is no search."""
    rng = np.random.default_rng(7 + R)
    n = 200 + 13 * R
    start = COMM.exscan(n) or 0
    keys = start + rng.permutation(n) + rng.integers(-overlap, overlap + 1, n)
    ledger = Ledger(COMM)
    out = psort(keys, COMM, ledger=ledger)
    every = np.concatenate(COMM.allgather(keys))
    ref = _reference(every, np.arange(every.shape[0]))
    lay = Layout.block(every.shape[0], COMM)
    search = ledger.steps[:-1]                     # all but the exchange
    peers = max((int(row[8]) for _, row in search), default=0)
    with Checks(COMM) as c:
        c.add(np.array_equal(out.gids, ref[lay.start:lay.stop]), "order")
        c.add(peers <= 4, "search peers per superstep", peers)
        if overlap == 0:
            c.add(out.rounds == 0 and len(ledger.steps) == 1, "no search when nothing "
                  "overlaps", (out.rounds, len(ledger.steps)))


def _large_keys(case: str, rng) -> np.ndarray:
    """Keys enough for leader rounds of many samples (intervals of thousands
    of candidates a member), uneven counts."""
    n = 6001 + 1013 * R
    if case == "spread-int":
        return rng.integers(0, 2 ** 40, n)
    if case == "spread-2-col":
        return rng.integers(0, 1000, (n, 2))
    if case == "skewed":                     # heavy tail: most keys near 0, a few huge
        return rng.exponential(size=n) ** 8 * (-1) ** R
    if case == "skewed-counts":              # rank 0 holds most of the items
        return rng.normal(size=20000 if R == 0 else 700)
    if case == "many-ties":                  # three distinct keys
        return rng.integers(0, 3, n)
    if case == "many-ties-3-col":            # 4 x 2 x 2 distinct rows
        return np.column_stack((rng.integers(0, 4, n), rng.integers(0, 2, (n, 2))))
    if case == "empty-ranks":                # odd ranks hold nothing
        return rng.normal(size=0 if R % 2 else n)
    if case == "near-place":                 # rank r's keys overlap its neighbours'
        start = COMM.exscan(n) or 0
        return start + rng.permutation(n) + rng.integers(-n // 20, n // 20 + 1, n)
    raise ValueError(case)


LARGE_CASES = ["spread-int", "spread-2-col", "skewed", "skewed-counts", "many-ties",
               "many-ties-3-col", "empty-ranks", "near-place"]


@pytest.mark.parametrize("histogram", [None, False, True],
                         ids=["default", "leaders-only", "histogram"])
@pytest.mark.parametrize("case", LARGE_CASES)
def test_rounds_of_many_samples_give_lexsorts_order(case, histogram, monkeypatch):
    """With thousands of candidates a member, the leader rounds that sample
    one candidate in SAMPLE_SPACING give each rank its block of numpy's
    lexsort of the gathered keys (keys, gids and payload rows; ties by gid),
    for skewed keys and counts, many ties and empty ranks, in at most
    max_rounds(N) rounds: log_4 p, not log N."""
    if histogram is not None:
        monkeypatch.setattr(_splitters, "_crowded", lambda nmembers, size: histogram)
    rng = np.random.default_rng(500 + R)
    keys = _large_keys(case, rng)
    n = keys.shape[0]
    pay = np.column_stack((np.full(n, R), np.arange(n)))
    ledger = Ledger(COMM)
    out = psort(keys, COMM, payload=pay, ledger=ledger)
    every = np.concatenate(COMM.allgather(keys))
    origin = np.concatenate(COMM.allgather(pay))
    N = every.shape[0]
    ref = _reference(every, np.arange(N))
    lay = Layout.block(N, COMM)
    mine = ref[lay.start:lay.stop]
    with Checks(COMM) as c:
        c.add(np.array_equal(out.keys, every[mine]), "keys")
        c.add(np.array_equal(out.gids, mine), "gids")
        c.add(np.array_equal(out.payload, origin[mine]), "payload")
        c.add(out.rounds <= max_rounds(N), "rounds", (out.rounds, max_rounds(N)))
        c.add(len(ledger.steps) == 2 * out.rounds + 1, "supersteps: 2 per round + 1",
              len(ledger.steps))


@pytest.mark.parametrize("n", [2000, 30000])
@pytest.mark.parametrize("ncols", [1, 2])
def test_spread_keys_take_a_constant_number_of_rounds(ncols, n):
    """Keys spread over every block take the histogram round and two leader
    rounds, at 2000 keys per rank as at 30000 (16 samples a member a round
    took five rounds at 30000)."""
    rng = np.random.default_rng(40 + R)
    m = n + 97 * R
    keys = rng.normal(size=m) if ncols == 1 else rng.integers(0, 2 ** 20, (m, ncols))
    ledger = Ledger(COMM)
    out = psort(keys, COMM, ledger=ledger)
    every = np.concatenate(COMM.allgather(keys))
    N = every.shape[0]
    lay = Layout.block(N, COMM)
    with Checks(COMM) as c:
        c.add(np.array_equal(out.gids, _reference(every, np.arange(N))[lay.start:lay.stop]),
              "order")
        c.add(out.rounds <= (SPREAD_ROUNDS if P > 1 else 0), "rounds", out.rounds)
        c.add(len(ledger.steps) == 2 * out.rounds + 1, "supersteps", len(ledger.steps))


@pytest.mark.parametrize("ncols", [1, 2, 3])
def test_counts_below_tied_keys_are_the_searchs(ncols):
    """The histogram's count of local items below keys of other ranks that
    tie a local first column (one lexicographic sort of them all) equals the
    search of each key alone (Local.count_less)."""
    rng = np.random.default_rng(13)
    n, q, me = 3000, 500, 1
    K = rng.integers(0, 6, (n, ncols))
    G = rng.integers(0, 40, n)
    order = np.lexsort((G,) + tuple(K[:, c] for c in range(ncols - 1, -1, -1)))
    local = _splitters.Local(K[order], G[order], me)
    keys = rng.integers(-1, 7, (q, ncols))
    ints = np.column_stack((rng.integers(0, 40, q), rng.choice([0, 2, 3], q),
                            np.zeros(q, dtype=np.int64)))
    got = _splitters._count_below(local, keys, ints)
    want = [local.count_less(0, n, keys[i], ints[i]) for i in range(q)]
    assert np.array_equal(got, want)


@pytest.mark.parametrize("case", ["int-ties", "int-wide", "float", "all-equal", "empty", "2-col",
                                  "3-col", "gids"])
def test_rank_of_at_one_rank_is_the_general_path(case):
    """At one rank rank_of takes the inverse of the local order, with no
    exchange; the general path (psort's steps and the positions' superstep)
    gives the same positions, ties included."""
    rng = np.random.default_rng(11)
    keys = _keys("int-ties" if case == "gids" else case, rng)
    gids = rng.integers(0, 4, keys.shape[0]) if case == "gids" else None
    fast = rank_of(keys, MPI.COMM_SELF, gids=gids)
    general = _psort._sort(_psort._prepare(keys, MPI.COMM_SELF, gids, None), MPI.COMM_SELF,
                           None, positions=True)
    with Checks(COMM) as c:
        c.add(fast.dtype == np.int64 and np.array_equal(fast, general), case,
              (fast[:5], general[:5]))
