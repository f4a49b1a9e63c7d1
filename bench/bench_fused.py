"""Fused vector kernels of CG and pipelined CG against the BLAS/numpy passes they replace.

    mpiexec -n 2 python -m mpi4py bench/bench_fused.py --json out/bench/fused.json

Two parts, in one run:

* **Kernels** (rank 0 alone, the other ranks waiting): each fused kernel of
  :mod:`dmsolve.krylov._fused_kernels` against the sequence of BLAS
  ``axpy``/``dot`` and numpy in-place operations that computes the same
  thing, on vectors of ``--rows`` entries (1M: 8 MB each), best of
  ``--repeats``; with the bytes each moves and the bandwidth that makes,
  against the STREAM triad measured in the same run (vectors that stay in a
  large L3 cache can pass it).
* **Solves** (all ranks): CG and pipelined CG with ``jacobi`` on 3D Poisson
  ``--n``^3 for a fixed number of iterations, the time per iteration, and
  the share of it that the fused kernels saved (the kernels' saving per
  iteration over the iteration's time).
"""

from __future__ import annotations

import sys
import time

import numpy as np
from mpi4py import MPI
from scipy.linalg.blas import daxpy

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _common import bench_parser, run, stream_triad_gbs  # noqa: E402

import dmsolve.gallery as gallery  # noqa: E402
import preconditioners  # noqa: E402
from dmsolve.krylov import cg, pipecg  # noqa: E402
from dmsolve.krylov._fused_kernels import cg_update, dot2, pipecg_update, xpay  # noqa: E402

TINY = 1e-300       # a tolerance no solve reaches: the iteration count is fixed


def _best(fn, repeats: int) -> float:
    best = np.inf
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def kernels(rows: int, repeats: int) -> list[dict]:
    """Each fused kernel and its unfused sequence: seconds and bytes moved
    (8 bytes per vector entry read or written). Not collective."""
    rng = np.random.default_rng(0)
    v = [rng.standard_normal(rows) for _ in range(10)]
    out = np.zeros(3)
    a, b = 1e-9, 1e-9       # tiny coefficients: the vectors stay bounded over the repeats
    n_, m, w, u, z, q, s, p, x, r = v

    def cg_unfused():
        daxpy(p, x, a=a)
        daxpy(q, r, a=-a)
        np.dot(r, r)

    def xpay_unfused():
        p.__imul__(b)
        p.__iadd__(z)

    def dot2_unfused():
        np.dot(r, z)
        np.dot(r, r)

    def pipecg_unfused():
        for acc, new in ((z, n_), (q, m), (s, w), (p, u)):
            acc *= b
            acc += new
        daxpy(p, x, a=a)
        daxpy(s, r, a=-a)
        daxpy(q, u, a=-a)
        daxpy(z, w, a=-a)
        np.dot(r, u)
        np.dot(u, w)
        np.dot(r, r)

    cases = [
        # name, fused, unfused, vectors moved fused / unfused
        ("cg_update: x += a p; r -= a q; r.r", lambda: cg_update(a, p, q, x, r),
         cg_unfused, 6, 7),
        ("xpay: p = z + b p", lambda: xpay(b, z, p), xpay_unfused, 3, 5),
        ("dot2: r.z and r.r", lambda: dot2(r, z, r, r, out), dot2_unfused, 2, 3),
        ("pipecg_update: 8 updates and 3 inner products",
         lambda: pipecg_update(a, b, 0, n_, m, w, u, z, q, s, p, x, r, out),
         pipecg_unfused, 18, 37),
    ]
    res = []
    for name, fused, unfused, nf, nu in cases:
        fused()
        unfused()            # compile, and touch every page
        tf, tu = _best(fused, repeats), _best(unfused, repeats)
        res.append({"kernel": name, "fused_s": tf, "unfused_s": tu,
                    "fused_bytes": 8 * rows * nf, "unfused_bytes": 8 * rows * nu})
    return res


def solves(comm, n: int, iterations: int, repeats: int) -> dict:
    """Seconds per iteration of CG and pipecg with jacobi (slowest rank, best
    of ``repeats``). Collective."""
    A = gallery.poisson3d(n, comm)
    b = gallery.rhs(A, "random", seed=1)
    M = preconditioners.make("jacobi", A)
    out = {"rows": A.shape[0]}
    for name, method in (("cg", cg), ("pipecg", pipecg)):
        method(A, b, rtol=TINY, M=M, maxiter=2)          # compile
        best = np.inf
        for _ in range(repeats):
            comm.Barrier()
            t = time.perf_counter()
            _, info = method(A, b, rtol=TINY, M=M, maxiter=iterations)
            best = min(best, comm.allreduce(time.perf_counter() - t, op=MPI.MAX))
        out[name] = best / info.iterations
    return out


def main(comm, args) -> dict:
    res = {"ranks": comm.Get_size(), "rows": args.rows}
    if comm.rank == 0:
        res["stream_gbs"] = stream_triad_gbs()
        res["kernels"] = kernels(args.rows, args.repeats)
    comm.Barrier()
    res["solves"] = solves(comm, args.n, args.iterations, args.repeats)
    res["n"] = args.n
    if comm.rank == 0:
        res["markdown"] = markdown(res)
        print(res["markdown"])
    return res


def markdown(res) -> str:
    bw = res["stream_gbs"]
    lines = ["Vectors of %d float64 entries at 1 rank (STREAM triad %.1f GB/s in the same "
             "run); best of the repeats. Bytes: 8 per vector entry read or written."
             % (res["rows"], bw), "",
             "| kernel | fused / unfused (ms) | speed-up | vectors moved fused / unfused "
             "| bandwidth fused (GB/s) |", "|---|---|---|---|---|"]
    saved = {}
    for k in res["kernels"]:
        lines.append("| %s | %.3f / %.3f | %.2f | %d / %d | %.1f |" % (
            k["kernel"], 1e3 * k["fused_s"], 1e3 * k["unfused_s"],
            k["unfused_s"] / k["fused_s"], k["fused_bytes"] // (8 * res["rows"]),
            k["unfused_bytes"] // (8 * res["rows"]), k["fused_bytes"] / k["fused_s"] / 1e9))
        saved[k["kernel"].split(":")[0]] = k["unfused_s"] - k["fused_s"]
    s = res["solves"]
    # per iteration, CG with a preconditioner uses cg_update, dot2's saving
    # (r.z beside the r.r cg_update returned: one dot instead of two) and xpay;
    # the kernels were timed at --rows entries, the solve has rows / ranks per rank
    scale = s["rows"] / res["ranks"] / res["rows"]
    cg_saved = scale * (saved["cg_update"] + saved["xpay"] + saved["dot2"] / 2)
    pipe_saved = scale * saved["pipecg_update"]
    lines += ["", "CG + jacobi and pipelined CG + jacobi on 3D Poisson %d^3 (%d rows) at %d "
              "ranks: %.2f ms and %.2f ms per iteration; the fused kernels' saving per "
              "iteration, scaled to the rows per rank, is about %.2f ms (%.0f%% of CG's "
              "iteration) and %.2f ms (%.0f%% of pipelined CG's)."
              % (res["n"], s["rows"], res["ranks"], 1e3 * s["cg"], 1e3 * s["pipecg"],
                 1e3 * cg_saved, 100 * cg_saved / (s["cg"] + cg_saved), 1e3 * pipe_saved,
                 100 * pipe_saved / (s["pipecg"] + pipe_saved))]
    return "\n".join(lines)


if __name__ == "__main__":
    p = bench_parser(__doc__)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--n", type=int, default=100)
    p.add_argument("--iterations", type=int, default=50)
    p.add_argument("--repeats", type=int, default=10)
    run(main, p)
