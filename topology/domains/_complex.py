"""Distributed simplicial complexes built from top simplices, with one ghost layer.

Vertices are partitioned (contiguous id blocks, METIS or coordinate bisection);
a k-simplex is owned by the owner of its smallest vertex, and its global id is
its position in the lexicographically sorted list of all k-simplices (sorted
vertex tuples), so ids do not depend on the number of ranks.
"""

from __future__ import annotations

import itertools

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from dmsolve import DistVector, Layout
from dmsolve.validate import agreed
from dmsolve.bsp import BSP, NeighborExchange, rank_of, sorted_unique, stable_argsort

from ..core import as_vertex_vector, lookup, points3, search_rows, unique_rows
from ._complex_input import MAX_DIMENSION, PARTITIONS, read_input, to_block
from ._kernels import ComplexKernels

__all__ = ["SimplicialComplex", "PARTITIONS"]


#: Vertex ids of at most this many bits pack two of a simplex's vertices into
#: one int64 word for the sorts of :meth:`SimplicialComplex._owned_global_ids`.
PACKED_ID_BITS = 31


class SimplicialComplex:
    """A simplicial complex distributed by a vertex partition, with a ghost layer.

    Parameters
    ----------
    simplices : list of int arrays, or one int array
        Top simplices as global vertex ids: one array of shape (m, k+1) per
        dimension k present (mixed dimensions allowed, k <= 3). Each rank may
        pass any subset; the complex is the union over the ranks of the
        simplices and all their faces. Rows need not be sorted.
    comm : MPI.Comm
    points : array_like, shape (n, d), optional
        Vertex coordinates, the same global array on every rank. When given,
        the vertices are ``0 .. n-1``; otherwise ``0 .. max id``. Every id in
        that range is a vertex (an unused one is an isolated vertex).
    local_points : array_like, shape (m, d), optional
        Instead of ``points``: this rank's rows of the points array, the
        vertices numbered in rank order (rank 0's rows are vertices ``0 ..
        m0-1``, rank 1's the next, and so on, as the ``vertexCoords`` of
        PETSc's ``DMPlexCreateFromCellListParallel``). Nothing of global
        size is then held by any rank: each rank keeps the coordinates of
        the vertices it holds (owned and ghost). Give it on every rank (an
        empty ``(0, d)`` array for none), with the same ``d``.
    partition : {"block", "metis", "multilevel", "rcb", "hilbert"}
        How vertices are distributed (a name in :data:`PARTITIONS`; case
        and ``-``/``_`` do not matter):
        contiguous blocks of ids (default); a METIS k-way partition of the
        vertex graph (``dmsolve.partition.metis_partition``: the graph is
        gathered to rank 0 up to its ``gather_limit`` of a few ranks'
        shares, partitioned in parallel above); the parallel multilevel partition of the vertex
        graph (``dmsolve.partition.multilevel_partition``: only a small
        coarse graph is gathered); recursive coordinate bisection of
        ``points`` (``dmsolve.partition.rcb``); or ``points`` cut along a
        Hilbert curve (``dmsolve.partition.hilbert``). The last two need
        ``points`` and gather nothing.

    Raises
    ------
    ValueError, TypeError
        On every rank, if any rank passes a vertex id out of range, a
        degenerate simplex (a repeated vertex), a simplex listed twice in its
        own input, a simplex of dimension above 3, non-finite points, an
        unknown partition (``ValueError``; ``TypeError`` if not a string),
        ``"rcb"`` without points, both ``points`` and ``local_points``, or
        ``local_points`` on some ranks only or with different ``d``.

    Notes
    -----
    Collective on ``comm``: two BSP supersteps (stars to the owners of their
    vertices; global ids of ghost simplices from their owners) and the
    planning of the vertex ghost exchange; under ``"metis"`` or ``"rcb"``
    also two supersteps of renumbering, one halo exchange and one
    :func:`dmsolve.bsp.rank_of` per simplex dimension. Each rank then holds the closed
    star of every vertex it owns: all simplices touching an owned vertex and
    their faces.

    **Global ids and layout indices.** A :class:`dmsolve.Layout` owns
    contiguous index ranges, so under ``"metis"`` or ``"rcb"`` the vertices
    are renumbered internally into partition order (part 0 first, the
    global-id order kept inside a part) and every k-simplex gets a *layout
    index*, its position in the sorted list of simplices written with these
    internal numbers. Layout indices are what DistVectors, DistCSR rows and
    columns, :meth:`local_simplices`, :meth:`ghosted_ids` and
    :meth:`owned_positions` use; they depend on the partition and hence on
    the number of ranks. *Global ids* do not: vertex ``i`` of the input is
    global vertex ``i``, and a k-simplex's global id is its position in the
    sorted list of all k-simplices written with input vertex ids. They are
    what :meth:`simplices` returns, what global arrays passed as fields are
    indexed by, and what the analyses report (critical point ids, component
    labels); :meth:`global_ids`, :meth:`owned_global_ids` and
    :meth:`gather_global` translate. Under ``"block"`` (the default) both
    numberings coincide and nothing is translated. No rank holds anything of
    global size for the translation: the owner of a layout index knows its
    global id, the block owner of a global id (``Layout.block``) its layout
    index, and each rank the global ids of the simplices it holds. The
    simplex global ids are found by a distributed sort
    (:func:`dmsolve.bsp.rank_of` of the owned simplices written with global
    vertex ids), so :meth:`layout_to_global` and :meth:`global_to_layout`
    translate the vertices this rank holds, and :meth:`global_ids_of`
    (collective) any vertices given on every rank.

    References
    ----------
    .. [1] E. Le Guillou et al., "TTK is Getting MPI-Ready", IEEE TVCG 2024
       (ghost layers and global identifiers of distributed simplices).

    Examples
    --------
    Two triangles sharing an edge, each rank passing a share of them (any
    share will do: the complex is their union, with all faces):

    >>> import numpy as np
    >>> from mpi4py import MPI
    >>> import topology
    >>> comm = MPI.COMM_WORLD
    >>> triangles = np.array([[0, 1, 2], [1, 2, 3]])
    >>> cx = topology.SimplicialComplex([triangles[comm.rank::comm.size]], comm)
    >>> print(cx)
    SimplicialComplex(dimension=2, vertices=4, counts=[4, 5, 2])

    A k-simplex's global id is its row in the sorted list of k-simplices,
    the same at any number of ranks:

    >>> print(cx.simplices(1).tolist())
    [[0, 1], [0, 2], [1, 2], [1, 3], [2, 3]]

    Mixed dimensions: a triangle and an edge apart from it, given as one
    array per dimension:

    >>> cx = topology.SimplicialComplex([np.array([[3, 4]]), np.array([[0, 1, 2]])], comm)
    >>> print(cx.counts(), topology.betti_numbers(cx))
    [5, 4, 1] [2, 0, 0]
    """

    def __init__(self, simplices, comm: MPI.Comm, points=None, *, partition: str = "block",
                 local_points=None):
        if not isinstance(comm, MPI.Comm):
            raise TypeError("comm must be an mpi4py MPI.Comm, got %s" % type(comm).__name__)
        self.comm = comm
        partition, tops, pts, lpts, n_points = read_input(simplices, comm, points, partition,
                                                          local_points)
        #: the canonical name of the vertex partitioner
        self.partition = partition
        local_max = max((int(a.max()) for a in tops.values() if a.size), default=-1)
        local_dim = max((k for k, a in tops.items() if a.size), default=0)
        both = np.array([local_max, local_dim], dtype=np.int64)
        comm.Allreduce(MPI.IN_PLACE, both, op=MPI.MAX)
        gmax, dim = both
        self.dimension = int(dim)
        gmax = int(gmax)
        self.num_vertices = int(n_points) if n_points is not None else gmax + 1
        #: the global points array when given as ``points`` (else None)
        self.points = pts
        # internal vertex numbers: partition order. Nothing of global size is
        # kept: the block owner of a global id knows its layout index
        # (``part.local_new_index``), the owner of a layout index its global id
        self._renumbered = False
        self._own_gid = None
        self.vertex_layout = Layout.block(self.num_vertices, comm)
        # this rank's rows of the points on the block layout
        block_pts = None
        if pts is not None:
            block_pts = pts[self.vertex_layout.start:self.vertex_layout.stop]
        elif lpts is not None:
            block_pts = to_block(lpts, self.vertex_layout)
        part = PARTITIONS[partition](tops, block_pts, self.num_vertices, comm)
        own_pts = block_pts
        if part is not None:
            self._renumbered = True
            tops, own_pts = self._renumber_tops(tops, part, block_pts)
        self.kernels = ComplexKernels(self)
        self._faces(self._stars(tops))
        self._vertex_ghosts(lpts, own_pts)
        self._simplex_ids()

    def _stars(self, tops: dict) -> dict:
        """Step 1: every top simplex goes to the owner of each of its
        vertices; returns the top simplices of the stars of the owned
        vertices. Collective on ``comm`` (one superstep)."""
        comm, vl = self.comm, self.vertex_layout
        ctx = BSP(comm)
        top = ctx.tags(*("dimension%d" % k for k in range(MAX_DIMENSION + 1)))
        for k, rows in tops.items():
            own = vl.owner(rows) if rows.size else np.zeros(rows.shape, np.int64)
            for j in range(k + 1):
                fresh = np.ones(rows.shape[0], dtype=bool)
                for i in range(j):
                    fresh &= own[:, i] != own[:, j]
                ctx.send_rows(own[fresh, j], rows[fresh], tag=top[k])
        inbox = ctx.sync("complex:stars")
        return {k: unique_rows(inbox.concat(top[k], dtype=np.int64, shape=(k + 1,)),
                               self.num_vertices)
                for k in range(1, self.dimension + 1)}

    def _faces(self, star_tops: dict) -> None:
        """Step 2: all faces of the local top simplices, sorted; owned ones are
        the contiguous block whose first vertex this rank owns. Collective
        on ``comm`` (the simplex layouts)."""
        comm, vl = self.comm, self.vertex_layout
        self._local: dict[int, np.ndarray] = {}
        self._owned: dict[int, tuple[int, int]] = {}
        self._layouts: dict[int, Layout] = {0: vl}
        self._gids: dict[int, np.ndarray] = {}
        for k in range(1, self.dimension + 1):
            parts = []
            for d in range(k, self.dimension + 1):
                rows = star_tops[d]
                for cols in itertools.combinations(range(d + 1), k + 1):
                    parts.append(rows[:, cols])
            rows = unique_rows(np.concatenate(parts) if parts else
                                np.zeros((0, k + 1), np.int64), self.num_vertices)
            self._local[k] = rows
            i0 = int(np.searchsorted(rows[:, 0], vl.start, side="left"))
            i1 = int(np.searchsorted(rows[:, 0], vl.stop, side="left"))
            self._owned[k] = (i0, i1)
            self._layouts[k] = Layout.from_local_size(i1 - i0, comm)

    def _vertex_ghosts(self, lpts, own_pts) -> None:
        """Step 3: every vertex of a local simplex that is not owned is a
        ghost; their exchange plan, and their global ids and points.
        Collective on ``comm``."""
        vl = self.vertex_layout
        used = [self._local[k].ravel() for k in self._local]
        allv = sorted_unique(np.concatenate(used)) if used else np.zeros(0, np.int64)
        ghosts = allv[~vl.is_local(allv)]
        self._ids = np.union1d(np.arange(vl.start, vl.stop, dtype=np.int64), ghosts)
        self._own_pos = np.searchsorted(self._ids, np.arange(vl.start, vl.stop))
        self._ghost_pos = np.searchsorted(self._ids, ghosts)
        self._halo = NeighborExchange.from_ghosts(vl, ghosts, dtype=np.float64,
                                                  name="complex-ghosts")
        self._halos = {np.dtype(np.float64).str: self._halo}
        self._global = {0: self._ids}
        if self._renumbered:
            # global ids of the ghost vertices from their owners (one halo exchange)
            self._global[0] = self.ghosted(self._own_gid)
            self._gid_order = stable_argsort(self._global[0])
        # operators assembled from the complex, which never changes: the
        # Laplacian parts and their spectral bounds (signals/_filters.py)
        self._operators = {}
        # the coordinates of the vertices held (owned and ghost), when the
        # points were given distributed (one halo exchange per coordinate)
        self._held_points = None
        if lpts is not None:
            self._held_points = np.column_stack(
                [self.ghosted(np.ascontiguousarray(own_pts[:, c]))
                 for c in range(own_pts.shape[1])]).reshape(-1, own_pts.shape[1])

    def _simplex_ids(self) -> None:
        """Steps 4 and 5: the global ids of the owned simplices, and the layout
        indices and global ids of the ghost simplices from their owners.
        Collective on ``comm`` (two supersteps, and a distributed sort per
        dimension when renumbered)."""
        comm, vl = self.comm, self.vertex_layout
        # 4. rank-independent global ids of the owned simplices, when the
        #    numbering is not the input's: their ranks in the global
        #    lexicographic order of the simplices written with global vertex
        #    ids (a distributed sort; the owned sets are disjoint)
        owned_global = self._owned_global_ids() if self._renumbered else {}
        # 5. layout indices (and global ids) of the ghost simplices, asked of
        #    their owners
        ctx = BSP(comm)
        dims = range(MAX_DIMENSION + 1)
        ask = ctx.tags(*("ask%d" % k for k in dims))
        answer = ctx.tags(*("answer%d" % k for k in dims))
        glob_tag = ctx.tags(*("global%d" % k for k in dims))
        asks = {}
        for k in range(1, self.dimension + 1):
            rows = self._local[k]
            i0, i1 = self._owned[k]
            ghost = np.concatenate((np.arange(i0), np.arange(i1, rows.shape[0])))
            dests = vl.owner(rows[ghost, 0]) if ghost.size else np.zeros(0, np.int64)
            order = stable_argsort(dests)
            asks[k] = ghost[order]
            ctx.send_rows(dests, rows[ghost], tag=ask[k])
        inbox = ctx.sync("complex:ask-ids")
        for k in range(1, self.dimension + 1):
            i0, i1 = self._owned[k]
            mine = self._local[k][i0:i1]
            start = self._layouts[k].start
            for src, q in inbox.messages(ask[k]):
                pos = search_rows(mine, q, self.num_vertices)
                ctx.send(src, pos + start, tag=answer[k])
                if self._renumbered:
                    ctx.send(src, owned_global[k][pos], tag=glob_tag[k])
        inbox = ctx.sync("complex:answer-ids")
        for k in range(1, self.dimension + 1):
            rows = self._local[k]
            gids = np.empty(rows.shape[0], dtype=np.int64)
            i0, i1 = self._owned[k]
            gids[i0:i1] = self._layouts[k].start + np.arange(i1 - i0)
            gids[asks[k]] = inbox.concat(answer[k], dtype=np.int64)
            self._gids[k] = gids
            if self._renumbered:
                glob = np.empty(rows.shape[0], dtype=np.int64)
                glob[i0:i1] = owned_global[k]
                glob[asks[k]] = inbox.concat(glob_tag[k], dtype=np.int64)
                self._global[k] = glob
            else:
                self._global[k] = gids

    def _owned_global_ids(self) -> dict:
        """Global ids of the owned k-simplices, k >= 1: their positions in the
        lexicographic order of all k-simplices written with global vertex
        ids. Collective on ``comm``: one :func:`dmsolve.bsp.rank_of` per
        dimension. Where vertex ids fit ``PACKED_ID_BITS`` bits, a simplex
        sorts as one or two int64 words, ``v0 v1`` and ``v2 v3`` side by side
        in fields of the ids' width (the same order as its rows, fewer
        columns to sort). Each dimension is sorted on its own, so that
        simplices given near their place in the order (a slab stack) stay
        on their rank."""
        bits = max(1, int(self.num_vertices - 1).bit_length())
        out = {}
        for k in range(1, self.dimension + 1):
            r = self._user_rows(self._local[k][slice(*self._owned[k])])
            if bits <= PACKED_ID_BITS:
                key = np.zeros((r.shape[0], 1 if k == 1 else 2), dtype=np.int64)
                key[:, 0] = (r[:, 0] << bits) | r[:, 1]
                if k >= 2:
                    key[:, 1] = r[:, 2] << bits
                if k >= 3:
                    key[:, 1] |= r[:, 3]
                r = key if k > 1 else key[:, 0]
            out[k] = rank_of(r, self.comm)
        return out

    def _renumber_tops(self, tops: dict, part, block_pts) -> tuple[dict, np.ndarray | None]:
        """The top simplices in layout indices, and this rank's share of the
        two directions of the renumbering; the owned vertices' points (in
        layout order) from this rank's block rows ``block_pts`` (or None).
        Collective on ``comm``: two BSP supersteps, O(local simplices +
        local vertices) memory."""
        comm = self.comm
        blk = Layout.block(self.num_vertices, comm)       # part.old_layout's ranges
        new_of = np.asarray(part.local_new_index, dtype=np.int64)
        self.vertex_layout = vl = part.new_layout
        ctx = BSP(comm)
        tag = ctx.tags("ask", "own", "answer", "points")
        # the layout indices of the vertices of the local top simplices, asked
        # of the block owners of their global ids
        used = [a.ravel() for a in tops.values()]
        u = sorted_unique(np.concatenate(used)) if used else np.zeros(0, np.int64)
        ctx.send_rows(blk.owner(u) if u.size else np.zeros(0, np.int64), u, tag=tag.ask)
        # and the global id of every layout index, to its owner
        gid = np.arange(blk.start, blk.stop, dtype=np.int64)
        dest = vl.owner(new_of) if new_of.size else np.zeros(0, np.int64)
        ctx.send_rows(dest, np.column_stack((new_of, gid)), tag=tag.own)
        if block_pts is not None:           # the coordinates go with the vertices
            ctx.send_rows(dest, block_pts, tag=tag.points)
        inbox = ctx.sync("complex:renumber-ask")
        got = inbox.concat(tag.own, dtype=np.int64, shape=(2,))
        self._own_gid = np.empty(vl.local_size, dtype=np.int64)
        self._own_gid[got[:, 0] - vl.start] = got[:, 1]
        own_pts = None
        if block_pts is not None:
            own_pts = np.empty((vl.local_size, block_pts.shape[1]))
            own_pts[got[:, 0] - vl.start] = inbox.concat(tag.points, dtype=np.float64,
                                                         shape=block_pts.shape[1:])
        for src, q in inbox.messages(tag.ask):
            ctx.send(src, new_of[q - blk.start], tag=tag.answer)
        # the answers arrive in source order, i.e. in the (ascending) order of u
        new_u = ctx.sync("complex:renumber-answer").concat(tag.answer, dtype=np.int64)
        return ({k: np.sort(new_u[np.searchsorted(u, a)], axis=1) for k, a in tops.items()},
                own_pts)

    def _user_rows(self, rows: np.ndarray) -> np.ndarray:
        """Rows of internal vertex numbers written with global vertex ids, sorted."""
        return rows if not self._renumbered else np.sort(self.layout_to_global(rows), axis=1)

    # -- properties (never communicate) ----------------------------------------------
    @property
    def global_num_vertices(self) -> int:
        """Number of vertices over all ranks (:attr:`num_vertices`)."""
        return self.num_vertices

    @property
    def local_num_vertices(self) -> int:
        """Number of vertices this rank owns."""
        return self.vertex_layout.local_size

    @property
    def renumbered(self) -> bool:
        """Whether global vertex ids differ from the layout indices (under
        ``"metis"`` or ``"rcb"``; see the class Notes)."""
        return self._renumbered

    @property
    def halo(self) -> NeighborExchange:
        """The ghost-vertex exchange plan (float64 entries)."""
        return self._halo

    @property
    def stencil(self) -> None:
        """None: the simplices are stored explicitly (see :class:`Domain`)."""
        return None

    @property
    def is_ball(self) -> bool:
        """False: a complex's homology is not known in advance."""
        return False

    # -- numbering (not collective) ---------------------------------------------------------
    def layout_to_global(self, index: np.ndarray) -> np.ndarray:
        """Global vertex ids of vertex layout indices (any shape; the same
        array when not :attr:`renumbered`). Not collective. When
        :attr:`renumbered`, each rank knows the vertices it holds (owned and
        ghost, :meth:`ghosted_ids`); another index raises ``ValueError`` (on
        this rank: use :meth:`global_ids_of` for indices known on every rank)."""
        index = np.asarray(index)
        if not self._renumbered or index.size == 0:
            return index
        out = lookup(self._ids, None, self._global[0], index)
        if np.any(out < 0):
            raise ValueError("vertex layout index %d is not held by rank %d"
                             % (index.ravel()[np.argmax(out.ravel() < 0)], self.comm.Get_rank()))
        return out

    def global_to_layout(self, gids: np.ndarray) -> np.ndarray:
        """Vertex layout indices of global vertex ids (any shape; the same
        array when not :attr:`renumbered`). Not collective. When
        :attr:`renumbered`, only the vertices this rank holds (owned and
        ghost) are known; another id raises ``ValueError`` on this rank."""
        gids = np.asarray(gids)
        if not self._renumbered or gids.size == 0:
            return gids
        out = self._held_layout(gids)
        if np.any(out < 0):
            raise ValueError("global vertex id %d is not held by rank %d"
                             % (gids.ravel()[np.argmax(out.ravel() < 0)], self.comm.Get_rank()))
        return out

    def _held_layout(self, gids: np.ndarray) -> np.ndarray:
        """Layout indices of global vertex ids held here, -1 for the others.
        Not collective."""
        gids = np.asarray(gids, dtype=np.int64)
        if not self._renumbered:
            return gids
        return lookup(self._global[0], self._gid_order, self._ids, gids)

    # -- numbering (collective) ---------------------------------------------------------
    def global_ids_of(self, index) -> np.ndarray:
        """Global vertex ids of vertex layout indices given identically on
        every rank (e.g. the vertices of a replicated diagram). Collective on
        ``comm`` when :attr:`renumbered` (one ``Allreduce`` of ``index.size``
        words: each owner fills in its vertices); not collective otherwise."""
        index = np.asarray(index, dtype=np.int64)
        if not self._renumbered:
            return index
        vl = self.vertex_layout
        out = np.zeros(index.shape, dtype=np.int64)
        mine = vl.is_local(index) if index.size else np.zeros(index.shape, bool)
        out[mine] = self._own_gid[index[mine] - vl.start]
        if self.comm.Get_size() > 1:
            self.comm.Allreduce(MPI.IN_PLACE, out, op=MPI.SUM)
        return out

    # -- layouts and summary (not collective) --------------------------------------------------
    def simplex_layout(self, k: int) -> Layout:
        """Layout of the k-simplices (k-cochains are DistVectors on it). Not collective."""
        if k not in self._layouts:
            return Layout.block(0, self.comm)
        return self._layouts[k]

    def __repr__(self) -> str:
        return "SimplicialComplex(dimension=%d, vertices=%d, counts=%s)" % (
            self.dimension, self.num_vertices,
            [self.simplex_layout(k).global_size for k in range(self.dimension + 1)])

    # -- global views (collective) ------------------------------------------------------
    def simplices(self, k: int) -> np.ndarray:
        """All k-simplices as sorted vertex ids, row ``i`` the simplex with
        global id ``i``, on every rank. Collective on ``comm``; a ``k`` that
        is not an integer >= 0 raises ``ValueError`` on every rank."""
        with agreed(self.comm):
            if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 0:
                raise ValueError("k must be an integer >= 0, got %r" % (k,))
        if k == 0:
            return np.arange(self.num_vertices, dtype=np.int64).reshape(-1, 1)
        if k not in self._local:
            return np.zeros((0, k + 1), dtype=np.int64)
        i0, i1 = self._owned[k]
        if not self._renumbered:
            parts = self.comm.allgather(self._local[k][i0:i1])
            return np.concatenate(parts).reshape(-1, k + 1)
        parts = self.comm.allgather((self._global[k][i0:i1],
                                     self._user_rows(self._local[k][i0:i1])))
        out = np.empty((self.simplex_layout(k).global_size, k + 1), dtype=np.int64)
        for g, r in parts:
            out[g] = r
        return out

    def gather_global(self, vector: DistVector, k: int = 0, root: int | None = None):
        """The entries of a DistVector on :meth:`simplex_layout` ``(k)`` as one
        array indexed by global id (on every rank, or on ``root`` only).
        Under a block partition this is ``vector.gather(root)``. Collective
        on ``comm``."""
        if not self._renumbered:
            return vector.gather(root)
        g = self.owned_global_ids(k)
        parts = (self.comm.allgather((g, vector.local)) if root is None
                 else self.comm.gather((g, vector.local), root=root))
        if parts is None:
            return None
        out = np.empty(vector.global_size, dtype=vector.dtype)
        for gi, v in parts:
            out[gi] = v
        return out

    def counts(self) -> list[int]:
        """Number of simplices of each dimension. Not collective."""
        return [self.simplex_layout(k).global_size for k in range(self.dimension + 1)]

    # -- local structure (not collective) ---------------------------------------------------
    def local_simplices(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, indices)`` of the k-simplices this rank holds (owned and
        ghost), rows sorted: vertex layout indices and the simplices' layout
        indices, which are the global ids under a block partition (see the
        class Notes; :meth:`global_ids` gives the global ids). Not collective."""
        if k == 0:
            return self._ids.reshape(-1, 1), self._ids
        if k not in self._local:
            return np.zeros((0, k + 1), np.int64), np.zeros(0, np.int64)
        return self._local[k], self._gids[k]

    def global_ids(self, k: int = 0) -> np.ndarray:
        """Rank-independent global ids of the local k-simplices, aligned with
        ``local_simplices(k)`` (for ``k = 0`` with :meth:`ghosted_ids`). They
        equal the layout indices under a block partition. Not collective."""
        if k not in self._global:
            return np.zeros(0, np.int64)
        return self._global[k]

    def owned_global_ids(self, k: int = 0) -> np.ndarray:
        """Global ids of this rank's entries of a DistVector on
        :meth:`simplex_layout` ``(k)``, in layout order. Not collective."""
        if k == 0:
            return self._global[0][self._own_pos]
        return self.global_ids(k)[self.owned_slice(k)]

    def owned_slice(self, k: int) -> slice:
        """Rows of :meth:`local_simplices` that this rank owns. Not collective."""
        if k == 0:
            return slice(None)  # not contiguous among ghosts; use owned_positions
        i0, i1 = self._owned.get(k, (0, 0))
        return slice(i0, i1)

    def ghosted_ids(self) -> np.ndarray:
        """Layout indices of owned and ghost vertices, ascending (the global
        ids under a block partition; see :meth:`global_ids`). Not collective."""
        return self._ids

    def owned_positions(self) -> np.ndarray:
        """Positions of the owned vertices in :meth:`ghosted_ids`. Not collective."""
        return self._own_pos

    def local_simplex_positions(self, k: int) -> np.ndarray:
        """Local k-simplices with vertices as positions in :meth:`ghosted_ids`.
        Not collective."""
        rows, _ = self.local_simplices(k)
        return np.searchsorted(self._ids, rows)

    def local_edges(self) -> tuple[np.ndarray, np.ndarray]:
        """Local edges as pairs of positions in :meth:`ghosted_ids`. Not collective."""
        e = self.local_simplex_positions(1)
        return e[:, 0], e[:, 1]

    # -- fields -----------------------------------------------------------------------------
    def vertex_values(self, values, name: str = "values", *, axes: str | None = None
                      ) -> DistVector:
        """A vertex field as a float64 DistVector on :attr:`vertex_layout`
        (from a DistVector on it, or the full global array indexed by global
        vertex id). ``axes`` (the axis order of a Grid field) must be None:
        a complex's fields are flat. Collective on ``comm``."""
        if axes is not None:
            with agreed(self.comm):
                raise ValueError("axes describes the axis order of a field on a Grid; a "
                                 "complex's fields are flat, indexed by global vertex id")
        return self.cochain(values, 0, name)

    def cochain(self, values, k: int, name: str = "flow") -> DistVector:
        """A k-cochain (e.g. an edge flow for k = 1) as a float64 DistVector on
        :meth:`simplex_layout` (from a DistVector on it, or the full global
        array indexed by global id). Collective on ``comm``."""
        lay = self.simplex_layout(k)
        if self._renumbered and not isinstance(values, DistVector):
            arr = np.asarray(values)
            if arr.ndim == 1 and arr.shape[0] == lay.global_size:
                values = DistVector(lay, arr[self.owned_global_ids(k)])
        return as_vertex_vector(values, lay, name)

    def ghosted(self, owned: np.ndarray) -> np.ndarray:
        """Owned vertex entries plus the ghost vertices', in :meth:`ghosted_ids`
        order. Collective among neighbouring ranks."""
        owned = np.ascontiguousarray(owned)
        key = owned.dtype.str
        halo = self._halos.get(key)
        if halo is None:
            h = self._halo
            halo = self._halos[key] = NeighborExchange(
                self.comm, h.send_ranks,
                np.split(h.send_index, np.cumsum(h.send_counts)[:-1]) if h.send_counts.size
                else [], h.recv_ranks, h.recv_counts, dtype=owned.dtype, name="complex-ghosts")
        out = np.empty(self._ids.size, dtype=owned.dtype)
        out[self._own_pos] = owned
        out[self._ghost_pos] = halo.exchange(owned)
        return out

    def owned_boundary_vertices(self) -> np.ndarray:
        """Whether each owned vertex lies on a boundary facet (a
        (d-1)-simplex with exactly one d-coface, d the dimension). Not
        collective: the star of an owned vertex is complete on this rank."""
        d = self.dimension
        out = np.zeros(self.vertex_layout.local_size, dtype=bool)
        if d < 1:
            return out
        facets = self._local[d - 1] if d - 1 >= 1 else self._ids.reshape(-1, 1)
        tops = self._local[d]
        count = np.zeros(facets.shape[0], dtype=np.int64)
        for cols in itertools.combinations(range(d + 1), d):
            pos = search_rows(facets, tops[:, cols], self.num_vertices)
            np.add.at(count, pos, 1)
        ends = facets[count == 1].ravel()
        ends = ends[self.vertex_layout.is_local(ends)]
        out[ends - self.vertex_layout.start] = True
        return out

    def link_components(self, ghosted_order: np.ndarray):
        """Lower/upper link component counts of the owned vertices, from one
        connected-components pass over the link graphs of all of them at
        once; in 3D also the boundary flags TTK's classification needs (see
        :class:`Domain`). Collective among neighbouring ranks in 3D (one
        ghost exchange of boundary flags), else not collective.
        """
        from scipy.sparse.csgraph import connected_components as _cc
        order = ghosted_order
        n_loc = order.size
        own_pos = self.owned_positions()
        n_own = own_pos.size
        is_own = np.zeros(n_loc, dtype=bool)
        is_own[own_pos] = True
        E = self.local_simplex_positions(1)
        T = self.local_simplex_positions(2) if self.dimension >= 2 else np.zeros((0, 3), np.int64)
        # half-edges v -> u out of owned vertices v: the link vertices of v
        src = np.concatenate((E[:, 0], E[:, 1]))
        dst = np.concatenate((E[:, 1], E[:, 0]))
        keep = is_own[src]
        src, dst = src[keep], dst[keep]
        key = src * n_loc + dst
        o = np.argsort(key)
        src, dst, key = src[o], dst[o], key[o]
        # link edges u - w of v, one per triangle (v, u, w) with v owned
        a, b = [], []
        for i in range(3):
            v, u, w = T[:, i], T[:, (i + 1) % 3], T[:, (i + 2) % 3]
            m = is_own[v]
            a.append(np.searchsorted(key, v[m] * n_loc + u[m]))
            b.append(np.searchsorted(key, v[m] * n_loc + w[m]))
        a = np.concatenate(a) if a else np.zeros(0, np.int64)
        b = np.concatenate(b) if b else np.zeros(0, np.int64)
        is_lower = order[dst] < order[src]
        same = is_lower[a] == is_lower[b]   # lower-lower or upper-upper link edges
        nh = src.size
        g = sp.coo_matrix((np.ones(int(same.sum())), (a[same], b[same])), shape=(nh, nh))
        ncomp, label = _cc(g, directed=False)
        # every component lies in one vertex's link and on one side
        first = np.full(ncomp, -1, dtype=np.int64)
        first[label[::-1]] = np.arange(nh - 1, -1, -1)
        comp_src = src[first]
        comp_lower = is_lower[first]
        rank_of = np.full(n_loc, -1, dtype=np.int64)
        rank_of[own_pos] = np.arange(n_own)
        L = np.bincount(rank_of[comp_src[comp_lower]], minlength=n_own)
        U = np.bincount(rank_of[comp_src[~comp_lower]], minlength=n_own)
        if self.dimension < 3:
            return L, U, None, None, None
        onb_own = self.owned_boundary_vertices()
        onb = self.ghosted(onb_own.astype(np.int64)).astype(bool)
        lb = np.zeros(n_loc, dtype=bool)
        ub = np.zeros(n_loc, dtype=bool)
        np.logical_or.at(lb, src, is_lower & onb[dst])
        np.logical_or.at(ub, src, ~is_lower & onb[dst])
        return L, U, onb_own, lb[own_pos], ub[own_pos]

    @property
    def has_points(self) -> bool:
        """Whether the vertices have coordinates (``points`` or
        ``local_points`` given). Not collective."""
        return self.points is not None or self._held_points is not None

    def vertex_coordinates(self, gids) -> np.ndarray:
        """Coordinates of vertices given by global id, padded or cut to
        shape (n, 3); without points, ``(id, 0, 0)``. Not collective. From
        ``local_points`` each rank knows the vertices it holds (owned and
        ghost, :meth:`ghosted_ids`); another id raises ``ValueError`` on
        this rank."""
        gids = np.asarray(gids, dtype=np.int64).ravel()
        if self.points is not None:
            return points3(self.points[gids])
        if self._held_points is not None:
            idx = self.global_to_layout(gids)     # raises for one not held, renumbered
            at = np.searchsorted(self._ids, idx)
            held = at < self._ids.size
            held[held] = self._ids[at[held]] == idx[held]
            if not held.all():
                raise ValueError("global vertex id %d is not held by rank %d"
                                 % (gids[np.argmin(held)], self.comm.Get_rank()))
            return points3(self._held_points[at])
        return points3(gids.astype(np.float64).reshape(-1, 1))

    def mesh(self, root: int = 0):
        """``(points, cell type, cells)`` of the top simplices on ``root``,
        None elsewhere: points as given (a third zero coordinate added to 2D
        points; zeros without points), cells as global vertex ids.
        Collective on ``comm`` (gathers the top simplices to every rank).
        """
        d = self.dimension
        cells = self.simplices(d)
        points = self.points
        if self._held_points is not None:   # each owner's rows, placed by global id
            parts = self.comm.gather((self.owned_global_ids(0),
                                      self._held_points[self._own_pos]), root=root)
            if parts is not None:
                points = np.empty((self.num_vertices, self._held_points.shape[1]))
                for g, x in parts:
                    points[g] = x
        if self.comm.Get_rank() != root:
            return None
        kind = self.mesh_cell_type
        if points is None:
            points = np.zeros((self.num_vertices, 3))
        elif points.shape[1] == 2:
            points = np.column_stack((points, np.zeros(len(points))))
        return points, kind, cells

    # -- top cells, for output (not collective) ---------------------------------------------
    @property
    def mesh_cell_type(self) -> str:
        """meshio's name of the top simplices: ``"vertex"``, ``"line"``,
        ``"triangle"`` or ``"tetra"``."""
        return {0: "vertex", 1: "line", 2: "triangle", 3: "tetra"}[self.dimension]

    @property
    def global_num_cells(self) -> int:
        """Number of top simplices."""
        return self.simplex_layout(self.dimension).global_size

    def top_cell_layout(self) -> Layout:
        """The layout of the top simplices (cell fields are DistVectors on it).
        Not collective."""
        return self.simplex_layout(self.dimension)

    def local_top_cells(self) -> tuple[np.ndarray, np.ndarray]:
        """``(positions, global ids)`` of the owned top simplices: rows of
        positions in :meth:`ghosted_ids`, their vertices sorted by global id
        as :meth:`simplices` has them. Not collective."""
        d = self.dimension
        if d == 0:
            return self.owned_positions().reshape(-1, 1), self.owned_global_ids(0)
        mine = self.owned_slice(d)
        cellpos = self.local_simplex_positions(d)[mine]
        gids = self.global_ids(0)
        cellpos = np.take_along_axis(cellpos, np.argsort(gids[cellpos], axis=1), axis=1)
        return cellpos, self.global_ids(d)[mine]
