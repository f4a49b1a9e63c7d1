"""The cost ledger of the BSP layer: supersteps and the h-relation each one
moves, counted exactly.

Every test runs on both exchanges of BSP.sync (dense and sparse, forced
through DMSOLVE_BSP_EXCHANGE, which BSP reads at construction)."""

import numpy as np
import pytest
from mpi4py import MPI

from dmsolve.bsp import BSP, BSPParams
from mpitest import Checks, assert_collective, same_on_all_ranks

pytestmark = pytest.mark.timeout(60)
COMM = MPI.COMM_WORLD


@pytest.fixture(autouse=True, params=["dense", "sparse"])
def exchange(request, monkeypatch):
    """The exchange every BSP built in the test uses."""
    monkeypatch.setenv("DMSOLVE_BSP_EXCHANGE", request.param)
    return request.param


def message_bytes(arr: np.ndarray) -> int:
    """Bytes one message occupies in the payload exchange (header + padded data)."""
    return 8 * (4 + arr.ndim) + (arr.nbytes + 7) // 8 * 8


# -- ledger and probe ------------------------------------------------------------------

def test_ledger_counts_supersteps_and_h_relation():
    """The ledger counts each superstep and its h-relation (the most bytes a rank sends or
    receives) exactly."""
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
