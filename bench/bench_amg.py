"""Smoothed-aggregation AMG: dmsolve's ``amg`` against PyAMG in the same run.

    mpiexec -n 2 python -m mpi4py bench/bench_amg.py --json out.json

For each problem: PyAMG's ``smoothed_aggregation_solver`` + CG and our
``amg`` + ``dmsolve.krylov.cg`` on one rank (COMM_SELF on rank 0), then our
``amg`` on all ranks; to rtol 1e-8 from a random right-hand side. Reports
iterations, operator/grid complexity, set-up and solve seconds, the bytes of
the hierarchy (matrices, prolongators, coarse inverse), and the ratios to
PyAMG and to our one-rank run.
"""

from __future__ import annotations

import sys
import time

import numpy as np
from mpi4py import MPI

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _common import bench_parser, run  # noqa: E402

import dmsolve.gallery as gallery  # noqa: E402
import preconditioners  # noqa: E402
from dmsolve.krylov import cg  # noqa: E402

PROBLEMS = {"poisson2d": gallery.poisson2d, "poisson3d": gallery.poisson3d}


def _ours(A, repeats: int):
    comm = A.comm
    b = gallery.rhs(A, "random")
    best_setup, best_solve = np.inf, np.inf
    for _ in range(repeats):
        comm.Barrier()
        t0 = time.perf_counter()
        M = preconditioners.make("amg", A)
        t1 = time.perf_counter()
        x, info = cg(A, b, rtol=1e-8, M=M, maxiter=200)
        t2 = time.perf_counter()
        best_setup = min(best_setup, comm.allreduce(t1 - t0, op=MPI.MAX))
        best_solve = min(best_solve, comm.allreduce(t2 - t1, op=MPI.MAX))
    d = M.describe()
    return {"iterations": info.iterations, "op_complexity": d["operator_complexity"],
            "grid_complexity": d["grid_complexity"], "setup_s": best_setup,
            "solve_s": best_solve, "hierarchy_mb": d["hierarchy_bytes_max_rank"] / 2**20,
            "levels": len(d["levels"])}


def _pyamg(S, b, repeats: int):
    import pyamg
    best_setup, best_solve = np.inf, np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        ml = pyamg.smoothed_aggregation_solver(S, max_coarse=10)
        t1 = time.perf_counter()
        res = []
        ml.solve(b, tol=1e-8, accel="cg", residuals=res, maxiter=200)
        t2 = time.perf_counter()
        best_setup, best_solve = min(best_setup, t1 - t0), min(best_solve, t2 - t1)
    nbytes = 0
    for lv in ml.levels:
        for name in ("A", "P", "R"):
            M = getattr(lv, name, None)
            if M is not None:
                nbytes += M.data.nbytes + M.indices.nbytes + M.indptr.nbytes
    return {"iterations": len(res) - 1, "op_complexity": ml.operator_complexity(),
            "grid_complexity": ml.grid_complexity(), "setup_s": best_setup,
            "solve_s": best_solve, "hierarchy_mb": nbytes / 2**20, "levels": len(ml.levels)}


def main(comm: MPI.Comm, args) -> dict:
    rank, size = comm.Get_rank(), comm.Get_size()
    results = {"ranks": size, "cases": []}
    rows = []
    for spec in args.problems:
        kind, n = spec.rsplit("-", 1)
        n = int(n)
        case = {"problem": spec}
        if rank == 0:
            A1 = PROBLEMS[kind](n, MPI.COMM_SELF)
            S = A1.to_scipy()
            b = gallery.rhs(A1, "random").local.copy()
            case["pyamg"] = _pyamg(S, b, args.repeats)
            case["ours_1"] = _ours(A1, args.repeats)
            del A1, S
        comm.Barrier()
        A = PROBLEMS[kind](n, comm)
        case["ours_p"] = _ours(A, args.repeats)
        results["cases"].append(case)
        if rank == 0:
            p, o, q = case["pyamg"], case["ours_1"], case["ours_p"]
            rows.append("| %s | %d / %d / %d | %.2f / %.2f | %.2f / %.2f | %.2f | %.2f | %.2f | "
                        "%.2f s / %.2f s | %.2f | %.2f |" % (
                            spec, p["iterations"], o["iterations"], q["iterations"],
                            p["op_complexity"], o["op_complexity"],
                            p["grid_complexity"], o["grid_complexity"],
                            o["setup_s"] / p["setup_s"], o["solve_s"] / p["solve_s"],
                            o["hierarchy_mb"] / p["hierarchy_mb"],
                            o["setup_s"], o["solve_s"],
                            q["setup_s"] / o["setup_s"], q["solve_s"] / o["solve_s"]))
    if rank == 0:
        results["markdown"] = "\n".join([
            "SA-AMG + CG to rtol 1e-8, random b; ours at 1 rank vs PyAMG %s (serial), and "
            "ours at %d ranks vs ours at 1 rank. Best of %d." % (
                __import__("pyamg").__version__, size, args.repeats),
            "",
            "| problem | iterations pyamg / ours 1 / ours %d | op. complexity pyamg / ours "
            "| grid complexity pyamg / ours | setup ours/pyamg (<= 1.5) | solve ours/pyamg "
            "(<= 1.2) | hierarchy bytes ours/pyamg (<= 1.5) | ours 1 rank setup / solve "
            "| %d ranks / 1 rank setup | %d ranks / 1 rank solve |" % (size, size, size),
            "|---|---|---|---|---|---|---|---|---|---|",
        ] + rows)
        print(results["markdown"])
    return results


if __name__ == "__main__":
    p = bench_parser(__doc__)
    p.add_argument("--problems", nargs="+", default=["poisson2d-256", "poisson2d-512",
                                                     "poisson3d-32", "poisson3d-64"])
    p.add_argument("--repeats", type=int, default=3)
    run(main, p)
