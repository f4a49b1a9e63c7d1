"""Fault injection: one rank raises at each stage of a solve (operator,
preconditioner, callback, monitor, checkpoint write), before or after that
stage communicates. Every rank then raises the same exception type, or the
job aborts under ``python -m mpi4py``, within 10 s of the fault; nothing hangs.

Each case is a child job (tests/fault_job.py) under ``mpiexec -n 2`` and
``-n 3``. After its communication a failing rank's exception is agreed on at
the next reduction, so every rank raises it (the cases run one after another
in one job). Before it, the failing rank's neighbours wait in the stage's
own communication for good: the failing rank gives up after
``AGREE_GRACE`` seconds and raises alone (a checkpoint write raises at once),
and ``-m mpi4py`` aborts the job.
"""

import re
import time

import pytest

from mpitest import ROOT, Checks, run_mpi_job

# the child ends well before this when the library works; it hangs when not
TIMEOUT = 40
LIMIT = 10.0            # seconds from the fault to the end of the job
JOB = ROOT / "tests" / "fault_job.py"
STAGES = ("matvec", "pc", "callback", "monitor")
# (stage, how the failing rank ends): "grace" - it waits AGREE_GRACE seconds
# for the others, then raises alone; "at once" - the exception leaves the
# checkpoint write uncaught while the others wait in its collectives
ABORTS = [("matvec", "grace"), ("pc", "grace"), ("callback", "grace"),
          ("monitor", "grace"), ("checkpoint", "at once")]


def _job(comm, tmp_path, nprocs, cases, method="cg"):
    out_dir = tmp_path / "ck"
    result = run_mpi_job(comm, nprocs, ["-m", "mpi4py", JOB, method, *cases, out_dir],
                         timeout=TIMEOUT)
    return result + (time.time(),)


def _faults(out: str) -> list[float]:
    return [float(t) for t in re.findall(r"^FAULT (\d+\.\d+)$", out, re.M)]


@pytest.mark.timeout(2 * TIMEOUT)
@pytest.mark.parametrize("nprocs", [2, 3])
def test_fault_after_communication_is_raised_on_every_rank(comm, tmp_path, nprocs):
    # all four stages, one after another in one job: each raised on every
    # rank as the same (non-built-in) type, with the failing rank named
    code, out, seconds, end = _job(comm, tmp_path, nprocs, ["%s:after" % s for s in STAGES])
    checks = Checks(comm)
    checks.add(code == 3, "every case agreed and the job ended", (code, out))
    faults = _faults(out)
    checks.add(len(faults) == len(STAGES), "one fault per case", out)
    for stage in STAGES:
        line = "RAISED InjectedFault: injected in %s after on rank 1 [raised on rank 1]" % stage
        for r in range(nprocs):
            checks.add("RANK %d %s" % (r, line) in out, "rank %d raised %s" % (r, stage), out)
    checks.add("RuntimeError" not in out and "Traceback" not in out, "no other type", out)
    checks.add(faults and end - faults[-1] < LIMIT, "ended within %g s" % LIMIT,
               (end - faults[-1]) if faults else None)
    checks.assert_all()


@pytest.mark.timeout(2 * TIMEOUT)
@pytest.mark.parametrize("nprocs", [2, 3])
@pytest.mark.parametrize("stage,how", ABORTS, ids=[s for s, _ in ABORTS])
def test_fault_before_communication_aborts_the_job(comm, tmp_path, nprocs, stage, how):
    code, out, seconds, end = _job(comm, tmp_path, nprocs, ["%s:before" % stage])
    _check_abort(comm, code, out, end, stage, "before", 1, how)


@pytest.mark.timeout(2 * TIMEOUT)
@pytest.mark.parametrize("nprocs", [2, 3])
def test_fault_in_manifest_write_aborts_the_job(comm, tmp_path, nprocs):
    # after the ranks' files were gathered, rank 0 fails writing the manifest
    # while the others wait for its verdict
    code, out, seconds, end = _job(comm, tmp_path, nprocs, ["checkpoint:after"])
    _check_abort(comm, code, out, end, "checkpoint", "after", 0, "at once")


def _check_abort(comm, code, out, end, stage, when, failing, how):
    message = "InjectedFault: injected in %s %s on rank %d" % (stage, when, failing)
    checks = Checks(comm)
    checks.add(code not in (None, 0, 3), "the job aborted", (code, out))
    # the failing rank's own exception, with its traceback, and nobody else's
    checks.add("RANK %d RAISED %s\n" % (failing, message) in out, "the failing rank raised", out)
    checks.add(re.search(r"^%s$" % re.escape(message), out, re.M), "its traceback", out)
    checks.add(out.count("RAISED") == 1, "the other ranks were waiting", out)
    note = re.search(r"did not reach the agreement on this error within [\d.]+ s", out)
    checks.add(bool(note) == (how == "grace"), "the note says why", out)
    faults = _faults(out)
    checks.add(len(faults) == 1 and end - faults[0] < LIMIT, "aborted within %g s" % LIMIT,
               (end - faults[0]) if faults else out)
    checks.assert_all()
