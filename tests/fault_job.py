"""The child MPI job of tests/test_faults.py: solves in which one rank raises
at one stage of the solve, before or after that stage communicates.

    mpiexec -n 3 python -m mpi4py tests/fault_job.py METHOD:STAGE:WHEN [...] TMPDIR
    mpiexec -n 3 python -m mpi4py tests/fault_job.py WAIT:KIND:MODE [...] TMPDIR

STAGE is matvec (the operator does the matrix's halo exchange), pc (the
preconditioner does an allreduce), callback and monitor (each computes a
norm: an allreduce), or checkpoint (the write of a checkpoint file, or of the
manifest after the ranks' files were gathered); WHEN is before or after.
Rank 1 fails (rank 0 for checkpoint:after, where only rank 0 writes).

The second form: rank 0 raises (KIND ``error``: an ``InjectedFault``;
``interrupt``: a ``KeyboardInterrupt``) before it communicates, so that the
others wait in a library wait (WAIT ``halo``: a user operator inside
``dmsolve.cg`` raises before its matrix's halo exchange, and its neighbour
waits in that exchange; ``bsp``: a BSP compute function raises before it
queues its messages, and the others wait in the superstep's sync). MODE
``caught``: every rank catches the exception, then makes an ``allreduce``,
a barrier and another run of the same kind, and prints ``RANK r AFTER ...``
with what it got; ``uncaught``: every rank re-raises it once every rank
has caught it, and ``python -m mpi4py`` aborts the job. The rank where the
exception was raised prints ``RANK 0 SAME`` if it caught that very object.

Each rank that catches the exception prints ``RANK r RAISED Type: message``.
When every rank caught it (the library agreed), the next case runs; after the
last one every rank exits with status 3. When not (the failing rank raised
alone, the others wait in a communication), the failing rank re-raises, and
``python -m mpi4py`` aborts the job. The failing rank prints ``FAULT t`` with
the wall-clock time of the fault, for the parent to time the abort from.

Each rank's standard error goes to ``TMPDIR/stderr-RANK.txt``, so that the
parent reads every traceback whole (the ranks write theirs at the same time,
and on one shared stream their pieces interleave).
"""

import os
import sys
import time

import numpy as np
from mpi4py import MPI

import dmsolve
from dmsolve import DistLinearOperator, gallery
from dmsolve.bsp import BSP
from dmsolve.checkpoint import _policy

comm = MPI.COMM_WORLD
# the job's own agreement on whether every rank caught the exception: on a
# communicator of its own, so that its barrier cannot pair up with a
# non-blocking collective of the library that a rank still waits in
verdict = comm.Dup()
FAIL_AT = 3             # the call (iteration) at which the failing rank raises


def everyone_within(seconds):
    """Whether every rank comes here within ``seconds`` (a polled Ibarrier)."""
    req = verdict.Ibarrier()
    deadline = time.monotonic() + seconds
    while not req.Test():
        if time.monotonic() > deadline:
            return False
        time.sleep(1e-3)
    return True


class InjectedFault(Exception):
    """Not a built-in type: it reaches the other ranks pickled."""


def fault(method, stage, when):
    sys.stdout.write("FAULT %.6f\n" % time.time())
    sys.stdout.flush()
    raise InjectedFault("injected in %s %s %s on rank %d" % (method, stage, when, comm.rank))


def run_case(method, stage, when, tmpdir):
    A = gallery.poisson2d(24, comm)
    b = gallery.rhs(A, "random")
    failing = 0 if (stage, when) == ("checkpoint", "after") else 1
    mine = comm.rank == failing
    calls = [0]

    def at_fault(name):
        # the FAIL_AT-th call of this stage, on the failing rank only
        if name != stage:
            return False
        calls[0] += 1
        return mine and calls[0] == FAIL_AT

    def matvec(x, out=None):
        hit = at_fault("matvec")
        if hit and when == "before":
            fault(method, stage, when)
        y = A.matvec(x, out=out)              # the halo exchange with the neighbours
        if hit:
            fault(method, stage, when)
        return y

    op = DistLinearOperator(A.row_layout, A.col_layout, matvec)
    diag = A.diagonal().local

    class ScaledJacobi:
        def apply(self, r, out=None):
            hit = at_fault("pc")
            if hit and when == "before":
                fault(method, stage, when)
            scale = comm.allreduce(1.0) / comm.size     # = 1, but every rank must come
            if hit:
                fault(method, stage, when)
            out = r.empty_like() if out is None else out
            np.divide(r.local, diag, out=out.local)
            out.local *= scale
            return out

    def communicating(name):
        def f(*args):
            hit = at_fault(name)
            if hit and when == "before":
                fault(method, stage, when)
            comm.allreduce(len(args))
            if hit:
                fault(method, stage, when)
        return f

    options = dict(rtol=1e-10, M=ScaledJacobi(), callback=communicating("callback"),
                   monitor=communicating("monitor"))
    saved = _policy.write_rank_file, _policy.write_manifest
    if stage == "checkpoint":
        def hook(real):
            def f(*args, **kwargs):
                if at_fault("checkpoint"):
                    fault(method, stage, when)
                return real(*args, **kwargs)
            return f
        if when == "before":      # before the ranks' files are gathered
            _policy.write_rank_file = hook(_policy.write_rank_file)
        else:                     # after: rank 0 writes the manifest
            _policy.write_manifest = hook(_policy.write_manifest)
        options.update(checkpoint="%s/%s-%s" % (tmpdir, method, when), checkpoint_every=1)
    try:
        dmsolve.solve(op, b, method, **options)
    except Exception as e:  # noqa: BLE001 - printed, then agreed or re-raised
        sys.stdout.write("RANK %d RAISED %s: %s\n" % (comm.rank, type(e).__name__, e))
        sys.stdout.flush()
        notes = "".join(getattr(e, "__notes__", []))
        # raised on this rank alone: the others wait in a communication
        if "did not reach the agreement" in notes or not everyone_within(2.0):
            raise
        return
    finally:
        _policy.write_rank_file, _policy.write_manifest = saved
    sys.stdout.write("RANK %d RAISED nothing in %s\n" % (comm.rank, method))
    sys.stdout.flush()


def injected(wait, kind, mode):
    """The exception rank 0 raises in a WAIT:KIND:MODE case (printing FAULT)."""
    sys.stdout.write("FAULT %.6f\n" % time.time())
    sys.stdout.flush()
    message = "injected in %s %s %s on rank %d" % (wait, kind, mode, comm.rank)
    return KeyboardInterrupt(message) if kind == "interrupt" else InjectedFault(message)


def halo_case(kind, mode):
    """cg with an operator that raises on rank 0 before its halo exchange;
    returns a check run after the fault: another solve, compared with the
    one made before it."""
    A = gallery.poisson2d(24, comm)
    b = gallery.rhs(A, "random")
    x_ref, info_ref = dmsolve.cg(A, b, rtol=1e-10)
    calls = [0]
    raised = []

    def matvec(x, out=None):
        calls[0] += 1
        if comm.rank == 0 and calls[0] == FAIL_AT:
            raised.append(injected("halo", kind, mode))
            raise raised[0]
        return A.matvec(x, out=out)     # the halo exchange with the neighbours

    def again():
        x, info = dmsolve.cg(A, b, rtol=1e-10)
        return "iterations=%d/%d same_x=%s" % (info.iterations, info_ref.iterations,
                                               np.array_equal(x.local, x_ref.local))
    op = DistLinearOperator(A.row_layout, A.col_layout, matvec)
    return lambda: dmsolve.cg(op, b, rtol=1e-10), raised, again


def bsp_case(kind, mode):
    """Supersteps around a ring whose compute function raises on rank 0, in
    the second superstep, before it queues its message."""
    raised = []

    def compute(ctx, inbox):
        if comm.rank == 0 and ctx.step == 1:
            raised.append(injected("bsp", kind, mode))
            raise raised[0]
        ctx.send((comm.rank + 1) % comm.size, np.array([comm.rank]))
        ctx.vote(ctx.step < 3)

    def again():
        ctx = BSP(comm)
        ctx.send((comm.rank + 1) % comm.size, np.array([comm.rank, ctx.step]))
        got = ctx.sync().concat()
        return "ring=%s" % (got.tolist() == [(comm.rank - 1) % comm.size, 0])
    return lambda: BSP(comm).run(compute, max_steps=10), raised, again


def run_wait_case(wait, kind, mode):
    run, raised, again = (halo_case if wait == "halo" else bsp_case)(kind, mode)
    try:
        run()
    except BaseException as e:  # noqa: BLE001 - printed, then re-raised or gone on from
        sys.stdout.write("RANK %d RAISED %s: %s\n" % (comm.rank, type(e).__name__, e))
        if raised and e is raised[0]:
            sys.stdout.write("RANK %d SAME\n" % comm.rank)
        sys.stdout.flush()
        if mode == "uncaught":
            everyone_within(5.0)        # every rank has printed before the job aborts
            raise
        # caught, as a script would: on to the next collective whatever the
        # others do (where they wait for good, so does this rank)
    else:
        sys.stdout.write("RANK %d RAISED nothing\n" % comm.rank)
    total = comm.allreduce(1)
    comm.barrier()
    sys.stdout.write("RANK %d AFTER allreduce=%d %s\n" % (comm.rank, total, again()))
    sys.stdout.flush()


def own_stderr(tmpdir):
    """Send this rank's standard error to a file of its own in ``tmpdir``."""
    os.makedirs(tmpdir, exist_ok=True)
    sys.stderr.flush()
    fd = os.open(os.path.join(tmpdir, "stderr-%d.txt" % comm.rank),
                 os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 2)
    os.close(fd)


def main():
    cases, tmpdir = sys.argv[1:-1], sys.argv[-1]
    own_stderr(tmpdir)
    for case in cases:
        first, second, third = case.split(":")
        if first in ("halo", "bsp"):
            run_wait_case(first, second, third)
        else:
            run_case(first, second, third, tmpdir)
    sys.stdout.flush()
    comm.Barrier()
    MPI.Finalize()          # then exit 3 without MPI_Abort: every rank agreed
    sys.exit(3)


if __name__ == "__main__":
    main()
