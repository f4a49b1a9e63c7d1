"""Persistence of lower-star filtrations and the trees of their level sets:
the elder rule and the sweeps of the vertex graph, the Z/2 reduction of a
distributed boundary matrix, the pairs of the Morse complex (simplicial and
cubical), persistence diagrams, merge trees and connected components.

Imports :mod:`topology.morse`, :mod:`topology.core` and
:mod:`topology.kernels`; the kinds of domain (:mod:`topology.domains`) choose
which of these steps they run."""

from ._components import connected_components, label_components
from ._cubical_pairs import cubical_morse_pairs
from ._diagram import PersistenceDiagram, gatherv, persistence_diagram
from ._elder import APEX, Sweep, distributed_elder, elder
from ._image import image_block, image_persistence, row_ranges
from ._manifold import check_manifold, euler_essential
from ._mergetree import LEAF, ROOT, SADDLE, MergeTree, merge_tree, sweep_merge_tree
from ._parts import (essential_part, in_memory_parts, morse_parts, saddle_parts, sorted_block,
                     sweep_parts, total)
from ._reduction import Reduction, gf2_rank, reduce_z2
from ._saddles import (MorsePersistence, morse_persistence, pairs_from_paths,
                       persistence_pairs_all, saddle_saddle_pairs)
from ._sweep import ComplexSweepGraph, GridSweepGraph, sweep

__all__ = ["connected_components", "label_components", "cubical_morse_pairs",
           "PersistenceDiagram", "persistence_diagram", "gatherv", "APEX", "Sweep",
           "distributed_elder", "elder", "check_manifold", "euler_essential", "MergeTree",
           "merge_tree", "sweep_merge_tree", "LEAF", "SADDLE", "ROOT", "in_memory_parts",
           "sweep_parts", "saddle_parts", "morse_parts", "sorted_block", "essential_part",
           "total", "Reduction", "reduce_z2", "gf2_rank", "MorsePersistence",
           "morse_persistence", "pairs_from_paths", "persistence_pairs_all",
           "saddle_saddle_pairs", "sweep",
           "GridSweepGraph", "ComplexSweepGraph", "image_persistence", "image_block",
           "row_ranges"]
