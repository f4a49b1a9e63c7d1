"""The ``python -m dmsolve`` command line.

    mpiexec -n 4 python -m dmsolve solve --problem poisson3d --n 64 --pc amg --monitor
    mpiexec -n 2 python -m dmsolve solve --matrix A.mtx --rhs b.mtx --method gmres
    mpiexec -n 2 python -m dmsolve probe

Every rank parses the same arguments, so a bad option fails identically on
all ranks without communicating; errors from collective calls (an unreadable
file, a bad matrix) are raised on every rank by the library. Either way rank 0
prints one message and every rank exits with the same non-zero status.

An exception raised on some ranks only (a bug, a failing node, Ctrl-C
delivered to one process) would leave the other ranks waiting in a
collective forever. So on any exception a rank first checks, with a
non-blocking barrier polled for :data:`ABORT_GRACE` seconds, whether every
rank failed; if not, it prints its own traceback and calls
``MPI.COMM_WORLD.Abort``, which ends the whole job with a non-zero status.
"""

from __future__ import annotations

import argparse
import ast
import sys
import time
import traceback

import numpy as np
from mpi4py import MPI

from . import gallery, io
from ._errors import poll
from .bsp import probe
from .krylov import METHODS, KSPMonitor, solve
from .validate import check_int, check_real

__all__ = ["main", "ABORT_GRACE"]

EXIT_USAGE = 2
EXIT_FAILURE = 1

#: Seconds a failing rank waits for the others to fail too (an error the
#: library raised on every rank) before it aborts the job.
ABORT_GRACE = 5.0

#: Seconds a failing rank waits, after writing its report, before it aborts
#: the job, so that the launcher forwards the report first.
ABORT_FLUSH = 1.0


class _Exit(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


class _Parser(argparse.ArgumentParser):
    """argparse that reports instead of printing on every rank."""

    def error(self, message):
        raise _Exit(EXIT_USAGE, "%s\n%s: error: %s" % (self.format_usage().rstrip(),
                                                     self.prog, message))

    def exit(self, status=0, message=None):
        raise _Exit(status, message or "")


def _option_value(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _key_values(items, what: str) -> dict:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise _Exit(EXIT_USAGE, "%s options are KEY=VALUE, got %r" % (what, item))
        out[key.replace("-", "_")] = _option_value(value)
    return out


def _registered(registry):
    """An argparse ``type`` that accepts the names of ``registry``, spelled its way."""
    def parse(text: str) -> str:
        try:
            return registry.canonical(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    parse.__name__ = registry.kind
    return parse


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m dmsolve``. Not collective."""
    p = _Parser(prog="python -m dmsolve",
                description="Distributed sparse solves on MPI (run under mpiexec).")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    s = sub.add_parser("solve", help="solve A x = b and print a summary")
    src = s.add_mutually_exclusive_group(required=True)
    src.add_argument("--problem", type=_registered(gallery.PROBLEMS),
                     help="a gallery problem: %s" % ", ".join(gallery.PROBLEMS))
    src.add_argument("--matrix", metavar="FILE", help="a Matrix Market file")
    s.add_argument("--n", type=int, default=32, help="grid points per side (gallery)")
    s.add_argument("--problem-opt", action="append", metavar="KEY=VALUE",
                   help="gallery option, e.g. epsilon=1e-3 (repeatable)")
    s.add_argument("--rhs", metavar="FILE", help="right-hand side (Matrix Market); "
                   "default: a rank-count independent random vector")
    s.add_argument("--method", default="cg", type=_registered(METHODS),
                   help="Krylov method: %s" % ", ".join(METHODS))
    s.add_argument("--pc", default="none", help="preconditioner name (see preconditioners)")
    s.add_argument("--pc-opt", action="append", metavar="KEY=VALUE",
                   help="preconditioner option, e.g. overlap=1 (repeatable)")
    s.add_argument("--rtol", type=float, default=1e-8)
    s.add_argument("--atol", type=float, default=0.0)
    s.add_argument("--maxiter", type=int, default=None)
    s.add_argument("--restart", type=int, default=None, help="GMRES/FGMRES restart")
    s.add_argument("--checkpoint", metavar="DIR", help="write checkpoints into DIR "
                   "(with --checkpoint-every)")
    s.add_argument("--checkpoint-every", type=int, metavar="K",
                   help="iterations between checkpoints")
    s.add_argument("--resume", metavar="DIR", help="continue from the checkpoint in DIR "
                   "(any number of ranks)")
    s.add_argument("--monitor", action="store_true", help="print residual norms (rank 0)")
    s.add_argument("--plot", metavar="PNG", help="save a convergence plot (rank 0)")
    sub.add_parser("probe", help="measure the BSP parameters g and l of this machine")
    return p


def _say(comm, text: str, stream=None) -> None:
    if comm.Get_rank() == 0 and text:
        print(text, file=stream or sys.stdout, flush=True)


def _solve(comm, args) -> int:
    # every rank parsed the same arguments: the same verdict without agreeing
    try:
        check_int("--n", args.n, low=1)
        check_real("--rtol", args.rtol, low=0.0)
        check_real("--atol", args.atol, low=0.0)
    except (TypeError, ValueError) as e:
        raise _Exit(EXIT_USAGE, str(e)) from None
    popts = _key_values(args.problem_opt, "--problem-opt")
    pcopts = _key_values(args.pc_opt, "--pc-opt")

    t0 = time.perf_counter()
    if args.problem:
        A = gallery.PROBLEMS[args.problem](args.n, comm, **popts)
        label = "%s n=%d" % (args.problem, args.n)
    else:
        A = io.read_matrix(args.matrix, comm)
        label = args.matrix
    if args.rhs:
        b = io.read_vector(args.rhs, comm, layout=A.row_layout)
    else:
        b = gallery.rhs(A, "random", seed=0)
    t_build = time.perf_counter() - t0
    nnz = A.global_nnz()

    options = dict(rtol=args.rtol, atol=args.atol, maxiter=args.maxiter)
    if args.restart is not None:
        options["restart"] = args.restart
    for name in ("checkpoint", "checkpoint_every", "resume"):
        if getattr(args, name) is not None:
            options[name] = getattr(args, name)
    monitor = KSPMonitor() if args.monitor else None
    pc = args.pc if not pcopts else (args.pc, pcopts)
    x, info = solve(A, b, method=args.method, pc=pc, monitor=monitor, **options)
    r = b.copy()
    r.axpy(-1.0, A @ x)
    true_rel = r.norm() / max(b.norm(), np.finfo(float).tiny)

    lines = [
        "dmsolve solve: %s" % label,
        "  rows %d, nonzeros %d, ranks %d (build %.3f s)" % (A.shape[0], nnz, comm.Get_size(),
                                                          t_build),
        "  method %s, pc %s" % (args.method, args.pc),
        "  %s in %d iterations (%s norm)" % (info.reason.petsc_name, info.iterations,
                                            info.norm_type),
        "  setup %.3f s, solve %.3f s" % (info.setup_seconds, info.solve_seconds),
        _checkpoint_line(info.extra.get("checkpoint")),
        "  true relative residual ||b - A x|| / ||b|| = %.3e" % true_rel,
    ]
    desc = info.extra.get("pc")
    if desc:
        lines.append(_describe(desc))
    _say(comm, "\n".join(line for line in lines if line))
    if args.plot:
        _plot(comm, info, args.plot, "%s, %s + %s" % (label, args.method, args.pc))
    return 0 if info.converged else EXIT_FAILURE


def _checkpoint_line(rep) -> str:
    if not rep:
        return ""
    text = "  checkpoints: %d written (%.3f s)" % (rep["writes"], rep["write_seconds"])
    if rep["resumed_from"] is not None:
        text += ", resumed from iteration %d%s" % (
            rep["resumed_from"], " (recurrence restarted from x)" if rep["restarted"] else "")
    return text


def _describe(desc: dict) -> str:
    """A few lines about the preconditioner: set-up time, and the hierarchy
    (levels, rows, nonzeros, complexities) when it has one."""
    text = "  preconditioner %s: set-up %.3f s" % (desc.get("name"),
                                                   desc.get("setup_seconds", 0.0))
    levels = desc.get("levels")
    if isinstance(levels, list) and levels:
        text += ", %d levels, operator complexity %.3f, grid complexity %.3f" % (
            len(levels), desc.get("operator_complexity", float("nan")),
            desc.get("grid_complexity", float("nan")))
        for i, lv in enumerate(levels):
            text += "\n    level %d: %9d rows %11d nonzeros on %d ranks" % (
                i, lv.get("rows", 0), lv.get("nnz", 0), lv.get("ranks", 0))
    return text


def _plot(comm, info, path: str, title: str) -> None:
    if comm.Get_rank() != 0:
        return
    # matplotlib is an optional extra, needed only for --plot
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.semilogy(info.residual_norms, marker=".")
    ax.set_xlabel("iteration")
    ax.set_ylabel("residual norm (%s)" % info.norm_type)
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _probe(comm, args) -> int:
    params = probe(comm)
    _say(comm, "BSP parameters on %d ranks: g = %.3e s/byte (%.2f GB/s), l = %.3e s"
         % (params.ranks, params.g, 1e-9 / params.g if params.g else float("inf"), params.l))
    return 0


def main(argv=None, comm=None) -> int:
    """Run the command line; returns the exit status (the same on every rank).

    Collective on ``comm`` (default ``MPI.COMM_WORLD``).
    """
    comm = comm or MPI.COMM_WORLD
    try:
        args = build_parser().parse_args(argv)
        if args.command == "solve":
            return _solve(comm, args)
        return _probe(comm, args)
    except _Exit as e:
        _say(comm, str(e).rstrip(), sys.stderr if e.code else sys.stdout)
        return e.code
    except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001 - see _fail
        return _fail(comm, e)


def _everyone_failed(comm, grace: float) -> bool:
    """Whether every rank of ``comm`` reaches this point within ``grace``
    seconds (a non-blocking barrier, polled). Collective when it returns true."""
    return poll(comm.Ibarrier(), grace)


def _fail(comm, exc: BaseException) -> int:
    if _everyone_failed(comm, ABORT_GRACE):
        # raised on every rank (the library agrees on its errors): one report
        if isinstance(exc, (ValueError, TypeError, OSError, KeyError)):
            _say(comm, "dmsolve: error: %s" % exc, sys.stderr)
        elif comm.Get_rank() == 0:
            traceback.print_exception(type(exc), exc, exc.__traceback__)
            sys.stderr.flush()
        return EXIT_FAILURE
    # only some ranks failed; the others wait in a collective that will never
    # complete: report this rank's traceback and end the whole job. The report
    # goes out in one write, and the launcher gets a moment to forward it:
    # MPI_Abort kills the stdio forwarders, and text still in their pipes
    # was lost (seen as a report without its traceback)
    report = ("dmsolve: rank %d of %d failed but not every rank did; aborting the job\n"
              % (MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size())
              + "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    sys.stdout.flush()
    sys.stderr.write(report)
    sys.stderr.flush()
    time.sleep(ABORT_FLUSH)
    MPI.COMM_WORLD.Abort(EXIT_FAILURE)
    return EXIT_FAILURE           # pragma: no cover - Abort does not return
