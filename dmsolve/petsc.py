"""Interoperability with PETSc through petsc4py (the optional ``[petsc]`` extra).

Matrices and vectors cross over on the same communicator and ownership ranges
(:func:`to_petsc`, :func:`from_petsc`); our preconditioners run inside a PETSc
``KSP`` as a ``PC`` of type ``python`` (:func:`as_petsc_pc`, :func:`petsc_pc`);
and :func:`ksp_solve` (``dmsolve.solve(..., backend="petsc")``) solves with
PETSc's Krylov methods and preconditioners under our option names.

petsc4py is imported on first use, never when dmsolve is imported. Importing
it initialises PETSc on ``MPI.COMM_WORLD`` (MPI itself is already initialised
by mpi4py; PETSc uses the same MPI library, the ``mpich`` wheel's).
"""

from __future__ import annotations

import itertools
import math
import numbers
import time

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from ._errors import agree
from ._layout import Layout
from ._matrix import DistCSR
from ._registry import PRECONDITIONERS, split_descriptor
from ._vector import DistVector
from .krylov._common import _check_tol
from .krylov._info import ConvergedReason, SolveInfo

__all__ = [
    "petsc4py_available", "to_petsc", "from_petsc", "vec_to_petsc", "vec_from_petsc",
    "PythonPC", "as_petsc_pc", "petsc_pc", "ksp_solve",
    "KSP_TYPES", "PC_TYPES", "convert_reason",
]

_INSTALL_HINT = ("dmsolve.petsc needs petsc4py, which is not installed in this environment: "
                 "run `make petsc` (tools/install-petsc.sh builds PETSc and petsc4py from "
                 "PyPI against the mpich wheel's MPI), or install the extra "
                 "`pip install --no-build-isolation petsc petsc4py`.")


def _petsc():
    """The ``petsc4py.PETSc`` module, imported (and PETSc initialised) on first use."""
    try:
        from petsc4py import PETSc
    except ImportError as e:
        raise ImportError(_INSTALL_HINT) from e
    return PETSc


def petsc4py_available() -> bool:
    """Whether petsc4py can be imported. Not collective (but the answer is the
    same on every rank of one installation); imports (and initialises) PETSc."""
    try:
        _petsc()
    except ImportError:
        return False
    return True


# -- layouts and communicators ------------------------------------------------------------

def _mpi_comm(obj) -> MPI.Comm:
    """The mpi4py communicator of a PETSc object (the same MPI handle)."""
    return obj.getComm().tompi4py()


def _layout_from_ranges(ranges, comm: MPI.Comm) -> Layout:
    return Layout(np.asarray(ranges, dtype=np.int64), comm)


def _check_index_range(comm: MPI.Comm, *sizes: int) -> None:
    PETSc = _petsc()
    limit = np.iinfo(PETSc.IntType).max
    big = max(sizes) if sizes else 0
    agree(comm, ValueError("global size %d exceeds this PETSc build's %d-bit indices "
                           "(configure PETSc --with-64-bit-indices)"
                           % (big, 8 * np.dtype(PETSc.IntType).itemsize))
          if big > limit else None)


# -- matrices -----------------------------------------------------------------------------

def _mat_to_petsc(A: DistCSR):
    PETSc = _petsc()
    comm = A.comm
    exc = None
    if np.dtype(A.dtype).kind == "c" and np.dtype(PETSc.ScalarType).kind != "c":
        exc = TypeError("A is complex (%s) but this PETSc build has real scalars (%s)"
                        % (A.dtype, np.dtype(PETSc.ScalarType)))
    agree(comm, exc)
    _check_index_range(comm, *A.shape, A.local_nnz)
    loc = A.local_rows()                  # this rank's rows, global column ids
    loc.sort_indices()
    indptr = loc.indptr.astype(PETSc.IntType, copy=False)
    indices = loc.indices.astype(PETSc.IntType, copy=False)
    data = loc.data.astype(PETSc.ScalarType, copy=False)
    size = ((A.row_layout.local_size, A.shape[0]), (A.col_layout.local_size, A.shape[1]))
    # MatXAIJSetPreallocationCSR: exact per-row diag/offd counts from the CSR, values
    # inserted and the matrix assembled in one call, so no malloc ever happens.
    M = PETSc.Mat().createAIJ(size, csr=(indptr, indices, data), comm=comm)
    M.setOption(PETSc.Mat.Option.NEW_NONZERO_ALLOCATION_ERR, True)
    return M


def _mat_from_petsc(mat, comm: MPI.Comm | None = None) -> DistCSR:
    PETSc = _petsc()
    if comm is None:
        comm = _mpi_comm(mat)
    if not mat.isAssembled():
        agree(comm, ValueError("the PETSc matrix is not assembled (call mat.assemble())"))
    converted = None
    if mat.getType() not in (PETSc.Mat.Type.SEQAIJ, PETSc.Mat.Type.MPIAIJ):
        # dense, BAIJ, SBAIJ, ...: through PETSc's own conversion (collective)
        mat = converted = mat.convert(PETSc.Mat.Type.AIJ)
    row_layout = _layout_from_ranges(mat.getOwnershipRanges(), comm)
    col_layout = _layout_from_ranges(mat.getOwnershipRangesColumn(), comm)
    if row_layout == col_layout:
        col_layout = row_layout
    indptr, indices, data = mat.getValuesCSR()
    if converted is not None:
        indptr, indices, data = np.array(indptr), np.array(indices), np.array(data)
        converted.destroy()
    local = sp.csr_matrix((np.array(data), np.array(indices, dtype=np.int64),
                           np.array(indptr, dtype=np.int64)),
                          shape=(row_layout.local_size, col_layout.global_size))
    return DistCSR.from_local_rows(local, row_layout, col_layout)


# -- vectors ------------------------------------------------------------------------------

def vec_to_petsc(x: DistVector, copy: bool = True):
    """A PETSc ``Vec`` with the same communicator, ownership and entries as ``x``.

    Parameters
    ----------
    x : DistVector
    copy : bool, optional
        ``True`` (default): the Vec owns a copy. ``False``: the Vec wraps
        ``x.local`` (``VecCreateMPIWithArray``), so writes through either are
        seen by both; ``x.local`` must then be a contiguous array of PETSc's
        scalar type.

    Returns
    -------
    petsc4py.PETSc.Vec
        ``seq`` on one rank, ``mpi`` otherwise.

    Notes
    -----
    Collective on ``x.comm``.
    """
    PETSc = _petsc()
    if not isinstance(x, DistVector):
        raise TypeError("x must be a DistVector, got %s" % type(x).__name__)
    comm = x.comm
    exc = None
    st = np.dtype(PETSc.ScalarType)
    if x.dtype.kind == "c" and st.kind != "c":
        exc = TypeError("x is complex (%s) but this PETSc build has real scalars" % x.dtype)
    elif not copy and x.dtype != st:
        exc = TypeError("copy=False needs x.local of PETSc's scalar type %s, got %s"
                        % (st, x.dtype))
    agree(comm, exc)
    _check_index_range(comm, x.global_size)
    size = (x.local_size, x.global_size)
    if copy:
        v = PETSc.Vec().createMPI(size, comm=comm)
        v.getArray()[:] = x.local
        return v
    return PETSc.Vec().createWithArray(x.local, size=size, comm=comm)


def vec_from_petsc(v, copy: bool = True, comm: MPI.Comm | None = None) -> DistVector:
    """A DistVector with the ownership ranges and entries of the PETSc ``Vec`` ``v``.

    With ``copy=False`` the DistVector's local part is a view of the Vec's
    array (valid while ``v`` lives; for standard CPU vectors).
    Not collective (``getOwnershipRanges`` is cached by PETSc).
    """
    if comm is None:
        comm = _mpi_comm(v)
    layout = _layout_from_ranges(v.getOwnershipRanges(), comm)
    arr = v.getArray(readonly=True)
    return DistVector(layout, np.array(arr) if copy else v.getArray())


def to_petsc(obj, copy: bool = True):
    """Convert a :class:`~dmsolve.DistCSR` or :class:`~dmsolve.DistVector` to PETSc.

    A DistCSR becomes an ``AIJ`` matrix (``mpiaij`` on several ranks,
    ``seqaij`` on one) with the same row and column ownership ranges,
    preallocated exactly from the CSR (``MatXAIJSetPreallocationCSR``) and
    with ``MAT_NEW_NONZERO_ALLOCATION_ERR`` set, so an insertion outside
    the pattern is an error instead of a silent malloc. A DistVector becomes
    a ``Vec`` (see :func:`vec_to_petsc`; ``copy`` applies to vectors only).

    Parameters
    ----------
    obj : DistCSR or DistVector
    copy : bool, optional
        For vectors: copy (default) or wrap ``obj.local``.

    Returns
    -------
    petsc4py.PETSc.Mat or petsc4py.PETSc.Vec

    Raises
    ------
    TypeError
        ``obj`` is neither; a complex matrix for a real PETSc (every rank).
    ValueError
        A global size beyond PETSc's index type (every rank).
    ImportError
        petsc4py is not installed (``make petsc``).

    Notes
    -----
    Collective on ``obj.comm``.

    Examples
    --------
    >>> M = to_petsc(dmsolve.gallery.poisson3d(20, comm))     # doctest: +SKIP
    >>> A = from_petsc(M)                                      # doctest: +SKIP
    """
    if isinstance(obj, DistCSR):
        return _mat_to_petsc(obj)
    if isinstance(obj, DistVector):
        return vec_to_petsc(obj, copy=copy)
    _petsc()
    raise TypeError("to_petsc takes a DistCSR or a DistVector, got %s" % type(obj).__name__)


def from_petsc(obj, comm: MPI.Comm | None = None):
    """Convert a PETSc ``Mat`` or ``Vec`` to a :class:`DistCSR` or :class:`DistVector`.

    The ownership ranges of rows and columns become the layouts; the
    communicator is the PETSc object's (as an mpi4py communicator) unless
    ``comm`` (the same or a congruent one) is given. Matrices that are not
    AIJ are converted by PETSc first. Explicitly stored zeros are kept.

    Notes
    -----
    Collective on the object's communicator.

    Raises
    ------
    TypeError
        ``obj`` is not a PETSc Mat or Vec.
    ValueError
        The matrix is not assembled (every rank).
    """
    PETSc = _petsc()
    if isinstance(obj, PETSc.Mat):
        return _mat_from_petsc(obj, comm)
    if isinstance(obj, PETSc.Vec):
        return vec_from_petsc(obj, comm=comm)
    raise TypeError("from_petsc takes a PETSc Mat or Vec, got %s" % type(obj).__name__)


class _ShellMat:
    """Context of a PETSc ``python`` matrix applying a dmsolve operator's matvec."""

    def __init__(self, A):
        self.A = A

    def mult(self, mat, x, y):
        A = self.A
        xv = DistVector(A.col_layout, x.getArray(readonly=True))
        yv = DistVector(A.row_layout, y.getArray())
        A.matvec(xv, yv)


def _operator_to_petsc(A):
    """A DistCSR as AIJ, any other operator as a ``python`` shell matrix."""
    if isinstance(A, DistCSR):
        return _mat_to_petsc(A)
    PETSc = _petsc()
    M = PETSc.Mat().createPython(
        ((A.row_layout.local_size, A.row_layout.global_size),
         (A.col_layout.local_size, A.col_layout.global_size)),
        context=_ShellMat(A), comm=A.row_layout.comm)
    M.setUp()
    return M


# -- our preconditioners inside PETSc ---------------------------------------------------------

class PythonPC:
    """Context of a PETSc ``PC`` of type ``python`` applying a dmsolve preconditioner.

    Parameters
    ----------
    M : preconditioner object, str or (str, dict)
        A built preconditioner (``apply(r, out)`` on DistVectors, such as
        ``preconditioners.make("amg", A)``), or a name / ``(name, options)``
        descriptor: then it is built by ``preconditioners.make`` from the
        PC's preconditioning matrix (converted with :func:`from_petsc`) at
        every ``PCSetUp`` (that is, when the operator changes).
    **options
        Options for ``preconditioners.make`` when ``M`` is a name.

    Notes
    -----
    ``setUp`` is collective on the PC's communicator; ``apply`` is collective
    exactly when the wrapped preconditioner's ``apply`` is. ``apply`` wraps
    PETSc's arrays without copying (two small DistVector headers per call).
    An exception in ``apply`` on one rank only becomes a PETSc error on that
    rank; our preconditioners raise only at set-up, where errors are agreed.
    """

    def __init__(self, M, **options):
        self._by_name = isinstance(M, (str, tuple, list))
        if self._by_name:
            name, opts = split_descriptor(M)
            opts.update(options)
            self.name, self.options, self.M = name, opts, None
        else:
            if options:
                raise TypeError("options are for a preconditioner given by name; got a "
                                "built %s and options %s" % (type(M).__name__, sorted(options)))
            if not callable(getattr(M, "apply", None)):
                raise TypeError("M must have apply(r, out) or be a preconditioner name, "
                                "got %s" % type(M).__name__)
            self.name, self.options, self.M = getattr(M, "name", type(M).__name__), {}, M
        self.layout = None
        self.setup_seconds = 0.0

    def setUp(self, pc):
        t0 = time.perf_counter()
        _, P = pc.getOperators()
        comm = _mpi_comm(pc)
        layout = _layout_from_ranges(P.getOwnershipRanges(), comm)
        if self._by_name:
            self.M = PRECONDITIONERS[self.name](_mat_from_petsc(P, comm), **self.options)
        mine = getattr(self.M, "layout", None)
        if isinstance(mine, Layout):
            agree(comm, None if mine == layout else ValueError(
                "the preconditioner was built for %d rows (ownership %s), the PETSc "
                "operator has %d (ownership %s)" % (mine.global_size, list(mine.ranges),
                                                    layout.global_size, list(layout.ranges))))
            layout = mine
        self.layout = layout
        self.setup_seconds = time.perf_counter() - t0

    def apply(self, pc, x, y):
        lay = self.layout
        self.M.apply(DistVector(lay, x.getArray(readonly=True)), DistVector(lay, y.getArray()))

    def view(self, pc, viewer):
        desc = getattr(self.M, "describe", None)
        viewer.printfASCII("  dmsolve preconditioner %s %s\n"
                           % (self.name, self.options or ""))
        if callable(desc):
            d = desc()
            keep = {k: v for k, v in d.items() if isinstance(v, (int, float, str))}
            viewer.printfASCII("  %s\n" % keep)


def as_petsc_pc(M, comm: MPI.Comm | None = None, **options):
    """A PETSc ``PC`` of type ``python`` that applies the dmsolve preconditioner ``M``.

    Parameters
    ----------
    M : preconditioner object, str or (str, dict)
        See :class:`PythonPC`.
    comm : MPI.Comm, optional
        Defaults to ``M.comm`` for a built preconditioner; needed for a name.
    **options
        Options of the named preconditioner.

    Returns
    -------
    petsc4py.PETSc.PC
        Give it to a KSP with ``ksp.setPC(pc)`` and then set the operators
        (``ksp.setOperators(mat)``): a KSP hands its operators to the PC it
        holds at that moment.

    Notes
    -----
    Collective on ``comm``.
    """
    PETSc = _petsc()
    ctx = PythonPC(M, **options)
    if comm is None:
        comm = getattr(ctx.M, "comm", None)
        if comm is None:
            raise TypeError("give comm= for a preconditioner given by name")
    pc = PETSc.PC().create(comm=comm)
    pc.setType(PETSc.PC.Type.PYTHON)
    pc.setPythonContext(ctx)
    return pc


def petsc_pc(ksp, M, **options):
    """Make ``ksp``'s preconditioner a ``python`` PC applying dmsolve's ``M``.

    ``M`` is a built preconditioner or a name (``"amg"``, ``("asm", {...})``)
    built from the KSP's preconditioning matrix at set-up. Returns the
    :class:`PythonPC` context. Collective on ``ksp``'s communicator.

    Examples
    --------
    >>> ksp = PETSc.KSP().create(comm); ksp.setOperators(to_petsc(A))  # doctest: +SKIP
    >>> ksp.setType("cg"); petsc_pc(ksp, "amg"); ksp.solve(b, x)        # doctest: +SKIP
    """
    PETSc = _petsc()
    ctx = PythonPC(M, **options)
    pc = ksp.getPC()
    pc.setType(PETSc.PC.Type.PYTHON)
    pc.setPythonContext(ctx)
    return ctx


# -- KSP from dmsolve.solve ----------------------------------------------------------------

#: Our method names -> PETSc KSPType.
KSP_TYPES: dict[str, str] = {
    "cg": "cg", "pipecg": "pipecg", "gmres": "gmres", "fgmres": "fgmres",
    "bicgstab": "bcgs", "minres": "minres",
}
#: Our preconditioner names -> PETSc PCType.
PC_TYPES: dict[str, str] = {
    "none": "none", "jacobi": "jacobi", "bjacobi": "bjacobi", "asm": "asm", "amg": "gamg",
}
# (side, default norm, allowed norms) as our methods define them, so the stopping
# test means the same thing under both backends.
_METHOD_NORMS = {
    "cg": ("left", "unpreconditioned", ("unpreconditioned", "preconditioned", "natural")),
    "pipecg": ("left", "unpreconditioned", ("unpreconditioned", "preconditioned", "natural")),
    "gmres": (None, None, ()),          # left: preconditioned, right: unpreconditioned
    "fgmres": ("right", "unpreconditioned", ("unpreconditioned",)),
    "bicgstab": ("right", "unpreconditioned", ("unpreconditioned",)),
    "minres": ("left", None, ()),       # natural with a PC, else unpreconditioned
}
_SUB = {"ilu0": {"sub_pc_type": "ilu", "sub_pc_factor_levels": "0"},
        "lu": {"sub_pc_type": "lu"}}


def _sub_options(who, sub, sub_options):
    if sub not in _SUB:
        raise ValueError("%s: sub=%r has no PETSc equivalent here; use one of %s"
                         % (who, sub, sorted(_SUB)))
    if sub_options:
        raise TypeError("%s: sub_options %s have no PETSc mapping; use petsc_options="
                        % (who, sorted(sub_options)))
    return dict(_SUB[sub])


def _opts_jacobi(**kw):
    if kw:
        raise TypeError("jacobi: options %s have no PETSc mapping (PCJACOBI takes none "
                        "here); use petsc_options=" % sorted(kw))
    return {}


def _opts_none(**kw):
    if kw:
        raise TypeError("none: takes no options, got %s" % sorted(kw))
    return {}


def _opts_bjacobi(sub="ilu0", sub_options=None):
    return _sub_options("bjacobi", sub, sub_options)


def _opts_asm(overlap=1, sub="ilu0", sub_options=None, restricted=True):
    if isinstance(overlap, bool) or not isinstance(overlap, numbers.Integral) or overlap < 0:
        raise ValueError("asm: overlap must be a non-negative integer, got %r" % (overlap,))
    o = _sub_options("asm", sub, sub_options)
    o.update({"pc_asm_overlap": str(int(overlap)),
              "pc_asm_type": "restrict" if restricted else "basic"})
    return o


def _opts_amg(theta=None, max_levels=None, max_coarse=None):
    o = {}
    if theta is not None:
        o["pc_gamg_threshold"] = repr(float(theta))
    if max_levels is not None:
        o["pc_mg_levels"] = str(int(max_levels))
    if max_coarse is not None:
        o["pc_gamg_coarse_eq_limit"] = str(int(max_coarse))
    return o


# Our preconditioner options -> PETSc options database entries (prefixed per solve).
_PC_OPTIONS = {"none": _opts_none, "jacobi": _opts_jacobi, "bjacobi": _opts_bjacobi,
               "asm": _opts_asm, "amg": _opts_amg}

_ORTHOG = {"cgs": {}, "cgs2": {"ksp_gmres_cgs_refinement_type": "refine_ifneeded"},
           "mgs": {"ksp_gmres_modifiedgramschmidt": None}}

# PETSc's KSPConvergedReason names -> ours. Names PETSc has and we lack keep their
# spelling in info.extra["petsc_reason"]; see convert_reason.
_REASONS = {
    "CONVERGED_RTOL": ConvergedReason.RTOL, "CONVERGED_RTOL_NORMAL": ConvergedReason.RTOL,
    "CONVERGED_ATOL": ConvergedReason.ATOL, "CONVERGED_ATOL_NORMAL": ConvergedReason.ATOL,
    "CONVERGED_HAPPY_BREAKDOWN": ConvergedReason.HAPPY_BREAKDOWN,
    "CONVERGED_RTOL_NORMAL_EQUATIONS": ConvergedReason.RTOL,
    "CONVERGED_ATOL_NORMAL_EQUATIONS": ConvergedReason.ATOL,
    "DIVERGED_MAX_IT": ConvergedReason.MAXITER,          # PETSc >= 3.24
    "DIVERGED_ITS": ConvergedReason.MAXITER, "DIVERGED_DTOL": ConvergedReason.DIVTOL,
    "DIVERGED_BREAKDOWN": ConvergedReason.BREAKDOWN,
    "DIVERGED_BREAKDOWN_BICG": ConvergedReason.BREAKDOWN,
    "DIVERGED_INDEFINITE_PC": ConvergedReason.INDEFINITE_PC,
    "DIVERGED_INDEFINITE_MAT": ConvergedReason.INDEFINITE_MAT,
    "DIVERGED_NANORINF": ConvergedReason.NANORINF,
}


def convert_reason(code: int) -> tuple[ConvergedReason, str]:
    """PETSc's ``KSPConvergedReason`` code -> ``(our ConvergedReason, PETSc's name)``.

    A converged reason we have no member for (``CONVERGED_ITS``, ...) maps to
    ``RTOL`` and a diverged one (``DIVERGED_PCSETUP_FAILED``,
    ``DIVERGED_NULL``, ...) to ``BREAKDOWN``; the returned name is always
    PETSc's exact one (e.g. ``DIVERGED_MAX_IT``, called ``DIVERGED_ITS``
    before PETSc 3.24, for our ``MAXITER``).
    Not collective.
    """
    PETSc = _petsc()
    names = {getattr(PETSc.KSP.ConvergedReason, n): n
             for n in dir(PETSc.KSP.ConvergedReason)
             if n.startswith(("CONVERGED_", "DIVERGED_"))}
    name = names.get(int(code), "KSP_REASON_%d" % int(code))
    ours = _REASONS.get(name)
    if ours is None:
        ours = ConvergedReason.RTOL if int(code) > 0 else ConvergedReason.BREAKDOWN
    return ours, name


_PREFIX = itertools.count()


def _resolve(method, pc, A, x0, b, rtol, atol, divtol, maxiter, restart, side, orthog,
             norm_type, shift, nullspace, callback, monitor, petsc_options):
    """Rank-independent checks and the option mapping. Returns a plan dict."""
    if not isinstance(method, str):
        raise TypeError("method must be a string, got %s" % type(method).__name__)
    m = method.lower()
    if m not in KSP_TYPES:
        raise ValueError("backend='petsc' has no method %r; available: %s"
                         % (method, ", ".join(sorted(KSP_TYPES))))
    layout = getattr(A, "row_layout", None)
    if not isinstance(layout, Layout) or not callable(getattr(A, "matvec", None)):
        raise TypeError("A must be a DistCSR or a distributed operator, got %s"
                        % type(A).__name__)
    if A.row_layout != A.col_layout:
        raise ValueError("A must be square with equal row and column layouts (%d x %d)"
                         % (A.row_layout.global_size, A.col_layout.global_size))
    for name, v in (("b", b), ("x0", x0)):
        if v is None and name == "x0":
            continue
        if not isinstance(v, DistVector):
            raise TypeError("%s must be a DistVector, got %s" % (name, type(v).__name__))
        if v.layout != A.row_layout:
            raise ValueError("%s has global size %d but A's layout has %d (or the ownership "
                             "ranges differ)" % (name, v.global_size, A.row_layout.global_size))
        if v.dtype.kind not in "fiu":
            raise TypeError("%s has dtype %s; backend='petsc' supports real vectors"
                            % (name, v.dtype))
    plan = {"ksp_type": KSP_TYPES[m], "rtol": _check_tol("rtol", rtol),
            "atol": _check_tol("atol", atol), "divtol": _check_tol("divtol", divtol, True),
            "options": {}, "pc_object": None, "pc_type": "none", "pc_name": "none"}
    n = A.row_layout.global_size
    if maxiter is None:
        maxiter = 10 * n
    if isinstance(maxiter, (bool, np.bool_)) or not isinstance(maxiter, numbers.Integral):
        raise TypeError("maxiter must be an integer or None, got %s" % type(maxiter).__name__)
    if maxiter < 0:
        raise ValueError("maxiter must be non-negative, got %d" % maxiter)
    plan["maxiter"] = int(maxiter)
    for name, f in (("callback", callback), ("monitor", monitor)):
        if f is not None and f is not True and not callable(f):
            raise TypeError("%s must be callable or None" % name)
    if shift:
        raise TypeError("minres shift has no PETSc KSPMINRES equivalent; shift the matrix")

    # preconditioner: a name (PETSc's own PC) or an object (our PC as PC python)
    if pc is None or isinstance(pc, (str, tuple, list)):
        if pc is None:
            name, opts = "none", {}
        else:
            name, opts = split_descriptor(pc)
        key = name.lower()
        if key not in PC_TYPES:
            raise ValueError("backend='petsc' has no preconditioner %r; available: %s "
                             "(or pass a built dmsolve preconditioner object to run it "
                             "inside KSP as PC python)" % (name, ", ".join(sorted(PC_TYPES))))
        plan["options"].update(_PC_OPTIONS[key](**opts))
        plan["pc_type"], plan["pc_name"] = PC_TYPES[key], key
    else:
        if not callable(getattr(pc, "apply", None)):
            raise TypeError("pc must be a name, a (name, options) pair or a preconditioner "
                            "with apply(r, out), got %s" % type(pc).__name__)
        plan["pc_object"], plan["pc_type"] = pc, "python"
        plan["pc_name"] = getattr(pc, "name", type(pc).__name__)
    has_pc = plan["pc_type"] != "none"

    # side and norm, as our method of the same name defines them
    dside, dnorm, allowed = _METHOD_NORMS[m]
    if m == "gmres":
        side = "left" if side is None else side
        if side not in ("left", "right"):
            raise ValueError("side must be 'left' or 'right', got %r" % (side,))
        dnorm = "preconditioned" if side == "left" and has_pc else "unpreconditioned"
        if norm_type is not None and norm_type != dnorm:
            raise ValueError("gmres with side=%r tests the %s norm; norm_type=%r is not "
                             "available" % (side, dnorm, norm_type))
        plan["side"], plan["norm"] = side, dnorm
    else:
        if side is not None:
            raise TypeError("side= is an option of gmres only, not of %s" % m)
        if m == "minres":
            dnorm = "natural" if has_pc else "unpreconditioned"
            allowed = (dnorm,)
        norm = dnorm if norm_type is None else norm_type
        if norm not in allowed:
            raise ValueError("%s: norm_type must be one of %s, got %r"
                             % (m, ", ".join(allowed), norm_type))
        if not has_pc:
            norm = "unpreconditioned"     # all coincide without a preconditioner
        plan["side"], plan["norm"] = dside, norm

    if m in ("gmres", "fgmres"):
        restart = 30 if restart is None else restart
        orthog = "cgs" if orthog is None else orthog
        if isinstance(restart, (bool, np.bool_)) or not isinstance(restart, numbers.Integral) \
                or restart < 1:
            raise ValueError("restart must be a positive integer, got %r" % (restart,))
        if orthog not in _ORTHOG:
            raise ValueError("orthog must be one of %s, got %r" % (sorted(_ORTHOG), orthog))
        plan["restart"] = int(restart)
        plan["options"].update(_ORTHOG[orthog])
    else:
        if restart is not None:
            raise TypeError("restart= is an option of gmres and fgmres, not of %s" % m)
        if orthog is not None:
            raise TypeError("orthog= is an option of gmres and fgmres, not of %s" % m)

    if petsc_options is not None:
        if not isinstance(petsc_options, dict) or not all(isinstance(k, str)
                                                          for k in petsc_options):
            raise TypeError("petsc_options must be a dict of option names (without the "
                            "leading '-') to values")
        plan["options"].update({k.lstrip("-"): (None if v is None else str(v))
                                for k, v in petsc_options.items()})
    if nullspace is not None:
        vecs = [nullspace] if isinstance(nullspace, DistVector) else list(nullspace)
        if not vecs:
            raise ValueError("nullspace must hold at least one vector")
        for i, v in enumerate(vecs):
            if not isinstance(v, DistVector) or v.layout != A.row_layout:
                raise ValueError("nullspace[%d] must be a DistVector on A's layout" % i)
        plan["nullspace"] = vecs
    return plan


def _orthonormal(vecs: list[DistVector]) -> list[DistVector]:
    """Modified Gram-Schmidt on DistVectors (collective), as PETSc's MatNullSpace wants."""
    out = []
    for v in vecs:
        w = DistVector(v.layout, v.local.astype(np.float64))
        for q in out:
            w.axpy(-q.dot(w), q)
        nrm = w.norm()
        if nrm == 0.0:
            raise ValueError("nullspace vectors are linearly dependent")
        out.append(w.scale(1.0 / nrm))
    return out


_NORM_NAMES = {"unpreconditioned": "UNPRECONDITIONED", "preconditioned": "PRECONDITIONED",
               "natural": "NATURAL"}


def ksp_solve(A, b, method: str = "cg", pc=None, *, x0=None, rtol=1e-5, atol=0.0,
              maxiter=None, restart=None, side=None, orthog=None, norm_type=None,
              divtol=1e4, shift=0.0, nullspace=None, callback=None, monitor=None,
              raise_on_failure=False, petsc_options=None):
    """Solve ``A x = b`` with PETSc's KSP under dmsolve's names (``backend="petsc"``).

    The same call as :func:`dmsolve.solve`, run by PETSc: ``method`` is mapped
    to a ``KSPType`` (:data:`KSP_TYPES`: cg, pipecg, gmres, fgmres,
    bicgstab -> bcgs, minres), ``pc`` by name to a ``PCType``
    (:data:`PC_TYPES`: none, jacobi, bjacobi, asm, amg -> gamg) with our
    options translated (``asm``: ``overlap``, ``sub`` in {ilu0, lu},
    ``restricted``; ``bjacobi``: ``sub``; ``amg``: ``theta`` ->
    ``pc_gamg_threshold``, ``max_levels``, ``max_coarse`` ->
    ``pc_gamg_coarse_eq_limit``), while a built dmsolve preconditioner object
    runs inside KSP as a ``PC`` of type ``python`` (:class:`PythonPC`).

    The stopping test is ours, ``||r|| <= max(rtol*||b||, atol)``, with the
    side and norm our method of the same name uses (cg, pipecg:
    unpreconditioned by default, ``norm_type`` selectable; gmres: left and
    preconditioned, or ``side="right"`` and unpreconditioned; fgmres,
    bicgstab: right, unpreconditioned; minres: natural with a
    preconditioner). PETSc's default test with a zero initial guess is the
    same inequality (strict).

    Parameters
    ----------
    A : DistCSR or distributed operator
        A DistCSR is copied into an AIJ matrix (:func:`to_petsc`); any other
        operator with ``matvec`` becomes a PETSc ``python`` shell matrix
        (then ``pc`` must be ``"none"`` or a dmsolve object).
    b : DistVector
    method, pc
        As in :func:`dmsolve.solve`.
    x0, rtol, atol, maxiter, restart, side, orthog, norm_type, divtol, \
nullspace, callback, monitor, raise_on_failure
        As for our methods (defaults too: ``maxiter`` ``10*N``, ``restart``
        30, ``orthog`` ``"cgs"``, ``divtol`` 1e4). ``callback(xk)`` gets the
        iterate from ``KSPBuildSolution``; ``monitor(it, rnorm)`` (or
        ``True`` for a :class:`~dmsolve.KSPMonitor`) gets every norm.
    petsc_options : dict, optional
        Extra PETSc options database entries for this solve only, without
        the leading dash (``{"pc_gamg_agg_nsmooths": 1, "ksp_view": None}``);
        they are given a private prefix and removed afterwards.

    Returns
    -------
    x : DistVector
    info : SolveInfo
        ``reason`` mapped from ``KSPConvergedReason`` (:func:`convert_reason`;
        PETSc's exact name in ``info.extra["petsc_reason"]``),
        ``residual_norms`` PETSc's residual history, ``setup_seconds`` the
        conversion plus ``KSPSetUp`` (preconditioner set-up),
        ``solve_seconds`` ``KSPSolve``. ``reductions`` is not counted
        (0). ``info.extra`` also holds ``ksp_type``, ``pc_type``.

    Raises
    ------
    ValueError
        Unknown method or preconditioner name, bad tolerance or option value,
        or a layout mismatch: on every rank.
    TypeError
        An option that has no PETSc mapping for this method or preconditioner,
        or an argument of the wrong type: on every rank.
    ImportError
        petsc4py is not installed (``make petsc``).
    ConvergenceError
        With ``raise_on_failure=True``, if PETSc did not converge.

    Notes
    -----
    Collective on ``A.comm``.
    """
    PETSc = _petsc()
    t0 = time.perf_counter()
    comm = getattr(getattr(A, "row_layout", None), "comm", None)
    if comm is None:
        comm = getattr(getattr(b, "layout", None), "comm", None)
    if comm is None:
        raise TypeError("A must be a distributed operator and b a DistVector, got %s and %s"
                        % (type(A).__name__, type(b).__name__))
    exc, plan = None, None
    try:
        plan = _resolve(method, pc, A, x0, b, rtol, atol, divtol, maxiter, restart, side,
                        orthog, norm_type, shift, nullspace, callback, monitor, petsc_options)
        if not isinstance(A, DistCSR) and plan["pc_type"] not in ("none", "python"):
            raise TypeError("PETSc's %s needs the matrix entries: give A as a DistCSR, or "
                            "a dmsolve preconditioner object" % plan["pc_type"])
        if not np.all(np.isfinite(b.local)) or (x0 is not None
                                                and not np.all(np.isfinite(x0.local))):
            raise ValueError("b or x0 has NaN or infinite entries")
    except (TypeError, ValueError) as e:
        exc = e
    agree(comm, exc)

    layout = A.row_layout
    mat = _operator_to_petsc(A)
    bl = np.ascontiguousarray(b.local, dtype=PETSc.ScalarType)
    xl = np.zeros(layout.local_size, dtype=PETSc.ScalarType)
    if x0 is not None:
        np.copyto(xl, x0.local)
    size = (layout.local_size, layout.global_size)
    bv = PETSc.Vec().createWithArray(bl, size=size, comm=comm)
    xv = PETSc.Vec().createWithArray(xl, size=size, comm=comm)
    x = DistVector(layout, xl)

    prefix = "dmsolve%d_" % next(_PREFIX)
    db = PETSc.Options(prefix)
    ksp = PETSc.KSP().create(comm=comm)
    ns = None
    try:
        ksp.setOptionsPrefix(prefix)
        ksp.setOperators(mat)
        ksp.setType(plan["ksp_type"])
        ksp.setTolerances(rtol=plan["rtol"], atol=plan["atol"],
                          divtol=1e300 if plan["divtol"] is None else plan["divtol"],
                          max_it=plan["maxiter"])
        if "restart" in plan:
            ksp.setGMRESRestart(plan["restart"])
        kpc = ksp.getPC()
        ctx = None
        if plan["pc_type"] == "python":
            kpc.setType(PETSc.PC.Type.PYTHON)
            ctx = PythonPC(plan["pc_object"])
            kpc.setPythonContext(ctx)
        else:
            kpc.setType(plan["pc_type"])
        if plan["side"] is not None:
            ksp.setPCSide(PETSc.PC.Side.LEFT if plan["side"] == "left" else PETSc.PC.Side.RIGHT)
        if plan["pc_type"] != "none":
            # without a PC every norm is the unpreconditioned one: keep the method's default
            ksp.setNormType(getattr(PETSc.KSP.NormType, _NORM_NAMES[plan["norm"]]))
        if x0 is not None:
            ksp.setInitialGuessNonzero(True)
        if "nullspace" in plan:
            qs = _orthonormal(plan["nullspace"])
            ns = PETSc.NullSpace().create(vectors=[vec_to_petsc(q) for q in qs], comm=comm)
            mat.setNullSpace(ns)
        for k, v in plan["options"].items():
            db[k] = v
        ksp.setFromOptions()
        ksp.setConvergenceHistory(length=min(plan["maxiter"], 100_000) + 1)
        mon = monitor
        if mon is True:
            from .krylov._monitor import KSPMonitor
            mon = KSPMonitor()
        if mon is not None and hasattr(mon, "start"):
            mon.start(method, comm)
        if callback is not None or mon is not None:
            def _monitor(ksp_, it, rnorm):
                if mon is not None:
                    mon(it, rnorm)
                if callback is not None and it > 0:
                    sol = ksp_.buildSolution()
                    callback(DistVector(layout, sol.getArray(readonly=True)))
            ksp.setMonitor(_monitor)
        ksp.setUp()
        t1 = time.perf_counter()
        ksp.solve(bv, xv)
        t2 = time.perf_counter()
        code = ksp.getConvergedReason()
        reason, pname = convert_reason(code)
        hist = np.array(ksp.getConvergenceHistory(), dtype=float)
        its = int(ksp.getIterationNumber())
        bnorm = _reference_norm(ksp, bv, hist, plan["norm"], x0 is None, comm)
        info = SolveInfo(
            converged=reason.converged, reason=reason, iterations=its, residual_norms=hist,
            norm_type=plan["norm"], method=method.lower(), rtol=plan["rtol"],
            atol=plan["atol"], bnorm=bnorm, setup_seconds=t1 - t0, solve_seconds=t2 - t1,
            reductions=0,
            extra={"backend": "petsc", "petsc_reason": pname, "ksp_type": ksp.getType(),
                   "pc_type": kpc.getType(), "pc": plan["pc_name"]})
        if ctx is not None and hasattr(ctx.M, "describe"):
            info.extra["pc_describe"] = ctx.M.describe()
        if mon is not None and hasattr(mon, "finish"):
            mon.finish(info)
    finally:
        for k in plan["options"]:
            db.delValue(k)
        ksp.destroy()
        if ns is not None:
            ns.destroy()
        mat.destroy()
        bv.destroy()
        xv.destroy()
    if raise_on_failure:
        info.check()
    return x, info


def _reference_norm(ksp, bv, hist, norm, x0_zero, comm) -> float:
    """``||b||`` in the tested norm, as PETSc's KSPConvergedDefault measures it."""
    if x0_zero and hist.size:
        return float(hist[0])
    if norm == "unpreconditioned":
        return float(bv.norm())
    z = bv.duplicate()
    ksp.getPC().apply(bv, z)
    val = float(z.norm()) if norm == "preconditioned" else math.sqrt(abs(float(bv.dot(z))))
    z.destroy()
    return val
