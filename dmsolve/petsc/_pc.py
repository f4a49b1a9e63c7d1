"""Our preconditioners inside PETSc: a ``PC`` of type ``python`` whose context
(:class:`PythonPC`) applies a dmsolve preconditioner to PETSc's vectors."""

from __future__ import annotations

import time

from mpi4py import MPI

from .._errors import agree
from .._layout import Layout
from .._registry import PRECONDITIONERS, split_descriptor
from .._vector import DistVector
from ._convert import layout_from_ranges, mat_from_petsc, mpi_comm, petsc

__all__ = ["PythonPC", "as_petsc_pc", "petsc_pc"]

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
    Constructing it is not collective. ``setUp`` is collective on the PC's
    communicator; ``apply`` is collective exactly when the wrapped
    preconditioner's ``apply`` is. ``apply`` wraps
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
        """PETSc's ``PCSetUp``: build (by name) or check ``M`` for the PC's
        preconditioning matrix. Collective on the PC's communicator."""
        t0 = time.perf_counter()
        _, P = pc.getOperators()
        comm = mpi_comm(pc)
        layout = layout_from_ranges(P.getOwnershipRanges(), comm)
        if self._by_name:
            self.M = PRECONDITIONERS[self.name](mat_from_petsc(P, comm), **self.options)
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
        """PETSc's ``PCApply``: ``y = M x``. Collective exactly when ``M.apply`` is."""
        lay = self.layout
        self.M.apply(DistVector(lay, x.getArray(readonly=True)), DistVector(lay, y.getArray()))

    def view(self, pc, viewer):
        """PETSc's ``PCView``: the name, options and ``M.describe()``. Not collective."""
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
    PETSc = petsc()
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
    PETSc's CG preconditioned by dmsolve's AMG:

    >>> from mpi4py import MPI
    >>> from petsc4py import PETSc
    >>> import dmsolve
    >>> from dmsolve.petsc import petsc_pc, to_petsc
    >>> A = dmsolve.gallery.poisson2d(20, MPI.COMM_WORLD)
    >>> ksp = PETSc.KSP().create(MPI.COMM_WORLD)
    >>> ksp.setOperators(to_petsc(A))
    >>> ksp.setType("cg")
    >>> ksp.setTolerances(rtol=1e-8)
    >>> ctx = petsc_pc(ksp, "amg")
    >>> b = to_petsc(dmsolve.DistVector.full(A.row_layout, 1.0))
    >>> x = b.duplicate()
    >>> ksp.solve(b, x)
    >>> ksp.getConvergedReason() > 0, ksp.getIterationNumber() < 20
    (True, True)
    """
    PETSc = petsc()
    ctx = PythonPC(M, **options)
    pc = ksp.getPC()
    pc.setType(PETSc.PC.Type.PYTHON)
    pc.setPythonContext(ctx)
    return ctx
