"""Conversion between dmsolve and PETSc objects on the same communicator and ownership
ranges (exactly preallocated AIJ, vectors, shells); petsc4py is imported on first use."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from .._errors import agree
from .._layout import Layout
from .._matrix import DistCSR
from .._vector import DistVector

__all__ = ["petsc", "petsc4py_available", "mpi_comm", "layout_from_ranges",
           "to_petsc", "from_petsc", "vec_to_petsc", "vec_from_petsc", "mat_to_petsc",
           "mat_from_petsc", "operator_to_petsc"]

_INSTALL_HINT = ("dmsolve.petsc needs petsc4py, which is not installed in this environment: "
                 "run `make petsc` (tools/install-petsc.sh builds PETSc and petsc4py from "
                 "PyPI against the mpich wheel's MPI), or install the extra "
                 "`pip install --no-build-isolation petsc petsc4py`.")


def petsc():
    """The ``petsc4py.PETSc`` module, imported (and PETSc initialised) on first use.

    Not collective (PETSc's initialisation uses ``MPI.COMM_WORLD`` but does
    not communicate).

    Raises
    ------
    ImportError
        petsc4py is not installed; the message says ``make petsc``.
    """
    try:
        # imported here, not at the top: petsc4py is the optional [petsc] extra,
        # and importing it initialises PETSc, which `import dmsolve` must not do
        from petsc4py import PETSc
    except ImportError as e:
        raise ImportError(_INSTALL_HINT) from e
    return PETSc


def petsc4py_available() -> bool:
    """Whether petsc4py can be imported. Not collective (but the answer is the
    same on every rank of one installation); imports (and initialises) PETSc."""
    try:
        petsc()
    except ImportError:
        return False
    return True


# -- layouts and communicators ------------------------------------------------------------

def mpi_comm(obj) -> MPI.Comm:
    """The mpi4py communicator of a PETSc object (the same MPI handle, through
    petsc4py's public ``Comm.tompi4py``). Not collective."""
    return obj.getComm().tompi4py()


def layout_from_ranges(ranges, comm: MPI.Comm) -> Layout:
    """The :class:`~dmsolve.Layout` of PETSc ownership ranges. Not collective."""
    return Layout(np.asarray(ranges, dtype=np.int64), comm)


def _check_index_range(comm: MPI.Comm, *sizes: int) -> None:
    PETSc = petsc()
    limit = np.iinfo(PETSc.IntType).max
    big = max(sizes) if sizes else 0
    agree(comm, ValueError("global size %d exceeds this PETSc build's %d-bit indices "
                           "(configure PETSc --with-64-bit-indices)"
                           % (big, 8 * np.dtype(PETSc.IntType).itemsize))
          if big > limit else None)


# -- matrices -----------------------------------------------------------------------------

def mat_to_petsc(A: DistCSR):
    """A DistCSR as an exactly preallocated AIJ matrix (see :func:`to_petsc`).

    Collective on ``A.comm``.
    """
    PETSc = petsc()
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


def mat_from_petsc(mat, comm: MPI.Comm | None = None) -> DistCSR:
    """A PETSc matrix as a DistCSR (see :func:`from_petsc`).

    Collective on the matrix's communicator.
    """
    PETSc = petsc()
    if comm is None:
        comm = mpi_comm(mat)
    if not mat.isAssembled():
        agree(comm, ValueError("the PETSc matrix is not assembled (call mat.assemble())"))
    converted = None
    if mat.getType() not in (PETSc.Mat.Type.SEQAIJ, PETSc.Mat.Type.MPIAIJ):
        # dense, BAIJ, SBAIJ, ...: through PETSc's own conversion (collective)
        mat = converted = mat.convert(PETSc.Mat.Type.AIJ)
    row_layout = layout_from_ranges(mat.getOwnershipRanges(), comm)
    col_layout = layout_from_ranges(mat.getOwnershipRangesColumn(), comm)
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
    PETSc = petsc()
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
        comm = mpi_comm(v)
    layout = layout_from_ranges(v.getOwnershipRanges(), comm)
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
    A matrix to PETSc and back:

    >>> from mpi4py import MPI
    >>> import dmsolve
    >>> from dmsolve.petsc import from_petsc, to_petsc
    >>> A = dmsolve.gallery.poisson3d(6, MPI.COMM_WORLD)
    >>> M = to_petsc(A)
    >>> M.getSize()
    (216, 216)
    >>> B = from_petsc(M)
    >>> B.global_nnz() == A.global_nnz()
    True
    """
    if isinstance(obj, DistCSR):
        return mat_to_petsc(obj)
    if isinstance(obj, DistVector):
        return vec_to_petsc(obj, copy=copy)
    petsc()
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
    PETSc = petsc()
    if isinstance(obj, PETSc.Mat):
        return mat_from_petsc(obj, comm)
    if isinstance(obj, PETSc.Vec):
        return vec_from_petsc(obj, comm=comm)
    raise TypeError("from_petsc takes a PETSc Mat or Vec, got %s" % type(obj).__name__)


class _ShellMat:
    """Context of a PETSc ``python`` matrix applying a dmsolve operator's matvec."""

    def __init__(self, A):
        self.A = A

    def mult(self, mat, x, y):
        """``y = A x`` on PETSc's arrays, without copying. Collective if ``A.matvec`` is."""
        A = self.A
        xv = DistVector(A.col_layout, x.getArray(readonly=True))
        yv = DistVector(A.row_layout, y.getArray())
        A.matvec(xv, yv)


def operator_to_petsc(A):
    """A DistCSR as AIJ, any other operator as a ``python`` shell matrix.

    Collective on ``A.comm``; the shell's ``mult`` is collective exactly
    when ``A.matvec`` is.
    """
    if isinstance(A, DistCSR):
        return mat_to_petsc(A)
    PETSc = petsc()
    M = PETSc.Mat().createPython(
        ((A.row_layout.local_size, A.row_layout.global_size),
         (A.col_layout.local_size, A.col_layout.global_size)),
        context=_ShellMat(A), comm=A.row_layout.comm)
    M.setUp()
    return M
