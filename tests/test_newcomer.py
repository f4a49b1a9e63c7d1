"""The path a newcomer walks (issue 14): scipy/numpy input to ``dmsolve.solve``,
the convection-diffusion example, the numba warm-up of ``make setup``, and a
hostfile launch (docs/guide/install.md). The README's quoted outputs are checked
by tests/test_docs.py.

README, examples, tools and Makefile are read from the checkout under test:
the one whose ``dmsolve`` this run imports (``CHECKOUT``), and child jobs
import that same checkout, so that running these tests against another
checkout's library tests that checkout's files too.
"""

import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from mpi4py import MPI

import dmsolve
from dmsolve import DistCSR, DistVector
from mpitest import (Checks, assert_allclose_collective, assert_raises_collective,
                     child_env, on_rank0, run_mpi_job)

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


# -- scipy and numpy input to solve() ----------------------------------------------------

def _system(n=101):
    """A nonsymmetric, diagonally dominant tridiagonal system, the same on every rank."""
    A = sp.diags([-1.3, 3.0, -0.7], [-1, 0, 1], shape=(n, n), format="csr")
    b = np.sin(np.arange(n) + 1.0)
    return A, b, spla.spsolve(A.tocsc(), b)


@pytest.mark.parametrize("form", ["csr", "coo", "dense", "linear-operator"])
def test_solve_takes_scipy_and_numpy_inputs(comm, form):
    A, b, ref = _system()
    given = {"csr": A, "coo": A.tocoo(), "dense": A.toarray(),
             "linear-operator": spla.aslinearoperator(A)}[form]
    b_before = b.copy()
    x, info = dmsolve.solve(given, b, method="gmres", rtol=1e-12, restart=50)
    with Checks(comm) as checks:
        checks.add(isinstance(x, np.ndarray) and x.shape == b.shape,
                   "x is a numpy array shaped like b, on every rank", type(x).__name__)
        checks.add(info.converged, "converged", info.reason)
        checks.add(np.array_equal(b, b_before), "b not modified")
    assert_allclose_collective(x, ref, comm, rtol=1e-9, err_msg=form)


def test_solve_numpy_x0_and_nullspace_with_a_global_matrix(comm):
    # a singular consistent system: the 1D Neumann Laplacian, constant null space
    n = 37
    L = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n), format="lil")
    L[0, 0] = L[n - 1, n - 1] = 1.0
    L = L.tocsr()
    b = np.cos(np.arange(n) * 0.3)
    b -= b.mean()
    x0 = np.full(n, 0.5)
    x0_before = x0.copy()
    x, info = dmsolve.solve(L, b, method="cg", rtol=1e-12, x0=x0, nullspace=np.ones(n))
    with Checks(comm) as checks:
        checks.add(isinstance(x, np.ndarray), "x is a numpy array", type(x).__name__)
        checks.add(info.converged, "converged", info.reason)
        checks.add(np.array_equal(x0, x0_before), "x0 not modified")
        checks.add(np.linalg.norm(L @ x - b) <= 1e-10 * np.linalg.norm(b),
                   "L x = b", np.linalg.norm(L @ x - b))


def test_linear_operator_failing_on_one_rank_raises_on_every_rank(comm):
    A, b, _ = _system(40)
    calls = [0]

    def matvec(v):
        calls[0] += 1
        if comm.rank == comm.size - 1 and calls[0] == 3:
            raise ValueError("the operator gave up")
        return A @ v

    op = spla.LinearOperator(A.shape, matvec=matvec, dtype=float)
    assert_raises_collective(comm, ValueError, dmsolve.solve, op, b, method="gmres",
                             match="the operator gave up")


def test_mixed_inputs_name_the_one_line_conversion(comm):
    A, b, _ = _system(23)
    dA = DistCSR.from_global(A, comm)
    assert_raises_collective(comm, TypeError, dmsolve.solve, dA, b,
                             match=r"DistVector\.from_global\(b, A\.row_layout\)")
    assert_raises_collective(comm, TypeError, dmsolve.solve, dA, dA.create_vectors()[1],
                             x0=np.zeros(23),
                             match=r"DistVector\.from_global\(x0, A\.row_layout\)")
    db = DistVector.from_global(b, dA.row_layout)
    assert_raises_collective(comm, TypeError, dmsolve.solve, A, db,
                             match=r"DistCSR\.from_global\(A, b\.comm\).*b\.gather\(\)")


@pytest.mark.mpi(min_size=2)
def test_ranks_passing_different_kinds_of_input_are_refused_everywhere(comm):
    A, b, _ = _system(23)
    dA = DistCSR.from_global(A, comm)
    db = DistVector.from_global(b, dA.row_layout)       # collective: on every rank
    mine = b if comm.rank == 0 else db
    assert_raises_collective(comm, ValueError, dmsolve.solve, A, mine,
                             match="different kinds of input")


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
    with Checks(comm) as checks:
        checks.add(warms, "make setup runs tools/warm_kernels.py", targets)
        checks.add(code == 0, "the warm-up exits with 0",
                   "exit %r after %.0f s: %s" % (code, seconds, out[-2000:]))
        checks.add(m and m.group(1) == m.group(2) and int(m.group(2)) > 20,
                   "every kernel is in the cache", out[-2000:])


# -- docs/guide/install.md "Running on a cluster", as far as this machine allows --------------------------

def test_readme_hostfile_launch_and_mpi_library(comm, shared_tmp_path):
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
