"""The command line's checks before a solve: that each output path can be
written, and that a gallery problem fits in the memory of the node.

Each check returns why the command cannot run (a message naming the
option), or None; :mod:`dmsolve.cli` refuses with it, before anything is built.
"""

from __future__ import annotations

import inspect
import os
import tempfile

from mpi4py import MPI

from . import io
from .krylov import METHODS

__all__ = ["output_problem", "directory_problem", "plot_problem", "memory_problem",
           "available_memory"]


def output_problem(comm, path: str | None) -> str | None:
    """Why the solution cannot be written to ``path``, or None (also when no
    path is given). Collective on ``comm``: rank 0 tries, as the writers do."""
    if path is None:
        return None
    try:
        io.check_writable(path, comm, "--output")
    except OSError as e:
        return str(e)
    return None


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


def directory_problem(option: str, path: str) -> str | None:
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


def plot_problem(path: str) -> str | None:
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


def memory_problem(comm, args, size) -> str | None:
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
