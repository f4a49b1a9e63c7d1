"""Distributed topology for dmsolve: grids and simplicial complexes with ghost
layers, global vertex order, critical points, components, Hodge theory, and
signal processing of edge flows (filters, denoising, interpolation, spectra).

Both domains, :class:`Grid` and :class:`SimplicialComplex`, satisfy the
:class:`Domain` protocol, through which every analysis asks them questions.
"""

from .domains._complex import PARTITIONS, SimplicialComplex
from .persistence._components import connected_components
from .morse._critical import TYPE_NAMES, CriticalPoints, classify, critical_points
from .core._protocol import Domain
from .signals._hodge import (HodgeDecomposition, betti_numbers, boundary_matrix,
                             hodge_decomposition, hodge_laplacian)
from .signals._filters import (SimplicialFilter, chebyshev_filter, component_filter, design_filter,
                               laplacian_parts, spectral_bounds)
from .signals._flows import (TrendFilterInfo, denoise_flow, fill_triangles, infer_triangles,
                             interpolate_flow, trend_filter_flow)
from .morse._gradient import DiscreteGradient, discrete_gradient
from .signals._spectrum import Eigenpairs, hodge_eigenpairs
from .domains._grid import (COMPLEXES, Grid, component_table, cubical_structure, freudenthal_cells,
                            link_structure)
from .morse._order import global_order
from .persistence._mergetree import MergeTree, merge_tree
from .persistence._diagram import PersistenceDiagram, persistence_diagram
from .core._rawfield import RawField

__all__ = [
    "Domain", "Grid", "RawField", "SimplicialComplex", "PARTITIONS",
    "connected_components", "freudenthal_cells", "link_structure", "component_table",
    "cubical_structure", "COMPLEXES",
    "boundary_matrix", "hodge_laplacian", "hodge_decomposition", "HodgeDecomposition",
    "betti_numbers", "global_order", "critical_points", "CriticalPoints", "classify", "TYPE_NAMES",
    "discrete_gradient", "DiscreteGradient",
    "persistence_diagram", "PersistenceDiagram", "merge_tree", "MergeTree",
    "SimplicialFilter", "design_filter", "chebyshev_filter", "component_filter",
    "spectral_bounds", "laplacian_parts", "denoise_flow", "interpolate_flow",
    "trend_filter_flow", "TrendFilterInfo", "infer_triangles", "fill_triangles",
    "hodge_eigenpairs", "Eigenpairs",
]
