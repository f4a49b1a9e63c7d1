"""Tests of the BSP superstep layer (dmsolve.bsp) at any number of ranks.

Every test is collective on COMM_WORLD; expected answers are computed from
inputs allgathered on every rank, so each rank checks its own share. Every
test runs on both exchanges of BSP.sync (dense and sparse, forced through
DMSOLVE_BSP_EXCHANGE, which BSP reads at construction).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from mpi4py import MPI

from dmsolve import Layout
from dmsolve.bsp import (BSP, COMBINERS, BSPParams, Ledger, NeighborExchange,
                         estimate_distinct_fraction, probe, reduce_by_key)
from mpitest import (Checks, assert_allclose_collective, assert_collective,
                     assert_equal_collective, assert_raises_collective, same_on_all_ranks)

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


def message_bytes(arr: np.ndarray) -> int:
    """Bytes one message occupies in the payload exchange (header + padded data)."""
    return 8 * (4 + arr.ndim) + (arr.nbytes + 7) // 8 * 8


# -- queues ----------------------------------------------------------------------------

def test_send_sync_delivers_per_source_and_tag():
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
    # Regression: a big-endian array arrived byte-swapped, because the receiver
    # rebuilds the dtype from its char code (native order).
    rank, size = COMM.rank, COMM.size
    ctx = BSP(COMM)
    ctx.send((rank + 1) % size, np.arange(5, dtype=">i4") + rank)
    ctx.send((rank + 1) % size, np.linspace(0, 1, 4).astype(">f8"))
    a, b = ctx.sync().from_source((rank - 1) % size)
    src = (rank - 1) % size
    assert_equal_collective(a, np.arange(5) + src)
    assert_equal_collective(b, np.linspace(0, 1, 4))


def test_several_messages_per_destination_keep_send_order():
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


# -- tags by name ------------------------------------------------------------------------

def test_tags_are_fresh_named_and_agree_across_ranks():
    ctx = BSP(COMM)
    first = ctx.tags("edges", "records")
    second = ctx.tags("edges")                  # the same name again: a new tag
    third = ctx.tags(*["c%d" % i for i in range(5)])
    values = list(first) + list(second) + list(third)
    with Checks(COMM) as checks:
        checks.add(type(first).__name__ == "Tags" and first._fields == ("edges", "records"),
                   "a namedtuple with the names as fields", first)
        checks.add(first.edges == first[0] and first.records == first[1], "fields", first)
        checks.add(len(set(values)) == len(values), "distinct", values)
        checks.add(all(isinstance(t, int) and 2**29 <= t < 2**30 for t in values),
                   "ints in the upper half of the tag range", values)
        checks.add(BSP(COMM).tags("edges") == first[:1], "each context counts alone")
        empty = ctx.tags()
        checks.add(empty == () and empty._fields == () and ctx.tags("x")[0] == third[-1] + 1,
                   "no names: an empty namedtuple, no tag used", empty)
    assert_collective(COMM, same_on_all_ranks(COMM, values), "ranks disagree: %s" % values)


def test_named_and_plain_tags_deliver_apart():
    rank, size = COMM.rank, COMM.size
    left, right = (rank - 1) % size, (rank + 1) % size
    ctx = BSP(COMM)
    t = ctx.tags("left", "right", "sums")
    ctx.send(left, np.array([rank]), tag=t.left)
    ctx.send_rows(np.array([right]), np.array([[rank, 1]]), tag=t.right)
    ctx.send_keyed(t.sums, np.array([rank, right]), np.array([1.0, 2.0]), lambda k: k % size)
    ctx.send(rank, np.array([-rank]))                                # a plain tag: 0
    inbox = ctx.sync()
    keys, vals = inbox.reduced(t.sums)
    with Checks(COMM) as checks:
        checks.add({0, t.left, t.right, t.sums} <= set(inbox.tags()), "tags", inbox.tags())
        checks.add(inbox.concat(t.left).tolist() == [right], "left", inbox.concat(t.left))
        checks.add(inbox.concat(t.right).tolist() == [[left, 1]], "right",
                   inbox.concat(t.right))
        checks.add(inbox.concat(0).tolist() == [-rank], "plain", inbox.concat(0))
        checks.add(keys.tolist() == [rank] and vals.tolist() == [3.0], "keyed", (keys, vals))


@pytest.mark.parametrize("names, exc, match", [
    (("a", 3), TypeError, "must be strings"),
    (("a", "a"), ValueError, "bad tag names"),
    (("2a",), ValueError, "bad tag names"),
    (("_a",), ValueError, "bad tag names"),
], ids=["not-a-string", "twice", "not-an-identifier", "underscore"])
def test_bad_tag_names_raise_on_every_rank(names, exc, match):
    ctx = BSP(COMM)
    assert_raises_collective(COMM, exc, ctx.tags, *names, match=match)
    assert_collective(COMM, ctx.tags("a")[0] == 2**29, "a failed call hands out nothing")


def test_tags_run_out_with_an_error():
    from dmsolve.bsp._tags import TagAllocator
    tags = TagAllocator(10, 13)
    assert_collective(COMM, tuple(tags.take(("a", "b"))) == (10, 11), "two of three")
    assert_raises_collective(COMM, RuntimeError, tags.take, ("c", "d"), match="1 tags left")
    assert_collective(COMM, tuple(tags.take(("c",))) == (12,), "the last one")


# the argument that is a tag, by method: (position, keyword)
_TAG_ARGUMENT = {"send": (2, "tag"), "send_rows": (2, "tag"), "send_keyed": (0, "tag"),
                 "concat": (0, "tag"), "concat_with_sources": (0, "tag"),
                 "messages": (0, "tag"), "from_source": (1, "tag"), "sources": (0, "tag"),
                 "reduced": (0, "tag")}


def test_dmsolve_and_preconditioners_number_no_tags_by_hand():
    """Their BSP messages take tags from ``ctx.tags`` (or the default, 0):
    no integer literal as a tag, no module constant named like a tag."""
    import ast
    import pathlib
    root = pathlib.Path(__file__).resolve().parents[1]
    hits = []
    for path in sorted(p for pkg in ("dmsolve", "preconditioners")
                       for p in (root / pkg).rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in _TAG_ARGUMENT:
                at, key = _TAG_ARGUMENT[node.func.attr]
                args = node.args[at:at + 1] + [k.value for k in node.keywords if k.arg == key]
                if any(isinstance(a, ast.Constant) and isinstance(a.value, int) for a in args):
                    hits.append("%s:%d" % (path.relative_to(root), node.lineno))
        for node in tree.body:
            if isinstance(node, ast.Assign):
                names = [n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
                if any((n.startswith("_T_") or "TAG" in n.upper()) and n != "TAG_LIMIT"
                       for n in names) and \
                        any(isinstance(c, ast.Constant) and isinstance(c.value, int)
                            for c in ast.walk(node.value)):
                    hits.append("%s:%d %s" % (path.relative_to(root), node.lineno, names))
    # the one table of raw MPI tags on the private communicator
    hits = [h for h in hits if not h.startswith(str(pathlib.Path("dmsolve/bsp/_comm.py")))]
    assert_collective(COMM, not hits, "tags numbered by hand: %s" % hits)


def test_raw_mpi_tags_of_the_private_communicator_come_from_one_table():
    """NBX's, the neighbour patterns' and the partitioners' gather's MPI tags
    on dmsolve's private duplicate communicator never overlap, and all are
    below the least MPI_TAG_UB the standard allows."""
    from dmsolve.bsp import _comm
    pattern = set(_comm.PATTERN_TAGS)
    reserved = list(_comm.NBX_TAGS) + [_comm.GATHER_TAG]
    tags = [_comm.next_tag(COMM) for _ in range(3)]
    with Checks(COMM) as checks:
        checks.add(len(set(reserved)) == len(reserved) and not pattern & set(reserved),
                   "disjoint", reserved)
        checks.add(max(pattern | set(reserved)) < 32767, "below 32767")
        checks.add(set(tags) <= pattern and len(set(tags)) == 3, "next_tag", tags)
    assert_collective(COMM, same_on_all_ranks(COMM, tags), "ranks disagree: %s" % tags)


# -- aggregators -------------------------------------------------------------------------

def test_aggregators_mixed_dtypes_in_one_sync(exchange):
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
    comm = counting_comm()
    ctx = BSP(comm)
    ctx.aggregate("n", "sum", np.arange(3) * comm.rank)
    inbox = ctx.sync()
    assert_collective(COMM, comm.calls == sync_calls(exchange, False), "calls %s" % comm.calls)
    assert_equal_collective(inbox.aggregates["n"],
                            np.arange(3) * (comm.size * (comm.size - 1) // 2))


# -- keyed messages and combiners ------------------------------------------------------

def keyed_inputs(rank, nkeys, n, width=None, seed=0):
    rng = np.random.default_rng(seed + 97 * rank)
    keys = rng.integers(0, nkeys, n)
    shape = (n,) if width is None else (n, width)
    # integer-valued floats: sums are exact in any order, so combining early
    # or late must give bit-identical results
    values = rng.integers(-50, 50, shape).astype(np.float64)
    return keys, values


def serial_reduce(all_keys, all_values, op):
    """The reference: reduce the concatenated inputs in rank order."""
    keys = np.concatenate(all_keys)
    values = np.concatenate(all_values)
    out = {}
    for k, v in zip(keys.tolist(), values):
        if k not in out or op == "last":
            out[k] = v.copy()
        elif op == "sum":
            out[k] = out[k] + v
        elif op == "min":
            out[k] = np.minimum(out[k], v)
        elif op == "max":
            out[k] = np.maximum(out[k], v)
        elif op == "prod":
            out[k] = out[k] * v
        elif op == "any":
            out[k] = np.logical_or(out[k], v)
        elif op == "all":
            out[k] = np.logical_and(out[k], v)
    return out


KEYED_CASES = [(op, width) for op in ("sum", "min", "max", "first", "last", "prod")
               for width in (None, 2)] + [("any", None), ("all", None)]


@pytest.mark.parametrize("op,width", KEYED_CASES,
                         ids=["%s-%s" % (op, "1d" if w is None else "2d") for op, w in KEYED_CASES])
def test_send_keyed_combiners_match_serial_reduce(op, width):
    rank, size = COMM.rank, COMM.size
    nkeys = 13 * size + 2
    layout = Layout.block(nkeys, COMM)
    n = 300 + 41 * rank
    keys, values = keyed_inputs(rank, nkeys, n, width)
    if op == "prod":
        values = np.sign(values) + (values == 0)        # +-1: products stay exact
    if op in ("any", "all"):
        values = values > -35
    all_keys, all_values = COMM.allgather(keys), COMM.allgather(values)
    ref = serial_reduce(all_keys, all_values, op)
    start, stop = layout.owned_range
    mine = sorted(k for k in ref if start <= k < stop)
    results = {}
    for combine in (True, False, "auto"):
        ctx = BSP(COMM)
        ctx.send_keyed(5, keys, values, layout, op=op, combine=combine)
        results[combine] = ctx.sync().reduced(5, op, value_shape=values.shape[1:],
                                              dtype=values.dtype)
    checks = Checks(COMM)
    for combine, (k, v) in results.items():
        checks.add(np.array_equal(k, mine) and v.shape == (len(mine),) + values.shape[1:],
                   "combine=%s: keys" % combine, k)
        checks.add(np.array_equal(v, np.array([ref[x] for x in mine]).reshape(v.shape)),
                   "combine=%s: values equal the serial %s" % (combine, op), v)
    checks.assert_all()


def test_send_keyed_callable_owner_and_empty_rank():
    rank, size = COMM.rank, COMM.size
    # keys owned round-robin; the last rank contributes nothing at all
    keys = np.arange(50, dtype=np.int32) % 17 if rank != size - 1 or size == 1 \
        else np.zeros(0, dtype=np.int32)
    values = np.ones(keys.size, dtype=np.int64)
    ctx = BSP(COMM)
    ctx.send_keyed(0, keys, values, lambda k: k % size, op="sum")
    k, v = ctx.sync().reduced(0, "sum", dtype=np.int64)
    contributors = max(size - 1, 1)
    want = np.arange(17)[np.arange(17) % size == rank]
    counts = np.bincount(np.arange(50) % 17, minlength=17)
    assert_equal_collective(k, want)
    assert_equal_collective(v, counts[want] * contributors)


def payload_bytes(ctx, keys, values, combine, layout):
    ctx.send_keyed(1, keys, values, layout, combine=combine)
    ctx.sync()
    return ctx.ledger.steps[-1][1][2]


def test_send_keyed_auto_follows_documented_skip_rule():
    rank, size = COMM.rank, COMM.size
    layout = Layout.block(10_000, COMM)
    rng = np.random.default_rng(rank)
    # 200 distinct keys spread over every rank's range: ~4% distinct, combine pays
    dup_keys = rng.integers(0, 200, 5000) * 50
    distinct = rng.permutation(10_000)[:3000]            # 100% distinct: skip
    vals = np.ones(5000)
    ctx = BSP(COMM)
    sent = {(name, c): payload_bytes(ctx, k, vals[:k.size], c, layout)
            for name, k in (("dup", dup_keys), ("distinct", distinct))
            for c in (True, False, "auto")}
    checks = Checks(COMM)
    checks.add(sent["dup", "auto"] == sent["dup", True], "auto combines duplicates", sent)
    checks.add(sent["distinct", "auto"] == sent["distinct", False],
               "auto skips distinct keys", sent)
    if size > 1:
        checks.add(sent["dup", True] < sent["dup", False], "combining sends less", sent)
    checks.assert_all()


def test_estimate_distinct_fraction_accuracy():
    rng = np.random.default_rng(3)
    cases = []
    for mult in (1, 2, 3, 7, 50):
        keys = np.repeat(np.arange(40_000 // mult), mult)
        cases.append(rng.permutation(keys))
    # mixed multiplicities: 5000 singletons and 100 keys seen 50 times
    cases.append(rng.permutation(np.concatenate([np.arange(5000),
                                                 np.repeat(np.arange(5000, 5100), 50)])))
    cases.append(rng.integers(0, 2**40, 20_000))          # essentially all distinct
    errors = [abs(estimate_distinct_fraction(k) - np.unique(k).size / k.size) for k in cases]
    assert max(errors) <= 0.05, errors
    # exact for arrays no longer than the sample
    for n in (1, 2, 17, 1024):
        k = rng.integers(0, max(n // 3, 1), n)
        assert estimate_distinct_fraction(k) == np.unique(k).size / n
    assert estimate_distinct_fraction(np.zeros(0, dtype=np.int64)) == 0.0


@pytest.mark.parametrize("op", sorted(COMBINERS))
def test_reduce_by_key_matches_reference(op):
    rng = np.random.default_rng(5)
    keys = rng.integers(-4, 9, 200)
    values = rng.integers(-9, 9, (200, 3)).astype(np.float64)
    if op == "prod":
        values = np.sign(values) + (values == 0)
    if op in ("any", "all"):
        values = values > 0
    k, v = reduce_by_key(keys, values, op)
    ref = serial_reduce([keys], [values], op)
    assert np.array_equal(k, sorted(ref))
    assert np.array_equal(v, np.array([ref[x] for x in sorted(ref)]))
    k0, v0 = reduce_by_key(np.zeros(0, dtype=np.int64), np.zeros((0, 3)), op)
    assert k0.shape == (0,) and v0.shape == (0, 3)


# -- vote to halt --------------------------------------------------------------------

@pytest.mark.parametrize("rounds", [1, 3])
def test_run_passes_a_token_around_the_ring(rounds):
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
    def compute(ctx, inbox):
        ctx.vote()

    assert_raises_collective(COMM, RuntimeError, BSP(COMM).run, compute, max_steps=3,
                             match="did not halt within 3")


def test_run_exception_in_compute_on_one_rank_is_raised_everywhere():
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
    ctx = BSP(COMM)
    ctx.aggregate("x", "median", 1.0)
    assert_raises_collective(COMM, ValueError, ctx.sync, match="aggregator op")
    ctx.aggregate("s", "sum", np.array(["text"]))
    assert_raises_collective(COMM, TypeError, ctx.sync, match="numeric")


def test_bsp_requires_a_communicator():
    with pytest.raises(TypeError, match="comm"):
        BSP("COMM_WORLD")


# -- debug mode ----------------------------------------------------------------------

@pytest.mark.mpi(min_size=2)
def test_debug_mode_detects_a_different_label():
    rank, size = COMM.rank, COMM.size
    ctx = BSP(COMM, debug=True)
    ctx.sync("setup")                                  # all agree
    ctx.send(rank, np.ones(1))
    label = "relax" if rank != size - 1 else "restrict"
    assert_raises_collective(COMM, RuntimeError, ctx.sync, label,
                             match="disagree on the superstep sequence")


@pytest.mark.mpi(min_size=2)
def test_debug_mode_detects_a_skipped_superstep():
    ctx = BSP(COMM, debug=True)
    if COMM.rank == 0:
        ctx.step += 1                                  # as if rank 0 synced once more
    assert_raises_collective(COMM, RuntimeError, ctx.sync, match="at step 1")


@pytest.mark.mpi(min_size=2)
def test_debug_mode_detects_mismatched_aggregators():
    # Without debug, ranks registering different aggregators is erroneous MPI
    # (the header Alltoall sizes differ); debug mode catches it first.
    ctx = BSP(COMM, debug=True)
    ctx.aggregate("x", "sum", np.zeros(2 if COMM.rank == 0 else 3))
    assert_raises_collective(COMM, RuntimeError, ctx.sync, match="aggregators")


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


# -- ledger and probe ------------------------------------------------------------------

def test_ledger_counts_supersteps_and_h_relation():
    rank, size = COMM.rank, COMM.size

    def plan(r):
        """The messages rank r sends in the middle superstep: (dest, array)."""
        msgs = [((r + 1) % size, np.zeros((r + 1) * 3, dtype=np.float64)),
                ((r + 1) % size, np.zeros((2, 3), dtype=np.int8))]
        if r == 0:
            msgs += [(d, np.zeros(100 + d, dtype=np.int16)) for d in range(size)]
        return msgs

    ctx = BSP(COMM)
    ctx.sync("first")                         # empty
    for d, a in plan(rank):
        ctx.send(d, a)
    ctx.sync("middle")
    ctx.sync()                                # empty, default label
    sent = np.zeros(size, dtype=np.int64)
    recv = np.zeros(size, dtype=np.int64)
    nrecv = np.zeros(size, dtype=np.int64)
    for r in range(size):
        for d, a in plan(r):
            sent[r] += message_bytes(a)
            recv[d] += message_bytes(a)
            nrecv[d] += 1
    h = max(sent.max(), recv.max())
    s = ctx.ledger.summary()
    checks = Checks(COMM)
    checks.add(s["supersteps"] == 3 and s["h"] == h, "3 supersteps, h = %d" % h, s)
    checks.add([row[0] for row in s["steps"]] == ["first", "middle", "step 2"], "labels", s)
    checks.add([row[3] for row in s["steps"]] == [0, h, 0], "h per step", s)
    checks.add(s["steps"][1][4] == max(len(plan(r)) for r in range(size)), "messages", s)
    row = ctx.ledger.steps[1][1]              # this rank's raw record
    checks.add(row[2] == sent[rank] and row[3] == recv[rank], "bytes sent and received", row)
    checks.add(row[4] == len(plan(rank)) and row[5] == nrecv[rank],
               "messages sent and received", row)
    checks.add(s["work"] >= 0 and s["comm_seconds"] >= 0, "times >= 0", s)
    checks.assert_all()
    table = ctx.ledger.table(params=BSPParams(g=1e-9, l=1e-5, ranks=size))
    assert_collective(COMM, "3 supersteps" in table and "middle" in table
                      and "W + g*H + l*S" in table, table)
    assert same_on_all_ranks(COMM, table.splitlines()[0])
    ctx.ledger.reset()
    assert_collective(COMM, ctx.ledger.summary()["supersteps"] == 0, "reset kept steps")


def test_probe_returns_finite_non_negative_parameters():
    params = probe(COMM, sizes=(0, 1 << 10, 1 << 14), repeats=3)
    checks = Checks(COMM)
    checks.add(math.isfinite(params.g) and math.isfinite(params.l), "finite g and l", params)
    checks.add(params.g >= 0 and params.l >= 0, "g, l >= 0", params)
    checks.add(params.ranks == COMM.size, "ranks", params)
    checks.assert_all()
    assert same_on_all_ranks(COMM, (params.g, params.l))
    assert_allclose_collective(params.predict(1.0, 1000, 10),
                               1.0 + 1000 * params.g + 10 * params.l)


@pytest.mark.mpi(min_size=2)
def test_mismatched_aggregators_raise_everywhere_without_debug():
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
    ctx = BSP(COMM)
    value = "not a number" if COMM.rank == 0 else 1.0

    def step():
        ctx.aggregate("x", "sum", value)
        ctx.sync()

    assert_raises_collective(COMM, TypeError, step)


def test_large_aggregators_use_the_fallback():
    ctx = BSP(COMM)
    ctx.aggregate("big", "sum", np.arange(100, dtype=np.float64) * (COMM.rank + 1))
    ctx.aggregate("small", "max", COMM.rank)
    agg = ctx.sync().aggregates
    total = COMM.size * (COMM.size + 1) / 2
    assert_allclose_collective(agg["big"], np.arange(100) * total)
    assert_collective(COMM, agg["small"] == COMM.size - 1)


def test_from_ghosts_rejects_bad_ghost_lists_everywhere():
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
    layout = Layout.block(20, COMM)
    others = [i for i in range(20) if not layout.is_local(i)]
    unsorted = np.array(others[:2][::-1]) if COMM.rank == 0 else np.zeros(0, dtype=np.int64)
    assert_raises_collective(COMM, ValueError, NeighborExchange.from_ghosts, layout,
                             unsorted, match="sorted")
