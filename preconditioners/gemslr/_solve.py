"""Stage 5 of GeMSLR: the :class:`GeMSLR` preconditioner, which runs the set-up
stages in order and applies the recursive block LDU solve; registered as ``"gemslr"``.
"""

from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI

from dmsolve import DistCSR, DistVector, Preconditioner, Progress
from dmsolve.validate import agreed, check_choice, check_int, check_real

from .._registry import register
from ._distribute import Level, distribute
from ._factor import LAST_LEVEL_SOLVERS, factor_last_level, factor_subdomains
from ._lowrank import low_rank_correction
from ._order import order

__all__ = ["GeMSLR"]


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
        Levels including the last (parGeMSLR ``nlev``; default 4). This and
        the options after it are keyword only.
    ncomp : int
        Subdomains per level (parGeMSLR ``ncomp``; default 32); at least
        ``comm.size`` are used, so every rank owns a subdomain, and at most
        the number of rows (more parts than rows cannot be made; with more
        than half as many no level is split, whatever their number).
    ilu_droptol : float
        ILUT drop tolerance (parGeMSLR ``ilu_droptol``, default 1e-3).
    ilu_max_row_nnz : int
        Fill limit (parGeMSLR ``ilu_max_row_nnz``, default 200). SuperLU's
        ILUTP has no per-row cap, so it bounds the fill ratio of each block:
        ``fill_factor = ilu_max_row_nnz / (average row count of the block)``.
    lr_rank : int in [0, 1000]
        Low-rank correction rank per level (parGeMSLR ``lr_rank``, default
        32); 0 switches the correction off and the preconditioner is exactly
        the multilevel block LDU with ILUT. The Arnoldi basis holds
        ``lr_arnoldi_factor * lr_rank`` vectors on every rank and its Schur
        form costs the cube of that, replicated: hence the bound.
    lr_tol_eig : float
        Residual tolerance of the Schur vectors (parGeMSLR ``lr_tol_eig``,
        default 1e-3).
    lr_maxits : int in [0, 1000]
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
    seed : int in [0, 2**31 - 1]
        METIS seed (METIS takes a 32-bit integer).
    progress : None, True or callable
        Report each stage and level of the set-up as it is done (the ordering,
        ``"level 0: 1287 rows, 4 subdomains, 934 interior, 353 interface"``,
        the factorisation, each low-rank correction): see
        :class:`dmsolve.Progress`. Given alike on every rank.

    Raises
    ------
    ValueError, TypeError
        On every rank, for a bad option or operator, or a zero pivot in any
        rank's factorisation.

    Notes
    -----
    Set-up is collective on ``A.comm``. The ordering is computed where the
    rows are, level by level: the remaining nodes' subgraph is partitioned
    by :func:`dmsolve.partition.metis_partition` (serial METIS on the
    gathered subgraph below its ``gather_limit``, a few ranks' shares, so
    that on 1-4 ranks the ordering does not depend on the number of ranks;
    in parallel, ``"multilevel"``, above it) and the interface found by one fetch of the neighbours' parts.
    Subdomain ``j`` of ``K`` goes to rank ``j * size // K``, and the rows
    move to their GeMSLR owners as a :class:`dmsolve.partition.Partition`
    with :func:`dmsolve.partition.redistribute`: nothing of the global size
    is kept on any rank (a ``"redundant"`` last level is factored on every
    rank); :meth:`ordering` gathers the ordering on request.
    :meth:`apply` is collective on ``A.comm`` (halo
    exchanges of the coupling blocks, one ``Allreduce`` per low-rank level,
    one ``Allgatherv`` for a redundant last level) and allocates nothing
    (the work vectors are preallocated).

    :meth:`describe` reports ``nlev`` (levels built), ``interface_sizes``,
    ``ranks_found`` (Schur vectors kept per level), ``hierarchy`` (per level:
    rows, subdomains, interior and interface sizes, rank, converged vectors,
    restarts, Arnoldi steps, eigenvalues as ``[re, im]``), ``fill_ilu`` (ILUT
    factor nonzeros over ``nnz(A)``, the redundant last level counted once),
    ``fill`` (the same plus the low-rank bases), ``setup_stages`` and
    ``setup_seconds``. :attr:`symmetric` is False.

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
    _symmetric = False  # ILUT blocks and a nonsymmetric low-rank correction

    def __init__(self, A, *, nlev: int = 4, ncomp: int = 32, ilu_droptol: float = 1e-3,
                 ilu_max_row_nnz: int = 200, lr_rank: int = 32, lr_tol_eig: float = 1e-3,
                 lr_maxits: int = 3, lr_arnoldi_factor: float = 2.0,
                 lr_tr_factor: float = 0.25, last_level: str = "redundant", seed: int = 0,
                 progress=None):
        super().__init__(A)
        with agreed(A.comm):
            if not isinstance(A, DistCSR):
                raise TypeError("gemslr needs a DistCSR, got %s" % type(A).__name__)
            if A.row_layout != A.col_layout:
                raise ValueError("gemslr needs a square matrix with rows and columns "
                                 "distributed alike, got %d x %d" % A.shape)
            self.nlev = check_int("nlev", nlev, low=1)
            self.ncomp = check_int("ncomp", ncomp, low=1)
            self.ilu_droptol = check_real("ilu_droptol", ilu_droptol, low=0.0, high=1.0)
            self.ilu_max_row_nnz = check_int("ilu_max_row_nnz", ilu_max_row_nnz, low=1)
            self.lr_rank = check_int("lr_rank", lr_rank, low=0, high=1000)
            self.lr_tol_eig = check_real("lr_tol_eig", lr_tol_eig, low=0.0, low_open=True)
            self.lr_maxits = check_int("lr_maxits", lr_maxits, low=0, high=1000)
            self.lr_arnoldi_factor = check_real("lr_arnoldi_factor", lr_arnoldi_factor,
                                                low=1.0, high=100.0, low_open=True)
            self.lr_tr_factor = check_real("lr_tr_factor", lr_tr_factor, low=0.0, high=1.0)
            self.seed = check_int("seed", seed, low=0, high=2 ** 31 - 1)
            self.last_level = check_choice("last_level", last_level, LAST_LEVEL_SOLVERS)
            report = Progress(progress, A.comm, "gemslr")     # checks progress
        comm = A.comm
        if comm.allreduce(int(bool(report)), op=MPI.SUM) not in (0, comm.Get_size()):
            raise ValueError("gemslr: progress must be given on every rank or on none")
        self._times = {}
        # stage 1: the multilevel ordering (rank 0) and who owns what
        t = time.perf_counter()
        # more parts than rows cannot be made (and would only cost memory: the
        # ordering keeps arrays of nparts entries)
        self.nparts = max(min(self.ncomp, A.shape[0]), comm.Get_size())
        self._ordering = order(A, self.nlev, self.nparts, self.seed)
        self.num_levels = self._ordering.num_levels
        self._times["order"] = time.perf_counter() - t
        report("order: %d levels, %d subdomains per level", self.num_levels, self.nparts)
        # stage 2: the rows moved to their owners and cut into the level blocks
        t = time.perf_counter()
        blocks = distribute(A, self._ordering, keep_C=self.lr_rank > 0)
        self._lv: list[Level] = blocks.levels
        self._AL = blocks.last
        self.X, self.N = blocks.X, blocks.N
        self._off, self._x, self._y = blocks.off, blocks.x, blocks.y
        self._old_ids = blocks.old_ids
        self._perm = blocks.permutation
        self.global_nnz = A.global_nnz()
        XL = self.X[-1]
        self._last_counts = XL.local_sizes.copy()
        self._last_displs = XL.ranges[:-1].copy()
        self._last_full = np.zeros(XL.global_size)
        self._last_sol = np.zeros(XL.global_size)
        self._times["distribute"] = time.perf_counter() - t
        for l, lv in enumerate(self._lv):
            report("level %d: %d rows, %d subdomains, %d interior, %d interface", l,
                   self.N[l].global_size, lv.n_sub, lv.n_interior, lv.n_iface)
        report("level %d (last): %d rows", len(self._lv), self.X[-1].global_size)
        # stage 3: ILUT of every subdomain and of the last level
        t = time.perf_counter()
        self.factor_nnz_local = factor_subdomains(comm, self._lv, self.ilu_droptol,
                                                  self.ilu_max_row_nnz, self._old_ids)
        self._last_solver, nnz = factor_last_level(self._AL, self.last_level,
                                                   self.ilu_droptol, self.ilu_max_row_nnz,
                                                   self._old_ids, int(self._off[-2]))
        self.factor_nnz_local += nnz
        self.factor_nnz = int(comm.allreduce(self.factor_nnz_local, op=MPI.SUM))
        self._times["factor"] = time.perf_counter() - t
        report("factor: %d ILUT nonzeros, %.3f of nnz(A)", self.factor_nnz,
               self.factor_nnz / max(self.global_nnz, 1))
        # stage 4: low-rank corrections, bottom-up
        t = time.perf_counter()
        self._low_rank(report)
        self._times["low_rank"] = time.perf_counter() - t
        report("done: %d levels", self.num_levels)
        self._done()

    def _low_rank(self, report) -> None:
        self.lowrank = []
        if self.lr_rank == 0:
            return
        for l in range(len(self._lv) - 1, -1, -1):
            lv = self._lv[l]
            b1 = lv.off + lv.nB
            lv.tC2 = DistVector(self.N[l + 1], np.zeros(self._x.size - b1))
            res, Hc = low_rank_correction(
                lambda v, out, l=l: self._g_operator(l, v, out), self.comm,
                self._old_ids[b1:], l, rank=self.lr_rank, arnoldi_factor=self.lr_arnoldi_factor,
                maxits=self.lr_maxits, tol=self.lr_tol_eig, tr_factor=self.lr_tr_factor)
            k = res.rank
            lv.W = np.ascontiguousarray(res.W)
            lv.Hc = Hc
            lv.s_loc = np.zeros(k)
            lv.s_glob = np.zeros(k)
            lv.lr = res
            self.lowrank.insert(0, res)
            report("low rank level %d: rank %d, %d converged, %d restarts, %d Arnoldi steps",
                   l, res.rank, res.converged, res.restarts, res.steps)

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
    def _solve_B(lv: Level, x: np.ndarray, out: np.ndarray) -> None:
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
        self._perm.forward(r, self._x)
        self._solve(0)
        self._perm.backward(self._y, out)

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
        return self._old_ids[lv.off + lv.nB:].copy(), lv.W.copy(), lv.Hc.copy()

    @property
    def partition(self):
        """The :class:`dmsolve.partition.Partition` of ``A``'s rows that moved
        them to their GeMSLR owners (``new_layout == N[0]``)."""
        return self._ordering.partition

    def ordering(self) -> tuple[list[list[np.ndarray]], np.ndarray]:
        """The multilevel ordering ``(levels, last)``, as :func:`multilevel_order`
        returns it: ``levels[l][j]`` the sorted original ids of subdomain
        ``j``'s interior at level ``l``, ``last`` those of the last level.

        Collective on ``A.comm``; O(global size) memory per rank (for tests
        and inspection).
        """
        return self._ordering.gather()

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
