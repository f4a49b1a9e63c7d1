"""The ``python -m dmsolve`` command line, run in-process on every rank: solves,
monitors, plots and checkpoints; output paths checked before anything is
built; help and version from the registries; sizes and memory checked before
allocating; and a non-zero exit when a solve does not converge. Bad options
exit 2 (unknown names and keys with the valid ones); --output writes the
solution; --check and the hint after a failed cg test symmetry; AMG's near
null space from --block-size and --coordinates, against pyamg's iterations;
and the exit status of the process itself, at 1 and 2 ranks.

Each case checks the exit status everywhere, that only rank 0 printed, and
what it printed."""

import inspect
import math
import os
import pathlib
import re
import subprocess
import sys
import tomllib

import numpy as np
import pyamg
import pytest
import scipy.io
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import dmsolve
from dmsolve import DistCSR, DistVector, PRECONDITIONERS, gallery, io
from dmsolve.cli import main
from dmsolve.krylov import METHODS
from mpitest import (Checks, assert_collective, assert_raises_collective, child_env, on_rank0,
                     run_mpi_job, wait_idle)


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
    """``solve`` on a gallery problem converges and says so."""
    out = _run(comm, capsys, ["solve", "--problem", "poisson2d", "--n", "20", "--rtol", "1e-8"])
    assert_collective(comm, "CONVERGED_RTOL" in out and "rows 400" in out, out)
    rel = _number_after(out, "||b|| = ")
    assert_collective(comm, rel <= 1e-8 * 1.01, "true relative residual %r" % rel)


def test_solve_monitor_prints_petsc_lines_on_rank_0(comm, capsys):
    """--monitor prints PETSc-style lines on rank 0, and non-convergence exits non-zero."""
    # non-convergence must exit non-zero
    out = _run(comm, capsys, ["solve", "--problem", "poisson1d", "--n", "50", "--monitor",
                              "--maxiter", "2"], expected=1)
    assert_collective(comm, out.startswith("  0 KSP Residual norm "), out)
    assert_collective(comm, "Linear solve did not converge due to DIVERGED_ITS iterations 2"
                      in out, out)


def test_solve_matrix_file_and_rhs(comm, capsys, shared_tmp_path):
    """``solve`` reads a matrix file and a right-hand side file."""
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
    """--plot writes the residual history plot."""
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
    (["solve", "--problem", "poisson2d", "--pc", "nosuchpc"], 2, "unknown preconditioner"),
    (["solve", "--problem", "poisson2d", "--pc-opt", "novalue"], 2, "KEY=VALUE"),
    (["solve", "--matrix", "/nonexistent/file.mtx"], 1, "cannot read"),
    (["solve"], 2, "required"),
    (["frobnicate"], 2, "invalid choice"),
], ids=["bad-problem", "negative-n", "negative-atol", "nan-rtol", "bad-pc", "bad-pc-opt",
        "missing-file", "no-source", "bad-command"])
def test_bad_input_one_message_same_exit_everywhere(comm, capsys, argv, code, text):
    """Each bad input prints one message and exits with the same status on every rank."""
    got = main(argv, comm)
    cap = capsys.readouterr()
    assert_collective(comm, got == code, "exit %d, expected %d" % (got, code))
    err = comm.bcast(cap.err, root=0)
    assert_collective(comm, text in err, err)
    assert_collective(comm, comm.rank == 0 or cap.err == cap.out == "",
                      "rank %d printed %r" % (comm.rank, cap.err + cap.out))


def test_module_entry_point_runs(comm):
    """``python -m dmsolve`` runs in a fresh process."""
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
    """A solve with amg prints the hierarchy's summary."""
    out = _run(comm, capsys, ["solve", "--problem", "poisson2d", "--n", "40", "--pc", "amg"])
    assert_collective(comm, "level 0:      1600 rows" in out, out)
    oc = _number_after(out, "operator complexity ")
    assert_collective(comm, 1.0 <= oc <= 1.4, "operator complexity %r" % oc)


def _saddle_point(comm):
    # [[L, B^T], [B, 0]]: L the 2D Laplacian (400 rows), B random sparse 30 x 400
    n = 20
    T = sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1])
    L = sp.kron(sp.eye(n), T) + sp.kron(T, sp.eye(n))
    B = sp.random(30, n * n, density=0.02, random_state=1, format="csr")
    K = sp.bmat([[L, B.T], [B, None]], format="csr")
    return DistCSR.from_global(K, comm)


def test_cli_exits_nonzero_on_the_saddle_point_system(comm, shared_tmp_path, capsys):
    """A solve that does not truly converge (GMRES + amg on a saddle-point matrix) exits non-
    zero."""
    # GMRES + amg on a saddle-point matrix must not claim CONVERGED_RTOL (its
    # true residual is 0.12), and the CLI must exit non-zero
    path = str(shared_tmp_path / "saddle.mtx")
    dmsolve.io.write_matrix(path, _saddle_point(comm))
    code = main(["solve", "--matrix", path, "--method", "gmres", "--pc", "amg",
                 "--rtol", "1e-8", "--maxiter", "500"], comm)
    out = capsys.readouterr()
    with Checks(comm) as checks:
        checks.add(code == 1, "exit code 1", code)
        checks.add("CONVERGED_RTOL" not in out.out, "no false claim", out.out)


def test_cli_checkpoint_and_resume(comm, shared_tmp_path, capsys):
    """--checkpoint writes a checkpoint and --resume ends like the uninterrupted run."""
    path = str(shared_tmp_path / "ck")
    base = ["solve", "--problem", "poisson2d", "--n", "16", "--rtol", "1e-10"]
    code = main(base + ["--maxiter", "25", "--checkpoint", path, "--checkpoint-every", "10"],
                comm)
    out1 = capsys.readouterr().out
    code2 = main(base + ["--resume", path], comm)
    out2 = capsys.readouterr().out
    code3 = main(base, comm)
    out3 = capsys.readouterr().out
    with Checks(comm) as checks:
        checks.add((code, code2, code3) == (1, 0, 0), "exit codes 1, 0, 0", (code, code2, code3))
        if comm.rank == 0:
            checks.add("checkpoints: 2 written" in out1, "checkpoints written", out1)
            checks.add("resumed from iteration 20" in out2, "resumed", out2)
            iters = [int(o.split(" in ")[1].split()[0]) for o in (out2, out3)]
            checks.add(iters[0] == iters[1], "resumed iterations = uninterrupted", (out2, out3))
    # a usage error, found before anything is built (exit status 2)
    code4 = main(base + ["--checkpoint-every", "3"], comm)
    err = capsys.readouterr().err
    assert_collective(comm, code4 == 2 and ("needs --checkpoint DIR" in err or comm.rank > 0),
                      err)


CHECKOUT = pathlib.Path(dmsolve.__file__).resolve().parents[1]


def _run_status(comm, capsys, argv):
    """``(exit status, rank 0's output, whether other ranks were silent)``, the
    same on every rank."""
    code = main(argv, comm)
    cap = capsys.readouterr()
    quiet = comm.allreduce(int(comm.rank == 0 or cap.out + cap.err == ""))
    return code, comm.bcast(cap.out + cap.err, root=0), quiet == comm.size


@pytest.fixture
def recorder():
    """A gallery problem that records that it was built, then refuses to be
    solved (so a check that comes too late shows, and no solve runs)."""
    calls = []

    def build(n, comm):
        calls.append(n)
        raise ValueError("the matrix was built")

    gallery.PROBLEMS.register("cli-test-recorder", build)
    yield calls
    gallery.PROBLEMS.unregister("cli-test-recorder")


# -- output paths, before anything is built ------------------------------------------

def _path_cases(tmp):
    """(id, extra argv, words the message must hold) of each unusable output path."""
    afile = tmp / "a-file"
    adir = tmp / "a-dir"
    return [
        ("plot-missing-directory", ["--plot", str(tmp / "no" / "such" / "c.png")],
         ["--plot", "does not exist"]),
        ("plot-is-a-directory", ["--plot", str(adir)], ["--plot", "is a directory"]),
        ("plot-under-a-file", ["--plot", str(afile / "c.png")], ["--plot", "is a file"]),
        ("plot-unknown-format", ["--plot", str(tmp / "c.xyz")],
         ["--plot", "cannot write .xyz", ".png"]),
        ("plot-unwritable-directory", ["--plot", "/proc/dmsolve-c.png"],
         ["--plot", "cannot create files in '/proc'"]),
        ("checkpoint-is-a-file", ["--checkpoint", str(afile), "--checkpoint-every", "2"],
         ["--checkpoint", "is a file, not a directory"]),
        ("checkpoint-under-a-file", ["--checkpoint", str(afile / "ck"),
                                     "--checkpoint-every", "2"],
         ["--checkpoint", "cannot be created", "is a file"]),
        ("checkpoint-unwritable", ["--checkpoint", "/proc/dmsolve-ck", "--checkpoint-every",
                                   "2"], ["--checkpoint", "cannot create files in '/proc'"]),
        ("checkpoint-without-every", ["--checkpoint", str(tmp / "ck")],
         ["--checkpoint DIR needs --checkpoint-every"]),
    ]


@pytest.mark.parametrize("case", [c[0] for c in _path_cases(pathlib.Path("/x"))])
def test_output_paths_are_checked_before_anything_is_built(comm, capsys, shared_tmp_path,
                                                           recorder, case):
    """Each unusable output path is refused before any problem is built, naming the path."""
    if comm.rank == 0:
        (shared_tmp_path / "a-file").write_text("not a directory")
        (shared_tmp_path / "a-dir").mkdir()
    comm.Barrier()
    _, argv, words = {c[0]: c for c in _path_cases(shared_tmp_path)}[case]
    code, out, quiet = _run_status(comm, capsys, ["solve", "--problem", "cli-test-recorder",
                                           "--n", "6", *argv])
    _check_refused_before_build(comm, code, out, quiet, recorder, words)


def test_good_output_paths_pass_and_are_written(comm, capsys, shared_tmp_path, recorder):
    """Usable output paths pass the checks and are written."""
    # a checkpoint directory that does not exist yet (two levels) is created,
    # a plot is written; the bad cases above are refused by the same checks
    ck = shared_tmp_path / "new" / "ck"
    png = shared_tmp_path / "conv.svg"
    code, out, quiet = _run_status(comm, capsys, [
        "solve", "--problem", "poisson2d", "--n", "12", "--checkpoint", str(ck),
        "--checkpoint-every", "5", "--plot", str(png)])
    bad, _, _ = _run_status(comm, capsys, ["solve", "--problem", "cli-test-recorder", "--n", "12",
                                    "--plot", str(shared_tmp_path / "nodir" / "c.png")])
    with Checks(comm) as checks:
        checks.add(code == 0 and "CONVERGED_RTOL" in out, "solved", out)
        checks.add((ck / "manifest.json").is_file(), "the checkpoint was written")
        checks.add(png.is_file() and png.read_text().lstrip().startswith("<?xml"),
                   "the plot was written as SVG")
        checks.add(bad == 2 and not recorder, "a plot into a missing directory is refused "
                   "before the build", bad)


# -- help and version from the registries -----------------------------------------

def _help_of(text: str, option: str) -> str:
    """The help paragraph of ``option`` in argparse's help ``text``, unwrapped."""
    m = re.search(r"^  %s\b[^\n]*\n?((?:^ {6,}\S[^\n]*\n?)*)" % re.escape(option), text, re.M)
    return " ".join(m.group(0).split()) if m else ""


def test_solve_help_lists_the_registered_names_and_options(comm, capsys):
    """``solve --help`` lists the registered methods, preconditioners, problems and their
    options."""
    code, out, quiet = _run_status(comm, capsys, ["solve", "--help"])
    pcs = _help_of(out, "--pc")
    methods = _help_of(out, "--method")
    popts = out[out.find("\n  --problem-opt"):out.find("\n  --rhs")]
    with Checks(comm) as checks:
        checks.add(code == 0, "exit status 0", code)
        checks.add(quiet, "only rank 0 printed the help")
        checks.add(PRECONDITIONERS.names() and all(
            re.search(r"\b%s\b" % re.escape(n), pcs) for n in PRECONDITIONERS.names()),
            "--pc lists every registered preconditioner %s" % PRECONDITIONERS.names(), pcs)
        checks.add(all(re.search(r"\b%s\b" % n, methods) for n in METHODS.names()),
                   "--method lists every method", methods)
        for name in gallery.PROBLEMS:
            opts = gallery.problem_options(name)
            # "  name: a=1, b=2" indented under the option, continued deeper
            line = re.search(r"^( +)%s: (.*(?:\n\1 +\S.*)*)" % re.escape(name), popts, re.M)
            listed = " ".join(line.group(2).split()) if line else ""
            checks.add(line and all("%s=%r" % kv in listed for kv in opts.items())
                       and (opts or "(none)" in listed),
                       "--problem-opt lists %s's options %s" % (name, opts), popts)


def test_problem_options_are_what_each_problem_accepts(comm):
    """--problem-opt takes exactly the options each problem lists."""
    # each problem built with its listed defaults given explicitly is the problem
    # built without them; an option it does not list is refused
    with Checks(comm) as checks:
        for name, build in gallery.PROBLEMS.items():
            opts = gallery.problem_options(name)
            params = list(inspect.signature(build).parameters)[2:]
            checks.add(list(opts) == params, "%s: the options are its signature's" % name,
                       (opts, params))
            n = 30 if name == "random-spd" else 5
            plain = build(n, comm).to_scipy()
            explicit = build(n, comm, **opts).to_scipy()
            checks.add((plain != explicit).nnz == 0, "%s: defaults as listed" % name)
    assert_raises_collective(comm, TypeError, gallery.PROBLEMS["convdiff2d"], 5, comm, dim=3)


def test_problem_opt_that_the_problem_lacks_lists_its_options(comm, capsys):
    """An option a problem lacks is refused with the list of its options."""
    code, out, quiet = _run_status(comm, capsys, ["solve", "--problem", "poisson3d", "--n", "4",
                                           "--problem-opt", "epsilon=0.1"])
    with Checks(comm) as checks:
        checks.add(code == 2, "exit status 2", code)
        checks.add("--problem-opt" in out and "no option 'epsilon'" in out
                   and "its options: ny, nz" in out, "names the options", out)
        checks.add(quiet, "only rank 0 printed")


def test_version_is_dmsolves(comm, capsys):
    """--version prints dmsolve's version."""
    declared = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["project"]["version"]
    code, out, quiet = _run_status(comm, capsys, ["--version"])
    with Checks(comm) as checks:
        checks.add(code == 0, "exit status 0", code)
        checks.add(out.strip() == "dmsolve %s" % dmsolve.__version__, "prints the version",
                   out)
        checks.add(dmsolve.__version__ == declared, "dmsolve.__version__ is pyproject's",
                   (dmsolve.__version__, declared))
        checks.add(quiet, "only rank 0 printed")


# -- memory checked before allocating -------------------------------------------------

@pytest.mark.parametrize("problem, n, words", [
    ("poisson2d", 10 ** 8, ["--n 100000000", "1e+16 rows", "available", "per rank"]),
    ("convdiff3d", 10 ** 6, ["--n 1000000", "1e+18 rows", "available", "per rank"]),
    ("poisson3d", 10 ** 8, ["1e+24 points", "64-bit"]),
], ids=["poisson2d-1e8", "convdiff3d-1e6", "poisson3d-1e8-past-int64"])
def test_n_too_large_for_memory_is_refused_before_allocating(comm, capsys, problem, n, words):
    """An --n too large for memory is refused before allocating."""
    code, out, quiet = _run_status(comm, capsys, ["solve", "--problem", problem, "--n", str(n)])
    with Checks(comm) as checks:
        checks.add(code == 2, "exit status 2 on every rank", code)
        checks.add(all(w in out for w in words), "the message names %s" % words, out)
        checks.add(quiet, "only rank 0 printed")


def test_memory_message_counts_the_ranks_of_the_node(comm, capsys):
    """The memory message counts the ranks sharing the node."""
    # a poisson2d about 10**4 times larger than this node's memory (large
    # enough that a build without the check fails at its first allocation)
    from dmsolve.cli import available_memory
    avail = available_memory()
    size1 = gallery.problem_size("poisson2d", 1000)
    per_row = size1.build_bytes(1) / size1.rows
    n = math.isqrt(int(10 ** 4 * avail / per_row))
    code, out, quiet = _run_status(comm, capsys, ["solve", "--problem", "poisson2d", "--n", str(n)])
    with Checks(comm) as checks:
        checks.add(code == 2, "refused", (code, out))
        m = re.search(r"needs about (\S+ \S+) per rank before any preconditioner, (\S+ \S+) "
                      r"for the (\d+) ranks? on this node", out)
        checks.add(m and int(m.group(3)) == comm.size, "counts this node's %d ranks"
                   % comm.size, out)


# -- --monitor-every and --progress --------------------------------------------------

def test_monitor_every_prints_every_kth_norm_and_the_last(comm, capsys):
    """--monitor-every k prints every k-th norm and the last."""
    argv = ["solve", "--problem", "poisson1d", "--n", "40", "--rtol", "1e-10"]
    _, full, _ = _run_status(comm, capsys, argv + ["--monitor"])
    code, every, quiet = _run_status(comm, capsys, argv + ["--monitor-every", "4"])
    norms = [l for l in full.splitlines() if "KSP Residual norm" in l]
    got = [l for l in every.splitlines() if "KSP Residual norm" in l]
    want = [l for i, l in enumerate(norms) if i % 4 == 0 or i == len(norms) - 1]
    with Checks(comm) as checks:
        checks.add(code == 0 and len(norms) > 9, "converged", every)
        checks.add(got == want, "every 4th norm and the last", (got, want))
        checks.add("Linear solve converged due to CONVERGED_RTOL" in every, "the reason line")
        checks.add(quiet, "only rank 0 printed")
    bad, out, _ = _run_status(comm, capsys, argv + ["--monitor-every", "0"])
    assert bad == 2 and "--monitor-every" in out, out


class _Reporting(dmsolve.Preconditioner):
    """The identity, whose set-up reports two stages."""
    name = "cli-test-reporting"
    _symmetric = True

    def __init__(self, A, progress=None):
        super().__init__(A)
        report = dmsolve.Progress(progress, A.comm, self.name)
        report("stage %d of %d", 1, 2)
        report("stage %d of %d", 2, 2)
        self._done()

    def _apply(self, r, out):
        out[:] = r


def test_progress_reports_the_preconditioner_set_up(comm, capsys):
    """--progress reports the preconditioner's set-up stages."""
    PRECONDITIONERS.register("cli-test-reporting", _Reporting)
    try:
        argv = ["solve", "--problem", "poisson2d", "--n", "8"]
        code, out, quiet = _run_status(comm, capsys, argv + ["--pc", "cli-test-reporting",
                                                      "--progress"])
        silent, plain, _ = _run_status(comm, capsys, argv + ["--pc", "cli-test-reporting"])
        refused, why, _ = _run_status(comm, capsys, argv + ["--pc", "jacobi", "--progress"])
        reporters = sorted(n for n, f in PRECONDITIONERS.items()
                           if "progress" in inspect.signature(f).parameters)
    finally:
        PRECONDITIONERS.unregister("cli-test-reporting")
    with Checks(comm) as checks:
        checks.add(code == 0 and re.search(r"cli-test-reporting: stage 1 of 2 \(\S+ s\)\n"
                                           r"cli-test-reporting: stage 2 of 2", out),
                   "the stages, on rank 0", out)
        checks.add(quiet, "only rank 0 printed")
        checks.add(silent == 0 and "stage" not in plain, "no reports without --progress")
        checks.add(refused == 2 and "jacobi reports no set-up progress" in why
                   and ", ".join(reporters) in why, "a preconditioner without reports is "
                   "refused, naming those with", why)


# -- options refused with exit status 2, before anything is built --------------------

def _usage_cases(tmp):
    """(id, extra argv, words the message must hold) of each option refused as given."""
    return [
        ("pc-misspelt", ["--pc", "amgg"],
         ["unknown preconditioner 'amgg'", "did you mean 'amg'?", "available: amg, asm"]),
        ("pc-opt-misspelt", ["--pc", "amg", "--pc-opt", "thetta=0.1"],
         ["--pc-opt thetta: preconditioner amg has no option 'thetta'", "did you mean 'theta'?",
          "its options: theta, aggregate, omega"]),
        ("pc-opt-of-another-pc", ["--pc", "jacobi", "--pc-opt", "overlap=1"],
         ["--pc-opt overlap", "jacobi has no option 'overlap'", "its options: omega"]),
        ("pc-opt-B", ["--pc", "amg", "--pc-opt", "B=1"],
         ["--pc-opt B", "--block-size K or --coordinates FILE"]),
        ("output-extension", ["--output", str(tmp / "x.txt")],
         ["--output", "x.txt", "must end in .mtx or .npy"]),
        ("output-missing-directory", ["--output", str(tmp / "no" / "x.npy")],
         ["--output", "No such file or directory"]),
        ("coordinates-extension", ["--pc", "amg", "--coordinates", str(tmp / "c.csv")],
         ["--coordinates", "must end in .npy or .txt or .mtx"]),
        ("block-size-without-amg", ["--pc", "jacobi", "--block-size", "2"],
         ["--block-size gives AMG's near null space", "--pc jacobi takes none", "--pc amg"]),
        ("block-size-zero", ["--pc", "amg", "--block-size", "0"],
         ["--block-size must be a positive"]),
        ("check-with-gmres", ["--method", "gmres", "--check"],
         ["--check tests the symmetry that cg", "--method gmres does not need it"]),
        ("reproducible-asm", ["--pc", "asm", "--reproducible"],
         ["--reproducible takes --pc none, jacobi, cheby, amg", "--pc asm"]),
        ("reproducible-block-size", ["--pc", "amg", "--reproducible", "--block-size", "3"],
         ["--reproducible", "drop --block-size"]),
        ("maxiter-negative", ["--maxiter", "-1"], ["--maxiter must be a non-negative integer"]),
        ("restart-zero", ["--method", "gmres", "--restart", "0"],
         ["--restart must be a positive integer"]),
    ]


def _check_refused_before_build(comm, code, out, quiet, recorder, words):
    """Exit status 2 on every rank, nothing built, one message on rank 0
    holding ``words``. Collective."""
    with Checks(comm) as checks:
        checks.add(code == 2, "exit status 2 on every rank", code)
        checks.add(not recorder, "refused before the problem was built", out)
        checks.add(all(w in out for w in words), "the message says %s" % words, out)
        checks.add(quiet, "only rank 0 printed")


@pytest.mark.parametrize("case", [c[0] for c in _usage_cases(pathlib.Path("/x"))])
def test_bad_options_exit_2_before_anything_is_built(comm, capsys, shared_tmp_path, recorder,
                                                     case):
    """Each option refused as given exits 2 on every rank before the problem is
    built, with one message on rank 0 that says what to give instead."""
    _, argv, words = {c[0]: c for c in _usage_cases(shared_tmp_path)}[case]
    code, out, quiet = _run_status(comm, capsys, ["solve", "--problem", "cli-test-recorder",
                                                  "--n", "6", *argv])
    _check_refused_before_build(comm, code, out, quiet, recorder, words)


def test_asm_for_cg_is_refused_naming_the_flags_to_change(comm, capsys):
    """Restricted asm (not symmetric) with cg is refused with exit 2, naming the
    command line's flags, not Python's; with the flag it names, it solves."""
    argv = ["solve", "--problem", "poisson2d", "--n", "12", "--pc", "asm"]
    code, out, quiet = _run_status(comm, capsys, argv)
    ilut, why, _ = _run_status(comm, capsys, argv + ["--pc-opt", "restricted=False",
                                                     "--pc-opt", "sub=ilut"])
    fixed, solved, _ = _run_status(comm, capsys, argv + ["--pc-opt", "restricted=False"])
    gmres, solved2, _ = _run_status(comm, capsys, argv + ["--method", "gmres"])
    with Checks(comm) as checks:
        checks.add(code == 2 and quiet, "exit status 2, rank 0 alone printed", (code, out))
        checks.add("--method cg needs a symmetric preconditioner, and --pc asm is not symmetric: "
                   "add --pc-opt restricted=False, or use --method gmres" in out, "the flags",
                   out)
        checks.add("pc=(" not in out and "method='" not in out, "no Python spelling", out)
        checks.add(ilut == 2 and "--pc asm --pc-opt restricted=False --pc-opt sub=ilut is not "
                   "symmetric: add --pc-opt sub=ilu0 (or sub=lu)" in why, "ilut named", why)
        checks.add(fixed == 0 and "CONVERGED_RTOL" in solved, "restricted=False solves", solved)
        checks.add(gmres == 0 and "CONVERGED_RTOL" in solved2, "gmres solves", solved2)


@pytest.fixture
def nonsymmetric_file(comm, shared_tmp_path):
    """A 225-row nonsymmetric Matrix Market file: upwind convection-diffusion."""
    path = str(shared_tmp_path / "convdiff.mtx")
    io.write_matrix(path, gallery.PROBLEMS["convdiff2d"](15, comm))
    return path


def test_check_refuses_a_nonsymmetric_matrix_before_solving(comm, capsys, nonsymmetric_file):
    """--check refuses a nonsymmetric matrix for cg and minres (exit 2, the method
    to use instead) without solving; a symmetric one passes and solves."""
    cg_code, cg_out, quiet = _run_status(comm, capsys, ["solve", "--matrix", nonsymmetric_file,
                                                        "--check"])
    mr_code, mr_out, _ = _run_status(comm, capsys, ["solve", "--matrix", nonsymmetric_file,
                                                    "--method", "minres", "--check"])
    ok, out, _ = _run_status(comm, capsys, ["solve", "--problem", "poisson2d", "--n", "12",
                                            "--pc", "amg", "--check"])
    with Checks(comm) as checks:
        for code, text, method in ((cg_code, cg_out, "cg"), (mr_code, mr_out, "minres")):
            checks.add(code == 2, "%s: exit status 2" % method, code)
            checks.add("--check: --method %s needs a symmetric matrix, and this one is not"
                       % method in text and "use --method gmres" in text, "says why", text)
            checks.add("iterations" not in text, "%s: refused before solving" % method, text)
        gap = _number_after(cg_out, "x^T A y| is ")
        checks.add(1e-4 < gap < 1e-1, "the asymmetry it measured", cg_out)
        checks.add(quiet, "only rank 0 printed")
        checks.add(ok == 0 and "CONVERGED_RTOL" in out, "a symmetric matrix passes", out)


class _Skewed(dmsolve.Preconditioner):
    """``out = r`` plus half of the previous local entry: not symmetric, and
    it does not say so (``symmetric`` is None)."""
    name = "cli-test-skewed"

    def __init__(self, A):
        super().__init__(A)
        self._done()

    def _apply(self, r, out):
        out[:] = r
        out[1:] += 0.5 * r[:-1]


def test_check_tests_the_preconditioner_too(comm, capsys):
    """--check refuses a preconditioner that is not symmetric though it does not
    say so; without --check, a cg solve that fails with it gets a hint."""
    PRECONDITIONERS.register("cli-test-skewed", _Skewed)
    try:
        argv = ["solve", "--problem", "poisson2d", "--n", "12", "--pc", "cli-test-skewed"]
        code, out, quiet = _run_status(comm, capsys, argv + ["--check"])
        failed, hint, _ = _run_status(comm, capsys, argv + ["--maxiter", "3"])
    finally:
        PRECONDITIONERS.unregister("cli-test-skewed")
    with Checks(comm) as checks:
        checks.add(code == 2 and "--check: --method cg needs a symmetric preconditioner, and "
                   "this one is not" in out, "refused", out)
        checks.add(failed == 1 and "hint: --method cg assumes a symmetric preconditioner"
                   in hint, "the hint names the preconditioner", hint)
        checks.add(quiet, "only rank 0 printed")


def test_cg_that_fails_on_a_nonsymmetric_matrix_says_why(comm, capsys, nonsymmetric_file):
    """cg on a nonsymmetric file runs its 10 N iterations and then says that the
    matrix is not symmetric and which method to use; gmres solves it. A
    symmetric problem that runs out of iterations gets no such hint."""
    code, out, quiet = _run_status(comm, capsys, ["solve", "--matrix", nonsymmetric_file])
    gm, solved, _ = _run_status(comm, capsys, ["solve", "--matrix", nonsymmetric_file,
                                               "--method", "gmres"])
    short, plain, _ = _run_status(comm, capsys, ["solve", "--problem", "poisson1d", "--n", "50",
                                                 "--maxiter", "2"])
    with Checks(comm) as checks:
        checks.add(code == 1 and "DIVERGED_ITS in 2250 iterations" in out, "cg ran out", out)
        checks.add("dmsolve: hint: --method cg assumes a symmetric matrix, and this one is not"
                   in out and "use --method gmres" in out and "--check refuses" in out,
                   "the hint", out)
        checks.add(quiet, "only rank 0 printed")
        checks.add(gm == 0 and "CONVERGED_RTOL" in solved, "gmres converges", solved)
        checks.add(short == 1 and "hint" not in plain, "no hint for a symmetric matrix", plain)


@pytest.mark.parametrize("ext", ["npy", "mtx"])
def test_output_writes_the_solution(comm, capsys, shared_tmp_path, ext):
    """--output writes the solution, .npy or .mtx, each rank its own entries:
    scipy's spsolve's answer, with no temporary file left."""
    path = shared_tmp_path / ("x." + ext)
    code, out, quiet = _run_status(comm, capsys, ["solve", "--problem", "poisson2d", "--n", "13",
                                                  "--pc", "amg", "--rtol", "1e-10",
                                                  "--output", str(path)])
    A = gallery.poisson2d(13, comm)
    ref = spla.spsolve(A.to_scipy().tocsc(), gallery.rhs(A, "random", seed=0).gather())
    got = np.load(path) if ext == "npy" else io.read_vector(str(path), comm).gather()
    # a solve that does not converge writes its last iterate too (and exits 1)
    early = shared_tmp_path / ("early." + ext)
    stopped, said, _ = _run_status(comm, capsys, ["solve", "--problem", "poisson2d", "--n", "13",
                                                  "--maxiter", "1", "--output", str(early)])
    with Checks(comm) as checks:
        checks.add(stopped == 1 and early.is_file() and "solution written" in said,
                   "the last iterate written", said)
        checks.add(code == 0 and "solution written to %s" % path in out, "written", out)
        checks.add(got.shape == ref.shape and np.allclose(got, ref, rtol=1e-7, atol=0),
                   "spsolve's solution", np.abs(got - ref).max())
        checks.add(sorted(p.name for p in shared_tmp_path.iterdir())
                   == sorted([path.name, early.name]),
                   "no temporary file left", list(shared_tmp_path.iterdir()))
        checks.add(quiet, "only rank 0 printed")


# -- AMG's near null space: block size and rigid-body modes --------------------------

ELASTICITY_N = 50


@pytest.fixture
def elasticity_files(comm, shared_tmp_path):
    """pyamg's 2-D linear elasticity (Q1, 50 x 50 cells, 5000 rows, two
    unknowns per node interlaced) as a Matrix Market file, its nodes'
    coordinates as .npy, .txt and .mtx, and pyamg's matrix and modes."""
    from pyamg.gallery import linear_elasticity
    A, B = linear_elasticity((ELASTICITY_N, ELASTICITY_N), format="csr")
    A = sp.csr_matrix(A)
    X = ELASTICITY_N + 1
    grid = np.mgrid[0:X + 1, 0:X + 1]
    pts = np.column_stack((grid[0].T.ravel(), grid[1].T.ravel())).astype(float)
    inside = np.zeros((X + 1, X + 1), bool)
    inside[1:-1, 1:-1] = True
    xy = pts[inside.ravel()]
    files = {"matrix": str(shared_tmp_path / "elastic.mtx")}
    io.write_matrix(files["matrix"], DistCSR.from_global(A, comm))
    for ext in ("npy", "txt", "mtx"):
        files[ext] = str(shared_tmp_path / ("coords." + ext))
    files["bad"] = str(shared_tmp_path / "coords-short.npy")
    if comm.rank == 0:
        np.save(files["npy"], xy)
        np.savetxt(files["txt"], xy)
        scipy.io.mmwrite(files["mtx"], xy)
        np.save(files["bad"], xy[:-1])
    comm.Barrier()
    return files, A, B


def _pyamg_iterations(A, B, b) -> int:
    """pyamg's CG + smoothed aggregation iterations to ||r|| <= 1e-8 ||b||."""
    ml = pyamg.smoothed_aggregation_solver(A, B=B, max_coarse=300)
    res = []
    ml.solve(b, tol=1e-8, accel="cg", residuals=res, maxiter=3000)
    return len(res) - 1


def test_near_nullspace_cuts_amg_iterations_on_elasticity(comm, capsys, elasticity_files):
    """AMG on 2-D elasticity: --block-size 2 and --coordinates (rigid-body modes,
    from any of the three file kinds) cut the CG iterations several times, to
    within 1.5 times pyamg's with the same modes."""
    files, A, B = elasticity_files
    base = ["solve", "--matrix", files["matrix"], "--pc", "amg"]
    runs = {"none": [], "block": ["--block-size", "2"]}
    runs.update({ext: ["--coordinates", files[ext]] for ext in ("npy", "txt", "mtx")})
    runs["both"] = ["--coordinates", files["npy"], "--block-size", "2"]
    got = {k: _run_status(comm, capsys, base + v) for k, v in runs.items()}
    its = {k: int(_number_after(out, "in ")) if code == 0 else -1
           for k, (code, out, _) in got.items()}
    Ad = DistCSR.from_global(A, comm)
    bd = gallery.rhs(Ad, "random", seed=0)
    b = bd.gather()
    # the command line measures strength by nodes, as the library asked so does
    _, lib = dmsolve.solve(Ad, bd, "cg", ("amg", {"B": gallery.block_constants(Ad.row_layout, 2),
                                                  "block_size": 2}), rtol=1e-8)
    ref = on_rank0(comm, lambda: {
        "none": _pyamg_iterations(A, None, b),
        "block": _pyamg_iterations(A, np.kron(np.ones((A.shape[0] // 2, 1)), np.eye(2)), b),
        "rbm": _pyamg_iterations(A, B, b)})
    with Checks(comm) as checks:
        checks.add(all(code == 0 for code, _, _ in got.values()), "every run converged", got)
        checks.add("near null space: 3 rigid-body modes" in got["npy"][1]
                   and "near null space: 2 constants (block size 2)" in got["block"][1],
                   "the summary names the near null space", got["npy"][1])
        checks.add(its["npy"] == its["txt"] == its["mtx"] == its["both"],
                   "the same modes from every file kind", its)
        checks.add(its["block"] == lib.iterations, "--block-size 2 is AMG's block_size=2",
                   (its, lib.iterations))
        checks.add(its["none"] >= 4 * its["npy"] and its["none"] >= 3 * its["block"],
                   "the near null space cuts the iterations", its)
        checks.add(its["npy"] <= 1.5 * ref["rbm"] and its["block"] <= 1.5 * ref["block"],
                   "within 1.5 times pyamg's with the same modes", (its, ref))
        checks.add(ref["none"] >= 4 * ref["rbm"], "pyamg sees the same effect", ref)


def test_near_nullspace_that_does_not_fit_the_matrix(comm, capsys, elasticity_files):
    """Coordinates or a block size that do not fit the matrix exit 2 naming both
    counts; an unreadable coordinates file is an error of the run (exit 1)."""
    files, _, _ = elasticity_files
    base = ["solve", "--matrix", files["matrix"], "--pc", "amg"]
    short = _run_status(comm, capsys, base + ["--coordinates", files["bad"]])
    three = _run_status(comm, capsys, base + ["--coordinates", files["npy"], "--block-size", "3"])
    divide = _run_status(comm, capsys, base + ["--block-size", "3"])
    missing = _run_status(comm, capsys, base + ["--coordinates", files["npy"] + ".npy"])
    with Checks(comm) as checks:
        checks.add(short[0] == 2 and "2499 nodes in 2-D have 4998 unknowns" in short[1]
                   and "the matrix has 5000 rows" in short[1], "node count", short)
        checks.add(three[0] == 2 and "are 2-D, so 2 unknowns per node; --block-size says 3"
                   in three[1], "block size against the dimension", three)
        checks.add(divide[0] == 2 and "--block-size 3 does not divide the matrix's 5000 rows"
                   in divide[1], "block size against the rows", divide)
        checks.add(missing[0] == 1 and "--coordinates" in missing[1], "unreadable file",
                   missing)
        checks.add(all(r[2] for r in (short, three, divide, missing)), "only rank 0 printed")


@pytest.mark.parametrize("nprocs", [1, 2])
def test_exit_status_and_output_of_the_process(comm, shared_tmp_path, elasticity_files, nprocs):
    """As a process under mpiexec: an unknown --pc exits 2 with one message; a
    solve with rigid-body modes and --output exits 0 and writes spsolve's x."""
    files, A, _ = elasticity_files
    bad = run_mpi_job(comm, nprocs, ["-m", "dmsolve", "solve", "--problem", "poisson2d",
                                     "--pc", "nosuchpc"], cwd=shared_tmp_path)
    x = shared_tmp_path / "x.npy"
    good = run_mpi_job(comm, nprocs, ["-m", "dmsolve", "solve", "--matrix", files["matrix"],
                                      "--pc", "amg", "--coordinates", files["npy"],
                                      "--rtol", "1e-10", "--output", x], cwd=shared_tmp_path)
    b = gallery.rhs(DistCSR.from_global(A, comm), "random", seed=0).gather()
    err = on_rank0(comm, lambda: float(np.abs(np.load(x) - spla.spsolve(A.tocsc(), b)).max()
                                       / np.abs(spla.spsolve(A.tocsc(), b)).max()))
    with Checks(comm) as checks:
        checks.add(bad[0] == 2 and bad[1].count("unknown preconditioner 'nosuchpc'") == 1,
                   "exit status 2, one message", bad)
        checks.add(good[0] == 0 and "3 rigid-body modes" in good[1], "solved", good)
        checks.add(err < 1e-7, "the written x is spsolve's", err)


def test_threads_option(comm, capsys):
    """--threads K runs the solve on K threads per rank, in as many
    iterations as one thread; a count below 1 is a usage error (exit 2)."""
    base = ["solve", "--problem", "poisson3d", "--n", "16", "--pc", "amg"]
    one = _run_status(comm, capsys, base)
    two = _run_status(comm, capsys, base + ["--threads", "2"])
    bad = _run_status(comm, capsys, base + ["--threads", "0"])
    dmsolve.set_num_threads(1)
    with Checks(comm) as checks:
        checks.add(one[0] == 0 and two[0] == 0, "both runs converge", (one, two))
        checks.add(_number_after(one[1], "in ") == _number_after(two[1], "in "),
                   "the same iterations at 2 threads", (one[1], two[1]))
        checks.add(bad[0] == 2 and "--threads" in bad[1], "--threads 0 is refused", bad)
