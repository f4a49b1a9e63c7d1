"""Keyed messages and their combiners (``send_keyed``, ``reduce_by_key``,
``estimate_distinct_fraction``) against a serial reduction of the
concatenated inputs in rank order.

Every test runs on both exchanges of BSP.sync (dense and sparse, forced
through DMSOLVE_BSP_EXCHANGE, which BSP reads at construction)."""

import numpy as np
import pytest
from mpi4py import MPI

from dmsolve import Layout
from dmsolve.bsp import BSP, COMBINERS, estimate_distinct_fraction, reduce_by_key
from mpitest import Checks, assert_equal_collective

pytestmark = pytest.mark.timeout(60)
COMM = MPI.COMM_WORLD


@pytest.fixture(autouse=True, params=["dense", "sparse"])
def exchange(request, monkeypatch):
    """The exchange every BSP built in the test uses."""
    monkeypatch.setenv("DMSOLVE_BSP_EXCHANGE", request.param)
    return request.param


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
    """Keyed messages combined by every built-in combiner (sum, min, max, first, last, prod,
    ...) at each width give the serial reduction of the concatenated inputs in rank order."""
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
    """send_keyed with an owner given as a callable, and with a rank that sends nothing,
    delivers each key's combined value to its owner."""
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
    """send_keyed's automatic choice combines locally before sending exactly when the
    documented rule says so, as the payload bytes show."""
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
    """estimate_distinct_fraction is close to the true fraction of distinct keys, and exact for
    arrays no longer than its sample."""
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
    """reduce_by_key gives the serial reduction of equal keys for every combiner."""
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
