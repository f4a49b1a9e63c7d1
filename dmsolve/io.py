"""Matrix Market files for distributed matrices and vectors, read and written in parallel.

Who reads what
--------------
- Rank 0 reads and checks the header (banner, comments, size line) with its
  own scanner and broadcasts the format, the shape, the byte offset where
  the entries begin and the number of header lines.
- Every rank then reads one contiguous byte range of the entries (``1/p``
  of the data section, moved to line boundaries so that every line is read
  by exactly one rank) and parses it: with ``fast_matrix_market`` (the
  parser of ``scipy.io.mmread``) when every line of the range is a plain
  entry line, else with ``numpy.loadtxt`` and a line-by-line scan that
  names the offending line. No rank holds more than its share of the file.
  A rank with threads (:mod:`dmsolve.threads`) scans and parses on them.
- Coordinate entries go to the owners of their rows in one exchange
  (:func:`dmsolve.partition.exchange`; skipped when every rank read only
  its own rows, as at 1 rank); each owner sums duplicates like
  ``scipy.io.mmread`` followed by ``tocsr()`` does. Dense (``array``)
  entries know their position from an exclusive scan of line counts and
  are routed the same way.
- Symmetric, skew-symmetric and Hermitian files are expanded to the full
  matrix while parsing.
- Compressed files (``.gz``, ``.bz2``, ``.xz``) cannot be split by bytes:
  rank 0 decompresses the whole file in memory (the one copy of global
  size, transient) and scatters line-aligned pieces of its entries, which
  every rank then parses as above.

Writing
-------
Rank 0 first checks that the path can be written (before anything is
formatted). Every rank formats its own rows (``%.17g``, which round-trips
float64 exactly) and all ranks write their bytes at offsets given by an
exclusive scan, with one collective MPI-IO ``Write_at_all``; rank 0 writes the
header first. The file is ``coordinate real general`` (``integer``/``complex``
for those dtypes) for matrices and ``array`` for vectors, rows in global order.
The bytes go to a temporary beside the file (``name.tmp``) that rank 0 moves
into place when every rank is done: a failed write (a full disk) leaves the
previous file as it was and removes the temporary.

Errors
------
Every failure on any rank is agreed on, so every rank raises the same
exception: a missing or unreadable file (or one that cannot be written)
raises ``OSError`` naming the path; a malformed one, a corrupt or truncated
compressed stream included, raises ``ValueError`` naming the file and the
line (``A.mtx line 1234: row index 5001 out of range [1, 5000]``).
"""

from __future__ import annotations

import io as _pyio
import os

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from ._atomic import atomic_path, commit_temporary, discard, temporary_path
from ._errors import agree
from ._coo_files import COO_RECORD, write_coo_file
from ._layout import Layout
from ._matrix import DistCSR
from ._mmread import local_entries, read_header
from ._vector import DistVector
from .partition import exchange
from .validate import agreed

__all__ = ["read_matrix", "write_matrix", "read_vector", "write_vector", "write_npy", "mminfo",
           "check_writable", "COO_RECORD", "write_coo", "atomic_path", "temporary_path",
           "commit_temporary", "discard"]


# -- arguments ------------------------------------------------------------------------

def _check_path(path, name: str = "path") -> str:
    """``path`` as a non-empty string. Not collective."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError("%s must be a path (str or os.PathLike), got %s"
                        % (name, type(path).__name__))
    path = os.fspath(path)
    if not isinstance(path, str):
        raise TypeError("%s must be a str path, got %s" % (name, type(path).__name__))
    if not path:
        raise ValueError("%s must be a non-empty path" % name)
    return path


def _check_comm(comm) -> None:
    if not isinstance(comm, MPI.Comm):
        raise TypeError("comm must be an mpi4py MPI.Comm, got %s" % type(comm).__name__)


def _check_layout(layout, size: int | None, what: str) -> None:
    """A Layout (or None) of ``size`` entries (any size when None). Not collective."""
    if layout is None:
        return
    if not isinstance(layout, Layout):
        raise TypeError("layout must be a dmsolve.Layout or None, got %s"
                        % type(layout).__name__)
    if size is not None and layout.global_size != size:
        raise ValueError("layout has %d %s, the file %d" % (layout.global_size, what, size))


def mminfo(path, comm: MPI.Comm) -> dict:
    """The header of a Matrix Market file, on every rank.

    Collective on ``comm``: rank 0 reads (for a compressed file, only as
    much as the header needs), then broadcasts.

    Returns
    -------
    dict
        ``format`` ("coordinate" or "array"), ``field``, ``symmetry``,
        ``shape`` and ``entries`` (stored entries).

    Raises
    ------
    OSError, ValueError
        On every rank, as for :func:`read_matrix`.
    """
    _check_comm(comm)
    with agreed(comm):
        path = _check_path(path)
    info = read_header(comm, path)
    return {k: info[k] for k in ("format", "field", "symmetry", "shape", "entries")}


# -- public readers ------------------------------------------------------------------

def read_matrix(path, comm: MPI.Comm, layout: Layout | None = None):
    """Read a Matrix Market matrix into a DistCSR.

    Collective on ``comm``. See the module docstring for who reads what.

    Parameters
    ----------
    path : str or os.PathLike
        The same path on every rank (a shared file system). A name ending in
        ``.gz``, ``.bz2`` or ``.xz`` is decompressed (on rank 0).
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
        On every rank, if it is not valid Matrix Market (the message names
        the file and line: a malformed entry, an index out of range, a
        value that is not finite, a corrupt or truncated compressed stream,
        fewer or more entries than the header announces) or ``layout`` does
        not fit its shape.
    TypeError
        On every rank, if ``path``, ``comm`` or ``layout`` has the wrong type.
    """
    _check_comm(comm)
    with agreed(comm):
        path = _check_path(path)
        _check_layout(layout, None, "rows")
    info = read_header(comm, path)
    m, n = info["shape"]
    with agreed(comm):
        _check_layout(layout, m, "rows")
    rows, cols, vals = local_entries(path, comm, info)
    if info["format"] == "array":
        # a dense file becomes a sparse matrix: its zeros are not stored
        nz = vals != 0
        rows, cols, vals = rows[nz], cols[nz], vals[nz]
    return _to_owners(rows, cols, vals, info, comm, layout)


def _to_owners(rows, cols, vals, info: dict, comm: MPI.Comm, layout: Layout | None):
    """The DistCSR of the entries every rank read: each entry is sent to the
    owner of its row, which sums duplicates as scipy's COO to CSR conversion
    does. Collective on ``comm``.

    The entries are checked (indices in range, values finite: the rows are
    not checked again) and of one type on every rank, so the plain exchange of
    :func:`dmsolve.partition.exchange` does: the combining superstep of
    :meth:`DistCSR.from_coo` pays for sorting keys that a file rarely repeats.
    """
    m, n = info["shape"]
    # the same ranges on every rank before routing by them
    layout = Layout.block(m, comm)._trusted() if layout is None else layout.verify()
    vals = vals.astype(np.complex128 if info["field"] == "complex" else np.float64,
                       copy=False)
    start, stop = layout.owned_range
    foreign = rows.size > 0 and bool(rows.min() < start or rows.max() >= stop)
    # one rank, or a file whose pieces hold their readers' rows: nothing to send
    if comm.allreduce(foreign, op=MPI.LOR):
        rows, cols, vals = exchange(comm, layout.owner(rows), rows, cols, vals)
    local = _local_csr(rows - start if start else rows, cols, vals, (layout.local_size, n))
    return DistCSR.from_local_rows(local, layout, check_finite=False)


def _local_csr(rows, cols, vals, shape) -> sp.csr_matrix:
    """The CSR matrix of triplets with local rows, duplicates not yet summed.
    Rows in order, as a file written row by row gives them, need no sort.
    Not collective."""
    if rows.size == 0 or bool(np.all(rows[1:] >= rows[:-1])):
        indptr = np.searchsorted(rows, np.arange(shape[0] + 1))
        return sp.csr_matrix((vals, cols, indptr), shape=shape)
    return sp.csr_matrix((vals, (rows, cols)), shape=shape)


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
    OSError, ValueError, TypeError
        On every rank, as for :func:`read_matrix`, and if the file is not a
        single row or column.
    """
    _check_comm(comm)
    with agreed(comm):
        path = _check_path(path)
        _check_layout(layout, None, "entries")
    info = read_header(comm, path)
    m, n = info["shape"]
    with agreed(comm):
        if min(m, n) != 1 and not (m == 0 or n == 0):
            raise ValueError("%s holds a %d x %d matrix, not a vector" % (path, m, n))
        _check_layout(layout, m * n, "entries")
    if layout is None:
        layout = Layout.block(m * n, comm)
    rows, cols, vals = local_entries(path, comm, info)
    idx = rows if n == 1 else cols
    owners = layout.owner(idx) if idx.size else np.zeros(0, dtype=np.int64)
    dtypes = comm.allgather(vals.dtype.str)
    dtype = np.result_type(*[np.dtype(d) for d in dtypes])
    got_idx, got_vals = exchange(comm, owners, idx, vals.astype(dtype))
    out = np.zeros(layout.local_size, dtype=dtype)
    np.add.at(out, got_idx - layout.start, got_vals)
    return DistVector(layout, out)


# -- writers ----------------------------------------------------------------------

def check_writable(path, comm: MPI.Comm, name: str = "path") -> str:
    """Check on rank 0 that a file can be written at ``path``, without
    changing anything; return the path as a string.

    An existing file is opened for appending and closed (its contents and
    time stamps stay as they were); a new one is created and removed again.
    Every writer of dmsolve and topology calls it before it formats any
    data, and a driver can call it before a long computation whose result
    it will write.

    Collective on ``comm`` (rank 0 checks, then broadcasts the verdict).

    Raises
    ------
    TypeError
        On every rank, if ``path`` is not a str or os.PathLike.
    ValueError
        On every rank, if ``path`` is empty.
    OSError
        On every rank, if the file cannot be written (a missing directory,
        a directory at ``path``, no permission, a read-only file system);
        the message names ``name`` and the path.
    """
    _check_comm(comm)
    with agreed(comm):
        path = _check_path(path, name)
    exc = None
    if comm.Get_rank() == 0:
        try:
            if os.path.isdir(path):
                raise IsADirectoryError(21, "Is a directory")
            if os.path.exists(path):
                with open(path, "ab"):
                    pass
            else:
                with open(path, "xb"):
                    pass
                os.remove(path)
        except OSError as e:
            exc = OSError("cannot open %s %r for writing: %s" % (name, path, e.strerror or e))
    agree(comm, exc)
    return path


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


def _mpi_error(path: str, what: str, e: MPI.Exception) -> OSError:
    """A short OSError for an MPI-IO failure (the error class, not the stack)."""
    try:
        reason = MPI.Get_error_string(e.Get_error_class())
    except Exception:  # noqa: BLE001 - an error string is a nicety
        reason = "MPI error class %d" % e.Get_error_class()
    return OSError("cannot %s %s: %s" % (what, path, reason.strip()))


def _write_parallel(path: str, comm: MPI.Comm, header: bytes, body: bytes) -> None:
    """Rank 0's header, then every rank's body in rank order, into a
    temporary (:func:`temporary_path`) that rank 0 moves onto ``path`` once
    every rank's write is done: a failed write leaves ``path`` as it was and
    no temporary. Collective.

    Each MPI-IO call is collective and its failure is agreed on before the
    next one, so every rank raises the same OSError and none waits.
    """
    rank0 = comm.Get_rank() == 0
    tmp = comm.bcast(temporary_path(path) if rank0 else None, root=0)
    if tmp is None:         # a device or a pipe: written in place
        _write_file(path, path, comm, header, body)
        return
    try:
        _write_file(path, tmp, comm, header, body)
    except BaseException:
        if rank0:           # every rank has closed the file: failures are agreed
            discard(tmp)
        raise
    exc = None
    if rank0:
        try:
            commit_temporary(tmp)
        except OSError as e:
            discard(tmp)
            exc = OSError("cannot write %s: %s" % (path, e.strerror or e))
    agree(comm, exc)


def _write_file(path: str, tmp: str, comm: MPI.Comm, header: bytes, body: bytes) -> None:
    # _write_parallel's writes, into tmp; errors name path, the user's file
    mine = (header if comm.Get_rank() == 0 else b"") + body
    offset = comm.exscan(len(mine)) or 0
    exc, fh = None, None
    try:
        fh = MPI.File.Open(comm, tmp, MPI.MODE_WRONLY | MPI.MODE_CREATE)
    except MPI.Exception as e:
        exc = _mpi_error(path, "open", e)
    agree(comm, exc)
    try:
        for what, step in (("truncate", lambda: fh.Set_size(0)),
                           ("write", lambda: fh.Write_at_all(
                               offset, np.frombuffer(mine, dtype=np.uint8) if mine
                               else np.zeros(0, dtype=np.uint8)))):
            exc = None
            try:
                step()
            except MPI.Exception as e:
                exc = _mpi_error(path, what, e)
            agree(comm, exc)
    finally:
        exc = None
        try:
            fh.Close()
        except MPI.Exception as e:
            exc = _mpi_error(path, "close", e)
    agree(comm, exc)


def _check_comment(comment) -> str:
    if not isinstance(comment, str):
        raise TypeError("comment must be a str, got %s" % type(comment).__name__)
    try:
        comment.encode("ascii")
    except UnicodeEncodeError:
        raise ValueError("comment must be ASCII text (Matrix Market files are ASCII)") from None
    return comment


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
    TypeError
        If ``A`` is not a DistCSR; on every rank, if ``path`` or ``comment``
        has the wrong type.
    OSError
        On every rank, if the file cannot be created or written (checked on
        rank 0 before anything is formatted, see :func:`check_writable`).
    """
    if not isinstance(A, DistCSR):
        raise TypeError("A must be a DistCSR, got %s" % type(A).__name__)
    with agreed(A.comm):
        comment = _check_comment(comment)
    path = check_writable(path, A.comm)
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
    TypeError
        If ``x`` is not a DistVector; on every rank, if ``path`` or
        ``comment`` has the wrong type.
    OSError
        On every rank, if the file cannot be created or written (checked
        before anything is formatted).
    """
    if not isinstance(x, DistVector):
        raise TypeError("x must be a DistVector, got %s" % type(x).__name__)
    with agreed(x.comm):
        comment = _check_comment(comment)
    path = check_writable(path, x.comm)
    field = _field_of(x.dtype)
    fmts = ["%d"] if field == "integer" else ["%.17g"] * (2 if field == "complex" else 1)
    body = _format_lines(_format_values(x.local, field), fmts)
    header = _header_text("array", field, comment) + b"%d 1\n" % x.global_size
    _write_parallel(path, x.comm, header, body)


def write_npy(path, x: DistVector) -> None:
    """Write a DistVector as a ``.npy`` file, the bytes ``numpy.save`` writes
    for the gathered vector, each rank writing its own entries: no rank
    holds more than its share.

    Collective on ``x.comm``. Rank 0 writes numpy's header (format 1.0, the
    vector's dtype in little-endian order, shape ``(n,)``) and every rank its
    entries at their offset, into a temporary moved onto ``path`` when every
    rank is done (:func:`write_vector`'s parallel write).

    Raises
    ------
    TypeError
        If ``x`` is not a DistVector; on every rank, if ``path`` has the
        wrong type.
    OSError
        On every rank, if the file cannot be created or written (checked
        before anything is written).
    """
    if not isinstance(x, DistVector):
        raise TypeError("x must be a DistVector, got %s" % type(x).__name__)
    path = check_writable(path, x.comm)
    dtype = x.dtype.newbyteorder("<")
    header = _pyio.BytesIO()
    np.lib.format.write_array_header_1_0(header, {
        "descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
        "shape": (x.global_size,)})
    body = np.ascontiguousarray(x.local, dtype=dtype).tobytes()
    _write_parallel(path, x.comm, header.getvalue(), body)


def _header_text(fmt: str, field: str, comment: str) -> bytes:
    lines = ["%%%%MatrixMarket matrix %s %s general" % (fmt, field)]
    lines += ["%" + line for line in comment.splitlines()] if comment else []
    return ("\n".join(lines) + "\n").encode("ascii")


def write_coo(path, rows, cols, vals, *, append: bool = False) -> int:
    """Write (or append) triplets to a binary COO file of :data:`COO_RECORD`
    records (int64 row, int64 column, float64 value, little-endian), the
    input of :meth:`DistCSR.from_coo_files`. Returns the number of records.

    Not collective: every rank may write its own file, or one file in turns.
    Raises ``ValueError`` if the three arrays are not 1-D of equal length.
    """
    return write_coo_file(path, rows, cols, vals, append=append)
