"""The sparse exchange of BSP.sync (NBX + one Allreduce) against the dense one.

Every test runs the same supersteps on a context with ``exchange="dense"`` and
one with ``exchange="sparse"`` and asserts that they deliver the same messages
(same tags, sources, order, dtypes, shapes and bytes), the same aggregates and
votes, and the exact ledger counts each exchange documents. Collective on
COMM_WORLD; runs at any number of ranks."""

import time

import numpy as np
import pytest
from mpi4py import MPI

from dmsolve import Layout
from dmsolve.bsp import BSP, Ledger
from dmsolve.bsp._superstep import SPARSE_MIN_RANKS
from mpitest import Checks, assert_collective, assert_equal_collective, assert_raises_collective

pytestmark = pytest.mark.timeout(60)
COMM = MPI.COMM_WORLD
PATHS = ("dense", "sparse")
HEADER_ROW = 8 * 24          # bytes of one row of the dense header
RECORD = 8 * 24              # bytes of the sparse Allreduce record


def message_bytes(arr: np.ndarray) -> int:
    return 8 * (4 + arr.ndim) + (arr.nbytes + 7) // 8 * 8


def delivered(inbox) -> list:
    """Everything an inbox holds, as comparable plain data, in delivery order."""
    return [(tag, src, a.dtype.str, a.shape, a.tobytes())
            for tag in inbox.tags() for src, a in inbox.messages(tag)]


def run_both(step, **kwargs):
    """Run ``step(ctx)`` (queueing) then sync, on a dense and a sparse context."""
    out = {}
    for path in PATHS:
        ctx = BSP(COMM, exchange=path, **kwargs)
        step(ctx)
        out[path] = (ctx, ctx.sync("both"))
    return out


def assert_same_delivery(out):
    d, s = (out[p][1] for p in PATHS)
    checks = Checks(COMM)
    checks.add(delivered(d) == delivered(s), "same messages on both exchanges",
               (len(delivered(d)), len(delivered(s))))
    checks.add(d.global_messages == s.global_messages and d.any_active == s.any_active,
               "same message count and votes", (d.global_messages, s.global_messages))
    checks.add(sorted(d.aggregates) == sorted(s.aggregates)
               and all(np.asarray(d.aggregates[k]).dtype == np.asarray(s.aggregates[k]).dtype
                       and np.array_equal(d.aggregates[k], s.aggregates[k])
                       for k in d.aggregates), "same aggregates",
               (d.aggregates, s.aggregates))
    checks.assert_all()


def random_plan(rank, size, density, seed):
    """(dest, tag, array) messages rank ``rank`` sends: each destination
    with probability ``density``, mixed dtypes, shapes and sizes."""
    rng = np.random.default_rng(seed + 1000 * rank)
    plan = []
    for d in range(size):
        if rng.random() >= density:
            continue
        for _ in range(rng.integers(1, 4)):
            kind = rng.integers(0, 4)
            n = int(rng.integers(0, 40))
            if kind == 0:
                a = rng.integers(-99, 99, n).astype(np.int32)
            elif kind == 1:
                a = rng.standard_normal((n, 3))
            elif kind == 2:
                a = np.asarray(rng.random() < 0.5)                 # 0-d bool
            else:
                a = (rng.standard_normal(n) + 1j).astype(np.complex64)
            plan.append((d, int(rng.integers(0, 5)), a))
    return plan


CASES = {"sparse": 0.15, "ring-ish": 0.4, "dense": 1.0, "nobody": 0.0}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("seed", [1, 2])
def test_random_patterns_deliver_the_same(case, seed):
    """Random message patterns, sparse to dense, deliver the same messages on the sparse
    exchange as on the dense one."""
    rank, size = COMM.rank, COMM.size
    plan = random_plan(rank, size, CASES[case], seed)

    def step(ctx):
        for d, tag, a in plan:
            ctx.send(d, a, tag=tag)

    out = run_both(step)
    assert_same_delivery(out)
    # and both equal the reference built from every rank's plan
    plans = COMM.allgather(plan)
    want = sorted(((tag, src, a.dtype.str, a.shape, a.tobytes())
                   for src, p in enumerate(plans) for d, tag, a in p if d == rank),
                  key=lambda m: (m[0], m[1]))        # stable: send order kept per source
    assert_collective(COMM, delivered(out["sparse"][1]) == want, "sparse delivery vs plans")
    # the ledger's payload counts are those of the BSP model on both exchanges
    sent = sum(message_bytes(a) for _, _, a in plan)
    recv = sum(message_bytes(a) for p in plans for d, _, a in p if d == rank)
    peers_out = len({d for d, _, _ in plan} - {rank})
    peers_in = sum(1 for src, p in enumerate(plans) if src != rank and any(d == rank for d, _, _ in p))
    checks = Checks(COMM)
    for path in PATHS:
        row = dict(zip(out[path][0].ledger.STEP_FIELDS, out[path][0].ledger.steps[-1][1]))
        checks.add(row["bytes_sent"] == sent and row["bytes_recv"] == recv,
                   "%s: payload bytes" % path, row)
        checks.add(row["msgs_sent"] == len(plan)
                   and row["msgs_recv"] == sum(d == rank for p in plans for d, _, _ in p),
                   "%s: message counts" % path, row)
        checks.add(row["peers_sent"] == peers_out and row["peers_recv"] == peers_in,
                   "%s: peers" % path, row)
    checks.assert_all()


def test_control_bytes_are_exact_and_the_sparse_ones_do_not_grow_with_p():
    """The control bytes each exchange moves are exactly those documented, and the sparse
    exchange's do not grow with the number of ranks."""
    rank, size = COMM.rank, COMM.size

    def step(ctx):
        ctx.send((rank + 1) % size, np.arange(4.0))
        ctx.aggregate("n", "sum", 1)

    out = run_both(step)
    dense = dict(zip(Ledger.STEP_FIELDS, out["dense"][0].ledger.steps[-1][1]))
    sparse = dict(zip(Ledger.STEP_FIELDS, out["sparse"][0].ledger.steps[-1][1]))
    checks = Checks(COMM)
    checks.add(dense["ctrl_sent"] == size * HEADER_ROW and dense["ctrl_recv"] == size * HEADER_ROW,
               "dense: one header row to and from every rank", dense)
    checks.add(sparse["ctrl_sent"] == RECORD and sparse["ctrl_recv"] == RECORD,
               "sparse: one record, whatever p", sparse)
    # large aggregators: one more collective each, of a known size
    big = np.arange(100, dtype=np.float64)

    def step_big(ctx):
        ctx.aggregate("big", "sum", big * (rank + 1))

    out = run_both(step_big)
    dense = out["dense"][0].ledger.steps[-1][1]
    sparse = out["sparse"][0].ledger.steps[-1][1]
    checks.add(dense[6] == size * HEADER_ROW + 800 and dense[7] == size * (HEADER_ROW + 800),
               "dense: header + allgather of 800 bytes", dense)
    checks.add(sparse[6] == RECORD + 64 + 800 and sparse[7] == RECORD + 64 + 800,
               "sparse: record + one record of 864 bytes", sparse)
    checks.assert_all()
    assert_same_delivery(out)
    s = out["sparse"][0].ledger.summary()
    assert_collective(COMM, s["ctrl"] == RECORD + 864, "summary ctrl %r" % s["ctrl"])


def test_empty_supersteps_and_self_messages():
    """Empty supersteps and messages a rank sends itself are delivered alike by both exchanges."""
    rank, size = COMM.rank, COMM.size
    out = run_both(lambda ctx: None)
    assert_same_delivery(out)
    assert_collective(COMM, delivered(out["sparse"][1]) == []
                      and out["sparse"][1].global_messages == 0, "empty superstep")

    def to_self(ctx):
        ctx.send(rank, np.arange(5) * rank, tag=3)
        ctx.send(rank, np.zeros((0, 2)), tag=3)                   # empty payload
        ctx.send(rank, np.array(7.5), tag=1)                      # 0-d

    out = run_both(to_self)
    assert_same_delivery(out)
    got = out["sparse"][1].from_source(rank, 3)
    assert_collective(COMM, len(got) == 2 and np.array_equal(got[0], np.arange(5) * rank)
                      and got[1].shape == (0, 2), repr(got))
    row = out["sparse"][0].ledger.steps[-1][1]
    assert_collective(COMM, row[8] == 0 and row[9] == 0 and row[2] == row[3] > 0,
                      "self messages count both ways, no peers: %r" % row)


def test_large_payloads():
    """Large payloads are delivered intact by both exchanges."""
    rank, size = COMM.rank, COMM.size
    n = 300_000           # 2.4 MB per message: beyond any eager limit

    def step(ctx):
        ctx.send((rank + 1) % size, np.arange(n, dtype=np.float64) + rank)
        ctx.send((rank + 2) % size, np.full((n // 3, 3), rank, dtype=np.int64), tag=2)

    out = run_both(step)
    assert_same_delivery(out)
    prv = (rank - 1) % size
    assert_equal_collective(out["sparse"][1].from_source(prv)[0], np.arange(n) + prv)


@pytest.mark.parametrize("op", ["sum", "min", "max", "first", "last", "prod", "any"])
def test_combiners(op):
    """Keyed messages with combiners give the same values on both exchanges."""
    rank, size = COMM.rank, COMM.size
    nkeys = 11 * size + 3
    layout = Layout.block(nkeys, COMM)
    rng = np.random.default_rng(7 + rank)
    keys = rng.integers(0, nkeys, 200 + 17 * rank)
    values = rng.integers(-9, 9, (keys.size, 2)).astype(np.float64)
    if op == "prod":
        values = np.sign(values) + (values == 0)
    if op == "any":
        values = values > 4

    def step(ctx):
        ctx.send_keyed(4, keys, values, layout, op=op)

    out = run_both(step)
    assert_same_delivery(out)
    (kd, vd), (ks, vs) = (out[p][1].reduced(4, op, value_shape=(2,), dtype=values.dtype)
                          for p in PATHS)
    assert_equal_collective(ks, kd)
    assert_equal_collective(vs, vd)


def test_aggregators_and_votes():
    """Aggregators and votes give the same values on both exchanges."""
    rank, size = COMM.rank, COMM.size

    def step(ctx):
        ctx.aggregate("i8", "sum", np.int8(100))          # accumulates in int64, as np.sum
        ctx.aggregate("u1", "max", np.uint8(rank))
        ctx.aggregate("b", "sum", True)                   # bool sums count
        ctx.aggregate("f", "min", np.array([rank, -rank], dtype=np.float32))
        ctx.aggregate("z", "sum", np.complex128(rank + 2j))
        ctx.aggregate("ld", "max", np.longdouble(rank) / 3)
        ctx.aggregate("any", "any", np.array([rank == size - 1, False]))
        ctx.aggregate("all", "all", rank >= 0)
        if rank == size - 1:
            ctx.vote()

    out = run_both(step)
    assert_same_delivery(out)
    agg = out["sparse"][1].aggregates
    checks = Checks(COMM)
    checks.add(agg["i8"] == 100 * size and agg["i8"].dtype == np.int64, "int8 sum", agg["i8"])
    checks.add(agg["b"] == size and agg["u1"] == size - 1 and agg["u1"].dtype == np.uint8,
               "bool sum, uint8 max", agg)
    checks.add(np.array_equal(agg["f"], [0, -(size - 1)]) and agg["f"].dtype == np.float32,
               "float32 min", agg["f"])
    checks.add(agg["z"] == sum(range(size)) + 2j * size, "complex sum", agg["z"])
    checks.add(agg["ld"] == np.longdouble(size - 1) / 3, "longdouble max", agg["ld"])
    checks.add(np.array_equal(agg["any"], [True, False]) and bool(agg["all"]), "any/all", agg)
    checks.add(out["sparse"][1].any_active, "one rank's vote keeps everybody going")
    checks.assert_all()


def test_vote_to_halt_runs_the_same():
    """A run ended by vote-to-halt takes the same supersteps on both exchanges."""
    rank, size = COMM.rank, COMM.size
    steps, seen = {}, {}
    for path in PATHS:
        log = []

        def compute(ctx, inbox):
            if ctx.step == 0 and rank == 0:
                ctx.send(1 % size, np.array([1]), tag=9)
            for count in inbox.concat(9, dtype=np.int64):
                log.append(int(count))
                if count < 2 * size + 1:
                    ctx.send((rank + 1) % size, np.array([count + 1]), tag=9)
            if rank == 0 and ctx.step < 3:
                ctx.vote()

        steps[path] = BSP(COMM, exchange=path).run(compute, max_steps=50)
        seen[path] = log
    assert_collective(COMM, steps["dense"] == steps["sparse"] == 2 * size + 2
                      and seen["dense"] == seen["sparse"], "%r %r" % (steps, seen))


@pytest.mark.parametrize("where", ["queue", "compute",
                                   pytest.param("aggregator", marks=pytest.mark.mpi(min_size=2))])
@pytest.mark.parametrize("routed", [False, True], ids=["direct", "routed"])
def test_error_on_one_rank_is_raised_everywhere_on_the_sparse_path(monkeypatch, where, routed):
    """An error on one rank during a sparse sync, direct or routed through two hops, is
    raised on every rank, none left waiting."""
    if routed:
        route_everything(monkeypatch)
    # every rank has payload for the failing rank queued, and the failing rank
    # for everybody: it takes part in NBX like the others, the failure is
    # agreed in the Iallreduce that ends it, and nobody waits for anybody
    rank, size = COMM.rank, COMM.size
    bad = size - 1
    ctx = BSP(COMM, exchange="sparse")

    def compute(c, inbox):
        c.vote()
        for d in range(size):
            c.send(d, np.full(50_000, rank, dtype=np.float64))
        c.aggregate("n", "sum", 1)
        if c.step == 1 and rank == bad:
            if where == "queue":
                c.send(size + 3, np.ones(1))
            elif where == "compute":
                raise KeyError("vertex 42")
            else:
                c.aggregate("extra", "max", 1.0)        # a different signature

    exc, match = {"queue": (ValueError, "rank %d" % bad if size > 1 else "rank"),
                  "compute": (KeyError, "vertex 42"),
                  "aggregator": (RuntimeError, "different aggregators")}[where]
    assert_raises_collective(COMM, exc, ctx.run, compute, max_steps=5, match=match)
    # the failed superstep's messages are dropped and the context still works
    ctx.send((rank + 1) % size, np.array([rank]))
    inbox = ctx.sync()
    assert_collective(COMM, inbox.global_messages == size and ctx.step == 3
                      and [s for s, _ in inbox.messages()] == [(rank - 1) % size],
                      "state after the failure: %r" % inbox.messages())


def test_exchange_choice_keyword_and_environment(monkeypatch):
    """The exchange is chosen by the ``exchange`` keyword or DMSOLVE_BSP_EXCHANGE, and a bad
    choice is refused."""
    size = COMM.size
    monkeypatch.delenv("DMSOLVE_BSP_EXCHANGE", raising=False)
    auto = "sparse" if size >= SPARSE_MIN_RANKS else "dense"
    checks = Checks(COMM)
    checks.add(BSP(COMM).exchange == auto and BSP(COMM, exchange="auto").exchange == auto,
               "auto chooses by p", BSP(COMM).exchange)
    monkeypatch.setenv("DMSOLVE_BSP_EXCHANGE", "sparse")
    checks.add(BSP(COMM).exchange == "sparse", "environment forces sparse")
    checks.add(BSP(COMM, exchange="dense").exchange == "dense", "keyword beats environment")
    checks.add(BSP(MPI.COMM_SELF).exchange == "sparse", "forced even on one rank")
    checks.assert_all()
    with pytest.raises(ValueError, match="exchange must be one of"):
        BSP(COMM, exchange="alltoall")
    monkeypatch.setenv("DMSOLVE_BSP_EXCHANGE", "nbx")
    with pytest.raises(ValueError, match="DMSOLVE_BSP_EXCHANGE must be one of"):
        BSP(COMM)


@pytest.mark.mpi(min_size=2)
def test_debug_mode_detects_ranks_on_different_exchanges():
    """Debug mode catches ranks that chose different exchanges."""
    path = "sparse" if COMM.rank == 0 else "dense"
    ctx = BSP(COMM, debug=True, exchange=path)
    assert_raises_collective(COMM, RuntimeError, ctx.sync, match="sparse exchange")


def test_many_supersteps_do_not_mix_messages():
    """Messages of consecutive supersteps are never delivered in the wrong one, however far
    ahead a rank runs."""
    # A rank that sees sync s complete may send its messages of s + 1 to a
    # rank still receiving in s: they must wait for s + 1 (two alternating
    # tags per private communicator, shared by every BSP context on it).
    # Two contexts take turns, every rank sends to every rank, and the
    # ranks are made uneven by sleeping.
    rank, size = COMM.rank, COMM.size
    ctxs = [BSP(COMM, exchange="sparse"), BSP(COMM, exchange="sparse")]
    checks = Checks(COMM)
    for s in range(40):
        ctx = ctxs[s % 2]
        for d in range(size):
            ctx.send(d, np.array([s, rank, d]))
        if (rank + s) % 3 == 0:
            time.sleep(0.002)
        inbox = ctx.sync()
        got = sorted(tuple(a) for _, a in inbox.messages())
        want = [(s, src, rank) for src in range(size)]
        checks.add(got == want, "superstep %d" % s, got)
    checks.assert_all()


# -- the routed exchange (two hops on a sqrt(p) grid) -------------------------------------
def route_everything(monkeypatch):
    """Route from 1 rank up, every rank with another destination."""
    monkeypatch.setattr("dmsolve.bsp._exchange.ROUTED_MIN_RANKS", 1)
    monkeypatch.setattr("dmsolve.bsp._exchange.ROUTE_PEERS", 0)


@pytest.mark.parametrize("routed", ["all", "some", "none"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_routed_supersteps_deliver_what_the_dense_exchange_does(monkeypatch, case, routed):
    """Sparse supersteps at the routing rank count, with every rank, some ranks or no rank
    routing its messages through two hops, deliver the same messages in the same order,
    with the same aggregates, votes and ledger counts, as the dense exchange."""
    monkeypatch.setattr("dmsolve.bsp._exchange.ROUTED_MIN_RANKS", 1)
    rank, size = COMM.rank, COMM.size
    if routed == "all" or (routed == "some" and rank % 2 == 0):
        monkeypatch.setattr("dmsolve.bsp._exchange.ROUTE_PEERS", 0)
    else:
        monkeypatch.setattr("dmsolve.bsp._exchange.ROUTE_PEERS", size)
    plan = random_plan(rank, size, CASES[case], 7)
    out = {}
    for path in PATHS:
        ctx = BSP(COMM, exchange=path)
        for d, tag, a in plan:
            ctx.send(d, a, tag=tag)
        ctx.aggregate("n", "sum", len(plan))
        ctx.vote(rank == size - 1)
        out[path] = (ctx, ctx.sync("routed"))
    assert_same_delivery(out)
    plans = COMM.allgather(plan)
    want = sorted(((tag, src, a.dtype.str, a.shape, a.tobytes())
                   for src, p in enumerate(plans) for d, tag, a in p if d == rank),
                  key=lambda m: (m[0], m[1]))
    assert_collective(COMM, delivered(out["sparse"][1]) == want, "routed delivery vs plans")
    rows = [dict(zip(out[p][0].ledger.STEP_FIELDS, out[p][0].ledger.steps[-1][1]))
            for p in PATHS]
    assert_collective(COMM, all(rows[0][k] == rows[1][k] for k in
                                ("bytes_sent", "bytes_recv", "msgs_sent", "msgs_recv")),
                      "ledger counts of the routed superstep: %s" % rows)


def test_routed_and_direct_supersteps_interleave_without_mixing(monkeypatch):
    """Routed and direct supersteps taking turns (contexts below and at the routing rank
    count), ranks uneven, everyone to everyone: every superstep gets exactly its own
    messages."""
    monkeypatch.setattr("dmsolve.bsp._exchange.ROUTE_PEERS", 0)
    rank, size = COMM.rank, COMM.size
    ctxs = [BSP(COMM, exchange="sparse"), BSP(COMM, exchange="sparse")]
    checks = Checks(COMM)
    for s in range(30):
        monkeypatch.setattr("dmsolve.bsp._exchange.ROUTED_MIN_RANKS", 1 if s % 3 else 10 ** 6)
        ctx = ctxs[s % 2]
        for d in range(size):
            ctx.send(d, np.array([s, rank, d]))
        if (rank + s) % 3 == 0:
            time.sleep(0.002)
        inbox = ctx.sync()
        got = sorted(tuple(a) for _, a in inbox.messages())
        checks.add(got == [(s, src, rank) for src in range(size)], "superstep %d" % s, got)
    checks.assert_all()


@pytest.mark.parametrize("size", [2, 3, 4, 10, 17, 64, 100, 1000])
def test_routed_hops_reach_every_destination_through_few_peers(size):
    """On the routed grid every message reaches its destination in at most two hops, and a
    rank talks to at most 2 ceil(sqrt p) peers per hop (serial arithmetic)."""
    from dmsolve.bsp._exchange import _hop, route_width
    w = route_width(size)
    assert w * w >= size and (w - 1) ** 2 < size
    first = [set() for _ in range(size)]       # peers of each rank in the first hop
    second = [set() for _ in range(size)]      # ... in the second
    for r in range(size):
        for d in range(size):
            if d == r:
                continue
            mid = _hop(r, d, w, size)
            assert 0 <= mid < size
            # the second hop stays inside the destination's row
            assert mid == d or mid // w == d // w
            if mid != r:
                first[r].add(mid)
            if mid != d:
                second[mid].add(d)
    assert max(len(s) for s in first) <= 2 * w
    assert max(len(s) for s in second) <= w
    if size >= 64:
        assert max(len(s) for s in first) + max(len(s) for s in second) < (size - 1) / 2
