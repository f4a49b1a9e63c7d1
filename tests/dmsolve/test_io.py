"""Matrix Market reading and writing (dmsolve.io): exact round trips, scipy's
files read, compressed files of every kind, and every failure of a reading or
writing rank raised on every rank with a message that names the file and the
line."""

import bz2
import gzip
import io as pyio
import lzma
import os

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from mpi4py import MPI

from bad_inputs import check_bad_input
from full_disk import FullDiskMPI, assert_left_as_before, snapshot
from dmsolve import DistCSR, DistVector, Layout, block_ranges, gallery, io
from dmsolve.io import read_matrix, read_vector, write_matrix, write_vector
from dmsolve.partition import partition, redistribute
from mpitest import (Checks, assert_allclose_collective, assert_collective, assert_equal_collective,
                     assert_raises_collective, on_rank0)
from operands import complex_matrix, vector

COMM = MPI.COMM_WORLD


def write_text(path, text):
    on_rank0(COMM, lambda: open(path, "w").write(text))


def assert_exact(A, B):
    A, B = sp.csr_matrix(A), sp.csr_matrix(B)
    A.sort_indices()
    B.sort_indices()
    assert_collective(COMM, A.shape == B.shape, "shape %s != %s" % (A.shape, B.shape))
    assert_equal_collective(A.indptr, B.indptr)
    assert_equal_collective(A.indices, B.indices)
    assert_equal_collective(A.data, B.data)
    assert_collective(COMM, A.dtype == B.dtype, "dtype %s != %s" % (A.dtype, B.dtype))


@pytest.mark.parametrize("name, n", [("random_spd", 13), ("convdiff2d", 4),
                                     ("anisotropic2d", 5), ("poisson1d", 7)])
def test_matrix_round_trip_exact(shared_tmp_path, name, n):
    """A matrix written and read back is the same bit for bit."""
    path = os.path.join(shared_tmp_path, name + ".mtx")
    A = gallery.PROBLEMS[name](n, COMM)
    io.write_matrix(path, A, comment="written by dmsolve\nsecond line")
    B = io.read_matrix(path, COMM)
    assert_exact(B.to_scipy(), A.to_scipy())
    assert_collective(COMM, B.row_layout == A.row_layout)
    # scipy reads what we write, bit for bit
    assert_exact(sp.csr_matrix(scipy.io.mmread(path)), A.to_scipy())


def test_read_scipy_written_files(shared_tmp_path):
    """Files scipy writes read as scipy reads them."""
    rng = np.random.default_rng(0)
    M = sp.random(13, 7, density=0.3, random_state=1, format="csr")  # rectangular
    S = gallery.random_spd(13, MPI.COMM_SELF, density=0.3).to_scipy()
    K = sp.tril(S, -1) - sp.tril(S, -1).T  # skew-symmetric
    D = rng.standard_normal((7, 4))
    I = sp.random(9, 9, density=0.3, random_state=2, format="csr")
    I.data = np.round(I.data * 100)
    I = I.astype(np.int64)
    Z = (sp.random(6, 6, density=0.4, random_state=3) * (1 + 2j)).tocsr()
    H = (Z + Z.conj().T).tocsr()
    cases = {"rect.mtx": (M, {}), "sym.mtx": (S, {"symmetry": "symmetric"}),
             "skew.mtx": (K.tocsr(), {"symmetry": "skew-symmetric"}),
             "dense.mtx": (D, {}), "dense_sym.mtx": (S.toarray(), {"symmetry": "symmetric"}),
             "int.mtx": (I, {"field": "integer"}), "herm.mtx": (H, {"symmetry": "hermitian"}),
             "pattern.mtx": (M, {"field": "pattern"})}
    for fname, (mat, opts) in cases.items():
        path = os.path.join(shared_tmp_path, fname)
        on_rank0(COMM, scipy.io.mmwrite, path, mat, **opts)
        A = io.read_matrix(path, COMM).to_scipy()
        ref = sp.csr_matrix(scipy.io.mmread(path))
        if opts.get("field") == "integer":
            ref = ref.astype(np.float64)  # DistCSR stores integer files as float64
        assert_exact(A, ref)
        if opts.get("field") == "pattern":
            assert_equal_collective(A.toarray(), (M.toarray() != 0).astype(float))


def test_read_with_layout_and_empty_rank(shared_tmp_path):
    """A file read onto a given layout, with an empty rank, gives the right rows."""
    path = os.path.join(shared_tmp_path, "m.mtx")
    A = gallery.poisson2d(4, COMM)
    io.write_matrix(path, A)
    # the last rank owns nothing, rank 0 the rest
    if COMM.size == 1:
        ranges = [0, 16]
    else:
        ranges = list(block_ranges(16, COMM.size - 1)) + [16]
    layout = Layout(ranges, COMM)
    if COMM.size == 1:
        want = 16
    elif COMM.rank == COMM.size - 1:
        want = 0
    else:
        want = int(np.diff(block_ranges(16, COMM.size - 1))[COMM.rank])
    assert_collective(COMM, layout.local_size == want,
                      "rank %d owns %d rows, not %d" % (COMM.rank, layout.local_size, want))
    B = io.read_matrix(path, COMM, layout=layout)
    assert_collective(COMM, B.row_layout == layout)
    assert_exact(B.to_scipy(), A.to_scipy())


def test_compressed_file(shared_tmp_path):
    """A gzip-compressed file reads like the plain one."""
    path = os.path.join(shared_tmp_path, "sym.mtx.gz")
    S = gallery.random_spd(13, MPI.COMM_SELF, density=0.3).to_scipy()

    def write():
        import gzip
        raw = os.path.join(shared_tmp_path, "plain.mtx")
        scipy.io.mmwrite(raw, S, symmetry="symmetric")
        with open(raw, "rb") as f, gzip.open(path, "wb") as g:
            g.write(f.read())
    on_rank0(COMM, write)
    assert_exact(io.read_matrix(path, COMM).to_scipy(), S)


@pytest.mark.parametrize("n", [1, 7, 13])
def test_vector_round_trip_exact(shared_tmp_path, n):
    """A vector written and read back is the same bit for bit."""
    path = os.path.join(shared_tmp_path, "x%d.mtx" % n)
    A = gallery.poisson1d(n, COMM)
    x = gallery.rhs(A, kind="random", seed=4)
    x.local *= 1e-7  # awkward values still round-trip with %.17g
    io.write_vector(path, x)
    y = io.read_vector(path, COMM)
    assert_equal_collective(y.gather(), x.gather())
    assert_equal_collective(np.asarray(scipy.io.mmread(path)).ravel(), x.gather())


def test_vector_integer_and_complex(shared_tmp_path):
    """Integer and complex vectors round-trip."""
    layout = Layout.block(7, COMM)
    idx = np.arange(layout.start, layout.stop)
    for name, local in (("i.mtx", idx * 3 - 5), ("c.mtx", idx * (0.5 - 1.25j))):
        path = os.path.join(shared_tmp_path, name)
        x = DistVector(layout, local)
        io.write_vector(path, x)
        y = io.read_vector(path, COMM, layout=layout)
        assert_equal_collective(y.gather(), x.gather())
        assert_collective(COMM, y.dtype == x.dtype, "%s != %s" % (y.dtype, x.dtype))


def test_read_vector_from_coordinate_file(shared_tmp_path):
    """read_vector reads a coordinate-format vector."""
    path = os.path.join(shared_tmp_path, "sparsevec.mtx")
    write_text(path, "%%MatrixMarket matrix coordinate real general\n"
                     "% a sparse vector\n9 1 3\n2 1 1.5\n9 1 -2\n5 1 4\n")
    x = io.read_vector(path, COMM).gather()
    ref = np.zeros(9)
    ref[[1, 8, 4]] = [1.5, -2, 4]
    assert_equal_collective(x, ref)


def test_complex_matrix_round_trip(shared_tmp_path):
    """A complex matrix round-trips."""
    path = os.path.join(shared_tmp_path, "z.mtx")
    Z = (sp.random(7, 7, density=0.4, random_state=5) * (1 - 3j)).tocsr()
    A = DistCSR.from_global(Z, COMM)
    io.write_matrix(path, A)
    assert_exact(io.read_matrix(path, COMM).to_scipy(), A.to_scipy())


MALFORMED = {
    "banner.mtx": "%%NotMatrixMarket matrix coordinate real general\n2 2 1\n1 1 1.0\n",
    "size.mtx": "%%MatrixMarket matrix coordinate real general\n2 two 1\n1 1 1.0\n",
    "count.mtx": "%%MatrixMarket matrix coordinate real general\n3 3 4\n1 1 1.0\n2 2 1.0\n",
    "range.mtx": "%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.0\n4 2 1.0\n",
    "token.mtx": "%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.0\n2 2 abc\n",
    "columns.mtx": "%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1\n2 2\n",
    "empty.mtx": "",
    "nosize.mtx": "%%MatrixMarket matrix coordinate real general\n% only comments\n",
    "rectsym.mtx": "%%MatrixMarket matrix coordinate real symmetric\n3 2 1\n1 1 1.0\n",
}


@pytest.mark.parametrize("fname", sorted(MALFORMED))
def test_malformed_file_raises_value_error_everywhere(shared_tmp_path, fname):
    """Each malformed file raises ValueError on every rank."""
    path = os.path.join(shared_tmp_path, fname)
    write_text(path, MALFORMED[fname])
    assert_raises_collective(COMM, ValueError, io.read_matrix, path, COMM)


def test_missing_file_raises_os_error_everywhere(shared_tmp_path):
    """A missing file raises OSError on every rank."""
    path = os.path.join(shared_tmp_path, "does-not-exist.mtx")
    assert_raises_collective(COMM, OSError, io.read_matrix, path, COMM)
    assert_raises_collective(COMM, OSError, io.read_vector, path, COMM)


def test_unwritable_path_raises_os_error_everywhere(shared_tmp_path):
    """An unwritable path raises OSError on every rank."""
    A = gallery.poisson1d(5, COMM)
    path = os.path.join(shared_tmp_path, "no", "such", "dir", "a.mtx")
    assert_raises_collective(COMM, OSError, io.write_matrix, path, A)


def test_wrong_layout_or_shape_raises(shared_tmp_path):
    """A layout or shape that does not fit the file is refused."""
    path = os.path.join(shared_tmp_path, "p.mtx")
    io.write_matrix(path, gallery.poisson2d(3, COMM))
    assert_raises_collective(COMM, ValueError, io.read_matrix, path, COMM,
                             layout=Layout.block(8, COMM))
    assert_raises_collective(COMM, ValueError, io.read_vector, path, COMM)


def test_mminfo_everywhere(shared_tmp_path):
    """mminfo gives the header on every rank."""
    path = os.path.join(shared_tmp_path, "info.mtx")
    io.write_matrix(path, gallery.poisson1d(7, COMM))
    info = io.mminfo(path, COMM)
    assert_collective(COMM, info == {"format": "coordinate", "field": "real",
                                     "symmetry": "general", "shape": (7, 7), "entries": 19},
                      str(info))


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
    """gzip, bz2 and xz files read as scipy reads them."""
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
    """A truncated, corrupt or mislabelled compressed file fails on every rank."""
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
    """Each damaged line is named by file, line and row in the message, on every rank."""
    last = _last_line(shared_tmp_path)
    edit = {(last if k == -1 else k): v for k, v in edit.items()}
    path = _lines_file(shared_tmp_path, "m.mtx", edit)
    e = assert_raises_collective(COMM, ValueError, io.read_matrix, path, COMM,
                                 match=pattern.format(L=last))
    assert_collective(COMM, "usecols" not in str(e) and "column 3." not in str(e), str(e))
    _still_in_step()


def test_integer_and_skew_files_name_the_line(shared_tmp_path):
    """Damaged integer and skew-symmetric files name the line."""
    path = _lines_file(shared_tmp_path, "i.mtx", {5: b"3 2 1.5"}, field="integer")
    assert_raises_collective(COMM, ValueError, io.read_matrix, path, COMM,
                             match=r"i\.mtx line 5: malformed entry '3 2 1\.5': '1\.5' is not an "
                                   r"integer")
    path = _lines_file(shared_tmp_path, "k.mtx", {4: b"7 7 2.0"}, symmetry="skew-symmetric")
    assert_raises_collective(COMM, ValueError, io.read_matrix, path, COMM,
                             match=r"k\.mtx line 4: a skew-symmetric matrix has a zero diagonal, "
                                   r"got 2\.0 at row 7")


def test_plain_file_cut_mid_line(shared_tmp_path):
    """A plain file cut mid-line fails on every rank, naming the line."""
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
    """Comment lines inside the data keep the line numbers in messages right."""
    raw = _mm_bytes(_matrix(40, 3)).rstrip(b"\n").split(b"\n")
    k = len(raw) // 2
    lines = raw[:k] + [b"% a comment", b""] + raw[k:]
    lines[-1] = b"1 1 inf"
    path = _put(shared_tmp_path / "c.mtx", b"\n".join(lines) + b"\n")
    assert_raises_collective(COMM, ValueError, io.read_matrix, path, COMM,
                             match=r"c\.mtx line %d: value inf is not finite" % len(lines))


def test_bad_reader_arguments(shared_tmp_path):
    """Bad reader arguments are refused on every rank."""
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
    """A writer that cannot write fails with OSError on every rank."""
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
    """check_writable leaves nothing behind."""
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


def test_complex_through_matrix_market_and_redistribution(comm, shared_tmp_path):
    """A complex matrix and vector survive a Matrix Market round trip and redistribution."""
    M = complex_matrix(21, 21, seed=12) + sp.identity(21)
    A = DistCSR.from_global(sp.csr_matrix(M), comm)
    g = vector(21, 6, "complex")
    x = DistVector.from_global(g, A.col_layout)
    write_matrix(shared_tmp_path / "A.mtx", A)
    write_vector(shared_tmp_path / "x.mtx", x)
    B = read_matrix(shared_tmp_path / "A.mtx", comm)
    y = read_vector(shared_tmp_path / "x.mtx", comm)
    with Checks(comm) as checks:
        checks.add(B.dtype == np.complex128 and y.dtype == np.complex128, "dtypes read")
    assert_allclose_collective(B.to_scipy().toarray(), M.toarray(), comm, rtol=0)
    assert_allclose_collective(y.gather(), g, comm, rtol=0)
    p = partition(A, "nnz")
    Ap, xp = redistribute(A, p), redistribute(x, p)
    # A^H x on the new distribution, moved back, is A^H x
    assert_allclose_collective(p.restore(Ap.hmatvec(xp)).gather(), M.conj().T @ g, comm,
                               rtol=1e-13)
    assert_allclose_collective(p.restore(Ap).to_scipy().toarray(), M.toarray(), comm, rtol=0)


# -- bad input: the same exception on every rank -------------------------------------------

BAD_INPUTS = [
    ("io-read-matrix-missing-file", OSError, "cannot read",
     lambda e: io.read_matrix(e.missing, e.comm)),
    ("io-read-matrix-directory", OSError, "cannot read", lambda e: io.read_matrix(e.dir, e.comm)),
    ("io-read-matrix-garbage", ValueError, "malformed",
     lambda e: io.read_matrix(e.garbage, e.comm)),
    ("io-read-matrix-truncated", ValueError, "announces",
     lambda e: io.read_matrix(e.truncated, e.comm)),
    ("io-read-vector-from-matrix-file", ValueError, "not a vector",
     lambda e: io.read_vector(e.truncated, e.comm)),
    ("io-read-vector-missing-file", OSError, "cannot read",
     lambda e: io.read_vector(e.missing, e.comm)),
    ("io-read-matrix-layout-of-other-size", ValueError, "layout",
     lambda e: io.read_matrix(e.truncated, e.comm, layout=Layout.block(5, e.comm))),
    ("io-write-into-missing-directory", OSError, "cannot open",
     lambda e: io.write_vector(os.path.join(e.dir, "no", "dir", "x.mtx"), e.b)),
]


@pytest.mark.parametrize("exc, match, call", [c[1:] for c in BAD_INPUTS],
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_the_same_exception_on_every_rank(bad_input_env, request, exc, match,
                                                           call):
    """Each case of BAD_INPUTS raises the same exception type, with a message
    that matches, on every rank (or works, at one rank, where a COMM_SELF
    operand is valid)."""
    check_bad_input(bad_input_env, request, exc, match, call)


def test_matrix_round_trip_when_ranks_own_nothing(comm, shared_tmp_path):
    """A matrix of 2 rows (at 3 and 4 ranks some ranks own nothing) written
    and read back is the same matrix."""
    A = gallery.poisson1d(2, comm)
    path = str(shared_tmp_path / "A.mtx")
    io.write_matrix(path, A)
    B = io.read_matrix(path, comm)
    assert_allclose_collective(B.to_scipy().toarray(), A.to_scipy().toarray(), comm)


@pytest.mark.parametrize("n, dtype", [(13, np.float64), (2, np.float64), (7, np.complex128),
                                      (7, np.int64), (9, np.float32)])
def test_write_npy_writes_numpys_bytes_without_gathering(comm, shared_tmp_path, monkeypatch,
                                                         n, dtype):
    """write_npy's file is byte for byte what numpy.save writes for the
    gathered vector (dtypes, and ranks that own nothing at 2 entries), and no
    rank gathers the vector to write it."""
    layout = Layout.block(n, comm)
    idx = np.arange(layout.start, layout.stop)
    local = (idx * (0.5 - 1.25j) if dtype == np.complex128 else idx * 3 - 5).astype(dtype)
    x = DistVector(layout, local / 7 if dtype == np.float64 else local)
    want = x.gather()
    path = shared_tmp_path / "x.npy"
    monkeypatch.setattr(DistVector, "gather", lambda *a, **k: pytest.fail("gathered"))
    io.write_npy(str(path), x)
    monkeypatch.undo()

    def bytes_of_numpy_save():
        buf = pyio.BytesIO()
        np.save(buf, want)
        return buf.getvalue()
    same = on_rank0(comm, lambda: path.read_bytes() == bytes_of_numpy_save())
    assert_collective(comm, same, "the file differs from numpy.save's")
    assert_equal_collective(sorted(snapshot(comm, shared_tmp_path)), ["x.npy"], comm)


def test_write_npy_refuses_what_it_cannot_write(comm, shared_tmp_path):
    """A path in a missing folder is refused on every rank; a non-vector is a TypeError."""
    x = gallery.rhs(gallery.poisson1d(5, comm), "random", seed=1)
    assert_raises_collective(comm, OSError, io.write_npy, str(shared_tmp_path / "no" / "x.npy"),
                             x, match="x.npy")
    assert_raises_collective(comm, TypeError, io.write_npy, str(shared_tmp_path / "x.npy"),
                             x.local, match="DistVector")


@pytest.mark.parametrize("what", ["matrix", "vector", "npy"])
def test_full_disk_leaves_the_previous_file_and_no_temporary(comm, shared_tmp_path,
                                                             monkeypatch, what):
    """A Matrix Market write that fills the disk part-way on the last rank raises OSError
    on every rank, leaves the previous file byte for byte and no temporary beside it;
    the next write that succeeds replaces it."""
    old, new = gallery.poisson1d(7, comm), gallery.poisson2d(4, comm)
    write = io.write_matrix
    if what != "matrix":
        old, new = gallery.rhs(old, "random", seed=1), gallery.rhs(new, "random", seed=2)
        write = io.write_vector if what == "vector" else io.write_npy
    name = "a.npy" if what == "npy" else "a.mtx"
    path = str(shared_tmp_path / name)
    write(path, old)
    before = snapshot(comm, shared_tmp_path)
    monkeypatch.setattr(io, "MPI", FullDiskMPI(failing=lambda rank: rank == comm.size - 1))
    assert_raises_collective(comm, OSError, write, path, new, match=name)
    monkeypatch.undo()
    assert_left_as_before(comm, shared_tmp_path, before)
    write(path, new)
    if what == "vector":
        assert_equal_collective(read_vector(path, comm).gather(), new.gather(), comm)
    elif what == "npy":
        assert_equal_collective(on_rank0(comm, lambda: np.load(path)), new.gather(), comm)
    else:
        assert_exact(read_matrix(path, comm).to_scipy(), new.to_scipy())
    assert_equal_collective(sorted(snapshot(comm, shared_tmp_path)), [name], comm)
