"""Complex construction at 2 ranks against the code from before it used psort.

    python bench/bench_psort_rounds.py --json out/bench/psort_rounds.json

``SimplicialComplex`` under ``partition="rcb"`` and ``"metis"`` renumbers its
simplices with :func:`dmsolve.bsp.rank_of` (one distributed sort per
dimension); before that it gathered global-size arrays. This script builds
the complex of the Freudenthal tetrahedra of a ``16 x 16 x 32`` vertex grid
(``--n 16`` planes per rank, each rank passing the cells of its slab of
planes; every rank passes all the points) with this checkout and with the
commit before the complex used psort (``--before-commit``; the script
extracts it with ``git archive`` into a temporary directory and removes that
at the end, or takes an existing checkout from ``--before``).

Every construction runs in a fresh ``mpiexec -n 2`` job per checkout and
partition, in ``--rounds`` rounds that alternate the checkouts; a job builds
the complex once to warm up, then ``--repeats`` times: its time is the best
of them (slowest rank), and the figure is the best over the rounds. The
supersteps are the ``Ledger.record_superstep`` calls of one construction
(the BSP layer's supersteps and psort's recorded collectives), counted by
wrapping the method in the job. The table gives the ratio of the times
(this checkout / before psort) against the target of 1.2.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import (ONE_BLAS_THREAD, ROOT, best_run, child_env, launch_json,  # noqa: E402
                     write_json)

#: the last commit before SimplicialComplex renumbered with psort's rank_of
BEFORE_PSORT = "627dd4b7897a45bd2267baaab6b592c2b4561d60"
PARTITIONS = ("rcb", "metis")
TARGET = 1.2                        # construction time / the time before psort


def _tets(comm, n: int):
    """This rank's tetrahedra of the Freudenthal triangulation of the vertex
    grid ``n x n x (n p)``: the cells with z in this rank's slab of planes."""
    import numpy as np
    from topology import freudenthal_cells
    p, r = comm.Get_size(), comm.Get_rank()
    nz = n * p
    z0, z1 = r * n, min((r + 1) * n, nz - 1)
    cx, cy, cz = np.meshgrid(np.arange(n - 1), np.arange(n - 1), np.arange(z0, z1),
                             indexing="ij")
    base = np.stack((cx.ravel(), cy.ravel(), cz.ravel()), axis=1)
    corners = base[:, None, None, :] + freudenthal_cells(3)[None, :, :, :]
    vid = corners[..., 0] + n * (corners[..., 1] + n * corners[..., 2])
    return vid.reshape(-1, 4).astype(np.int64)


def worker(partition: str, n: int, repeats: int) -> dict:
    """Build the complex in this job (the checkout on ``PYTHONPATH``): best
    seconds of ``repeats`` builds after a warm-up, and one build's supersteps.
    Collective on ``COMM_WORLD``."""
    import json

    import numpy as np
    from mpi4py import MPI

    from dmsolve.bsp import _ledger
    from topology import SimplicialComplex

    comm = MPI.COMM_WORLD
    steps = []
    record = _ledger.Ledger.record_superstep

    def counted(self, label, *args, **kwargs):
        steps.append(label)
        return record(self, label, *args, **kwargs)

    _ledger.Ledger.record_superstep = counted
    tets = _tets(comm, n)
    i = np.arange(n ** 3 * comm.Get_size())
    points = np.stack((i % n, (i // n) % n, i // (n * n)), axis=1).astype(np.float64)
    pts = points if partition == "rcb" else None
    SimplicialComplex([tets], comm, pts, partition=partition)        # warm-up
    best = np.inf
    for _ in range(repeats):
        del steps[:]
        comm.Barrier()
        t0 = time.perf_counter()
        cx = SimplicialComplex([tets], comm, pts, partition=partition)
        best = min(best, comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
    out = {"seconds": best, "supersteps": comm.allreduce(len(steps), op=MPI.MAX),
           "vertices": int(cx.num_vertices)}
    if comm.Get_rank() == 0:
        print(json.dumps(out))
    return out


def _launch(path: str, partition: str, args) -> dict:
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    env = child_env(PYTHONPATH=path, **ONE_BLAS_THREAD)
    return launch_json(os.path.abspath(__file__),
                       [mpiexec, "-n", "2", sys.executable, "-m", "mpi4py"],
                       ["--worker", partition, "--n", str(args.n), "--repeats",
                        str(args.repeats)], env, timeout=args.timeout)


def _table(best: dict, n: int) -> str:
    lines = ["Construction of `SimplicialComplex` (tetrahedra of a %d x %d x %d vertex grid) "
             "at 2 ranks: this checkout against commit %s, the last before the complex "
             "renumbered with psort's `rank_of`. Seconds: best of fresh jobs alternating "
             "the two checkouts (slowest rank); supersteps: `Ledger.record_superstep` calls "
             "of one construction. Target: ratio <= %.1f." % (n, n, 2 * n, BEFORE_PSORT[:7],
                                                              TARGET), "",
             "| partition | before psort (s) | this checkout (s) | ratio | target met "
             "| supersteps before | supersteps now |",
             "|---|---|---|---|---|---|---|"]
    for part in PARTITIONS:
        old, new = best[part]["before"], best[part]["now"]
        if "seconds" not in old or "seconds" not in new:
            lines.append("| %s | %s | %s | - | - | - | - |" % (
                part, old.get("error", "%.3f" % old.get("seconds", 0)),
                new.get("error", "%.3f" % new.get("seconds", 0))))
            continue
        ratio = new["seconds"] / old["seconds"]
        lines.append("| %s | %.3f | %.3f | %.2f | %s | %d | %d |" % (
            part, old["seconds"], new["seconds"], ratio, "yes" if ratio <= TARGET else "no",
            old["supersteps"], new["supersteps"]))
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None, help="write results here")
    ap.add_argument("--n", type=int, default=16, help="vertex planes per rank (and n x n)")
    ap.add_argument("--rounds", type=int, default=6, help="jobs per checkout and partition")
    ap.add_argument("--repeats", type=int, default=5, help="builds per job after a warm-up")
    ap.add_argument("--before", default=None, help="a checkout of the code before psort "
                    "(default: --before-commit, extracted to a temporary directory)")
    ap.add_argument("--before-commit", default=BEFORE_PSORT)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--worker", choices=PARTITIONS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.n, args.repeats)
        return 0
    tmp = None
    before = args.before
    if before is None:
        tmp = tempfile.mkdtemp(prefix="before-psort-")
        before = os.path.join(tmp, "checkout")
        tree = subprocess.run(["git", "-C", ROOT, "archive", "--format=tar",
                               args.before_commit], check=True, capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(tree)) as tar:
            tar.extractall(before, filter="data")
    try:
        runs = {p: {"before": [], "now": []} for p in PARTITIONS}
        for _ in range(args.rounds):
            for part in PARTITIONS:
                for name, path in (("before", before), ("now", ROOT)):
                    res = _launch(path, part, args)
                    runs[part][name].append(res)
                    print(part, name, res, flush=True)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    best = {p: {k: best_run(v) for k, v in r.items()} for p, r in runs.items()}
    markdown = _table(best, args.n)
    print(markdown)
    write_json(args.json, {"runs": runs, "best": best, "markdown": markdown,
                           "before_commit": args.before_commit})
    return 0


if __name__ == "__main__":
    sys.exit(main())
