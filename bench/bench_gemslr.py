"""GeMSLR on parGeMSLR's test operator: ours vs schurilu, vs ILU(0) and AMG, and vs lr_rank.

    mpiexec -n 2 python -m mpi4py bench/bench_gemslr.py --json out.json

The operator is ``dmsolve.gallery.shifted_laplacian`` (7-point, diagonal 6-s,
off-diagonals -1 +- alpha, alpha = (0.01, -0.01, 0)) at n^3 = 32^3 with shifts
0, 0.1 and 0.2 (indefinite for s > 0), random right-hand side, rtol 1e-6.

1. FGMRES(50) + ``gemslr`` (default options) at 1 rank (COMM_SELF on rank 0)
   and at all ranks: iterations, set-up and solve seconds, fill, ranks found.
2. The same matrices with GMRES(50) + ``bjacobi`` (ILU(0)), GMRES(50) + ``amg``
   and CG + ``amg`` at all ranks, reported as they come (iterations or the
   reason they stopped).
3. Iterations against ``lr_rank`` (0, 8, 16, 32, 64) on the shifted cases.
4. The serial ``schurilu`` package's ``GeMSLR`` + its FGMRES(50) on rank 0,
   with our multilevel ordering and the same ILUT / rank options, against ours
   at 1 rank: ratios of iterations and set-up/solve seconds. schurilu is pure
   Python (its triangular solves loop in the interpreter, about 2 s per
   preconditioner application at 32^3), so it runs at ``--schurilu-n``
   (default 16; 32 takes some 15-30 minutes).
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
from dmsolve.krylov import cg, fgmres, gmres  # noqa: E402

ALPHA = (0.01, -0.01, 0.0)
RTOL = 1e-6


def _timed(comm, f):
    comm.Barrier()
    t0 = time.perf_counter()
    out = f()
    return out, comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)


def _gemslr(A, maxiter=300, **opts):
    comm = A.comm
    b = gallery.rhs(A, "random")
    M, ts = _timed(comm, lambda: preconditioners.make("gemslr", A, **opts))
    (x, info), tsol = _timed(comm, lambda: fgmres(A, b, M=M, rtol=RTOL, restart=50,
                                                  maxiter=maxiter))
    d = M.describe()
    return {"iterations": info.iterations, "converged": info.converged,
            "reason": info.reason.name, "setup_s": ts, "solve_s": tsol, "fill": d["fill"],
            "interface_sizes": d["interface_sizes"], "ranks_found": d["ranks_found"],
            "converged_eigs": [lv.get("converged", 0) for lv in d["hierarchy"][:-1]]}


def _baseline(A, name, method, maxiter):
    comm = A.comm
    b = gallery.rhs(A, "random")
    M, ts = _timed(comm, lambda: preconditioners.make(name, A))
    kw = {"restart": 50} if method is gmres else {}
    (x, info), tsol = _timed(comm, lambda: method(A, b, M=M, rtol=RTOL, maxiter=maxiter, **kw))
    return {"iterations": info.iterations, "converged": info.converged,
            "reason": info.reason.name, "setup_s": ts, "solve_s": tsol}


def _schurilu(A1, M1, rank_k, droptol, lfil):
    """schurilu's GeMSLR with our ordering; its FGMRES(50) counted by callback."""
    import schurilu
    S = A1.to_scipy().tocsr()
    levels, last = M1.ordering()
    p = np.concatenate([np.concatenate(s) for s in levels] + [last])
    lev_ptr = np.cumsum([0] + [sum(x.size for x in s) for s in levels] + [last.size])
    b = gallery.rhs(A1, "random").local.copy()
    np.random.seed(0)          # its Arnoldi starts from np.random.randn
    t0 = time.perf_counter()
    G = schurilu.GeMSLR(S, p=p, lev_ptr=lev_ptr, droptol=droptol, lfil=lfil, rank_k=rank_k,
                        arnoldi_tol=1e-3)
    t1 = time.perf_counter()
    res = []
    x, flag = schurilu.fgmres(S, b, M=G, tol=RTOL, maxiter=300, restart=50,
                              callback=res.append)
    t2 = time.perf_counter()
    rel = np.linalg.norm(b - S @ x) / np.linalg.norm(b)
    return {"iterations": len(res), "converged": bool(flag == 0), "true_relres": float(rel),
            "setup_s": t1 - t0, "solve_s": t2 - t1, "fill": G.fill_factor(),
            "version": schurilu.__version__}


def _its(r):
    return ("%d" % r["iterations"]) if r["converged"] else \
        ("no (%s, %d)" % (r.get("reason", "not converged"), r["iterations"]))


def _its_time(r):
    return "%s (%.1f + %.1f s)" % (_its(r), r["setup_s"], r["solve_s"])


def main(comm: MPI.Comm, args) -> dict:
    rank, size = comm.Get_rank(), comm.Get_size()
    n = args.n
    res = {"ranks": size, "n": n, "shifts": args.shifts, "cases": [], "lr_sweep": [],
           "schurilu": []}
    # compile the numba kernels outside the timings, on both communicators
    for c in (MPI.COMM_SELF, comm):
        _gemslr(gallery.shifted_laplacian(6, c), ncomp=2, lr_rank=2)
    for s in (args.shifts if "main" in args.parts else []):
        case = {"shift": s}
        if rank == 0:
            A1 = gallery.shifted_laplacian(n, MPI.COMM_SELF, shift=s, alpha=ALPHA)
            case["ours_1"] = _gemslr(A1)
        comm.Barrier()
        A = gallery.shifted_laplacian(n, comm, shift=s, alpha=ALPHA)
        case["ours_p"] = _gemslr(A)
        case["gmres_bjacobi_ilu0"] = _baseline(A, "bjacobi", gmres, 1000)
        case["gmres_amg"] = _baseline(A, "amg", gmres, 500)
        case["cg_amg"] = _baseline(A, "amg", cg, 500)
        res["cases"].append(case)
    for s in [s for s in args.shifts if s > 0 and "lr" in args.parts]:
        A = gallery.shifted_laplacian(n, comm, shift=s, alpha=ALPHA)
        for k in args.lr_ranks:
            r = _gemslr(A, maxiter=400, lr_rank=k)
            r.update(shift=s, lr_rank=k)
            res["lr_sweep"].append(r)
    if rank == 0 and "schurilu" in args.parts:
        for s in args.shifts:
            A1 = gallery.shifted_laplacian(args.schurilu_n, MPI.COMM_SELF, shift=s, alpha=ALPHA)
            ours = _gemslr(A1)
            M1 = preconditioners.make("gemslr", A1, lr_rank=0)
            theirs = _schurilu(A1, M1, 32, 1e-3, 200)
            res["schurilu"].append({"shift": s, "n": args.schurilu_n, "ours_1": ours,
                                    "schurilu": theirs})
    if rank == 0:
        res["markdown"] = _markdown(res, size)
        print(res["markdown"])
    return res


def _main_table(res, size) -> list:
    n = res["n"]
    lines = [
        "parGeMSLR's operator at %d^3 (alpha = (0.01, -0.01, 0)), random b, rtol 1e-6. "
        "FGMRES(50) + `gemslr` (defaults: nlev 4, ncomp 32, ilu_droptol 1e-3, lr_rank 32, "
        "lr_maxits 3) at 1 and %d ranks; baselines at %d ranks as they come." % (n, size, size),
        "",
        "| shift | gemslr its 1 / %d ranks (target <= 200, growth <= 30%%) | set-up / solve s "
        "1 rank | set-up / solve s %d ranks | fill | ranks found per level | GMRES+bjacobi(ILU0) "
        "(set-up + solve) | GMRES+amg | CG+amg |" % (size, size),
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in res["cases"]:
        o1, op = c["ours_1"], c["ours_p"]
        lines.append("| %g | %s / %s | %.2f / %.2f | %.2f / %.2f | %.2f | %s | %s | %s | %s |" % (
            c["shift"], _its(o1), _its(op), o1["setup_s"], o1["solve_s"], op["setup_s"],
            op["solve_s"], op["fill"], op["ranks_found"], _its_time(c["gmres_bjacobi_ilu0"]),
            _its_time(c["gmres_amg"]), _its_time(c["cg_amg"])))
    met = all(c["ours_1"]["converged"] and c["ours_p"]["converged"]
              and c["ours_p"]["iterations"] <= 200
              and c["ours_p"]["iterations"] <= 1.3 * c["ours_1"]["iterations"]
              for c in res["cases"])
    lines += ["", "Targets (<= 200 iterations, <= 30%% growth from 1 to %d ranks): %s." % (
        size, "met" if met else "MISSED"), ""]
    return lines


def _lr_helps(sweep) -> bool:
    """Whether, for every shift, some lr_rank > 0 beats lr_rank 0 (converging
    where lr_rank 0 does not, or in fewer iterations)."""
    for s in {r["shift"] for r in sweep}:
        base = [r for r in sweep if r["shift"] == s and r["lr_rank"] == 0][0]
        best = [r["iterations"] for r in sweep
                if r["shift"] == s and r["lr_rank"] > 0 and r["converged"]]
        if not best or (base["converged"] and min(best) >= base["iterations"]):
            return False
    return True


def _markdown(res, size) -> str:
    lines = []
    if res["cases"]:
        lines += _main_table(res, size)
    if res["lr_sweep"]:
        ks = sorted({r["lr_rank"] for r in res["lr_sweep"]})
        lines += ["Iterations against `lr_rank` at %d ranks (400 at most):" % size, "",
                  "| shift | " + " | ".join("lr_rank %d" % k for k in ks) + " |",
                  "|---|" + "---|" * len(ks)]
        for s in sorted({r["shift"] for r in res["lr_sweep"]}):
            row = {r["lr_rank"]: r for r in res["lr_sweep"] if r["shift"] == s}
            lines.append("| %g | " % s + " | ".join(_its_time(row[k]) for k in ks) + " |")
        ok = _lr_helps(res["lr_sweep"]) if 0 in ks else None
        if ok is not None:
            lines += ["", "Target (a low-rank correction reduces the iterations of lr_rank 0 "
                      "on the shifted cases): %s." % ("met" if ok else "MISSED")]
        lines.append("")
    if res["schurilu"]:
        v = res["schurilu"][0]["schurilu"]["version"]
        lines += ["Against the serial `schurilu` %s GeMSLR at %d^3 (same ordering, droptol "
                  "1e-3, lfil 200, rank 32; its FGMRES(50)), both at 1 rank:" % (
                      v, res["schurilu"][0]["n"]), "",
                  "| shift | iterations schurilu / ours | ours/schurilu iterations | "
                  "ours/schurilu set-up | ours/schurilu solve | fill schurilu / ours |",
                  "|---|---|---|---|---|---|"]
        for c in res["schurilu"]:
            o, t = c["ours_1"], c["schurilu"]
            lines.append("| %g | %s / %s | %.2f | %.3f | %.3f | %.2f / %.2f |" % (
                c["shift"], _its(t), _its(o), o["iterations"] / max(t["iterations"], 1),
                o["setup_s"] / t["setup_s"], o["solve_s"] / t["solve_s"], t["fill"],
                o["fill"]))
    return "\n".join(lines)


if __name__ == "__main__":
    p = bench_parser(__doc__)
    p.add_argument("--n", type=int, default=32)
    p.add_argument("--shifts", type=float, nargs="+", default=[0.0, 0.1, 0.2])
    p.add_argument("--lr-ranks", type=int, nargs="+", default=[0, 8, 16, 32, 64])
    p.add_argument("--schurilu-n", type=int, default=16)
    p.add_argument("--parts", nargs="+", default=["main", "lr", "schurilu"],
                   choices=["main", "lr", "schurilu"], help="which sections to run")
    run(main, p)
