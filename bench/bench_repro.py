"""Reproducible mode: its cost per CG iteration against the default, the same bits at 1..N ranks.

    mpiexec -n 8 python -m mpi4py bench/bench_repro.py --json out/bench/repro.json

Four parts, in one run:

* **Cost** (the first ``--time-ranks`` ranks, 2 by default; the others wait
  idle): CG on 3D Poisson ``--n``^3 with no preconditioner, jacobi, cheby and
  amg, for ``--iterations`` iterations (a tolerance no solve reaches), with
  ``reproducible=True`` and in the default mode, the two interleaved in each
  of ``--repeats`` repeats: the median seconds per iteration (slowest rank)
  and their ratio; the preconditioner's set-up likewise, and the one-off
  canonical copy of ``A`` that reproducible products sum from. A
  preconditioner whose ``make(name, A, reproducible=True)`` raises is left
  out, with a note.
* **Bit identity** (sub-communicators of the first ``k`` ranks, ``k = 1 ..``
  world size, and a METIS partition of the whole world): cg + jacobi,
  cg + cheby, cg + amg and gmres + jacobi on 3D Poisson ``--hash-n``^3 to
  rtol 1e-8: the sha256 of the gathered ``x`` at each rank count, the
  iterations, and whether every run gave the same bits (x, iterations,
  reason and residual history).
* **Gallery iterations** (the first ``--time-ranks`` ranks): CG + amg to
  rtol 1e-8 on the gallery problems of bench_precision.py in both modes; the
  target is at most 10% more iterations than the default's.
* **Default mode unchanged**: the default mode's seconds per iteration of
  the first part. With ``--baseline FILE``, the JSON of a ``--default-only``
  run of this script on the code without reproducible mode (its ``dmsolve``
  on PYTHONPATH), the ratio to it::

      mkdir -p out/pre && git archive b89351e~1 | tar -x -C out/pre
      PYTHONPATH=out/pre mpiexec -n 2 python -m mpi4py bench/bench_repro.py \\
          --default-only --json out/bench/repro_pre.json
      mpiexec -n 8 python -m mpi4py bench/bench_repro.py --baseline out/bench/repro_pre.json

``--default-only`` times the default mode of the first part and nothing else,
and passes no ``reproducible`` keyword anywhere, so it runs on code that has none.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import sys
import time

import numpy as np
from mpi4py import MPI

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _common import bench_parser, run  # noqa: E402

import dmsolve  # noqa: E402
import dmsolve.gallery as gallery  # noqa: E402
import preconditioners  # noqa: E402
from dmsolve.krylov import cg  # noqa: E402

TINY = 1e-300       # a tolerance no solve reaches: the iteration count is fixed
PCS = ["none", "jacobi", "cheby", "amg"]
#: the bit-identity cases: (method, preconditioner)
CASES = [("cg", "jacobi"), ("cg", "cheby"), ("cg", "amg"), ("gmres", "jacobi")]


def wait_idle(comm) -> None:
    """Sleep until every rank of ``comm`` is here (a rank outside the measured
    sub-communicator must not spin in a collective and take a core). Collective."""
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(0.01)


def first_ranks(world, k: int):
    """The sub-communicator of world ranks ``0 .. k-1`` (COMM_NULL elsewhere). Collective."""
    return world.Split(0 if world.rank < k else MPI.UNDEFINED, world.rank)


def unsupported(pc: str, A) -> str | None:
    """Why ``make(pc, A, reproducible=True)`` cannot be built yet, or None.
    Collective on ``A.comm`` (it builds the preconditioner)."""
    if pc == "none":
        return None
    try:
        preconditioners.make(pc, A, reproducible=True)
    except (TypeError, ValueError) as e:     # raised on every rank alike
        if "reproducible" in str(e):
            return "%s: make(%r, A, reproducible=True) is not supported (%s: %s)" % (
                pc, pc, type(e).__name__, e)
        raise
    return None


def _slowest(comm, seconds: float) -> float:
    return comm.allreduce(seconds, op=MPI.MAX)


def _make(pc, A, repro):
    """The preconditioner and its set-up seconds (slowest rank). Collective."""
    A.comm.Barrier()
    t = time.perf_counter()
    if pc == "none":
        M = None
    elif repro is None:                       # --default-only: no keyword at all
        M = preconditioners.make(pc, A)
    else:
        M = preconditioners.make(pc, A, reproducible=repro)
    return M, _slowest(A.comm, time.perf_counter() - t)


def _iterate(A, b, M, repro, iterations):
    """Seconds per iteration of one CG solve (slowest rank) and its iterations.
    Collective."""
    kw = {} if repro is None else {"reproducible": repro}
    A.comm.Barrier()
    t = time.perf_counter()
    _, info = cg(A, b, rtol=TINY, M=M, maxiter=iterations, **kw)
    sec = _slowest(A.comm, time.perf_counter() - t)
    return sec / max(info.iterations, 1), info.iterations


def cost(comm, n: int, iterations: int, repeats: int, default_only: bool) -> dict:
    """The first part on ``comm``: per preconditioner, the median default and
    reproducible seconds per iteration and set-up. Collective on ``comm``."""
    A = gallery.poisson3d(n, comm)
    b = gallery.rhs(A, "random", seed=1)
    modes = [None] if default_only else [False, True]
    out = {"rows": A.shape[0], "pcs": {}, "notes": []}
    if not default_only:
        from dmsolve.reproducible import canonical
        comm.Barrier()
        t = time.perf_counter()
        canonical(A)                         # kept on A: built once per matrix
        out["canonical_setup_s"] = _slowest(comm, time.perf_counter() - t)
    for pc in PCS:
        if not default_only:
            note = unsupported(pc, A)
            if note is not None:
                out["notes"].append(note)
                continue
        Ms, setups, times, its = {}, {m: [] for m in modes}, {m: [] for m in modes}, {}
        for m in modes:
            Ms[m], _ = _make(pc, A, m)
            _iterate(A, b, Ms[m], m, 2)      # compile, and touch every page
        for r in range(repeats):
            for m in modes:                  # interleaved: drifting load hits both alike
                if r < min(repeats, 3):
                    setups[m].append(_make(pc, A, m)[1])
                sec, its[m] = _iterate(A, b, Ms[m], m, iterations)
                times[m].append(sec)
        key = {None: "default", False: "default", True: "repro"}
        rec = {}
        for m in modes:
            rec[key[m] + "_s"] = statistics.median(times[m])
            rec[key[m] + "_setup_s"] = statistics.median(setups[m])
            rec[key[m] + "_iterations"] = its[m]
        if not default_only:
            rec["ratio"] = rec["repro_s"] / rec["default_s"]
            rec["setup_ratio"] = (rec["repro_setup_s"] / rec["default_setup_s"]
                                  if rec["default_setup_s"] > 0 else None)
        out["pcs"][pc] = rec
    return out


def _signature(x, info) -> dict:
    g = x.gather()
    norms = np.asarray(info.residual_norms, dtype=np.float64)
    return {"x": hashlib.sha256(g.tobytes()).hexdigest(), "iterations": int(info.iterations),
            "reason": info.reason.name,
            "residual_norms": hashlib.sha256(norms.tobytes()).hexdigest()}


def _solve_hash(comm, n, method, pc, metis=False):
    A = gallery.poisson3d(n, comm)
    b = gallery.rhs(A, "random", seed=1)
    p = None
    if metis:
        from dmsolve.partition import partition, redistribute
        p = partition(A, "metis")
        A, b = redistribute(A, p), redistribute(b, p)
    x, info = dmsolve.solve(A, b, method, pc=pc, rtol=1e-8, reproducible=True)
    if p is not None:
        x = redistribute(x, p, inverse=True)
    return _signature(x, info)


def identity(world, n: int) -> dict:
    """The second part: each case on the first ``k`` ranks for every ``k``, and
    on a METIS partition of the world. Collective on ``world``."""
    res = {"n": n, "rows": n ** 3, "cases": {}, "notes": []}
    for method, pc in CASES:
        name = "%s+%s" % (method, pc)
        A = gallery.poisson3d(4, world)
        note = unsupported(pc, A)
        if note is not None:
            res["notes"].append(note)
            continue
        runs = {}
        for k in range(1, world.size + 1):
            sub = first_ranks(world, k)
            sig = None
            if sub != MPI.COMM_NULL:
                sig = _solve_hash(sub, n, method, pc)
                sub.Free()
            wait_idle(world)
            sigs = [s for s in world.allgather(sig) if s is not None]
            runs[str(k)] = sigs[0] if all(s == sigs[0] for s in sigs) else {"x": "ranks disagree"}
        if world.size > 1:
            runs["metis-%d" % world.size] = _solve_hash(world, n, method, pc, metis=True)
        first = next(iter(runs.values()))
        res["cases"][name] = {"runs": runs, "equal": all(s == first for s in runs.values())}
    return res


#: The gallery problems of bench_precision.py: CG + amg iterations, both modes.
GALLERY = ["poisson3d-100", "poisson3d-64", "poisson2d-1000", "anisotropic2d-500",
           "shifted3d-64", "random-spd-100000"]


def gallery_iterations(comm, problems) -> dict:
    """The third part: CG + amg to rtol 1e-8 on each gallery problem in both
    modes: iterations, operator complexity and whether the reproducible mode
    takes at most 10% more than the default (the target). Collective on
    ``comm``."""
    out = {}
    for spec in problems:
        kind, n = spec.rsplit("-", 1)
        A = gallery.PROBLEMS[kind](int(n), comm)
        b = gallery.rhs(A, "random", seed=1)
        rec = {}
        for key, repro in (("default", False), ("repro", True)):
            M = preconditioners.make("amg", A, reproducible=repro)
            _, info = cg(A, b, rtol=1e-8, M=M, maxiter=2000, reproducible=repro)
            d = M.describe()
            rec[key] = {"iterations": int(info.iterations), "converged": bool(info.converged),
                        "complexity": float(d["operator_complexity"]),
                        "levels": len(d["levels"])}
            del M
        rec["within_10pct"] = rec["repro"]["iterations"] <= 1.1 * rec["default"]["iterations"]
        out[spec] = rec
    return out


def main(comm, args) -> dict:
    k = min(args.time_ranks, comm.size)
    res = {"ranks": comm.size, "time_ranks": k, "n": args.n, "iterations": args.iterations,
           "repeats": args.repeats, "default_only": args.default_only}
    sub = first_ranks(comm, k)
    part = None
    if sub != MPI.COMM_NULL:
        part = cost(sub, args.n, args.iterations, args.repeats, args.default_only)
        sub.Free()
    wait_idle(comm)
    res["cost"] = comm.bcast(part, root=0)
    if not args.default_only:
        res["identity"] = identity(comm, args.hash_n)
        problems = [p for p in args.gallery.split(",") if p] if args.gallery else []
        part = None
        sub = first_ranks(comm, k)
        if sub != MPI.COMM_NULL:
            part = gallery_iterations(sub, problems)
            sub.Free()
        wait_idle(comm)
        res["gallery"] = comm.bcast(part, root=0)
        if args.baseline:
            with open(args.baseline) as f:
                res["baseline"] = json.load(f)
    if comm.rank == 0:
        res["markdown"] = markdown(res)
        print(res["markdown"], flush=True)
    return res


def markdown(res) -> str:
    c = res["cost"]
    lines = []
    base = res.get("baseline")
    base_pcs = base["cost"]["pcs"] if base else {}
    if base and (base["n"], base["time_ranks"], base["iterations"]) != (
            res["n"], res["time_ranks"], res["iterations"]):
        base_pcs = {}                     # not the same measurement: no ratio
        lines += ["(The baseline was measured at another size, rank count or iteration "
                  "count and is not compared.)", ""]
    mode = "default mode only" if res["default_only"] else "reproducible=True against the default"
    lines += ["CG on 3D Poisson %d^3 (%d rows) at %d ranks, %s: %d iterations per solve, "
              "median of %d repeats (the modes interleaved), slowest rank; set-up: median "
              "of up to 3." % (res["n"], c["rows"], res["time_ranks"], mode,
                               res["iterations"], res["repeats"]), ""]
    if res["default_only"]:
        lines += ["| pc | default ms/it | set-up default (s) |", "|---|---|---|"]
        for pc, r in c["pcs"].items():
            lines.append("| %s | %.2f | %.3f |" % (pc, 1e3 * r["default_s"], r["default_setup_s"]))
        return "\n".join(lines)
    head = "| pc | default ms/it | reproducible ms/it | ratio | set-up default / reproducible (s)"
    rule = "|---|---|---|---|---"
    if base_pcs:
        head += " | default / baseline"
        rule += "|---"
    lines += [head + " |", rule + "|"]
    for pc, r in c["pcs"].items():
        row = "| %s | %.2f | %.2f | %.2f | %.3f / %.3f%s" % (
            pc, 1e3 * r["default_s"], 1e3 * r["repro_s"], r["ratio"], r["default_setup_s"],
            r["repro_setup_s"], " (%.2fx)" % r["setup_ratio"] if r.get("setup_ratio") else "")
        if base_pcs:
            b = base_pcs.get(pc)
            row += " | %s" % ("%.3f (%.2f ms/it baseline)" % (r["default_s"] / b["default_s"],
                                                          1e3 * b["default_s"]) if b else "-")
        lines.append(row + " |")
    lines += ["", "The canonical copy of A (built once per matrix, kept on it): %.3f s."
              % c["canonical_setup_s"]]
    if base_pcs:
        lines.append("Baseline: a separate `--default-only` run of the code without "
                     "reproducible mode (on a shared machine, repeat the pair of runs: the "
                     "noise between runs can exceed the difference).")
    for note in c["notes"]:
        lines.append("Not measured: %s." % note)
    ident = res["identity"]
    lines += ["", "Bit identity on 3D Poisson %d^3 (%d rows), rtol 1e-8: the same x "
              "(sha256 of the gathered vector), iterations, reason and residual history on "
              "the first k ranks for k = 1 .. %d and on a METIS partition of all %d ranks?"
              % (ident["n"], ident["rows"], res["ranks"], res["ranks"]), "",
              "| case | iterations | sha256 of x (first 16 hex digits): runs | same bits |",
              "|---|---|---|---|"]
    for name, case in ident["cases"].items():
        groups: dict = {}
        for label, sig in case["runs"].items():
            groups.setdefault(sig["x"][:16], []).append(label)
        its = sorted({str(sig.get("iterations", "?")) for sig in case["runs"].values()})
        cells = "; ".join("%s: %s" % (h, ", ".join(labels)) for h, labels in groups.items())
        lines.append("| %s | %s | %s | %s |" % (name, "/".join(its), cells,
                                                 "yes" if case["equal"] else "**no**"))
    for note in ident["notes"]:
        lines.append("Not checked: %s." % note)
    gal = res.get("gallery") or {}
    if gal:
        lines += ["", "CG + amg to rtol 1e-8 on the gallery problems at %d ranks: iterations "
                  "(operator complexity) in each mode; target: reproducible <= 1.1 x default."
                  % res["time_ranks"], "",
                  "| problem | default | reproducible | within 10% |", "|---|---|---|---|"]
        for spec, r in gal.items():
            lines.append("| %s | %d (%.2f) | %d (%.2f) | %s |" % (
                spec, r["default"]["iterations"], r["default"]["complexity"],
                r["repro"]["iterations"], r["repro"]["complexity"],
                "yes" if r["within_10pct"] else "**no**"))
    return "\n".join(lines)


if __name__ == "__main__":
    p = bench_parser(__doc__)
    p.add_argument("--n", type=int, default=100, help="3D Poisson n^3 of the cost part")
    p.add_argument("--iterations", type=int, default=30)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--time-ranks", type=int, default=2,
                   help="ranks of the cost part (the first ones of the world)")
    p.add_argument("--hash-n", type=int, default=24, help="3D Poisson n^3 of the bit identity")
    p.add_argument("--default-only", action="store_true",
                   help="time the default mode only, passing no reproducible keyword")
    p.add_argument("--gallery", default=",".join(GALLERY),
                   help="comma-separated gallery problems for the iteration part ('' skips it)")
    p.add_argument("--baseline", default=None,
                   help="JSON of a --default-only run on older code: report the ratio")
    run(main, p)
