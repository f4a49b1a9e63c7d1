"""The path a newcomer walks: the convection-diffusion example shows every
method converging, ``make setup`` warms every numba kernel, and the README's
hostfile launch works with the MPI library it names."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

import dmsolve
from mpitest import Checks, child_env, on_rank0, run_mpi_job

pytestmark = pytest.mark.timeout(600)


#: The checkout under test (the parent of the imported dmsolve package).
CHECKOUT = pathlib.Path(dmsolve.__file__).resolve().parents[1]


def _python_job(comm, ranks: int, code: str, args, timeout: float = 300,
                mpi4py: bool = False):
    """Run ``python [-m mpi4py] -c CODE ARGS`` under ``mpiexec -n RANKS`` with
    :data:`CHECKOUT` first on ``sys.path``. Collective on ``comm``."""
    prelude = "import sys; sys.path.insert(0, %r)\n" % str(CHECKOUT)
    return run_mpi_job(comm, ranks, ["-m", "mpi4py"] * mpi4py + ["-c", prelude + code, *args],
                       cwd=str(CHECKOUT), timeout=timeout)


# The README's quoted outputs (its python snippets' `print(...)  # output` lines and
# the command line's output block) are checked by tests/test_docs.py, which runs
# every block of the README and the guides in a child job, in a directory of its own.


# -- examples/convdiff_solve.py ---------------------------------------------------------

def _load(path: pathlib.Path):
    import importlib.util
    spec = importlib.util.spec_from_file_location("example_" + path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_convdiff_example_shows_every_method_converging(comm, capsys):
    """examples/convdiff_solve.py shows every method converging."""
    example = _load(CHECKOUT / "examples" / "convdiff_solve.py")
    results = example.main(comm, [])            # the docstring's usage line, as written
    out = comm.bcast(capsys.readouterr().out, root=0)
    # with the default divergence test, BiCGStab stops on its way up
    stopped = example.main(comm, ["--methods", "bicgstab", "--divtol", "1e4", "--quiet"])
    with Checks(comm) as checks:
        checks.add(set(results) == {"gmres", "fgmres", "bicgstab"}, "three methods",
                   sorted(results))
        for method, info in results.items():
            checks.add(info.converged, "%s converges" % method, info.reason)
            rel = info.extra["true_relative_residual"]
            checks.add(rel <= 1e-7, "%s true relative residual <= 1e-7" % method, rel)
            checks.add("| %s | %d | CONVERGED_RTOL |" % (method, info.iterations) in out,
                       "%s's row in the table" % method, out)
        rise = max(results["bicgstab"].residual_norms) / results["bicgstab"].residual_norms[0]
        checks.add(rise > 1e4, "BiCGStab's residual rises past the default divtol", rise)
        checks.add(re.search(r"note: bicgstab ran with divtol=None: its residual rose to "
                             r"\S+ x \|\|r0\|\|", out), "the output says why", out)
        checks.add(stopped["bicgstab"].reason.name == "DIVTOL",
                   "--divtol 1e4 stops BiCGStab with DIVERGED_DTOL", stopped["bicgstab"].reason)


# -- the numba warm-up of make setup ----------------------------------------------------

def test_make_setup_warms_every_numba_kernel(comm):
    """tools/warm_kernels.py (run by make setup) compiles every numba kernel,
    printing one line per stage, and make setup names its stages."""
    makefile = (CHECKOUT / "Makefile").read_text()
    # `setup` depends on a target whose recipe runs the warm-up
    setup = re.search(r"^setup:(.*)$", makefile, re.M)
    targets = setup.group(1).split() if setup else []
    recipes = {m.group(1): m.group(2) for m in
               re.finditer(r"^(\S+):[^\n=]*\n((?:\t[^\n]*\n)+)", makefile, re.M)}
    warms = [t for t in targets if "tools/warm_kernels.py" in recipes.get(t, "")]
    code, out, seconds = _python_job(
        comm, 2, "import runpy; runpy.run_path(%r, run_name='__main__')"
        % str(CHECKOUT / "tools" / "warm_kernels.py"), [], timeout=900, mpi4py=True)
    m = re.search(r"numba kernels: (\d+) of (\d+) in the cache", out)
    stages = re.findall(r"^numba warm-up \[(\d+)/(\d+)\] .+ \(\d+ s so far\)$", out, re.M)
    with Checks(comm) as checks:
        checks.add(warms, "make setup runs tools/warm_kernels.py", targets)
        # minutes of compiling on a fresh checkout: a line per stage, not silence
        checks.add(stages == [(str(k), "8") for k in range(1, 9)],
                   "the warm-up prints its 8 stages in order", out[-2000:])
        echoes = re.findall(r'^\t@echo "setup \[(\d)/2\]: (.*)"$', makefile, re.M)
        checks.add([k for k, _ in echoes] == ["1", "2"]
                   and re.search(r"\d+ s\b", echoes[-1][1]),
                   "make setup names its 2 stages, the warm-up with its measured time",
                   echoes)
        checks.add(code == 0, "the warm-up exits with 0",
                   "exit %r after %.0f s: %s" % (code, seconds, out[-2000:]))
        checks.add(m and m.group(1) == m.group(2) and int(m.group(2)) > 20,
                   "every kernel is in the cache", out[-2000:])


# -- docs/guide/install.md "Running on a cluster", as far as this machine allows --------------------------

def test_readme_hostfile_launch_and_mpi_library(comm, shared_tmp_path):
    """The README's hostfile launch starts the ranks and mpi4py names the MPI library it loaded."""
    # the wheel's mpiexec with a hostfile of host:slots lines (here localhost:2)
    # starts the ranks; mpi4py says which libmpi it loaded (the wheel's, in the venv)
    hosts = shared_tmp_path / "hosts"
    code = ("import sys; sys.path.insert(0, %r)\n"
            "from mpi4py import MPI\nimport dmsolve\n"
            "A = dmsolve.gallery.poisson2d(20, MPI.COMM_WORLD)\n"
            "x, info = dmsolve.solve(A, dmsolve.gallery.rhs(A), 'cg', 'jacobi', rtol=1e-8)\n"
            "me = 'rank %%d of %%d %%s %%d' %% (MPI.COMM_WORLD.rank, MPI.COMM_WORLD.size,"
            " info.reason.name, info.iterations)\n"
            "lines = MPI.COMM_WORLD.gather(me)\n"
            "if lines: print('\\n'.join(lines))\n" % str(CHECKOUT))

    def launch():
        hosts.write_text("localhost:2\n")
        mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
        job = subprocess.run([mpiexec, "-f", str(hosts), "-n", "2", sys.executable, "-m",
                              "mpi4py", "-c", code], capture_output=True, text=True,
                             timeout=300, env=child_env(), cwd=str(CHECKOUT))
        lib = subprocess.run([sys.executable, "-m", "mpi4py", "--mpi-library"],
                             capture_output=True, text=True, timeout=120, env=child_env())
        return job.returncode, job.stdout + job.stderr, lib.returncode, lib.stdout.strip()

    code_, out, lib_code, lib = on_rank0(comm, launch)
    lines = sorted(line for line in out.splitlines() if line.startswith("rank "))
    with Checks(comm) as checks:
        checks.add(code_ == 0, "the hostfile launch exits with 0", out[-2000:])
        checks.add([line.split()[:4] for line in lines] == [["rank", "0", "of", "2"],
                                                            ["rank", "1", "of", "2"]],
                   "both ranks of the hostfile launch ran in one world", out[-2000:])
        checks.add(len({line.split(None, 4)[4] for line in lines}) == 1,
                   "both ranks report the same converged solve", out[-2000:])
        checks.add(lib_code == 0 and "libmpi" in lib and lib.startswith(sys.prefix),
                   "mpi4py --mpi-library names the wheel's libmpi in the venv", lib)
