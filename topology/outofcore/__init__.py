"""The analyses of a grid larger than its ranks' memory, slab by slab on the
virtual processors of :class:`dmsolve.bsp.VirtualBSP`: critical points, the
D0 and D(d-1) sweeps glued up a tree of slabs, D1 from the Morse complex
built slab by slab, merge trees and connected components. The out-of-core grid kind (:mod:`topology.domains`) runs them;
what it does not run here runs in memory.

Imports :mod:`topology.persistence`, :mod:`topology.morse`,
:mod:`topology.core` and :mod:`topology.kernels`."""

from ._components import ooc_components
from ._diagram import ooc_diagram
from ._mergetree import ooc_merge_tree
from ._saddle_pairs import ooc_saddle_parts
from ._slabs import PlaneSource, ooc_critical_points, ooc_diagram_parts, ooc_pairs

__all__ = ["ooc_critical_points", "ooc_pairs", "ooc_diagram_parts", "ooc_diagram",
           "ooc_saddle_parts", "ooc_components", "ooc_merge_tree", "PlaneSource"]
