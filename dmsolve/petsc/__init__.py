"""Interoperability with PETSc through petsc4py (the optional ``[petsc]`` extra).

One module per stage:

- ``_convert``: matrices and vectors cross over on the same communicator and
  ownership ranges (:func:`to_petsc`, :func:`from_petsc`, exact AIJ
  preallocation);
- ``_pc``: our preconditioners run inside a PETSc ``KSP`` as a ``PC`` of type
  ``python`` (:class:`PythonPC`, :func:`as_petsc_pc`, :func:`petsc_pc`);
- ``_ksp``: :func:`ksp_solve` (``dmsolve.solve(..., backend="petsc")``, which
  this package registers in :data:`dmsolve.krylov.BACKENDS`) solves with
  PETSc's Krylov methods and preconditioners under our option names.

petsc4py is imported on first use, never when dmsolve is imported. Importing
it initialises PETSc on ``MPI.COMM_WORLD`` (MPI itself is already initialised
by mpi4py; PETSc uses the same MPI library, the ``mpich`` wheel's).
"""

from ..krylov import BACKENDS
from ._convert import from_petsc, petsc4py_available, to_petsc, vec_from_petsc, vec_to_petsc
from ._ksp import KSP_TYPES, PC_TYPES, convert_reason, ksp_solve
from ._pc import PythonPC, as_petsc_pc, petsc_pc

__all__ = [
    "petsc4py_available", "to_petsc", "from_petsc", "vec_to_petsc", "vec_from_petsc",
    "PythonPC", "as_petsc_pc", "petsc_pc", "ksp_solve",
    "KSP_TYPES", "PC_TYPES", "convert_reason",
]

BACKENDS.register("petsc", ksp_solve)
