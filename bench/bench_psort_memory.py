"""Per-rank peak memory of building a renumbered SimplicialComplex, and of a
grid's persistence diagram, weak scaling.

    python bench/bench_psort_memory.py --ranks 2 4 8 [--before OTHER_CHECKOUT]

Each case is a fresh ``mpiexec -n P`` job: a Freudenthal tetrahedral grid of
shape (20, 20, 20*P), so 8,000 vertices per rank, each rank passing the
tetrahedra of its own slab of planes (and, for ``"rcb"``, its own rows of the
points as ``local_points``, made before the measurement starts).
Every rank writes "5" to /proc/self/clear_refs (resetting VmHWM to the
current RSS) right before ``SimplicialComplex(...)``, and reads VmHWM after:
the growth is VmHWM after minus VmRSS before. The table gives the maximum and
mean over ranks, in MiB, for the code on ``PYTHONPATH`` of each column: this
checkout, and another one given by ``--before`` (a commit to compare with).
The page, headed by the date, the commits and the machine, goes to ``--out``
(docs/measurements/psort-memory.md) and stdout. Oversubscribed runs are fine:
the figure is memory, not time. METIS gathers the vertex graph to rank 0
(``dmsolve.partition.metis_partition``), which shows in its max column.
``--partitions persistence``: the persistence diagram of bench/scale.py's
noisy field on a Freudenthal grid of (40, 40, 40 p), 64,000 vertices per
rank, measured around ``persistence_diagram`` alone. The last lines give
each case's largest rank count against its smallest (target: at most 1.25x,
rank 0 at most 1.2x the mean).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import _provenance  # noqa: E402
PER_RANK = 20          # vertices per rank: PER_RANK**3


def _status(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return float(line.split()[1]) / 1024.0     # kB -> MiB
    raise RuntimeError("no %s in /proc/self/status" % field)


GRID_PER_RANK = 40     # persistence: vertices per rank GRID_PER_RANK**3


def persistence_worker() -> None:
    from mpi4py import MPI

    import scale
    from topology import persistence_diagram

    comm = MPI.COMM_WORLD
    s = scale.prep_persistence(comm, 12)
    persistence_diagram(s["grid"], s["f"])          # warm-up: kernels, communicators
    del s
    s = scale.prep_persistence(comm, GRID_PER_RANK)
    comm.Barrier()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = _status("VmRSS")
    dg = persistence_diagram(s["grid"], s["f"])
    growth = _status("VmHWM") - before
    every = comm.gather(growth, root=0)
    pairs = [dg.report[d]["pairs"] for d in range(3)]
    if comm.rank == 0:
        print(json.dumps({"max": max(every), "mean": sum(every) / comm.size,
                          "rank0": every[0], "counts": [GRID_PER_RANK ** 3 * comm.size,
                                                        pairs]}))


def worker(partition: str) -> None:
    if partition == "persistence":
        persistence_worker()
        return
    import numpy as np
    from mpi4py import MPI

    from topology import SimplicialComplex
    from topology.core import grid_cells as _grid_cells

    comm = MPI.COMM_WORLD
    p, r = comm.size, comm.rank
    shape = (PER_RANK, PER_RANK, PER_RANK * p)
    cells = _grid_cells(shape, planes=(PER_RANK * r, min(PER_RANK * (r + 1), shape[2] - 1)))
    pts = None
    if partition == "rcb":
        # this rank's rows of the points (ids x fastest: its slab's planes)
        z = np.arange(PER_RANK * r, PER_RANK * (r + 1), dtype=float)
        Z, Y, X = np.meshgrid(z, np.arange(shape[1], dtype=float),
                              np.arange(shape[0], dtype=float), indexing="ij")
        pts = np.column_stack((X.ravel(), Y.ravel(), Z.ravel()))
    # a warm-up complex, so imports and first-call caches are not counted
    SimplicialComplex([np.array([[0, 1, 2, 3]])], comm)
    comm.Barrier()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = _status("VmRSS")
    cx = SimplicialComplex([cells], comm, local_points=pts, partition=partition)
    growth = _status("VmHWM") - before
    every = comm.gather(growth, root=0)
    counts = cx.counts()
    if r == 0:
        print(json.dumps({"max": max(every), "mean": sum(every) / p, "rank0": every[0],
                          "counts": counts}))


def run_case(path: str, partition: str, ranks: int, timeout: float) -> dict | None:
    env = dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    cmd = [mpiexec, "-n", str(ranks), sys.executable, "-m", "mpi4py", str(HERE /
           "bench_psort_memory.py"), "--worker", partition]
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    for line in out.stdout.splitlines()[::-1]:
        if line.startswith("{"):
            return json.loads(line)
    sys.stderr.write(out.stdout[-2000:] + out.stderr[-2000:])
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--partitions", nargs="+", default=["metis", "rcb", "persistence"])
    ap.add_argument("--before", default=None,
                    help="another checkout to measure too (its PYTHONPATH)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "measurements" / "psort-memory.md"))
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker)
        return
    columns = ([("--before", args.before)] if args.before else []) + [("this checkout",
                                                                         str(ROOT))]
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
    codes = {name: _provenance.code(path) for name, path in columns}
    lines = ["# Peak memory per rank at fixed work: renumbered complexes, grid persistence", "",
             "Written by bench/bench_psort_memory.py; do not edit by hand.", "",
             *_provenance.header(codes, _provenance.machine(), started + " (UTC)"), "",
             "Freudenthal tetrahedral grid (%d, %d, %d p): %d vertices per rank, each rank "
             "passing its slab's tetrahedra. Max / mean over ranks of the peak RSS growth "
             "(MiB) during `SimplicialComplex(...)`: VmHWM after minus VmRSS before, with "
             "\"5\" written to /proc/self/clear_refs before." % (
                 PER_RANK, PER_RANK, PER_RANK, PER_RANK ** 3), "",
             "| partition | ranks | vertices | tets | "
             + " | ".join("%s max / mean MiB" % name for name, _ in columns) + " |",
             "|---|---:|---:|---:|" + "---:|" * len(columns)]
    print("\n".join(lines), flush=True)
    growth: dict = {}
    for part in args.partitions:
        for p in args.ranks:
            cells, counts = [], None
            for name, path in columns:
                res = run_case(path, part, p, args.timeout)
                if res is None:
                    cells.append("failed")
                    continue
                counts = res["counts"]
                growth.setdefault((part, name), []).append((p, res))
                cells.append("%.1f / %.1f" % (res["max"], res["mean"]))
            nv = counts[0] if counts else PER_RANK**3 * p
            nt = counts[-1] if counts else "?"
            lines.append("| %s | %d | %s | %s | %s |" % (part, p, nv, nt, " | ".join(cells)))
            print(lines[-1], flush=True)
    lines += ["", "Largest rank count against the smallest (max over ranks; rank 0 over the "
              "mean at the largest): targets <= 1.25x and <= 1.2x.", ""]
    for (part, name), runs in growth.items():
        (p0, r0), (p1, r1) = min(runs, key=lambda t: t[0]), max(runs, key=lambda t: t[0])
        if p1 == p0:
            continue
        lines.append("- %s (%s): %d ranks %.1f MiB against %d ranks %.1f MiB: %.2fx; rank 0 "
                     "%.2fx the mean at %d." % (part, name, p1, r1["max"], p0, r0["max"],
                                                r1["max"] / max(r0["max"], 1e-9),
                                                r1["rank0"] / max(r1["mean"], 1e-9), p1))
        print(lines[-1], flush=True)
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
