"""Compile every numba kernel of preconditioners/ and topology/ once, so that
numba's on-disk cache (next to the modules) is full before the first demo.

    mpiexec -n 2 python -m mpi4py tools/warm_kernels.py          # what `make setup` runs
    mpiexec -n 2 python -m mpi4py tools/warm_kernels.py --list   # and each signature

Numba compiles a kernel the first time it is called, for the argument types
of that call, and caches the machine code in ``__pycache__``. A fresh checkout
therefore spends its first run compiling (tens of seconds) inside whatever it
runs, e.g. while ``make demo`` times the preconditioners. This script makes
that first call on tiny inputs, through the same public calls that the
library's users make (so the cached specialisations are the ones they use:
the float64/int64 types the kernels see in a solve). Rank 0 compiles them
alone first, while the other ranks sleep (so the work is not done twice);
then every rank runs the same calls together, as ``make demo`` does on 2
ranks: some kernels work only on what arrives from another rank (a V-path
that crosses into a neighbour's tetrahedra), and the rest load from the cache.

It then checks that every kernel is in the cache: compiled or loaded in this
run, or (a kernel that only other kernels call, when those came from the
cache) with a cache index of its own. A kernel it did not reach (a new one,
or one behind a code path it does not take) is reported and the exit status
is 1, so a kernel added later cannot silently miss the warm-up. Kernels
declared ``inline="always"`` are compiled into their callers and have no
machine code of their own; they are not counted.
"""

from __future__ import annotations

import argparse
import glob
import importlib
import os
import pkgutil
import sys
import time

import numpy as np
from mpi4py import MPI


def kernels() -> dict[str, object]:
    """Every numba dispatcher defined in preconditioners/ and topology/, and
    in dmsolve's kernel modules (the only ones of dmsolve that define any), by
    ``module.name`` (importing every module of these packages)."""
    import preconditioners
    import topology
    from dmsolve.jit import is_kernel

    found = {}
    modules = [info.name for pkg in (preconditioners, topology)
               for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".")]
    for modname in modules + ["dmsolve._sell_kernels", "dmsolve.krylov._fused_kernels",
                              "dmsolve._reprosum", "dmsolve.bsp._merge_kernel",
                              "dmsolve._mmread_kernels", "dmsolve._narrow_kernels",
                              "dmsolve._vector_kernels", "dmsolve._spgemm_kernels"]:
        module = importlib.import_module(modname)
        for name, obj in vars(module).items():
            if is_kernel(obj) and obj.py_func.__module__ == modname:
                found["%s.%s" % (modname, name)] = obj
    return found


def _inlined(dispatcher) -> bool:
    return dispatcher.targetoptions.get("inline", "never") == "always"


def _cached(dispatcher) -> bool:
    """Whether numba's cache directory holds an index for ``dispatcher``
    (numba names it ``<file stem>.<qualname>-<line>.py<version>.nbi``)."""
    func = dispatcher.py_func
    stem = os.path.splitext(os.path.basename(func.__code__.co_filename))[0]
    pattern = "%s.%s-%d.py%d%d*.nbi" % (stem, func.__qualname__, func.__code__.co_firstlineno,
                                        sys.version_info[0], sys.version_info[1])
    return bool(glob.glob(os.path.join(glob.escape(dispatcher.stats.cache_path), pattern)))


def warm_products(comm) -> None:
    """A sliced-ELL matvec and rmatvec (the format DistCSR's products choose
    on blocks of 1024 rows or more), the Matrix Market reader's scan of
    its entry lines, and a sparse product on two threads (two blocks of rows
    and the copy that joins them) and a transpose."""
    import scipy.sparse as sp

    import dmsolve.gallery as gallery
    from dmsolve._mmread_kernels import plain_lines
    from dmsolve.spgemm import matmat, transpose

    X = sp.random(600, 600, density=0.25, format="csr", random_state=0)
    matmat(X, X, threads=2)
    transpose(X, threads=2)

    plain_lines(np.frombuffer(b"1 1 1.0\n", dtype=np.uint8), 2, 1, False)

    A = gallery.poisson2d(12, comm)
    A.set_local_format("sell")
    for M in (A, A.single()):               # float64 and float32 (amg precision="single")
        x, y = M.create_vectors()
        x.local[:] = 1.0
        M.matvec(x, out=y)
        M.rmatvec(y, out=x)


def warm_threads(comm) -> None:
    """The kernels of a rank's work on two threads: products by row blocks
    (sliced ELL, narrow CSR, the transposed copy; float64 and float32),
    vector sums in lanes, CG and pipelined CG's fused passes by lanes (real
    and complex), on blocks made small enough to split a tiny problem."""
    import dmsolve.gallery as gallery
    from dmsolve import threads
    from dmsolve.krylov import cg, pipecg

    saved = threads.MIN_BLOCK
    threads.MIN_BLOCK = 64
    try:
        with threads.using(2):
            A = gallery.poisson2d(24, comm)
            for fmt in ("sell", "narrow"):
                A.set_local_format(fmt)
                for M in (A, A.single()):
                    x, y = M.create_vectors()
                    x.local[:] = 1.0
                    M.matvec(x, out=y)
                    M.rmatvec(y, out=x)
            for Ak in (A, A.astype(complex)):
                b = gallery.rhs(Ak, "random")
                b.dot(b)
                b.norm(1)
                for method in (cg, pipecg):
                    method(Ak, b, maxiter=3)
                    method(Ak, b, maxiter=3, norm_type="preconditioned")
    finally:
        threads.MIN_BLOCK = saved


def warm_krylov(comm) -> None:
    """CG and pipelined CG (their fused vector kernels), real and complex,
    with and without a preconditioner."""
    import dmsolve.gallery as gallery
    import preconditioners
    from dmsolve.krylov import cg, pipecg

    from dmsolve._reprosum import exact_sum
    from dmsolve.krylov import gmres

    A = gallery.poisson2d(8, comm)
    for Ak in (A, A.astype(complex)):
        b = gallery.rhs(Ak, "random")
        for method in (cg, pipecg):
            for pc in (None, preconditioners.make("jacobi", Ak)):
                method(Ak, b, M=pc, maxiter=3)
                method(Ak, b, M=pc, maxiter=3, norm_type="preconditioned")
    # reproducible mode: exact reductions (one dot, several, a sum with an
    # infinity: the buckets' path), canonical products, entrywise updates
    b = gallery.rhs(A, "random")
    pc = preconditioners.make("jacobi", A, reproducible=True)
    for method in (cg, pipecg, gmres):
        method(A, b, M=pc, maxiter=3, reproducible=True)
    exact_sum(np.array([1.0, np.inf]))


def warm_preconditioners(comm) -> None:
    """Set up and apply each preconditioner that has kernels, on small matrices."""
    import dmsolve
    import dmsolve.gallery as gallery
    import preconditioners

    spd = gallery.poisson2d(24, comm)           # above max_coarse: AMG aggregates
    nonsym = gallery.shifted_laplacian(4, comm, shift=0.2)
    for A, pcs in [
            (spd, ["amg", ("amg", {"presmoother": "gauss-seidel",
                                   "postsmoother": "gauss-seidel"}),
                   ("amg", {"strength": ("symmetric", {"theta": 0.08})}),
                   ("amg", {"precision": "single"}),
                   ("bjacobi", {"sub": "ilu0"}), ("bjacobi", {"sub": "ilut"}),
                   ("bjacobi", {"sub": "lu"}), ("asm", {"overlap": 1}),
                   # float32 factors and vectors (precision="single")
                   ("bjacobi", {"sub": "ilu0", "precision": "single"}),
                   ("bjacobi", {"sub": "lu", "precision": "single"}),
                   ("cheby", {"precision": "single"}),
                   # the reproducible hierarchy, with filtering and l1-Jacobi
                   ("amg", {"reproducible": True}), ("cheby", {"reproducible": True}),
                   ("amg", {"reproducible": True, "theta": 0.1,
                            "presmoother": "l1-jacobi", "postsmoother": "l1-jacobi"})]),
            (nonsym, [("gemslr", {"nlev": 2}), ("bjacobi", {"sub": "ilu0"})])]:
        b = gallery.rhs(A, "random")
        for pc in pcs:
            dmsolve.solve(A, b, method="fgmres", pc=preconditioners.make(pc, A), maxiter=3)
    # pass 3 of the aggregation runs only for a node that passes 1 and 2 leave
    # free, which needs a strength graph that is not symmetric; call it as
    # standard_aggregation does, with scipy's int32 indices
    from preconditioners._kernels import aggregate_pass3
    S = spd.diag.tocsr()
    aggregate_pass3(S.indptr, S.indices, np.zeros(S.shape[0], dtype=np.int64), 0)


def warm_topology(comm) -> None:
    """Every analysis on small grids (Freudenthal, out of core, cubical) and
    small simplicial complexes."""
    import topology
    from dmsolve.bsp import search_sorted

    # the merge search_sorted takes for many sorted queries (grids of 16^3 and more)
    keys = np.arange(8192, dtype=np.int64)
    for side in ("left", "right"):
        search_sorted(keys, keys[::-1].copy(), side)
    rng = np.random.default_rng(0)
    for shape in [(5, 4, 3), (6, 5)]:
        grid = topology.Grid(shape, comm)
        field = rng.random(int(np.prod(shape)))
        _analyses(topology, grid, field)
        # out of core: the slab sweeps and the gluing of their boundary trees
        ooc = topology.Grid(shape, comm, virtual=1)
        topology.critical_points(ooc, field)
        topology.persistence_diagram(ooc, field)
        topology.merge_tree(ooc, field)
        topology.connected_components(ooc, field, float(np.median(field)))
        # the cubical complex of the same grid (its own gradient and Morse kernels)
        _analyses(topology, topology.Grid(shape, comm, complex="cubical"), field)
    # a tetrahedral complex: a cube cut into the 6 tetrahedra of its Freudenthal
    # triangulation, and a triangulated square with its edge flow for Hodge
    cube = np.array([[0, 1, 3, 7], [0, 1, 5, 7], [0, 2, 3, 7], [0, 2, 6, 7],
                     [0, 4, 5, 7], [0, 4, 6, 7]])
    points = np.array([[x, y, z] for z in (0, 1) for y in (0, 1) for x in (0, 1)], float)
    cx = topology.SimplicialComplex([cube[comm.rank::comm.size]], comm, points=points)
    _analyses(topology, cx, rng.random(8))
    n = 5
    xs, ys = np.meshgrid(np.arange(n), np.arange(n))
    a = (xs[:-1, :-1] + n * ys[:-1, :-1]).ravel()
    tris = np.concatenate([np.column_stack((a, a + 1, a + n)),
                           np.column_stack((a + 1, a + n + 1, a + n))])
    square = topology.SimplicialComplex([tris[comm.rank::comm.size]], comm,
                                        points=np.column_stack((xs.ravel(), ys.ravel())) * 1.0)
    _analyses(topology, square, rng.random(n * n))
    edges = square.simplices(1)
    topology.hodge_decomposition(square, rng.random(len(edges)))
    topology.betti_numbers(square)


def _analyses(topology, domain, field) -> None:
    topology.critical_points(domain, field)
    topology.discrete_gradient(domain, field)
    topology.persistence_diagram(domain, field)
    topology.connected_components(domain, field, threshold=0.5)
    for kind in ("join", "split"):
        topology.merge_tree(domain, field, kind=kind)


def _wait_idle(comm) -> None:
    """Wait, sleeping, until every rank gets here (a busy barrier would take
    a core from rank 0's compilation)."""
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(0.05)


class _Stages:
    """Prints ``numba warm-up [k/8] <stage> (<seconds> s so far)`` on rank
    0, flushed, as each stage starts."""

    TOTAL = 8

    def __init__(self, comm, t0: float):
        self.comm, self.t0, self.k = comm, t0, 0

    def __call__(self, text: str, *, wait: bool = False) -> None:
        if wait:                                # rank 0 is done compiling alone
            _wait_idle(self.comm)
        self.k += 1
        if self.comm.rank == 0:
            print("numba warm-up [%d/%d] %s (%.0f s so far)"
                  % (self.k, self.TOTAL, text, time.perf_counter() - self.t0), flush=True)


def main(argv=None) -> int:
    """Warm the cache; return 0 (on every rank) if every kernel was compiled
    on some rank. Collective on ``MPI.COMM_WORLD``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--list", action="store_true",
                   help="print each kernel and its compiled signatures")
    args = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    t0 = time.perf_counter()
    say = _Stages(comm, t0)
    say("importing the kernel modules")
    table = kernels()
    # a fresh checkout spends minutes here with nothing else to show: one
    # line per stage (on rank 0) says what is being compiled and for how long
    stages = [("sparse products", warm_products), ("Krylov kernels", warm_krylov),
              ("threaded kernels", warm_threads),
              ("preconditioners", warm_preconditioners), ("topology", warm_topology)]
    for title, warm in stages:
        say("compiling the %s on rank 0" % title)
        if comm.rank == 0:
            warm(MPI.COMM_SELF)
    say("the same calls on all %d ranks together (cross-rank paths; the rest from "
        "the cache)" % comm.size, wait=True)
    for _, warm in stages:
        warm(comm)
    say("checking that every kernel is in the cache")
    # a kernel compiled on any rank is in the (shared, on-disk) cache
    signatures = {}
    for mine in comm.allgather({name: [str(s) for s in k.signatures]
                                for name, k in table.items()}):
        for name, sigs in mine.items():
            signatures.setdefault(name, set()).update(sigs)
    missed = sorted(name for name, k in table.items()
                    if not _inlined(k) and not signatures[name] and not _cached(k))
    if comm.rank == 0:
        if args.list:
            for name, k in sorted(table.items()):
                print("%-45s %s" % (name, "inlined" if _inlined(k) else
                                    "; ".join(sorted(signatures[name])) or "NOT COMPILED"))
        print("numba kernels: %d of %d in the cache (and %d inlined into them), %.1f s on "
              "%d ranks" % (sum(1 for name, k in table.items() if not _inlined(k)) - len(missed),
                            sum(1 for k in table.values() if not _inlined(k)),
                            sum(1 for k in table.values() if _inlined(k)),
                            time.perf_counter() - t0, comm.size), flush=True)
        if missed:
            print("not reached, so not cached (add a call to tools/warm_kernels.py): %s"
                  % ", ".join(missed), file=sys.stderr, flush=True)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
