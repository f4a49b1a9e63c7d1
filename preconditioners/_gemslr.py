"""GeMSLR: multilevel Schur-complement low-rank preconditioning (parGeMSLR style),
for indefinite and nonsymmetric systems where AMG and plain ILU give up.

Stages, in the paper's words: ``multilevel_order`` (k-way partitions, interiors
and interfaces, recursion on the interface), ``B`` factorisation (ILUT of each
subdomain on its owner), last-level factorisation, low-rank correction
(:func:`~preconditioners._arnoldi.krylov_schur` on ``E B^{-1} F C^{-1}``),
and the recursive solve ``GeMSLR._solve``.
"""

from __future__ import annotations

import numbers
import time

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from dmsolve import DistCSR, DistVector, Layout, agree
from dmsolve.bsp import NeighborExchange

from ._arnoldi import krylov_schur
from dmsolve import Preconditioner
from ._dist import fetch_rows
from ._local import PivotError, local_solver
from ._registry import register

__all__ = ["GeMSLR", "multilevel_order", "LAST_LEVEL_SOLVERS"]

#: how the last level (the interface of the interfaces) is solved
LAST_LEVEL_SOLVERS = ("redundant", "bjacobi")


# -- ordering (serial, on one rank) ---------------------------------------------------

def multilevel_order(A: sp.csr_matrix, nlev: int, ncomp: int, seed: int = 0,
                     min_size: int | None = None) -> tuple[list[list[np.ndarray]], np.ndarray]:
    """The GeMSLR multilevel ordering of a matrix graph. Not collective.

    Level ``l`` splits the nodes ``N_l`` (``N_0`` = all) by a METIS k-way
    partition into ``ncomp`` parts; a node with a neighbour in a part of
    smaller number is *interface*, the others are the *interiors* of their
    part. Interiors of different parts are not coupled, so ``B_l`` is block
    diagonal. ``N_{l+1}`` is the interface; the recursion stops after
    ``nlev - 1`` splits, or earlier when fewer than ``min_size`` nodes
    (default ``2 * ncomp``) are left or a split finds no interior. What is
    left is the last level.

    Parameters
    ----------
    A : scipy sparse matrix, square
        Its pattern, symmetrised, is the graph.
    nlev : int
        Levels including the last (``nlev = 1``: the whole matrix is the last
        level).
    ncomp : int
        Parts per level.
    seed : int
        METIS seed; the ordering is a deterministic function of the inputs.

    Returns
    -------
    levels : list of lists of int64 arrays
        ``levels[l][j]``: sorted ids of the interior of part ``j`` at level
        ``l`` (possibly empty).
    last : int64 array
        Sorted ids of the last level.

    References
    ----------
    .. [1] G. Dillon, V. Kalantzis, Y. Xi, Y. Saad, "A hierarchical low rank
       Schur complement preconditioner for indefinite linear systems", SIAM
       J. Sci. Comput. 40(4), 2018 (the multilevel k-way reordering).
    """
    from dmsolve.partition import metis_graph_parts as _metis_serial

    A = sp.csr_matrix(A)
    n = A.shape[0]
    min_size = 2 * ncomp if min_size is None else min_size
    G = sp.csr_matrix((np.ones(A.nnz, dtype=np.int8), A.indices, A.indptr), shape=A.shape)
    G = (G + G.T).tocsr()
    nodes = np.arange(n, dtype=np.int64)
    levels: list[list[np.ndarray]] = []
    for _ in range(nlev - 1):
        if nodes.size < max(min_size, 2):
            break
        sub = G[nodes][:, nodes].tocoo()
        parts = _metis_serial(sub.row.astype(np.int64), sub.col.astype(np.int64),
                              nodes.size, ncomp, seed)
        iface = np.zeros(nodes.size, dtype=bool)
        cross = parts[sub.row] > parts[sub.col]
        iface[sub.row[cross]] = True
        if iface.all() or not iface.any():
            break
        inner = ~iface
        levels.append([nodes[inner & (parts == j)] for j in range(ncomp)])
        nodes = nodes[iface]
    return levels, nodes


def _start_vector(ids: np.ndarray) -> np.ndarray:
    """Pseudo-random entries that depend on the original global id only, so the
    Arnoldi start (and the preconditioner) is the same at every rank count."""
    h = (ids.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)) * np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(31)
    h *= np.uint64(0x94D049BB133111EB)
    h ^= h >> np.uint64(29)
    return (h >> np.uint64(11)).astype(np.float64) / float(2 ** 53) - 0.5


# -- option checks -------------------------------------------------------------------

def _int_option(name, value, low):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) \
            or value < low:
        raise ValueError("gemslr: %s must be an integer >= %d, got %r" % (name, low, value))
    return int(value)


def _float_option(name, value, low, high=np.inf, low_open=False):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) \
            or not np.isfinite(value) or value < low or value > high \
            or (low_open and value == low):
        rng = "(%g, %g]" % (low, high) if low_open else "[%g, %g]" % (low, high)
        raise ValueError("gemslr: %s must be a real number in %s, got %r" % (name, rng, value))
    return float(value)


# -- the preconditioner ----------------------------------------------------------------

class _Level:
    """One level ``A_l = [B F; E C]`` on this rank (l < last)."""

    __slots__ = ("nB", "off", "sub_bounds", "blocks", "solvers", "E", "F", "C", "W", "Hc",
                 "zB", "yC", "tB", "tC", "tC2", "s_loc", "s_glob", "lr",
                 "n_iface", "n_interior", "n_sub")


class GeMSLR(Preconditioner):
    """Multilevel Schur-complement low-rank preconditioner (GeMSLR).

    Each level ``A_l = [B_l F_l; E_l C_l]`` (interiors first, interface last,
    see :func:`multilevel_order`) is solved by the block LDU factorisation
    with ``B_l`` replaced by the ILUT of each subdomain and the Schur
    complement ``S_l = C_l - E_l B_l^{-1} F_l`` by
    ``S_l^{-1} ~= M_{l+1} (I + W_l H_l W_l^T)``: ``M_{l+1}`` is the
    preconditioner of the next level (``A_{l+1} = C_l``) and ``W_l``, ``H_l``
    the low-rank correction from the ``lr_rank`` eigenvalues of largest
    modulus of ``G_l = I - S_l M_{l+1}`` (``= E B^{-1} F C^{-1}`` when
    ``M_{l+1} = C_l^{-1}``): with the Schur form ``G_l W = W T``,
    ``(I - G_l)^{-1} ~= I + W ((I - T)^{-1} - I) W^T``. The last level is an
    ILUT of ``A_L``, redundant on every rank or block Jacobi.

    Parameters
    ----------
    A : DistCSR
        Square, rows and columns distributed alike.
    nlev : int
        Levels including the last (parGeMSLR ``nlev``; default 4).
    ncomp : int
        Subdomains per level (parGeMSLR ``ncomp``; default 32); at least
        ``comm.size`` are used, so every rank owns a subdomain.
    ilu_droptol : float
        ILUT drop tolerance (parGeMSLR ``ilu_droptol``, default 1e-3).
    ilu_max_row_nnz : int
        Fill limit (parGeMSLR ``ilu_max_row_nnz``, default 200). SuperLU's
        ILUTP has no per-row cap, so it bounds the fill ratio of each block:
        ``fill_factor = ilu_max_row_nnz / (average row count of the block)``.
    lr_rank : int
        Low-rank correction rank per level (parGeMSLR ``lr_rank``, default
        32); 0 switches the correction off and the preconditioner is exactly
        the multilevel block LDU with ILUT.
    lr_tol_eig : float
        Residual tolerance of the Schur vectors (parGeMSLR ``lr_tol_eig``,
        default 1e-3).
    lr_maxits : int
        Maximum thick restarts (parGeMSLR ``lr_maxits``, default 3). The
        leading ``lr_rank`` Schur vectors are kept whether or not they met
        ``lr_tol_eig`` by then; :meth:`describe` says how many did.
    lr_arnoldi_factor : float
        Arnoldi basis size per cycle, ``lr_arnoldi_factor * lr_rank``
        (parGeMSLR ``lr_arnoldi_factor``, default 2).
    lr_tr_factor : float
        Fraction of the unwanted basis kept at a thick restart (parGeMSLR
        ``lr_tr_factor``, 0.25).
    last_level : {"redundant", "bjacobi"}
        ``"redundant"`` (default): every rank factors the whole last level
        (the same factor at every rank count); ``"bjacobi"``: each rank
        factors its own rows of it.
    seed : int
        METIS seed.

    Raises
    ------
    ValueError, TypeError
        On every rank, for a bad option or operator, or a zero pivot in any
        rank's factorisation.

    Notes
    -----
    Set-up is collective on ``A.comm``. The ordering is computed by serial
    METIS on rank 0 (the graph is gathered there, as in
    :func:`dmsolve.partition.metis_partition`) and does not depend on the
    number of ranks; subdomain ``j`` of ``K`` goes to rank
    ``j * size // K``. The set-up keeps a few integer arrays of the global
    size on every rank (the permutation and the level of every row), like the
    gathered graph on rank 0, which is fine up to some 10^7 rows. :meth:`apply` is collective on ``A.comm`` (halo
    exchanges of the coupling blocks, one ``Allreduce`` per low-rank level,
    one ``Allgatherv`` for a redundant last level) and allocates nothing
    (the work vectors are preallocated).

    :meth:`describe` reports ``nlev`` (levels built), ``interface_sizes``,
    ``ranks_found`` (Schur vectors kept per level), ``hierarchy`` (per level:
    rows, subdomains, interior and interface sizes, rank, converged vectors,
    restarts, Arnoldi steps, eigenvalues as ``[re, im]``), ``fill_ilu`` (ILUT
    factor nonzeros over ``nnz(A)``, the redundant last level counted once),
    ``fill`` (the same plus the low-rank bases), ``setup_stages`` and
    ``setup_seconds``.

    References
    ----------
    .. [1] T. Xu, V. Kalantzis, R. Li, Y. Xi, G. Dillon, Y. Saad, "parGeMSLR: A
       parallel multilevel Schur complement low-rank preconditioning and
       solution package for general sparse matrices", Parallel Computing 113
       (2022).
    .. [2] G. Dillon, V. Kalantzis, Y. Xi, Y. Saad, "A hierarchical low rank
       Schur complement preconditioner for indefinite linear systems", SIAM
       J. Sci. Comput. 40(4), 2018.
    """

    name = "gemslr"

    def __init__(self, A, nlev: int = 4, ncomp: int = 32, ilu_droptol: float = 1e-3,
                 ilu_max_row_nnz: int = 200, lr_rank: int = 32, lr_tol_eig: float = 1e-3,
                 lr_maxits: int = 3, lr_arnoldi_factor: float = 2.0,
                 lr_tr_factor: float = 0.25, last_level: str = "redundant", seed: int = 0):
        super().__init__(A)
        comm = A.comm
        exc = None
        try:
            if not isinstance(A, DistCSR):
                raise TypeError("gemslr needs a DistCSR, got %s" % type(A).__name__)
            if A.row_layout != A.col_layout:
                raise ValueError("gemslr needs a square matrix with rows and columns "
                                 "distributed alike, got %d x %d" % A.shape)
            self.nlev = _int_option("nlev", nlev, 1)
            self.ncomp = _int_option("ncomp", ncomp, 1)
            self.ilu_droptol = _float_option("ilu_droptol", ilu_droptol, 0.0, 1.0)
            self.ilu_max_row_nnz = _int_option("ilu_max_row_nnz", ilu_max_row_nnz, 1)
            self.lr_rank = _int_option("lr_rank", lr_rank, 0)
            self.lr_tol_eig = _float_option("lr_tol_eig", lr_tol_eig, 0.0, low_open=True)
            self.lr_maxits = _int_option("lr_maxits", lr_maxits, 0)
            self.lr_arnoldi_factor = _float_option("lr_arnoldi_factor", lr_arnoldi_factor,
                                                   1.0, 100.0, low_open=True)
            self.lr_tr_factor = _float_option("lr_tr_factor", lr_tr_factor, 0.0, 1.0)
            self.seed = _int_option("seed", seed, 0)
            if last_level not in LAST_LEVEL_SOLVERS:
                raise ValueError("gemslr: last_level must be one of %s, got %r"
                                 % (", ".join(LAST_LEVEL_SOLVERS), last_level))
            self.last_level = last_level
        except (TypeError, ValueError) as e:
            exc = e
        agree(comm, exc)
        self._times = {}
        t = time.perf_counter()
        self._order(A)
        self._times["order"] = time.perf_counter() - t
        t = time.perf_counter()
        self._distribute(A)
        self._times["distribute"] = time.perf_counter() - t
        t = time.perf_counter()
        self._factor()
        self._times["factor"] = time.perf_counter() - t
        t = time.perf_counter()
        self._low_rank()
        self._times["low_rank"] = time.perf_counter() - t
        self._done()

    # -- stage 1: the multilevel ordering (rank 0), and who owns what ----------------
    def _order(self, A) -> None:
        comm = A.comm
        size = comm.Get_size()
        self.nparts = max(self.ncomp, size)
        A0 = A.to_scipy(root=0)
        struct, exc = None, None
        if comm.Get_rank() == 0:
            try:
                struct = multilevel_order(A0, self.nlev, self.nparts, self.seed)
            except Exception as e:  # noqa: BLE001 - agreed below, raised everywhere
                exc = RuntimeError("gemslr: multilevel ordering failed: %s" % e)
        agree(comm, exc)
        del A0
        levels, last = comm.bcast(struct, root=0)
        #: ``levels[l][j]``: original ids of subdomain ``j``'s interior at level ``l``
        self.levels = levels
        #: original ids of the last level, sorted
        self.last = last
        L = len(levels)
        self.num_levels = L + 1
        # owner of every subdomain, and the new (GeMSLR) order of each rank's rows:
        # [interiors of level 0, of level 1, ..., its block of the last level]
        cnt = np.zeros((size, L + 1), dtype=np.int64)
        self.sub_owner = []
        per_rank = [[] for _ in range(size)]
        for l, subs in enumerate(levels):
            K = len(subs)
            owners = np.array([j * size // K for j in range(K)], dtype=np.int64)
            self.sub_owner.append(owners)
            for j, ids in enumerate(subs):
                cnt[owners[j], l] += ids.size
        last_ranges = Layout.block(last.size, comm).ranges
        cnt[:, L] = np.diff(last_ranges)
        rank = comm.Get_rank()
        mine = []
        self._sub_sizes = []
        for l, subs in enumerate(levels):
            own = [subs[j] for j in range(len(subs)) if self.sub_owner[l][j] == rank]
            self._sub_sizes.append([ids.size for ids in own])
            mine.extend(own)
        mine.append(last[last_ranges[rank]:last_ranges[rank + 1]])
        self._cnt = cnt
        self._mine_old = np.concatenate(mine).astype(np.int64) if mine else \
            np.zeros(0, np.int64)

    # -- stage 2: the permuted blocks as distributed matrices -------------------------
    def _distribute(self, A) -> None:
        comm = A.comm
        size, rank = comm.Get_size(), comm.Get_rank()
        cnt = self._cnt
        L = self.num_levels - 1
        n = A.shape[0]
        nloc_new = cnt.sum(axis=1)
        new_ranges = np.concatenate(([0], np.cumsum(nloc_new)))
        perm = np.empty(n, dtype=np.int64)            # new -> old, replicated
        comm.Allgatherv([self._mine_old, MPI.INT64_T],
                        [perm, (nloc_new, new_ranges[:-1]), MPI.INT64_T])
        new_of = np.empty(n, dtype=np.int64)
        new_of[perm] = np.arange(n, dtype=np.int64)
        # level of each new id, and its offset inside its rank's level-l block
        offs = np.zeros((size, L + 2), dtype=np.int64)
        np.cumsum(cnt, axis=1, out=offs[:, 1:])
        owner_new = np.repeat(np.arange(size), nloc_new)
        local_pos = np.arange(n, dtype=np.int64) - new_ranges[owner_new]
        level_new = np.empty(n, dtype=np.int64)
        for r in range(size):
            s, e = new_ranges[r], new_ranges[r + 1]
            level_new[s:e] = np.searchsorted(offs[r, 1:], local_pos[s:e], side="right")
        self._off = offs[rank]
        # layouts: X_l (interiors of level l, or the last level), N_l (levels >= l)
        self.X = [Layout(np.concatenate(([0], np.cumsum(cnt[:, l]))), comm)
                  for l in range(L + 1)]
        self.N = [Layout(np.concatenate(([0], np.cumsum(cnt[:, l:].sum(axis=1)))), comm)
                  for l in range(L + 1)]

        def index_in(layout_list, l, g):
            # global index of new ids g (level >= l) in layout_list[l]
            r = owner_new[g]
            return layout_list[l].ranges[r] + local_pos[g] - offs[r, l]

        # this rank's new rows with new global columns
        order = np.argsort(self._mine_old, kind="stable")
        fetched = fetch_rows(A, self._mine_old[order], label="gemslr:rows")
        rows = sp.csr_matrix(fetched[np.argsort(order)])
        rows = sp.csr_matrix((rows.data, new_of[rows.indices], rows.indptr), shape=rows.shape)
        rows.sort_indices()
        self.global_nnz = A.global_nnz()

        def block(r0, r1, lev_lo, lev_hi, layout_list, lcol):
            # rows r0:r1 (local new), columns of level in [lev_lo, lev_hi], renumbered
            M = rows[r0:r1].tocoo()
            keep = (level_new[M.col] >= lev_lo) & (level_new[M.col] <= lev_hi)
            cols = index_in(layout_list, lcol, M.col[keep])
            width = layout_list[lcol].global_size
            return sp.csr_matrix((M.data[keep], (M.row[keep], cols)), shape=(r1 - r0, width))

        self._lv: list[_Level] = []
        off = self._off
        nloc = int(nloc_new[rank])
        self._x = np.zeros(nloc)
        self._y = np.zeros(nloc)
        for l in range(L):
            lv = _Level()
            lv.off = int(off[l])
            lv.nB = int(cnt[rank, l])
            b0, b1 = int(off[l]), int(off[l + 1])
            # B: this rank's interiors (uncoupled across subdomains by construction)
            Bloc = block(b0, b1, l, l, self.X, l)
            Bloc = sp.csr_matrix(Bloc[:, self.X[l].start:self.X[l].stop])
            bounds = np.concatenate(([0], np.cumsum(self._sub_sizes[l]))).astype(np.int64)
            lv.sub_bounds = bounds
            lv.blocks = [sp.csr_matrix(Bloc[s:e, s:e]) for s, e in zip(bounds[:-1], bounds[1:])]
            lv.solvers = []
            lv.F = DistCSR.from_local_rows(block(b0, b1, l + 1, L, self.N, l + 1),
                                           self.X[l], self.N[l + 1], check_finite=False)
            lv.E = DistCSR.from_local_rows(block(b1, nloc, l, l, self.X, l),
                                           self.N[l + 1], self.X[l], check_finite=False)
            lv.C = DistCSR.from_local_rows(block(b1, nloc, l + 1, L, self.N, l + 1),
                                           self.N[l + 1], self.N[l + 1], check_finite=False) \
                if self.lr_rank > 0 else None
            lv.zB = DistVector(self.X[l], self._y[b0:b1])
            lv.yC = DistVector(self.N[l + 1], self._y[b1:])
            lv.tB = DistVector(self.X[l], np.zeros(lv.nB))
            lv.tC = DistVector(self.N[l + 1], np.zeros(nloc - b1))
            lv.tC2 = None
            lv.W = np.zeros((0, nloc - b1))
            lv.Hc = np.zeros((0, 0))
            lv.lr = None
            lv.n_interior = self.X[l].global_size
            lv.n_iface = self.N[l + 1].global_size
            lv.n_sub = int(sum(1 for ids in self.levels[l] if ids.size))
            self._lv.append(lv)
        bL = int(off[L])
        self._AL = DistCSR.from_local_rows(block(bL, nloc, L, L, self.X, L), self.X[L],
                                           self.X[L], check_finite=False)
        self._last_counts = cnt[:, L].copy()
        self._last_displs = self.X[L].ranges[:-1].copy()
        self._last_full = np.zeros(self.X[L].global_size)
        self._last_sol = np.zeros(self.X[L].global_size)
        # the permutation old layout <-> new rows of this rank
        old = A.row_layout
        mine = self._mine_old
        owned = old.is_local(mine)
        self._keep_dst = np.flatnonzero(owned)
        self._keep_src = mine[owned] - old.start
        remote = np.flatnonzero(~owned)
        rorder = np.argsort(mine[remote], kind="stable")
        self._recv_dst = remote[rorder]
        self._perm = NeighborExchange.from_ghosts(old, mine[self._recv_dst])
        self._unperm = self._perm.reverse()
        moved = np.ones(old.local_size, dtype=bool)
        moved[self._keep_src] = False
        self._moved = np.flatnonzero(moved)
        self._keep_buf = np.zeros(self._keep_dst.size)
        self._send_buf = np.zeros(self._recv_dst.size)

    # -- stage 3: ILUT of every subdomain and of the last level ----------------------
    def _ilut(self, M: sp.csr_matrix):
        avg = M.nnz / max(M.shape[0], 1)
        ff = max(1.0, self.ilu_max_row_nnz / max(avg, 1.0))
        return local_solver("ilut", M, drop_tol=self.ilu_droptol, fill_factor=ff)

    def _factor(self) -> None:
        comm = self.comm
        exc = None
        self.factor_nnz_local = 0
        try:
            for l, lv in enumerate(self._lv):
                for j, Bj in enumerate(lv.blocks):
                    try:
                        lv.solvers.append(self._ilut(Bj))
                    except PivotError as e:
                        raise PivotError("gemslr: level %d subdomain block %d: %s"
                                         % (l, j, e)) from None
                    self.factor_nnz_local += lv.solvers[-1].nnz
                lv.blocks = None
        except (ValueError, TypeError) as e:
            exc = e
        agree(comm, exc)
        exc = None
        self._last_solver = None
        try:
            if self.last_level == "redundant":
                AL = self._AL.to_scipy()
                self._last_solver = self._ilut(AL)
                if comm.Get_rank() == 0:
                    self.factor_nnz_local += self._last_solver.nnz
            else:
                AL = None
                self._last_solver = self._ilut(self._AL.diag)
                self.factor_nnz_local += self._last_solver.nnz
        except PivotError as e:
            exc = PivotError("gemslr: last level: %s" % e)
        except (ValueError, TypeError) as e:
            exc = e
        agree(comm, exc)
        self.factor_nnz = int(comm.allreduce(self.factor_nnz_local, op=MPI.SUM))

    # -- stage 4: low-rank corrections, bottom-up -------------------------------------
    def _low_rank(self) -> None:
        self.lowrank = []
        if self.lr_rank == 0:
            return
        for l in range(len(self._lv) - 1, -1, -1):
            lv = self._lv[l]
            b1 = lv.off + lv.nB
            nC = self._x.size - b1
            lv.tC2 = DistVector(self.N[l + 1], np.zeros(nC))
            start = _start_vector(self._mine_old[b1:])
            steps = max(int(np.ceil(self.lr_arnoldi_factor * self.lr_rank)), self.lr_rank + 1)
            res = krylov_schur(lambda v, out, l=l: self._g_operator(l, v, out), self.comm,
                               nC, start, self.lr_rank, steps, self.lr_maxits,
                               self.lr_tol_eig, self.lr_tr_factor)
            k = res.rank
            Hc = np.zeros((k, k))
            exc = None
            if k:
                try:
                    Hc = np.linalg.solve(np.eye(k) - res.T, np.eye(k)) - np.eye(k)
                    if not np.all(np.isfinite(Hc)):
                        raise np.linalg.LinAlgError("non-finite")
                except np.linalg.LinAlgError:
                    exc = ValueError("gemslr: level %d: I - T of the low-rank correction "
                                     "is singular (an eigenvalue 1 of E B^-1 F C^-1)" % l)
            agree(self.comm, exc)
            lv.W = np.ascontiguousarray(res.W)
            lv.Hc = Hc
            lv.s_loc = np.zeros(k)
            lv.s_glob = np.zeros(k)
            lv.lr = res
            self.lowrank.insert(0, res)

    def _g_operator(self, l: int, v: np.ndarray, out: np.ndarray) -> None:
        """``out = (I - S_l M_{l+1}) v = v - C y + E B^{-1} F y`` with ``y = M_{l+1} v``."""
        lv = self._lv[l]
        b1 = lv.off + lv.nB
        self._x[b1:] = v
        self._solve(l + 1)
        lv.C.matvec(lv.yC, out=lv.tC)
        lv.F.matvec(lv.yC, out=lv.tB)
        self._solve_B(lv, lv.tB.local, lv.tB.local)
        lv.E.matvec(lv.tB, out=lv.tC2)
        np.subtract(v, lv.tC.local, out=out)
        out += lv.tC2.local

    # -- application --------------------------------------------------------------------
    @staticmethod
    def _solve_B(lv: _Level, x: np.ndarray, out: np.ndarray) -> None:
        b = lv.sub_bounds
        for j, solver in enumerate(lv.solvers):
            s, e = b[j], b[j + 1]
            solver.solve(x[s:e], out[s:e])

    def _solve(self, l: int) -> None:
        """``y[off_l:] = M_l x[off_l:]``; overwrites ``x[off_l:]``. Collective."""
        x, y = self._x, self._y
        if l == len(self._lv):
            s = int(self._off[l])
            if self.last_level == "redundant":
                full = self._last_full
                self.comm.Allgatherv([x[s:], MPI.DOUBLE],
                                     [full, (self._last_counts, self._last_displs), MPI.DOUBLE])
                sol = self._last_sol
                self._last_solver.solve(full, sol)
                r0 = self._last_displs[self.comm.Get_rank()]
                y[s:] = sol[r0:r0 + y.size - s]
            else:
                self._last_solver.solve(x[s:], y[s:])
            return
        lv = self._lv[l]
        b0, b1 = lv.off, lv.off + lv.nB
        self._solve_B(lv, x[b0:b1], y[b0:b1])            # z_B = B^{-1} x_B
        lv.E.matvec(lv.zB, out=lv.tC)                    # x_C -= E z_B
        xC = x[b1:]
        xC -= lv.tC.local
        if lv.Hc.shape[0]:                               # x_C += W H W^T x_C
            np.dot(lv.W, xC, out=lv.s_loc)
            self.comm.Allreduce(lv.s_loc, lv.s_glob, op=MPI.SUM)
            np.dot(lv.Hc, lv.s_glob, out=lv.s_loc)
            np.dot(lv.s_loc, lv.W, out=lv.tC.local)
            xC += lv.tC.local
        self._solve(l + 1)                               # y_C = M_{l+1} x_C
        lv.F.matvec(lv.yC, out=lv.tB)                    # y_B = z_B - B^{-1} F y_C
        t = lv.tB.local
        self._solve_B(lv, t, t)
        y[b0:b1] -= t

    def _apply(self, r: np.ndarray, out: np.ndarray) -> None:
        x, y = self._x, self._y
        self._perm.start(r)
        np.take(r, self._keep_src, out=self._keep_buf)
        x[self._keep_dst] = self._keep_buf
        x[self._recv_dst] = self._perm.finish()
        self._solve(0)
        np.take(y, self._recv_dst, out=self._send_buf)
        self._unperm.start(self._send_buf)
        np.take(y, self._keep_dst, out=self._keep_buf)
        out[self._keep_src] = self._keep_buf
        out[self._moved] = 0.0
        self._unperm.finish()
        self._unperm.accumulate(out)

    # -- inspection -----------------------------------------------------------------------
    def correction(self, level: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The low-rank correction of ``level`` on this rank: ``(ids, W, H)``
        with ``ids`` the original global ids of this rank's interface rows,
        ``W`` (rank x len(ids)) their entries of the Schur basis and ``H``
        (rank x rank) the replicated ``(I - T)^{-1} - I``, so that the level
        applies ``x_C += W^T H W x_C`` (summed over ranks). Not collective.
        """
        if not 0 <= level < len(self._lv):
            raise ValueError("gemslr: level must be in [0, %d), got %r"
                             % (len(self._lv), level))
        lv = self._lv[level]
        return self._mine_old[lv.off + lv.nB:].copy(), lv.W.copy(), lv.Hc.copy()

    # -- summary ------------------------------------------------------------------------
    def _describe(self) -> dict:
        lr_nnz = sum(lv.lr.rank * lv.n_iface + lv.lr.rank ** 2
                     for lv in self._lv if lv.lr is not None)
        levels = []
        for l, lv in enumerate(self._lv):
            d = {"level": l, "rows": int(self.N[l].global_size), "subdomains": lv.n_sub,
                 "interior": int(lv.n_interior), "interface": int(lv.n_iface)}
            if lv.lr is not None:
                d.update(rank=lv.lr.rank, converged=lv.lr.converged,
                         restarts=lv.lr.restarts, arnoldi_steps=lv.lr.steps,
                         eigenvalues=[[float(z.real), float(z.imag)]
                                      for z in lv.lr.eigenvalues()])
            else:
                d.update(rank=0)
            levels.append(d)
        levels.append({"level": len(self._lv), "rows": int(self.X[-1].global_size),
                       "last_level": self.last_level})
        return {"nlev": self.num_levels, "ncomp": self.nparts,
                "ilu_droptol": self.ilu_droptol, "ilu_max_row_nnz": self.ilu_max_row_nnz,
                "lr_rank": self.lr_rank, "lr_tol_eig": self.lr_tol_eig,
                "lr_maxits": self.lr_maxits, "hierarchy": levels,
                "interface_sizes": [lv.n_iface for lv in self._lv],
                "ranks_found": [lv.lr.rank if lv.lr is not None else 0 for lv in self._lv],
                "fill_ilu": self.factor_nnz / max(self.global_nnz, 1),
                "fill": (self.factor_nnz + lr_nnz) / max(self.global_nnz, 1),
                "setup_stages": dict(self._times)}


register("gemslr", GeMSLR)
