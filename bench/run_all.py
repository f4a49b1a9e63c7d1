"""Run every benchmark in one process tree and write docs/benchmarks.md.

    make bench            # or: .venv/bin/python bench/run_all.py [--only matvec,krylov]

Each benchmark script runs under ``mpiexec -n RANKS python -m mpi4py`` and
writes a JSON file whose ``markdown`` entry is its table of ratios (always
against a reference measured in the same run). This script adds the machine,
versions and date, and collects the JSON into bench/results.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
MPIEXEC = str(Path(PY).parent / "mpiexec")

# name -> (script, ranks, extra arguments, section title)
BENCHMARKS = {
    "matvec": ("bench_matvec.py", 2, ["--n", "100"], "Matvec: DistCSR vs scipy (issue 2)"),
    "krylov": ("bench_krylov.py", 2, [], "Krylov solvers vs scipy (issue 3)"),
    "amg": ("bench_amg.py", 2, [], "Preconditioners: SA-AMG vs pyamg (issue 4)"),
    "topology": ("bench_topology.py", 2, ["--compare-orient"], "Topology I (issue 6)"),
    "gemslr": ("bench_gemslr.py", 2, [], "Multilevel Schur low-rank preconditioner (issue 5)"),
    "persistence": ("bench_persistence.py", 2, [], "Topology II: persistence (issue 7)"),
    # 1 rank: the script launches every case (ours at 2 ranks included) in its own process
    "persistence_refs": ("bench_persistence.py", 1, ["--references"],
                         "Persistence against CubicalRipser and Oineus (issue 20)"),
    "petsc": ("bench_petsc.py", 2, [], "Head to head: dmsolve vs PETSc (issues 8 and 16)"),
    "precision": ("bench_precision.py", 2, [],
                  "Mixed precision: preconditioners in float32 (issue 16)"),
    "fused": ("bench_fused.py", 2, [], "Fused vector kernels of CG and pipelined CG (issue 16)"),
    # 8 ranks for the bit identity at 1..8 ranks; the cost part runs on the first 2
    "repro": ("bench_repro.py", 8, [], "Reproducible mode: cost per CG iteration and the same "
              "bits at 1-8 ranks (issue 17)"),
    "signals": ("bench_signals.py", 2, [], "Topological signal processing: filters, denoising "
                "and interpolation of edge flows (issue 18)"),
    "outofcore": ("bench_outofcore.py", 2, [], "Out-of-core grid topology (issue 19)"),
}


def machine() -> str:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import mpi4py
    import numpy
    import scipy
    from mpi4py import MPI
    lib = MPI.Get_library_version().splitlines()[0].strip()
    return ("%s, %d cores, Python %s, numpy %s, scipy %s, mpi4py %s, %s"
            % (cpu, os.cpu_count(), platform.python_version(), numpy.__version__,
               scipy.__version__, mpi4py.__version__, lib))


def run(name: str, outdir: Path) -> dict:
    script, ranks, extra, _ = BENCHMARKS[name]
    path = ROOT / "bench" / script
    if not path.exists():
        return {"error": "bench/%s does not exist yet" % script}
    out = outdir / ("%s.json" % name)
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
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
    p.add_argument("--no-docs", action="store_true", help="do not rewrite docs/benchmarks.md")
    p.add_argument("--reuse", default=None, metavar="NAME=PATH,...",
                   help="take these sections from the JSON an earlier direct run of the "
                        "script wrote (e.g. persistence=out/bench/persistence.json: gudhi "
                        "at 128^3 takes minutes per field) instead of running them")
    args = p.parse_args(argv)
    names = args.only.split(",") if args.only else list(BENCHMARKS)
    outdir = ROOT / "out" / "bench"
    outdir.mkdir(parents=True, exist_ok=True)
    results_path = ROOT / "bench" / "results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {}
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
            res = run(name, outdir)
            res["date"] = "%s (1-minute load average %.1f at the start, %d cores)" % (
                datetime.date.today().isoformat(), load, os.cpu_count())
        res["machine"] = machine()
        results[name] = res
    results_path.write_text(json.dumps(results, indent=1, default=float) + "\n")
    if not args.no_docs:
        write_docs(results)
    return 0 if all("error" not in results[n] for n in names) else 1


def write_docs(results: dict) -> None:
    lines = ["# Benchmarks", "",
             "Written by `make bench` (bench/run_all.py). Each figure is a ratio against a",
             "reference measured in the same run on the same machine, because the machines",
             "are shared and noisy; absolute times are given only for orientation.",
             "Targets come from the issues; where a target is missed the table says so.", ""]
    for name, (_, ranks, _, title) in BENCHMARKS.items():
        res = results.get(name)
        if res is None:
            continue
        lines += ["## %s" % title, "",
                  "Measured %s with `mpiexec -n %d` on: %s." % (res.get("date", "?"), ranks,
                                                               res.get("machine", "?")), ""]
        if "error" in res:
            lines += ["Not measured: %s" % res["error"], ""]
        else:
            lines += [res.get("markdown", "(no table)"), ""]
    (ROOT / "docs" / "benchmarks.md").write_text("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
