"""Edge-flow estimation on a SimplicialComplex: denoising, interpolation from
samples, l1 trend filtering by ADMM, and inference of triangles from flows.

Flows are edge cochains in the complex's orientation (each edge from its
smaller to its larger global vertex id), given as DistVectors on
``cx.simplex_layout(1)`` or global arrays in ``cx.simplices(1)`` order.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI
import scipy.sparse as sp

import preconditioners
from dmsolve import DistCSR, DistVector, Layout
from dmsolve.bsp import BSP, stable_argsort
from dmsolve.krylov import cg
from dmsolve.validate import agreed, check_bool, check_int, check_real

from ..core import find_rows
from ..domains import SimplicialComplex
from ._filters import IterationError, _parts, check_complex
from ._hodge import _boundary

__all__ = ["denoise_flow", "interpolate_flow", "trend_filter_flow", "TrendFilterInfo",
           "infer_triangles", "fill_triangles"]


# -- denoising ------------------------------------------------------------------------------
def denoise_flow(cx, flow, mu, *, rtol: float = 1e-10, pc="amg", maxiter: int | None = None,
                 return_info: bool = False):
    """Tikhonov denoising: the solution of ``(I + mu_d L_down + mu_u L_up) x = flow``.

    ``x`` minimises ``||x - flow||^2 + mu_d ||B_1 x||^2 + mu_u ||B_2^T x||^2``,
    a penalty on the divergence and on the curl of the flow: a low-pass
    filter with response ``1 / (1 + mu lam)`` (Barbarossa and Sardellitti
    2020, Sec. V). ``mu`` a number gives ``(I + mu L_1) x = flow``; a pair
    ``(mu_d, mu_u)`` weighs the two components (pytspl's ``P`` choices:
    ``L1`` is ``(mu, mu)``, ``L1L`` is ``(mu, 0)``, ``L1U`` is ``(0, mu)``).
    Solved by CG with ``pc`` (AMG by default) to
    ``||flow - A x|| <= rtol ||flow||``.

    Parameters
    ----------
    cx : SimplicialComplex
    flow : DistVector or array
    mu : float or (float, float)
        Non-negative.
    rtol : float
    pc : str, (name, options) or None
        For ``preconditioners.make``.
    maxiter : int, optional
    return_info : bool
        Also return the CG SolveInfo.

    Returns
    -------
    x : DistVector on ``cx.simplex_layout(1)``
    info : SolveInfo, if ``return_info``

    Raises
    ------
    TypeError, ValueError
        On every rank: a flow of the wrong length, not real or not finite; a
        ``mu`` that is negative, not finite, or not a number or a pair.
    dmsolve.krylov.ConvergenceError
        On every rank, if CG does not converge.

    Notes
    -----
    Collective on ``cx.comm``.

    References
    ----------
    .. [1] S. Barbarossa and S. Sardellitti, "Topological signal processing
       over simplicial complexes", IEEE TSP 68, 2020.

    Examples
    --------
    A triangulated 3 x 3 square with the middle square left open, and a
    gradient flow (the differences of a height) with noise added:

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
    >>> height = v.ravel() ** 2 / 10.0
    >>> clean = height[edges[:, 1]] - height[edges[:, 0]]
    >>> noisy = clean + 0.5 * np.random.default_rng(0).standard_normal(len(edges))

    A gradient flow has no curl: penalising the curl alone (``mu_d = 0``)
    removes noise and keeps the flow:

    >>> x, info = topology.denoise_flow(cx, noisy, (0.0, 10.0), return_info=True)
    >>> print(info.converged)
    True
    >>> x = x.gather()
    >>> print(f"{np.linalg.norm(noisy - clean):.3f} {np.linalg.norm(x - clean):.3f}")
    2.299 1.780
    """
    check_complex(cx)
    with agreed(cx.comm):
        mu_d, mu_u = _mu_pair(mu)
        rtol = check_real("rtol", rtol, low=0.0)
        maxiter = check_int("maxiter", maxiter, low=0, allow_none=True)
        return_info = check_bool("return_info", return_info)
        _check_edges(cx)
    f = cx.cochain(flow, 1)
    A = _combination(cx, 1.0, mu_d, mu_u)
    x, info = cg(A, f, rtol=rtol, M=_make_pc(pc, A), maxiter=maxiter, raise_on_failure=True)
    return (x, info) if return_info else x


# -- interpolation --------------------------------------------------------------------------
def interpolate_flow(cx, edge_ids, values, mu: float, eps: float = 1e-6, *,
                     rtol: float = 1e-10, pc="amg", maxiter: int | None = None,
                     return_info: bool = False):
    """The flow that fits samples on a set of edges and is smooth elsewhere.

    Minimises ``||x_S - y_S||^2 + mu x^T (L_1 + eps I) x`` over all flows,
    where ``S`` is the set of observed edges: the normal equations
    ``(P_S + mu L_1 + mu eps I) x = P_S y`` (``P_S`` the 0/1 diagonal of
    ``S``), solved by CG with ``pc`` (AMG by default). ``eps > 0`` keeps the
    system positive definite when a harmonic flow vanishes on ``S``.

    Parameters
    ----------
    cx : SimplicialComplex
    edge_ids : int array
        Global edge ids (rows of ``cx.simplices(1)``) of the samples. Each
        rank may give any subset; the sample set is their union. An edge
        given twice (on one rank or several) must have the same value.
    values : float array
        The observed flows, aligned with ``edge_ids``.
    mu, eps : float
        Positive.
    rtol, pc, maxiter, return_info
        As :func:`denoise_flow`.

    Returns
    -------
    x : DistVector on ``cx.simplex_layout(1)``
    info : SolveInfo, if ``return_info``

    Raises
    ------
    TypeError, ValueError
        On every rank: ids that are not integers or out of range, values
        that are not finite or not aligned with the ids, an empty sample set
        (on all ranks together), an edge with two different values, ``mu``
        or ``eps`` not positive.
    dmsolve.krylov.ConvergenceError
        On every rank, if CG does not converge.

    Notes
    -----
    Collective on ``cx.comm``: the samples travel to the owners of their
    edges in one BSP superstep (two under a METIS or RCB partition, through
    the block owner of each global id); no rank gathers them.

    References
    ----------
    .. [1] M. T. Schaub, Y. Zhu, J.-B. Seby, T. M. Roddenberry and S.
       Segarra, "Signal processing on higher-order networks: livin' on the
       edge... and beyond", Signal Processing 187, 2021 (Sec. 5).

    Examples
    --------
    A triangulated 3 x 3 square with the middle square left open, and the
    harmonic part of a flow turning around the hole: ``L_1 h = 0``, so it
    is the smoothest flow through its samples, here one edge in eight:

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
    >>> angle = np.arctan2(y - 1.5, x - 1.5)              # about the hole's centre
    >>> turn = np.angle(np.exp(1j * (angle[edges[:, 1]] - angle[edges[:, 0]])))
    >>> h = topology.hodge_decomposition(cx, turn, rtol=1e-12).harmonic.gather()
    >>> seen = np.arange(0, len(edges), 8)
    >>> print(len(seen), len(edges))
    4 32
    >>> x = topology.interpolate_flow(cx, seen, h[seen], 1.0).gather()
    >>> print(np.abs(x - h).max() < 1e-4)
    True
    """
    check_complex(cx)
    comm = cx.comm
    with agreed(comm):
        mu = check_real("mu", mu, low=0.0, low_open=True)
        eps = check_real("eps", eps, low=0.0, low_open=True)
        rtol = check_real("rtol", rtol, low=0.0)
        maxiter = check_int("maxiter", maxiter, low=0, allow_none=True)
        return_info = check_bool("return_info", return_info)
        _check_edges(cx)
        ids, vals = _check_samples(edge_ids, values, cx.simplex_layout(1).global_size)
    total = comm.allreduce(int(ids.size), op=MPI.SUM)
    with agreed(comm):
        if total == 0:
            raise ValueError("the sample set is empty: give at least one observed edge "
                             "(edge_ids on some rank)")
    pos, val = _route_samples(cx, ids, vals)
    lay = cx.simplex_layout(1)
    mask = np.zeros(lay.local_size)
    mask[pos] = 1.0
    rhs = np.zeros(lay.local_size)
    rhs[pos] = val
    A = _combination(cx, mu * eps, mu, mu, extra=mask)
    b = DistVector(lay, rhs)
    x, info = cg(A, b, rtol=rtol, M=_make_pc(pc, A), maxiter=maxiter, raise_on_failure=True)
    return (x, info) if return_info else x


# -- l1 trend filtering ---------------------------------------------------------------------
class TrendFilterInfo:
    """What :func:`trend_filter_flow` did.

    Attributes
    ----------
    converged : bool
    iterations : int
        ADMM iterations.
    primal_residual, dual_residual : float
        The final ADMM residuals ``||D x - z||`` and ``rho ||D^T (z - z_old)||``.
    objective : float
        ``1/2 ||x - y||^2 + mu_d ||B_1 x||_1 + mu_u ||B_2^T x||_1``.
    inner_iterations : int
        CG iterations of all the x-updates together (one AMG set-up).

    Not collective (built by :func:`trend_filter_flow`).
    """

    def __init__(self, converged, iterations, primal_residual, dual_residual, objective,
                 inner_iterations):
        self.converged = converged
        self.iterations = iterations
        self.primal_residual = primal_residual
        self.dual_residual = dual_residual
        self.objective = objective
        self.inner_iterations = inner_iterations

    def __repr__(self) -> str:
        return ("TrendFilterInfo(converged=%s, iterations=%d, primal=%.2e, dual=%.2e)"
                % (self.converged, self.iterations, self.primal_residual, self.dual_residual))


def trend_filter_flow(cx, flow, mu, *, rho: float = 1.0, rtol: float = 1e-8,
                      atol: float = 0.0, maxiter: int = 5000, pc="amg",
                      return_info: bool = False):
    """l1 trend filtering of an edge flow by ADMM.

    Minimises ``1/2 ||x - y||^2 + mu_d ||B_1 x||_1 + mu_u ||B_2^T x||_1``: a
    flow close to ``y`` whose divergence and curl are sparse (piecewise
    divergence- and curl-free), the simplicial trend filter of order 0
    (pytspl's ``SimplicialTrendFilter`` with shift operators ``B_1`` and
    ``B_2^T``). ``mu`` a number weighs both; ``(mu_d, mu_u)`` each, and a
    zero drops its term.

    Scaled ADMM on ``z = D x`` with ``D = [B_1; B_2^T]`` [1]_: the x-update
    solves ``(I + rho (B_1^T B_1 + B_2 B_2^T)) x = y + rho D^T (z - u)`` by
    CG, warm-started, with one AMG set-up for all iterations; the z-update
    is a soft threshold. It stops when ``||D x - z|| <= atol sqrt(m) + rtol
    max(||D x||, ||z||)`` and ``rho ||D^T (z - z_old)|| <= atol sqrt(n) +
    rtol rho ||D^T u||`` (Boyd et al., Sec. 3.3.1), ``m`` and ``n`` the
    numbers of constraints and edges.

    Parameters
    ----------
    cx : SimplicialComplex
    flow : DistVector or array
    mu : float or (float, float)
        Non-negative; not both zero.
    rho : float
        The ADMM penalty. The default 1 suits flows of any magnitude (the
        thresholds ``mu / rho`` scale with ``mu``, and ``D`` has entries
        +-1); on the Chicago traffic flows it converged in 50-120
        iterations where ``rho = mu`` took thousands.
    rtol, atol : float
        The stopping test above.
    maxiter : int
        ADMM iterations at most.
    pc : str, (name, options) or None
        The preconditioner of the x-updates.
    return_info : bool
        Also return a :class:`TrendFilterInfo`.

    Returns
    -------
    x : DistVector on ``cx.simplex_layout(1)``
    info : TrendFilterInfo, if ``return_info``

    Raises
    ------
    TypeError, ValueError
        On every rank, for a bad flow or ``mu`` (as :func:`denoise_flow`),
        both weights zero, a ``rho`` that is not positive, tolerances that
        are negative.
    dmsolve.krylov.ConvergenceError
        On every rank, if ADMM has not converged in ``maxiter`` iterations
        (with ``return_info`` the result is returned instead, with
        ``info.converged`` False).

    Notes
    -----
    Collective on ``cx.comm``: per iteration one CG solve, four products
    with ``B_1``/``B_2`` and one reduction of four numbers.

    References
    ----------
    .. [1] S. Boyd, N. Parikh, E. Chu, B. Peleato and J. Eckstein,
       "Distributed optimization and statistical learning via the
       alternating direction method of multipliers", Found. Trends Mach.
       Learn. 3(1), 2011 (Sec. 6.4.1: total variation).
    .. [2] M. Yang, E. Isufi and G. Leus, "Simplicial trend filtering",
       Asilomar 2022.
    """
    check_complex(cx)
    comm = cx.comm
    with agreed(comm):
        mu_d, mu_u = _mu_pair(mu)
        if mu_d == 0 and mu_u == 0:
            raise ValueError("mu must have a positive weight (mu_d, mu_u not both 0)")
        rho = check_real("rho", rho, low=0.0, low_open=True)
        rtol = check_real("rtol", rtol, low=0.0)
        atol = check_real("atol", atol, low=0.0)
        maxiter = check_int("maxiter", maxiter, low=1)
        return_info = check_bool("return_info", return_info)
        _check_edges(cx)
    y = cx.cochain(flow, 1)
    use_u = mu_u > 0 and cx.dimension >= 2 and cx.simplex_layout(2).global_size > 0
    B1 = _boundary(cx, 1) if mu_d > 0 else None
    B2 = _boundary(cx, 2) if use_u else None
    A = _combination(cx, 1.0, rho if B1 is not None else 0.0, rho if B2 is not None else 0.0)
    M = _make_pc(pc, A)
    ops = [(B, w) for B, w in ((B1, mu_d), (B2, mu_u)) if B is not None]
    fwd = [(lambda B: (lambda v, o: B.matvec(v, o)))(B) if B is B1 else
           (lambda B: (lambda v, o: B.rmatvec(v, o)))(B) for B, _ in ops]
    adj = [(lambda B: (lambda v, o: B.rmatvec(v, o)))(B) if B is B1 else
           (lambda B: (lambda v, o: B.matvec(v, o)))(B) for B, _ in ops]
    lays = [B.row_layout if B is B1 else B.col_layout for B, _ in ops]
    z = [DistVector.zeros(lay) for lay in lays]
    u = [DistVector.zeros(lay) for lay in lays]
    Dx = [DistVector.zeros(lay) for lay in lays]
    z_old = [DistVector.zeros(lay) for lay in lays]
    m = sum(lay.global_size for lay in lays)
    n = y.global_size
    x = y.copy()
    rhs, t, dz = y.zeros_like(), y.zeros_like(), y.zeros_like()
    inner = 0
    converged = False
    r_norm = s_norm = np.inf
    it = 0
    for it in range(1, maxiter + 1):
        rhs.set(y)
        for j in range(len(ops)):
            # rhs += rho D_j^T (z_j - u_j)
            z_old[j].set(z[j]).axpy(-1.0, u[j])
            adj[j](z_old[j], t)
            rhs.axpy(rho, t)
        x, info = cg(A, rhs, x, rtol=min(1e-2 * rtol, 1e-10), M=M, maxiter=10 * n + 100)
        inner += info.iterations
        sums = np.zeros(5)
        dz.fill(0.0)
        for j, (B, w) in enumerate(ops):
            fwd[j](x, Dx[j])
            z_old[j].set(z[j])
            v = Dx[j].local + u[j].local
            np.copyto(z[j].local, np.sign(v) * np.maximum(np.abs(v) - w / rho, 0.0))
            u[j].local += Dx[j].local - z[j].local
            z_old[j].axpy(-1.0, z[j])               # z_old - z
            adj[j](z_old[j], t)
            dz.axpy(1.0, t)
            sums[0] += float(np.sum((Dx[j].local - z[j].local) ** 2))
            sums[1] += float(np.sum(Dx[j].local ** 2))
            sums[2] += float(np.sum(z[j].local ** 2))
            adj[j](u[j], t)
            sums[4] += float(np.sum(t.local ** 2))
        sums[3] = float(np.sum(dz.local ** 2))
        comm.Allreduce(MPI.IN_PLACE, sums, op=MPI.SUM)
        r_norm, s_norm = np.sqrt(sums[0]), rho * np.sqrt(sums[3])
        eps_pri = atol * np.sqrt(m) + rtol * max(np.sqrt(sums[1]), np.sqrt(sums[2]))
        eps_dual = atol * np.sqrt(n) + rtol * rho * np.sqrt(sums[4])
        if r_norm <= eps_pri and s_norm <= eps_dual:
            converged = True
            break
    tinfo = TrendFilterInfo(converged, it, float(r_norm), float(s_norm),
                            _objective(comm, x, y, Dx, [w for _, w in ops]), inner)
    if not converged and not return_info:
        raise IterationError("trend_filter_flow: ADMM did not converge in %d iterations "
                               "(primal residual %.3e, dual %.3e); raise maxiter or rtol"
                               % (maxiter, r_norm, s_norm))
    return (x, tinfo) if return_info else x


def _objective(comm, x, y, Dx, weights) -> float:
    """``1/2 ||x - y||^2 + sum_j w_j ||D_j x||_1`` over all ranks. Collective."""
    local = np.array([0.5 * float(np.sum((x.local - y.local) ** 2))
                      + sum(w * float(np.sum(np.abs(Dx[j].local))) for j, w in
                            enumerate(weights))])
    comm.Allreduce(MPI.IN_PLACE, local, op=MPI.SUM)
    return float(local[0])


# -- topology inference ---------------------------------------------------------------------
def infer_triangles(cx, flow, k: int, *, return_scores: bool = False):
    """The ``k`` candidate triangles with the largest curl energy of ``flow``.

    A candidate is a 3-clique of the complex's edges that is not a triangle
    of the complex; its score is the squared circulation of the flow around
    it, ``(f_ab + f_bc - f_ac)^2`` for vertices ``a < b < c``: the curl
    energy the triangle would explain if it were filled (Sardellitti,
    Barbarossa and Testa 2021). Filling the top ``k`` moves that energy
    from the harmonic part of the Hodge decomposition to the curl part
    (:func:`fill_triangles`).

    Scores are computed locally (each rank scores the candidates whose
    smallest vertex it owns, asking the owner of the middle vertex for the
    third edge in one BSP superstep), followed by one global top-``k``
    (each rank's best ``k``, allgathered). Ties are broken by the triangles'
    vertex ids, so the answer does not depend on the number of ranks.

    Parameters
    ----------
    cx : SimplicialComplex
    flow : DistVector or array
    k : int
        Non-negative.
    return_scores : bool
        Also return the scores.

    Returns
    -------
    triangles : (m, 3) int array, m = min(k, candidates)
        Global vertex ids, each row ascending, best first; the same on every
        rank.
    scores : (m,) float array, if ``return_scores``

    Raises
    ------
    TypeError, ValueError
        On every rank: a bad flow (as :func:`denoise_flow`), a ``k`` below 0
        or not an integer.

    Notes
    -----
    Collective on ``cx.comm``. The wedges sent are the pairs of edges
    ``(a, b), (a, c)`` with ``a`` the smallest vertex: their number is
    ``sum_a d_+(a)^2 / 2`` for the upper degrees ``d_+``.

    References
    ----------
    .. [1] S. Sardellitti, S. Barbarossa and L. Testa, "Topological signal
       processing over cell complexes", Asilomar 2021 (topology inference
       from edge signals).

    Examples
    --------
    A graph of two triangles' edges, ``0-1-2`` and ``0-2-3``, none filled,
    and a flow that circulates around the first:

    >>> import numpy as np
    >>> from mpi4py import MPI
    >>> import topology
    >>> comm = MPI.COMM_WORLD
    >>> g = topology.SimplicialComplex([np.array([[0, 1], [1, 2], [0, 2], [2, 3], [0, 3]])], comm)
    >>> print(g.simplices(1).tolist())
    [[0, 1], [0, 2], [0, 3], [1, 2], [2, 3]]
    >>> flow = np.array([1.0, -1.0, 0.1, 1.0, 0.1])      # 0 -> 1 -> 2 -> 0
    >>> triangles, scores = topology.infer_triangles(g, flow, 2, return_scores=True)
    >>> print(triangles.tolist(), scores)
    [[0, 1, 2], [0, 2, 3]] [9. 1.]
    """
    check_complex(cx)
    comm = cx.comm
    with agreed(comm):
        k = check_int("k", k, low=0)
        return_scores = check_bool("return_scores", return_scores)
        _check_edges(cx)
    f = cx.cochain(flow, 1)
    rows, _ = cx.local_simplices(1)
    own = rows[cx.owned_slice(1)]
    fl = f.local * _layout_signs(cx, own)       # the flow along lower -> higher layout id
    # wedges (a; b, c), a < b < c, from the owned edges (a, b) sorted by (a, b)
    a, b = own[:, 0], own[:, 1]
    starts = np.flatnonzero(np.concatenate(([True], a[1:] != a[:-1]))) if a.size else \
        np.zeros(0, np.int64)
    counts = np.diff(np.concatenate((starts, [a.size])))
    first, second = _pairs(starts, counts)
    wb, wc = b[first], b[second]
    # the third edge (b, c) is owned by the owner of b
    vl = cx.vertex_layout
    ctx = BSP(comm)
    tag = ctx.tags("wedges", "answers")
    dest = vl.owner(wb) if wb.size else np.zeros(0, np.int64)
    order = stable_argsort(dest)
    ctx.send_rows(dest[order], np.stack((wb, wc), 1)[order].astype(np.int64), tag=tag.wedges)
    inbox = ctx.sync("infer-triangles:wedges")
    for src, q in inbox.messages(tag.wedges):
        q = q.reshape(-1, 2)
        pos = find_rows(own, q, cx.num_vertices)
        hit = pos >= 0
        ans = np.where(hit, fl[np.where(hit, pos, 0)], np.nan)
        ctx.send(src, ans, tag=tag.answers)
    third = ctx.sync("infer-triangles:answers").concat(tag.answers, dtype=np.float64)
    closed = np.empty(wb.size, dtype=np.float64)
    closed[order] = third
    ok = ~np.isnan(closed)
    tri = np.stack((a[first], wb, wc), 1)[ok]
    circ = fl[first][ok] + closed[ok] - fl[second][ok]
    # not already a triangle of the complex (this rank holds those with an owned first vertex)
    trows, _ = cx.local_simplices(2)
    if tri.shape[0] and trows.shape[0]:
        tri_own = trows[cx.owned_slice(2)]
        known = find_rows(tri_own, tri, cx.num_vertices) >= 0
        tri, circ = tri[~known], circ[~known]
    score = circ ** 2
    glob = np.sort(_to_global(cx, tri), axis=1) if tri.shape[0] else tri.reshape(0, 3)
    best = _top(score, glob, k)
    parts = comm.allgather((score[best], glob[best]))
    s_all = np.concatenate([p[0] for p in parts])
    t_all = np.concatenate([p[1] for p in parts]).reshape(-1, 3)
    top = _top(s_all, t_all, k)
    out = t_all[top].astype(np.int64)
    return (out, s_all[top]) if return_scores else out


def fill_triangles(cx, triangles) -> SimplicialComplex:
    """A new complex: ``cx`` with the given triangles added (their edges and vertices too).

    ``triangles`` are global vertex ids, the same array on every rank (as
    :func:`infer_triangles` returns). When all their edges are edges of
    ``cx`` the edges keep their global ids, so a flow on ``cx`` is a flow on
    the result. Same partition method and points as ``cx``.

    Raises
    ------
    TypeError, ValueError
        On every rank, for triangles that are not an ``(m, 3)`` integer array
        of vertex ids of ``cx`` or that repeat a vertex.

    Notes
    -----
    Collective on ``cx.comm`` (builds a SimplicialComplex).

    Examples
    --------
    The triangle :func:`infer_triangles` finds for a flow circulating around
    ``0-1-2`` in a graph: once filled, its circulation is curl, no longer
    harmonic, and the flow is still a flow on the new complex's edges:

    >>> import numpy as np
    >>> from mpi4py import MPI
    >>> import topology
    >>> comm = MPI.COMM_WORLD
    >>> g = topology.SimplicialComplex([np.array([[0, 1], [1, 2], [0, 2], [2, 3], [0, 3]])], comm)
    >>> flow = np.array([1.0, -1.0, 0.1, 1.0, 0.1])      # on [0, 1], [0, 2], [0, 3], [1, 2], [2, 3]
    >>> filled = topology.fill_triangles(g, topology.infer_triangles(g, flow, 1))
    >>> print(filled.counts(), topology.betti_numbers(g), topology.betti_numbers(filled))
    [4, 5, 1] [1, 2] [1, 1, 0]
    >>> for cx in (g, filled):
    ...     hd = topology.hodge_decomposition(cx, flow)
    ...     print({k: round(float(e), 4) for k, e in hd.energies.items()})
    {'gradient': 0.02, 'curl': 0.0, 'harmonic': 3.0, 'total': 3.02}
    {'gradient': 0.02, 'curl': 3.0, 'harmonic': 0.0, 'total': 3.02}
    """
    check_complex(cx)
    comm = cx.comm
    with agreed(comm):
        t = np.asarray(triangles)
        if t.size == 0:
            t = np.zeros((0, 3), np.int64)
        if t.dtype.kind not in "iu":
            raise TypeError("triangles must be integer vertex ids, got dtype %s" % t.dtype)
        if t.ndim != 2 or t.shape[1] != 3:
            raise ValueError("triangles must have shape (m, 3), got %s" % (t.shape,))
        if t.size and (t.min() < 0 or t.max() >= cx.num_vertices):
            raise ValueError("triangle vertex ids must lie in [0, %d)" % cx.num_vertices)
    tops = [_to_global(cx, cx.local_simplices(0)[0][cx.owned_positions()])]
    for d in range(1, cx.dimension + 1):
        rows, _ = cx.local_simplices(d)
        tops.append(np.sort(_to_global(cx, rows[cx.owned_slice(d)]), axis=1))
    if comm.Get_rank() == 0 and t.shape[0]:
        new = np.unique(np.sort(t.astype(np.int64), axis=1), axis=0)
        if cx.dimension >= 2:
            old = tops[2]
            keys = {tuple(r) for r in old.tolist()}
            new = np.array([r for r in new.tolist() if tuple(r) not in keys],
                           dtype=np.int64).reshape(-1, 3)
            tops[2] = np.concatenate((old, new))
        else:
            tops.append(new)
    kw = {"points": cx.points} if cx.points is not None else {}
    return SimplicialComplex([x for x in tops if x.size], comm, partition=cx.partition, **kw)


# -- helpers --------------------------------------------------------------------------------
def _mu_pair(mu) -> tuple[float, float]:
    if isinstance(mu, (tuple, list)):
        if len(mu) != 2:
            raise ValueError("mu must be a number or a pair (mu_down, mu_up), got %r" % (mu,))
        return (check_real("mu[0]", mu[0], low=0.0), check_real("mu[1]", mu[1], low=0.0))
    m = check_real("mu", mu, low=0.0)
    return m, m


def _check_edges(cx) -> None:
    if cx.dimension < 1:
        raise ValueError("the complex has no edges: flows need a complex of dimension >= 1")


def _check_samples(edge_ids, values, n_edges: int):
    ids = np.asarray(edge_ids)
    vals = np.asarray(values)
    if ids.size == 0:
        ids = ids.astype(np.int64).reshape(0)
    if ids.dtype.kind not in "iu":
        raise TypeError("edge_ids must be integer global edge ids, got dtype %s" % ids.dtype)
    if vals.size and vals.dtype.kind not in "fiu":
        raise TypeError("values must be real numbers, got dtype %s" % vals.dtype)
    ids = ids.astype(np.int64).ravel()
    vals = vals.astype(np.float64).ravel()
    if ids.shape != vals.shape:
        raise ValueError("edge_ids and values must have the same length, got %d and %d"
                         % (ids.size, vals.size))
    if ids.size and (ids.min() < 0 or ids.max() >= n_edges):
        raise ValueError("edge id %d out of range [0, %d)"
                         % (ids.min() if ids.min() < 0 else ids.max(), n_edges))
    if not np.all(np.isfinite(vals)):
        raise ValueError("values must be finite (found NaN or inf)")
    return ids, vals


def _route_samples(cx, ids, vals):
    """The samples at the owners of their edges: (owned positions, values).
    Duplicates with one value are merged; two values for one edge raise on
    every rank."""
    comm = cx.comm
    lay = cx.simplex_layout(1)
    ctx = BSP(comm)
    tag = ctx.tags("table", "ids", "values", "targets", "owner_values")
    if not cx.renumbered:
        dest = lay.owner(ids) if ids.size else np.zeros(0, np.int64)
        o = stable_argsort(dest)
        ctx.send_rows(dest[o], ids[o], tag=tag.ids)
        ctx.send_rows(dest[o], vals[o], tag=tag.values)
        inbox = ctx.sync("interpolate:samples")
        pos = inbox.concat(tag.ids, dtype=np.int64) - lay.start
        val = inbox.concat(tag.values, dtype=np.float64)
    else:
        # global id -> layout index through the block owner of the global id
        blk = Layout.block(lay.global_size, comm)
        g = cx.owned_global_ids(1)
        li = np.arange(lay.start, lay.stop, dtype=np.int64)
        dg = blk.owner(g) if g.size else np.zeros(0, np.int64)
        o = stable_argsort(dg)
        ctx.send_rows(dg[o], np.stack((g[o], li[o]), 1), tag=tag.table)
        ds = blk.owner(ids) if ids.size else np.zeros(0, np.int64)
        o = stable_argsort(ds)
        ctx.send_rows(ds[o], ids[o], tag=tag.ids)
        ctx.send_rows(ds[o], vals[o], tag=tag.values)
        inbox = ctx.sync("interpolate:samples-to-block")
        table = inbox.concat(tag.table, dtype=np.int64, shape=(2,))
        where = np.empty(blk.local_size, dtype=np.int64)
        where[table[:, 0] - blk.start] = table[:, 1]
        got = inbox.concat(tag.ids, dtype=np.int64)
        v = inbox.concat(tag.values, dtype=np.float64)
        target = where[got - blk.start]
        dest = lay.owner(target) if target.size else np.zeros(0, np.int64)
        o = stable_argsort(dest)
        ctx.send_rows(dest[o], target[o], tag=tag.targets)
        ctx.send_rows(dest[o], v[o], tag=tag.owner_values)
        inbox = ctx.sync("interpolate:samples-to-owner")
        pos = inbox.concat(tag.targets, dtype=np.int64) - lay.start
        val = inbox.concat(tag.owner_values, dtype=np.float64)
    o = np.lexsort((val, pos))
    pos, val = pos[o], val[o]
    conflict = None
    if pos.size:
        same = pos[1:] == pos[:-1]
        bad = same & (val[1:] != val[:-1])
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            conflict = int(cx.owned_global_ids(1)[pos[i]])
        keep = np.concatenate(([True], ~same))
        pos, val = pos[keep], val[keep]
    flag = comm.allreduce(-1 if conflict is None else conflict, op=MPI.MAX)
    with agreed(comm):
        if flag >= 0:
            raise ValueError("edge %d is given two different values" % flag)
    return pos, val


def _combination(cx, a: float, b: float, c: float, extra=None) -> DistCSR:
    """``a I + b L_down + c L_up (+ diag(extra))`` of the edges, from the
    owned rows of the complex's Laplacian parts (no communication but the
    checks of :meth:`DistCSR.from_local_rows`)."""
    lay = cx.simplex_layout(1)
    n, nloc = lay.global_size, lay.local_size
    d = np.full(nloc, float(a)) + (extra if extra is not None else 0.0)
    own = np.arange(nloc)
    local = sp.csr_matrix((d, (own, own + lay.start)), shape=(nloc, n))
    if b or c:
        for L, w in zip(_parts(cx, 1), (b, c)):
            if w:
                local = local + w * L.local_rows()
    return DistCSR.from_local_rows(local, lay, lay)


def _make_pc(pc, A):
    return None if pc is None else preconditioners.make(pc, A)


def _layout_signs(cx, rows: np.ndarray) -> np.ndarray:
    """+1 where an edge written in layout ids (``rows[:, 0] < rows[:, 1]``)
    runs from the smaller to the larger global vertex id, else -1."""
    if not cx.renumbered or rows.shape[0] == 0:
        return np.ones(rows.shape[0])
    g = cx.layout_to_global(rows)
    return np.where(g[:, 0] < g[:, 1], 1.0, -1.0)


def _to_global(cx, rows: np.ndarray) -> np.ndarray:
    if not cx.renumbered or rows.size == 0:
        return rows.astype(np.int64)
    return cx.layout_to_global(rows).astype(np.int64)


def _pairs(starts: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All index pairs ``(i, j)``, ``i < j``, inside each group ``[start, start + count)``."""
    firsts, seconds = [], []
    for c in np.unique(counts):
        if c < 2:
            continue
        s = starts[counts == c]
        i, j = np.triu_indices(int(c), 1)
        firsts.append((s[:, None] + i[None, :]).ravel())
        seconds.append((s[:, None] + j[None, :]).ravel())
    if not firsts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(firsts), np.concatenate(seconds)


def _top(score: np.ndarray, tri: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest scores, ties by the triangles' vertex ids."""
    if score.size == 0:
        return np.zeros(0, np.int64)
    order = np.lexsort((tri[:, 2], tri[:, 1], tri[:, 0], -score))
    return order[:k]
