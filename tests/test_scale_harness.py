"""The counting communicator of the scaling harness (bench/_counting.py):
exact byte counts of known operations, and that dmsolve's own traffic (the
inner communicator, persistent halo requests, BSP supersteps) is seen."""

import os
import pickle
import sys

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

from mpitest import Checks

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "bench"))
from _counting import TALLY, CountingComm, CountingGraphComm, counting  # noqa: E402


@pytest.fixture
def ccomm(comm):
    c = counting(comm)
    TALLY.reset()
    yield c
    TALLY.reset()
    c.Free()


def _others(per_rank, rank):
    return int(np.sum(per_rank) - per_rank[rank])


def test_allreduce_and_iallreduce_of_k_doubles(comm, ccomm):
    """Allreduce and Iallreduce of k doubles count 8k bytes."""
    k = 7
    x = np.arange(k, dtype=np.float64) + comm.rank
    y = np.empty(k)
    ccomm.Allreduce(x, y)
    ccomm.Iallreduce(x, np.empty(k), op=MPI.MAX).Wait()
    n = 8 * k if comm.size > 1 else 0
    with Checks(comm) as ch:
        ch.add(np.array_equal(y, comm.size * np.arange(k) + sum(range(comm.size))), "sum")
        ch.add(TALLY.bytes_sent == 2 * n, "sent", TALLY.bytes_sent)
        ch.add(TALLY.bytes_recv == 2 * n, "recv", TALLY.bytes_recv)
        ch.add(TALLY.collectives == 2, "collectives", TALLY.collectives)


def test_alltoallv_with_known_counts(comm, ccomm):
    """Alltoallv counts the bytes of its known counts."""
    p, r = comm.size, comm.rank
    scount = np.array([r + 2 * j + 1 for j in range(p)])
    rcount = np.array([j + 2 * r + 1 for j in range(p)])
    sdisp = np.concatenate(([0], np.cumsum(scount)[:-1]))
    rdisp = np.concatenate(([0], np.cumsum(rcount)[:-1]))
    send = np.concatenate([np.full(c, 100 * r + j, np.int64) for j, c in enumerate(scount)])
    recv = np.empty(int(rcount.sum()), np.int64)
    ccomm.Alltoallv([send, (scount, sdisp), MPI.INT64_T], [recv, (rcount, rdisp), MPI.INT64_T])
    expect = np.concatenate([np.full(c, 100 * j + r, np.int64) for j, c in enumerate(rcount)])
    # the Alltoall of counts as dmsolve does it: one int64 per rank
    ccomm.Alltoall(scount.astype(np.int64), np.empty(p, np.int64))
    with Checks(comm) as ch:
        ch.add(np.array_equal(recv, expect), "payload")
        ch.add(TALLY.bytes_sent == 8 * _others(scount, r) + 8 * (p - 1), "sent",
               TALLY.bytes_sent)
        ch.add(TALLY.bytes_recv == 8 * _others(rcount, r) + 8 * (p - 1), "recv",
               TALLY.bytes_recv)
        ch.add(TALLY.by_call["Alltoallv"] == [1, 8 * _others(scount, r), 8 * _others(rcount, r)],
               "by call", TALLY.by_call)


def test_gathers_bcast_and_pickle_calls(comm, ccomm):
    """Gathers, bcast and pickle calls are counted."""
    p, r = comm.size, comm.rank
    counts = np.arange(1, p + 1)
    out = np.empty(int(counts.sum()))
    ccomm.Allgatherv(np.full(r + 1, float(r)), [out, counts, MPI.DOUBLE])
    a = TALLY.as_dict()
    TALLY.reset()
    buf = np.arange(5, dtype=np.float64) if r == 0 else np.empty(5)
    ccomm.Bcast(buf, root=0)
    b = TALLY.as_dict()
    TALLY.reset()
    obj = {"rank": r, "data": list(range(r + 3))}
    got = ccomm.allgather(obj)
    size = [len(pickle.dumps(o, protocol=MPI.pickle.PROTOCOL)) for o in got]
    c = TALLY.as_dict()
    with Checks(comm) as ch:
        ch.add(a["bytes_sent"] == (8 * (r + 1) if p > 1 else 0), "Allgatherv sent", a)
        ch.add(a["bytes_recv"] == 8 * _others(counts, r), "Allgatherv recv", a)
        ch.add(np.array_equal(buf, np.arange(5.0)), "Bcast payload")
        ch.add((b["bytes_sent"], b["bytes_recv"]) ==
               ((40 if r == 0 and p > 1 else 0), (40 if r != 0 else 0)), "Bcast", b)
        ch.add(c["bytes_sent"] == (size[r] if p > 1 else 0), "allgather sent", c)
        ch.add(c["bytes_recv"] == sum(size) - size[r], "allgather recv", c)
        ch.add(a["collectives"] == b["collectives"] == c["collectives"] == 1, "collectives")


def test_neighbour_alltoallv_on_a_ring(comm, ccomm):
    """Neighbour_alltoallv on a ring counts each neighbour's bytes."""
    p, r = comm.size, comm.rank
    if p == 1:
        srcs = dsts = []
    else:
        srcs = sorted({(r - 1) % p, (r + 1) % p})
        dsts = srcs
    g = ccomm.Create_dist_graph_adjacent(srcs, dsts, reorder=False)
    # r sends (r + d + 1) doubles to neighbour d
    sc = np.array([r + d + 1 for d in dsts], dtype=np.intc)
    rc = np.array([s + r + 1 for s in srcs], dtype=np.intc)
    send = np.zeros(int(sc.sum()))
    recv = np.empty(int(rc.sum()))
    TALLY.reset()
    g.Neighbor_alltoallv([send, (sc, None), MPI.DOUBLE], [recv, (rc, None), MPI.DOUBLE])
    t = TALLY.as_dict()
    g.Free()
    with Checks(comm) as ch:
        ch.add(isinstance(g, CountingGraphComm), "graph comm counted", type(g))
        ch.add(t["bytes_sent"] == 8 * int(sc.sum()), "sent", t)
        ch.add(t["bytes_recv"] == 8 * int(rc.sum()), "recv", t)


def test_distcsr_matvec_halo_bytes_match_the_halo(comm, ccomm):
    """The bytes of matvecs are 8 per ghost entry, received by the rank that
    needs it and sent by its owner: computed here from the global matrix."""
    from dmsolve import DistCSR, DistVector
    n = 61
    S = (sp.random(n, n, density=0.06, random_state=3, format="csr")
         + sp.eye(n, format="csr")).tocsr()
    A = DistCSR.from_global(S, ccomm)
    lay = A.row_layout
    ranges = ccomm.allgather((lay.start, lay.stop))   # not in the counts below
    ghosts = []
    for lo, hi in ranges:
        cols = np.unique(S[lo:hi].indices)
        ghosts.append(cols[(cols < lo) | (cols >= hi)])
    lo, hi = ranges[comm.rank]
    expect_recv = 8 * ghosts[comm.rank].size
    expect_send = 8 * sum(int(np.sum((gh >= lo) & (gh < hi))) for gh in ghosts)
    neighbours_in = np.unique(np.searchsorted([h for _, h in ranges], ghosts[comm.rank],
                                              side="right")).size
    x = DistVector(A.col_layout, np.arange(lay.start, lay.stop, dtype=np.float64))
    TALLY.reset()
    y = A.matvec(x)
    for _ in range(2):
        A.matvec(x, out=y)
    t = TALLY.as_dict()
    ref = S @ np.arange(n, dtype=np.float64)
    with Checks(comm) as ch:
        ch.add(np.allclose(y.local, ref[lo:hi]), "product")
        ch.add(t["bytes_recv"] == 3 * expect_recv, "recv", (t, expect_recv))
        ch.add(t["bytes_sent"] == 3 * expect_send, "sent", (t, expect_send))
        ch.add(t["p2p_recv"] == 3 * neighbours_in, "messages in", t)
        ch.add(t["collectives"] == 0, "no collectives in a matvec", t)


def test_dmsolve_inner_comm_and_bsp_supersteps_are_counted(comm, ccomm):
    """Calls on dmsolve's private communicator and BSP supersteps are counted."""
    from dmsolve.bsp import BSP
    from dmsolve.bsp._comm import inner_comm
    ctx = BSP(ccomm)
    ctx.send((comm.rank + 1) % comm.size, np.arange(5, dtype=np.int64))
    TALLY.reset()
    inbox = ctx.sync()
    ctx.sync()
    t = TALLY.as_dict()
    with Checks(comm) as ch:
        ch.add(isinstance(inner_comm(ccomm), CountingComm), "inner comm counted")
        ch.add(np.array_equal(inbox.concat(), np.arange(5)), "payload")
        ch.add(t["supersteps"] == 2, "supersteps", t)
        # the payload (5 int64 to another rank) is among the bytes of the first sync
        ch.add(t["bytes_sent"] >= (40 if comm.size > 1 else 0), "payload bytes", t)
        ch.add(t["collectives"] >= 2, "collectives", t)


def test_sparse_bsp_exchange_receives_are_counted(comm, ccomm):
    """The sparse BSP exchange's receives are counted."""
    # the NBX path receives by Improbe + Message.Recv: the matched probe counts
    from dmsolve.bsp import BSP
    ctx = BSP(ccomm, exchange="sparse")
    ctx.sync()                                    # inner communicators made
    TALLY.reset()
    ctx.send((comm.rank + 1) % comm.size, np.arange(5, dtype=np.int64))
    inbox = ctx.sync()
    t = TALLY.as_dict()
    probed = t["by_call"].get("Improbe", [0, 0, 0])
    with Checks(comm) as ch:
        ch.add(np.array_equal(inbox.concat(), np.arange(5)), "payload")
        if comm.size > 1:
            # one message from the left neighbour: its 40 payload bytes (plus
            # the keys of the segment) were received
            ch.add(probed[0] == 1 and probed[2] >= 40, "Improbe receive counted", probed)
            ch.add(t["bytes_recv"] >= probed[2], "in the total", t)


# -- the cost-model projection (bench/scale_project.py; serial arithmetic) -----------------
def _synthetic_runs(h0, h1, s0, s1, mem1=0.0):
    runs = {1: {"seconds": 0.5, "sent_max": 0, "recv_max": 0, "p2p_max": 0,
                "supersteps": 0, "collectives": 0, "mem_max": 0.0}}
    for p in (4, 8, 16, 32):
        runs[p] = {"seconds": 9.0, "sent_max": h0 + h1 * p, "recv_max": 1,
                   "p2p_max": 6, "supersteps": int(s0 + s1 * np.log2(p)),
                   "collectives": 3, "mem_max": 1e6 + mem1 * p}
    return runs


def test_projection_recovers_linear_and_log_growth():
    """The projection recovers linear and logarithmic growth in p."""
    import scale_project as sp_
    runs = _synthetic_runs(1000, 64, 10, 4, mem1=2048)
    t = sp_._terms(runs)
    assert t["W"] == 0.5                        # the 1-rank time, not the oversubscribed ones
    assert np.allclose(t["H"], (1000, 64)) and np.allclose(t["S"], (10, 4))
    assert np.allclose(t["M"], (6, 0)) and np.allclose(t["mem"], (1e6, 2048))
    m = {"g": 1e-9, "a": 1e-6, "c": 2e-6}
    r = sp_.project(t, 4096, m)
    assert np.isclose(r["bandwidth"], 1e-9 * (1000 + 64 * 4096))
    assert np.isclose(r["messages"], 6e-6)
    assert np.isclose(r["sync"], 2e-6 * 12 * (10 + 4 * 12))
    assert np.isclose(r["T"], 0.5 + r["bandwidth"] + r["messages"] + r["sync"])


def test_projection_keeps_flat_terms_flat_and_writes_every_case():
    """The projection keeps flat terms flat and writes every case."""
    import scale_project as sp_
    flat = _synthetic_runs(5000, 0, 20, 0)
    t = sp_._terms(flat)
    assert abs(t["H"][1]) < 1e-9 and abs(t["S"][1]) < 1e-9   # no growth where none measured
    r256, r4096 = (sp_.project(t, p, sp_.CLUSTER) for p in (256, 4096))
    assert np.isclose(r256["bandwidth"], r4096["bandwidth"])
    text = sp_.markdown({"flat": flat, "grows": _synthetic_runs(0, 1e5, 5, 5),
                         "short": {1: flat[1], 4: flat[4]}},
                        {"g": 1e-9, "l": 1e-5, "ranks": 2})
    projection = text.split("### The model against measured points")[0]
    rows = [ln for ln in projection.splitlines() if ln.startswith("| ")][1:]
    assert [ln.split(" | ")[0] for ln in rows] == ["| flat", "| grows", "| short"]
    assert "bandwidth" in rows[1] and "too few runs" in rows[2]


def test_model_check_predicts_the_held_out_rank_count():
    """The model check refits without the largest p and predicts it: exact on
    exact linear/log growth, off by the measured factor where the largest
    point departs, and the 2-rank time is W + g H + a M + c S."""
    import scale_project as sp_
    runs = _synthetic_runs(1000, 64, 10, 4, mem1=2048)
    runs[64] = {"seconds": 9.0, "sent_max": 2 * (1000 + 64 * 64), "recv_max": 1,
                "p2p_max": 6, "supersteps": 10 + 4 * 6, "collectives": 3,
                "mem_max": 1e6 + 2048 * 64}
    runs[2] = {"seconds": 0.75, "sent_max": 1000, "recv_max": 0, "p2p_max": 10,
               "supersteps": 5, "collectives": 2, "mem_max": 0.0}
    here = {"g": 1e-5, "a": 1e-3, "c": 2e-3}
    c = sp_.check(runs, here)
    assert c["top"] == 64 and c["fit"] == [4, 8, 16, 32]
    assert np.isclose(c["H"][0] / c["H"][1], 0.5)          # the point doubled its bytes
    assert np.isclose(c["S"][0], c["S"][1]) and np.isclose(c["mem"][0], c["mem"][1])
    assert np.isclose(c["T2"][0], 0.5 + 1e-5 * 1000 + 1e-3 * 10 + 2e-3 * 5)
    assert c["T2"][1] == 0.75
    assert sp_.check({p: runs[p] for p in (1, 4, 8)}, here) is None   # too few points
    text = "\n".join(sp_.check_markdown({"c": runs}, {"g": 1e-5, "l": 2e-3}))
    row = [ln for ln in text.splitlines() if ln.startswith("| c |")][0]
    assert row.split(" | ")[3:5] == ["0.50", "1.00"]
