"""The questions every topology domain answers. Each kind of domain (the
Freudenthal grid, the cubical grid, the out-of-core grid, the simplicial
complex) satisfies :class:`Domain`, and the analyses ask them only through
it, never by testing which kind they hold: what differs between kinds is
in the domain's :attr:`Domain.kernels`."""

from __future__ import annotations

import os
from typing import Protocol, runtime_checkable

import numpy as np
from mpi4py import MPI

from dmsolve import DistVector, Layout
from dmsolve.bsp import NeighborExchange

__all__ = ["Domain", "check_domain", "check_fits", "owned_global_ids", "ghosted_global_ids"]


@runtime_checkable
class Domain(Protocol):
    """A distributed triangulated domain with a vertex field on it.

    Vertices are owned by ranks in contiguous blocks of *layout indices*
    (:attr:`vertex_layout`); every rank also holds one layer of ghost
    vertices, so the closed star of each owned vertex is complete locally.
    *Global vertex ids* are rank-independent; they equal the layout indices
    unless :attr:`renumbered` (a complex partitioned by METIS or RCB).

    Attributes
    ----------
    comm : MPI.Comm
    dimension : int
        The largest simplex dimension (2 or 3 for a grid).
    vertex_layout : dmsolve.Layout
        Vertex fields are DistVectors on it.

    Notes
    -----
    Properties never communicate. Each method's docstring in :class:`Grid`
    and :class:`SimplicialComplex` says whether it is collective; the
    protocol's own summary lines say the same. A new kind of domain answers
    these questions and brings its :attr:`kernels`; no analysis changes.
    """

    comm: MPI.Comm
    dimension: int
    vertex_layout: Layout

    # -- properties (never communicate) --------------------------------------------
    @property
    def global_num_vertices(self) -> int:
        """Number of vertices over all ranks."""

    @property
    def local_num_vertices(self) -> int:
        """Number of vertices this rank owns."""

    @property
    def renumbered(self) -> bool:
        """Whether global vertex ids differ from the vertex layout indices."""

    @property
    def halo(self) -> NeighborExchange:
        """The ghost-vertex exchange plan: its send side says which owned
        vertices each neighbouring rank ghosts (positions in the owned block)."""

    @property
    def kernels(self):
        """The steps of the analyses that depend on the domain's kind (see
        :class:`topology.domains.Kernels`): the lower-star gradient, the
        sweep graph, the Morse pairs, and the analyses an out-of-core grid
        runs slab by slab."""

    @property
    def is_ball(self) -> bool:
        """True when the domain is known to be a triangulated d-ball (a
        manifold with boundary, no homology above degree 0), as a grid is."""

    # -- vertex numbering (not collective) --------------------------------------------
    def ghosted_ids(self) -> np.ndarray:
        """Layout indices of the owned and ghost vertices, ascending. Not collective."""

    def owned_positions(self) -> np.ndarray:
        """Positions of the owned vertices in :meth:`ghosted_ids`. Not collective."""

    def global_ids(self, k: int = 0) -> np.ndarray:
        """Global ids of the ghosted vertices (``k = 0``), aligned with
        :meth:`ghosted_ids`. Not collective."""

    def owned_global_ids(self, k: int = 0) -> np.ndarray:
        """Global ids of the owned vertices (``k = 0``), in layout order. Not collective."""

    def layout_to_global(self, index: np.ndarray) -> np.ndarray:
        """Global vertex ids of vertex layout indices (any shape; of the
        vertices this rank holds, owned or ghost, when :attr:`renumbered`).
        Not collective."""

    def global_to_layout(self, gids: np.ndarray) -> np.ndarray:
        """Vertex layout indices of global vertex ids (any shape; of the
        vertices this rank holds when :attr:`renumbered`). Not collective."""

    def global_ids_of(self, index: np.ndarray) -> np.ndarray:
        """Global vertex ids of vertex layout indices given identically on
        every rank. Collective on ``comm`` when :attr:`renumbered`."""

    # -- local structure (not collective) ---------------------------------------------
    def local_edges(self) -> tuple[np.ndarray, np.ndarray]:
        """Edges among the ghosted vertices as two arrays of positions in
        :meth:`ghosted_ids`. Not collective."""

    def owned_boundary_vertices(self) -> np.ndarray:
        """Whether each owned vertex lies on the domain's boundary. Not collective."""

    def link_components(self, ghosted_order: np.ndarray):
        """``(lower, upper, on_boundary, lower_on_boundary, upper_on_boundary)``
        of each owned vertex under a ghosted vertex order: the numbers of
        connected components of its lower and upper link and, in 3D, whether
        it lies on the boundary and whether any lower/upper link vertex does
        (None below 3D; the last two need only be right for boundary vertices
        with one lower and one upper component, the only ones they
        reclassify). Collective among neighbouring ranks on a 3D complex."""

    def vertex_coordinates(self, gids: np.ndarray) -> np.ndarray:
        """Coordinates of vertices given by global id, shape (n, 3) float64.
        Not collective."""

    # -- fields and output (collective) -----------------------------------------------
    def vertex_values(self, values, name: str = "values", *, axes: str | None = None
                      ) -> DistVector:
        """A vertex field as a float64 DistVector on :attr:`vertex_layout`
        (``axes``: the axis order of a 2-D/3-D array on a Grid, see
        :class:`Grid`). Collective on ``comm``."""

    def ghosted(self, owned: np.ndarray) -> np.ndarray:
        """Owned entries plus the ghost vertices', in :meth:`ghosted_ids`
        order. Collective among neighbouring ranks."""

    def gather_global(self, vector: DistVector, k: int = 0, root: int | None = None):
        """A DistVector's entries as one array in global-id order, on every
        rank or on ``root``. Collective on ``comm``."""

    def mesh(self, root: int = 0):
        """``(points (n, 3), cell type, cells)`` of the whole triangulation
        in meshio's terms on ``root``, None elsewhere. Collective on ``comm``
        for a complex (it gathers the top simplices); a grid makes it on
        ``root`` alone."""

    # -- top cells, for output (not collective) -----------------------------------------
    @property
    def has_points(self) -> bool:
        """Whether the vertices have coordinates (:meth:`vertex_coordinates`)."""

    @property
    def mesh_cell_type(self) -> str:
        """meshio's name of the top cells (``"triangle"``, ``"tetra"``,
        ``"quad"``, ``"hexahedron"``, ...)."""

    @property
    def global_num_cells(self) -> int:
        """Number of top cells over all ranks."""

    def top_cell_layout(self) -> Layout | None:
        """The layout of the top cells, or None when they are not stored (cell
        fields are then global arrays). Not collective."""

    def local_top_cells(self) -> tuple[np.ndarray, np.ndarray]:
        """``(positions, global ids)`` of the top cells this rank writes: rows
        of positions in :meth:`ghosted_ids` and their global ids. Not
        collective."""


def check_domain(domain, name: str = "domain") -> None:
    """Raise ``TypeError`` unless ``domain`` is a :class:`Domain` (a Grid or a
    SimplicialComplex). Not collective: every rank passes the same kind of
    object in SPMD code, so every rank raises alike."""
    if not isinstance(domain, Domain):
        raise TypeError("%s must be a topology Grid or SimplicialComplex, got %s"
                        % (name, type(domain).__name__))


def physical_memory() -> int | None:
    """This machine's physical memory in bytes, or None if unknown. Not collective."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):   # pragma: no cover - not POSIX
        return None


def check_fits(what: str, entries_per_rank: int, bytes_per_entry: int) -> None:
    """Raise ``ValueError`` if ``what`` needs more than this machine's memory
    on one rank (``entries_per_rank`` entries of ``bytes_per_entry`` bytes:
    the few int64 arrays of the vertex numbering a domain keeps). Not
    collective; call it in :func:`dmsolve.validate.agreed` with
    rank-independent arguments, before anything of that size is allocated."""
    mem = physical_memory()
    need = int(entries_per_rank) * int(bytes_per_entry)
    if mem is not None and need > mem:
        raise ValueError("%s needs about %.3g GB per rank (%d entries of %d bytes); this "
                         "machine has %.3g GB" % (what, need / 1e9, entries_per_rank,
                                                  bytes_per_entry, mem / 1e9))


def owned_global_ids(domain: Domain) -> np.ndarray | None:
    """Global ids of the owned vertices when they differ from the layout
    indices (a complex partitioned by METIS or RCB), else None (the layout
    indices are the ids, and callers can skip the translation). Not collective."""
    return domain.owned_global_ids(0) if domain.renumbered else None


def ghosted_global_ids(domain: Domain) -> np.ndarray:
    """Global ids of the owned and ghost vertices, aligned with
    ``domain.ghosted_ids()``. Not collective."""
    return domain.global_ids(0)
