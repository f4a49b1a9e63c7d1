"""Timing, memory, bandwidth and output shared by the benchmark scripts."""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import time

import numpy as np
from mpi4py import MPI

import _provenance

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def best_time(fn, repeats: int = 5, number: int = 1, comm: MPI.Comm | None = None) -> float:
    """Best-of-``repeats`` seconds per call of ``fn`` (``number`` calls each).

    With ``comm``, ranks start together and the slowest rank's time counts.
    """
    best = np.inf
    for _ in range(repeats):
        if comm is not None:
            comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        t = (time.perf_counter() - t0) / number
        if comm is not None:
            t = comm.allreduce(t, op=MPI.MAX)
        best = min(best, t)
    return best


def grid_triangles(comm: MPI.Comm, m: int) -> np.ndarray:
    """This rank's share of the triangles of the triangulated m x m vertex grid
    (two per cell, by global triangle id), as vertex-id rows."""
    ntri = 2 * (m - 1) ** 2
    lo, hi = ntri * comm.rank // comm.size, ntri * (comm.rank + 1) // comm.size
    t = np.arange(lo, hi)
    cell, half = t // 2, t % 2
    x, y = cell % (m - 1), cell // (m - 1)
    a, b, c, d = x + y * m, x + 1 + y * m, x + (y + 1) * m, x + 1 + (y + 1) * m
    return np.where(half[:, None] == 0, np.stack((a, b, c), 1), np.stack((b, d, c), 1))


def peak_rss_mb() -> float:
    """Peak resident memory of this process in MiB (Linux ru_maxrss is KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def stream_triad_gbs(n: int = 20_000_000, repeats: int = 5) -> float:
    """STREAM-triad-like bandwidth in GB/s: ``a = b + s*c`` in one pass.

    Uses BLAS daxpy on a copy (``a[:] = b; a += s*c``); counted as the
    STREAM triad's 24 bytes per element for the axpy pass alone.
    """
    from scipy.linalg.blas import daxpy
    b = np.random.default_rng(0).random(n)
    c = np.random.default_rng(1).random(n)
    a = b.copy()
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        daxpy(c, a, a=3.0)
        best = min(best, time.perf_counter() - t0)
    return 24.0 * n / best / 1e9


def write_json(path: str | None, data: dict) -> None:
    """Write ``data`` as JSON, with the commit and machine measured (run on
    one rank: it asks git and /proc). Not collective."""
    if path:
        data = dict(data)
        data.setdefault("code", _provenance.code(ROOT))
        data.setdefault("machine", _provenance.machine())
        with open(path, "w") as f:
            json.dump(data, f, indent=1, default=float)


def bench_parser(doc: str) -> argparse.ArgumentParser:
    """A command-line parser described by the first line of ``doc``, with ``--json``."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--json", default=None, help="write results here (rank 0)")
    return p


def run(main, parser: argparse.ArgumentParser) -> None:
    """Parse the command line, call ``main(COMM_WORLD, args)`` and write what
    it returns as JSON on rank 0 (to ``--json``, when given)."""
    args = parser.parse_args()
    res = main(MPI.COMM_WORLD, args)
    if MPI.COMM_WORLD.Get_rank() == 0:
        write_json(args.json, res)


#: One thread for BLAS and OpenMP in each child process.
ONE_BLAS_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def child_env(**settings: str) -> dict:
    """This environment without an MPI launcher's variables (a child started
    from inside an MPI job would take them for its own), this checkout first
    on ``PYTHONPATH``, and ``settings`` on top. Not collective."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PMI_", "PMIX_", "HYDRA_", "MPIR_", "MPICH_", "OMPI_"))}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.update(settings)
    return env


def launch_json(script: str, prefix: list[str], args: list[str], env: dict,
                timeout: float = 1800) -> dict:
    """Run ``script`` with ``args`` after ``prefix`` (an interpreter, or an
    mpiexec line); its last output line is JSON. A failed run gives
    ``{"error": <last line of its stderr>}``. Not collective."""
    cmd = prefix + [os.path.abspath(script)] + args
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        tail = (p.stderr or "").strip().splitlines()[-1:] or ["exit %d" % p.returncode]
        return {"error": tail[0][:300]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def best_run(runs: list[dict]) -> dict:
    """The fastest of ``runs`` (dicts with ``seconds``), or the last one if
    none has a time (its error). Not collective."""
    ok = [r for r in runs if "seconds" in r]
    return min(ok, key=lambda r: r["seconds"]) if ok else runs[-1]
