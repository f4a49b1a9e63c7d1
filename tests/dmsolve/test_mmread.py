"""The parallel Matrix Market parse (dmsolve/_mmread.py): every field,
symmetry and format reads as ``scipy.io.mmread`` reads it at any rank count;
byte ranges cut at line starts whatever the line lengths; comments, blank
lines and odd spacing inside the entries; files with fewer lines than ranks;
plain files parsed without the checking parse (and read the same without
``fast_matrix_market``); damaged files give one message on every rank."""

import io as pyio

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from mpi4py import MPI

from dmsolve import _mmread
from dmsolve.io import read_matrix, read_vector
from mpitest import (assert_collective, assert_equal_collective, assert_raises_collective,
                     on_rank0)

COMM = MPI.COMM_WORLD


def _put(path, data: bytes) -> str:
    on_rank0(COMM, lambda: open(path, "wb").write(data))
    return str(path)


def _mm_bytes(M, **opts) -> bytes:
    buf = pyio.BytesIO()
    scipy.io.mmwrite(buf, M, **opts)
    return buf.getvalue()


def _reference(path) -> np.ndarray:
    """scipy's reading of ``path`` as a dense float or complex array."""
    R = scipy.io.mmread(path)
    R = R.toarray() if sp.issparse(R) else np.asarray(R)
    return R.astype(np.complex128 if R.dtype.kind == "c" else np.float64)


def _assert_reads_like_scipy(path, reference_path=None):
    """read_matrix(path) equals scipy's reading of ``reference_path`` (default
    ``path``) bit for bit, on every rank."""
    A = read_matrix(path, COMM).to_scipy().toarray()
    ref = _reference(reference_path or path)
    assert_equal_collective(A.shape, ref.shape)
    assert_equal_collective(A.view(np.int64), ref.view(np.int64), err_msg=str(path))


def _square(n, field, symmetry, seed):
    """An ``n x n`` matrix of ``field`` with ``symmetry``, for scipy to write."""
    M = sp.random(n, n, density=0.3, random_state=seed, format="csr")
    if field == "complex":
        M = M + 1j * sp.random(n, n, density=0.3, random_state=seed + 1, format="csr")
    if field == "integer":
        M.data = np.round(M.data * 100) - 50
        M = M.astype(np.int64)
    if field == "pattern":
        M.data[:] = 1.0
    if symmetry == "symmetric":
        M = M + M.T
    elif symmetry == "skew-symmetric":
        M = M - M.T
    elif symmetry == "hermitian":
        M = M + M.conj().T
    return sp.csr_matrix(M)


KINDS = ([("coordinate", f, "general") for f in ("real", "integer", "complex", "pattern")]
         + [("coordinate", f, "symmetric") for f in ("real", "integer", "complex", "pattern")]
         + [("coordinate", f, "skew-symmetric") for f in ("real", "integer", "complex")]
         + [("coordinate", "complex", "hermitian")]
         + [("array", f, s) for f in ("real", "integer", "complex")
            for s in ("general", "symmetric", "skew-symmetric")]
         + [("array", "complex", "hermitian")])


@pytest.mark.parametrize("fmt, field, symmetry", KINDS, ids=["-".join(k) for k in KINDS])
def test_every_kind_reads_like_scipy(shared_tmp_path, fmt, field, symmetry):
    """Each format, field and symmetry reads as scipy.io.mmread reads it."""
    M = _square(13, field, symmetry, seed=len(field) + len(symmetry))
    if fmt == "array":
        M = M.toarray()
    raw = _mm_bytes(M, field=field, symmetry=symmetry)
    assert_collective(COMM, (b" %s %s %s" % (fmt.encode(), field.encode(), symmetry.encode()))
                      in raw.split(b"\n")[0], raw[:80].decode())
    _assert_reads_like_scipy(_put(shared_tmp_path / "k.mtx", raw))


def test_rectangular_general_files(shared_tmp_path):
    """Rectangular coordinate and array files, more columns or more rows."""
    for shape in ((7, 19), (19, 7)):
        M = sp.random(*shape, density=0.4, random_state=sum(shape), format="csr")
        _assert_reads_like_scipy(_put(shared_tmp_path / "r.mtx", _mm_bytes(M)))
        _assert_reads_like_scipy(_put(shared_tmp_path / "d.mtx", _mm_bytes(M.toarray())))


def _ranges(path, size):
    """The byte ranges the ``size`` ranks read, as (start, stop) pairs."""

    class Rank:
        def __init__(self, r):
            self.r = r

        def Get_rank(self):
            return self.r

        def Get_size(self):
            return size

    info = _mmread._header_only(path)
    pieces = []
    for r in range(size):
        piece = _mmread._read_my_lines(path, info, Rank(r))
        pieces.append(piece[_mmread._ROOM:])
        piece.close()
    return info, pieces


def test_byte_ranges_cut_at_line_starts(shared_tmp_path):
    """Every line is read by exactly one of 1 to 9 ranks, whatever the line
    lengths (lines of 6 to 300 bytes, so the equal byte shares end mid-line)."""
    rng = np.random.default_rng(4)
    lines = [b"%%MatrixMarket matrix coordinate real general", b"50 50 40"]
    for k in range(40):
        pad = b" " * int(rng.integers(0, 280))
        lines.append(b"%d %d %s%.17g" % (k + 1, 50 - k, pad, rng.standard_normal()))
    raw = b"\n".join(lines) + b"\n"
    path = _put(shared_tmp_path / "cut.mtx", raw)
    COMM.Barrier()
    body = raw[raw.index(b"\n", raw.index(b"\n") + 1) + 1:]
    for size in range(1, 10):
        info, pieces = _ranges(path, size)
        assert_collective(COMM, b"".join(pieces) == body, "%d ranks: not the body" % size)
        assert_collective(COMM, all(p == b"" or p.endswith(b"\n") for p in pieces),
                          "%d ranks: a piece ends mid-line" % size)
    for size in range(2, 5):
        # the nominal cuts fall inside lines: the test is not vacuous
        cuts = [len(body) * r // size for r in range(1, size)]
        assert_collective(COMM, any(body[c - 1:c] != b"\n" for c in cuts), str(cuts))
    _assert_reads_like_scipy(path)


def test_comments_blank_lines_and_spacing_inside_the_entries(shared_tmp_path):
    """Comment lines, blank lines, tabs, CRLF line ends, trailing comments and
    a missing final newline read like the clean file scipy reads."""
    M = sp.random(23, 23, density=0.3, random_state=8, format="csr")
    clean = _mm_bytes(M)
    lines = clean.rstrip(b"\n").split(b"\n")
    head, body = lines[:2], lines[2:]
    messy = list(head)
    for k, line in enumerate(body):
        if k % 7 == 0:
            messy += [b"% a comment between entries", b""]
        if k % 5 == 1:
            line = b"  " + line.replace(b" ", b"\t") + b"   "
        if k % 11 == 2:
            line = line + b" % a trailing comment"
        if k % 13 == 3:
            line = line + b"\r"
        messy.append(line)
    messy += [b"", b"% the end"]
    path = _put(shared_tmp_path / "messy.mtx", b"\n".join(messy))
    ref = _put(shared_tmp_path / "clean.mtx", clean)
    _assert_reads_like_scipy(path, ref)


@pytest.mark.parametrize("entries", [0, 1, 2, 3])
def test_files_with_fewer_lines_than_ranks(shared_tmp_path, entries):
    """Files of 0 to 3 entries, 1 x 1 arrays and vectors of 2 entries read on
    any number of ranks, most of which get no line."""
    M = sp.coo_matrix((np.arange(1.0, entries + 1), (np.arange(entries), np.arange(entries))),
                      shape=(5, 5))
    _assert_reads_like_scipy(_put(shared_tmp_path / "tiny.mtx", _mm_bytes(M)))
    sym = sp.coo_matrix(([2.5] * entries, ([4] * entries, list(range(entries)))), shape=(5, 5))
    _assert_reads_like_scipy(_put(shared_tmp_path / "tinysym.mtx",
                                  _mm_bytes(sym.tocsr(), symmetry="symmetric")))
    _assert_reads_like_scipy(_put(shared_tmp_path / "one.mtx", _mm_bytes(np.array([[3.5]]))))
    x = read_vector(_put(shared_tmp_path / "x.mtx", _mm_bytes(np.array([[1.5], [-2.0]]))), COMM)
    assert_equal_collective(x.gather(), np.array([1.5, -2.0]))


def test_plain_files_skip_the_checking_parse(shared_tmp_path, monkeypatch):
    """Files in plain form are parsed by fast_matrix_market alone: the checking
    parse (numpy.loadtxt) is not called on any rank."""
    calls = []
    original = _mmread._parse

    def counting(*args):
        calls.append(1)
        return original(*args)

    monkeypatch.setattr(_mmread, "_parse", counting)
    for fmt, field, symmetry in KINDS:
        M = _square(11, field, symmetry, seed=5)
        raw = _mm_bytes(M.toarray() if fmt == "array" else M, field=field, symmetry=symmetry)
        _assert_reads_like_scipy(_put(shared_tmp_path / "p.mtx", raw))
    total = COMM.allreduce(len(calls))
    assert_collective(COMM, total == 0, "the checking parse ran %d times" % total)


def test_reads_the_same_without_fast_matrix_market(shared_tmp_path, monkeypatch):
    """Without fast_matrix_market (no wheel for the Python) every kind reads
    the same through the checking parse."""
    monkeypatch.setattr(_mmread, "_fmm", None)
    for fmt, field, symmetry in KINDS[::3]:
        M = _square(11, field, symmetry, seed=6)
        raw = _mm_bytes(M.toarray() if fmt == "array" else M, field=field, symmetry=symmetry)
        _assert_reads_like_scipy(_put(shared_tmp_path / "n.mtx", raw))


@pytest.mark.parametrize("threads", [2, 3, 5])
def test_threads_scan_and_parse_in_line_aligned_blocks(shared_tmp_path, monkeypatch, threads):
    """On several threads, the strict scan cuts its range into blocks at line
    starts (here blocks of a few lines, cut inside lines of every length)
    and the parse runs on the threads too: plain files read as scipy reads
    them, without the checking parse, and a bad line in any block is refused
    with its line number."""
    from dmsolve import threads as dthreads

    monkeypatch.setattr(_mmread, "_MIN_SCAN_BLOCK", 7)
    calls = []
    original = _mmread._parse
    monkeypatch.setattr(_mmread, "_parse", lambda *a: calls.append(1) or original(*a))
    M = _square(23, "real", "general", seed=8)
    raw = _mm_bytes(M)
    with dthreads.using(threads):
        _assert_reads_like_scipy(_put(shared_tmp_path / "t.mtx", raw))
        total = COMM.allreduce(len(calls))
        assert_collective(COMM, total == 0, "the checking parse ran %d times" % total)
        lines = raw.rstrip(b"\n").split(b"\n")
        for k in (SIZE_LINE + 1, len(lines) // 2, len(lines) - 1):
            bad = list(lines)
            i, j, _ = bad[k].split()
            bad[k] = b"%s %s 2.5abc" % (i, j)
            _same_message_everywhere(_put(shared_tmp_path / "b.mtx", b"\n".join(bad) + b"\n"),
                                     ValueError, r"b\.mtx line %d: malformed entry" % (k + 1))


def _same_message_everywhere(path, exc_type, match):
    e = assert_raises_collective(COMM, exc_type, read_matrix, path, COMM, match=match)
    messages = COMM.allgather(str(e))
    assert_collective(COMM, len(set(messages)) == 1, "messages differ: %s" % messages)
    # the ranks are still in step: a collective after the failure pairs up
    got = COMM.allgather(COMM.rank)
    assert_collective(COMM, got == list(range(COMM.size)), str(got))


#: scipy writes the banner, an empty comment, the size line, then the entries
SIZE_LINE = 2


def _body_lines(n=30, seed=9):
    raw = _mm_bytes(sp.random(n, n, density=0.3, random_state=seed, format="csr"))
    lines = raw.rstrip(b"\n").split(b"\n")
    assert_collective(COMM, lines[SIZE_LINE].split()[:2] == [b"%d" % n] * 2, str(lines[:3]))
    return lines


def test_truncated_file_fails_alike_on_every_rank(shared_tmp_path):
    """A file cut inside its last line, or between lines, fails with one message."""
    lines = _body_lines()
    i, j, _ = lines[-1].split()
    cut = b"\n".join(lines[:-1] + [i + b" " + j])
    _same_message_everywhere(_put(shared_tmp_path / "t.mtx", cut), ValueError,
                             r"t\.mtx line %d: malformed entry .*got 2" % len(lines))
    short = b"\n".join(lines[:len(lines) // 2]) + b"\n"
    _same_message_everywhere(_put(shared_tmp_path / "s.mtx", short), ValueError,
                             r"s\.mtx: the header announces \d+ entries, the file holds \d+ "
                             r"\(truncated\?\)")


def test_wrong_count_fails_alike_on_every_rank(shared_tmp_path):
    """A header announcing fewer entries than the file holds fails with one message."""
    lines = _body_lines()
    m, n, k = lines[SIZE_LINE].split()
    lines[SIZE_LINE] = b"%s %s %d" % (m, n, int(k) - 2)
    _same_message_everywhere(_put(shared_tmp_path / "w.mtx", b"\n".join(lines) + b"\n"),
                             ValueError, r"w\.mtx: the header announces %d entries, the file "
                                         r"holds %d(?! \(truncated)" % (int(k) - 2, int(k)))


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_out_of_range_index_fails_alike_on_every_rank(shared_tmp_path, where):
    """An index past the size line fails with one message naming the line,
    wherever the line is (so on whichever rank reads it)."""
    lines = _body_lines()
    k = {"first": SIZE_LINE + 1, "middle": len(lines) // 2, "last": len(lines) - 1}[where]
    i, j, v = lines[k].split()
    lines[k] = b"%s 31 %s" % (i, v)
    _same_message_everywhere(_put(shared_tmp_path / "o.mtx", b"\n".join(lines) + b"\n"),
                             ValueError, r"o\.mtx line %d: column index 31 out of range "
                                         r"\[1, 30\]" % (k + 1))


@pytest.mark.parametrize("value", [b"2.5abc", b"1-2", b"1e5e5", b"0x10", b"2.5 7", b"1..5"])
def test_text_after_the_last_number_is_refused(shared_tmp_path, value):
    """Text fast_matrix_market would ignore after a line's last number is a
    malformed entry, named by line, as the checking parse names it."""
    lines = _body_lines()
    i, j, _ = lines[-1].split()
    lines[-1] = b"%s %s %s" % (i, j, value)
    _same_message_everywhere(_put(shared_tmp_path / "x.mtx", b"\n".join(lines) + b"\n"),
                             ValueError, r"x\.mtx line %d: malformed entry" % len(lines))


def test_integer_file_with_a_fraction_is_refused(shared_tmp_path):
    """A fraction in an integer file's last column (which fast_matrix_market
    would truncate) is refused, naming the line."""
    M = sp.random(20, 20, density=0.3, random_state=2, format="csr")
    M.data = np.round(M.data * 10) + 1
    lines = _mm_bytes(M.astype(np.int64), field="integer").rstrip(b"\n").split(b"\n")
    i, j, _ = lines[-1].split()
    lines[-1] = b"%s %s 7.5" % (i, j)
    _same_message_everywhere(_put(shared_tmp_path / "i.mtx", b"\n".join(lines) + b"\n"),
                             ValueError, r"i\.mtx line %d: malformed entry .*'7\.5' is not an "
                                         r"integer" % len(lines))


def test_rows_in_order_with_duplicates_and_columns_out_of_order(shared_tmp_path):
    """A file written row by row, columns out of order within a row and some
    entries repeated, reads as scipy's mmread(...).tocsr() (duplicates summed)."""
    rng = np.random.default_rng(12)
    lines = []
    for i in range(1, 18):
        cols = rng.permutation(np.arange(1, 18))[:5].tolist()
        cols += cols[:2]                            # two repeated entries per row
        lines += [b"%d %d %.17g" % (i, j, rng.standard_normal()) for j in cols]
    raw = b"%%%%MatrixMarket matrix coordinate real general\n17 17 %d\n" % len(lines) \
        + b"\n".join(lines) + b"\n"
    path = _put(shared_tmp_path / "dup.mtx", raw)
    A = read_matrix(path, COMM).to_scipy()
    ref = scipy.io.mmread(path).tocsr()
    assert_collective(COMM, A.nnz == ref.nnz == 17 * 5, "nnz %d, scipy %d" % (A.nnz, ref.nnz))
    assert_equal_collective(A.toarray(), ref.toarray())
