"""Checkpoint/restart of the Krylov solvers (dmsolve.checkpoint): resuming gives
the uninterrupted run's answer and iteration count, on the same or another
number of ranks; torn, corrupt and mismatched checkpoints are refused on every
rank."""

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from mpi4py import MPI

from dmsolve import DistCSR, DistVector, Layout, gallery, solve
from dmsolve import checkpoint as ck
from dmsolve.checkpoint import _format as ckfmt  # fault injection into the writes
from dmsolve.checkpoint import CheckpointError, Checkpointer
from dmsolve.cli import main
from dmsolve.krylov import METHODS, cg, register_method
from mpitest import (Checks, assert_allclose_collective, assert_collective,
                     assert_equal_collective, assert_raises_collective, child_env, on_rank0,
                     wait_idle)

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


def test_manifest_and_files_describe_the_state(comm, shared_tmp_path):
    A, b = _problem(comm)
    path = str(shared_tmp_path / "ck")
    seen = []
    solve(A, b, "cg", "jacobi", rtol=1e-10, maxiter=24, checkpoint=path, checkpoint_every=7,
          callback=lambda xk: seen.append(xk.gather()) if len(seen) < 21 else None)
    man = ck.read_manifest(path)
    lay = A.row_layout
    ok = (man["method"] == "cg" and man["iteration"] == 21 and man["global_size"] == N * N
          and man["ranges"] == lay.ranges.tolist() and len(man["files"]) == comm.size
          and sorted(man["vectors"]) == ["p", "r", "x"] and man["options"]["pc"] == "jacobi"
          and man["options"]["rtol"] == 1e-10 and man["options"]["maxiter"] == 24
          and len(man["residual_norms"]) == 22 and set(man["scalars"]) == {"rz"})
    assert_collective(comm, ok, json.dumps(man)[:400])
    # only the last generation stays on disk: one file per rank + the manifest
    names = sorted(os.listdir(path)) if comm.rank == 0 else None
    names = comm.bcast(names, root=0)
    assert_equal_collective(names, sorted([f["name"] for f in man["files"]] + [ck.MANIFEST]),
                            comm)
    # load() on this layout gives the saved iterate (the callback's 21st x)
    man2, vecs = ck.load(path, comm, lay)
    assert_allclose_collective(vecs["x"].gather(), seen[20], comm, rtol=0, atol=0)
    r = b.copy()
    r.axpy(-1.0, A @ vecs["x"])
    assert_allclose_collective(vecs["r"].gather(), r.gather(), comm, rtol=0, atol=1e-10)


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
            sys.path.insert(0, %r)
            from mpi4py import MPI
            from test_checkpoint import _resume_elsewhere
            out = _resume_elsewhere(MPI.COMM_WORLD, %r)
            if MPI.COMM_WORLD.rank == 0:
                with open(%r, "w") as f:
                    json.dump([[pc, x.tolist(), it, conv, rep]
                               for pc, (x, it, conv, rep) in out.items()], f)
        """ % (os.path.dirname(__file__), paths, str(result))))
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


# -- atomicity -------------------------------------------------------------------------

def test_failed_write_keeps_the_previous_checkpoint(comm, shared_tmp_path, monkeypatch):
    A, b = _problem(comm)
    path = str(shared_tmp_path / "ck")
    real = ckfmt.write_atomic

    def dies_writing_the_second_manifest(fpath, data):
        if fpath.endswith(ck.MANIFEST) and os.path.exists(fpath):
            with open(fpath + ".tmp", "wb") as f:   # torn temporary, never renamed
                f.write(data[: len(data) // 2])
            raise OSError("No space left on device")
        real(fpath, data)

    monkeypatch.setattr(ckfmt, "write_atomic", dies_writing_the_second_manifest)
    assert_raises_collective(comm, OSError, solve, A, b, "cg", rtol=1e-10,
                             checkpoint=path, checkpoint_every=10, match="manifest")
    monkeypatch.setattr(ckfmt, "write_atomic", real)
    man = ck.read_manifest(path)
    assert_equal_collective(man["iteration"], 10, comm)
    x, info = solve(A, b, "cg", rtol=1e-10, resume=path)
    x0, i0 = solve(A, b, "cg", rtol=1e-10)
    assert_equal_collective(info.iterations, i0.iterations, comm)
    assert_allclose_collective(x.local, x0.local, comm, rtol=0, atol=0)


def test_failed_first_write_leaves_no_valid_checkpoint(comm, shared_tmp_path, monkeypatch):
    A, b = _problem(comm)
    path = str(shared_tmp_path / "ck")
    real = ckfmt.write_atomic

    def fails_on_last_rank(fpath, data):
        if comm.rank == comm.size - 1 and not fpath.endswith(ck.MANIFEST):
            with open(fpath + ".tmp", "wb") as f:
                f.write(data[:10])
            raise OSError("I/O error")
        real(fpath, data)

    monkeypatch.setattr(ckfmt, "write_atomic", fails_on_last_rank)
    assert_raises_collective(comm, OSError, solve, A, b, "cg", checkpoint=path,
                             checkpoint_every=5, match="rank-%05d" % (comm.size - 1))
    monkeypatch.setattr(ckfmt, "write_atomic", real)
    assert_raises_collective(comm, CheckpointError, solve, A, b, "cg", resume=path,
                             match="manifest.json is missing")


# -- refusals --------------------------------------------------------------------------

@pytest.fixture
def written(comm, shared_tmp_path):
    A, b = _problem(comm)
    path = str(shared_tmp_path / "ck")
    solve(A, b, "cg", "jacobi", rtol=1e-10, maxiter=12, checkpoint=path, checkpoint_every=10)
    return A, b, path


def _edit_rank_file(path, how):
    man = ck.read_manifest(path)
    f = os.path.join(path, man["files"][-1]["name"])
    if how == "missing":
        os.remove(f)
    elif how == "truncated":
        with open(f, "r+b") as fh:
            fh.truncate(os.path.getsize(f) // 2)
    elif how == "flipped":
        with open(f, "r+b") as fh:
            fh.seek(os.path.getsize(f) // 2)
            c = fh.read(1)
            fh.seek(-1, 1)
            fh.write(bytes([c[0] ^ 0xFF]))


def _edit_manifest(path, how):
    mpath = os.path.join(path, ck.MANIFEST)
    with open(mpath) as fh:
        text = fh.read()
    if how == "truncated":
        text = text[: len(text) // 2]
    elif how == "edited":
        doc = json.loads(text)
        doc["manifest"]["iteration"] = 5
        text = json.dumps(doc)
    elif how == "resigned-edit":
        # an edit with a recomputed manifest checksum: the rank files disagree
        doc = json.loads(text)
        doc["manifest"]["iteration"] = 5
        doc["sha256"] = hashlib.sha256(ckfmt.canonical(doc["manifest"])).hexdigest()
        text = json.dumps(doc)
    elif how == "not-json-object":
        text = "[1, 2, 3]"
    with open(mpath, "w") as fh:
        fh.write(text)


EDITS = [
    ("rank-file-missing", _edit_rank_file, "missing", "is missing"),
    ("rank-file-truncated", _edit_rank_file, "truncated", "truncated"),
    ("rank-file-bad-checksum", _edit_rank_file, "flipped", "SHA-256"),
    ("manifest-truncated", _edit_manifest, "truncated", "not valid JSON"),
    ("manifest-edited", _edit_manifest, "edited", "fails its checksum"),
    ("manifest-edited-and-resigned", _edit_manifest, "resigned-edit",
     "does not belong to this manifest"),
    ("manifest-not-ours", _edit_manifest, "not-json-object", "not a dmsolve checkpoint"),
]


@pytest.mark.parametrize("edit, how, match", [e[1:] for e in EDITS], ids=[e[0] for e in EDITS])
def test_damaged_checkpoint_is_refused_on_every_rank(comm, written, edit, how, match):
    A, b, path = written
    on_rank0(comm, lambda: edit(path, how))
    assert_raises_collective(comm, CheckpointError, solve, A, b, "cg", "jacobi",
                             rtol=1e-10, resume=path, match=match)
    assert_raises_collective(comm, CheckpointError, ck.load, path, comm, match=match)


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
    _, _, path = written
    A, b = make(comm)
    assert_raises_collective(comm, CheckpointError, solve, A, b, method, pc, rtol=1e-10,
                             resume=path, match=match, **kw)


def test_minres_shift_must_match(comm, shared_tmp_path):
    A, b = _problem(comm)
    path = str(shared_tmp_path / "ck")
    solve(A, b, "minres", shift=0.1, maxiter=12, checkpoint=path, checkpoint_every=10)
    assert_raises_collective(comm, CheckpointError, solve, A, b, "minres", shift=0.2,
                             resume=path, match="shift")


def test_load_on_a_layout_of_another_size_is_refused(comm, written):
    _, _, path = written
    assert_raises_collective(comm, CheckpointError, ck.load, path, comm,
                             Layout.block(N * N + 1, comm), match="global size")


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
    A, b = _problem(comm)
    if kwargs.get("x0") == "set":
        kwargs = dict(kwargs, x0=b.copy())
    assert_raises_collective(comm, exc, solve, A, b, "cg", match=match, **kwargs)


def test_method_without_checkpoint_support_and_bad_checkpoint_object(comm, tmp_path):
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
    A, b = _problem(comm)
    path = str(shared_tmp_path / "file")
    on_rank0(comm, lambda: open(path, "w").close())   # a file where a directory should be
    assert_raises_collective(comm, OSError, solve, A, b, "cg", checkpoint=path,
                             checkpoint_every=5, match="checkpoint directory")


def test_no_checkpoint_no_report(comm):
    A, b = _problem(comm)
    _, info = solve(A, b, "cg")
    assert_collective(comm, "checkpoint" not in info.extra)


def test_writing_over_a_checkpoint_of_another_rank_count_cleans_it(comm, shared_tmp_path):
    A, b = _problem(comm)
    path = str(shared_tmp_path / "ck")
    # a stale rank file of an earlier run on 7 ranks
    on_rank0(comm, lambda: (os.makedirs(path),
                            open(os.path.join(path, "rank-00006-of-00007.ab12-10.npz"),
                                 "wb").close()))
    solve(A, b, "cg", maxiter=12, checkpoint=path, checkpoint_every=10)
    man = ck.read_manifest(path)
    names = comm.bcast(sorted(os.listdir(path)) if comm.rank == 0 else None, root=0)
    assert_equal_collective(names, sorted([f["name"] for f in man["files"]] + [ck.MANIFEST]),
                            comm)
    # resuming from a directory and checkpointing into it again works
    x, info = solve(A, b, "cg", rtol=1e-10, resume=path, checkpoint=path,
                    checkpoint_every=10)
    assert_collective(comm, info.converged and info.extra["checkpoint"]["writes"] >= 3,
                      str(info.extra))
    assert_collective(comm, ck.read_manifest(path)["iteration"] > 10)


def test_zero_rhs_with_checkpoint(comm, shared_tmp_path):
    A, _ = _problem(comm)
    path = str(shared_tmp_path / "ck")
    b = DistVector.zeros(A.row_layout)
    x, info = solve(A, b, "cg", checkpoint=path, checkpoint_every=1)
    assert_collective(comm, info.iterations == 0 and x.norm() == 0.0)


def test_cli_checkpoint_and_resume(comm, shared_tmp_path, capsys):
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


def test_killed_writer_always_leaves_a_loadable_checkpoint(comm, tmp_path):
    # a child process writes a checkpoint at every iteration and is killed
    # (SIGKILL) at arbitrary moments, mostly in the middle of writes; after
    # each kill the directory holds a complete, verified checkpoint whose
    # state is coherent (r is the residual of x)
    ok, why = True, ""
    if comm.rank == 0:
        path = str(tmp_path / "ck")
        script = tmp_path / "writer.py"
        script.write_text(textwrap.dedent("""
            import os, sys
            from mpi4py import MPI
            from dmsolve import gallery, solve
            A = gallery.poisson2d(120, MPI.COMM_WORLD)
            b = gallery.rhs(A, "random", seed=5)
            path = sys.argv[1]
            # continue from the last kill's checkpoint, writing into the same place
            resume = path if os.path.exists(os.path.join(path, "manifest.json")) else None
            solve(A, b, "cg", rtol=0.0, atol=0.0, divtol=None, maxiter=10**7,
                  checkpoint=path, checkpoint_every=1, resume=resume)
        """))
        env = child_env()
        rng = np.random.default_rng(0)
        A = gallery.poisson2d(120, MPI.COMM_SELF)
        b = gallery.rhs(A, "random", seed=5)
        seen = []
        for _ in range(2):
            proc = subprocess.Popen([sys.executable, str(script), path], env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            t0 = time.monotonic()
            last = seen[-1] if seen else 0
            while time.monotonic() - t0 < 60 and proc.poll() is None:
                try:                    # wait for this child's first own write
                    if ck.read_manifest(path)["iteration"] > last:
                        break
                except ck.CheckpointError:
                    pass
                time.sleep(0.01)
            time.sleep(rng.uniform(0.1, 0.6))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            try:
                man, vecs = ck.load(path, MPI.COMM_SELF)
                r = b.copy()
                r.axpy(-1.0, A @ vecs["x"])
                drift = float(np.linalg.norm(r.local - vecs["r"].local))
                seen.append(man["iteration"])
                if not drift <= 1e-8 * b.norm():
                    ok, why = False, "incoherent state, drift %g" % drift
            except Exception as e:  # noqa: BLE001
                ok, why = False, "after kill: %r" % e
                break
        if ok and not (len(seen) == 2 and 1 <= seen[0] < seen[1]):
            ok, why = False, "iterations %s" % seen
    wait_idle(comm)
    assert_collective(comm, ok, why)
