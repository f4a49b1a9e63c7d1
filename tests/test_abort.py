"""An exception on one rank ends the whole MPI job (non-zero status, that
rank's traceback printed once) instead of leaving the other ranks waiting in
a collective: under ``python -m mpi4py`` and for the ``python -m dmsolve``
command line. Each case runs a small child job under ``mpiexec -n 2``."""

import pytest

from mpitest import assert_collective, run_mpi_job

# the child job must end well before this (it hangs forever if abort fails)
TIMEOUT = 90


def _run_job(comm, tmp_path, code: str, *python_args):
    """Run ``code`` as a script under ``mpiexec -n 2 python ARGS script`` on
    rank 0; return (returncode, stdout + stderr, seconds) on every rank."""
    script = tmp_path / "job.py"
    if comm.rank == 0:
        script.write_text(code)
    return run_mpi_job(comm, 2, [*python_args, script], timeout=TIMEOUT)


def _check(comm, result, message):
    code, out, seconds = result
    ok = (code is not None and code != 0 and out.count("Traceback (most recent call last)") == 1
          and out.count(message) >= 1)
    assert_collective(comm, ok, "exit %r after %.1f s, output:\n%s" % (code, seconds, out))


MPI4PY_RUN_CASES = {
    # rank 0 waits in an allreduce that rank 1 never joins
    "in-an-allreduce": (
        "from mpi4py import MPI\n"
        "comm = MPI.COMM_WORLD\n"
        "if comm.rank == 1:\n"
        "    raise ZeroDivisionError('rank one gave up')\n"
        "comm.allreduce(1)\n",
        "ZeroDivisionError: rank one gave up"),
    # rank 1 fails between two solves; rank 0 is inside the second solve's
    # reductions, which rank 1 never reaches
    "inside-a-dmsolve-solve": (
        "from mpi4py import MPI\n"
        "from dmsolve import gallery, solve\n"
        "comm = MPI.COMM_WORLD\n"
        "A = gallery.poisson2d(16, comm)\n"
        "b = gallery.rhs(A, 'random')\n"
        "solve(A, b, 'cg')\n"
        "if comm.rank == 1:\n"
        "    raise KeyError('missing boundary condition')\n"
        "solve(A, b, 'cg', rtol=1e-12)\n",
        "KeyError: 'missing boundary condition'"),
}


@pytest.mark.parametrize("case", sorted(MPI4PY_RUN_CASES))
def test_mpi4py_run_aborts_when_one_rank_raises(comm, tmp_path, case):
    """Under ``python -m mpi4py`` an exception on one rank ends the whole job, wherever the
    others wait."""
    code, message = MPI4PY_RUN_CASES[case]
    _check(comm, _run_job(comm, tmp_path, code, "-m", "mpi4py"), message)


def test_cli_aborts_when_one_rank_raises(comm, tmp_path):
    """The command line ends the whole job when one rank raises while the others communicate."""
    # `python -m dmsolve solve ...` where building the right-hand side fails
    # on rank 1 only, while rank 0 goes on into collective calls
    code = (
        "import runpy, sys\n"
        "from mpi4py import MPI\n"
        "import dmsolve.gallery as gallery\n"
        "if MPI.COMM_WORLD.rank == 1:\n"
        "    def rhs(*args, **kwargs):\n"
        "        raise RuntimeError('rank 1 lost its disk')\n"
        "    gallery.rhs = rhs\n"
        "sys.argv = ['dmsolve', 'solve', '--problem', 'poisson2d', '--n', '12']\n"
        "runpy.run_module('dmsolve', run_name='__main__')\n"
    )
    result = _run_job(comm, tmp_path, code)
    _check(comm, result, "RuntimeError: rank 1 lost its disk")
    assert_collective(comm, "rank 1 of 2 failed" in result[1], result[1])


def test_cli_error_on_every_rank_exits_with_one_message(comm, tmp_path):
    """A collective error in the command line exits 1 with one message, without an abort."""
    # a collective error (unreadable matrix file): no abort, one message, status 1
    code = (
        "import runpy, sys\n"
        "sys.argv = ['dmsolve', 'solve', '--matrix', '/nonexistent/A.mtx']\n"
        "runpy.run_module('dmsolve', run_name='__main__')\n"
    )
    code_, out, seconds = _run_job(comm, tmp_path, code)
    ok = code_ == 1 and out.count("dmsolve: error:") == 1 and "Traceback" not in out \
        and "Abort" not in out
    assert_collective(comm, ok, "exit %r, output:\n%s" % (code_, out))


@pytest.mark.parametrize("where", ["rank0", "all"])
def test_cli_unexpected_error_on_every_rank_reports_once(comm, tmp_path, where):
    """An unexpected error in the command line prints its traceback once."""
    # an unexpected exception kind raised on every rank (or only on rank 0,
    # which then aborts): the traceback is printed once either way
    cond = "True" if where == "all" else "MPI.COMM_WORLD.rank == 0"
    code = (
        "import runpy, sys\n"
        "from mpi4py import MPI\n"
        "import dmsolve.gallery as gallery\n"
        "if %s:\n"
        "    def rhs(*args, **kwargs):\n"
        "        raise AssertionError('inconsistent state')\n"
        "    gallery.rhs = rhs\n"
        "sys.argv = ['dmsolve', 'solve', '--problem', 'poisson2d', '--n', '12']\n"
        "runpy.run_module('dmsolve', run_name='__main__')\n" % cond
    )
    _check(comm, _run_job(comm, tmp_path, code), "AssertionError: inconsistent state")
