"""Smoothed aggregation whose hierarchy is the same bits for any partition.

``amg(reproducible=True)`` builds each level from the canonical keys of its
unknowns (:mod:`dmsolve.reproducible`), never from where they are stored:

- **aggregation** (:func:`mis2_aggregation`): a distance-2 maximal
  independent set of the strength graph with priorities from a bijective
  hash of the keys. blocks (Bell, Dalton & Olson 2012), filled where it leaves wide
  gaps, roots' neighbours joining the root, the rest the aggregate most of
  their neighbours are in; aggregates cross ranks freely;
- **tentative prolongator**: each aggregate's norm of the near null space
  summed on its root's rank in key order;
- **products** (prolongator smoothing ``A T``, ``A P``, ``R (A P)``): each
  local row of the left factor is stored in key order, so the SpGEMM
  (:func:`dmsolve.spgemm.matmat`, which adds in stored order at any thread
  count) adds the terms of every entry in one canonical order; ``R = P^T`` is built
  explicitly on the coarse unknowns' owners, so restriction is a product
  too (a transpose product would add partial sums across ranks);
- **coarsest solve** (:class:`CanonicalCoarseSolver`): the pseudo-inverse
  of the coarse matrix in key order, the same on every rank, applied row by
  row in key order.

A coarse unknown is owned by its root's rank and its key is the root's
key. Smoothers are made of matvecs and entrywise updates (Chebyshev,
Jacobi, l1-Jacobi), and their eigenvalue estimates are reproducible
(:func:`preconditioners._eigen.lanczos_extremes`). Every rank takes part in
every level (no agglomeration).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from dmsolve import DistCSR, Layout
from dmsolve.reproducible import canonical, keys_of
from dmsolve.partition import exchange, fetch
from dmsolve.spgemm import matmat, subtract_scaled

from .._dist import fetch_rows
from .._eigen import lanczos_extremes
from ._repro_kernels import (dense_rows, mis2_decide, row_argmax, row_best_aggregate, row_max,
                             segment_sums)

__all__ = ["BLOCK_BITS", "priority", "strength_graph", "mis2_aggregation", "tentative", "smoothed",
           "transpose_rows", "galerkin", "CanonicalCoarseSolver", "Prolongation",
           "KEY_LIMIT"]

#: Canonical keys must lie in ``[0, KEY_LIMIT)``: the priority hash is a
#: bijection of 40-bit integers, and a state and a priority fit exactly in
#: a float64 (halo exchanges carry float64).
KEY_LIMIT = 1 << 40
_MASK40 = np.uint64(KEY_LIMIT - 1)
_OUT, _UNDECIDED, _IN = 0, 1, 2


#: Keys per block of :func:`priority`: ``2**BLOCK_BITS`` consecutive keys.
BLOCK_BITS = 3
#: Whether :func:`mis2_aggregation` roots aggregates in the wide gaps.
FILL = True
#: Rounds of that filling at most (more: 2D Poisson 1000^2 18 -> 14 CG
#: iterations at 4 rounds, but denser coarse levels: 21 entries per row on
#: level 2 against PyAMG's 9).
FILL_ROUNDS = 1


def priority(keys: np.ndarray) -> np.ndarray:
    """Priorities of the distance-2 independent set: a bijection of 40-bit
    keys, as int64. The high bits are a pseudo-random permutation (odd
    multipliers and xor-shifts) of the key's block of ``2**BLOCK_BITS``
    consecutive keys, the low bits the key's place in its block, first
    highest: PyAMG's greedy order inside a block, random between blocks.
    Fully random priorities make ragged aggregates (2D Poisson 200^2, CG + amg:
    13 iterations, 12 with blocks of 8, 10 for PyAMG's greedy pass over all
    rows); blocks of 64 cost anisotropic problems iterations. Not collective."""
    k = np.asarray(keys).astype(np.uint64) & _MASK40
    bits = np.uint64(BLOCK_BITS)
    mask = np.uint64((1 << (40 - BLOCK_BITS)) - 1)
    h = k >> bits
    h = (h * np.uint64(0x9E3779B97F4A7C15)) & mask
    h ^= h >> np.uint64(11)
    h = (h * np.uint64(0xBF58476D1CE4E5B9)) & mask
    h ^= h >> np.uint64(9)
    low = np.uint64((1 << BLOCK_BITS) - 1) - (k & np.uint64((1 << BLOCK_BITS) - 1))
    return ((h << bits) | low).astype(np.int64)


def _ghosts(A, values: np.ndarray) -> np.ndarray:
    """The ghost columns' values of a float64 array of ``A``'s own columns
    (a copy: the halo reuses its buffer). Collective among neighbours."""
    return np.array(A.halo.exchange(np.ascontiguousarray(values, dtype=np.float64)))


def strength_graph(A, measure):
    """The strong couplings of ``A``'s canonical local rows by the strength
    measure ``measure`` (:class:`.strength.SymmetricStrength` without
    ``block_size``, or :class:`.strength.ClassicalStrength`).

    Returns ``(S, strong)``: ``S`` the graph (local rows x owned columns then
    ghosts, no diagonal) and ``strong`` the mask of strong entries over the
    canonical rows' entries (symmetric: ``|a_ij| >= theta sqrt(|a_ii a_jj|)``,
    every nonzero coupling for ``theta = 0``; classical: ``-a_ij >= theta
    max_k (-a_ik)``). Each depends on the entries of a whole row and the
    diagonal only, not on their order, so it is the same at any partition.
    Collective among neighbours (the ghost diagonal).
    """
    M = A.local_canonical()
    n = M.shape[0]
    rows = np.repeat(np.arange(n), np.diff(M.indptr))
    cols = M.indices
    off = cols != rows
    d = A.diagonal().local.astype(np.float64)
    d_ext = np.concatenate((d, _ghosts(A, d)))
    strong = off & measure.strong(rows, cols, M.data, d[rows], d_ext[cols])
    S = sp.csr_matrix((np.ones(int(strong.sum())), (rows[strong], cols[strong])),
                      shape=M.shape)
    return S, strong


def mis2_aggregation(A, S: sp.csr_matrix, keys: np.ndarray, fill: bool = FILL):
    """Aggregates of the strength graph ``S`` from a distance-2 maximal
    independent set, keyed on the canonical ``keys`` of the rows.

    Rounds of two halo exchanges and one reduction: an undecided node whose
    (state, priority) is the largest within distance 2 joins the set, an
    undecided node with a member within distance 2 leaves. With ``fill``,
    the nodes next to no root that have such neighbours add, as roots, those
    whose priority is the largest within distance 2 among them (as PyAMG's
    third pass starts aggregates of what is left): a random set leaves
    wider gaps than PyAMG's greedy one, and without this they swell the
    aggregates around them (CG + amg iterations, fill off / on / PyAMG's
    aggregates: 2D Poisson 200^2 14 / 12 / 10, 3D Poisson 40^3 10 / 9 / 9,
    operator complexity 1.41 / 1.56 / 1.54 in 3D). Then every node next to a root joins the
    neighbouring root of highest priority, and the rest join the aggregate
    most of their neighbours are in (highest priority among equals). Nodes
    without a strong coupling stay out (id -1), as PyAMG's.

    Returns ``(agg, layout, root_keys)``: each row's coarse global id (or -1)
    in the coarse ``layout`` (a rank owns its roots, numbered in key order)
    and the keys of this rank's coarse unknowns (their roots'). Collective
    on ``A.comm``.

    References
    ----------
    N. Bell, S. Dalton, L. Olson, "Exposing fine-grained parallelism in
    algebraic multigrid methods", SIAM J. Sci. Comput. 34(4), 2012.
    """
    comm = A.comm
    n = S.shape[0]
    prio = priority(keys).astype(np.float64)
    isolated = np.diff(S.indptr) == 0
    state = np.where(isolated, _OUT, _UNDECIDED)
    m1 = np.empty(n)
    m2 = np.empty(n)
    ip, ix = S.indptr, S.indices
    # (state, priority) as one float64, exact (< 2**42); the rows' own values,
    # then the ghosts'
    key = np.empty(n + A.ghosts.size)
    left = int((state == _UNDECIDED).sum())
    while comm.allreduce(left, op=MPI.SUM):
        np.add(state * float(KEY_LIMIT), prio, out=key[:n])
        key[n:] = A.halo.exchange(key[:n])
        row_max(ip, ix, key, key[:n], m1)
        key[:n] = m1                  # the ghosts' distance-1 maxima next
        key[n:] = A.halo.exchange(m1)
        row_max(ip, ix, key, m1, m2)
        left = mis2_decide(state, prio, m2, float(KEY_LIMIT))
    root = state == _IN
    for _ in range(FILL_ROUNDS if fill else 0):
        # nodes two steps from every root (not next to one) that have such
        # nodes as neighbours: each local maximum of priority among them
        # roots an aggregate of its own (as PyAMG's third pass starts new
        # aggregates), so that they do not all swell their neighbours' ones
        near = np.empty(n)
        rv = np.where(root, 1.0, 0.0)
        row_max(ip, ix, np.concatenate((rv, _ghosts(A, rv))), rv, near)
        left = ~isolated & (near == 0)
        lv = np.where(left, prio, -1.0)
        lmax = np.empty(n)
        row_max(ip, ix, np.concatenate((lv, _ghosts(A, lv))), np.full(n, -1.0), lmax)
        l1 = np.maximum(lmax, lv)
        l2 = np.empty(n)
        row_max(ip, ix, np.concatenate((l1, _ghosts(A, l1))), l1, l2)
        more = left & (lmax >= 0) & (prio == l2)
        if not comm.allreduce(int(more.any()), op=MPI.SUM):
            break
        root = root | more
    # coarse numbering: this rank's roots in key order, ranks one after another
    order = np.argsort(keys[root], kind="stable")
    root_rows = np.flatnonzero(root)[order]
    clay = Layout.from_local_size(root_rows.size, comm)
    agg = np.full(n, -1, dtype=np.int64)
    agg[root_rows] = clay.start + np.arange(root_rows.size)
    at = np.empty(n, dtype=np.int64)
    # the priority of each row's aggregate (-1: none yet). Pass 1: the roots'
    # neighbours join the root of highest priority among them; pass 2: the
    # rest join the aggregate of their joined neighbour of highest priority.
    prio_of_agg = np.where(root, prio, -1.0)
    for second in (False, True):
        val_ext = np.concatenate((prio_of_agg, _ghosts(A, prio_of_agg)))
        agg_ext = np.concatenate((agg, _ghosts(A, agg.astype(np.float64)).astype(np.int64)))
        if second:
            # the aggregate most of the row's neighbours are in (compact shapes)
            row_best_aggregate(ip, ix, agg_ext, val_ext, (agg < 0) & ~isolated, at)
        else:
            row_argmax(ip, ix, val_ext, at)
        take = (agg < 0) & ~isolated & (at >= 0)
        agg[take] = agg_ext[at[take]]
        prio_of_agg[take] = val_ext[at[take]]
    return agg, clay, keys[root_rows]


def _sequential_sums(comm, clay: Layout, agg, keys, values) -> np.ndarray:
    """``sum of values[i]`` over the rows of each coarse unknown, added on
    its owner in key order. Collective on ``comm``."""
    mem = agg >= 0
    g, k, v = exchange(comm, clay.owner(agg[mem]) if mem.any() else np.zeros(0, np.int64),
                       agg[mem], keys[mem], values[mem])
    order = np.lexsort((k, g))
    out = np.zeros(clay.local_size)
    segment_sums(g[order] - clay.start, v[order], out)
    return out


def tentative(A, agg, clay: Layout, keys, B: np.ndarray):
    """The tentative prolongator of one candidate ``B`` (local rows x 1) and
    the coarse candidate (the aggregates' norms), norms summed in key order.
    Collective on ``A.comm``."""
    comm = A.comm
    b = B[:, 0]
    norms = np.sqrt(_sequential_sums(comm, clay, agg, keys, b * b))
    mem = np.flatnonzero(agg >= 0)
    nm = fetch(clay, norms, agg[mem])
    with np.errstate(invalid="ignore", divide="ignore"):
        vals = np.where(nm > 0, b[mem] / np.where(nm > 0, nm, 1.0), 0.0)
    T = sp.csr_matrix((vals, (mem, agg[mem])), shape=(A.row_layout.local_size,
                                                       clay.global_size))
    return (DistCSR.from_local_rows(T, A.row_layout, clay, check_finite=False),
            norms.reshape(-1, 1))


def _ext_rows(A, B: DistCSR) -> sp.csr_matrix:
    """``[own rows of B; rows of B at A's ghost columns]`` with global columns:
    the right factor of a canonical local product. Collective on ``A.comm``."""
    own = B.local_rows()
    return sp.vstack([own, fetch_rows(B, A.ghosts, label="repro")], format="csr")


def _global_cols(A, M: sp.csr_matrix) -> sp.csr_matrix:
    """Canonical local rows (owned columns then ghosts) with global columns.
    ``M`` is left as it is: the copy sorts its own values."""
    n = A.col_layout.local_size
    cols = M.indices.astype(np.int64) + A.col_layout.start
    ghost = M.indices >= n
    cols[ghost] = A.ghosts[M.indices[ghost] - n]
    G = sp.csr_matrix((M.data.copy(), cols, M.indptr.copy()), shape=(M.shape[0], A.shape[1]))
    G.sort_indices()
    return G


def smoothed(A, T: DistCSR, ckeys, omega: float, filters: bool, strong):
    """``P = T - omega/rho D_F^-1 A_F T`` with, when ``filters``, the weak
    couplings of the canonical rows (``~strong``) lumped onto the diagonal in
    key order, and the estimate ``rho`` of ``rho(D_F^-1 A_F)``; ``(P, rho)``.
    Collective on ``A.comm``."""
    M = A.local_canonical()
    n = M.shape[0]
    rows = np.repeat(np.arange(n), np.diff(M.indptr))
    F, FA = M, A
    weak = (M.indices != rows) & ~strong if filters else None
    if weak is not None and A.comm.allreduce(bool(weak.any()), op=MPI.LOR):
        lump = np.zeros(n)
        segment_sums(rows[weak], M.data[weak], lump)       # in key order per row
        keep = ~weak
        data = M.data[keep].copy()
        on = M.indices[keep] == rows[keep]
        data[on] += lump[rows[keep][on]]
        F = sp.csr_matrix((data, M.indices[keep],
                           np.concatenate(([0], np.cumsum(np.bincount(rows[keep],
                                                                      minlength=n))))),
                          shape=M.shape)
        FA = DistCSR.from_local_rows(_global_cols(A, F), A.row_layout, A.col_layout,
                                     check_finite=False)
        FA.origin = keys_of(A)
    d = F.diagonal()[:n] if F.shape[1] >= n else np.zeros(n)
    with np.errstate(divide="ignore"):
        dinv = np.where(d != 0, 1.0 / np.where(d == 0, 1.0, d), 0.0)
    if omega is None:                      # unsmoothed aggregation
        return T, 0.0
    _, rho = lanczos_extremes(FA, np.abs(dinv), 15, reproducible=True)
    FT = matmat(F, _ext_rows(A, T))
    scale = (omega / rho) if rho > 0 else 0.0
    P = subtract_scaled(T.local_rows(), FT, scale * dinv)
    if FA is not A:
        FA.free()
    return DistCSR.from_local_rows(P, A.row_layout, T.col_layout, check_finite=False), rho


def transpose_rows(P: DistCSR) -> DistCSR:
    """``R = P^T`` stored by the coarse unknowns' owners (entries copied, not
    summed). Collective on ``P.comm``."""
    loc = P.local_rows().tocoo()
    clay = P.col_layout
    coarse = loc.col.astype(np.int64)
    fine = loc.row.astype(np.int64) + P.row_layout.start
    dest = clay.owner(coarse) if coarse.size else np.zeros(0, np.int64)
    coarse, fine, v = exchange(P.comm, dest, coarse, fine, loc.data)
    R = sp.csr_matrix((v, (coarse - clay.start, fine)), shape=(clay.local_size, P.shape[0]))
    return DistCSR.from_local_rows(R, clay, P.row_layout, check_finite=False)


class _LocalRows:
    """This rank's rows of a product held as scipy CSR with global columns,
    and what :func:`fetch_rows` reads of a row-distributed matrix (``comm``,
    ``row_layout``, ``shape``): ``A P`` is only read at ``R``'s ghost
    columns, so it is never split into a DistCSR's blocks. Not collective."""

    def __init__(self, local: sp.csr_matrix, row_layout: Layout, ncols: int):
        self.local = local
        self.comm = row_layout.comm
        self.row_layout = row_layout
        self.shape = (row_layout.global_size, ncols)


def galerkin(A, P: DistCSR, R) -> DistCSR:
    """``R (A P)`` with every entry's terms added in key order (``A`` and
    ``R`` canonical). Collective on ``A.comm``."""
    AP = _LocalRows(matmat(A.local_canonical(), _ext_rows(A, P)), A.row_layout, P.shape[1])
    ext = sp.vstack([AP.local, fetch_rows(AP, R.ghosts, local=AP.local, label="repro")],
                    format="csr")
    Ac = matmat(R.local_canonical(), ext)
    clay = P.col_layout
    return DistCSR.from_local_rows(Ac, clay, clay, check_finite=False)


class Prolongation:
    """A level's ``P`` (canonical) with restriction by the explicit ``R = P^T``
    (canonical): ``rmatvec`` is ``R``'s product, so the cycle's restriction
    adds its terms in key order too. Other attributes are ``P``'s. Not
    collective."""

    def __init__(self, P, R):
        self.P, self.R = P, R

    def matvec(self, x, out=None):
        """``P x``. Collective among neighbours."""
        return self.P.matvec(x, out=out)

    def rmatvec(self, y, out=None):
        """``R y = P^T y``. Collective among neighbours."""
        return self.R.matvec(y, out=out)

    @property
    def local_nbytes(self) -> int:
        """Bytes of ``P`` and ``R`` on this rank. Not collective."""
        return int(self.P.local_nbytes + self.R.local_nbytes)

    def free(self) -> None:
        """Free both halo plans. Not collective."""
        self.P.free()
        self.R.free()

    def __getattr__(self, name):
        return getattr(self.P, name)


class CanonicalCoarseSolver:
    """The coarsest solve of the reproducible hierarchy: the (pseudo-)inverse
    of the coarse matrix gathered in key order, computed alike on every rank
    (the same input, the same shapes), each rank keeping its rows; a solve
    gathers ``b``, puts it in key order and sums each row in that order.
    Set-up is collective on ``A.comm``; :meth:`solve` is collective (one
    ``Allgatherv``)."""

    kind = "dense"

    def __init__(self, A, keys: np.ndarray):
        import scipy.linalg as sla
        comm = A.comm
        lay = self.layout = A.row_layout
        S = A.to_scipy()
        allkeys = np.concatenate(comm.allgather(np.asarray(keys, dtype=np.int64)))
        self._perm = np.argsort(allkeys, kind="stable")      # key position -> index
        where = np.empty_like(self._perm)
        where[self._perm] = np.arange(self._perm.size)
        self.n = S.shape[0]
        D = S[self._perm][:, self._perm].toarray()
        if self.n and np.allclose(D, D.T, rtol=1e-12, atol=0):
            w, V = np.linalg.eigh(D)
            tol = np.abs(w).max() * self.n * np.finfo(float).eps
            winv = np.where(np.abs(w) > tol, 1.0 / np.where(w == 0, 1, w), 0.0)
            inv = (V * winv) @ V.T
        else:
            inv = sla.pinv(D) if self.n else np.zeros((0, 0))
        self._rows = np.ascontiguousarray(inv[where[lay.start:lay.stop]])
        self._b = np.zeros(self.n)
        self._bk = np.zeros(self.n)
        self._counts = lay.local_sizes.astype(np.int64)
        self._displs = lay.ranges[:-1].astype(np.int64)
        self.nnz = int(S.nnz)

    @property
    def nbytes(self) -> int:
        """Bytes kept on this rank (its rows of the inverse, two buffers)."""
        return int(self._rows.nbytes + self._b.nbytes + self._bk.nbytes)

    def solve(self, b: np.ndarray, x: np.ndarray) -> None:
        """``x = A^+ b`` on this rank's rows. Collective (one ``Allgatherv``)."""
        self.layout.comm.Allgatherv([b, MPI.DOUBLE],
                                    [self._b, (self._counts, self._displs), MPI.DOUBLE])
        np.take(self._b, self._perm, out=self._bk)
        dense_rows(self._rows, self._bk, x)


def check_key_range(A) -> None:
    """Refuse keys outside ``[0, KEY_LIMIT)`` (rank-independent for global ids;
    agreed by the caller). Not collective."""
    k = keys_of(A)
    if k.size and (k.min() < 0 or k.max() >= KEY_LIMIT):
        raise ValueError("amg(reproducible=True) takes canonical keys below 2**40")


def level_operator(Ac: DistCSR, ckeys: np.ndarray):
    """A coarse operator with its keys, in canonical form. Collective."""
    Ac.origin = np.asarray(ckeys, dtype=np.int64)
    return canonical(Ac)
