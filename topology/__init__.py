"""Distributed topology for dmsolve: grids and simplicial complexes with ghost
layers, global vertex order, critical points, components, persistence
diagrams and merge trees, Hodge theory, and signal processing of edge flows
(filters, denoising, interpolation, spectra).

Every kind of domain (:class:`Grid`, which builds a Freudenthal, cubical or
out-of-core grid, and :class:`SimplicialComplex`) satisfies the
:class:`Domain` protocol, through which every analysis asks it questions.
The stages live in folders that import one way (docs/architecture.md):
``kernels`` and ``core`` below ``morse``, below ``persistence``, below
``outofcore``, below ``domains``, below ``signals`` and ``io``.
"""

from .core import (Domain, RawField, component_table, cubical_structure, freudenthal_cells,
                   link_structure)
from .domains import (COMPLEXES, PARTITIONS, CubicalGrid, FreudenthalGrid, Grid, OutOfCoreGrid,
                      SimplicialComplex)
from .morse import (TYPE_NAMES, CriticalPoints, CubicalGradient, DiscreteGradient, Gradient,
                    classify, critical_points, discrete_gradient, global_order)
from .persistence import (MergeTree, PersistenceDiagram, connected_components,
                          image_persistence, merge_tree, persistence_diagram)
from .signals import (Eigenpairs, HodgeDecomposition, SimplicialFilter, TrendFilterInfo,
                      betti_numbers, boundary_matrix, chebyshev_filter, component_filter,
                      denoise_flow, design_filter, fill_triangles, hodge_decomposition,
                      hodge_eigenpairs, hodge_laplacian, infer_triangles, interpolate_flow,
                      laplacian_parts, spectral_bounds, trend_filter_flow)

__all__ = [
    "Domain", "Grid", "FreudenthalGrid", "CubicalGrid", "OutOfCoreGrid", "RawField",
    "SimplicialComplex", "PARTITIONS",
    "connected_components", "freudenthal_cells", "link_structure", "component_table",
    "cubical_structure", "COMPLEXES",
    "boundary_matrix", "hodge_laplacian", "hodge_decomposition", "HodgeDecomposition",
    "betti_numbers", "global_order", "critical_points", "CriticalPoints", "classify", "TYPE_NAMES",
    "discrete_gradient", "Gradient", "DiscreteGradient", "CubicalGradient",
    "persistence_diagram", "image_persistence", "PersistenceDiagram", "merge_tree", "MergeTree",
    "SimplicialFilter", "design_filter", "chebyshev_filter", "component_filter",
    "spectral_bounds", "laplacian_parts", "denoise_flow", "interpolate_flow",
    "trend_filter_flow", "TrendFilterInfo", "infer_triangles", "fill_triangles",
    "hodge_eigenpairs", "Eigenpairs",
]
