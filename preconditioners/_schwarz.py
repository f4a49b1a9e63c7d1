"""Block Jacobi and restricted additive Schwarz with local ILU(0)/ILUT/LU solves."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from dmsolve import DistCSR, Preconditioner
from dmsolve.bsp import NeighborExchange, sorted_unique
from dmsolve.validate import agreed, check_bool, check_int

from ._dist import fetch_rows, rows_with_global_columns
from ._local import PivotError, check_local_solver, local_solver
from ._precision import check_precision
from ._registry import register

__all__ = ["BlockJacobi", "AdditiveSchwarz"]


#: Local solvers whose ``M`` is symmetric when the local matrix is: LU (the
#: exact inverse) and ILU(0) (on a symmetric matrix it is the incomplete
#: ``L D L^T``; explicitly stored zeros count as entries, so the pattern must
#: be symmetric). ILUT drops by threshold and pivots, so it is not.
_SYMMETRIC_SUBS = ("lu", "ilu0")


def _check_square(A, who: str) -> None:
    if not isinstance(A, DistCSR):
        raise TypeError("%s needs a DistCSR, got %s" % (who, type(A).__name__))
    if A.row_layout != A.col_layout:
        raise ValueError("%s needs a square matrix with rows and columns distributed "
                         "alike, got %d x %d" % (who, *A.shape))


def _factor(who: str, sub: str, M: sp.csr_matrix, comm, sub_options: dict,
            global_ids: np.ndarray):
    """The local solver ``sub`` of ``M``; a bad pivot or a singular block on
    some rank is raised on every rank, naming the rank's block and, where the
    factorisation knows it, the global row (``global_ids[i]`` is the global id
    of ``M``'s row and column ``i``). Collective on ``comm``."""
    with agreed(comm):
        try:
            solver = local_solver(sub, M, **sub_options)
        except PivotError as e:
            g = None if e.local_index is None else int(global_ids[e.local_index])
            raise PivotError("%s(sub=%r): the block of rank %d (%d rows): %s"
                             % (who, sub, comm.Get_rank(), M.shape[0], e.at_global(g))) \
                from None
        except (ValueError, TypeError) as e:
            raise type(e)("%s(sub=%r): %s" % (who, sub, e)) from None
    return solver


class BlockJacobi(Preconditioner):
    """Block Jacobi: each rank solves with a factorisation of its diagonal block.

    Parameters
    ----------
    A : DistCSR
        Square, rows and columns distributed alike; real or complex.
    sub : {"ilu0", "ilut", "lu"}
        The local factorisation (:data:`preconditioners._local.LOCAL_SOLVERS`).
    sub_options : dict, optional
        Passed to the local solver (``drop_tol``, ``fill_factor`` for ILUT).
    precision : {"double", "single"}
        ``"single"``: the factors are computed in float64, then their values
        kept in float32 (the indices as before); the triangular solves read
        them as float32 and compute in float64. Real matrices only.

    Raises
    ------
    ValueError
        On every rank, when a pivot of some rank's factorisation is zero or
        not finite or a block is singular (naming the rank's block and, where
        known, the global row), or for a bad option (``sub`` unknown included).
    TypeError
        On every rank, for an option of the wrong type or an unknown one, or
        ``precision="single"`` with a complex ``A``.

    Notes
    -----
    Set-up is collective on ``A.comm`` (error agreement); :meth:`apply` is not
    collective. :attr:`symmetric` is True with ``lu`` and ``ilu0`` (symmetric
    whenever ``A`` is), False with ``ilut``.
    """

    name = "bjacobi"
    supports_complex = True

    def __init__(self, A, sub: str = "ilu0", sub_options: dict | None = None,
                 precision: str = "double"):
        super().__init__(A)
        with agreed(self.comm):
            _check_square(A, "bjacobi")
            self.sub, sub_options = check_local_solver(sub, sub_options)
            single = check_precision("bjacobi", precision, A)
        self.precision = "single" if single else "double"
        self._symmetric = self.sub in _SYMMETRIC_SUBS
        self.solver = _factor("bjacobi", self.sub, A.diag, A.comm, sub_options,
                              np.arange(*A.row_layout.owned_range, dtype=np.int64))
        if single:
            self.solver = self.solver.single()
        self._done()

    def _apply(self, r, out):
        """The local solve. Not collective."""
        self.solver.solve(r, out)

    def _describe(self):
        return {"sub": self.sub, "precision": self.precision,
                "factor_nnz_local": int(self.solver.nnz),
                "factor_bytes_local": int(self.solver.nbytes)}


class AdditiveSchwarz(Preconditioner):
    """Restricted additive Schwarz (RAS) with ``overlap`` layers of ghost rows.

    Each rank extends its rows by ``overlap`` layers of neighbours in the
    matrix graph (their rows fetched through the BSP layer), factors the
    matrix restricted to the extended set, and when applied solves on it and
    keeps only the owned part of the solution (Cai & Sarkis 1999).

    Parameters
    ----------
    A : DistCSR
        Square, rows and columns distributed alike; real or complex.
    overlap : int
        Layers of overlap; 0 is block Jacobi. Layers beyond those that reach
        new rows on some rank are not built.
    sub : {"ilu0", "ilut", "lu"}
        The local factorisation.
    sub_options : dict, optional
    restricted : bool
        True (default): RAS, each rank keeps only its owned part of the local
        solution - fewer messages and usually fewer GMRES iterations, but the
        preconditioner is not symmetric. False: classical additive Schwarz,
        the overlap parts are sent back and added (one more exchange); with
        a symmetric local solver (``lu``, or ``ilu0`` of a symmetric matrix)
        the preconditioner is symmetric, as CG needs.
    precision : {"double", "single"}
        As :class:`BlockJacobi`'s: the local factors' values in float32.

    Raises
    ------
    ValueError
        On every rank, for a zero or non-finite pivot or a singular local
        matrix (naming the rank's block and, where known, the global row), or
        a bad option.
    TypeError
        On every rank, for an option of the wrong type or an unknown one, or
        ``precision="single"`` with a complex ``A``.

    Notes
    -----
    Set-up is collective on ``A.comm``; :meth:`apply` is collective among
    neighbouring ranks (one halo exchange of the overlap values, two when
    not ``restricted``). :attr:`symmetric` is True for ``restricted=False``
    (or ``overlap=0``) with ``lu`` or ``ilu0``, False otherwise: restricted
    Schwarz with overlap is not symmetric (at one rank, where there is no
    overlap, it happens to be; the claim does not depend on the rank count).

    References
    ----------
    X.-C. Cai and M. Sarkis, "A restricted additive Schwarz preconditioner for
    general sparse linear systems", SIAM J. Sci. Comput. 21(2), 1999.
    """

    name = "asm"
    supports_complex = True

    def __init__(self, A, overlap: int = 1, sub: str = "ilu0",
                 sub_options: dict | None = None, restricted: bool = True,
                 precision: str = "double"):
        super().__init__(A)
        with agreed(self.comm):
            _check_square(A, "asm")
            self.overlap = check_int("overlap", overlap, low=0)
            self.sub, sub_options = check_local_solver(sub, sub_options)
            self.restricted = check_bool("restricted", restricted)
            single = check_precision("asm", precision, A)
        self.precision = "single" if single else "double"
        # without overlap, restricted and classical Schwarz are block Jacobi
        self._symmetric = (self.sub in _SYMMETRIC_SUBS
                           and (not self.restricted or self.overlap == 0))
        lay = A.row_layout
        start, stop = lay.owned_range
        rows = rows_with_global_columns(A) if self.overlap else None
        ext = np.zeros(0, dtype=np.int64)
        ext_rows = sp.csr_matrix((0, A.shape[1]))
        new = A.ghosts                  # the first layer: the owned rows' off-process columns
        for level in range(self.overlap):
            if level:
                cols = sorted_unique(frontier_rows.indices.astype(np.int64))
                new = cols[((cols < start) | (cols >= stop))]
                new = np.setdiff1d(new, ext, assume_unique=True)
                # every rank's overlap covers what the graph reaches: more
                # layers add nothing (and a huge overlap would loop on)
                if A.comm.allreduce(int(new.size), op=MPI.SUM) == 0:
                    break
            frontier_rows = fetch_rows(A, new, local=rows, label="asm:overlap")
            ext = np.concatenate((ext, new))
            order = np.argsort(ext, kind="stable")
            ext = ext[order]
            ext_rows = sp.vstack([ext_rows, frontier_rows], format="csr")[order]
        self.ext = ext
        # local numbering: the sorted union of owned and overlap ids, i.e. the
        # overlap rows below the owned block, the owned block, those above
        below = int(np.searchsorted(ext, start))
        ids = np.concatenate((ext[:below], np.arange(start, stop, dtype=np.int64),
                              ext[below:]))
        n = stop - start
        self._owned_pos = np.arange(below, below + n, dtype=np.int64)
        self._ext_pos = np.concatenate((np.arange(below, dtype=np.int64),
                                        np.arange(below + n, ids.size, dtype=np.int64)))
        M = _restrict(A, ext_rows, ids, below, n)
        self.local_rows_overlapped = ids.size
        self.solver = _factor("asm", self.sub, M, A.comm, sub_options, ids)
        if single:
            self.solver = self.solver.single()
        self.halo = NeighborExchange.from_ghosts(lay, ext)
        if not self.restricted:
            self.halo.reverse()         # collective on first use: build it now
        # per dtype of r (float64, complex128): the halo pattern, the reverse
        # one and the work vectors, made on first use
        self._work: dict = {}
        self._done()

    def _buffers(self, dtype):
        w = self._work.get(dtype)
        if w is None:
            halo = self.halo.for_dtype(dtype)
            n = self.local_rows_overlapped
            w = self._work[dtype] = (halo, None if self.restricted else halo.reverse(),
                                     np.zeros(n, dtype), np.zeros(n, dtype),
                                     np.zeros(self.ext.size, dtype))
        return w

    def _apply(self, r, out):
        """Collective among neighbouring ranks: :meth:`apply` is."""
        halo, back, rhs, sol, ext_sol = self._buffers(r.dtype)
        halo.start(r)
        try:
            rhs[self._owned_pos] = r
        finally:            # never leave the exchange active, whatever raised
            rhs[self._ext_pos] = halo.finish()
        self.solver.solve(rhs, sol)
        np.take(sol, self._owned_pos, out=out, mode="clip")  # "raise" would buffer
        if back is not None:
            np.take(sol, self._ext_pos, out=ext_sol, mode="clip")
            back.start(ext_sol)
            back.finish()
            back.accumulate(out)

    def _describe(self):
        return {"sub": self.sub, "overlap": self.overlap, "restricted": self.restricted,
                "precision": self.precision,
                "local_rows_with_overlap": int(self.local_rows_overlapped),
                "factor_nnz_local": int(self.solver.nnz),
                "factor_bytes_local": int(self.solver.nbytes)}


def _restrict(A, ext_rows: sp.csr_matrix, ids: np.ndarray, below: int, n: int
              ) -> sp.csr_matrix:
    """``A`` restricted to the rows and columns ``ids`` (sorted global ids:
    ``below`` overlap ids, the ``n`` owned ids, the other overlap ids), as
    local CSR. The owned rows come from the diag and offd blocks with their
    columns renumbered; only the (few) overlap rows are searched."""
    N = ids.size
    if N == n:                                      # no overlap: the diagonal block
        return A.diag
    d, o = A.diag, A.offd
    own = sp.csr_matrix((d.data, d.indices + below, d.indptr), shape=(n, N))
    if o.nnz and A.ghosts.size:
        gpos = np.searchsorted(ids, A.ghosts)
        gpos[gpos == N] = 0
        gpos = np.where(ids[gpos] == A.ghosts, gpos, -1)   # -1: ghost not in the overlap
        col = gpos[o.indices]
        keep = col >= 0
        rix = np.repeat(np.arange(n), np.diff(o.indptr))
        own = own + sp.csr_matrix((o.data[keep], (rix[keep], col[keep])), shape=(n, N))
    e = ext_rows.tocoo()
    cpos = np.searchsorted(ids, e.col)
    cpos[cpos == N] = 0
    inside = ids[cpos] == e.col
    rpos = np.where(e.row < below, e.row, e.row + n)
    ext = sp.csr_matrix((e.data[inside], (rpos[inside], cpos[inside])), shape=(N, N))
    top, bottom = ext[:below], ext[below + n:]
    return sp.vstack([top, own, bottom], format="csr")


register("bjacobi", BlockJacobi)
register("asm", AdditiveSchwarz)
