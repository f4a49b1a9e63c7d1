"""Shared pytest set-up: every test is collective on COMM_WORLD and runs at
any number of ranks (the suite runs serially and under mpiexec -n 2, 3, 4),
except those marked ``pytest.mark.mpi(min_size=N)``, which run from N ranks up.

Fixtures: ``comm`` (COMM_WORLD), ``shared_tmp_path`` (one directory for all
ranks) and ``bad_input_env`` (the operands of the bad-input cases, see
bad_inputs.py). Collective helpers for the tests themselves are in mpitest.py."""

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from mpi4py import MPI

from bad_inputs import make_env
from mpitest import wait_idle


def pytest_configure(config):
    # Under mpiexec every rank runs its own pytest; give each rank its own
    # temporary root so that their clean-ups of old directories cannot race.
    # (PMI_RANK is set by MPICH's launcher; no MPI call is needed here.) The
    # checkout's path is in the name, so suites run at once from two
    # checkouts of the project cannot delete each other's directories.
    rank = os.environ.get("PMI_RANK")
    if rank is not None and config.option.basetemp is None:
        checkout = hashlib.sha1(str(config.rootpath).encode()).hexdigest()[:8]
        config.option.basetemp = os.path.join(
            tempfile.gettempdir(), "pytest-dmsolve-%d-%s-rank%s" % (os.getuid(), checkout, rank))


def pytest_collection_modifyitems(config, items):
    for item in items:
        item.add_marker(pytest.mark.mpi)


def _too_few_ranks(item) -> bool:
    """Whether ``item`` is marked ``mpi(min_size=N)`` with N above this run's size."""
    return any(mark.kwargs.get("min_size", 1) > MPI.COMM_WORLD.size
               for mark in item.iter_markers(name="mpi"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    # Under DMSOLVE_REQUIRE_ALL=1 (CI) a skip is a failure: optional extras
    # must be installed there, so nothing can hide behind a skip. The one
    # expected skip is pytest-mpi's for a test marked mpi(min_size=N) in a run
    # with fewer ranks: it runs in the run with N ranks (make test runs 1-4).
    # A strict xfail is no skip: it ran, failed as its reason says, and turns
    # into a failure the day it passes.
    outcome = yield
    report = outcome.get_result()
    if (os.environ.get("DMSOLVE_REQUIRE_ALL") == "1" and report.skipped
            and not hasattr(report, "wasxfail") and not _too_few_ranks(item)):
        report.outcome = "failed"
        report.longrepr = "skipped under DMSOLVE_REQUIRE_ALL=1: %s" % (report.longrepr,)


@pytest.fixture
def comm():
    return MPI.COMM_WORLD


@pytest.fixture
def shared_tmp_path(comm):
    """One temporary directory for every rank of ``comm``.

    Rank 0 makes it and broadcasts its name; after the test, once every rank
    is done with it, rank 0 removes it. Collective on ``comm``.
    """
    path = tempfile.mkdtemp(prefix="dmsolve-test-") if comm.rank == 0 else None
    path = Path(comm.bcast(path, root=0))
    yield path
    wait_idle(comm)
    if comm.rank == 0:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def bad_input_env(tmp_path_factory):
    """Small operands and files the bad-input cases of one test file share
    (paths from rank 0). Collective on COMM_WORLD."""
    return make_env(tmp_path_factory)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    # A module-level pytest.importorskip skips at collection, outside the
    # runtest reports above: under DMSOLVE_REQUIRE_ALL=1 that is a failure too.
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("DMSOLVE_REQUIRE_ALL") == "1" and report.skipped:
        report.outcome = "failed"
        report.longrepr = "skipped under DMSOLVE_REQUIRE_ALL=1: %s" % (report.longrepr,)
