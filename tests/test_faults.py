"""Fault injection: one rank raises at each stage of a solve (operator,
preconditioner, callback, monitor, checkpoint write), before or after that
stage communicates. Every rank then raises the same exception type, or the
job aborts under ``python -m mpi4py``, within 10 s of the fault; nothing hangs.

Each case is a child job (tests/fault_job.py) under ``mpiexec -n 2`` and
``-n 3``. After its communication a failing rank's exception is agreed on at
the next reduction, and a failed checkpoint write in the write itself, so
every rank raises it (those cases run one after another in one job). Before
it, the failing rank's neighbours wait in the stage's own communication for
good: the failing rank gives up after ``AGREE_GRACE`` seconds and raises
alone, and ``-m mpi4py`` aborts the job.
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
METHODS = ("cg", "pipecg", "gmres", "fgmres", "bicgstab", "minres")
# a checkpoint write fails before the ranks' files are gathered (on rank 1)
# and after (rank 0, writing the manifest): agreed in the write itself
CHECKPOINT = [("cg", "checkpoint", "before", 1), ("cg", "checkpoint", "after", 0)]
# (method, stage): the failing rank waits AGREE_GRACE seconds for the others,
# which wait in the stage's communication, then raises alone
ABORTS = [("cg", "matvec"), ("cg", "pc"), ("cg", "callback"), ("cg", "monitor")]
# where the stage is followed by another user call before the next reduction
# (the preconditioner by the operator): at 3 ranks only, to keep the file short
MORE_ABORTS = [("pipecg", "pc"), ("gmres", "pc"), ("bicgstab", "callback")]


def _job(comm, tmp_path, nprocs, cases):
    out_dir = tmp_path / "ck"
    result = run_mpi_job(comm, nprocs, ["-m", "mpi4py", JOB, *cases, out_dir],
                         timeout=TIMEOUT)
    return result + (time.time(),)


def _faults(out: str) -> list[float]:
    return [float(t) for t in re.findall(r"^FAULT (\d+\.\d+)$", out, re.M)]


@pytest.mark.timeout(2 * TIMEOUT)
@pytest.mark.parametrize("nprocs", [2, 3])
def test_fault_after_communication_is_raised_on_every_rank(comm, tmp_path, nprocs):
    """A fault at each stage of every method, after it communicates, is raised on every rank as
    the same exception."""
    # four stages of every method after they communicate, and the checkpoint
    # write, one after another in one job: each raised on every rank as the
    # same (non-built-in) type, with the failing rank named
    cases = [(m, s, "after", 1) for m in METHODS for s in STAGES] + CHECKPOINT
    code, out, seconds, end = _job(comm, tmp_path, nprocs, ["%s:%s:%s" % c[:3] for c in cases])
    checks = Checks(comm)
    checks.add(code == 3, "every case agreed and the job ended", (code, out))
    faults = _faults(out)
    checks.add(len(faults) == len(cases), "one fault per case", out)
    for method, stage, when, failing in cases:
        line = ("RAISED InjectedFault: injected in %s %s %s on rank %d [raised on rank %d]"
                % (method, stage, when, failing, failing))
        for r in range(nprocs):
            checks.add("RANK %d %s\n" % (r, line) in out,
                       "rank %d raised %s-%s-%s" % (r, method, stage, when), out)
    checks.add("RuntimeError" not in out and "Traceback" not in out, "no other type", out)
    checks.add(faults and end - faults[-1] < LIMIT, "ended within %g s" % LIMIT,
               (end - faults[-1]) if faults else None)
    checks.assert_all()


@pytest.mark.timeout(2 * TIMEOUT)
@pytest.mark.parametrize("nprocs,method,stage",
                         [(n, *c) for n in (2, 3) for c in ABORTS]
                         + [(3, *c) for c in MORE_ABORTS],
                         ids=["%d-%s-%s" % (n, *c) for n in (2, 3) for c in ABORTS]
                         + ["3-%s-%s" % c for c in MORE_ABORTS])
def test_fault_before_communication_aborts_the_job(comm, tmp_path, nprocs, method, stage):
    """A fault before a stage communicates aborts the whole job within the time limit."""
    code, out, seconds, end = _job(comm, tmp_path, nprocs, ["%s:%s:before" % (method, stage)])
    failing = 1
    message = "InjectedFault: injected in %s %s before on rank %d" % (method, stage, failing)
    checks = Checks(comm)
    checks.add(code not in (None, 0, 3), "the job aborted", (code, out))
    # the failing rank's own exception, with its traceback, and nobody else's
    checks.add("RANK %d RAISED %s\n" % (failing, message) in out, "the failing rank raised", out)
    checks.add(re.search(r"^%s$" % re.escape(message), out, re.M), "its traceback", out)
    checks.add(out.count("RAISED") == 1, "the other ranks were waiting", out)
    checks.add(re.search(r"did not reach the agreement on this error within [\d.]+ s", out),
               "the note says why", out)
    faults = _faults(out)
    checks.add(len(faults) == 1 and end - faults[0] < LIMIT, "aborted within %g s" % LIMIT,
               (end - faults[0]) if faults else out)
    checks.assert_all()
