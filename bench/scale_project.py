"""A BSP cost-model projection of the weak-scaling figures to 256-4096 ranks.

    python bench/scale_project.py docs/scaling.json      # prints the markdown section

bench/scale.py calls :func:`markdown` to append this section to docs/scaling.md.

The model is the BSP one of :class:`dmsolve.bsp.BSPParams`, ``T = W + g H +
l S``, with the latency term split by what pays it:

    T(p) = W + g H(p) + a M(p) + c log2(p) S(p)

- ``W``: the case's seconds at 1 rank. Work per rank is fixed, and at 1 rank
  nothing is communicated; the measured times at more ranks are inflated by
  oversubscription (up to 32 ranks per core) and are not used.
- ``H(p)``: the most bytes one rank sent or received (the h-relation summed
  over the case), ``M(p)``: point-to-point messages of the busiest rank,
  ``S(p)``: synchronisations, the larger of the case's BSP supersteps and its
  collective calls (a superstep's own collective is among the collectives, so
  the two are not added).
- Memory: the max per-rank peak growth, fitted as ``m0 + m1 p`` too, is
  projected alongside (a per-rank array of global size shows as ``m1``).
- The growth of each with p is fitted on the measured p >= 4 by non-negative
  least squares: ``H = h0 + h1 p`` (the O(p) words of a dense exchange, or
  data of global size, show up as ``h1``), ``M = m0 + m1 p``, and
  synchronisations ``= s0 + s1 log2 p``. A term measured flat stays flat.
- ``c log2 p``: a synchronisation (barrier, allreduce, NBX's nonblocking
  barrier) as a tree of depth log2 p, each level one small-message latency
  ``c``.

Two machines:

- **here**: ``g`` and ``l`` from :func:`dmsolve.bsp.probe` at 2 ranks on this
  machine (shared memory), with ``a = c = l / 2`` (a 2-rank superstep is one
  exchange and one tree level).
- **cluster**: published InfiniBand HDR figures: 200 Gb/s links (25 GB/s per
  node) shared by 64 ranks per node, so ``g = 64 / 25e9`` s/byte when every
  rank communicates at once; 1.5 us per message (OSU latency on ConnectX-6 is
  about 1 us; mpi4py adds about 0.5 us per call); ``c`` = 2 us per tree level
  (8-byte Allreduce of about 20-25 us on 1,024 nodes, i.e. 2 us x log2 1024).

What it leaves out: contention beyond the per-node bandwidth share, network
topology, load imbalance (the max over ranks is used for H and M but W is the
mean rank's), and the Python interpreter's per-call overhead beyond the 0.5 us.
The projection says which terms will dominate, not how long a run will take.
"""

from __future__ import annotations

import json
import math
import sys

import numpy as np
from scipy.optimize import nnls

__all__ = ["fit", "project", "check", "markdown", "CLUSTER", "PROJECT_RANKS"]

#: Rank counts of the projection.
PROJECT_RANKS = (256, 1024, 4096)

#: Published interconnect figures (see the module docstring): g s/byte, a s/message,
#: c s per synchronisation tree level.
CLUSTER = {"g": 64 / 25e9, "a": 1.5e-6, "c": 2.0e-6,
           "name": "InfiniBand HDR, 64 ranks per node"}


def fit(ps, ys, kind: str) -> tuple[float, float]:
    """Non-negative least-squares ``y = c0 + c1 f(p)``, ``f`` = p or log2 p.
    Not collective."""
    ps = np.asarray(ps, dtype=np.float64)
    f = ps if kind == "linear" else np.log2(ps)
    A = np.vstack([np.ones_like(f), f]).T
    coef, _ = nnls(A, np.asarray(ys, dtype=np.float64))
    return float(coef[0]), float(coef[1])


def _terms(runs: dict[int, dict]):
    """The fitted growth of H, M and the synchronisations of one case, from the
    runs at p >= 4 (None when fewer than two such runs)."""
    ps = sorted(p for p, r in runs.items() if p >= 4 and "error" not in r)
    if len(ps) < 2 or 1 not in runs or "error" in runs[1]:
        return None
    H = [max(runs[p]["sent_max"], runs[p]["recv_max"]) for p in ps]
    M = [runs[p]["p2p_max"] for p in ps]
    S = [max(runs[p]["supersteps"], runs[p]["collectives"]) for p in ps]
    mem = [runs[p]["mem_max"] for p in ps]
    return {"W": float(runs[1]["seconds"]), "ps": ps, "mem": fit(ps, mem, "linear"),
            "H": fit(ps, H, "linear"), "M": fit(ps, M, "linear"), "S": fit(ps, S, "log")}


def project(terms: dict, p: int, machine: dict) -> dict:
    """Predicted seconds at ``p`` ranks and the share of each term. Not collective."""
    H = terms["H"][0] + terms["H"][1] * p
    M = terms["M"][0] + terms["M"][1] * p
    S = terms["S"][0] + terms["S"][1] * math.log2(p)
    parts = {"work": terms["W"], "bandwidth": machine["g"] * H,
             "messages": machine["a"] * M, "sync": machine["c"] * math.log2(p) * S}
    mem = terms["mem"][0] + terms["mem"][1] * p
    return {"T": sum(parts.values()), "H": H, "M": M, "S": S, "mem": mem, **parts}


def _quantities(r: dict) -> dict:
    return {"H": max(r["sent_max"], r["recv_max"]), "M": r["p2p_max"],
            "S": max(r["supersteps"], r["collectives"]), "mem": r["mem_max"]}


def check(runs: dict[int, dict], machine: dict | None) -> dict | None:
    """The model against a point it was not fitted on. Not collective.

    The growth terms are fitted on the measured p >= 4 except the largest,
    and predicted there (``H``, ``M``, ``S``, ``mem``: predicted / measured).
    The time model is checked at 2 ranks, the one rank count that is not
    oversubscribed here: ``W + g H + a M + c S`` with the measured H, M and S
    at 2 ranks against the measured seconds (``T2``: model / measured).
    None when fewer than three runs at p >= 4."""
    ps = sorted(p for p, r in runs.items() if p >= 4 and "error" not in r)
    if len(ps) < 3 or 1 not in runs or "error" in runs[1]:
        return None
    top = ps[-1]
    t = _terms({p: r for p, r in runs.items() if p != top})
    pred = project(t, top, CLUSTER)
    meas = _quantities(runs[top])
    out = {"top": top, "fit": t["ps"]}
    for k in ("H", "M", "S", "mem"):
        out[k] = (pred[k], meas[k])
    r2 = runs.get(2)
    if machine is not None and r2 is not None and "error" not in r2:
        q = _quantities(r2)
        T = (t["W"] + machine["g"] * q["H"] + machine["a"] * q["M"] + machine["c"] * q["S"])
        out["T2"] = (T, float(r2["seconds"]))
    return out


def _ratio(pair) -> str:
    pred, meas = pair
    if meas <= 0 and pred <= 0:
        return "-"
    if meas <= 0:
        return "%.3g / 0" % pred
    return "%.2f" % (pred / meas)


def check_markdown(results: dict, probe: dict | None = None) -> list[str]:
    """The model-check table of docs/scaling.md. Not collective."""
    here = _machine_here(probe)
    rows, errs, mem_off = [], {"H": [], "M": [], "S": [], "T2": []}, []
    for case, runs in results.items():
        c = check(runs, here)
        if c is None:
            continue
        rows.append("| %s | %s | %d | %s | %s | %s | %s | %s |" % (
            case, ",".join(map(str, c["fit"])), c["top"], _ratio(c["H"]), _ratio(c["M"]),
            _ratio(c["S"]), "%.1f / %.1f" % (c["mem"][0] / 2 ** 20, c["mem"][1] / 2 ** 20), _ratio(c["T2"]) if "T2" in c else "-"))
        for k in errs:
            if k in c and c[k][1] > 0:
                errs[k].append(abs(math.log(max(c[k][0], 1e-300) / c[k][1])))
        mem_off.append(abs(c["mem"][0] - c["mem"][1]) / 2 ** 20)
    if not rows:
        return []
    worst = {k: (math.exp(max(v)) if v else float("nan")) for k, v in errs.items()}
    med = {k: (math.exp(float(np.median(v))) if v else float("nan")) for k, v in errs.items()}
    return ["### The model against measured points", "",
            "Each case's growth terms fitted again without its largest rank count, and "
            "predicted there (predicted / measured; 1.00 is exact), and the time model at 2 "
            "ranks (not oversubscribed): W + g H + a M + c S with the measured H, M, S at 2 "
            "ranks and this machine's g, a, c, against the measured seconds. Memory is "
            "given as predicted / measured MiB (its growth is a few MiB, where a ratio "
            "says little).", "",
            "| case | fit from p | predicted at | H | M | S | mem MiB | T at 2 (here) |",
            "|---|---|---|---|---|---|---|---|"] + rows + [
            "", "Off by a factor of (median over cases / worst case): bytes %.2f / %.2f, "
            "messages %.2f / %.2f, synchronisations %.2f / %.2f, time at 2 ranks %.2f / %.2f; "
            "memory off by %.1f / %.1f MiB. Time is the least certain term: W is one small "
            "run at 1 rank, where some cases take another path (partition_multilevel runs "
            "serial METIS there), and Python's per-call overhead is not in the model." % (
                med["H"], worst["H"], med["M"], worst["M"], med["S"], worst["S"],
                med["T2"], worst["T2"], float(np.median(mem_off)), max(mem_off)), ""]


def _machine_here(probe: dict | None) -> dict | None:
    if not probe:
        return None
    return {"g": probe["g"], "a": probe["l"] / 2, "c": probe["l"] / 2,
            "name": "this machine, probe() at 2 ranks"}


def _dominant(r: dict) -> str:
    return max(("work", "bandwidth", "messages", "sync"), key=lambda k: r[k])


def markdown(results: dict, probe: dict | None = None) -> str:
    """The projection section of docs/scaling.md. Not collective."""
    L = ["## Cost-model projection to %s ranks" % ", ".join(map(str, PROJECT_RANKS)), "",
         "T(p) = W + g H(p) + a M(p) + c log2(p) S(p): W = the case's seconds at 1 rank; "
         "H = most bytes one rank moves, M = its point-to-point messages, S = "
         "synchronisations (max of supersteps and collectives), each fitted on the "
         "measured p >= 4 (H, M: a + b p; S: a + b log2 p; non-negative least squares). "
         "Machines: **cluster** = %s, g = %.2g s/B, a = %.1f us per message, c = %.1f us "
         "per tree level; **here** = %s. Assumptions and what is left out: "
         "bench/scale_project.py's docstring." % (
             CLUSTER["name"], CLUSTER["g"], CLUSTER["a"] * 1e6, CLUSTER["c"] * 1e6,
             ("g = %.2g s/B, l = %.1f us from `dmsolve.bsp.probe` at 2 ranks (a = c = l/2)"
              % (probe["g"], probe["l"] * 1e6)) if probe else "not probed"), "",
         "| case | fit from p | H(p) bytes | S(p) | mem max at %d | W s | cluster T at %s s "
         "| dominant at %d | here T at %d s |" % (
             PROJECT_RANKS[-1], "/".join(map(str, PROJECT_RANKS)), PROJECT_RANKS[-1],
             PROJECT_RANKS[-1]),
         "|---|---|---|---|---|---|---|---|---|"]
    here = _machine_here(probe)
    for case, runs in results.items():
        t = _terms(runs)
        if t is None:
            L.append("| %s | too few runs at p >= 4 ||||||||" % case)
            continue
        cl = [project(t, p, CLUSTER) for p in PROJECT_RANKS]
        top = cl[-1]
        h = project(t, PROJECT_RANKS[-1], here)["T"] if here else float("nan")
        L.append("| %s | %s | %.0f + %.1f p | %.1f + %.1f log2 p | %.1f MiB | %.3f | %s | "
                 "%s (%.0f%%) | %.3g |" % (case, ",".join(map(str, t["ps"])), t["H"][0],
                             t["H"][1], t["S"][0], t["S"][1], top["mem"] / 2 ** 20, t["W"],
                             " / ".join("%.3g" % r["T"] for r in cl), _dominant(top),
                             100 * top[_dominant(top)] / top["T"], h))
    L += ["", "A case whose H grows with p (b > 0 in H) has data or an exchange of global "
          "size: at 4096 ranks its bandwidth term is b x 4096 bytes per rank. A case "
          "dominated by sync pays latency: fewer supersteps (or fewer collectives per "
          "superstep) is what would help it.", ""]
    L += check_markdown(results, probe)
    return "\n".join(L)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print(__doc__.splitlines()[2].strip())
        return 2
    with open(argv[0]) as f:
        raw = json.load(f)
    probe = raw.pop("_probe", None)
    raw.pop("_meta", None)
    results = {c: {int(p): r for p, r in v.items()} for c, v in raw.items()}
    print(markdown(results, probe))
    return 0


if __name__ == "__main__":
    sys.exit(main())
