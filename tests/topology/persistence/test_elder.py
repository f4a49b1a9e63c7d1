"""The elder rule (distributed_elder): on one rank the rank tree's one range
gives the deaths and survivors of the serial union-find."""

import numpy as np
import pytest
from mpi4py import MPI

from mpitest import Checks
from topology.persistence import APEX, distributed_elder

COMM = MPI.COMM_WORLD


@pytest.mark.parametrize("ntimes", [40, 250], ids=["10-entries-a-time", "2-entries-a-time"])
def test_elder_at_one_rank_is_the_rank_tree(ntimes):
    """At one rank (without ``tree``) the elder rule is a union-find; the
    rank tree's one range gives the same deaths in the same order and the
    same survivors, the apex included."""
    rng = np.random.default_rng(5)
    labels = np.concatenate(([APEX], 2 * np.sort(rng.choice(500, 60, replace=False))))
    m = 400
    lo = labels[rng.integers(0, labels.size, m)]
    hi = 2 * rng.integers(0, ntimes, m) + 1          # times: odd keys, labels even
    got = [distributed_elder(MPI.COMM_SELF, 2000, lo, hi, labels, serial=s)
           for s in (True, False)]
    with Checks(COMM) as c:
        c.add(got[0].deaths.shape[0] > 10, "deaths happen", got[0].deaths.shape)
        c.add(np.array_equal(got[0].deaths, got[1].deaths), "deaths, in order")
        c.add(np.array_equal(got[0].survivors, got[1].survivors), "survivors")
        c.add(APEX in got[0].survivors, "the apex survives")
