"""BiCGStab for nonsymmetric systems, right preconditioned."""

from __future__ import annotations

import cmath
import math

import numpy as np

from ._common import DEFAULT_DIVTOL, Context, document
from ._info import ConvergedReason

__all__ = ["bicgstab"]


@document
def bicgstab(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None,
             nullspace=None, monitor=None, raise_on_failure=False, divtol=DEFAULT_DIVTOL,
             checkpoint=None,
             reproducible=False):
    """Solve ``A x = b`` by the biconjugate gradient stabilised method.

    Right preconditioned, so the tested residual is the true one: stops when
    ``||b - A x|| <= max(rtol*||b||, atol)`` (also at the half step, when
    ``||s||`` already meets the test).

    Parameters
    ----------
    COMMON_PARAMETERS

    COMMON_SECTIONS

    Three reductions per iteration (``r0^T v``; ``t^T s``, ``t^T t`` and
    ``||s||`` fused; ``||r||`` and ``r0^T r`` fused). ``rho = 0`` or
    ``omega = 0`` stops with ``BREAKDOWN``.

    References
    ----------
    .. [1] H. A. van der Vorst, "Bi-CGSTAB: a fast and smoothly converging
       variant of Bi-CG for the solution of nonsymmetric linear systems",
       SIAM J. Sci. Stat. Comput. 13(2):631-644, 1992.
    .. [2] Y. Saad, *Iterative Methods for Sparse Linear Systems*, 2nd ed.,
       SIAM, 2003, Algorithm 7.7.
    """
    ctx = Context("bicgstab", A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, M=M,
                  reproducible=reproducible,
                  callback=callback, nullspace=nullspace, monitor=monitor, divtol=divtol,
                  norm_type="unpreconditioned", raise_on_failure=raise_on_failure,
                  project_rhs=False, checkpoint=checkpoint)
    if ctx.b2norm == 0.0:
        return ctx.zero_rhs()
    x = ctx.x
    r, rhat, p, v, s, t = (ctx.vector() for _ in range(6))
    phat = p if ctx.trivial_pc else ctx.vector()
    shat = s if ctx.trivial_pc else ctx.vector()
    ck = ctx.checkpoint
    state = None if ck is None else ck.resume(
        ctx, {"x": x, "r": r, "rhat": rhat, "p": p, "v": v})
    ctx.begin()

    it = start = 0                  # start: where the recurrence (re)starts
    alpha = omega = 1.0
    if state is not None and state.exact:
        it, reason, sc = state.iteration, None, state.scalars
        rho, rho_old, alpha, omega = sc["rho"], sc["rho_old"], sc["alpha"], sc["omega"]
    else:
        if state is not None:
            it = start = state.iteration
            ctx.norms.pop()         # re-measured below from the restored x
        ctx.residual(r, t)
        np.copyto(rhat.local, r.local)
        ctx.put(0, r.local, r.local)
        rho = ctx.scalar(ctx.reduce(1)[0])
        reason = ctx.test(it, math.sqrt(rho.real))
    while True:
        if reason is not None:
            # a claimed convergence is confirmed from x; if the true residual
            # fails, BiCGStab restarts from r = b - A x (left in r by confirm)
            reason = ctx.confirm(reason, it, r, t)
            if reason is not None:
                break
            np.copyto(rhat.local, r.local)
            ctx.put(0, r.local, r.local)
            rho = ctx.scalar(ctx.reduce(1)[0])
            start = it
            reason = ctx.retest(math.sqrt(rho.real))
            if reason is not None:
                break
        if rho == 0.0:
            reason = ConvergedReason.BREAKDOWN
            break
        if it == start:
            np.copyto(p.local, r.local)
        else:
            beta = (rho / rho_old) * (alpha / omega)
            ctx.axpy(-omega, v.local, p.local)        # p = r + beta (p - omega v)
            p.local *= beta
            p.local += r.local
        if phat is not p:
            ctx.precondition(p, phat)
        ctx.matvec(phat, v)
        ctx.put(0, rhat.local, v.local)
        rv = ctx.scalar(ctx.reduce(1)[0])
        if rv == 0.0 or not cmath.isfinite(rv):
            reason = ConvergedReason.BREAKDOWN if rv == 0.0 else ConvergedReason.NANORINF
            break
        alpha = rho / rv
        np.copyto(s.local, r.local)
        ctx.axpy(-alpha, v.local, s.local)
        if shat is not s:
            ctx.precondition(s, shat)
        ctx.matvec(shat, t)
        ctx.put(0, t.local, s.local)
        ctx.put(1, t.local, t.local)
        ctx.put(2, s.local, s.local)
        red = ctx.reduce(3)
        ts, tt, ss = ctx.scalar(red[0]), float(red[1].real), float(red[2].real)
        it += 1
        snorm = math.sqrt(ss)
        if snorm <= ctx.tolerance() or tt == 0.0:
            # the half step already solves the system (or cannot be improved)
            ctx.axpy(alpha, phat.local, x.local)
            reason = ctx.test(it, snorm)
            ctx.callback(x)
            if reason is None:
                reason = ConvergedReason.BREAKDOWN
            continue
        omega = ts / tt
        ctx.axpy(alpha, phat.local, x.local)
        ctx.axpy(omega, shat.local, x.local)
        np.copyto(r.local, s.local)
        ctx.axpy(-omega, t.local, r.local)
        ctx.put(0, r.local, r.local)
        ctx.put(1, rhat.local, r.local)
        red = ctx.reduce(2)
        rho_old, rho = rho, ctx.scalar(red[1])
        reason = ctx.test(it, math.sqrt(float(red[0].real)))
        ctx.callback(x)
        if reason is None and omega == 0.0:
            reason = ConvergedReason.BREAKDOWN
        if reason is None and ck is not None and ck.due(it):
            ck.save(ctx, it, {"x": x, "r": r, "rhat": rhat, "p": p, "v": v},
                    rho=rho, rho_old=rho_old, alpha=alpha, omega=omega)
    return ctx.finish(reason, it)
