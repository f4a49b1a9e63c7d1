"""Persistence diagrams of smooth and noisy n^3 fields: ours against gudhi's
lower-star SimplexTree on the same triangulation, and ours at 2 ranks vs 1.

    mpiexec -n 2 python -m mpi4py bench/bench_persistence.py --sizes 64 128 --json out/bench/persistence.json

For every field, in one run: our diagram at all ranks of the launch (in
this process), then, one after the other in fresh subprocesses (so that each
peak resident set is its own), our diagram at 1 rank and gudhi's. The other
ranks wait without spinning meanwhile. Ours is timed twice: D0 + D2 alone
(global order and the two union-find sweeps) and the full diagram (plus D1
from the discrete gradient's saddle pairs). gudhi's time is the SimplexTree
filled one dimension at a time (insert_batch, each Freudenthal simplex at the
maximum of its vertex values) plus compute_persistence; the simplex lists are
made outside the timer, one translation class at a time. A gudhi run past
``--gudhi-timeout`` seconds or ``--gudhi-mem-gb`` of address space is
stopped and reported as not measured.

With ``--references`` it measures instead, for the same fields, our
diagram at 1 and 2 ranks against CubicalRipser (``cripser.computePH``, the
cubical complex with vertex values, i.e. the V-construction, 1 and 2 threads)
and Oineus (``compute_diagrams_ls``, the lower-star filtration of its
Freudenthal triangulation, which is TTK's once the x axis is reversed), each
case in its own fresh process (``mpiexec -n 2`` for ours at 2 ranks), with
ratios against cripser at 1 thread from the same run:

    python bench/bench_persistence.py --references --n 16          # seconds
    python bench/bench_persistence.py --references --json out/bench/persistence_refs.json

Peak memory there is VmHWM read after the timed call, reset by writing "5" to
/proc/self/clear_refs just before it (so it is the process's resident peak
during that call: the interpreter, the libraries and the field included).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import _provenance  # noqa: E402


# -- the fields (pure numpy: the gudhi worker never imports MPI) ------------------------------
def make_field(n: int, kind: str) -> np.ndarray:
    """The global field in vertex-id order (x fastest)."""
    x = np.arange(n) / n
    z, y, xx = np.meshgrid(x, x, x, indexing="ij")
    f = (np.sin(6.1 * xx) * np.cos(5.3 * y) * np.sin(4.7 * z + 1)
         + 0.01 * np.cos(37 * (xx + y + z)))
    if kind == "noisy":
        f = f + 0.5 * np.random.default_rng(7).random(f.shape)
    return np.ascontiguousarray(f.ravel())


_CORNERS = {"a": (0, 0, 0), "b": (1, 0, 0), "c": (0, 1, 0), "d": (1, 1, 0),
            "e": (0, 0, 1), "f": (1, 0, 1), "g": (0, 1, 1), "h": (1, 1, 1)}
_TETS = ("abcg", "bcdg", "abeg", "befg", "bfgh", "bdgh")     # TTK's, as topology.freudenthal_cells


def freudenthal_classes(k: int) -> list[np.ndarray]:
    """The k-simplices of TTK's triangulation up to translation: offset
    patterns with the smallest corner at the origin (7 edges, 12 triangles,
    6 tetrahedra in 3D)."""
    pats = set()
    for t in _TETS:
        pts = np.array([_CORNERS[c] for c in t])
        for face in itertools.combinations(range(4), k + 1):
            p = pts[list(face)]
            p = p - p.min(axis=0)
            pats.add(tuple(sorted(map(tuple, p))))
    return [np.array(p) for p in sorted(pats)]


def gudhi_worker(n: int, kind: str) -> dict:
    import resource
    import gudhi
    f = make_field(n, kind)
    st = gudhi.SimplexTree()
    t_build = 0.0
    shape = (n, n, n)
    stride = np.array([1, n, n * n])
    for k in range(4):
        for pat in freudenthal_classes(k):
            ext = pat.max(axis=0)
            axes = [np.arange(shape[a] - ext[a]) for a in range(3)]
            o = (axes[2][:, None, None] * stride[2] + axes[1][None, :, None] * stride[1]
                 + axes[0][None, None, :]).ravel()
            verts = np.stack([o + int(p @ stride) for p in pat])       # (k+1, m)
            filt = f[verts].max(axis=0)
            t = time.perf_counter()
            st.insert_batch(verts, filt)
            t_build += time.perf_counter() - t
            del verts, filt, o
    t = time.perf_counter()
    st.compute_persistence(persistence_dim_max=True, min_persistence=0.0)
    t_pers = time.perf_counter() - t
    iv = [np.asarray(st.persistence_intervals_in_dimension(d)).reshape(-1, 2) for d in range(4)]
    counts = [len(i) for i in iv]
    nonzero = [int(np.count_nonzero(i[:, 1] > i[:, 0])) for i in iv]
    return {"nonzero_pairs": nonzero, "seconds": t_build + t_pers, "build_seconds": t_build, "persistence_seconds": t_pers,
            "simplices": st.num_simplices(), "pairs": counts,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}


def _count(dg, d: int, what: str) -> int:
    """``dg.report[d][what]``, 0 for a dimension the diagram cannot have."""
    return dg.report[d][what] if d in dg.dims else 0


# -- ours ----------------------------------------------------------------------------------------
def ours(comm, n: int, kind: str, repeats: int) -> dict:
    from mpi4py import MPI
    from dmsolve import DistVector
    from topology import Grid, global_order, persistence_diagram
    from topology.persistence import sweep
    _warm_up(comm)
    persistence_diagram(Grid((8, 8, 8), comm, complex=complex), make_field(8, kind))
    grid = Grid((n, n, n), comm, complex=complex)
    lay = grid.vertex_layout
    vec = DistVector(lay, make_field(n, kind)[lay.start:lay.stop])

    def d0_d2():
        order = global_order(vec)
        s0 = sweep(grid, order.local)
        s2 = sweep(grid, n ** 3 - 1 - order.local, apex=True)
        return len(s0.deaths), len(s2.deaths)

    import resource
    best_sweeps, best_full, dg = np.inf, np.inf, None
    # D0 + D2 first, so that the peak resident set read after them is theirs
    for _ in range(repeats):
        comm.Barrier()
        t = MPI.Wtime()
        d0_d2()
        best_sweeps = min(best_sweeps, comm.allreduce(MPI.Wtime() - t, op=MPI.MAX))
    rss_d0_d2 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    for _ in range(repeats):
        comm.Barrier()
        t = MPI.Wtime()
        dg = persistence_diagram(grid, vec)
        best_full = min(best_full, comm.allreduce(MPI.Wtime() - t, op=MPI.MAX))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return {"seconds_d0_d2": best_sweeps, "seconds_full": best_full,
            "peak_rss_mb_d0_d2_per_rank": comm.allgather(rss_d0_d2),
            # D0..D3 as gudhi lists them (a grid's diagram has no D3: dims 0..2)
            "pairs": [_count(dg, d, "pairs") + _count(dg, d, "essential") for d in range(4)],
            "nonzero": [_count(dg, d, "nonzero") for d in range(4)],
            "essential": [_count(dg, d, "essential") for d in range(4)],
            "missing": dg.missing, "peak_rss_mb_per_rank": comm.allgather(rss)}


def _warm_up(comm):
    """Load the compiled kernels once (numba's cache) outside the timers."""
    from topology import Grid, persistence_diagram
    g = Grid((6, 6, 6), comm)
    persistence_diagram(g, np.random.default_rng(0).random(216))


def ours_worker(n: int, kind: str, repeats: int) -> dict:
    from mpi4py import MPI
    out = ours(MPI.COMM_SELF, n, kind, repeats)
    out["peak_rss_mb"] = out.pop("peak_rss_mb_per_rank")[0]
    out["peak_rss_mb_d0_d2"] = out.pop("peak_rss_mb_d0_d2_per_rank")[0]
    return out


# -- the driver ------------------------------------------------------------------------------------
def _clean_env() -> dict:
    """This process's environment without an MPI launcher's variables, and
    with this checkout first on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PMI_", "PMIX_", "HYDRA_", "MPIR_", "MPICH_", "OMPI_"))}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _run_json(cmd: list[str], timeout: float, preexec_fn=None) -> dict:
    """Run ``cmd`` in a fresh process; its last line of output is a JSON
    record (or an ``error`` record: stopped, or failed with its last line)."""
    try:
        p = subprocess.run(cmd, env=_clean_env(), capture_output=True, text=True,
                           timeout=timeout, preexec_fn=preexec_fn)
    except subprocess.TimeoutExpired:
        return {"error": "stopped after %.0f s" % timeout}
    if p.returncode != 0:
        tail = (p.stderr or "").strip().splitlines()[-1:] or ["exit %d" % p.returncode]
        return {"error": "failed (%s)" % tail[0][:200]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def subprocess_run(args: list[str], timeout: float, mem_gb: float | None):
    """Run this script as a fresh serial process (no MPI launcher environment)."""
    def limit():
        if mem_gb:
            import resource
            b = int(mem_gb * 2 ** 30)
            resource.setrlimit(resource.RLIMIT_AS, (b, b))
    return _run_json([sys.executable, os.path.abspath(__file__)] + args, timeout, limit)


def main(comm, args) -> dict:
    size, rank = comm.Get_size(), comm.Get_rank()
    results = {"ranks": size, "cases": []}
    rows = []
    for n in args.sizes:
        for kind in args.kinds:
            par = ours(comm, n, kind, args.repeats)
            serial = gudhi = None
            if rank == 0:
                serial = subprocess_run(["--worker", "ours", "--n", str(n), "--kind", kind,
                                         "--repeats", str(args.repeats)], 3600, None)
                gudhi = subprocess_run(["--worker", "gudhi", "--n", str(n), "--kind", kind],
                                       args.gudhi_timeout, args.gudhi_mem_gb)
            _idle_wait(comm)
            serial, gudhi = comm.bcast((serial, gudhi), root=0)
            case = {"n": n, "kind": kind, "ours_parallel": par, "ours_serial": serial,
                    "gudhi": gudhi}
            results["cases"].append(case)
            rows.append(_row(case, size))
            if rank == 0:
                print(rows[-1], flush=True)
    if rank == 0:
        results["markdown"] = "\n".join([
            "Lower-star persistence diagrams (D0, D1, D2) of smooth and noisy n^3 fields on TTK's "
            "Freudenthal triangulation; ours at 1 rank against gudhi %s's SimplexTree "
            "(insert_batch + compute_persistence) on the same simplices, and ours at %d ranks "
            "against ours at 1 rank, measured in one run (each 1-rank figure in its own "
            "process, peak RSS of that process). D0+D2 is the global order and the two "
            "union-find sweeps; 'full' adds D1 from the discrete gradient. Targets at 128^3: "
            "ours >= 10x faster than gudhi and <= 1/4 of its peak memory. %s" % (
                _gudhi_version(), size, _verdict(results["cases"])),
            "",
            "| field | gudhi s | ours 1 rank D0+D2 s / full s | gudhi / ours D0+D2 | "
            "gudhi / ours full | peak RSS gudhi / ours MiB | ours/gudhi memory | "
            "ours %d ranks full s | 1 rank / %d ranks | pairs D0/D1/D2 equal |" % (size, size),
            "|---|---|---|---|---|---|---|---|---|---|",
        ] + rows)
        print(results["markdown"])
    return results


def _idle_wait(comm):
    """Wait for rank 0 without a spinning barrier (it runs subprocesses)."""
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(0.05)


def _gudhi_version():
    try:
        import gudhi
        return gudhi.__version__
    except ImportError:
        return "(missing)"


def _row(case, size) -> str:
    s, g, p = case["ours_serial"], case["gudhi"], case["ours_parallel"]
    name = "%s %d^3" % (case["kind"], case["n"])
    if "error" in s:
        return "| %s | - | ours failed: %s | | | | | | | |" % (name, s["error"])
    gs = g.get("seconds")
    same = "-" if gs is None else ("yes" if _same_counts(s, g) else "no")
    gtxt = "%.2f" % gs if gs is not None else "not measured (%s)" % g["error"]
    r1 = "%.1fx" % (gs / s["seconds_d0_d2"]) if gs else "-"
    r2 = "%.1fx" % (gs / s["seconds_full"]) if gs else "-"
    dd = s.get("peak_rss_mb_d0_d2", float("nan"))
    if gs:
        mem = "%.0f / %.0f (D0+D2 %.0f)" % (g["peak_rss_mb"], s["peak_rss_mb"], dd)
        mr = "%.3f (D0+D2 %.3f)" % (s["peak_rss_mb"] / g["peak_rss_mb"], dd / g["peak_rss_mb"])
    else:
        mem, mr = "- / %.0f (D0+D2 %.0f)" % (s["peak_rss_mb"], dd), "-"
    return "| %s | %s | %.2f / %.2f | %s | %s | %s | %s | %.2f | %.2f | %s |" % (
        name, gtxt, s["seconds_d0_d2"], s["seconds_full"], r1, r2, mem, mr,
        p["seconds_full"], s["seconds_full"] / p["seconds_full"], same)


def _same_counts(s, g) -> bool:
    # gudhi's counts include zero-length pairs of simplices; ours are vertex pairs. Only
    # the nonzero pairs are comparable, so compare essential + nonzero counts.
    return "nonzero_pairs" in g and g["nonzero_pairs"] == [
        s["nonzero"][d] + s["essential"][d] for d in range(4)]


def _verdict(cases) -> str:
    out = []
    for c in cases:
        if c["n"] < 128:
            continue
        s, g = c["ours_serial"], c["gudhi"]
        if "seconds" not in g or "error" in s:
            out.append("%s %d^3: gudhi not measured (%s)." % (c["kind"], c["n"],
                                                              g.get("error", "?")))
            continue
        speed = g["seconds"] / s["seconds_full"]
        mem = s["peak_rss_mb"] / g["peak_rss_mb"]
        mem_d = s.get("peak_rss_mb_d0_d2", np.nan) / g["peak_rss_mb"]
        out.append("%s %d^3: speed-up %.1fx full (%.1fx D0+D2) -> target %s; memory %.2f of "
                   "gudhi's (D0+D2 %.2f) -> target %s." % (
                       c["kind"], c["n"], speed, g["seconds"] / s["seconds_d0_d2"],
                       "met" if speed >= 10 else "missed", mem, mem_d,
                       "met" if mem <= 0.25 else "missed"))
    return " ".join(out)


# -- CubicalRipser and Oineus as references -------------------------------------------------------
def reset_peak() -> None:
    """Reset this process's peak resident set (VmHWM) to its current size."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")


def peak_mib(field: str = "VmHWM") -> float:
    """This process's peak (``VmHWM``) or current (``VmRSS``) resident set, MiB."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def _timed(fn, repeats: int) -> tuple[float, float, float, object]:
    """Best seconds of ``repeats`` calls, the largest VmHWM over them (each
    call after a reset), the resident size before the first, and the last
    call's result."""
    best, peak, out = np.inf, 0.0, None
    base = peak_mib("VmRSS")
    for _ in range(repeats):
        out = None                      # the previous answer is not part of the next peak
        reset_peak()
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
        peak = max(peak, peak_mib())
    return best, peak, base, out


def _nonzero_counts(pairs_by_dim) -> list[int]:
    """Finite pairs with death > birth, per dimension, of (k, 2) arrays."""
    return [int(np.count_nonzero(np.isfinite(p[:, 1]) & (p[:, 1] > p[:, 0])))
            for p in pairs_by_dim]


def ours_ref_worker(n: int, kind: str, repeats: int, complex: str = "freudenthal"
                    ) -> dict | None:
    """Our full diagram (D0, D1, D2) at the ranks of COMM_WORLD, on the
    Freudenthal triangulation or the cubical complex; the dict on rank 0."""
    from mpi4py import MPI
    from dmsolve import DistVector
    from topology import Grid, persistence_diagram
    comm = MPI.COMM_WORLD
    _warm_up(comm)
    persistence_diagram(Grid((8, 8, 8), comm, complex=complex), make_field(8, kind))
    grid = Grid((n, n, n), comm, complex=complex)
    lay = grid.vertex_layout
    vec = DistVector(lay, make_field(n, kind)[lay.start:lay.stop])
    best, peak, dg = np.inf, 0.0, None
    base = peak_mib("VmRSS")
    for _ in range(repeats):
        dg = None
        comm.Barrier()
        reset_peak()
        t = MPI.Wtime()
        dg = persistence_diagram(grid, vec)
        best = min(best, comm.allreduce(MPI.Wtime() - t, op=MPI.MAX))
        peak = max(peak, peak_mib())
    peaks, bases = comm.gather(peak), comm.gather(base)
    if comm.rank != 0:
        return None
    return {"seconds": best, "peak_mib": max(peaks), "peak_mib_per_rank": peaks,
            "base_mib_per_rank": bases, "ranks": comm.size,
            "nonzero": [dg.report[d]["nonzero"] for d in range(3)],
            "essential": [dg.report[d]["essential"] for d in range(3)]}


def cripser_worker(n: int, kind: str, repeats: int, threads: int) -> dict:
    """CubicalRipser on the vertex values (V-construction, top_dim=False)."""
    import cripser
    arr = make_field(n, kind).reshape(n, n, n)
    best, peak, base, ph = _timed(
        lambda: cripser.computePH(arr, maxdim=2, top_dim=False, n_threads=threads), repeats)
    dims = [ph[ph[:, 0] == d][:, 1:3] for d in range(3)]
    for d in dims:                      # cripser marks an essential class by death DBL_MAX
        d[d[:, 1] >= np.finfo(np.float64).max, 1] = np.inf
    return {"seconds": best, "peak_mib": peak, "base_mib": base, "threads": threads,
            "version": cripser.__version__, "nonzero": _nonzero_counts(dims),
            "essential": [int(np.count_nonzero(~np.isfinite(d[:, 1]))) for d in dims]}


def oineus_worker(n: int, kind: str, repeats: int) -> dict:
    """Oineus's lower-star diagram of its Freudenthal triangulation. Reversing
    the x axis maps TTK's triangulation (tetrahedra around the diagonal b-g)
    onto the Kuhn triangulation Oineus uses (around the main diagonal), so
    the diagram is ours (checked in tests/topology/persistence/test_diagram.py)."""
    import oineus
    arr = np.ascontiguousarray(make_field(n, kind).reshape(n, n, n)[:, :, ::-1])
    params = oineus.ReductionParams()
    params.n_threads = 1
    best, peak, base, dgm = _timed(
        lambda: oineus.compute_diagrams_ls(arr, max_dim=2, params=params), repeats)
    dims = [np.asarray(dgm.in_dimension(d), dtype=np.float64).reshape(-1, 2) for d in range(3)]
    return {"seconds": best, "peak_mib": peak, "base_mib": base,
            "version": getattr(oineus, "__version__", _dist_version("oineus")),
            "nonzero": _nonzero_counts(dims),
            "essential": [int(np.count_nonzero(~np.isfinite(d[:, 1]))) for d in dims]}


def _dist_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(name)
    except PackageNotFoundError:
        return "(missing)"


def mpi_run(ranks: int, args: list[str], timeout: float):
    """Run this script under ``mpiexec -n RANKS`` as a fresh MPI job."""
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return _run_json([mpiexec, "-n", str(ranks), sys.executable, "-m", "mpi4py",
                      os.path.abspath(__file__)] + args, timeout)


REF_CODES = ("ours-1", "ours-2", "cubical-1", "cubical-2", "cripser-1", "cripser-2", "oineus")


def references(comm, args) -> dict:
    """Rank 0 runs every case in a fresh process; the other ranks wait idle."""
    res = None
    if comm.rank == 0:
        res = _references(args)
    _idle_wait(comm)
    return comm.bcast(res, root=0)


def _references(args) -> dict:
    cases = []
    for n in args.sizes:
        for kind in args.kinds:
            base = ["--n", str(n), "--kind", kind, "--repeats", str(args.repeats)]
            case = {"n": n, "kind": kind}
            case["ours-1"] = subprocess_run(["--worker", "ours-ref"] + base, 3600, None)
            case["ours-2"] = mpi_run(2, ["--worker", "ours-ref"] + base, 3600)
            cub = ["--worker", "ours-ref", "--complex", "cubical"] + base
            case["cubical-1"] = subprocess_run(cub, 3600, None)
            case["cubical-2"] = mpi_run(2, cub, 3600)
            for t in (1, 2):
                case["cripser-%d" % t] = subprocess_run(
                    ["--worker", "cripser", "--threads", str(t)] + base, 1800, None)
            if n > args.oineus_max_n:
                case["oineus"] = {"error": "skipped above %d^3 (--oineus-max-n)"
                                  % args.oineus_max_n}
            else:
                case["oineus"] = subprocess_run(["--worker", "oineus"] + base,
                                                args.oineus_timeout, args.oineus_mem_gb)
            cases.append(case)
            print(json.dumps(case), flush=True)
    res = {"code": _provenance.code(ROOT), "cases": cases,
           "versions": {"cripser": _dist_version("cripser"), "oineus": _dist_version("oineus")}}
    res["markdown"] = references_markdown(res, args)
    print(res["markdown"])
    return res


def references_markdown(res, args) -> str:
    v = res["versions"]
    lines = [
        "Persistence diagrams (D0, D1, D2) of the smooth and noisy n^3 fields "
        "of bench_persistence.py: ours (lower star on TTK's Freudenthal triangulation, and on "
        "the cubical complex with `Grid(..., complex=\"cubical\")`) at 1 and 2 "
        "ranks, CubicalRipser (cripser %s, `computePH(arr, maxdim=2)`: the cubical complex "
        "with vertex values, the V-construction, gudhi's `CubicalComplex(vertices=...)`) at "
        "1 and 2 threads (`n_threads`), and Oineus %s (`compute_diagrams_ls`, lower star on "
        "its Freudenthal triangulation with the x axis reversed, which is TTK's; 1 thread), "
        "measured in one run, each case in its own fresh process, best of %d calls after a "
        "warm-up of the compiled kernels; peak = VmHWM after a reset of /proc/self/clear_refs "
        "just before each call (the whole process's resident peak during it, the field "
        "included; per rank at 2 ranks; 'above start' subtracts the resident size before the "
        "first call: the interpreter, the imports, the field and, for ours, numba and MPI). "
        "Ratios are against cripser at 1 thread. Oineus is "
        "measured up to %d^3 under a %.0f GiB address-space limit and a %.0f s time-out "
        "(a dash: skipped or stopped). 'pairs' are the nonzero finite pairs D0/D1/D2; ours and "
        "Oineus's must agree (the same filtration), and so must our cubical ones and "
        "cripser's." % (
            v["cripser"], v["oineus"], args.repeats, args.oineus_max_n,
            args.oineus_mem_gb, args.oineus_timeout),
        "",
        "| field | code | seconds | peak MiB (above start) | time / cripser | peak / cripser "
        "| pairs D0/D1/D2 |",
        "|---|---|---|---|---|---|---|",
    ]
    names = {"ours-1": "dmsolve, 1 rank (Freudenthal)",
             "ours-2": "dmsolve, 2 ranks (Freudenthal; peak per rank)",
             "cubical-1": "dmsolve, 1 rank (cubical)",
             "cubical-2": "dmsolve, 2 ranks (cubical; peak per rank)",
             "cripser-1": "cripser, 1 thread (cubical)", "cripser-2": "cripser, 2 threads (cubical)",
             "oineus": "Oineus, 1 thread (Freudenthal)"}
    for c in res["cases"]:
        ref = c["cripser-1"]
        for code in REF_CODES:
            r = c[code]
            field = "%s %d^3" % (c["kind"], c["n"])
            if "error" in r:
                lines.append("| %s | %s | - | - | - | - | %s |" % (field, names[code], r["error"]))
                continue
            tr = mr = "-"
            if "error" not in ref:
                tr = "%.2f" % (r["seconds"] / ref["seconds"])
                mr = "%.2f" % (r["peak_mib"] / ref["peak_mib"])
            pairs = "/".join(str(k) for k in r["nonzero"])
            if code == "oineus" and "error" not in c["ours-1"]:
                pairs += " (%s ours)" % ("=" if r["nonzero"] == c["ours-1"]["nonzero"] else "!=")
            if code.startswith("cubical") and "error" not in ref:
                pairs += " (%s cripser)" % ("=" if r["nonzero"] == ref["nonzero"] else "!=")
            start = r["base_mib"] if "base_mib" in r else max(r["base_mib_per_rank"])
            lines.append("| %s | %s | %.3g | %.0f (%.0f) | %s | %s | %s |" % (
                field, names[code], r["seconds"], r["peak_mib"], r["peak_mib"] - start, tr, mr,
                pairs))
    lines += ["", references_verdict(res["cases"])]
    return "\n".join(lines)


def references_verdict(cases) -> str:
    """The targets against the largest size measured."""
    top = max(c["n"] for c in cases)
    out = ["Targets at %d^3:" % top]
    for c in cases:
        if c["n"] != top:
            continue
        o, r, o2 = c["cubical-1"], c["cripser-1"], c["cubical-2"]
        if "error" in o or "error" in r or "error" in o2:
            out.append("cubical %s: not measured." % c["kind"])
        else:
            t1, t2 = o["seconds"] / r["seconds"], o2["seconds"] / r["seconds"]
            m1 = o["peak_mib"] / r["peak_mib"]
            ok = t1 <= 1.0 and t2 <= 0.6 and m1 <= 1.0
            out.append("Cubical mode, %s %d^3: %.2fx cripser's time at 1 rank (target 1.0x), "
                       "%.2fx at 2 ranks (0.6x), peak %.2fx (1.0x) -> %s."
                       % (c["kind"], top, t1, t2, m1, "met" if ok else "missed"))
    for c in cases:
        if c["n"] != top:
            continue
        o, r, o2 = c["ours-1"], c["cripser-1"], c["ours-2"]
        if "error" in o or "error" in r:
            out.append("%s: not measured." % c["kind"])
            continue
        ratio = o["seconds"] / r["seconds"]
        par = "" if "error" in o2 else (" (%.2fx at 2 ranks)" % (o2["seconds"] / r["seconds"]))
        out.append("Freudenthal mode, %s %d^3: %.2fx cripser's time at 1 rank%s against <= 1.5x "
                   "-> %s%s." % (c["kind"], top, ratio, par,
                                 "met" if ratio <= 1.5 else "missed",
                                 "" if ratio <= 1.5 else
                                 ", a %.1fx speed-up still needed" % (ratio / 1.5)))
    return " ".join(out)


# -- where the time goes (docs/design/persistence.md) --------------------------------------------
def profile(n: int, kind: str, cells: str = "freudenthal", top: int = 25) -> str:
    """Our diagram at 1 rank (this process), three times: phases with the
    peak resident set of each (VmHWM reset at every progress report), the
    compiled kernels called from Python (timing wrappers on the numba
    dispatchers of the topology modules), and cProfile's top functions.
    Returns the report as markdown."""
    import cProfile
    import io
    import pstats
    from mpi4py import MPI
    from dmsolve import DistVector
    from dmsolve.jit import is_kernel
    from topology import Grid, persistence_diagram
    comm = MPI.COMM_SELF
    _warm_up(comm)
    persistence_diagram(Grid((8, 8, 8), comm, complex=cells), make_field(8, kind))
    grid = Grid((n, n, n), comm, complex=cells)
    lay = grid.vertex_layout
    vec = DistVector(lay, make_field(n, kind)[lay.start:lay.stop])
    out = ["## %s %d^3 at 1 rank, %s" % (kind, n, _provenance.code_text(_provenance.code(ROOT))), ""]

    # 1. phases and their peaks
    phases = []
    last = [0.0]

    def progress(task, message, seconds):
        phases.append((message, seconds - last[0], peak_mib(), peak_mib("VmRSS")))
        last[0] = seconds
        reset_peak()

    start = peak_mib("VmRSS")
    reset_peak()
    t = time.perf_counter()
    persistence_diagram(grid, vec, progress=progress)
    total = time.perf_counter() - t
    out += ["### Phases (`progress=`), %.2f s in all; resident %.0f MiB before the call" % (
        total, start), "",
            "| phase (its report) | seconds | share | peak MiB during it | resident after |",
            "|---|---|---|---|---|"]
    for msg, s, pk, rss in phases:
        out.append("| %s | %.2f | %.0f%% | %.0f | %.0f |" % (msg, s, 100 * s / total, pk, rss))
    rest = total - sum(p[1] for p in phases)
    out.append("| (after the last report: the pairs' final sort, the diagram) | %.2f | %.0f%% "
               "| %.0f | %.0f |" % (rest, 100 * rest / total, peak_mib(), peak_mib("VmRSS")))

    # 2. the compiled kernels called from Python
    stats: dict[str, list[float]] = {}
    patched = []
    for mname, mod in list(sys.modules.items()):
        if not (mname.startswith("topology") or mname.startswith("dmsolve")) or mod is None:
            continue
        for attr, obj in list(vars(mod).items()):
            if is_kernel(obj):
                key = "%s.%s" % (obj.py_func.__module__, obj.__name__)

                def wrapped(*a, _f=obj, _k=key, **kw):
                    t0 = time.perf_counter()
                    try:
                        return _f(*a, **kw)
                    finally:
                        rec = stats.setdefault(_k, [0, 0.0])
                        rec[0] += 1
                        rec[1] += time.perf_counter() - t0
                setattr(mod, attr, wrapped)
                patched.append((mod, attr, obj))
    try:
        t = time.perf_counter()
        persistence_diagram(grid, vec)
        total_k = time.perf_counter() - t
    finally:
        for mod, attr, obj in patched:
            setattr(mod, attr, obj)
    out += ["", "### Compiled (numba) kernels called from Python, %.2f s run" % total_k, "",
            "| kernel | calls | seconds | share |", "|---|---|---|---|"]
    for k, (c, s) in sorted(stats.items(), key=lambda kv: -kv[1][1]):
        if s >= 0.005:
            out.append("| `%s` | %d | %.2f | %.0f%% |" % (k, c, s, 100 * s / total_k))
    ksum = sum(s for _, s in stats.values())
    out.append("| all kernels | | %.2f | %.0f%% |"
               % (ksum, 100 * ksum / total_k))

    # 3. cProfile
    pr = cProfile.Profile()
    pr.enable()
    persistence_diagram(grid, vec)
    pr.disable()
    for sort in ("tottime", "cumulative"):
        buf = io.StringIO()
        pstats.Stats(pr, stream=buf).strip_dirs().sort_stats(sort).print_stats(top)
        out += ["", "### cProfile, top %d by %s" % (top, sort), "", "```"]
        text = buf.getvalue().strip().splitlines()
        i = next((j for j, line in enumerate(text) if "ncalls" in line), 0)
        out += [text[0].strip() if text else ""] + text[i:]
        out += ["```"]
    return "\n".join(out)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[64, 128])
    p.add_argument("--kinds", nargs="+", default=["smooth", "noisy"])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--gudhi-timeout", type=float, default=1800.0)
    p.add_argument("--gudhi-mem-gb", type=float, default=16.0)
    p.add_argument("--json", default=None, help="write results here (rank 0)")
    p.add_argument("--references", action="store_true",
                   help="ours at 1 and 2 ranks against cripser and Oineus")
    p.add_argument("--n", type=int, help="one size (instead of --sizes)")
    p.add_argument("--oineus-max-n", type=int, default=64,
                   help="largest n for Oineus (it took 1.4 GiB at 64^3)")
    p.add_argument("--oineus-timeout", type=float, default=600.0)
    p.add_argument("--oineus-mem-gb", type=float, default=6.0)
    p.add_argument("--profile", action="store_true",
                   help="profile ours at 1 rank on --n, --kind, --complex (markdown on stdout)")
    p.add_argument("--worker", choices=["ours", "gudhi", "ours-ref", "cripser", "oineus"],
                   help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--complex", default="freudenthal", help="freudenthal or cubical (--profile)")
    p.add_argument("--kind", help="smooth or noisy (--profile)")
    args = p.parse_args()
    if args.n is not None and args.worker is None:
        args.sizes = [args.n]
    if args.profile:
        print(profile(args.n or 128, args.kind or "noisy", args.complex))
    elif args.worker == "ours-ref":
        res = ours_ref_worker(args.n, args.kind, args.repeats, args.complex)
        if res is not None:
            print(json.dumps(res))
    elif args.worker == "cripser":
        print(json.dumps(cripser_worker(args.n, args.kind, args.repeats, args.threads)))
    elif args.worker == "oineus":
        print(json.dumps(oineus_worker(args.n, args.kind, args.repeats)))
    elif args.worker == "gudhi":
        res = gudhi_worker(args.n, args.kind)
        print(json.dumps(res))
    elif args.worker == "ours":
        res = ours_worker(args.n, args.kind, args.repeats)
        print(json.dumps(res))
    else:
        from mpi4py import MPI
        res = (references if args.references else main)(MPI.COMM_WORLD, args)
        if MPI.COMM_WORLD.Get_rank() == 0 and args.json:
            os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
            with open(args.json, "w") as fh:
                json.dump(res, fh, indent=1, default=float)
