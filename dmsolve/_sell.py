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

__all__ = ["SlicedEll", "choose_format", "FORMATS"]

#: Local formats of a DistCSR's products: ``"auto"`` (sliced ELL where it
#: fits, see :func:`choose_format`), ``"csr"`` (scipy's CSR kernels) or
#: ``"sell"`` (sliced ELL whenever the entries are float64).
FORMATS = ("auto", "csr", "sell")

#: The smallest block made sliced ELL by ``"auto"``: below it a product costs
#: microseconds either way, and the conversion would be all there is to see.
MIN_AUTO_ROWS = 1024
#: ``"auto"`` keeps CSR when sliced ELL would hold more bytes than this times
#: CSR's (padding of rows of unequal length).
MAX_AUTO_BYTES = 1.1


def _chunk() -> int:
    from ._sell_kernels import CHUNK
    return CHUNK


class SlicedEll:
    """A local sparse block in sliced ELL with run slots, for products.

    Build one with :meth:`from_csr`. Attributes: ``shape``, ``nnz`` (the
    stored entries of the CSR it came from), ``chunk`` (rows per chunk),
    ``slot_ptr`` (first slot of each chunk, int32, ``nchunks + 1``),
    ``run_col`` (per slot: first column of a run slot, -1 for a gathered
    slot), ``gather_ptr`` (per slot: where a gathered slot's columns start in
    ``gather_col``), ``gather_col`` (int32) and ``vals`` (float64,
    ``chunk`` per slot, lane ``i`` of slot ``s`` at ``s * chunk + i``).

    Not collective.
    """

    def __init__(self, shape, nnz, slot_ptr, run_col, gather_ptr, gather_col, vals):
        self.shape = (int(shape[0]), int(shape[1]))
        self.nnz = int(nnz)
        self.chunk = _chunk()
        self.slot_ptr, self.run_col = slot_ptr, run_col
        self.gather_ptr, self.gather_col, self.vals = gather_ptr, gather_col, vals
        self._acc = np.zeros(self.chunk)

    @classmethod
    def from_csr(cls, B: sp.csr_matrix) -> "SlicedEll":
        """The sliced ELL form of a float64 CSR block ``B`` (sorted indices, no
        duplicates, as DistCSR keeps its blocks). Not collective."""
        C = _chunk()
        n, m = B.shape
        nchunks = -(-n // C)
        rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(B.indptr))
        cols = B.indices.astype(np.int64)
        chunk = rows // C
        lane = rows - chunk * C
        offset = cols - rows                          # in [-(n-1), m-1]
        # the chunk's offsets and how many of its rows have each
        key = chunk * (n + m) + (offset + n)
        keys, inv, count = np.unique(key, return_inverse=True, return_counts=True)
        kchunk = keys // (n + m)
        first = kchunk * C + keys % (n + m) - n       # the run's first column
        run = (3 * count >= 2 * C) & (first >= 0) & (first + C <= m)
        in_run = run[inv]
        runs = np.flatnonzero(run)                    # sorted by chunk, then offset
        nrun = np.bincount(kchunk[runs], minlength=nchunks)
        # the other entries, packed: the j-th of a row's goes to gathered slot j
        rest = ~in_run
        rest_len = np.bincount(rows[rest], minlength=nchunks * C)
        ngather = rest_len.reshape(nchunks, C).max(axis=1) if n else np.zeros(0, np.int64)
        slot_ptr = np.zeros(nchunks + 1, np.int64)
        np.cumsum(nrun + ngather, out=slot_ptr[1:])
        nslots = int(slot_ptr[-1])
        vals = np.zeros((nslots, C))
        run_col = np.full(nslots, -1, np.int64)
        run_start = np.zeros(nchunks + 1, np.int64)
        np.cumsum(nrun, out=run_start[1:])
        slot_of_key = np.zeros(keys.size, np.int64)
        slot_of_key[runs] = slot_ptr[kchunk[runs]] + np.arange(runs.size) - run_start[kchunk[runs]]
        run_col[slot_of_key[runs]] = first[runs]
        e = np.flatnonzero(in_run)
        vals[slot_of_key[inv[e]], lane[e]] = B.data[e]
        e = np.flatnonzero(rest)
        row_start = np.zeros(nchunks * C + 1, np.int64)
        np.cumsum(rest_len, out=row_start[1:])
        slot = slot_ptr[chunk[e]] + nrun[chunk[e]] + np.arange(e.size) - row_start[rows[e]]
        vals[slot, lane[e]] = B.data[e]
        gathered = np.flatnonzero(run_col < 0)
        gather_ptr = np.zeros(nslots, np.int64)
        gather_ptr[gathered] = np.arange(gathered.size) * C
        position = np.zeros(nslots, np.int64)
        position[gathered] = np.arange(gathered.size)
        gather_col = np.zeros((gathered.size, C), np.int32)   # padding reads column 0
        gather_col[position[slot], lane[e]] = cols[e]
        return cls(B.shape, B.nnz, slot_ptr.astype(np.int32), run_col.astype(np.int32),
                   gather_ptr.astype(np.int32), gather_col.ravel(), vals.ravel())

    @property
    def nbytes(self) -> int:
        """Bytes of the stored arrays. Not collective."""
        return sum(a.nbytes for a in (self.slot_ptr, self.run_col, self.gather_ptr,
                                      self.gather_col, self.vals, self._acc))

    @property
    def run_fraction(self) -> float:
        """The fraction of the stored slots that are run slots. Not collective."""
        return float(np.mean(self.run_col >= 0)) if self.run_col.size else 0.0

    def matvec(self, x: np.ndarray, y: np.ndarray) -> None:
        """``y = B @ x`` (float64, every entry of ``y`` written). Not collective."""
        from ._sell_kernels import sell_matvec
        sell_matvec(self.shape[0], self.slot_ptr, self.run_col, self.gather_ptr,
                    self.gather_col, self.vals, x, y, self._acc)

    def rmatvec_add(self, y: np.ndarray, x: np.ndarray) -> None:
        """``x += B^T y`` (float64). Not collective."""
        from ._sell_kernels import sell_rmatvec_add
        sell_rmatvec_add(self.shape[0], self.slot_ptr, self.run_col, self.gather_ptr,
                         self.gather_col, self.vals, y, x)

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

    ``"sell"`` converts any float64 block; ``"auto"`` a float64 block of at
    least :data:`MIN_AUTO_ROWS` rows whose sliced ELL form holds at most
    :data:`MAX_AUTO_BYTES` times CSR's bytes (a block with rows of very
    unequal length pads too much, and stays CSR). Complex blocks stay CSR.
    Not collective.
    """
    if fmt == "csr" or B.dtype != np.float64:
        return None
    if fmt == "auto" and B.shape[0] < MIN_AUTO_ROWS:
        return None
    if fmt == "auto":
        # an upper bound on the padding before converting: the slots of a
        # chunk are at least its longest row
        C = _chunk()
        n = B.shape[0]
        lens = np.zeros(-(-n // C) * C, np.int64)
        lens[:n] = np.diff(B.indptr)
        if lens.reshape(-1, C).max(axis=1).sum() * C * 8 > MAX_AUTO_BYTES * csr_nbytes(B):
            return None
    S = SlicedEll.from_csr(B)
    if fmt == "auto" and S.nbytes > MAX_AUTO_BYTES * csr_nbytes(B):
        return None
    return S
