"""Sliced ELLPACK with run slots: the local format of a DistCSR's products.

SELL-C-sigma (Kreutzer et al., SIAM J. Sci. Comput. 2014; PETSc's MATSELL)
stores the rows in chunks of ``C`` and, within a chunk, the ``j``-th entries
of its rows side by side ("slot" ``j``), padded with zeros to the chunk's
longest row: a product walks ``C`` rows at once with no row pointers.

This variant ("run slots") aligns a chunk's entries by diagonal rather than
by position: the entries ``A[r, r + d]`` of the chunk's rows ``r0 .. r0+C-1``
for one offset ``d`` become one slot whose columns are the run
``r0 + d .. r0 + d + C - 1``, stored as that one first column (4 bytes per
``C`` entries instead of 4 per entry). An offset present in at least 2/3 of
the chunk's rows makes a run slot (the rest of its lanes padded with zero
values); the remaining entries are packed as ordinary SELL slots with one
column index per lane. A stencil matrix in natural order (every gallery
problem, a structured grid) becomes run slots except at its boundary, so the
product streams the values, ``x`` and ``y`` and reads almost no indices: 8.1
bytes per entry against CSR's 12, and no indexed loads.

Chunks keep the rows in order (sigma = 1): sorting rows by length within a
window would break the runs, and the format is chosen only where padding is
small (:func:`choose_format`); CSR stays the interchange format (to_scipy,
PETSc, I/O, smoothers, set-up), and the two are built from the same entries.

Zero padding multiplies ``x``: an infinite or NaN ``x`` on a padded lane makes
NaN in that lane's row (as in PETSc's MATSELL), where CSR would skip it.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ._blocks import row_blocks
from ._narrow import NarrowRows, transpose_nbytes, transposed_product
from ._sell_kernels import (CHUNK, sell_count_columns, sell_fill, sell_layout, sell_matvec,
                            sell_matvec_chunks, sell_rmatvec_add, sell_transpose_fill)
from .threads import parallel_for

__all__ = ["SlicedEll", "choose_format", "product_block", "FORMATS"]

#: Local formats of a DistCSR's products: ``"auto"`` (sliced ELL where it
#: fits, see :func:`choose_format`, else compressed rows with narrow indices:
#: :func:`product_block`), ``"csr"`` (scipy's CSR kernels), ``"sell"`` (sliced
#: ELL whenever the entries are real) or ``"narrow"`` (compressed rows with
#: narrow indices, :class:`dmsolve._narrow.NarrowRows`, whenever the entries
#: are real).
FORMATS = ("auto", "csr", "sell", "narrow")

#: The smallest block made sliced ELL by ``"auto"`` (4 chunks): below it a
#: product costs microseconds either way.
MIN_AUTO_ROWS = 256
#: ``"auto"`` keeps CSR when sliced ELL would hold more bytes than this times
#: CSR's (padding of rows of unequal length).
MAX_AUTO_BYTES = 1.1


class SlicedEll:
    """A local sparse block in sliced ELL with run slots, for products.

    Build one with :meth:`from_csr`. Attributes: ``shape``, ``nnz`` (the
    stored entries of the CSR it came from), ``chunk`` (rows per chunk),
    ``slot_ptr`` (first slot of each chunk, int32, ``nchunks + 1``),
    ``run_col`` (per slot: first column of a run slot, -1 for a gathered
    slot), ``gather_ptr`` (per slot: where a gathered slot's columns start in
    ``gather_col``), ``gather_col`` (int32) and ``vals`` (the block's dtype,
    ``chunk`` per slot, lane ``i`` of slot ``s`` at ``s * chunk + i``).

    Not collective.
    """

    name = "sell"

    def __init__(self, shape, nnz, slot_ptr, run_col, gather_ptr, gather_col, vals):
        self.shape = (int(shape[0]), int(shape[1]))
        self.nnz = int(nnz)
        self.chunk = CHUNK
        self.slot_ptr, self.run_col = slot_ptr, run_col
        self.gather_ptr, self.gather_col, self.vals = gather_ptr, gather_col, vals
        self._acc = np.zeros(self.chunk)
        self._accs = np.zeros((0, self.chunk))     # one row per block of a threaded product
        self._transpose = None      # dmsolve._narrow.ScatterTranspose, for threaded rmatvec

    @classmethod
    def from_csr(cls, B: sp.csr_matrix, max_bytes: float | None = None) -> "SlicedEll | None":
        """The sliced ELL form of a real (float64 or float32) CSR block ``B``
        (sorted indices, no duplicates, as DistCSR keeps its blocks); None if
        it would hold more
        than ``max_bytes`` bytes (found before any slot is filled).
        Not collective."""
        C = CHUNK
        n, m = B.shape
        nchunks = -(-n // C)
        indptr, indices = B.indptr, B.indices
        if max_bytes is not None and n:
            # a chunk holds at least as many slots as its longest row has
            # entries: when that alone exceeds max_bytes (rows of very unequal
            # length), refuse before the layout pass
            lens = np.zeros(nchunks * C, np.int64)
            lens[:n] = np.diff(indptr)
            if B.dtype.itemsize * C * int(lens.reshape(nchunks, C).max(axis=1).sum()) \
                    > max_bytes:
                return None
        run_offsets = np.empty(B.nnz, np.int64)
        nrun = np.zeros(nchunks, np.int64)
        ngather = np.zeros(nchunks, np.int64)
        nruns = sell_layout(indptr, indices, m, run_offsets, nrun, ngather)
        slot_ptr = np.zeros(nchunks + 1, np.int64)
        np.cumsum(nrun + ngather, out=slot_ptr[1:])
        nslots = int(slot_ptr[-1])
        ngathered = int(ngather.sum())
        nbytes = (B.dtype.itemsize * C * nslots + 4 * (nchunks + 1) + 8 * nslots
                  + 4 * C * ngathered + 8 * C)
        if max_bytes is not None and nbytes > max_bytes:
            return None
        if nslots > np.iinfo(np.int32).max // C:
            raise ValueError("block too large for 32-bit slot offsets")
        vals = np.zeros(nslots * C, dtype=B.dtype)
        run_col = np.full(nslots, -1, np.int32)
        gather_ptr = np.zeros(nslots, np.int32)
        gather_col = np.zeros(ngathered * C, np.int32)    # padding reads column 0
        slot_ptr = slot_ptr.astype(np.int32)
        sell_fill(indptr, indices, B.data, run_offsets[:nruns], nrun, slot_ptr, run_col,
                  gather_ptr, gather_col, vals)
        return cls(B.shape, B.nnz, slot_ptr, run_col, gather_ptr, gather_col, vals)

    def astype(self, dtype) -> "SlicedEll":
        """A copy with its values in ``dtype`` (float32 for mixed precision):
        the same slots, no new layout pass. Not collective."""
        return SlicedEll(self.shape, self.nnz, self.slot_ptr.copy(), self.run_col.copy(),
                         self.gather_ptr.copy(), self.gather_col.copy(),
                         self.vals.astype(dtype))

    @property
    def dtype(self) -> np.dtype:
        """The dtype of the values. Not collective."""
        return self.vals.dtype

    @property
    def nbytes(self) -> int:
        """Bytes of the stored arrays. Not collective."""
        return sum(a.nbytes for a in (self.slot_ptr, self.run_col, self.gather_ptr,
                                      self.gather_col, self.vals, self._acc))

    @property
    def stored_nbytes(self) -> int:
        """Bytes held beside the CSR block (all of :attr:`nbytes`, and the
        transposed copy of threaded transposed products once built). Not collective."""
        return self.nbytes + transpose_nbytes(self)

    @property
    def run_fraction(self) -> float:
        """The fraction of the stored slots that are run slots. Not collective."""
        return float(np.mean(self.run_col >= 0)) if self.run_col.size else 0.0

    def matvec(self, x: np.ndarray, y: np.ndarray, *, threads: int = 1) -> None:
        """``y = B @ x`` (of the block's dtype, every entry of ``y`` written),
        on ``threads`` threads by blocks of whole chunks: every row is summed
        as on one thread, the same bits. Not collective."""
        n = self.shape[0]
        k = threads
        rows = row_blocks(n, k, CHUNK) if k > 1 else None
        if rows is None or rows.size <= 2:
            sell_matvec(n, self.slot_ptr, self.run_col, self.gather_ptr,
                        self.gather_col, self.vals, x, y, self._acc)
            return
        chunks = (rows + (CHUNK - 1)) // CHUNK
        if self._accs.shape[0] < chunks.size - 1:
            self._accs = np.zeros((chunks.size - 1, CHUNK))
        accs = self._accs
        parallel_for(lambda b: sell_matvec_chunks(
            chunks[b], chunks[b + 1], n, self.slot_ptr, self.run_col, self.gather_ptr,
            self.gather_col, self.vals, x, y, accs[b]), chunks.size - 1, k)

    def rmatvec_add(self, y: np.ndarray, x: np.ndarray) -> None:
        """``x += B^T y`` (of the block's dtype). Not collective."""
        sell_rmatvec_add(self.shape[0], self.slot_ptr, self.run_col, self.gather_ptr,
                         self.gather_col, self.vals, y, x)

    def rmatvec(self, y: np.ndarray, x: np.ndarray, *, threads: int = 1) -> None:
        """``x = B^T y``: see :func:`dmsolve._narrow.transposed_product`. Not collective."""
        transposed_product(self, y, x, threads)

    def scatter_count(self, counts: np.ndarray) -> None:
        """``counts[c] +=`` the number of terms :meth:`rmatvec_add` adds into
        ``x[c]`` (padding lanes of real rows included: they add ``0 * y``).
        Not collective."""
        sell_count_columns(self.shape[0], self.slot_ptr, self.run_col, self.gather_ptr,
                           self.gather_col, counts)

    def scatter_fill(self, next_pos: np.ndarray, indices: np.ndarray, data: np.ndarray) -> None:
        """Place the terms of :meth:`rmatvec_add` by column in the order it
        adds them (see :class:`dmsolve._narrow.ScatterTranspose`). Not collective."""
        sell_transpose_fill(self.shape[0], self.slot_ptr, self.run_col, self.gather_ptr,
                            self.gather_col, self.vals, next_pos, indices, data)

    def to_csr(self) -> sp.csr_matrix:
        """The block back as CSR (padding dropped; an entry stored as an explicit
        zero in the CSR it came from is dropped too). Not collective."""
        C = self.chunk
        nslots = self.run_col.size
        chunk_of = np.repeat(np.arange(self.slot_ptr.size - 1), np.diff(self.slot_ptr))
        rows = (chunk_of[:, None] * C + np.arange(C)).astype(np.int64)
        cols = np.empty((nslots, C), np.int64)
        run = self.run_col >= 0
        cols[run] = self.run_col[run, None] + np.arange(C)
        g = np.flatnonzero(~run)
        cols[g] = self.gather_col.reshape(-1, C)[self.gather_ptr[g] // C]
        vals = self.vals.reshape(nslots, C)
        keep = (vals != 0) & (rows < self.shape[0])
        return sp.csr_matrix((vals[keep], (rows[keep], cols[keep])), shape=self.shape)


def csr_nbytes(B: sp.csr_matrix) -> int:
    """Bytes of a CSR block's three arrays. Not collective."""
    return B.data.nbytes + B.indices.nbytes + B.indptr.nbytes


def choose_format(B: sp.csr_matrix, fmt: str) -> "SlicedEll | None":
    """The sliced ELL form of ``B`` if ``fmt`` asks for it, else None (CSR).

    ``"sell"`` converts any real (float64 or float32) block; ``"auto"`` such
    a block of at least :data:`MIN_AUTO_ROWS` rows whose sliced ELL form holds at most
    :data:`MAX_AUTO_BYTES` times CSR's bytes (a block with rows of very
    unequal length pads too much, and stays CSR). Complex blocks stay CSR.
    Not collective.
    """
    if fmt == "csr" or B.dtype not in (np.float64, np.float32):
        return None
    if fmt == "sell":
        return SlicedEll.from_csr(B)
    if B.shape[0] < MIN_AUTO_ROWS:
        return None
    return SlicedEll.from_csr(B, max_bytes=MAX_AUTO_BYTES * csr_nbytes(B))


def product_block(B: sp.csr_matrix, fmt: str) -> "SlicedEll | NarrowRows | None":
    """The form a DistCSR's products use for its block ``B`` in the local
    format ``fmt``; None for scipy's CSR kernels.

    ``"sell"`` and ``"auto"`` as :func:`choose_format`; where ``"auto"`` keeps
    CSR for a real block of at least :data:`MIN_AUTO_ROWS` rows, the CSR is
    multiplied with narrow indices (:class:`dmsolve._narrow.NarrowRows`: the
    same sums as scipy's in the same order, fewer bytes), as it is for any
    real block with ``"narrow"``. Complex blocks stay CSR. Not collective.
    """
    if fmt == "narrow":
        real = B.dtype in (np.float64, np.float32)
        return NarrowRows.from_csr(B) if real else None
    s = choose_format(B, fmt)
    if s is None and fmt == "auto" and B.dtype in (np.float64, np.float32) \
            and B.shape[0] >= MIN_AUTO_ROWS:
        return NarrowRows.from_csr(B)
    return s
