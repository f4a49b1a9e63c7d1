"""Topology benchmarks: critical points of an n^3 field, components against
scipy.sparse.csgraph, Hodge decomposition of a triangulated m x m grid flow.

    mpiexec -n 2 python -m mpi4py bench/bench_topology.py --n 256 --m 1000

Critical points include the global (value, id) sample sort. Components are
timed on one rank (COMM_SELF on rank 0) against csgraph on the same edge list.
Peak resident memory is reported per rank (it includes every phase before it
is read, so run the phases separately with --only for a per-phase figure).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from mpi4py import MPI

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _common import peak_rss_mb, write_json  # noqa: E402

from dmsolve import DistVector  # noqa: E402
from topology import (Grid, SimplicialComplex, connected_components, critical_points,  # noqa: E402
                      hodge_decomposition)


def _timed(comm, fn):
    comm.Barrier()
    t = time.perf_counter()
    out = fn()
    comm.Barrier()
    return out, time.perf_counter() - t


def bench_critical(comm, n: int) -> dict:
    grid = Grid((n, n, n), comm)
    lay = grid.vertex_layout
    xyz = grid.coordinates(np.arange(lay.start, lay.stop)).astype(np.float64) / n
    f = (np.sin(6.1 * xyz[:, 0]) * np.cos(5.3 * xyz[:, 1]) * np.sin(4.7 * xyz[:, 2] + 1)
         + 0.01 * np.cos(37 * xyz.sum(axis=1)))
    del xyz
    cp, t = _timed(comm, lambda: critical_points(grid, DistVector(lay, f)))
    return {"n": n, "seconds": t, "counts": cp.counts(),
            "peak_rss_mb_per_rank": comm.gather(peak_rss_mb(), root=0)}


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


def bench_hodge(comm, m: int, pc: str) -> dict:
    # each rank builds its share of the triangles of an m x m grid
    ntri = 2 * (m - 1) ** 2
    lo, hi = ntri * comm.rank // comm.size, ntri * (comm.rank + 1) // comm.size
    t = np.arange(lo, hi)
    cell, half = t // 2, t % 2
    x, y = cell % (m - 1), cell // (m - 1)
    a, b, c, d = x + y * m, x + 1 + y * m, x + (y + 1) * m, x + 1 + (y + 1) * m
    tris = np.where(half[:, None] == 0, np.stack((a, b, c), 1), np.stack((b, d, c), 1))
    cx, t_build = _timed(comm, lambda: SimplicialComplex([tris], comm))
    lay = cx.simplex_layout(1)
    rows, gids = cx.local_simplices(1)
    own = rows[cx.owned_slice(1)]
    px, py = own % m / m, own // m / m
    flow = (np.sin(3 * px[:, 1]) - np.sin(3 * px[:, 0]) + (py[:, 1] - py[:, 0]) * px[:, 0]
            + 0.1 * np.cos(17 * own.sum(axis=1)))
    hd, t_solve = _timed(comm, lambda: hodge_decomposition(cx, DistVector(lay, flow),
                                                           rtol=1e-8, pc=pc))
    return {"m": m, "edges": lay.global_size, "build_s": t_build, "solve_s": t_solve,
            "iterations": {k: int(v.iterations) for k, v in hd.infos.items()},
            "energies": {k: float(v) for k, v in hd.energies.items()},
            "peak_rss_mb_per_rank": comm.gather(peak_rss_mb(), root=0)}


def main(comm: MPI.Comm, args) -> dict:
    size = comm.Get_size()
    res = {"ranks": size}
    only = set(args.only.split(",")) if args.only else {"critical", "components", "hodge"}
    lines = []
    if "critical" in only:
        r = res["critical"] = bench_critical(comm, args.n)
        lines.append("| critical points %d^3 (incl. global order) | %d | %.2f s | %s MiB |"
                     % (args.n, size, r["seconds"],
                        ", ".join("%.0f" % v for v in r["peak_rss_mb_per_rank"] or [])))
    if "components" in only:
        r = res["components"] = bench_components(comm, args.nc)
        lines.append("| sublevel components %d^3 vs csgraph | 1 | %.2f s vs %.2f s (ratio %.1f) | |"
                     % (args.nc, r["ours_s"], r["scipy_s"], r["ratio"]))
    if "hodge" in only:
        r = res["hodge"] = bench_hodge(comm, args.m, args.pc)
        lines.append("| Hodge decomposition %dx%d grid (%d edges, CG+%s, its %s) | %d | "
                     "build %.1f s + solve %.1f s | %s MiB |"
                     % (args.m, args.m, r["edges"], args.pc, r["iterations"], size,
                        r["build_s"], r["solve_s"],
                        ", ".join("%.0f" % v for v in r["peak_rss_mb_per_rank"] or [])))
    if comm.Get_rank() == 0:
        res["markdown"] = "\n".join(["| benchmark | ranks | time | peak RSS per rank |",
                                     "|---|---|---|---|"] + lines)
        print(res["markdown"])
    else:
        res["markdown"] = ""
    return res


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=256, help="critical points grid n^3")
    p.add_argument("--nc", type=int, default=128, help="components grid n^3 (1 rank)")
    p.add_argument("--m", type=int, default=1000, help="Hodge grid m x m")
    p.add_argument("--pc", default="amg")
    p.add_argument("--only", default="", help="comma list: critical,components,hodge")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    res = main(MPI.COMM_WORLD, args)
    if MPI.COMM_WORLD.Get_rank() == 0:
        write_json(args.json, res)
