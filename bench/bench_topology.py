"""Topology benchmarks: critical points of an n^3 field, components against
scipy.sparse.csgraph, Hodge decomposition of a triangulated m x m grid flow.

    mpiexec -n 2 python -m mpi4py bench/bench_topology.py --n 256 --m 1000

Critical points include the global (value, id) sample sort; they are timed
on all ranks, then on one rank (COMM_SELF on rank 0, after the parallel run,
so the parallel peak RSS is read first). Components are timed on one rank
against csgraph on the same edge list. The Hodge run reports the time of each
stage (complex, boundary matrices and Laplacians, orientation, AMG set-up, CG
solves), the iteration counts of both systems and the orthogonality of the
three parts relative to ``||f||^2``; ``--compare-orient`` also solves the curl
system in sorted-vertex orientation for the before/after ratio. Peak resident
memory is reported per rank (it includes every phase before it is read, so
run the phases separately with --only for a per-phase figure).
"""

from __future__ import annotations

import sys
import time

import numpy as np
from mpi4py import MPI

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _common import bench_parser, grid_triangles, peak_rss_mb, run  # noqa: E402

from dmsolve import DistVector  # noqa: E402
from topology import (Grid, SimplicialComplex, connected_components, critical_points,  # noqa: E402
                      hodge_decomposition)


def _timed(comm, fn):
    """``(result, wall seconds)``; the slowest rank's process CPU seconds of
    the last call are kept in ``_CPU[0]``. On a shared machine the CPU time
    is the better guess of the wall time on an idle one (MPI waits poll, so
    on an idle machine the two agree)."""
    comm.Barrier()
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    c = time.process_time() - c
    comm.Barrier()
    _CPU[0] = comm.allreduce(c, op=MPI.MAX)
    return out, time.perf_counter() - t


_CPU = [0.0]


def bench_critical(comm, n: int) -> dict:
    grid = Grid((n, n, n), comm)
    lay = grid.vertex_layout
    xyz = grid.coordinates(np.arange(lay.start, lay.stop)).astype(np.float64) / n
    f = (np.sin(6.1 * xyz[:, 0]) * np.cos(5.3 * xyz[:, 1]) * np.sin(4.7 * xyz[:, 2] + 1)
         + 0.01 * np.cos(37 * xyz.sum(axis=1)))
    del xyz
    cp, t = _timed(comm, lambda: critical_points(grid, DistVector(lay, f)))
    return {"n": n, "ranks": comm.Get_size(), "seconds": t, "cpu_s": _CPU[0],
            "counts": cp.counts(),
            "peak_rss_mb_per_rank": comm.allgather(peak_rss_mb())}


def bench_critical_serial(comm, n: int) -> dict:
    """The same field on one rank (COMM_SELF on rank 0), broadcast."""
    out = bench_critical(MPI.COMM_SELF, n) if comm.Get_rank() == 0 else None
    return comm.bcast(out, root=0)


def bench_components(comm, n: int) -> dict | None:
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components as cc
    out = None
    if comm.Get_rank() == 0:
        self_comm = MPI.COMM_SELF
        grid = Grid((n, n, n), self_comm)
        f = np.random.default_rng(0).random(n ** 3)
        t0 = time.perf_counter()
        lab = connected_components(grid, f, 0.5).gather()
        t_ours = time.perf_counter() - t0
        heads, tails = grid.local_edges()
        keep = (f[heads] <= 0.5) & (f[tails] <= 0.5)
        t0 = time.perf_counter()
        g = coo_matrix((np.ones(int(keep.sum()), np.int8), (heads[keep], tails[keep])),
                       shape=(n ** 3, n ** 3))
        ncomp, _ = cc(g, directed=False)
        t_scipy = time.perf_counter() - t0
        out = {"n": n, "ours_s": t_ours, "scipy_s": t_scipy, "ratio": t_ours / t_scipy,
               "components": int(np.unique(lab[lab >= 0]).size)}
    return comm.bcast(out, root=0)


def _warm_up(comm, pc: str) -> None:
    """One tiny decomposition, so imports and first calls are not timed."""
    tris = np.array([[0, 1, 3], [1, 3, 4], [1, 2, 4], [2, 4, 5]])
    hodge_decomposition(SimplicialComplex([tris[comm.rank::comm.size]], comm),
                        np.arange(9.0), pc=pc)


def bench_hodge(comm, m: int, pc: str, rtol: float, compare: bool) -> dict:
    from dmsolve.krylov import cg
    from topology.signals import _hodge as H
    from topology.persistence import connected_components as components

    # each rank builds its share of the triangles of an m x m grid
    tris = grid_triangles(comm, m)
    cx, t_build = _timed(comm, lambda: SimplicialComplex([tris], comm))
    lay = cx.simplex_layout(1)
    rows, gids = cx.local_simplices(1)
    own = rows[cx.owned_slice(1)]
    px, py = own % m / m, own // m / m
    flow = (np.sin(3 * px[:, 1]) - np.sin(3 * px[:, 0]) + (py[:, 1] - py[:, 0]) * px[:, 0]
            + 0.1 * np.cos(17 * own.sum(axis=1)))
    f = DistVector(lay, flow)
    _warm_up(comm, pc)
    hd, t_solve = _timed(comm, lambda: hodge_decomposition(cx, f, rtol=rtol, pc=pc))
    cpu_solve = _CPU[0]
    g, cu, h = hd.gradient, hd.curl, hd.harmonic
    nf2 = hd.energies["total"]
    e = hd.energies
    out = {"m": m, "edges": lay.global_size, "rtol": rtol, "build_s": t_build,
           "solve_s": t_solve, "solve_cpu_s": cpu_solve,
           "iterations": {k: int(v.iterations) for k, v in hd.infos.items()},
           "energies": {k: float(v) for k, v in e.items()},
           "orthogonality": {"grad.curl": abs(g.dot(cu)) / nf2, "grad.harm": abs(g.dot(h)) / nf2,
                             "curl.harm": abs(cu.dot(h)) / nf2},
           "energy_sum_rel_error": abs(e["gradient"] + e["curl"] + e["harmonic"] - nf2) / nf2,
           "peak_rss_mb_per_rank": comm.allgather(peak_rss_mb())}
    # the same work again, stage by stage (the decomposition above is the timed figure)
    st = out["stages_s"] = {}

    def stage(name, fn):
        r, st[name] = _timed(comm, fn)
        return r

    B1 = stage("B1", lambda: H.boundary_matrix(cx, 1))
    L0 = stage("L0", lambda: H._laplacian0(cx))
    ns = stage("components", lambda: H._component_nullspace(cx, components(cx), 32))
    M0 = stage("amg_setup_L0", lambda: H._make_pc(pc, L0))
    stage("cg_L0", lambda: cg(L0, B1.matvec(f), rtol=rtol, M=M0, nullspace=ns or None))
    S = stage("orientation", lambda: H.coherent_orientation_signs(cx))
    B2 = stage("B2", lambda: H._boundary(cx, 2, S))
    L2 = stage("L2", lambda: H._laplacian(cx, 2, "down", S))
    M2 = stage("amg_setup_L2", lambda: H._make_pc(pc, L2))
    stage("cg_L2", lambda: cg(L2, B2.rmatvec(f), rtol=rtol, M=M2))
    if compare:
        # before: the curl system in sorted-vertex orientation
        hd0, t0 = _timed(comm, lambda: hodge_decomposition(cx, f, rtol=rtol, pc=pc,
                                                           orient=False))
        out["unoriented"] = {"solve_s": t0, "solve_cpu_s": _CPU[0], "speedup": t0 / t_solve,
                             "iterations": {k: int(v.iterations) for k, v in hd0.infos.items()}}
    return out


def main(comm: MPI.Comm, args) -> dict:
    size = comm.Get_size()
    res = {"ranks": size}
    only = set(args.only.split(",")) if args.only else {"critical", "components", "hodge"}
    lines, notes = [], []
    rss = (lambda r: ", ".join("%.0f" % v for v in r["peak_rss_mb_per_rank"]))
    if "critical" in only:
        r = res["critical"] = bench_critical(comm, args.n)
        runs = [r]
        if size > 1:
            runs.insert(0, bench_critical_serial(comm, args.n))
            res["critical_1rank"] = runs[0]
        for q in runs:
            lines.append("| critical points %d^3 (incl. global order) | %d | %.2f s (CPU %.2f s) "
                         "| %s MiB |" % (args.n, q["ranks"], q["seconds"], q["cpu_s"], rss(q)))
        if size > 1:
            lines[-1] = lines[-1][:-2] + " (speed-up over 1 rank %.2f) |" % (
                runs[0]["seconds"] / r["seconds"])
        ok = r["seconds"] < 10 and max(r["peak_rss_mb_per_rank"]) < 2048
        notes.append("Critical points %d^3 at %d ranks: %.2f s, peak %.0f MiB per rank "
                     "(targets < 10 s at 2 ranks and < 2 GB per rank: %s)."
                     % (args.n, size, r["seconds"], max(r["peak_rss_mb_per_rank"]),
                        "met" if ok else "missed"))
    if "components" in only:
        r = res["components"] = bench_components(comm, args.nc)
        lines.append("| sublevel components %d^3 vs csgraph | 1 | %.2f s vs %.2f s (ratio %.1f) | |"
                     % (args.nc, r["ours_s"], r["scipy_s"], r["ratio"]))
    if "hodge" in only:
        r = res["hodge"] = bench_hodge(comm, args.m, args.pc, args.rtol, args.compare_orient)
        its = r["iterations"]
        lines.append("| Hodge decomposition %dx%d grid (%d edges, CG+%s to rtol %g, iterations "
                     "gradient %d / curl %d) | %d | build %.1f s + solve %.1f s (CPU %.1f s) "
                     "| %s MiB |" % (args.m, args.m, r["edges"], args.pc, args.rtol,
                                     its["gradient"], its["curl"], size, r["build_s"],
                                     r["solve_s"], r["solve_cpu_s"], rss(r)))
        if "unoriented" in r:
            u = r["unoriented"]
            lines.append("| same, curl system in sorted-vertex orientation (iterations %d / %d) "
                         "| %d | solve %.1f s (CPU %.1f s; oriented is %.1fx faster) | |"
                         % (u["iterations"]["gradient"], u["iterations"]["curl"], size,
                            u["solve_s"], u["solve_cpu_s"], u["speedup"]))
        orth = max(r["orthogonality"].values())
        notes.append("Hodge decomposition at %d ranks: %.1f s (target < 60 s: %s); parts "
                     "orthogonal to %.1e of ||f||^2, energies sum to ||f||^2 within %.1e "
                     "(required 1e-8)." % (size, r["solve_s"],
                                           "met" if r["solve_s"] < 60 else "missed", orth,
                                           r["energy_sum_rel_error"]))
    if comm.Get_rank() == 0:
        res["markdown"] = "\n".join(["| benchmark | ranks | time | peak RSS per rank |",
                                     "|---|---|---|---|"] + lines + [""] + notes)
        print(res["markdown"])
    else:
        res["markdown"] = ""
    return res


if __name__ == "__main__":
    p = bench_parser(__doc__)
    p.add_argument("--n", type=int, default=256, help="critical points grid n^3")
    p.add_argument("--nc", type=int, default=128, help="components grid n^3 (1 rank)")
    p.add_argument("--m", type=int, default=1000, help="Hodge grid m x m")
    p.add_argument("--pc", default="amg")
    p.add_argument("--rtol", type=float, default=1e-8, help="Hodge CG tolerance")
    p.add_argument("--compare-orient", action="store_true",
                   help="also time the curl solve without the coherent orientation")
    p.add_argument("--only", default="", help="comma list: critical,components,hodge")
    run(main, p)
