"""Edge cut and balance of the parallel partitioners against METIS on the gathered graph.

    python bench/bench_partition_quality.py --ranks 2 4 8 16    # writes docs/measurements/partition-quality.md

Each rank count is a fresh ``mpiexec -n P`` job (oversubscribed is fine: the
figures are cut, balance and bytes, not time). Cases, the same at every P:

- ``poisson2d``: ``gallery.poisson2d(200)`` (40,000 rows), coordinates the grid's;
- ``poisson3d``: ``gallery.poisson3d(30)`` (27,000 rows);
- ``delaunay``: the graph Laplacian of the Delaunay triangulation of 30,000
  random points of the unit square, rows in the points' random order (so the
  block distribution the partitioners start from has no locality at all).

Methods: ``metis`` (``metis_partition`` with a gather limit of the whole
graph: the graph gathered to rank 0 and serial METIS at every P, the
reference; its default limit hands large graphs to ``multilevel``),
``multilevel``, ``hilbert`` and ``rcb`` (the last two given the coordinates).
Per case, method and P: the edge cut (METIS's, of the symmetrised graph, by
``partition_quality``), its ratio to metis's cut, the row imbalance
``max / mean`` of the part sizes, the maximum over ranks of the bytes sent
plus received (bench/_counting.py's ``CountingComm``), rank 0's bytes, and
the wall time. Targets: cut <= 1.3x metis, imbalance <= 1.05. The page names
the commit and machine measured; docs/design/partitioning.md discusses the
figures.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import _provenance  # noqa: E402
CASES = ("poisson2d", "poisson3d", "delaunay")
METHODS = ("metis", "multilevel", "hilbert", "rcb")


def make_case(name: str, comm, scale: float = 1.0):
    """``(A, coords of the owned rows)`` of a case. Collective."""
    from dmsolve import gallery
    if name == "poisson2d":
        n = int(200 * scale)
        A = gallery.poisson2d(n, comm)
        i = np.arange(A.row_layout.start, A.row_layout.stop)
        return A, np.column_stack((i % n, i // n)).astype(float)
    if name == "poisson3d":
        n = int(30 * scale)
        A = gallery.poisson3d(n, comm)
        i = np.arange(A.row_layout.start, A.row_layout.stop)
        return A, np.column_stack((i % n, (i // n) % n, i // (n * n))).astype(float)
    if name == "delaunay":
        from scipy.spatial import Delaunay
        m = int(30000 * scale * scale)
        pts = np.random.default_rng(7).random((m, 2))
        tri = Delaunay(pts).simplices
        # each rank passes a share of the triangles' edges (the set is built
        # on every rank here, before the measurement; it is the input, not the method)
        lo, hi = (tri.shape[0] * comm.Get_rank()) // comm.Get_size(), \
                 (tri.shape[0] * (comm.Get_rank() + 1)) // comm.Get_size()
        t = tri[lo:hi]
        edges = np.concatenate((t[:, [0, 1]], t[:, [1, 2]], t[:, [0, 2]]))
        A = gallery.graph_laplacian(edges, m, comm)
        return A, pts[A.row_layout.start:A.row_layout.stop]
    raise ValueError(name)


def run_method(method: str, A, coords, nnz: int):
    from dmsolve import partition as part
    if method in ("hilbert", "rcb"):
        return part.partition(A, method, coords=coords)
    if method == "metis":
        return part.partition(A, method, gather_limit=nnz)     # always gathered
    return part.partition(A, method)


def worker(json_path: str, scale: float) -> None:
    from mpi4py import MPI
    sys.path.insert(0, str(HERE))
    from _counting import TALLY, counting
    from dmsolve import partition as part

    world = MPI.COMM_WORLD
    comm = counting(world)
    rows = []
    for case in CASES:
        A, coords = make_case(case, comm, scale)
        nnz = A.global_nnz()
        for method in METHODS:
            world.Barrier()
            TALLY.reset()
            t0 = time.perf_counter()
            P = run_method(method, A, coords, nnz)
            seconds = world.allreduce(time.perf_counter() - t0, op=MPI.MAX)
            nbytes = TALLY.bytes_sent + TALLY.bytes_recv
            steps = TALLY.supersteps
            q = part.partition_quality(A, P)
            all_bytes = world.gather(nbytes, root=0)
            if world.Get_rank() == 0:
                rows.append({"case": case, "method": method, "n": A.shape[0],
                             "ranks": world.Get_size(), "edge_cut": q.edge_cut,
                             "imbalance": q.row_imbalance, "seconds": seconds,
                             "max_bytes": max(all_bytes), "rank0_bytes": all_bytes[0],
                             "mean_bytes": float(np.mean(all_bytes)), "supersteps": steps})
    if world.Get_rank() == 0:
        with open(json_path, "w") as f:
            json.dump(rows, f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8, 16])
    ap.add_argument("--scale", type=float, default=1.0, help="grid side factor")
    ap.add_argument("--out", default=str(ROOT / "docs" / "measurements" / "partition-quality.md"))
    ap.add_argument("--worker", metavar="JSON", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.scale)
        return
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1")
    mpiexec = pathlib.Path(sys.executable).with_name("mpiexec")
    rows = []
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
    code = _provenance.code(str(ROOT))          # before the run: what it measures
    for p in args.ranks:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "rows.json")
            subprocess.run([str(mpiexec), "-n", str(p), sys.executable, "-m", "mpi4py",
                            __file__, "--worker", path, "--scale", str(args.scale)],
                           env=env, check=True)
            with open(path) as f:
                rows += json.load(f)
        print("done at %d ranks" % p, file=sys.stderr)
    text = report(rows, args, _provenance.header({"": code}, _provenance.machine(),
                                                 started + " (UTC)"))
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out).write_text(text)
    print(text)


def report(rows: list[dict], args, header: list[str]) -> str:
    """The results page: ``header`` (date, code, machine), then one table per case."""
    ref = {(r["case"], r["ranks"]): r["edge_cut"] for r in rows if r["method"] == "metis"}
    out = ["# Partition quality: parallel partitioners against METIS on the gathered graph", "",
           "Written by bench/bench_partition_quality.py; do not edit by hand.", "", *header, "",
           "Made by `python bench/bench_partition_quality.py --ranks %s --scale %g` "
           "(fresh `mpiexec -n P` per rank count; where P exceeds the cores the time "
           "column is indicative only). Cut ratio = edge cut / metis's edge cut at the "
           "same P; imbalance = max part size / mean. Bytes = sent + received by one "
           "rank during the partition call (bench/_counting.py), KiB. Targets: cut "
           "ratio <= 1.3, imbalance <= 1.05." % (" ".join(map(str, args.ranks)), args.scale),
           ""]
    for case in CASES:
        sub = [r for r in rows if r["case"] == case]
        if not sub:
            continue
        out += ["## %s (%d rows)" % (case, sub[0]["n"]), "",
                "| P | method | edge cut | cut ratio | imbalance | max KiB | rank-0 KiB "
                "| mean KiB | supersteps | s |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        for r in sorted(sub, key=lambda r: (r["ranks"], METHODS.index(r["method"]))):
            out.append("| %d | %s | %d | %.3f | %.3f | %.0f | %.0f | %.0f | %d | %.1f |" % (
                r["ranks"], r["method"], r["edge_cut"],
                r["edge_cut"] / max(ref[(case, r["ranks"])], 1), r["imbalance"],
                r["max_bytes"] / 1024, r["rank0_bytes"] / 1024, r["mean_bytes"] / 1024,
                r["supersteps"], r["seconds"]))
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    main()
