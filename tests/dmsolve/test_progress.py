"""dmsolve.Progress: reports on request, nothing by default, bad values refused
on every rank, a failing callable raised on every rank."""

import io

import dmsolve
from mpitest import Checks, assert_raises_collective


def test_off_by_default_costs_nothing(comm):
    """Progress is off by default and reports nothing."""
    p = dmsolve.Progress(None, comm, "amg")
    assert not p
    p("level %d", 1)            # no sink: no call, no communication
    assert not dmsolve.Progress(False, comm, "amg")


def test_callable_gets_the_same_reports_on_every_rank(comm):
    """A callable gets the same reports on every rank."""
    seen = []
    p = dmsolve.Progress(lambda task, msg, s: seen.append((task, msg, s >= 0)), comm, "amg")
    p("level %d: %d rows", 1, 100)
    p("done")
    with Checks(comm) as checks:
        checks.add(seen == [("amg", "level 1: 100 rows", True), ("amg", "done", True)],
                   "reports", seen)


def test_printer_prints_on_rank0_only(comm):
    """The printer prints on rank 0 only."""
    out = io.StringIO()
    p = dmsolve.Progress(dmsolve.ProgressPrinter(comm, file=out), comm, "gemslr")
    p("level %d", 2)
    text = out.getvalue()
    with Checks(comm) as checks:
        if comm.rank == 0:
            checks.add(text.startswith("gemslr: level 2 ("), "printed", text)
        else:
            checks.add(text == "", "silent", text)


def test_bad_progress_refused(comm):
    """A bad progress value is refused on every rank."""
    assert_raises_collective(comm, TypeError, dmsolve.Progress, 3, comm, "amg",
                             match="progress must be")


def test_callable_failing_on_one_rank_raises_everywhere(comm):
    """A progress callable failing on one rank raises on every rank."""
    def sink(task, msg, s):
        if comm.rank == comm.size - 1:
            raise ValueError("sink broke")
    p = dmsolve.Progress(sink, comm, "amg")
    assert_raises_collective(comm, ValueError, p, "x", match="sink broke")
