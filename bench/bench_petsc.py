"""Head to head: dmsolve's solvers against PETSc's (petsc4py) on the same matrices and ranks.

    mpiexec -n 2 python -m mpi4py bench/bench_petsc.py --json out/bench/petsc.json

In one run, for each problem (3D Poisson 64^3, 100^3 and 128^3, the 3D
convection-diffusion gallery problem 64^3 and 100^3) and at 1 rank (COMM_SELF
on rank 0 while the other ranks wait) and at all ranks (COMM_WORLD):

* matvec: ``DistCSR.matvec`` (its automatic local format: sliced ELL with
  run slots on these matrices) against ``MatMult`` of the same matrix
  converted with ``dmsolve.petsc.to_petsc`` to AIJ (same rows per rank); the
  time per stored entry (flat from 64^3 to 128^3 when the kernel streams);
  each one's fraction of the STREAM-triad bound counting the bytes its
  format moves (:func:`product_bytes`); the matrix's bytes;
* CG + our ``amg`` against KSPCG + PCGAMG with PETSc's default options
  (Poisson only): iterations, set-up and solve seconds; and the same with
  ``amg(precision="single")`` (float32 hierarchy inside float64 CG);
* GMRES(30) + ``bjacobi`` / ``asm`` against KSPGMRES + PCBJACOBI / PCASM
  (PETSc's defaults are ours: one block per rank, overlap 1, restricted,
  ILU(0) blocks; left preconditioning, preconditioned norm for both);
* pipelined CG + ``jacobi`` against KSPPIPECG + PCJACOBI (Poisson only).

Every solve: rtol 1e-8, atol 0, zero initial guess, the same random
right-hand side, and (for the CG family) the unpreconditioned residual norm
in both stopping tests (our default; PETSc is told with KSPSetNormType).
Times are the slowest rank's, best of ``--repeats``. The ratio ours/PETSc
is measured in the same run; the targets (:data:`TARGETS`) are
matvec <= 0.65x PETSc's and >= 0.55 of the bandwidth bound, CG+amg solve and
set-up <= 0.75x GAMG's with at most one iteration more and a true relative
residual <= 1e-8 (in float64), GMRES+bjacobi/asm solve <= 0.9x, and the
product format's bytes <= 1.1x scipy CSR's.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import numpy as np
from mpi4py import MPI

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _common import bench_parser, best_time, peak_rss_mb, run, stream_triad_gbs  # noqa: E402
import dmsolve.gallery as gallery  # noqa: E402
import preconditioners  # noqa: E402
from dmsolve import petsc as dp  # noqa: E402
from dmsolve._sell import csr_nbytes  # noqa: E402
from dmsolve.krylov import cg, gmres, pipecg  # noqa: E402

RTOL = 1e-8
MAXITER = 2000
TARGETS = {"matvec": 0.65, "bandwidth_fraction": 0.55, "amg_solve": 0.75, "amg_setup": 0.75,
           "iterations_plus": 1, "true_relres": 1e-8, "krylov_solve": 0.9,
           "matrix_bytes": 1.1}


def product_bytes(A) -> dict:
    """Bytes one ``A.matvec`` moves, summed over the ranks (collective), and
    the matrix's bytes: ``ours`` counts the arrays of the format the product
    uses on the diag block (sliced ELL or CSR), the off-process block's CSR
    over its nonempty rows, ``x`` read, ``y`` written (and, for CSR, zeroed
    first) and the ghost values; ``aij`` the same product in PETSc's AIJ
    (12 bytes per entry, row pointers, ``x`` read, ``y`` written).
    ``format_bytes`` / ``csr_bytes`` are the diag and offd arrays of the
    product format / of scipy CSR; ``stored_bytes`` is what the DistCSR holds
    (its CSR, kept for smoothers, set-up and interchange, plus the format's
    copy and the halo buffers)."""
    d, o = A.diag, A.offd
    n = d.shape[0]
    # sliced ELL and narrow CSR write y once; scipy CSR zeroes it first
    sell = A.product_format != "csr"
    diag_fmt = A.product_nbytes
    orows = int(np.count_nonzero(np.diff(o.indptr)))
    offd = o.data.nbytes + o.indices.nbytes + 8 * orows
    y_bytes = 8 * n if sell else 16 * n
    mine = np.array([diag_fmt + offd + 8 * n + y_bytes + 8 * A.ghosts.size,
                     12 * (d.nnz + o.nnz) + 4 * (n + 1) + 16 * n + 8 * A.ghosts.size,
                     diag_fmt + offd, csr_nbytes(d) + csr_nbytes(o), A.local_nbytes],
                    dtype=np.float64)
    tot = A.comm.allreduce(mine, op=MPI.SUM)
    return dict(zip(("ours", "aij", "format_bytes", "csr_bytes", "stored_bytes"),
                    (int(v) for v in tot)))


def _problem(spec: str, comm):
    kind, n = spec.rsplit("-", 1)
    return gallery.PROBLEMS[kind](int(n), comm)


def _symmetric(spec: str) -> bool:
    return spec.startswith("poisson")


# -- one kernel, both libraries --------------------------------------------------------------

def bench_matvec(A, M, comm, repeats):
    x, y = A.create_vectors()
    x.local[:] = gallery.rhs(A, "random", seed=11).local
    xv, yv = M.createVecs()
    xv.getArray()[:] = x.local
    # alternate the two, one repeat each at a time, so that a change of load on
    # the shared machine reaches both alike; best of the repeats for each
    t_ours = t_petsc = np.inf
    for _ in range(repeats):
        t_ours = min(t_ours, best_time(lambda: A.matvec(x, y), repeats=1, number=20,
                                       comm=comm))
        t_petsc = min(t_petsc, best_time(lambda: M.mult(xv, yv), repeats=1, number=20,
                                         comm=comm))
    diff = np.max(np.abs(yv.getArray(readonly=True) - y.local)) if y.local.size else 0.0
    diff = comm.allreduce(float(diff), op=MPI.MAX)
    xv.destroy()
    yv.destroy()
    return {"ours_ms": t_ours * 1e3, "petsc_ms": t_petsc * 1e3, "max_abs_diff": diff}


def _true_relres(A, x, b) -> float:
    r = b.copy().axpy(-1.0, A.matvec(x))
    return r.norm() / b.norm()


def _ours(A, b, method, pc, repeats, **kw):
    comm = A.comm
    best_setup = best_solve = np.inf
    for _ in range(repeats):
        comm.Barrier()
        t0 = time.perf_counter()
        Mp = preconditioners.make(pc, A)
        t1 = time.perf_counter()
        x, info = method(A, b, rtol=RTOL, M=Mp, maxiter=MAXITER, **kw)
        t2 = time.perf_counter()
        best_setup = min(best_setup, comm.allreduce(t1 - t0, op=MPI.MAX))
        best_solve = min(best_solve, comm.allreduce(t2 - t1, op=MPI.MAX))
    out = {"iterations": info.iterations, "reason": info.reason.petsc_name,
           "setup_s": best_setup, "solve_s": best_solve, "norm": info.norm_type,
           "true_relres": _true_relres(A, x, b)}
    if Mp.name == "amg":
        d = Mp.describe()
        out.update(op_complexity=d["operator_complexity"], levels=len(d["levels"]))
    return out, x


def _petsc(PETSc, A, M, b, ksp_type, pc_type, norm, repeats):
    comm = A.comm
    bv = dp.to_petsc(b)
    xv = bv.duplicate()
    best_setup = best_solve = np.inf
    view = None
    for rep in range(repeats):
        ksp = PETSc.KSP().create(comm=comm)
        ksp.setOperators(M)
        ksp.setType(ksp_type)
        ksp.getPC().setType(pc_type)
        ksp.setTolerances(rtol=RTOL, atol=0.0, max_it=MAXITER)
        if norm == "unpreconditioned":
            ksp.setNormType(PETSc.KSP.NormType.UNPRECONDITIONED)
        xv.set(0.0)
        comm.Barrier()
        t0 = time.perf_counter()
        ksp.setUp()
        ksp.setUpOnBlocks()     # bjacobi/asm factor their blocks here, not at first apply
        t1 = time.perf_counter()
        ksp.solve(bv, xv)
        t2 = time.perf_counter()
        best_setup = min(best_setup, comm.allreduce(t1 - t0, op=MPI.MAX))
        best_solve = min(best_solve, comm.allreduce(t2 - t1, op=MPI.MAX))
        its = ksp.getIterationNumber()
        reason = dp.convert_reason(ksp.getConvergedReason())[1]
        nt = str(ksp.getNormType())
        if rep == 0 and pc_type == "gamg":
            view = _view_text(PETSc, ksp.getPC(), comm)
        ksp.destroy()
    x = dp.from_petsc(xv)
    out = {"iterations": its, "reason": reason, "setup_s": best_setup, "solve_s": best_solve,
           "norm_type_code": nt, "true_relres": _true_relres(A, x, b)}
    if view is not None:
        out["view"] = view
        out.update(_gamg_facts(view))
    bv.destroy()
    xv.destroy()
    return out, x


def _view_text(PETSc, obj, comm) -> str:
    """``obj.view()`` captured as text (collective)."""
    name = None
    if comm.Get_rank() == 0:
        fd, name = tempfile.mkstemp(suffix=".txt")
        os.close(fd)
    name = comm.bcast(name, root=0)
    v = PETSc.Viewer().createASCII(name, comm=comm)
    obj.view(v)
    v.destroy()
    text = ""
    if comm.Get_rank() == 0:
        with open(name) as f:
            text = f.read()
        os.unlink(name)
    return comm.bcast(text, root=0)


def _gamg_facts(view: str) -> dict:
    facts = {}
    for line in view.splitlines():
        s = line.strip()
        if s.startswith("Complexity:") and "operator" in s:
            parts = s.replace("=", " ").split()
            try:
                facts["op_complexity"] = float(parts[parts.index("operator") + 1])
                facts["grid_complexity"] = float(parts[parts.index("grid") + 1])
            except (ValueError, IndexError):
                pass
        elif "levels=" in s and "MG" in s and "levels" not in facts:
            try:
                facts["levels"] = int(s.split("levels=")[1].split()[0].rstrip(","))
            except ValueError:
                pass
    return facts


def _gamg_settings(view: str) -> str:
    keep = ("Threshold for dropping", "Number of levels of aggressive",
            "aggressive coarsening", "MIS-k", "Number smoothing steps", "Cycle type",
            "type: chebyshev", "type: jacobi", "Complexity")
    lines = []
    for line in view.splitlines():
        s = " ".join(line.split())
        if any(k in s for k in keep) and s not in lines and len(lines) < 10:
            lines.append(s)
    return "; ".join(lines)


# -- all kernels on one problem and communicator -------------------------------------------

def run_problem(PETSc, spec, comm, args, bw_gbs):
    A = _problem(spec, comm)
    t0 = time.perf_counter()
    M = dp.to_petsc(A)
    t_conv = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
    info = M.getInfo(PETSc.Mat.InfoType.GLOBAL_SUM)
    N, nnz = A.shape[0], A.global_nnz()
    b = gallery.rhs(A, "random", seed=1)
    rows = []
    base = {"problem": spec, "ranks": comm.Get_size(), "rows": N, "nnz": nnz}
    if "matvec" in args.kernels:
        r = bench_matvec(A, M, comm, args.repeats_matvec)
        pb = product_bytes(A)
        fmt = comm.allgather(A.product_format)
        r.update(bytes=pb, bandwidth_gbs=bw_gbs, format="/".join(sorted(set(fmt))),
                 ours_fraction=pb["ours"] / (r["ours_ms"] * 1e-3) / 1e9 / bw_gbs,
                 petsc_fraction=pb["aij"] / (r["petsc_ms"] * 1e-3) / 1e9 / bw_gbs,
                 ours_ns_per_nnz=r["ours_ms"] * 1e6 / nnz,
                 petsc_ns_per_nnz=r["petsc_ms"] * 1e6 / nnz,
                 matrix_bytes_ratio=pb["format_bytes"] / pb["csr_bytes"],
                 ratio=r["ours_ms"] / r["petsc_ms"], to_petsc_s=t_conv,
                 petsc_mallocs=info["mallocs"])
        rows.append(dict(base, kernel="matvec", **r))
    solvers = []
    if _symmetric(spec):
        if "cg-amg" in args.kernels:
            solvers.append(("cg-amg", cg, "amg", {}, "cg", "gamg", "unpreconditioned"))
        if "cg-amg-single" in args.kernels:
            # the float32 hierarchy inside float64 CG (mixed precision)
            solvers.append(("cg-amg-single", cg, ("amg", {"precision": "single"}), {}, "cg",
                            "gamg", "unpreconditioned"))
        if "pipecg-jacobi" in args.kernels:
            solvers.append(("pipecg-jacobi", pipecg, "jacobi", {}, "pipecg", "jacobi",
                            "unpreconditioned"))
    for pc in ("bjacobi", "asm"):
        key = "gmres-" + pc
        if key in args.kernels:
            solvers.append((key, gmres, pc, {"restart": 30}, "gmres", pc, "preconditioned"))
    for key, method, pc, kw, ksp_type, pc_type, norm in solvers:
        ours, x1 = _ours(A, b, method, pc, args.repeats, **kw)
        theirs, x2 = _petsc(PETSc, A, M, b, ksp_type, pc_type, norm, args.repeats)
        d = x1.copy().axpy(-1.0, x2)
        row = dict(base, kernel=key, ours=ours, petsc=theirs,
                   solution_rel_diff=d.norm() / x2.norm(),
                   setup_ratio=ours["setup_s"] / theirs["setup_s"],
                   solve_ratio=ours["solve_s"] / theirs["solve_s"],
                   iterations_diff=ours["iterations"] - theirs["iterations"])
        rows.append(row)
    M.destroy()
    A.free()
    return rows


def _verdict(row) -> str:
    """"met", or "**behind**: ..." naming each missed target; slower kernels without a
    time target are named too, so the table says plainly where PETSc is ahead."""
    k = row["kernel"]
    miss, slower = [], []
    if k == "matvec":
        if row["ratio"] > TARGETS["matvec"]:
            miss.append("time %.2f > %.2f" % (row["ratio"], TARGETS["matvec"]))
        if row["ours_fraction"] < TARGETS["bandwidth_fraction"]:
            miss.append("bandwidth %.2f < %.2f" % (row["ours_fraction"],
                                                    TARGETS["bandwidth_fraction"]))
        if row["matrix_bytes_ratio"] > TARGETS["matrix_bytes"]:
            miss.append("bytes %.2f > %.1f" % (row["matrix_bytes_ratio"],
                                                TARGETS["matrix_bytes"]))
    else:
        if row["iterations_diff"] > TARGETS["iterations_plus"]:
            miss.append("%d iterations more than PETSc" % row["iterations_diff"])
        if row["ours"]["true_relres"] > TARGETS["true_relres"]:
            miss.append("true residual %.1e > %.0e" % (row["ours"]["true_relres"],
                                                       TARGETS["true_relres"]))
        if k in ("cg-amg", "cg-amg-single"):
            if row["solve_ratio"] > TARGETS["amg_solve"]:
                miss.append("solve %.2f > %.2f" % (row["solve_ratio"], TARGETS["amg_solve"]))
            if row["setup_ratio"] > TARGETS["amg_setup"]:
                miss.append("setup %.2f > %.2f" % (row["setup_ratio"], TARGETS["amg_setup"]))
        elif k in ("gmres-bjacobi", "gmres-asm"):
            if row["solve_ratio"] > TARGETS["krylov_solve"]:
                miss.append("solve %.2f > %.1f" % (row["solve_ratio"],
                                                   TARGETS["krylov_solve"]))
            if row["setup_ratio"] > 1.1:
                slower.append("setup %.1fx" % row["setup_ratio"])
        else:
            for what in ("setup", "solve"):
                if row[what + "_ratio"] > 1.1:
                    slower.append("%s %.1fx" % (what, row[what + "_ratio"]))
    out = ("**behind**: " + "; ".join(miss)) if miss else "met"
    if slower:
        out += "; slower than PETSc (no time target): " + ", ".join(slower)
    return out


def markdown(res) -> str:
    cases = res["cases"]
    lines = [
        "dmsolve against PETSc %s (petsc4py %s%s) in the same run, same matrices, rows per "
        "rank, right-hand side (random), zero initial guess, rtol %g; best of %d; "
        "ours/PETSc ratios (lower is better for us). STREAM-triad bandwidth %.1f GB/s on "
        "one core, %.1f GB/s with %d ranks at once."
        % (res["petsc_version"], res["petsc4py_version"],
           ", debug build" if res["petsc_debug"] else "", RTOL, res["repeats"],
           res["stream_gbs"]["1"], res["stream_gbs"][str(res["ranks"])], res["ranks"]),
        "",
        "| problem | ranks | format | matvec ours / PETSc (ms) | ratio (<= %.2f) "
        "| ns per entry ours / PETSc | fraction of bandwidth bound ours / PETSc (>= %.2f) "
        "| format bytes / CSR (<= %.1f) | verdict |"
        % (TARGETS["matvec"], TARGETS["bandwidth_fraction"], TARGETS["matrix_bytes"]),
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in cases:
        if r["kernel"] == "matvec":
            lines.append("| %s | %d | %s | %.2f / %.2f | %.2f | %.2f / %.2f | %.2f / %.2f "
                         "| %.2f | %s |" % (
                             r["problem"], r["ranks"], r.get("format", "csr"), r["ours_ms"],
                             r["petsc_ms"], r["ratio"], r["ours_ns_per_nnz"],
                             r["petsc_ns_per_nnz"], r["ours_fraction"], r["petsc_fraction"],
                             r["matrix_bytes_ratio"], _verdict(r)))
    lines += ["", _roofline(cases, res)]
    lines += [
        "",
        "| problem | ranks | solver ours vs PETSc | iterations ours / PETSc (<= +%d) "
        "| true residual ours | set-up ours / PETSc (s) | set-up ratio | solve ours / PETSc (s) "
        "| solve ratio | verdict |" % TARGETS["iterations_plus"],
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    names = {"cg-amg": "CG+amg vs KSPCG+PCGAMG (set-up and solve <= %.2f)"
             % TARGETS["amg_solve"],
             "cg-amg-single": "CG+amg(precision='single') vs KSPCG+PCGAMG (set-up and "
             "solve <= %.2f)" % TARGETS["amg_solve"],
             "pipecg-jacobi": "pipecg+jacobi vs KSPPIPECG+PCJACOBI",
             "gmres-bjacobi": "GMRES+bjacobi vs KSPGMRES+PCBJACOBI (solve <= %.1f)"
             % TARGETS["krylov_solve"],
             "gmres-asm": "GMRES+asm vs KSPGMRES+PCASM (solve <= %.1f)" % TARGETS["krylov_solve"]}
    for r in cases:
        if r["kernel"] == "matvec":
            continue
        o, p = r["ours"], r["petsc"]
        lines.append("| %s | %d | %s | %d / %d | %.1e | %.3f / %.3f | %.2f | %.3f / %.3f | %.2f "
                     "| %s |"
                     % (r["problem"], r["ranks"], names[r["kernel"]], o["iterations"],
                        p["iterations"], o["true_relres"], o["setup_s"], p["setup_s"],
                        r["setup_ratio"], o["solve_s"], p["solve_s"], r["solve_ratio"],
                        _verdict(r)))
    behind = [(r["problem"], r["ranks"], r["kernel"], _verdict(r).split("; slower")[0])
              for r in cases if _verdict(r).startswith("**behind**")]
    lines.append("")
    if behind:
        lines.append("Targets missed (we are behind PETSc): " + "; ".join(
            "%s at %d rank(s), %s: %s" % (p, n, k, v.replace("**behind**: ", ""))
            for p, n, k, v in behind) + ". All other targets met.")
    else:
        lines.append("All targets met.")
    slow = sorted({r["kernel"] for r in cases if "no time target" in _verdict(r)})
    if slow:
        lines.append("Without a time target but slower than PETSc: %s (ratios in the "
                     "verdict column)." % ", ".join(slow))
    amg = [r for r in cases if r["kernel"] == "cg-amg"]
    if amg:
        lines.append("")
        lines.append("AMG hierarchies (operator complexity ours / GAMG): %s. PETSc GAMG ran "
                     "with its default options: %s." % (
                         ", ".join("%s at %d: %.2f / %s" % (
                             r["problem"], r["ranks"], r["ours"].get("op_complexity", 0),
                             "%.2f" % r["petsc"]["op_complexity"]
                             if "op_complexity" in r["petsc"] else "?") for r in amg),
                         res.get("gamg_settings", "see results JSON")))
    lines.append("")
    lines.append("Set-up: ours is `preconditioners.make(name, A)`, PETSc's `KSPSetUp` + "
                 "`KSPSetUpOnBlocks` (PC set-up incl. block factorisations); the DistCSR -> "
                 "PETSc AIJ conversion (%s) is not in either. The "
                 "CG-family stopping tests use the unpreconditioned residual norm in both, "
                 "GMRES the left-preconditioned one in both." % ", ".join(
                     "%s at %d: %.2f s" % (r["problem"], r["ranks"], r["to_petsc_s"])
                     for r in cases if r["kernel"] == "matvec"))
    return "\n".join(lines)


def _roofline(cases, res) -> str:
    """A paragraph on what bounds the matvec, from the measured figures."""
    mv = [r for r in cases if r["kernel"] == "matvec"]
    if not mv:
        return ""
    big = max(mv, key=lambda r: (r["nnz"], -r["ranks"]))
    b = big["bytes"]
    per_nnz_ours = b["ours"] / big["nnz"]
    per_nnz_aij = b["aij"] / big["nnz"]
    return (
        "Roofline: a matvec does 2 flops per stored entry and moves %.1f bytes per entry in "
        "our format against %.1f in AIJ (%s at %d rank(s): %.0f / %.0f MB), an arithmetic "
        "intensity of %.2f / %.2f flop per byte, far below this core's some 10 flops per "
        "byte of STREAM bandwidth: both are memory-bound, and the bound is the bytes over "
        "the STREAM-triad rate. AIJ reads a 4-byte column index per entry and issues an "
        "indexed load of x for each; sliced ELL with run slots reads 8 bytes of value per "
        "entry and x in runs of 64, so it both moves fewer bytes and keeps more of them in "
        "flight. The fraction of the bound left is the kernel's: numba compiles the chunk "
        "loop to scalar multiply-adds (no SIMD, see dmsolve/_sell_kernels.py), so at one "
        "core the rate of issue, not the memory, sets the last part. Matrices whose data "
        "fit in the cache (this machine reports %s of L3, shared with whatever else runs "
        "on the host; convdiff3d-64: %.0f MB in our format) can exceed the DRAM bound; the "
        "ns per entry from 64^3 to 128^3 shows where the data leave the cache."
        % (per_nnz_ours, per_nnz_aij, big["problem"], big["ranks"], b["ours"] / 1e6,
           b["aij"] / 1e6, 2 / per_nnz_ours, 2 / per_nnz_aij, _l3_size(),
           next((r["bytes"]["ours"] / 1e6 for r in mv if r["problem"] == "convdiff3d-64"),
                float("nan"))))


def _l3_size() -> str:
    """The L3 size the kernel reports for cpu0 (e.g. "32768K"), or "an unknown size"."""
    try:
        for idx in sorted(os.listdir("/sys/devices/system/cpu/cpu0/cache")):
            base = "/sys/devices/system/cpu/cpu0/cache/" + idx
            with open(base + "/level") as f:
                if f.read().strip() != "3":
                    continue
            with open(base + "/size") as f:
                return f.read().strip()
    except OSError:
        pass
    return "an unknown size"


def _petsc_debug(PETSc) -> bool:
    import petsc4py
    cfg = petsc4py.get_config()
    path = os.path.join(cfg.get("PETSC_DIR", ""), cfg.get("PETSC_ARCH", "") or "",
                        "include", "petscconf.h")
    try:
        with open(path) as f:
            return "#define PETSC_USE_DEBUG 1" in f.read()
    except OSError:
        return False


def main(comm: MPI.Comm, args) -> dict:
    from petsc4py import PETSc
    import petsc4py
    rank, size = comm.Get_rank(), comm.Get_size()
    if args.ranks is None:
        args.ranks = [1, size]
    res = {"ranks": size, "repeats": args.repeats, "rtol": RTOL, "targets": TARGETS,
           "petsc_version": "%d.%d.%d" % PETSc.Sys.getVersion(),
           "petsc4py_version": petsc4py.__version__, "petsc_debug": _petsc_debug(PETSc),
           "cases": [], "stream_gbs": {}}
    # bandwidth: one core alone, then every rank at once (summed)
    if rank == 0:
        res["stream_gbs"]["1"] = stream_triad_gbs(n=args.stream_n)
    comm.Barrier()
    mine = stream_triad_gbs(n=args.stream_n)
    res["stream_gbs"][str(size)] = comm.allreduce(mine, op=MPI.SUM)
    res["stream_gbs"] = comm.bcast(res["stream_gbs"], root=0)
    for spec in args.problems:
        if rank == 0 and 1 in args.ranks:
            res["cases"] += run_problem(PETSc, spec, MPI.COMM_SELF, args,
                                        res["stream_gbs"]["1"])
        comm.Barrier()
        if size > 1 and size in args.ranks:
            res["cases"] += run_problem(PETSc, spec, comm, args, res["stream_gbs"][str(size)])
        if rank == 0:
            print("done %s" % spec, flush=True)
    res["cases"].sort(key=lambda r: (r["kernel"] != "matvec", r["problem"], r["ranks"]))
    views = [r["petsc"]["view"] for r in res["cases"] if r["kernel"] == "cg-amg"]
    if views:
        res["gamg_settings"] = _gamg_settings(views[0])
    res["peak_rss_mb_per_rank"] = comm.gather(peak_rss_mb(), root=0)
    if rank == 0:
        res["markdown"] = markdown(res)
        print(res["markdown"])
    return res


if __name__ == "__main__":
    p = bench_parser(__doc__)
    p.add_argument("--problems", nargs="+",
                   default=["poisson3d-64", "poisson3d-100", "poisson3d-128", "convdiff3d-64",
                            "convdiff3d-100"])
    p.add_argument("--kernels", nargs="+",
                   default=["matvec", "cg-amg", "cg-amg-single", "gmres-bjacobi",
                            "gmres-asm"],
                   help="also: pipecg-jacobi (no target)")
    p.add_argument("--ranks", nargs="+", type=int, default=None,
                   help="rank counts to run (default 1 and all)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--repeats-matvec", type=int, default=10)
    p.add_argument("--stream-n", type=int, default=10_000_000)
    run(main, p)
