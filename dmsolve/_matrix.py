"""Distributed CSR matrices: row blocks split into on- and off-process parts.

Each rank owns a contiguous block of rows, stored as two scipy CSR blocks
as in PETSc's MPIAIJ: ``diag`` holds the columns this rank also owns (in
local numbering) and ``offd`` the others, whose columns are compressed to the
sorted list of ``ghosts`` (global column ids) fetched by a halo exchange.

Entries are stored as float64, or complex128 when any rank's input is
complex; products take real or complex vectors either way.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from ._assembly import coo_rows, global_rows, local_rows
from ._coo_files import coo_file_rows
from ._interop import allgatherv, csc_add, csr_add
from ._layout import Layout, verify_layouts
from ._local_blocks import CompressedRows, canonical_csr, check_format, csr_product
from ._sell import product_block
from ._vector import DistVector
from .bsp import NeighborExchange
from .threads import resolve

__all__ = ["DistCSR", "CompressedRows", "keys_of"]

_REAL = np.dtype(np.float64)
_SINGLE = np.dtype(np.float32)
_COMPLEX = np.dtype(np.complex128)


class DistCSR:
    """A distributed sparse matrix in compressed sparse row form.

    Build one with :meth:`from_local_rows`, :meth:`from_coo` or
    :meth:`from_global` rather than calling the constructor.

    Parameters
    ----------
    diag : scipy.sparse.csr_matrix, shape (local rows, local columns)
        Entries whose columns this rank owns in ``col_layout``, columns in
        local numbering.
    offd : scipy.sparse.csr_matrix, shape (local rows, len(ghosts))
        The other entries, columns numbered by position in ``ghosts``.
    ghosts : int64 array
        Sorted global ids of the columns referenced by ``offd``.
    row_layout, col_layout : Layout
        Ownership of rows and of columns (of the vectors ``x`` in ``A @ x``).

    Notes
    -----
    The constructor is collective on ``row_layout.comm``: one small
    ``allreduce`` checks that both layouts hold the same ranges on every rank
    (:meth:`Layout.verify`) and agrees on the stored dtype, then the halo
    exchange (:attr:`halo`) is planned. Entries are stored as float64, or
    as complex128 if any rank's entries are complex (bool and integer
    entries become float64, float32 float64, complex64 complex128).

    :meth:`matvec` and :meth:`rmatvec` are collective among neighbouring
    ranks and allocate nothing when ``out`` is given (after a first product
    with an operand of another dtype, which builds that dtype's buffers).

    ``local_format`` chooses the kernels of the products on the ``diag``
    block: ``"auto"`` (default) multiplies a real block in sliced ELL with
    run slots (:mod:`dmsolve._sell`, SELL-C-sigma as PETSc's MATSELL) when
    it holds at most 1.1x CSR's bytes and else (from 256 rows) in CSR with
    narrow column indices (:mod:`dmsolve._narrow`: 16 bits for at most 65536
    columns, scipy's sums in scipy's order), ``"sell"`` in sliced ELL whenever
    the block is real, ``"narrow"`` in narrow CSR whenever the block is real,
    ``"csr"`` with scipy's CSR kernels. The sliced ELL or narrow copy is built
    from ``diag`` on the first product (per rank, not collective); ``diag``
    stays the CSR every other use reads. After changing ``diag``'s entries
    in place, call :meth:`set_local_format` to rebuild it (:meth:`scale`
    does).
    A real matrix times a complex vector is complex, and so is a complex
    matrix times a real vector; the vector's dtype must be the same on every
    rank. Products run on the rank's threads (:mod:`dmsolve.threads`), with
    the same bits at any thread count.

    Raises
    ------
    ValueError
        On every rank, if a layout's ranges differ between ranks.
    TypeError
        On every rank, if some rank's entries are not numeric.
    """

    def __init__(self, diag, offd, ghosts, row_layout: Layout, col_layout: Layout,
                 local_format: str = "auto", single: bool = False):
        check_format(local_format)
        diag, offd = sp.csr_matrix(diag), sp.csr_matrix(offd)
        kinds = {diag.dtype.kind, offd.dtype.kind}
        # one allreduce: the layouts' ranges, "some rank is complex", "some
        # rank is not numeric" (every rank must store the same dtype, or the
        # halo's messages would not match)
        cplx, bad = verify_layouts([row_layout, col_layout],
                                   flags=("c" in kinds, not kinds <= set("biufc")),
                                   names=("row_layout", "col_layout"))
        if bad:
            raise TypeError("matrix entries must be numeric (bool, integer, real or complex); "
                            "some rank passed another dtype")
        if single and cplx:
            raise TypeError("single precision storage is for real matrices; some rank's "
                            "entries are complex")
        dtype = _COMPLEX if cplx else (_SINGLE if single else _REAL)
        self.row_layout = row_layout
        self.col_layout = col_layout
        self._dtype = np.dtype(dtype)
        self._diag = canonical_csr(diag, dtype)
        self.offd = canonical_csr(offd, dtype)
        self.ghosts = np.asarray(ghosts, dtype=np.int64)
        self.halo = NeighborExchange.from_ghosts(col_layout, self.ghosts, dtype=dtype)
        # per work dtype: operand copies, ghost contributions, offd row products
        self._buffers: dict = {}
        self._offd_c: dict = {}
        self.local_format = local_format
        self._sell = False          # not chosen yet; None: CSR
        #: canonical keys of this rank's rows (int64), or None for their global
        #: ids: what :func:`dmsolve.partition.redistribute` moved them from,
        #: the order reproducible products sum in (:mod:`dmsolve._repro`)
        self.origin = None
        self._canonical = None      # dmsolve._repro.canonical(self), once built

    def set_local_format(self, local_format: str | None = None) -> None:
        """Multiply the ``diag`` block in ``local_format`` (``"auto"``,
        ``"sell"`` or ``"csr"``; None keeps the current one) from the next
        product on, rebuilding its sliced ELL copy from ``diag`` (call it after
        changing ``diag``'s entries in place). Not collective: each rank
        chooses for its own block.

        Raises
        ------
        ValueError
            An unknown format.
        """
        if local_format is not None:
            check_format(local_format)
            self.local_format = local_format
        if self._diag is None:
            self._diag = self._sell.to_csr()     # a compact copy: its CSR back first
        self._sell = False
        self._canonical = None      # the reproducible products' copy, rebuilt on use

    @property
    def product_format(self) -> str:
        """The format this rank's products use on ``diag``: ``"sell"``,
        ``"narrow"`` or ``"csr"`` (chooses it now if no product has yet). Not
        collective."""
        s = self._sell_block()
        return "csr" if s is None else s.name

    @property
    def product_nbytes(self) -> int:
        """Bytes of the arrays this rank's products read for ``diag``: its
        sliced ELL or narrow copy, or its CSR arrays (chooses the format now if no
        product has yet). Not collective."""
        s = self._sell_block()
        d = self.diag
        return int(s.nbytes if s is not None
                   else d.data.nbytes + d.indices.nbytes + d.indptr.nbytes)

    def _sell_block(self):
        s = self._sell
        if s is False:
            s = self._sell = product_block(self.diag, self.local_format)
        return s

    # -- constructors ----------------------------------------------------------------
    @classmethod
    def from_local_rows(cls, local, row_layout: Layout, col_layout: Layout | None = None,
                        check_finite: bool = True) -> "DistCSR":
        """Build from this rank's rows given with global column indices.

        Parameters
        ----------
        local : scipy sparse matrix, shape (row_layout.local_size, N)
            This rank's rows; column indices are global.
        row_layout : Layout
            Ownership of the rows.
        col_layout : Layout, optional
            Ownership of the columns. Defaults to ``row_layout`` when ``N``
            equals the number of rows, else to a block layout of ``N``.
        check_finite : bool
            Refuse NaN and infinite entries.

        Collective on ``row_layout.comm``. Raises the same ``ValueError`` /
        ``TypeError`` on every rank if any rank's input is wrong, or if a
        layout's ranges differ between ranks. Entries are stored as float64
        (complex128 if any rank's are complex).
        """
        held = [local]
        del local                   # local_rows lets it go once it has converted it
        return cls(*local_rows(held, row_layout, col_layout, check_finite))

    @classmethod
    def from_global(cls, A, comm: MPI.Comm, layout: Layout | None = None,
                    col_layout: Layout | None = None) -> "DistCSR":
        """Keep this rank's rows of a global matrix given on every rank.

        Collective on ``comm``. ``layout`` defaults to a block layout of the rows.
        Entries are stored as float64 (complex128 for a complex ``A``).

        Examples
        --------
        A scipy matrix known to every rank, distributed by blocks of rows; its
        product with a vector equals scipy's:

        >>> import numpy as np
        >>> import scipy.sparse as sp
        >>> from mpi4py import MPI
        >>> from dmsolve import DistCSR, DistVector
        >>> S = sp.random(50, 50, density=0.1, random_state=1, format="csr") + sp.eye(50)
        >>> A = DistCSR.from_global(S, MPI.COMM_WORLD)
        >>> x = np.linspace(0.0, 1.0, 50)
        >>> y = A @ DistVector.from_global(x, A.col_layout)
        >>> bool(np.allclose(y.gather(), S @ x))
        True
        """
        return cls(*global_rows(A, comm, layout, col_layout))

    @classmethod
    def from_coo(cls, rows, cols, vals, shape, comm: MPI.Comm, *, layout: Layout | None = None,
                 col_layout: Layout | None = None, mode: str = "add",
                 check_finite: bool = True) -> "DistCSR":
        """Assemble from ``(row, col, value)`` triplets contributed by any rank.

        Any rank may contribute to any row, also to rows another rank owns
        (like PETSc's stash). Triplets are routed to the owner of their row
        through one BSP superstep with a combiner: duplicates are summed
        (``mode="add"``) or the last one wins (``mode="insert"``; "last" in
        the order of source rank, then position), both locally before
        sending and at the owner.

        Parameters
        ----------
        rows, cols : int arrays
            Global indices, ``0 <= rows < shape[0]``, ``0 <= cols < shape[1]``.
        vals : array
            Values, same length.
        shape : (int, int)
            Global shape; must be the same on every rank.
        comm : MPI.Comm
        layout, col_layout : Layout, optional
            Row and column ownership (block layouts by default; for a square
            matrix the column layout defaults to the row layout). Keyword
            only, as are the options after them.
        mode : {"add", "insert"}
        check_finite : bool
            Refuse NaN and infinite values.

        Collective on ``comm``. Bad indices or values on any rank raise the
        same ``ValueError``/``TypeError`` on every rank. Values are stored as
        float64 (complex128 if any rank's are complex).

        Examples
        --------
        The 1-D Laplacian of 10 rows, every triplet given by rank 0 (the
        other ranks give none); the duplicates on the diagonal are summed:

        >>> import numpy as np
        >>> from mpi4py import MPI
        >>> from dmsolve import DistCSR, DistVector
        >>> comm = MPI.COMM_WORLD
        >>> n = 10
        >>> i = np.arange(n) if comm.rank == 0 else np.zeros(0, np.int64)
        >>> rows = np.concatenate((i, i, i[1:], i[:-1]))
        >>> cols = np.concatenate((i, i, i[:-1], i[1:]))
        >>> vals = np.concatenate((np.ones(2 * i.size), -np.ones(2 * max(i.size - 1, 0))))
        >>> A = DistCSR.from_coo(rows, cols, vals, (n, n), comm)
        >>> A.shape, A.global_nnz()
        ((10, 10), 28)
        >>> y = A @ DistVector.full(A.col_layout, 1.0)
        >>> y.gather()
        array([1., 0., 0., 0., 0., 0., 0., 0., 0., 1.])
        """
        triplets = [rows, cols, vals]
        del rows, cols, vals        # coo_rows lets them go once it has converted them
        return cls(*coo_rows(triplets, shape, comm, layout=layout,
                             col_layout=col_layout, mode=mode,
                             check_finite=check_finite))

    @classmethod
    def from_coo_files(cls, paths, shape, comm: MPI.Comm, layout: Layout | None = None,
                       col_layout: Layout | None = None, *, memory_budget=None,
                       spill_dir=None, virtual: int | None = None, check_finite: bool = True,
                       ledger=None) -> "DistCSR":
        """Assemble from COO triplet files that may be larger than memory.

        The files hold :data:`dmsolve.io.COO_RECORD` records (little-endian
        int64 row, int64 column, float64 value; :func:`dmsolve.io.write_coo`
        writes them), any number of files in any order; duplicates are
        summed, as ``from_coo(..., mode="add")`` does with the same triplets.

        An external-memory GROUP BY on virtual processors
        (:class:`dmsolve.bsp.VirtualBSP`): every rank reads an equal share of
        the records in chunks, sums equal keys within each chunk and sends
        the sums to the virtual processor owning their row (one of ``virtual``
        equal slices of a rank's rows), through messages staged on disk
        beyond ``memory_budget``; each processor then sums what it received.
        Only the assembled matrix has to fit in memory, not the triplets.

        Parameters
        ----------
        paths : str or sequence of str
            The same files on every rank (a shared file system).
        shape, comm, layout, col_layout, check_finite
            As for :meth:`from_coo`.
        memory_budget : int or str, optional
            Bytes of triplets, messages and partial rows a rank keeps in
            memory at a time (e.g. ``"512MiB"``); default no limit, in memory.
        spill_dir : str, optional
            Where the spill files go (removed at the end and on any error).
        virtual : int, optional
            Virtual processors per rank; by default enough that each reads at
            most a quarter of the budget of records (1 without a budget).
        ledger : dmsolve.bsp.Ledger, optional
            Records the two supersteps, with the bytes read and written.

        Collective on ``comm``. A missing or short file, a file whose size is
        not a whole number of records, indices out of range, values that are
        not finite, a spill directory without space or a budget too small
        raise the same ``ValueError``/``TypeError`` on every rank, and no
        spill files are left behind.
        """
        return cls(*coo_file_rows(paths, shape, comm, layout, col_layout,
                                  memory_budget=memory_budget, spill_dir=spill_dir,
                                  virtual=virtual, check_finite=check_finite, ledger=ledger))

    # -- properties (never communicate) -------------------------------------------
    @property
    def comm(self) -> MPI.Comm:
        return self.row_layout.comm

    @property
    def shape(self) -> tuple[int, int]:
        return (self.row_layout.global_size, self.col_layout.global_size)

    @property
    def dtype(self):
        return self._dtype

    @property
    def diag(self) -> sp.csr_matrix:
        """This rank's on-process block as CSR, columns in local numbering.
        For a compact float32 copy (:meth:`single` with ``compact=True``,
        which keeps the block in sliced ELL only) it is rebuilt from that form
        on each access, without explicitly stored zeros: read it, do not
        change it. Not collective."""
        d = self._diag
        return self._sell.to_csr() if d is None else d

    @diag.setter
    def diag(self, value) -> None:
        self._diag = value

    @property
    def compact(self) -> bool:
        """Whether the on-process block is kept in sliced ELL only (see
        :attr:`diag`). Not collective."""
        return self._diag is None

    @property
    def local_nnz(self) -> int:
        """Stored entries in this rank's rows."""
        d = self._diag
        return int((self._sell.nnz if d is None else d.nnz) + self.offd.nnz)

    @property
    def local_nbytes(self) -> int:
        """Bytes of this rank's CSR arrays, ghost list, halo buffers (of the
        stored dtype) and sliced ELL copy of ``diag`` once built."""
        d = self._diag
        arrays = ([] if d is None else [d.data, d.indices, d.indptr]) + [
                  self.offd.data, self.offd.indices, self.offd.indptr, self.ghosts,
                  self.halo.sendbuf, self.halo.recvbuf, self.halo.send_index]
        sell = self._sell if self._sell else None
        return int(sum(a.nbytes for a in arrays)) + (sell.stored_nbytes if sell else 0)

    # -- collective queries ----------------------------------------------------------
    def global_nnz(self) -> int:
        """Stored entries of the whole matrix. Collective on ``comm``."""
        return int(self.comm.allreduce(self.local_nnz, op=MPI.SUM))

    def create_vectors(self) -> tuple[DistVector, DistVector]:
        """Zero vectors ``(x, y)`` for ``y = A @ x`` (PETSc ``MatCreateVecs``:
        right, left), of the matrix's dtype. Not collective."""
        return (DistVector.zeros(self.col_layout, self.dtype),
                DistVector.zeros(self.row_layout, self.dtype))

    # -- products ------------------------------------------------------------------------
    def _check_vec(self, x, layout: Layout, name: str) -> None:
        if not isinstance(x, DistVector):
            hint = (" (distribute a global array with DistVector.from_global(array, layout))"
                    if isinstance(x, np.ndarray) else "")
            raise TypeError("%s must be a DistVector, got %s%s" % (name, type(x).__name__, hint))
        if x.layout is not layout:
            # a layout object the matrix has not met: its ranges must agree
            # across ranks before comparing them makes a rank-independent verdict
            # (one allreduce, once per layout object)
            x.layout.verify()
            if x.layout != layout:
                if not x.layout.same_comm(layout):
                    raise ValueError("%s lives on another communicator than the matrix" % name)
                raise ValueError("%s has a layout of global size %d that does not match the "
                                 "matrix (%d x %d)" % (name, x.global_size, *self.shape))

    def _result(self, out, layout: Layout, dtype: np.dtype, what: str) -> DistVector:
        # ``out`` checked against ``layout`` and the product's dtype, or a new vector
        if out is None:
            return DistVector(layout, np.empty(layout.local_size, dtype=dtype))
        self._check_vec(out, layout, "out")
        if out.dtype != dtype:
            raise TypeError("out has dtype %s, but %s is %s%s" % (
                out.dtype, what, dtype,
                " (a real out cannot hold a complex result)" if dtype.kind == "c" else ""))
        return out

    def _buffer(self, role: str, n: int, dtype: np.dtype) -> np.ndarray:
        # work arrays per role and dtype, made on first use and kept (keyed
        # by the type code: a string hashes faster than a dtype)
        key = role + dtype.char
        buf = self._buffers.get(key)
        if buf is None:
            buf = self._buffers[key] = np.empty(n, dtype=dtype)
        return buf

    def _operand(self, v: np.ndarray, dtype: np.dtype, role: str) -> np.ndarray:
        # ``v`` as ``dtype``: itself, or a copy in a kept buffer (float32,
        # integer or bool vectors; real vectors of a complex matrix)
        if v.dtype == dtype:
            return v
        buf = self._buffer(role, v.shape[0], dtype)
        np.copyto(buf, v)
        return buf

    def _offd_rows(self, dtype: np.dtype) -> "CompressedRows":
        c = self._offd_c.get(dtype.char)
        if c is None or c.matrix is not self.offd:
            c = self._offd_c[dtype.char] = CompressedRows(self.offd, dtype)
        return c

    def matvec(self, x: DistVector, out: DistVector | None = None, *,
               threads: int | None = None) -> DistVector:
        """``out = A @ x``.

        Starts the halo exchange, multiplies the on-process block, then adds
        the off-process block once the ghost values arrive. Collective among
        neighbouring ranks; allocates nothing when ``out`` is given.

        On ``threads`` threads (default :func:`dmsolve.get_num_threads`) the
        local products run by blocks of rows: the same bits at any count.

        ``x`` may be real or complex whatever the matrix's dtype; the result
        is float64, or complex128 when the matrix or ``x`` is complex, and
        ``out`` must have that dtype.

        Raises
        ------
        TypeError
            ``x`` or ``out`` is not a DistVector (a numpy array included), or
            ``out`` has another dtype than the product.
        ValueError
            ``x`` or ``out`` on another layout.
        """
        self._check_vec(x, self.col_layout, "x")
        # the product's dtype: the matrix's (float64 or complex128), complex
        # for a complex x
        dtype = _COMPLEX if x.local.dtype.kind == "c" else self.dtype
        out = self._result(out, self.row_layout, dtype, "A @ x")
        xl = self._operand(x.local, dtype, "x")
        halo = self.halo if dtype == self.halo.dtype else self.halo.for_dtype(dtype)
        y = out.local
        sell = self._sell_block() if dtype == self.dtype and dtype.kind == "f" else None
        k = resolve(threads)
        halo.start(xl)
        try:
            if sell is not None:
                sell.matvec(xl, y, threads=k)
            else:
                csr_product(self.diag, xl, y, k)
        finally:            # never leave the exchange active, whatever raised
            ghost = halo.finish()
        if self.offd.nnz:
            self._offd_rows(dtype).matvec_add(ghost, y, threads=k)
        return out

    def rmatvec(self, y: DistVector, out: DistVector | None = None, *,
                threads: int | None = None) -> DistVector:
        """``out = A^T y`` (transpose, not conjugate: :meth:`hmatvec` is ``A^H y``).

        Off-process contributions travel back to the owners of their columns
        by the reverse halo exchange and are summed there. Collective among
        neighbouring ranks; allocates nothing when ``out`` is given. Dtypes
        as in :meth:`matvec`.

        On ``threads`` threads a real sliced-ELL or narrow ``diag`` block is
        multiplied by rows of a transposed copy (built on the first such
        product, the block's bytes again) holding the terms in the
        one-thread scatter's order: the same bits at any thread count.

        Raises
        ------
        TypeError, ValueError
            As :meth:`matvec`.
        """
        self._check_vec(y, self.row_layout, "y")
        dtype = _COMPLEX if y.local.dtype.kind == "c" else self.dtype
        out = self._result(out, self.col_layout, dtype, "A^T y")
        yl = self._operand(y.local, dtype, "y")
        rev = (self.halo if dtype == self.halo.dtype else self.halo.for_dtype(dtype)).reverse()
        g = self._buffer("ghost", self.ghosts.size, dtype)
        g.fill(0)
        o = self.offd
        if o.nnz:
            csc_add(o.shape[1], o.shape[0], o.indptr, o.indices, o.data, yl, g)
        x = out.local
        sell = self._sell_block() if dtype == self.dtype and dtype.kind == "f" else None
        rev.start(g)
        try:
            if sell is not None:
                sell.rmatvec(yl, x, threads=resolve(threads))
            else:
                x.fill(0)
                d = self.diag
                csc_add(d.shape[1], d.shape[0], d.indptr, d.indices, d.data, yl, x)
        finally:            # never leave the exchange active, whatever raised
            rev.finish()
        rev.accumulate(x)
        return out

    def hmatvec(self, y: DistVector, out: DistVector | None = None) -> DistVector:
        """``out = A^H y``, the conjugate transpose (PETSc's
        ``MatMultHermitianTranspose``); :meth:`rmatvec` for a real matrix.

        Computed as ``conj(A^T conj(y))`` through a kept buffer: collective
        among neighbouring ranks, allocates nothing when ``out`` is given
        (after the first call). Dtypes as in :meth:`matvec`.

        Raises
        ------
        TypeError, ValueError
            As :meth:`matvec`.
        """
        if self.dtype.kind != "c":
            return self.rmatvec(y, out)
        self._check_vec(y, self.row_layout, "y")
        if y.dtype.kind == "c":
            yc = self._buffers.get("hmatvec")
            if yc is None:
                yc = self._buffers["hmatvec"] = DistVector(
                    self.row_layout, np.empty(self.row_layout.local_size, dtype=_COMPLEX))
            np.conjugate(y.local, out=yc.local)
            y = yc
        # (a real y is its own conjugate)
        out = self.rmatvec(y, out)
        np.conjugate(out.local, out=out.local)
        return out

    def __matmul__(self, x):
        if isinstance(x, DistVector):
            return self.matvec(x)
        if isinstance(x, np.ndarray) or sp.issparse(x):
            raise TypeError("A @ x needs a DistVector, got %s; distribute a global array "
                            "with DistVector.from_global(x, A.col_layout) (each rank keeps "
                            "its part)" % type(x).__name__)
        return NotImplemented

    def __rmatmul__(self, y):
        raise TypeError("y @ A is not supported for a DistCSR (got %s on the left); use "
                        "A.rmatvec(y) for A^T y with y a DistVector" % type(y).__name__)

    # numpy must not turn a DistCSR into an object array: binary operators
    # with arrays come back here (and raise), np.asarray(A) raises
    __array_ufunc__ = None

    def __array__(self, dtype=None, copy=None):
        raise TypeError("a DistCSR holds only this rank's rows; use A.to_scipy() for the "
                        "whole matrix (collective) or A.local_rows() for this rank's rows")

    def dot(self, x: DistVector) -> DistVector:
        """``A @ x``, as scipy's ``dot``. Collective among neighbouring ranks."""
        return self.matvec(x)

    # -- local structure -----------------------------------------------------------------
    def local_block(self) -> sp.csr_matrix:
        """The on-process block (local rows x owned columns). Not collective."""
        return self.diag

    def local_rows(self) -> sp.csr_matrix:
        """This rank's rows with global column indices. Not collective."""
        n = self.row_layout.local_size
        d = self.diag.tocoo()
        o = self.offd.tocoo()
        rows = np.concatenate((d.row, o.row))
        cols = np.concatenate((d.col.astype(np.int64) + self.col_layout.start,
                               self.ghosts[o.col]))
        vals = np.concatenate((d.data, o.data))
        return sp.csr_matrix((vals, (rows, cols)), shape=(n, self.shape[1]))

    def diagonal(self) -> DistVector:
        """Entries ``A[i, i]`` of the owned rows, on the row layout. Not collective."""
        n = self.row_layout.local_size
        if self.row_layout == self.col_layout:          # A[i, i] lies in the diag block
            return DistVector(self.row_layout, self.diag.diagonal().astype(self.dtype))
        out = np.zeros(n, dtype=self.dtype)
        gi = np.arange(self.row_layout.start, self.row_layout.stop, dtype=np.int64)
        cstart, cstop = self.col_layout.owned_range
        inside = (gi >= cstart) & (gi < cstop)
        if inside.any():
            k = np.flatnonzero(inside)
            out[k] = np.asarray(self.diag[k, gi[k] - cstart]).ravel()
        outside = np.flatnonzero(~inside & (gi < self.shape[1]))
        if outside.size and self.ghosts.size:
            pos = np.searchsorted(self.ghosts, gi[outside])
            pos[pos == self.ghosts.size] = 0
            hit = self.ghosts[pos] == gi[outside]
            k = outside[hit]
            if k.size:
                out[k] = np.asarray(self.offd[k, pos[hit]]).ravel()
        return DistVector(self.row_layout, out)

    def row_sums(self, absolute: bool = False) -> DistVector:
        """Sum of each owned row (of absolute values if ``absolute``). Not collective."""
        d, o = self.diag, self.offd
        if absolute:
            d, o = abs(d), abs(o)
        s = np.asarray(d.sum(axis=1)).ravel() + np.asarray(o.sum(axis=1)).ravel()
        return DistVector(self.row_layout, s)

    def scale(self, left: DistVector | None = None, right: DistVector | None = None) -> "DistCSR":
        """In place ``A = diag(left) @ A @ diag(right)``.

        Collective among neighbours when ``right`` is given (its ghost values
        are exchanged).

        Raises
        ------
        TypeError
            A complex ``left`` or ``right`` for a real matrix (the matrix
            keeps its dtype; :meth:`astype` makes a complex copy), or not a
            DistVector. Checked before anything changes.
        ValueError
            A vector on another layout.
        """
        for name, v, lay in (("left", left, self.row_layout), ("right", right, self.col_layout)):
            if v is not None:
                self._check_vec(v, lay, name)
                if v.dtype.kind == "c" and self.dtype.kind != "c":
                    raise TypeError("%s is complex but the matrix is real; scale "
                                    "A.astype(complex) instead" % name)
        if self._diag is None:
            self._diag = self.diag       # a compact copy keeps its CSR from now on
        if left is not None:
            for m in (self.diag, self.offd):
                m.data *= np.repeat(left.local, np.diff(m.indptr))
        if right is not None:
            ghost = self.halo.exchange(right.local.astype(self.halo.dtype, copy=False))
            self.diag.data *= right.local[self.diag.indices]
            self.offd.data *= ghost[self.offd.indices]
        self._sell = False          # rebuilt from the scaled diag on the next product
        self._canonical = None      # and the reproducible products' copy
        return self

    def copy(self) -> "DistCSR":
        """A deep copy with a new halo plan (and the same :attr:`origin`).
        Collective on ``comm``."""
        return self._keep_origin(DistCSR(self.diag.copy(), self.offd.copy(),
                                         self.ghosts.copy(), self.row_layout,
                                         self.col_layout, self.local_format,
                                         single=self.dtype == _SINGLE))

    def single(self, compact: bool = False) -> "DistCSR":
        """A copy stored in float32, for mixed-precision preconditioners: its
        products take and give float32 vectors (a float64 ``x`` is rounded to
        float32 first) and move half the bytes. Real matrices only. Each rank
        multiplies in the local format it uses for this matrix (choosing it
        now if no product has). With ``compact``, a rank that multiplies in
        sliced ELL keeps its on-process block in that form only, not also as
        CSR (:attr:`diag` is then rebuilt on access): the copy a
        mixed-precision preconditioner multiplies with and reads nothing else of.
        Collective on ``comm`` (a new halo plan).

        Raises
        ------
        TypeError
            On every rank, for a complex matrix, or a ``compact`` that is
            not a bool (the same argument on every rank).
        """
        if self.dtype.kind == "c":
            raise TypeError("single precision storage is for real matrices; this one is "
                            "complex")
        if not isinstance(compact, (bool, np.bool_)):
            raise TypeError("compact must be True or False, got %r" % (compact,))
        # the same local format as this matrix's (chosen now if no product has
        # chosen it yet), its sliced ELL copy rounded rather than built again:
        # the copy's first product then costs no conversion
        sell = self._sell_block()
        compact = bool(compact) and sell is not None
        # a compact copy never holds a float32 CSR of its block: none is made
        diag = (sp.csr_matrix(self.diag.shape, dtype=_SINGLE) if compact
                else self.diag.astype(_SINGLE))
        new = DistCSR(diag, self.offd.astype(_SINGLE), self.ghosts.copy(), self.row_layout,
                      self.col_layout, self.local_format, single=True)
        new._sell = None if sell is None else sell.astype(_SINGLE)
        if compact:
            new._diag = None
        if new.offd.nnz:
            new._offd_rows(new.dtype)       # built now, not in the first product
        return new

    def astype(self, dtype) -> "DistCSR":
        """A copy with entries of ``dtype``, stored as float64 or complex128
        (a real ``dtype`` of a complex matrix drops the imaginary parts, as
        numpy's ``astype`` does). Collective on ``comm`` (a new halo plan)."""
        dtype = np.dtype(dtype)
        return self._keep_origin(DistCSR(self.diag.astype(dtype), self.offd.astype(dtype),
                                         self.ghosts.copy(), self.row_layout,
                                         self.col_layout, self.local_format))

    def conj(self) -> "DistCSR":
        """The entrywise complex conjugate (a copy for a real matrix).
        Collective on ``comm`` (a new halo plan)."""
        return self._keep_origin(DistCSR(self.diag.conj(), self.offd.conj(),
                                         self.ghosts.copy(), self.row_layout,
                                         self.col_layout, self.local_format))

    def _keep_origin(self, new: "DistCSR") -> "DistCSR":
        # a copy of the same rows keeps their canonical keys
        new.origin = None if self.origin is None else self.origin.copy()
        return new

    conjugate = conj

    # -- global views ---------------------------------------------------------------------
    def to_scipy(self, root: int | None = None) -> sp.csr_matrix | None:
        """The whole matrix as scipy CSR on every rank (or on ``root`` only).

        Collective on ``comm``; for tests and small matrices.
        """
        loc = self.local_rows().tocoo()
        rows = loc.row.astype(np.int64) + self.row_layout.start
        parts = [allgatherv(self.comm, a, root) for a in (rows, loc.col.astype(np.int64),
                                                           loc.data)]
        if parts[0] is None:
            return None
        return sp.csr_matrix((parts[2], (parts[0], parts[1])), shape=self.shape)

    def transpose(self) -> "DistCSR":
        """The transpose (not conjugated), rows distributed like this matrix's
        columns.

        Collective on ``comm`` (one BSP superstep).
        """
        return self._transpose(conjugate=False)

    def conjugate_transpose(self) -> "DistCSR":
        """The conjugate transpose ``A^H`` (the transpose for a real matrix),
        rows distributed like this matrix's columns.

        Collective on ``comm`` (one BSP superstep).
        """
        return self._transpose(conjugate=self.dtype.kind == "c")

    def _transpose(self, conjugate: bool) -> "DistCSR":
        loc = self.local_rows().tocoo()
        rows = loc.row.astype(np.int64) + self.row_layout.start
        vals = np.conj(loc.data) if conjugate else loc.data
        return DistCSR.from_coo(loc.col.astype(np.int64), rows, vals,
                                (self.shape[1], self.shape[0]), self.comm,
                                layout=self.col_layout, col_layout=self.row_layout,
                                check_finite=False)

    def free(self) -> None:
        """Release the halo's MPI requests (of every dtype). Not collective."""
        self.halo.free()

    def __repr__(self) -> str:
        return "DistCSR(shape=%s, local rows=%d:%d, local nnz=%d, ghosts=%d)" % (
            self.shape, *self.row_layout.owned_range, self.local_nnz, self.ghosts.size)


# -- helpers ----------------------------------------------------------------------------
def keys_of(A: DistCSR) -> np.ndarray:
    """The canonical keys of this rank's rows of a square ``A`` (int64):
    ``A.origin``, or the global ids (see :mod:`dmsolve._repro`). Not
    collective."""
    origin = getattr(A, "origin", None)
    if origin is not None:
        return origin
    lay = A.row_layout
    return np.arange(lay.start, lay.stop, dtype=np.int64)

