"""Reading Matrix Market files: dmsolve.io.read_matrix against scipy.io.mmread.

    python bench/bench_mmread.py --json out/bench/mmread.json

Writes three files of about 60 MB into ``--workdir`` (a temporary directory
by default), from the 7-point Laplacian on an ``n^3`` grid:

- ``poisson-general``: ``--poisson``^3, all entries, written by
  :func:`dmsolve.io.write_matrix` (short values: ``6`` and ``-1``);
- ``perturbed-general``: ``--general``^3, all entries, each value scaled by
  ``1 + 0.1 u`` (``u`` uniform in [0, 1)) and written with 17 digits;
- ``perturbed-symmetric``: ``--symmetric``^3, the lower triangle, values as
  above, header ``symmetric``.

Each reader runs in a fresh process, best of ``--repeats`` timed reads of
the whole call (the file is in the page cache after the first read):
``scipy.io.mmread`` serial with its default threads (every core: it is
``fast_matrix_market`` inside) and with one thread, then ``read_matrix``
under ``mpiexec -n 1`` with one thread and with a thread per core
(``DMSOLVE_NUM_THREADS``: the scan and the parse run on them), and under
``-n 2`` with one thread per rank (the slowest rank's time). The result is
checked: the gathered matrix equals scipy's ``mmread(...).tocsr()`` exactly
(same pattern, same bits).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import child_env, launch_json, write_json  # noqa: E402

FILES = ("poisson-general", "perturbed-general", "perturbed-symmetric")


def laplacian3d(n: int) -> sp.coo_matrix:
    """The 7-point Laplacian of an ``n^3`` grid, rows in order. Not collective."""
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n))
    i = sp.identity(n)
    return (sp.kron(sp.kron(t, i), i) + sp.kron(sp.kron(i, t), i)
            + sp.kron(sp.kron(i, i), t)).tocsr().tocoo()


def write_file(path: str, M: sp.coo_matrix, symmetry: str, fmt: str) -> None:
    """``M`` as a coordinate real file, row by row. Not collective."""
    with open(path, "wb") as f:
        f.write(b"%%%%MatrixMarket matrix coordinate real %s\n%d %d %d\n"
                % (symmetry.encode(), M.shape[0], M.shape[1], M.nnz))
        np.savetxt(f, np.column_stack((M.row + 1, M.col + 1, M.data)), fmt="%d %d " + fmt)


def make_files(workdir: str, args) -> dict[str, str]:
    """The three files, written on this (serial) process."""
    rng = np.random.default_rng(0)
    paths = {name: os.path.join(workdir, name + ".mtx") for name in FILES}
    write_file(paths["poisson-general"], laplacian3d(args.poisson), "general", "%.17g")
    A = laplacian3d(args.general)
    A.data *= 1 + 0.1 * rng.random(A.nnz)
    write_file(paths["perturbed-general"], A, "general", "%.17g")
    L = sp.tril(laplacian3d(args.symmetric)).tocsr().tocoo()
    L.data *= 1 + 0.1 * rng.random(L.nnz)
    write_file(paths["perturbed-symmetric"], L, "symmetric", "%.17g")
    return paths


# -- the timed readers, each in its own process ----------------------------------------------

def worker_scipy(path: str, repeats: int, threads: int | None) -> dict:
    import scipy.io
    import scipy.io._fast_matrix_market as fmm

    if threads is not None:
        # scipy's knob for mmread's threads (threadpoolctl sets the same one)
        fmm.PARALLELISM = threads
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        scipy.io.mmread(path)
        best = min(best, time.perf_counter() - t0)
    return {"seconds": best}


def worker_dmsolve(path: str, repeats: int) -> None:
    from mpi4py import MPI
    import scipy.io
    from dmsolve.io import read_matrix

    comm = MPI.COMM_WORLD
    best = np.inf
    for _ in range(repeats):
        comm.Barrier()
        t0 = time.perf_counter()
        A = read_matrix(path, comm)
        best = min(best, comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
    got = A.to_scipy()
    same = None
    if comm.rank == 0:
        ref = scipy.io.mmread(path).tocsr()
        got.sort_indices()
        ref.sort_indices()
        same = bool(got.shape == ref.shape and np.array_equal(got.indptr, ref.indptr)
                    and np.array_equal(got.indices, ref.indices)
                    and np.array_equal(got.data.view(np.int64), ref.data.view(np.int64)))
    nnz = A.global_nnz()
    if comm.rank == 0:
        print(json.dumps({"seconds": best, "same_as_scipy": same, "nnz": nnz}))


def launch(prefix: list[str], args: list[str], threads: int = 1) -> dict:
    """Run this script's worker with ``args`` after ``prefix``, ``threads``
    threads per rank for dmsolve's kernels."""
    return launch_json(__file__, prefix, args, child_env(DMSOLVE_NUM_THREADS=str(threads)))


def measure(path: str, repeats: int, cores: int) -> dict:
    py = sys.executable
    mpiexec = os.path.join(os.path.dirname(py), "mpiexec")
    base = ["--worker", "--path", path, "--repeats", str(repeats)]
    out = {"mb": os.path.getsize(path) / 1e6,
           "scipy": launch([py], base + ["--reader", "scipy"]),
           "scipy-1": launch([py], base + ["--reader", "scipy", "--threads", "1"])}
    for ranks, threads, key in ((1, 1, "dmsolve-1"), (1, cores, "dmsolve-1-threads"),
                                (2, 1, "dmsolve-2")):
        out[key] = launch([mpiexec, "-n", str(ranks), py, "-m", "mpi4py"],
                          base + ["--reader", "dmsolve"], threads)
    return out


def markdown(cases: dict, cores: int, repeats: int) -> str:
    rows = ["| file | MB | scipy.io.mmread (%d threads) | scipy, 1 thread | dmsolve 1 rank "
            "| dmsolve 1 rank x %d threads | dmsolve 2 ranks | scipy / dmsolve, 1 thread each "
            "| scipy / dmsolve, %d threads each | scipy / dmsolve 2 ranks | same as scipy |"
            % (cores, cores, cores),
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    keys = ("dmsolve-1", "dmsolve-1-threads", "dmsolve-2")
    for name, c in cases.items():
        s, s1 = (c[k].get("seconds", np.nan) for k in ("scipy", "scipy-1"))
        t1, tt, t2 = (c[k].get("seconds", np.nan) for k in keys)
        same = all(c[k].get("same_as_scipy") for k in keys)
        rows.append("| %s | %.0f | %.3f s | %.3f s | %.3f s | %.3f s | %.3f s | %.2f | %.2f "
                    "| %.2f | %s |" % (name, c["mb"], s, s1, t1, tt, t2, s1 / t1, s / tt,
                                       s / t2, "yes" if same else "**no**"))
    verdicts = []
    for key, want, what in (("dmsolve-1-threads", lambda r: r >= 1,
                             "1 rank, scipy / dmsolve on the same %d cores at least 1" % cores),
                            ("dmsolve-2", lambda r: r > 1, "2 ranks, scipy / dmsolve above 1")):
        missed = [name for name, c in cases.items()
                  if not want(c["scipy"].get("seconds", np.nan) / c[key].get("seconds", np.nan))]
        verdicts.append("- %s: %s" % (what, "met on every file" if not missed
                                      else "**missed** on %s" % ", ".join(missed)))
    return "\n".join(rows + [
        "",
        "Each time is the best of %d reads of the whole call, each reader in a fresh process "
        "(dmsolve's: the slowest rank; it includes the assembly of the DistCSR, scipy's returns "
        "a COO matrix). A ratio above 1 means dmsolve reads faster than scipy. dmsolve's "
        "threads are `DMSOLVE_NUM_THREADS` (1 unless set). Both parse with "
        "fast_matrix_market; dmsolve also scans every line of its range for the strict "
        "form before handing it over (the parser ignores text after a line's last number, "
        "which would turn a value written `1.5-100` into 1.5), and builds row blocks where "
        "scipy returns triplets. Targets:" % repeats, ""] + verdicts)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", default=None, help="write results here")
    p.add_argument("--poisson", type=int, default=80)
    p.add_argument("--general", type=int, default=64)
    p.add_argument("--symmetric", type=int, default=80)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--workdir", default=None, help="where the files go (default: a temporary "
                   "directory, removed afterwards)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--reader", choices=["scipy", "dmsolve"], help=argparse.SUPPRESS)
    p.add_argument("--path", help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        if args.reader == "scipy":
            print(json.dumps(worker_scipy(args.path, args.repeats, args.threads)))
        else:
            worker_dmsolve(args.path, args.repeats)
        return 0
    workdir = args.workdir or tempfile.mkdtemp(prefix="bench-mmread-")
    try:
        paths = make_files(workdir, args)
        cases = {name: measure(path, args.repeats, os.cpu_count())
                 for name, path in paths.items()}
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    cores = os.cpu_count()
    res = {"cases": cases, "repeats": args.repeats, "sizes": {
        "poisson": args.poisson, "general": args.general, "symmetric": args.symmetric},
        "markdown": markdown(cases, cores, args.repeats)}
    print(res["markdown"])
    write_json(args.json, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
