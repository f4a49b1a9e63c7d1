"""Threads inside a rank: 1 rank x 2 threads against 2 ranks x 1 thread and 1 x 1.

    python bench/bench_threads.py --json out/bench/threads.json

Four workloads, each launched in fresh processes for every layout (``mpiexec
-n 1`` with ``DMSOLVE_NUM_THREADS=1`` and ``=2``, ``mpiexec -n 2`` with 1),
in ``--rounds`` rounds that alternate the layouts:

- ``matvec``: the product of the 3D Poisson matrix ``poisson3d(n)`` (n = 100),
  the best of ``--repeats`` x 20 products;
- ``amg``: ``dmsolve.solve(A, b, "cg", "amg", rtol=1e-8)`` on the same
  matrix, set-up and solve seconds of the best of ``--repeats`` solves after
  a warm-up solve;
- ``cubical``: the persistence diagram of the noisy 128^3 field of
  bench_persistence.py on ``Grid(..., complex="cubical")``, and CubicalRipser
  (``computePH(maxdim=2)``, 1 and 2 threads) on the same field;
- ``image``: ``topology.image_persistence`` of a 1000 x 1000 grey crop of
  scikit-image's retina, and CubicalRipser (``maxdim=1``, 1 thread).

Times are the slowest rank's. Resident memory is each process's VmRSS
after the work with its inputs and result still alive (the matrix and
vectors; the grid, field and diagram; the AMG hierarchy is freed), after a
garbage collection and glibc's ``malloc_trim``
and its peak VmHWM (set-up transients included), each summed over the ranks
of a layout. Every layout's result is hashed (the product's vector, the
solution, the diagram's pairs, gathered on rank 0) so that the table can say
whether the threads changed a bit.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import (ONE_BLAS_THREAD, best_run, child_env, launch_json,  # noqa: E402
                     stream_triad_gbs, write_json)

CASES = ("matvec", "amg", "cubical", "image")
LAYOUTS = (("1x1", 1, 1), ("1x2", 1, 2), ("2x1", 2, 1))

# the targets: 1x2 time / 2x1 time, 1x1 time / 1x2 time (a speed-up)
TARGET_VS_RANKS = {"matvec": 1.1, "amg-solve": 1.2, "amg-setup": 1.3, "cubical": 1.1}
TARGET_SPEEDUP = {"matvec": 1.6, "cubical": 1.6, "amg-total": 1.5}
TARGET_MEMORY = 0.6                 # 1x2 resident / (2x1 resident summed over its ranks)
TARGET_CRIPSER = {"cubical": 0.5, "image": 1.0}


def _status_mb(field: str) -> float:
    """``VmRSS`` (resident now) or ``VmHWM`` (its peak) of this process, MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def _release_free_memory() -> None:
    """Give the allocator's free pages back, so that VmRSS counts live data:
    glibc keeps freed memory of the heap and of each thread's arena."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):       # not glibc: VmRSS as it is
        pass


def _resident_mb() -> float:
    """VmRSS with the work's data still alive, free pages given back."""
    _release_free_memory()
    return _status_mb("VmRSS")


def _digest(*arrays) -> str:
    h = hashlib.sha1()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:12]


def _slowest(comm, seconds: float) -> float:
    return max(comm.allgather(seconds))


def retina_crop() -> np.ndarray:
    """A 1000 x 1000 grey crop of scikit-image's retina, float64. Not collective."""
    import skimage.color
    import skimage.data

    img = skimage.color.rgb2gray(skimage.data.retina())
    return np.ascontiguousarray(img[205:1205, 205:1205], dtype=np.float64)


def noisy_field(n: int) -> np.ndarray:
    """bench_persistence.py's noisy n^3 field, in vertex-id order. Not collective."""
    from bench_persistence import make_field

    return make_field(n, "noisy")


def work_matvec(comm, n: int, repeats: int) -> dict:
    import dmsolve.gallery

    A = dmsolve.gallery.poisson3d(n, comm)
    x, y = A.create_vectors()
    x.local[:] = np.sin(np.arange(x.layout.start, x.layout.stop) * 1e-3)
    for _ in range(3):
        A.matvec(x, y)
    best = np.inf
    for _ in range(repeats):
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(20):
            A.matvec(x, y)
        best = min(best, _slowest(comm, (time.perf_counter() - t0) / 20))
    full = y.gather()
    # the memory bandwidth the layout's processes draw together (a product
    # streams memory: it cannot go faster than this allows)
    comm.Barrier()
    stream = comm.allreduce(stream_triad_gbs(10_000_000))
    return {"seconds": best, "digest": _digest(full) if comm.rank == 0 else None,
            "rss": _resident_mb(), "stream_gbs": stream}


def work_amg(comm, n: int, repeats: int) -> dict:
    import dmsolve
    import dmsolve.gallery

    A = dmsolve.gallery.poisson3d(n, comm)
    b = A.create_vectors()[1]
    b.local[:] = 1.0
    dmsolve.solve(A, b, "cg", "amg", rtol=1e-8)          # compiles, first touches
    runs = []
    for _ in range(repeats):
        comm.Barrier()
        t0 = time.perf_counter()
        x, info = dmsolve.solve(A, b, "cg", "amg", rtol=1e-8)
        total = _slowest(comm, time.perf_counter() - t0)
        runs.append({"seconds": total, "setup": _slowest(comm, info.setup_seconds),
                     "solve": _slowest(comm, info.solve_seconds),
                     "iterations": int(info.iterations)})
    best = min(runs, key=lambda r: r["seconds"])
    best["setup"] = min(r["setup"] for r in runs)
    best["solve"] = min(r["solve"] for r in runs)
    full = x.gather()
    best["digest"] = _digest(full) if comm.rank == 0 else None
    best["rss"] = _resident_mb()        # the matrix, the solution (its AMG is freed)
    return best


def _diagram_digest(dg) -> str | None:
    if dg is None:
        return None
    p = dg.pairs
    return _digest(*(p[k] for k in sorted(p)))


def work_cubical(comm, n: int, repeats: int) -> dict:
    import topology
    from dmsolve import DistVector

    grid = topology.Grid((n, n, n), comm, complex="cubical")
    lay = grid.vertex_layout
    values = DistVector(lay, noisy_field(n)[lay.start:lay.stop])
    run = lambda: topology.persistence_diagram(grid, values)       # noqa: E731
    run()
    best = np.inf
    for _ in range(repeats):
        comm.Barrier()
        t0 = time.perf_counter()
        dg = run()
        best = min(best, _slowest(comm, time.perf_counter() - t0))
    return {"seconds": best, "digest": _diagram_digest(dg.gather(root=0)),
            "rss": _resident_mb()}


def work_image(comm, repeats: int) -> dict:
    import topology

    arr = retina_crop()
    topology.image_persistence(arr, comm)
    best = np.inf
    for _ in range(repeats):
        comm.Barrier()
        t0 = time.perf_counter()
        dg = topology.image_persistence(arr, comm)
        best = min(best, _slowest(comm, time.perf_counter() - t0))
    return {"seconds": best, "digest": _diagram_digest(dg.gather(root=0)),
            "rss": _resident_mb()}


def worker(case: str, n: int, repeats: int) -> None:
    from mpi4py import MPI

    import dmsolve

    comm = MPI.COMM_WORLD
    if case == "matvec":
        res = work_matvec(comm, n, repeats)
    elif case == "amg":
        res = work_amg(comm, n, repeats)
    elif case == "cubical":
        res = work_cubical(comm, n, repeats)
    else:
        res = work_image(comm, repeats)
    rss = comm.gather(res.pop("rss"), root=0)
    hwm = comm.gather(_status_mb("VmHWM"), root=0)
    if comm.rank == 0:
        res.update(resident_mb=float(sum(rss)), peak_mb=float(sum(hwm)), ranks=comm.size,
                   threads=dmsolve.get_num_threads())
        print(json.dumps(res))


def worker_cripser(case: str, n: int, repeats: int, threads: int) -> dict:
    import cripser

    if case == "cubical":
        arr, maxdim = noisy_field(n).reshape(n, n, n), 2
    else:
        arr, maxdim = retina_crop(), 1
    cripser.computePH(arr, maxdim=maxdim, top_dim=False, n_threads=threads)
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        cripser.computePH(arr, maxdim=maxdim, top_dim=False, n_threads=threads)
        best = min(best, time.perf_counter() - t0)
    return {"seconds": best, "resident_mb": _status_mb("VmRSS"),
            "peak_mb": _status_mb("VmHWM"), "version": cripser.__version__}


def launch(prefix: list[str], args: list[str], threads: int) -> dict:
    """Run this script's worker on ``threads`` threads per rank."""
    return launch_json(__file__, prefix, args,
                       child_env(DMSOLVE_NUM_THREADS=str(threads), **ONE_BLAS_THREAD), 3600)


def measure(case: str, n: int, repeats: int, rounds: int) -> dict:
    py = sys.executable
    mpiexec = os.path.join(os.path.dirname(py), "mpiexec")
    base = ["--worker", case, "--n", str(n), "--repeats", str(repeats)]
    runs: dict[str, list] = {name: [] for name, _, _ in LAYOUTS}
    refs = {"cubical": (1, 2), "image": (1,)}.get(case, ())
    for t in refs:
        runs["cripser-%d" % t] = []
    for _ in range(rounds):
        for name, ranks, threads in LAYOUTS:
            runs[name].append(launch([mpiexec, "-n", str(ranks), py, "-m", "mpi4py"], base,
                                     threads))
        for t in refs:
            runs["cripser-%d" % t].append(launch([py], base + ["--cripser", str(t)], 1))
    return {"n": n, **{name: best_run(v) for name, v in runs.items()}}


def _ratio(a, b) -> float:
    return a / b if a and b else float("nan")


def _verdict(value: float, target: float, at_most: bool = True) -> str:
    ok = value <= target if at_most else value >= target
    return "met" if ok else "**missed**"


def markdown(results: dict, repeats: int, rounds: int) -> str:
    rows = ["| workload | 1x1 s | 1x2 s | 2x1 s | 1x2 / 2x1 | 1x1 / 1x2 | resident MiB "
            "1x1 / 1x2 / 2x1 (sum) | 1x2 / 2x1 resident | 1x2 / 2x1 peak | 1x2 = 1x1 bits |",
            "|---|---:|---:|---:|---:|---:|---|---:|---:|---|"]
    verdicts = []

    def add(label, c, key="seconds"):
        t = {name: c[name].get(key, np.nan) for name, _, _ in LAYOUTS}
        mem = {name: c[name].get("resident_mb", np.nan) for name, _, _ in LAYOUTS}
        peak = {name: c[name].get("peak_mb", np.nan) for name, _, _ in LAYOUTS}
        # threads must not change a bit; ranks may (another summation order);
        # a Krylov solve's dot products sum in lanes at 2 threads, so there
        # the iterations must agree and the solution only to rounding
        same = c["1x1"].get("digest") == c["1x2"].get("digest") is not None
        its = {c[name].get("iterations") for name, _, _ in LAYOUTS}
        rows.append("| %s | %.4f | %.4f | %.4f | %.2f | %.2f | %.0f / %.0f / %.0f | %.2f | %.2f "
                    "| %s |" % (label, t["1x1"], t["1x2"], t["2x1"], _ratio(t["1x2"], t["2x1"]),
                                _ratio(t["1x1"], t["1x2"]), mem["1x1"], mem["1x2"], mem["2x1"],
                                _ratio(mem["1x2"], mem["2x1"]), _ratio(peak["1x2"], peak["2x1"]),
                                "yes" if same else "iterations equal; dots in lanes"
                                if len(its) == 1 and None not in its else "**no**"))
        return t, mem

    if "matvec" in results:
        t, mem = add("matvec, Poisson %d^3 (per product)" % results["matvec"]["n"],
                     results["matvec"])
        r = _ratio(t["1x2"], t["2x1"])
        verdicts.append("- matvec: 1x2 / 2x1 = %.2f (target <= %.1f: %s); 1x1 / 1x2 = %.2f "
                        "(target >= %.1f: %s)" % (
                            r, TARGET_VS_RANKS["matvec"], _verdict(r, TARGET_VS_RANKS["matvec"]),
                            _ratio(t["1x1"], t["1x2"]), TARGET_SPEEDUP["matvec"],
                            _verdict(_ratio(t["1x1"], t["1x2"]), TARGET_SPEEDUP["matvec"],
                                     False)))
        c = results["matvec"]
        verdicts.append("- STREAM triad (one process per rank, all at once): %.1f GB/s from 1 "
                        "rank, %.1f GB/s from 2: a second core adds %.0f%% bandwidth, the "
                        "ceiling of a memory-bound product's speed-up" % (
                            c["1x1"].get("stream_gbs", np.nan), c["2x1"].get("stream_gbs", np.nan),
                            100 * (_ratio(c["2x1"].get("stream_gbs"), c["1x1"].get("stream_gbs"))
                                   - 1)))
        verdicts.append("- resident memory, matvec: 1x2 / 2x1 = %.2f (target <= %.1f: %s)" % (
            _ratio(mem["1x2"], mem["2x1"]), TARGET_MEMORY,
            _verdict(_ratio(mem["1x2"], mem["2x1"]), TARGET_MEMORY)))
    if "amg" in results:
        c = results["amg"]
        t, mem = add("CG + amg `solve`, Poisson %d^3 (whole call)" % c["n"], c)
        ts, _ = add("CG + amg, set-up", c, "setup")
        tv, _ = add("CG + amg, solve phase", c, "solve")
        its = [c[name].get("iterations") for name, _, _ in LAYOUTS]
        for label, key, tt in (("solve phase", "amg-solve", tv), ("set-up", "amg-setup", ts)):
            r = _ratio(tt["1x2"], tt["2x1"])
            verdicts.append("- CG + amg %s: 1x2 / 2x1 = %.2f (target <= %.1f: %s)" % (
                label, r, TARGET_VS_RANKS[key], _verdict(r, TARGET_VS_RANKS[key])))
        s = _ratio(t["1x1"], t["1x2"])
        verdicts.append("- CG + amg whole solve: 1x1 / 1x2 = %.2f (target >= %.1f: %s); "
                        "iterations 1x1 / 1x2 / 2x1: %s" % (
                            s, TARGET_SPEEDUP["amg-total"],
                            _verdict(s, TARGET_SPEEDUP["amg-total"], False),
                            " / ".join(str(i) for i in its)))
        verdicts.append("- resident memory, CG + amg: 1x2 / 2x1 = %.2f (target <= %.1f: %s)" % (
            _ratio(mem["1x2"], mem["2x1"]), TARGET_MEMORY,
            _verdict(_ratio(mem["1x2"], mem["2x1"]), TARGET_MEMORY)))
    for case, label in (("cubical", "cubical persistence, noisy %d^3"),
                        ("image", "image persistence, retina 1000x1000")):
        if case not in results:
            continue
        c = results[case]
        label = label % c["n"] if "%" in label else label
        t, mem = add(label, c)
        crip = c.get("cripser-1", {}).get("seconds", np.nan)
        rows.append("| %s: CubicalRipser 1 thread | %.4f | | | | | %.0f | | | |" % (
            label, crip, c.get("cripser-1", {}).get("resident_mb", np.nan)))
        if "cripser-2" in c:
            rows.append("| %s: CubicalRipser 2 threads | %.4f | | | | | %.0f | | | |" % (
                label, c["cripser-2"].get("seconds", np.nan),
                c["cripser-2"].get("resident_mb", np.nan)))
        if case == "cubical":
            r = _ratio(t["1x2"], t["2x1"])
            s = _ratio(t["1x1"], t["1x2"])
            q = _ratio(t["1x2"], crip)
            verdicts.append("- cubical persistence: 1x2 / 2x1 = %.2f (target <= %.1f: %s); "
                            "1x1 / 1x2 = %.2f (target >= %.1f: %s); 1x2 / cripser = %.2f "
                            "(target <= %.1f: %s)" % (
                                r, TARGET_VS_RANKS["cubical"],
                                _verdict(r, TARGET_VS_RANKS["cubical"]), s,
                                TARGET_SPEEDUP["cubical"],
                                _verdict(s, TARGET_SPEEDUP["cubical"], False), q,
                                TARGET_CRIPSER["cubical"], _verdict(q, TARGET_CRIPSER["cubical"])))
            verdicts.append("- resident memory, cubical: 1x2 / 2x1 = %.2f (target <= %.1f: %s)"
                            % (_ratio(mem["1x2"], mem["2x1"]), TARGET_MEMORY,
                               _verdict(_ratio(mem["1x2"], mem["2x1"]), TARGET_MEMORY)))
        else:
            q1, q2 = _ratio(t["1x1"], crip), _ratio(t["1x2"], crip)
            verdicts.append("- image persistence: 1x1 / cripser = %.2f, 1x2 / cripser = %.2f "
                            "(target <= %.1f at 1 rank: %s)" % (
                                q1, q2, TARGET_CRIPSER["image"],
                                _verdict(min(q1, q2), TARGET_CRIPSER["image"])))
    return "\n".join(rows + [
        "",
        "Layouts: `RxT` is R ranks (`mpiexec -n R`) of T threads (`DMSOLVE_NUM_THREADS=T`) "
        "each, on this 2-core machine. Each case in fresh processes, the best of %d timed "
        "calls after a warm-up call (the matvec: of %d x 20 products), best over %d rounds "
        "that alternate the layouts; times are the slowest rank's. Resident memory is VmRSS "
        "after the work with its data alive (the libraries, the matrix or field, the result; "
        "free pages given back by malloc_trim), peak is "
        "VmHWM (the process's peak over the run, set-up transients included), each summed "
        "over the ranks. '1x2 = 1x1 bits': the "
        "gathered result (product vector, solution, diagram pairs) hashes the same at 2 "
        "threads as at 1 (2 ranks sum some rows in another order); a Krylov solve's dot "
        "products are summed in fixed lanes on 2 threads, so its iterations are equal "
        "and its solution agrees to rounding. Targets:"
        % (repeats, repeats, rounds), ""] + verdicts)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", default=None, help="write results here")
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--n", type=int, default=None,
                   help="grid size (default 100 for matvec/amg, 128 for cubical)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--worker", choices=CASES, help=argparse.SUPPRESS)
    p.add_argument("--cripser", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        if args.cripser:
            print(json.dumps(worker_cripser(args.worker, args.n, args.repeats, args.cripser)))
        else:
            worker(args.worker, args.n, args.repeats)
        return 0
    results = {}
    for case in args.cases.split(","):
        n = args.n or (128 if case == "cubical" else 100)
        results[case] = measure(case, n, args.repeats, args.rounds)
        print(case, json.dumps(results[case]), flush=True)
    res = {"cases": results, "repeats": args.repeats, "rounds": args.rounds,
           "markdown": markdown(results, args.repeats, args.rounds)}
    print(res["markdown"])
    write_json(args.json, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
