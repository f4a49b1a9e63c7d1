"""dmsolve: distributed-memory sparse linear algebra, solvers and topology on MPI.

Importing dmsolve initialises MPI (through mpi4py), but performs no
communication and creates no MPI objects. It loads no numba: the kernels are
made on their first call (:mod:`dmsolve.jit`) and cached on disk.
"""

from ._errors import CollectiveError, agree, raise_collective, raise_from_root
from ._layout import Layout, block_range, block_ranges
from ._registry import PRECONDITIONERS, Registry, split_descriptor
from ._vector import DistVector
from ._version import __version__
from . import threads
from .threads import get_num_threads, set_num_threads

__all__ = [
    "CollectiveError", "agree", "raise_collective", "raise_from_root",
    "Registry", "split_descriptor", "PRECONDITIONERS",
    "Layout", "block_range", "block_ranges",
    "DistVector", "threads", "get_num_threads", "set_num_threads",
]

from . import bsp
from ._matrix import CompressedRows, DistCSR

__all__ += ["bsp", "DistCSR", "CompressedRows"]

from .krylov import (cg, pipecg, gmres, fgmres, bicgstab, minres, solve, SolveInfo,
                     ConvergedReason, ConvergenceError, KSPMonitor)
from ._operator import DistLinearOperator, aslinearoperator
from ._preconditioner import Preconditioner
from ._progress import Progress, ProgressPrinter

__all__ += [
    "cg", "pipecg", "gmres", "fgmres", "bicgstab", "minres", "solve", "SolveInfo",
    "ConvergedReason", "ConvergenceError", "KSPMonitor",
    "DistLinearOperator", "aslinearoperator", "Preconditioner",
    "Progress", "ProgressPrinter",
]

from . import gallery, io, partition, reproducible, validate

__all__ += ["gallery", "io", "partition", "reproducible", "validate"]

from . import checkpoint

__all__ += ["checkpoint"]

# after krylov: it registers the "petsc" backend of solve(); petsc4py itself
# stays unimported until first use
from . import petsc

__all__ += ["petsc"]
