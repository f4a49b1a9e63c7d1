"""Checkpoint/restart of the Krylov solvers (dmsolve.checkpoint): resuming gives
the uninterrupted run's answer and iteration count, on the same or another
number of ranks; checkpoints of another problem, bad options and solves that
cannot be checkpointed (complex systems, methods without support) are refused
on every rank; a failed iteration is never written."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from mpi4py import MPI

import dmsolve
from bad_inputs import check_bad_input
from dmsolve import DistCSR, DistVector, Layout, checkpoint as ck, gallery, krylov, solve
from dmsolve.checkpoint import CheckpointError, Checkpointer, read_manifest
from dmsolve.krylov import METHODS, cg, register_method
from krylov_cases import complex_rhs, hermitian
from mpitest import (ROOT, assert_allclose_collective, assert_collective, assert_equal_collective,
                     assert_raises_collective, child_env, on_rank0, wait_idle)


def test_checkpoint_of_a_complex_solve_is_refused(comm, shared_tmp_path):
    """A checkpoint of a complex solve is refused at the door, on every rank."""
    A = DistCSR.from_global(hermitian(8), comm)
    b = DistVector.from_global(complex_rhs(64), A.row_layout)
    cp = ck.Checkpointer(str(shared_tmp_path / "cx"), every=2)
    assert_raises_collective(comm, TypeError, krylov.cg, A, b, checkpoint=cp,
                             match="checkpoints hold real systems only")
    assert_raises_collective(comm, TypeError, dmsolve.solve, A, b, "gmres",
                             checkpoint=str(shared_tmp_path / "cx2"), checkpoint_every=2,
                             match="checkpoints hold real systems only")


N = 14          # poisson2d N x N: 196 unknowns, ~40 CG iterations to 1e-10


def _problem(comm, method="cg", n=N):
    if method in ("gmres", "fgmres", "bicgstab"):
        A = gallery.convection_diffusion(n, comm)
    else:
        A = gallery.poisson2d(n, comm)
    return A, gallery.rhs(A, "random", seed=3)


def _reference(A, b, shift=0.0):
    S = A.to_scipy().tocsc()
    return spla.spsolve(S - shift * sp.identity(S.shape[0], format="csc"), b.gather())


METHOD_CASES = [
    ("cg", None, {}), ("cg", "jacobi", {}), ("pipecg", None, {}), ("pipecg", "jacobi", {}),
    ("gmres", None, {"restart": 8}), ("gmres", "jacobi", {"restart": 8, "side": "right"}),
    ("fgmres", "jacobi", {"restart": 8}), ("bicgstab", None, {}), ("bicgstab", "jacobi", {}),
    ("minres", None, {}), ("minres", "jacobi", {"shift": 0.05}),
]


@pytest.mark.parametrize("method, pc, kw", METHOD_CASES,
                         ids=["%s-%s%s" % (m, p or "none", "-" + "-".join(k) if k else "")
                              for m, p, k in METHOD_CASES])
def test_resume_same_ranks_is_the_uninterrupted_run(comm, shared_tmp_path, method, pc, kw):
    """Resuming on the same ranks gives the uninterrupted run's x and iteration count, for
    every method and preconditioner."""
    A, b = _problem(comm, method)
    path = str(shared_tmp_path / "ck")
    x0, i0 = solve(A, b, method, pc, rtol=1e-10, **kw)
    assert_collective(comm, i0.converged and i0.iterations > 20, str(i0))
    stop = i0.iterations // 2 + 3
    _, i1 = solve(A, b, method, pc, rtol=1e-10, maxiter=stop, checkpoint=path,
                  checkpoint_every=5, **kw)
    rep = i1.extra["checkpoint"]
    assert_collective(comm, not i1.converged and rep["writes"] >= 2, str(rep))
    man = ck.read_manifest(path)
    assert_collective(comm, stop - 12 <= man["iteration"] <= stop, str(man["iteration"]))
    x2, i2 = solve(A, b, method, pc, rtol=1e-10, resume=path, **kw)
    rep = i2.extra["checkpoint"]
    assert_collective(comm, rep["resumed_from"] == man["iteration"] and not rep["restarted"],
                      str(rep))
    # continuing from the full state on the same layout is the same computation
    assert_equal_collective(i2.iterations, i0.iterations, comm)
    assert_equal_collective(i2.residual_norms, i0.residual_norms, comm)
    assert_allclose_collective(x2.local, x0.local, comm, rtol=0, atol=0)
    xref = _reference(A, b, kw.get("shift", 0.0))
    assert_allclose_collective(x2.gather(), xref, comm, rtol=0,
                               atol=1e-6 * np.abs(xref).max())


def test_resume_after_a_crash_mid_solve(comm, shared_tmp_path):
    """A solve that fails mid-way resumes from its last checkpoint and ends like an
    uninterrupted one."""
    # a failure at iteration 33 (the job "dies"); the checkpoint of
    # iteration 30 survives and the resumed solve ends like an uninterrupted one
    A, b = _problem(comm)
    path = str(shared_tmp_path / "ck")
    x0, i0 = solve(A, b, "cg", rtol=1e-10)
    calls = [0]

    def crash(xk):
        calls[0] += 1
        if calls[0] == 33:
            raise RuntimeError("node failure")

    assert_raises_collective(comm, RuntimeError, solve, A, b, "cg", rtol=1e-10,
                             callback=crash, checkpoint=path, checkpoint_every=10)
    man = ck.read_manifest(path)
    assert_equal_collective(man["iteration"], 30, comm)
    assert_equal_collective(len(man["residual_norms"]), 31, comm)
    x2, i2 = solve(A, b, "cg", rtol=1e-10, resume=path)
    assert_equal_collective(i2.iterations, i0.iterations, comm)
    assert_allclose_collective(x2.local, x0.local, comm, rtol=0, atol=0)


# -- another number of ranks -----------------------------------------------------------

def _resume_elsewhere(sub, paths, n=N):
    """Resume the (pc, path) checkpoints on communicator ``sub``; return, per
    pc, (x gathered, iterations, converged, checkpoint report)."""
    A, b = _problem(sub, n=n)
    out = {}
    for pc, path in paths:
        x, info = solve(A, b, "cg", pc, rtol=1e-10, resume=path)
        out[pc] = (x.gather(), info.iterations, info.converged, info.extra["checkpoint"])
    return out


def test_resume_on_another_rank_count(comm, shared_tmp_path):
    """A checkpoint resumes on another number of ranks: CG without a preconditioner goes on as
    if uninterrupted, a block preconditioner restarts from x."""
    A, b = _problem(comm)
    paths, full = [], {}
    for pc in (None, "bjacobi"):
        path = str(shared_tmp_path / ("ck-%s" % pc))
        full[pc] = solve(A, b, "cg", pc, rtol=1e-10)[1].iterations
        solve(A, b, "cg", pc, rtol=1e-10, maxiter=30, checkpoint=path, checkpoint_every=10)
        paths.append((pc, path))
    xref = _reference(A, b)
    tol = 1e-7 * np.abs(xref).max()
    if comm.size == 1:
        # resume on 2 ranks in a child MPI job
        script = shared_tmp_path / "resume.py"
        result = shared_tmp_path / "result.json"
        script.write_text(textwrap.dedent("""
            import sys, json
            sys.path[:0] = %r
            from mpi4py import MPI
            from test_policy import _resume_elsewhere
            out = _resume_elsewhere(MPI.COMM_WORLD, %r)
            if MPI.COMM_WORLD.rank == 0:
                with open(%r, "w") as f:
                    json.dump([[pc, x.tolist(), it, conv, rep]
                               for pc, (x, it, conv, rep) in out.items()], f)
        """ % ([os.path.dirname(__file__), str(ROOT / "tests")], paths, str(result))))
        env = child_env()
        mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
        proc = subprocess.run([mpiexec, "-n", "2", sys.executable, str(script)],
                              capture_output=True, text=True, timeout=120, env=env)
        assert proc.returncode == 0, proc.stderr
        got = {pc: (np.array(x), it, conv, rep)
               for pc, x, it, conv, rep in json.loads(result.read_text())}
    else:
        # resume on size-1 ranks and on 1 rank at the same time
        sub = comm.Split(0 if comm.rank < comm.size - 1 else 1, comm.rank)
        try:
            got = _resume_elsewhere(sub, paths)
        finally:
            sub.Free()
    wait_idle(comm)
    for pc, (x, it, conv, rep) in got.items():
        assert_collective(comm, conv and rep["resumed_from"] == 20, str(rep))
        assert_allclose_collective(x, xref, comm, rtol=0, atol=tol)
        if pc is None:
            # the full state is redistributed: CG goes on as if uninterrupted
            # (the reductions round differently, so allow one iteration)
            assert_collective(comm, not rep["restarted"] and abs(it - full[pc]) <= 1,
                              "%s, %d vs %d" % (rep, it, full[pc]))
        else:
            # a block preconditioner depends on the partition: restart from x
            assert_collective(comm, rep["restarted"] and it > 20, str(rep))


def test_resume_on_a_different_layout_same_ranks(comm, shared_tmp_path):
    """A checkpoint resumes on a different layout of the same ranks."""
    # written on a nonzero-balanced layout, resumed on the block layout
    A, b = _problem(comm)
    path = str(shared_tmp_path / "ck")
    n = A.shape[0]
    w = np.ones(n)
    w[: n // 3] = 5.0
    lay = Layout.from_weights(w, comm)
    A2 = DistCSR.from_global(A.to_scipy(), comm, layout=lay) if comm.size > 1 else A
    b2 = gallery.rhs(A2, "random", seed=3)
    _, i0 = solve(A, b, "cg", rtol=1e-10)
    solve(A2, b2, "cg", rtol=1e-10, maxiter=25, checkpoint=path, checkpoint_every=20)
    x, info = solve(A, b, "cg", rtol=1e-10, resume=path)
    xref = _reference(A, b)
    assert_allclose_collective(x.gather(), xref, comm, rtol=0, atol=1e-7 * np.abs(xref).max())
    assert_collective(comm, abs(info.iterations - i0.iterations) <= 1, str(info))


# -- refusals --------------------------------------------------------------------------

@pytest.fixture
def written(comm, shared_tmp_path):
    A, b = _problem(comm)
    path = str(shared_tmp_path / "ck")
    solve(A, b, "cg", "jacobi", rtol=1e-10, maxiter=12, checkpoint=path, checkpoint_every=10)
    return A, b, path


MISMATCHES = [
    ("wrong-size", lambda c: _problem(c, n=N + 1), "cg", "jacobi", {}, "global size"),
    ("wrong-matrix", lambda c: (lambda A: (A, gallery.rhs(A, "random", seed=3)))(
        gallery.anisotropic_diffusion(N, c)), "cg", "jacobi", {}, "matrix differs"),
    ("wrong-rhs", lambda c: (lambda A: (A, gallery.rhs(A, "random", seed=4)))(
        gallery.poisson2d(N, c)), "cg", "jacobi", {}, "right-hand side"),
    ("wrong-method", _problem, "pipecg", "jacobi", {}, "method 'cg'"),
    ("wrong-pc", _problem, "cg", None, {}, "preconditioner 'jacobi'"),
    ("wrong-norm", _problem, "cg", "jacobi", {"norm_type": "preconditioned"}, "norm_type"),
]


@pytest.mark.parametrize("make, method, pc, kw, match", [m[1:] for m in MISMATCHES],
                         ids=[m[0] for m in MISMATCHES])
def test_mismatched_checkpoint_is_refused(comm, written, make, method, pc, kw, match):
    """A checkpoint of another problem (size, method, preconditioner, options) is refused on
    every rank."""
    _, _, path = written
    A, b = make(comm)
    assert_raises_collective(comm, CheckpointError, solve, A, b, method, pc, rtol=1e-10,
                             resume=path, match=match, **kw)


def test_minres_shift_must_match(comm, shared_tmp_path):
    """MINRES resumes only with the shift it was written with."""
    A, b = _problem(comm)
    path = str(shared_tmp_path / "ck")
    solve(A, b, "minres", shift=0.1, maxiter=12, checkpoint=path, checkpoint_every=10)
    assert_raises_collective(comm, CheckpointError, solve, A, b, "minres", shift=0.2,
                             resume=path, match="shift")


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"checkpoint": 3, "checkpoint_every": 2}, TypeError, "path"),
    ({"checkpoint": "", "checkpoint_every": 2}, ValueError, "non-empty"),
    ({"checkpoint": "X"}, ValueError, "checkpoint_every is required"),
    ({"checkpoint": "X", "checkpoint_every": 0}, ValueError, "positive"),
    ({"checkpoint": "X", "checkpoint_every": True}, TypeError, "positive integer"),
    ({"checkpoint": "X", "checkpoint_every": 2.5}, TypeError, "positive integer"),
    ({"checkpoint_every": 2}, ValueError, "needs checkpoint="),
    ({"resume": "X", "x0": "set"}, ValueError, "x0 or resume"),
], ids=["path-type", "path-empty", "every-missing", "every-zero", "every-bool",
        "every-float", "every-alone", "x0-and-resume"])
def test_bad_checkpoint_options(comm, kwargs, exc, match):
    """Bad checkpoint options are refused on every rank."""
    A, b = _problem(comm)
    if kwargs.get("x0") == "set":
        kwargs = dict(kwargs, x0=b.copy())
    assert_raises_collective(comm, exc, solve, A, b, "cg", match=match, **kwargs)


def test_method_without_checkpoint_support_and_bad_checkpoint_object(comm, tmp_path):
    """A method without checkpoint support, or a checkpoint that is not a path, is refused."""
    A, b = _problem(comm)
    register_method("plain-test-method", lambda A, b, x0=None, **kw: cg(A, b, x0, **kw))
    try:
        assert_raises_collective(comm, ValueError, solve, A, b, "plain-test-method",
                                 checkpoint="X", checkpoint_every=1, match="does not support")
    finally:
        METHODS.unregister("plain-test-method")
    assert_raises_collective(comm, TypeError, cg, A, b, checkpoint="dir",
                             match="Checkpointer")
    assert_raises_collective(comm, ValueError, Checkpointer, match="needs a path")


def test_unwritable_checkpoint_directory(comm, shared_tmp_path):
    """An unwritable checkpoint directory is refused before the solve."""
    A, b = _problem(comm)
    path = str(shared_tmp_path / "file")
    on_rank0(comm, lambda: open(path, "w").close())   # a file where a directory should be
    assert_raises_collective(comm, OSError, solve, A, b, "cg", checkpoint=path,
                             checkpoint_every=5, match="checkpoint directory")


def test_no_checkpoint_no_report(comm):
    """A solve without a checkpoint reports no checkpoint."""
    A, b = _problem(comm)
    _, info = solve(A, b, "cg")
    assert_collective(comm, "checkpoint" not in info.extra)


def test_zero_rhs_with_checkpoint(comm, shared_tmp_path):
    """A zero right-hand side with a checkpoint ends at once, with x = 0."""
    A, _ = _problem(comm)
    path = str(shared_tmp_path / "ck")
    b = DistVector.zeros(A.row_layout)
    x, info = solve(A, b, "cg", checkpoint=path, checkpoint_every=1)
    assert_collective(comm, info.iterations == 0 and x.norm() == 0.0)


COMM = MPI.COMM_WORLD
LAST = COMM.size - 1


class GridError(Exception):
    """A user's own exception type, with state of its own."""

    def __init__(self, message, cell=None):
        super().__init__(message)
        self.cell = cell


def small_poisson(n=12):
    A = gallery.poisson2d(n, COMM)
    return A, gallery.rhs(A, "random")


@pytest.mark.timeout(60)
def test_no_checkpoint_of_a_failed_iteration(shared_tmp_path):
    """An iteration whose callback failed is not written: the last checkpoint is the iteration
    before."""
    # the callback fails at iteration 3, where a checkpoint is due: the
    # error is agreed before the write, so the last checkpoint is iteration 2
    A, b = small_poisson()
    calls = [0]

    def cb(xk):
        calls[0] += 1
        if COMM.rank == LAST and calls[0] == 3:
            raise GridError("callback gave up")
    path = str(shared_tmp_path / "ck")
    assert_raises_collective(COMM, GridError, dmsolve.solve, A, b, "cg", rtol=1e-12,
                             callback=cb, checkpoint=path, checkpoint_every=1)
    man = read_manifest(path) if COMM.rank == 0 else None
    iteration = COMM.bcast(None if man is None else man["iteration"], root=0)
    assert_collective(COMM, iteration == 2, "last checkpoint at iteration %r" % iteration)


# -- bad input: the same exception on every rank -------------------------------------------

BAD_INPUTS = [
    ("solve-checkpoint-into-a-plain-file", OSError, "checkpoint directory",
     lambda e: solve(e.A, e.b, checkpoint=e.plainfile, checkpoint_every=2)),
    ("solve-checkpoint-every-zero", ValueError, "positive",
     lambda e: solve(e.A, e.b, checkpoint=os.path.join(e.dir, "ck"), checkpoint_every=0)),
]


@pytest.mark.parametrize("exc, match, call", [c[1:] for c in BAD_INPUTS],
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_the_same_exception_on_every_rank(bad_input_env, request, exc, match,
                                                           call):
    """Each case of BAD_INPUTS raises the same exception type, with a message
    that matches, on every rank (or works, at one rank, where a COMM_SELF
    operand is valid)."""
    check_bad_input(bad_input_env, request, exc, match, call)
