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

from dmsolve import DistVector, Progress, agree
from dmsolve.io import check_writable
from dmsolve.validate import agreed, check_real

from ._complex import _search_rows, owned_global_ids
from ._domain import check_domain
from ._mergetree import APEX, lookup, sweep
from ._order import global_order
from ._saddles import saddle_saddle_pairs
from ._vtkxml import check_pvtu_path as _check_pvtu_path
from ._vtkxml import vtk_type, write_parallel

__all__ = ["persistence_diagram", "PersistenceDiagram"]

#: TTK's critical type codes of the two ends of a pair of dimension k in a
#: d-dimensional domain: birth k, death k+1 (the top one is "maximum", 3)
_MAXIMUM = 3


def _ttk_type(k, d):
    return k if k < d else _MAXIMUM


class PersistenceDiagram:
    """The persistence pairs of a lower-star filtration, the same on every rank.

    Attributes
    ----------
    dimension : int
        Dimension of the domain (2 or 3); diagrams exist for 0 .. dimension.
    pairs : dict of arrays
        The kept pairs, all dimensions together: ``dim`` (int), ``birth``,
        ``death`` (float, ``inf`` for essential classes), ``birth_vertex``,
        ``death_vertex`` (global vertex ids, -1 for the death of an essential
        class). Finite pairs are kept when ``death - birth > min_persistence``;
        essential classes always.
    raw_pairs : dict of arrays
        The same fields for every vertex-level pair the algorithms found,
        before any threshold (zero-persistence pairs from ties included).
    min_persistence : float
    report : dict
        Per dimension: ``pairs`` (vertex-level pairs found), ``nonzero``
        (death > birth), ``kept`` (persistence above ``min_persistence``) and
        ``essential``.
    missing : list of str
        Parts that could not be computed; empty, since every part of a 2D
        or 3D diagram is (kept for callers that check it).

    Notes
    -----
    Properties and accessors are not collective; ``write_csv``,
    ``write_vtu`` (rank 0 writes) and ``write_pvtu`` (one piece per rank)
    are, and their errors are agreed.
    """

    _FIELDS = ("dim", "birth", "death", "birth_vertex", "death_vertex")

    def __init__(self, comm, dimension, raw, min_persistence, missing):
        self.comm = comm
        self.dimension = dimension
        self.raw_pairs = raw
        self.min_persistence = float(min_persistence)
        self.missing = list(missing)
        fin = np.isfinite(raw["death"])
        pers = np.where(fin, raw["death"] - raw["birth"], np.inf)
        keep = ~fin | (pers > self.min_persistence)
        self.pairs = {k: v[keep] for k, v in raw.items()}
        self.report = {}
        for d in range(dimension + 1):
            m = raw["dim"] == d
            self.report[d] = {
                "pairs": int(np.count_nonzero(m & fin)),
                "nonzero": int(np.count_nonzero(m & fin & (pers > 0))),
                "kept": int(np.count_nonzero(m & fin & keep)),
                "essential": int(np.count_nonzero(m & ~fin)),
            }

    def __repr__(self) -> str:
        parts = ["D%d: %d (+%d essential)" % (d, r["kept"], r["essential"])
                 for d, r in self.report.items()]
        return "PersistenceDiagram(%s)" % ", ".join(parts)

    def finite(self, d: int) -> np.ndarray:
        """``(k, 2)`` array of the kept finite ``(birth, death)`` pairs of
        dimension ``d``, death > birth, sorted. Not collective."""
        p = self.pairs
        m = (p["dim"] == d) & np.isfinite(p["death"])
        out = np.column_stack((p["birth"][m], p["death"][m]))
        return out[np.lexsort((out[:, 1], out[:, 0]))] if out.size else out.reshape(0, 2)

    def essential(self, d: int) -> np.ndarray:
        """Births of the infinite classes of dimension ``d``, sorted. Not collective."""
        p = self.pairs
        return np.sort(p["birth"][(p["dim"] == d) & ~np.isfinite(p["death"])])

    def describe(self) -> str:
        """The simplification report as text. Not collective."""
        lines = ["persistence > %g:" % self.min_persistence]
        for d, r in self.report.items():
            lines.append("  D%d: %d vertex pairs, %d with death > birth, %d kept, %d essential"
                         % (d, r["pairs"], r["nonzero"], r["kept"], r["essential"]))
        for m in self.missing:
            lines.append("  missing: %s" % m)
        return "\n".join(lines)

    def write_csv(self, path) -> None:
        """The kept pairs as CSV (``dimension,birth,death,birth_vertex,
        death_vertex``; ``inf`` deaths for essential classes), written on
        rank 0. Collective on ``comm``.

        Raises
        ------
        TypeError, ValueError
            On every rank, if ``path`` is not a non-empty path.
        OSError
            On every rank, if the file cannot be written.
        """
        path = check_writable(path, self.comm)
        exc = None
        if self.comm.Get_rank() == 0:
            p = self.pairs
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
        global vertex id). Written on rank 0; collective on ``comm``.
        :meth:`write_pvtu` writes one piece per rank instead.

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
        vid, data = self._point_cloud()
        points = domain.vertex_coordinates(vid)
        exc = None
        if self.comm.Get_rank() == 0:
            try:
                cells = [("vertex", np.arange(vid.size, dtype=np.int64).reshape(-1, 1))]
                meshio.Mesh(points, cells, point_data=data).write(path, file_format="vtu")
            except Exception as e:  # noqa: BLE001 - agreed, never on rank 0 alone
                exc = OSError("cannot write %s: %s: %s" % (path, type(e).__name__, e))
        agree(self.comm, exc)

    def write_pvtu(self, path, domain) -> None:
        """The points of :meth:`write_vtu` as a parallel VTU: rank ``r``
        writes the ends of pairs at the vertices it owns to the piece
        ``<stem>/<stem>_r.vtu`` beside ``path`` (which ends in ``.pvtu``),
        rank 0 the index ``path`` (the layout of :func:`topology.io.write_pvtu`).

        Each point is one ``vertex`` cell, with the arrays of
        :meth:`write_vtu` and ``GlobalPointIds`` = ``GlobalCellIds`` = the
        point's row in :meth:`write_vtu`'s file (births of all kept pairs,
        then deaths of the finite ones), so pieces can be matched; a vertex
        that ends several pairs is several points, all in its owner's piece.
        The pairs themselves are the same on every rank (see the class), so
        the piece is cut from them without communication.

        Collective on ``comm``: the checks, then three small agreements (see
        :func:`topology.io.write_pvtu`).

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
        vid, data = self._point_cloud()
        # the pairs' vertices are global ids, replicated on every rank: each
        # rank writes those it owns (a renumbered complex translates only the
        # vertices a rank holds, so compare global ids, not layout indices)
        mine = np.flatnonzero(np.isin(vid, domain.owned_global_ids(0)))
        ids = mine.astype(np.int64)
        write_parallel(self.comm, path, domain.vertex_coordinates(vid[mine]), "vertex",
                       np.arange(mine.size, dtype=np.int64).reshape(-1, 1),
                       {k: v[mine] for k, v in data.items()}, {}, point_ids=ids, cell_ids=ids,
                       ghost=None,
                       point_arrays=[(k, vtk_type(v.dtype), 1) for k, v in data.items()],
                       cell_arrays=[])

    def _check_domain(self, domain) -> None:
        """Refuse a domain that is not the diagram's, on every rank. Collective on ``comm``."""
        check_domain(domain)
        with agreed(self.comm):
            if domain.comm is not self.comm and MPI.Comm.Compare(domain.comm, self.comm) \
                    not in (MPI.IDENT, MPI.CONGRUENT):
                raise ValueError("domain is on another communicator than the diagram")
            if domain.dimension != self.dimension:
                raise ValueError("domain has dimension %d, the diagram %d"
                                 % (domain.dimension, self.dimension))
            top = max(int(self.pairs["birth_vertex"].max(initial=-1)),
                      int(self.pairs["death_vertex"].max(initial=-1)))
            if top >= domain.global_num_vertices:
                raise ValueError("the diagram names vertex %d; domain has %d vertices"
                                 % (top, domain.global_num_vertices))

    def _point_cloud(self) -> tuple[np.ndarray, dict]:
        """``(vertex ids, TTK's arrays)`` of the points of :meth:`write_vtu`:
        births of all kept pairs, then deaths of the finite ones. Not collective."""
        p = self.pairs
        fin = np.isfinite(p["death"])
        npair = p["dim"].size
        pid = np.arange(npair)
        vid = np.concatenate((p["birth_vertex"], p["death_vertex"][fin]))
        ctype = np.concatenate(([_ttk_type(k, self.dimension) for k in p["dim"].tolist()],
                                [_ttk_type(k + 1, self.dimension) for k in p["dim"][fin].tolist()]))
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
        order"``, ``"D0"``, ``"D<d-1>"`` (the reversed sweep), in 3D
        ``"discrete gradient"`` and ``"D1"`` (saddle-saddle pairs), on a
        complex ``"essential classes"``, each message saying what it found.
        ``True`` prints them on rank 0; a callable
        ``progress(task, message, seconds)`` gets them on every rank.

    Returns
    -------
    PersistenceDiagram
        ``.finite(d)``, ``.essential(d)``, ``.pairs``, ``.report``, on every
        rank.

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
    does not depend on the number of ranks.

    - D0 (minimum-saddle): every vertex points to its lowest neighbour,
      pointer jumping (with ghost exchanges across slabs) labels it with its
      basin minimum; the basins meeting at each vertex whose lower link is
      disconnected give label-vertex edges; each rank reduces them to a
      minimum spanning forest, forests are merged pairwise across ranks in
      log2(p) BSP supersteps, and the elder rule runs once over the global
      forest (O(number of minima) on rank 0, broadcast).
    - D(d-1) (saddle-maximum): by Alexander duality the (d-1)-classes of the
      sublevel set ``{f <= t}`` are the components of ``{f > t}`` that do not
      reach the boundary; they are found by the same sweep in decreasing
      order on the vertex graph plus one virtual vertex, older than all,
      joined to every boundary vertex. A class is born at the saddle where
      its component splits off and dies at its maximum. On a closed
      component the oldest maximum is the essential d-class.
    - D1 of 3D data (saddle-saddle) comes from
      ``_saddles.saddle_saddle_pairs`` (the discrete gradient's critical
      cells).
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
    vec = domain.vertex_values(values, axes=axes)
    d = domain.dimension
    if not domain.is_ball:
        _check_manifold(domain)
    gids = owned_global_ids(domain)
    order = global_order(vec, ids=gids)
    n = vec.global_size
    report("global order of %d vertices", n)
    s0 = sweep(domain, order.local)
    report("D0: %d pairs, %d essential", s0.deaths.shape[0], s0.survivors.size)
    sd = sweep(domain, n - 1 - order.local, apex=True)
    report("D%d: %d pairs", d - 1, sd.deaths.shape[0])
    # every order position needed, one look-up
    top_ess = sd.survivors[sd.survivors != APEX]
    want = np.concatenate((s0.deaths.ravel(), s0.survivors,
                           n - 1 - sd.deaths.ravel(), n - 1 - top_ess))
    gid, val = lookup(order, vec, want, gids)
    parts = []
    a = 0

    def take(k):
        nonlocal a
        out = gid[a:a + k], val[a:a + k]
        a += k
        return out

    g, v = take(s0.deaths.size)
    g, v = g.reshape(-1, 2), v.reshape(-1, 2)
    parts.append((0, v[:, 0], v[:, 1], g[:, 0], g[:, 1]))
    g, v = take(s0.survivors.size)
    parts.append(_essential(0, v, g))
    g, v = take(sd.deaths.size)
    g, v = g.reshape(-1, 2), v.reshape(-1, 2)
    # (born = maximum, dies_at = saddle) of the reversed sweep: (saddle, maximum)
    parts.append((d - 1, v[:, 1], v[:, 0], g[:, 1], g[:, 0]))
    g, v = take(top_ess.size)
    parts.append(_essential(d, v, g))
    if d == 3:
        parts.extend(_saddle_pairs(domain, vec, order, report))
    raw = _stack(parts)
    if not domain.is_ball:
        ess = _euler_essential(domain, vec, order, raw)
        raw = _stack([tuple(raw[k] for k in PersistenceDiagram._FIELDS), ess])
        report("essential classes: %d of D%d", ess[1].size, d - 1)
    return PersistenceDiagram(comm, d, raw, min_persistence, [])


def _essential(dim, v, g):
    k = v.size
    return (dim, v, np.full(k, np.inf), g, np.full(k, -1, np.int64))


def _stack(parts) -> dict:
    dims, b, dd, bv, dv = [], [], [], [], []
    for dim, birth, death, bvert, dvert in parts:
        birth = np.asarray(birth, np.float64)
        dims.append(np.full(birth.size, dim, dtype=np.int64))
        b.append(birth)
        dd.append(np.asarray(death, np.float64))
        bv.append(np.asarray(bvert, np.int64))
        dv.append(np.asarray(dvert, np.int64))
    raw = {"dim": np.concatenate(dims), "birth": np.concatenate(b),
           "death": np.concatenate(dd), "birth_vertex": np.concatenate(bv),
           "death_vertex": np.concatenate(dv)}
    o = np.lexsort((raw["death_vertex"], raw["birth_vertex"], raw["dim"]))
    return {k: x[o] for k, x in raw.items()}


def _saddle_pairs(domain, vec, order, report):
    """D1 of 3D data (finite pairs and essential classes) from the Morse
    complex. Collective on ``domain.comm``."""
    pairs, essential = saddle_saddle_pairs(domain, order, progress=report)
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    essential = np.asarray(essential, dtype=np.int64).ravel()
    vals = _values_at(vec, _layout_index(domain, np.concatenate((pairs.ravel(), essential))))
    pv = vals[:pairs.size].reshape(-1, 2)
    ev = vals[pairs.size:]
    report("D1: %d pairs, %d essential", pairs.shape[0], essential.size)
    return [(1, pv[:, 0], pv[:, 1], pairs[:, 0], pairs[:, 1]), _essential(1, ev, essential)]


def _layout_index(domain, gids: np.ndarray) -> np.ndarray:
    """Vertex layout indices of global vertex ids (the same under a block
    partition and on grids); on a renumbered complex -1 for the vertices this
    rank does not hold, which are never its own. Not collective."""
    return domain._held_layout(gids) if domain.renumbered else gids


def _global_id(domain, idx: np.ndarray) -> np.ndarray:
    """Global vertex ids of vertex layout indices given equally on every
    rank. Collective on ``domain.comm`` when the domain is renumbered."""
    return domain.global_ids_of(idx) if domain.renumbered else idx


def _values_at(vec: DistVector, gids: np.ndarray) -> np.ndarray:
    """Values at vertex layout indices given equally on every rank. Collective."""
    lay = vec.layout
    out = np.zeros(gids.size, dtype=np.float64)
    mine = lay.is_local(gids) if gids.size else np.zeros(0, bool)
    out[mine] = vec.local[gids[mine] - lay.start]
    if vec.comm.Get_size() > 1:
        vec.comm.Allreduce(MPI.IN_PLACE, out, op=MPI.SUM)
    return out


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
        a.append(np.searchsorted(key, v[m] * n_loc + u[m]))
        b.append(np.searchsorted(key, v[m] * n_loc + w[m]))
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
        a.append(np.searchsorted(key, e * nt + t1))
        b.append(np.searchsorted(key, e * nt + t2))
    owner = key // nt
    comps = _components_per(owner, np.concatenate(a), np.concatenate(b), erows.shape[0])
    bad = np.flatnonzero(comps > 1)
    own = cx.owned_slice(1)
    bad = bad[(bad >= own.start) & (bad < own.stop)]
    return np.sort(cx.layout_to_global(erows[bad]), axis=1).reshape(-1, 2)


def _euler_essential(cx, vec, order, raw):
    """Essential (d-1)-classes of a complex from the Euler characteristic of
    every vertex's lower star. Collective."""
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

    def count(gids):
        gids = _layout_index(cx, gids)
        gids = gids[lay.is_local(gids)] if gids.size else gids
        return np.bincount(gids - lay.start, minlength=lay.local_size).astype(np.int64)

    fin = np.isfinite(raw["death"])
    bal = chi.copy()                          # chi - sum_{k != d-1} (-1)^k dbeta_k
    births_dm1 = None
    for k in range(d + 1):
        m = raw["dim"] == k
        births = count(raw["birth_vertex"][m])
        deaths = count(raw["death_vertex"][m & fin])
        if k == d - 1:
            births_dm1, deaths_dm1 = births, deaths
            continue
        bal -= (-1) ** k * (births - deaths)
    dbeta = (-1) ** (d - 1) * bal
    ess = dbeta - births_dm1 + deaths_dm1
    exc = None
    if ess.size and ess.min() < 0:
        exc = RuntimeError("inconsistent Euler balance at vertex %d: the complex is probably "
                           "not a manifold (pinched vertex)"
                           % cx.layout_to_global(np.array([np.argmin(ess) + lay.start]))[0])
    agree(cx.comm, exc)
    at = np.flatnonzero(ess > 0)
    mine = np.repeat(at + lay.start, ess[at])
    allg = np.concatenate(cx.comm.allgather(mine))
    return _essential(d - 1, _values_at(vec, allg), _global_id(cx, allg))
