"""Strength of connection: which couplings of a level matrix count for aggregation.

Aggregates never cross ranks, so the strength graph is built on each rank's
on-process block only; it is local and needs no communication.
"""

from __future__ import annotations

import copy

import numpy as np
import scipy.sparse as sp

from dmsolve import Registry, threads
from dmsolve.spgemm import matmat, transpose
from dmsolve.validate import check_int, check_real

from ._strength_kernels import (classical_count, classical_fill, classical_mask_rows,
                                symmetric_count, symmetric_fill)

__all__ = ["STRENGTH", "SymmetricStrength", "ClassicalStrength", "symmetric_strength",
           "classical_strength", "is_strong"]

#: The fewest rows of a block of the classical measure's compiled passes
#: (:func:`dmsolve.threads.row_blocks`): a row costs a few entries' tests.
MIN_BLOCK_ROWS = 1 << 13

#: Strength measures by name, as PyAMG's ``strength=("symmetric", {"theta": 0.08})``:
#: classes ``cls(**options)`` (the constructor checks the options) whose instances
#: are called as ``measure(A)`` for the strength graph, answer ``measure.strong(rows,
#: cols, vals, diag_row, diag_col)`` entry by entry for the prolongator's filter
#: (:func:`.smooth.filtered_matrix`), say by ``measure.filters`` whether that
#: filter can drop anything, and by ``measure.has_weak(A)`` whether it drops
#: something of this rank's rows of ``A``; ``measure.on_level(k)`` is the
#: measure the prolongator smoothing of level ``k`` (0: the finest) filters by.
STRENGTH = Registry("strength measure")


def is_strong(rows, cols, vals, diag_row, diag_col, theta: float) -> np.ndarray:
    """``|a_ij| >= theta * sqrt(|a_ii a_jj|)`` entry by entry, off the diagonal.
    Not collective."""
    off = rows != cols
    if theta <= 0:
        return off & (vals != 0)
    return off & (np.abs(vals) >= theta * np.sqrt(np.abs(diag_row * diag_col)))


def _diagonal_block(A) -> tuple[sp.coo_matrix, np.ndarray]:
    """This rank's diagonal block as COO and its diagonal. Not collective."""
    D = A.diag.tocoo()
    d = np.zeros(D.shape[0])
    on = D.row == D.col
    d[D.row[on]] = D.data[on]
    return D, d


def _graph(D: sp.coo_matrix, keep: np.ndarray) -> sp.csr_matrix:
    S = sp.csr_matrix((np.abs(D.data[keep]), (D.row[keep], D.col[keep])), shape=D.shape)
    S.sort_indices()
    return S


def symmetric_strength(A, theta: float = 0.0) -> sp.csr_matrix:
    """The symmetric strength graph of this rank's diagonal block.

    Entry ``(i, j)`` (local numbering, ``i != j``) is kept when
    ``|a_ij| >= theta * sqrt(|a_ii a_jj|)`` (Vanek, Mandel & Brezina 1996);
    the values are ``|a_ij|``. ``theta = 0`` keeps every nonzero coupling, as
    PyAMG's default. Not collective.

    References
    ----------
    P. Vanek, J. Mandel, M. Brezina, "Algebraic multigrid by smoothed
    aggregation for second and fourth order elliptic problems", Computing
    56(3), 1996.
    """
    if _takes_kernels(A):
        return _symmetric_blocks(A, theta)
    D, d = _diagonal_block(A)
    return _graph(D, is_strong(D.row, D.col, D.data, d[D.row], d[D.col], theta))


def _symmetric_blocks(A, theta: float) -> sp.csr_matrix:
    """:func:`symmetric_strength` by blocks of rows on the process's threads
    (the same graph). Not collective."""
    D = A.diag
    n = D.shape[0]
    d_ptr, d_ind = _unsigned(D.indptr), _unsigned(D.indices)
    diag = D.diagonal() if D.shape[0] == D.shape[1] else _diagonal_block(A)[1]
    cuts = threads.row_blocks(n, None, MIN_BLOCK_ROWS)
    sizes = np.zeros(n + 1, dtype=np.int64)
    threads.parallel_for(
        lambda b: symmetric_count(d_ptr, d_ind, D.data, diag, float(theta), cuts[b],
                                  cuts[b + 1], sizes), cuts.size - 1)
    indptr, indices, data = _graph_arrays(sizes)
    threads.parallel_for(
        lambda b: symmetric_fill(d_ptr, d_ind, D.data, diag, float(theta), cuts[b], cuts[b + 1],
                                 indptr, _unsigned(indices), data), cuts.size - 1)
    return _sorted_graph(D.shape, indptr, indices, data)


def _graph_arrays(sizes: np.ndarray):
    """Row pointers from row sizes (``sizes[i + 1]``, summed in place) and
    room for the entries, int32 where they fit. Not collective."""
    indptr = np.cumsum(sizes, out=sizes)
    nnz, n = int(indptr[-1]), sizes.size - 1
    idx = np.int32 if max(nnz, n) <= np.iinfo(np.int32).max else np.int64
    return indptr.astype(idx), np.empty(nnz, dtype=idx), np.empty(nnz)


def _sorted_graph(shape, indptr, indices, data) -> sp.csr_matrix:
    S = sp.csr_matrix((data, indices, indptr), shape=shape, copy=False)
    S.has_sorted_indices = True
    return S


def block_strength(A, theta: float, block_size: int) -> sp.csr_matrix:
    """The symmetric strength graph of this rank's diagonal block, node by node.

    Rows ``r`` with the same ``r // block_size`` (global numbering) form a
    node. Nodes ``I != J`` are strongly connected when the Frobenius norms of
    their blocks satisfy ``|A_IJ| >= theta * sqrt(|A_II| |A_JJ|)``, as PyAMG's
    symmetric measure on a BSR matrix (``theta = 0``: every nonzero block). The graph returned is on rows again:
    every row of a node is joined to the other rows of its node and to every
    row of each strongly connected node, so that aggregation, which gives
    rows with the same neighbours the same aggregate, aggregates whole nodes.
    A node cut by a rank boundary is two nodes here. Not collective.
    """
    D = A.diag.tocoo()
    n = D.shape[0]
    first = A.row_layout.start
    node = (np.arange(n, dtype=np.int64) + first) // block_size - first // block_size
    nodes = int(node[-1]) + 1 if n else 0
    N = sp.csr_matrix((D.data * D.data, (node[D.row], node[D.col])), shape=(nodes, nodes))
    N.sum_duplicates()
    N.data = np.sqrt(N.data)
    C = N.tocoo()
    dn = np.zeros(nodes)
    on = C.row == C.col
    dn[C.row[on]] = C.data[on]
    keep = is_strong(C.row, C.col, C.data, dn[C.row], dn[C.col], theta)
    # the same node counts too: its rows belong together
    keep |= C.row == C.col
    strong = sp.csr_matrix((np.ones(int(keep.sum())), (C.row[keep], C.col[keep])),
                           shape=(nodes, nodes))
    member = sp.csr_matrix((np.ones(n), (np.arange(n), node)), shape=(n, nodes))
    S = matmat(matmat(member, strong), transpose(member)).tocoo()
    off = S.row != S.col
    S = sp.csr_matrix((S.data[off], (S.row[off], S.col[off])), shape=(n, n))
    S.sort_indices()
    return S


def _row_max(rows: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``max(0, max of x over each row's entries)`` for each entry's row
    (``rows`` integer labels; sorted, as from a CSR matrix, takes the fast
    path). Not collective."""
    if rows.size == 0:
        return np.zeros(0)
    change = np.flatnonzero(np.diff(rows)) + 1
    if np.all(rows[change] > rows[change - 1]):
        starts = np.concatenate(([0], change))
        m = np.maximum(np.maximum.reduceat(x, starts), 0.0)
        return np.repeat(m, np.diff(np.append(starts, rows.size)))
    low = rows.min()
    m = np.zeros(int(rows.max() - low) + 1)
    np.maximum.at(m, rows - low, x)
    return m[rows - low]


def classical_mask(rows, cols, vals, theta: float) -> np.ndarray:
    """``-a_ij >= theta * max_k (-a_ik)`` and ``a_ij < 0``, entry by entry,
    the maximum over every entry given of the row (``rows`` sorted, each
    row's entries whole). Not collective."""
    rows, cols, vals = np.asarray(rows), np.asarray(cols), np.asarray(vals)
    if vals.dtype == np.float64 and rows.size and bool(np.all(rows[1:] >= rows[:-1])):
        return _classical_mask_blocks(rows, cols, vals, theta)
    neg = np.where(rows != cols, -vals, 0.0)
    return (neg > 0) & (neg >= theta * _row_max(rows, neg))


def _classical_mask_blocks(rows, cols, vals, theta: float) -> np.ndarray:
    """:func:`classical_mask` of sorted rows, by blocks of whole rows on the
    process's threads (the same mask). Not collective."""
    cuts = threads.row_blocks(rows.size, None, MIN_BLOCK_ROWS * 8)
    # a row's entries stay in one block
    cuts[1:-1] = np.searchsorted(rows, rows[cuts[1:-1]], side="left")
    out = np.empty(rows.size, dtype=np.bool_)
    threads.parallel_for(lambda b: classical_mask_rows(rows, cols, vals, float(theta), cuts[b],
                                                       cuts[b + 1], out), cuts.size - 1)
    return out


def _negative_row_max(A) -> np.ndarray:
    """``max(0, max_j (-a_ij))`` over each of this rank's whole rows (off-rank
    columns included; the positive diagonal never counts). Not collective."""
    m = np.zeros(A.row_layout.local_size)
    for M in (A.diag, A.offd):
        nonempty = np.flatnonzero(np.diff(M.indptr) > 0)
        if nonempty.size:
            m[nonempty] = np.maximum(m[nonempty],
                                     np.maximum.reduceat(-M.data, M.indptr[nonempty]))
    return m


def _classical_weak(M: sp.csr_matrix, m: np.ndarray, theta: float, first_col: int) -> bool:
    """Whether the CSR block ``M`` (this rank's rows; column ``c`` is row
    ``c - first_col``, or no row for ``first_col`` None) holds a nonzero
    off-diagonal entry the classical measure calls weak. Not collective."""
    rows = np.repeat(np.arange(M.shape[0]), np.diff(M.indptr))
    neg = -M.data
    off = M.indices != rows + first_col if first_col is not None else True
    weak = off & (M.data != 0) & ~((neg > 0) & (neg >= theta * m[rows]))
    return bool(np.any(weak))


def classical_strength(A, theta: float = 0.3, with_weak: bool = False):
    """The classical (signed) strength graph of this rank's diagonal block.

    Entry ``(i, j)`` (local numbering, ``i != j``) is kept when
    ``-a_ij >= theta * max_k (-a_ik)``, the maximum over the whole row (off-rank
    columns included), and ``a_ij < 0``; the values are ``|a_ij|``. A positive
    off-diagonal entry is never strong: the error that relaxation leaves
    varies slowly along negative couplings only, so positive ones (which
    finite elements give across the weak direction of an anisotropic problem)
    must not join nodes into an aggregate. With ``with_weak``, returns
    ``(S, weak)`` where ``weak`` tells whether this rank's rows hold a
    nonzero off-diagonal entry that is not strong (the prolongator's filter
    has work). Not collective.

    References
    ----------
    J. W. Ruge, K. Stueben, "Algebraic multigrid", in Multigrid Methods,
    SIAM, 1987; PyAMG ``classical_strength_of_connection(A, theta,
    norm='min')``.
    """
    if _takes_kernels(A):
        S, weak = _classical_blocks(A, theta)
    else:
        S, weak = _classical_arrays(A, theta)
    return (S, weak) if with_weak else S


def _takes_kernels(A) -> bool:
    """Whether the compiled passes apply: real float64 blocks in canonical
    form (sorted, no duplicates), as a DistCSR keeps them. Not collective."""
    return all(M.dtype == np.float64 and M.has_canonical_format for M in (A.diag, A.offd))


def _unsigned(a: np.ndarray) -> np.ndarray:
    return a.view(np.dtype("u%d" % a.dtype.itemsize))


def _classical_blocks(A, theta: float) -> tuple[sp.csr_matrix, bool]:
    """:func:`classical_strength` by blocks of rows on the process's threads
    (the same graph). Not collective."""
    D, O = A.diag, A.offd
    n = D.shape[0]
    d_ptr, d_ind, o_ptr = _unsigned(D.indptr), _unsigned(D.indices), _unsigned(O.indptr)
    cuts = threads.row_blocks(n, None, MIN_BLOCK_ROWS)
    nblocks = cuts.size - 1
    m = np.empty(n)
    sizes = np.zeros(n + 1, dtype=np.int64)
    weak = np.zeros(n, dtype=np.bool_)
    threads.parallel_for(
        lambda b: classical_count(d_ptr, d_ind, D.data, o_ptr, O.data, float(theta),
                                  cuts[b], cuts[b + 1], m, sizes, weak), nblocks)
    indptr, indices, data = _graph_arrays(sizes)
    threads.parallel_for(
        lambda b: classical_fill(d_ptr, d_ind, D.data, float(theta), cuts[b], cuts[b + 1], m,
                                 indptr, _unsigned(indices), data), nblocks)
    return _sorted_graph(D.shape, indptr, indices, data), bool(weak.any())


def _classical_arrays(A, theta: float) -> tuple[sp.csr_matrix, bool]:
    """:func:`classical_strength` in numpy, for blocks the compiled passes do
    not take. Not collective."""
    D = A.diag.tocoo()
    m = _negative_row_max(A)
    # -a_ij, and 0 on the diagonal (a_ii > 0 is never strong anyway)
    neg = -D.data
    neg[D.row == D.col] = 0.0
    keep = (neg > 0) & (neg >= theta * m[D.row])
    S = _graph(D, keep)
    # an entry off the diagonal is nonzero exactly where neg is
    weak = (S.nnz < np.count_nonzero(neg)
            or _classical_weak(A.offd, m, theta, None))
    return S, weak


@STRENGTH.register("symmetric")
class SymmetricStrength:
    """The symmetric measure of :func:`symmetric_strength` with threshold ``theta``.

    ``theta`` in ``[0, 1]`` (default 0: every nonzero coupling is strong) also
    tells the prolongator smoothing which couplings to filter out
    (:func:`.smooth.filtered_matrix`). ``block_size`` (default 1) groups
    interlaced unknowns into nodes (:func:`block_strength`): PETSc's matrix
    block size, the block size of PyAMG's BSR matrices (e.g. 2 or 3 for the
    displacements of linear elasticity). With ``block_size > 1`` the
    prolongator smoothing is not filtered (PyAMG's default,
    ``filter_entries=False``). Construction checks the options and is not
    collective.

    Raises
    ------
    TypeError, ValueError
        If ``theta`` is not a real number in ``[0, 1]`` or ``block_size`` not
        a positive int.
    """

    def __init__(self, theta: float = 0.0, block_size: int = 1):
        self.theta = check_real("theta", theta, low=0.0, high=1.0)
        self.block_size = check_int("block_size", block_size, low=1)

    def __call__(self, A) -> sp.csr_matrix:
        """The strength graph of this rank's diagonal block of ``A``. Not collective."""
        if self.block_size > 1:
            return block_strength(A, self.theta, self.block_size)
        return symmetric_strength(A, self.theta)

    @property
    def filters(self) -> bool:
        """Whether :meth:`strong` can call a nonzero coupling weak. Not collective."""
        return self.theta > 0 and self.block_size == 1

    def on_level(self, level: int) -> "SymmetricStrength":
        """The measure itself: every level is filtered alike. Not collective."""
        return self

    def has_weak(self, A) -> bool:
        """Whether :meth:`strong` may call a nonzero entry of this rank's rows
        of ``A`` weak (without looking: whether the measure filters at all).
        Not collective."""
        return self.filters

    def strong(self, rows, cols, vals, diag_row, diag_col) -> np.ndarray:
        """The strong entries among the given ones (off the diagonal). Not collective."""
        if not self.filters:
            return (rows != cols) & (vals != 0)
        return is_strong(rows, cols, vals, diag_row, diag_col, self.theta)

    def options(self) -> dict:
        """The options, as a descriptor's dict. Not collective."""
        if self.block_size > 1:
            return {"theta": self.theta, "block_size": self.block_size}
        return {"theta": self.theta}


@STRENGTH.register("classical")
class ClassicalStrength:
    """The classical signed measure of :func:`classical_strength`.

    ``theta`` in ``[0, 1]`` (default 0.3): a negative coupling is strong when
    it is at least ``theta`` times the row's largest negative one; positive
    couplings never are. The prolongator smoothing of the first
    ``filter_levels`` levels (default 1: the finest only; None: every level)
    filters the weak ones out (lumped onto the diagonal): that keeps the
    prolongator from spreading across the weak direction of an anisotropic
    problem. Coarse levels of the Laplacians have many small weak
    couplings, and filtering them would cost a filtered copy of each level
    operator in the set-up for no fewer iterations. 0.3 lies above the ratio 1/4 of the corner
    to the strong couplings of bilinear finite elements on a strongly
    anisotropic problem, so those coarsen along the strong direction only,
    and below every ratio of the 5- and 7-point Laplacians' coarse levels
    that matters for their aggregates. For a scalar problem whose matrix is
    close to an M-matrix; for systems (elasticity) use ``"symmetric"``.
    Construction checks ``theta`` and is not collective.

    Raises
    ------
    TypeError, ValueError
        If ``theta`` is not a real number in ``[0, 1]`` or ``filter_levels``
        neither None nor a non-negative int.
    """

    def __init__(self, theta: float = 0.3, filter_levels: int | None = 1):
        self.theta = check_real("theta", theta, low=0.0, high=1.0)
        self.filter_levels = check_int("filter_levels", filter_levels, low=0, allow_none=True)
        #: whether this measure's filter drops anything (see on_level)
        self.filters = self.filter_levels != 0
        # (A, whether its rows hold weak entries) of the last graph built: the
        # prolongator smoothing of the same level asks next (has_weak)
        self._last = (None, True)

    def __call__(self, A) -> sp.csr_matrix:
        """The strength graph of this rank's diagonal block of ``A``. Not collective."""
        S, weak = classical_strength(A, self.theta, with_weak=True)
        self._last = (A, weak)
        return S

    def on_level(self, level: int) -> "ClassicalStrength":
        """The measure itself on the first ``filter_levels`` levels, else a
        copy that filters nothing. Not collective."""
        if self.filter_levels is None or level < self.filter_levels:
            return self
        unfiltered = copy.copy(self)
        unfiltered.filters = False
        return unfiltered

    def has_weak(self, A) -> bool:
        """Whether this rank's rows of ``A`` hold a nonzero off-diagonal
        entry :meth:`strong` calls weak. Not collective."""
        last, weak = self._last
        if last is A:
            return weak
        m = _negative_row_max(A)
        return (_classical_weak(A.diag, m, self.theta, 0)
                or _classical_weak(A.offd, m, self.theta, None))

    def strong(self, rows, cols, vals, diag_row, diag_col) -> np.ndarray:
        """The strong entries among the given ones, which must hold whole rows
        (``rows`` a contiguous range of labels). Not collective."""
        return classical_mask(rows, cols, vals, self.theta)

    def options(self) -> dict:
        """The options, as a descriptor's dict. Not collective."""
        return {"theta": self.theta, "filter_levels": self.filter_levels}
