"""Distributed topology for dmsolve: grids and simplicial complexes with ghost
layers, global vertex order, critical points, components, Hodge theory.

Both domains, :class:`Grid` and :class:`SimplicialComplex`, satisfy the
:class:`Domain` protocol, through which every analysis asks them questions.
"""

from ._complex import PARTITIONS, SimplicialComplex
from ._components import connected_components
from ._critical import TYPE_NAMES, CriticalPoints, classify, critical_points
from ._domain import Domain
from ._hodge import (HodgeDecomposition, betti_numbers, boundary_matrix, hodge_decomposition,
                     hodge_laplacian)
from ._gradient import DiscreteGradient, discrete_gradient
from ._grid import Grid, component_table, freudenthal_cells, link_structure
from ._order import global_order
from ._mergetree import MergeTree, merge_tree
from ._persistence import PersistenceDiagram, persistence_diagram

__all__ = [
    "Domain", "Grid", "SimplicialComplex", "PARTITIONS",
    "connected_components", "freudenthal_cells", "link_structure", "component_table",
    "boundary_matrix", "hodge_laplacian", "hodge_decomposition", "HodgeDecomposition",
    "betti_numbers", "global_order", "critical_points", "CriticalPoints", "classify", "TYPE_NAMES",
    "discrete_gradient", "DiscreteGradient",
    "persistence_diagram", "PersistenceDiagram", "merge_tree", "MergeTree",
]
