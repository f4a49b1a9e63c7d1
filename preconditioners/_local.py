"""Factorisations of one rank's local matrix: ILU(0), ILUT and LU (SuperLU).

Each local solver is set up once from a scipy CSR matrix and solves
``M x = b`` on numpy arrays in place of ``out``. Not collective; the callers
(block Jacobi, additive Schwarz, GeMSLR) agree on set-up errors.

All three factor real (float64) or complex (complex128) matrices: the
compiled ILU(0) loop and triangular sweeps are compiled for each, and
SuperLU has complex variants. A real factorisation solves with a complex
right-hand side too (``out`` complex then).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from dmsolve import Registry
from dmsolve.validate import check_real

from ._kernels import (ilu0_factor, ilu0_split, lower_unit_solve, superlu_solve,
                       unsigned_index, upper_solve)
from ._registry import check_options

__all__ = ["LOCAL_SOLVERS", "local_solver", "check_local_solver", "ilu0", "PivotError"]

_INT32_MAX = float(np.iinfo(np.int32).max)

#: Local solvers by name: classes ``cls(local_csr, **options)``, each with a
#: static ``check_options(**options) -> dict``.
LOCAL_SOLVERS = Registry("local solver")


class PivotError(ValueError):
    """A zero or non-finite pivot, or a singular local matrix, in a local
    factorisation (raised on one rank, not collective: the callers agree on
    it across ranks).

    Parameters
    ----------
    what : str
        What went wrong, without the place.
    local_index : int, optional
        The row (or column) of the local matrix where it went wrong, when
        known; the message then ends ``at local row i``, and the callers,
        who know the global numbering, say ``at global row g``
        (:meth:`at_global`).
    kind : {"row", "column"}
    """

    def __init__(self, what: str, local_index: int | None = None, kind: str = "row"):
        self.what, self.local_index, self.kind = what, local_index, kind
        super().__init__(self.at("local", local_index))

    def at(self, where: str, index: int | None) -> str:
        """The message with ``index`` in another numbering (``where``:
        ``"global"``, ...) in place of the local one. Not collective."""
        if index is None:
            return self.what
        return "%s at %s %s %d" % (self.what, where, self.kind, index)

    def at_global(self, global_index: int | None) -> str:
        """The message with the global row (or column) in place of the local
        one. Not collective."""
        return self.at("global", global_index)


def _rounded(values: np.ndarray) -> np.ndarray:
    """A factor's values in float32 (complex factors are refused before:
    single precision is for real matrices)."""
    return values.astype(np.float32)


def _factor_dtype(A) -> np.dtype:
    # the dtypes the factorisations run in: complex128 for complex input
    return np.dtype(np.complex128 if A.dtype.kind == "c" else np.float64)


def _check_pivots(diag: np.ndarray, what: str, perm_c: np.ndarray | None = None) -> None:
    bad = np.flatnonzero(~np.isfinite(diag) | (diag == 0))
    if bad.size:
        j = int(bad[0])
        # pivot j of Pr A Pc = L U eliminates column perm_c^-1(j) of A
        col = j if perm_c is None else int(np.flatnonzero(perm_c == j)[0])
        raise PivotError("%s: zero or non-finite pivot (%d such pivots)" % (what, bad.size),
                         col, "row" if perm_c is None else "column")


def _check_structure(A: sp.csr_matrix, what: str) -> None:
    """Refuse a local matrix with an empty row or column: structurally
    singular, and SuperLU would only say "singular", not where."""
    nz = A.data != 0
    rows = np.bincount(np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))[nz],
                       minlength=A.shape[0])
    if (rows == 0).any():
        raise PivotError("%s: the local matrix is singular (a row with no nonzero entry)"
                         % what, int(np.flatnonzero(rows == 0)[0]))
    cols = np.bincount(A.indices[nz], minlength=A.shape[1])
    if (cols == 0).any():
        raise PivotError("%s: the local matrix is singular (a column with no nonzero entry)"
                         % what, int(np.flatnonzero(cols == 0)[0]), "column")


def _superlu(factor, A: sp.csr_matrix, what: str, **options):
    """``factor(csc(A), **options)`` (``splu`` or ``spilu``), with SuperLU's
    errors as :class:`PivotError`: its messages carry C file paths and line
    numbers ("matrix is singular at line 148 in file .../ilu_dpivotL.c") and
    never say where the matrix is singular."""
    A = sp.csr_matrix(A, dtype=_factor_dtype(A))
    _check_structure(A, what)
    try:
        return factor(sp.csc_matrix(A), **options)
    except RuntimeError as e:      # "Factor is exactly singular", "... is singular at line ..."
        if "singular" in str(e):
            raise PivotError("%s: the local matrix is singular (SuperLU found a zero pivot)"
                             % what) from None
        raise PivotError("%s: SuperLU failed: %s" % (what, str(e).split(" at line ")[0])) \
            from None


def _ilu0_in_place(A: sp.csr_matrix):
    """ILU(0) of ``A`` as one CSR factor ``(indptr, indices, a, dpos)``: the
    strictly lower part of each row holds ``L`` (unit diagonal implied), the
    rest ``U``; ``dpos[i]`` is the position of row ``i``'s pivot. Index
    arrays are unsigned (:func:`._kernels.unsigned_index`)."""
    A = sp.csr_matrix(A, dtype=_factor_dtype(A), copy=True)
    A.sum_duplicates()
    A.sort_indices()
    ip, ix, a = unsigned_index(A.indptr), unsigned_index(A.indices), A.data
    dpos = np.empty(A.shape[0], dtype=np.uint64)
    bad, missing = ilu0_factor(ip, ix, a, dpos)     # compiled IKJ loop, in place of a
    if missing:
        raise PivotError("ILU(0): zero pivot (no diagonal entry)", int(bad))
    if bad >= 0:
        raise PivotError("ILU(0): zero or non-finite pivot", int(bad))
    return ip, ix, a, dpos


def ilu0(A: sp.csr_matrix) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """Incomplete LU with no fill: ``L`` (unit lower, stored without its
    diagonal) and ``U`` (upper, with the pivots) on the sparsity of ``A``.

    The IKJ variant (Saad, *Iterative Methods for Sparse Linear Systems*,
    2nd ed., Algorithm 10.4): row ``i`` is eliminated by the earlier rows
    ``k`` in its pattern, and updates fall only on positions already in row
    ``i``. The loop is compiled (:func:`._kernels.ilu0_factor`). Not collective.

    Raises
    ------
    PivotError
        A structurally missing, zero or non-finite pivot.
    """
    (Lp, Li, Lx), (Up, Ui, Ux, _), pivots = _ilu0_factors(A)
    n = A.shape[0]
    L = sp.csr_matrix((Lx, Li.astype(np.int64), Lp.astype(np.int64)), shape=(n, n))
    U = sp.csr_matrix((Ux, Ui.astype(np.int64), Up.astype(np.int64)), shape=(n, n))
    return L, (U + sp.diags(pivots)).tocsr()


def _ilu0_factors(A: sp.csr_matrix):
    """ILU(0) of ``A`` as two separate CSR factors, as PETSc keeps them (each
    triangular sweep streams only its own): ``(Lp, Li, Lx)`` strictly lower,
    ``(Up, Ui, Ux, dinv)`` strictly upper with the inverted pivots, and the
    pivots. Their indices are unsigned, as wide as ``A``'s (32 bits when
    they fit)."""
    ip, ix, a, dpos = _ilu0_in_place(A)
    n = A.shape[0]
    Lp = np.zeros(n + 1, dtype=ip.dtype)
    Up = np.zeros(n + 1, dtype=ip.dtype)
    np.cumsum(dpos - ip[:-1], out=Lp[1:])
    np.cumsum(ip[1:] - dpos - 1, out=Up[1:])
    Li, Ui = np.empty(int(Lp[-1]), dtype=ix.dtype), np.empty(int(Up[-1]), dtype=ix.dtype)
    Lx, Ux = np.empty(Li.size, dtype=a.dtype), np.empty(Ui.size, dtype=a.dtype)
    dinv = np.empty(n, dtype=a.dtype)
    ilu0_split(ip, ix, a, dpos, Lp, Li, Lx, Up, Ui, Ux, dinv)
    return (Lp, Li, Lx), (Up, Ui, Ux, dinv), a[dpos]


@LOCAL_SOLVERS.register("ilu0")
class ILU0:
    """``M = L U`` from :func:`ilu0`, kept as two CSR factors (``L`` strictly
    lower, ``U`` strictly upper plus its inverted pivots); solves by two
    compiled triangular sweeps, in place of ``out`` (no allocation per
    solve). No options; not collective."""

    name = "ilu0"

    @staticmethod
    def check_options() -> dict:
        """No options. Not collective."""
        return {}

    def __init__(self, A: sp.csr_matrix):
        self._lower, self._upper, pivots = _ilu0_factors(A)
        self.nnz = int(self._lower[1].size + self._upper[1].size + pivots.size)

    @property
    def nbytes(self) -> int:
        """Bytes of the stored factors. Not collective."""
        return int(sum(a.nbytes for a in self._lower + self._upper))

    def single(self) -> "ILU0":
        """These factors with their values (and inverted pivots) rounded to
        float32, computed in float64 as before; solves read them as float32
        and compute in the vectors' dtype. Not collective."""
        new = object.__new__(type(self))
        Lp, Li, Lx = self._lower
        Up, Ui, Ux, dinv = self._upper
        new._lower = (Lp, Li, _rounded(Lx))
        new._upper = (Up, Ui, _rounded(Ux), _rounded(dinv))
        new.nnz = self.nnz
        return new

    def solve(self, b: np.ndarray, out: np.ndarray) -> None:
        """``out = M^-1 b``. Not collective."""
        if b.shape[0]:
            lower_unit_solve(*self._lower, b, out)
            upper_solve(*self._upper, out)


class _SuperLU:
    """Keeps SuperLU's factors ``Pr A Pc = L U`` as CSC arrays and solves with
    compiled triangular sweeps in place of ``out`` (``SuperLU.solve`` would
    allocate its result on every call)."""

    def _keep(self, lu, what):
        L, U = lu.L.tocsc(), lu.U.tocsc()
        d = U.diagonal()
        _check_pivots(d, what, lu.perm_c)
        self.nnz = L.nnz + U.nnz
        self._factors = (lu.perm_r.astype(np.int64), lu.perm_c.astype(np.int64),
                         L.indptr, L.indices, L.data, U.indptr, U.indices, U.data, d)
        self._work = {}             # per dtype of the right-hand side, made on first use

    @property
    def nbytes(self) -> int:
        """Bytes of the stored factors and permutations. Not collective."""
        return 0 if self._factors is None else int(sum(a.nbytes for a in self._factors))

    def single(self):
        """These factors with their values rounded to float32 (the
        permutations and indices kept); solves compute in the vectors'
        dtype. Not collective."""
        new = object.__new__(type(self))
        new.nnz, new._work = self.nnz, {}
        new._factors = None
        if self._factors is not None:
            f = list(self._factors)
            for i in (4, 7, 8):             # L's values, U's values, U's diagonal
                f[i] = _rounded(f[i])
            new._factors = tuple(f)
        return new

    def solve(self, b: np.ndarray, out: np.ndarray) -> None:
        """``out = M^-1 b``. Not collective."""
        if self._factors is None:
            return
        work = self._work.get(out.dtype)
        if work is None:
            work = self._work[out.dtype] = np.zeros(out.shape[0], dtype=out.dtype)
        superlu_solve(*self._factors, b, work, out)


@LOCAL_SOLVERS.register("lu")
class LU(_SuperLU):
    """Complete LU (SuperLU, COLAMD ordering, partial pivoting). No options;
    not collective."""

    name = "lu"

    @staticmethod
    def check_options() -> dict:
        """No options. Not collective."""
        return {}

    def __init__(self, A: sp.csr_matrix):
        from scipy.sparse.linalg import splu
        self._factors = None
        self.nnz = 0
        if A.shape[0] == 0:
            return
        self._keep(_superlu(splu, A, "LU"), "LU")


@LOCAL_SOLVERS.register("ilut")
class ILUT(_SuperLU):
    """Threshold ILU (SuperLU's ILUTP): ``drop_tol`` in ``[0, 1]`` (default
    1e-4) and ``fill_factor >= 1`` (default 10), as scipy's ``spilu``. Not
    collective.

    ``fill_factor`` bounds ``nnz(L + U) / nnz(A)`` (and, in SuperLU, each
    column's fill); a bound beyond what SuperLU counts in a 32-bit integer
    (it overflows and reports no memory) is passed as the largest it can count.
    """

    name = "ilut"

    @staticmethod
    def check_options(drop_tol: float = 1e-4, fill_factor: float = 10.0) -> dict:
        """The options, checked, defaults filled in. Not collective."""
        return {"drop_tol": check_real("drop_tol", drop_tol, low=0.0, high=1.0),
                "fill_factor": check_real("fill_factor", fill_factor, low=1.0)}

    def __init__(self, A: sp.csr_matrix, **options):
        from scipy.sparse.linalg import spilu
        o = self.check_options(**options)
        self._factors = None
        self.nnz = 0
        if A.shape[0] == 0:
            return
        # SuperLU computes fill_factor * nnz in a 32-bit int: cap it below the
        # overflow. No lower cap: SuperLU also uses fill_factor column by
        # column, so a bound above the full fill still changes the factor.
        nnz = max(int(np.count_nonzero(A.data)), 1)
        o["fill_factor"] = max(1.0, min(o["fill_factor"], 0.99 * _INT32_MAX / nnz))
        self._keep(_superlu(spilu, A, "ILUT", **o), "ILUT")


def check_local_solver(name: str, options: dict | None = None) -> tuple[str, dict]:
    """The local solver ``name`` and its ``options`` (a dict or None), checked:
    ``(canonical name, options with defaults)``. Not collective.

    Raises
    ------
    TypeError, ValueError
        For an unknown name, options that are not a dict, an unknown option or
        a bad option value.
    """
    return check_options(LOCAL_SOLVERS, (name, options))


def local_solver(name: str, A: sp.csr_matrix, **options):
    """Factor ``A`` with the local solver ``name``. Not collective.

    Raises
    ------
    ValueError
        Unknown name or bad option (:class:`PivotError`, a ``ValueError``, for
        a bad pivot, a singular local matrix or non-finite entries, with the
        local row where it is known).
    TypeError
        Unknown option.
    """
    name, options = check_local_solver(name, options)
    if A.shape[0] and not np.all(np.isfinite(A.data)):
        A = sp.csr_matrix(A)
        bad = np.flatnonzero(~np.isfinite(A.data))[0]
        row = int(np.searchsorted(A.indptr, bad, side="right") - 1)
        raise PivotError("%s: the local matrix has non-finite entries" % name, row)
    return LOCAL_SOLVERS[name](A, **options)
