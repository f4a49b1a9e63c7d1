"""Persistence diagrams of the lower-star filtration of a vertex field: the
distributed :class:`PersistenceDiagram` and :func:`persistence_diagram`,
whose parts the domain's kind computes (``_parts``: the sweeps, the saddle
pairs, the Morse complex; ``_manifold``: a complex's checks and essential
classes)."""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from dmsolve import Progress, agree
from dmsolve.io import atomic_path, check_writable
from dmsolve.threads import resolve, using
from dmsolve.validate import agreed, check_int, check_real

from ..core import check_domain, check_pvtu_path, vtk_type, write_parallel

__all__ = ["persistence_diagram", "PersistenceDiagram"]

#: TTK's critical type codes of the two ends of a pair of dimension k in a
#: d-dimensional domain: birth k, death k+1 (the top one is "maximum", 3)
_MAXIMUM = 3


def _ttk_type(k, d):
    return k if k < d else _MAXIMUM


class PersistenceDiagram:
    """The persistence pairs of a lower-star filtration, spread over the ranks.

    Each rank holds one block of the diagram sorted by ``(dim, birth_vertex,
    death_vertex)``: :attr:`local_pairs`. :meth:`gather` puts the whole
    diagram on one rank or on every rank (collective); on one rank, or
    once gathered, the diagram is *complete* and :attr:`pairs`,
    :meth:`finite` and :meth:`essential` read it. On a distributed diagram
    they raise ``RuntimeError`` rather than answer with a part.

    Attributes
    ----------
    dimension : int
        Dimension of the domain (2 or 3).
    dims : tuple of int
        The dimensions the diagram can have pairs in, the keys of
        :attr:`report`: ``0 .. dimension - 1`` on a domain that is a ball
        (a grid, Freudenthal or cubical: its sublevel sets have no
        ``dimension``-classes), ``0 .. dimension`` on a simplicial complex
        (a closed surface or volume has an essential top class).
    local_pairs : dict of arrays
        This rank's kept pairs, all dimensions together: ``dim`` (int),
        ``birth``, ``death`` (float, ``inf`` for essential classes),
        ``birth_vertex``, ``death_vertex`` (global vertex ids, -1 for the
        death of an essential class). Finite pairs are kept when ``death -
        birth > min_persistence``; essential classes always.
    local_raw_pairs : dict of arrays
        The same fields for this rank's share of every vertex-level pair the
        algorithms found, before any threshold (zero-persistence pairs from
        ties included).
    complete : bool
        Whether this rank holds the whole diagram.
    min_persistence : float
    report : dict
        Per dimension of :attr:`dims`, over the whole diagram: ``pairs`` (vertex-level pairs
        found), ``nonzero`` (death > birth), ``kept`` (persistence above
        ``min_persistence``) and ``essential``.
    missing : list of str
        Parts that could not be computed; empty, since every part of a 2D
        or 3D diagram is (kept for callers that check it).

    Notes
    -----
    Attributes and accessors are not collective; :meth:`gather`,
    ``write_csv``, ``write_vtu`` (rank 0 writes) and ``write_pvtu`` (one
    piece per rank) are, and their errors are agreed.
    """

    _FIELDS = ("dim", "birth", "death", "birth_vertex", "death_vertex")

    def __init__(self, comm, dimension, raw, min_persistence, missing, *, dims,
                 complete=None):
        self.comm = comm
        self.dimension = dimension
        self.dims = tuple(dims)
        self.local_raw_pairs = raw
        self.min_persistence = float(min_persistence)
        self.missing = list(missing)
        self.complete = comm.Get_size() == 1 if complete is None else bool(complete)
        fin = np.isfinite(raw["death"])
        pers = np.where(fin, raw["death"] - raw["birth"], np.inf)
        keep = ~fin | (pers > self.min_persistence)
        self.local_pairs = {k: v[keep] for k, v in raw.items()}
        counts = np.zeros((len(self.dims), 4), np.int64)
        for i, d in enumerate(self.dims):
            m = raw["dim"] == d
            counts[i] = (np.count_nonzero(m & fin), np.count_nonzero(m & fin & (pers > 0)),
                         np.count_nonzero(m & fin & keep), np.count_nonzero(m & ~fin))
        if not self.complete:
            comm.Allreduce(MPI.IN_PLACE, counts, op=MPI.SUM)
        self.report = {d: dict(zip(("pairs", "nonzero", "kept", "essential"),
                                   map(int, counts[i]))) for i, d in enumerate(self.dims)}

    def __repr__(self) -> str:
        parts = ["D%d: %d (+%d essential)" % (d, r["kept"], r["essential"])
                 for d, r in self.report.items()]
        return "PersistenceDiagram(%s%s)" % (", ".join(parts), "" if self.complete else
                                             ", distributed over %d ranks"
                                             % self.comm.Get_size())

    def _whole(self, what):
        if not self.complete:
            raise RuntimeError(
                "%s needs the whole diagram, and this one is distributed over %d ranks: call "
                "gather() (collective) first, or read local_pairs" % (what, self.comm.Get_size()))

    @property
    def pairs(self) -> dict:
        """The kept pairs of the whole diagram (see :attr:`local_pairs`).
        Not collective; ``RuntimeError`` unless :attr:`complete`."""
        self._whole("pairs")
        return self.local_pairs

    @property
    def raw_pairs(self) -> dict:
        """Every pair found, of the whole diagram (see :attr:`local_raw_pairs`).
        Not collective; ``RuntimeError`` unless :attr:`complete`."""
        self._whole("raw_pairs")
        return self.local_raw_pairs

    def gather(self, root: int | None = None) -> "PersistenceDiagram | None":
        """The whole diagram on every rank (``root=None``) or on ``root``
        (``None`` elsewhere), sorted by ``(dim, birth_vertex, death_vertex)``.

        Collective on ``comm`` (one ``Gatherv``/``Allgatherv`` per field); the
        gathered diagram holds ``sum(report[d]["pairs"] + ...)`` rows on the
        ranks that receive it. A complete diagram is returned as it is.
        """
        with agreed(self.comm):
            if root is not None:
                root = check_int("root", root, low=0, high=self.comm.Get_size() - 1)
        if self.complete:
            return self
        raw = {k: gatherv(self.comm, v, root) for k, v in self.local_raw_pairs.items()}
        if root is not None and self.comm.Get_rank() != root:
            return None
        return PersistenceDiagram(self.comm, self.dimension, raw, self.min_persistence,
                                  self.missing, dims=self.dims, complete=True)

    def finite(self, d: int) -> np.ndarray:
        """``(k, 2)`` array of the kept finite ``(birth, death)`` pairs of
        dimension ``d``, death > birth, sorted. Not collective;
        ``RuntimeError`` unless :attr:`complete`."""
        self._whole("finite()")
        p = self.local_pairs
        m = (p["dim"] == d) & np.isfinite(p["death"])
        out = np.column_stack((p["birth"][m], p["death"][m]))
        return out[np.lexsort((out[:, 1], out[:, 0]))] if out.size else out.reshape(0, 2)

    def essential(self, d: int) -> np.ndarray:
        """Births of the infinite classes of dimension ``d``, sorted. Not
        collective; ``RuntimeError`` unless :attr:`complete`."""
        self._whole("essential()")
        p = self.local_pairs
        return np.sort(p["birth"][(p["dim"] == d) & ~np.isfinite(p["death"])])

    def describe(self) -> str:
        """The simplification report as text (the whole diagram's counts).
        Not collective."""
        lines = ["persistence > %g:" % self.min_persistence]
        for d, r in self.report.items():
            lines.append("  D%d: %d vertex pairs, %d with death > birth, %d kept, %d essential"
                         % (d, r["pairs"], r["nonzero"], r["kept"], r["essential"]))
        for m in self.missing:
            lines.append("  missing: %s" % m)
        return "\n".join(lines)

    def write_csv(self, path) -> None:
        """The kept pairs as CSV (``dimension,birth,death,birth_vertex,
        death_vertex``; ``inf`` deaths for essential classes), gathered to
        and written on rank 0. Collective on ``comm``.

        Raises
        ------
        TypeError, ValueError
            On every rank, if ``path`` is not a non-empty path.
        OSError
            On every rank, if the file cannot be written (the file is
            written to a temporary moved into place: a failed write leaves
            the previous file as it was, and no temporary).
        """
        path = check_writable(path, self.comm)
        whole = self.gather(root=0)
        exc = None
        if self.comm.Get_rank() == 0:
            p = whole.pairs
            try:
                with atomic_path(path) as tmp, open(tmp, "w") as f:
                    f.write("dimension,birth,death,birth_vertex,death_vertex\n")
                    for row in zip(*(p[k].tolist() for k in self._FIELDS)):
                        f.write("%d,%.17g,%.17g,%d,%d\n" % row)
            except Exception as e:  # noqa: BLE001 - agreed, never on rank 0 alone
                exc = OSError("cannot write %s: %s" % (path, e))
        agree(self.comm, exc)

    def write_vtu(self, path, domain) -> None:
        """The critical vertices of the kept pairs as a VTU point cloud, one
        point per end of each pair, with TTK's array names: ``CriticalType``
        (0 minimum, 1 1-saddle, 2 2-saddle, 3 maximum), ``PairIdentifier``,
        ``PairType`` (the dimension), ``Persistence`` (``-1`` for essential
        classes), ``IsFinite``, ``Scalar`` and ``ttkVertexScalarField`` (the
        global vertex id). Gathered to and written on rank 0; collective on
        ``comm``. :meth:`write_pvtu` writes one piece per rank instead.

        Raises
        ------
        TypeError
            On every rank, if ``domain`` is not a Grid or SimplicialComplex
            or ``path`` is not a path.
        ValueError
            On every rank, if ``domain`` is not the diagram's (another
            communicator or dimension, or fewer vertices than the pairs name).
        OSError
            On every rank, if the file cannot be written (the file is
            written to a temporary moved into place: a failed write leaves
            the previous file as it was, and no temporary).
        """
        import meshio
        self._check_domain(domain)
        path = check_writable(path, self.comm)
        whole = self.gather(root=0)
        exc = None
        if self.comm.Get_rank() == 0:
            vid, data = _point_cloud(whole.local_pairs, self.dimension, 0, 0, None)
            try:
                points = domain.vertex_coordinates(vid)
                cells = [("vertex", np.arange(vid.size, dtype=np.int64).reshape(-1, 1))]
                with atomic_path(path) as tmp:
                    meshio.Mesh(points, cells, point_data=data).write(tmp, file_format="vtu")
            except Exception as e:  # noqa: BLE001 - agreed, never on rank 0 alone
                exc = OSError("cannot write %s: %s: %s" % (path, type(e).__name__, e))
        agree(self.comm, exc)

    def write_pvtu(self, path, domain) -> None:
        """The points of :meth:`write_vtu` as a parallel VTU: rank ``r``
        writes the ends of its block of pairs (:attr:`local_pairs`) to the
        piece ``<stem>/<stem>_r.vtu`` beside ``path`` (which ends in
        ``.pvtu``), rank 0 the index ``path`` (the layout of
        :func:`topology.io.write_pvtu`).

        Each point is one ``vertex`` cell, with the arrays of
        :meth:`write_vtu` and ``GlobalPointIds`` = ``GlobalCellIds`` = the
        point's row in :meth:`write_vtu`'s file (births of all kept pairs,
        then deaths of the finite ones), so pieces can be matched; pairs
        are numbered as in the gathered diagram (``PairIdentifier``).

        Collective on ``comm``: the checks, two prefix sums of the kept
        counts, then four small agreements (see
        :func:`topology.io.write_pvtu`). Nothing is gathered.

        Raises
        ------
        TypeError, ValueError
            As :meth:`write_vtu`; ``ValueError`` also if ``path`` does not end
            in ``.pvtu``.
        OSError
            On every rank, if ``path`` cannot be written, or any rank cannot
            write its piece (rank 0 the index).
        """
        self._check_domain(domain)
        with agreed(self.comm):
            path = check_pvtu_path(path)
        path = check_writable(path, self.comm)
        p = self.local_pairs
        fin = np.isfinite(p["death"])
        if self.complete:
            first_pair, first_death, total = 0, 0, fin.size
            if self.comm.Get_rank() != 0:       # a replicated diagram: rank 0 writes it
                p = {k: v[:0] for k, v in p.items()}
                fin = fin[:0]
        else:
            counts = np.array([fin.size, int(fin.sum())], np.int64)
            before = np.zeros(2, np.int64)
            self.comm.Exscan(counts, before)
            if self.comm.Get_rank() == 0:
                before[:] = 0
            total = self.comm.allreduce(int(fin.size), op=MPI.SUM)
            first_pair, first_death = int(before[0]), int(before[1])
        vid, data = _point_cloud(p, self.dimension, first_pair, first_death, total)
        rows = np.concatenate((first_pair + np.arange(fin.size),
                               total + first_death + np.arange(int(fin.sum())))).astype(np.int64)
        write_parallel(self.comm, path, domain.vertex_coordinates(vid), "vertex",
                       np.arange(vid.size, dtype=np.int64).reshape(-1, 1), data, {},
                       point_ids=rows, cell_ids=rows, ghost=None,
                       point_arrays=[(k, vtk_type(v.dtype), 1) for k, v in data.items()],
                       cell_arrays=[])

    def _check_domain(self, domain) -> None:
        """Refuse a domain that is not the diagram's, on every rank. Collective on ``comm``."""
        check_domain(domain)
        p = self.local_pairs
        top = max(int(p["birth_vertex"].max(initial=-1)), int(p["death_vertex"].max(initial=-1)))
        if not self.complete:
            top = self.comm.allreduce(top, op=MPI.MAX)
        with agreed(self.comm):
            if domain.comm is not self.comm and MPI.Comm.Compare(domain.comm, self.comm) \
                    not in (MPI.IDENT, MPI.CONGRUENT):
                raise ValueError("domain is on another communicator than the diagram")
            if domain.dimension != self.dimension:
                raise ValueError("domain has dimension %d, the diagram %d"
                                 % (domain.dimension, self.dimension))
            if top >= domain.global_num_vertices:
                raise ValueError("the diagram names vertex %d; domain has %d vertices"
                                 % (top, domain.global_num_vertices))


def _point_cloud(p, dimension, first_pair, first_death, total) -> tuple[np.ndarray, dict]:
    """``(vertex ids, TTK's arrays)`` of the points of a block of kept pairs
    ``p`` (the whole diagram for :meth:`PersistenceDiagram.write_vtu`):
    births, then deaths of the finite pairs; pair ``i`` of the block is pair
    ``first_pair + i`` of the diagram. Not collective."""
    fin = np.isfinite(p["death"])
    pid = first_pair + np.arange(p["dim"].size)
    vid = np.concatenate((p["birth_vertex"], p["death_vertex"][fin]))
    ctype = np.concatenate(([_ttk_type(k, dimension) for k in p["dim"].tolist()],
                            [_ttk_type(k + 1, dimension) for k in p["dim"][fin].tolist()]))
    pers = np.where(fin, p["death"] - p["birth"], -1.0)
    data = {
        "CriticalType": np.asarray(ctype, dtype=np.int32),
        "PairIdentifier": np.concatenate((pid, pid[fin])).astype(np.int32),
        "PairType": np.concatenate((p["dim"], p["dim"][fin])).astype(np.int32),
        "Persistence": np.concatenate((pers, pers[fin])),
        "IsFinite": np.concatenate((fin, fin[fin])).astype(np.int8),
        "Scalar": np.concatenate((p["birth"], p["death"][fin])),
        "ttkVertexScalarField": vid.astype(np.int64),
    }
    return vid.astype(np.int64), data


def gatherv(comm, arr: np.ndarray, root: int | None) -> np.ndarray | None:
    """The concatenation over ranks (in rank order) of a 1-D array: on every
    rank (``root=None``, ``Allgatherv``) or on ``root`` (``Gatherv``; None
    elsewhere). Collective on ``comm``."""
    arr = np.ascontiguousarray(arr)
    counts = np.array(comm.allgather(arr.size), np.int64) if root is None else \
        comm.gather(arr.size, root=root)
    if root is None:
        out = np.empty(int(counts.sum()), arr.dtype)
        comm.Allgatherv(arr, [out, counts])
        return out
    if comm.Get_rank() == root:
        counts = np.asarray(counts, np.int64)
        out = np.empty(int(counts.sum()), arr.dtype)
        comm.Gatherv(arr, [out, counts], root=root)
        return out
    comm.Gatherv(arr, None, root=root)
    return None


def persistence_diagram(domain, values, *, min_persistence: float = 0.0,
                        axes: str | None = None, progress=None,
                        threads: int | None = None) -> PersistenceDiagram:
    """The persistence diagram of the lower-star filtration of ``values``.

    Parameters
    ----------
    domain : Grid or SimplicialComplex
        A 2D or 3D grid, TTK's Freudenthal triangulation or, with
        ``complex="cubical"``, its cubical complex (pixels and voxels, as gudhi's
        ``CubicalComplex(vertices=...)``); or a triangle or tetrahedral mesh,
        whose D(d-1) needs a manifold (every (d-1)-simplex a face of one or two
        d-simplices, no dangling lower simplices).
    values : DistVector on ``domain.vertex_layout``, or the global array
    min_persistence : float
        Finite pairs are kept when ``death - birth > min_persistence``
        (gudhi's convention); the default drops only zero-persistence pairs.
        All pairs stay in :attr:`PersistenceDiagram.raw_pairs`.
    axes : str, optional
        The axis order of a 2-D/3-D ``values`` array on a Grid, as for
        :func:`critical_points`.
    progress : None, True or callable
        Report each phase with its time since the start (see
        :class:`dmsolve.Progress`; task ``"persistence"``): ``"global
        order"``, ``"D0"``, ``"D<d-1>"`` (the reversed sweep), on a 3D
        complex ``"discrete gradient"`` and ``"D1"`` (saddle-saddle pairs)
        and ``"essential classes"``; on a 3D grid ``"global order"``,
        ``"discrete gradient"``, ``"D0"``, ``"D1"``, ``"D2"`` (all from the
        Morse complex), each message saying what it found; on a 2D cubical
        grid ``"D0"``, ``"D1"``. ``True`` prints them on rank 0; a callable
        ``progress(task, message, seconds)`` gets them on every rank.

    Returns
    -------
    PersistenceDiagram
        Distributed: each rank holds one block of the pairs sorted by ``(dim,
        birth_vertex, death_vertex)`` (``.local_pairs``); the counts (``.report``,
        ``.describe()``) are global, per dimension of ``.dims`` (``0 .. d-1`` on
        a grid, ``0 .. d`` on a mesh). ``.gather()`` (collective) gives the whole
        diagram (``.finite(d)``, ``.essential(d)``, ``.pairs``); one rank's is whole.

    Raises
    ------
    ValueError, TypeError
        On every rank: a domain that is not a Grid or SimplicialComplex
        (``TypeError``), values of the wrong size or not finite, a domain of
        dimension other than 2 or 3 (an empty complex has dimension 0), a
        complex that is not a manifold (a (d-1)-simplex with more than two
        cofaces, a simplex or vertex in no d-simplex, or a pinched vertex or
        edge: one whose link is not connected or, in 3D, not a sphere or a
        disk), a negative or non-finite ``min_persistence`` (``TypeError`` if
        it is not a number), a bad ``axes``, ``progress`` or ``threads``.

    Notes
    -----
    Collective on ``domain.comm``. Simplex ``s`` enters at ``max f`` over its
    vertices, ties broken by the ``(value, global id)`` order, so the result
    does not depend on the number of ranks. Every part is computed where its
    data lives and named by distributed look-ups (the vertex at each sweep
    position is held by the block owner of the position); the pairs end in
    one distributed sort. No rank holds anything of the diagram's size
    unless :meth:`PersistenceDiagram.gather` is called.

    - D0 (minimum-saddle): every vertex points to its lowest neighbour,
      pointer jumping (with ghost exchanges across slabs) labels it with its
      basin minimum; the basins meeting at each vertex whose lower link is
      disconnected give label-vertex edges, and the elder rule runs over
      them (:func:`topology.persistence.sweep`): each rank decides the merges its
      own basins settle, and the rest go up a binary tree of ranks, each
      node led by a different rank (``ceil(log2 p)`` supersteps). No rank
      holds the global forest.
    - D(d-1) (saddle-maximum): by Alexander duality the (d-1)-classes of the
      sublevel set ``{f <= t}`` are the components of ``{f > t}`` that do not
      reach the boundary; they are found by the same sweep in decreasing
      order on the vertex graph plus one virtual vertex, older than all,
      joined to every boundary vertex. A class is born at the saddle where
      its component splits off and dies at its maximum. On a closed
      component the oldest maximum is the essential d-class.
    - D1 of 3D data (saddle-saddle) comes from
      :func:`topology.persistence.persistence_pairs_all` (the discrete gradient's critical
      cells).
    - On a 3D grid the whole diagram comes from the Morse complex of the
      discrete gradient instead (Discrete Morse Sandwich): D0 and D2 by the
      elder rule over the ends of the V-paths from the critical edges and
      triangles (squares on a cubical grid), which is the sweeps' answer
      without their passes over every vertex, and D1 as above.
    - On a cubical grid the filtration is the V-construction (a cell enters
      at the largest value of its vertices), as gudhi's and CubicalRipser's:
      in 2D, D0 follows the grid's edges and D1 the dual graph (``{f > t}``
      connected through shared squares), as :func:`topology.image_persistence`;
      in 3D from the Morse complex (:func:`topology.persistence.cubical_morse_pairs`).
    - Essential classes: D0 births are the oldest minimum of each component;
      on a complex, the essential (d-1)-births follow from the Euler
      characteristic of every vertex's lower star, ``chi(v) = sum_k
      (-1)^k (births_k(v) - deaths_k(v))``. A grid is a ball: no essential
      class above D0.

    References
    ----------
    .. [1] H. Edelsbrunner, D. Letscher, A. Zomorodian, "Topological
       persistence and simplification", Discrete Comput. Geom. 28, 2002.
    .. [2] P. Guillou, J. Vidal, J. Tierny, "Discrete Morse sandwich: fast
       computation of persistence diagrams for scalar data", IEEE TVCG 2023.
    .. [3] E. Le Guillou, M. Fortin, J. Tierny, "Distributed discrete Morse
       sandwich", IEEE TPDS 2026.
    .. [4] U. Bauer, M. Kerber, J. Reininghaus, "Distributed computation of
       persistent homology", ALENEX 2014 (DIPHA).

    Examples
    --------
    A 5 x 4 image with two basins, of minima 1 and 0, and a ring of 5s
    around the 6 in the middle:

    >>> import numpy as np
    >>> from mpi4py import MPI
    >>> import topology
    >>> comm = MPI.COMM_WORLD
    >>> image = np.array([[5, 4, 5, 6, 7],
    ...                   [4, 1, 3, 2, 6],
    ...                   [5, 3, 6, 0, 5],
    ...                   [6, 4, 5, 3, 6]], dtype=float)     # values[y, x]
    >>> grid = topology.Grid((5, 4), comm)
    >>> dg = topology.persistence_diagram(grid, image, axes="yx")
    >>> print(dg.report[0])
    {'pairs': 1, 'nonzero': 1, 'kept': 1, 'essential': 1}

    The counts are global already; the pairs themselves are spread over
    the ranks until gathered:

    >>> whole = dg.gather()
    >>> print(whole)
    PersistenceDiagram(D0: 1 (+1 essential), D1: 1 (+0 essential))

    The basin of 1 merges into the older one of 0 at the saddle 3; the
    basin of 0 never dies; the loop of 5s closes at 5 and is filled at 6:

    >>> print(whole.finite(0), whole.essential(0), whole.finite(1))
    [[1. 3.]] [0.] [[5. 6.]]
    """
    check_domain(domain)
    min_persistence, report, threads = _door(domain, min_persistence, progress, threads)
    with using(threads):
        block, missing = domain.kernels.diagram_block(values, axes, report)
    return PersistenceDiagram(domain.comm, domain.dimension, block, min_persistence, missing,
                              dims=_diagram_dims(domain))


def _door(domain, min_persistence, progress, threads) -> tuple:
    """The checked ``(min_persistence, progress report, thread count)`` of
    :func:`persistence_diagram`, its errors raised on every rank.
    Collective on ``domain.comm``."""
    comm = domain.comm
    with agreed(comm):
        min_persistence = check_real("min_persistence", min_persistence, low=0.0)
        report = Progress(progress, comm, "persistence")
        threads = resolve(threads)
        if domain.dimension not in (2, 3):
            raise ValueError("persistence diagrams need a 2D or 3D domain, got dimension %d%s"
                             % (domain.dimension, " (an empty complex)"
                                if domain.global_num_vertices == 0 else ""))
    return min_persistence, report, threads


def _diagram_dims(domain) -> range:
    """The dimensions a diagram on ``domain`` can have: a ball has no
    homology above degree 0, so its sublevel sets have no classes of the top
    dimension; a closed component of a complex has an essential one."""
    return range(domain.dimension if domain.is_ball else domain.dimension + 1)
