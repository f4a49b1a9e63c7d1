"""Virtual processors in external memory (dmsolve.bsp.VirtualBSP, PEMS2).

One BSP program (states, messages to the next processor, keyed sums with a
combiner, aggregators and vote-to-halt) runs on a serial simulator written
here from the BSP semantics, and on VirtualBSP at v in {1, 2, 8}, with
everything in memory and under budgets that force states and messages to
disk. Every run must give the simulator's answers exactly."""

import os

import numpy as np
import pytest
from mpi4py import MPI

from dmsolve.bsp import BSP, Inbox, VirtualBSP, parse_bytes
from mpitest import Checks, assert_collective, assert_raises_collective

pytestmark = pytest.mark.timeout(120)
COMM = MPI.COMM_WORLD
N = 500                 # float64 entries of a processor's state: 4000 bytes
STEPS = 4


def initial_state(vp: int) -> dict:
    return {"x": np.arange(N, dtype=np.float64) + 1000.0 * vp,
            "acc": np.zeros(3), "t": np.zeros(1, dtype=np.int64)}


def make_program(nprocs: int):
    """``compute(vp, state, inbox, ctx)``: add what the left neighbour sent,
    keep keyed sums, send on; halt after STEPS supersteps (processor 0 one
    later, with a message in flight until then)."""
    def compute(vp, st, inbox, ctx):
        got = inbox.concat(0)
        if got.size:
            st["x"] = st["x"] + got
        keys, vals = inbox.reduced(1, "sum")
        for k, val in zip(keys, vals):
            st["acc"][k // nprocs] += val
        st["t"][0] += 1
        t = int(st["t"][0])
        ctx.aggregate("received", "sum", np.int64(got.size))
        ctx.aggregate("top", "max", float(st["x"].max()))
        if t <= STEPS:
            ctx.send((vp + 1) % nprocs, st["x"] + 1.0 if t % 2 else st["x"] * 0.5)
            keys = np.array([vp, vp + 1, 3 * nprocs - 1 - vp, vp]) % (3 * nprocs)
            ctx.send_keyed(1, keys, np.array([1.0, 2.0, 4.0, 8.0]) * t,
                           lambda k: k % nprocs, op="sum")
            ctx.vote(True)
        elif vp == 0 and t == STEPS + 1:
            ctx.vote(True)
    return compute


class Serial:
    """The BSP semantics for ``nprocs`` processors in one process."""

    def __init__(self, nprocs):
        self.nprocs = nprocs
        self.inboxes = [{} for _ in range(nprocs)]

    def run(self, compute):
        states = [initial_state(vp) for vp in range(self.nprocs)]
        steps, history = 0, []
        while True:
            self.out = [{} for _ in range(self.nprocs)]
            self.aggs, self.active, self.sent = {}, False, 0
            for vp in range(self.nprocs):
                self.vp = vp
                inbox = Inbox({t: sorted(m, key=lambda sm: sm[0])
                               for t, m in self.inboxes[vp].items()}, {}, True, 0)
                compute(vp, states[vp], inbox, self)
            self.inboxes = self.out
            steps += 1
            history.append(dict(self.aggs))
            if not self.active and self.sent == 0:
                return states, steps, history

    def send(self, dest, a, tag=0):
        self.out[dest].setdefault(tag, []).append((self.vp, a))
        self.sent += 1

    def send_keyed(self, tag, keys, vals, owner, op="sum"):
        for d in np.unique(owner(keys)):
            m = owner(keys) == d
            self.send(int(d), keys[m].astype(np.int64), tag + 2**30)
            self.send(int(d), vals[m], tag)
            self.sent -= 1                  # keys and values count as one message here

    def aggregate(self, name, op, value):
        old = self.aggs.get(name)
        f = {"sum": np.add, "max": np.maximum}[op]
        self.aggs[name] = value if old is None else f(old, value)

    def vote(self, active=True):
        self.active = self.active or active


def run_virtual(v, budget, tmp_path, exchange=None):
    ctx = BSP(COMM, virtual=v, memory_budget=budget, spill_dir=tmp_path, exchange=exchange)
    compute = make_program(ctx.nprocs)
    for vp in ctx.processors:
        ctx.set_state(vp, **initial_state(vp))
    history = []

    def turn(vp, st, inbox):
        compute(vp, st, inbox, ctx)

    with ctx:
        steps = 0
        while True:
            res = ctx.superstep(turn, "test")
            steps += 1
            history.append(res.aggregates)
            if not res.any_active and res.global_messages == 0:
                break
        states = {vp: {k: a.copy() for k, a in ctx.state(vp).items()} for vp in ctx.processors}
        ledger = [dict(zip(ctx.ledger.STEP_FIELDS, row)) for _, row in ctx.ledger.steps]
    return ctx, states, steps, history, ledger


def spill_files(tmp_path):
    return [os.path.join(d, f) for d, _, fs in os.walk(tmp_path) for f in fs]


@pytest.mark.parametrize("v,budget,exchange", [(v, b, "dense") for v in (1, 2, 8)
                                               for b in (None, "1MiB", 12000)]
                         + [(2, 12000, "sparse"), (8, None, "sparse")])
def test_virtual_processors_equal_the_serial_semantics(v, budget, exchange, tmp_path):
    """VirtualBSP at v in {1, 2, 8}, in memory and spilling to disk, gives the serial
    simulator's answers exactly, with bounded I/O per superstep."""
    ctx, states, steps, history, ledger = run_virtual(v, budget, tmp_path, exchange)
    assert_collective(COMM, ctx.exchange == exchange, ctx.exchange)
    ref_states, ref_steps, ref_history = Serial(ctx.nprocs).run(make_program(ctx.nprocs))
    with Checks(COMM) as checks:
        checks.add(steps == ref_steps == STEPS + 2, "supersteps", (steps, ref_steps))
        for vp, st in states.items():
            for name in ("x", "acc", "t"):
                checks.add(np.array_equal(st[name], ref_states[vp][name]),
                           "state %s of processor %d" % (name, vp))
        for got, want in zip(history, ref_history):
            checks.add(int(got["received"]) == int(want["received"]), "sum aggregator")
            checks.add(float(got["top"]) == float(want["top"]), "max aggregator")
        read = sum(r["io_read"] for r in ledger)
        written = sum(r["io_written"] for r in ledger)
        state_bytes = v * (N * 8 + 3 * 8 + 8)
        if budget is None or parse_bytes(budget) >= 2 * state_bytes + 10 * N * 8:
            checks.add(read == written == 0, "no I/O under the budget", (read, written))
        elif v > 1:
            checks.add(read > 0 and written > 0, "spilled beyond the budget", (read, written))
        # I/O per superstep at most 2x the contexts and messages touched;
        # after the first (which also writes the initial
        # states set_state spilled) a superstep reads each context and the
        # messages sent to it at most once, and writes each context and the
        # messages it receives at most once
        before = 0.0
        for i, r in enumerate(ledger):
            f = 2.0 if i == 0 else 1.0
            checks.add(r["io_read"] <= f * (state_bytes + before), "read",
                       (i, r["io_read"], state_bytes, before))
            checks.add(r["io_written"] <= f * (state_bytes + r["bytes_recv"]), "written",
                       (i, r["io_written"], state_bytes, r["bytes_recv"]))
            before = r["bytes_recv"]
        checks.add(len(ledger) == steps, "one ledger row per virtual superstep")
    assert_collective(COMM, spill_files(tmp_path) == [], "spill files left: %s"
                      % spill_files(tmp_path))


def test_one_processor_per_rank_is_the_plain_layer(tmp_path):
    """virtual=1 without a budget runs the program like the plain BSP layer."""
    plain = BSP(COMM, virtual=1)
    assert_collective(COMM, type(plain) is BSP, "virtual=1 gives %s" % type(plain))
    compute = make_program(COMM.size)
    plain.set_state(COMM.rank, **initial_state(COMM.rank))
    steps = plain.run_supersteps(lambda vp, st, inbox: compute(vp, st, inbox, plain), 20)
    ref_states, ref_steps, _ = Serial(COMM.size).run(compute)
    # the same program through VirtualBSP at v = 1 with a budget: the same payload
    ctx, states, vsteps, _, ledger = run_virtual(1, "1GiB", tmp_path)
    with Checks(COMM) as checks:
        checks.add(steps == vsteps == ref_steps, "supersteps", (steps, vsteps, ref_steps))
        for name in ("x", "acc", "t"):
            checks.add(np.array_equal(plain.state(COMM.rank)[name], ref_states[COMM.rank][name]),
                       "plain state " + name)
            checks.add(np.array_equal(states[COMM.rank][name], ref_states[COMM.rank][name]),
                       "virtual state " + name)
        rows = [dict(zip(plain.ledger.STEP_FIELDS, r)) for _, r in plain.ledger.steps]
        checks.add(len(rows) == steps, "one sync per superstep", len(rows))
        for a, b in zip(rows, ledger):
            for f in ("bytes_sent", "bytes_recv", "msgs_sent", "msgs_recv"):
                checks.add(a[f] == b[f], f, (a[f], b[f]))
            checks.add(b["io_read"] == b["io_written"] == 0, "no I/O")


@pytest.mark.parametrize("v", [1, 3])
def test_tags_by_name_on_virtual_processors(v, tmp_path):
    """VirtualBSP.tags: fresh named tags in the upper half of its tag range,
    the same on every rank, delivered apart from each other and from plain
    tags in a superstep that spills."""
    ctx = BSP(COMM, virtual=v, memory_budget=2000, spill_dir=tmp_path)
    t = ctx.tags("ring", "sums")
    more = ctx.tags("ring")
    limit = 2**29 // v
    values = list(t) + list(more)
    with Checks(COMM) as checks:
        checks.add(isinstance(ctx, VirtualBSP) and t._fields == ("ring", "sums"), "fields", t)
        checks.add(len(set(values)) == 3 and all(limit // 2 <= x < limit for x in values),
                   "fresh, in the upper half", values)
    assert_collective(COMM, len(set(COMM.allgather(tuple(values)))) == 1, "ranks disagree")
    n = ctx.nprocs
    got = {}

    def compute(vp, st, inbox):
        if inbox.global_messages or inbox.tags():
            keys, vals = inbox.reduced(t.sums)
            got[vp] = (inbox.concat(t.ring).tolist(), inbox.concat(7).tolist(),
                       keys.tolist(), vals.tolist())
            return
        ctx.send((vp + 1) % n, np.full(100, vp), tag=t.ring)        # 800 bytes: spills
        ctx.send(vp, np.array([-vp]), tag=7)
        ctx.send_keyed(t.sums, np.array([vp]), np.array([float(vp)]), lambda k: k)
        ctx.vote(True)

    ctx.superstep(compute)
    ctx.superstep(compute)
    ctx.close()
    with Checks(COMM) as checks:
        for vp in ctx.processors:
            ring, plain, keys, vals = got.get(vp, (None,) * 4)
            checks.add(ring == [(vp - 1) % n] * 100, "ring at %d" % vp, ring)
            checks.add(plain == [-vp], "plain tag at %d" % vp, plain)
            checks.add(keys == [vp] and vals == [float(vp)], "keyed at %d" % vp, (keys, vals))


def test_errors_are_raised_everywhere_and_remove_the_spill_files(tmp_path):
    """An error in one virtual processor is raised on every rank and removes the spill files."""
    ctx = BSP(COMM, virtual=4, memory_budget=1000, spill_dir=tmp_path)
    for vp in ctx.processors:
        ctx.set_state(vp, x=np.zeros(50))           # 400 bytes: two fit

    def failing(vp, st, inbox):
        ctx.send((vp + 3) % ctx.nprocs, np.ones(40))
        if vp == ctx.nprocs - 2 and inbox.messages():
            raise RuntimeError("turn failed")

    ctx.superstep(failing)
    assert_collective(COMM, len(spill_files(tmp_path)) > 0, "something was spilled")
    assert_raises_collective(COMM, RuntimeError, ctx.superstep, failing, match="turn failed")
    assert_collective(COMM, spill_files(tmp_path) == [], "spill files left after the error")
    assert_raises_collective(COMM, RuntimeError, ctx.superstep, failing, match="closed")

    # a budget too small for one processor's state
    small = BSP(COMM, virtual=2, memory_budget="1KiB", spill_dir=tmp_path)
    for vp in small.processors:
        small.set_state(vp, x=np.zeros(200 if vp == small.nprocs - 1 else 10))
    assert_raises_collective(COMM, ValueError, small.superstep, lambda vp, st, inbox: None,
                             match="too small for virtual processor %d" % (small.nprocs - 1))
    assert_collective(COMM, spill_files(tmp_path) == [], "spill files left")


def test_bad_arguments_are_errors_on_every_rank(tmp_path):
    """Bad arguments (budget, spill directory, v) are errors on every rank."""
    missing = str(tmp_path / "missing") if COMM.rank == COMM.size - 1 else str(tmp_path)
    cases = [
        (ValueError, dict(virtual=2, memory_budget="1MiB", spill_dir=missing), "not a directory"),
        (ValueError, dict(virtual=2, memory_budget="1000000TiB", spill_dir=tmp_path),
         "bytes free"),
        (ValueError, dict(virtual=0), "at least 1"),
        (TypeError, dict(virtual=2.5), "must be an int"),
        (ValueError, dict(virtual=2 if COMM.rank == 0 else 3) if COMM.size > 1
         else dict(virtual=-1), "same on every rank" if COMM.size > 1 else "at least 1"),
        (ValueError, dict(virtual=2, memory_budget="12 parsecs"), "cannot read"),
        (ValueError, dict(virtual=2, memory_budget=0), "at least 1 byte"),
        (TypeError, dict(virtual=2, memory_budget=[1]), "number of bytes"),
    ]
    for exc, kw, match in cases:
        assert_raises_collective(COMM, exc, BSP, COMM, match=match, **kw)
    assert_collective(COMM, spill_files(tmp_path) == [], "spill files left")
    # misuse inside a turn: raised by the superstep on every rank
    ctx = VirtualBSP(COMM, virtual=2)
    bad = [lambda vp, st, inbox: ctx.send(ctx.nprocs, np.zeros(1)),
           lambda vp, st, inbox: ctx.send(0, np.zeros(1), tag=2**28),
           lambda vp, st, inbox: ctx.send_rows(np.array([0, ctx.nprocs]), np.zeros(2)),
           lambda vp, st, inbox: ctx.aggregate("a", "median", 1.0)]
    for compute in bad:
        ctx = VirtualBSP(COMM, virtual=2)
        assert_raises_collective(COMM, ValueError, ctx.superstep, compute)
    assert_collective(COMM, parse_bytes("1.5KiB") == 1536 and parse_bytes(7) == 7, "parse")


def test_a_run_that_does_not_halt_is_an_error_and_removes_the_spill_files(tmp_path):
    """A run that does not halt within max_steps is an error on every rank and removes the
    spill files."""
    ctx = BSP(COMM, virtual=3, memory_budget=1000, spill_dir=tmp_path)
    for vp in ctx.processors:
        ctx.set_state(vp, x=np.zeros(60))               # 480 bytes: not all three fit

    def forever(vp, st, inbox):
        st["x"] += 1.0
        ctx.vote(True)
    assert_collective(COMM, len(spill_files(tmp_path)) > 0, "states spilled")
    assert_raises_collective(COMM, RuntimeError, ctx.run_supersteps, forever, 3,
                             match="did not halt within 3")
    assert_collective(COMM, spill_files(tmp_path) == [], "spill files left")
    plain = BSP(COMM)
    plain.set_state(COMM.rank, x=np.zeros(2))

    def twice(vp, st, inbox):
        plain.vote(st["x"].sum() < 2)                # active at sums 0 and 1
        st["x"] += 0.5
    steps = plain.run_supersteps(twice, 10)
    assert_collective(COMM, steps == 3, "plain run_supersteps halted after %d" % steps)
