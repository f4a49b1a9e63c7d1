"""The checkpoint format (dmsolve.checkpoint): the manifest and rank files
describe the state, writes are atomic (a failed or killed writer leaves the
previous checkpoint loadable), and damaged, mismatched or re-signed malformed
checkpoints are refused on every rank."""

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
from mpi4py import MPI

from bad_inputs import check_bad_input
from full_disk import assert_left_as_before, full_disk_open, snapshot
from dmsolve import Layout, checkpoint as ck, gallery, solve
from dmsolve.checkpoint import CheckpointError, _format as ckfmt
from mpitest import (assert_allclose_collective, assert_collective, assert_equal_collective,
                     assert_raises_collective, child_env, on_rank0, wait_idle)

N = 14          # poisson2d N x N: 196 unknowns, ~40 CG iterations to 1e-10


def _problem(comm, method="cg", n=N):
    if method in ("gmres", "fgmres", "bicgstab"):
        A = gallery.convection_diffusion(n, comm)
    else:
        A = gallery.poisson2d(n, comm)
    return A, gallery.rhs(A, "random", seed=3)


def test_manifest_and_files_describe_the_state(comm, shared_tmp_path):
    """The manifest and the rank files hold the solve's state: method, options, layout,
    iteration and vectors, with checksums."""
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


# -- atomicity -------------------------------------------------------------------------

def test_failed_write_keeps_the_previous_checkpoint(comm, shared_tmp_path, monkeypatch):
    """A write that fails on one rank leaves the previous checkpoint loadable, on every rank."""
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
    """A first write that fails leaves nothing that loads as a checkpoint."""
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


@pytest.mark.parametrize("what", ["rank-file-on-last-rank", "manifest"])
def test_full_disk_leaves_the_previous_checkpoint_and_no_temporary(comm, shared_tmp_path,
                                                                    monkeypatch, what):
    """A write that fills the disk part-way (ENOSPC in a rank file on the last rank, or in
    the manifest on rank 0) raises OSError on every rank, leaves the previous checkpoint
    byte for byte and no temporary beside it; a resume from it solves as before."""
    A, b = _problem(comm)
    path = str(shared_tmp_path / "ck")
    solve(A, b, "cg", rtol=1e-10, maxiter=12, checkpoint=path, checkpoint_every=10)
    before = snapshot(comm, path)
    assert_collective(comm, len(before) == comm.size + 1, sorted(before))

    def fills(fpath):
        if what == "manifest":
            return os.path.basename(fpath) == ck.MANIFEST + ".tmp"
        return fpath.endswith(".npz.tmp") and comm.rank == comm.size - 1

    monkeypatch.setattr(ckfmt, "open", full_disk_open(fills), raising=False)
    assert_raises_collective(comm, OSError, solve, A, b, "cg", rtol=1e-10, resume=path,
                             checkpoint=path, checkpoint_every=10)
    monkeypatch.undo()
    assert_left_as_before(comm, path, before)
    man = ck.read_manifest(path)
    assert_equal_collective(man["iteration"], 10, comm)
    x, info = solve(A, b, "cg", rtol=1e-10, resume=path)
    x0, i0 = solve(A, b, "cg", rtol=1e-10)
    assert_equal_collective(info.iterations, i0.iterations, comm)
    assert_allclose_collective(x.local, x0.local, comm, rtol=0, atol=0)


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
    """Each kind of damage (missing, truncated or corrupt files, a bad manifest) is refused on
    every rank with a message naming it."""
    A, b, path = written
    on_rank0(comm, lambda: edit(path, how))
    assert_raises_collective(comm, CheckpointError, solve, A, b, "cg", "jacobi",
                             rtol=1e-10, resume=path, match=match)
    assert_raises_collective(comm, CheckpointError, ck.load, path, comm, match=match)


def test_load_on_a_layout_of_another_size_is_refused(comm, written):
    """Loading onto a layout of another global size is refused."""
    _, _, path = written
    assert_raises_collective(comm, CheckpointError, ck.load, path, comm,
                             Layout.block(N * N + 1, comm), match="global size")


def test_writing_over_a_checkpoint_of_another_rank_count_cleans_it(comm, shared_tmp_path):
    """A checkpoint written over one of another rank count leaves none of the old rank files."""
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


def test_killed_writer_always_leaves_a_loadable_checkpoint(comm, tmp_path):
    """A writer killed at any moment, mostly mid-write, always leaves a checkpoint that loads."""
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


COMM = MPI.COMM_WORLD


def _still_in_step():
    """A collective after a failed read pairs with the same call on every rank."""
    got = COMM.allgather(("after", COMM.rank))
    assert_collective(COMM, got == [("after", r) for r in range(COMM.size)], str(got))


@pytest.fixture
def small_checkpoint(shared_tmp_path):
    A = gallery.poisson2d(12, COMM)
    b = gallery.rhs(A, "random", seed=3)
    path = str(shared_tmp_path / "ck")
    solve(A, b, "cg", "jacobi", rtol=1e-10, maxiter=12, checkpoint=path, checkpoint_every=10)
    return A, b, path


def _resign(path, edit):
    """Apply ``edit(manifest)`` and write the manifest back with a correct checksum."""
    import hashlib
    import json
    mpath = os.path.join(path, ck.MANIFEST)
    with open(mpath) as fh:
        doc = json.load(fh)
    edit(doc["manifest"])
    doc["sha256"] = hashlib.sha256(ckfmt.canonical(doc["manifest"])).hexdigest()
    with open(mpath, "w") as fh:
        json.dump(doc, fh)


def _pop(key, within=None):
    def edit(m):
        (m if within is None else m[within]).pop(key)
    return edit


def _set(key, value, within=None):
    def edit(m):
        target = m if within is None else m[within]
        if isinstance(target, list):
            target = target[0]
        target[key] = value
    return edit


RESIGNED = [
    ("no-options", _pop("options"), "has no 'options'"),
    ("no-ranges", _pop("ranges"), "has no 'ranges'"),
    ("no-fingerprint", _pop("fingerprint"), "has no 'fingerprint'"),
    ("no-norm-type", _pop("norm_type", "options"), r"options has no 'norm_type'"),
    ("iteration-a-string", _set("iteration", "10"), r"\['iteration'\] must be a non-negative"),
    ("iteration-negative", _set("iteration", -3), r"\['iteration'\] must be a non-negative"),
    ("global-size-float", _set("global_size", 144.0), r"\['global_size'\] must be"),
    ("fingerprint-short", _set("fingerprint", [1.0, 2.0, 3.0]), "a list of 4 numbers"),
    ("ranges-wrong-end", _set("ranges", [0, 7]), "ranges must rise from 0 to global_size"),
    ("files-empty", _set("files", []), r"\['files'\] must be a list of len\(ranges\) - 1"),
    ("file-name-escapes", _set("name", "../../../etc/passwd", "files"), "a rank file name"),
    ("file-bytes-small", _set("bytes", 10, "files"), r"\['bytes'\] must be an integer >="),
    ("file-sha-bad", _set("sha256", 7, "files"), "64 hexadecimal digits"),
    ("file-rank-wrong", _set("rank", 5, "files"), r"files\[0\]\['rank'\] must be 0"),
    ("vectors-without-x", _set("vectors", ["p", "r"]), "holding 'x'"),
    ("scalars-a-list", _set("scalars", [1.0]), "a dict of name -> number"),
    ("norms-empty", _set("residual_norms", []), "a non-empty list"),
    ("bnorm-a-string", _set("bnorm", "big"), r"\['bnorm'\] must be a number"),
    ("method-options-a-list", _set("method_options", [], "options"), "must be a dict"),
    ("manifest-a-list", None, "not a dmsolve checkpoint manifest"),
]


@pytest.mark.parametrize("edit, match", [r[1:] for r in RESIGNED], ids=[r[0] for r in RESIGNED])
def test_resigned_malformed_manifest_is_a_checkpoint_error(small_checkpoint, edit, match):
    """A malformed manifest with a valid checksum is a CheckpointError naming what is wrong, on
    every rank."""
    A, b, path = small_checkpoint
    if edit is None:
        def write_list():
            import hashlib
            import json
            man = [1, 2]
            doc = {"manifest": man, "sha256": hashlib.sha256(ckfmt.canonical(man)).hexdigest()}
            with open(os.path.join(path, ck.MANIFEST), "w") as fh:
                json.dump(doc, fh)
        on_rank0(COMM, write_list)
    else:
        on_rank0(COMM, _resign, path, edit)
    assert_raises_collective(COMM, CheckpointError, solve, A, b, "cg", "jacobi", rtol=1e-10,
                             resume=path, match=match)
    assert_raises_collective(COMM, CheckpointError, ck.load, path, COMM, match=match)
    assert_raises_collective(COMM, CheckpointError, ck.read_manifest, path, match=match)
    _still_in_step()


def test_resigned_manifest_without_a_scalar(small_checkpoint):
    """A re-signed manifest missing a scalar is a CheckpointError on every rank."""
    A, b, path = small_checkpoint
    on_rank0(COMM, _resign, path, _set("scalars", {}))
    assert_raises_collective(COMM, CheckpointError, solve, A, b, "cg", "jacobi", rtol=1e-10,
                             resume=path, match="has no scalar 'rz'")
    _still_in_step()


def test_deeply_nested_manifest_json(small_checkpoint):
    """A deeply nested manifest is a CheckpointError, not a RecursionError."""
    A, b, path = small_checkpoint
    on_rank0(COMM, lambda: open(os.path.join(path, ck.MANIFEST), "w").write("[" * 200000))
    assert_raises_collective(COMM, CheckpointError, solve, A, b, "cg", "jacobi", rtol=1e-10,
                             resume=path, match="not valid JSON")
    assert_raises_collective(COMM, CheckpointError, ck.load, path, COMM, match="not valid JSON")
    _still_in_step()


def test_rank_file_whose_meta_is_not_a_record(small_checkpoint):
    """A rank file whose meta entry is not a record is a CheckpointError on every rank."""
    A, b, path = small_checkpoint

    def forge():
        # a rank file with the right vectors and a meta that is a JSON list,
        # listed in a re-signed manifest with its true size and checksum
        import hashlib
        from io import BytesIO
        man = ck.read_manifest(path)
        entry = man["files"][0]
        with np.load(os.path.join(path, entry["name"])) as z:
            arrays = {k: z[k] for k in z.files if k != "meta"}
        buf = BytesIO()
        np.savez(buf, meta=np.array("[1, 2]"), **arrays)
        data = buf.getvalue()
        with open(os.path.join(path, entry["name"]), "wb") as fh:
            fh.write(data)
        _resign(path, lambda m: m["files"][0].update(
            bytes=len(data), sha256=hashlib.sha256(data).hexdigest()))
    on_rank0(COMM, forge)
    assert_raises_collective(COMM, CheckpointError, ck.load, path, COMM, match="no meta record")
    assert_raises_collective(COMM, CheckpointError, solve, A, b, "cg", "jacobi", rtol=1e-10,
                             resume=path, match="no meta record")


# -- bad input: the same exception on every rank -------------------------------------------

BAD_INPUTS = [
    ("checkpoint-load-missing", ck.CheckpointError, "manifest.json is missing",
     lambda e: ck.load(os.path.join(e.dir, "no-checkpoint"), e.comm)),
    ("solve-resume-from-a-plain-file", ck.CheckpointError, "Not a directory",
     lambda e: solve(e.A, e.b, resume=e.plainfile)),
]


@pytest.mark.parametrize("exc, match, call", [c[1:] for c in BAD_INPUTS],
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_the_same_exception_on_every_rank(bad_input_env, request, exc, match,
                                                           call):
    """Each case of BAD_INPUTS raises the same exception type, with a message
    that matches, on every rank (or works, at one rank, where a COMM_SELF
    operand is valid)."""
    check_bad_input(bad_input_env, request, exc, match, call)
