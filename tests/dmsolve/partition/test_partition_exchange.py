"""Data movement for partitioning (``exchange``, ``fetch``) against a serial
reference."""

import numpy as np
from mpi4py import MPI

from dmsolve import Layout, partition as part
from mpitest import assert_equal_collective

COMM = MPI.COMM_WORLD


def test_exchange_and_fetch_against_serial():
    """exchange and fetch move array elements to and from the given ranks as a serial reference
    does."""
    layout = Layout.block(13, COMM)
    rng = np.random.default_rng(7 + COMM.rank)
    # every rank sends 5 rows (value, and a 2-column payload) to random ranks
    dests = rng.integers(0, COMM.size, 5)
    vals = 100 * COMM.rank + np.arange(5)
    pay = np.column_stack((vals, -vals)).astype(np.float64)
    got_vals, got_pay = part.exchange(COMM, dests, vals, pay)
    all_dests = np.concatenate(COMM.allgather(dests))
    all_vals = np.concatenate(COMM.allgather(vals))
    want = all_vals[all_dests == COMM.rank]           # source order, then send order
    assert_equal_collective(got_vals, want)
    assert_equal_collective(got_pay, np.column_stack((want, -want)).astype(np.float64))
    # fetch: values[indices] of a distributed array, repeats and any order
    values = 10.0 * np.arange(layout.start, layout.stop)
    idx = rng.integers(0, 13, 9)
    assert_equal_collective(part.fetch(layout, values, idx), 10.0 * idx)
    assert_equal_collective(part.fetch(layout, values, np.zeros(0, np.int64)), np.zeros(0))
