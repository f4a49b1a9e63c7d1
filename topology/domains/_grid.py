"""Regular grids, cut into slabs: TTK's implicit Freudenthal triangulation,
or the cubical complex of the grid (vertices, edges, squares, cubes), in
memory or out of core.

No cell is ever stored: the neighbours and link of a vertex are fixed
offsets, and each rank holds its slab of vertex planes plus one ghost plane
on each side, so the star of every owned vertex is complete. :class:`Grid`
holds that geometry; its kinds (:class:`FreudenthalGrid`,
:class:`CubicalGrid`, :class:`OutOfCoreGrid`) say which cells the grid
carries and bring their kernels. ``Grid(shape, comm, ...)`` builds the kind
its arguments name.
"""

from __future__ import annotations

import numbers

import numpy as np
from mpi4py import MPI

from dmsolve import DistVector, Layout
from dmsolve.bsp import NeighborExchange, check_spill_dir, parse_bytes
from dmsolve.validate import agreed, check_choice

from ..core import (RawField, as_vertex_vector, check_fits, check_shape, cube_cells,
                    cubical_structure, grid_cells, grid_coordinates, link_structure, points3)
from ..morse import cubical_link_components, slab_link_components
from ._complex import SimplicialComplex
from ._kernels import CubicalKernels, FreudenthalKernels, OutOfCoreKernels

__all__ = ["Grid", "FreudenthalGrid", "CubicalGrid", "OutOfCoreGrid", "COMPLEXES",
           "OUT_OF_CORE_BYTES_PER_VERTEX"]

#: The cell complexes a :class:`Grid` can carry (``complex=``)
COMPLEXES = ("freudenthal", "cubical")


class Grid:
    """A 2D or 3D regular grid of vertices with TTK's Freudenthal triangulation,
    or with the grid's cubical complex.

    Vertex ``(x, y[, z])`` has global id ``x + y*nx (+ z*nx*ny)``. Ranks own
    contiguous slabs of planes along the last axis (rows in 2D, z-planes in
    3D), so the vertex layout is a contiguous block of ids per rank, and each
    rank keeps one ghost plane on each side. A rank may own no plane.

    Parameters
    ----------
    shape : tuple of int
        ``(nx, ny)`` or ``(nx, ny, nz)``, each at least 2.
    comm : MPI.Comm
    complex : {"freudenthal", "cubical"}
        The cells on the grid. ``"freudenthal"`` (default): TTK's
        triangulation, each square split along one diagonal, each cube into
        six tetrahedra, so vertex ``v`` has 6 (2D) or 14 (3D) neighbours.
        ``"cubical"``: the vertices, edges, squares and cubes of the grid
        (4 or 6 neighbours along the axes), filtered by the V-construction
        of gudhi's ``CubicalComplex(vertices=...)`` and CubicalRipser: a
        cell enters at the largest value of its vertices. Every analysis
        that takes a grid runs on both (see Notes).
    virtual : int, optional
        Out-of-core mode: split each rank's slab into ``virtual`` slabs, the
        virtual processors of a :class:`dmsolve.bsp.VirtualBSP`, analysed
        one at a time with what they pass each other staged on disk beyond
        ``memory_budget``. Default: 1 if only ``memory_budget`` is given
        (then as many as the budget needs), else in-memory mode.
    spill_dir : str, optional
        Where out-of-core runs put their spill files (default the system's
        temporary directory); it must be a writable directory with
        ``memory_budget`` bytes free.
    memory_budget : int or str, optional
        Bytes an out-of-core analysis may hold per rank (``"512MiB"``): half
        for the slab being analysed, half for the staged states and messages
        of the others. Implies out-of-core mode.

    Notes
    -----
    Collective on ``comm`` (plans the ghost-plane exchange).

    **Cubical grids** (``complex="cubical"``): :func:`persistence_diagram`
    gives the diagram of the V-construction (equal to gudhi's
    ``CubicalComplex(vertices=...)``); :func:`connected_components` and
    the join tree of :func:`merge_tree` follow the grid's edges (4- or
    6-connectivity); the split tree is the join tree of ``-f`` on the same
    complex (superlevel sets, also along the edges);
    :func:`discrete_gradient` pairs the cells of each lower star;
    :func:`critical_points` types a vertex by its lower link (the lower
    cells of its star) and its upper neighbours in the dual graph of
    :func:`cubical_structure`, the connectivity of ``{f > t}`` that
    D(d-1) follows. :meth:`to_complex` and out-of-core mode are
    Freudenthal only.

    **Out-of-core mode** (``virtual`` or ``memory_budget``): the grid is
    the same, and :func:`critical_points`, :func:`persistence_diagram`,
    :func:`merge_tree` and :func:`connected_components` run slab by slab
    (see :attr:`virtual_slabs`), reading a :class:`RawField` a slab at a
    time and never whole: their results equal the in-memory ones (critical
    points, D0 and D(d-1) pairs, D1 of 3D data from the Morse complex built
    slab by slab, join and split trees, component labels, written to a raw
    file with ``out=``). Other analyses run in memory as usual.

    **Fields as arrays.** A vertex field given as a global numpy array is
    flat in id order (``values[x + y*nx (+ z*nx*ny)]``), or 2-D/3-D with its
    axis order named by ``axes=`` (every analysis that takes a field takes
    ``axes``): ``"yx"``/``"zyx"`` for ``values[y, x]``/``values[z, y, x]``
    (numpy image order, shape ``shape[::-1]``, whose C-order ravel is id
    order; what :func:`topology.io.read_image` reads) or ``"xy"``/``"xyz"``
    for ``values[x, y]``/``values[x, y, z]`` (``np.meshgrid(...,
    indexing="ij")`` order), or any other permutation. Without ``axes`` a
    2-D/3-D array is read in numpy image order, and only when its shape
    says so: on a grid whose shape reads the same reversed (a square
    ``(n, n)``, a ``(4, 5, 4)`` box) the two orders cannot be told apart, and
    an array of such a shape needs ``axes`` (or a flat array); an array of
    shape ``shape`` (not reversed) is taken for ``[x, y, z]`` order and
    refused too, with a message naming ``axes``. Nothing is ever transposed
    silently.

    References
    ----------
    .. [1] H. Freudenthal, "Simplizialzerlegungen von beschraenkter
       Flachheit", Annals of Mathematics 43(3), 1942.
    .. [2] J. Tierny et al., "The Topology ToolKit", IEEE TVCG 24(1), 2018;
       E. Le Guillou et al., "TTK is Getting MPI-Ready", IEEE TVCG 2024.

    Examples
    --------
    A 4 x 4 image with two low pixels that touch at a corner, along the
    diagonal the Freudenthal triangulation draws (from ``(x + 1, y)`` to
    ``(x, y + 1)``):

    >>> import numpy as np
    >>> from mpi4py import MPI
    >>> import topology
    >>> comm = MPI.COMM_WORLD
    >>> image = np.array([[9, 9, 9, 9],
    ...                   [9, 9, 0, 9],
    ...                   [9, 0, 9, 9],
    ...                   [9, 9, 9, 9]], dtype=float)     # values[y, x]
    >>> grid = topology.Grid((4, 4), comm)
    >>> print(type(grid).__name__, grid.complex, grid.global_num_vertices)
    FreudenthalGrid freudenthal 16

    In the triangulation the two pixels are neighbours, so the sublevel set
    ``{f <= 1}`` is one component, labelled by its smallest vertex id:

    >>> labels = topology.connected_components(grid, image, 1.0, axes="yx")
    >>> print(labels.gather().reshape(4, 4))
    [[-1 -1 -1 -1]
     [-1 -1  6 -1]
     [-1  6 -1 -1]
     [-1 -1 -1 -1]]

    The cubical complex joins a vertex to its 4 neighbours along the axes
    only: two components, and a D0 pair for the one that dies when the
    square between them enters, at 9:

    >>> cube = topology.Grid((4, 4), comm, complex="cubical")
    >>> print(type(cube).__name__, cube.complex)
    CubicalGrid cubical
    >>> labels = topology.connected_components(cube, image, 1.0, axes="yx")
    >>> print(labels.gather().reshape(4, 4))
    [[-1 -1 -1 -1]
     [-1 -1  6 -1]
     [-1  9 -1 -1]
     [-1 -1 -1 -1]]
    >>> print(topology.persistence_diagram(cube, image, axes="yx").gather().finite(0))
    [[0. 9.]]

    Out of core, each rank's slab is cut into ``virtual`` slabs, analysed
    one at a time; each needs a plane of its own, so the grid has at least
    ``2 * comm.size`` planes here. The results equal those in memory:

    >>> ny = max(16, 2 * comm.size)
    >>> f = np.random.default_rng(0).random((ny, 4))      # values[y, x]
    >>> ooc = topology.Grid((4, ny), comm, virtual=2)
    >>> print(type(ooc).__name__, ooc.virtual)
    OutOfCoreGrid 2
    >>> a = topology.persistence_diagram(ooc, f, axes="yx").gather()
    >>> b = topology.persistence_diagram(topology.Grid((4, ny), comm), f, axes="yx").gather()
    >>> print(all(np.array_equal(a.finite(k), b.finite(k)) for k in range(3)))
    True
    """

    #: the cell complex: ``"freudenthal"`` or ``"cubical"``
    complex = "freudenthal"
    #: virtual processors per rank in out-of-core mode, else None
    virtual = None
    #: the out-of-core budget in bytes per rank (None: no limit, or in-memory mode)
    memory_budget = None
    #: where out-of-core runs spill (None: the system's temporary directory)
    spill_dir = None
    #: a grid has the coordinates of its vertices
    has_points = True

    def __new__(cls, shape=None, comm=None, *, complex: str | None = None, virtual=None,
                spill_dir=None, memory_budget=None):
        if cls is Grid:
            cls = _kind(comm, complex, virtual, memory_budget)
        return super().__new__(cls)

    def __init__(self, shape, comm: MPI.Comm, *, complex: str | None = None,
                 virtual: int | None = None, spill_dir=None, memory_budget=None):
        if not isinstance(comm, MPI.Comm):
            raise TypeError("comm must be an mpi4py MPI.Comm, got %s" % type(comm).__name__)
        with agreed(comm):
            if complex is not None and check_choice("complex", complex, COMPLEXES) \
                    != self.complex:
                raise ValueError("a %s carries complex=%r, not %r"
                                 % (type(self).__name__, self.complex, complex))
            shape = _check_shape(shape)
            # a rank keeps its slab and two ghost planes: at least a field and
            # its vertex order (two 8-byte numbers per vertex) for any analysis
            planes = -(-int(shape[-1]) // comm.Get_size())
            plane = int(np.prod([int(s) for s in shape[:-1]], dtype=object))
            self._reserve(shape, comm.Get_size(), planes, plane,
                          (virtual, spill_dir, memory_budget))
        self.comm = comm
        self.shape = tuple(int(s) for s in shape)
        self.dimension = len(self.shape)
        self.plane_size = int(np.prod(self.shape[:-1]))
        nplanes = self.shape[-1]
        size, rank = comm.Get_size(), comm.Get_rank()
        base, extra = divmod(nplanes, size)
        counts = np.full(size, base, dtype=np.int64)
        counts[:extra] += 1
        planes = np.concatenate(([0], np.cumsum(counts)))
        #: (first, stop) owned plane on every rank
        self.plane_ranges = planes
        self.vertex_layout = Layout(planes * self.plane_size, comm)
        p0, p1 = int(planes[rank]), int(planes[rank + 1])
        if p1 > p0:
            g0, g1 = max(p0 - 1, 0), min(p1 + 1, nplanes)
        else:
            g0 = g1 = p0
        #: owned planes and ghosted planes of this rank
        self.owned_planes = (p0, p1)
        self.ghosted_planes = (g0, g1)
        ps = self.plane_size
        ghosts = np.concatenate((np.arange(g0 * ps, p0 * ps), np.arange(p1 * ps, g1 * ps)))
        self._halo = NeighborExchange.from_ghosts(self.vertex_layout, ghosts.astype(np.int64),
                                                  dtype=np.int64, name="grid-ghosts")
        self._nbelow = (p0 - g0) * ps
        #: (first, stop) owned plane of each of this rank's virtual slabs
        self.virtual_slabs = self._slabs(p0, p1)
        #: the steps of the analyses this kind of grid runs its own way
        self.kernels = self._kernels()

    # -- what a kind says (overridden by the kinds) -----------------------------------------
    def _reserve(self, shape, size: int, planes: int, plane: int, ooc) -> None:
        """Check that a rank's slab fits in memory (in ``agreed``; ``ooc``:
        the out-of-core arguments, refused in memory). Not collective."""
        virtual, spill_dir, memory_budget = ooc
        if virtual is not None or memory_budget is not None:
            raise ValueError("virtual= and memory_budget= make an out-of-core grid: "
                             "construct it with Grid(..., virtual=v)")
        if spill_dir is not None:
            raise ValueError("spill_dir is for out-of-core mode: give virtual= or "
                             "memory_budget= too")
        check_fits("Grid%r" % (tuple(int(s) for s in shape),), (planes + 2) * plane, 16)

    def _slabs(self, p0: int, p1: int) -> list:
        return [(p0, p1)]

    def _kernels(self):
        raise NotImplementedError

    def graph_offsets(self, dual: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """``(offsets, link_edges)`` of the vertex graph whose sublevel sets
        carry D0 (``dual=False``: the edges of the complex) or whose
        superlevel sets carry D(d-1) by Alexander duality (``dual=True``).
        The two are the same on a Freudenthal grid; see
        :func:`cubical_structure`. Not collective."""
        raise NotImplementedError

    def cells(self, planes=None) -> np.ndarray:
        """Vertex ids of the top cells of the grid (of those whose origin's
        last coordinate lies in ``range(*planes)``), as :meth:`mesh` lists
        them. Not collective."""
        raise NotImplementedError

    @property
    def cells_per_grid_cell(self) -> int:
        """Top cells of one grid cell."""
        raise NotImplementedError

    @property
    def out_of_core(self) -> bool:
        """Whether analyses run slab by slab on virtual processors (see Notes)."""
        return self.virtual is not None

    # -- properties (never communicate) ----------------------------------------------
    @property
    def global_num_vertices(self) -> int:
        """Number of vertices, ``prod(shape)``."""
        return int(np.prod(self.shape))

    @property
    def local_num_vertices(self) -> int:
        """Number of vertices this rank owns (its planes)."""
        return self.vertex_layout.local_size

    @property
    def renumbered(self) -> bool:
        """False: a vertex's layout index is its global id."""
        return False

    @property
    def halo(self) -> NeighborExchange:
        """The ghost-plane exchange plan (int64 entries)."""
        return self._halo

    @property
    def cubical(self) -> bool:
        """Whether the grid carries its cubical complex (``complex="cubical"``)."""
        return self.complex == "cubical"

    @property
    def stencil(self) -> tuple[np.ndarray, np.ndarray]:
        """``(offsets, link_edges)`` of every vertex star: :func:`link_structure`,
        or :func:`cubical_structure` on a cubical grid."""
        return self.graph_offsets()

    @property
    def is_ball(self) -> bool:
        """True: a grid triangulates a box, a ball with no homology above degree 0."""
        return True

    def __repr__(self) -> str:
        ooc = "" if self.virtual is None else ", virtual=%d" % self.virtual
        cub = "" if self.complex == "freudenthal" else ", complex=%r" % self.complex
        return "Grid(shape=%s%s, planes %d:%d of %d%s)" % (self.shape, cub, *self.owned_planes,
                                                          self.shape[-1], ooc)

    # -- fields -----------------------------------------------------------------------
    def vertex_values(self, values, name: str = "values", *, axes: str | None = None
                      ) -> DistVector:
        """``values`` as a float64 DistVector on :attr:`vertex_layout`.

        Accepts a DistVector on the vertex layout, a :class:`RawField` of
        this grid's shape (each rank reads its own planes), or the full
        global array on every rank: flat in id order, or 2-D/3-D with the
        axis order ``axes`` (``"zyx"``, ``"xyz"``, ...; see the class Notes:
        without ``axes`` only an unambiguous numpy-order ``shape[::-1]``
        array is accepted). Non-finite values are refused. Collective on
        ``comm``; raises the same ``ValueError`` or ``TypeError`` on every
        rank.
        """
        if isinstance(values, RawField):
            local = None
            with agreed(self.comm):
                if axes is not None:
                    raise ValueError("axes describes a field array; a RawField is in id order")
                values.check(self.shape)
                local = values.read_planes(*self.owned_planes)
            return DistVector(self.vertex_layout, local)
        return as_vertex_vector(values, self.vertex_layout, name,
                                grid_shape=self.shape[::-1], axes=axes)

    def ghosted(self, owned: np.ndarray) -> np.ndarray:
        """This rank's owned entries plus the ghost planes, in id order.

        Collective among neighbouring ranks.
        """
        owned = np.ascontiguousarray(owned)
        halo = self._halo
        if halo.dtype != owned.dtype:
            halo = self._halo_for(owned.dtype)
        ghost = halo.exchange(owned)
        return np.concatenate((ghost[:self._nbelow], owned, ghost[self._nbelow:]))

    def _halo_for(self, dtype):
        # A second plan for another dtype, built on first use by every rank
        # that calls ghosted() with it (all ranks do: ghosted is collective).
        cache = self.__dict__.setdefault("_halos", {})
        key = np.dtype(dtype).str
        if key not in cache:
            h = self._halo
            cache[key] = NeighborExchange(self.comm, h.send_ranks, np.split(
                h.send_index, np.cumsum(h.send_counts)[:-1]) if h.send_counts.size else [],
                h.recv_ranks, h.recv_counts, dtype=dtype, name="grid-ghosts")
        return cache[key]

    def ghosted_ids(self) -> np.ndarray:
        """Global ids of the owned and ghost vertices, ascending. Not collective."""
        g0, g1 = self.ghosted_planes
        return np.arange(g0 * self.plane_size, g1 * self.plane_size, dtype=np.int64)

    def coordinates(self, ids) -> np.ndarray:
        """Grid coordinates ``(x, y[, z])`` of global ids, shape (n, dim). Not collective."""
        return grid_coordinates(self.shape, ids)

    def local_edges(self) -> tuple[np.ndarray, np.ndarray]:
        """Edges of the triangulation among the ghosted vertices, as pairs of
        positions in :meth:`ghosted_ids`. Not collective.

        Built from the positive half of the neighbour offsets; the grid itself
        stays implicit (this is the one explicit list, for union-find).
        """
        g0, g1 = self.ghosted_planes
        dims = self.shape[:-1] + (g1 - g0,)
        n = int(np.prod(dims))
        idx = np.arange(n, dtype=np.int64).reshape(dims[::-1])
        offsets, _ = self.graph_offsets()
        heads, tails = [], []
        for off in offsets:
            if tuple(off[::-1]) <= (0,) * self.dimension:
                continue  # each edge once: keep offsets lexicographically after 0
            src = [slice(max(0, -o), d - max(0, o)) for o, d in zip(off[::-1], dims[::-1])]
            dst = [slice(max(0, o), d - max(0, -o)) for o, d in zip(off[::-1], dims[::-1])]
            heads.append(idx[tuple(src)].ravel())
            tails.append(idx[tuple(dst)].ravel())
        if not heads:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate(heads), np.concatenate(tails)

    def owned_positions(self) -> np.ndarray:
        """Positions of the owned vertices in :meth:`ghosted_ids`. Not collective."""
        return np.arange(self._nbelow, self._nbelow + self.local_num_vertices)

    def boundary_mask(self, ids) -> np.ndarray:
        """Whether each global id lies on the grid's boundary. Not collective."""
        c = self.coordinates(ids)
        n = np.array(self.shape)
        return np.any((c == 0) | (c == n - 1), axis=-1)

    def owned_boundary_vertices(self) -> np.ndarray:
        """Whether each owned vertex lies on the grid's boundary. Not collective."""
        return self.boundary_mask(np.arange(self.vertex_layout.start, self.vertex_layout.stop))

    # -- numbering: layout index = global id --------------------------------------------
    def global_ids(self, k: int = 0) -> np.ndarray:
        """Global ids of the owned and ghost vertices: :meth:`ghosted_ids`
        (a grid has vertex ids only, ``k = 0``). Not collective."""
        _vertices_only(k)
        return self.ghosted_ids()

    def owned_global_ids(self, k: int = 0) -> np.ndarray:
        """Global ids of the owned vertices, ascending (``k = 0``). Not collective."""
        _vertices_only(k)
        return np.arange(self.vertex_layout.start, self.vertex_layout.stop, dtype=np.int64)

    def layout_to_global(self, index: np.ndarray) -> np.ndarray:
        """The identity: layout indices are global ids. Not collective."""
        return index

    def global_to_layout(self, gids: np.ndarray) -> np.ndarray:
        """The identity: global ids are layout indices. Not collective."""
        return gids

    def global_ids_of(self, index: np.ndarray) -> np.ndarray:
        """The identity: layout indices are global ids. Not collective."""
        return np.asarray(index)

    def vertex_coordinates(self, gids) -> np.ndarray:
        """Grid coordinates of global ids as float64 points, shape (n, 3)
        (``z = 0`` in 2D). Not collective."""
        return points3(self.coordinates(gids).astype(np.float64))

    # -- global views and output ----------------------------------------------------------
    def gather_global(self, vector: DistVector, k: int = 0, root: int | None = None):
        """``vector.gather(root)``: a grid's layouts are in global-id order
        (``k`` is not used). Collective on ``comm``."""
        return vector.gather(root)

    def mesh(self, root: int = 0):
        """``(points, cell type, cells)`` of the grid's top cells (triangles or
        tetrahedra, squares or cubes on a cubical grid), generated on
        ``root`` for output only (None elsewhere). Not collective."""
        if self.comm.Get_rank() != root:
            return None
        points = self.vertex_coordinates(np.arange(self.global_num_vertices))
        return points, self.mesh_cell_type, self.cells()

    @property
    def global_num_cells(self) -> int:
        """Number of top cells of the whole grid."""
        return int(np.prod([n - 1 for n in self.shape])) * self.cells_per_grid_cell

    def top_cell_layout(self):
        """None: a grid stores no cell, so cell fields are global arrays.
        Not collective."""
        return None

    def local_top_cells(self) -> tuple[np.ndarray, np.ndarray]:
        """``(positions, global ids)`` of the top cells this rank writes: the
        cells whose origin corner lies in an owned plane (none in the last
        plane), as rows of positions in :meth:`ghosted_ids`, and their
        global ids (rows of the whole grid's :meth:`cells`). Not collective."""
        p0, p1 = self.owned_planes
        planes = (p0, min(p1, self.shape[-1] - 1))
        cellpos = self.cells(planes) - self.ghosted_planes[0] * self.plane_size
        return cellpos, _grid_cell_ids(self.shape, planes, self.cells_per_grid_cell)


class FreudenthalGrid(Grid):
    """A grid with TTK's Freudenthal triangulation, in memory: each square
    split along one diagonal, each cube into six tetrahedra, so a vertex has
    6 (2D) or 14 (3D) neighbours. ``Grid(shape, comm)`` makes one; see
    :class:`Grid`. Collective on ``comm``."""

    complex = "freudenthal"

    def _kernels(self):
        return FreudenthalKernels(self)

    def graph_offsets(self, dual: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """:func:`link_structure`, for both graphs. Not collective."""
        return link_structure(self.dimension)

    def cells(self, planes=None) -> np.ndarray:
        """Vertex ids of the triangles or tetrahedra (:func:`grid_cells`).
        Not collective."""
        return grid_cells(self.shape, planes)

    @property
    def cells_per_grid_cell(self) -> int:
        """2 triangles or 6 tetrahedra."""
        return 2 if self.dimension == 2 else 6

    @property
    def mesh_cell_type(self) -> str:
        """meshio's name of the top cells :meth:`mesh` lists: ``"triangle"``
        or ``"tetra"``."""
        return "triangle" if self.dimension == 2 else "tetra"

    def link_components(self, ghosted_order: np.ndarray):
        """Lower/upper link component counts of the owned vertices, from
        :func:`component_table` over the masks of lower and upper neighbours;
        in 3D also the boundary flags TTK's classification needs (see
        :class:`Domain`). Not collective: the ghost planes complete every
        owned star."""
        return slab_link_components(self.shape, self.ghosted_planes, self.owned_planes,
                                    ghosted_order)

    def to_complex(self, *, partition: str = "block"):
        """The Freudenthal triangulation as an explicit :class:`SimplicialComplex`.

        For the analyses that need stored simplices (boundary matrices,
        Hodge Laplacians and decomposition, Betti numbers). Vertex ids are the
        grid's (``x + y*nx (+ z*nx*ny)``), so vertex fields index alike; the
        edges, triangles (and tetrahedra) get the complex's global ids
        (positions in the sorted list of vertex tuples, see
        ``cx.simplices(k)``). Each rank generates the cells of its own slab,
        and the complex is partitioned by ``partition`` (``"block"`` or
        ``"metis"``). It stores every simplex: O(number of cells) memory, as
        the matrices built on it need anyway.

        Collective on ``comm``.

        Raises
        ------
        ValueError, TypeError
            On every rank, if ``partition`` is not ``"block"`` or ``"metis"``,
            or the grid is cubical (a simplicial complex of its cubes would
            be another filtration; :class:`CubicalGrid` refuses it).
        """
        with agreed(self.comm):
            partition = check_choice("partition", partition, ("block", "metis"))
        p0, p1 = self.owned_planes
        # the cells whose origin corner lies in an owned plane (not the last plane)
        cells = grid_cells(self.shape, planes=(p0, min(p1, self.shape[-1] - 1)))
        return SimplicialComplex([cells], self.comm, partition=partition)


class CubicalGrid(Grid):
    """A grid with its cubical complex: the vertices, edges, squares and cubes
    of the grid (4 or 6 neighbours along the axes), filtered by the
    V-construction. ``Grid(shape, comm, complex="cubical")`` makes one; see
    :class:`Grid`. Collective on ``comm``."""

    complex = "cubical"

    def _kernels(self):
        return CubicalKernels(self)

    def graph_offsets(self, dual: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """:func:`cubical_structure`: the grid's edges, or the dual graph.
        Not collective."""
        return cubical_structure(self.dimension, dual)

    def cells(self, planes=None) -> np.ndarray:
        """Vertex ids of the squares or cubes (:func:`cube_cells`). Not
        collective."""
        return cube_cells(self.shape, planes)

    @property
    def cells_per_grid_cell(self) -> int:
        """1: the square or cube itself."""
        return 1

    @property
    def mesh_cell_type(self) -> str:
        """meshio's name of the top cells :meth:`mesh` lists: ``"quad"`` or
        ``"hexahedron"``."""
        return "quad" if self.dimension == 2 else "hexahedron"

    def link_components(self, ghosted_order: np.ndarray):
        """The components of the lower link of each owned vertex (the lower
        axis neighbours, joined by the squares of the lower star) and of the
        upper neighbours in the dual graph (:func:`cubical_structure`); in 3D
        the boundary flags as for the triangulation, over the axis neighbours
        (lower) and the dual ones (upper). Not collective."""
        return cubical_link_components(self, ghosted_order)

    def to_complex(self, *, partition: str = "block"):
        """Refused: :meth:`FreudenthalGrid.to_complex` gives the Freudenthal
        triangulation, and a simplicial complex of the cubes would be another
        filtration. Collective on ``comm``: raises the same ``ValueError`` on
        every rank."""
        with agreed(self.comm):
            check_choice("partition", partition, ("block", "metis"))
            raise ValueError("to_complex() gives the Freudenthal triangulation; this grid "
                             "is cubical (complex='cubical'): make a Grid with "
                             "complex='freudenthal' for Hodge theory")


class OutOfCoreGrid(FreudenthalGrid):
    """A Freudenthal grid analysed slab by slab: each rank's slab cut into
    ``virtual`` slabs, the virtual processors of a
    :class:`dmsolve.bsp.VirtualBSP`, with what they pass each other staged on
    disk beyond ``memory_budget``. ``Grid(shape, comm, virtual=v)`` or
    ``Grid(shape, comm, memory_budget="512MiB")`` makes one; see
    :class:`Grid`. Its kernels wrap the Freudenthal grid's: critical points,
    persistence diagrams (every dimension), merge trees and connected components
    run out of core; everything else runs in memory. Collective on
    ``comm``."""

    def _reserve(self, shape, size: int, planes: int, plane: int, ooc) -> None:
        virtual, spill_dir, memory_budget = ooc
        self.virtual, self.memory_budget, self.spill_dir = _out_of_core_mode(
            virtual, spill_dir, memory_budget, int(shape[-1]), plane, size)

    def _slabs(self, p0: int, p1: int) -> list:
        cuts = p0 + (np.arange(self.virtual + 1) * (p1 - p0)) // self.virtual
        return [(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:])]

    def _kernels(self):
        return OutOfCoreKernels(FreudenthalKernels(self))


def _kind(comm, complex, virtual, memory_budget) -> type:
    """The class of ``Grid(shape, comm, complex=..., virtual=...,
    memory_budget=...)``. Collective on ``comm`` (the same error on every
    rank)."""
    if not isinstance(comm, MPI.Comm):
        raise TypeError("comm must be an mpi4py MPI.Comm, got %s" % type(comm).__name__)
    out_of_core = virtual is not None or memory_budget is not None
    with agreed(comm):
        complex = check_choice("complex", "freudenthal" if complex is None else complex,
                               COMPLEXES)
        if complex == "cubical" and out_of_core:
            raise ValueError("out-of-core mode (virtual=, memory_budget=) runs on the "
                             "Freudenthal triangulation only, not complex='cubical'")
    if complex == "cubical":
        return CubicalGrid
    return OutOfCoreGrid if out_of_core else FreudenthalGrid


def _check_shape(shape) -> tuple:
    """``shape`` as a tuple of 2 or 3 integers of at least 2. Not collective."""
    shape = check_shape(shape)
    if min(shape) < 2:
        raise ValueError("every grid dimension must be at least 2, got %r" % (shape,))
    return shape


def _grid_cell_ids(shape, planes, per) -> np.ndarray:
    """Global ids of the cells :func:`grid_cells` ``(shape, planes)`` (or
    :func:`cube_cells`) lists, in its order: their rows in the whole grid's
    list (origins in x-major order, then the ``per`` cells of one grid
    cell). Not collective."""
    ranges = [np.arange(n - 1) for n in shape]
    ranges[-1] = np.arange(planes[0], max(planes[0], planes[1]))
    origins = np.stack(np.meshgrid(*ranges, indexing="ij"), -1).reshape(-1, len(shape))
    index = np.ravel_multi_index(tuple(origins.T), [n - 1 for n in shape]) if origins.size \
        else np.zeros(0, np.int64)
    return (index[:, None] * per + np.arange(per)).reshape(-1).astype(np.int64)


def _vertices_only(k) -> None:
    if k != 0:
        raise ValueError("a Grid numbers its vertices only (k = 0), got k=%r" % (k,))


#: Peak bytes per vertex of one out-of-core slab's turn (its values, their
#: order, the link masks and the two sweeps), measured by
#: bench/bench_outofcore.py; the slabs are sized so that one turn takes at
#: most half the memory budget.
OUT_OF_CORE_BYTES_PER_VERTEX = 160


def _out_of_core_mode(virtual, spill_dir, memory_budget, nplanes: int, plane: int, size: int):
    """``(virtual, budget, spill_dir)`` of a Grid, or ``(None, None, None)``
    in memory. Not collective (in ``agreed``, with rank-independent input)."""
    if virtual is None and memory_budget is None:
        if spill_dir is not None:
            raise ValueError("spill_dir is for out-of-core mode: give virtual= or "
                             "memory_budget= too")
        return None, None, None
    if virtual is not None and (isinstance(virtual, bool) or
                                not isinstance(virtual, numbers.Integral) or virtual < 1):
        raise ValueError("virtual must be a positive int, got %r" % (virtual,))
    budget = None if memory_budget is None else parse_bytes(memory_budget)
    base, extra = divmod(nplanes, size)
    most = base + (extra > 0)           # planes of the largest slab
    least = base if base > 0 else 1     # of the smallest non-empty one
    per_vertex = OUT_OF_CORE_BYTES_PER_VERTEX

    def turn_bytes(v):                  # one virtual slab and its two ghost planes
        return (-(-most // v) + 2) * plane * per_vertex

    if virtual is None:
        virtual = next((v for v in range(1, least + 1) if 2 * turn_bytes(v) <= budget), None)
        if virtual is None:
            raise ValueError(
                "memory_budget of %d bytes is too small for one virtual processor: a slab of "
                "one plane and its two ghost planes needs about %d bytes (twice that with the "
                "staged messages); give at least %d" % (budget, turn_bytes(least),
                                                        2 * turn_bytes(least)))
    virtual = int(virtual)
    if virtual > least:
        raise ValueError("virtual=%d is more than the %d planes the smallest slab holds: each "
                         "virtual processor needs a plane" % (virtual, least))
    if budget is not None and 2 * turn_bytes(virtual) > budget:
        raise ValueError(
            "memory_budget of %d bytes is too small for one virtual processor: a slab of %d "
            "planes and its two ghost planes needs about %d bytes, and as much again is kept "
            "for the staged messages; give a larger budget or more virtual processors (at "
            "most %d)" % (budget, -(-most // virtual), turn_bytes(virtual), least))
    spill_dir = check_spill_dir(spill_dir, budget)
    return virtual, budget, spill_dir
