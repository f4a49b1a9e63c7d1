"""Discrete Morse theory of vertex fields: the global vertex order, critical
points from link components, the lower-star discrete gradient (on
simplicial stars and on the cubical complex of a grid), and V-paths followed
across ranks.

Imports :mod:`topology.core` and :mod:`topology.kernels` only; the kinds of
domain (:mod:`topology.domains`) choose which of these steps they run."""

from ._critical import (DEGENERATE, MAXIMUM, MINIMUM, REGULAR, SADDLE1, SADDLE2, TYPE_NAMES,
                        CriticalPoints, classify, classify_vertices, critical_points)
from ._cubical import CubicalGradient, cubical_gradient
from ._cubical_cells import SLOTS, CubeGeometry, code_vertex, cube_geometry, cubical_from_global
from ._cubical_paths import (cubical_ascend_cubes, cubical_descend_edges,
                             cubical_descend_vertices, cubical_edge_ends, cubical_square_sides)
from ._gradient import (DiscreteGradient, discrete_gradient, gradient_from_order,
                        simplicial_gradient)
from ._gradient_base import Gradient
from ._links import (cubical_link_components, cubical_link_counts, cubical_link_graph,
                     slab_link_components)
from ._lower_star import lower_star_gradient
from ._order import global_order
from ._star_tables import StarTable, locate_edges, locate_tets
from ._stars import ComplexStars, GridStars, Stars, stencil
from ._vpaths import ascend_tets, descend_edges, descend_vertices, follow_paths, triangle_cofacets

__all__ = ["global_order", "critical_points", "classify_vertices", "CriticalPoints", "classify",
           "TYPE_NAMES", "MINIMUM", "SADDLE1", "SADDLE2", "MAXIMUM", "DEGENERATE", "REGULAR",
           "Gradient", "DiscreteGradient", "CubicalGradient", "discrete_gradient",
           "gradient_from_order", "simplicial_gradient", "cubical_gradient", "Stars",
           "GridStars", "ComplexStars", "stencil", "StarTable", "locate_edges", "locate_tets",
           "lower_star_gradient", "follow_paths", "ascend_tets", "descend_edges",
           "descend_vertices", "triangle_cofacets", "SLOTS", "CubeGeometry", "cube_geometry",
           "code_vertex", "cubical_from_global", "cubical_ascend_cubes", "cubical_descend_edges",
           "cubical_descend_vertices", "cubical_edge_ends", "cubical_square_sides",
           "slab_link_components", "cubical_link_components", "cubical_link_graph",
           "cubical_link_counts"]
