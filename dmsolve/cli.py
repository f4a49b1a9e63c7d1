"""The ``python -m dmsolve`` command line.

    mpiexec -n 4 python -m dmsolve solve --problem poisson3d --n 64 --pc amg --monitor
    mpiexec -n 2 python -m dmsolve solve --matrix A.mtx --rhs b.mtx --method gmres
    mpiexec -n 2 python -m dmsolve solve --matrix elastic.mtx --pc amg \
        --coordinates coords.npy --check --output x.npy
    mpiexec -n 2 python -m dmsolve probe

Every rank parses the same arguments, so a bad option fails identically on
all ranks without communicating; errors from collective calls (an unreadable
file, a bad matrix) are raised on every rank by the library. Either way rank 0
prints one message and every rank exits with the same non-zero status.

Before anything is built, ``solve`` checks what can be known from the command
line: the names of problems, methods and preconditioners (with the nearest
one when a name is misspelt), the ``--pc-opt`` keys against the
preconditioner's signature, the options that cannot go together, that each
output path (``--plot`` and ``--output`` on rank 0, ``--checkpoint`` on every
rank) can be written, and that a gallery problem fits in memory (its rows
and nonzeros from :func:`dmsolve.gallery.problem_size`, against the memory
available on each node for the ranks on that node). Once the matrix is read,
the options that must fit it are checked: ``--block-size`` and
``--coordinates`` (AMG's near null space, :mod:`dmsolve.gallery`'s
``block_constants`` and ``rigid_body_modes``), ``--check`` (the symmetry that
CG, pipelined CG and MINRES need, measured as ``check=True`` does), and a
preconditioner that says it is not symmetric for those methods. The
preconditioner is built here, not inside :func:`dmsolve.solve`, so that such
a refusal names the flags to change.

The exit status is 0 when the solve converged; 2 when the command cannot run
as given (a bad or conflicting option, an unwritable output path, a problem
too large for the memory, an option that does not fit the matrix); 1
otherwise (the solve did not converge, or an error from the library: an
unreadable file, a bad matrix or a preconditioner option value it refuses).
A solve of CG, pipelined CG or MINRES that does not converge on a
nonsymmetric matrix (or with a nonsymmetric preconditioner) adds a hint
saying so.

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
import difflib
import hashlib
import inspect
import os
import sys
import textwrap
import time
import traceback

import numpy as np
from mpi4py import MPI

from . import gallery, io
from ._cli_files import read_coordinates, write_solution
from ._cli_preflight import (available_memory, directory_problem, memory_problem,
                             output_problem, plot_problem)
from ._compile import Stopwatch
from ._errors import agree, poll
from ._registry import PRECONDITIONERS
from ._version import __version__
from .bsp import probe
from .checkpoint import Checkpointer, describe_pc
from .krylov import METHODS, KSPMonitor, solve
from .krylov._symmetry import SYMMETRY_RTOL, asymmetry
from .reproducible import REPRODUCIBLE_PCS
from .threads import set_num_threads
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


def _did_you_mean(word: str, choices) -> str:
    """`` (did you mean 'x'?)`` for the choice closest to ``word``, if one is close."""
    close = difflib.get_close_matches(word.lower().replace("_", "-"), list(choices), n=1)
    return " (did you mean %r?)" % close[0] if close else ""


def _registered(registry):
    """An argparse ``type`` that accepts the names of ``registry``, spelled its way."""
    def parse(text: str) -> str:
        if text in registry:
            return registry.canonical(text)
        names = registry.names()
        raise argparse.ArgumentTypeError("unknown %s %r%s; available: %s" % (
            registry.kind, text, _did_you_mean(text, names), ", ".join(names)))
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
    s.add_argument("--pc", default="none", type=_registered(PRECONDITIONERS),
                   help=lambda: "preconditioner: %s (default none)"
                   % ", ".join(PRECONDITIONERS.names()))
    s.add_argument("--pc-opt", action="append", metavar="KEY=VALUE",
                   help="preconditioner option, e.g. overlap=1 (repeatable); a key the "
                   "preconditioner does not take is refused with the list of those it does")
    s.add_argument("--block-size", type=int, metavar="K",
                   help="unknowns per node, stored node by node (interlaced): AMG's near "
                   "null space is then the constants of each of the K components")
    s.add_argument("--coordinates", metavar="FILE",
                   help="the nodes' coordinates (.npy, .txt or .mtx; one row per node, d = "
                   "1, 2 or 3 columns) of a displacement problem with d unknowns per node, "
                   "interlaced: AMG's near null space is then the rigid-body modes (3 in "
                   "2-D, 6 in 3-D)")
    s.add_argument("--check", action="store_true",
                   help=lambda: "before solving, test that the matrix and the "
                   "preconditioner are symmetric (Hermitian), as %s need, and refuse if not"
                   % ", ".join(_symmetric_methods()))
    s.add_argument("--output", metavar="FILE",
                   help="write the solution x to FILE: .mtx (Matrix Market) or .npy (numpy's "
                   "format), each rank writing its own entries")
    s.add_argument("--threads", type=int, metavar="K",
                   help="threads per rank (default: DMSOLVE_NUM_THREADS, else 1)")
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
    pcopts, popts = _check_command(args)
    # what needs no matrix is checked before anything is built
    _preflight(comm, args, popts)
    if args.threads is not None:
        set_num_threads(args.threads)

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
    B, nullspace, block = _near_nullspace(comm, args, A)
    t_build = time.perf_counter() - t0
    nnz = A.global_nnz()
    if args.check:
        _refuse_asymmetric(args, "matrix", asymmetry(A.matvec, A.row_layout, A.dtype))

    if args.progress:
        pcopts["progress"] = True
    M, pc_seconds, pc_compile = _build_pc(args, A, pcopts, B, block)
    _check_pc_symmetry(args, pcopts, M)

    options = dict(rtol=args.rtol, atol=args.atol, maxiter=args.maxiter)
    if args.restart is not None:
        options["restart"] = args.restart
    if args.reproducible:
        options["reproducible"] = True
    if args.checkpoint is not None or args.resume is not None:
        # the record names the preconditioner by its command-line options,
        # so that a resume with other options is told apart
        record = dict(pcopts, **({"B": nullspace} if nullspace else {}))
        options["checkpoint"] = Checkpointer(args.checkpoint, every=args.checkpoint_every,
                                             resume=args.resume,
                                             pc=describe_pc((args.pc, record)))
    if args.monitor_every is not None:
        monitor = _EveryKMonitor(args.monitor_every)
    else:
        monitor = KSPMonitor() if args.monitor else None
    x, info = solve(A, b, method=args.method, pc=M, monitor=monitor, **options)
    info.setup_seconds += pc_seconds
    info.extra["compile_seconds"] = info.extra.get("compile_seconds", 0.0) + pc_compile
    r = b.copy()
    r.axpy(-1.0, A @ x)
    true_rel = r.norm() / max(b.norm(), np.finfo(float).tiny)

    lines = [
        "dmsolve solve: %s" % label,
        "  rows %d, nonzeros %d, ranks %d (build %.3f s)" % (A.shape[0], nnz, comm.Get_size(),
                                                          t_build),
        "  method %s, pc %s%s" % (args.method, args.pc,
                                  ", near null space: %s" % nullspace if nullspace else ""),
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
    if args.output:
        write_solution(comm, x, args.output)
        lines.append("  solution written to %s" % args.output)
    _say(comm, "\n".join(line for line in lines if line))
    if not info.converged and args.method in _symmetric_methods() and not args.check:
        _say(comm, _asymmetry_hint(args, A, M), sys.stderr)
    if args.plot:
        _plot(comm, info, args.plot, "%s, %s + %s" % (label, args.method, args.pc))
    return 0 if info.converged else EXIT_FAILURE


def _check_command(args) -> tuple[dict, dict]:
    """The checks of the command line alone: values, options and their
    combinations; returns the ``--pc-opt`` and ``--problem-opt`` options.
    Rank-independent (every rank parsed the same arguments): the same
    verdict everywhere without communicating."""
    try:
        check_int("--n", args.n, low=1)
        check_real("--rtol", args.rtol, low=0.0)
        check_real("--atol", args.atol, low=0.0)
        if args.maxiter is not None:
            check_int("--maxiter", args.maxiter, low=0)
        for name in ("--restart", "--checkpoint-every", "--monitor-every", "--block-size",
                     "--threads"):
            value = getattr(args, name[2:].replace("-", "_"))
            if value is not None:
                check_int(name, value, low=1)
    except (TypeError, ValueError) as e:
        raise _Exit(EXIT_USAGE, str(e)) from None
    popts = _key_values(args.problem_opt, "--problem-opt")
    pcopts = _key_values(args.pc_opt, "--pc-opt")
    _check_pc_options(args.pc, pcopts)
    _check_combinations(args, pcopts)
    _check_files(args)
    return pcopts, popts


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
    if args.check and args.method not in _symmetric_methods():
        usage("--check tests the symmetry that %s need; --method %s does not need it"
              % (", ".join(_symmetric_methods()), args.method))
    if args.reproducible and args.pc not in ("none",) + REPRODUCIBLE_PCS:
        usage("--reproducible takes --pc none, %s; --pc %s depends on the partition by "
              "construction" % (", ".join(REPRODUCIBLE_PCS), args.pc))
    if args.block_size is not None or args.coordinates is not None:
        given = "--coordinates" if args.coordinates is not None else "--block-size"
        params = _pc_parameters(args.pc)
        if params is not None and "B" not in params:
            usage("%s gives AMG's near null space; --pc %s takes none: use --pc amg"
                  % (given, args.pc))
        if args.reproducible and (args.coordinates is not None or args.block_size > 1):
            usage("--reproducible: AMG's reproducible mode keeps the constants as its near "
                  "null space; drop %s" % given)
    if args.progress:
        if "progress" in pcopts:
            usage("give --progress or --pc-opt progress=..., not both")
        if args.pc not in _progress_reporters():
            usage("--progress: preconditioner %s reports no set-up progress; those that "
                  "do: %s" % (args.pc, ", ".join(_progress_reporters()) or "none"))


#: Extensions of the files the command line reads and writes, by option.
_EXTENSIONS = {"--output": (".mtx", ".npy"), "--coordinates": (".npy", ".txt", ".mtx")}


def _check_files(args) -> None:
    """The kind of each file option, from its name. Not collective."""
    for option, extensions in _EXTENSIONS.items():
        path = getattr(args, option[2:])
        if path is None:
            continue
        ext = os.path.splitext(path)[1].lower()
        if ext not in extensions:
            _usage("%s %r: the file name must end in %s, which say its format%s"
                   % (option, path, " or ".join(extensions),
                      "" if ext else " (it has no extension)"))


def _symmetric_methods() -> list[str]:
    """The methods for symmetric (Hermitian) systems: those with a ``check=``
    symmetry test (CG, pipelined CG, MINRES). Not collective."""
    return [m for m, f in METHODS.items() if "check" in inspect.signature(f).parameters]


def _other_methods() -> str:
    """The methods for nonsymmetric systems, GMRES first, as a reader's list."""
    names = sorted((m for m in METHODS if m not in _symmetric_methods()),
                   key=lambda m: (m != "gmres", m))
    return " or ".join(", ".join(names).rsplit(", ", 1))


def _pc_parameters(name: str) -> dict | None:
    """The options the preconditioner ``name`` takes (its factory's keyword
    parameters after the matrix), or None if it takes any. Not collective."""
    params = list(inspect.signature(PRECONDITIONERS[name]).parameters.values())
    if any(p.kind == p.VAR_KEYWORD for p in params):
        return None
    return {p.name: p for p in params[1:]
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def _check_pc_options(name: str, pcopts: dict) -> None:
    """Refuse a ``--pc-opt`` key that preconditioner ``name`` does not take,
    listing those it does. Not collective."""
    params = _pc_parameters(name)
    if params is None:
        return
    keys = [k for k in params if k != "B"]       # B: --block-size, --coordinates
    for key in pcopts:
        if key == "B":
            _usage("--pc-opt B: give AMG's near null space with --block-size K or "
                   "--coordinates FILE")
        if key not in params:
            _usage("--pc-opt %s: preconditioner %s has no option %r%s; its options: %s"
                   % (key, name, key, _did_you_mean(key, keys), ", ".join(keys) or "none"))


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


# -- the near null space, the preconditioner and the symmetry they need ------------

def _near_nullspace(comm, args, A) -> tuple[list | None, str, int]:
    """AMG's near null space from ``--block-size`` or ``--coordinates`` (None
    when neither is given), how the summary names it, and the unknowns per
    node (1 when neither is given). Collective on ``comm`` (rank 0 reads the
    coordinates and broadcasts them)."""
    if args.coordinates is None and args.block_size is None:
        return None, "", 1
    rows = A.shape[0]
    if args.coordinates is None:
        if rows % args.block_size:
            _usage("--block-size %d does not divide the matrix's %d rows"
                   % (args.block_size, rows))
        return (gallery.block_constants(A.row_layout, args.block_size),
                "%d constants (block size %d)" % (args.block_size, args.block_size),
                args.block_size)
    X = read_coordinates(comm, args.coordinates)
    nodes, d = X.shape
    if args.block_size is not None and args.block_size != d:
        _usage("--coordinates %r are %d-D, so %d unknowns per node; --block-size says %d"
               % (args.coordinates, d, d, args.block_size))
    if rows != d * nodes:
        _usage("--coordinates %r: %d nodes in %d-D have %d unknowns (%d per node, "
               "interlaced); the matrix has %d rows"
               % (args.coordinates, nodes, d, d * nodes, d, rows))
    modes = gallery.rigid_body_modes(X, A.row_layout)
    return modes, "%d rigid-body modes" % len(modes), d


def _build_pc(args, A, pcopts: dict, B, block: int):
    """The preconditioner (None for ``none``), its set-up seconds and its
    numba compile seconds, as :func:`dmsolve.solve` counts them; an AMG
    given ``block`` > 1 unknowns per node measures strength by nodes
    (``block_size``). Built here,
    not by the solve, so that a refusal can be worded for the command line.
    Collective on ``A.comm``."""
    if args.pc == "none":
        return None, 0.0, 0.0
    opts = dict(pcopts)
    if B is not None:
        opts["B"] = B
        if block > 1 and "block_size" in (_pc_parameters(args.pc) or ()):
            opts["block_size"] = block
    if args.reproducible:
        opts["reproducible"] = True
    watch = Stopwatch()
    M = PRECONDITIONERS[args.pc](A, **opts)
    return (M, *watch.split())


def _check_pc_symmetry(args, pcopts: dict, M) -> None:
    """Refuse a preconditioner that says it is not symmetric for a method
    that needs one, naming the options to change; with ``--check``, test
    one that does not say so. Collective on ``M.comm`` with ``--check``."""
    if M is None or args.method not in _symmetric_methods():
        return
    if M.symmetric is False:
        # asm and bjacobi are symmetric with a symmetric local solve, asm
        # only when not restricted (their docstrings)
        fixes = []
        if getattr(M, "restricted", False) and getattr(M, "overlap", 0):
            fixes.append("--pc-opt restricted=False")
        if getattr(M, "sub", None) not in (None, "lu", "ilu0"):
            fixes.append("--pc-opt sub=ilu0 (or sub=lu)")
        given = "".join(" --pc-opt %s=%s" % kv for kv in pcopts.items() if kv[0] != "progress")
        fix = "add %s, or " % " and ".join(fixes) if fixes else ""
        _usage("--method %s needs a symmetric preconditioner, and --pc %s%s is not "
               "symmetric: %suse --method %s" % (args.method, args.pc, given, fix,
                                                 _other_methods()))
    if args.check:
        _refuse_asymmetric(args, "preconditioner", asymmetry(M.apply, M.A.row_layout,
                                                                  M.A.dtype))


def _symmetry_words(args, what: str, gap: float) -> str:
    """Why ``--method`` cannot take the matrix or preconditioner whose
    asymmetry is ``gap``, and what to use instead."""
    op = "A" if what == "matrix" else "M"
    return ("--method %s %s a symmetric %s, and this one is not (|y^T %s x - x^T %s y| is "
            "%.1e of ||%s x|| ||y|| + ||%s y|| ||x|| for fixed vectors x, y; at most %.1e "
            "when symmetric): use --method %s"
            % (args.method, "needs" if args.check else "assumes", what, op, op, gap, op, op,
               SYMMETRY_RTOL, _other_methods()))


def _refuse_asymmetric(args, what: str, gap: float) -> None:
    """``--check``: refuse a matrix or preconditioner that is not symmetric."""
    if gap > SYMMETRY_RTOL:
        _usage("--check: %s" % _symmetry_words(args, what, gap))


def _asymmetry_hint(args, A, M) -> str:
    """After a solve that did not converge with a method for symmetric
    systems: why, if the matrix (or else the preconditioner) is not
    symmetric; empty otherwise. Collective on ``A.comm``."""
    ops = [("matrix", A.matvec, A)] + ([("preconditioner", M.apply, M.A)] if M else [])
    for what, apply, op in ops:
        gap = asymmetry(apply, op.row_layout, op.dtype)
        if gap > SYMMETRY_RTOL:
            return ("dmsolve: hint: %s (--check refuses such a %s before solving)"
                    % (_symmetry_words(args, what, gap), what))
    return ""


# -- checks before the solve: output paths and memory -----------------------------

def _preflight(comm, args, popts) -> None:
    """Refuse, on every rank and before anything is built, a command that
    cannot finish: an output path that cannot be written, or a gallery problem
    larger than the memory. Collective on ``comm``."""
    problem = None
    if args.problem:
        try:
            size = gallery.problem_size(args.problem, args.n, **popts)
        except TypeError as e:                     # the same on every rank
            _usage("--problem-opt: %s" % e)
        except ValueError as e:
            _usage("--problem %s: %s" % (args.problem, e))
        if size is not None:
            problem = memory_problem(comm, args, size)
    # collective (rank 0 tries, every rank learns): called on every rank
    output = output_problem(comm, args.output)
    problem = problem or output
    if problem is None and args.checkpoint is not None:
        # every rank writes its own file into the directory
        problem = directory_problem("--checkpoint", args.checkpoint)
    if problem is None and args.plot is not None and comm.Get_rank() == 0:
        problem = plot_problem(args.plot)       # only rank 0 writes the plot
    found = [p for p in comm.allgather(problem) if p is not None]
    if found:
        _usage(found[0])


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
