"""Shared pytest set-up: every test is collective on COMM_WORLD and runs at
any number of ranks (the suite runs serially and under mpiexec -n 2, 3, 4)."""

import os

import pytest


def pytest_configure(config):
    # Under mpiexec every rank runs its own pytest; give each rank its own
    # temporary root so that their clean-ups of old directories cannot race.
    # (PMI_RANK is set by MPICH's launcher; no MPI call is needed here.)
    rank = os.environ.get("PMI_RANK")
    if rank is not None and config.option.basetemp is None:
        import tempfile
        config.option.basetemp = os.path.join(
            tempfile.gettempdir(), "pytest-dmsolve-%d-rank%s" % (os.getuid(), rank))


def pytest_collection_modifyitems(config, items):
    for item in items:
        item.add_marker(pytest.mark.mpi)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    # Under DMSOLVE_REQUIRE_ALL=1 (CI) a skip is a failure: optional extras
    # must be installed there, so nothing can hide behind a skip.
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("DMSOLVE_REQUIRE_ALL") == "1" and report.skipped:
        report.outcome = "failed"
        report.longrepr = "skipped under DMSOLVE_REQUIRE_ALL=1: %s" % (report.longrepr,)


@pytest.fixture
def comm():
    from mpi4py import MPI
    return MPI.COMM_WORLD


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    # A module-level pytest.importorskip skips at collection, outside the
    # runtest reports above: under DMSOLVE_REQUIRE_ALL=1 that is a failure too.
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("DMSOLVE_REQUIRE_ALL") == "1" and report.skipped:
        report.outcome = "failed"
        report.longrepr = "skipped under DMSOLVE_REQUIRE_ALL=1: %s" % (report.longrepr,)
