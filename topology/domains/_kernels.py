"""The kernels each kind of domain carries: the steps of the analyses that
differ between kinds, chosen once, when the domain is made.

An analysis asks its domain's kernels for these steps and never asks which
kind it holds. The in-memory kinds share the whole analyses of
:class:`Kernels` and differ in the steps below them (the lower-star
gradient, the graph the sweeps follow, the pairs of the Morse complex);
:class:`OutOfCoreKernels` wraps the Freudenthal grid's kernels and runs four
analyses slab by slab instead.

A new kind of domain answers the :class:`topology.Domain` protocol and
brings a subclass of :class:`Kernels` with these steps.
"""

from __future__ import annotations

import weakref

import numpy as np

from ..core import component_table, cubical_structure, link_structure
from ..morse import (ComplexStars, GridStars, classify_vertices, cubical_gradient,
                     cubical_link_counts, cubical_link_graph, simplicial_gradient)
from ..outofcore import ooc_components, ooc_critical_points, ooc_diagram, ooc_merge_tree
from ..persistence import (ComplexSweepGraph, GridSweepGraph, check_manifold, cubical_morse_pairs,
                           euler_essential, image_block, in_memory_parts, label_components,
                           persistence_pairs_all, sorted_block, sweep_merge_tree)

__all__ = ["Kernels", "FreudenthalKernels", "CubicalKernels", "ComplexKernels",
           "OutOfCoreKernels"]


class Kernels:
    """The steps of the analyses for a domain held in memory (the base of the
    in-memory kinds' kernels). Each method is collective on
    ``domain.comm`` as the analysis that calls it."""

    def __init__(self, domain):
        # a weak reference: the domain owns its kernels, and a cycle would
        # keep a deleted domain's arrays alive until the garbage collector ran
        self._domain = weakref.ref(domain)

    @property
    def domain(self):
        """The domain these kernels belong to."""
        return self._domain()

    # -- whole analyses ----------------------------------------------------------------
    def critical_points(self, values, axes):
        """:func:`topology.critical_points`: link components of the ordered vertices."""
        return classify_vertices(self.domain, values, axes)

    def components(self, values, threshold, *, sublevel, axes, out, max_steps):
        """:func:`topology.connected_components`: union-find and linked pieces."""
        return label_components(self.domain, values, threshold, sublevel=sublevel, axes=axes,
                                out=out, max_steps=max_steps)

    def merge_tree(self, values, kind, axes, report):
        """:func:`topology.merge_tree`: one sweep with the tree's arcs."""
        return sweep_merge_tree(self.domain, values, kind, axes, report)

    def diagram_parts(self, values, axes, report) -> tuple[list, list]:
        """The parts of :func:`topology.persistence_diagram` and what is
        missing from it (nothing, in memory)."""
        return in_memory_parts(self.domain, values, axes, report), []

    def diagram_block(self, values, axes, report) -> tuple[dict, list]:
        """This rank's block of the sorted pairs of
        :func:`topology.persistence_diagram` (the parts, sorted over the
        ranks) and what is missing from the diagram."""
        parts, missing = self.diagram_parts(values, axes, report)
        return sorted_block(self.domain.comm, parts), missing

    # -- steps -------------------------------------------------------------------------
    def gradient(self, order):
        """The lower-star discrete gradient from the global vertex order."""
        raise NotImplementedError

    def sweep_graph(self, key_owned: np.ndarray, apex: bool):
        """The vertex graph a sweep follows (``apex``: the reversed sweep of
        D(d-1), over the graph coned over the boundary)."""
        raise NotImplementedError

    def morse_pairs(self, order, report):
        """``(pairs, minima)`` of every dimension from the Morse complex (3D
        grids): ``pairs[d]`` as (birth, death) vertex layout indices, left
        where the reduction found them."""
        raise NotImplementedError


class FreudenthalKernels(Kernels):
    """The kernels of a grid's Freudenthal triangulation: the stencil's star
    tables, the grid's vertex graph, and in 3D the whole diagram from the
    Morse complex (Discrete Morse Sandwich)."""

    def gradient(self, order):
        grid = self.domain
        ghosted = grid.ghosted(np.ascontiguousarray(order.local, dtype=np.int64))
        return simplicial_gradient(grid, order, GridStars(grid, ghosted))

    def sweep_graph(self, key_owned, apex):
        grid = self.domain
        table = component_table(grid.dimension)
        offsets, _ = link_structure(grid.dimension)
        return GridSweepGraph(grid, key_owned, apex, offsets, lambda g: table[g.lower])

    def morse_pairs(self, order, report):
        res = persistence_pairs_all(self.domain, order, progress=report, gather=False)
        return res.pairs, res.essential[0]

    def diagram_parts(self, values, axes, report):
        grid = self.domain
        return in_memory_parts(grid, values, axes, report, whole_morse=grid.dimension == 3), []


class CubicalKernels(Kernels):
    """The kernels of a grid's cubical complex: the cubical lower stars, the
    grid's edges for sublevel sets and the dual graph for superlevel sets
    (Alexander duality), in 2D the diagram of the image's row slabs
    (:func:`topology.image_persistence`'s) and in 3D the whole diagram from
    the cubical Morse complex."""

    def gradient(self, order):
        return cubical_gradient(self.domain, order)

    def sweep_graph(self, key_owned, apex):
        grid = self.domain
        # the reversed sweep (with the apex) is D(d-1)'s: it follows the dual graph
        offsets, _ = cubical_structure(grid.dimension, apex)
        full, nodes, edges = cubical_link_graph(grid.dimension, apex)

        def lower_links(g):
            return cubical_link_counts(g.PK, g.opos, full @ g.strides, nodes, edges)
        return GridSweepGraph(grid, key_owned, apex, offsets, lower_links)

    def morse_pairs(self, order, report):
        pairs, minima, _ = cubical_morse_pairs(self.domain, order, progress=report)
        return pairs, minima

    def diagram_parts(self, values, axes, report):
        grid = self.domain
        return in_memory_parts(grid, values, axes, report, whole_morse=grid.dimension == 3), []

    def diagram_block(self, values, axes, report):
        grid = self.domain
        if grid.dimension == 3:
            return super().diagram_block(values, axes, report)
        # an image: each rank sweeps its rows (topology.image_persistence's path)
        vec = grid.vertex_values(values, axes=axes)
        g0, g1 = grid.ghosted_planes
        p0, p1 = grid.owned_planes
        rows = grid.ghosted(vec.local)
        return image_block(grid.comm, rows, grid.shape[0], grid.shape[1], (g0, p0, p1, g1),
                           report), []


class ComplexKernels(Kernels):
    """The kernels of a simplicial complex: CSR star tables, the edges of the
    complex, and a diagram that checks the complex is a manifold and finds
    its essential (d-1)-classes from the Euler characteristic."""

    def gradient(self, order):
        cx = self.domain
        ghosted = cx.ghosted(np.ascontiguousarray(order.local, dtype=np.int64))
        return simplicial_gradient(cx, order, ComplexStars(cx, ghosted))

    def sweep_graph(self, key_owned, apex):
        return ComplexSweepGraph(self.domain, key_owned, apex)

    def diagram_parts(self, values, axes, report):
        cx = self.domain
        if cx.is_ball:
            return in_memory_parts(cx, values, axes, report), []
        return in_memory_parts(cx, values, axes, report, check=check_manifold,
                               essential=euler_essential), []


class OutOfCoreKernels:
    """The kernels of an out-of-core grid: critical points, connected
    components, merge trees and the D0 / D(d-1) parts of persistence
    diagrams slab by slab (:mod:`topology.outofcore`); every other step is
    the wrapped in-memory kernels' (``inner``)."""

    def __init__(self, inner: Kernels):
        self.inner = inner

    @property
    def domain(self):
        """The grid these kernels belong to."""
        return self.inner.domain

    def critical_points(self, values, axes):
        return ooc_critical_points(self.domain, values, axes)

    def components(self, values, threshold, *, sublevel, axes, out, max_steps):
        return ooc_components(self.domain, values, threshold, sublevel, axes, out)

    def merge_tree(self, values, kind, axes, report):
        return ooc_merge_tree(self.domain, values, kind, axes, report)

    def diagram_parts(self, values, axes, report):
        return ooc_diagram(self.domain, values, axes, report)

    def diagram_block(self, values, axes, report):
        parts, missing = self.diagram_parts(values, axes, report)
        return sorted_block(self.domain.comm, parts), missing

    def gradient(self, order):
        return self.inner.gradient(order)

    def sweep_graph(self, key_owned, apex):
        return self.inner.sweep_graph(key_owned, apex)

    def morse_pairs(self, order, report):
        return self.inner.morse_pairs(order, report)
