"""One entry point: Krylov methods, preconditioners and backends looked up by name."""

from __future__ import annotations

from typing import Callable

from .._compile import Stopwatch
from .._interop_inputs import distribute_inputs
from .._registry import PRECONDITIONERS, Registry
from .._repro import check_pc_name
from ..checkpoint import from_options
from ..threads import resolve as resolve_threads, using as using_threads
from ..validate import agreed, check_bool
from ._bicgstab import bicgstab
from ._cg import cg
from ._fgmres import fgmres
from ._gmres import gmres
from ._minres import minres
from ._pipecg import pipecg

__all__ = ["solve", "register_method", "available_methods", "METHODS", "BACKENDS"]

#: Who runs :func:`solve`, by name: ``"dmsolve"`` (our Krylov methods) and
#: ``"petsc"`` (PETSc's KSP; :mod:`dmsolve.petsc` registers it when imported,
#: as ``dmsolve`` itself does). A backend is ``run(A, b, method, pc, **options)``
#: returning ``(x, info)``.
BACKENDS = Registry("backend")

#: Krylov methods by name; :func:`register_method` adds more.
METHODS = Registry("Krylov method")
for _f in (cg, pipecg, gmres, fgmres, bicgstab, minres):
    METHODS.register(_f.__name__, _f)
del _f


def register_method(name: str, func: Callable) -> None:
    """Make ``func`` available to :func:`solve` as ``method=name``.

    ``func`` must follow the signature of :func:`dmsolve.krylov.cg`. Not
    collective; do it on every rank.
    """
    if not callable(func):
        raise TypeError("func must be callable")
    METHODS.register(name, func, replace=True)


def available_methods() -> list[str]:
    """Names accepted by ``solve(method=...)``. Not collective."""
    return METHODS.names()


def _make_pc(pc, A, reproducible=False):
    """Resolve ``pc`` into a preconditioner object (or None)."""
    if pc is None or not isinstance(pc, (str, tuple, list)):
        return pc                   # None or an object: used as it is
    name, factory, opts = PRECONDITIONERS.resolve(pc)
    if name == "none":
        return None
    if check_bool("reproducible", reproducible):
        check_pc_name(name)                 # bjacobi, asm, gemslr: refused everywhere
        opts["reproducible"] = True
    return factory(A, **opts)


def solve(A, b, method: str = "cg", pc=None, *, backend: str = "dmsolve", comm=None,
          threads: int | None = None, **options):
    """Solve ``A x = b`` with a Krylov method and a preconditioner by name.

    Parameters
    ----------
    A : distributed operator, scipy sparse matrix, ndarray or LinearOperator
        ``DistCSR`` or any operator with ``row_layout``, ``col_layout``,
        ``matvec(x, out=None)``. Or, as scipy takes it, the same global
        object on every rank: a scipy sparse matrix or 2-D array is
        distributed in block rows (``DistCSR.from_global(A, comm)``); a
        ``scipy.sparse.linalg.LinearOperator`` is applied by every rank to
        the gathered vector, keeping its own rows, so every rank holds
        global-size vectors (as the operator given does).
    b : DistVector or ndarray
        Right-hand side on ``A.row_layout``; with a global ``A``, a numpy
        array (the same on every rank), and then ``x`` comes back as a numpy
        array on every rank. ``x0`` and ``nullspace`` may be numpy arrays too.
        A distributed ``A`` with a numpy ``b`` is refused: convert ``b`` with
        ``DistVector.from_global(b, A.row_layout)``.
    method : str, optional
        One of :func:`available_methods` (``"cg"``, ``"pipecg"``,
        ``"gmres"``, ``"fgmres"``, ``"bicgstab"``, ``"minres"``).
    pc : None, "none", str, (str, dict) or object, optional
        A preconditioner object, or a name (with options) built by
        ``preconditioners.make(name, A, **options)`` (e.g. ``"jacobi"``,
        ``("jacobi", {"omega": 0.8})``). Its set-up time is added to
        ``info.setup_seconds``, and numba's compilation of its kernels (on
        a first run) to ``info.extra["compile_seconds"]`` instead. As
        scipy's ``M`` (see :func:`dmsolve.krylov.cg`): a scipy
        ``LinearOperator``, sparse matrix or 2-D array, or, with a global
        ``A``, a callable ``M(r)`` on numpy vectors.
    **options
        Passed to the method: ``x0``, ``rtol``, ``atol``, ``maxiter``,
        ``callback``, ``nullspace``, ``monitor``, ``raise_on_failure``, ...
        The stopping test is ``||r|| <= max(rtol*||b||, atol)`` in the
        method's norm (``info.norm_type``).
        ``checkpoint=DIR, checkpoint_every=k`` writes a checkpoint every
        ``k`` iterations and ``resume=DIR`` continues from one, on any
        number of ranks (see :mod:`dmsolve.checkpoint`; ``info.extra
        ["checkpoint"]`` reports writes and timings).
        ``reproducible=True`` gives the same bits (``x``, iterations, reason
        and residual history) at any number of ranks and for any row
        partition: exact reductions, canonical products, and the
        preconditioner built with ``reproducible=True`` (jacobi, cheby, amg;
        bjacobi, asm and gemslr are refused with ValueError). See
        :mod:`dmsolve._repro`.
    backend : str, keyword-only
        One of :data:`BACKENDS`: ``"dmsolve"`` (default), or ``"petsc"``,
        which runs PETSc's KSP and PC through petsc4py under these names (see
        :func:`dmsolve.petsc.ksp_solve`; needs ``make petsc``).
    comm : MPI.Comm, keyword-only
        The communicator for a global (scipy/numpy) ``A``; default
        ``MPI.COMM_WORLD``. A distributed ``A`` brings its own.
    threads : int, keyword-only
        Threads per rank for this call, the preconditioner's set-up
        included (default: :func:`dmsolve.get_num_threads`). The solution
        and the iterations do not depend on it beyond the last bits of the
        reductions (see :mod:`dmsolve.threads`).

    Returns
    -------
    x : DistVector, or ndarray when ``b`` was one
    info : SolveInfo

    Raises
    ------
    ValueError
        Unknown backend, method or preconditioner name (on every rank: the
        check uses no rank-dependent fact), ``threads`` not a positive
        integer on some rank (on every rank), or as the method raises.
    TypeError
        A name that is not a string, ``M`` given in ``options`` together
        with ``pc``, a distributed ``A`` with numpy vectors (or a global
        ``A`` with a DistVector ``b``), or as the method raises.

    Notes
    -----
    Collective on ``A.comm`` (on ``comm`` for a global ``A``).

    Examples
    --------
    CG with algebraic multigrid, both by name, on the 7-point Laplacian of a
    10 x 10 x 10 grid:

    >>> import numpy as np
    >>> from mpi4py import MPI
    >>> import dmsolve
    >>> comm = MPI.COMM_WORLD
    >>> A = dmsolve.gallery.poisson3d(10, comm)
    >>> b = dmsolve.gallery.rhs(A, "random")
    >>> x, info = dmsolve.solve(A, b, "cg", pc="amg", rtol=1e-8)
    >>> print(info.converged, info.reason, info.iterations)
    True ConvergedReason.RTOL 8
    >>> As, xs, bs = A.to_scipy(), x.gather(), b.gather()
    >>> print(np.linalg.norm(bs - As @ xs) <= 1e-8 * np.linalg.norm(bs))
    True

    As scipy takes them, the same global matrix and vector on every rank;
    ``x`` comes back as a numpy array on every rank. The 1-D Laplacian with
    ``b = 1`` has the solution ``x_i = i (n + 1 - i) / 2``:

    >>> import scipy.sparse as sp
    >>> import scipy.sparse.linalg as spla
    >>> T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(50, 50), format="csr")
    >>> x, info = dmsolve.solve(T, np.ones(50), "gmres", pc="jacobi", rtol=1e-10)
    >>> print(type(x).__name__, info.converged, info.iterations)
    ndarray True 25
    >>> print(x[:3].round(3))
    [25. 49. 72.]
    >>> print(np.allclose(x, spla.spsolve(T, np.ones(50))))
    True
    """
    A, b, pc, finish = distribute_inputs(A, b, comm, options, pc)
    with agreed(A.row_layout.comm):
        resolve_threads(threads)
    run = BACKENDS[backend]
    if backend != "dmsolve" and check_bool("reproducible", options.get("reproducible", False)):
        # a rank-independent fact: raised alike on every rank
        raise ValueError("reproducible=True is dmsolve's own mode; backend=%r has none "
                         "(use backend='dmsolve')" % backend)
    with using_threads(threads):
        return finish(*run(A, b, method, pc, **options))


@BACKENDS.register("dmsolve")
def _run(A, b, method, pc, **options):
    """The ``"dmsolve"`` backend of :func:`solve`: our Krylov methods. Collective."""
    if not isinstance(method, str):
        raise TypeError("method must be a string, got %s" % type(method).__name__)
    func = METHODS[method]
    if "M" in options and pc is not None:
        raise TypeError("give the preconditioner as pc= or M=, not both")
    ckpt = from_options(options, options.get("M", pc), method, func)
    if ckpt is not None:
        options["checkpoint"] = ckpt
    if isinstance(pc, (str, tuple, list)):
        PRECONDITIONERS.resolve(pc)   # imports its package before the clock runs
    watch = Stopwatch()
    M = (_make_pc(pc, A, options.get("reproducible", False)) if "M" not in options
         else options.pop("M"))
    pc_seconds, pc_compile = watch.split()
    x0 = options.pop("x0", None)
    x, info = func(A, b, x0, M=M, **options)
    info.setup_seconds += pc_seconds
    # numba compiling the preconditioner's kernels is not set-up work either
    info.extra["compile_seconds"] = info.extra.get("compile_seconds", 0.0) + pc_compile
    if hasattr(M, "describe"):
        info.extra["pc"] = M.describe()   # e.g. the AMG hierarchy, for reports
    return x, info
