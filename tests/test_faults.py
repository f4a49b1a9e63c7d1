"""Fault injection: one rank raises at each stage of a solve (operator,
preconditioner, callback, monitor, checkpoint write), before or after that
stage communicates, or in a BSP compute function. Every rank then raises the
same exception type, or the job aborts under ``python -m mpi4py``, within
10 s of the fault; nothing hangs.

Each case is a child job (tests/fault_job.py) under ``mpiexec -n 2`` and
``-n 3``. After its communication a failing rank's exception is agreed on at
the next reduction, and a failed checkpoint write in the write itself, so
every rank raises it (those cases run one after another in one job). So it
is before a communication the library waits in (the operator's halo
exchange, a BSP superstep's sync): the failing rank announces its failure
on the communicator's error channel, the waiting ranks leave the wait, and
the communicator serves the next collective and solve, with the same
answer; a ``KeyboardInterrupt`` is re-raised unchanged on its rank and a
``CollectiveError`` elsewhere. Before a communication of the user's own (an
``allreduce`` in the preconditioner or callback), the failing rank's peers
wait in it for good: the failing rank gives up after ``AGREE_GRACE`` seconds
and raises alone, and ``-m mpi4py`` aborts the job.
"""

import re
import time

import pytest

from mpitest import ROOT, Checks, on_rank0, run_mpi_job

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
# which wait in the stage's own (the user's) communication, then raises alone
ABORTS = [("cg", "pc"), ("cg", "callback"), ("cg", "monitor")]
# (wait, kind): rank 0 raises before the library wait its peers are in:
# the operator's halo exchange in cg, or a BSP superstep's sync (an
# Exception in compute was agreed before the error channel, at the sync)
WAITS = [("halo", "error"), ("halo", "interrupt"), ("bsp", "interrupt")]
WAIT_CASES = [(n, *c) for n in (2, 3) for c in WAITS]
WAIT_IDS = ["%d-%s-%s" % c for c in WAIT_CASES]
# where the stage is followed by another user call before the next reduction
# (the preconditioner by the operator): at 3 ranks only, to keep the file short
MORE_ABORTS = [("pipecg", "pc"), ("gmres", "pc"), ("bicgstab", "callback")]


def _job(comm, tmp_path, nprocs, cases):
    """Run the child job; its output is mpiexec's, then each rank's standard
    error whole (fault_job.py writes it to a file per rank)."""
    out_dir = tmp_path / "ck"
    code, out, seconds = run_mpi_job(comm, nprocs, ["-m", "mpi4py", JOB, *cases, out_dir],
                                     timeout=TIMEOUT)
    end = time.time()
    return code, out + on_rank0(comm, _stderr_files, out_dir, nprocs), seconds, end


def _stderr_files(out_dir, nprocs: int) -> str:
    parts = []
    for r in range(nprocs):
        path = out_dir / ("stderr-%d.txt" % r)
        text = path.read_text(errors="replace") if path.exists() else "(none)\n"
        parts.append("\n--- standard error of rank %d ---\n%s" % (r, text))
    return "".join(parts)


def _faults(out: str) -> list[float]:
    return [float(t) for t in re.findall(r"^FAULT (\d+\.\d+)$", out, re.M)]


def _traceback_line(out: str, line: str) -> bool:
    """Whether a traceback in ``out`` ends with ``line`` (the exception, not
    wrapped): ``line`` at the end of an output line, not the job's own
    ``RANK r RAISED`` report, nor a copy wrapped by another rank (that one
    ends with ``[raised on rank N]``). Each rank's standard error is read
    whole from its own file, so the line is not interleaved with another's."""
    pattern = r"^%s$" % re.escape(line)
    return re.search(pattern, out, re.M) is not None


@pytest.mark.timeout(2 * TIMEOUT)
@pytest.mark.parametrize("nprocs", [2, 3])
def test_fault_after_communication_is_raised_on_every_rank(comm, tmp_path, nprocs):
    """A fault at each stage of every method, after it communicates, is raised on every rank as
    the same exception."""
    # four stages of every method after they communicate, the operator
    # before its halo exchange, and the checkpoint write, one after another
    # in one job: each raised on every rank as the same (non-built-in) type,
    # with the failing rank named
    cases = ([(m, s, "after", 1) for m in METHODS for s in STAGES]
             + [(m, "matvec", "before", 1) for m in METHODS] + CHECKPOINT)
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
    checks.add(_traceback_line(out, message), "its traceback", out)
    checks.add(out.count("RAISED") == 1, "the other ranks were waiting", out)
    checks.add(re.search(r"did not reach the agreement on this error within [\d.]+ s", out),
               "the note says why", out)
    faults = _faults(out)
    checks.add(len(faults) == 1 and end - faults[0] < LIMIT, "aborted within %g s" % LIMIT,
               (end - faults[0]) if faults else out)
    checks.assert_all()


def _raised(wait, kind, mode, rank):
    """The line rank ``rank`` prints for the exception it caught."""
    message = "injected in %s %s %s on rank 0" % (wait, kind, mode)
    if kind == "error":
        return "InjectedFault: %s [raised on rank 0]" % message
    if rank == 0:
        return "KeyboardInterrupt: %s" % message         # unchanged
    return "CollectiveError: KeyboardInterrupt: %s [raised on rank 0]" % message


def _every_rank_raised(checks, out, nprocs, wait, kind, mode):
    for r in range(nprocs):
        line = "RANK %d RAISED %s\n" % (r, _raised(wait, kind, mode, r))
        checks.add(line in out, "rank %d raised %s" % (r, line.strip()), out)
    checks.add(out.count("RAISED") == nprocs, "each rank raised once", out)
    if kind == "interrupt":
        checks.add("RANK 0 SAME\n" in out, "rank 0 re-raised its own exception", out)
    checks.add("did not reach the agreement" not in out, "no rank raised alone", out)


@pytest.mark.timeout(2 * TIMEOUT)
@pytest.mark.parametrize("nprocs,wait,kind", WAIT_CASES, ids=WAIT_IDS)
def test_fault_before_a_library_wait_is_raised_on_every_rank(comm, tmp_path, nprocs, wait,
                                                              kind):
    """Rank 0 raises before the communication its peers wait in (a halo exchange inside cg, a
    BSP sync): every rank raises it, and after catching it makes an allreduce, a barrier and
    another run, which gives the same answer as before the fault."""
    code, out, seconds, end = _job(comm, tmp_path, nprocs, ["%s:%s:caught" % (wait, kind)])
    checks = Checks(comm)
    checks.add(code == 3, "every rank caught it and went on", (code, out))
    _every_rank_raised(checks, out, nprocs, wait, kind, "caught")
    for r in range(nprocs):
        if wait == "halo":
            # the stale halo messages of the abandoned exchange are not
            # taken for the next solve's: same iterations, same x
            after = re.search(r"^RANK %d AFTER allreduce=%d iterations=(\d+)/\1 same_x=True$"
                              % (r, nprocs), out, re.M)
        else:
            after = "RANK %d AFTER allreduce=%d ring=True\n" % (r, nprocs) in out
        checks.add(after, "rank %d: the collective and the next run" % r, out)
    faults = _faults(out)
    checks.add(len(faults) == 1 and end - faults[0] < LIMIT, "ended within %g s" % LIMIT,
               (end - faults[0]) if faults else out)
    checks.assert_all()


@pytest.mark.timeout(2 * TIMEOUT)
@pytest.mark.parametrize("nprocs,wait,kind", WAIT_CASES, ids=WAIT_IDS)
def test_uncaught_fault_before_a_library_wait_ends_the_job(comm, tmp_path, nprocs, wait, kind):
    """Rank 0 raises before the communication its peers wait in; uncaught under
    ``python -m mpi4py``, every rank raises it and the job ends promptly."""
    code, out, seconds, end = _job(comm, tmp_path, nprocs, ["%s:%s:uncaught" % (wait, kind)])
    checks = Checks(comm)
    checks.add(code not in (None, 0, 3), "the job aborted", (code, out))
    _every_rank_raised(checks, out, nprocs, wait, kind, "uncaught")
    # the failing rank's own traceback ends with its exception
    own = "injected in %s %s uncaught on rank 0" % (wait, kind)
    own = ("KeyboardInterrupt: " if kind == "interrupt" else "InjectedFault: ") + own
    checks.add(_traceback_line(out, own), "its traceback", out)
    faults = _faults(out)
    checks.add(len(faults) == 1 and end - faults[0] < LIMIT, "aborted within %g s" % LIMIT,
               (end - faults[0]) if faults else out)
    checks.assert_all()
