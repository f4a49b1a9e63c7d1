"""Signal processing on simplicial complexes: boundary operators, Hodge
Laplacians and the Hodge decomposition of flows, polynomial filters,
denoising, interpolation and trend filtering of edge flows, and spectra,
solved with dmsolve's Krylov methods and preconditioners.

Imports :mod:`topology.domains`, :mod:`topology.persistence` and
:mod:`topology.core`."""

from ._filters import (SimplicialFilter, chebyshev_filter, component_filter, design_filter,
                       laplacian_parts, spectral_bounds)
from ._flows import (TrendFilterInfo, denoise_flow, fill_triangles, infer_triangles,
                     interpolate_flow, trend_filter_flow)
from ._hodge import (HodgeDecomposition, betti_numbers, boundary_matrix,
                     coherent_orientation_signs, hodge_decomposition, hodge_laplacian)
from ._spectrum import Eigenpairs, hodge_eigenpairs

__all__ = ["boundary_matrix", "hodge_laplacian", "hodge_decomposition", "HodgeDecomposition",
           "betti_numbers", "coherent_orientation_signs", "SimplicialFilter", "design_filter",
           "chebyshev_filter", "component_filter", "spectral_bounds", "laplacian_parts",
           "denoise_flow", "interpolate_flow", "trend_filter_flow", "TrendFilterInfo",
           "infer_triangles", "fill_triangles", "hodge_eigenpairs", "Eigenpairs"]
