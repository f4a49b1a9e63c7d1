"""Matrix Market files for distributed matrices and vectors, read and written in parallel.

Who reads what
--------------
- Rank 0 reads and checks the header (banner, comments, size line) with its
  own scanner and ``scipy.io.mminfo``, and broadcasts the format, the
  shape and the byte offset where the entries begin.
- Every rank then reads one contiguous byte range of the entries (``1/p``
  of the data section, moved to line boundaries so that every line is read
  by exactly one rank) and parses it with ``numpy.loadtxt``. No rank holds
  more than its share of the file.
- Coordinate entries go to the owners of their rows with
  ``DistCSR.from_coo`` (one BSP superstep; duplicates are summed like
  ``scipy.io.mmread`` does); dense (``array``) entries know their position
  from an exclusive scan of line counts and are routed the same way.
- Symmetric, skew-symmetric and Hermitian files are expanded to the full
  matrix while parsing.
- Compressed files (``.gz``, ``.bz2``) cannot be split by bytes: rank 0
  reads them whole with ``scipy.io.mmread`` and the entries are routed from
  there.

Writing
-------
Every rank formats its own rows (``%.17g``, which round-trips float64
exactly) and all ranks write their bytes at offsets given by an exclusive
scan, with one collective MPI-IO ``Write_at_all``; rank 0 writes the header
first. The file is ``coordinate real general`` (``integer``/``complex`` for
those dtypes) for matrices and ``array`` for vectors, rows in global order.

Errors
------
A missing or unreadable file raises ``OSError`` and a malformed one
``ValueError``, the same on every rank.
"""

from __future__ import annotations

import io as _pyio
import os

import numpy as np
import scipy.io
import scipy.sparse as sp
from mpi4py import MPI

from ._errors import agree
from ._layout import Layout
from ._matrix import DistCSR
from ._vector import DistVector
from .partition import exchange

__all__ = ["read_matrix", "write_matrix", "read_vector", "write_vector", "mminfo"]

_FIELDS = ("real", "integer", "complex", "pattern")
_SYMMETRIES = ("general", "symmetric", "skew-symmetric", "hermitian")


# -- header ------------------------------------------------------------------------

def _read_header(path) -> dict:
    """Parse the banner and size line; return the info and the data offset."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        banner = f.readline()
        words = banner.decode("ascii", "replace").strip().lower().split()
        if len(words) != 5 or words[0] != "%%matrixmarket" or words[1] != "matrix":
            raise ValueError("%s is not a Matrix Market file (banner %r)"
                             % (path, banner[:80].decode("ascii", "replace")))
        fmt, field, symmetry = words[2:]
        if fmt not in ("coordinate", "array"):
            raise ValueError("%s: unknown Matrix Market format %r" % (path, fmt))
        if field not in _FIELDS or (fmt == "array" and field == "pattern"):
            raise ValueError("%s: unsupported field %r for format %r" % (path, field, fmt))
        if symmetry not in _SYMMETRIES:
            raise ValueError("%s: unknown symmetry %r" % (path, symmetry))
        while True:
            line = f.readline()
            if not line:
                raise ValueError("%s: no size line" % path)
            s = line.strip()
            if s and not s.startswith(b"%"):
                break
        try:
            sizes = [int(w) for w in s.split()]
        except ValueError:
            raise ValueError("%s: malformed size line %r" % (path, s[:80])) from None
        want = 3 if fmt == "coordinate" else 2
        if len(sizes) != want or min(sizes) < 0:
            raise ValueError("%s: size line %r should hold %d non-negative integers"
                             % (path, s[:80].decode("ascii", "replace"), want))
        offset = f.tell()
        f.seek(0, os.SEEK_END)
        end = f.tell()
    m, n = sizes[0], sizes[1]
    if symmetry != "general" and m != n:
        raise ValueError("%s: a %s matrix must be square, got %d x %d" % (path, symmetry, m, n))
    if fmt == "coordinate":
        entries = sizes[2]
    elif symmetry == "general":
        entries = m * n
    elif symmetry == "skew-symmetric":
        entries = n * (n - 1) // 2
    else:
        entries = n * (n + 1) // 2
    return {"format": fmt, "field": field, "symmetry": symmetry, "shape": (m, n),
            "entries": entries, "offset": offset, "end": end}


def _compressed(path) -> bool:
    return os.fspath(path).endswith((".gz", ".bz2"))


def _header_everywhere(path, comm: MPI.Comm) -> dict:
    """Rank 0 reads the header and broadcasts it. Collective on ``comm``."""
    info, exc = None, None
    if comm.Get_rank() == 0:
        try:
            if _compressed(path):
                rows, cols, entries, fmt, field, symmetry = scipy.io.mminfo(os.fspath(path))
                info = {"format": fmt, "field": field, "symmetry": symmetry,
                        "shape": (rows, cols), "entries": entries, "offset": 0, "end": 0}
            else:
                info = _read_header(path)
                scipy.io.mminfo(os.fspath(path))  # a second opinion on the banner
        except OSError as e:
            exc = OSError("cannot read Matrix Market file %s: %s" % (os.fspath(path), e))
        except (ValueError, TypeError, IndexError) as e:
            exc = ValueError(str(e) if os.fspath(path) in str(e)
                             else "%s: %s" % (os.fspath(path), e))
    agree(comm, exc)
    return comm.bcast(info, root=0)


def mminfo(path, comm: MPI.Comm) -> dict:
    """The header of a Matrix Market file, on every rank.

    Collective on ``comm``: rank 0 reads, then broadcasts.

    Returns
    -------
    dict
        ``format`` ("coordinate" or "array"), ``field``, ``symmetry``,
        ``shape`` and ``entries`` (stored entries).
    """
    info = _header_everywhere(path, comm)
    return {k: info[k] for k in ("format", "field", "symmetry", "shape", "entries")}


# -- parallel parsing ----------------------------------------------------------------

def _line_start_at_or_after(f, pos: int, lo: int) -> int:
    """The first line start at or after byte ``pos`` (``lo`` is a line start)."""
    if pos <= lo:
        return lo
    f.seek(pos - 1)
    f.readline()  # if byte pos-1 is a newline this consumes just it
    return f.tell()


def _read_my_lines(path, info: dict, comm: MPI.Comm) -> bytes:
    lo, hi = info["offset"], info["end"]
    rank, size = comm.Get_rank(), comm.Get_size()
    nominal = [lo + (hi - lo) * r // size for r in (rank, rank + 1)]
    with open(os.fspath(path), "rb") as f:
        a = _line_start_at_or_after(f, nominal[0], lo)
        b = _line_start_at_or_after(f, nominal[1], lo) if rank + 1 < size else hi
        b = max(a, min(b, hi))
        f.seek(a)
        return f.read(b - a)


def _columns(info: dict) -> int:
    idx = 2 if info["format"] == "coordinate" else 0
    val = {"pattern": 0, "real": 1, "integer": 1, "complex": 2}[info["field"]]
    return idx + val


def _parse(chunk: bytes, info: dict) -> np.ndarray:
    ncol = _columns(info)
    text = chunk.strip()
    if not text:
        return np.zeros((0, ncol))
    data = np.loadtxt(_pyio.BytesIO(chunk), comments="%", ndmin=2,
                      dtype=np.int64 if info["field"] in ("integer", "pattern")
                      and info["format"] == "coordinate" else np.float64)
    if data.shape[1] != ncol:
        raise ValueError("entries have %d columns, a %s %s file has %d"
                         % (data.shape[1], info["format"], info["field"], ncol))
    return data


def _values(data: np.ndarray, info: dict, first: int) -> np.ndarray:
    field = info["field"]
    if field == "pattern":
        return np.ones(data.shape[0])
    if field == "complex":
        return data[:, first] + 1j * data[:, first + 1]
    if field == "integer":
        return data[:, first].astype(np.int64)
    return data[:, first].astype(np.float64)


def _local_entries(path, info: dict, comm: MPI.Comm):
    """This rank's share of the file as global (rows, cols, vals), expanded.

    Collective on ``comm`` (agrees on parse errors and the entry count).
    """
    exc = None
    rows = cols = np.zeros(0, dtype=np.int64)
    vals = np.zeros(0)
    m, n = info["shape"]
    try:
        if _compressed(path):
            rows, cols, vals = _compressed_entries(path, info, comm.Get_rank())
        else:
            data = _parse(_read_my_lines(path, info, comm), info)
            if info["format"] == "coordinate":
                ij = data[:, :2]
                if ij.dtype != np.int64:
                    if not np.array_equal(ij, np.round(ij)):
                        raise ValueError("row and column indices must be integers")
                    ij = ij.astype(np.int64)
                rows, cols = ij[:, 0] - 1, ij[:, 1] - 1
                if rows.size and (rows.min() < 0 or rows.max() >= m
                                  or cols.min() < 0 or cols.max() >= n):
                    raise ValueError("an entry index lies outside the %d x %d matrix" % (m, n))
                vals = _values(data, info, 2)
            else:
                vals = _values(data, info, 0)
                rows = cols = np.zeros(vals.size, dtype=np.int64)
        nloc = vals.size
    except OSError as e:
        exc, nloc = OSError("cannot read %s: %s" % (os.fspath(path), e)), 0
    except ValueError as e:
        exc, nloc = ValueError("%s: malformed Matrix Market data: %s"
                               % (os.fspath(path), e)), 0
    agree(comm, exc)
    first = comm.exscan(nloc) or 0
    total = comm.allreduce(nloc)
    expected = info["entries"]
    if total != expected:
        agree(comm, ValueError("%s: the header announces %d entries, the file holds %d"
                               % (os.fspath(path), expected, total)))
    if info["format"] == "array" and not _compressed(path):
        rows, cols = _array_positions(first + np.arange(nloc, dtype=np.int64), m,
                                      info["symmetry"])
    # expand the stored triangle
    sym = info["symmetry"]
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


def _compressed_entries(path, info: dict, rank: int):
    if rank != 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    M = scipy.io.mmread(os.fspath(path))
    if sp.issparse(M):
        M = sp.coo_matrix(M)
        r, c, v = M.row.astype(np.int64), M.col.astype(np.int64), M.data
    else:
        M = np.asarray(M)
        r, c = (a.astype(np.int64).ravel(order="F") for a in np.indices(M.shape))
        v = M.ravel(order="F")
    if info["symmetry"] != "general":
        # scipy expanded the stored triangle; go back to it (the caller
        # expands again, and the header's entry count refers to it)
        keep = r > c if info["symmetry"] == "skew-symmetric" else r >= c
        r, c, v = r[keep], c[keep], v[keep]
    return r, c, v


# -- public readers ------------------------------------------------------------------

def read_matrix(path, comm: MPI.Comm, layout: Layout | None = None):
    """Read a Matrix Market matrix into a DistCSR.

    Collective on ``comm``. See the module docstring for who reads what.

    Parameters
    ----------
    path : str or os.PathLike
        The same path on every rank (a shared file system).
    comm : MPI.Comm
    layout : Layout, optional
        Row ownership; default contiguous blocks. For a square matrix the
        columns get the same layout.

    Returns
    -------
    DistCSR
        float64 (also for ``integer`` files, as DistCSR stores floating
        values), complex128 for ``complex`` files; ``pattern`` entries are 1.0. Duplicate entries are summed;
        explicit zeros of a ``coordinate`` file are kept, the zeros of an
        ``array`` (dense) file are not stored.

    Raises
    ------
    OSError
        On every rank, if the file cannot be read.
    ValueError
        On every rank, if it is not valid Matrix Market or ``layout`` does
        not fit its shape.
    """
    info = _header_everywhere(path, comm)
    m, n = info["shape"]
    agree(comm, ValueError("layout has %d rows, the file %d" % (layout.global_size, m))
          if layout is not None and layout.global_size != m else None)
    rows, cols, vals = _local_entries(path, info, comm)
    if info["format"] == "array":
        # a dense file becomes a sparse matrix: its zeros are not stored
        nz = vals != 0
        rows, cols, vals = rows[nz], cols[nz], vals[nz]
    return DistCSR.from_coo(rows, cols, vals, (m, n), comm, layout=layout)


def read_vector(path, comm: MPI.Comm, layout: Layout | None = None) -> DistVector:
    """Read a Matrix Market ``n x 1`` (or ``1 x n``) matrix into a DistVector.

    Collective on ``comm``; read like :func:`read_matrix`, then each value is
    sent to the owner of its index. Coordinate files may omit zeros.

    Parameters
    ----------
    path : str or os.PathLike
    comm : MPI.Comm
    layout : Layout, optional
        Default contiguous blocks.

    Returns
    -------
    DistVector
        int64 for ``integer`` files, complex128 for ``complex``, else float64.

    Raises
    ------
    OSError, ValueError
        On every rank, as for :func:`read_matrix`, and if the file is not a
        single row or column.
    """
    info = _header_everywhere(path, comm)
    m, n = info["shape"]
    exc = None
    if min(m, n) != 1 and not (m == 0 or n == 0):
        exc = ValueError("%s holds a %d x %d matrix, not a vector" % (os.fspath(path), m, n))
    agree(comm, exc)
    size = m * n
    if layout is None:
        layout = Layout.block(size, comm)
    agree(comm, ValueError("layout has %d entries, the file %d" % (layout.global_size, size))
          if layout.global_size != size else None)
    rows, cols, vals = _local_entries(path, info, comm)
    idx = rows if n == 1 else cols
    owners = layout.owner(idx) if idx.size else np.zeros(0, dtype=np.int64)
    dtypes = comm.allgather(vals.dtype.str)
    dtype = np.result_type(*[np.dtype(d) for d in dtypes])
    got_idx, got_vals = exchange(comm, owners, idx, vals.astype(dtype))
    out = np.zeros(layout.local_size, dtype=dtype)
    np.add.at(out, got_idx - layout.start, got_vals)
    return DistVector(layout, out)


# -- writers ----------------------------------------------------------------------

def _field_of(dtype) -> str:
    kind = np.dtype(dtype).kind
    if kind == "c":
        return "complex"
    if kind in "iub":
        return "integer"
    return "real"


def _format_values(v: np.ndarray, field: str) -> list[np.ndarray]:
    if field == "complex":
        return [v.real, v.imag]
    return [v]


def _format_lines(columns: list[np.ndarray], fmts: list[str]) -> bytes:
    if not columns or columns[0].size == 0:
        return b""
    buf = _pyio.BytesIO()
    np.savetxt(buf, np.column_stack(columns), fmt=" ".join(fmts))
    return buf.getvalue()


def _write_parallel(path, comm: MPI.Comm, header: bytes, body: bytes) -> None:
    """Rank 0's header, then every rank's body in rank order. Collective."""
    mine = (header if comm.Get_rank() == 0 else b"") + body
    nbytes = len(mine)
    offset = comm.exscan(nbytes) or 0
    exc, fh = None, None
    try:
        fh = MPI.File.Open(comm, os.fspath(path), MPI.MODE_WRONLY | MPI.MODE_CREATE)
    except MPI.Exception as e:
        exc = OSError("cannot open %s for writing: %s" % (os.fspath(path), e.Get_error_string()))
    # MPI_File_open is collective and fails on all ranks together
    agree(comm, exc)
    try:
        fh.Set_size(0)
        fh.Write_at_all(offset, np.frombuffer(mine, dtype=np.uint8) if mine
                        else np.zeros(0, dtype=np.uint8))
    finally:
        fh.Close()


def write_matrix(path, A, comment: str = "") -> None:
    """Write a DistCSR as a ``coordinate general`` Matrix Market file.

    Collective on ``A.comm``; each rank writes its own rows (see the module
    docstring). Explicitly stored zeros are written too.

    Parameters
    ----------
    path : str or os.PathLike
        The same path on every rank.
    A : DistCSR
    comment : str, optional
        Put after the banner (each line prefixed with ``%``).

    Raises
    ------
    OSError
        On every rank, if the file cannot be created.
    """
    field = _field_of(A.dtype)
    local = sp.coo_matrix(A.local_rows())
    order = np.lexsort((local.col, local.row))
    r = local.row[order].astype(np.int64) + A.row_layout.start + 1
    c = local.col[order].astype(np.int64) + 1
    v = local.data[order]
    nnz = A.global_nnz()
    fmts = ["%d", "%d"] + (["%d"] if field == "integer" else
                           ["%.17g"] * (2 if field == "complex" else 1))
    body = _format_lines([r, c] + _format_values(v, field), fmts)
    m, n = A.shape
    header = _header_text("coordinate", field, comment) + b"%d %d %d\n" % (m, n, nnz)
    _write_parallel(path, A.comm, header, body)


def write_vector(path, x: DistVector, comment: str = "") -> None:
    """Write a DistVector as an ``array general`` ``n x 1`` Matrix Market file.

    Collective on ``x.comm``; each rank writes its own entries.

    Raises
    ------
    OSError
        On every rank, if the file cannot be created.
    """
    field = _field_of(x.dtype)
    fmts = ["%d"] if field == "integer" else ["%.17g"] * (2 if field == "complex" else 1)
    body = _format_lines(_format_values(x.local, field), fmts)
    header = _header_text("array", field, comment) + b"%d 1\n" % x.global_size
    _write_parallel(path, x.comm, header, body)


def _header_text(fmt: str, field: str, comment: str) -> bytes:
    lines = ["%%%%MatrixMarket matrix %s %s general" % (fmt, field)]
    lines += ["%" + line for line in comment.splitlines()] if comment else []
    return ("\n".join(lines) + "\n").encode("ascii")
