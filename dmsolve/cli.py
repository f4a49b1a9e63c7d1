"""The ``python -m dmsolve`` command line.

    mpiexec -n 4 python -m dmsolve solve --problem poisson3d --n 64 --pc amg --monitor
    mpiexec -n 2 python -m dmsolve solve --matrix A.mtx --rhs b.mtx --method gmres
    mpiexec -n 2 python -m dmsolve probe

Every rank parses the same arguments, so a bad option fails identically on
all ranks without communicating; errors from collective calls (an unreadable
file, a bad matrix) are raised on every rank by the library. Either way rank 0
prints one message and every rank exits with the same non-zero status.

Before anything is built, ``solve`` checks what can be known from the command
line: each output path (``--plot`` on rank 0, ``--checkpoint`` on every rank)
can be written, and a gallery problem fits in memory (its rows and nonzeros
from :func:`dmsolve.gallery.problem_size`, against the memory available on
each node for the ranks on that node). The exit status is 0 when the solve
converged; 2 when the command cannot run as given (a bad or conflicting
option, an unwritable output path, a problem too large for the memory),
found before any work; 1 otherwise (the solve did not converge, or an error
from the library: an unreadable file, a bad matrix or preconditioner).

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
import hashlib
import inspect
import os
import sys
import tempfile
import textwrap
import time
import traceback

import numpy as np
from mpi4py import MPI

from . import gallery, io
from ._errors import agree, poll
from ._registry import PRECONDITIONERS
from ._version import __version__
from .bsp import probe
from .krylov import METHODS, KSPMonitor, solve
from .validate import check_int, check_real

__all__ = ["main", "build_parser", "available_memory", "ABORT_GRACE"]

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
    """argparse that reports instead of printing on every rank: what argparse
    would print (``--help``) is kept and handed to rank 0 with the exit."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)
        self._printed = ""

    def _print_message(self, message, file=None):
        if message:
            self._printed += message

    def format_help(self):
        # help texts given as callables are computed now, when help is shown:
        # the preconditioner names need the preconditioners package imported
        for action in self._actions:
            if callable(action.help):
                action.help = action.help()
        return super().format_help()

    def error(self, message):
        raise _Exit(EXIT_USAGE, "%s\n%s: error: %s" % (self.format_usage().rstrip(),
                                                     self.prog, message))

    def exit(self, status=0, message=None):
        raise _Exit(status, self._printed + (message or ""))


class _Formatter(argparse.HelpFormatter):
    """Help texts keep their line breaks (the per-problem option list)."""

    def _expand_help(self, action):
        # argparse versions that check help strings when an argument is added
        # (3.14) expand them then: a callable is computed there instead
        if callable(action.help):
            return action.help()
        return super()._expand_help(action)

    def _split_lines(self, text, width):
        lines = []
        for para in text.splitlines():
            indent = " " * (len(para) - len(para.lstrip()))
            lines += textwrap.wrap(para, width, subsequent_indent=indent + "  " * bool(indent),
                                   break_on_hyphens=False) or [""]
        return lines


class _Version(argparse.Action):
    """``--version``: dmsolve's version, printed by rank 0 only."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                 help="print dmsolve's version and exit"):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        raise _Exit(0, "dmsolve %s" % __version__)


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


def _problem_options_help() -> str:
    """Each gallery problem's options with their defaults, from the signatures."""
    lines = ["gallery option (repeatable), e.g. --problem-opt epsilon=1e-3; by problem:"]
    for name in gallery.PROBLEMS:
        opts = gallery.problem_options(name)
        lines.append("  %s: %s" % (name, ", ".join("%s=%r" % kv for kv in opts.items())
                                   if opts else "(none)"))
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m dmsolve``. Not collective."""
    p = _Parser(prog="python -m dmsolve",
                description="Distributed sparse solves on MPI (run under mpiexec).")
    p.add_argument("--version", action=_Version)
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    s = sub.add_parser("solve", help="solve A x = b and print a summary")
    src = s.add_mutually_exclusive_group(required=True)
    src.add_argument("--problem", type=_registered(gallery.PROBLEMS),
                     help=lambda: "a gallery problem: %s" % ", ".join(gallery.PROBLEMS))
    src.add_argument("--matrix", metavar="FILE", help="a Matrix Market file")
    s.add_argument("--n", type=int, default=32,
                   help="grid points per side (gallery; the order for random-spd)")
    s.add_argument("--problem-opt", action="append", metavar="KEY=VALUE",
                   help=_problem_options_help)
    s.add_argument("--rhs", metavar="FILE", help="right-hand side (Matrix Market); "
                   "default: a rank-count independent random vector")
    s.add_argument("--method", default="cg", type=_registered(METHODS),
                   help=lambda: "Krylov method: %s (default cg)" % ", ".join(METHODS))
    s.add_argument("--pc", default="none",
                   help=lambda: "preconditioner: %s (default none)"
                   % ", ".join(PRECONDITIONERS.names()))
    s.add_argument("--pc-opt", action="append", metavar="KEY=VALUE",
                   help="preconditioner option, e.g. overlap=1 (repeatable)")
    s.add_argument("--rtol", type=float, default=1e-8,
                   help="relative tolerance: stop when ||r|| <= max(rtol*||b||, atol) "
                   "(default 1e-8)")
    s.add_argument("--atol", type=float, default=0.0, help="absolute tolerance (default 0)")
    s.add_argument("--maxiter", type=int, default=None,
                   help="iteration limit (default: the method's, 10 N)")
    s.add_argument("--restart", type=int, default=None, help="GMRES/FGMRES restart")
    s.add_argument("--checkpoint", metavar="DIR", help="write checkpoints into DIR "
                   "(with --checkpoint-every)")
    s.add_argument("--checkpoint-every", type=int, metavar="K",
                   help="iterations between checkpoints")
    s.add_argument("--resume", metavar="DIR", help="continue from the checkpoint in DIR "
                   "(any number of ranks)")
    s.add_argument("--monitor", action="store_true", help="print residual norms (rank 0)")
    s.add_argument("--monitor-every", type=int, metavar="K",
                   help="print every K-th residual norm and the last (rank 0)")
    s.add_argument("--progress", action="store_true",
                   help=lambda: "report the preconditioner's set-up stages on rank 0 "
                   "(preconditioners that report: %s)" % (", ".join(_progress_reporters())
                                                          or "none"))
    s.add_argument("--plot", metavar="PNG", help="save a convergence plot (rank 0)")
    s.add_argument("--reproducible", action="store_true",
                   help="the same bits at any number of ranks (exact reductions, canonical "
                   "products; pc none, jacobi, cheby or amg); prints the sha256 of x")
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
        for name in ("--checkpoint-every", "--monitor-every"):
            value = getattr(args, name[2:].replace("-", "_"))
            if value is not None:
                check_int(name, value, low=1)
    except (TypeError, ValueError) as e:
        raise _Exit(EXIT_USAGE, str(e)) from None
    popts = _key_values(args.problem_opt, "--problem-opt")
    pcopts = _key_values(args.pc_opt, "--pc-opt")
    _check_combinations(args, pcopts)
    # what needs no matrix is checked before anything is built
    _preflight(comm, args, popts)

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
    if args.reproducible:
        options["reproducible"] = True
    for name in ("checkpoint", "checkpoint_every", "resume"):
        if getattr(args, name) is not None:
            options[name] = getattr(args, name)
    if args.monitor_every is not None:
        monitor = _EveryKMonitor(args.monitor_every)
    else:
        monitor = KSPMonitor() if args.monitor else None
    if args.progress:
        pcopts["progress"] = True
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
        _digest_line(x) if args.reproducible else "",
    ]
    desc = info.extra.get("pc")
    if desc:
        lines.append(_describe(desc))
    _say(comm, "\n".join(line for line in lines if line))
    if args.plot:
        _plot(comm, info, args.plot, "%s, %s + %s" % (label, args.method, args.pc))
    return 0 if info.converged else EXIT_FAILURE


def _digest_line(x) -> str:
    """The sha256 of the gathered ``x`` (rank 0 holds it for the moment):
    what a reproducible solve keeps at any rank count. Collective."""
    g = x.gather(root=0)
    if g is None:
        return ""
    return "  reproducible: sha256(x) = %s" % hashlib.sha256(g.tobytes()).hexdigest()


class _EveryKMonitor(KSPMonitor):
    """PETSc's residual lines for every K-th iteration and the last one.

    (The Krylov methods' own ``monitor=k`` can replace it once they take one.)
    """

    def __init__(self, every: int):
        super().__init__()
        self.every = every
        self._held = None

    def __call__(self, iteration: int, rnorm: float) -> None:
        if iteration % self.every == 0:
            super().__call__(iteration, rnorm)
            self._held = None
        else:
            self._held = (iteration, rnorm)   # printed by finish if it is the last

    def finish(self, info) -> None:
        if self._held is not None:
            super().__call__(*self._held)
            self._held = None
        super().finish(info)


def _usage(message: str):
    """Refuse the command line as given (exit status 2), on every rank alike."""
    raise _Exit(EXIT_USAGE, "dmsolve: error: %s" % message)


def _check_combinations(args, pcopts) -> None:
    """Options that cannot go together; rank-independent, no communication."""
    usage = _usage
    if args.checkpoint is not None and args.checkpoint_every is None:
        usage("--checkpoint DIR needs --checkpoint-every K")
    if args.checkpoint_every is not None and args.checkpoint is None:
        usage("--checkpoint-every K needs --checkpoint DIR")
    if args.monitor and args.monitor_every is not None:
        usage("give --monitor (every iteration) or --monitor-every K, not both")
    params = inspect.signature(METHODS[args.method]).parameters
    if args.restart is not None and "restart" not in params:
        usage("--restart applies to %s, not to %s" % (
            ", ".join(m for m, f in METHODS.items()
                      if "restart" in inspect.signature(f).parameters), args.method))
    if (args.checkpoint is not None or args.resume is not None) and "checkpoint" not in params:
        usage("method %s does not support checkpoints" % args.method)
    if not args.progress:
        return
    if "progress" in pcopts:
        usage("give --progress or --pc-opt progress=..., not both")
    # an unknown name is left to the solve, which reports it as the library does
    if args.pc in PRECONDITIONERS:
        name = PRECONDITIONERS.canonical(args.pc)
        if name not in _progress_reporters():
            usage("--progress: preconditioner %s reports no set-up progress; those that "
                  "do: %s" % (name, ", ".join(_progress_reporters()) or "none"))


def _progress_reporters() -> list[str]:
    """The preconditioners whose factory takes ``progress=``, by signature."""
    out = []
    for name, factory in PRECONDITIONERS.items():
        try:
            params = inspect.signature(factory).parameters
        except (TypeError, ValueError):     # pragma: no cover - a builtin factory
            continue
        if "progress" in params:
            out.append(name)
    return out


# -- checks before the solve: output paths and memory -----------------------------

def _preflight(comm, args, popts) -> None:
    """Refuse, on every rank and before anything is built, a command that
    cannot finish: an output path that cannot be written, or a gallery problem
    larger than the memory. Collective on ``comm``."""
    if args.pc not in PRECONDITIONERS:
        PRECONDITIONERS.canonical(args.pc)   # the library's error, before the build
    problem = None
    if args.problem:
        try:
            size = gallery.problem_size(args.problem, args.n, **popts)
        except TypeError as e:                     # the same on every rank
            _usage("--problem-opt: %s" % e)
        except ValueError as e:
            _usage("--problem %s: %s" % (args.problem, e))
        if size is not None:
            problem = _memory_problem(comm, args, size)
    if problem is None and args.checkpoint is not None:
        # every rank writes its own file into the directory
        problem = _directory_problem("--checkpoint", args.checkpoint)
    if problem is None and args.plot is not None and comm.Get_rank() == 0:
        problem = _plot_problem(args.plot)       # only rank 0 writes the plot
    found = [p for p in comm.allgather(problem) if p is not None]
    if found:
        _usage(found[0])


def _probe_write(directory: str) -> str | None:
    """Why a new file cannot be created in ``directory`` (None if it can).
    Tried for real: permission bits say nothing for root or on network file
    systems."""
    try:
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as e:
        return "cannot create files in %r: %s" % (directory, e.strerror or e)
    return None


def _nearest_existing(path: str) -> str:
    """``path`` or its nearest ancestor that exists."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def _directory_problem(option: str, path: str) -> str | None:
    """Why ``path`` cannot be (created as) a writable directory, or None."""
    if os.path.exists(path):
        if not os.path.isdir(path):
            return "%s %r is a file, not a directory" % (option, path)
        why = _probe_write(path)
    else:
        base = _nearest_existing(path)
        if not os.path.isdir(base):
            return "%s %r cannot be created: %r is a file, not a directory" % (
                option, path, base)
        why = _probe_write(base)
    return None if why is None else "%s %r: %s" % (option, path, why)


def _plot_problem(path: str) -> str | None:
    """Why the convergence plot cannot be saved as ``path``, or None."""
    if os.path.isdir(path):
        return "--plot %r is a directory; give a file name such as %r" % (
            path, os.path.join(path, "convergence.png"))
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        what = "is a file" if os.path.exists(parent) else "does not exist"
        return "--plot %r: the directory %r %s" % (path, parent, what)
    why = _probe_write(parent)
    if why is not None:
        return "--plot %r: %s" % (path, why)
    if os.path.exists(path):
        try:
            with open(path, "ab"):      # neither truncates nor writes
                pass
        except OSError as e:
            return "--plot %r cannot be overwritten: %s" % (path, e.strerror or e)
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
    except ImportError:
        return "--plot needs matplotlib: pip install 'dmsolve[plot]'"
    ext = os.path.splitext(path)[1][1:].lower()
    formats = FigureCanvasAgg.get_supported_filetypes()
    if ext and ext not in formats:
        return "--plot %r: matplotlib cannot write .%s files; use one of %s" % (
            path, ext, ", ".join("." + f for f in sorted(formats)))
    return None


def _work_vectors(method: str, restart: int | None) -> int:
    """Vectors a solve holds besides the matrix (GMRES-type methods: their
    Krylov basis); a lower bound: a preconditioner adds its own."""
    params = inspect.signature(METHODS[method]).parameters
    if "restart" not in params:
        return 10
    m = restart if restart is not None else params["restart"].default
    m = m if isinstance(m, int) and m > 0 else 30
    return (2 if method == "fgmres" else 1) * (m + 1) + 8


def _memory_problem(comm, args, size) -> str | None:
    """Why ``size`` does not fit in this node's available memory, or None.
    Collective on ``comm`` (the node's ranks are counted with ``Split_type``)."""
    ranks = comm.Get_size()
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        node_ranks = node.Get_size()
    finally:
        node.Free()
    per_rank = size.build_bytes(ranks) + 8 * size.local_rows(ranks) * _work_vectors(
        args.method, args.restart)
    available = available_memory()
    if available is None or per_rank * node_ranks <= available:
        return None
    return ("--n %d: %s has %s rows and %s%s nonzeros; building it and solving with %s "
            "needs about %s per rank before any preconditioner, %s for the %d rank%s on "
            "this node, which has %s available. Use a smaller --n or more nodes."
            % (args.n, args.problem, _count(size.rows), "" if size.exact else "up to ",
               _count(size.nnz),
               args.method, _bytes(per_rank), _bytes(per_rank * node_ranks), node_ranks,
               "s" if node_ranks > 1 else "", _bytes(available)))


def _count(n: int) -> str:
    """An integer, to 3 digits once it is too long to read."""
    return "%d" % n if n < 10 ** 7 else "%.3g" % n


def _bytes(n: float) -> str:
    """``n`` bytes in binary units, 3 digits."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024:
            return "%.3g %s" % (n, unit)
        n /= 1024.0
    return "%.3g PiB" % n


def available_memory() -> int | None:
    """Bytes of memory available to new allocations on this node, or None if
    unknown. Not collective.

    ``MemAvailable`` of ``/proc/meminfo`` (else ``os.sysconf``'s available
    pages), lowered to the room left under a cgroup v2 memory limit (a
    container's or a batch job's) when there is one.
    """
    avail = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    if avail is None:
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, OSError, ValueError):
            pass
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        if limit != "max":
            with open("/sys/fs/cgroup/memory.current") as f:
                room = max(int(limit) - int(f.read().strip()), 0)
            avail = room if avail is None else min(avail, room)
    except (OSError, ValueError):
        pass
    return avail


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
    """Save the convergence plot on rank 0; an error there (a disk that filled
    up since the check before the solve) is raised on every rank."""
    exc = None
    if comm.Get_rank() == 0:
        try:
            _save_plot(info, path, title)
        except Exception as e:  # noqa: BLE001 - agreed below, then raised everywhere
            exc = e
    agree(comm, exc)


def _save_plot(info, path: str, title: str) -> None:
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
