"""dmsolve in one page: what each layer does, checked against serial references.

Run it with (this is what `make demo` runs)

    mpiexec -n 2 python -m mpi4py examples/demo.py

Each section builds something distributed, prints a few lines on rank 0, and
checks itself against numpy/scipy on the gathered data: the distributed
matrix and its halo exchange, the BSP superstep layer (assembly and a Pregel
connected-components run), the Krylov solvers, the preconditioners (AMG on
Poisson, the multilevel Schur low-rank preconditioner on an indefinite
problem), the topology of a scalar field (critical points, persistence, merge
tree, Hodge decomposition), checkpoint/restart and PETSc interoperability,
the one registry and validation door every name and option goes through, and
the guards against silent wrong answers (a convergence claim is checked with
the true residual; a user's exception keeps its type on every rank, even when
it is raised before a halo exchange the other ranks wait in; scipy's call
``dmsolve.cg(S, b, M=...)`` with scipy objects), complex
systems, the distributed sort and parallel output, reproducible mode (the
same bits at any number of ranks and for any partition), signal processing
of traffic flows on a real road network (filters, denoising, inferred
triangles), out-of-core analysis of a raw field, cubical complexes for
image data (checked against gudhi), and threads inside a rank (the same bits
at 1 and 2 threads; a task graph that overlaps a message with work).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import pathlib
import shutil
import tempfile
import time

import numpy as np
import scipy.sparse as sp
import scipy.sparse.csgraph as csgraph
from mpi4py import MPI
from scipy.sparse.linalg import LinearOperator, spsolve
from scipy.sparse.linalg import cg as scipy_cg

import dmsolve
import dmsolve.gallery as gallery
import preconditioners
import topology
import topology.io
from dmsolve import DistCSR, DistVector, Layout, petsc
from dmsolve.krylov import METHODS
from dmsolve.partition import metis_partition, partition_quality, redistribute
from dmsolve.taskgraph import Executor, TaskGraph
from preconditioners.smoothers import SMOOTHERS


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=24, help="3D grid points per side")
    return p.parse_args(argv)


def say(comm, *lines) -> None:
    if comm.rank == 0:
        print("\n".join(lines), flush=True)


def distributed_data(comm, n):
    A = gallery.poisson3d(n, comm)                      # each rank builds its own rows
    rows = comm.gather(A.row_layout.local_size, root=0)
    ghosts = comm.gather(A.ghosts.size, root=0)
    x = gallery.rhs(A, "random")
    y = A @ x                                           # halo exchange overlapped
    S, xs = A.to_scipy(), x.gather()
    err = np.abs(y.gather() - S @ xs).max() / np.abs(S @ xs).max()
    q = partition_quality(A, metis_partition(A))
    # partitions computed in parallel, nothing gathered: multilevel (matching,
    # METIS on a small coarse graph) and a Hilbert curve through the grid points
    i = np.arange(*A.row_layout.owned_range)
    xyz = np.stack((i % n, i // n % n, i // (n * n)), axis=1).astype(float)
    q_ml = partition_quality(A, dmsolve.partition.partition(A, "multilevel"))
    q_hc = partition_quality(A, dmsolve.partition.partition(A, "hilbert", coords=xyz))
    # each rank multiplies its block in sliced ELL with run slots where it pays
    sell = A.product_format == "sell"
    csr = A.diag.data.nbytes + A.diag.indices.nbytes + A.diag.indptr.nbytes
    fmt = comm.allreduce(np.array([int(sell), A.product_nbytes if sell else 0, csr]))
    say(comm, "[1] Distributed data: 3D Poisson %d^3, %d rows, %d nonzeros" % (
        n, A.shape[0], A.global_nnz()),
        "    rows per rank %s, ghost columns per rank %s" % (rows, ghosts),
        "    A @ x vs scipy: max relative error %.1e" % err,
        "    products in sliced ELL (run slots) on %d of %d ranks: %.2fx the bytes of CSR"
        % (fmt[0], comm.size, fmt[1] / fmt[2]),
        "    METIS partition: edge cut %d (block layout: %d)" % (
            q.edge_cut, partition_quality(A, dmsolve.partition.block_partition(A)).edge_cut),
        "    in parallel, nothing gathered: multilevel cut %d, hilbert cut %d, "
        "imbalance %.3f and %.3f" % (q_ml.edge_cut, q_hc.edge_cut, q_ml.row_imbalance,
                                     q_hc.row_imbalance))
    return A


def bsp_layer(comm):
    # every rank adds 1 to every entry of a 5x5 matrix: the combiner sums duplicates
    rows, cols = np.divmod(np.arange(25), 5)
    B = DistCSR.from_coo(rows, cols, np.ones(25), (5, 5), comm)
    ok = np.array_equal(B.to_scipy().toarray(), np.full((5, 5), comm.size))
    # Pregel connected components on a ring of k disjoint cycles
    n, k = 700, 7
    layout = Layout.block(n, comm)
    labels, steps = _components(comm, layout, k)
    ids = np.arange(n)
    nxt = np.where((ids + k) < n, ids + k, ids % k)
    G = sp.coo_matrix((np.ones(n), (ids, nxt)), shape=(n, n))
    ncomp, ref = csgraph.connected_components(G, directed=False)
    smallest = np.full(ncomp, n)
    np.minimum.at(smallest, ref, ids)
    same = np.array_equal(labels.gather(), smallest[ref])
    say(comm, "[2] BSP layer: from_coo summed %d ranks' duplicates: %s" % (comm.size, ok),
        "    connected components (min-label, vote-to-halt): %d components in %d supersteps,"
        " equal to scipy.csgraph: %s" % (ncomp, steps, same))


def _components(comm, layout, k):
    """Min-label propagation on the cycles v -> v+k: one BSP superstep per round."""
    n = layout.global_size
    mine = np.arange(*layout.owned_range)
    nbrs = np.concatenate([np.where(mine + k < n, mine + k, mine % k),
                           np.where(mine - k >= 0, mine - k, mine + k * ((n - 1 - mine) // k))])
    src = np.concatenate([mine, mine])
    labels = DistVector(layout, mine.astype(np.int64))
    ctx = dmsolve.bsp.BSP(comm)
    changed = True

    def compute(ctx, inbox):
        nonlocal changed
        if inbox.global_messages:
            keys, vals = inbox.reduced(0, "min", dtype=np.int64)
            local = keys - layout.start
            better = vals < labels.local[local]
            labels.local[local[better]] = vals[better]
            changed = bool(better.any())
        if changed:
            ctx.send_keyed(0, nbrs, labels.local[src - layout.start], layout, op="min")
            changed = False

    steps = ctx.run(compute)
    return labels, steps


def krylov(comm):
    A = gallery.poisson2d(64, comm)
    b = gallery.rhs(A, "ones")
    _, i_cg = dmsolve.cg(A, b, rtol=1e-8)
    _, i_pipe = dmsolve.pipecg(A, b, rtol=1e-8)
    C = gallery.convection_diffusion(48, comm)
    c = gallery.rhs(C, "ones")
    xg, i_gm = dmsolve.gmres(C, c, rtol=1e-8, restart=30, maxiter=2000)
    ref = spsolve(C.to_scipy().tocsc(), c.gather())
    err = np.abs(xg.gather() - ref).max() / np.abs(ref).max()
    say(comm, "[3] Krylov: CG on 2D Poisson 64^2: %s in %d iterations" % (
        i_cg.reason.petsc_name, i_cg.iterations),
        "    pipelined CG: %d iterations, %.2f global reductions per iteration" % (
            i_pipe.iterations, i_pipe.reductions / max(i_pipe.iterations, 1)),
        "    GMRES(30) on convection-diffusion 48^2: %d iterations, error vs spsolve %.1e" % (
            i_gm.iterations, err))


def preconditioning(comm, A):
    b = gallery.rhs(A, "random")
    lines = []
    for pc in ["none", "jacobi", ("bjacobi", {"sub": "ilu0"}), ("asm", {"overlap": 1, "restricted": False}), "amg"]:
        name = pc if isinstance(pc, str) else "%s %s" % pc
        if (pc if isinstance(pc, str) else pc[0]) not in preconditioners.available():
            continue
        t = time.perf_counter()
        _, info = dmsolve.solve(A, b, method="cg", pc=pc, rtol=1e-8)
        lines.append("    CG + %-40s %4d iterations  %.2f s" % (
            name, info.iterations, time.perf_counter() - t))
    # small coarse levels live on fewer ranks (at most 4x fewer per level)
    d = preconditioners.make("amg", A).describe()
    lines.append("    AMG levels: rows %s on ranks %s" % ([lv["rows"] for lv in d["levels"]],
                                                      d["level_comm_ranks"]))
    # precision="single": the preconditioner's data in float32 inside float64 CG,
    # whose stopping test and confirming true residual stay float64
    runs = []
    for name in ("amg", "cheby", "bjacobi"):
        its = [dmsolve.solve(A, b, method="cg", pc=(name, {"precision": p}), rtol=1e-8)[1]
               for p in ("double", "single")]
        runs.append("%s %d/%d" % (name, its[0].iterations, its[1].iterations))
    lines.append("    precision='single' (float32 data, float64 CG), iterations double/single: "
                 + ", ".join(runs))
    say(comm, "[4] Preconditioners on the 3D Poisson matrix (rtol 1e-8):", *lines)


def indefinite(comm):
    S = gallery.shifted_laplacian(16, comm, shift=0.2)  # parGeMSLR's operator: indefinite, nonsymmetric
    b = gallery.rhs(S, "random")
    lines = []
    for pc in [("bjacobi", {"sub": "ilu0"}), ("gemslr", {"lr_rank": 0}), "gemslr"]:
        name = pc if isinstance(pc, str) else "%s %s" % pc
        _, info = dmsolve.solve(S, b, method="fgmres", pc=pc, rtol=1e-6, restart=50, maxiter=300)
        lines.append("    FGMRES + %-26s %4d iterations (%s)" % (name, info.iterations,
                                                                 info.reason.name))
    say(comm, "[5] Indefinite: shifted 3D Laplacian 16^3, shift 0.2 (rtol 1e-6):", *lines)


def topology_section(comm):
    shape = (24, 20, 16)
    grid = topology.Grid(shape, comm)
    z, y, x = np.meshgrid(*[np.linspace(0, 1, s) for s in shape[::-1]], indexing="ij")
    field = (np.sin(4 * x) * np.cos(3 * y) + np.sin(5 * z) + 0.3 * np.cos(7 * x * y)).ravel()
    cp = topology.critical_points(grid, field)
    counts = cp.counts()
    dg = topology.persistence_diagram(grid, field, min_persistence=0.05)
    jt = topology.merge_tree(grid, field, kind="join")
    say(comm, "[6] Topology: critical points of a smooth field on a %dx%dx%d grid:" % shape,
        "    " + ", ".join("%s %d" % kv for kv in counts.items() if kv[0] != "regular"),
        "    persistence pairs kept (> 0.05 / nonzero): " + ", ".join(
            "D%d %d/%d" % (d, r["kept"], r["nonzero"]) for d, r in dg.report.items()),
        "    essential classes %s (the Betti numbers of a box: 1 0 0); join tree: %d nodes, "
        "%d arcs" % (" ".join(str(r["essential"]) for r in dg.report.values()),
                     sum(jt.counts[k] for k in ("leaves", "saddles", "roots")),
                     jt.counts["arcs"]),
        "    spread over the ranks, nothing gathered: diagram pairs per rank %s, tree nodes "
        "per rank %s" % ("/".join(map(str, comm.allgather(dg.local_raw_pairs["dim"].size))),
                         "/".join(map(str, comm.allgather(jt.local_node_ids.size)))))
    hodge_section(comm)


def hodge_section(comm):
    n = 20
    xs, ys = np.meshgrid(np.arange(n), np.arange(n))
    points = np.column_stack((xs.ravel(), ys.ravel())).astype(float)
    a = (xs[:-1, :-1] + n * ys[:-1, :-1]).ravel()
    keep = ~((abs(xs[:-1, :-1] - n / 2) < 3) & (abs(ys[:-1, :-1] - n / 2) < 3)).ravel()
    a = a[keep]                                          # a square hole in the middle
    tris = np.concatenate([np.column_stack((a, a + 1, a + n)),
                           np.column_stack((a + 1, a + n + 1, a + n))])
    used, tris = np.unique(tris, return_inverse=True)   # no isolated vertices in the hole
    points, tris = points[used], tris.reshape(-1, 3)
    cx = topology.SimplicialComplex([tris[comm.rank::comm.size]], comm, points=points)
    edges = cx.simplices(1)
    mid = points[edges].mean(axis=1) - n / 2
    t = points[edges[:, 1]] - points[edges[:, 0]]
    flow = (np.sin(points[edges[:, 1], 0] / 3) - np.sin(points[edges[:, 0], 0] / 3)
            + 0.1 * (mid[:, 0] * t[:, 1] - mid[:, 1] * t[:, 0]))   # a gradient and a swirl
    hd = topology.hodge_decomposition(cx, flow)
    e = hd.energies
    say(comm, "    Hodge decomposition of an edge flow (%d edges, Betti %s): energies "
        "gradient %.3g + curl %.3g + harmonic %.3g = ||f||^2 %.3g" % (
            len(edges), topology.betti_numbers(cx), e["gradient"], e["curl"], e["harmonic"],
            float(flow @ flow)))


def interop(comm, tmpdir):
    A = gallery.poisson2d(48, comm)
    b = gallery.rhs(A, "random")
    x, full = dmsolve.solve(A, b, method="cg", pc="jacobi", rtol=1e-10)
    path = tmpdir + "/demo.ckpt"
    dmsolve.solve(A, b, method="cg", pc="jacobi", rtol=1e-10, maxiter=20, checkpoint=path,
                  checkpoint_every=10)
    y, rest = dmsolve.solve(A, b, method="cg", pc="jacobi", rtol=1e-10, resume=path)
    lines = ["    checkpoint at iteration 20, resumed: %d iterations in all (uninterrupted %d), "
             "max |x - x_full| %.1e" % (rest.iterations, full.iterations,
                                       np.abs(y.gather() - x.gather()).max())]
    if petsc.petsc4py_available():
        from petsc4py import PETSc     # the optional [petsc] extra: only when installed
        _, info = dmsolve.solve(A, b, method="cg", pc="jacobi", rtol=1e-10, backend="petsc")
        M = petsc.to_petsc(A)
        lines.append("    PETSc %s: KSPCG+PCJACOBI %d iterations (ours %d); to_petsc -> %s %dx%d"
                     % (".".join(map(str, PETSc.Sys.getVersion())), info.iterations,
                        full.iterations, M.getType(), *M.getSize()))
    else:
        lines.append("    petsc4py not installed (make petsc): PETSc interop skipped")
    say(comm, "[7] Checkpoint/restart and PETSc:", *lines)


def names_and_checks(comm, A):
    b = gallery.rhs(A, "random")
    # a bad option is refused at the door, with the same error on every rank
    try:
        preconditioners.make("amg", A, theta=float("nan"))
        message = None
    except ValueError as e:
        message = str(e)
    raised = comm.allreduce(int(message is not None))
    # PyAMG's descriptors and plain keywords build the same hierarchy
    _, kw = dmsolve.solve(A, b, "cg", pc=("amg", {"theta": 0.08, "omega": 4 / 3}), rtol=1e-8)
    _, desc = dmsolve.solve(A, b, "cg", rtol=1e-8, pc=(
        "AMG", {"strength": ("symmetric", {"theta": 0.08}),
                "smooth": ("jacobi", {"omega": 4 / 3}),
                "presmoother": ("Chebyshev", {"degree": 2}), "postsmoother": "CHEBYSHEV"}))
    say(comm, "[8] Names and options: one registry each, one rule (case and -/_ ignored):",
        "    Krylov methods: %s" % ", ".join(METHODS),
        "    preconditioners: %s; smoothers: %s" % (", ".join(dmsolve.PRECONDITIONERS),
                                                   ", ".join(SMOOTHERS)),
        "    make('amg', A, theta=nan) refused on %d of %d ranks: %s" % (raised, comm.size,
                                                                       message),
        "    AMG by descriptor %d iterations, by keywords %d" % (desc.iterations, kw.iterations))


class DropConstraints(dmsolve.Preconditioner):
    """Jacobi on the first ``k`` rows, zero on the others: singular, so a
    method that tests only ``||M r||`` would call any ``x`` converged."""

    name = "drop-constraints"

    def __init__(self, A, k):
        super().__init__(A)
        d = A.diagonal().local
        rows = np.arange(A.row_layout.start, A.row_layout.stop)
        self.inv = np.where(rows < k, 1.0 / np.where(d == 0, 1.0, d), 0.0)
        self._done()

    def _apply(self, r, out):
        np.multiply(self.inv, r, out=out)


class StopEarly(Exception):
    """A user's own exception, raised in a callback on one rank."""


def honest_answers(comm):
    # the saddle point [[L, B^T], [B, 0]]: the last 30 rows have a zero diagonal
    L = gallery.poisson2d(20, comm).to_scipy()
    Bc = sp.random(30, 400, density=0.05, random_state=1, format="csr")
    K = sp.bmat([[L, Bc.T], [Bc, None]], format="csr")
    A = DistCSR.from_global(K, comm)
    rng = np.random.default_rng(3)
    b_np = rng.standard_normal(K.shape[0])
    b = DistVector.from_global(b_np, A.row_layout)
    try:
        preconditioners.make("amg", A)
        refused = None
    except ValueError as e:
        refused = str(e).split(" [")[0]
    n_refused = comm.allreduce(int(refused is not None))
    _, info = dmsolve.gmres(A, b, M=DropConstraints(A, 400), rtol=1e-8, maxiter=200)
    # the same system as scipy objects: distributed, solved, x back as numpy
    x_np, i_sc = dmsolve.solve(K, b_np, "minres", rtol=1e-10, maxiter=5000, comm=comm)
    err = np.abs(x_np - spsolve(K.tocsc(), b_np)).max() / np.abs(x_np).max()

    def callback(xk, calls=[0]):
        calls[0] += 1
        if calls[0] == 3 and comm.rank == comm.size - 1:
            raise StopEarly("stopped by the user at iteration 3")

    try:
        dmsolve.cg(gallery.poisson2d(16, comm), gallery.rhs(gallery.poisson2d(16, comm), "ones"),
                   callback=callback)
        caught = "nothing"
    except StopEarly:
        caught = "StopEarly"
    agreed = comm.allreduce(int(caught == "StopEarly"))
    scipy_line, fault_line = _from_scipy(comm), _fault_before_exchange(comm)
    say(comm, "[9] No silent wrong answers: saddle point [[L, B^T], [B, 0]], %d rows" % K.shape[0],
        "    amg refused on %d of %d ranks: %s" % (n_refused, comm.size, refused),
        "    GMRES + a singular preconditioner: %s, true residual %.2e of ||b||" % (
            info.reason.petsc_name, info.true_residual_norm / np.linalg.norm(b_np)),
        "    solve(scipy K, numpy b, 'minres'): %s in %d iterations, numpy x, error vs "
        "spsolve %.1e" % (i_sc.reason.petsc_name, i_sc.iterations, err),
        "    a callback's StopEarly raised on rank %d only: caught as %s on %d of %d ranks" % (
            comm.size - 1, caught, agreed, comm.size),
        scipy_line, fault_line)


def _from_scipy(comm):
    # scipy's call with dmsolve's method: a scipy matrix, numpy b, a scipy
    # LinearOperator as M (Jacobi), x back as numpy on every rank
    S = gallery.poisson2d(30, comm).to_scipy()
    b = np.ones(S.shape[0])
    inv = 1.0 / S.diagonal()
    M = LinearOperator(S.shape, matvec=lambda r: inv * r.ravel())
    x, info = dmsolve.cg(S, b, M=M, rtol=1e-10)
    x_sc, _ = scipy_cg(S, b, M=M, rtol=1e-10)
    return ("    dmsolve.cg(scipy S, numpy b, M=scipy LinearOperator): %s, numpy x on every rank, "
            "max |x - scipy's x| %.0e" % (info.reason.petsc_name, np.abs(x - x_sc).max()))


def _fault_before_exchange(comm):
    # a user operator that raises on rank 0 before its halo exchange: the
    # neighbours learn of it inside their wait, every rank raises it, and the
    # communicator serves the next solve
    A = gallery.poisson2d(24, comm)
    b = gallery.rhs(A, "random")
    x_ref, _ = dmsolve.cg(A, b, rtol=1e-10)
    calls = [0]

    def matvec(x, out=None):
        calls[0] += 1
        if comm.rank == 0 and calls[0] == 5:
            raise StopEarly("rank 0's operator failed before its halo exchange")
        return A.matvec(x, out=out)

    t = time.perf_counter()
    try:
        dmsolve.cg(dmsolve.DistLinearOperator(A.row_layout, A.col_layout, matvec), b,
                   rtol=1e-10)
        caught = "nothing"
    except StopEarly:
        caught = "StopEarly"
    seconds = comm.allreduce(time.perf_counter() - t, op=MPI.MAX)
    agreed = comm.allreduce(int(caught == "StopEarly"))
    x, _ = dmsolve.cg(A, b, rtol=1e-10)
    same = comm.allreduce(int(np.array_equal(x.local, x_ref.local)), op=MPI.MIN)
    return ("    an operator that raises on rank 0 before its halo exchange: %s on %d of %d "
            "ranks within %.1f s; the next solve gives the same x: %s" % (
                caught, agreed, comm.size, seconds, bool(same)))


def complex_and_scale(comm, tmpdir):
    # a Hermitian system: CG in complex arithmetic with jacobi, against spsolve
    L = gallery.poisson2d(20, comm).to_scipy()
    S = sp.random(400, 400, density=0.01, random_state=2, format="csr")
    H = sp.csr_matrix(L + 0.5 * sp.eye(400) + 0.1j * (S - S.T))     # Hermitian positive definite
    hb = np.exp(1j * np.arange(400) / 7.0)
    x_h, i_h = dmsolve.solve(H, hb, "cg", "jacobi", rtol=1e-10, comm=comm)
    err_h = np.abs(x_h - spsolve(H.tocsc(), hb)).max() / np.abs(x_h).max()
    # the distributed sort: uneven, unsorted pieces in, each rank's fair share out
    rng = np.random.default_rng(comm.rank)
    keys = rng.integers(0, 1000, size=50 + 300 * comm.rank)
    block = dmsolve.bsp.psort(keys, comm)
    everything = np.sort(np.concatenate(comm.allgather(keys)))
    counts = comm.allgather(block.keys.size)
    sorted_ok = comm.allreduce(int(np.array_equal(
        block.keys, everything[block.start:block.start + block.keys.size]))) == comm.size
    # parallel output: one .vtu piece per rank and a small .pvtu index
    grid = topology.Grid((12, 12, 12), comm)
    field = np.sin(np.arange(12 ** 3) / 40.0)
    topology.io.write_pvtu(tmpdir + "/field.pvtu", grid, point_data={"f": field})
    pieces = comm.bcast(len(list(pathlib.Path(tmpdir, "field").glob("*.vtu")))
                        if comm.rank == 0 else None)
    say(comm, "[10] Complex systems and scale-out pieces",
        "    Hermitian 400 x 400, cg + jacobi in complex128: %s in %d iterations, error vs "
        "spsolve %.1e" % (i_h.reason.petsc_name, i_h.iterations, err_h),
        "    psort of %d keys: counts per rank %s, equal to np.sort: %s" % (
            everything.size, counts, sorted_ok),
        "    write_pvtu: %d pieces (one per rank) and an index" % pieces)


def reproducible(comm, n):
    # reproducible=True: exact reductions, every row summed in one canonical
    # order, an AMG hierarchy keyed on global ids; the same bits here, on a
    # METIS partition, and on rank 0 alone
    def run(c, metis=False):
        A = gallery.poisson3d(n, c)
        b = gallery.rhs(A, "random")
        part = metis_partition(A) if metis else None
        if part is not None:
            A, b = redistribute(A, part), redistribute(b, part)
        x, info = dmsolve.solve(A, b, "cg", pc="amg", rtol=1e-8, reproducible=True)
        if part is not None:
            x = redistribute(x, part, inverse=True)
        g = x.gather(root=0)
        digest = None if g is None else hashlib.sha256(g.tobytes()).hexdigest()[:16]
        return digest, info.iterations

    here, metis = run(comm), run(comm, metis=True)
    alone = run(MPI.COMM_SELF) if comm.rank == 0 else None
    _, default = dmsolve.solve(gallery.poisson3d(n, comm), gallery.rhs(
        gallery.poisson3d(n, comm), "random"), "cg", pc="amg", rtol=1e-8)
    say(comm, "[11] Reproducible mode: CG + amg(reproducible=True) on 3D Poisson %d^3 "
        "(default mode: %d iterations)" % (n, default.iterations),
        "    %d ranks: %d iterations, sha256(x) %s; METIS partition %s; 1 rank %s" % (
            comm.size, here[1], here[0], metis[0], alone and alone[0]),
        "    bit-identical on every run: %s" % (here == metis == alone))


def edge_flows(comm):
    # signal processing on a real road network: its traffic flow filtered,
    # denoised and used to infer triangles, each checked against scipy
    data = pathlib.Path(__file__).resolve().parent / "data" / "chicago_sketch"
    e = np.loadtxt(data / "edges.csv", delimiter=",", skiprows=1)
    tris = np.loadtxt(data / "triangles.csv", delimiter=",", skiprows=1, dtype=np.int64)
    edges, flow = e[:, :2].astype(np.int64), e[:, 2]
    cx = topology.SimplicialComplex([edges[comm.rank::comm.size], tris[comm.rank::comm.size]],
                                    comm)
    L_down, L_up = (L.to_scipy() for L in topology.laplacian_parts(cx, 1))
    lowpass = topology.design_filter(cx, 1, lower=lambda lam: 1 / (1 + 0.5 * lam),
                                     upper=lambda lam: 1 / (1 + 0.5 * lam), harmonic=1.0,
                                     order=12)
    y = lowpass.apply(flow).gather()
    x = topology.denoise_flow(cx, flow, 0.5).gather()
    I = sp.identity(len(flow), format="csc")
    ref = spsolve((I + 0.5 * (L_down + L_up)).tocsc(), flow)
    graph = topology.SimplicialComplex([edges[comm.rank::comm.size]], comm)
    new = topology.infer_triangles(graph, flow, 10)
    known = {tuple(t) for t in tris.tolist()}
    say(comm, "[12] Edge flows on the Chicago road network (%d roads, %d triangles)"
        % (len(flow), len(tris)),
        "    denoise_flow (I + 0.5 L1) x = f by CG + amg: error vs scipy %.1e; an order-12 "
        "filter (matvecs only) gives it within %.1e" % (
            np.linalg.norm(x - ref) / np.linalg.norm(ref),
            np.linalg.norm(y - ref) / np.linalg.norm(ref)),
        "    infer_triangles on the bare road graph: the %d 3-cliques of largest circulation "
        "are %d of the network's real triangles" % (len(new), sum(tuple(t) in known
                                                                  for t in new.tolist())))


def out_of_core(comm, tmpdir):
    # a raw float32 field analysed slab by slab on virtual processors, each
    # rank holding one slab and its ghost planes at a time (PEMS2)
    shape = (64, 64, 48)
    path = os.path.join(tmpdir, "field.raw")
    if comm.rank == 0:
        rng = np.random.default_rng(3)
        with open(path, "wb") as f:
            for z in range(shape[2]):           # written plane by plane, never whole
                y, x = np.mgrid[0:shape[1], 0:shape[0]] / 16.0
                plane = np.sin(x) * np.cos(y) + np.sin(z / 9.0) + 0.1 * rng.random(x.shape)
                plane.astype(np.float32).tofile(f)
    comm.Barrier()
    raw = topology.RawField(path, shape)
    ooc = topology.Grid(shape, comm, memory_budget="8MiB", spill_dir=tmpdir)
    mem = topology.Grid(shape, comm)
    field = mem.vertex_values(raw)
    level = 0.5
    cps = [topology.critical_points(g, f).counts() for g, f in ((ooc, raw), (mem, field))]
    # D1 too: the Morse complex's saddle-saddle paths followed slab by slab
    d_ooc = topology.persistence_diagram(ooc, raw).gather()
    d_mem = topology.persistence_diagram(mem, field).gather().raw_pairs
    same = [
        cps[0] == cps[1],
        not d_ooc.missing and all(np.array_equal(d_ooc.raw_pairs[k], d_mem[k]) for k in d_mem),
        np.array_equal(topology.merge_tree(ooc, raw).gather().arcs,
                       topology.merge_tree(mem, field).gather().arcs),
        np.array_equal(topology.connected_components(ooc, raw, level).gather(),
                       topology.connected_components(mem, field, level).gather())]
    say(comm, "[13] Out of core: a %dx%dx%d raw float32 field, memory_budget='8MiB': %d "
        "virtual slabs per rank, one in memory at a time" % (shape + (ooc.virtual,)),
        "    critical points, D0, D1 and D2 pairs, join tree and components of f <= %g equal "
        "to the in-memory run: %s" % (level, " ".join(str(bool(x)) for x in same)),
        "    D1 from V-paths followed across slabs: %d saddle-saddle pairs"
        % int(np.count_nonzero(d_mem["dim"] == 1)))


def _equal_to_gudhi(image, dg, dims: int) -> str:
    """Whether the gathered diagram ``dg`` has gudhi's finite pairs of
    ``CubicalComplex(vertices=image)`` in dimensions 0 .. dims-1."""
    try:
        import gudhi
    except ImportError:
        return "gudhi not installed, not checked"
    cc = gudhi.CubicalComplex(vertices=image)
    cc.compute_persistence(min_persistence=-1.0)
    ok = True
    for d in range(dims):
        ref = np.asarray(cc.persistence_intervals_in_dimension(d)).reshape(-1, 2)
        ref = ref[np.isfinite(ref[:, 1]) & (ref[:, 1] > ref[:, 0])]
        ok &= np.array_equal(dg.finite(d), ref[np.lexsort((ref[:, 1], ref[:, 0]))])
    return str(bool(ok))


def cubical(comm):
    # image data: the grid's cubical complex, filtered as gudhi's and
    # CubicalRipser's CubicalComplex(vertices=...) (the V-construction)
    shape = (40, 36, 32)
    z, y, x = np.meshgrid(*[np.linspace(0, 1, s) for s in shape[::-1]], indexing="ij")
    image = np.sin(7 * x) * np.cos(6 * y) * np.sin(5 * z + 1) \
        + 0.4 * np.random.default_rng(11).random(x.shape)
    grid = topology.Grid(shape, comm, complex="cubical")
    dg = topology.persistence_diagram(grid, image, axes="zyx").gather()
    tri = topology.persistence_diagram(topology.Grid(shape, comm), image, axes="zyx")
    counts = topology.discrete_gradient(grid, image, axes="zyx").critical_counts()
    same = _equal_to_gudhi(image, dg, 3)
    say(comm, "[14] Cubical complexes (image data): Grid(%s, complex='cubical'), a noisy "
        "%dx%dx%d image" % ((shape,) + shape),
        "    pairs D0/D1/D2 %s (on the Freudenthal triangulation: %s); equal to gudhi's "
        "CubicalComplex(vertices=...): %s" % (
            "/".join(str(dg.report[d]["nonzero"]) for d in range(3)),
            "/".join(str(tri.report[d]["nonzero"]) for d in range(3)), same),
        "    discrete gradient: critical cells %s, Euler characteristic %d (a box: 1)"
        % ("/".join(map(str, counts)), sum((-1) ** k * c for k, c in enumerate(counts))))


def images(comm):
    # a 2-D image straight from numpy: its cubical persistence, as gudhi's
    # CubicalComplex(vertices=image) and CubicalRipser's computePH(image)
    try:
        from skimage import data
        image, name = data.camera().astype(float), "scikit-image's camera (512x512)"
    except ImportError:
        y, x = np.mgrid[0:1:256j, 0:1:256j]
        image = np.sin(9 * x) * np.cos(7 * y) + 0.3 * np.random.default_rng(5).random(x.shape)
        name = "a noisy 256x256 image"
    t = time.perf_counter()
    dg = topology.image_persistence(image, comm)
    seconds = comm.allreduce(time.perf_counter() - t, op=MPI.MAX)
    dg = dg.gather()
    same = _equal_to_gudhi(image, dg, 2)
    say(comm, "[15] Images: topology.image_persistence(image, comm) of %s" % name,
        "    pairs D0/D1 %s in %.3f s; equal to gudhi's CubicalComplex(vertices=image): %s"
        % ("/".join(str(dg.report[d]["nonzero"]) for d in range(2)), seconds, same))


def _ring_overlap(comm) -> bool:
    # a task graph: a ring exchange (MPI requests as a task) beside local
    # work, and a task that needs both
    left, right = (comm.rank - 1) % comm.size, (comm.rank + 1) % comm.size
    send, recv, got = np.full(8, float(comm.rank)), np.empty(8), {}
    g = TaskGraph("ring")
    ring = g.request(lambda: [comm.Irecv(recv, source=left, tag=16),
                              comm.Isend(send, dest=right, tag=16)])
    work = g.task(lambda: got.__setitem__("sum", float(np.arange(10.0 ** 6).sum())))
    g.task(lambda: got.__setitem__("left", recv[0])).succeed(ring, work)
    Executor(threads=2).run(g)
    return comm.allreduce(got["left"] == left and got["sum"] == 499999500000.0, op=MPI.LAND)


def threads_section(comm):
    # threads inside a rank: each rank runs its kernels on 2 threads; the
    # products, the diagram and the iterations do not change
    # big enough for two blocks of rows per rank at 2 ranks
    A = gallery.poisson3d(48, comm)
    x = gallery.rhs(A, "random", seed=3)
    y1, y2 = A.create_vectors()[1], A.create_vectors()[1]
    with dmsolve.threads.using(1):
        A.matvec(x, y1)
    with dmsolve.threads.using(2):
        A.matvec(x, y2)
    same_product = comm.allreduce(np.array_equal(y1.local, y2.local), op=MPI.LAND)
    _, one = dmsolve.solve(A, x, "cg", pc="amg", rtol=1e-8, threads=1)
    _, two = dmsolve.solve(A, x, "cg", pc="amg", rtol=1e-8, threads=2)
    field = np.random.default_rng(16).random((48, 48, 48))
    grid = topology.Grid(field.shape, comm, complex="cubical")
    with dmsolve.threads.using(1):
        d1 = topology.persistence_diagram(grid, field, axes="zyx").gather()
    with dmsolve.threads.using(2):
        d2 = topology.persistence_diagram(grid, field, axes="zyx").gather()
    same_pairs = comm.rank != 0 or all(np.array_equal(d1.pairs[k], d2.pairs[k])
                                       for k in d1.pairs)
    same_pairs = comm.allreduce(bool(same_pairs), op=MPI.LAND)
    say(comm, "[16] Threads inside a rank: dmsolve.set_num_threads(k), DMSOLVE_NUM_THREADS "
        "or threads=k (here 2 per rank)",
        "    matvec: the same bits at 2 threads as at 1: %s; CG + amg: %d iterations at 1 "
        "thread, %d at 2" % (same_product, one.iterations, two.iterations),
        "    cubical persistence of a random 48^3 field: the same pairs at 2 threads: %s; "
        "a task graph overlapped a ring exchange with local work: %s"
        % (same_pairs, _ring_overlap(comm)))


def main(comm: MPI.Comm, argv=None) -> None:
    """Run every section; ``argv`` is an argv list (``None``: the command line).
    Collective on ``comm``."""
    opts = parse_args(argv)
    t0 = time.perf_counter()
    say(comm, "dmsolve %s demo on %d ranks" % (dmsolve.__version__, comm.size))
    A = distributed_data(comm, opts.n)
    bsp_layer(comm)
    krylov(comm)
    preconditioning(comm, A)
    indefinite(comm)
    topology_section(comm)
    tmpdir = comm.bcast(tempfile.mkdtemp(prefix="dmsolve-demo-") if comm.rank == 0 else None)
    try:
        interop(comm, tmpdir)
        names_and_checks(comm, A)
        honest_answers(comm)
        complex_and_scale(comm, tmpdir)
        reproducible(comm, max(opts.n, 12))
        edge_flows(comm)
        out_of_core(comm, tmpdir)
        cubical(comm)
        images(comm)
        threads_section(comm)
    finally:
        comm.Barrier()
        if comm.rank == 0:
            shutil.rmtree(tmpdir, ignore_errors=True)
    say(comm, "done in %.1f s" % (time.perf_counter() - t0))


if __name__ == "__main__":
    main(MPI.COMM_WORLD)

# Things to try
# -------------
# - ``mpiexec -n 4 python -m mpi4py examples/demo.py --n 40``: a larger grid on
#   more ranks; every check still passes and the iteration counts barely move.
# - ``python -m dmsolve solve --problem poisson3d --n 48 --pc amg --monitor``:
#   the command line behind the Krylov and AMG sections.
# - ``mpiexec -n 3 python -m mpi4py examples/bsp_components.py``: the BSP
#   section's connected components on a graph of 100000 vertices.
