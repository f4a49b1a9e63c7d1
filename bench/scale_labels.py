"""Where a scaling case's bytes go: per BSP superstep label, for the rank that
receives most (the figures quoted in the notes of docs/scaling.md).

    mpiexec -n 16 python -m mpi4py bench/scale_labels.py persistence --n 20
    MALLOC_MMAP_THRESHOLD_=65536 mpiexec -n 64 python -m mpi4py bench/scale_labels.py cg_amg --n 20 --amg

(the memory figures, like the harness's, need ``MALLOC_MMAP_THRESHOLD_=65536`` so
that large arrays are fresh pages rather than heap an earlier run freed).

Runs a case of bench/scale.py once unmeasured, then measured on a counting
communicator (bench/_counting.py), and prints the busiest rank's sent and
received bytes summed per superstep label. ``--amg``: the cg_amg case split
into set-up and solve, with the hierarchy's levels (rows, ranks owning rows)
and each level-1 rank's set-up memory growth and received bytes.
"""

import argparse
import collections
import gc
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from mpi4py import MPI  # noqa: E402

import scale  # noqa: E402
from _counting import TALLY, counting, install  # noqa: E402

MIB = 2.0 ** 20


def _record_labels():
    """Every ``Ledger.record_superstep`` of this process as (label, sent, recv)."""
    from dmsolve.bsp import _ledger
    steps = []
    orig = _ledger.Ledger.record_superstep

    def record(self, label, work_s, comm_s, sent, recv, *args, **kwargs):
        steps.append((label, int(sent), int(recv)))
        return orig(self, label, work_s, comm_s, sent, recv, *args, **kwargs)
    _ledger.Ledger.record_superstep = record
    return steps


def _by_label(steps):
    agg = collections.defaultdict(lambda: [0, 0, 0])
    for label, sent, recv in steps:
        row = agg[label]
        row[0] += 1
        row[1] += sent
        row[2] += recv
    return dict(agg)


def labels(case, n, world, steps):
    comm = counting(world)
    _, prep, run = scale.CASES[case]
    run(prep(comm, n))
    state = prep(comm, n)
    gc.collect()
    world.Barrier()
    TALLY.reset()
    steps.clear()
    run(state)
    rows = world.gather((TALLY.bytes_recv, _by_label(steps)), root=0)
    if world.Get_rank() == 0:
        r = max(range(len(rows)), key=lambda i: rows[i][0])
        print("%s, n = %d, %d ranks: rank %d receives most, %.1f KiB" % (
            case, n, world.Get_size(), r, rows[r][0] / 1024))
        print("  %-28s %6s %10s %10s" % ("superstep label", "steps", "sent KiB", "recv KiB"))
        for label, (k, s, q) in sorted(rows[r][1].items(), key=lambda kv: -kv[1][2])[:12]:
            print("  %-28s %6d %10.1f %10.1f" % (label, k, s / 1024, q / 1024))


def amg(n, world):
    import preconditioners
    from dmsolve import cg
    comm = counting(world)
    scale.run_cg_amg(scale.prep_cg_amg(comm, n))       # unmeasured: kernels, communicators
    s = scale.prep_cg_amg(comm, n)
    A, b = s["A"], s["b"]
    scale.warm_mpi(world)
    gc.collect()
    world.Barrier()
    TALLY.reset()
    rss = scale.reset_peak()
    M = preconditioners.make("amg", A)
    setup_mem, setup_recv = scale.peak() - rss, TALLY.bytes_recv
    TALLY.reset()
    rss = scale.reset_peak()
    x, info = cg(A, b, rtol=1e-8, M=M, maxiter=500)
    solve_mem, solve_recv = scale.peak() - rss, TALLY.bytes_recv
    d = M.describe()
    rows = world.gather((setup_mem, setup_recv, solve_mem, solve_recv), root=0)
    if world.Get_rank() == 0:
        lev = d["levels"]
        print("cg_amg, n = %d, %d ranks: %d iterations; levels (rows / ranks owning rows): %s" % (
            n, world.Get_size(), info.iterations,
            ", ".join("%d / %d" % (L["rows"], L["ranks"]) for L in lev)))
        active = lev[1]["ranks"] if len(lev) > 1 else 0
        for what, k in (("set-up memory MiB", 0), ("set-up received MiB", 1),
                        ("solve memory MiB", 2), ("solve received MiB", 3)):
            ones = [rows[r][k] / MIB for r in range(active)]
            rest = [rows[r][k] / MIB for r in range(active, len(rows))]
            print("  %-22s level-1 ranks max %.2f, other ranks max %s" % (
                what, max(ones) if ones else 0.0,
                "%.2f" % max(rest) if rest else "-"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case", choices=list(scale.CASES))
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--amg", action="store_true", help="cg_amg: set-up and solve apart")
    args = ap.parse_args()
    install()
    steps = _record_labels()
    world = MPI.COMM_WORLD
    if args.amg:
        amg(args.n, world)
    else:
        labels(args.case, args.n, world, steps)


if __name__ == "__main__":
    main()
