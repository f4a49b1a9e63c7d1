"""The kinds of domain: grids (the Freudenthal triangulation, the cubical
complex, and the out-of-core grid that wraps the Freudenthal kernels) and
simplicial complexes. Each answers the :class:`topology.Domain` protocol and
carries the kernels of its kind (``_kernels``), chosen once, when it is made.

Imports every stage below it (:mod:`topology.outofcore`,
:mod:`topology.persistence`, :mod:`topology.morse`, :mod:`topology.core`);
only :mod:`topology.signals` and :mod:`topology.io` import it."""

from ._checks import check_complex
from ._complex import SimplicialComplex
from ._complex_input import PARTITIONS
from ._grid import (COMPLEXES, OUT_OF_CORE_BYTES_PER_VERTEX, CubicalGrid, FreudenthalGrid, Grid,
                    OutOfCoreGrid)
from ._kernels import ComplexKernels, CubicalKernels, FreudenthalKernels, Kernels, OutOfCoreKernels

__all__ = ["Grid", "FreudenthalGrid", "CubicalGrid", "OutOfCoreGrid", "SimplicialComplex",
           "COMPLEXES", "PARTITIONS", "OUT_OF_CORE_BYTES_PER_VERTEX", "check_complex", "Kernels",
           "FreudenthalKernels", "CubicalKernels", "ComplexKernels", "OutOfCoreKernels"]
