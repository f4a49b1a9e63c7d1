"""Reproducible mode: products whose every entry does not depend on the partition.

A solve with ``reproducible=True`` returns the same bits at any number of
ranks and for any row partition (block, METIS, RCB). Three things make that
so:

- reductions are exact (:mod:`dmsolve._reprosum`), rounded once;
- every vector update is computed entry by entry, the same way for an entry
  wherever it lies (no BLAS, whose kernels may fuse a multiply-add in some
  entries and not others);
- every row of a matrix product is summed in one canonical order: by the
  *canonical key* of the column, not by where the column is stored.

A matrix's canonical keys are :attr:`DistCSR.origin` (the global ids of its
rows before a :func:`dmsolve.partition.redistribute`, carried by it) or else
its global ids. :func:`canonical` builds the product with rows sorted by
key: :class:`CanonicalCSR`.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ._matrix import DistCSR, keys_of
from ._reprosum import (SLICE, canonical_rows, canonical_sell, fill_slices, merge_rows_by_key,
                        slice_slots, slot_runs)
from ._vector import DistVector
from .partition import fetch

__all__ = ["CanonicalCSR", "canonical", "keys_of", "check_inputs", "check_pc_name",
           "REPRODUCIBLE_PCS"]

#: Mean entries per row from which :class:`CanonicalCSR` sums row by row
#: rather than in slices (measured: 33-entry coarse rows 2.7 ms against 3.6
#: for 1M rows' worth, 7-entry stencil rows 4.5 against 3.6).
ROWS_KERNEL_LENGTH = 12

#: Preconditioners that take ``reproducible=True`` (the others depend on the
#: partition by construction: their local solves are the ranks' blocks).
REPRODUCIBLE_PCS = ("jacobi", "cheby", "amg")


def check_pc_name(name: str) -> None:
    """Refuse a preconditioner name with no reproducible mode (bjacobi, asm
    and gemslr solve the ranks' own blocks: the partition is part of the
    method). Rank-independent: raised alike everywhere. Not collective."""
    if name not in REPRODUCIBLE_PCS:
        raise ValueError("%s depends on the partition by construction and has no "
                         "reproducible mode; reproducible=True takes %s (or no "
                         "preconditioner)" % (name, ", ".join(REPRODUCIBLE_PCS)))


def check_inputs(method: str, A, M, dtype) -> None:
    """The door of reproducible mode: rank-independent facts only, so each
    rank raises the same error. Not collective."""
    if np.dtype(dtype).kind == "c":
        raise TypeError("%s(reproducible=True) is for real systems; the system is complex"
                        % method)
    if not isinstance(A, DistCSR) and not getattr(A, "reproducible", False):
        raise TypeError("%s(reproducible=True) needs A as a DistCSR (an operator of "
                        "its own must set reproducible = True), got %s"
                        % (method, type(A).__name__))
    if isinstance(A, DistCSR) and A.dtype != np.float64:
        raise TypeError("%s(reproducible=True) needs a float64 DistCSR, got %s"
                        % (method, A.dtype))
    if M is not None and not getattr(M, "reproducible", False):
        name = getattr(M, "name", None) or type(M).__name__
        raise ValueError(
            "%s(reproducible=True) needs a preconditioner built with reproducible=True "
            "(one of %s) or none; %s is not (bjacobi, asm and gemslr depend on the "
            "partition by construction)" % (method, ", ".join(REPRODUCIBLE_PCS), name))


def canonical(A, col_keys: np.ndarray | None = None) -> "CanonicalCSR":
    """``A`` with products summed row by row in canonical column order.

    ``col_keys`` are the canonical keys of this rank's columns (its part of
    ``A.col_layout``); by default :func:`keys_of` of a square ``A``. A
    :class:`CanonicalCSR` is returned as it is; the one built for ``A``
    with default keys is kept on ``A`` for the next call. Collective on
    ``A.comm`` (the ghost columns' keys are fetched from their owners).
    """
    if isinstance(A, CanonicalCSR) or not isinstance(A, DistCSR):
        return A
    if col_keys is None:
        cached = getattr(A, "_canonical", None)
        if cached is not None:
            return cached
        out = A._canonical = CanonicalCSR(A, keys_of(A))
        return out
    return CanonicalCSR(A, col_keys)


class CanonicalCSR(DistCSR):
    """A :class:`DistCSR` whose products sum each row in canonical column order.

    It shares the matrix's blocks and halo plan and adds one merged CSR copy
    of the local rows, owned columns first and then ghosts, each row's
    entries sorted by the columns' canonical keys. :meth:`matvec` gathers
    ``[x_owned; x_ghosts]`` and sums each row in that order from 0, so every
    entry of ``A @ x`` is the same bits whatever the partition. The
    constructor is collective on ``A.comm``; use :func:`canonical`.
    """

    reproducible = True

    def __init__(self, A: DistCSR, col_keys: np.ndarray):
        self.__dict__.update(A.__dict__)
        self._canonical = self
        self._buffers = {}
        self._offd_c = {}
        col_keys = np.asarray(col_keys, dtype=np.int64)
        self.col_keys = col_keys
        ghost_keys = fetch(self.col_layout, col_keys, self.ghosts)
        n = self.col_layout.local_size
        m = self.row_layout.local_size
        d, o = self.diag, self.offd
        # each row's entries, owned columns then ghosts, sorted by key (stable)
        total = d.indptr[-1] + o.indptr[-1]
        self._indptr = np.empty(m + 1, dtype=np.int64)
        order = np.empty(total, dtype=np.int64)
        keys = np.empty(total, dtype=np.int64)
        merge_rows_by_key(d.indptr.astype(np.int64), col_keys[d.indices],
                          o.indptr.astype(np.int64), ghost_keys[o.indices],
                          self._indptr, order, keys)
        cols = np.concatenate((d.indices.astype(np.int64), o.indices.astype(np.int64) + n))
        vals = np.concatenate((d.data, o.data))
        self._indices = cols[order]
        self._data = np.ascontiguousarray(vals[order], dtype=np.float64)
        # x's owned entries, its ghosts, then a 1 (what padding multiplies)
        self._ext = np.zeros(n + self.ghosts.size + 1)
        self._ext[-1] = 1.0
        row_keys = keys_of(A) if A.row_layout == A.col_layout else None
        if row_keys is None:        # rectangular: the rows' own order, ids as keys
            row_keys = np.arange(m, dtype=np.int64)
        # rows of a dozen entries or more (coarse operators, R = P^T) are
        # summed one by one, shorter ones (a stencil, P) in slices
        self._rows_kernel = self._indices.size >= ROWS_KERNEL_LENGTH * max(m, 1)
        if self._rows_kernel:
            self._slices = None
            self._uindptr = self._indptr.astype(np.uint64)
            self._uindices = self._indices.astype(
                np.uint32 if self._ext.size < 2 ** 32 else np.uint64)
        else:
            self._slices = _slices(self._indptr, self._indices, self._data,
                                   self._ext.size - 1, row_keys, keys, n)
            self._acc = np.zeros(SLICE)

    def matvec(self, x: DistVector, out: DistVector | None = None) -> DistVector:
        """``out = A @ x``, each row summed in canonical column order.

        Collective among neighbouring ranks (the halo exchange, overlapped
        with the rows that need no ghost in the sliced form); allocates
        nothing when ``out`` is given.

        Raises
        ------
        TypeError, ValueError
            As :meth:`DistCSR.matvec`; a complex ``x`` is refused.
        """
        self._check_vec(x, self.col_layout, "x")
        if x.local.dtype.kind == "c":
            raise TypeError("a reproducible product is real; x is complex")
        out = self._result(out, self.row_layout, self.dtype, "A @ x")
        n = self.col_layout.local_size
        ext = self._ext
        self.halo.start(x.local)
        if self._rows_kernel:
            ext[:n] = x.local
            ext[n:-1] = self.halo.finish()
            canonical_rows(self._uindptr, self._uindices, self._data, ext, out.local)
            return out
        # x itself, then [ghosts, 1] (no copy of x); the rows without ghosts
        # while the ghosts travel, then the others
        split, *slices = self._slices
        nslices = slices[1].size
        acc = self._acc
        try:
            canonical_sell(0, split, out.local.size, *slices, x.local, ext[n:], out.local, acc)
        finally:            # never leave the exchange active, whatever raised
            ext[n:-1] = self.halo.finish()
        canonical_sell(split, nslices, out.local.size, *slices, x.local, ext[n:], out.local,
                       acc)
        return out

    def row_sums(self, absolute: bool = False) -> DistVector:
        """Row sums (of ``|a_ij|`` with ``absolute``), each in canonical order.
        Not collective."""
        out = DistVector.zeros(self.row_layout)
        data = np.abs(self._data) if absolute else self._data
        canonical_rows(self._indptr, self._indices, data, np.ones(self._ext.size), out.local)
        return out

    def rmatvec(self, y, out=None):
        """Not available: a transpose product sums across ranks. Not collective."""
        raise NotImplementedError("a reproducible matrix has no transpose product; "
                                  "build the transpose with transpose()")

    def local_canonical(self) -> sp.csr_matrix:
        """The merged local rows (owned columns, then ghosts), sorted by key.
        Not collective."""
        return sp.csr_matrix((self._data, self._indices, self._indptr),
                             shape=(self.row_layout.local_size, self._ext.size - 1))

    def __repr__(self) -> str:
        return "Canonical" + super().__repr__()


def _slices(indptr, indices, data, one: int, row_keys, col_keys, n_owned: int):
    """The canonical rows in slices of :data:`SLICE` rows stored slot by slot
    (:func:`dmsolve._reprosum.canonical_sell`): ``(split, start, width, run,
    rows, permuted, data, idx)``, ``rows`` the row each place of a slice
    computes (``permuted``: not the identity) and the slices before
    ``split`` free of ghost columns.

    A slice's slots are the distinct key offsets ``key(column) - key(row)``
    of its entries, ascending: a row's entries, sorted by key, are sorted by
    offset too, so they keep their order, and a stencil's slot holds
    consecutive columns (a run, read without a gather). A row without an
    offset has ``-0.0`` times ``x[one] = 1`` there. A slice with more
    offsets than its longest row has entries packs its rows' entries
    instead. When most slices pack (an irregular matrix: a prolongator, a
    coarse operator), the rows are first sorted by length, longest first,
    within windows of eight slices (SELL-C-sigma), so that a slice's rows
    have about as many entries: a row's sum does not depend on which slice
    computes it. Not collective.
    """
    m = indptr.size - 1
    lens = np.diff(indptr)
    # rows with no ghost column first: their slices run while the halo
    # exchange is in flight (each group keeps its rows' order)
    ghostly = np.zeros(m, dtype=bool)
    if indices.size:
        ghostly[np.repeat(np.arange(m), lens)[indices >= n_owned]] = True
    inner, outer = np.flatnonzero(~ghostly), np.flatnonzero(ghostly)
    perm = np.concatenate((inner, outer))
    layout = _slice_layout(indptr, indices, data, one, row_keys, col_keys, perm, n_owned)
    if layout[-1] < 0.5 and m > SLICE:
        window = 8 * SLICE

        def by_length(group):           # longest first inside each window
            return group[np.lexsort((-lens[group], np.arange(group.size) // window))]
        perm = np.concatenate((by_length(inner), by_length(outer)))
        layout = _slice_layout(indptr, indices, data, one, row_keys, col_keys, perm, n_owned)
    # the slices before `split` hold only rows without ghosts
    return (inner.size // SLICE,) + layout[:-1]


def _slice_layout(indptr, indices, data, one, row_keys, col_keys, perm, n_owned):
    # the slices with place p computing row perm[p]; and the share of
    # aligned slices
    m = indptr.size - 1
    nsl = -(-m // SLICE)
    indptr = indptr.astype(np.int64)
    perm = perm.astype(np.int64)
    # slot by offset (the rank of an entry's offset among its slice's
    # offsets) where that pads no more than packing (a stencil's slices; a
    # prolongator's offsets mean nothing and would only add empty slots)
    slot = np.empty(indptr[-1], dtype=np.int64)
    width = np.empty(nsl, dtype=np.int64)
    aligned = np.empty(nsl, dtype=np.bool_)
    slice_slots(indptr, perm, np.asarray(col_keys, dtype=np.int64),
                np.asarray(row_keys, dtype=np.int64), slot, width, aligned)
    start = np.concatenate(([0], np.cumsum(width * SLICE)))[:-1].astype(np.int64)
    total = int((width * SLICE).sum())
    itype = np.uint32 if one < 2 ** 32 - 1 else np.uint64
    sdata = np.full(total, -0.0)
    sidx = np.full(total, one, dtype=itype)
    fill_slices(indptr, perm, slot, start, data, indices, sdata, sidx)
    # a slot whose entries lie on consecutive columns c + r is a run, its
    # empty places included: they read x[c + r] times -0.0, which adds
    # nothing either (a chain from +0 is never -0; a non-finite x makes the
    # solve stop with NANORINF anyway)
    run = np.empty(total // SLICE, dtype=np.int64)
    slot_runs(sidx, int(one), int(n_owned), run)
    share = float(aligned.mean()) if nsl else 1.0
    permuted = not np.array_equal(perm, np.arange(m))
    return start, width, run, perm, permuted, sdata, sidx, share
