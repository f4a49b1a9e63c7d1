"""BSP.sync traffic per rank, dense (Alltoall + Alltoallv) against sparse (Allreduce + NBX).

    python bench/bench_bsp_exchange.py --ranks 2,4,8,16,32 --time-ranks 2,4

launches ``mpiexec -n P python -m mpi4py bench/bench_bsp_exchange.py`` for each
P and prints two markdown tables. Run under mpiexec directly, it measures one
rank count and prints (rank 0) or writes (``--json``) that one result.

Bytes are counted, not timed (oversubscribed runs are fine): per rank and per
superstep, the payload bytes the ledger records (each message with its 8-byte
padded header) plus the control bytes of the sync's collectives (the dense
header rows a rank sends and receives, ``p * 192`` bytes each way; the sparse
exchange's Allreduce record, 192 bytes each way). What an MPI library moves on
the wire for a collective also depends on its algorithm (a recursive-doubling
Allreduce sends its record about log2 p times; NBX's Ibarrier sends about
log2 p empty messages); the table shows the ledger's exact per-rank counts.

The pattern ``ring`` has each rank send ``--bytes`` to each of its two
neighbours (rank +- 1); ``all`` sends them to every rank. Times are the best,
over ``--repeats``, of the slowest rank's mean seconds per superstep.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def pattern_dests(pattern: str, rank: int, size: int) -> list[int]:
    if pattern == "ring":
        return sorted({(rank - 1) % size, (rank + 1) % size} - {rank}) or [rank]
    return list(range(size))


def measure(comm, args) -> dict:
    from mpi4py import MPI

    from dmsolve.bsp import BSP, Ledger

    rank, size = comm.Get_rank(), comm.Get_size()
    payload = np.zeros(args.bytes // 8, dtype=np.float64)
    fields = Ledger.STEP_FIELDS
    out = {"ranks": size, "bytes": {}, "seconds": {}}
    for path in ("dense", "sparse"):
        for pattern in ("ring", "all"):
            ctx = BSP(comm, exchange=path)
            dests = pattern_dests(pattern, rank, size)

            def step():
                for d in dests:
                    ctx.send(d, payload)
                ctx.aggregate("n", "sum", 1)
                ctx.vote(False)
                ctx.sync(pattern)

            step()
            row = dict(zip(fields, ctx.ledger.steps[-1][1]))
            sent = row["bytes_sent"] + row["ctrl_sent"]
            recv = row["bytes_recv"] + row["ctrl_recv"]
            mine = np.array([sent, recv, row["ctrl_sent"], row["ctrl_recv"],
                             row["peers_sent"], row["peers_recv"]])
            worst = np.empty_like(mine)
            comm.Allreduce(mine, worst, op=MPI.MAX)
            out["bytes"][path, pattern] = worst.tolist()
            if size in args.time_ranks_set:
                best = np.inf
                for _ in range(args.repeats):
                    comm.Barrier()
                    t0 = time.perf_counter()
                    for _ in range(args.steps):
                        step()
                    t = comm.allreduce((time.perf_counter() - t0) / args.steps, op=MPI.MAX)
                    best = min(best, t)
                out["seconds"][path, pattern] = best
    out["bytes"] = {"%s/%s" % k: v for k, v in out["bytes"].items()}
    out["seconds"] = {"%s/%s" % k: v for k, v in out["seconds"].items()}
    return out


def drive(args) -> None:
    results = []
    for p in args.ranks:
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
            path = f.name
        mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
        cmd = [mpiexec, "-n", str(p), sys.executable, "-m", "mpi4py", os.path.abspath(__file__),
               "--bytes", str(args.bytes), "--steps", str(args.steps),
               "--repeats", str(args.repeats),
               "--time-ranks", ",".join(map(str, args.time_ranks)), "--json", path]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [ROOT] + [x for x in [os.environ.get("PYTHONPATH")] if x]))
        subprocess.run(cmd, check=True, env=env, timeout=args.timeout)
        with open(path) as f:
            results.append(json.load(f))
        os.unlink(path)
    print(table(results, args))


def table(results, args) -> str:
    lines = ["Bytes per rank per superstep (max over ranks; payload + control), "
             "%d-byte messages:" % args.bytes, "",
             "| p | pattern | dense sent | dense recv | dense control | sparse sent "
             "| sparse recv | sparse control | peers |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        for pattern in ("ring", "all"):
            d, s = r["bytes"]["dense/" + pattern], r["bytes"]["sparse/" + pattern]
            lines.append("| %d | %s | %d | %d | %d | %d | %d | %d | %d |" % (
                r["ranks"], pattern, d[0], d[1], d[2], s[0], s[1], s[2], s[4]))
    timed = [r for r in results if r["seconds"]]
    if timed:
        lines += ["", "Seconds per superstep (best of %d, slowest rank, %d supersteps):"
                  % (args.repeats, args.steps), "",
                  "| p | pattern | dense s | sparse s | sparse/dense |", "|---|---|---|---|---|"]
        for r in timed:
            for pattern in ("ring", "all"):
                d, s = r["seconds"]["dense/" + pattern], r["seconds"]["sparse/" + pattern]
                lines.append("| %d | %s | %.2e | %.2e | %.2f |" % (r["ranks"], pattern, d, s,
                                                                  s / d))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default=None,
                        help="comma-separated rank counts to launch (driver mode)")
    parser.add_argument("--time-ranks", default="2,4",
                        help="rank counts at which the supersteps are also timed")
    parser.add_argument("--bytes", type=int, default=1024, help="bytes per message")
    parser.add_argument("--steps", type=int, default=200, help="supersteps per timing")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=900, help="seconds per launch")
    parser.add_argument("--json", default=None, help="write the one-run result here")
    args = parser.parse_args()
    args.time_ranks = [int(x) for x in args.time_ranks.split(",") if x]
    args.time_ranks_set = set(args.time_ranks)
    if args.ranks:
        args.ranks = [int(x) for x in args.ranks.split(",")]
        drive(args)
        return
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    res = measure(comm, args)
    if comm.Get_rank() == 0:
        if args.json:
            with open(args.json, "w") as f:
                json.dump(res, f)
        else:
            print(table([res], args))


if __name__ == "__main__":
    main()
