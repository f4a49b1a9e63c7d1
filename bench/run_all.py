"""Run every benchmark in one process tree and write docs/benchmarks.md.

    make bench            # or: .venv/bin/python bench/run_all.py [--only matvec,krylov]

Each benchmark script runs under ``mpiexec -n RANKS python -m mpi4py`` with
this checkout first on ``PYTHONPATH`` and writes a JSON file whose
``markdown`` entry is its table of ratios (always against a reference
measured in the same run). This script adds the date, the commit measured
and the machine (CPU model, cores, L3 size, versions), keeps every section's
figures in docs/benchmarks.json for later comparison, and writes
docs/benchmarks.md from that file: ``--render`` rewrites the page alone.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _provenance  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
MPIEXEC = str(Path(PY).parent / "mpiexec")
RESULTS = ROOT / "docs" / "benchmarks.json"
PAGE = ROOT / "docs" / "benchmarks.md"

# name -> (script, ranks, extra arguments, section title)
BENCHMARKS = {
    "matvec": ("bench_matvec.py", 2, ["--n", "100"], "Matvec: DistCSR against scipy"),
    "krylov": ("bench_krylov.py", 2, [], "Krylov solvers against scipy"),
    "amg": ("bench_amg.py", 2, [], "Preconditioners: SA-AMG against pyamg"),
    "topology": ("bench_topology.py", 2, ["--compare-orient"],
                 "Topology: critical points, components and the Hodge decomposition"),
    "gemslr": ("bench_gemslr.py", 2, [], "Multilevel Schur low-rank preconditioner (GeMSLR)"),
    "persistence": ("bench_persistence.py", 2, [], "Persistence against gudhi"),
    # 1 rank: the script launches every case (ours at 2 ranks included) in its own process
    "persistence_refs": ("bench_persistence.py", 1, ["--references"],
                         "Persistence against CubicalRipser and Oineus"),
    "petsc": ("bench_petsc.py", 2, [], "Head to head: dmsolve against PETSc"),
    "precision": ("bench_precision.py", 2, [],
                  "Mixed precision: preconditioners in float32"),
    "fused": ("bench_fused.py", 2, [], "Fused vector kernels of CG and pipelined CG"),
    # 8 ranks for the bit identity at 1..8 ranks; the cost part runs on the first 2
    "repro": ("bench_repro.py", 8, [], "Reproducible mode: cost per CG iteration and the same "
              "bits at 1-8 ranks"),
    "signals": ("bench_signals.py", 2, [], "Topological signal processing: filters, denoising "
                "and interpolation of edge flows"),
    "outofcore": ("bench_outofcore.py", 2, [], "Out-of-core grid topology"),
    # 1 rank: the script launches every case (ours at 1 and 2 ranks) in its own process
    "images": ("bench_images.py", 1, [], "Persistence of 2-D images against CubicalRipser"),
    # 1 rank: the script launches every reader (ours at 1 and 2 ranks) in its own process
    "mmread": ("bench_mmread.py", 1, [], "Reading Matrix Market files against scipy.io.mmread"),
    # 1 rank: the script launches every layout (ranks x threads) in its own processes
    "threads": ("bench_threads.py", 1, [], "Threads inside a rank: 1 rank x 2 threads against "
                "2 ranks x 1 thread"),
    # 1 rank: every figure comes from fresh processes the script starts
    "startup": ("bench_startup.py", 1, [], "Start-up: imports and the first solve"),
    # 1 rank: the script launches both checkouts at 2 ranks in fresh processes
    "psort_rounds": ("bench_psort_rounds.py", 1, [], "Complex construction with psort's "
                     "splitter rounds against the code before psort"),
}


def run(name: str, outdir: Path) -> dict:
    script, ranks, extra, _ = BENCHMARKS[name]
    path = ROOT / "bench" / script
    if not path.exists():
        return {"error": "bench/%s does not exist" % script}
    out = outdir / ("%s.json" % name)
    # this checkout's packages, whatever the environment has installed
    pythonpath = os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHONPATH=pythonpath)
    cmd = [MPIEXEC, "-n", str(ranks), PY, "-m", "mpi4py", str(path), "--json", str(out)] + extra
    print("$", " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, text=True, capture_output=True)
    sys.stdout.write(proc.stdout)
    if proc.returncode != 0 or not out.exists():
        sys.stderr.write(proc.stderr[-4000:])
        return {"error": "exit status %d: %s" % (proc.returncode, proc.stderr.strip()[-500:])}
    return json.loads(out.read_text())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default=None, help="comma-separated names: %s" % ", ".join(BENCHMARKS))
    p.add_argument("--no-docs", action="store_true",
                   help="keep the figures in docs/benchmarks.json but do not rewrite "
                        "docs/benchmarks.md")
    p.add_argument("--render", action="store_true",
                   help="run nothing: rewrite docs/benchmarks.md from docs/benchmarks.json")
    p.add_argument("--reuse", default=None, metavar="NAME=PATH,...",
                   help="take these sections from the JSON an earlier direct run of the "
                        "script wrote (e.g. persistence=out/bench/persistence.json: gudhi "
                        "at 128^3 takes minutes per field) instead of running them")
    args = p.parse_args(argv)
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    if args.render:
        write_docs(results)
        print("wrote", PAGE.relative_to(ROOT))
        return 0
    names = args.only.split(",") if args.only else list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        p.error("unknown benchmark(s) %s; choose from %s" % (", ".join(unknown),
                                                            ", ".join(BENCHMARKS)))
    outdir = ROOT / "out" / "bench"
    outdir.mkdir(parents=True, exist_ok=True)
    reuse = dict(item.split("=", 1) for item in args.reuse.split(",")) if args.reuse else {}
    for name in names:
        if name in reuse:
            path = Path(reuse[name])
            res = json.loads(path.read_text())
            stamp = datetime.datetime.fromtimestamp(path.stat().st_mtime)
            res["date"] = "%s (direct run of bench/%s)" % (stamp.strftime("%Y-%m-%d %H:%M"),
                                                          BENCHMARKS[name][0])
        else:
            load = os.getloadavg()[0]
            code = _provenance.code(str(ROOT))       # before the run: what it measures
            res = run(name, outdir)
            res.setdefault("code", code)
            res["date"] = "%s (1-minute load average %.1f at the start, %d cores)" % (
                datetime.date.today().isoformat(), load, os.cpu_count())
        # a script that records its own commit and machine (at measurement) keeps them
        res.setdefault("code", _provenance.code(str(ROOT)))
        res.setdefault("machine", _provenance.machine())
        results[name] = res
    RESULTS.write_text(json.dumps(results, indent=1, default=float) + "\n")
    if not args.no_docs:
        write_docs(results)
    return 0 if all("error" not in results[n] for n in names) else 1


def _tally(texts: list[str]) -> list[str]:
    """Sub-bullets: each distinct text with the number of sections it covers."""
    counts = {t: texts.count(t) for t in texts}
    return ["  - %s (%d section%s)" % (t, n, "" if n == 1 else "s") for t, n in counts.items()]


def write_docs(results: dict) -> None:
    """docs/benchmarks.md from the figures of docs/benchmarks.json. Not collective."""
    measured = [results[name] for name in BENCHMARKS if name in results]
    lines = ["# Benchmarks", "",
             "Written by `make bench` (bench/run_all.py) from the figures it keeps in",
             "docs/benchmarks.json; do not edit by hand. Each figure is a ratio against a",
             "reference measured in the same run on the same machine, because the machines",
             "are shared and noisy; absolute times are given only for orientation. Each",
             "section states its targets; where a target is missed the table says so.", "",
             "- Code measured (each section names its own):",
             *_tally([_provenance.code_text(r.get("code")) for r in measured]),
             "- Machines (each section names its own):",
             *_tally([_provenance.machine_text(r.get("machine")) for r in measured]), ""]
    for name, (_, ranks, _, title) in BENCHMARKS.items():
        res = results.get(name)
        if res is None:
            continue
        lines += ["## %s" % title, "",
                  "Measured %s with `mpiexec -n %d`, %s, on: %s." % (
                      res.get("date", "?"), ranks, _provenance.code_text(res.get("code")),
                      _provenance.machine_text(res.get("machine"))), ""]
        if "error" in res:
            lines += ["Not measured: %s" % res["error"], ""]
        else:
            lines += [res.get("markdown", "(no table)"), ""]
    PAGE.write_text("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
