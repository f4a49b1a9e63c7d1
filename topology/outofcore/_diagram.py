"""The persistence diagram of an out-of-core grid: D0 and D(d-1) by the slab
sweeps, D1 of 3D data from the Morse complex built slab by slab."""

from __future__ import annotations

from ..persistence import total
from ._saddle_pairs import ooc_saddle_parts
from ._slabs import ooc_diagram_parts

__all__ = ["ooc_diagram"]


def ooc_diagram(grid, values, axes, report):
    """The parts of :func:`topology.persistence_diagram` on a grid in
    out-of-core mode, and what is missing (nothing): D0 and D(d-1) by the
    slab sweeps, D1 of 3D data by :func:`ooc_saddle_parts`. Collective on
    ``grid.comm``."""
    comm, d = grid.comm, grid.dimension
    parts, source = ooc_diagram_parts(grid, values, axes, report)
    report("D0 and D%d: %d pairs", d - 1, total(comm, sum(p[1].size for p in parts)))
    if d == 3:
        parts.extend(ooc_saddle_parts(grid, source, report))
    return parts, []
