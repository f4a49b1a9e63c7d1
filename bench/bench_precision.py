"""Mixed precision: amg, cheby, jacobi and bjacobi with ``precision="single"``
against their float64 selves on the gallery problems.

    mpiexec -n 2 python -m mpi4py bench/bench_precision.py --json out/bench/precision.json

For each symmetric positive definite gallery problem and preconditioner, CG
to rtol 1e-8 (zero initial guess, random right-hand side) with the
preconditioner's data in float64 and in float32: iterations, the
true relative residual computed in float64, set-up and solve seconds
(slowest rank, best of ``--repeats``) and the bytes of the preconditioner's
data on the busiest rank (amg: the hierarchy; cheby: the matrix and diagonal
its recurrence reads, the caller's ``A`` in float64 and its own float32
copy in single; jacobi: the inverse diagonal; bjacobi: the ILU(0) factors).
A float32 preconditioner would become the default only where it takes at
most one iteration more on every problem (and, to be worth it, is not slower).
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

MAXITER = 5000
PROBLEMS = ["poisson3d-100", "poisson3d-64", "poisson2d-1000", "anisotropic2d-500",
            "shifted3d-64", "random-spd-100000"]


def _problem(spec, comm):
    kind, n = spec.rsplit("-", 1)
    return gallery.PROBLEMS[kind](int(n), comm)


#: The preconditioners compared, with their options.
PRECONDITIONERS = {"amg": {}, "cheby": {}, "jacobi": {}, "bjacobi": {"sub": "ilu0"}}


def data_bytes(M) -> int:
    """The bytes of the preconditioner's data on the busiest rank (see the
    module docstring). Collective."""
    d = M.describe()
    if "hierarchy_bytes_max_rank" in d:
        return int(d["hierarchy_bytes_max_rank"])
    for key in ("factor_bytes_local", "operator_bytes_local", "stored_bytes_local"):
        if key in d:
            mine = d[key]
            break
    return int(M.comm.allreduce(int(mine), op=MPI.MAX))


def solve(A, b, pc, precision, repeats):
    comm = A.comm
    setup = solve_s = np.inf
    for _ in range(repeats):
        comm.Barrier()
        t0 = time.perf_counter()
        M = preconditioners.make(pc, A, precision=precision, **PRECONDITIONERS[pc])
        t1 = time.perf_counter()
        x, info = cg(A, b, rtol=1e-8, M=M, maxiter=MAXITER)
        t2 = time.perf_counter()
        setup = min(setup, comm.allreduce(t1 - t0, op=MPI.MAX))
        solve_s = min(solve_s, comm.allreduce(t2 - t1, op=MPI.MAX))
    rel = (b - A @ x).norm() / b.norm()
    return {"iterations": info.iterations, "converged": bool(info.converged),
            "true_relres": rel, "setup_s": setup, "solve_s": solve_s,
            "data_bytes": data_bytes(M)}


def main(comm, args) -> dict:
    res = {"ranks": comm.Get_size(), "cases": []}
    for spec in args.problems:
        A = _problem(spec, comm)
        b = gallery.rhs(A, "random", seed=1)
        for pc in args.preconditioners:
            row = {"problem": spec, "pc": pc, "rows": A.shape[0]}
            for precision in ("double", "single"):
                row[precision] = solve(A, b, pc, precision, args.repeats)
            res["cases"].append(row)
            if comm.rank == 0:
                print("done %s %s" % (spec, pc), flush=True)
    if comm.rank == 0:
        res["markdown"] = markdown(res)
        print(res["markdown"])
    return res


def markdown(res) -> str:
    lines = ["CG to rtol 1e-8 at %d ranks, the preconditioner's data in float64 (double) and "
             "float32 (single); true relative residual computed in float64; best of the "
             "repeats. Data bytes: the busiest rank's hierarchy (amg), matrix and "
             "diagonal read (cheby: in single a float32 copy of A kept beside the caller's), "
             "inverse diagonal (jacobi), ILU(0) factors (bjacobi)." % res["ranks"], "",
             "| problem | pc | rows | iterations double / single | true residual single "
             "| solve double / single (s) | solve ratio | set-up ratio | data bytes "
             "single / double |", "|---|---|---|---|---|---|---|---|---|"]
    within, ratios = {}, {}
    for r in res["cases"]:
        d, s = r["double"], r["single"]
        pc = r["pc"]
        within[pc] = within.get(pc, True) and (s["iterations"] <= d["iterations"] + 1
                                               and s["converged"])
        ratios.setdefault(pc, []).append(s["solve_s"] / d["solve_s"])
        nbytes = "%.2f" % (s["data_bytes"] / d["data_bytes"])
        lines.append("| %s | %s | %d | %d / %d | %.1e | %.3f / %.3f | %.2f | %.2f | %s |" % (
            r["problem"], pc, r["rows"], d["iterations"], s["iterations"], s["true_relres"],
            d["solve_s"], s["solve_s"], s["solve_s"] / d["solve_s"], s["setup_s"] / d["setup_s"],
            nbytes))
    lines.append("")
    for pc in within:
        lines.append("- %s: iterations in single precision within +1 of double on every "
                     "problem: %s; solve time single / double, geometric mean %.2f."
                     % (pc, "yes" if within[pc] else "no",
                        float(np.exp(np.mean(np.log(ratios[pc]))))))
    return "\n".join(lines)


if __name__ == "__main__":
    p = bench_parser(__doc__)
    p.add_argument("--problems", nargs="+", default=PROBLEMS)
    p.add_argument("--preconditioners", nargs="+", default=list(PRECONDITIONERS),
                   choices=list(PRECONDITIONERS))
    p.add_argument("--repeats", type=int, default=3)
    run(main, p)
