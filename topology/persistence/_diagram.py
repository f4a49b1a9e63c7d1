"""Persistence diagrams of the lower-star filtration of a vertex field.

D0 comes from the join-tree sweep of the vertex graph, D(d-1) from the same
sweep in the reverse order on the vertex graph coned over the boundary
(Alexander duality), D1 of 3D data from the discrete gradient's saddle pairs
(``_saddles``), and essential classes from the connected components and a
per-vertex Euler characteristic balance.
"""

from __future__ import annotations

import itertools

import meshio
import numpy as np
import scipy.sparse as sp
from mpi4py import MPI
from scipy.sparse.csgraph import connected_components as _cc

from dmsolve import Progress, agree
from dmsolve.bsp import BSP, psort, search_sorted, stable_argsort
from dmsolve.io import check_writable
from dmsolve.validate import agreed, check_int, check_real

from ..domains._complex import _search_rows, owned_global_ids
from ..core._protocol import check_domain
from ..core._keytable import KeyTable, fetch_rows
from ..morse._order import global_order
from ._saddles import persistence_pairs_all
from ._sweep import APEX, sweep
from ..core._vtkxml import check_pvtu_path as _check_pvtu_path
from ..core._vtkxml import vtk_type, write_parallel

__all__ = ["persistence_diagram", "PersistenceDiagram"]

#: TTK's critical type codes of the two ends of a pair of dimension k in a
#: d-dimensional domain: birth k, death k+1 (the top one is "maximum", 3)
_MAXIMUM = 3
_TAG_EULER = 65


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
        Dimension of the domain (2 or 3); diagrams exist for 0 .. dimension.
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
        Per dimension, over the whole diagram: ``pairs`` (vertex-level pairs
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

    def __init__(self, comm, dimension, raw, min_persistence, missing, *, complete=None):
        self.comm = comm
        self.dimension = dimension
        self.local_raw_pairs = raw
        self.min_persistence = float(min_persistence)
        self.missing = list(missing)
        self.complete = comm.Get_size() == 1 if complete is None else bool(complete)
        fin = np.isfinite(raw["death"])
        pers = np.where(fin, raw["death"] - raw["birth"], np.inf)
        keep = ~fin | (pers > self.min_persistence)
        self.local_pairs = {k: v[keep] for k, v in raw.items()}
        counts = np.zeros((dimension + 1, 4), np.int64)
        for d in range(dimension + 1):
            m = raw["dim"] == d
            counts[d] = (np.count_nonzero(m & fin), np.count_nonzero(m & fin & (pers > 0)),
                         np.count_nonzero(m & fin & keep), np.count_nonzero(m & ~fin))
        if not self.complete:
            comm.Allreduce(MPI.IN_PLACE, counts, op=MPI.SUM)
        self.report = {d: dict(zip(("pairs", "nonzero", "kept", "essential"),
                                   map(int, counts[d]))) for d in range(dimension + 1)}

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
        raw = {k: _gatherv(self.comm, v, root) for k, v in self.local_raw_pairs.items()}
        if root is not None and self.comm.Get_rank() != root:
            return None
        return PersistenceDiagram(self.comm, self.dimension, raw, self.min_persistence,
                                  self.missing, complete=True)

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
            On every rank, if the file cannot be written.
        """
        path = check_writable(path, self.comm)
        whole = self.gather(root=0)
        exc = None
        if self.comm.Get_rank() == 0:
            p = whole.pairs
            try:
                with open(path, "w") as f:
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
            On every rank, if the file cannot be written.
        """
        self._check_domain(domain)
        path = check_writable(path, self.comm)
        whole = self.gather(root=0)
        exc = None
        if self.comm.Get_rank() == 0:
            vid, data = _point_cloud(whole.local_pairs, self.dimension, 0, 0, None)
            try:
                points = domain.vertex_coordinates(vid)
                cells = [("vertex", np.arange(vid.size, dtype=np.int64).reshape(-1, 1))]
                meshio.Mesh(points, cells, point_data=data).write(path, file_format="vtu")
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
        counts, then three small agreements (see
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
            path = _check_pvtu_path(path)
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


def _gatherv(comm, arr: np.ndarray, root: int | None) -> np.ndarray | None:
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
                        axes: str | None = None, progress=None) -> PersistenceDiagram:
    """The persistence diagram of the lower-star filtration of ``values``.

    Parameters
    ----------
    domain : Grid or SimplicialComplex
        A 2D or 3D grid (TTK's Freudenthal triangulation), or a triangle or
        tetrahedral mesh. D(d-1) needs a manifold (every (d-1)-simplex a face
        of one or two d-simplices, no dangling lower simplices).
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
        Morse complex), each message saying what it found.
        ``True`` prints them on rank 0; a callable
        ``progress(task, message, seconds)`` gets them on every rank.

    Returns
    -------
    PersistenceDiagram
        Distributed: each rank holds one block of the pairs sorted by
        ``(dim, birth_vertex, death_vertex)`` (``.local_pairs``); the counts
        (``.report``, ``.describe()``) are global. ``.gather()`` (collective)
        gives the whole diagram, with ``.finite(d)``, ``.essential(d)`` and
        ``.pairs``; on one rank the diagram is whole already.

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
        it is not a number), a bad ``axes`` or ``progress``.

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
      them (:func:`topology._sweep.sweep`): each rank decides the merges its
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
      ``_saddles.persistence_pairs_all`` (the discrete gradient's critical
      cells).
    - On a 3D grid the whole diagram comes from the Morse complex of the
      discrete gradient instead (Discrete Morse Sandwich): D0 and D2 by the
      elder rule over the ends of the V-paths from the critical edges and
      triangles (squares on a cubical grid), which is the sweeps' answer
      without their passes over every vertex, and D1 as above.
    - On a cubical grid (``Grid(..., complex="cubical")``) the filtration
      is the V-construction: a cell enters at the largest value of its
      vertices. In 2D, D0 follows the grid's edges and D1 the dual graph
      (Alexander duality: ``{f > t}`` connected through shared squares); in
      3D everything comes from the cubical Morse complex
      (``_cubical.cubical_morse_pairs``). Equal to gudhi's
      ``CubicalComplex(vertices=...)`` and CubicalRipser.
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
    """
    check_domain(domain)
    comm = domain.comm
    with agreed(comm):
        min_persistence = check_real("min_persistence", min_persistence, low=0.0)
        report = Progress(progress, comm, "persistence")
        if domain.dimension not in (2, 3):
            raise ValueError("persistence diagrams need a 2D or 3D domain, got dimension %d%s"
                             % (domain.dimension, " (an empty complex)"
                                if domain.global_num_vertices == 0 else ""))
    if getattr(domain, "out_of_core", False):
        return _out_of_core_diagram(domain, values, axes, min_persistence, report)
    vec = domain.vertex_values(values, axes=axes)
    d = domain.dimension
    if not domain.is_ball:
        _check_manifold(domain)
    gids = owned_global_ids(domain)
    order = global_order(vec, ids=gids)
    n = vec.global_size
    report("global order of %d vertices", n)
    if d == 3 and domain.is_ball and domain.stencil is not None:
        # a 3D grid: the whole diagram from the Morse complex (no sweeps)
        return PersistenceDiagram(comm, d, _sorted_block(comm, _morse_parts(
            domain, vec, gids, order, report)), min_persistence, [])
    s0 = sweep(domain, order.local)
    report("D0: %d pairs, %d essential", _total(comm, len(s0.deaths)),
           _total(comm, len(s0.survivors)))
    sd = sweep(domain, n - 1 - order.local, apex=True)
    report("D%d: %d pairs", d - 1, _total(comm, len(sd.deaths)))
    # name every position of the two sweeps: (global id, layout index, value)
    lay = vec.layout
    index = np.arange(lay.start, lay.stop, dtype=np.int64)
    gids = index if gids is None else gids
    table = KeyTable(order.local, gids, index, vec.local, n, comm)
    top_ess = sd.survivors[sd.survivors != APEX]
    want = np.concatenate((s0.deaths.ravel(), s0.survivors,
                           n - 1 - sd.deaths.ravel(), n - 1 - top_ess))
    gid, idx, val = table.lookup(want)
    parts = []
    a = 0

    def take(k, shape=(-1,)):
        nonlocal a
        out = tuple(x[a:a + k].reshape(shape) for x in (gid, idx, val))
        a += k
        return out

    g, i, v = take(s0.deaths.size, (-1, 2))
    parts.append((0, v[:, 0], v[:, 1], g[:, 0], g[:, 1], i[:, 0], i[:, 1]))
    parts.append(_essential(0, *take(s0.survivors.size)))
    g, i, v = take(sd.deaths.size, (-1, 2))
    # (born = maximum, dies_at = saddle) of the reversed sweep: (saddle, maximum)
    parts.append((d - 1, v[:, 1], v[:, 0], g[:, 1], g[:, 0], i[:, 1], i[:, 0]))
    parts.append(_essential(d, *take(top_ess.size)))
    if d == 3:
        parts.extend(_saddle_pairs(domain, vec, gids, order, report))
    if not domain.is_ball:
        ess = _euler_essential(domain, vec, gids, order, parts)
        parts.append(ess)
        report("essential classes: %d of D%d", _total(comm, ess[1].size), d - 1)
    raw = _sorted_block(comm, parts)
    return PersistenceDiagram(comm, d, raw, min_persistence, [])


#: Bytes per vertex the in-memory D1 of 3D data takes at its peak (the order,
#: the discrete gradient, the Morse complex: bench/bench_persistence.py's
#: noisy fields peak at about 470 B per vertex at one rank)
D1_BYTES_PER_VERTEX = 512


def _out_of_core_diagram(grid, values, axes, min_persistence, report):
    """:func:`persistence_diagram` on a grid in out-of-core mode: D0 and
    D(d-1) by the slab sweeps of ``_outofcore``, D1 of 3D data in memory
    when the rank's slab fits the budget. Collective on ``grid.comm``."""
    from ..outofcore._slabs import local_values, ooc_diagram_parts
    comm, d = grid.comm, grid.dimension
    parts, source = ooc_diagram_parts(grid, values, axes, report)
    report("D0 and D%d: %d pairs", d - 1, _total(comm, sum(p[1].size for p in parts)))
    missing = []
    if d == 3:
        most = int(np.max(np.diff(grid.plane_ranges))) * grid.plane_size
        need = most * D1_BYTES_PER_VERTEX
        if grid.memory_budget is None or need <= grid.memory_budget:
            vec = local_values(grid, source)
            order = global_order(vec)
            gids = np.arange(vec.layout.start, vec.layout.stop, dtype=np.int64)
            parts.extend(_saddle_pairs(grid, vec, gids, order, report))
        else:
            missing.append("D1: the saddle-saddle pairs need a rank's whole slab in memory, "
                           "about %d bytes, over the memory budget of %d bytes"
                           % (need, grid.memory_budget))
            report("D1: not computed (over the memory budget)")
    raw = _sorted_block(comm, parts)
    return PersistenceDiagram(comm, d, raw, min_persistence, missing)


def _total(comm, k: int) -> int:
    return int(comm.allreduce(int(k), op=MPI.SUM)) if comm.Get_size() > 1 else int(k)


def _essential(dim, g, i, v):
    k = v.size
    return (dim, v, np.full(k, np.inf), g, np.full(k, -1, np.int64), i, np.full(k, -1, np.int64))


def _sorted_block(comm, parts) -> dict:
    """The pairs of all ranks sorted by ``(dim, birth_vertex, death_vertex)``
    with a distributed sort: this rank's block of the whole diagram. Parts
    are ``(dim, birth, death, birth_vertex, death_vertex, ...)`` tuples.
    Collective on ``comm``."""
    dims, b, dd, bv, dv = [], [], [], [], []
    for dim, birth, death, bvert, dvert, *_ in parts:
        birth = np.asarray(birth, np.float64)
        dims.append(np.full(birth.size, dim, dtype=np.int64))
        b.append(birth)
        dd.append(np.asarray(death, np.float64))
        bv.append(np.asarray(bvert, np.int64))
        dv.append(np.asarray(dvert, np.int64))
    cols = [np.concatenate(dims), np.concatenate(bv), np.concatenate(dv)]
    vals = np.column_stack((np.concatenate(b), np.concatenate(dd)))
    # the three key columns packed into one int64 in the same order when their
    # ranges over all ranks allow: one stable argsort (or a one-column psort)
    # instead of a lexsort of three (half the time at 10^6 pairs), packed and
    # unpacked in place (no more memory than the lexsort's)
    big, small = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    lo = np.array([c.min() if c.size else big for c in cols], np.int64)
    hi = np.array([c.max() if c.size else small for c in cols], np.int64)
    if comm.Get_size() > 1:
        comm.Allreduce(MPI.IN_PLACE, lo, op=MPI.MIN)
        comm.Allreduce(MPI.IN_PLACE, hi, op=MPI.MAX)
    span = [int(h) - int(l) + 1 for l, h in zip(lo, hi)]
    if min(span) >= 1 and span[0] * span[1] * span[2] < 2 ** 62:
        packed = cols[0] - lo[0]
        for c in (1, 2):
            packed *= span[c]
            packed += cols[c]
            packed -= lo[c]
        del cols
        if comm.Get_size() > 1:
            out = psort(packed, comm, payload=vals)
            packed, vals = out.keys, out.payload
            del out
        else:
            o = stable_argsort(packed)
            packed, vals = packed[o], vals[o]
            del o
        dvert = np.remainder(packed, span[2])
        dvert += lo[2]
        packed //= span[2]
        bvert = np.remainder(packed, span[1])
        bvert += lo[1]
        packed //= span[1]
        packed += lo[0]
        return {"dim": packed, "birth": vals[:, 0].copy(), "death": vals[:, 1].copy(),
                "birth_vertex": bvert, "death_vertex": dvert}
    keys = np.column_stack(cols)
    del cols
    if comm.Get_size() > 1:
        out = psort(keys, comm, payload=vals)
        keys, vals = out.keys, out.payload
    else:
        o = np.lexsort((keys[:, 2], keys[:, 1], keys[:, 0]))
        keys, vals = keys[o], vals[o]
    return {"dim": keys[:, 0].copy(), "birth": vals[:, 0].copy(), "death": vals[:, 1].copy(),
            "birth_vertex": keys[:, 1].copy(), "death_vertex": keys[:, 2].copy()}


def _saddle_pairs(domain, vec, gids, order, report):
    """D1 of 3D data (finite pairs and essential classes) from the Morse
    complex, left where the reduction found them. Collective on ``domain.comm``."""
    res = persistence_pairs_all(domain, order, progress=report, gather=False)
    pairs, essential = res.pairs[1], res.essential[1]
    lay = domain.vertex_layout
    table = np.column_stack((gids, vec.local.view(np.int64)))
    rows = fetch_rows(lay, table, np.concatenate((pairs.ravel(), essential)))
    g, v = rows[:, 0], rows[:, 1].copy().view(np.float64)
    k = pairs.size
    pg, pv, pi = g[:k].reshape(-1, 2), v[:k].reshape(-1, 2), pairs
    report("D1: %d pairs, %d essential", _total(domain.comm, pairs.shape[0]),
           _total(domain.comm, essential.size))
    return [(1, pv[:, 0], pv[:, 1], pg[:, 0], pg[:, 1], pi[:, 0], pi[:, 1]),
            _essential(1, g[k:], essential, v[k:])]


def _morse_parts(grid, vec, gids, order, report):
    """D0, D1, D2 of a 3D grid from the Morse complex of its discrete
    gradient (:func:`topology._saddles.persistence_pairs_all`, or
    :func:`topology._cubical.cubical_morse_pairs` on a cubical grid), as
    diagram parts. A grid is a ball: its only essential class is D0's.
    Collective on ``grid.comm``."""
    if grid.cubical:
        from ..morse._cubical import cubical_morse_pairs
        pairs, minima, _ = cubical_morse_pairs(grid, order, progress=report)
    else:
        res = persistence_pairs_all(grid, order, progress=report, gather=False)
        pairs, minima = res.pairs, res.essential[0]
    lay = grid.vertex_layout
    want = np.concatenate([pairs[d].ravel() for d in range(3)] + [minima])
    if gids is None:
        # the global ids are the layout indices: only the values travel (a
        # table of ids and values was two words per vertex of the grid)
        g = want
        v = fetch_rows(lay, vec.local.view(np.int64).reshape(-1, 1), want)[:, 0].view(np.float64)
    else:
        rows = fetch_rows(lay, np.column_stack((gids, vec.local.view(np.int64))), want)
        g, v = rows[:, 0], rows[:, 1].copy().view(np.float64)
    parts, a = [], 0
    for d in range(3):
        k = pairs[d].size
        pg, pv, pi = g[a:a + k].reshape(-1, 2), v[a:a + k].reshape(-1, 2), pairs[d]
        parts.append((d, pv[:, 0], pv[:, 1], pg[:, 0], pg[:, 1], pi[:, 0], pi[:, 1]))
        found = _total(grid.comm, pairs[d].shape[0])
        if d == 0:
            report("D0: %d pairs, %d essential", found, _total(grid.comm, minima.size))
        elif d == 1:
            report("D1: %d pairs, 0 essential", found)
        else:
            report("D2: %d pairs", found)
        a += k
    parts.append(_essential(0, g[a:], minima, v[a:]))
    return parts


def _check_manifold(cx) -> None:
    """Refuse, with the same ValueError on every rank, a complex on which
    the duality behind D(d-1) fails: a (d-1)-simplex with more than two
    cofaces, a (d-1)-simplex or vertex in no d-simplex, or a pinched vertex
    or edge (see :func:`_pinched`). The message names the smallest global
    vertex id of the first kind of defect found, so it does not depend on the
    partition. Collective on ``cx.comm`` (one small ``Allreduce``)."""
    d = cx.dimension
    none = np.iinfo(np.int64).max
    n = max(cx.num_vertices, 1)
    # per defect kind: the smallest (encoded) global vertex ids where it occurs
    worst = np.full(5, none, dtype=np.int64)

    def note(kind, gids):
        gids = np.asarray(gids, dtype=np.int64)
        if gids.size:
            worst[kind] = min(worst[kind], int(gids.min()))

    tops, _ = cx.local_simplices(d)
    facets, _ = cx.local_simplices(d - 1)
    count = np.zeros(facets.shape[0], dtype=np.int64)
    for cols in itertools.combinations(range(d + 1), d):
        np.add.at(count, _search_rows(facets, tops[:, cols], cx.num_vertices), 1)
    owned = np.arange(facets.shape[0])[cx.owned_slice(d - 1)] if d - 1 >= 1 \
        else cx.owned_positions()
    gfacet = np.sort(cx.layout_to_global(facets[owned]), axis=1)
    note(0, gfacet[count[owned] > 2, 0])
    note(1, gfacet[count[owned] < 1, 0])
    used = np.zeros(cx.ghosted_ids().size, bool)
    used[cx.local_simplex_positions(d).ravel()] = True
    note(1, cx.owned_global_ids(0)[~used[cx.owned_positions()]])
    link, wrong_chi, edges = _pinched(cx)
    note(2, link)
    note(3, wrong_chi)
    if edges.size:
        note(4, edges[:, 0] * n + edges[:, 1])
    cx.comm.Allreduce(MPI.IN_PLACE, worst, op=MPI.MIN)
    kind = int(np.flatnonzero(worst != none)[0]) if np.any(worst != none) else None
    if kind is None:
        return
    v = int(worst[kind])
    msg = {
        0: "the complex is not a manifold: a %d-simplex at vertex %d has more than two "
           "%d-simplex cofaces (persistence needs at most 2)" % (d - 1, v, d),
        1: "the complex is not pure: vertex %d lies in a simplex that is in no %d-simplex"
           % (v, d),
        2: "the complex is not a manifold: vertex %d is pinched (its link is not connected)"
           % v,
        3: "the complex is not a manifold: the link of vertex %d is neither a sphere nor a "
           "disk (Euler characteristic)" % v,
        4: "the complex is not a manifold: edge (%d, %d) is pinched (its link is not "
           "connected)" % divmod(v, n),
    }[kind]
    raise ValueError(msg + "; persistence_diagram of a complex needs a %d-manifold, "
                     "possibly with boundary" % d)


def _components_per(owner: np.ndarray, a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    """Number of connected components among the nodes of each ``owner``
    value (nodes ``0 .. len(owner)-1``, edges ``a - b`` within one owner)."""
    nn = owner.size
    if nn == 0:
        return np.zeros(n, dtype=np.int64)
    g = sp.coo_matrix((np.ones(a.size, np.int8), (a, b)), shape=(nn, nn))
    ncomp, label = _cc(g, directed=False)
    first = np.full(ncomp, -1, dtype=np.int64)
    first[label[::-1]] = np.arange(nn - 1, -1, -1)
    return np.bincount(owner[first], minlength=n)


def _pinched(cx):
    """Pinched vertices and edges of a pure complex whose (d-1)-simplices have
    at most two cofaces. Not collective: the closed star of an owned vertex
    is complete on its rank.

    In such a complex the link of a vertex is a graph of degree <= 2 (2D)
    or a pseudo-surface (3D), and the complex is a manifold with boundary
    exactly when every vertex link is connected and, in 3D, every edge
    link is connected (the vertex links are then surfaces) and every vertex
    link has the Euler characteristic of a disk (1, on the boundary) or a
    sphere (2, inside). Returns the global ids of the owned vertices whose
    link is not connected, of those whose link's Euler characteristic is
    wrong, and the sorted global vertex pairs of the owned edges whose link
    is not connected.
    """
    d = cx.dimension
    n_loc = cx.ghosted_ids().size
    opos = cx.owned_positions()
    is_own = np.zeros(n_loc, dtype=bool)
    is_own[opos] = True
    gid = cx.global_ids(0)
    E = cx.local_simplex_positions(1)
    T = cx.local_simplex_positions(2)
    # vertex links: nodes are the half-edges v -> u out of owned v, joined
    # through the triangles (v, u, w)
    src = np.concatenate((E[:, 0], E[:, 1]))
    dst = np.concatenate((E[:, 1], E[:, 0]))
    keep = is_own[src]
    src, dst = src[keep], dst[keep]
    key = src * n_loc + dst
    o = np.argsort(key)
    src, key = src[o], key[o]
    a, b = [], []
    for i in range(3):
        v, u, w = T[:, i], T[:, (i + 1) % 3], T[:, (i + 2) % 3]
        m = is_own[v]
        a.append(search_sorted(key, v[m] * n_loc + u[m]))
        b.append(search_sorted(key, v[m] * n_loc + w[m]))
    comps = _components_per(src, np.concatenate(a), np.concatenate(b), n_loc)[opos]
    link = gid[opos][comps > 1]
    wrong_chi = np.zeros(0, np.int64)
    edges = np.zeros((0, 2), np.int64)
    if d == 3:
        Q = cx.local_simplex_positions(3)
        chi = np.zeros(n_loc, dtype=np.int64)
        for rows, sign in ((E, 1), (T, -1), (Q, 1)):
            chi += sign * np.bincount(rows.ravel(), minlength=n_loc)
        want = np.where(cx.owned_boundary_vertices(), 1, 2)
        wrong_chi = gid[opos][(chi[opos] != want) & (comps == 1)]
        edges = _pinched_edges(cx)
    return link, wrong_chi, edges


def _pinched_edges(cx) -> np.ndarray:
    """Sorted global vertex pairs of the owned edges of a tetrahedral complex
    whose link (the triangles around the edge, joined through its
    tetrahedra) is not connected. Not collective."""
    nv = cx.num_vertices
    erows, _ = cx.local_simplices(1)
    trows, _ = cx.local_simplices(2)
    qrows, _ = cx.local_simplices(3)
    nt = max(trows.shape[0], 1)
    # nodes: (edge, triangle) incidences, keyed edge * nt + triangle
    inc_e, inc_t = [], []
    for pair in ((0, 1), (0, 2), (1, 2)):
        inc_e.append(_search_rows(erows, trows[:, pair], nv))
        inc_t.append(np.arange(trows.shape[0], dtype=np.int64))
    ie, it = np.concatenate(inc_e), np.concatenate(inc_t)
    key = np.sort(ie * nt + it)
    a, b = [], []
    for i, j in itertools.combinations(range(4), 2):
        k, l = [c for c in range(4) if c not in (i, j)]
        e = _search_rows(erows, qrows[:, [i, j]], nv)
        t1 = _search_rows(trows, np.sort(qrows[:, [i, j, k]], axis=1), nv)
        t2 = _search_rows(trows, np.sort(qrows[:, [i, j, l]], axis=1), nv)
        a.append(search_sorted(key, e * nt + t1))
        b.append(search_sorted(key, e * nt + t2))
    owner = key // nt
    comps = _components_per(owner, np.concatenate(a), np.concatenate(b), erows.shape[0])
    bad = np.flatnonzero(comps > 1)
    own = cx.owned_slice(1)
    bad = bad[(bad >= own.start) & (bad < own.stop)]
    return np.sort(cx.layout_to_global(erows[bad]), axis=1).reshape(-1, 2)


def _euler_essential(cx, vec, gids, order, parts):
    """Essential (d-1)-classes of a complex from the Euler characteristic of
    every vertex's lower star: each pair counts at the owners of its two
    vertices (one superstep), and each owner finds its own classes.
    Collective."""
    d = cx.dimension
    lay = vec.layout
    ordg = cx.ghosted(order.local)
    opos = cx.owned_positions()
    rank_of = np.full(ordg.size, -1, dtype=np.int64)
    rank_of[opos] = np.arange(opos.size)
    chi = np.ones(opos.size, dtype=np.int64)
    for k in range(1, d + 1):
        rows = cx.local_simplex_positions(k)
        if rows.size == 0:
            continue
        top = rows[np.arange(rows.shape[0]), np.argmax(ordg[rows], axis=1)]
        r = rank_of[top]
        chi += (-1) ** k * np.bincount(r[r >= 0], minlength=opos.size)
    # counts per (vertex, dimension, birth or death), at the vertex's owner
    idx, col = [], []
    for dim, _, death, _, _, bidx, didx in parts:
        fin = np.isfinite(np.asarray(death, np.float64))
        idx.extend((np.asarray(bidx, np.int64), np.asarray(didx, np.int64)[fin]))
        col.extend((np.full(len(bidx), 2 * dim), np.full(int(fin.sum()), 2 * dim + 1)))
    idx, col = np.concatenate(idx), np.concatenate(col)
    ctx = BSP(cx.comm)
    ctx.send_keyed(_TAG_EULER, idx * (2 * d + 2) + col, np.ones(idx.size, np.int64),
                   lambda key: lay.owner(key // (2 * d + 2)), op="sum")
    keys, cnt = ctx.sync("persistence:euler").reduced(_TAG_EULER, "sum", dtype=np.int64)
    table = np.zeros((lay.local_size, 2 * d + 2), np.int64)
    table[keys // (2 * d + 2) - lay.start, keys % (2 * d + 2)] = cnt
    bal = chi.copy()                          # chi - sum_{k != d-1} (-1)^k dbeta_k
    for k in range(d + 1):
        if k != d - 1:
            bal -= (-1) ** k * (table[:, 2 * k] - table[:, 2 * k + 1])
    ess = (-1) ** (d - 1) * bal - table[:, 2 * (d - 1)] + table[:, 2 * (d - 1) + 1]
    exc = None
    if ess.size and ess.min() < 0:
        exc = RuntimeError("inconsistent Euler balance at vertex %d: the complex is probably "
                           "not a manifold (pinched vertex)" % gids[np.argmin(ess)])
    agree(cx.comm, exc)
    at = np.repeat(np.flatnonzero(ess > 0), ess[ess > 0])
    return _essential(d - 1, gids[at], at + lay.start, vec.local[at])
