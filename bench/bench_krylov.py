"""Krylov solvers: dmsolve CG/GMRES against scipy's in the same run, rank speed-up,
pipelined CG against CG.

    mpiexec -n 2 python -m mpi4py bench/bench_krylov.py --n 512

All solves run a fixed number of iterations (``rtol=0``-like, ``maxiter``
fixed) on the 2D Poisson matrix, so times per iteration compare like with
like. Measured in one process tree: scipy ``cg``/``gmres`` and dmsolve on
rank 0 alone (COMM_SELF), then dmsolve ``cg``, ``pipecg`` and ``gmres`` on all
ranks. Prints a markdown table and the JSON on rank 0.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import scipy.sparse.linalg as spla
from mpi4py import MPI

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _common import bench_parser, best_time, run  # noqa: E402

import dmsolve  # noqa: E402
import dmsolve.gallery  # noqa: E402
from dmsolve import DistVector  # noqa: E402

TINY = 1e-300          # a tolerance no solve reaches: the iteration count is fixed


def _scipy_gmres_per_iter(Ag, bg, restart, cycles, repeats):
    inner = [0]

    def count(_):
        inner[0] += 1

    def run():
        inner[0] = 0
        spla.gmres(Ag, bg, rtol=TINY, atol=0.0, restart=restart, maxiter=cycles,
                   callback=count, callback_type="pr_norm")
    t = best_time(run, repeats)
    return t / max(inner[0], 1), inner[0]


def _dm_per_iter(method, A, b, iters, repeats, comm, **kw):
    out = {}

    def run():
        _, info = getattr(dmsolve, method)(A, b, rtol=TINY, atol=0.0, maxiter=iters,
                                           divtol=None, **kw)
        out["info"] = info
    t = best_time(run, repeats, comm=comm)
    info = out["info"]
    return t / max(info.iterations, 1), info


def main(comm: MPI.Comm, args) -> dict:
    rank, size = comm.Get_rank(), comm.Get_size()
    res: dict = {"problem": "poisson2d", "n": args.n, "ranks": size,
                 "cg_iterations": args.iters, "gmres_restart": args.restart}
    # -- 1 rank: scipy and dmsolve on the same matrix -------------------------------
    if rank == 0:
        A1 = dmsolve.gallery.poisson2d(args.n, MPI.COMM_SELF)
        Ag = A1.to_scipy()
        res["rows"], res["nnz"] = int(Ag.shape[0]), int(Ag.nnz)
        bg = np.random.default_rng(0).standard_normal(Ag.shape[0])
        b1 = DistVector.from_global(bg, A1.row_layout)

        t = best_time(lambda: spla.cg(Ag, bg, rtol=TINY, atol=0.0, maxiter=args.iters),
                      args.repeats)
        res["scipy_cg_ms"] = 1e3 * t / args.iters
        res["dm1_cg_ms"] = 1e3 * _dm_per_iter("cg", A1, b1, args.iters, args.repeats,
                                              None)[0]
        res["dm1_pipecg_ms"] = 1e3 * _dm_per_iter("pipecg", A1, b1, args.iters,
                                                  args.repeats, None)[0]
        cycles = args.gmres_iters // args.restart
        tg, inner = _scipy_gmres_per_iter(Ag, bg, args.restart, cycles, args.repeats)
        res["scipy_gmres_ms"], res["gmres_iterations"] = 1e3 * tg, inner
        for orth in ("cgs", "cgs2", "mgs"):
            res["dm1_gmres_%s_ms" % orth] = 1e3 * _dm_per_iter(
                "gmres", A1, b1, inner, args.repeats, None, restart=args.restart,
                orthog=orth)[0]
    res = comm.bcast(res, root=0)

    # -- all ranks ---------------------------------------------------------------------
    A = dmsolve.gallery.poisson2d(args.n, comm)
    bg = np.random.default_rng(0).standard_normal(A.shape[0])
    b = DistVector.from_global(bg, A.row_layout)
    for method, kw, iters in (("cg", {}, args.iters), ("pipecg", {}, args.iters),
                              ("gmres", {"restart": args.restart}, res["gmres_iterations"])):
        t, info = _dm_per_iter(method, A, b, iters, args.repeats, comm, **kw)
        res["dmp_%s_ms" % method] = 1e3 * t
        res["dmp_%s_reductions_per_iter" % method] = info.reductions / info.iterations

    if rank == 0:
        r = res
        rows = [
            ("CG", r["scipy_cg_ms"], r["dm1_cg_ms"], r["dmp_cg_ms"]),
            ("pipelined CG", r["scipy_cg_ms"], r["dm1_pipecg_ms"], r["dmp_pipecg_ms"]),
            ("GMRES(%d), CGS (default)" % args.restart, r["scipy_gmres_ms"],
             r["dm1_gmres_cgs_ms"], r["dmp_gmres_ms"]),
            ("GMRES(%d), CGS2" % args.restart, r["scipy_gmres_ms"], r["dm1_gmres_cgs2_ms"],
             float("nan")),
            ("GMRES(%d), MGS" % args.restart, r["scipy_gmres_ms"], r["dm1_gmres_mgs_ms"],
             float("nan")),
        ]
        lines = [
            "2D Poisson %d^2 (%d rows, %d nonzeros), fixed iteration counts (CG %d, "
            "GMRES %d); ms per iteration, best of %d." % (
                args.n, r["rows"], r["nnz"], args.iters, r["gmres_iterations"], args.repeats),
            "",
            "| method | scipy | dmsolve 1 rank | ratio to scipy | dmsolve %d ranks | "
            "speed-up over 1 rank |" % size,
            "|---|---|---|---|---|---|",
        ]
        for name, sc, d1, dp in rows:
            lines.append("| %s | %.3f | %.3f | %.2fx | %s | %s |" % (
                name, sc, d1, d1 / sc, "-" if np.isnan(dp) else "%.3f" % dp,
                "-" if np.isnan(dp) else "%.2fx" % (d1 / dp)))
        lines += ["", "Pipelined CG against CG at %d ranks: %.2fx the time per iteration; "
                  "global reductions per iteration: CG %.2f, pipelined CG %.2f, "
                  "GMRES %.2f (totals include set-up)." % (
                      size, r["dmp_pipecg_ms"] / r["dmp_cg_ms"],
                      r["dmp_cg_reductions_per_iter"], r["dmp_pipecg_reductions_per_iter"],
                      r["dmp_gmres_reductions_per_iter"])]
        r["markdown"] = "\n".join(lines)
        print(r["markdown"])
        print(json.dumps({k: v for k, v in r.items() if k != "markdown"}, default=float))
    return res


if __name__ == "__main__":
    p = bench_parser(__doc__)
    p.add_argument("--n", type=int, default=512, help="grid points per side")
    p.add_argument("--iters", type=int, default=200, help="CG iterations")
    p.add_argument("--gmres-iters", type=int, default=120, help="GMRES iterations")
    p.add_argument("--restart", type=int, default=30)
    p.add_argument("--repeats", type=int, default=3)
    run(main, p)
