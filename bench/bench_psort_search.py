"""Rounds, supersteps, bytes and seconds of psort's splitter search, alone.

    python bench/bench_psort_search.py --ranks 4 16 --n 20000 [--before OTHER_CHECKOUT]

Each case is a fresh ``mpiexec -n P`` job running ``psort`` on ``n`` keys per
rank (the kinds of docs/design/psort.md: keys near their place — rank r holds
n + 0.075 n r keys, a permutation of its own range of positions moved by
up to n/20, so block boundaries fall inside a rank's range and neighbours
overlap —, random int and float keys, and
4-column int rows), once to warm up and then ``--repeat`` times with a
:class:`dmsolve.bsp.Ledger`. Figures (max over ranks, of the last repeat):
search rounds, the supersteps the ledger records, the bytes of the search
(every record but the final exchange: max over ranks of the larger of sent
and received, summed over the records), the bytes of the exchange, and the
median seconds of the repeats (slowest rank). The code measured is the one
on ``PYTHONPATH`` of each column: this checkout, and ``--before`` if given.
The page, headed by the date, the commits and the machine, goes to ``--out``
(docs/measurements/psort-search.md) and stdout. The search bytes also count
the collectives psort records in the ledger (not the two ``Allgather``\\ s of
counts and end items it does not record). Oversubscribed runs are fine for
bytes and rounds, not for time.
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
KINDS = ("near place", "random int", "random float", "4-column int")


def _keys(kind: str, n: int, rank: int):
    import numpy as np
    rng = np.random.default_rng(1000 + rank)
    if kind == "near place":       # uneven counts: block boundaries inside ranks' ranges
        step, jitter = 3 * n // 40, n // 20
        m = n + step * rank
        return (n * rank + step * rank * (rank - 1) // 2 + rng.permutation(m)
                + rng.integers(-jitter, jitter + 1, m))
    if kind == "random int":
        return rng.integers(0, 2 ** 40, n)
    if kind == "random float":
        return rng.normal(size=n)
    if kind == "4-column int":
        return rng.integers(0, 64, (n, 4))
    raise ValueError(kind)


def worker(kind: str, n: int, repeat: int) -> None:
    import time

    import numpy as np
    from mpi4py import MPI

    from dmsolve.bsp import Ledger, psort

    comm = MPI.COMM_WORLD
    keys = _keys(kind, n, comm.rank)
    psort(keys, comm)                                   # imports, first calls
    seconds = []
    for _ in range(repeat):
        ledger = Ledger(comm)
        comm.Barrier()
        t0 = time.perf_counter()
        out = psort(keys, comm, ledger=ledger)
        seconds.append(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
    rows = np.array([row for _, row in ledger.steps])
    search = rows[:-1]
    mine = np.array([max(search[:, 2].sum(), search[:, 3].sum()) if len(search) else 0.0,
                     max(rows[-1, 2], rows[-1, 3]), len(ledger.steps), out.rounds])
    top = np.empty_like(mine)
    comm.Allreduce(mine, top, op=MPI.MAX)
    if comm.rank == 0:
        print(json.dumps({"search_bytes": top[0], "exchange_bytes": top[1],
                          "supersteps": int(top[2]), "rounds": int(top[3]),
                          "seconds": float(np.median(seconds))}))


def run(path: str, kind: str, ranks: int, n: int, repeat: int, timeout: float):
    env = dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    cmd = [mpiexec, "-n", str(ranks), sys.executable, "-m", "mpi4py", str(HERE /
           "bench_psort_search.py"), "--worker", kind, "--n", str(n), "--repeat", str(repeat)]
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    for line in out.stdout.splitlines()[::-1]:
        if line.startswith("{"):
            return json.loads(line)
    sys.stderr.write(out.stderr[-2000:])
    return None


def _cell(r) -> str:
    if r is None:
        return "failed"
    return "%d / %d / %.1f KiB / %.1f KiB / %.1f ms" % (
        r["rounds"], r["supersteps"], r["search_bytes"] / 1024, r["exchange_bytes"] / 1024,
        1e3 * r["seconds"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[4, 16])
    ap.add_argument("--n", type=int, default=20000, help="keys per rank")
    ap.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--before", help="another checkout to measure too (its PYTHONPATH)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "measurements" / "psort-search.md"))
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a.worker, a.n, a.repeat)
        return
    paths = ([("--before", a.before)] if a.before else []) + [("this checkout", str(ROOT))]
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
    codes = {name: _provenance.code(path) for name, path in paths}
    lines = ["# The splitter search of psort, alone", "",
             "Written by bench/bench_psort_search.py; do not edit by hand.", "",
             *_provenance.header(codes, _provenance.machine(), started + " (UTC)"), "",
             "psort, %d keys per rank; each cell: rounds / supersteps / search bytes / "
             "exchange bytes / seconds (max over ranks)" % a.n, "",
             "| keys | p | " + " | ".join(name for name, _ in paths) + " |",
             "|---|---|" + "---|" * len(paths)]
    print("\n".join(lines), flush=True)
    for kind in a.kinds:
        for p in a.ranks:
            cells = [_cell(run(path, kind, p, a.n, a.repeat, a.timeout)) for _, path in paths]
            lines.append("| %s | %d | %s |" % (kind, p, " | ".join(cells)))
            print(lines[-1], flush=True)
    out = pathlib.Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
