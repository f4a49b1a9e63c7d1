"""How the ranks read a Matrix Market file (see :mod:`dmsolve.io` for who
reads what): the header on rank 0, then each rank's byte range of the
entries, moved to line boundaries, or rank 0's scatter of a decompressed
file; the parse, with checks that name the offending line.

A piece of plain entry lines (see :mod:`dmsolve._mmread_kernels`) is
parsed by ``fast_matrix_market``, the parser of ``scipy.io.mmread``, under
a header of its own; any other piece, or one that parser refuses, is
parsed by ``numpy.loadtxt`` with checks that name the offending line.
Every error is agreed on, so every rank raises the same exception.
"""

from __future__ import annotations

import bz2
import gzip
import io as _pyio
import lzma
import mmap
import os
import warnings

import numpy as np
from mpi4py import MPI

from . import threads as _threads
from ._errors import agree
from ._mmread_kernels import plain_lines

try:
    import fast_matrix_market as _fmm
except ImportError:     # no wheel for this Python: every piece takes the checking parse
    _fmm = None

__all__ = ["read_header", "local_entries"]

_FIELDS = ("real", "integer", "complex", "pattern")
_SYMMETRIES = ("general", "symmetric", "skew-symmetric", "hermitian")
#: decompressing readers by file suffix (each wraps an open binary file)
_DECOMPRESSORS = {".gz": lambda f: gzip.GzipFile(fileobj=f, mode="rb"),
                  ".bz2": lambda f: bz2.BZ2File(f, mode="rb"),
                  ".xz": lambda f: lzma.LZMAFile(f, mode="rb")}


# -- errors ---------------------------------------------------------------------------

def _read_error(path: str, e: BaseException) -> BaseException:
    """The exception a reader raises for ``e``, naming ``path``.

    Our own messages pass through. An ``OSError`` with an ``errno`` is the
    file system's (missing, a directory, no permission, an I/O error):
    ``OSError``. Anything else raised while decoding the bytes (a truncated
    or corrupt gzip/bz2/xz stream: ``EOFError``, ``zlib.error``,
    ``lzma.LZMAError``, ``gzip.BadGzipFile`` or bz2's ``OSError`` without an
    errno; ``UnicodeDecodeError``, ``struct.error``, ...) means the content
    is malformed: ``ValueError``. ``MemoryError`` stays what it is.
    """
    if isinstance(e, _FileError):
        return e.args[0]
    if isinstance(e, MemoryError):
        return e
    if isinstance(e, OSError) and e.errno is not None:
        return OSError("cannot read %s: %s" % (path, e.strerror or e))
    if isinstance(e, ValueError) and str(e).startswith(path):
        return e
    kind = os.path.splitext(path)[1].lstrip(".")
    what = ("corrupt or truncated %s data" % kind) if kind in ("gz", "bz2", "xz") \
        else "cannot be decoded"
    return ValueError("%s: %s (%s: %s)" % (path, what, type(e).__name__, e))


class _FileError(Exception):
    """Carries a finished reader exception through a broad ``except``."""


def _malformed(path: str, line: int | None, message: str) -> _FileError:
    where = "%s line %d" % (path, line) if line is not None else path
    return _FileError(ValueError("%s: %s" % (where, message)))


def _show(line: bytes) -> str:
    """A file line for a message: decoded, stripped, at most 60 characters."""
    s = line.decode("ascii", "replace").strip()
    return repr(s if len(s) <= 60 else s[:57] + "...")


# -- header ------------------------------------------------------------------------

def _parse_header(f, path: str) -> dict:
    """Parse the banner and size line of the open binary file ``f``.

    Returns the info: format, field, symmetry, shape, entries (stored
    entries), offset (bytes of the header) and lines (header lines).
    Raises ``_FileError`` (a ValueError with the file and line). Not collective.
    """
    banner = f.readline()
    words = banner.decode("ascii", "replace").strip().lower().split()
    if len(words) != 5 or words[0] != "%%matrixmarket" or words[1] != "matrix":
        raise _malformed(path, 1, "not a Matrix Market file (banner %s)" % _show(banner[:80]))
    fmt, field, symmetry = words[2:]
    if fmt not in ("coordinate", "array"):
        raise _malformed(path, 1, "unknown Matrix Market format %r" % fmt)
    if field not in _FIELDS or (fmt == "array" and field == "pattern"):
        raise _malformed(path, 1, "unsupported field %r for format %r" % (field, fmt))
    if symmetry not in _SYMMETRIES:
        raise _malformed(path, 1, "unknown symmetry %r" % symmetry)
    offset, lineno = len(banner), 1
    while True:
        line = f.readline()
        if not line:
            raise _malformed(path, None, "no size line after the banner and comments")
        offset += len(line)
        lineno += 1
        s = line.strip()
        if s and not s.startswith(b"%"):
            break
    want = 3 if fmt == "coordinate" else 2
    try:
        sizes = [int(w) for w in s.split()]
    except ValueError:
        sizes = []
    if len(sizes) != want or min(sizes) < 0:
        raise _malformed(path, lineno, "the size line %s should hold %d non-negative integers "
                         "(%s)" % (_show(s), want, "rows columns entries" if want == 3
                                   else "rows columns"))
    m, n = sizes[0], sizes[1]
    if symmetry != "general" and m != n:
        raise _malformed(path, lineno, "a %s matrix must be square, got %d x %d"
                         % (symmetry, m, n))
    if fmt == "coordinate":
        entries = sizes[2]
    elif symmetry == "general":
        entries = m * n
    elif symmetry == "skew-symmetric":
        entries = n * (n - 1) // 2
    else:
        entries = n * (n + 1) // 2
    return {"format": fmt, "field": field, "symmetry": symmetry, "shape": (m, n),
            "entries": entries, "offset": offset, "lines": lineno}


def _decompressor(path: str):
    return _DECOMPRESSORS.get(os.path.splitext(path)[1].lower())


def _rank0(comm: MPI.Comm, path: str, func):
    """``func()`` on rank 0, its result broadcast; a failure there is raised
    on every rank as :func:`_read_error` makes it. Collective on ``comm``."""
    result, exc = None, None
    if comm.Get_rank() == 0:
        try:
            result = func()
        except Exception as e:  # noqa: BLE001 - every failure is agreed on
            exc = _read_error(path, e)
    agree(comm, exc)
    return comm.bcast(result, root=0)


def _header_only(path: str) -> dict:
    with open(path, "rb") as raw:
        unpack = _decompressor(path)
        if unpack is None:
            info = _parse_header(raw, path)
            info["end"] = os.fstat(raw.fileno()).st_size
            return info
        with unpack(raw) as f:
            return _parse_header(f, path)


def read_header(comm: MPI.Comm, path: str) -> dict:
    """The header of ``path``, read and checked on rank 0 and given to every
    rank; a failure is raised on every rank. Collective on ``comm``."""
    return _rank0(comm, path, lambda: _header_only(path))


# -- parallel reading -------------------------------------------------------------------

def _line_start_at_or_after(f, pos: int, lo: int) -> int:
    """The first line start at or after byte ``pos`` (``lo`` is a line start)."""
    if pos <= lo:
        return lo
    f.seek(pos - 1)
    f.readline()  # if byte pos-1 is a newline this consumes just it
    return f.tell()


#: Bytes kept free before a piece of entries for the header that
#: fast_matrix_market reads first (see :func:`_fast_entries`): the piece is
#: read once, into place, and never copied to put a header before it.
_ROOM = 256


def _piece(nbytes: int) -> mmap.mmap:
    """Memory for ``nbytes`` bytes of entries after :data:`_ROOM` free bytes.

    Private anonymous memory in huge pages where the system has them (as
    numpy's large arrays are): a 60 MB piece is then filled in a third of
    the time, and unmapped in a thirtieth, of the shared memory that
    ``mmap.mmap(-1, n)`` gives."""
    if not hasattr(mmap, "MAP_PRIVATE"):
        return mmap.mmap(-1, _ROOM + nbytes)
    piece = mmap.mmap(-1, _ROOM + nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE") and nbytes >= 1 << 21:
        try:
            piece.madvise(mmap.MADV_HUGEPAGE)
        except OSError:     # a kernel without transparent huge pages
            pass
    return piece


def _piece_of(chunk: bytes) -> mmap.mmap:
    piece = _piece(len(chunk))
    piece[_ROOM:] = chunk
    return piece


def _read_my_lines(path: str, info: dict, comm: MPI.Comm) -> mmap.mmap:
    """This rank's line-aligned byte range of the entries, as a piece."""
    lo, hi = info["offset"], info["end"]
    rank, size = comm.Get_rank(), comm.Get_size()
    nominal = [lo + (hi - lo) * r // size for r in (rank, rank + 1)]
    with open(path, "rb") as f:
        a = _line_start_at_or_after(f, nominal[0], lo)
        b = _line_start_at_or_after(f, nominal[1], lo) if rank + 1 < size else hi
        b = max(a, min(b, hi))
        piece = _piece(b - a)
        f.seek(a)
        if f.readinto(memoryview(piece)[_ROOM:]) != b - a:
            raise ValueError("%s: the file became shorter while it was read" % path)
    return piece


def _line_cuts(data: bytes, size: int) -> list[int]:
    """``size + 1`` byte positions cutting ``data`` into line-aligned pieces."""
    cuts = [0]
    for r in range(1, size):
        pos = max(len(data) * r // size, cuts[-1])
        if 0 < pos < len(data) and data[pos - 1:pos] != b"\n":
            nl = data.find(b"\n", pos)
            pos = len(data) if nl < 0 else nl + 1
        cuts.append(pos)
    cuts.append(len(data))
    return cuts


def _scatter_compressed(path: str, comm: MPI.Comm):
    """Rank 0 decompresses ``path`` and scatters line-aligned pieces of its
    entries; returns ``(info, my piece)``. Collective on ``comm``."""
    size = comm.Get_size()
    data = None

    def read():
        nonlocal data
        with open(path, "rb") as raw, _decompressor(path)(raw) as f:
            text = f.read()
        info = _parse_header(_pyio.BytesIO(text), path)
        data = np.frombuffer(text, dtype=np.uint8)[info["offset"]:]
        cuts = _line_cuts(text[info["offset"]:], size)
        return info, np.diff(cuts).astype(np.int64)

    info, counts = _rank0(comm, path, read)
    mine = np.empty(int(counts[comm.Get_rank()]), dtype=np.uint8)
    displs = np.concatenate(([0], np.cumsum(counts)[:-1]))
    comm.Scatterv([data, counts, displs, MPI.BYTE] if comm.Get_rank() == 0 else None,
                  [mine, MPI.BYTE], root=0)
    return info, mine.tobytes()


def _columns(info: dict) -> tuple[int, int]:
    """(index columns, value columns) of a data line."""
    idx = 2 if info["format"] == "coordinate" else 0
    val = {"pattern": 0, "real": 1, "integer": 1, "complex": 2}[info["field"]]
    return idx, val


def _integer_data(info: dict) -> bool:
    return info["field"] in ("integer", "pattern") and info["format"] == "coordinate"


def _data_lines(chunk: bytes, first_line: int) -> np.ndarray:
    """File line numbers of the data lines of ``chunk`` (lines that are not
    blank and not ``%`` comments, as ``loadtxt`` counts them)."""
    lines = chunk.split(b"\n")
    return first_line + np.flatnonzero([bool(ln.split(b"%", 1)[0].strip()) for ln in lines])


def _what_columns(info: dict) -> str:
    idx, val = _columns(info)
    names = ["row", "column"][:idx] + {0: [], 1: ["value"], 2: ["real part", "imaginary part"]}[val]
    return "%d number%s (%s)" % (len(names), "" if len(names) == 1 else "s", ", ".join(names))


def _scan(chunk: bytes, info: dict, first_line: int, path: str) -> None:
    """Find the first malformed data line of ``chunk`` and raise a message
    naming it; called when the fast parse failed. Not collective."""
    idx, val = _columns(info)
    ints = _integer_data(info)
    for k, line in enumerate(chunk.split(b"\n")):
        words = line.split(b"%", 1)[0].split()
        if not words:
            continue
        lineno = first_line + k
        if len(words) != idx + val:
            raise _malformed(path, lineno, "malformed entry %s: a %s %s line holds %s, got %d"
                             % (_show(line), info["format"], info["field"], _what_columns(info),
                                len(words)))
        for j, w in enumerate(words):
            as_int = j < idx or ints
            try:
                x = int(w) if as_int else float(w)
            except ValueError:
                raise _malformed(path, lineno, "malformed entry %s: %s is not %s"
                                 % (_show(line), _show(w),
                                    "an integer" if as_int else "a number")) from None
            if as_int and not -2 ** 63 <= x < 2 ** 63:
                raise _malformed(path, lineno, "malformed entry %s: %s does not fit in 64 bits"
                                 % (_show(line), _show(w)))
    raise _malformed(path, first_line, "malformed entries on the lines from here: they "
                     "cannot be parsed as %s" % _what_columns(info))


def _parse(chunk: bytes, info: dict, first_line: int, path: str) -> np.ndarray:
    """The data lines of ``chunk`` as a (k, columns) array. Not collective."""
    idx, val = _columns(info)
    ncol = idx + val
    if not chunk.strip():
        return np.zeros((0, ncol))
    try:
        with warnings.catch_warnings():
            # a piece holding only comment lines is no data, not a warning
            warnings.simplefilter("ignore", UserWarning)
            data = np.loadtxt(_pyio.BytesIO(chunk), comments="%", ndmin=2,
                              dtype=np.int64 if _integer_data(info) else np.float64)
    except (ValueError, OverflowError):
        data = None
    if data is not None and data.shape[0] == 0:
        return np.zeros((0, ncol))
    if data is None or data.shape[1] != ncol:
        _scan(chunk, info, first_line, path)   # raises, naming the line
    return data


#: The fewest bytes of entries worth a scan block of their own.
_MIN_SCAN_BLOCK = 1 << 22


def _plain_count(piece: mmap.mmap, info: dict, threads: int) -> int:
    """The number of lines of the entries in ``piece`` if each is a plain
    entry line (see :func:`dmsolve._mmread_kernels.plain_lines`), else -1;
    scanned in line-aligned blocks on ``threads`` threads. Not collective."""
    idx, val = _columns(info)
    buf = np.frombuffer(piece, dtype=np.uint8, offset=_ROOM)
    integer = info["field"] == "integer"
    nblocks = max(1, min(threads, buf.size // _MIN_SCAN_BLOCK))
    if nblocks == 1:
        return plain_lines(buf, idx, val, integer)
    # each block starts at a line start: just after a newline
    cuts = [0]
    for k in range(1, nblocks):
        nl = piece.find(b"\n", _ROOM + max(buf.size * k // nblocks, cuts[-1]))
        cuts.append(buf.size if nl < 0 else nl + 1 - _ROOM)
    cuts.append(buf.size)
    blocks = [buf[a:b] for a, b in zip(cuts[:-1], cuts[1:])]
    counts = _threads.parallel_map(lambda k: plain_lines(blocks[k], idx, val, integer),
                                   nblocks, threads)
    # the job may wait in the pool's queue a little longer; it must not keep
    # the piece's memory exported (the piece is closed next)
    blocks.clear()
    return -1 if min(counts) < 0 else sum(counts)


def _header_for(info: dict, count: int) -> bytes:
    """A header of :data:`_ROOM` bytes for ``count`` lines of entries as they
    are stored (``general``: local_entries expands the triangle), padded
    with a comment line."""
    m, n = info["shape"]
    banner = b"%%%%MatrixMarket matrix %s %s general\n" % (info["format"].encode(),
                                                           info["field"].encode())
    sizes = (b"%d %d %d\n" % (m, n, count) if info["format"] == "coordinate"
             else b"%d 1\n" % count)
    return banner + b"%" + b" " * (_ROOM - len(banner) - len(sizes) - 2) + b"\n" + sizes


def _fast_entries(piece: mmap.mmap, info: dict, count: int, threads: int):
    """The entries of the ``count`` plain lines in ``piece`` as
    :func:`_check_entries` gives them, parsed on ``threads`` threads, or
    None if the parser refuses them or a check fails (then the checking
    parse names the line). Not collective."""
    if _fmm is None:
        return None
    piece[:_ROOM] = _header_for(info, count)
    piece.seek(0)
    try:
        if info["format"] == "coordinate":
            (vals, (rows, cols)), _ = _fmm.read_coo(piece, parallelism=threads,
                                                    generalize_symmetry=False)
            rows, cols = rows.astype(np.int64), cols.astype(np.int64)
        else:
            vals = _fmm.read_array(piece, parallelism=threads).ravel()
            rows = cols = np.zeros(count, dtype=np.int64)
    except Exception:  # noqa: BLE001 - the checking parse names what is wrong
        return None
    if vals.dtype.kind in "fc" and not np.isfinite(vals).all():
        return None
    if info["symmetry"] == "skew-symmetric" and info["format"] == "coordinate" and \
            ((rows == cols) & (vals != 0)).any():
        return None
    if info["field"] == "pattern":
        vals = np.ones(count)
    return rows, cols, vals


def _check_entries(data: np.ndarray, info: dict, chunk: bytes, first_line: int,
                   path: str):
    """Indices (0-based) and values of parsed lines, checked: integer
    indices in range, finite values. Not collective."""
    idx, _ = _columns(info)
    m, n = info["shape"]
    lines = None

    def bad(mask, what):
        nonlocal lines
        if lines is None:
            lines = _data_lines(chunk, first_line)
        i = int(np.flatnonzero(mask)[0])
        return _malformed(path, int(lines[i]), what(i))

    ij = data[:, :idx]
    if idx and ij.dtype != np.int64:
        frac = ij != np.round(ij)
        if frac.any():
            i, j = np.argwhere(frac)[0]
            raise bad(frac.any(axis=1), lambda _: "%s index %r is not an integer"
                      % (("row", "column")[j], float(ij[i, j])))
        big = np.abs(ij) >= 2.0 ** 62
        if big.any():
            raise bad(big.any(axis=1), lambda i: "index %g out of range" % np.abs(ij[i]).max())
        ij = ij.astype(np.int64)
    rows = cols = np.zeros(data.shape[0], dtype=np.int64)
    if idx:
        rows, cols = ij[:, 0], ij[:, 1]
        for name, a, hi in (("row", rows, m), ("column", cols, n)):
            out = (a < 1) | (a > hi)
            if out.any():
                raise bad(out, lambda i, a=a, name=name, hi=hi: "%s index %d out of range "
                          "[1, %d]" % (name, a[i], hi))
        rows, cols = rows - 1, cols - 1
    field = info["field"]
    if field == "pattern":
        vals = np.ones(data.shape[0])
    elif field == "complex":
        vals = data[:, idx] + 1j * data[:, idx + 1]
    elif field == "integer":
        vals = data[:, idx].astype(np.int64)
    else:
        vals = data[:, idx].astype(np.float64)
    if vals.dtype.kind in "fc":
        nonfinite = ~np.isfinite(vals)
        if nonfinite.any():
            raise bad(nonfinite, lambda i: "value %r is not finite" % (vals[i].item(),))
    if info["symmetry"] == "skew-symmetric" and idx:
        diag = (rows == cols) & (vals != 0)
        if diag.any():
            raise bad(diag, lambda i: "a skew-symmetric matrix has a zero diagonal, got "
                      "%r at row %d" % (vals[i].item(), rows[i] + 1))
    return rows, cols, vals


def local_entries(path: str, comm: MPI.Comm, info: dict):
    """This rank's share of the file as global 0-based (rows, cols, vals),
    the stored triangle expanded; ``info`` is the header (of a compressed
    file it is read again with the entries).

    Collective on ``comm`` (agrees on every read and parse error and on the
    entry count).
    """
    if _decompressor(path) is None:
        piece, exc = _piece(0), None
        try:
            piece = _read_my_lines(path, info, comm)
        except Exception as e:  # noqa: BLE001 - agreed below
            exc = _read_error(path, e)
        agree(comm, exc)
    else:
        info, chunk = _scatter_compressed(path, comm)
        piece = _piece_of(chunk)
        del chunk
    threads = _threads.get_num_threads()
    count = _plain_count(piece, info, threads)
    got = None if count < 0 else _fast_entries(piece, info, count, threads)
    # the bytes for the checking parse, when it runs
    chunk = piece[_ROOM:] if got is None else b""
    # the file line of this rank's first byte: pieces are line-aligned (the
    # last line of the file may lack its newline)
    ends_open = len(piece) > _ROOM and piece[-1:] != b"\n"
    piece.close()
    newlines = chunk.count(b"\n") if got is None else count - ends_open
    first_line = info["lines"] + 1 + (comm.exscan(newlines) or 0)
    exc = None
    rows = cols = np.zeros(0, dtype=np.int64)
    vals = np.zeros(0)
    try:
        if got is None:
            data = _parse(chunk, info, first_line, path)
            got = _check_entries(data, info, chunk, first_line, path)
        rows, cols, vals = got
    except Exception as e:  # noqa: BLE001 - agreed below
        exc = _read_error(path, e)
        rows = cols = np.zeros(0, dtype=np.int64)
        vals = np.zeros(0)
    agree(comm, exc)
    nloc = vals.size
    first = comm.exscan(nloc) or 0
    total = comm.allreduce(nloc)
    expected = info["entries"]
    if total != expected:
        agree(comm, ValueError("%s: the header announces %d entries, the file holds %d%s"
                               % (path, expected, total,
                                  " (truncated?)" if total < expected else "")))
    m, _ = info["shape"]
    if info["format"] == "array":
        rows, cols = _array_positions(first + np.arange(nloc, dtype=np.int64), m,
                                      info["symmetry"])
    sym = info["symmetry"]
    # expand the stored triangle
    if sym != "general":
        off = rows != cols
        mirror = vals[off]
        if sym == "skew-symmetric":
            mirror = -mirror
        elif sym == "hermitian":
            mirror = np.conj(mirror)
        rows, cols = np.concatenate((rows, cols[off])), np.concatenate((cols, rows[off]))
        vals = np.concatenate((vals, mirror))
    return rows, cols, vals


def _array_positions(k: np.ndarray, m: int, symmetry: str):
    """Row and column of the ``k``-th stored value of an array file (column-major)."""
    if symmetry == "general":
        return k % m, k // m
    # lower triangle (strictly lower for skew), column by column
    skew = symmetry == "skew-symmetric"
    lengths = np.arange(m, 0, -1) - (1 if skew else 0)
    starts = np.concatenate(([0], np.cumsum(lengths)))
    j = np.searchsorted(starts, k, side="right") - 1
    i = j + (k - starts[j]) + (1 if skew else 0)
    return i, j
