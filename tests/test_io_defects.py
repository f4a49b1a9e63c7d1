"""Matrix Market I/O under damage (issue 14): every failure of a reading or
writing rank is raised on every rank, with a message that names the file and
the line; valid compressed files of every kind read like scipy reads them."""

import bz2
import gzip
import lzma
import os

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from mpi4py import MPI

from dmsolve import DistVector, Layout, gallery, io
from mpitest import (Checks, assert_collective, assert_equal_collective,
                     assert_raises_collective, on_rank0)

COMM = MPI.COMM_WORLD
COMPRESS = {"gz": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}


def _matrix(n=40, seed=0):
    return sp.random(n, n, density=0.15, random_state=seed, format="csr")


def _mm_bytes(M, **opts) -> bytes:
    """The Matrix Market text scipy writes for ``M``."""
    from io import BytesIO
    buf = BytesIO()
    scipy.io.mmwrite(buf, M, **opts)
    return buf.getvalue()


def _put(path, data: bytes) -> str:
    on_rank0(COMM, lambda: open(path, "wb").write(data))
    return str(path)


def _still_in_step():
    """A collective after a failed read pairs with the same call on every rank."""
    got = COMM.allgather(("after", COMM.rank))
    assert_collective(COMM, got == [("after", r) for r in range(COMM.size)], str(got))


# -- compressed files ---------------------------------------------------------------------

def test_every_compressed_kind_reads_like_scipy(shared_tmp_path):
    S = _matrix()
    D = np.random.default_rng(1).standard_normal((9, 4))
    for kind, pack in COMPRESS.items():
        for name, mat, opts in (("general", S, {}), ("sym", S + S.T, {"symmetry": "symmetric"}),
                                ("dense", D, {})):
            raw = _mm_bytes(mat, **opts)
            path = _put(shared_tmp_path / ("%s.mtx.%s" % (name, kind)), pack(raw))
            A = io.read_matrix(path, COMM).to_scipy().toarray()
            ref = np.asarray(sp.csr_matrix(scipy.io.mmread(
                _put(shared_tmp_path / ("%s.mtx" % name), raw))).toarray())
            assert_equal_collective(A, ref, err_msg="%s %s" % (name, kind))
        info = io.mminfo(path, COMM)
        assert_collective(COMM, info["shape"] == (9, 4) and info["format"] == "array", str(info))
    # a vector in an xz file
    x = np.arange(7.0) - 2.5
    path = _put(shared_tmp_path / "x.mtx.xz", lzma.compress(_mm_bytes(x.reshape(-1, 1))))
    assert_equal_collective(io.read_vector(path, COMM).gather(), x)


def _damaged(raw: bytes, kind: str, how: str) -> bytes:
    data = COMPRESS[kind](raw)
    if how == "truncated":
        return data[: len(data) // 2]
    if how == "corrupt":
        b = bytearray(data)
        for i in range(len(b) // 3, len(b) // 3 + 16):
            b[i] ^= 0x5A
        return bytes(b)
    return raw          # "not-compressed": plain text under a compressed name


DAMAGE = [(k, h) for k in COMPRESS for h in ("truncated", "corrupt", "not-compressed")]


@pytest.mark.parametrize("kind, how", DAMAGE, ids=["%s-%s" % d for d in DAMAGE])
def test_damaged_compressed_file_fails_on_every_rank(shared_tmp_path, kind, how):
    raw = _mm_bytes(_matrix(60, seed=2))
    path = _put(shared_tmp_path / ("m.mtx." + kind), _damaged(raw, kind, how))
    e = assert_raises_collective(COMM, ValueError, io.read_matrix, path, COMM,
                                 match="corrupt or truncated %s data" % kind)
    assert_collective(COMM, path in str(e), str(e))
    _still_in_step()
    assert_raises_collective(COMM, ValueError, io.read_vector, path, COMM,
                             match="corrupt or truncated|not a vector")
    _still_in_step()


# -- plain files: damaged lines, named by file line -------------------------------------------

def _lines_file(tmp, name, edit, n=40, seed=3, field="real", symmetry="general"):
    """A scipy-written coordinate file with line ``k`` (1-based) replaced by
    ``text`` for each ``k: text`` in ``edit``; returns its path."""
    M = _matrix(n, seed)
    if field == "integer":
        M.data = np.round(M.data * 100) + 1
        M = M.astype(np.int64)
    if symmetry != "general":
        M = sp.tril(M + M.T, -1 if symmetry == "skew-symmetric" else 0).tocsr()
        if symmetry == "skew-symmetric":
            M = (M - M.T).tocsr()
    lines = _mm_bytes(M, field=field, symmetry=symmetry).split(b"\n")
    for k, text in edit.items():
        lines[k - 1] = text
    return _put(tmp / name, b"\n".join(lines))


def _last_line(tmp):
    """The line number of the last entry line of the default file."""
    return len(_mm_bytes(_matrix(40, 3)).rstrip(b"\n").split(b"\n"))


MESSAGES = [
    # name, edit (line -> text; -1 is the last entry line), expected message
    ("token", {-1: b"5 3 abc"}, r"m\.mtx line {L}: malformed entry '5 3 abc': 'abc' is not a number"),
    ("too-few", {-1: b"5 3"}, r"m\.mtx line {L}: malformed entry '5 3': a coordinate real line "
                              r"holds 3 numbers \(row, column, value\), got 2"),
    ("too-many", {-1: b"5 3 1.0 2.0"}, r"m\.mtx line {L}: .*got 4"),
    ("row-range", {-1: b"5001 3 1.0"}, r"m\.mtx line {L}: row index 5001 out of range \[1, 40\]"),
    ("col-range", {-1: b"3 0 1.0"}, r"m\.mtx line {L}: column index 0 out of range \[1, 40\]"),
    ("fraction", {-1: b"3.5 2 1.0"}, r"m\.mtx line {L}: row index 3\.5 is not an integer"),
    ("nan", {-1: b"3 2 nan"}, r"m\.mtx line {L}: value nan is not finite"),
    ("huge-index", {-1: b"99999999999999999999 2 1.0"}, r"m\.mtx line {L}: index 1e\+20 out of range"),
    ("size-line", {2: b"40 forty 3"}, r"m\.mtx line 2: the size line '40 forty 3' should hold 3 "
                                      r"non-negative integers"),
    ("banner", {1: b"%%MatrixMarket matrix coordinate real sideways"},
     r"m\.mtx line 1: unknown symmetry 'sideways'"),
]


@pytest.mark.parametrize("edit, pattern", [m[1:] for m in MESSAGES], ids=[m[0] for m in MESSAGES])
def test_messages_name_the_file_line_and_row(shared_tmp_path, edit, pattern):
    last = _last_line(shared_tmp_path)
    edit = {(last if k == -1 else k): v for k, v in edit.items()}
    path = _lines_file(shared_tmp_path, "m.mtx", edit)
    e = assert_raises_collective(COMM, ValueError, io.read_matrix, path, COMM,
                                 match=pattern.format(L=last))
    assert_collective(COMM, "usecols" not in str(e) and "column 3." not in str(e), str(e))
    _still_in_step()


def test_integer_and_skew_files_name_the_line(shared_tmp_path):
    path = _lines_file(shared_tmp_path, "i.mtx", {5: b"3 2 1.5"}, field="integer")
    assert_raises_collective(COMM, ValueError, io.read_matrix, path, COMM,
                             match=r"i\.mtx line 5: malformed entry '3 2 1\.5': '1\.5' is not an "
                                   r"integer")
    path = _lines_file(shared_tmp_path, "k.mtx", {4: b"7 7 2.0"}, symmetry="skew-symmetric")
    assert_raises_collective(COMM, ValueError, io.read_matrix, path, COMM,
                             match=r"k\.mtx line 4: a skew-symmetric matrix has a zero diagonal, "
                                   r"got 2\.0 at row 7")


def test_plain_file_cut_mid_line(shared_tmp_path):
    raw = _mm_bytes(_matrix(40, 3))
    lines = raw.rstrip(b"\n").split(b"\n")
    # cut inside the last entry's value: "i j" remains of the last line
    i, j, _ = lines[-1].split()
    cut = raw[: raw.rstrip(b"\n").rfind(b"\n") + 1] + i + b" " + j
    path = _put(shared_tmp_path / "cut.mtx", cut)
    assert_raises_collective(COMM, ValueError, io.read_matrix, path, COMM,
                             match=r"cut\.mtx line %d: malformed entry .*got 2" % len(lines))
    # cut between lines: fewer entries than announced
    cut = raw[: raw.find(lines[len(lines) // 2])]
    path = _put(shared_tmp_path / "short.mtx", cut)
    assert_raises_collective(COMM, ValueError, io.read_matrix, path, COMM,
                             match=r"short\.mtx: the header announces \d+ entries, the file "
                                   r"holds \d+ \(truncated\?\)")
    _still_in_step()


def test_comment_lines_inside_the_data_keep_the_numbering(shared_tmp_path):
    raw = _mm_bytes(_matrix(40, 3)).rstrip(b"\n").split(b"\n")
    k = len(raw) // 2
    lines = raw[:k] + [b"% a comment", b""] + raw[k:]
    lines[-1] = b"1 1 inf"
    path = _put(shared_tmp_path / "c.mtx", b"\n".join(lines) + b"\n")
    assert_raises_collective(COMM, ValueError, io.read_matrix, path, COMM,
                             match=r"c\.mtx line %d: value inf is not finite" % len(lines))


def test_bad_reader_arguments(shared_tmp_path):
    path = str(shared_tmp_path / "p.mtx")
    io.write_matrix(path, gallery.poisson1d(5, COMM))
    assert_raises_collective(COMM, TypeError, io.read_matrix, None, COMM, match="path")
    assert_raises_collective(COMM, ValueError, io.read_matrix, "", COMM, match="non-empty")
    assert_raises_collective(COMM, TypeError, io.read_matrix, path, "world", match="MPI.Comm")
    assert_raises_collective(COMM, TypeError, io.read_matrix, path, COMM, layout=[0, 5],
                             match="Layout")
    assert_raises_collective(COMM, TypeError, io.read_vector, path, COMM, layout=5,
                             match="Layout")
    assert_raises_collective(COMM, TypeError, io.mminfo, 3, COMM, match="path")


# -- writers ------------------------------------------------------------------------------

def test_writers_fail_with_os_error_on_every_rank(shared_tmp_path):
    A = gallery.poisson1d(5, COMM)
    x = DistVector(Layout.block(5, COMM), np.arange(Layout.block(5, COMM).local_size, dtype=float))
    for write, obj in ((io.write_matrix, A), (io.write_vector, x)):
        # /dev/full accepts the open and fails the write: MPI-IO's error
        assert_raises_collective(COMM, OSError, write, "/dev/full", obj, match="/dev/full")
        _still_in_step()
        assert_raises_collective(COMM, OSError, write, str(shared_tmp_path), obj,
                                 match="cannot open path .* for writing: Is a directory")
        missing = str(shared_tmp_path / "no" / "dir" / "a.mtx")
        assert_raises_collective(COMM, OSError, write, missing, obj,
                                 match="cannot open path .*a.mtx' for writing: No such file")
        assert_raises_collective(COMM, TypeError, write, None, obj, match="path must be a path")
        assert_raises_collective(COMM, TypeError, write, str(shared_tmp_path / "c.mtx"), obj,
                                 comment=3, match="comment")
    assert_raises_collective(COMM, TypeError, io.write_matrix, "a.mtx", x, match="DistCSR")
    assert_raises_collective(COMM, TypeError, io.write_vector, "a.mtx", A, match="DistVector")
    _still_in_step()


def test_check_writable_changes_nothing(shared_tmp_path):
    new = str(shared_tmp_path / "new.txt")
    old = str(shared_tmp_path / "old.txt")
    on_rank0(COMM, lambda: open(old, "w").write("keep me"))
    stamp = on_rank0(COMM, lambda: os.stat(old).st_mtime_ns)
    assert_collective(COMM, io.check_writable(new, COMM) == new)
    assert_collective(COMM, io.check_writable(old, COMM, name="--out") == old)
    with Checks(COMM) as checks:
        checks.add(not on_rank0(COMM, os.path.exists, new), "no file created")
        checks.add(on_rank0(COMM, lambda: open(old).read()) == "keep me", "contents kept")
        checks.add(on_rank0(COMM, lambda: os.stat(old).st_mtime_ns) == stamp, "mtime kept")
    assert_raises_collective(COMM, OSError, io.check_writable,
                             str(shared_tmp_path / "none" / "x"), COMM, name="--plot",
                             match="cannot open --plot")


# -- checkpoint manifests that pass their checksum but are malformed ---------------------------

from dmsolve import solve  # noqa: E402
from dmsolve import checkpoint as ck  # noqa: E402
from dmsolve.checkpoint import CheckpointError  # noqa: E402
from dmsolve.checkpoint import _format as ckfmt  # noqa: E402


@pytest.fixture
def written(shared_tmp_path):
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
def test_resigned_malformed_manifest_is_a_checkpoint_error(written, edit, match):
    A, b, path = written
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


def test_resigned_manifest_without_a_scalar(written):
    A, b, path = written
    on_rank0(COMM, _resign, path, _set("scalars", {}))
    assert_raises_collective(COMM, CheckpointError, solve, A, b, "cg", "jacobi", rtol=1e-10,
                             resume=path, match="has no scalar 'rz'")
    _still_in_step()


def test_deeply_nested_manifest_json(written):
    A, b, path = written
    on_rank0(COMM, lambda: open(os.path.join(path, ck.MANIFEST), "w").write("[" * 200000))
    assert_raises_collective(COMM, CheckpointError, solve, A, b, "cg", "jacobi", rtol=1e-10,
                             resume=path, match="not valid JSON")
    assert_raises_collective(COMM, CheckpointError, ck.load, path, COMM, match="not valid JSON")
    _still_in_step()


def test_rank_file_whose_meta_is_not_a_record(written):
    A, b, path = written

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
