"""The examples' pages: each example script run at 2 ranks, with its output and figures.

``python docs/_ext/examplepages.py`` (what ``make docs`` runs, and docs/conf.py
too) runs every script of EXAMPLES under ``mpiexec -n 2 python -m mpi4py`` in
``docs/examples/_run`` and writes ``docs/examples/<name>.md``: the script's
docstring, the command, what it printed, the figures it wrote, and its source.
Nothing is pasted by hand. A script whose source and command did not change
since its last run is not run again (delete ``docs/examples`` to force it); a
script that fails stops the build.
"""

from __future__ import annotations

import ast
import hashlib
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "examples"
RANKS = 2

# (script, arguments, figures it writes, one line on what to look at)
EXAMPLES = [
    ("demo", [], [], "Every layer of dmsolve in one page, each checked against a serial reference."),
    ("poisson_solve", ["--n", "64", "--pc", "amg", "--monitor"], [],
     "CG with AMG on the 2D Poisson problem, PETSc-style monitor lines."),
    ("convdiff_solve", ["--n", "64", "--plot", "convdiff.png"], ["convdiff.png"],
     "Nonsymmetric Krylov methods on convection-diffusion, and their convergence curves."),
    ("persistence", ["--n", "32", "--out", "persistence"], ["persistence.png"],
     "The persistence diagram of a noisy 3D field."),
    ("critical_points", ["--n", "32", "--out", "critical_points.vtu"], [],
     "Critical points of a 3D field, written for ParaView."),
    ("hodge", ["--n", "24", "--out", "hodge.png"], ["hodge.png"],
     "The Hodge decomposition of an edge flow on a mesh with two holes."),
    ("edge_flows", ["--out", "edge_flows.png"], ["edge_flows.png"],
     "Traffic flows on the Chicago road network: decomposition, filters, denoising."),
    ("bsp_components", [], [], "Connected components, Pregel style, on the BSP layer."),
]


def _docstring(script: pathlib.Path) -> str:
    return ast.get_docstring(ast.parse(script.read_text())) or ""


def _fingerprint(script: pathlib.Path, argv: list[str]) -> str:
    return hashlib.sha256(script.read_bytes() + repr(argv).encode()).hexdigest()


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PMI_", "PMIX_", "HYDRA_", "MPIR_", "OMPI_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    env.setdefault("MPLBACKEND", "Agg")
    return env


def run(name: str, argv: list[str], figures: list[str]) -> str:
    """Run one example (unless its last run is current); return its output."""
    script = ROOT / "examples" / (name + ".py")
    run_dir = OUT / "_run" / name
    stamp = run_dir / "fingerprint"
    log = run_dir / "output.txt"
    if stamp.exists() and log.exists() and stamp.read_text() == _fingerprint(script, argv) \
            and all((run_dir / f).exists() for f in figures):
        return log.read_text()
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    mpiexec = pathlib.Path(sys.executable).parent / "mpiexec"
    cmd = [str(mpiexec), "-n", str(RANKS), sys.executable, "-m", "mpi4py", str(script), *argv]
    proc = subprocess.run(cmd, cwd=run_dir, env=_env(), capture_output=True, text=True,
                          timeout=900)
    if proc.returncode != 0:
        raise RuntimeError("examples/%s.py failed (exit %d):\n%s%s"
                           % (name, proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:]))
    missing = [f for f in figures if not (run_dir / f).exists()]
    if missing:
        raise RuntimeError("examples/%s.py did not write %s" % (name, missing))
    log.write_text(proc.stdout)
    stamp.write_text(_fingerprint(script, argv))
    return proc.stdout


_COMMAND = re.compile(r"^\s+(mpiexec|python|make)\s")


def literal_commands(rst: str) -> str:
    """``rst`` with each indented run of command lines (``mpiexec ...``, as
    the examples' docstrings show them after "Run it with") made a literal
    block. Indented text after a plain paragraph is a block quote in reST,
    and Sphinx's smart quotes would turn its ``--n`` into an en dash that
    breaks a copied command line."""
    lines = rst.split("\n")
    out: list[str] = []
    for i, line in enumerate(lines):
        starts_run = (_COMMAND.match(line) and (i == 0 or not lines[i - 1].strip())
                      and not any(prev.rstrip().endswith("::")
                                  for prev in out[-2:] if prev.strip()))
        if starts_run:
            out += [".. code:: sh", ""]
        out.append(line)
    return "\n".join(out)


def page(name: str, argv: list[str], figures: list[str], gist: str, output: str) -> str:
    doc = _docstring(ROOT / "examples" / (name + ".py"))
    title, _, body = doc.partition("\n\n")         # the title may take two lines
    title = " ".join(title.split())
    body = literal_commands(body.strip())
    command = " ".join(["mpiexec -n %d python -m mpi4py examples/%s.py" % (RANKS, name), *argv])
    parts = ["# %s" % title.strip().rstrip("."), "", gist, "",
             "```{eval-rst}", body, "```", "",
             "## Run at %d ranks while these pages were built" % RANKS, "",
             "```sh", command, "```", "", "```text", output.rstrip(), "```", ""]
    for fig in figures:
        parts += ["```{image} _run/%s/%s" % (name, fig), ":alt: %s" % fig, "```", ""]
    parts += ["## The script", "",
              "```{literalinclude} ../../examples/%s.py" % name, ":language: python", "```", ""]
    return "\n".join(parts)


def write_pages(report=None) -> list[pathlib.Path]:
    """Run every example and write its page and the examples' index;
    ``report(line)``, if given, hears one line per example (the runs take
    minutes)."""
    OUT.mkdir(parents=True, exist_ok=True)
    paths = []
    for k, (name, argv, figures, gist) in enumerate(EXAMPLES, 1):
        t0 = time.perf_counter()
        output = run(name, argv, figures)
        if report is not None:
            seconds = time.perf_counter() - t0
            report("docs: example %d/%d, examples/%s.py at %d ranks: %s"
                   % (k, len(EXAMPLES), name, RANKS, "%.0f s" % seconds
                      if seconds >= 0.5 else "unchanged, its last run kept"))
        path = OUT / (name + ".md")
        text = page(name, argv, figures, gist, output)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
        paths.append(path)
    index = ["# Examples", "",
             "Each example is a script in `examples/`, run here at %d ranks while these "
             "pages were built: what you see is what it printed and drew." % RANKS, "",
             "```{toctree}", ":maxdepth: 1", ""] + [n for n, *_ in EXAMPLES] + ["```", ""]
    text = "\n".join(index)
    path = OUT / "index.md"
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return [path] + paths


if __name__ == "__main__":
    for p in write_pages():
        print(p.relative_to(ROOT))
