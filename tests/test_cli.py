"""The ``python -m dmsolve`` command line, run in-process on every rank."""

import os
import subprocess
import sys

import numpy as np
import pytest

from dmsolve import DistCSR, DistVector, io
from dmsolve.cli import main
from mpitest import Checks, assert_collective, child_env, wait_idle


def test_solve_gallery_problem_converges(comm, capsys):
    code = main(["solve", "--problem", "poisson2d", "--n", "20", "--rtol", "1e-8"], comm)
    out = capsys.readouterr().out
    with Checks(comm) as checks:
        checks.add(code == 0, "exit code 0", code)
        if comm.rank == 0:
            checks.add("CONVERGED_RTOL" in out and "rows 400" in out, "report", out)
            rel = float(out.split("||b|| = ")[1].split()[0])
            checks.add(rel <= 1e-8 * 1.01, "relative residual <= rtol", rel)
        else:
            checks.add(out == "", "nothing printed on ranks > 0", out)


def test_solve_monitor_prints_petsc_lines_on_rank_0(comm, capsys):
    code = main(["solve", "--problem", "poisson1d", "--n", "50", "--monitor", "--maxiter",
                 "2"], comm)
    out = capsys.readouterr().out
    with Checks(comm) as checks:
        checks.add(code == 1, "non-convergence exits 1", code)
        if comm.rank == 0:
            checks.add(out.startswith("  0 KSP Residual norm "), "monitor line", out)
            checks.add("Linear solve did not converge due to DIVERGED_ITS iterations 2" in out,
                       "DIVERGED_ITS reported", out)


def test_solve_matrix_file_and_rhs(comm, capsys, shared_tmp_path):
    import scipy.sparse as sp
    n = 30
    A = sp.diags([-1.0, 2.5, -1.0], [-1, 0, 1], (n, n), format="csr")
    path = str(shared_tmp_path / "A.mtx")
    rhs = str(shared_tmp_path / "b.mtx")
    dA = DistCSR.from_global(A, comm)
    io.write_matrix(path, dA)
    io.write_vector(rhs, DistVector.from_global(np.arange(n, dtype=float), dA.row_layout))
    code = main(["solve", "--matrix", path, "--rhs", rhs, "--method", "gmres",
                 "--pc", "jacobi", "--rtol", "1e-10"], comm)
    out = capsys.readouterr().out
    with Checks(comm) as checks:
        checks.add(code == 0, "exit code 0", code)
        if comm.rank == 0:
            checks.add("CONVERGED" in out and "rows 30" in out, "report", out)


def test_plot_is_written(comm, capsys, shared_tmp_path):
    png = str(shared_tmp_path / "conv.png")
    code = main(["solve", "--problem", "poisson2d", "--n", "10", "--plot", png], comm)
    capsys.readouterr()
    comm.Barrier()
    assert_collective(comm, code == 0 and os.path.getsize(png) > 1000)


@pytest.mark.parametrize("argv, code, text", [
    (["solve", "--problem", "nope"], 2, "unknown problem 'nope'"),
    (["solve", "--problem", "poisson2d", "--n", "-3"], 2, "--n must be positive"),
    (["solve", "--problem", "poisson2d", "--rtol", "nan"], 2, "--rtol"),
    (["solve", "--problem", "poisson2d", "--pc", "nosuchpc"], 1, "unknown preconditioner"),
    (["solve", "--problem", "poisson2d", "--pc-opt", "novalue"], 2, "KEY=VALUE"),
    (["solve", "--matrix", "/nonexistent/file.mtx"], 1, "cannot read"),
    (["solve"], 2, "required"),
    (["frobnicate"], 2, "invalid choice"),
], ids=["bad-problem", "negative-n", "nan-rtol", "bad-pc", "bad-pc-opt", "missing-file",
        "no-source", "bad-command"])
def test_bad_input_one_message_same_exit_everywhere(comm, capsys, argv, code, text):
    got = main(argv, comm)
    cap = capsys.readouterr()
    with Checks(comm) as checks:
        checks.add(got == code, "exit %d" % code, got)
        if comm.rank == 0:
            checks.add(text in cap.err, "message %r" % text, cap.err)
        else:
            checks.add(cap.err == "" and cap.out == "", "nothing printed on ranks > 0", cap)


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
    code = main(["solve", "--problem", "poisson2d", "--n", "40", "--pc", "amg"], comm)
    out = capsys.readouterr().out
    with Checks(comm) as checks:
        checks.add(code == 0, "exit code 0", code)
        if comm.rank == 0:
            checks.add("operator complexity" in out and "level 0:      1600 rows" in out,
                       "hierarchy summary", out)
            oc = float(out.split("operator complexity ")[1].split(",")[0])
            checks.add(1.0 <= oc <= 1.4, "operator complexity in [1, 1.4]", oc)
