"""Boundary matrices, Hodge Laplacians, the Hodge decomposition of edge flows,
and Betti numbers of a :class:`SimplicialComplex`.

Orientation by sorted global vertex ids: the face obtained by deleting vertex
``i`` of a sorted simplex has sign ``(-1)**i`` (edge (a<b): -1 at a, +1 at b;
triangle [a,b,c]: (b,c) - (a,c) + (a,b)). Matrices are indexed by layout
index (the global ids under a block partition; see SimplicialComplex).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

import preconditioners
from dmsolve import DistCSR, DistVector
from dmsolve.bsp import BSP, piece_components, stable_argsort
from dmsolve.krylov import cg
from dmsolve.spgemm import matmat, transpose
from dmsolve.validate import agreed, check_bool, check_choice, check_int, check_real

from ..core import search_rows
from ..domains import check_complex
from ..persistence import connected_components, gf2_rank

__all__ = ["boundary_matrix", "hodge_laplacian", "hodge_decomposition",
           "HodgeDecomposition", "betti_numbers", "coherent_orientation_signs"]


def _local_rows(cx, k):
    """Local k-simplex rows, their global ids and a mask of the owned ones."""
    rows, gids = cx.local_simplices(k)
    own = np.zeros(rows.shape[0], dtype=bool)
    if k == 0:
        own[cx.owned_positions()] = True
    else:
        own[cx.owned_slice(k)] = True
    return rows, gids, own


def _incidence(cx, k, cache: dict | None = None):
    """Local incidence of all local k-simplices: ``(face_pos, simplex_pos,
    sign)`` with positions in the local (k-1)- and k-simplex lists
    (remembered in ``cache`` when given, as one decomposition needs each
    several times)."""
    if cache is not None and k in cache:
        return cache[k]
    rows, _ = cx.local_simplices(k)
    frows, _ = cx.local_simplices(k - 1)
    # orientation by sorted *global* vertex ids: the removed vertex's place in
    # the globally sorted tuple (its place in ``rows`` under a block partition)
    place = None
    if cx.renumbered:
        U = cx.layout_to_global(rows)
        place = (U[:, None, :] < U[:, :, None]).sum(axis=2)
    fp, sp_, sg = [], [], []
    for i in range(k + 1):
        face = np.delete(rows, i, axis=1)
        fp.append(search_rows(frows, face, cx.num_vertices))
        sp_.append(np.arange(rows.shape[0], dtype=np.int64))
        sg.append(np.full(rows.shape[0], (-1.0) ** i) if place is None
                  else 1.0 - 2.0 * (place[:, i] % 2))
    out = np.concatenate(fp), np.concatenate(sp_), np.concatenate(sg)
    if cache is not None:
        cache[k] = out
    return out


def boundary_matrix(cx, k: int) -> DistCSR:
    """The boundary operator ``B_k`` from k-chains to (k-1)-chains.

    A DistCSR of shape ``(n_{k-1}, n_k)``, rows on ``cx.simplex_layout(k-1)``
    and columns on ``cx.simplex_layout(k)``; entry ``(f, s)`` is
    ``(-1)**i`` when ``f`` is ``s`` without its i-th (sorted) vertex.
    Collective on ``cx.comm`` (one BSP superstep of assembly).

    Raises
    ------
    TypeError
        If ``cx`` is not a SimplicialComplex.
    ValueError
        On every rank, if ``k`` is not an integer >= 1.

    Examples
    --------
    Two triangles sharing an edge; edges point from the lower vertex id to
    the higher:

    >>> import numpy as np
    >>> from mpi4py import MPI
    >>> import topology
    >>> comm = MPI.COMM_WORLD
    >>> cx = topology.SimplicialComplex([np.array([[0, 1, 2], [1, 2, 3]])], comm)
    >>> print(cx.simplices(1).tolist())
    [[0, 1], [0, 2], [1, 2], [1, 3], [2, 3]]
    >>> print(topology.boundary_matrix(cx, 1).to_scipy().toarray())
    [[-1. -1.  0.  0.  0.]
     [ 1.  0. -1. -1.  0.]
     [ 0.  1.  1.  0. -1.]
     [ 0.  0.  0.  1.  1.]]
    >>> print(topology.boundary_matrix(cx, 2).to_scipy().toarray())
    [[ 1.  0.]
     [-1.  0.]
     [ 1.  1.]
     [ 0. -1.]
     [ 0.  1.]]
    """
    _check_complex(cx)
    with agreed(cx.comm):
        _check_k(k, low=1)
    return _boundary(cx, k)


def _boundary(cx, k: int, col_sign: np.ndarray | None = None, cache=None) -> DistCSR:
    """``B_k``, with column ``s`` multiplied by ``col_sign[s]`` when given
    (one sign per local k-simplex of ``cx.local_simplices(k)``)."""
    rl, cl = cx.simplex_layout(k - 1), cx.simplex_layout(k)
    if k > cx.dimension:
        e = np.zeros(0, np.int64)
        return DistCSR.from_coo(e, e, np.zeros(0), (rl.global_size, 0), cx.comm,
                                layout=rl, col_layout=cl)
    fpos, spos, sign = _incidence(cx, k, cache)
    if col_sign is not None:
        sign = sign * col_sign[spos]
    _, sgids, own = _local_rows(cx, k)
    _, fgids, _ = _local_rows(cx, k - 1)
    keep = own[spos]
    return DistCSR.from_coo(fgids[fpos[keep]], sgids[spos[keep]], sign[keep],
                            (rl.global_size, cl.global_size), cx.comm,
                            layout=rl, col_layout=cl)


def hodge_laplacian(cx, k: int, part: str = "full") -> DistCSR:
    """The Hodge Laplacian ``L_k = B_k^T B_k + B_{k+1} B_{k+1}^T`` on k-cochains.

    ``part`` is ``"full"``, ``"up"`` (``B_{k+1} B_{k+1}^T``) or ``"down"``
    (``B_k^T B_k``). Each rank forms its share of the products locally: the
    up part from its owned (k+1)-simplices, the down part from its owned
    (k-1)-simplices, whose cofaces all lie in its closed stars, with the
    sparse products of :mod:`dmsolve.spgemm` on the process's threads (the
    same values at any thread count). Collective on ``cx.comm`` (one BSP
    superstep of assembly).

    Raises
    ------
    TypeError
        If ``cx`` is not a SimplicialComplex; on every rank, if ``part`` is
        not a string.
    ValueError
        On every rank, if ``k`` is not an integer >= 0 or ``part`` is not
        one of the three.

    Examples
    --------
    On two triangles sharing an edge: ``L_1`` on the five edges, equal to
    ``B_1^T B_1 + B_2 B_2^T``:

    >>> import numpy as np
    >>> from mpi4py import MPI
    >>> import topology
    >>> comm = MPI.COMM_WORLD
    >>> cx = topology.SimplicialComplex([np.array([[0, 1, 2], [1, 2, 3]])], comm)
    >>> L1 = topology.hodge_laplacian(cx, 1).to_scipy()
    >>> print(L1.toarray())
    [[ 3.  0.  0. -1.  0.]
     [ 0.  3.  0.  0. -1.]
     [ 0.  0.  4.  0.  0.]
     [-1.  0.  0.  3.  0.]
     [ 0. -1.  0.  0.  3.]]
    >>> B1 = topology.boundary_matrix(cx, 1).to_scipy()
    >>> B2 = topology.boundary_matrix(cx, 2).to_scipy()
    >>> print(abs(L1 - (B1.T @ B1 + B2 @ B2.T)).max())
    0.0
    """
    _check_complex(cx)
    with agreed(cx.comm):
        _check_k(k, low=0)
        part = check_choice("part", part, ("full", "up", "down"))
    return _laplacian(cx, k, part)


def _laplacian(cx, k: int, part: str, sign: np.ndarray | None = None, cache=None) -> DistCSR:
    """``L_k`` (or a part), conjugated by ``diag(sign)`` when given (one sign
    per local k-simplex; owner and ghost copies must agree)."""
    lay = cx.simplex_layout(k)
    n = lay.global_size
    _, gids, _ = _local_rows(cx, k)
    nloc = gids.size
    rows, cols, vals = [], [], []
    if part in ("full", "up") and k + 1 <= cx.dimension:
        fpos, spos, sg = _incidence(cx, k + 1, cache)
        _, _, own = _local_rows(cx, k + 1)
        m = own[spos]
        if sign is not None:
            sg = sg * sign[fpos]
        C = sp.csr_matrix((sg[m], (fpos[m], spos[m])), shape=(nloc, own.size))
        G = matmat(C, transpose(C), sort=False).tocoo()     # from_coo sorts
        rows.append(gids[G.row]), cols.append(gids[G.col]), vals.append(G.data)
    if part in ("full", "down") and k >= 1:
        fpos, spos, sg = _incidence(cx, k, cache)
        _, _, own = _local_rows(cx, k - 1)
        m = own[fpos]
        if sign is not None:
            sg = sg * sign[spos]
        R = sp.csr_matrix((sg[m], (fpos[m], spos[m])), shape=(own.size, nloc))
        G = matmat(transpose(R), R, sort=False).tocoo()
        rows.append(gids[G.row]), cols.append(gids[G.col]), vals.append(G.data)
    cat = (lambda a, dt: np.concatenate(a) if a else np.zeros(0, dt))
    return DistCSR.from_coo(cat(rows, np.int64), cat(cols, np.int64), cat(vals, np.float64),
                            (n, n), cx.comm, layout=lay, col_layout=lay)


class HodgeDecomposition:
    """``f = gradient + curl + harmonic`` of an edge flow.

    Attributes
    ----------
    gradient, curl, harmonic : DistVector on the edge layout
        ``B_1^T p``, ``B_2 w`` and the rest.
    potential : DistVector on the vertex layout (``p``)
    vector_potential : DistVector on the triangle layout (``w``), or None
    energies : dict
        Squared 2-norms ``gradient``, ``curl``, ``harmonic`` and ``total``
        (``||f||^2``).
    infos : dict
        The two Krylov solves' SolveInfo objects.

    Notes
    -----
    Not collective to construct (:func:`hodge_decomposition` builds it). The
    vectors are indexed by layout index: on a complex partitioned by
    METIS or RCB, ``cx.gather_global(hd.gradient, 1)`` gives them in global
    edge-id order (``.gather()`` does under the default block partition).
    """

    def __init__(self, gradient, curl, harmonic, potential, vector_potential, energies, infos):
        self.gradient = gradient
        self.curl = curl
        self.harmonic = harmonic
        self.potential = potential
        self.vector_potential = vector_potential
        self.energies = energies
        self.infos = infos


def hodge_decomposition(cx, flow, *, rtol: float = 1e-8, pc="amg",
                        maxiter: int | None = None, max_nullspace: int = 32,
                        orient: bool = True) -> HodgeDecomposition:
    """Hodge decomposition ``f = B_1^T p + B_2 w + h`` of an edge flow.

    Solves ``(B_1 B_1^T) p = B_1 f`` and ``(B_2^T B_2) w = B_2^T f`` by
    preconditioned CG. Both are positive semidefinite, singular and
    consistent (their right-hand sides lie in the range). The null space of
    the graph Laplacian (one constant per connected component, up to
    ``max_nullspace`` of them) is projected out in CG; isolated vertices get
    a unit diagonal, which leaves ``B_1^T p`` unchanged. The null space of
    ``B_2^T B_2`` (closed 2-cycles, empty on a surface with boundary) is left
    to CG, which stays in the range on a consistent system.

    The curl system is solved in coherently oriented form (``orient=True``):
    with ``S`` the signs of :func:`coherent_orientation_signs`, CG solves
    ``(S B_2^T B_2 S) w' = S B_2^T f`` and ``w = S w'``. This is the same
    system up to a diagonal similarity (same solution, same Krylov iterates
    without a preconditioner), but on an orientable surface the matrix is an
    M-matrix (a dual-graph Laplacian plus boundary terms) and AMG needs some
    ten iterations instead of hundreds.

    Parameters
    ----------
    cx : SimplicialComplex
        A :class:`Grid` is refused (``TypeError``): ``grid.to_complex()`` is
        its triangulation as a complex, whose edges (``cx.simplices(1)``) a
        flow is given on.
    flow : DistVector on ``cx.simplex_layout(1)`` or global array
    rtol : float
        CG stops when ``||b - A x|| <= rtol * ||b||`` (per system). The
        gradient and curl parts are orthogonal whatever the tolerance
        (``B_1 B_2 = 0``); the harmonic part is off by about ``rtol``:
        ``||L_1 h|| ~ rtol ||f||``, and its inner products with the other
        parts, hence the error of the energy sum, are of order ``rtol^2``
        relative to ``||f||^2`` (down to rounding). The default 1e-8 gives
        orthogonality and energy sums far inside 1e-8 relative (1e-13 on
        the benchmark's 3M-edge grid) and ``||L_1 h|| <= 1e-7 ||f||``.
    pc : str or (name, options) or None
        A preconditioner name for ``preconditioners.make`` ("amg", "jacobi",
        ...; see ``dmsolve.PRECONDITIONERS``).
    maxiter : int, optional
        Iteration limit of each CG solve (default ``10 n``).
    max_nullspace : int
        Largest number of component indicator vectors projected out of the
        gradient solve (beyond it, CG relies on consistency alone).
    orient : bool
        Solve the curl system in coherently oriented form (see above).

    Returns
    -------
    HodgeDecomposition

    Raises
    ------
    TypeError
        If ``cx`` is not a SimplicialComplex; on every rank, if ``rtol``,
        ``maxiter``, ``max_nullspace`` or ``orient`` has the wrong type.
    ValueError
        On every rank, if ``rtol`` is negative or not finite, or ``maxiter``
        or ``max_nullspace`` is negative; ``flow`` as for
        :meth:`SimplicialComplex.cochain`.
    dmsolve.krylov.ConvergenceError
        On every rank, if a solve does not converge.

    Notes
    -----
    Collective on ``cx.comm``.

    References
    ----------
    .. [1] S. Barbarossa and S. Sardellitti, "Topological signal processing
       over simplicial complexes", IEEE TSP 68, 2020.
    .. [2] L.-H. Lim, "Hodge Laplacians on graphs", SIAM Review 62(3), 2020.

    Examples
    --------
    A triangulated 3 x 3 square with the middle square left open (one hole),
    and a flow that climbs a height ``x + 2 y`` and turns around the hole:

    >>> import numpy as np
    >>> from mpi4py import MPI
    >>> import topology
    >>> comm = MPI.COMM_WORLD
    >>> v = np.arange(16).reshape(4, 4)                   # vertex (x, y) is 4 y + x
    >>> a, b, c, d = v[:-1, :-1].ravel(), v[:-1, 1:].ravel(), v[1:, :-1].ravel(), v[1:, 1:].ravel()
    >>> keep = np.arange(9) != 4                          # the middle square left open
    >>> triangles = np.vstack([np.c_[a, b, d][keep], np.c_[a, c, d][keep]])
    >>> cx = topology.SimplicialComplex([triangles[comm.rank::comm.size]], comm)
    >>> edges = cx.simplices(1)                           # sorted rows (a, b), a < b
    >>> x, y = v.ravel() % 4, v.ravel() // 4
    >>> height = x + 2.0 * y
    >>> angle = np.arctan2(y - 1.5, x - 1.5)              # about the hole's centre
    >>> turn = np.angle(np.exp(1j * (angle[edges[:, 1]] - angle[edges[:, 0]])))
    >>> flow = height[edges[:, 1]] - height[edges[:, 0]] + turn
    >>> hd = topology.hodge_decomposition(cx, flow)
    >>> print({k: round(float(e), 4) for k, e in hd.energies.items()})
    {'gradient': 134.3686, 'curl': 0.0, 'harmonic': 19.2198, 'total': 153.5884}

    The parts' energies add up to the flow's. The harmonic part, what is
    left of the turn once its gradient part is taken out, is free of
    divergence and of curl (checked with scipy on the gathered matrices):

    >>> h = hd.harmonic.gather()
    >>> B1 = topology.boundary_matrix(cx, 1).to_scipy()
    >>> B2 = topology.boundary_matrix(cx, 2).to_scipy()
    >>> print(np.abs(B1 @ h).max() < 1e-6, np.abs(B2.T @ h).max() < 1e-6)
    True True
    """
    _check_complex(cx)
    with agreed(cx.comm):
        rtol = check_real("rtol", rtol, low=0.0)
        maxiter = check_int("maxiter", maxiter, low=0, allow_none=True)
        max_nullspace = check_int("max_nullspace", max_nullspace, low=0)
        orient = check_bool("orient", orient)
    f = cx.cochain(flow, 1)
    inc: dict = {}     # local incidence arrays, computed once
    B1 = _boundary(cx, 1, cache=inc)
    L0 = _laplacian0(cx, inc)
    b0 = B1.matvec(f)
    ns = _component_nullspace(cx, connected_components(cx), max_nullspace)
    p, info0 = cg(L0, b0, rtol=rtol, M=_make_pc(pc, L0), nullspace=ns or None,
                  maxiter=maxiter, raise_on_failure=True)
    grad = B1.rmatvec(p)
    infos = {"gradient": info0}
    w = None
    if cx.dimension >= 2 and cx.simplex_layout(2).global_size:
        inc.pop(1, None)
        sign = coherent_orientation_signs(cx, cache=inc) if orient else None
        B2 = _boundary(cx, 2, sign, inc)            # B_2 S
        L2 = _laplacian(cx, 2, "down", sign, inc)   # S B_2^T B_2 S
        b2 = B2.rmatvec(f)
        w, info2 = cg(L2, b2, rtol=rtol, M=_make_pc(pc, L2), maxiter=maxiter,
                      raise_on_failure=True)
        curl = B2.matvec(w)                      # B_2 S w' = B_2 w
        if sign is not None:
            w.local[:] *= sign[cx.owned_slice(2)]
        infos["curl"] = info2
    else:
        curl = f.zeros_like()
    harm = f.copy().axpy(-1.0, grad).axpy(-1.0, curl)
    energies = {"gradient": grad.dot(grad), "curl": curl.dot(curl),
                "harmonic": harm.dot(harm), "total": f.dot(f)}
    return HodgeDecomposition(grad, curl, harm, p, w, energies, infos)


def betti_numbers(cx) -> list[int]:
    """Betti numbers ``beta_0 .. beta_d`` with coefficients in GF(2).

    ``beta_k = n_k - rank B_k - rank B_{k+1}``. ``beta_0`` is the number of
    connected components (distributed) and ``rank B_1 = n_0 - beta_0`` over
    any field. The ranks of ``B_2`` and ``B_3`` are computed exactly over
    GF(2) by a distributed column reduction (:func:`gf2_rank`): each rank
    reduces the columns of its own simplices, and a column travels to the
    rank owning the pivots of its lowest row; no rank gathers a matrix.
    Integer arithmetic mod 2, no rounding, so the numbers are exact. They
    equal the rational Betti numbers whenever the integral homology has no
    2-torsion, e.g. for every complex embedded in R^3.

    Collective on ``cx.comm``. Raises ``TypeError`` if ``cx`` is not a
    SimplicialComplex.

    References
    ----------
    .. [1] A. Zomorodian and G. Carlsson, "Computing persistent homology",
       Discrete Comput. Geom. 33, 2005 (column reduction).
    .. [2] U. Bauer, M. Kerber, J. Reininghaus, "Distributed computation of
       persistent homology", ALENEX 2014.

    Examples
    --------
    >>> import numpy as np
    >>> from mpi4py import MPI
    >>> import topology
    >>> comm = MPI.COMM_WORLD
    >>> sphere = np.array([[0, 1, 2], [0, 1, 3], [0, 2, 3], [1, 2, 3]])  # a hollow tetrahedron
    >>> print(topology.betti_numbers(topology.SimplicialComplex([sphere], comm)))
    [1, 0, 1]
    >>> circle = np.array([[0, 1], [1, 2], [0, 2]])       # three edges, no triangle
    >>> print(topology.betti_numbers(topology.SimplicialComplex([circle], comm)))
    [1, 1]
    >>> ball = np.array([[0, 1, 2, 3]])                    # the solid tetrahedron
    >>> print(topology.betti_numbers(topology.SimplicialComplex([ball], comm)))
    [1, 0, 0, 0]
    """
    _check_complex(cx)
    labels = connected_components(cx)
    mine = np.count_nonzero(labels.local == cx.owned_global_ids(0))
    beta0 = int(cx.comm.allreduce(mine, op=MPI.SUM))
    n = [cx.simplex_layout(k).global_size for k in range(cx.dimension + 2)]
    ranks = [0, n[0] - beta0] + [0] * cx.dimension
    for k in range(2, cx.dimension + 1):
        ptr, rows, ids = _owned_columns_gf2(cx, k)
        ranks[k] = gf2_rank(ptr, rows, n[k - 1], cx.comm, ids=ids)
    return [n[k] - ranks[k] - ranks[k + 1] for k in range(cx.dimension + 1)]


def _owned_columns_gf2(cx, k):
    """This rank's columns of ``B_k`` mod 2 (its owned k-simplices, by global
    id) in CSR form, rows the faces' global ids ascending. Not collective."""
    fpos, spos, _ = _incidence(cx, k)
    _, sgids, own = _local_rows(cx, k)
    _, fgids, _ = _local_rows(cx, k - 1)
    keep = own[spos]
    cols, rows = sgids[spos[keep]].astype(np.int64), fgids[fpos[keep]].astype(np.int64)
    o = np.lexsort((rows, cols))
    cols, rows = cols[o], rows[o]
    ids, counts = np.unique(cols, return_counts=True)
    ptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    return ptr, rows, ids


def coherent_orientation_signs(cx, *, cache: dict | None = None) -> np.ndarray:
    """Signs ``s_t = +-1`` of the local triangles that orient them coherently.

    Two triangles sharing an edge are coherently oriented when they induce
    opposite orientations on it: ``s_t B[e, t] = -s_u B[e, u]``. On an
    orientable surface such signs exist, and then ``S B_2^T B_2 S`` (``S =
    diag(s)``) has off-diagonal entries ``-1`` between neighbours and
    diagonal 3: the graph Laplacian of the dual graph plus a positive
    diagonal on boundary triangles, an M-matrix on which aggregation AMG
    converges fast. With the sorted-vertex orientation the couplings have
    mixed signs, and the constant near-null-space candidate of AMG is wrong.

    Each rank solves the constraints ``s_t s_u = -B[e, t] B[e, u]`` over the
    edges with exactly two local cofaces (one connected-components pass over
    a doubled graph, which finds the two consistent sign patterns of each
    piece, normalised to ``+1`` on the piece's smallest triangle id). In one
    BSP superstep every ghost triangle sends its piece and sign to the
    triangle's owner, which links its own piece to it with the parity that
    makes the two copies agree; :func:`dmsolve.bsp.piece_components` then
    merges the pieces with their parities up and down the binary tree of
    ranks (``method="tree"``: ``2 ceil(log2 p) + 1`` supersteps, no rank
    talking to more than its ghost neighbours and three tree neighbours per
    level). Where no
    coherent orientation exists (non-orientable or non-manifold parts),
    owners send their signs to the ghost copies in one more superstep, so
    owner and ghost copies always agree; such parts keep whatever signs they
    got (any signs give the same solution, only the iteration count
    changes). The result does not depend on the number of ranks on an
    orientable piece (up to the sign of the whole piece, fixed by ``+1`` on
    its smallest triangle).

    Returns one float64 sign per row of ``cx.local_simplices(2)``. ``cache``
    is a private dict for the local incidence arrays, shared with the other
    assembly steps of :func:`hodge_decomposition`. Collective on ``cx.comm``.
    """
    from scipy.sparse.csgraph import connected_components as _cc
    _check_complex(cx)
    comm = cx.comm
    rows, gids = cx.local_simplices(2)
    nt = rows.shape[0]
    fpos, tpos, sign = _incidence(cx, 2, cache) if nt else (np.zeros(0, np.int64),) * 3
    o = stable_argsort(fpos)
    fpos, tpos, sign = fpos[o], tpos[o], sign[o]
    cnt = np.bincount(fpos, minlength=1)
    first = np.concatenate(([0], np.cumsum(cnt)))[np.flatnonzero(cnt == 2)]
    t, u = tpos[first], tpos[first + 1]
    same = sign[first] * sign[first + 1] < 0           # s_t s_u = +1
    # doubled graph: node t is "s_t = +1", node t + nt is "s_t = -1"
    a = np.concatenate((t[same], t[same] + nt, t[~same], t[~same] + nt))
    b = np.concatenate((u[same], u[same] + nt, u[~same] + nt, u[~same]))
    g = sp.coo_matrix((np.ones(a.size, np.int8), (a, b)), shape=(2 * nt, 2 * nt))
    _, lab = _cc(g, directed=False)
    plus, minus = lab[:nt], lab[nt:]
    pair = np.minimum(plus, minus)
    local = np.where(plus == pair, 1, -1).astype(np.int64)   # a valid pattern per piece
    _, comp = np.unique(pair, return_inverse=True)
    comp = comp.ravel()
    ncomp = int(comp.max()) + 1 if nt else 0
    root = np.full(ncomp, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(root, comp, gids)
    at_root = np.full(ncomp, -1, dtype=np.int64)
    at_root[comp[gids == root[comp]]] = np.flatnonzero(gids == root[comp])
    flip = local[at_root] if nt else np.zeros(0, np.int64)   # +1 on each root
    cur = local * flip[comp]          # +1 on the smallest triangle of each piece
    # A ghost copy links its piece to the owner's piece of the same triangle,
    # with the parity that makes both copies' signs equal.
    lay = cx.simplex_layout(2)
    i0, i1 = cx.owned_slice(2).start, cx.owned_slice(2).stop
    ghost = np.concatenate((np.arange(i0), np.arange(i1, nt))).astype(np.int64)
    dest = cx.vertex_layout.owner(rows[ghost, 0]) if ghost.size else np.zeros(0, np.int64)
    asked = ghost[stable_argsort(dest)]      # answers come back in this order
    empty = np.zeros(0, np.int64)
    link_local, link_rank, link_remote, parity, pos, src = (empty,) * 6
    ctx = BSP(comm)
    tag = ctx.tags("links", "signs")
    if comm.Get_size() > 1:
        mine = np.stack((gids[ghost], comp[ghost], cur[ghost]), 1).astype(np.int64)
        ctx.send_rows(dest, mine, tag=tag.links)
        q, src = ctx.sync("orientation:links").concat_with_sources(tag.links, dtype=np.int64,
                                                                    shape=(3,))
        pos = q[:, 0] - lay.start + i0
        link_local, link_rank, link_remote = comp[pos].astype(np.int64), src, q[:, 1]
        parity = cur[pos] * q[:, 2]      # sign(owner's piece) = parity * sign(ghost's piece)
    pieces = piece_components(root, link_local, link_rank, link_remote, comm, parity=parity,
                              method="tree", ledger=ctx.ledger)
    out = cur * pieces.sign[comp]
    if not pieces.consistent and comm.Get_size() > 1:
        # no coherent orientation somewhere: the owner's sign wins for every ghost copy
        ctx.send_rows(src, out[pos], tag=tag.signs)
        out[asked] = ctx.sync("orientation:owner-signs").concat(tag.signs, dtype=np.int64)
    return out.astype(np.float64)


# -- helpers ---------------------------------------------------------------------------------
def _check_complex(cx) -> None:
    check_complex(cx, "Hodge theory needs explicit simplices",
                  " with explicit simplices (the same vertex ids)")


def _check_k(k, low) -> None:
    # ValueError also for a k of the wrong type, as always here
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < low:
        raise ValueError("k must be an integer >= %d, got %r" % (low, k))


def _laplacian0(cx, cache=None) -> DistCSR:
    """``B_1 B_1^T`` with a unit diagonal on isolated vertices."""
    L = _laplacian(cx, 0, "up", cache=cache)
    d = L.diagonal()
    iso = np.flatnonzero(d.local == 0)
    if cx.comm.allreduce(iso.size, op=MPI.SUM) == 0:
        return L
    lay = cx.vertex_layout
    g = iso + lay.start
    # assemble once more with the extra diagonal (cheap next to the solve)
    rows = L.local_rows().tocoo()
    r = np.concatenate((rows.row.astype(np.int64) + lay.start, g))
    c = np.concatenate((rows.col.astype(np.int64), g))
    v = np.concatenate((rows.data, np.ones(g.size)))
    return DistCSR.from_coo(r, c, v, L.shape, cx.comm, layout=lay, col_layout=lay)


def _component_nullspace(cx, labels: DistVector, limit: int) -> list[DistVector]:
    """Indicator vectors of the components with at least one edge (two or more
    vertices); none when there are more than ``limit`` of them. Collective on
    ``cx.comm``: each component's vertex count is summed at the rank
    ``label % size`` (one superstep), then only the labels of the large
    components, at most ``limit`` of them, are allgathered."""
    comm = cx.comm
    size = comm.Get_size()
    own = labels.local
    roots, counts = np.unique(own.astype(np.int64), return_counts=True)
    ctx = BSP(comm)
    tag = ctx.tags("roots", "counts")
    dest = roots % size
    ctx.send_rows(dest, roots, tag.roots)
    ctx.send_rows(dest, counts.astype(np.int64), tag.counts)
    inbox = ctx.sync("hodge:component-sizes")
    got = inbox.concat(tag.roots, dtype=np.int64)
    u, inv = np.unique(got, return_inverse=True)
    sizes = np.bincount(inv.ravel(), weights=inbox.concat(tag.counts, dtype=np.int64),
                        minlength=u.size)
    mine = u[sizes >= 2]
    if comm.allreduce(int(mine.size)) > limit:
        return []
    big = np.sort(np.concatenate(comm.allgather(mine)))
    return [DistVector(cx.vertex_layout, (own == r).astype(np.float64)) for r in big]


def _make_pc(pc, A):
    if pc is None:
        return None
    return preconditioners.make(pc, A)
