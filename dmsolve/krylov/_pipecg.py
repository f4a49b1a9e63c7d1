"""Pipelined conjugate gradients: one non-blocking reduction per iteration,
overlapped with the preconditioner and the matrix-vector product."""

from __future__ import annotations

import math

import numpy as np

from ._common import DEFAULT_DIVTOL, Context, document
from ._info import ConvergedReason

__all__ = ["pipecg"]


@document
def pipecg(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None,
           nullspace=None, monitor=None, raise_on_failure=False, divtol=DEFAULT_DIVTOL,
           norm_type="unpreconditioned", checkpoint=None, check=False,
           reproducible=False):
    """Solve ``A x = b`` by pipelined preconditioned conjugate gradients.

    Mathematically CG (``A`` symmetric positive (semi-)definite, ``M``
    symmetric positive definite; Hermitian for a complex system), rearranged so that each iteration's three
    inner products ``(r, u)``, ``(w, u)`` and the residual norm travel in
    one ``Iallreduce`` that runs while the preconditioner and the
    matrix-vector product of the same iteration are computed. Stops when
    ``||r|| <= max(rtol*||b||, atol)``.

    Parameters
    ----------
    COMMON_PARAMETERS
    norm_type : {"unpreconditioned", "preconditioned", "natural"}, optional
        As in :func:`cg`: ``||r||``, ``||M r||`` or ``sqrt(r^T M r)``.
    check : bool, optional
        As in :func:`cg`: test at set-up that ``A`` and ``M`` are symmetric.

    COMMON_SECTIONS

    Exactly one global reduction per iteration without ``nullspace`` (each
    null-space removal adds one blocking reduction). The residual is
    updated by recurrences, so at tight tolerances the true residual can lag
    the monitored one more than in :func:`cg` (the confirmation from ``x``
    at a claimed convergence then restarts the recurrences), and iteration
    counts may differ from CG's by one or two, more near the attainable
    accuracy (measured: 256 against CG's 248 on poisson2d n=64 at rtol
    1e-12; 330-355 against 281 on anisotropic2d n=40). When the
    recurrence's ``p^T A p`` turns non-positive, ``p^T A p`` is measured
    directly (one product, one reduction): a non-positive value stops with
    ``INDEFINITE_MAT``; a positive one means the recurrences lost accuracy
    on an SPD problem, and the residual is replaced: the recurrences restart
    from ``r = b - A x`` (two products and one preconditioner application;
    ``info.extra["residual_replacements"]`` counts them). The test of
    iteration ``k`` is made with the norm that arrives with its reduction,
    so the last preconditioner application and product are wasted (as in
    PETSc's ``KSPPIPECG``). The eight vector updates of an iteration and the
    next iteration's three inner products are one pass over the vectors
    (:func:`._fused_kernels.pipecg_update`), not eleven.

    References
    ----------
    .. [1] P. Ghysels and W. Vanroose, "Hiding global synchronization latency
       in the preconditioned conjugate gradient algorithm", Parallel
       Computing 40(7):224-238, 2014, Algorithm 3 (preconditioned).
    .. [2] Y. Saad, *Iterative Methods for Sparse Linear Systems*, 2nd ed.,
       SIAM, 2003.
    .. [3] S. Cools, E. F. Yetkin, E. Agullo, L. Giraud and W. Vanroose,
       "Analyzing the effect of local rounding error propagation on the
       maximal attainable accuracy of the pipelined conjugate gradient
       method", SIAM J. Matrix Anal. Appl. 39(1):426-450, 2018 (residual
       replacement).
    """
    ctx = Context("pipecg", A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, M=M,
                  reproducible=reproducible,
                  callback=callback, nullspace=nullspace, monitor=monitor, divtol=divtol,
                  norm_type=norm_type, raise_on_failure=raise_on_failure,
                  project_rhs=True, checkpoint=checkpoint, symmetric=True,
                  check_symmetry=check)
    if ctx.b2norm == 0.0:
        return ctx.zero_rhs()
    from ._fused_kernels import pipecg_dots, pipecg_update     # numba: on the first solve
    x = ctx.x
    r, u, w, m, n = (ctx.vector() for _ in range(5))
    z, q, s, p = (ctx.vector() for _ in range(4))
    # the reduction in flight has its own buffers, so nothing touches them
    send = ctx.buffer(4)
    recv = ctx.buffer(4)
    # the norm's inner product: (r, r), (u, u) or (r, u); the update pass
    # leaves the next iteration's inner products in send
    norm_code = ("unpreconditioned", "preconditioned", "natural").index(ctx.norm_type)
    ck = ctx.checkpoint
    state = None if ck is None else ck.resume(
        ctx, {"x": x, "r": r, "u": u, "w": w, "z": z, "q": q, "s": s, "p": p})
    ctx.begin()

    it = start = 0                  # start: where the recurrence (re)starts
    gamma_old = alpha_old = 1.0
    # the norm of the next reduction is that of a residual recomputed from x
    # (a restart at an iteration already recorded): retested, not recorded
    fresh = False
    replacements = 0
    have_dots = False
    if state is not None and state.exact:
        it = state.iteration
        gamma_old, alpha_old = state.scalars["gamma"], state.scalars["alpha"]
    else:
        if state is not None:
            it = start = state.iteration
        ctx.residual(r, n)
        ctx.precondition(r, u)
        ctx.matvec(u, w)
        if not ctx.x0_is_zero:
            ctx.reference_norm(m)

    while True:
        if ctx.repro:
            # exact parts of (r, u), (w, u) and the norm's: the fused pass's
            # lane sums are not partition-independent
            ctx.put(0, r.local, u.local, send)
            ctx.put(1, w.local, u.local, send)
            a, c = ((r, r), (u, u), (r, u))[norm_code]
            ctx.put(2, a.local, c.local, send)
        elif not have_dots:
            # summed as the fused pass sums them: a resumed run is the same run
            pipecg_dots(norm_code, w.local, u.local, r.local, send)
        have_dots = False
        req = ctx.ireduce(3, send, recv)
        if it < ctx.maxiter:
            ctx.precondition(w, m)      # m = M w and n = A m, overlapped
            ctx.matvec(m, n)
        ctx.wait(req, 3, recv)
        # real for a Hermitian A and M
        gamma, delta, nsq = float(recv[0].real), float(recv[1].real), float(recv[2].real)
        if it == 0 and ctx.bnorm is None:
            ctx.bnorm = math.sqrt(abs(nsq))
        # as in cg: the sign of a rounding-level (r, u) is noise, not indefiniteness
        if gamma < 0 and not (ctx.bnorm is not None
                              and math.sqrt(abs(nsq)) <= ctx.tolerance()):
            reason = ConvergedReason.INDEFINITE_PC
            if not fresh:
                ctx.norms.append(math.sqrt(abs(nsq)))
        elif fresh:
            reason = ctx.retest(math.sqrt(abs(nsq)))
        else:
            reason = ctx.test(it, math.sqrt(abs(nsq)))
        if it > 0 and not fresh:
            ctx.callback(x)
        fresh = False
        if reason is not None:
            # a claimed convergence is confirmed from x; if the true residual
            # fails, the recurrence restarts from r = b - A x (left in r)
            reason = ctx.confirm(reason, it, r, n)
            if reason is not None:
                break
            _restart(ctx, r, u, w)
            start, fresh = it, True
            continue
        if it > start:
            beta = gamma / gamma_old
            pap = delta - beta * gamma / alpha_old    # = p^T A p
        else:
            beta = 0.0
            pap = delta
        if not pap > 0:
            if not pap <= 0:
                reason = ConvergedReason.NANORINF
                break
            if it == start:
                # delta = u^T A u of a u computed from x: A is not positive definite
                reason = ConvergedReason.INDEFINITE_MAT
                break
            # The recurrence's p^T A p: on an SPD problem a non-positive value
            # is the pipelined recurrences losing accuracy (their rounding errors
            # are amplified, Cools et al. 2018). Measure p^T A p directly; only a
            # non-positive measured value proves A indefinite. Otherwise replace
            # the residual: restart the recurrences from r = b - A x (m and n
            # are recomputed by the next pass, so they serve as work vectors).
            np.copyto(m.local, u.local)
            ctx.axpy(beta, p.local, m.local)
            ctx.matvec(m, n)
            ctx.put(0, m.local, n.local)
            ctx.put(1, m.local, m.local)
            red = ctx.reduce(2).real
            if not red[0] > 0:
                reason = (ConvergedReason.INDEFINITE_MAT if red[1] > 0 and red[0] <= 0
                          else ConvergedReason.BREAKDOWN if red[0] == 0
                          else ConvergedReason.NANORINF)
                break
            replacements += 1
            ctx.matvec(x, n)
            np.subtract(ctx.b.local, n.local, out=r.local)
            _restart(ctx, r, u, w)
            start, fresh = it, True
            continue
        if gamma == 0:
            reason = ConvergedReason.BREAKDOWN
            break
        alpha = gamma / pap
        # z = n + beta z, q = m + beta q, s = w + beta s, p = u + beta p;
        # x += alpha p, r -= alpha s, u -= alpha q, w -= alpha z; and the
        # next reduction's (r, u), (u, w) and the norm's, all in one pass
        pipecg_update(alpha, beta, norm_code, n.local, m.local, w.local, u.local, z.local,
                      q.local, s.local, p.local, x.local, r.local, send)
        have_dots = True
        gamma_old, alpha_old = gamma, alpha
        it += 1
        if ck is not None and ck.due(it):
            ck.save(ctx, it, {"x": x, "r": r, "u": u, "w": w, "z": z, "q": q, "s": s,
                              "p": p}, gamma=gamma_old, alpha=alpha_old)
    return ctx.finish(reason, it, residual_replacements=replacements)


def _restart(ctx, r, u, w) -> None:
    """``u = M r``, ``w = A u`` for a residual ``r`` recomputed from ``x``: the
    recurrences start again there. Collective."""
    ctx.precondition(r, u)
    ctx.matvec(u, w)
