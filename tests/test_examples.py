"""The examples run in the suite, so their usage lines never go stale.

Every ``mpiexec -n N python -m mpi4py examples/NAME.py ...`` line of an
example's docstring runs as written, from rank 0 in a child MPI job while the
other ranks wait idle, with small sizes appended (argparse keeps the last
value) so that the suite stays cheap.
"""

import ast
import re

import pytest

import dmsolve
from dmsolve._sell import MIN_AUTO_ROWS
from mpitest import EXAMPLES, Checks, load_example, run_mpi_job

pytestmark = pytest.mark.timeout(300)

USAGE = re.compile(r"^ *mpiexec -n (\d+) python -m mpi4py examples/(\w+)\.py(.*)$", re.M)
NAMES = sorted(p.stem for p in EXAMPLES.glob("*.py"))

# Per example: arguments appended to each usage line (small sizes) and a line
# its output must contain. A new example needs an entry here.
SMALL = {
    "bsp_components": (["-n", "3000"], r"components: 10 "),
    "convdiff_solve": (["--n", "16"], r"\| bicgstab \| \d+ \| CONVERGED_RTOL \|"),
    "critical_points": (["--n", "10"], r"wrote critical_points\.vtu"),
    "demo": (["--n", "8"], r"done in \d"),
    "edge_flows": (["--order", "32"], r"zero ones 1 = beta_0 1: True"),
    "hodge": (["--n", "10"], r"betti numbers \[1, 2, 0\]"),
    "persistence": (["--n", "10"], r"wrote out/persistence\.png"),
    "poisson_solve": (["--n", "16"], r"CONVERGED_RTOL after \d+ iterations"),
}


def docstring(name):
    return ast.get_docstring(ast.parse((EXAMPLES / (name + ".py")).read_text())) or ""


def usage_lines():
    """(id, ranks, name, argv) of every usage line of every example."""
    cases = []
    for name in NAMES:
        for i, m in enumerate(USAGE.finditer(docstring(name))):
            cases.append(("%s-%d" % (name, i + 1), int(m.group(1)), m.group(2),
                          m.group(3).split()))
    return cases


USAGE_LINES = usage_lines()


@pytest.mark.parametrize("ranks, name, argv", [case[1:] for case in USAGE_LINES],
                         ids=[case[0] for case in USAGE_LINES])
def test_usage_line_runs(comm, shared_tmp_path, ranks, name, argv):
    """Each usage line of each example runs as written."""
    small, expected = SMALL[name]
    code, out, seconds = run_mpi_job(
        comm, ranks, ["-m", "mpi4py", EXAMPLES / (name + ".py"), *argv, *small],
        cwd=shared_tmp_path, timeout=240)
    checks = Checks(comm)
    checks.add(code == 0, "exits with status 0", "exit %r after %.1f s" % (code, seconds))
    checks.add(re.search(expected, out), "output has %r" % expected, out[-3000:])
    checks.assert_all()


@pytest.mark.parametrize("name", NAMES)
def test_example_follows_house_style(comm, name):
    """Each example follows the house style: usage line, argparse, main(comm), things to try."""
    text = (EXAMPLES / (name + ".py")).read_text()
    checks = Checks(comm)
    checks.add(any(m.group(2) == name for m in USAGE.finditer(docstring(name))),
               "usage line 'mpiexec -n N python -m mpi4py examples/%s.py' in the docstring"
               % name)
    checks.add("def parse_args(argv=None) -> argparse.Namespace:" in text, "parse_args(argv)")
    checks.add("def main(comm: MPI.Comm, argv=None)" in text, "main(comm, argv)")
    checks.add('if __name__ == "__main__":\n    main(MPI.COMM_WORLD)\n' in text, "__main__")
    checks.add("# Things to try\n# -------------\n" in text, "closing 'Things to try' note")
    checks.add(name in SMALL, "small arguments and expected output in SMALL")
    checks.assert_all()


def test_demo_runs_and_checks_itself(comm, capsys):
    """examples/demo.py runs and its own checks pass."""
    load_example("demo").main(comm, ["--n", "10"])
    out = comm.bcast(capsys.readouterr().out, root=0)      # rank 0 prints
    with Checks(comm) as checks:
        checks.add("max relative error" in out, "max relative error printed")
        err = float(out.split("max relative error ")[1].split()[0])
        checks.add(err < 1e-14, "max relative error < 1e-14", err)
        # 1000 rows: sliced ELL on the ranks with at least MIN_AUTO_ROWS of them
        lay = dmsolve.Layout.block(1000, comm)
        want = sum(lay.range_of(r)[1] - lay.range_of(r)[0] >= MIN_AUTO_ROWS
                   for r in range(comm.size))
        m = re.search(r"products in sliced ELL \(run slots\) on (\d+) of (\d+) ranks: "
                      r"(\S+)x the bytes of CSR", out)
        checks.add(m and int(m.group(1)) == want and int(m.group(2)) == comm.size
                   and (want == 0 or float(m.group(3)) < 1.0),
                   "sliced ELL on %d ranks, fewer bytes than CSR" % want, m and m.group(0))
        m1 = re.search(r"METIS partition: edge cut (\d+).*\n.*multilevel cut (\d+), hilbert "
                       r"cut (\d+), imbalance (\S+) and (\S+)", out)
        checks.add(m1 and int(m1.group(2)) <= 1.3 * int(m1.group(1))
                   and max(float(m1.group(4)), float(m1.group(5))) <= 1.05,
                   "multilevel cut within 1.3x METIS's, both balanced", m1 and m1.group(0))
        m13 = re.search(r"critical points, D0, D1 and D2 pairs, join tree and components of "
                        r"f <= \S+ equal to the in-memory run: (.*)", out)
        checks.add(m13 and m13.group(1).split() == ["True"] * 4,
                   "out of core: everything, D1 included, equal to the in-memory run",
                   m13 and m13.group(0))
        m4 = re.search(r"AMG levels: rows \[([\d, ]+)\] on ranks \[([\d, ]+)\]", out)
        lr = [int(r) for r in m4.group(2).split(",")] if m4 else []
        checks.add(m4 and lr[0] == comm.size and all(b <= a and 4 * b >= a
                                                     for a, b in zip(lr, lr[1:])),
                   "AMG's levels on at most 4x fewer ranks each", m4 and m4.group(0))
        m5 = re.findall(r"(amg|cheby|bjacobi) (\d+)/(\d+)",
                        out.split("precision='single'")[1].splitlines()[0]
                        if "precision='single'" in out else "")
        checks.add(len(m5) == 3 and all(int(s) <= int(d) + 1 for _, d, s in m5),
                   "float32 preconditioners within one iteration of float64", m5)
        checks.add("bit-identical on every run: True" in out,
                   "reproducible mode: the same sha256 on every run",
                   [line for line in out.splitlines() if "sha256" in line])
        m11 = re.search(r"default mode: (\d+) iterations\)\n.*: (\d+) iterations, sha256", out)
        checks.add(m11 and int(m11.group(2)) <= int(m11.group(1)) + 2,
                   "reproducible amg within two iterations of the default", m11 and m11.group(0))
        m12 = re.search(r"error vs scipy (\S+); an order-12 filter \(matvecs only\) gives it "
                        r"within (\S+)\n.*the (\d+) 3-cliques of largest circulation are (\d+) of",
                        out)
        checks.add(m12 and float(m12.group(1)) < 1e-8 and float(m12.group(2)) < 1e-4
                   and m12.group(3) == m12.group(4) == "10",
                   "edge flows: denoising to 1e-8, the filter within 1e-4, 10 real triangles",
                   m12 and m12.group(0))
        checks.add("equal to the in-memory run: True True True True" in out
                   and re.search(r"memory_budget='8MiB': ([2-9]|\d\d+) virtual slabs", out),
                   "out of core: several slabs per rank, the in-memory answers",
                   [line for line in out.splitlines() if "in-memory run" in line])
        m14 = re.search(r"CubicalComplex\(vertices=\.\.\.\): (\w+)\n.*Euler characteristic "
                        r"(-?\d+)", out)
        checks.add(m14 and m14.group(1) == "True" and m14.group(2) == "1",
                   "cubical: gudhi's diagram, Euler characteristic 1", m14 and m14.group(0))
        m15 = re.search(r"pairs D0/D1 (\d+)/(\d+) in \S+ s; equal to gudhi's "
                        r"CubicalComplex\(vertices=image\): (\w+)", out)
        checks.add(m15 and m15.group(3) == "True" and int(m15.group(1)) > 0
                   and int(m15.group(2)) > 0,
                   "images: image_persistence gives gudhi's diagram", m15 and m15.group(0))
        m16 = re.search(r"the same bits at 2 threads as at 1: (\w+); CG \+ amg: (\d+) iterations "
                        r"at 1 thread, (\d+) at 2\n.*the same pairs at 2 threads: (\w+); a task "
                        r"graph overlapped a ring exchange with local work: (\w+)", out)
        checks.add(m16 and m16.group(1) == m16.group(4) == m16.group(5) == "True"
                   and m16.group(2) == m16.group(3),
                   "threads: the same bits, iterations and pairs at 2 threads; a task graph",
                   m16 and m16.group(0))
        checks.add("duplicates: True" in out, "duplicates: True")
        checks.add("equal to scipy.csgraph: True" in out, "equal to scipy.csgraph")
        checks.add("[6] Topology" in out and "done in" in out, "every section ran")
        # the low-rank correction beats ILU(0) and the plain multilevel LDU (indefinite case)
        its = [int(line.split()[-3]) for line in out.splitlines() if "FGMRES +" in line]
        checks.add(len(its) == 3 and 2 * its[2] < min(its[0], its[1]),
                   "low rank halves the FGMRES iterations", its)
        checks.add("essential classes 1 0 0 (" in out, "essential classes 1 0 0")
        m9 = re.search(r"M=scipy LinearOperator\): CONVERGED_RTOL, numpy x on every rank, "
                       r"max \|x - scipy's x\| (\S+)", out)
        checks.add(m9 and float(m9.group(1)) < 1e-6, "scipy's call to dmsolve.cg: scipy's x",
                   m9 and m9.group(0))
        m9 = re.search(r"halo exchange: StopEarly on (\d+) of (\d+) ranks within (\S+) s; the "
                       r"next solve gives the same x: True", out)
        checks.add(m9 and m9.group(1) == m9.group(2) == str(comm.size)
                   and float(m9.group(3)) < 3.0,
                   "a fault before a halo exchange is raised everywhere, before the grace "
                   "period, and the next solve agrees", m9 and m9.group(0))
        m6 = re.search(r"diagram pairs per rank ([\d/]+), tree nodes per rank ([\d/]+)", out)
        spread = [[int(x) for x in m6.group(k).split("/")] for k in (1, 2)] if m6 else []
        checks.add(m6 and all(len(c) == comm.size and (comm.size == 1 or max(c) < sum(c))
                              for c in spread) and max(spread[0]) - min(spread[0]) <= 1,
                   "diagram and tree spread over the ranks (the pairs evenly)",
                   m6 and m6.group(0))
        energies = out.split("energies gradient ")[1].split()
        g, c, h, f = (float(energies[i]) for i in (0, 3, 6, 9))
        # 3-digit print; one hole: harmonic
        checks.add(abs(g + c + h - f) <= 1e-2 * f, "energies add up", (g, c, h, f))
        checks.add(h > 0, "harmonic energy > 0", h)
        checks.add("Betti [1, 1, 0]" in out, "Betti [1, 1, 0]")
        m8 = re.search(r"refused on (\d+) of (\d+) ranks: theta must be", out)
        checks.add(m8 and m8.group(1) == m8.group(2) == str(comm.size),
                   "a bad AMG option refused on every rank", m8 and m8.group(0))
        m8 = re.search(r"AMG by descriptor (\d+) iterations, by keywords (\d+)", out)
        checks.add(m8 and m8.group(1) == m8.group(2), "descriptors = keywords",
                   m8 and m8.group(0))
        m9 = re.search(r"amg refused on (\d+) of (\d+) ranks: amg: the diagonal of A is zero "
                       r"or not finite in 30 rows", out)
        checks.add(m9 and m9.group(1) == m9.group(2) == str(comm.size),
                   "amg refuses the saddle point on every rank", m9 and m9.group(0))
        m9 = re.search(r"singular preconditioner: DIVERGED_FALSE_CONVERGENCE, true residual "
                       r"(\S+) of", out)
        checks.add(m9 and float(m9.group(1)) > 1e-3, "false convergence named",
                   m9 and m9.group(0))
        m9 = re.search(r"'minres'\): CONVERGED_RTOL in \d+ iterations, numpy x, error vs "
                       r"spsolve (\S+)", out)
        checks.add(m9 and float(m9.group(1)) < 1e-6, "scipy inputs solved", m9 and m9.group(0))
        m9 = re.search(r"caught as StopEarly on (\d+) of (\d+) ranks", out)
        checks.add(m9 and m9.group(1) == m9.group(2) == str(comm.size),
                   "the user's exception type on every rank", m9 and m9.group(0))
        m10 = re.search(r"cg \+ jacobi in complex128: CONVERGED_RTOL in \d+ iterations, error "
                        r"vs spsolve (\S+)", out)
        checks.add(m10 and float(m10.group(1)) < 1e-7, "complex CG solves the Hermitian system",
                   m10 and m10.group(0))
        m10 = re.search(r"psort of (\d+) keys: counts per rank \[([\d, ]+)\], equal to "
                        r"np.sort: True", out)
        counts = [int(c) for c in m10.group(2).split(",")] if m10 else []
        checks.add(m10 and len(counts) == comm.size and sum(counts) == int(m10.group(1))
                   and max(counts) - min(counts) <= 1, "psort sorts into fair shares",
                   m10 and m10.group(0))
        checks.add("write_pvtu: %d pieces (one per rank)" % comm.size in out,
                   "one pvtu piece per rank")
        m = re.search(r"resumed: (\d+) iterations in all \(uninterrupted (\d+)\), "
                      r"max \|x - x_full\| (\S+)", out)
        checks.add(m and m.group(1) == m.group(2) and float(m.group(3)) < 1e-12,
                   "resumed run is the uninterrupted run", m and m.group(0))
