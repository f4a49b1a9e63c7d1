"""The probe of the BSP machine parameters g and l: finite, non-negative and
the same on every rank.

Every test runs on both exchanges of BSP.sync (dense and sparse, forced
through DMSOLVE_BSP_EXCHANGE, which BSP reads at construction)."""

import math

import pytest
from mpi4py import MPI

from dmsolve.bsp import probe
from mpitest import Checks, assert_allclose_collective, same_on_all_ranks

pytestmark = pytest.mark.timeout(60)
COMM = MPI.COMM_WORLD


@pytest.fixture(autouse=True, params=["dense", "sparse"])
def exchange(request, monkeypatch):
    """The exchange every BSP built in the test uses."""
    monkeypatch.setenv("DMSOLVE_BSP_EXCHANGE", request.param)
    return request.param


def test_probe_returns_finite_non_negative_parameters():
    """probe() returns finite, non-negative g and l, the same on every rank."""
    params = probe(COMM, sizes=(0, 1 << 10, 1 << 14), repeats=3)
    checks = Checks(COMM)
    checks.add(math.isfinite(params.g) and math.isfinite(params.l), "finite g and l", params)
    checks.add(params.g >= 0 and params.l >= 0, "g, l >= 0", params)
    checks.add(params.ranks == COMM.size, "ranks", params)
    checks.assert_all()
    assert same_on_all_ranks(COMM, (params.g, params.l))
    assert_allclose_collective(params.predict(1.0, 1000, 10),
                               1.0 + 1000 * params.g + 10 * params.l)
