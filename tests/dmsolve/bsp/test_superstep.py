"""The BSP superstep (dmsolve.bsp.BSP): messages queued by destination and tag
and delivered at one sync, typed payloads and rows, aggregators and votes,
``run`` with vote-to-halt, misuse raised on every rank at the next sync, and
the debug mode that catches ranks in different supersteps.

Every test is collective on COMM_WORLD; expected answers are computed from
inputs allgathered on every rank, so each rank checks its own share. Every
test runs on both exchanges of BSP.sync (dense and sparse, forced through
DMSOLVE_BSP_EXCHANGE, which BSP reads at construction)."""

import numpy as np
import pytest
from mpi4py import MPI

from dmsolve import Layout
from dmsolve.bsp import BSP
from mpitest import (Checks, assert_allclose_collective, assert_collective, assert_equal_collective,
                     assert_raises_collective, same_on_all_ranks)

pytestmark = pytest.mark.timeout(60)
COMM = MPI.COMM_WORLD


@pytest.fixture(autouse=True, params=["dense", "sparse"])
def exchange(request, monkeypatch):
    """The exchange every BSP built in the test uses."""
    monkeypatch.setenv("DMSOLVE_BSP_EXCHANGE", request.param)
    return request.param


def sync_calls(exchange, payload):
    """The collectives one sync makes on the user's communicator."""
    if exchange == "dense":
        return ["Alltoall", "Alltoallv"] if payload else ["Alltoall"]
    return ["Iallreduce"]             # NBX's messages go on dmsolve's private duplicate


class CountingComm(MPI.Intracomm):
    """COMM_WORLD's handle, counting the collectives made on it."""

    def Iallreduce(self, *args, **kwargs):
        self.calls.append("Iallreduce")
        return super().Iallreduce(*args, **kwargs)

    def Alltoall(self, *args, **kwargs):
        self.calls.append("Alltoall")
        return super().Alltoall(*args, **kwargs)

    def Alltoallv(self, *args, **kwargs):
        self.calls.append("Alltoallv")
        return super().Alltoallv(*args, **kwargs)


def counting_comm() -> CountingComm:
    c = CountingComm(COMM)
    c.calls = []
    return c


# -- queues ----------------------------------------------------------------------------

def test_send_sync_delivers_per_source_and_tag():
    """Messages queued by destination and tag are delivered at the sync, by source and by tag."""
    rank, size = COMM.rank, COMM.size
    ctx = BSP(COMM)
    for d in range(size):
        ctx.send(d, np.array([rank, d, 0], dtype=np.int64))           # tag 0
        ctx.send(d, np.array([100.0 * rank + d]), tag=7)
    if rank == size - 1:
        ctx.send(0, np.array([-1], dtype=np.int32), tag=2**30 - 1)     # largest tag
    inbox = ctx.sync("deliver")
    expected_tags = [0, 7] + ([2**30 - 1] if rank == 0 else [])
    checks = Checks(COMM)
    checks.add(inbox.tags() == expected_tags, "tags", inbox.tags())
    checks.add(inbox.sources(0) == list(range(size)) and inbox.sources(7) == list(range(size)),
               "sources of tags 0 and 7")
    checks.add([s for s, _ in inbox.messages(0)] == list(range(size)), "messages in source order")
    for s in range(size):
        got0 = inbox.from_source(s, 0)
        got7 = inbox.from_source(s, 7)
        checks.add(len(got0) == 1 and np.array_equal(got0[0], [s, rank, 0]),
                   "tag 0 from %d" % s, got0)
        checks.add(len(got7) == 1 and got7[0].dtype == np.float64
                   and got7[0][0] == 100.0 * s + rank, "tag 7 from %d" % s, got7)
    if rank == 0:
        big = inbox.from_source(size - 1, 2**30 - 1)
        checks.add(len(big) == 1 and big[0].dtype == np.int32 and big[0][0] == -1,
                   "largest tag", big)
    checks.add(inbox.from_source(0, 3) == [] and inbox.sources(3) == [], "no tag 3")
    checks.add(inbox.global_messages == 2 * size * size + 1, "global message count",
               inbox.global_messages)
    checks.assert_all()
    cat, src = inbox.concat_with_sources(0)
    # 1-D messages concatenate along axis 0: one source entry per element
    assert_equal_collective(src, np.repeat(np.arange(size), 3))
    assert_equal_collective(cat, np.array([[s, rank, 0] for s in range(size)]).ravel())


DTYPES = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
          np.uint64, np.float16, np.float32, np.float64, np.longdouble, np.complex64,
          np.complex128, np.bool_]


@pytest.mark.parametrize("dtype", DTYPES, ids=[np.dtype(d).name for d in DTYPES])
def test_typed_payloads_roundtrip(dtype):
    """Payloads of every numeric dtype arrive with their dtype, shape and values."""
    rank, size = COMM.rank, COMM.size
    dest = (rank + 1) % size
    src = (rank - 1) % size

    def payloads(r):
        base = np.arange(7) + 3 * r
        vec = (base % 2 == 0) if dtype is np.bool_ else (base * (1 + 1j)).astype(dtype) \
            if np.issubdtype(dtype, np.complexfloating) else base.astype(dtype)
        rows = np.arange(12).reshape(4, 3).astype(dtype) + (r % 2 == 1)
        return [vec, rows, np.zeros(0, dtype=dtype), np.zeros((0, 3), dtype=dtype),
                np.asarray(vec[2], dtype=dtype),      # 0-d
                rows.T, np.asfortranarray(rows)]      # non-C-contiguous layouts

    ctx = BSP(COMM)
    for p in payloads(rank):
        ctx.send(dest, p, tag=3)
    got = ctx.sync().from_source(src, 3)
    want = payloads(src)
    checks = Checks(COMM)
    checks.add(len(got) == len(want), "number of payloads", len(got))
    for i, (g, w) in enumerate(zip(got, want)):
        checks.add(g.dtype == np.dtype(dtype) and g.shape == w.shape and np.array_equal(g, w),
                   "payload %d unchanged in transit" % i, g)
    checks.assert_all()


def test_non_native_byte_order_payload():
    """A big-endian payload arrives with its values, not byte-swapped."""
    # the receiver rebuilds the dtype from its char code (native order), so the
    # byte order must travel with it
    rank, size = COMM.rank, COMM.size
    ctx = BSP(COMM)
    ctx.send((rank + 1) % size, np.arange(5, dtype=">i4") + rank)
    ctx.send((rank + 1) % size, np.linspace(0, 1, 4).astype(">f8"))
    a, b = ctx.sync().from_source((rank - 1) % size)
    src = (rank - 1) % size
    assert_equal_collective(a, np.arange(5) + src)
    assert_equal_collective(b, np.linspace(0, 1, 4))


def test_several_messages_per_destination_keep_send_order():
    """Several messages to one destination arrive in the order they were sent."""
    rank, size = COMM.rank, COMM.size
    ctx = BSP(COMM)
    for i in range(6):
        for d in range(size):
            ctx.send(d, np.full(i + 1, 10 * rank + i, dtype=np.int16), tag=i % 2)
    inbox = ctx.sync()
    checks = Checks(COMM)
    for s in range(size):
        for tag in (0, 1):
            got = inbox.from_source(s, tag)
            want = [np.full(i + 1, 10 * s + i) for i in range(6) if i % 2 == tag]
            checks.add(len(got) == len(want) and all(np.array_equal(g, w)
                                                     for g, w in zip(got, want)),
                       "messages from %d with tag %d in send order" % (s, tag), got)
    checks.assert_all()


def test_send_rows_routes_rows_in_order():
    """send_rows delivers each row to its destination, in order."""
    rank, size = COMM.rank, COMM.size
    rng = np.random.default_rng(10 + rank)
    n = 37 + 5 * rank
    dests = rng.integers(0, size, n)
    # each row records (source, original position, destination)
    rows = np.stack([np.full(n, rank), np.arange(n), dests], axis=1).astype(np.int64)
    ctx = BSP(COMM)
    ctx.send_rows(dests, rows, tag=4)
    ctx.send_rows(np.zeros(0, dtype=np.int64), np.zeros((0, 3)), tag=4)   # sends nothing
    inbox = ctx.sync()
    all_rows = COMM.allgather(rows)
    checks = Checks(COMM)
    for s in range(size):
        got = inbox.from_source(s, 4)
        want = all_rows[s][all_rows[s][:, 2] == rank]
        if want.shape[0] == 0:
            checks.add(got == [], "no rows from %d" % s, got)
        else:  # one message per destination, rows in their given order
            checks.add(len(got) == 1 and np.array_equal(got[0], want),
                       "rows from %d in order" % s, got)
    checks.assert_all()


def test_send_rows_to_one_rank_is_one_message_taken_at_the_call():
    """Rows all for one rank (every send at one rank) skip the sort by
    destination: one message, rows in order, copied when queued, so a change
    to the array before the sync does not travel."""
    rank, size = COMM.rank, COMM.size
    dest = (rank + 1) % size
    rows = np.column_stack((np.full(9, rank), np.arange(9))).astype(np.int64)
    ctx = BSP(COMM)
    ctx.send_rows(np.full(9, dest), rows, tag=5)
    rows[:] = -1
    inbox = ctx.sync()
    src = (rank - 1) % size
    got = inbox.from_source(src, 5)
    want = np.column_stack((np.full(9, src), np.arange(9)))
    with Checks(COMM) as checks:
        checks.add(len(got) == 1 and np.array_equal(got[0], want), "one message, as sent", got)


def test_empty_superstep_costs_one_collective(exchange):
    """A superstep that sends nothing costs one collective on the user's communicator."""
    comm = counting_comm()
    ctx = BSP(comm)
    checks = Checks(COMM)
    checks.add(ctx.exchange == exchange, "exchange", ctx.exchange)
    inbox = ctx.sync("empty")
    checks.add(comm.calls == sync_calls(exchange, False), "one collective", comm.calls)
    checks.add(inbox.global_messages == 0 and inbox.tags() == [], "no messages")
    checks.add(not inbox.any_active and inbox.aggregates == {}, "no votes, no aggregates")
    empty = inbox.concat(5, dtype=np.int32, shape=(2,))
    checks.add(empty.shape == (0, 2) and empty.dtype == np.int32, "empty concat", empty)
    checks.assert_all()
    # one rank sends one message: every rank joins the single Alltoallv
    comm.calls.clear()
    if comm.rank == comm.size - 1:
        ctx.send(0, np.arange(3.0))
    inbox = ctx.sync()
    assert_collective(COMM, comm.calls == sync_calls(exchange, True)
                      and inbox.global_messages == 1, "calls %s" % comm.calls)
    got = inbox.from_source(comm.size - 1)
    want = [np.arange(3.0)] if comm.rank == 0 else []
    assert_collective(COMM, len(got) == len(want)
                      and all(np.array_equal(g, w) for g, w in zip(got, want)), repr(got))


# -- aggregators -------------------------------------------------------------------------

def test_aggregators_mixed_dtypes_in_one_sync(exchange):
    """Aggregators of several dtypes and operations reduce correctly in one sync."""
    rank, size = COMM.rank, COMM.size
    ranks = np.arange(size)
    comm = counting_comm()
    ctx = BSP(comm)
    ctx.aggregate("count", "sum", 1)
    ctx.aggregate("i8", "max", np.int8(rank - 3))
    ctx.aggregate("vec", "sum", np.array([rank, 2.5, -rank], dtype=np.float64))
    ctx.aggregate("vmin", "min", np.array([[rank, -rank], [7, rank % 2]], dtype=np.int32))
    ctx.aggregate("f32", "min", np.float32(0.5 * rank))
    ctx.aggregate("z", "sum", np.complex128(1 + 1j * rank))
    ctx.aggregate("anyodd", "any", rank % 2 == 1)
    ctx.aggregate("alltrue", "all", True)
    ctx.aggregate("allzero", "all", rank == 0)
    ctx.aggregate("anyvec", "any", np.array([rank == size - 1, False]))
    ctx.send(rank, np.arange(2))
    inbox = ctx.sync()
    agg = inbox.aggregates
    expected = {
        "count": size,
        "i8": size - 4,
        "vec": np.array([ranks.sum(), 2.5 * size, -ranks.sum()]),
        "vmin": np.array([[0, -(size - 1)], [7, 0]]),
        "f32": 0.0,
        "z": size + 1j * ranks.sum(),
        "anyodd": size > 1,
        "alltrue": True,
        "allzero": size == 1,
        "anyvec": np.array([True, False]),
    }
    checks = Checks(COMM)
    checks.add(sorted(agg) == sorted(expected), "aggregate names", sorted(agg))
    checks.add(comm.calls == sync_calls(exchange, True), "calls", comm.calls)
    for k, v in expected.items():
        checks.add(k in agg and np.shape(agg[k]) == np.shape(v) and np.array_equal(agg[k], v),
                   "aggregate %s" % k, agg.get(k))
    checks.add(agg["vmin"].dtype == np.int32 and agg["f32"].dtype == np.float32,
               "vmin int32, f32 float32")
    checks.add(agg["anyodd"].dtype == np.bool_, "anyodd bool")
    checks.assert_all()
    assert same_on_all_ranks(COMM, {k: np.asarray(v).tolist() for k, v in agg.items()})
    assert_equal_collective(inbox.concat(), np.arange(2))


def test_aggregators_alone_cost_one_collective(exchange):
    """A sync with aggregators and no messages costs one collective."""
    comm = counting_comm()
    ctx = BSP(comm)
    ctx.aggregate("n", "sum", np.arange(3) * comm.rank)
    inbox = ctx.sync()
    assert_collective(COMM, comm.calls == sync_calls(exchange, False), "calls %s" % comm.calls)
    assert_equal_collective(inbox.aggregates["n"],
                            np.arange(3) * (comm.size * (comm.size - 1) // 2))


# -- vote to halt --------------------------------------------------------------------

@pytest.mark.parametrize("rounds", [1, 3])
def test_run_passes_a_token_around_the_ring(rounds):
    """run() passes a token around the ring of ranks, one superstep per hop."""
    rank, size = COMM.rank, COMM.size
    hops = rounds * size
    seen = []

    def compute(ctx, inbox):
        if ctx.step == 0 and rank == 0:
            ctx.send(1 % size, np.array([1]), tag=9)
        for count in inbox.concat(9, dtype=np.int64):
            seen.append(int(count))
            if count < hops:
                ctx.send((rank + 1) % size, np.array([count + 1]), tag=9)

    steps = BSP(COMM).run(compute, max_steps=hops + 5)
    # hop i delivers the token with count i to rank i % size; one more step ends
    want = [i for i in range(1, hops + 1) if i % size == rank]
    assert_collective(COMM, steps == hops + 1 and seen == want,
                      "steps %d, seen %r, want %r" % (steps, seen, want))


def test_run_keeps_going_while_some_rank_votes():
    """run() goes on while any rank votes to continue."""
    rank, size = COMM.rank, COMM.size
    calls = []

    def compute(ctx, inbox):
        calls.append(inbox.global_messages)
        if rank == size - 1 and ctx.step < 4:
            ctx.vote()          # no messages at all: only the vote keeps us running
        ctx.vote(False)         # a "no" vote never cancels a "yes"

    steps = BSP(COMM).run(compute)
    assert_collective(COMM, steps == 5 and calls == [0] * 5, "steps %d" % steps)


def test_run_max_steps_raises_on_every_rank():
    """run() past max_steps raises on every rank."""
    def compute(ctx, inbox):
        ctx.vote()

    assert_raises_collective(COMM, RuntimeError, BSP(COMM).run, compute, max_steps=3,
                             match="did not halt within 3")


def test_run_exception_in_compute_on_one_rank_is_raised_everywhere():
    """An exception in one rank's compute step is raised on every rank."""
    def compute(ctx, inbox):
        ctx.vote()
        ctx.send(COMM.rank, np.ones(1))
        if ctx.step == 2 and COMM.rank == COMM.size - 1:
            raise KeyError("vertex 42")

    assert_raises_collective(COMM, KeyError, BSP(COMM).run, compute, max_steps=10,
                             match="vertex 42")


# -- misuse ------------------------------------------------------------------------

def misuse_cases():
    size = COMM.size
    return {
        "dest-too-large": (ValueError, "rank", lambda c: c.send(size, np.ones(2))),
        "dest-negative": (ValueError, "rank", lambda c: c.send(-1, np.ones(2))),
        "list-payload": (TypeError, "numpy array", lambda c: c.send(0, [1, 2])),
        "object-dtype": (TypeError, "dtype object",
                         lambda c: c.send(0, np.array([1, "a"], dtype=object))),
        "string-dtype": (TypeError, "numeric", lambda c: c.send(0, np.array(["ab"]))),
        "negative-tag": (ValueError, "tag", lambda c: c.send(0, np.ones(1), tag=-1)),
        "huge-tag": (ValueError, "tag", lambda c: c.send(0, np.ones(1), tag=2**30)),
        "str-tag": (ValueError, "tag", lambda c: c.send(0, np.ones(1), tag="a")),
        "bool-tag": (ValueError, "tag", lambda c: c.send(0, np.ones(1), tag=True)),
        "send-rows-length": (ValueError, "one destination per row",
                             lambda c: c.send_rows([0, 0], np.ones((3, 2)))),
        "send-rows-rank": (ValueError, "outside", lambda c: c.send_rows([size], np.ones(1))),
        "bad-combiner": (ValueError, "unknown combiner",
                         lambda c: c.send_keyed(0, [1], np.ones(1), lambda k: k * 0, op="mean")),
        "float-keys": (TypeError, "integer",
                       lambda c: c.send_keyed(0, np.ones(2), np.ones(2), lambda k: k * 0)),
        "keys-values-length": (ValueError, "one value per key",
                               lambda c: c.send_keyed(0, [0, 1], np.ones(3), lambda k: k * 0)),
        "key-out-of-layout": (ValueError, "out of range",
                              lambda c: c.send_keyed(0, [10**6], np.ones(1),
                                                     Layout.block(5, COMM))),
    }


@pytest.mark.parametrize("case", sorted(misuse_cases()))
def test_misuse_on_one_rank_raises_on_every_rank_at_next_sync(case):
    """Each misuse on one rank (bad destination, tag, payload, ...) raises on every rank at the
    next sync."""
    exc_type, match, misuse = misuse_cases()[case]
    rank, size = COMM.rank, COMM.size
    ctx = BSP(COMM)
    ctx.send((rank + 1) % size, np.arange(3.0))       # valid traffic is queued too
    if rank == size - 1:
        misuse(ctx)                                    # not raised here...
    e = assert_raises_collective(COMM, exc_type, ctx.sync, match=match)
    if size > 1:
        assert_collective(COMM, "rank %d" % (size - 1) in str(e), str(e))
    # ...and the context is usable afterwards, with nothing stale delivered
    ctx.send(rank, np.array([rank]))
    inbox = ctx.sync()
    assert_collective(COMM, inbox.global_messages == size and inbox.sources() == [rank]
                      and ctx.step == 2, "stale state after a failed sync")


def test_bad_aggregator_raises_on_every_rank():
    """A bad aggregator raises on every rank."""
    ctx = BSP(COMM)
    ctx.aggregate("x", "median", 1.0)
    assert_raises_collective(COMM, ValueError, ctx.sync, match="aggregator op")
    ctx.aggregate("s", "sum", np.array(["text"]))
    assert_raises_collective(COMM, TypeError, ctx.sync, match="numeric")


def test_bsp_requires_a_communicator():
    """BSP refuses anything but an MPI communicator."""
    with pytest.raises(TypeError, match="comm"):
        BSP("COMM_WORLD")


# -- debug mode ----------------------------------------------------------------------

@pytest.mark.mpi(min_size=2)
def test_debug_mode_detects_a_different_label():
    """Debug mode catches ranks that sync with different labels."""
    rank, size = COMM.rank, COMM.size
    ctx = BSP(COMM, debug=True)
    ctx.sync("setup")                                  # all agree
    ctx.send(rank, np.ones(1))
    label = "relax" if rank != size - 1 else "restrict"
    assert_raises_collective(COMM, RuntimeError, ctx.sync, label,
                             match="disagree on the superstep sequence")


@pytest.mark.mpi(min_size=2)
def test_debug_mode_detects_a_skipped_superstep():
    """Debug mode catches a rank that skipped a superstep."""
    ctx = BSP(COMM, debug=True)
    if COMM.rank == 0:
        ctx.step += 1                                  # as if rank 0 synced once more
    assert_raises_collective(COMM, RuntimeError, ctx.sync, match="at step 1")


@pytest.mark.mpi(min_size=2)
def test_debug_mode_detects_mismatched_aggregators():
    """Debug mode catches ranks that registered different aggregators."""
    # Without debug, ranks registering different aggregators is erroneous MPI
    # (the header Alltoall sizes differ); debug mode catches it first.
    ctx = BSP(COMM, debug=True)
    ctx.aggregate("x", "sum", np.zeros(2 if COMM.rank == 0 else 3))
    assert_raises_collective(COMM, RuntimeError, ctx.sync, match="aggregators")


@pytest.mark.mpi(min_size=2)
def test_mismatched_aggregators_raise_everywhere_without_debug():
    """Without debug mode, ranks with different aggregators raise on every rank instead of
    hanging."""
    # one rank registers an extra aggregator: the fixed-width header lets every
    # rank see the mismatch and raise instead of hanging in the Alltoall
    ctx = BSP(COMM)

    def step():
        ctx.aggregate("n", "sum", 1)
        if COMM.rank == COMM.size - 1:
            ctx.aggregate("extra", "max", 2.0)
        ctx.sync("mismatch")

    assert_raises_collective(COMM, RuntimeError, step, match="aggregators")
    # the context is usable afterwards
    ctx.aggregate("n", "sum", 1)
    assert_collective(COMM, ctx.sync().aggregates["n"] == COMM.size)


def test_bad_aggregator_value_on_one_rank_raises_everywhere():
    """A bad aggregator value on one rank raises on every rank."""
    ctx = BSP(COMM)
    value = "not a number" if COMM.rank == 0 else 1.0

    def step():
        ctx.aggregate("x", "sum", value)
        ctx.sync()

    assert_raises_collective(COMM, TypeError, step)


def test_large_aggregators_use_the_fallback():
    """Aggregators too large for the fixed header block are reduced correctly through the
    fallback."""
    ctx = BSP(COMM)
    ctx.aggregate("big", "sum", np.arange(100, dtype=np.float64) * (COMM.rank + 1))
    ctx.aggregate("small", "max", COMM.rank)
    agg = ctx.sync().aggregates
    total = COMM.size * (COMM.size + 1) / 2
    assert_allclose_collective(agg["big"], np.arange(100) * total)
    assert_collective(COMM, agg["small"] == COMM.size - 1)
