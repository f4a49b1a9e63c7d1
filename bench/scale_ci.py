"""The small scaling check for CI: a few cases at 4 and 8 ranks, small sizes;
fails when a per-rank memory or traffic figure grows with p beyond the targets.

    python bench/scale_ci.py            # (make scale-ci) about 5-10 minutes on 2 cores

Each case runs in a fresh ``mpiexec`` (bench/scale.py's worker) at 4 and at 8
ranks with the same work per rank. The base is 4 ranks, not 2: the cases are
stacks of slabs, and at 2 ranks no rank has two neighbours, so every halo
would "grow" 2x from 2 to 4 ranks (``--ranks 2 8`` runs that comparison). The
targets are those of docs/scaling.md: max per-rank peak memory growth <=
1.25x (+ 2 MiB), max per-rank bytes <= 1.25x + 64 words x p, supersteps <=
S(4) log2(8) / 2, rank 0's memory <= 1.2x the mean (+ 2 MiB).

The code misses some of them; those are listed in :data:`KNOWN_FAILING`
with the reason. A known failure is reported, not fatal; a failure not in the
list is fatal. A known failure that now passes is reported as such, and is
fatal under ``--strict`` (run that after a change that should fix one, to
shrink the list); ``.ci/run`` runs it without, so that a figure near its limit cannot
fail CI by passing.
Exit status: 0 when every figure is as expected, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import scale  # noqa: E402

CASES = ["csr", "cg_amg", "partition_rcb", "partition_multilevel", "complex_hilbert",
         "complex_multilevel", "persistence"]
N = 10

#: (case, target) -> why today's code misses it. Targets: mem, bytes, steps, rank0.
#: Measured at commit 0dec455 and, for cg_amg, with its coarse levels agglomerated
#: (4, 8 and 16 ranks, n = 10). persistence/bytes passes with the distributed sweep
#: and diagrams (226 KiB at 8 ranks against 206 at 4, limit 261; docs/scaling.md).
KNOWN_FAILING: dict[tuple[str, str], str] = {
    ("cg_amg", "bytes"): "coarse levels agglomerated onto at most 4x fewer ranks: at 4 ranks "
                         "level 1 lives on rank 0 alone, from 8 ranks on 2+ ranks with their "
                         "own halos and Galerkin traffic (a rank receives up to 3 others' "
                         "partial rows); 583 KiB at 8, 633 KiB at 16 ranks",
    ("partition_multilevel", "bytes"): "one more level of matching per doubling of the graph "
                                       "(each level's halo is a per-rank share: bytes grow "
                                       "like log p), and the gathered coarse graph densifies "
                                       "(rank 0 receives 100, 138, 161 KiB at 4, 8, 16 ranks)",
    ("complex_multilevel", "bytes"): "at 4 ranks METIS's parts of the coarse graph coincide "
                                     "with the input slabs and few vertices move; from 8 ranks "
                                     "they do not and every rank receives most of its share "
                                     "(max 1.9 MiB at 8, 2.0 MiB at 16 ranks: not growing with p)",
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=CASES, choices=list(scale.CASES))
    ap.add_argument("--n", type=int, default=N)
    ap.add_argument("--ranks", nargs=2, type=int, default=[4, 8], metavar=("BASE", "TOP"))
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--strict", action="store_true",
                    help="a known failure that now passes is fatal too (so that the list "
                         "is kept short); by default it is reported")
    ap.add_argument("--mpiexec", default=os.path.join(os.path.dirname(sys.executable),
                                                      "mpiexec"))
    args = ap.parse_args(argv)
    base, top = args.ranks
    t0 = time.time()
    bad = []
    for case in args.cases:
        runs = {p: scale.run_case(case, p, args.n, args.n, args.mpiexec, args.timeout)
                for p in (base, top)}
        for p, r in runs.items():
            if "error" in r:
                bad.append("%s at %d ranks failed: %s" % (case, p, r["error"]))
        if any("error" in r for r in runs.values()):
            continue
        res = scale.check_targets(runs, base=base)
        for target in ("mem", "bytes", "steps", "rank0"):
            ok, text = res[target]
            known = (case, target) in KNOWN_FAILING
            if ok is None:
                continue
            status = ("ok" if ok and not known else "NOW PASSES (remove from KNOWN_FAILING)"
                      if ok else "known failure: " + KNOWN_FAILING[(case, target)]
                      if known else "FAIL")
            print("%-16s %-6s %s  [%s]" % (case, target, text, status), flush=True)
            if (not ok and not known) or (ok and known and args.strict):
                bad.append("%s/%s: %s" % (case, target, status))
    print("scale_ci: %.0f s, %s" % (time.time() - t0,
                                    "all as expected" if not bad else "; ".join(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
