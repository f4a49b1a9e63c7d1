"""The ``python -m dmsolve`` command line, run in-process on every rank."""

import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

from dmsolve import DistCSR, DistVector, io
from dmsolve.cli import main
from mpitest import assert_collective, child_env, wait_idle


def _run(comm, capsys, argv, expected: int = 0) -> str:
    """Run the command line on every rank, check its exit code everywhere and
    that only rank 0 printed; return rank 0's output (the same on every rank)."""
    code = main(argv, comm)
    out = capsys.readouterr().out
    assert_collective(comm, code == expected, "exit code %d, expected %d" % (code, expected))
    assert_collective(comm, comm.rank == 0 or out == "", "rank %d printed %r" % (comm.rank, out))
    return comm.bcast(out, root=0)


def _number_after(text: str, marker: str) -> float:
    """The number that follows ``marker`` in ``text`` (NaN if there is none)."""
    try:
        return float(text.split(marker)[1].split()[0].rstrip(","))
    except (IndexError, ValueError):
        return float("nan")


def test_solve_gallery_problem_converges(comm, capsys):
    out = _run(comm, capsys, ["solve", "--problem", "poisson2d", "--n", "20", "--rtol", "1e-8"])
    assert_collective(comm, "CONVERGED_RTOL" in out and "rows 400" in out, out)
    rel = _number_after(out, "||b|| = ")
    assert_collective(comm, rel <= 1e-8 * 1.01, "true relative residual %r" % rel)


def test_solve_monitor_prints_petsc_lines_on_rank_0(comm, capsys):
    # non-convergence must exit non-zero
    out = _run(comm, capsys, ["solve", "--problem", "poisson1d", "--n", "50", "--monitor",
                              "--maxiter", "2"], expected=1)
    assert_collective(comm, out.startswith("  0 KSP Residual norm "), out)
    assert_collective(comm, "Linear solve did not converge due to DIVERGED_ITS iterations 2"
                      in out, out)


def test_solve_matrix_file_and_rhs(comm, capsys, shared_tmp_path):
    n = 30
    A = sp.diags([-1.0, 2.5, -1.0], [-1, 0, 1], (n, n), format="csr")
    path = str(shared_tmp_path / "A.mtx")
    rhs = str(shared_tmp_path / "b.mtx")
    dA = DistCSR.from_global(A, comm)
    io.write_matrix(path, dA)
    io.write_vector(rhs, DistVector.from_global(np.arange(n, dtype=float), dA.row_layout))
    out = _run(comm, capsys, ["solve", "--matrix", path, "--rhs", rhs, "--method", "gmres",
                              "--pc", "jacobi", "--rtol", "1e-10"])
    assert_collective(comm, "CONVERGED" in out and "rows 30" in out, out)


def test_plot_is_written(comm, capsys, shared_tmp_path):
    png = str(shared_tmp_path / "conv.png")
    code = main(["solve", "--problem", "poisson2d", "--n", "10", "--plot", png], comm)
    capsys.readouterr()
    comm.Barrier()
    assert_collective(comm, code == 0 and os.path.isfile(png) and os.path.getsize(png) > 1000)


@pytest.mark.parametrize("argv, code, text", [
    (["solve", "--problem", "nope"], 2, "unknown problem 'nope'"),
    (["solve", "--problem", "poisson2d", "--n", "-3"], 2, "--n must be a positive integer"),
    (["solve", "--problem", "poisson2d", "--atol", "-1"], 2, "--atol must be a non-negative"),
    (["solve", "--problem", "poisson2d", "--rtol", "nan"], 2, "--rtol"),
    (["solve", "--problem", "poisson2d", "--pc", "nosuchpc"], 1, "unknown preconditioner"),
    (["solve", "--problem", "poisson2d", "--pc-opt", "novalue"], 2, "KEY=VALUE"),
    (["solve", "--matrix", "/nonexistent/file.mtx"], 1, "cannot read"),
    (["solve"], 2, "required"),
    (["frobnicate"], 2, "invalid choice"),
], ids=["bad-problem", "negative-n", "negative-atol", "nan-rtol", "bad-pc", "bad-pc-opt",
        "missing-file", "no-source", "bad-command"])
def test_bad_input_one_message_same_exit_everywhere(comm, capsys, argv, code, text):
    got = main(argv, comm)
    cap = capsys.readouterr()
    assert_collective(comm, got == code, "exit %d, expected %d" % (got, code))
    err = comm.bcast(cap.err, root=0)
    assert_collective(comm, text in err, err)
    assert_collective(comm, comm.rank == 0 or cap.err == cap.out == "",
                      "rank %d printed %r" % (comm.rank, cap.err + cap.out))


def test_module_entry_point_runs(comm):
    # `python -m dmsolve` in a fresh single process (its own MPI world)
    if comm.rank == 0:
        proc = subprocess.run([sys.executable, "-m", "dmsolve", "solve", "--problem",
                               "poisson1d", "--n", "40"], capture_output=True, text=True,
                              timeout=120, env=child_env())
        ok = proc.returncode == 0 and "CONVERGED_RTOL" in proc.stdout
    else:
        ok = True
    wait_idle(comm)
    assert_collective(comm, ok, "python -m dmsolve failed")


def test_amg_hierarchy_summary_in_output(comm, capsys):
    out = _run(comm, capsys, ["solve", "--problem", "poisson2d", "--n", "40", "--pc", "amg"])
    assert_collective(comm, "level 0:      1600 rows" in out, out)
    oc = _number_after(out, "operator complexity ")
    assert_collective(comm, 1.0 <= oc <= 1.4, "operator complexity %r" % oc)
