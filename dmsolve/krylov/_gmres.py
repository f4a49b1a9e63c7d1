"""Restarted GMRES (left or right preconditioning) and the Arnoldi cycle it
shares with flexible GMRES."""

from __future__ import annotations

import math

import numpy as np
from scipy.linalg import solve_triangular

from .._vector import DistVector
from ..checkpoint import CheckpointError
from ._common import DEFAULT_DIVTOL, Context, document
from ._info import ConvergedReason

__all__ = ["gmres", "check_gmres_options"]

#: ``h[j+1, j] <= HAPPY * ||A v_j||`` means the Krylov space is invariant.
HAPPY = 1e-14

_ORTHOG = ("cgs2", "cgs", "mgs")


@document
def gmres(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None,
          nullspace=None, monitor=None, raise_on_failure=False, divtol=DEFAULT_DIVTOL,
          restart=30, side="left", orthog="cgs", checkpoint=None,
          reproducible=False):
    """Solve ``A x = b`` by restarted GMRES(``restart``).

    Stops when ``||r|| <= max(rtol*||b||, atol)``, where with ``side="left"``
    (PETSc's default) ``r = M (b - A x)`` and ``||b||`` means ``||M b||``,
    and with ``side="right"`` ``r = b - A x``. Without ``M`` both are the
    unpreconditioned residual. The norms are the Arnoldi estimates
    ``|g_{j+1}|``; at each restart the true residual is recomputed, and a
    convergence the estimate claims is confirmed from ``x`` (see Notes).

    Parameters
    ----------
    COMMON_PARAMETERS
    restart : int, optional
        Krylov vectors per cycle (default 30, as PETSc).
    side : {"left", "right"}, optional
        Preconditioning side.
    orthog : {"cgs", "cgs2", "mgs"}, optional
        ``"cgs"`` (default, as PETSc): classical Gram-Schmidt, one fused
        reduction for the projections and one for the norm. ``"cgs2"``:
        classical Gram-Schmidt reorthogonalised when the
        Daniel-Gragg-Kaufman-Stewart test asks for it (the vector lost more
        than ``1 - 1/sqrt(2)`` of its norm), one reduction per iteration, two
        when reorthogonalising; robust for hard problems, but on
        diagonally dominant matrices it reorthogonalises nearly always, which
        doubles the memory traffic of the orthogonalisation. ``"mgs"``:
        modified Gram-Schmidt (``j + 2`` reductions at inner iteration
        ``j``).

    COMMON_SECTIONS

    The ``callback`` receives the current iterate, which GMRES does not
    otherwise form: with a callback every iteration solves the small
    least-squares problem and updates a copy of ``x`` (and, for right
    preconditioning, applies ``M`` once more). Use ``monitor`` to watch the
    norms cheaply. When the Krylov space becomes invariant (happy breakdown)
    without meeting the tolerance, the solve stops with ``BREAKDOWN``. With
    ``nullspace`` the null space is removed from each preconditioned vector
    (for the right-hand side of a nonsymmetric ``A``, remove the null space
    of ``A^T`` yourself). With left preconditioning the true residual norm
    ``||b - A x||`` travels in the reduction of ``||M (b - A x)||`` at each
    restart, so a convergence met there is confirmed for free. A checkpoint
    is written every ``checkpoint_every`` iterations: at a restart boundary it
    holds ``x``; inside a cycle it holds the current iterate ``x + V y`` (one
    small triangular solve; with right preconditioning one more application
    of ``M``) as ``x``, and the cycle's state (its start, the basis
    ``V`` (and ``Z``), the rotated Hessenberg matrix and the rotations) so that
    a resumed solve on the same layout continues the cycle exactly; elsewhere,
    or with another ``restart``, it restarts from the saved iterate.

    References
    ----------
    .. [1] Y. Saad and M. H. Schultz, "GMRES: a generalized minimal residual
       algorithm for solving nonsymmetric linear systems", SIAM J. Sci.
       Stat. Comput. 7(3), 1986.
    .. [2] Y. Saad, *Iterative Methods for Sparse Linear Systems*, 2nd ed.,
       SIAM, 2003, Algorithms 6.9 and 9.4-9.5.
    .. [3] J. W. Daniel, W. B. Gragg, L. Kaufman and G. W. Stewart,
       "Reorthogonalization and stable algorithms for updating the
       Gram-Schmidt QR factorization", Math. Comp. 30(136), 1976.
    """
    left = side == "left" and M is not None and not (isinstance(M, str) and M == "none")
    ctx = Context("gmres", A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, M=M,
                  reproducible=reproducible,
                  callback=callback, nullspace=nullspace, monitor=monitor, divtol=divtol,
                  norm_type="preconditioned" if left else "unpreconditioned",
                  raise_on_failure=raise_on_failure, project_rhs=False,
                  checkpoint=checkpoint,
                  check=lambda: check_gmres_options(restart, orthog, side))
    return arnoldi_solve(ctx, restart, orthog, left=left, flexible=False)


def check_gmres_options(restart, orthog, side: str = "right") -> None:
    """Check the options of :func:`gmres` and :func:`fgmres` (rank-independent).

    Shared with ``solve(..., backend="petsc")``. Not collective.

    Raises
    ------
    ValueError
        ``restart`` is not a positive integer, ``orthog`` not one of
        ``"cgs"``, ``"cgs2"``, ``"mgs"``, or ``side`` not ``"left"`` or
        ``"right"``.
    """
    if side not in ("left", "right"):
        raise ValueError("side must be 'left' or 'right', got %r" % (side,))
    if isinstance(restart, (bool, np.bool_)) or not isinstance(restart, (int, np.integer)) \
            or restart < 1:
        raise ValueError("restart must be a positive integer, got %r" % (restart,))
    if orthog not in _ORTHOG:
        raise ValueError("orthog must be one of %s, got %r" % (", ".join(_ORTHOG), orthog))


def arnoldi_solve(ctx: Context, restart: int, orthog: str, left: bool, flexible: bool):
    """Run restarted (F)GMRES cycles on a set-up :class:`Context`. Collective."""
    if ctx.b2norm == 0.0:
        return ctx.zero_rhs()
    m = int(min(restart, max(ctx.maxiter, 1)))
    lay, nloc = ctx.layout, ctx.layout.local_size
    ctx.reserve(m + 2)
    dot, dt = ctx.dot, ctx.dtype
    cplx = ctx.complex
    V = np.zeros((m + 1, nloc), dtype=dt)
    Vv = [DistVector(lay, V[i]) for i in range(m + 1)]
    if flexible:
        Z = np.zeros((m, nloc), dtype=dt)
        Zv = [DistVector(lay, Z[i]) for i in range(m)]
    H = np.zeros((m + 1, m), dtype=dt)
    g = np.zeros(m + 1, dtype=dt)
    cs = np.zeros(m)                # the rotations' cosines are real
    sn = np.zeros(m, dtype=dt)
    hcol = np.zeros(m + 1, dtype=dt)
    htmp = np.zeros(m + 1, dtype=dt)
    x, b = ctx.x, ctx.b
    t = ctx.vector()
    t2 = ctx.vector()
    precond_right = not left and not ctx.trivial_pc and not flexible
    xk = ctx.vector() if ctx.has_callback else None
    ck = ctx.checkpoint
    state = None
    if ck is not None:
        # xs: the current iterate of a mid-cycle checkpoint (and what a resume
        # reads as "x"); a mid-cycle checkpoint also holds the cycle's state
        xs = ctx.vector()
        names = _cycle_vectors(m, flexible)
        vecs = dict(zip(names, [x] + Vv + (Zv if flexible else [])))
        state = ck.resume(ctx, {"x": xs, **vecs}, optional=names)

    def update(target: DistVector, k: int) -> None:
        # target += (Z or M V)[:, :k] y with H[:k, :k] y = g[:k]
        if k == 0:
            return
        y = solve_triangular(H[:k, :k], g[:k], check_finite=False)
        if flexible:
            ctx.gemv_sub(Z[:k], y, target.local, alpha=1.0)
        elif precond_right:
            t2.fill(0.0)
            ctx.gemv_sub(V[:k], y, t2.local, alpha=1.0)
            ctx.precondition(t2, t)
            ctx.axpy(1.0, t.local, target.local)
        else:
            ctx.gemv_sub(V[:k], y, target.local, alpha=1.0)

    def orthogonalise(j: int, w: np.ndarray) -> tuple[float, float]:
        # H[:j+1, j] into hcol; returns (||w|| after, ||w|| before)
        k = j + 1
        if orthog == "mgs":
            for i in range(k):
                ctx.put(0, V[i], w)
                if i == 0:
                    ctx.put(1, w, w)
                red = ctx.reduce(2 if i == 0 else 1)
                hcol[i] = red[0]
                if i == 0:
                    wn0 = math.sqrt(red[1].real)
                ctx.axpy(-hcol[i], V[i], w)
            ctx.put(0, w, w)
            return math.sqrt(ctx.reduce(1)[0].real), wn0
        ctx.put_rows(0, V[:k], w)
        ctx.put(k, w, w)
        red = ctx.reduce(k + 1)
        hcol[:k] = red[:k]
        wn0 = math.sqrt(red[k].real)
        ctx.gemv_sub(V[:k], hcol[:k], w)
        if orthog == "cgs":
            ctx.put(0, w, w)
            return math.sqrt(ctx.reduce(1)[0].real), wn0
        # Daniel-Gragg-Kaufman-Stewart test: the new norm follows from
        # Pythagoras unless w lost more than 1/sqrt(2) of its length to the
        # basis, in which case it is orthogonalised again
        nsq = red[k].real - float(dot(hcol[:k], hcol[:k]).real)
        if nsq > 0.5 * red[k].real:
            return math.sqrt(nsq), wn0
        ctx.put_rows(0, V[:k], w)
        ctx.put(k, w, w)
        red = ctx.reduce(k + 1)
        htmp[:k] = red[:k]
        wwp = red[k].real
        ctx.gemv_sub(V[:k], htmp[:k], w)
        hcol[:k] += htmp[:k]
        nsq = wwp - float(dot(htmp[:k], htmp[:k]).real)
        if nsq > 1e-2 * wwp:
            return math.sqrt(nsq), wn0
        # heavy cancellation (near breakdown): measure instead of deducing
        ctx.put(0, w, w)
        return math.sqrt(ctx.reduce(1)[0].real), wn0

    ctx.begin()
    it = 0 if state is None else state.iteration
    reason = None
    first = state is None           # a resumed solve continues at a restart
    j0 = 0                          # the inner step a cycle starts at
    have_t = False                  # t already holds b - A x (after confirm)
    if state is not None:
        j0 = _resume_cycle(ck, state, m, flexible, H, g, cs, sn)
        if j0 == 0:
            np.copyto(x.local, xs.local)    # the iterate (at a restart boundary)
    while True:
        if j0 == 0:
            # (preconditioned) residual into V[0]
            v0 = Vv[0]
            if have_t:
                pass
            elif first and ctx.x0_is_zero:
                np.copyto(t.local, b.local)
            else:
                ctx.matvec(x, t)
                np.subtract(b.local, t.local, out=t.local)
            have_t = False
            if left:
                ctx.precondition(t, v0)
            else:
                np.copyto(v0.local, t.local)
            ctx.put(0, v0.local, v0.local)
            if left:
                # ||b - A x|| rides along: the truth of a convergence met here
                ctx.put(1, t.local, t.local)
            red = ctx.reduce(2 if left else 1)
            beta = math.sqrt(red[0].real)
            tnorm = math.sqrt(red[1].real) if left else beta
            if first:
                if ctx.x0_is_zero and ctx.bnorm is None:
                    ctx.bnorm = beta
                ctx.reference_norm(t2)
                reason = ctx.test(0, beta)
                first = False
            else:
                if ctx.bnorm is None:       # resumed with another M: ||M b|| anew
                    ctx.reference_norm(t2)
                # report the true residual of the restart instead of the estimate
                ctx.norms[-1] = beta
                if not math.isfinite(beta):
                    reason = ConvergedReason.NANORINF
                elif beta <= ctx.tolerance():
                    reason = ctx.converged_reason()
            # the residual was just computed from x: a restart could not help
            reason = ctx.confirm(reason, it, t, None, tnorm=tnorm, can_restart=False)
            if reason is not None:
                break
            v0.local *= 1.0 / beta
            g.fill(0.0)
            g[0] = beta
        k = j0
        for j in range(j0, m):
            vj, wv = Vv[j], Vv[j + 1]
            if flexible:
                ctx.precondition(vj, Zv[j])
                ctx.matvec(Zv[j], wv)
            elif left:
                ctx.matvec(vj, t)
                ctx.precondition(t, wv)
            elif precond_right:
                ctx.precondition(vj, t)
                ctx.matvec(t, wv)
            else:
                ctx.matvec(vj, wv)
            hnext, wn0 = orthogonalise(j, wv.local)
            happy = not hnext > HAPPY * wn0
            if not happy:
                wv.local *= 1.0 / hnext
            # apply the previous Givens rotations to column j, then a new one
            for i in range(j):
                hi, hi1 = hcol[i], hcol[i + 1]
                hcol[i] = cs[i] * hi + sn[i] * hi1
                hcol[i + 1] = -(sn[i].conjugate() if cplx else sn[i]) * hi + cs[i] * hi1
            hjj = hcol[j]
            rr = math.hypot(abs(hjj), hnext)
            if rr == 0.0 or not math.isfinite(rr):
                reason = ConvergedReason.BREAKDOWN if rr == 0.0 else ConvergedReason.NANORINF
                break
            if not cplx:
                cs[j], sn[j] = hjj / rr, hnext / rr
                hcol[j] = rr
            elif hjj == 0:
                cs[j], sn[j] = 0.0, 1.0
                hcol[j] = hnext
            else:
                # the complex rotation [[c, s], [-conj(s), c]] with c real:
                # c = |h|/rr, s = (h/|h|) hnext/rr maps (h, hnext) to ((h/|h|) rr, 0)
                phase = hjj / abs(hjj)
                cs[j], sn[j] = abs(hjj) / rr, phase * (hnext / rr)
                hcol[j] = phase * rr
            H[:j + 1, j] = hcol[:j + 1]
            H[j + 1, j] = 0.0
            g[j + 1] = -(sn[j].conjugate() if cplx else sn[j]) * g[j]
            g[j] = cs[j] * g[j]
            k = j + 1
            it += 1
            reason = ctx.test(it, abs(g[j + 1]))
            if xk is not None:
                np.copyto(xk.local, x.local)
                update(xk, k)
                ctx.callback(xk)
            if reason is None and happy:
                reason = ConvergedReason.BREAKDOWN
            if reason is not None:
                break
            if k < m and ck is not None and ck.due(it):
                # mid-cycle: the current iterate x + V y (a small triangular
                # solve), with the cycle's state for an exact continuation
                np.copyto(xs.local, x.local)
                update(xs, k)
                _save_cycle(ctx, ck, it, k, xs, x, Vv, Zv if flexible else None, H, g, cs, sn)
        j0 = 0
        update(x, k)
        if reason is not None:
            # the Arnoldi estimate claimed convergence: confirm it from x; if the
            # true residual fails, the next cycle starts from t = b - A x
            reason = ctx.confirm(reason, it, t, t2)
            if reason is not None:
                break
            have_t = True
            continue
        if ck is not None and ck.due(it):
            ck.save(ctx, it, {"x": x})    # at a restart boundary x is the state
    return ctx.finish(reason, it)


def _cycle_vectors(m: int, flexible: bool) -> list[str]:
    """The names of a mid-cycle checkpoint's optional vectors. Not collective."""
    return ["x_cycle"] + ["v%d" % i for i in range(m + 1)] + (
        ["z%d" % i for i in range(m)] if flexible else [])


def _save_cycle(ctx, ck, it, k, xs, x, Vv, Zv, H, g, cs, sn) -> None:
    """Write a mid-cycle checkpoint after inner step ``k``: ``x`` is the
    current iterate ``xs``, ``x_cycle`` the cycle's start, ``v0 .. vk`` (and
    ``z0 .. z{k-1}``) the basis, the rotated ``R``, ``g``, ``cs``, ``sn`` its
    scalars. Collective."""
    vecs = {"x": xs, "x_cycle": x}
    vecs.update(("v%d" % i, Vv[i]) for i in range(k + 1))
    if Zv is not None:
        vecs.update(("z%d" % i, Zv[i]) for i in range(k))
    iu = np.triu_indices(k)
    ck.save(ctx, it, vecs, inner=k, R=H[:k, :k][iu].tolist(), g=g[:k + 1].tolist(),
            cs=cs[:k].tolist(), sn=sn[:k].tolist())


def _resume_cycle(ck, state, m, flexible, H, g, cs, sn) -> int:
    """Restore a mid-cycle state into ``H, g, cs, sn`` (the vectors are
    restored by the checkpointer); return the inner step to continue at, 0
    for a restart from ``x`` (a restart boundary, a restarted resume, or a
    cycle longer than this solve's ``restart``). Not collective (the manifest
    is the same on every rank)."""
    sc = state.scalars
    k = int(sc.get("inner", 0))
    if not state.exact or k == 0 or k >= m:
        return 0
    try:
        R = np.asarray(sc["R"], dtype=float)
        gg = np.asarray(sc["g"], dtype=float)
        c = np.asarray(sc["cs"], dtype=float)
        sv = np.asarray(sc["sn"], dtype=float)
        iu = np.triu_indices(k)
        if R.shape != (iu[0].size,) or gg.shape != (k + 1,) or c.shape != (k,) \
                or sv.shape != (k,):
            raise ValueError
    except (KeyError, TypeError, ValueError):
        raise CheckpointError("cannot resume from %r: its GMRES cycle state is malformed"
                              % (ck.resume_path,)) from None
    H[:k, :k][iu] = R
    g[:k + 1] = gg
    cs[:k] = c
    sn[:k] = sv
    return k
