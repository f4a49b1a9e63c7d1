"""MINRES for symmetric (possibly indefinite or singular) systems."""

from __future__ import annotations

import math

import numpy as np

from ..validate import check_real
from ._common import DEFAULT_DIVTOL, Context, document
from ._info import ConvergedReason

__all__ = ["minres"]

_EPS = np.finfo(float).eps


@document
def minres(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None,
           nullspace=None, monitor=None, raise_on_failure=False, divtol=DEFAULT_DIVTOL,
           shift=0.0, checkpoint=None, check=False,
           reproducible=False):
    """Solve ``(A - shift I) x = b`` by MINRES, for symmetric (Hermitian) ``A``.

    ``A`` may be indefinite, and singular if the system is consistent; ``M``
    must be symmetric (Hermitian) positive definite; ``shift`` is real. Stops when
    ``||r|| <= max(rtol*||b||, atol)``, where without ``M`` the norm is the
    2-norm of ``r = b - A x`` and with ``M`` the natural norm
    ``sqrt(r^T M r)`` (and ``||b||`` likewise), the quantity MINRES
    minimises; the norms are the recurrence's estimates ``phibar``.

    Parameters
    ----------
    COMMON_PARAMETERS
    shift : float, optional
        Solve with ``A - shift I`` instead of ``A``.
    check : bool, optional
        Test at set-up that ``A`` (and ``M``) is symmetric, as scipy's
        ``minres(check=True)``: ``y^T A x`` against ``x^T A y`` for two fixed
        vectors of the global index (the same verdict at any rank count),
        within ``SYMMETRY_RTOL``; a nonsymmetric ``A`` or ``M`` raises
        ValueError on every rank. Costs two products, two preconditioner
        applications and one reduction. Off by default: MINRES on a
        nonsymmetric matrix does not converge (it runs to ``maxiter``) or
        converges to a wrong answer, which the true-residual check at the
        end then reports as ``FALSE_CONVERGENCE``.

    COMMON_SECTIONS

    Two reductions per iteration (``v^T A v`` and the next Lanczos
    ``beta``). A negative ``r^T M r`` stops with ``INDEFINITE_PC``. A
    Lanczos breakdown (``beta = 0``) with a singular projected matrix, so
    that the residual cannot be reduced (``b`` in the null space of ``A``,
    or with a part in it), stops with ``BREAKDOWN``, not ``RTOL``. A
    preconditioner whose ``symmetric`` attribute is False is refused with
    ValueError. With
    ``nullspace`` the null-space part of ``b`` is removed first (``A`` is
    symmetric) and the iterates stay orthogonal to the null space, giving the
    minimum-norm solution when ``x0`` is None. A checkpoint holds ``x`` and
    the Lanczos state ``r1, r2, y, w, w2`` with its scalars.

    References
    ----------
    .. [1] C. C. Paige and M. A. Saunders, "Solution of sparse indefinite
       systems of linear equations", SIAM J. Numer. Anal. 12(4):617-629, 1975.
    .. [2] Y. Saad, *Iterative Methods for Sparse Linear Systems*, 2nd ed.,
       SIAM, 2003.
    """
    ctx = Context("minres", A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, M=M,
                  reproducible=reproducible,
                  callback=callback, nullspace=nullspace, monitor=monitor, divtol=divtol,
                  norm_type="natural" if M is not None else "unpreconditioned",
                  raise_on_failure=raise_on_failure, project_rhs=True,
                  checkpoint=checkpoint, check=lambda: check_real("shift", shift),
                  symmetric=True, check_symmetry=check)
    if ctx.b2norm == 0.0:
        return ctx.zero_rhs()
    shift = ctx.shift = float(shift)
    x = ctx.x
    r1, r2, y, v, w, w1, w2 = (ctx.vector() for _ in range(7))
    ck = ctx.checkpoint
    state = None if ck is None else ck.resume(
        ctx, {"x": x, "r1": r1, "r2": r2, "y": y, "w": w, "w2": w2}, shift=shift)
    ctx.begin()
    if state is not None and state.exact:
        it = start = state.iteration
        sc = state.scalars
        oldb, beta, dbar, epsln, phibar, cs, sn = (sc[k] for k in _SCALARS)
        return _iterate(ctx, shift, x, r1, r2, y, v, w, w1, w2, oldb, beta, dbar,
                        epsln, phibar, cs, sn, it, start - 1, None)
    it = start = 0 if state is None else state.iteration
    if state is not None:
        ctx.norms.pop()             # re-measured below from the restored x

    ctx.residual(r1, y, shift)
    ctx.precondition(r1, y)
    ctx.put(0, r1.local, y.local)
    beta1 = float(ctx.reduce(1)[0].real)
    if beta1 < 0:
        ctx.norms.append(math.sqrt(-beta1))
        return ctx.finish(ConvergedReason.INDEFINITE_PC, it)
    beta1 = math.sqrt(beta1)
    if ctx.x0_is_zero and ctx.bnorm is None:
        ctx.bnorm = beta1
    ctx.reference_norm(v)
    reason = ctx.test(it, beta1)

    np.copyto(r2.local, r1.local)
    return _iterate(ctx, shift, x, r1, r2, y, v, w, w1, w2, 0.0, beta1, 0.0, 0.0, beta1,
                    -1.0, 0.0, it, start, reason)


_SCALARS = ("oldb", "beta", "dbar", "epsln", "phibar", "cs", "sn")


def _iterate(ctx, shift, x, r1, r2, y, v, w, w1, w2, oldb, beta, dbar, epsln, phibar,
             cs, sn, it, start, reason):
    # the MINRES loop from iteration ``it``; the Lanczos recurrence uses r1
    # from iteration ``start + 1`` on
    ck = ctx.checkpoint
    while True:
        if reason is not None:
            # a claimed convergence is confirmed from x; if the true residual
            # fails, MINRES restarts from r1 = b - (A - shift I) x
            reason = ctx.confirm(reason, it, r1, y)
            if reason is not None:
                break
            ctx.precondition(r1, y)
            ctx.put(0, r1.local, y.local)
            beta1 = float(ctx.reduce(1)[0].real)
            if beta1 < 0:
                reason = ConvergedReason.INDEFINITE_PC
                break
            beta1 = math.sqrt(beta1)
            reason = ctx.retest(beta1)
            if reason is not None:
                break
            np.copyto(r2.local, r1.local)
            oldb, beta, dbar, epsln, phibar, cs, sn = 0.0, beta1, 0.0, 0.0, beta1, -1.0, 0.0
            start = it
        # Lanczos step: v = y / beta, y = A v - alfa r2/beta - beta r1/oldb
        np.multiply(y.local, 1.0 / beta, out=v.local)
        ctx.matvec(v, y)
        if shift:
            ctx.axpy(-shift, v.local, y.local)
        if it > start:
            ctx.axpy(-beta / oldb, r1.local, y.local)
        ctx.put(0, v.local, y.local)
        alfa = float(ctx.reduce(1)[0].real)     # real for a Hermitian A
        ctx.axpy(-alfa / beta, r2.local, y.local)
        r1, r2, y = r2, y, r1            # r1 <- r2, r2 <- y, y is free
        ctx.precondition(r2, y)
        oldb = beta
        ctx.put(0, r2.local, y.local)
        bsq = float(ctx.reduce(1)[0].real)
        it += 1
        if bsq < 0:
            ctx.norms.append(phibar)
            ctx.callback(x)
            reason = ConvergedReason.INDEFINITE_PC
            break
        beta = math.sqrt(bsq)
        # apply the previous rotation, then a new one to annihilate beta
        oldeps = epsln
        delta = cs * dbar + sn * alfa
        gbar = sn * dbar - cs * alfa
        epsln = sn * beta
        dbar = -cs * beta
        rho = math.hypot(gbar, beta)
        if rho == 0.0:
            # beta = 0 (the Krylov space is invariant) and the projected
            # tridiagonal matrix is singular: the residual phibar cannot be
            # reduced further (b has a part in the null space of A, e.g. b
            # in it). Unless phibar already meets the test, a breakdown, not a
            # happy one; x stays as it is
            reason = ctx.test(it, abs(phibar))
            ctx.callback(x)
            if reason is None or not reason.converged:
                reason = ConvergedReason.BREAKDOWN
            continue
        gamma = max(rho, _EPS)
        cs, sn = gbar / gamma, beta / gamma
        phi = cs * phibar
        phibar = sn * phibar
        # w = (v - oldeps w1 - delta w2) / gamma with (w1, w2) <- (w2, w)
        w1, w2, w = w2, w, w1
        np.copyto(w.local, v.local)
        ctx.axpy(-oldeps, w1.local, w.local)
        ctx.axpy(-delta, w2.local, w.local)
        w.local *= 1.0 / gamma
        ctx.axpy(phi, w.local, x.local)
        reason = ctx.test(it, abs(phibar))
        ctx.callback(x)
        if reason is None and beta == 0.0:
            reason = ConvergedReason.BREAKDOWN
        if reason is None and ck is not None and ck.due(it):
            ck.save(ctx, it, {"x": x, "r1": r1, "r2": r2, "y": y, "w": w, "w2": w2},
                    **dict(zip(_SCALARS, (oldb, beta, dbar, epsln, phibar, cs, sn))))
    return ctx.finish(reason, it)
